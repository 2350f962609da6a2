//! Gemini's own error codes, read before the codes every dialect shares.

use crate::classify::failure::ErrorFields;
use crate::classify::shared::resource_exhausted;
use crate::core::vocab::Class;

/// Google Gemini API: canonical statuses plus `details`.
pub(super) fn class_of(status: u16, e: &ErrorFields) -> Option<Class> {
    let canon = e.status.as_deref().unwrap_or("");
    if e.reasons
        .iter()
        .any(|r| r == "API_KEY_INVALID" || r == "API_KEY_SERVICE_BLOCKED")
    {
        return Some(Class::Auth);
    }
    match canon {
        "RESOURCE_EXHAUSTED" => Some(resource_exhausted(e)),
        "PERMISSION_DENIED" | "UNAUTHENTICATED" => Some(Class::Auth),
        "NOT_FOUND" => Some(Class::ModelUnavailable),
        "UNAVAILABLE" => Some(Class::Overloaded),
        "INTERNAL" | "DEADLINE_EXCEEDED" | "UNKNOWN" => Some(Class::ServerError),
        // Free tier not offered in the caller's region: this route cannot serve, but another
        // provider may — retire it and move on rather than fail the request as `auth`.
        "FAILED_PRECONDITION" if status == 400 => Some(Class::ModelUnavailable),
        _ => None,
    }
}
