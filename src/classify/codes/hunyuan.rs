//! Tencent Hunyuan's own error codes, read before the codes every dialect shares.

use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// Tencent Hunyuan: Tencent Cloud API 3.0 codes (`FailedOperation.*`, `LimitExceeded`,
/// `AuthFailure.*`), in `error.code` on the OpenAI-compatible API or in
/// `Response.Error.Code`, which Tencent Cloud returns inside an HTTP 200.
pub(super) fn class_of(e: &ErrorFields) -> Option<Class> {
    let code = e.code.as_deref()?;
    Some(match code {
        "FailedOperation.ResourcePackExhausted"
        | "FailedOperation.FreeResourcePackExhausted"
        | "FailedOperation.ServiceStopArrears"
        | "ResourceInsufficient.ChargeResourceExhaust" => Class::QuotaExhausted,
        // The engine's own request limit ("引擎层请求超过限额"): Hunyuan out of capacity.
        "FailedOperation.EngineServerLimitExceeded" => Class::Overloaded,
        "LimitExceeded" | "RequestLimitExceeded" => Class::RateLimited,
        c if c.starts_with("RequestLimitExceeded.") => Class::RateLimited,
        c if c.starts_with("AuthFailure") || c.starts_with("UnauthorizedOperation") => Class::Auth,
        // Not activated, stopped by its owner, not whitelisted, or no such model.
        "InvalidParameterValue.Model"
        | "FailedOperation.ServiceNotActivated"
        | "FailedOperation.ServiceStop"
        | "UnsupportedOperation.NonWhitelistAccount" => Class::ModelUnavailable,
        "FailedOperation.EngineServerError"
        | "FailedOperation.EngineRequestTimeout"
        | "InternalError" => Class::ServerError,
        _ => return None,
    })
}
