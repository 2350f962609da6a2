//! Baidu Qianfan's own error codes, read before the codes every dialect shares.

use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// Baidu Qianfan v2 (OpenAI-compatible): snake_case codes. Two traps: a cluster-wide
/// limit is the platform out of capacity, not the caller too fast; and the content
/// audit answers 403, which the generic rules read as a bad key.
pub(super) fn class_of(e: &ErrorFields) -> Option<Class> {
    let code = e.code.as_deref()?;
    Some(match code {
        c if c.starts_with("cluster_") && c.ends_with("rate_limit_exceeded") => Class::Overloaded,
        "rpm_rate_limit_exceeded"
        | "tpm_rate_limit_exceeded"
        | "input_tpm_rate_limit_exceeded"
        | "output_tpm_rate_limit_exceeded"
        | "user_rate_limit_exceeded"
        | "preemptible_rate_limit_exceeded"
        | "Offline_batch_reasoning_refused" => Class::RateLimited,
        "tokens_too_long" | "characters_too_long" => Class::ContextOverflow,
        "system_unsafe" | "user_setting_unsafe" | "functions_unsafe" | "image_url_unsafe" => {
            Class::ContentPolicy
        }
        "invalid_iam_token" | "invalid_appid" | "no_parameter_permission" => Class::Auth,
        // The router always names a model, so `invalid_model` means this name is not
        // served on this route.
        "invalid_model" => Class::ModelUnavailable,
        "internal_error" | "dispatch_internal_error" => Class::ServerError,
        "malformed_json" | "invalid_messages" | "invalid_argument" => Class::InvalidRequest,
        _ => return None,
    })
}
