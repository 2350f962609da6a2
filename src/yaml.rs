//! Loading YAML files (pool config, scenarios) with errors a person can act on: the
//! file, the line and column, the field path, what is wrong, and for a typo the nearest
//! valid name.

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

/// Parses `text` (the contents of `file`) into `T`.
pub fn parse<T: DeserializeOwned>(file: &Path, text: &str) -> Result<T, YamlError> {
    if text.trim().is_empty() {
        return Err(YamlError::new(file, "the file is empty"));
    }
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
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
    let text = std::fs::read_to_string(file)
        .map_err(|e| YamlError::new(file, format!("cannot read: {e}")))?;
    parse(file, &text)
}

/// serde_yaml appends " at line L column C"; we print the location ourselves.
fn strip_location(msg: &str) -> String {
    match msg.find(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// For "unknown field `x`, expected one of `a`, `b`" (or `unknown variant`), the
/// expected name nearest to `x`.
fn suggestion(message: &str) -> Option<String> {
    let rest = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("unknown variant `"))?;
    let (got, rest) = rest.split_once('`')?;
    // "expected one of `a`, `b`" or "expected `a`": the names sit between backticks.
    let expected: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    nearest(got, expected.iter().copied())
}

/// The candidate nearest to `got`, if any is near enough to be a typo.
pub fn nearest<'a>(got: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(got, c), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c.to_string())
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
    fn malformed_and_empty() {
        let err = parse::<Doc>(Path::new("b.yaml"), "name: [unclosed\n").unwrap_err();
        assert!(err.line.is_some());
        let err = parse::<Doc>(Path::new("e.yaml"), "  \n").unwrap_err();
        assert!(err.message.contains("empty"));
    }
}
