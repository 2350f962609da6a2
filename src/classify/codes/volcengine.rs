//! Volcengine (Doubao)'s own error codes, read before the codes every dialect shares.

use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// ByteDance Volcengine Ark: `error.code` is a PascalCase code, `error.type` the HTTP
/// reason (`TooManyRequests`). One 429 means four things: a throttle
/// (`RateLimitExceeded.*`), the platform out of capacity (`ServerOverloaded`), a spent
/// free quota (`QuotaExceeded`) or the account's self-set inference cap
/// (`SetLimitExceeded`); and an empty balance is a 403 (`AccountOverdueError`).
pub(super) fn class_of(e: &ErrorFields) -> Option<Class> {
    let code = e.code.as_deref()?;
    Some(match code {
        "ServerOverloaded" => Class::Overloaded,
        "QuotaExceeded" | "SetLimitExceeded" | "AccountOverdueError" => Class::QuotaExhausted,
        "OperationDenied.ServiceOverdue" => Class::QuotaExhausted,
        c if c.starts_with("RateLimitExceeded")
            || c.starts_with("ModelAccount")
            || c == "AccountRateLimitExceeded"
            || c == "RequestBurstTooFast" =>
        {
            Class::RateLimited
        }
        "AuthenticationError" | "AccessDenied" => Class::Auth,
        // A closed endpoint, a model the account has not activated, or a model id the
        // account may not call directly: this route cannot serve it.
        "InvalidEndpointOrModel.NotFound"
        | "InvalidEndpoint.NotFound"
        | "InvalidEndpoint.ClosedEndpoint"
        | "InvalidEndpointOrModel.ModelIDAccessDisabled"
        | "ModelNotOpen"
        | "OperationDenied.ServiceNotOpen"
        | "UnsupportedModel" => Class::ModelUnavailable,
        c if c.contains("SensitiveContentDetected") || c.ends_with("RiskDetection") => {
            Class::ContentPolicy
        }
        "InternalServiceError" => Class::ServerError,
        // MissingParameter / InvalidParameter are generic: status and text decide.
        _ => return None,
    })
}
