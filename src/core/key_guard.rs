//! Keys split across stream events. Each event leaves masked (`secret::mask`), but a
//! client joins the text deltas of a stream, so an upstream that echoes a key in two
//! deltas (`sk-proj-AB`, then `CD…`), or one character a delta, hands the client the
//! whole key although no single event holds it.
//!
//! The guard holds back a delta while the text held so far ends with the start of a
//! registered key, raw or spelled (`%XX`, `\uXXXX`), and lets it go once the text goes
//! another way. When the held text completes a key, the held items come back with
//! their text to be rewritten: the first that shows text shows the held text masked,
//! the others show none; masked text that ends where another key may start is held on
//! (masked) first. What is held is bounded by the longest spelling of a key (the
//! text stops being a key's start past it), and it only delays, never drops: a delta
//! ending in `s` (or `%`) waits for the next one.
//!
//! Generic over the item held: the gateway guards the text it encodes itself, and the
//! upstream's own frames on a same-wire stream.

use super::secret;
use std::borrow::Cow;

pub struct KeyGuard<T> {
    /// Held items, each with whether it shows text.
    held: Vec<(T, bool)>,
    /// The text the held items show, joined; masked already when `masked`.
    text: String,
    /// A key the held text completed is masked in `text`, and the held items must be
    /// let go showing it, never their own text (`flush`).
    masked: bool,
    /// The text the held text belongs to (`push_in`).
    channel: Option<Channel>,
}

/// Which text of a stream a delta adds to. A client joins each apart (a choice's
/// answer, its refusal, its reasoning, each tool call's arguments), so a key is looked
/// for across the deltas of one, and a delta of another ends the search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Channel {
    pub choice: u32,
    pub part: Part,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Text,
    Refusal,
    Reasoning,
    /// The arguments of the tool call of this index.
    Arguments(u32),
}

impl<T> Default for KeyGuard<T> {
    fn default() -> Self {
        KeyGuard {
            held: Vec::new(),
            text: String::new(),
            masked: false,
            channel: None,
        }
    }
}

/// An item the guard lets go, and the text it must show instead of its own (`None`:
/// its own, unchanged).
pub type Released<T> = (T, Option<String>);

impl<T> KeyGuard<T> {
    /// Takes `item`, which shows `text` (empty: none). Returns what may go now, in
    /// order: nothing while held, else every held item and this one.
    pub fn push(&mut self, item: T, text: &str) -> Vec<Released<T>> {
        if text.is_empty() {
            if self.held.is_empty() {
                return vec![(item, None)];
            }
            // Between two pieces of a key: held, so order is kept.
            self.held.push((item, false));
            return Vec::new();
        }
        self.text.push_str(text);
        self.held.push((item, true));
        if let Cow::Owned(masked) = secret::mask(&self.text) {
            self.text = masked;
            self.masked = true;
        }
        // Masked or not, text that ends where a key may start is held on: a key masked
        // in it, followed by the start of another (`*** sk-gu`), would otherwise hand
        // the client that start, and the next delta the rest.
        if secret::ends_with_key_start(&self.text) {
            return Vec::new();
        }
        self.let_go()
    }

    /// `push` for a delta of `channel`: what another channel's deltas hold goes first,
    /// unchanged (a key does not continue across them), then this one is pushed.
    pub fn push_in(&mut self, channel: Channel, item: T, text: &str) -> Vec<Released<T>> {
        if text.is_empty() {
            return self.push(item, text);
        }
        let mut out = Vec::new();
        if self.channel != Some(channel) {
            // Let go as they are: the caller writes what it gets back into this
            // channel's deltas, and a text to show instead belongs to the other's.
            out = self.let_go();
            self.channel = Some(channel);
        }
        out.extend(self.push(item, text));
        out
    }

    /// The channel of the text last pushed with `push_in`: the one whose items come
    /// back with text to show instead of their own.
    pub fn channel(&self) -> Option<Channel> {
        self.channel
    }

    /// Everything held: the stream ends, or moves to where a key cannot continue. The
    /// items show their own text, or, where a key was masked in it, the first that
    /// shows text shows the masked text and the others none.
    /// Lets every held item go because nothing more can complete a key (the stream
    /// ends, or an event that is no text comes). A held tail that is a long run of a key
    /// (`secret::mask_key_pieces`: 12 characters or more) is masked first: the start of
    /// a key cut off by a failure is still a piece of it, and went out in clear.
    pub fn flush(&mut self) -> Vec<Released<T>> {
        if !self.masked && !self.held.is_empty() {
            if let Cow::Owned(masked) = secret::mask_key_pieces(&self.text) {
                self.text = masked;
                self.masked = true;
            }
        }
        self.let_go()
    }

    /// Every held item, in order, each with the text it must show.
    fn let_go(&mut self) -> Vec<Released<T>> {
        let text = std::mem::take(&mut self.text);
        let held = std::mem::take(&mut self.held);
        if !std::mem::take(&mut self.masked) {
            return held.into_iter().map(|(item, _)| (item, None)).collect();
        }
        // The first item that shows text shows the held text masked; the others none.
        let mut masked = Some(text);
        held.into_iter()
            .map(|(item, shows)| match shows {
                true => (item, Some(masked.take().unwrap_or_default())),
                false => (item, None),
            })
            .collect()
    }

    pub fn is_holding(&self) -> bool {
        !self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-guard-TEST-9f8e7d";

    fn shown(out: Vec<Released<&str>>) -> String {
        out.into_iter()
            .map(|(own, new)| new.unwrap_or_else(|| own.to_string()))
            .collect()
    }

    #[test]
    fn a_key_split_across_deltas_is_masked_and_other_text_passes_whole() {
        let _k = secret::Secret::new(KEY);
        let mut g = KeyGuard::default();
        let mut client = String::new();
        for piece in ["your key: ", "sk-gu", "ard-TE", "ST-9f8e7d", " ok."] {
            client.push_str(&shown(g.push(piece, piece)));
        }
        client.push_str(&shown(g.flush()));
        assert_eq!(client, "your key: *** ok.");

        // One character a delta.
        let mut client = String::new();
        for c in KEY.chars().map(String::from) {
            let c: &'static str = c.leak();
            client.push_str(&shown(g.push(c, c)));
        }
        client.push_str(&shown(g.flush()));
        assert_eq!(client, "***");
    }

    /// Guards a key's start cut off by the end of a stream (a failure after
    /// `sk-guard-TEST`): held as a possible key, it was let go in clear. A long run of a
    /// key is masked when nothing more can complete it; a short start goes as it is.
    #[test]
    fn a_long_key_start_held_at_the_end_is_masked_and_a_short_one_is_not() {
        let _k = secret::Secret::new(KEY);
        let mut g = KeyGuard::default();
        let mut client = shown(g.push("see ", "see "));
        client.push_str(&shown(g.push("sk-guard-TEST", "sk-guard-TEST")));
        assert_eq!(client, "see ", "the start is held");
        client.push_str(&shown(g.flush()));
        assert_eq!(client, "see ***");
        let mut client = shown(g.push("try sk-", "try sk-"));
        client.push_str(&shown(g.flush()));
        assert_eq!(client, "try sk-");
    }

    /// Guards a key masked in held text that then ends with the start of another:
    /// everything held went at once, so `*** sk-gu` reached the client and the next
    /// delta the rest of the second key. The masked text is held on while it ends
    /// where a key may start, and let go masked, even when the stream ends there.
    #[test]
    fn a_masked_key_followed_by_the_start_of_another_is_held_on() {
        let _k = secret::Secret::new(KEY);
        let mut g = KeyGuard::default();
        let mut client = String::new();
        for piece in [
            "k=sk-gu",
            "ard-TEST-9f8e7d sk-gu",
            "ard-TEST-9f8e7d",
            " ok.",
        ] {
            client.push_str(&shown(g.push(piece, piece)));
        }
        client.push_str(&shown(g.flush()));
        assert_eq!(client, "k=*** *** ok.");

        // The stream ends while the masked text is held: it goes masked.
        let mut client = String::new();
        let piece = "k=sk-guard-TEST-9f8e7d sk-gu";
        client.push_str(&shown(g.push(piece, piece)));
        assert!(client.is_empty(), "held: {client}");
        client.push_str(&shown(g.flush()));
        assert_eq!(client, "k=*** sk-gu");
    }

    #[test]
    fn a_key_is_looked_for_within_one_channel_and_another_channels_delta_ends_the_search() {
        let _k = secret::Secret::new(KEY);
        let args = |i| Channel {
            choice: 0,
            part: Part::Arguments(i),
        };
        let mut g = KeyGuard::default();
        // A key split across one tool call's argument deltas is masked.
        assert!(g
            .push_in(args(0), "{\"k\":\"sk-gu", "{\"k\":\"sk-gu")
            .is_empty());
        let out = g.push_in(args(0), "ard-TEST-9f8e7d\"}", "ard-TEST-9f8e7d\"}");
        assert_eq!(shown(out), "{\"k\":\"***\"}");
        assert_eq!(g.channel(), Some(args(0)));
        // Another call's delta releases what was held, unchanged, before itself.
        assert!(g.push_in(args(0), "sk-gu", "sk-gu").is_empty());
        let out = g.push_in(args(1), "{}", "{}");
        assert_eq!(shown(out), "sk-gu{}");
        assert_eq!(g.channel(), Some(args(1)));
    }

    /// Guards a leak: a key percent-encoded or `\u`-escaped and split across two
    /// deltas passed, since only a delta ending with the key's raw start was held.
    #[test]
    fn a_key_spelled_with_escapes_and_split_across_deltas_is_masked() {
        let _k = secret::Secret::new(KEY);
        let pct: String = KEY.bytes().map(|b| format!("%{b:02X}")).collect();
        let esc: String = KEY.bytes().map(|b| format!("\\u{b:04x}")).collect();
        // Cut between two characters' spellings, and inside one (`%7` + `3`, `\u00`).
        for spelled in [&pct, &esc] {
            for cut in [spelled.len() / 2, 4, 1] {
                let (a, b) = spelled.split_at(cut);
                let (a, b) = (format!("url: {a}"), format!("{b} end"));
                let mut g = KeyGuard::default();
                assert!(g.push(a.as_str(), &a).is_empty(), "{a}");
                let client = shown(g.push(b.as_str(), &b)) + &shown(g.flush());
                assert_eq!(client, "url: *** end");
            }
        }
    }

    #[test]
    fn text_that_only_starts_like_a_key_is_delayed_never_changed() {
        let _k = secret::Secret::new(KEY);
        let mut g = KeyGuard::default();
        assert!(g.push("this", "this").is_empty(), "ends in `s`: held");
        assert!(g.is_holding());
        let out = g.push(" one.", " one.");
        assert_eq!(shown(out), "this one.");
        assert_eq!(shown(g.push("plain.", "plain.")), "plain.");
        // Items without text are held in order while something is held.
        assert!(g.push("sk", "sk").is_empty());
        assert!(g.push("<ping>", "").is_empty());
        assert_eq!(shown(g.push("y.", "y.")), "sk<ping>y.");
        assert_eq!(shown(g.push("<finish>", "")), "<finish>");
    }

    #[test]
    fn the_first_text_item_shows_the_masked_text_and_the_rest_none() {
        let _k = secret::Secret::new(KEY);
        let mut g = KeyGuard::default();
        assert!(g.push(1, "sk-guard-").is_empty());
        assert!(g.push(2, "").is_empty());
        let out = g.push(3, "TEST-9f8e7d!");
        assert_eq!(
            out,
            vec![
                (1, Some("***!".to_string())),
                (2, None),
                (3, Some(String::new()))
            ]
        );
    }
}
