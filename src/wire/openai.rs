//! The OpenAI-compatible wire: `POST {base}/chat/completions` with Bearer auth. Most
//! providers (DeepSeek, DashScope compatible mode, GLM, Kimi, Groq, OpenRouter, ...)
//! speak it; their dialects differ only in what their errors mean.

pub mod history;
pub use history::*;
pub mod reply;

use super::codec::{tokens, BadSuccess, ChatParsed};
use super::endpoint::Endpoint;
use super::http::HttpCall;
use crate::classify::dialect::Dialect;
use crate::core::answer::FinishReason;
use crate::core::request::{ChatRequest, ToolChoice, Usage};
use serde_json::{json, Value};

const SAMPLING: super::codec::SamplingNames = super::codec::SamplingNames {
    temperature: "temperature",
    top_p: "top_p",
    stop: "stop",
    seed: Some("seed"),
    top_k: None,
};

pub fn chat_call(ep: &Endpoint, model: &str, req: &ChatRequest) -> HttpCall {
    // From a wire whose consecutive assistant turns are one message, they go as one.
    let mut messages = if req
        .original
        .as_ref()
        .is_some_and(|o| o.wire != crate::core::vocab::Wire::OpenAi)
    {
        history::openai_messages_merged(&req.conversation)
    } else {
        history::openai_messages(&req.conversation)
    };
    // Messages kept in place already carry their own parts.
    let in_place = req.conversation.system_in_place().is_some();
    if let (Dialect::Openai | Dialect::Azure, Some(pieces), false) =
        (ep.dialect, req.conversation.system_pieces(), in_place)
    {
        // Several system pieces (an Anthropic client's blocks) stay apart where the API
        // takes a system message's content as text parts, as OpenAI's own documents
        // ("for system messages, only type text is supported"); other compatible APIs
        // get the one string (spec/fidelity.md §2: joined only where one is needed).
        if let Some(first) = messages.first_mut() {
            first["content"] = pieces
                .iter()
                .map(|p| json!({"type": "text", "text": p}))
                .collect();
        }
    }
    if in_place && !matches!(ep.dialect, Dialect::Openai | Dialect::Azure) {
        // The `developer` role and a system message of parts are OpenAI's own: other
        // compatible APIs know `system` with one string. The place is kept.
        for m in messages.iter_mut() {
            let role = m.get("role").and_then(Value::as_str);
            if !matches!(role, Some("system" | "developer")) {
                continue;
            }
            m["role"] = json!("system");
            if let Some(parts) = m.get("content").and_then(Value::as_array) {
                let joined: Vec<&str> = parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect();
                m["content"] = json!(joined.join("\n\n"));
            }
        }
    }
    let mut body = json!({
        "model": model,
        "messages": messages,
        "stream": false,
    });
    if let Some(max) = req.max_tokens {
        // OpenAI's reasoning models reject `max_tokens`; most compatible APIs know only
        // it (spec/fidelity.md §2).
        let name = match (req.max_tokens_name, ep.dialect) {
            // Mistral refuses every field it does not know: its cap is `max_tokens`.
            (_, crate::classify::dialect::Dialect::Mistral) | (None, _) => {
                max_tokens_name(ep.dialect)
            }
            (Some(named), _) => named,
        };
        body[name] = json!(max);
    }
    if let Some(obj) = body.as_object_mut() {
        super::codec::put_sampling(obj, &req.sampling, &SAMPLING);
    }
    if let Some(n) = req.n {
        body["n"] = json!(n);
    }
    // OpenAI refuses `parallel_tool_calls` and `tool_choice` without `tools`.
    if let Some(p) = req.parallel_tool_calls.filter(|_| !req.tools.is_empty()) {
        body["parallel_tool_calls"] = json!(p);
    }
    // The client's own word where it gave one (`minimal`, `none`, `xhigh`): as sent.
    if let Some(word) = &req.effort_word {
        body["reasoning_effort"] = json!(word);
    } else if let Some(r) = req.reasoning {
        body["reasoning_effort"] = json!(r.effort().as_str());
    }
    if !req.tools.is_empty() {
        body["tools"] = history::openai_tools(&req.tools);
    }
    if let Some(choice) = req.tool_choice.as_ref().filter(|_| !req.tools.is_empty()) {
        body["tool_choice"] = match choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
        };
    }
    if let Some(schema) = &req.json_schema {
        // `json_object` (any object, no schema of its own name) goes as asked
        // (fidelity.md §2: "as sent"), not as a schema named `answer`.
        body["response_format"] =
            if *schema == json!({"type": "object"}) && req.schema_name.is_none() {
                json!({"type": "json_object"})
            } else {
                let mut spec = json!({
                    "name": req.schema_name.as_deref().unwrap_or("answer"),
                    "schema": schema,
                });
                if let Some(strict) = req.schema_strict {
                    spec["strict"] = json!(strict);
                }
                json!({"type": "json_schema", "json_schema": spec})
            };
    }
    if let Some(user) = &req.user {
        body["user"] = json!(user);
    }
    if !req.metadata.is_empty() {
        body["metadata"] = json!(req.metadata);
    }
    HttpCall {
        url: ep.url("/chat/completions"),
        headers: vec![("authorization", format!("Bearer {}", ep.api_key.expose()))],
        body: body.into(),
    }
}

/// The name of the output cap on `dialect`: `max_completion_tokens` at OpenAI and
/// Azure, `max_tokens` on every other OpenAI-compatible API.
pub fn max_tokens_name(dialect: crate::classify::dialect::Dialect) -> &'static str {
    use crate::classify::dialect::Dialect;
    match dialect {
        Dialect::Openai | Dialect::Azure => "max_completion_tokens",
        _ => "max_tokens",
    }
}

/// What a chat `response_format` asks of the answer, as the canonical request holds
/// it: the schema it must satisfy (`json_object`: any object; `text`: none), and the
/// schema's own `name` and `strict`.
pub struct ResponseFormat {
    pub schema: Option<Value>,
    pub name: Option<String>,
    pub strict: Option<bool>,
}

/// Reads a chat `response_format` (a gateway client's, a scenario's request).
pub fn response_format(rf: &Value) -> Result<ResponseFormat, &'static str> {
    let schema = match rf.get("type").and_then(Value::as_str) {
        Some("json_schema") => match rf.pointer("/json_schema/schema") {
            Some(s @ Value::Object(_)) => Some(s.clone()),
            _ => return Err("`response_format.json_schema.schema` must be a JSON Schema object"),
        },
        // Any JSON object: what a wire without the mode checks the answer against.
        Some("json_object") => Some(json!({"type": "object"})),
        Some("text") => None,
        _ => return Err("`response_format.type` must be text, json_object or json_schema"),
    };
    Ok(ResponseFormat {
        schema,
        name: rf
            .pointer("/json_schema/name")
            .and_then(Value::as_str)
            .map(str::to_string),
        strict: rf.pointer("/json_schema/strict").and_then(Value::as_bool),
    })
}

/// Reads a chat `tool_choice`: `auto`, `none`, `required`, or
/// `{type: function, function: {name}}`.
pub fn tool_choice(v: &Value) -> Result<ToolChoice, String> {
    match v {
        Value::String(s) => ToolChoice::from_word(s)
            .ok_or_else(|| format!("`tool_choice` `{s}` is not auto, none or required")),
        _ => v
            .pointer("/function/name")
            .and_then(Value::as_str)
            .map(|name| ToolChoice::Tool(name.to_string()))
            .ok_or_else(|| {
                "`tool_choice` must be a string or {type: function, function: {name}}".to_string()
            }),
    }
}

/// OpenAI's `finish_reason` in the shared vocabulary.
pub fn finish_reason(s: &str) -> FinishReason {
    match s {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        // Zhipu GLM: `sensitive` is its safety audit stopping the answer.
        "content_filter" | "sensitive" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_string()),
    }
}

/// A `usage` object: prompt, completion, and cached prompt tokens when reported.
pub fn usage(u: Option<&Value>) -> Usage {
    Usage {
        input_tokens: tokens(u.and_then(|u| u.get("prompt_tokens"))),
        output_tokens: tokens(u.and_then(|u| u.get("completion_tokens"))),
        cached_tokens: super::codec::count(
            u.and_then(|u| u.pointer("/prompt_tokens_details/cached_tokens")),
        ),
        cache_creation_tokens: None,
        reasoning_tokens: super::codec::count(
            u.and_then(|u| u.pointer("/completion_tokens_details/reasoning_tokens")),
        ),
    }
}

/// `choices[0].message` (content and tool calls), `finish_reason`, `model`, `usage`, and
/// the body's `id`.
pub fn parse_chat(v: &Value) -> Result<ChatParsed, BadSuccess> {
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| BadSuccess::Malformed("no choices in the completion".into()))?;
    // Some gateways (OpenRouter) report a failure mid-generation inside the choice.
    if let Some(err) = choice.get("error").filter(|e| e.is_object()) {
        let fields =
            crate::classify::failure::ErrorFields::from_value(&serde_json::json!({ "error": err }))
                .unwrap_or_default();
        return Err(BadSuccess::Failed(Box::new(fields)));
    }
    // The model stopped on a failure: whatever text came with it is a cut-off answer,
    // never a complete one.
    if let Some(reason) = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .filter(|r| is_failure_finish(r))
    {
        return Err(BadSuccess::Failed(Box::new(finished_on_error(reason))));
    }
    let message = choice.get("message");
    let content = message.and_then(|m| m.get("content"));
    let filtered = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .is_some_and(|r| finish_reason(r) == FinishReason::ContentFilter);
    // A refusal is an answer (fidelity.md §4): `message.refusal` non-empty, or a 2xx
    // that finished on the content filter (Azure's empty content beside
    // `finish_reason: content_filter`, Zhipu's `sensitive`).
    let refusal_text = message
        .and_then(|m| m.get("refusal"))
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty());
    let refusal = match refusal_text {
        Some(r) => Some(r.to_string()),
        None => filtered.then(String::new),
    };
    let text = match content {
        Some(Value::String(s)) => s.clone(),
        // Tool-call-only answers carry `content: null`; they are still answers.
        Some(Value::Null) | None
            if message
                .and_then(|m| m.get("tool_calls"))
                .is_some_and(|t| t.is_array()) =>
        {
            String::new()
        }
        // `content: null` beside a refusal: the refusal is the answer.
        Some(Value::Null) | None if refusal.is_some() => String::new(),
        _ => {
            return Err(BadSuccess::Malformed(
                "no message content in the completion".into(),
            ));
        }
    };
    let tool_calls = match message {
        Some(m) => history::openai_answer_tool_calls(m).map_err(|e| {
            BadSuccess::Malformed(format!("a tool call in the answer is unusable: {e}"))
        })?,
        None => Vec::new(),
    };
    Ok(ChatParsed {
        text,
        tool_calls,
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(finish_reason),
        model: v.get("model").and_then(Value::as_str).map(str::to_string),
        usage: usage(v.get("usage")),
        id: v.get("id").and_then(Value::as_str).map(str::to_string),
        refusal,
        // DeepSeek, Qwen, Kimi and others put the reasoning beside the content.
        reasoning: message
            .and_then(|m| m.get("reasoning_content"))
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
            .map(str::to_string),
        more_choices: Vec::new(),
    })
}

/// Finish reasons that report a failure, not an end: `error` (OpenRouter's
/// chat-completion schema, copied by LiteLLM and vLLM front ends) and `network_error`
/// (Zhipu GLM: the inference failed; public clients map it to a provider error, find_string
/// `"finish_reason":"network_error"`).
pub fn is_failure_finish(reason: &str) -> bool {
    matches!(reason, "error" | "network_error")
}

/// The error fields of a choice that ended on a failure finish reason and no error
/// object: no code, so the classifier reads it as the provider's fault (`server_error`).
pub fn finished_on_error(reason: &str) -> crate::classify::failure::ErrorFields {
    crate::classify::failure::ErrorFields {
        message: Some(format!("the model finished with finish_reason {reason:?}")),
        ..Default::default()
    }
}

/// `POST {base}/embeddings` with a batch `input`.
pub fn embed_call(
    ep: &Endpoint,
    model: &str,
    inputs: &[String],
    dimensions: Option<u32>,
) -> HttpCall {
    let mut body = json!({ "model": model, "input": inputs });
    if let Some(d) = dimensions {
        body["dimensions"] = json!(d);
    }
    HttpCall {
        url: ep.url("/embeddings"),
        headers: vec![("authorization", format!("Bearer {}", ep.api_key.expose()))],
        body: body.into(),
    }
}

/// `data[].embedding` in `index` order; the count must match the inputs.
pub fn parse_embed(v: &Value, expected: usize) -> Result<(Vec<Vec<f32>>, Usage), BadSuccess> {
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| BadSuccess::Malformed("no `data` in the embedding response".into()))?;
    let mut indexed: Vec<(u64, Vec<f32>)> = Vec::with_capacity(data.len());
    for (i, item) in data.iter().enumerate() {
        let index = item
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(i as u64);
        indexed.push((index, floats(item.get("embedding"))?));
    }
    indexed.sort_by_key(|(i, _)| *i);
    if indexed.len() != expected {
        return Err(BadSuccess::Malformed(format!(
            "{} embeddings for {expected} inputs",
            indexed.len()
        )));
    }
    let usage = Usage {
        input_tokens: tokens(v.pointer("/usage/prompt_tokens")),
        ..Usage::default()
    };
    Ok((indexed.into_iter().map(|(_, e)| e).collect(), usage))
}

/// A JSON array of numbers as a vector; or, for `encoding_format: base64` (forwarded
/// as the client asked on the same wire), a base64 string of little-endian f32s.
pub fn floats(v: Option<&Value>) -> Result<Vec<f32>, BadSuccess> {
    if let Some(s) = v.and_then(Value::as_str) {
        return base64_floats(s).filter(|f| !f.is_empty()).ok_or_else(|| {
            BadSuccess::Malformed("an embedding is not base64 of little-endian f32s".into())
        });
    }
    v.and_then(Value::as_array)
        .filter(|a| !a.is_empty())
        .and_then(|a| a.iter().map(|x| x.as_f64().map(|f| f as f32)).collect())
        .ok_or_else(|| BadSuccess::Malformed("an embedding is not an array of numbers".into()))
}

/// Standard base64 (RFC 4648, padding optional) of little-endian f32s.
fn base64_floats(s: &str) -> Option<Vec<f32>> {
    use base64::Engine;
    // Padding optional: some compatible servers leave it off.
    const LENIENT: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let bytes = LENIENT.decode(s).ok()?;
    if bytes.len() % 4 != 0 {
        return None;
    }
    Some(
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base64_embedding_is_read_as_little_endian_floats() {
        // [1.0, -2.5] as little-endian f32s.
        let v = json!("AACAPwAAIMA=");
        assert_eq!(floats(Some(&v)).ok(), Some(vec![1.0, -2.5]));
        assert!(floats(Some(&json!("AAA*"))).is_err());
    }

    #[test]
    fn parses_a_completion() {
        let v = json!({"id":"chatcmpl-1","model":"gpt-x-0613","choices":[{"index":0,"message":{"role":"assistant","content":"OK"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":4}}});
        let p = parse_chat(&v).ok().unwrap();
        assert_eq!(
            (p.text.as_str(), p.usage.output_tokens, p.id.as_deref()),
            ("OK", 1, Some("chatcmpl-1"))
        );
        assert_eq!(p.usage.cached_tokens, Some(4));
        assert_eq!(p.model.as_deref(), Some("gpt-x-0613"));
        assert_eq!(p.finish_reason, Some(FinishReason::Stop));
        assert!(matches!(
            parse_chat(&json!({"choices":[]})),
            Err(BadSuccess::Malformed(_))
        ));
        let filtered =
            json!({"choices":[{"message":{"content":null},"finish_reason":"content_filter"}]});
        assert_eq!(
            parse_chat(&filtered).ok().and_then(|p| p.refusal),
            Some(String::new())
        );
    }

    /// Guards OpenAI's refusal (`content: null`, `refusal: "…"`): it was read as a
    /// completion without content (server_error), retried, and answered with a 502.
    #[test]
    fn a_refusal_field_is_the_answer() {
        let v = json!({"choices":[{"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]});
        let p = parse_chat(&v).ok().unwrap();
        assert_eq!(p.text, "");
        assert_eq!(p.refusal.as_deref(), Some("I can't help with that."));
        // An empty refusal field beside an ordinary answer is no refusal.
        let plain =
            json!({"choices":[{"message":{"content":"OK","refusal":null},"finish_reason":"stop"}]});
        assert_eq!(parse_chat(&plain).ok().and_then(|p| p.refusal), None);
    }

    /// Guards Azure's filtered completion with `content: ""`: it was served as an empty
    /// answer. A 2xx that finished on the content filter is a refusal (fidelity.md §4).
    #[test]
    fn empty_content_stopped_by_a_content_filter_is_a_refusal() {
        let v = json!({"choices":[{"message":{"role":"assistant","content":""},"finish_reason":"content_filter"}]});
        assert_eq!(
            parse_chat(&v).ok().and_then(|p| p.refusal),
            Some(String::new())
        );
        // Zhipu GLM's safety audit says `sensitive`.
        let glm =
            json!({"choices":[{"index":0,"finish_reason":"sensitive","message":{"content":""}}]});
        assert_eq!(
            parse_chat(&glm).ok().and_then(|p| p.refusal),
            Some(String::new())
        );
        // Text that made it out before the filter is kept, and the answer is a refusal.
        let partial =
            json!({"choices":[{"message":{"content":"Part"},"finish_reason":"content_filter"}]});
        let p = parse_chat(&partial).ok().unwrap();
        assert_eq!((p.text.as_str(), p.refusal.as_deref()), ("Part", Some("")));
    }

    /// Guards OpenRouter's 200 whose choice ends with `finish_reason: "error"`: it was
    /// served as a (cut-off or empty) success.
    #[test]
    fn a_choice_that_finished_on_error_is_no_answer() {
        for content in ["", "Half an ans"] {
            let v = json!({"id":"gen-1","choices":[{"index":0,"message":{"role":"assistant","content":content},"finish_reason":"error","native_finish_reason":"error"}]});
            assert!(
                matches!(parse_chat(&v), Err(BadSuccess::Failed(_))),
                "{content:?}"
            );
        }
        // Zhipu GLM's failed inference.
        let glm = json!({"choices":[{"index":0,"finish_reason":"network_error","message":{"content":""}}]});
        assert!(matches!(parse_chat(&glm), Err(BadSuccess::Failed(_))));
        let choice_error = json!({"choices":[{"message":{"content":""},"finish_reason":"error","error":{"code":502,"message":"Upstream error"}}]});
        match parse_chat(&choice_error) {
            Err(BadSuccess::Failed(f)) => assert_eq!(f.code.as_deref(), Some("502")),
            other => panic!("{:?}", other.is_ok()),
        }
    }
}
