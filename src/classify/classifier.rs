//! The classifier: one upstream attempt → exactly one class, from protocol fields.
//!
//! Order of evidence: transport errors; then the dialect's own code table; then codes
//! every dialect shares (OpenAI / Anthropic / Gemini conventions); then the HTTP
//! status. Message text may only break a tie *inside* a status whose code is missing
//! or generic (`invalid_request_error`, `INVALID_ARGUMENT`, ...): it never overrides a
//! decisive code, so a reworded or translated message cannot change the class.

use crate::classify::dialect::Dialect;
use crate::classify::failure::{ErrorFields, Transport, UpstreamFailure};
use crate::classify::hint::{retry_hint, stated_reset, Hint};
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
        Dialect::Volcengine => volcengine(e),
        Dialect::Minimax => minimax(e),
        Dialect::Qianfan => qianfan(e),
        Dialect::Siliconflow => siliconflow(e),
        Dialect::Hunyuan => hunyuan(e),
        Dialect::Xai => xai(status, e),
        Dialect::Together => together(status, e),
        // Fireworks: OpenAI-shaped bodies; only its 412 means something of its own
        // (`dialect_status`).
        Dialect::Openai | Dialect::Deepseek | Dialect::Fireworks => None,
    }
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

fn mentions_any(m: &str, phrases: &[&str]) -> bool {
    phrases.iter().any(|p| m.contains(p))
}

/// ByteDance Volcengine Ark: `error.code` is a PascalCase code, `error.type` the HTTP
/// reason (`TooManyRequests`). One 429 means four things: a throttle
/// (`RateLimitExceeded.*`), the platform out of capacity (`ServerOverloaded`), a spent
/// free quota (`QuotaExceeded`) or the account's self-set inference cap
/// (`SetLimitExceeded`); and an empty balance is a 403 (`AccountOverdueError`).
fn volcengine(e: &ErrorFields) -> Option<Class> {
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

/// MiniMax: `base_resp.status_code` (usually inside an HTTP 200, see `in_band`), from
/// the code table of platform.minimax.io/docs/api-reference/errorcode.
fn minimax(e: &ErrorFields) -> Option<Class> {
    Some(match e.code.as_deref()? {
        "1000" | "1001" | "1013" | "1024" | "1033" => Class::ServerError,
        // 1039: tokens per minute; 1041: connections; 2045: request rate grew too fast.
        "1002" | "1039" | "1041" | "2045" => Class::RateLimited,
        "1004" | "2049" => Class::Auth,
        // 2056: the Token Plan's usage limit.
        "1008" | "2056" => Class::QuotaExhausted,
        "1026" | "1027" => Class::ContentPolicy,
        // 2061: the model is not part of this key's plan.
        "2061" => Class::ModelUnavailable,
        "1042" | "2013" => Class::InvalidRequest,
        _ => return None,
    })
}

/// Baidu Qianfan v2 (OpenAI-compatible): snake_case codes. Two traps: a cluster-wide
/// limit is the platform out of capacity, not the caller too fast; and the content
/// audit answers 403, which the generic rules read as a bad key.
fn qianfan(e: &ErrorFields) -> Option<Class> {
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

/// SiliconFlow: flat `{"code": <int>, "message", "data"}`. An empty balance arrives as
/// 402 or 403 with code 30001 (the generic reading of that 403 is auth).
fn siliconflow(e: &ErrorFields) -> Option<Class> {
    Some(match e.code.as_deref()? {
        "30001" => Class::QuotaExhausted,
        // 20012: "Model does not exist"; 30003: "Model disabled."
        "20012" | "30003" => Class::ModelUnavailable,
        // 503 "Model service overloaded" / "System is really busy".
        "50505" | "50603" => Class::Overloaded,
        // 20015 is SiliconFlow's generic "parameter is invalid"; an over-long prompt
        // shares it, told apart only by its text (a tie inside the code).
        "20015" => {
            let m = e.message_lower();
            if mentions_any(
                &m,
                &[
                    "max_prompt_tokens",
                    "max_seq_len",
                    "context length",
                    "上下文",
                ],
            ) {
                Class::ContextOverflow
            } else {
                Class::InvalidRequest
            }
        }
        _ => return None,
    })
}

/// Tencent Hunyuan: Tencent Cloud API 3.0 codes (`FailedOperation.*`, `LimitExceeded`,
/// `AuthFailure.*`), in `error.code` on the OpenAI-compatible API or in
/// `Response.Error.Code`, which Tencent Cloud returns inside an HTTP 200.
fn hunyuan(e: &ErrorFields) -> Option<Class> {
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

/// xAI: `{"code": "<gRPC status text>", "error": "<message>"}`. The code names only the
/// gRPC status ("Client specified an invalid argument"), so inside a status the message
/// breaks the tie: a bad key is a 400, spent credits a 403 or 429.
fn xai(status: u16, e: &ErrorFields) -> Option<Class> {
    let m = e.message_lower();
    let credits = || {
        mentions_any(
            &m,
            &[
                "used all available credits",
                "monthly spending limit",
                "ran out of credits",
                "purchase more credits",
            ],
        )
    };
    match status {
        400 if m.contains("incorrect api key") || m.contains("invalid api key") => {
            Some(Class::Auth)
        }
        400 if m.contains("maximum prompt length") => Some(Class::ContextOverflow),
        400 if mentions_missing_model(&m, Some(e)) => Some(Class::ModelUnavailable),
        403 | 429 if credits() => Some(Class::QuotaExhausted),
        _ => None,
    }
}

/// Together: OpenAI-shaped bodies; its 403 is a context overflow (`dialect_status`), and
/// a 400 "`inputs` tokens + `max_new_tokens` must be <= N" is one too, told by its text
/// inside a generic code.
fn together(status: u16, e: &ErrorFields) -> Option<Class> {
    if status == 400 && !has_decisive_code(e) && e.message_lower().contains("max_new_tokens") {
        return Some(Class::ContextOverflow);
    }
    None
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

/// Google's `RESOURCE_EXHAUSTED`, split by its `QuotaFailure` details. A spent daily
/// quota is not fixed by waiting a minute, and a quota of 0 (a model this tier does not
/// include) never is. Shared, not only Gemini's: the same details come back through
/// Google's OpenAI-compatible endpoint and through gateways in front of it.
fn resource_exhausted(e: &ErrorFields) -> Class {
    let per_day = e.quota_ids.iter().any(|q| q.contains("PerDay"));
    let none_at_all = e.quota_values.iter().any(|v| v == "0");
    if per_day || none_at_all {
        Class::QuotaExhausted
    } else {
        Class::RateLimited
    }
}

/// Anthropic Messages: `error.type` decides, with two documented ties inside
/// `invalid_request_error`. (`request_too_large` 413 is `context_overflow`, as
/// decisions.md lists it, via the shared table.)
fn anthropic(status: u16, e: &ErrorFields) -> Option<Class> {
    match e.kind.as_deref()? {
        "invalid_request_error" => {
            let m = e.message_lower();
            // Two wordings of an overflow: "prompt is too long: 208656 tokens > 200000
            // maximum", and, when the prompt fits but not with the output reserved,
            // "input length and `max_tokens` exceed context limit: 188059 + 20000 >
            // 200000" (quoted by many public clients: find_string "exceed context limit: ").
            let overflow = m.contains("prompt is too long") || mentions_context_overflow(&m);
            Some(if overflow {
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
        "exceed context limit",
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
