//! Property tests where inputs are open-ended: the classifier and hint parsers never
//! panic and stay in bounds; a reworded or translated message never changes a class
//! that status plus code decide; a 2xx is never retried; retirement never ends by time.

use poolctl::classify::classifier::classify;
use poolctl::classify::dialect::Dialect;
use poolctl::classify::failure::{Headers, UpstreamFailure};
use poolctl::classify::hint::{parse_duration, parse_retry_after, retry_hint, MAX_HINT_MS};
use poolctl::core::vocab::{Action, CallPath, Class, HealthState};
use poolctl::policy::budget::Spent;
use poolctl::policy::card::Policy;
use poolctl::policy::decide::{decide, Situation};
use poolctl::policy::health::Health;
use proptest::prelude::*;

fn dialect() -> impl Strategy<Value = Dialect> {
    prop::sample::select(Dialect::ALL.to_vec())
}

fn header_name() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "retry-after",
        "retry-after-ms",
        "x-ratelimit-reset-requests",
        "x-ratelimit-reset-tokens",
        "anthropic-ratelimit-requests-reset",
        "anthropic-ratelimit-tokens-reset",
        "x-request-id",
        "content-type",
    ])
    .prop_map(str::to_string)
}

/// Header values: garbage, numbers of every sign and size, dates, durations.
fn header_value() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,40}",
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| n.to_string()),
        "[0-9]{1,3}(h|m|s|ms|us|ns){1,3}",
        "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z",
        Just("Wed, 21 Oct 2015 07:28:00 GMT".to_string()),
        Just("Fri, 31 Dec 9999 23:59:59 GMT".to_string()),
    ]
}

/// Bodies: random bytes, or error-shaped JSON with random fields.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let json_body = (
        prop::option::of(".{0,20}"),
        prop::option::of(prop_oneof![".{0,20}".prop_map(serde_json::Value::from), any::<i64>().prop_map(serde_json::Value::from)]),
        prop::option::of(".{0,20}"),
        ".{0,60}",
        prop::option::of("[A-Za-z]{0,12}"),
    )
        .prop_map(|(kind, code, status, message, delay)| {
            let mut details = vec![];
            if let Some(d) = delay {
                details.push(serde_json::json!({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": d}));
            }
            serde_json::json!({"error": {"type": kind, "code": code, "status": status, "message": message, "details": details}})
                .to_string()
                .into_bytes()
        });
    // Errors inside a body's own fields (MiniMax `base_resp`, Tencent `Response.Error`).
    let embedded = (
        prop_oneof![any::<i64>().prop_map(serde_json::Value::from), ".{0,12}".prop_map(serde_json::Value::from)],
        ".{0,40}",
        any::<bool>(),
    )
        .prop_map(|(code, message, tencent)| {
            let v = if tencent {
                serde_json::json!({"Response": {"Error": {"Code": code, "Message": message}}})
            } else {
                serde_json::json!({"choices": null, "base_resp": {"status_code": code, "status_msg": message}})
            };
            v.to_string().into_bytes()
        });
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..300),
        json_body,
        embedded
    ]
}

proptest! {
    #[test]
    fn classify_never_panics_and_hints_stay_in_bounds(
        d in dialect(),
        status in 0u16..1000,
        headers in prop::collection::vec((header_name(), header_value()), 0..6),
        raw in body(),
        now in any::<i64>(),
    ) {
        let f = UpstreamFailure::from_response(status, Headers::from_pairs(headers), &raw);
        let v = classify(d, &f, now);
        if let Some(h) = v.hint {
            prop_assert!(h.ms <= MAX_HINT_MS);
        }
    }

    #[test]
    fn hint_parsers_never_panic(s in ".{0,64}", now in any::<i64>()) {
        if let Some(ms) = parse_retry_after(&s, now) { prop_assert!(ms <= MAX_HINT_MS); }
        if let Some(ms) = parse_duration(&s) { prop_assert!(ms <= MAX_HINT_MS); }
        let h = Headers::from_pairs([("retry-after".to_string(), s.clone()), ("x-ratelimit-reset-tokens".to_string(), s)]);
        if let Some(hint) = retry_hint(&h, None, now) { prop_assert!(hint.ms <= MAX_HINT_MS); }
    }

    /// Status plus a decisive code fix the class; no message can move it.
    #[test]
    fn rewording_never_changes_a_class_that_status_and_code_decide(
        case in prop::sample::select(decisive_cases()),
        message in prop_oneof![
            ".{0,80}",
            Just("请登录platform进行实名认证以获取更高rpm".to_string()),
            Just("Model not exist.".to_string()),
            Just("This model's maximum context length is 4097 tokens".to_string()),
            Just("You exceeded your current quota".to_string()),
            Just("rate limit reached, too many requests (429)".to_string()),
            Just("prompt is too long".to_string()),
            Just("Content Exists Risk".to_string()),
            Just("Incorrect API key provided".to_string()),
            Just("Your team has either used all available credits or reached its monthly spending limit".to_string()),
            Just("number of input tokens (150019) has exceeded max_prompt_tokens (98304) limit.".to_string()),
            Just("The LoRA model failed to load".to_string()),
            Just("资源包余量已用尽，请购买资源包或开通后付费。".to_string()),
            Just("引擎层请求超过限额；请稍后重试。".to_string()),
            Just("当前账号欠费，如需继续调用，请前往费用中心进行充值".to_string()),
            Just("服务资源紧张，请稍后重试".to_string()),
            Just("余额不足".to_string()),
        ],
    ) {
        let (d, status, template, want) = case;
        let body = template.replace("MSG", &serde_json::to_string(&message).unwrap());
        let f = UpstreamFailure::from_response(status, Headers::default(), body.as_bytes());
        prop_assert_eq!(classify(d, &f, 0).class, want, "{} {} {}", d, status, body);
    }

    /// The same for errors a dialect reports inside an HTTP 200 (MiniMax `base_resp`,
    /// Tencent Cloud `Response.Error`): the code decides, whatever the message says.
    #[test]
    fn rewording_never_changes_the_class_of_an_error_inside_a_200(
        case in prop::sample::select(in_band_cases()),
        message in prop_oneof![
            ".{0,80}",
            Just("insufficient balance".to_string()),
            Just("rate limit exceeded(RPM)".to_string()),
            Just("余额不足".to_string()),
            Just("触发限流，请稍后再试".to_string()),
            Just("invalid api key".to_string()),
        ],
    ) {
        let (d, template, want) = case;
        let body = template.replace("MSG", &serde_json::to_string(&message).unwrap());
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let fields = poolctl::classify::in_band::error_in_success(d, &v);
        prop_assert!(fields.is_some(), "{} {}", d, body);
        let bad = poolctl::wire::BadSuccess::Failed(Box::new(fields.unwrap()));
        let f = poolctl::wire::bad_success(200, Headers::default(), body.as_bytes(), bad);
        let got = classify(d, &f, 0);
        prop_assert_eq!(got.class, want, "{} {}", d, body);
        prop_assert_eq!(f.status, Some(200));
    }

    #[test]
    fn a_2xx_is_never_retried(
        retries in 0u32..5,
        attempts in 0u32..10,
        elapsed in 0u64..100_000,
        fallback in any::<bool>(),
        jitter in 0.0f64..1.0,
    ) {
        let p = Policy::default();
        let s = Situation {
            class: Class::Ok, path: CallPath::Chat, hint: None, policy: &p,
            spent: Spent { attempts, elapsed_ms: elapsed, extra_cost_usd: 0.0 },
            retries_on_route: retries, visible_token: false, fallback_available: fallback,
            larger_window_available: false, trial: false, retry_cost_usd: 0.0, fallback_cost_usd: 0.0, jitter, retry_admission_ms: Some(0),
        };
        prop_assert_eq!(decide(&s).action, Action::Done);
    }

    #[test]
    fn a_retry_never_waits_longer_than_the_card_allows(
        class in prop::sample::select(Class::ALL.to_vec()),
        hint_ms in prop::option::of(0u64..200_000),
        max_wait in 0u64..10_000,
        retries in 0u32..3,
        jitter in 0.0f64..1.0,
    ) {
        let p = Policy { max_retry_wait_ms: max_wait, max_retries_per_route: 2, ..Policy::default() };
        let hint = hint_ms.map(|ms| poolctl::classify::hint::Hint { ms, source: poolctl::classify::hint::HintSource::RetryAfter });
        let s = Situation {
            class, path: CallPath::Chat, hint, policy: &p, spent: Spent::default(),
            retries_on_route: retries, visible_token: false, fallback_available: true,
            larger_window_available: false, trial: false, retry_cost_usd: 0.0, fallback_cost_usd: 0.0, jitter, retry_admission_ms: Some(0),
        };
        let d = decide(&s);
        if d.action == Action::Retry {
            prop_assert!(d.wait_ms.unwrap() <= max_wait);
            prop_assert!(retries < 2);
        }
    }

    #[test]
    fn retirement_never_ends_by_time(now in any::<i64>(), reason in ".{0,20}") {
        prop_assert_eq!(Health::Retired { reason }.state_at(now), HealthState::Retired);
    }
}

/// (dialect, status, body with MSG for the message, class): the code alone decides.
fn decisive_cases() -> Vec<(Dialect, u16, &'static str, Class)> {
    vec![
        (
            Dialect::Openai,
            429,
            r#"{"error":{"message":MSG,"type":"insufficient_quota","code":"insufficient_quota"}}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Openai,
            429,
            r#"{"error":{"message":MSG,"type":"tokens","code":"rate_limit_exceeded"}}"#,
            Class::RateLimited,
        ),
        (
            Dialect::Openai,
            400,
            r#"{"error":{"message":MSG,"type":"invalid_request_error","code":"context_length_exceeded"}}"#,
            Class::ContextOverflow,
        ),
        (
            Dialect::Openai,
            404,
            r#"{"error":{"message":MSG,"type":"invalid_request_error","code":"model_not_found"}}"#,
            Class::ModelUnavailable,
        ),
        (
            Dialect::Openai,
            401,
            r#"{"error":{"message":MSG,"type":"invalid_request_error","code":"invalid_api_key"}}"#,
            Class::Auth,
        ),
        (
            Dialect::Openai,
            400,
            r#"{"error":{"message":MSG,"type":"invalid_request_error","code":"content_policy_violation"}}"#,
            Class::ContentPolicy,
        ),
        (
            Dialect::Dashscope,
            429,
            r#"{"error":{"message":MSG,"type":"insufficient_quota","code":"insufficient_quota"}}"#,
            Class::RateLimited,
        ),
        (
            Dialect::Dashscope,
            429,
            r#"{"error":{"message":MSG,"type":"requests"}}"#,
            Class::RateLimited,
        ),
        (
            Dialect::Dashscope,
            403,
            r#"{"error":{"message":MSG,"type":"AllocationQuota.FreeTierOnly","code":"AllocationQuota.FreeTierOnly"}}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Dashscope,
            400,
            r#"{"error":{"message":MSG,"code":"Arrearage"}}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Dashscope,
            400,
            r#"{"error":{"message":MSG,"code":"DataInspectionFailed"}}"#,
            Class::ContentPolicy,
        ),
        (
            Dialect::Anthropic,
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":MSG}}"#,
            Class::Overloaded,
        ),
        (
            Dialect::Anthropic,
            429,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":MSG}}"#,
            Class::RateLimited,
        ),
        (
            Dialect::Anthropic,
            404,
            r#"{"type":"error","error":{"type":"not_found_error","message":MSG}}"#,
            Class::ModelUnavailable,
        ),
        (
            Dialect::Anthropic,
            401,
            r#"{"type":"error","error":{"type":"authentication_error","message":MSG}}"#,
            Class::Auth,
        ),
        (
            Dialect::Anthropic,
            402,
            r#"{"type":"error","error":{"type":"billing_error","message":MSG}}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Gemini,
            503,
            r#"{"error":{"code":503,"message":MSG,"status":"UNAVAILABLE"}}"#,
            Class::Overloaded,
        ),
        (
            Dialect::Gemini,
            404,
            r#"{"error":{"code":404,"message":MSG,"status":"NOT_FOUND"}}"#,
            Class::ModelUnavailable,
        ),
        (
            Dialect::Gemini,
            429,
            r#"{"error":{"code":429,"message":MSG,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]}]}}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Gemini,
            400,
            r#"{"error":{"code":400,"message":MSG,"status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}]}}"#,
            Class::Auth,
        ),
        (
            Dialect::Azure,
            429,
            r#"{"error":{"code":"429","message":MSG}}"#,
            Class::RateLimited,
        ),
        (
            Dialect::Zhipu,
            429,
            r#"{"error":{"code":"1113","message":MSG}}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Zhipu,
            429,
            r#"{"error":{"code":"1302","message":MSG}}"#,
            Class::RateLimited,
        ),
        (
            Dialect::Moonshot,
            429,
            r#"{"error":{"message":MSG,"type":"engine_overloaded_error"}}"#,
            Class::Overloaded,
        ),
        (
            Dialect::Moonshot,
            429,
            r#"{"error":{"message":MSG,"type":"exceeded_current_quota_error"}}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Deepseek,
            402,
            r#"{"error":{"message":MSG,"type":"unknown_error","param":null,"code":"invalid_request_error"}}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Mistral,
            429,
            r#"{"object":"error","message":MSG,"type":"service_tier_capacity_exceeded","param":null,"code":"3505"}"#,
            Class::Overloaded,
        ),
        (
            Dialect::Openrouter,
            402,
            r#"{"error":{"code":402,"message":MSG}}"#,
            Class::QuotaExhausted,
        ),
        // The eight dialects of issue 14: codes (or a dialect's own status) decide.
        (
            Dialect::Volcengine,
            429,
            r#"{"error":{"code":"ServerOverloaded","message":MSG,"param":"","type":"TooManyRequests"}}"#,
            Class::Overloaded,
        ),
        (
            Dialect::Volcengine,
            429,
            r#"{"error":{"code":"QuotaExceeded","message":MSG,"param":"","type":"TooManyRequests"}}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Volcengine,
            429,
            r#"{"error":{"code":"SetLimitExceeded","message":MSG,"param":"","type":"TooManyRequests"}}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Volcengine,
            429,
            r#"{"error":{"code":"RateLimitExceeded.EndpointTPMExceeded","message":MSG,"param":"","type":"TooManyRequests"}}"#,
            Class::RateLimited,
        ),
        (
            Dialect::Volcengine,
            403,
            r#"{"error":{"code":"AccountOverdueError","message":MSG,"param":"","type":"Forbidden"}}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Volcengine,
            400,
            r#"{"error":{"code":"InputTextRiskDetection","message":MSG,"param":"","type":"BadRequest"}}"#,
            Class::ContentPolicy,
        ),
        (
            Dialect::Volcengine,
            404,
            r#"{"error":{"code":"ModelNotOpen","message":MSG,"param":"","type":"NotFound"}}"#,
            Class::ModelUnavailable,
        ),
        (
            Dialect::Minimax,
            429,
            r#"{"base_resp":{"status_code":1002,"status_msg":MSG}}"#,
            Class::RateLimited,
        ),
        (
            Dialect::Minimax,
            500,
            r#"{"base_resp":{"status_code":1008,"status_msg":MSG}}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Qianfan,
            429,
            r#"{"error":{"code":"cluster_tpm_rate_limit_exceeded","message":MSG,"type":"rate_limit_exceeded"}}"#,
            Class::Overloaded,
        ),
        (
            Dialect::Qianfan,
            429,
            r#"{"error":{"code":"rpm_rate_limit_exceeded","message":MSG,"type":"rate_limit_exceeded"}}"#,
            Class::RateLimited,
        ),
        (
            Dialect::Qianfan,
            400,
            r#"{"error":{"code":"tokens_too_long","message":MSG,"type":"invalid_request_error"}}"#,
            Class::ContextOverflow,
        ),
        (
            Dialect::Qianfan,
            403,
            r#"{"error":{"code":"system_unsafe","message":MSG,"type":"invalid_request_error"}}"#,
            Class::ContentPolicy,
        ),
        (
            Dialect::Siliconflow,
            403,
            r#"{"code":30001,"message":MSG,"data":null}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Siliconflow,
            400,
            r#"{"code":20012,"message":MSG,"data":null}"#,
            Class::ModelUnavailable,
        ),
        (
            Dialect::Siliconflow,
            503,
            r#"{"code":50505,"message":MSG,"data":null}"#,
            Class::Overloaded,
        ),
        (
            Dialect::Hunyuan,
            429,
            r#"{"error":{"message":MSG,"type":"rate_limit_error","param":null,"code":"FailedOperation.EngineServerLimitExceeded"}}"#,
            Class::Overloaded,
        ),
        (
            Dialect::Hunyuan,
            429,
            r#"{"error":{"message":MSG,"type":"invalid_request_error","param":null,"code":"FailedOperation.ResourcePackExhausted"}}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Xai,
            404,
            r#"{"code":"Some requested entity was not found","error":MSG}"#,
            Class::ModelUnavailable,
        ),
        (
            Dialect::Together,
            403,
            r#"{"error":{"message":MSG,"type":"invalid_request_error","param":null,"code":null}}"#,
            Class::ContextOverflow,
        ),
        (
            Dialect::Together,
            402,
            r#"{"error":{"message":MSG,"type":"credit_limit","param":null,"code":null}}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Fireworks,
            404,
            r#"{"error":{"object":"error","type":"invalid_request_error","code":"NOT_FOUND","message":MSG}}"#,
            Class::ModelUnavailable,
        ),
    ]
}

/// (dialect, 200 body with MSG for the message, class): errors inside a success.
fn in_band_cases() -> Vec<(Dialect, &'static str, Class)> {
    vec![
        (
            Dialect::Minimax,
            r#"{"id":"x","choices":null,"base_resp":{"status_code":1008,"status_msg":MSG}}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Minimax,
            r#"{"base_resp":{"status_code":1002,"status_msg":MSG}}"#,
            Class::RateLimited,
        ),
        (
            Dialect::Minimax,
            r#"{"base_resp":{"status_code":2049,"status_msg":MSG}}"#,
            Class::Auth,
        ),
        (
            Dialect::Minimax,
            r#"{"choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"stop"}],"base_resp":{"status_code":1027,"status_msg":MSG}}"#,
            Class::ContentPolicy,
        ),
        (
            Dialect::Hunyuan,
            r#"{"Response":{"Error":{"Code":"FailedOperation.ResourcePackExhausted","Message":MSG},"RequestId":"r"}}"#,
            Class::QuotaExhausted,
        ),
        (
            Dialect::Hunyuan,
            r#"{"Response":{"Error":{"Code":"LimitExceeded","Message":MSG},"RequestId":"r"}}"#,
            Class::RateLimited,
        ),
    ]
}
