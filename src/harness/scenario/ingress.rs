//! Which API a scenario's client speaks (`ingress:`), and the body it sends when that is
//! the Responses API: the scenario's `request:` written as a `POST /v1/responses` body,
//! read back by the same code the gateway reads a client's with, so that chaos drives
//! the same conversation handling (`previous_response_id` re-sent whole) as `serve`.

use super::{RequestShape, RequestSpec};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The API a scenario's requests enter on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ingress {
    /// Chat completions (the router's canonical request), as ever.
    #[default]
    Chat,
    /// OpenAI's Responses API: each request is a Responses body; `continue: true` sends
    /// the previous request's response id.
    Responses,
}

/// The prompt a Responses scenario sends when its `request:` gives no `input`.
pub const DEFAULT_INPUT: &str = "Reply with the single word OK.";

/// Fields of `request:` the Responses API has no place for.
pub fn unsupported_fields(shape: &RequestShape) -> Option<&'static str> {
    if shape.messages.is_some() {
        Some("messages (give `input` and `instructions`)")
    } else if shape.n.is_some() {
        Some("n")
    } else if shape.seed.is_some() {
        Some("seed")
    } else {
        None
    }
}

/// The Responses body a request of the scenario sends: `model` (the tier's name),
/// the entry's `input` (else the scenario's, else the default prompt), `instructions`,
/// `stream`, tools, the output cap, the JSON schema, sampling, reasoning, `user`, the
/// other `fields` as the client's own, and `previous_response_id` when it continues one.
pub fn responses_body(
    model: &str,
    shape: Option<&RequestShape>,
    spec: &RequestSpec,
    stream: bool,
    max_output_tokens: Option<u32>,
    previous: Option<&str>,
) -> Value {
    let mut o = Map::new();
    o.insert("model".into(), json!(model));
    let input = spec
        .input
        .clone()
        .or_else(|| shape.and_then(|s| s.input.clone()))
        .unwrap_or_else(|| json!(DEFAULT_INPUT));
    o.insert("input".into(), input);
    if let Some(p) = previous {
        o.insert("previous_response_id".into(), json!(p));
    }
    if stream {
        o.insert("stream".into(), json!(true));
    }
    if let Some(n) = max_output_tokens {
        o.insert("max_output_tokens".into(), json!(n));
    }
    let Some(s) = shape else {
        return Value::Object(o);
    };
    if let Some(i) = &s.instructions {
        o.insert("instructions".into(), json!(i));
    }
    if !s.tools.is_empty() {
        let tools: Vec<Value> = s
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": t.parameters.clone().unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                       "strict": t.strict})
            })
            .collect();
        o.insert("tools".into(), Value::Array(tools));
    }
    if let Some(p) = s.parallel_tool_calls {
        o.insert("parallel_tool_calls".into(), json!(p));
    }
    if let Some(schema) = &s.json_schema {
        o.insert(
            "text".into(),
            json!({"format": {"type": "json_schema", "name": "answer", "schema": schema}}),
        );
    }
    if let Some(t) = s.temperature {
        o.insert("temperature".into(), json!(t));
    }
    if let Some(e) = &s.reasoning_effort {
        o.insert("reasoning".into(), json!({ "effort": e }));
    }
    if let Some(u) = &s.user {
        o.insert("user".into(), json!(u));
    }
    for (k, v) in &s.fields {
        o.entry(k.clone()).or_insert_with(|| v.clone());
    }
    Value::Object(o)
}
