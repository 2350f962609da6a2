//! The classifier: one upstream attempt → exactly one class, from protocol fields.
//!
//! Order of evidence: transport errors; then the dialect's own code table; then codes
//! every dialect shares (OpenAI / Anthropic / Gemini conventions); then the HTTP
//! status. Message text may only break a tie *inside* a status whose code is missing
//! or generic (`invalid_request_error`, `INVALID_ARGUMENT`, ...): it never overrides a
//! decisive code, so a reworded or translated message cannot change the class.

use crate::clock::UnixMs;
use crate::dialect::Dialect;
use crate::failure::{ErrorFields, Transport, UpstreamFailure};
use crate::hint::{retry_hint, Hint};
use crate::vocab::Class;

/// What the classifier concluded about one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub class: Class,
    pub hint: Option<Hint>,
}

/// Classifies one failed (or suspicious) attempt. Pure: `now` only resolves
/// date-valued hints.
pub fn classify(dialect: Dialect, f: &UpstreamFailure, now: UnixMs) -> Verdict {
    let retry_delay = f.error.as_ref().and_then(|e| e.retry_delay.as_deref());
    Verdict {
        class: class_of(dialect, f),
        hint: retry_hint(&f.headers, retry_delay, now),
    }
}

fn class_of(dialect: Dialect, f: &UpstreamFailure) -> Class {
    if let Some(t) = f.transport {
        return match t {
            Transport::Timeout => Class::Timeout,
            Transport::Network => Class::Network,
            Transport::StreamInterrupted => Class::StreamInterrupted,
            Transport::Unsupported => Class::ModelUnavailable,
        };
    }
    let Some(status) = f.status else {
        return Class::Network;
    };
    let err = f.error.as_ref();

    if (200..300).contains(&status) {
        return match err {
            // An error inside a 200 (OpenRouter mid-generation, some gateways): judge the
            // error by its own numeric code when it carries one.
            Some(e) => {
                let inner = e
                    .code
                    .as_deref()
                    .and_then(|c| c.parse::<u16>().ok())
                    .filter(|c| (400..600).contains(c));
                match inner {
                    Some(s) => by_codes(dialect, s, e).unwrap_or_else(|| by_status(s, Some(e))),
                    None => by_codes(dialect, 500, e).unwrap_or(Class::ServerError),
                }
            }
            // A 2xx the wire could not use (broken JSON, no choices, over the cap) is the
            // provider's fault, not the request's: another route may well answer.
            None if f.malformed.is_some() => Class::ServerError,
            None => Class::Ok,
        };
    }

    if let Some(e) = err {
        if let Some(c) = by_codes(dialect, status, e) {
            return c;
        }
    }
    by_status(status, err)
}

/// Decisive codes: the dialect's table first, then the shared conventions.
fn by_codes(dialect: Dialect, status: u16, e: &ErrorFields) -> Option<Class> {
    dialect_rule(dialect, status, e).or_else(|| shared_rule(status, e))
}

fn dialect_rule(dialect: Dialect, status: u16, e: &ErrorFields) -> Option<Class> {
    match dialect {
        Dialect::Dashscope => dashscope(status, e),
        Dialect::Gemini => gemini(status, e),
        Dialect::Anthropic => anthropic(status, e),
        Dialect::Azure => azure(e),
        Dialect::Zhipu => zhipu(e),
        Dialect::Moonshot => moonshot(e),
        Dialect::Groq => groq(status, e),
        Dialect::Openrouter => openrouter(status, e),
        Dialect::Mistral => mistral(e),
        Dialect::Openai | Dialect::Deepseek => None,
    }
}

/// Alibaba DashScope / Qwen. `Throttling.AllocationQuota` is a per-minute throttle that
/// may surface as `insufficient_quota` in OpenAI-compatible mode: on DashScope that
/// code is a rate limit, not an empty wallet.
fn dashscope(status: u16, e: &ErrorFields) -> Option<Class> {
    let codes: Vec<&str> = e.codes().collect();
    let any = |p: &dyn Fn(&str) -> bool| codes.iter().any(|c| p(c));
    if any(&|c| c.starts_with("Throttling")) {
        return Some(Class::RateLimited);
    }
    if status == 429 && any(&|c| c == "insufficient_quota") {
        return Some(Class::RateLimited);
    }
    if any(&|c| {
        c == "Arrearage"
            || c.starts_with("AllocationQuota.FreeTier")
            || c == "Arrearage.Overdue"
            || c == "QuotaExhausted"
    }) {
        return Some(Class::QuotaExhausted);
    }
    if any(&|c| c == "InvalidApiKey" || c == "invalid_api_key" || c.starts_with("AccessDenied")) {
        return Some(Class::Auth);
    }
    if any(&|c| c == "ModelNotFound" || c == "model_not_found" || c == "Model.AccessDenied") {
        return Some(Class::ModelUnavailable);
    }
    if any(&|c| c == "DataInspectionFailed" || c == "data_inspection_failed") {
        return Some(Class::ContentPolicy);
    }
    // DashScope's own 403 for an exhausted free tier sometimes carries only a generic
    // code; a tie broken inside the 403.
    if status == 403 && !has_decisive_code(e) {
        let m = e.message_lower();
        if m.contains("free tier") || m.contains("免费额度") || m.contains("quota") {
            return Some(Class::QuotaExhausted);
        }
    }
    None
}

/// Google Gemini API: canonical statuses plus `details`.
fn gemini(status: u16, e: &ErrorFields) -> Option<Class> {
    let canon = e.status.as_deref().unwrap_or("");
    if e.reasons
        .iter()
        .any(|r| r == "API_KEY_INVALID" || r == "API_KEY_SERVICE_BLOCKED")
    {
        return Some(Class::Auth);
    }
    match canon {
        "RESOURCE_EXHAUSTED" => {
            // A spent daily quota is not fixed by waiting a minute, and a quota of 0 (a model
            // this tier does not include) never is.
            let per_day = e.quota_ids.iter().any(|q| q.contains("PerDay"));
            let none_at_all = e.quota_values.iter().any(|v| v == "0");
            Some(if per_day || none_at_all {
                Class::QuotaExhausted
            } else {
                Class::RateLimited
            })
        }
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

/// Anthropic Messages: `error.type` decides, with two documented ties inside
/// `invalid_request_error`. (`request_too_large` 413 is `context_overflow`, as
/// decisions.md lists it, via the shared table.)
fn anthropic(status: u16, e: &ErrorFields) -> Option<Class> {
    match e.kind.as_deref()? {
        "invalid_request_error" => {
            let m = e.message_lower();
            Some(if m.contains("prompt is too long") {
                Class::ContextOverflow
            } else if m.contains("credit balance") || m.contains("usage limits") {
                // A reached spend limit or empty balance arrives as 400.
                Class::QuotaExhausted
            } else if status == 404 {
                Class::ModelUnavailable
            } else {
                Class::InvalidRequest
            })
        }
        "timeout_error" => Some(Class::ServerError),
        _ => None, // the shared table knows the rest of Anthropic's types
    }
}

/// Azure OpenAI: `code` is a string such as `"429"`, with no `type`.
fn azure(e: &ErrorFields) -> Option<Class> {
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

/// Zhipu GLM business codes, which ride inside HTTP 400/401/429/500 and decide the
/// class on their own: one 429 can be an empty balance (1113) or a throttle (1302).
fn zhipu(e: &ErrorFields) -> Option<Class> {
    let code = e.code.as_deref()?;
    Some(match code {
        "1000" | "1001" | "1002" | "1003" | "1004" | "1100" | "1110" | "1111" | "1112" | "1120"
        | "1121" | "1220" => Class::Auth,
        "1113" | "1304" | "1308" | "1309" | "1310" | "1313" | "1314" | "1316" | "1317" | "1318"
        | "1319" | "1320" | "1321" => Class::QuotaExhausted,
        "1302" | "1303" => Class::RateLimited,
        "1305" | "1312" => Class::Overloaded,
        // 1311: the subscription plan does not include this model (arrives as a 429).
        "1211" | "1221" | "1222" | "1311" => Class::ModelUnavailable,
        "1261" => Class::ContextOverflow,
        "1301" => Class::ContentPolicy,
        // 1210 ("parameter error") and 1200 ("call failed") are generic: status and text decide.
        "1212" | "1213" | "1214" | "1215" => Class::InvalidRequest,
        "500" | "1230" | "1231" | "1234" => Class::ServerError,
        _ => return None,
    })
}

/// Moonshot Kimi: HTTP 429 splits three ways by `type`.
fn moonshot(e: &ErrorFields) -> Option<Class> {
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

/// Groq: OpenAI-shaped, plus a non-standard 498 when flex-tier capacity is exceeded, and
/// a 413 "request too large" (tagged `rate_limit_exceeded`) for a request larger than the
/// per-minute limit: waiting never makes it fit this route.
fn groq(status: u16, e: &ErrorFields) -> Option<Class> {
    match status {
        498 => Some(Class::Overloaded),
        413 => Some(Class::ContextOverflow),
        _ if e.has_code("capacity_exceeded") => Some(Class::Overloaded),
        _ => None,
    }
}

/// Mistral: numeric-string codes in a flat envelope.
fn mistral(e: &ErrorFields) -> Option<Class> {
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

/// OpenRouter: `error.code` repeats the HTTP status as a number, and
/// `metadata.limit_source` tells a full in-flight budget (clears in seconds) from a
/// spent key limit.
fn openrouter(status: u16, e: &ErrorFields) -> Option<Class> {
    let meta = |m: &str| e.metadata.iter().any(|x| x == m);
    if meta("openrouter_in_flight_budget") {
        return Some(Class::RateLimited);
    }
    if meta("openrouter_key_limit") || meta("openrouter_workspace_limit") {
        return Some(Class::QuotaExhausted);
    }
    let code = e
        .code
        .as_deref()
        .and_then(|c| c.parse::<u16>().ok())
        .unwrap_or(status);
    Some(match code {
        402 => Class::QuotaExhausted,
        // Moderation and guardrail blocks.
        403 => Class::ContentPolicy,
        408 | 502 => Class::ServerError,
        503 => Class::Overloaded,
        _ => return None,
    })
}

/// Codes whose meaning every provider shares (OpenAI, Anthropic and Gemini conventions,
/// which most compatible APIs copy).
fn shared_rule(status: u16, e: &ErrorFields) -> Option<Class> {
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
            "rate_limit_exceeded" | "rate_limit_error" | "RESOURCE_EXHAUSTED" => Class::RateLimited,
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

/// Codes that say nothing about which class applies; only these let text break a tie.
fn is_generic_code(c: &str) -> bool {
    matches!(
        c,
        "invalid_request_error"
            | "invalid_request"
            | "unknown_error"
            | "bad_request"
            | "BadRequest"
            | "InvalidParameter"
            | "invalid_parameter_error"
            | "INVALID_ARGUMENT"
            | "error"
            | "server_error"
            | "requests"
            | "tokens"
    ) || c.parse::<u16>().is_ok()
}

fn has_decisive_code(e: &ErrorFields) -> bool {
    e.codes()
        .chain(e.status.as_deref())
        .any(|c| !is_generic_code(c))
}

/// The HTTP status decides, with text breaking a tie only where the code is missing or
/// generic (e.g. DeepSeek's context overflow, DashScope's "Model not exist.").
fn by_status(status: u16, err: Option<&ErrorFields>) -> Class {
    match status {
        400 => {
            let tie_text = err
                .filter(|e| !has_decisive_code(e))
                .map(|e| e.message_lower())
                .unwrap_or_default();
            if mentions_context_overflow(&tie_text) {
                Class::ContextOverflow
            } else if mentions_missing_model(&tie_text, err) {
                Class::ModelUnavailable
            } else if mentions_content_risk(&tie_text) {
                Class::ContentPolicy
            } else {
                Class::InvalidRequest
            }
        }
        401 | 403 => Class::Auth,
        402 => Class::QuotaExhausted,
        404 => Class::ModelUnavailable,
        408 | 409 | 425 => Class::ServerError,
        413 => Class::ContextOverflow,
        // 424: a dependency the request named (a remote MCP server) failed.
        422 | 424 => Class::InvalidRequest,
        429 => Class::RateLimited,
        451 => Class::ContentPolicy,
        503 | 529 => Class::Overloaded,
        500..=599 => Class::ServerError,
        _ => Class::Unknown,
    }
}

fn mentions_context_overflow(m: &str) -> bool {
    [
        "maximum context length",
        "context length",
        "context window",
        "prompt is too long",
        "input token count",
        "too many tokens",
        "exceeds the maximum number of tokens",
        "exceeded model token limit",
        "input token length too long",
        "range of input length",
        "上下文长度",
    ]
    .iter()
    .any(|p| m.contains(p))
}

/// DeepSeek's own safety refusal arrives as a 400 with a generic code.
fn mentions_content_risk(m: &str) -> bool {
    ["content exists risk", "inappropriate content", "敏感内容"]
        .iter()
        .any(|p| m.contains(p))
}

fn mentions_missing_model(m: &str, err: Option<&ErrorFields>) -> bool {
    let param_is_model = err.and_then(|e| e.param.as_deref()) == Some("model");
    m.contains("model not exist")
        || m.contains("model_not_found")
        || m.contains("not a valid model id")
        || m.contains("模型不存在")
        || (m.contains("model") && (m.contains("does not exist") || m.contains("not found")))
        || (param_is_model && m.contains("does not exist"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::Headers;

    fn fail(status: u16, body: &str) -> UpstreamFailure {
        UpstreamFailure::from_response(status, Headers::default(), body.as_bytes())
    }

    fn class(d: Dialect, status: u16, body: &str) -> Class {
        classify(d, &fail(status, body), 0).class
    }

    #[test]
    fn the_same_code_means_two_classes_on_two_providers() {
        let body = r#"{"error":{"message":"Allocated quota exceeded","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        assert_eq!(class(Dialect::Openai, 429, body), Class::QuotaExhausted);
        assert_eq!(class(Dialect::Dashscope, 429, body), Class::RateLimited);
    }

    #[test]
    fn misworded_429_is_a_rate_limit() {
        let body =
            r#"{"error":{"message":"请登录platform进行实名认证以获取更高rpm","type":"requests"}}"#;
        for d in Dialect::ALL {
            assert_eq!(class(*d, 429, body), Class::RateLimited, "{d}");
        }
    }

    #[test]
    fn unusable_bodies_are_still_classified_by_status() {
        assert_eq!(
            class(
                Dialect::Openai,
                502,
                "<html><h1>502 Bad Gateway</h1></html>"
            ),
            Class::ServerError
        );
        assert_eq!(class(Dialect::Openai, 429, ""), Class::RateLimited);
        assert_eq!(
            class(Dialect::Openai, 503, r#"{"error":{"mess"#),
            Class::Overloaded
        );
        assert_eq!(class(Dialect::Openai, 418, ""), Class::Unknown);
    }

    #[test]
    fn transport_failures() {
        let t = UpstreamFailure::transport(Transport::Timeout, "deadline");
        assert_eq!(classify(Dialect::Openai, &t, 0).class, Class::Timeout);
        let n = UpstreamFailure::transport(Transport::Network, "reset");
        assert_eq!(classify(Dialect::Gemini, &n, 0).class, Class::Network);
    }

    #[test]
    fn text_breaks_ties_only_inside_a_generic_code() {
        let deepseek = r#"{"error":{"message":"This model's maximum context length is 65536 tokens.","type":"invalid_request_error","code":"invalid_request_error"}}"#;
        assert_eq!(
            class(Dialect::Deepseek, 400, deepseek),
            Class::ContextOverflow
        );
        // A decisive code wins over text that says otherwise.
        let policy = r#"{"error":{"message":"maximum context length exceeded","type":"invalid_request_error","code":"content_policy_violation"}}"#;
        assert_eq!(class(Dialect::Openai, 400, policy), Class::ContentPolicy);
    }

    #[test]
    fn ok_and_errors_inside_200() {
        assert_eq!(class(Dialect::Openai, 200, r#"{"choices":[]}"#), Class::Ok);
        let or = r#"{"error":{"code":502,"message":"upstream failed"}}"#;
        assert_eq!(class(Dialect::Openrouter, 200, or), Class::ServerError);
        let mut garbled = fail(200, "not json");
        garbled.malformed = Some("not JSON".into());
        assert_eq!(
            classify(Dialect::Openai, &garbled, 0).class,
            Class::ServerError
        );
    }
}
