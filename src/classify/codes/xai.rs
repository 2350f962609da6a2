//! xAI's own error codes, read before the codes every dialect shares.

use crate::classify::evidence::{mentions_any, mentions_missing_model};
use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// xAI: `{"code": "<gRPC status text>", "error": "<message>"}`. The code names only the
/// gRPC status ("Client specified an invalid argument"), so inside a status the message
/// breaks the tie: a bad key is a 400, spent credits a 403 or 429.
pub(super) fn class_of(status: u16, e: &ErrorFields) -> Option<Class> {
    let m = e.message_lower();
    let credits = || {
        mentions_any(
            &m,
            &[
                "used all available credits",
                "monthly spending limit",
                "ran out of credits",
                "purchase more credits",
            ],
        )
    };
    match status {
        400 if m.contains("incorrect api key") || m.contains("invalid api key") => {
            Some(Class::Auth)
        }
        400 if m.contains("maximum prompt length") => Some(Class::ContextOverflow),
        400 if mentions_missing_model(&m, Some(e)) => Some(Class::ModelUnavailable),
        403 | 429 if credits() => Some(Class::QuotaExhausted),
        _ => None,
    }
}
