//! Loading YAML files (pool config, scenarios) with errors a person can act on: the
//! file, the line and column, the field path, what is wrong, and for a typo the nearest
//! valid name.
//!
//! Before serde_yaml sees a byte, two limits of spec/cli.md "Limits on what is read" hold:
//! a file is read up to `POOLCTL_MAX_FILE_BYTES` (16 MiB) and no further (`/dev/zero`
//! must not grow memory), and a linear pre-scan refuses nesting deeper than 64, which
//! serde_yaml would otherwise take a minute to refuse.

use crate::core::suggest::nearest;
use serde::de::DeserializeOwned;
use std::fmt;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// The field path, e.g. `chain[0].replies[1].status`; empty at the top.
    pub field: String,
    pub message: String,
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        if !self.field.is_empty() && self.field != "." {
            write!(f, ": field `{}`", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for YamlError {}

impl YamlError {
    pub fn new(file: &Path, message: impl Into<String>) -> Self {
        YamlError {
            file: file.to_path_buf(),
            line: None,
            column: None,
            field: String::new(),
            message: message.into(),
        }
    }

    pub fn at_field(mut self, field: impl Into<String>) -> Self {
        self.field = field.into();
        self
    }
}

/// The largest config or scenario file read, unless `POOLCTL_MAX_FILE_BYTES` says otherwise.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
pub const MAX_FILE_BYTES_ENV: &str = "POOLCTL_MAX_FILE_BYTES";
/// The deepest nesting of maps, sequences and flow collections accepted.
pub const MAX_DEPTH: usize = 64;

/// The read cap: `$POOLCTL_MAX_FILE_BYTES` when it is a positive number, else 16 MiB.
pub fn max_file_bytes() -> u64 {
    std::env::var(MAX_FILE_BYTES_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_MAX_FILE_BYTES)
}

/// Reads `file` as UTF-8 text, never more than `max_file_bytes()` (+1 to know it was
/// more): the cap holds before the bytes are in memory, whatever the file is.
pub fn read_text(file: &Path) -> Result<String, YamlError> {
    use std::io::Read;
    let cap = max_file_bytes();
    let f =
        std::fs::File::open(file).map_err(|e| YamlError::new(file, format!("cannot read: {e}")))?;
    let mut bytes = Vec::new();
    f.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| YamlError::new(file, format!("cannot read: {e}")))?;
    if bytes.len() as u64 > cap {
        return Err(YamlError::new(
            file,
            format!("the file is larger than {cap} bytes (the limit; set {MAX_FILE_BYTES_ENV} to change it)"),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        YamlError::new(
            file,
            format!(
                "cannot read: not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// Parses `text` (the contents of `file`) into `T`.
pub fn parse<T: DeserializeOwned>(file: &Path, text: &str) -> Result<T, YamlError> {
    if text.trim().is_empty() {
        return Err(YamlError::new(file, "the file is empty"));
    }
    if text.len() as u64 > max_file_bytes() {
        return Err(YamlError::new(
            file,
            format!(
                "the text is larger than {} bytes (the limit; set {MAX_FILE_BYTES_ENV} to change it)",
                max_file_bytes()
            ),
        ));
    }
    if let Some(line) = too_deep(text, MAX_DEPTH) {
        return Err(YamlError {
            line: Some(line),
            ..YamlError::new(
                file,
                format!("nesting deeper than {MAX_DEPTH} levels (the limit)"),
            )
        });
    }
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        // Rendered without serde_path_to_error's `?` for a segment it could not name (a
        // syntax error, an enum's key): the user sees the field they can find.
        let segments: Vec<_> = e.path().iter().cloned().collect();
        let field = render_path(&segments);
        let inner = e.into_inner();
        let location = inner.location();
        let mut message = strip_location(&inner.to_string());
        // serde_yaml may already prefix the path ("items[1]: unknown field ..").
        if let Some((prefix, rest)) = message.split_once(": ") {
            if field.starts_with(prefix) {
                message = rest.to_string();
            }
        }
        if let Some(hint) = suggestion(&message) {
            message.push_str(&format!("; did you mean `{hint}`?"));
        }
        YamlError {
            file: file.to_path_buf(),
            line: location.as_ref().map(|l| l.line()),
            column: location.as_ref().map(|l| l.column()),
            field,
            message,
        }
    })
}

/// Reads and parses a file.
pub fn load<T: DeserializeOwned>(file: &Path) -> Result<T, YamlError> {
    let text = read_text(file)?;
    parse(file, &text)
}

/// The first line (1-based) at which `text` nests deeper than `max`, in one linear pass.
/// It over-counts a little rather than under-count (a sequence under a key counts as
/// two levels, brackets in a plain scalar count), which is harmless at a limit of 64
/// when real files nest under 10. Counted: block indentation levels, `- - -` chains on
/// one line, and `[` / `{` flow collections outside quotes and comments. Block scalars
/// (`|`, `>`) are skipped, their text is not structure.
pub fn too_deep(text: &str, max: usize) -> Option<usize> {
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    // Inside a quoted scalar that runs over lines: its quote character.
    let mut quote: Option<u8> = None;
    // Inside a block scalar: the indent of the line that opened it.
    let mut block_scalar: Option<usize> = None;
    for (n, line) in text.lines().enumerate() {
        let bytes = line.as_bytes();
        let indent = bytes.iter().take_while(|&&b| b == b' ').count();
        let blank = bytes[indent..].iter().all(|b| b.is_ascii_whitespace());
        if let Some(parent) = block_scalar {
            if blank || indent > parent {
                continue;
            }
            block_scalar = None;
        }
        let mut depth_here = 0;
        let mut i = indent;
        if quote.is_none() && flow == 0 {
            if blank || bytes[indent] == b'#' {
                continue;
            }
            while indents.last().is_some_and(|&top| top >= indent) {
                indents.pop();
            }
            indents.push(indent);
            // `- - - x`: each dash after the first opens one more sequence.
            let mut first = true;
            while i < bytes.len() && bytes[i] == b'-' && bytes.get(i + 1).is_none_or(|b| *b == b' ')
            {
                if !first {
                    depth_here += 1;
                }
                first = false;
                i += 1;
                while i < bytes.len() && bytes[i] == b' ' {
                    i += 1;
                }
            }
        }
        let mut prev = b' ';
        while i < bytes.len() {
            let b = bytes[i];
            match quote {
                Some(q) => {
                    if b == b'\\' && q == b'"' {
                        i += 1;
                    } else if b == q {
                        quote = None;
                    }
                }
                None => match b {
                    b'#' if prev == b' ' || prev == b'\t' => break,
                    b'"' | b'\'' if matches!(prev, b' ' | b'\t' | b'[' | b'{' | b',' | b':') => {
                        quote = Some(b)
                    }
                    b'[' | b'{'
                        if flow > 0 || matches!(prev, b' ' | b'\t' | b'[' | b'{' | b',' | b':') =>
                    {
                        flow += 1;
                        if indents.len() + depth_here + flow > max {
                            return Some(n + 1);
                        }
                    }
                    b']' | b'}' if flow > 0 => flow -= 1,
                    _ => {}
                },
            }
            prev = b;
            i += 1;
        }
        if indents.len() + depth_here + flow > max {
            return Some(n + 1);
        }
        // A `|` or `>` block scalar indicator ends the line: what follows is text.
        if quote.is_none() && flow == 0 {
            let code = line.split(" #").next().unwrap_or("").trim_end();
            let last_word = code.rsplit([' ', ':']).next().unwrap_or("");
            if (last_word.starts_with('|') || last_word.starts_with('>'))
                && last_word[1..]
                    .bytes()
                    .all(|b| b == b'-' || b == b'+' || b.is_ascii_digit())
                && code.len() > last_word.len()
            {
                block_scalar = Some(indent);
            }
        }
    }
    None
}

/// `providers.openai.timeout_ms`, `tiers.high[2]`, as serde_path_to_error prints them,
/// a segment it could not name left out.
pub fn render_path(path: &[serde_path_to_error::Segment]) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path {
        match seg {
            Segment::Map { key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Enum { .. } | Segment::Unknown => {}
        }
    }
    out
}

/// An integer literal too large for any field (2^64 and up, or below -2^63), as a
/// problem names it. serde_yaml reads it as a 128-bit integer, which its tree cannot
/// hold: that would call valid YAML "not valid YAML" and name no field.
pub(crate) struct HugeInteger {
    pub line: usize,
    pub literal: String,
}

impl HugeInteger {
    pub fn message(&self) -> String {
        format!(
            "integer `{}` is out of range (no field takes more than 18446744073709551615)",
            self.literal
        )
    }
}

/// The YAML tree of `text`. An integer too large for the tree is read as the float it
/// is closest to, so that the typed parse names its field like any value of the wrong
/// kind; each such integer is returned, for the problem to be told in its own words.
pub(crate) fn tree(text: &str) -> Result<(serde_yaml::Value, Vec<HugeInteger>), serde_yaml::Error> {
    let mut text = std::borrow::Cow::Borrowed(text);
    let mut huge = Vec::new();
    loop {
        let e = match serde_yaml::from_str::<serde_yaml::Value>(&text) {
            Ok(v) => return Ok((v, huge)),
            Err(e) => e,
        };
        // "invalid type: integer `N` as u128" (or i128): each pass widens one, and a
        // file holds few; past a bound the error stands as it is.
        let literal = e
            .to_string()
            .split_once("invalid type: integer `")
            .and_then(|(_, r)| r.split_once("` as "))
            .filter(|(_, r)| r.starts_with("u128") || r.starts_with("i128"))
            .map(|(n, _)| n.to_string());
        let (Some(literal), Some(line)) = (literal, e.location().map(|l| l.line())) else {
            return Err(e);
        };
        match widen(&text, line, &literal) {
            Some(t) if huge.len() < 32 => {
                huge.push(HugeInteger { line, literal });
                text = std::borrow::Cow::Owned(t);
            }
            _ => return Err(e),
        }
    }
}

/// `text` with the integer `literal` on 1-based `line` written as a float (`N.0`).
fn widen(text: &str, line: usize, literal: &str) -> Option<String> {
    let start: usize = text
        .split_inclusive('\n')
        .take(line - 1)
        .map(str::len)
        .sum();
    let row = text[start..].split('\n').next()?;
    let bytes = row.as_bytes();
    let at = row.match_indices(literal).map(|(i, _)| i).find(|&i| {
        let before = i.checked_sub(1).map(|j| bytes[j]);
        let after = bytes.get(i + literal.len()).copied();
        // Not inside a quoted string: a scalar the parser read as a number is plain.
        let quoted = bytes[..i].iter().filter(|&&b| b == b'"').count() % 2 == 1
            || bytes[..i].iter().filter(|&&b| b == b'\'').count() % 2 == 1;
        !quoted
            && !before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_')
            && !after.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_')
    })?;
    let cut = start + at + literal.len();
    Some(format!("{}.0{}", &text[..cut], &text[cut..]))
}

/// serde_yaml appends " at line L column C"; we print the location ourselves. Rust's
/// number types ("expected u64") become what a config author would call them.
pub(crate) fn strip_location(msg: &str) -> String {
    let msg = match msg.find(" at line ") {
        Some(i) => &msg[..i],
        None => msg,
    };
    let mut out = msg.to_string();
    for (rust, plain) in [
        ("expected u8", "expected a whole number from 0 to 255"),
        ("expected u16", "expected a whole number from 0 to 65535"),
        (
            "expected u32",
            "expected a whole number from 0 to 4294967295",
        ),
        ("expected u64", "expected a whole number, 0 or more"),
        ("expected usize", "expected a whole number, 0 or more"),
        ("expected i64", "expected a whole number"),
        ("expected f32", "expected a number"),
        ("expected f64", "expected a number"),
    ] {
        if let Some(rest) = out.strip_suffix(rust) {
            out = format!("{rest}{plain}");
            break;
        }
    }
    out
}

/// For "unknown field `x`, expected one of `a`, `b`" (or `unknown variant`), the
/// expected name nearest to `x`.
pub(crate) fn suggestion(message: &str) -> Option<String> {
    let rest = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("unknown variant `"))?;
    let (got, rest) = rest.split_once('`')?;
    // "expected one of `a`, `b`" or "expected `a`": the names sit between backticks.
    let expected: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    nearest(got, expected.iter().copied())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Doc {
        name: String,
        items: Vec<Item>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Item {
        status: u16,
    }

    #[test]
    fn names_file_line_field_and_suggests() {
        let text = "name: x\nitems:\n  - status: 200\n  - statsu: 429\n";
        let err = parse::<Doc>(Path::new("s.yaml"), text).unwrap_err();
        assert_eq!(err.line, Some(4));
        assert!(err.field.starts_with("items[1]"), "{}", err.field);
        let shown = err.to_string();
        assert!(shown.contains("s.yaml:4"), "{shown}");
        assert!(shown.contains("did you mean `status`"), "{shown}");
    }

    #[test]
    fn depth_prescan_counts_flow_block_and_dash_chains() {
        let flow = |n: usize| format!("x: {}1{}\n", "[".repeat(n), "]".repeat(n));
        assert_eq!(too_deep(&flow(60), 64), None);
        assert_eq!(too_deep(&flow(64), 64), Some(1));
        let block: String = (0..100).map(|i| format!("{}a:\n", " ".repeat(i))).collect();
        assert_eq!(too_deep(&block, 64), Some(65));
        assert_eq!(too_deep(&format!("{}x\n", "- ".repeat(100)), 64), Some(1));
        // Brackets in quotes, comments and block scalars are text, not structure.
        let text = format!(
            "a: \"{0}\"\nb: 1 # {0}\nc: |\n  {0}\n  more\nd: '{0}'\n",
            "[".repeat(200)
        );
        assert_eq!(too_deep(&text, 64), None);
    }

    #[test]
    fn every_shipped_scenario_passes_the_prescan() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            assert_eq!(too_deep(&text, MAX_DEPTH), None, "{}", path.display());
        }
    }

    #[test]
    fn a_segment_serde_cannot_name_is_left_out_of_the_field() {
        // An unquoted colon in a value: the error sits under a key not yet read.
        let err = parse::<Doc>(Path::new("c.yaml"), "name: a: b\nitems: []\n").unwrap_err();
        assert!(!err.field.contains('?'), "{}", err.field);
        assert!(!err.to_string().contains("`?`"), "{err}");
        // An unknown variant as a map's key: the path stops at the map.
        #[derive(Debug, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
        #[allow(dead_code)]
        enum Word {
            #[serde(rename = "success")]
            Success,
        }
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Counts {
            counts: std::collections::BTreeMap<Word, u32>,
        }
        let err = parse::<Counts>(Path::new("k.yaml"), "counts: { succes: 2 }\n").unwrap_err();
        assert_eq!(err.field, "counts");
        assert!(
            err.message.contains("did you mean `success`"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_huge_integer_is_widened_where_it_stands_never_inside_a_quoted_string() {
        let text = "a: \"x 18446744073709551616\"\nb: 18446744073709551616\n";
        let (v, huge) = tree(text).unwrap();
        assert_eq!(v["a"].as_str(), Some("x 18446744073709551616"));
        assert!(v["b"].is_f64(), "{v:?}");
        assert_eq!(huge.len(), 1);
        let same_line = "{a: \"18446744073709551616\", b: 18446744073709551616}\n";
        let (v, _) = tree(same_line).unwrap();
        assert_eq!(v["a"].as_str(), Some("18446744073709551616"));
        assert!(v["b"].is_f64(), "{v:?}");
    }

    #[test]
    fn malformed_and_empty() {
        let err = parse::<Doc>(Path::new("b.yaml"), "name: [unclosed\n").unwrap_err();
        assert!(err.line.is_some());
        let err = parse::<Doc>(Path::new("e.yaml"), "  \n").unwrap_err();
        assert!(err.message.contains("empty"));
    }
}
