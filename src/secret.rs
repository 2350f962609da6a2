//! API keys. A `Secret` can be sent in a header and nothing else: it has no `Display`,
//! its `Debug` is redacted, and it is never serialized, so a key cannot reach output,
//! logs, traces, state or errors by accident.

use std::fmt;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
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

#[cfg(test)]
mod tests {
    #[test]
    fn debug_is_redacted() {
        let s = super::Secret::new("sk-live-123");
        assert!(!format!("{s:?}").contains("sk-live"));
    }
}
