//! The Anthropic Messages wire: `POST {base}/v1/messages` with `x-api-key` and
//! `anthropic-version`.

pub mod history;
pub use history::*;

use super::codec::{tokens, BadSuccess, ChatParsed};
use super::endpoint::Endpoint;
use super::http::HttpCall;
use crate::core::answer::FinishReason;
use crate::core::request::{
    ChatRequest, Reasoning, ToolChoice, Usage, ANTHROPIC_DEFAULT_MAX_TOKENS,
};
use serde_json::{json, Value};

pub const API_VERSION: &str = "2023-06-01";

/// Messages has no seed.
const SAMPLING: super::codec::SamplingNames = super::codec::SamplingNames {
    temperature: "temperature",
    top_p: "top_p",
    stop: "stop_sequences",
    seed: None,
    top_k: Some("top_k"),
};

/// How a reasoning request becomes Anthropic's `thinking` (spec/fidelity.md §2).
/// Anthropic refuses thinking beside a forced tool, beside a temperature other than 1,
/// and in a tool loop whose last assistant turn does not start with the signed
/// `thinking` block it answered with ("a final `assistant` message must start with a
/// thinking block"), which a conversation from another wire never holds. With a forced
/// tool or in such a loop, thinking stays off (and `reasoning_effort` is named as
/// dropped); otherwise the temperature is dropped (and named).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinkingPlan {
    pub enabled: bool,
    pub drops_temperature: bool,
}

pub fn thinking_plan(req: &ChatRequest, _reasoning: Reasoning) -> ThinkingPlan {
    let enabled = !req.forces_tool() && !req.conversation.in_tool_loop();
    ThinkingPlan {
        enabled,
        drops_temperature: enabled && req.sampling.temperature.is_some_and(|t| t != 1.0),
    }
}

pub fn chat_call(ep: &Endpoint, model: &str, req: &ChatRequest) -> HttpCall {
    let (system, messages) = history::anthropic_request_parts(&req.conversation);
    let thinking = req
        .reasoning
        .filter(|r| thinking_plan(req, *r).enabled)
        .map(Reasoning::budget_tokens);
    // With thinking on, `max_tokens` covers the budget and the answer asked for.
    let answer_max = req.max_tokens.unwrap_or(ANTHROPIC_DEFAULT_MAX_TOKENS);
    let max_tokens = thinking.map_or(answer_max, |b| b.saturating_add(answer_max));
    let mut body = json!({
        "model": model,
        "max_tokens": max_tokens,
        "messages": messages,
    });
    if let Some(system) = system {
        body["system"] = system;
    }
    let mut sampling = req.sampling.clone();
    // Anthropic's temperature runs 0 to 1, OpenAI's 0 to 2.
    sampling.temperature = match (sampling.temperature, thinking) {
        // Thinking takes a temperature of 1 only: 1 is kept, any other is dropped.
        (Some(t), Some(_)) if t == 1.0 => Some(t),
        (Some(_), Some(_)) => None,
        (t, None) => t.map(|t| t.clamp(0.0, 1.0)),
        (None, _) => None,
    };
    if let Some(obj) = body.as_object_mut() {
        super::codec::put_sampling(obj, &sampling, &SAMPLING);
    }
    if let Some(budget) = thinking {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
    }
    if !req.tools.is_empty() {
        body["tools"] = history::anthropic_tools(&req.tools);
    }
    let serial = req.parallel_tool_calls == Some(false);
    let choice = match &req.tool_choice {
        Some(ToolChoice::Auto) => Some(json!({"type": "auto"})),
        Some(ToolChoice::None) => Some(json!({"type": "none"})),
        Some(ToolChoice::Required) => Some(json!({"type": "any"})),
        Some(ToolChoice::Tool(name)) => Some(json!({"type": "tool", "name": name})),
        // `parallel_tool_calls: false` lives in `tool_choice`, auto by default.
        None if serial && !req.tools.is_empty() => Some(json!({"type": "auto"})),
        None => None,
    };
    if let Some(mut choice) = choice {
        if serial && choice["type"] != "none" {
            choice["disable_parallel_tool_use"] = json!(true);
        }
        body["tool_choice"] = choice;
    }
    if let Some(user) = &req.user {
        body["metadata"] = json!({"user_id": user});
    }
    HttpCall {
        url: ep.url("/v1/messages"),
        headers: vec![
            ("x-api-key", ep.api_key.expose().to_string()),
            ("anthropic-version", API_VERSION.to_string()),
        ],
        body: body.into(),
    }
}

/// Anthropic's `stop_reason` in the shared vocabulary.
pub fn finish_reason(s: &str) -> FinishReason {
    match s {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_string()),
    }
}

/// A `usage` object. Anthropic counts cache reads and writes apart from
/// `input_tokens`; the whole prompt is their sum.
pub fn usage(u: Option<&Value>) -> Usage {
    let count = |k: &str| super::codec::count(u.and_then(|u| u.get(k)));
    let cached = count("cache_read_input_tokens");
    let created = count("cache_creation_input_tokens");
    Usage {
        input_tokens: tokens(u.and_then(|u| u.get("input_tokens")))
            + cached.unwrap_or(0)
            + created.unwrap_or(0),
        output_tokens: tokens(u.and_then(|u| u.get("output_tokens"))),
        cached_tokens: cached,
        cache_creation_tokens: created,
        reasoning_tokens: None,
    }
}

/// The text and `tool_use` blocks of `content`, `stop_reason`, `model`, `usage`, and
/// the message `id`.
pub fn parse_chat(v: &Value) -> Result<ChatParsed, BadSuccess> {
    if v.get("type").and_then(Value::as_str) == Some("error") {
        return Err(BadSuccess::Malformed("an error object inside a 200".into()));
    }
    let content = v
        .get("content")
        .filter(|c| c.is_array())
        .ok_or_else(|| BadSuccess::Malformed("no content in the message".into()))?;
    let blocks = content.as_array().map(Vec::as_slice).unwrap_or_default();
    let text: String = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    let stop = v.get("stop_reason").and_then(Value::as_str);
    // `stop_reason: refusal` is the model's answer (fidelity.md §4), with or without
    // text of its own.
    let refusal = (stop == Some("refusal")).then(String::new);
    let tool_calls = history::anthropic_answer_tool_calls(content).map_err(|e| {
        BadSuccess::Malformed(format!("a tool call in the answer is unusable: {e}"))
    })?;
    Ok(ChatParsed {
        text,
        tool_calls,
        finish_reason: stop.map(finish_reason),
        model: v.get("model").and_then(Value::as_str).map(str::to_string),
        usage: usage(v.get("usage")),
        id: v.get("id").and_then(Value::as_str).map(str::to_string),
        refusal,
        reasoning: joined(
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("thinking"))
                .filter_map(|b| b.get("thinking").and_then(Value::as_str)),
        ),
        more_choices: Vec::new(),
    })
}

/// The texts joined, or `None` when there is none.
pub(super) fn joined<'a>(texts: impl Iterator<Item = &'a str>) -> Option<String> {
    let all: String = texts.collect();
    (!all.is_empty()).then_some(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards review finding 1: `2^64 - 1` input tokens plus cache reads overflowed the
    /// sum (a panic, a 500). Counts are capped, so no sum of them can overflow.
    #[test]
    fn absurd_token_counts_are_capped_never_overflow() {
        let u = usage(Some(
            &json!({"input_tokens": u64::MAX, "cache_read_input_tokens": 5,
            "cache_creation_input_tokens": u64::MAX, "output_tokens": u64::MAX}),
        ));
        let cap = super::super::codec::MAX_TOKEN_COUNT;
        assert_eq!(u.input_tokens, cap + 5 + cap);
        assert_eq!(u.output_tokens, cap);
        let g = crate::wire::gemini::usage(Some(&json!({"candidatesTokenCount": u64::MAX,
            "thoughtsTokenCount": u64::MAX})));
        assert_eq!(g.output_tokens, 2 * cap);
    }

    #[test]
    fn parses_a_message() {
        let v = json!({"id":"msg_1","type":"message","role":"assistant","model":"claude-x-1","content":[{"type":"text","text":"O"},{"type":"text","text":"K"}],"stop_reason":"end_turn","usage":{"input_tokens":9,"output_tokens":2,"cache_read_input_tokens":7}});
        let p = parse_chat(&v).ok().unwrap();
        assert_eq!(
            (p.text.as_str(), p.usage.input_tokens, p.id.as_deref()),
            // The whole prompt: 9 uncached + 7 read from the cache.
            ("OK", 16, Some("msg_1"))
        );
        assert_eq!(p.usage.cached_tokens, Some(7));
        assert_eq!(p.model.as_deref(), Some("claude-x-1"));
        assert_eq!(p.finish_reason, Some(FinishReason::Stop));
        assert!(parse_chat(&json!({"type":"message"})).is_err());
    }
}
