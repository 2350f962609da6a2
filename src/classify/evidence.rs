//! The evidence rules every table shares: whether an error code decides on its own
//! (a generic code such as `invalid_request_error` does not), and the message
//! phrases that may only break a tie inside a status whose code is missing or generic.

use crate::classify::failure::ErrorFields;

pub fn mentions_any(m: &str, phrases: &[&str]) -> bool {
    phrases.iter().any(|p| m.contains(p))
}

pub fn mentions_context_overflow(m: &str) -> bool {
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
pub fn mentions_content_risk(m: &str) -> bool {
    ["content exists risk", "inappropriate content", "敏感内容"]
        .iter()
        .any(|p| m.contains(p))
}

pub fn mentions_missing_model(m: &str, err: Option<&ErrorFields>) -> bool {
    let param_is_model = err.and_then(|e| e.param.as_deref()) == Some("model");
    m.contains("model not exist")
        || m.contains("model_not_found")
        || m.contains("not a valid model id")
        || m.contains("模型不存在")
        || (m.contains("model") && (m.contains("does not exist") || m.contains("not found")))
        || (param_is_model && m.contains("does not exist"))
}

/// Codes that say nothing about which class applies; only these let text break a tie.
pub fn is_generic_code(c: &str) -> bool {
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

pub fn has_decisive_code(e: &ErrorFields) -> bool {
    e.codes()
        .chain(e.status.as_deref())
        .any(|c| !is_generic_code(c))
}
