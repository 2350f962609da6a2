//! Moonshot (Kimi)'s own error codes, read before the codes every dialect shares.

use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// Moonshot Kimi: HTTP 429 splits three ways by `type`.
pub(super) fn class_of(e: &ErrorFields) -> Option<Class> {
    Some(match e.kind.as_deref()? {
        "engine_overloaded_error" => Class::Overloaded,
        "exceeded_current_quota_error" | "insufficient_balance_error" => Class::QuotaExhausted,
        "rate_limit_reached_error" => Class::RateLimited,
        "invalid_authentication_error" | "permission_denied_error" => Class::Auth,
        "resource_not_found_error" => Class::ModelUnavailable,
        "content_filter" => Class::ContentPolicy,
        "server_error" | "unexpected_output" => Class::ServerError,
        _ => return None,
    })
}
