//! Mistral's own error codes, read before the codes every dialect shares.

use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// Mistral: numeric-string codes in a flat envelope.
pub(super) fn class_of(e: &ErrorFields) -> Option<Class> {
    let by_code = match e.code.as_deref().unwrap_or("") {
        "1300" => Some(Class::RateLimited),
        "3505" => Some(Class::Overloaded),
        "1500" => Some(Class::ModelUnavailable),
        "3051" => Some(Class::ContextOverflow),
        "3230" => Some(Class::InvalidRequest),
        _ => None,
    };
    by_code.or(match e.kind.as_deref()? {
        "service_tier_capacity_exceeded" => Some(Class::Overloaded),
        "invalid_model" => Some(Class::ModelUnavailable),
        _ => None,
    })
}
