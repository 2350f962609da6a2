//! The classifier: one upstream attempt → exactly one class, from protocol fields.
//!
//! Order of evidence: transport errors; then the dialect's own code table; then codes
//! every dialect shares (OpenAI / Anthropic / Gemini conventions); then the HTTP
//! status. Message text may only break a tie *inside* a status whose code is missing
//! or generic (`invalid_request_error`, `INVALID_ARGUMENT`, ...): it never overrides a
//! decisive code, so a reworded or translated message cannot change the class.

use crate::classify::codes::dialect_rule;
use crate::classify::dialect::Dialect;
use crate::classify::evidence::{
    has_decisive_code, mentions_any, mentions_content_risk, mentions_context_overflow,
    mentions_missing_model,
};
use crate::classify::failure::{ErrorFields, Transport, UpstreamFailure};
use crate::classify::hint::{retry_hint, stated_reset, Hint};
use crate::classify::shared::shared_rule;
use crate::core::clock::UnixMs;
use crate::core::vocab::Class;

/// What the classifier concluded about one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub class: Class,
    pub hint: Option<Hint>,
}

/// Classifies one failed (or suspicious) attempt. Pure: `now` only resolves
/// date-valued hints.
pub fn classify(dialect: Dialect, f: &UpstreamFailure, now: UnixMs) -> Verdict {
    // Google attaches a RetryInfo of seconds to every RESOURCE_EXHAUSTED, a quota of 0
    // included (a model this key's tier does not have: "limit: 0"). No wait brings that
    // one back, so its delay is no hint, and the route retires instead of being called
    // again every 20 s. A spent daily quota keeps its RetryInfo: decisions.md reads it as
    // the stated reset, and the route comes back by itself.
    let retry_delay = f
        .error
        .as_ref()
        .filter(|e| !e.quota_values.iter().any(|v| v == "0"))
        .and_then(|e| e.retry_delay.as_deref());
    let resets_at = f.error.as_ref().and_then(|e| e.resets_at.as_deref());
    Verdict {
        class: class_of(dialect, f),
        hint: retry_hint(&f.headers, retry_delay, now).or_else(|| stated_reset(resets_at, now)),
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
    dialect_status(dialect, status, err).unwrap_or_else(|| by_status(status, err))
}

/// Decisive codes: the dialect's table first, then the shared conventions.
fn by_codes(dialect: Dialect, status: u16, e: &ErrorFields) -> Option<Class> {
    dialect_rule(dialect, status, e).or_else(|| shared_rule(status, e))
}

/// Statuses a dialect documents with a meaning of its own, applied when no code
/// decided (including bodies with no usable error object at all).
fn dialect_status(dialect: Dialect, status: u16, err: Option<&ErrorFields>) -> Option<Class> {
    let text = || err.map(|e| e.message_lower()).unwrap_or_default();
    match (dialect, status) {
        // Together documents its 403 as "input token count + max_tokens must be less than
        // the context length": the generic reading (auth) would retire a healthy route.
        (Dialect::Together, 403) => Some(Class::ContextOverflow),
        // Fireworks 412: the account is suspended, or a LoRA adapter failed to load. Either
        // way this route cannot serve and another may; the generic reading (unknown) would
        // fail the request closed.
        (Dialect::Fireworks, 412) => Some(if mentions_any(&text(), &["lora", "failed to load"]) {
            Class::ModelUnavailable
        } else {
            Class::QuotaExhausted
        }),
        _ => None,
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::failure::Headers;

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
    fn an_empty_message_beside_a_decisive_code_still_lets_the_code_decide() {
        // Found by the rewording property: SiliconFlow's empty-balance 403 with "" as its
        // message was read as auth, which retires the route for good.
        let body = r#"{"code":30001,"message":"","data":null}"#;
        assert_eq!(
            class(Dialect::Siliconflow, 403, body),
            Class::QuotaExhausted
        );
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

    /// Guards Google's quota details read through a non-Gemini dialect (Google's
    /// OpenAI-compatible endpoint wraps the same error in an array): a per-day quota was
    /// a rate limit there, and a bad key a bad request.
    #[test]
    fn google_quota_details_decide_on_every_dialect() {
        let per_day = r#"[{"error":{"code":429,"message":"You exceeded your current quota","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaValue":"20"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"38s"}]}}]"#;
        let per_minute = per_day.replace("PerDay", "PerMinute");
        let bad_key = r#"[{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}]"#;
        for d in [Dialect::Openai, Dialect::Gemini, Dialect::Openrouter] {
            assert_eq!(class(d, 429, per_day), Class::QuotaExhausted, "{d}");
            assert_eq!(class(d, 429, &per_minute), Class::RateLimited, "{d}");
            assert_eq!(class(d, 400, bad_key), Class::Auth, "{d}");
        }
    }

    /// A spent daily quota's RetryInfo is its stated reset; a quota of 0 has none, so the
    /// delay Google attaches to it is no hint (the route retires, never cools for it).
    #[test]
    fn a_zero_quotas_retry_delay_is_no_hint_and_a_daily_quotas_is() {
        let per_day = r#"{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaValue":"20"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"38s"}]}}"#;
        let zero = per_day
            .replace("\"20\"", "\"0\"")
            .replace("PerDay", "PerMinute");
        let day = classify(Dialect::Gemini, &fail(429, per_day), 0);
        assert_eq!(day.class, Class::QuotaExhausted);
        assert_eq!(
            day.hint,
            Some(Hint {
                ms: 38_000,
                source: crate::classify::hint::HintSource::RetryInfo
            })
        );
        let none = classify(Dialect::Gemini, &fail(429, &zero), 0);
        assert_eq!((none.class, none.hint), (Class::QuotaExhausted, None));
    }

    /// Guards Anthropic's second overflow wording, which was read as invalid_request
    /// (fail closed) where an approved route with a larger window could answer.
    #[test]
    fn anthropic_input_plus_max_tokens_over_the_context_limit_is_context_overflow() {
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 188059 + 20000 > 200000, decrease input length or `max_tokens` and try again"},"request_id":"req_1"}"#;
        assert_eq!(class(Dialect::Anthropic, 400, body), Class::ContextOverflow);
        let other = r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"}}"#;
        assert_eq!(class(Dialect::Anthropic, 400, other), Class::InvalidRequest);
    }

    /// Guards a 401 whose Anthropic-shaped body spells a bad key with the type of a
    /// bad request (Anthropic-compatible servers do, as OpenAI does): it was read as
    /// invalid_request, so the request failed closed and the dead key was never retired.
    #[test]
    fn an_anthropic_401_typed_invalid_request_error_is_auth() {
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"invalid x-api-key"}}"#;
        assert_eq!(class(Dialect::Anthropic, 401, body), Class::Auth);
        assert_eq!(class(Dialect::Anthropic, 403, body), Class::Auth);
        assert_eq!(class(Dialect::Anthropic, 429, body), Class::RateLimited);
        assert_eq!(class(Dialect::Anthropic, 400, body), Class::InvalidRequest);
        // An in-stream error event is read as a 500: its type keeps its meaning there.
        let overflow = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208656 tokens > 200000 maximum"}}"#;
        assert_eq!(
            class(Dialect::Anthropic, 500, overflow),
            Class::ContextOverflow
        );
        assert_eq!(class(Dialect::Anthropic, 500, body), Class::InvalidRequest);
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
