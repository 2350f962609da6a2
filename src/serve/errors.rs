//! Error responses of the gateway, in the shape of the API the client speaks: OpenAI's
//! `{"error": {"message", "type", "code"}}`, or on `/v1/messages` Anthropic's
//! `{"type": "error", "error": {"type", "message"}}`. Every one carries
//! `x-should-retry: false`: the router already spent the request's recovery budget, and
//! the official SDKs honour the header, so their retries never stack on the router's.

use crate::core::clip::{clip, MESSAGE_BYTES};
use bytes::Bytes;
use serde_json::json;

/// Which API's shapes a response uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    OpenAi,
    Anthropic,
    /// OpenAI's Responses API (`/v1/responses`): OpenAI's error shape, typed events.
    Responses,
}

/// One error response, before rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    /// OpenAI `type` (the outcome's reason, or the gateway's own kind of error).
    pub kind: String,
    /// OpenAI `code`.
    pub code: String,
    pub message: String,
    /// `Retry-After`, in seconds.
    pub retry_after_secs: Option<u64>,
    /// OpenAI `param`: the request field the error is about.
    pub param: Option<String>,
}

impl ApiError {
    pub fn new(status: u16, kind: &str, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind: kind.to_string(),
            code: code.to_string(),
            message: message.into(),
            retry_after_secs: None,
            param: None,
        }
    }

    /// A request the gateway could not read or accept (bad JSON, a missing field, ...).
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "invalid_request_error", "invalid_request", message)
    }

    /// The body of the error for `flavor`.
    pub fn body(&self, flavor: Flavor) -> Vec<u8> {
        // A message may echo what a client sent (a model name, a field): bounded here,
        // once for every error the gateway writes. JSON escapes its control characters.
        let message = clip(&self.message, MESSAGE_BYTES);
        let v = match flavor {
            Flavor::OpenAi | Flavor::Responses => json!({"error": {
                "message": message, "type": self.kind, "code": self.code, "param": self.param,
            }}),
            // Anthropic's shape has no `code`; it rides beside `type`, which the SDKs
            // ignore, so a client can still tell `unsupported_by_chain` from the rest.
            Flavor::Anthropic => json!({"type": "error", "error": {
                "type": self.kind, "code": self.code, "message": message,
            }}),
        };
        serde_json::to_vec(&v).unwrap_or_default()
    }
}

/// `body` with every key registered in `secret` masked, spelled plainly or with JSON
/// escapes; the same bytes, uncopied, when none occurs (nearly always). A body that is
/// not UTF-8 is searched too (an upstream's stray byte must not shield a key beside
/// it), and comes back with the stray bytes replaced only when a key was masked.
pub fn mask_body(body: Bytes) -> Bytes {
    let text = match std::str::from_utf8(&body) {
        Ok(text) => text,
        Err(_) => {
            return match crate::core::secret::mask_json(&String::from_utf8_lossy(&body)) {
                std::borrow::Cow::Borrowed(_) => body,
                std::borrow::Cow::Owned(masked) => Bytes::from(masked),
            }
        }
    };
    match crate::core::secret::mask_json(text) {
        std::borrow::Cow::Borrowed(_) => body,
        std::borrow::Cow::Owned(masked) => Bytes::from(masked),
    }
}

/// `text` with every key in `keys` and anything shaped like a bearer key replaced by
/// `***`: an upstream's message may quote part of the key it refused, and it must not
/// reach the client or the log.
pub fn mask_keys(text: &str, keys: &[&str]) -> String {
    let mut out = crate::core::secret::mask_key_pieces(text).into_owned();
    for key in keys.iter().filter(|k| k.len() >= 4) {
        out = out.replace(key, "***");
    }
    crate::core::secret::mask_key_shaped(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_and_anthropic_shapes() {
        let e = ApiError::new(429, "capacity", "capacity", "every route is rate limited");
        let o: serde_json::Value = serde_json::from_slice(&e.body(Flavor::OpenAi)).unwrap();
        assert_eq!(o["error"]["type"], "capacity");
        assert_eq!(o["error"]["code"], "capacity");
        assert_eq!(o["error"]["message"], "every route is rate limited");
        let a: serde_json::Value = serde_json::from_slice(&e.body(Flavor::Anthropic)).unwrap();
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "capacity");
        assert_eq!(a["error"]["message"], "every route is rate limited");
        assert_eq!(a["error"]["code"], "capacity");
    }

    #[test]
    fn keys_are_masked_in_upstream_messages() {
        let m = mask_keys(
            "Incorrect API key provided: sk-proj-abcdEFGH1234ijkl. Also mykey-s3cr3t-value",
            &["mykey-s3cr3t-value"],
        );
        assert!(!m.contains("abcdEFGH1234"), "{m}");
        assert!(!m.contains("s3cr3t"), "{m}");
        assert!(m.contains("sk-***"), "{m}");
        // Short or embedded look-alikes are left alone.
        assert_eq!(
            mask_keys("task-force ask-me sk-1", &[]),
            "task-force ask-me sk-1"
        );
    }
}
