//! The codes every dialect shares (OpenAI, Anthropic and Gemini conventions), read
//! after the dialect's own table and before the HTTP status.

use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// Codes whose meaning every provider shares (OpenAI, Anthropic and Gemini conventions,
/// which most compatible APIs copy).
pub fn shared_rule(status: u16, e: &ErrorFields) -> Option<Class> {
    // Google's ErrorInfo reason for a bad key, on any dialect (see `resource_exhausted`).
    if e.reasons.iter().any(|r| r == "API_KEY_INVALID") {
        return Some(Class::Auth);
    }
    for code in e.codes().chain(e.status.as_deref()) {
        let class = match code {
            "insufficient_quota"
            | "credit_balance_exhausted"
            | "organization_spend_limit_exceeded"
            | "project_spend_limit_exceeded"
            | "billing_hard_limit_reached"
            | "billing_not_active"
            | "billing_error"
            | "insufficient_balance" => Class::QuotaExhausted,
            "RESOURCE_EXHAUSTED" => resource_exhausted(e),
            "rate_limit_exceeded" | "rate_limit_error" => Class::RateLimited,
            "invalid_api_key"
            | "authentication_error"
            | "permission_error"
            | "invalid_authentication"
            | "PERMISSION_DENIED"
            | "UNAUTHENTICATED"
            | "account_deactivated" => Class::Auth,
            // A region block: this route cannot serve, another provider may.
            "model_not_found"
            | "not_found_error"
            | "NOT_FOUND"
            | "model_not_available"
            | "ModelNotFound"
            | "DeploymentNotFound"
            | "model_decommissioned"
            | "unsupported_country_region_territory" => Class::ModelUnavailable,
            "context_length_exceeded" | "string_above_max_length" => Class::ContextOverflow,
            "content_policy_violation"
            | "content_filter"
            | "invalid_prompt"
            | "DataInspectionFailed"
            | "moderation_blocked" => Class::ContentPolicy,
            "overloaded_error" | "UNAVAILABLE" => Class::Overloaded,
            "api_error" | "INTERNAL" | "DEADLINE_EXCEEDED" => Class::ServerError,
            "invalid_output" => Class::InvalidOutput,
            "request_too_large" if status == 413 => Class::ContextOverflow,
            _ => continue,
        };
        return Some(class);
    }
    None
}

/// Google's `RESOURCE_EXHAUSTED`, split by its `QuotaFailure` details. A spent daily
/// quota is not fixed by waiting a minute, and a quota of 0 (a model this tier does not
/// include) never is. Shared, not only Gemini's: the same details come back through
/// Google's OpenAI-compatible endpoint and through gateways in front of it.
pub fn resource_exhausted(e: &ErrorFields) -> Class {
    let per_day = e.quota_ids.iter().any(|q| q.contains("PerDay"));
    let none_at_all = e.quota_values.iter().any(|v| v == "0");
    if per_day || none_at_all {
        Class::QuotaExhausted
    } else {
        Class::RateLimited
    }
}
