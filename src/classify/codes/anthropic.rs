//! Anthropic's own error codes, read before the codes every dialect shares.

use crate::classify::evidence::mentions_context_overflow;
use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// Anthropic Messages: `error.type` decides, with two documented ties inside
/// `invalid_request_error`. (`request_too_large` 413 is `context_overflow`, as
/// decisions.md lists it, via the shared table.) `invalid_request_error` is the type of
/// Anthropic's 400s; under a status that says more (a 401 from an Anthropic-compatible
/// server that spells a bad key so, as OpenAI does), the status decides: read as a bad
/// request, a revoked key failed each request closed and was never retired.
pub(super) fn class_of(status: u16, e: &ErrorFields) -> Option<Class> {
    match e.kind.as_deref()? {
        // Not under a status that says the key or the rate: an in-stream error event
        // (read as a 500) and a 200 with an error object keep the type's meaning.
        "invalid_request_error" if !matches!(status, 401 | 403 | 429) => {
            let m = e.message_lower();
            // Two wordings of an overflow: "prompt is too long: 208656 tokens > 200000
            // maximum", and, when the prompt fits but not with the output reserved,
            // "input length and `max_tokens` exceed context limit: 188059 + 20000 >
            // 200000" (quoted by many public clients: find_string "exceed context limit: ").
            let overflow = m.contains("prompt is too long") || mentions_context_overflow(&m);
            Some(if overflow {
                Class::ContextOverflow
            } else if m.contains("credit balance") || m.contains("usage limits") {
                // A reached spend limit or empty balance arrives as 400.
                Class::QuotaExhausted
            } else if status == 404 {
                Class::ModelUnavailable
            } else {
                Class::InvalidRequest
            })
        }
        "timeout_error" => Some(Class::ServerError),
        _ => None, // the shared table knows the rest of Anthropic's types
    }
}
