//! Azure OpenAI's own error codes, read before the codes every dialect shares.

use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// Azure OpenAI: `code` is a string such as `"429"`, with no `type`.
pub(super) fn class_of(e: &ErrorFields) -> Option<Class> {
    let code = e.code.as_deref().unwrap_or("");
    if e.inner_code.as_deref() == Some("ResponsibleAIPolicyViolation") || code == "content_filter" {
        return Some(Class::ContentPolicy);
    }
    match code {
        "429" => Some(Class::RateLimited),
        "DeploymentNotFound" | "OperationNotSupported" | "404" => Some(Class::ModelUnavailable),
        "401" | "InvalidAuthenticationToken" | "PermissionDenied" | "403" => Some(Class::Auth),
        "InsufficientQuota" => Some(Class::QuotaExhausted),
        "500" => Some(Class::ServerError),
        _ => None,
    }
}
