//! API keys. A `Secret` can be sent in a header and nothing else: it has no `Display`,
//! its `Debug` is redacted, and it is never serialized, so a key cannot reach output,
//! logs, traces, state or errors by accident.
//!
//! An upstream can still hand a key back on purpose or by mistake (an error message that
//! quotes the `Authorization` header, an `x-request-id` that copies it). So every key
//! (and every credential-like value of a `base_url` query) is also registered here, and
//! `mask` replaces each registered value with `***`. It runs where upstream bytes become
//! strings (`failure`), before any truncation, so half a key never survives as a prefix,
//! and once more on everything the CLI writes.

use std::borrow::Cow;
use std::fmt;
use std::sync::{OnceLock, RwLock};

/// What a masked value is replaced with.
pub const MASK: &str = "***";

/// Values shorter than this are not masked: they cannot be real credentials, and masking
/// a one-letter test key would garble every word that contains the letter.
const MIN_MASKED_LEN: usize = 4;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        let value = value.into();
        register(&value);
        Secret(value)
    }

    /// The key itself, for building an auth header. The only way out.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

fn registry() -> &'static RwLock<Vec<String>> {
    static KEYS: OnceLock<RwLock<Vec<String>>> = OnceLock::new();
    KEYS.get_or_init(|| RwLock::new(Vec::new()))
}

/// Adds `value` to the values `mask` hides, for the life of the process.
pub fn register(value: &str) {
    let value = value.trim();
    if value.len() < MIN_MASKED_LEN {
        return;
    }
    let mut keys = registry().write().unwrap_or_else(|p| p.into_inner());
    // The key as a URL spells it too: an upstream that echoes the URL it was called
    // with (`?key=...`) percent-encodes a key's `/`, `+` or `=`.
    // And as a JSON string (or Rust's `{:?}`) spells it: a key holding `"` or `\`
    // reaches the body of an echoing upstream as `\"` or `\\`, which the client's
    // parser decodes back into the key.
    for form in [
        value.to_string(),
        percent_encoded(value),
        json_escaped(value),
    ] {
        if !keys.contains(&form) {
            keys.push(form);
        }
    }
    // Longest first, so a key that contains another is masked whole.
    keys.sort_by_key(|k| std::cmp::Reverse(k.len()));
}

/// `value` as the inside of a JSON string literal spells it.
fn json_escaped(value: &str) -> String {
    let quoted = serde_json::to_string(value).unwrap_or_default();
    quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .unwrap_or(value)
        .to_string()
}

/// `value` with every byte outside RFC 3986's unreserved set percent-encoded.
fn percent_encoded(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `mask` for text that holds JSON (a body, an SSE event): a string literal may spell a
/// key with escapes (`\u0073k-...`, or `\/` for a key's `/`) that the bytes do not
/// show and the client's JSON parser decodes back into the key. Each literal with an
/// escape is decoded, and one that holds a key is written again, masked. The bytes are
/// unchanged when no key is found, which is nearly always.
pub fn mask_json(text: &str) -> Cow<'_, str> {
    let raw = mask(text);
    // A key's characters can hide only behind `\u` or `\/`: the other escapes spell
    // quotes, backslashes and control characters, which no API key holds. An
    // answer's `\n`s alone need no second look.
    if !(raw.contains("\\u") || raw.contains("\\/"))
        || registry().read().map_or(true, |k| k.is_empty())
    {
        return raw;
    }
    let src: &str = &raw;
    let bytes = src.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'"' {
            i += 1;
            continue;
        }
        // A string literal: to the next quote that no backslash escapes.
        let start = i;
        let mut j = i + 1;
        let mut escaped = false;
        while j < bytes.len() && bytes[j] != b'"' {
            escaped |= bytes[j] == b'\\';
            j += if bytes[j] == b'\\' { 2 } else { 1 };
        }
        if j >= bytes.len() {
            break;
        }
        let literal = &src[start..=j];
        i = j + 1;
        if !escaped {
            continue;
        }
        let Ok(decoded) = serde_json::from_str::<String>(literal) else {
            continue;
        };
        if let Cow::Owned(masked) = mask(&decoded) {
            let o = out.get_or_insert_with(|| String::with_capacity(src.len()));
            o.push_str(&src[copied..start]);
            o.push_str(&serde_json::to_string(&masked).unwrap_or_else(|_| "\"***\"".into()));
            copied = i;
        }
    }
    match out {
        None => raw,
        Some(mut o) => {
            o.push_str(&src[copied..]);
            Cow::Owned(o)
        }
    }
}

/// `text` with every registered value replaced by `***`. Borrowed when nothing matched,
/// which is nearly always.
pub fn mask(text: &str) -> Cow<'_, str> {
    let keys = registry().read().unwrap_or_else(|p| p.into_inner());
    let mut out: Cow<'_, str> = Cow::Borrowed(text);
    for key in keys.iter() {
        if out.contains(key.as_str()) {
            out = Cow::Owned(out.replace(key.as_str(), MASK));
        }
    }
    // A URL decoder reads `%2D` as `-` and `%73` as `s`, and a JSON parser reads
    // `\u0073` as `s`: any of a key's characters may be spelled either way, and text
    // decoded once may still hold escapes a client decodes again (tool-call
    // `arguments` are JSON inside a JSON string). Looked for only where one is.
    if out.contains('%') || out.contains("\\u") || out.contains("\\/") {
        for key in keys.iter().filter(|k| spellable(k)) {
            if let Some(masked) = mask_spellings(&out, key) {
                out = Cow::Owned(masked);
            }
        }
    }
    out
}

/// Whether `key`'s spellings are searched for: an ASCII key without a `%` (a key's
/// percent-encoded form is registered too, and its spellings are the key's).
fn spellable(key: &str) -> bool {
    key.is_ascii() && !key.contains('%')
}

/// `text` with each spelling of `key` (`spelling_at`) replaced by the mask, and
/// nothing around it; `None` when there is none.
fn mask_spellings(text: &str, key: &str) -> Option<String> {
    let (t, k) = (text.as_bytes(), key.as_bytes());
    let first = *k.first()?;
    let mut out: Option<String> = None;
    let (mut copied, mut i) = (0, 0);
    // Only where the key's first character, a `%` or a `\` is can a spelling start.
    while let Some(at) = memchr::memchr3(first, b'%', b'\\', &t[i..]) {
        let (start, next) = candidate(t, i + at);
        if let Spelling::Whole(end) = spelling_at(t, start, k) {
            let o = out.get_or_insert_with(|| String::with_capacity(text.len()));
            o.push_str(&text[copied..start]);
            o.push_str(MASK);
            (copied, i) = (end, end);
        } else {
            i = next;
        }
    }
    let mut o = out?;
    o.push_str(&text[copied..]);
    Some(o)
}

/// Where a spelling may start, for a candidate at `i` (the key's first character, a `%`
/// or a `\`), and where the scan goes on if none does. Of a run of backslashes only
/// the last can start an escape (the others escape one another, or precede it): the
/// run is read once, at its end. Trying each of its backslashes, each counting the
/// ones before it, took time growing with the square of the run.
fn candidate(t: &[u8], i: usize) -> (usize, usize) {
    if t[i] != b'\\' {
        return (i, i + 1);
    }
    let end = i + t[i..].iter().take_while(|&&b| b == b'\\').count();
    (end - 1, end)
}

/// What stands at some offset of a text, read as a spelling of a key.
#[derive(Debug, PartialEq, Eq)]
enum Spelling {
    /// A whole spelling, ending here.
    Whole(usize),
    /// The text ends partway through one (`sk-pr`, `%73%6`, `\u00`): what follows
    /// could complete it.
    Cut,
    /// Not a spelling of the key.
    No,
}

/// Reads `t` from `i` as a spelling of `key`, each of whose characters is written as
/// itself, as `%XX`, as `\uXXXX` (hex of either case), or, for a `/`, as `\/`. A
/// backslash that a backslash escapes starts no escape: `\\u0073` decodes to the text
/// `\u0073`, never to `s`.
fn spelling_at(t: &[u8], mut i: usize, key: &[u8]) -> Spelling {
    for &c in key {
        i = match char_at(t, i, c) {
            Spelling::Whole(end) => end,
            other => return other,
        };
    }
    Spelling::Whole(i)
}

/// `spelling_at` for one character `c` of a key.
fn char_at(t: &[u8], i: usize, c: u8) -> Spelling {
    let Some(&b) = t.get(i) else {
        return Spelling::Cut;
    };
    if b == c {
        return Spelling::Whole(i + 1);
    }
    match b {
        b'%' => hex_at(t, i + 1, 2, c),
        b'\\' if t[..i].iter().rev().take_while(|&&p| p == b'\\').count() % 2 == 0 => {
            match t.get(i + 1) {
                None => Spelling::Cut,
                Some(b'/') if c == b'/' => Spelling::Whole(i + 2),
                Some(b'u') => hex_at(t, i + 2, 4, c),
                Some(_) => Spelling::No,
            }
        }
        _ => Spelling::No,
    }
}

/// `c` as `width` hex digits at `t[i..]`.
fn hex_at(t: &[u8], i: usize, width: usize, c: u8) -> Spelling {
    for d in 0..width {
        let want = (u32::from(c) >> (4 * (width - 1 - d))) & 0xF;
        match t.get(i + d) {
            None => return Spelling::Cut,
            Some(&h) if (h as char).to_digit(16) == Some(want) => {}
            Some(_) => return Spelling::No,
        }
    }
    Spelling::Whole(i + width)
}

/// The shortest run of a key's characters that `mask_key_pieces` hides: long enough
/// that prose never matches a random key by chance.
const PIECE: usize = 12;

/// `text` with every run of 12 or more characters of a registered key masked, the run
/// taken whole: an upstream's error may quote the key it refused shortened
/// (`sk-proj-abc…`) or with its prefix cut, and a piece of a key is still a key. For
/// messages (errors, their excerpts), where the cost of the search does not matter.
pub fn mask_key_pieces(text: &str) -> Cow<'_, str> {
    let keys = registry().read().unwrap_or_else(|p| p.into_inner());
    let mut out: Cow<'_, str> = Cow::Borrowed(text);
    // A key holding the mask itself could match its own replacement for ever.
    for key in keys
        .iter()
        .filter(|k| k.len() >= PIECE && k.is_ascii() && !k.contains('*'))
    {
        let kb = key.as_bytes();
        loop {
            let hit =
                (0..=kb.len() - PIECE).find_map(|i| out.find(&key[i..i + PIECE]).map(|at| (i, at)));
            let Some((i, at)) = hit else { break };
            // The run, grown both ways while text and key agree (ASCII: every end is a
            // character boundary).
            let ob = out.as_bytes();
            let (mut start, mut ki) = (at, i);
            while start > 0 && ki > 0 && ob[start - 1] == kb[ki - 1] {
                start -= 1;
                ki -= 1;
            }
            let (mut end, mut kj) = (at + PIECE, i + PIECE);
            while end < ob.len() && kj < kb.len() && ob[end] == kb[kj] {
                end += 1;
                kj += 1;
            }
            out = Cow::Owned(format!("{}{MASK}{}", &out[..start], &out[end..]));
        }
    }
    out
}

/// Whether `text` ends with the start of a spelling of a registered key (a proper
/// prefix of one, each character written as `spelling_at` reads it): a stream's next
/// delta could complete it (`key_guard`). Only the last `6 × key length` bytes are
/// read (the longest spelling, every character `\uXXXX`), and in them only where a
/// spelling can start: this runs on every delta.
pub fn ends_with_key_start(text: &str) -> bool {
    let keys = registry().read().unwrap_or_else(|p| p.into_inner());
    let t = text.as_bytes();
    keys.iter().any(|k| {
        let kb = k.as_bytes();
        if !spellable(k) {
            return (1..kb.len().min(t.len() + 1)).any(|n| t.ends_with(&kb[..n]));
        }
        let Some(&first) = kb.first() else {
            return false;
        };
        let mut i = t.len().saturating_sub(6 * kb.len());
        while let Some(at) = memchr::memchr3(first, b'%', b'\\', &t[i..]) {
            let (start, next) = candidate(t, i + at);
            if spelling_at(t, start, kb) == Spelling::Cut {
                return true;
            }
            i = next;
        }
        false
    })
}

/// `text` with anything shaped like a bearer key (`sk-...`, `sk-ant-...`, `key-...`
/// with 8 or more key characters) cut to its prefix and `***`, whoever's key it is: an
/// upstream's message may quote a key, or part of one, that was never registered here
/// (the one it refused), and a partial key is still a key.
pub fn mask_key_shaped(text: &str) -> Cow<'_, str> {
    if find_key_start(text).is_none() {
        return Cow::Borrowed(text);
    }
    let mut masked = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = find_key_start(rest) {
        let (before, from) = rest.split_at(at);
        masked.push_str(before);
        let len = from
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '*'))
            .unwrap_or(from.len());
        let token = &from[..len];
        let prefix_len = if token.starts_with("key-") { 4 } else { 3 };
        if token.len() >= prefix_len + 8 {
            masked.push_str(&token[..prefix_len]);
            masked.push_str("***");
        } else {
            masked.push_str(token);
        }
        rest = &from[len..];
    }
    masked.push_str(rest);
    Cow::Owned(masked)
}

/// Where the first key-shaped token starts. Compares bytes, never slices the text: an
/// index inside a multi-byte character (a Chinese error message) is no place to cut a
/// `str`, and the ASCII prefixes can only match at a character's start anyway.
fn find_key_start(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    (0..bytes.len()).find(|&i| {
        let at_word_start =
            i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'-');
        at_word_start && (bytes[i..].starts_with(b"sk-") || bytes[i..].starts_with(b"key-"))
    })
}

/// `mask` for an owned string, reusing it when nothing matched.
pub fn mask_owned(text: String) -> String {
    match mask(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(masked) => masked,
    }
}

/// A URL fit to print: every query value replaced by `***` (a gateway key often rides
/// in `?key=`), and any userinfo too.
pub fn display_url(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (url, None),
    };
    let head = match head.split_once("://") {
        Some((scheme, rest)) => {
            let host_end = rest.find('/').unwrap_or(rest.len());
            match rest[..host_end].rfind('@') {
                Some(at) => format!("{scheme}://{MASK}@{}", &rest[at + 1..]),
                None => head.to_string(),
            }
        }
        None => head.to_string(),
    };
    match query {
        None => head,
        Some(q) => {
            let masked: Vec<String> = q
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((k, _)) => format!("{k}={MASK}"),
                    None => pair.to_string(),
                })
                .collect();
            format!("{head}?{}", masked.join("&"))
        }
    }
}

/// Registers every query value of `url` for masking: whatever it carries is treated as
/// a credential, wherever an upstream might echo it.
pub fn register_url_query(url: &str) {
    if let Some((_, q)) = url.split_once('?') {
        for pair in q.split(['&', '#']) {
            if let Some((_, v)) = pair.split_once('=') {
                register(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// Guards a panic: the search sliced the text at every byte, and a slice inside a
    /// multi-byte character (any Chinese or accented upstream message) panicked, which
    /// turned a DashScope 429 through the gateway into a 500.
    #[test]
    fn key_shaped_masking_takes_any_text_and_masks_only_keys() {
        let zh = "请登录platform进行实名认证以获取更高rpm sk-abcdefgh12345678 é";
        assert_eq!(
            mask_key_shaped(zh),
            "请登录platform进行实名认证以获取更高rpm sk-*** é"
        );
        assert!(matches!(mask_key_shaped("日本語のみ"), Cow::Borrowed(_)));
        assert_eq!(
            mask_key_shaped("ask-me task-force sk-1"),
            "ask-me task-force sk-1"
        );
        assert_eq!(mask_key_shaped("(key-0123456789ab)"), "(key-***)");
    }

    proptest::proptest! {
        #[test]
        fn key_shaped_masking_never_panics_and_leaves_no_long_key(s in "\\PC{0,80}") {
            let out = mask_key_shaped(&s);
            let with_key = format!("{s} sk-{}", "a".repeat(20));
            proptest::prop_assert!(!mask_key_shaped(&with_key).contains(&"a".repeat(20)));
            proptest::prop_assert!(out.len() <= s.len() + 3);
        }
    }

    use super::*;

    #[test]
    fn debug_is_redacted() {
        let s = Secret::new("sk-live-123");
        assert!(!format!("{s:?}").contains("sk-live"));
    }

    #[test]
    fn registered_keys_are_masked_wherever_they_appear() {
        let _s = Secret::new("sk-mask-test-0c1d2e");
        let text = "invalid key Bearer sk-mask-test-0c1d2e (sk-mask-test-0c1d2e)";
        assert_eq!(mask(text), "invalid key Bearer *** (***)");
        assert!(matches!(mask("nothing here"), Cow::Borrowed(_)));
    }

    /// Guards a leak: a key holding `"` or `\\` reached a client in an echoing upstream's
    /// JSON as `\\"` or `\\\\`, which no search for the key's own bytes finds.
    #[test]
    fn keys_holding_a_quote_or_a_backslash_are_masked_as_json_spells_them() {
        let _q = Secret::new(r#"sk-quote"test-0c1d2e"#);
        let _b = Secret::new(r"sk-slash\test-0c1d2e");
        let body = r#"{"a":"key sk-quote\"test-0c1d2e here","b":"key sk-slash\\test-0c1d2e"}"#;
        let masked = mask_json(body);
        let v: serde_json::Value = serde_json::from_str(&masked).unwrap();
        assert_eq!(v["a"], "key *** here");
        assert_eq!(v["b"], "key ***");
        assert_eq!(mask(r#"Debug: "sk-quote\"test-0c1d2e""#), r#"Debug: "***""#);
    }

    /// Guards a leak: the bytes of a same-wire answer were searched for the key, and an
    /// upstream that escaped it (`\u0073k-...`, PHP's `\/`) or percent-encoded it got it
    /// past the search to a client whose parser decoded it back.
    #[test]
    fn keys_spelled_with_json_escapes_or_percent_encoding_are_masked() {
        let _s = Secret::new("sk-esc/test+0c1d2e");
        let body =
            r#"{"a":"key \u0073k-esc\/test+0c1d2e here","b":"x\ny","c":"sk-esc%2Ftest%2B0c1d2e"}"#;
        let masked = mask_json(body);
        let v: serde_json::Value = serde_json::from_str(&masked).unwrap();
        assert_eq!(v["a"], "key *** here");
        assert_eq!(v["b"], "x\ny");
        assert_eq!(v["c"], "***");
        // No key: the same bytes, borrowed.
        let plain = r#"{"a":"\u00e9t\u00e9 \/ \"q\""}"#;
        assert!(matches!(mask_json(plain), Cow::Borrowed(_)));
        // A cut literal is left for the raw search alone, never a panic.
        assert_eq!(mask_json(r#"{"a":"\u0073k"#), r#"{"a":"\u0073k"#);
    }

    /// Guards a leak in failure messages: an upstream that quoted the refused key
    /// shortened, or without its prefix, passed it whole minus a few characters.
    #[test]
    fn keys_with_any_characters_percent_encoded_are_masked() {
        let key = "sk-pct-SPELL-0123456789";
        let _k = Secret::new(key);
        let dash = key.replace('-', "%2D");
        assert_eq!(mask(&format!("k={dash}&x=1")), "k=***&x=1");
        let every: String = key.bytes().map(|b| format!("%{b:02x}")).collect();
        assert_eq!(mask(&format!("[{every}]")), "[***]");
        // A near miss stays as it was, and so does a lone `%`.
        let near = dash.replacen("%2D", "%2E", 1);
        assert_eq!(mask(&near), near.as_str());
        assert_eq!(mask("100% sk-pct"), "100% sk-pct");
        assert!(matches!(mask("50% off"), Cow::Borrowed(_)));
    }

    /// `key` with every character at an index in `at` written as `\uXXXX` (hex in
    /// `upper` case or not) and every `/` as `\/`.
    fn escaped(key: &str, at: impl Fn(usize) -> bool, upper: bool) -> String {
        key.char_indices()
            .map(|(i, c)| match c {
                '/' => "\\/".to_string(),
                c if at(i) && upper => format!("\\u{:04X}", c as u32),
                c if at(i) => format!("\\u{:04x}", c as u32),
                c => c.to_string(),
            })
            .collect()
    }

    /// Guards a leak: tool-call `arguments` are JSON inside a JSON string, so once the
    /// body is decoded they can still spell the key in `\uXXXX` escapes that the
    /// client's `json.loads(arguments)` decodes back; only the raw key and its
    /// percent-encodings were looked for.
    /// Guards the scan of a long run of backslashes: each was tried as an escape's
    /// start, counting the run before it, so a body of 80 000 backslashes took
    /// seconds a key. Only the run's last backslash can start an escape, and whether
    /// it does is the parity of the run.
    #[test]
    fn a_run_of_backslashes_is_read_once_and_its_parity_decides_the_escape() {
        let key = "AIzaRUN/json-q7W2x9K4m1Z8";
        let _k = Secret::new(key);
        let all = escaped(key, |_| true, false);
        for run in [0usize, 1, 2, 3, 80_000, 80_001] {
            let text = format!("{}{all} end", "\\".repeat(run));
            let masked = mask(&text);
            // An even run is escaped backslashes: the escape after it is one.
            let expected = if run % 2 == 0 {
                format!("{}*** end", "\\".repeat(run))
            } else {
                text.clone()
            };
            assert!(masked == expected, "a run of {run}");
        }
        let held = format!("{}\\u00", "\\".repeat(80_000));
        assert!(
            ends_with_key_start(&held),
            "an escape cut after an even run"
        );
        let escaped_run = format!("{}\\u00", "\\".repeat(80_001));
        assert!(!ends_with_key_start(&escaped_run));
    }

    #[test]
    fn a_key_spelled_in_json_escapes_within_decoded_text_is_masked_and_nothing_more() {
        let key = "AIzaESC/json-q7W2x9K4m1Z8";
        let _k = Secret::new(key);
        let all = escaped(key, |_| true, false);
        assert_eq!(mask(&format!("{{\"q\":\"{all}\"}}")), "{\"q\":\"***\"}");
        let upper = escaped(key, |_| true, true);
        assert_eq!(mask(&format!("a {upper} b")), "a *** b");
        // Raw, percent-encoded and escaped characters mixed in one spelling.
        let mixed: String = escaped(key, |i| i % 3 == 0, false).replacen('z', "%7a", 1);
        assert_eq!(mask(&format!("<{mixed}>")), "<***>");
        // A backslash that a backslash escapes starts no escape: the client decodes
        // `\\u0041` to the text `\u0041`, never to `A`.
        let text = format!("\\{all}");
        assert_eq!(mask(&text), text.as_str());
        // An escape of another character, or a cut spelling, stays as it was.
        let near = all.replacen("\\u0041", "\\u0042", 1);
        assert_eq!(mask(&near), near.as_str());
        let cut = &all[..all.len() - 3];
        assert_eq!(mask(cut), cut);

        // The body as an upstream sends it, the arguments escaped twice: masked, still
        // JSON, and the arguments still JSON that no longer hold the key.
        let args = format!("{{\"q\":\"{all}\"}}");
        let body = serde_json::json!({"choices": [{"message": {"tool_calls": [
            {"function": {"name": "f", "arguments": args}}]}}]})
        .to_string();
        assert!(body.contains("\\\\u0041\\\\u0049"), "{body}");
        let masked = mask_json(&body);
        let v: serde_json::Value = serde_json::from_str(&masked).unwrap();
        let args = v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap();
        assert_eq!(args, "{\"q\":\"***\"}");
        // An escaped backslash before a once-escaped spelling: the raw bytes hold no
        // escape there (masking them would cut `\\` from its `u0041`, which is no JSON),
        // and the decoded text `x \u0041IzaESC/…` spells the key.
        let once = escaped(key, |i| i == 0, false);
        let body = format!("{{\"a\":\"x \\{once}\"}}");
        assert!(body.contains("x \\\\u0041"), "{body}");
        let v: serde_json::Value = serde_json::from_str(&mask_json(&body)).unwrap();
        assert_eq!(v["a"], "x ***");
    }

    /// Guards a leak: a key percent-encoded or `\u`-escaped, split across two stream
    /// deltas, passed, because only a tail that was a raw prefix of a key was held.
    #[test]
    fn a_tail_that_starts_any_spelling_of_a_key_is_a_key_start() {
        let key = "AIzaSTART/spell-R5t8Y3u6";
        let _k = Secret::new(key);
        let pct: String = key.bytes().map(|b| format!("%{b:02X}")).collect();
        let esc = escaped(key, |_| true, true);
        for n in 1..pct.len() {
            assert!(ends_with_key_start(&format!("url: {}", &pct[..n])), "{n}");
        }
        for n in 1..esc.len() {
            assert!(
                ends_with_key_start(&format!("{{\"q\":\"{}", &esc[..n])),
                "{n}"
            );
        }
        assert!(ends_with_key_start("key: AIzaST"));
        assert!(ends_with_key_start("key: %41I\\u007A%61ST"));
        // Whole spellings are masked, not held; text that went another way, or an
        // escaped backslash, is no start.
        assert!(!ends_with_key_start(&format!("{pct} ")));
        assert!(!ends_with_key_start("key: %41I\\u007B."));
        assert!(!ends_with_key_start("path: C:\\\\u00"));
        assert!(!ends_with_key_start("AIza%54"));
    }

    #[test]
    fn long_pieces_of_a_key_are_masked_and_short_ones_left() {
        let _s = Secret::new("sk-proj-PIECES0123456789abcd");
        assert_eq!(
            mask_key_pieces("provided: sk-proj-PIECES012345... (or proj-PIECES0123456789abcd)"),
            "provided: ***... (or ***)"
        );
        assert!(matches!(
            mask_key_pieces("sk-proj-PIE is short"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn tiny_values_are_not_masked() {
        let _s = Secret::new("k");
        assert_eq!(mask("ok key"), "ok key");
    }

    #[test]
    fn urls_print_without_query_values_or_userinfo() {
        assert_eq!(
            display_url("https://u:p@gw.example/v1?key=abc&x=1"),
            "https://***@gw.example/v1?key=***&x=***"
        );
        assert_eq!(
            display_url("https://api.openai.com/v1"),
            "https://api.openai.com/v1"
        );
    }
}
