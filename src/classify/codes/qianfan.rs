//! Baidu Qianfan's own error codes, read before the codes every dialect shares.
//!
//! Source: the v2 code table, https://cloud.baidu.com/doc/qianfan-api/s/Om9b4yj3w
//! (audited for issue 21 against a public mirror of the page dated 2026-07-29, found
//! with find_string `account_overdue`), and bodies recorded from the live API in field
//! reports (cited where a code is).

use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// Baidu Qianfan v2 (OpenAI-compatible): snake_case codes. Three traps: a cluster-wide
/// limit is the platform out of capacity, not the caller too fast; and the content
/// audit and an account in arrears both answer 403, which the generic rules read as a
/// bad key.
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
        // Money, not a key: 403 `access_denied` "Access denied due to overdue account",
        // the doc's "账号已欠费（余额 <0），需充值后继续调用" (the balance is below zero;
        // top up to call again). The key is known and valid, so `auth` would send the
        // operator to rotate a working key while the bill stays unpaid. Recorded from the
        // live API: `{"error":{"code":"account_overdue","message":"Access denied due to
        // overdue account","type":"access_denied"},"id":"as-xp1jmkxe03"}` (public code,
        // find_string `"code":"account_overdue"`: a Qianfan port of iamclancyliang/pi-go
        // and two projects' notes of a real 403); RooCodeInc/Roo-Code#12309 ("403 Access
        // denied due to overdue account").
        "account_overdue" => Class::QuotaExhausted,
        "tokens_too_long" | "characters_too_long" => Class::ContextOverflow,
        "system_unsafe" | "user_setting_unsafe" | "functions_unsafe" | "image_url_unsafe" => {
            Class::ContentPolicy
        }
        "invalid_iam_token" | "invalid_appid" | "no_parameter_permission" => Class::Auth,
        // The router always names a model, so `invalid_model` means this name is not
        // served on this route (the doc's 401 form: "The model does not exist or you do
        // not have access to it"). `model_offline` is 403 `access_denied` "The model is
        // offline": the generic reading of a 403 is a bad key.
        "invalid_model" | "model_offline" => Class::ModelUnavailable,
        // The doc spells the image codes both `generation` and `genration`.
        "internal_error"
        | "dispatch_internal_error"
        | "image_generation_interal_error"
        | "image_genration_interal_error" => Class::ServerError,
        "malformed_json"
        | "invalid_messages"
        | "invalid_argument"
        | "method_not_supported"
        | "invalid_image_url"
        | "invalid_plugin_argument"
        | "invalid_image_generation_prompt"
        | "invalid_image_genration_prompt"
        | "invalid_image_generation_refer_image"
        | "invalid_image_genration_refer_image" => Class::InvalidRequest,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(code: &str) -> Option<Class> {
        class_of(&ErrorFields {
            code: Some(code.into()),
            ..ErrorFields::default()
        })
    }

    #[test]
    fn an_account_in_arrears_is_quota_exhausted_not_auth() {
        assert_eq!(class("account_overdue"), Some(Class::QuotaExhausted));
    }

    #[test]
    fn an_offline_model_is_model_unavailable_not_auth() {
        assert_eq!(class("model_offline"), Some(Class::ModelUnavailable));
    }

    #[test]
    fn the_image_and_method_codes_of_the_table_are_invalid_requests() {
        for code in [
            "method_not_supported",
            "invalid_image_url",
            "invalid_plugin_argument",
            "invalid_image_generation_prompt",
            "invalid_image_genration_prompt",
            "invalid_image_generation_refer_image",
            "invalid_image_genration_refer_image",
        ] {
            assert_eq!(class(code), Some(Class::InvalidRequest), "{code}");
        }
    }

    #[test]
    fn an_image_service_fault_is_a_server_error() {
        for code in [
            "image_generation_interal_error",
            "image_genration_interal_error",
        ] {
            assert_eq!(class(code), Some(Class::ServerError), "{code}");
        }
    }

    #[test]
    fn a_code_the_table_does_not_name_is_left_to_the_shared_rules() {
        assert_eq!(class("a_code_of_next_year"), None);
    }
}
