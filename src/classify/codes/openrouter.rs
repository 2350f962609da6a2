//! OpenRouter's own error codes, read before the codes every dialect shares.

use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// OpenRouter: `error.code` repeats the HTTP status as a number, and
/// `metadata.limit_source` tells a full in-flight budget (clears in seconds) from a
/// spent key limit.
pub(super) fn class_of(status: u16, e: &ErrorFields) -> Option<Class> {
    let meta = |m: &str| e.metadata.iter().any(|x| x == m);
    if meta("openrouter_in_flight_budget") {
        return Some(Class::RateLimited);
    }
    if meta("openrouter_key_limit") || meta("openrouter_workspace_limit") {
        return Some(Class::QuotaExhausted);
    }
    let code = e
        .code
        .as_deref()
        .and_then(|c| c.parse::<u16>().ok())
        .unwrap_or(status);
    Some(match code {
        402 => Class::QuotaExhausted,
        // Moderation and guardrail blocks.
        403 => Class::ContentPolicy,
        408 | 502 => Class::ServerError,
        503 => Class::Overloaded,
        _ => return None,
    })
}
