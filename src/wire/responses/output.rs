//! An answer as the Responses API shows it: `output` items (reasoning, the assistant
//! message, function calls) and the `response` object around them, for a client of the
//! Responses API served by a route of another wire, and for the conversation the
//! gateway keeps.

use crate::core::answer::FinishReason;
use crate::core::conversation::ToolCall;
use crate::core::request::Usage;
use serde_json::{json, Map, Value};

/// What an answer holds, in the terms of a Responses `output`.
#[derive(Debug, Clone, Copy)]
pub struct Answered<'a> {
    pub text: &'a str,
    /// The refusal's own text (OpenAI `refusal`); empty when only a finish said so.
    pub refusal: Option<&'a str>,
    pub reasoning: Option<&'a str>,
    pub tool_calls: &'a [ToolCall],
    pub finish: &'a FinishReason,
}

/// How a Responses answer ended: its `status`, and `incomplete_details.reason` when
/// it was cut.
pub fn status_of(a: &Answered<'_>) -> (&'static str, Option<&'static str>) {
    status(a.finish, a.refusal.is_some_and(|r| !r.is_empty()))
}

/// The `status` (and `incomplete_details.reason`) of an answer that ended on `finish`;
/// `refused_in_words`: it holds a refusal with words of its own.
pub fn status(
    finish: &FinishReason,
    refused_in_words: bool,
) -> (&'static str, Option<&'static str>) {
    match finish {
        FinishReason::Length => ("incomplete", Some("max_output_tokens")),
        // A refusal with words of its own is a complete answer (a `refusal` part); one
        // only a finish reason signalled is an answer the filter cut.
        FinishReason::ContentFilter if !refused_in_words => ("incomplete", Some("content_filter")),
        _ => ("completed", None),
    }
}

/// A new id: `prefix` and 48 hex digits (192 bits) from the OS's random source, as
/// OpenAI's look. A response id is all that guards its conversation (`GET`,
/// `DELETE`, `previous_response_id`), so it must not be guessable from another one.
pub fn new_id(prefix: &str) -> String {
    let mut bytes = [0u8; 24];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS source (never seen on Linux): unguessable no longer, unique still.
        bytes.iter_mut().for_each(|b| *b = fastrand::u8(..));
    }
    let mut s = String::with_capacity(prefix.len() + 49);
    s.push_str(prefix);
    s.push('_');
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The message item of an answer: its text, or its refusal.
pub fn message_item(id: &str, text: &str, refusal: Option<&str>, status: &str) -> Value {
    let mut content = Vec::new();
    match refusal.filter(|r| !r.is_empty()) {
        Some(r) if text.is_empty() => content.push(json!({"type": "refusal", "refusal": r})),
        Some(r) => {
            content.push(output_text(text));
            content.push(json!({"type": "refusal", "refusal": r}));
        }
        None => content.push(output_text(text)),
    }
    json!({
        "id": id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    })
}

/// An `output_text` part.
pub fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// A `reasoning` item whose summary is the reasoning another wire showed.
pub fn reasoning_item(id: &str, text: &str) -> Value {
    json!({
        "id": id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text}],
    })
}

/// A `function_call` item.
pub fn call_item(id: &str, call: &ToolCall, status: &str) -> Value {
    json!({
        "id": id,
        "type": "function_call",
        "status": status,
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments.to_string(),
    })
}

/// The `output` of an answer: reasoning first, then the message (when there is text, a
/// refusal, or nothing else), then each function call.
pub fn output_items(a: &Answered<'_>) -> Vec<Value> {
    let (status, _) = status_of(a);
    let mut out = Vec::new();
    if let Some(r) = a.reasoning.filter(|r| !r.is_empty()) {
        out.push(reasoning_item(&new_id("rs"), r));
    }
    let refusal = a.refusal.filter(|r| !r.is_empty());
    if !a.text.is_empty() || refusal.is_some() || a.tool_calls.is_empty() {
        out.push(message_item(&new_id("msg"), a.text, refusal, status));
    }
    for call in a.tool_calls {
        out.push(call_item(&new_id("fc"), call, "completed"));
    }
    out
}

/// The `usage` object: every detail present, as clients (the Agents SDK) expect.
pub fn usage(u: Option<&Usage>) -> Value {
    let u = u.copied().unwrap_or_default();
    json!({
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens.unwrap_or(0)},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens.unwrap_or(0)},
        "total_tokens": u.input_tokens.saturating_add(u.output_tokens),
    })
}

/// A field a `response` object echoes, and OpenAI's default for it.
type Echoed = (&'static str, fn() -> Value);

/// The request's fields a `response` object echoes, with OpenAI's defaults where the
/// client sent none.
const ECHOED: &[Echoed] = &[
    ("instructions", || Value::Null),
    ("max_output_tokens", || Value::Null),
    ("metadata", || json!({})),
    ("parallel_tool_calls", || json!(true)),
    ("reasoning", || json!({"effort": null, "summary": null})),
    ("store", || json!(true)),
    ("temperature", || json!(1.0)),
    ("text", || json!({"format": {"type": "text"}})),
    ("tool_choice", || json!("auto")),
    ("tools", || json!([])),
    ("top_p", || json!(1.0)),
    ("truncation", || json!("disabled")),
    ("user", || Value::Null),
];

/// What one `response` object says, beside the request it echoes.
#[derive(Debug, Clone)]
pub struct Envelope<'a> {
    pub id: &'a str,
    pub created_at: i64,
    pub model: &'a str,
    /// `in_progress`, `completed`, `incomplete`, `failed`.
    pub status: &'a str,
    pub incomplete: Option<&'a str>,
    pub error: Option<Value>,
    pub previous_response_id: Option<&'a str>,
    pub usage: Option<Value>,
}

/// A `response` object: the envelope, the request's echoed fields, and `output`.
pub fn response_object(
    e: &Envelope<'_>,
    request: &Map<String, Value>,
    output: Vec<Value>,
) -> Value {
    let mut r = Map::new();
    r.insert("id".into(), json!(e.id));
    r.insert("object".into(), json!("response"));
    r.insert("created_at".into(), json!(e.created_at));
    r.insert("status".into(), json!(e.status));
    r.insert("background".into(), json!(false));
    r.insert("error".into(), e.error.clone().unwrap_or(Value::Null));
    r.insert(
        "incomplete_details".into(),
        match e.incomplete {
            Some(reason) => json!({ "reason": reason }),
            None => Value::Null,
        },
    );
    r.insert("model".into(), json!(e.model));
    r.insert("output".into(), Value::Array(output));
    r.insert(
        "previous_response_id".into(),
        e.previous_response_id.map_or(Value::Null, |p| json!(p)),
    );
    for (name, default) in ECHOED {
        let v = request
            .get(*name)
            .filter(|v| !v.is_null())
            .cloned()
            .unwrap_or_else(default);
        r.insert((*name).into(), v);
    }
    r.insert("usage".into(), e.usage.clone().unwrap_or(Value::Null));
    Value::Object(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_becomes_items_in_the_order_clients_read_them() {
        let calls = [ToolCall {
            id: "call_1".into(),
            name: "f".into(),
            arguments: json!({"a": 1}),
        }];
        let a = Answered {
            text: "Let me check.",
            refusal: None,
            reasoning: Some("thinking"),
            tool_calls: &calls,
            finish: &FinishReason::ToolCalls,
        };
        let items = output_items(&a);
        let kinds: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["reasoning", "message", "function_call"]);
        assert_eq!(items[1]["content"][0]["text"], "Let me check.");
        assert_eq!(items[2]["arguments"], "{\"a\":1}");
        assert_eq!(items[2]["call_id"], "call_1");
        assert!(items[0]["id"].as_str().unwrap().starts_with("rs_"));
    }

    #[test]
    fn refusals_and_cuts_have_the_status_clients_expect() {
        let refused = Answered {
            text: "",
            refusal: Some("No."),
            reasoning: None,
            tool_calls: &[],
            finish: &FinishReason::ContentFilter,
        };
        assert_eq!(status_of(&refused), ("completed", None));
        assert_eq!(
            output_items(&refused)[0]["content"][0],
            json!({"type": "refusal", "refusal": "No."})
        );
        let filtered = Answered {
            refusal: Some(""),
            ..refused
        };
        assert_eq!(status_of(&filtered), ("incomplete", Some("content_filter")));
        let cut = Answered {
            refusal: None,
            finish: &FinishReason::Length,
            text: "Hal",
            ..refused
        };
        assert_eq!(status_of(&cut), ("incomplete", Some("max_output_tokens")));
        assert_eq!(output_items(&cut)[0]["status"], "incomplete");
    }

    #[test]
    fn the_object_echoes_the_request_with_openai_defaults() {
        let request: Map<String, Value> = serde_json::from_value(
            json!({"model": "m", "temperature": 0.2, "metadata": {"k": "v"}, "store": false}),
        )
        .unwrap();
        let e = Envelope {
            id: "resp_1",
            created_at: 7,
            model: "gpt-x",
            status: "completed",
            incomplete: None,
            error: None,
            previous_response_id: Some("resp_0"),
            usage: Some(usage(None)),
        };
        let r = response_object(&e, &request, vec![]);
        assert_eq!(r["temperature"], 0.2);
        assert_eq!(r["top_p"], 1.0);
        assert_eq!(r["store"], false);
        assert_eq!(r["metadata"], json!({"k": "v"}));
        assert_eq!(r["previous_response_id"], "resp_0");
        assert_eq!(r["usage"]["output_tokens_details"]["reasoning_tokens"], 0);
        assert_eq!(r["object"], "response");
    }
}
