//! The Anthropic Messages wire: `POST {base}/v1/messages` with `x-api-key` and
//! `anthropic-version`.

use super::{tokens, BadSuccess, Endpoint, HttpCall};
use crate::conversation;
use crate::request::{ChatRequest, Usage};
use serde_json::{json, Value};

pub const API_VERSION: &str = "2023-06-01";

pub fn chat_call(ep: &Endpoint, model: &str, req: &ChatRequest) -> HttpCall {
    let (system, messages) = conversation::anthropic_request_parts(&req.conversation);
    let mut body = json!({
        "model": model,
        "max_tokens": req.max_tokens,
        "messages": messages,
    });
    if let Some(system) = system {
        body["system"] = json!(system);
    }
    if !req.tools.is_empty() {
        body["tools"] = conversation::anthropic_tools(&req.tools);
    }
    HttpCall {
        url: ep.url("/v1/messages"),
        headers: vec![
            ("x-api-key", ep.api_key.expose().to_string()),
            ("anthropic-version", API_VERSION.to_string()),
        ],
        body,
    }
}

/// The text blocks of `content`, `usage`, and the message `id`.
pub fn parse_chat(v: &Value) -> Result<(String, Usage, Option<String>), BadSuccess> {
    if v.get("type").and_then(Value::as_str) == Some("error") {
        return Err(BadSuccess::Malformed("an error object inside a 200".into()));
    }
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| BadSuccess::Malformed("no content in the message".into()))?;
    let text: String = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    let usage = v.get("usage");
    let usage = Usage {
        input_tokens: tokens(usage.and_then(|u| u.get("input_tokens"))),
        output_tokens: tokens(usage.and_then(|u| u.get("output_tokens"))),
    };
    if text.is_empty() && v.get("stop_reason").and_then(Value::as_str) == Some("refusal") {
        return Err(BadSuccess::Refused("stop_reason refusal".into()));
    }
    let id = v.get("id").and_then(Value::as_str).map(str::to_string);
    Ok((text, usage, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_message() {
        let v = json!({"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"O"},{"type":"text","text":"K"}],"stop_reason":"end_turn","usage":{"input_tokens":9,"output_tokens":2}});
        let (text, usage, id) = parse_chat(&v).ok().unwrap();
        assert_eq!(
            (text.as_str(), usage.input_tokens, id.as_deref()),
            ("OK", 9, Some("msg_1"))
        );
        assert!(parse_chat(&json!({"type":"message"})).is_err());
    }
}
