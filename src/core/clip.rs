//! Cutting a client-supplied value to a bound before it is echoed (a log line, an error
//! message), with the cut marked: a 1 MB `model` must not become a 1 MB log line or a
//! 1 MB 404 body, and a reader must see that what they read is not the whole value.

use std::borrow::Cow;

/// The longest client value a log field holds.
pub const LOG_FIELD_BYTES: usize = 256;
/// The longest message an error body holds.
pub const MESSAGE_BYTES: usize = 4096;

/// `s` itself when it fits in `max` bytes; else its first `max` bytes (cut at a
/// character boundary) followed by `…[cut N bytes]`, N being what was left out.
pub fn clip(s: &str, max: usize) -> Cow<'_, str> {
    let head = clip_bytes(s, max);
    if head.len() == s.len() {
        return Cow::Borrowed(s);
    }
    Cow::Owned(format!("{head}…[cut {} bytes]", s.len() - head.len()))
}

/// The longest start of `s` that fits in `max` bytes, cut at a character boundary:
/// for work whose cost grows with the length (a similarity search), not for echoing.
pub fn clip_bytes(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_bytes_cuts_at_a_character_boundary() {
        assert_eq!(clip_bytes("gpt-4o", 256), "gpt-4o");
        assert_eq!(clip_bytes("ab\u{00e9}", 3), "ab");
        assert_eq!(clip_bytes(&"m".repeat(1000), 256).len(), 256);
    }

    #[test]
    fn a_value_that_fits_is_untouched() {
        assert!(matches!(clip("gpt-4o", 256), Cow::Borrowed("gpt-4o")));
    }

    #[test]
    fn a_long_value_is_cut_and_the_cut_is_marked() {
        let long = "m".repeat(1_000_000);
        let c = clip(&long, 256);
        assert_eq!(c, format!("{}…[cut 999744 bytes]", "m".repeat(256)));
    }

    #[test]
    fn the_cut_never_splits_a_character() {
        // "é" is two bytes: a cut at byte 3 of "aéé" falls inside the second one.
        assert_eq!(clip("aééé", 4), "aé…[cut 4 bytes]");
    }
}
