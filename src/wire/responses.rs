//! The Responses wire (`openai_responses`): `POST {base}/responses` with Bearer auth,
//! as OpenAI, Azure's v1 API, xAI, Groq and OpenRouter serve it. The request is the
//! canonical conversation as items (`items`); the answer's `output` items are read back
//! into text, tool calls, refusal and reasoning. A client that speaks the Responses API
//! itself is read by `request`, and answered from `output`.
//!
//! The gateway keeps a conversation itself (`previous_response_id`): a route of this
//! wire is always sent the whole input, never an id, and `store: false` when the
//! request is not the client's own body.

pub mod items;
pub mod output;
pub mod request;

use super::codec::{count, tokens, BadSuccess, ChatParsed};
use super::endpoint::Endpoint;
use super::http::HttpCall;
use crate::classify::failure::ErrorFields;
use crate::core::answer::FinishReason;
use crate::core::request::{ChatRequest, ToolChoice, Usage};
use serde_json::{json, Map, Value};

pub use super::endpoint::RESPONSES_PATH as PATH;

/// A Responses body for the canonical request (another wire's client, or a library
/// request). What this wire has no field for (`stop`, `seed`, `n`, `top_k`) is named
/// by `carry`, never sent.
pub fn chat_call(ep: &Endpoint, model: &str, req: &ChatRequest) -> HttpCall {
    let (instructions, input) = items::to_items(&req.conversation);
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    if let Some(i) = instructions {
        body.insert("instructions".into(), json!(i));
    }
    body.insert("input".into(), Value::Array(input));
    body.insert("stream".into(), json!(false));
    // The gateway holds the conversation; the provider need not keep a copy.
    body.insert("store".into(), json!(false));
    if let Some(max) = req.max_tokens {
        body.insert("max_output_tokens".into(), json!(max));
    }
    if let Some(t) = req.sampling.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.sampling.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if !req.tools.is_empty() {
        body.insert("tools".into(), items::tools(&req.tools));
        if let Some(choice) = &req.tool_choice {
            body.insert(
                "tool_choice".into(),
                match choice {
                    ToolChoice::Auto => json!("auto"),
                    ToolChoice::None => json!("none"),
                    ToolChoice::Required => json!("required"),
                    ToolChoice::Tool(name) => json!({"type": "function", "name": name}),
                },
            );
        }
        if let Some(p) = req.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), json!(p));
        }
    }
    // The client's own word where it gave one (`minimal`, `none`, `xhigh`): as sent.
    if let Some(word) = &req.effort_word {
        body.insert("reasoning".into(), json!({ "effort": word }));
    } else if let Some(r) = req.reasoning {
        body.insert("reasoning".into(), json!({"effort": r.effort().as_str()}));
    }
    if let Some(schema) = &req.json_schema {
        let format = if *schema == json!({"type": "object"}) && req.schema_name.is_none() {
            json!({"type": "json_object"})
        } else {
            let mut f = json!({
                "type": "json_schema",
                "name": req.schema_name.as_deref().unwrap_or("answer"),
                "schema": schema,
            });
            if let Some(strict) = req.schema_strict {
                f["strict"] = json!(strict);
            }
            f
        };
        body.insert("text".into(), json!({ "format": format }));
    }
    if let Some(user) = &req.user {
        body.insert("user".into(), json!(user));
    }
    if !req.metadata.is_empty() {
        body.insert("metadata".into(), json!(req.metadata));
    }
    HttpCall {
        url: ep.url(PATH),
        headers: vec![("authorization", format!("Bearer {}", ep.api_key.expose()))],
        body: Value::Object(body).into(),
    }
}

/// The Responses `usage` in the one meaning every wire has: `input_tokens` is the whole
/// prompt (cached included), `output_tokens` the whole output (reasoning included).
pub fn usage(u: Option<&Value>) -> Usage {
    Usage {
        input_tokens: tokens(u.and_then(|u| u.get("input_tokens"))),
        output_tokens: tokens(u.and_then(|u| u.get("output_tokens"))),
        cached_tokens: count(u.and_then(|u| u.pointer("/input_tokens_details/cached_tokens"))),
        cache_creation_tokens: None,
        reasoning_tokens: count(
            u.and_then(|u| u.pointer("/output_tokens_details/reasoning_tokens")),
        ),
    }
}

/// Why a Responses answer ended: `incomplete` says why it was cut; a complete answer
/// with function calls asks for them.
pub fn finish(response: &Value) -> Option<FinishReason> {
    match response.get("status").and_then(Value::as_str) {
        Some("incomplete") => Some(
            match response
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str)
            {
                Some("content_filter") => FinishReason::ContentFilter,
                Some("max_output_tokens") | None => FinishReason::Length,
                Some(other) => FinishReason::Other(other.to_string()),
            },
        ),
        Some("completed") | None => {
            let calls = response
                .get("output")
                .and_then(Value::as_array)
                .is_some_and(|o| {
                    o.iter()
                        .any(|i| i.get("type").and_then(Value::as_str) == Some("function_call"))
                });
            Some(if calls {
                FinishReason::ToolCalls
            } else {
                FinishReason::Stop
            })
        }
        Some(other) => Some(FinishReason::Other(other.to_string())),
    }
}

/// The error of a `failed` response (or an `error` event), as the classifier reads it.
pub fn error_fields(error: Option<&Value>) -> ErrorFields {
    let Some(e) = error.filter(|e| e.is_object()) else {
        return ErrorFields {
            message: Some("the response failed without an error".into()),
            ..Default::default()
        };
    };
    ErrorFields::from_value(&json!({ "error": e })).unwrap_or_default()
}

/// A Responses object: its `output` items read into text (every `output_text`, in
/// order), tool calls (`function_call`), a refusal (`refusal` parts, or an answer cut by
/// the content filter) and reasoning (summary and reasoning text); `status`, `model`,
/// `usage` and `id`.
pub fn parse_chat(v: &Value) -> Result<ChatParsed, BadSuccess> {
    let status = v.get("status").and_then(Value::as_str);
    match status {
        Some("failed") => {
            return Err(BadSuccess::Failed(Box::new(error_fields(v.get("error")))));
        }
        Some("completed" | "incomplete") | None => {}
        // A background response still running, queued or cancelled: no answer yet.
        Some(other) => {
            return Err(BadSuccess::Malformed(format!(
                "the response is `{other}`, not complete"
            )))
        }
    }
    let output = v
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| BadSuccess::Malformed("no `output` in the response".into()))?;
    let mut text = String::new();
    let mut refusal: Option<String> = None;
    let mut reasoning = String::new();
    let mut tool_calls = Vec::new();
    for (i, item) in output.iter().enumerate() {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    match part.get("type").and_then(Value::as_str) {
                        Some("output_text") => {
                            text.push_str(part.get("text").and_then(Value::as_str).unwrap_or(""))
                        }
                        Some("refusal") => refusal
                            .get_or_insert_with(String::new)
                            .push_str(part.get("refusal").and_then(Value::as_str).unwrap_or("")),
                        _ => {}
                    }
                }
            }
            Some("function_call") => {
                let call = items::function_call(item, &|| format!("output[{i}]")).map_err(|e| {
                    BadSuccess::Malformed(format!("a function call is unusable: {e}"))
                })?;
                tool_calls.push(call);
            }
            Some("reasoning") => {
                for key in ["summary", "content"] {
                    for part in item
                        .get(key)
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(t) = part.get("text").and_then(Value::as_str) {
                            if !reasoning.is_empty() {
                                reasoning.push('\n');
                            }
                            reasoning.push_str(t);
                        }
                    }
                }
            }
            // Built-in tool calls (web search, ...) are the provider's own work: the
            // client's body shows them; the canonical answer has no place for them.
            _ => {}
        }
    }
    let finish_reason = finish(v);
    // A response the content filter cut is a refusal (fidelity.md §4).
    if finish_reason == Some(FinishReason::ContentFilter) && refusal.is_none() {
        refusal = Some(String::new());
    }
    Ok(ChatParsed {
        text,
        tool_calls,
        finish_reason,
        model: v.get("model").and_then(Value::as_str).map(str::to_string),
        usage: usage(v.get("usage")),
        id: v.get("id").and_then(Value::as_str).map(str::to_string),
        refusal,
        reasoning: (!reasoning.is_empty()).then_some(reasoning),
        more_choices: Vec::new(),
    })
}

/// What the gateway changes in a `response` object it passes on from a route of this
/// wire: the id (the gateway holds the conversation, so the id is its own), the
/// `previous_response_id` the client sent (the route was sent the whole input
/// instead), and `store: false` when the conversation was not kept.
#[derive(Debug, Clone, Copy)]
pub struct Relabel<'a> {
    pub id: &'a str,
    pub previous_response_id: Option<&'a str>,
    pub stored: bool,
}

/// A `response` object's bytes, relabelled: only those values change, byte for byte
/// the rest is as the upstream sent it. `None` when the body is not a JSON object.
pub fn relabel_object(body: &[u8], r: Relabel<'_>) -> Option<Vec<u8>> {
    let spans = super::passthrough::spans(body)?;
    let mut edits = Vec::new();
    let json = |v: &Value| serde_json::to_vec(v).unwrap_or_default();
    match spans.id {
        Some(span) => edits.push((span, json(&json!(r.id)))),
        // An answer without an id still gives the client the gateway's.
        None => {
            let at = body.iter().position(|c| *c == b'{')? + 1;
            let mut field = br#""id":"#.to_vec();
            field.extend(json(&json!(r.id)));
            field.push(b',');
            edits.push((at..at, field));
        }
    }
    let previous = json(&r.previous_response_id.map_or(Value::Null, |p| json!(p)));
    match spans.previous_response_id {
        Some(span) => edits.push((span, previous)),
        None if r.previous_response_id.is_some() => {
            let at = body.iter().position(|c| *c == b'{')? + 1;
            let mut field = br#""previous_response_id":"#.to_vec();
            field.extend(previous);
            field.push(b',');
            edits.push((at..at, field));
        }
        None => {}
    }
    if !r.stored {
        match spans.store {
            Some(span) => edits.push((span, b"false".to_vec())),
            None => {
                let at = body.iter().position(|c| *c == b'{')? + 1;
                edits.push((at..at, br#""store":false,"#.to_vec()));
            }
        }
    }
    Some(super::passthrough::splice(body, edits))
}

/// A lifecycle event's data (`response.created`, `response.completed`, ...),
/// relabelled in its `response`; any other event's data unchanged (`None`).
pub fn relabel_event(data: &[u8], r: Relabel<'_>) -> Option<Vec<u8>> {
    let span = super::passthrough::spans(data)?.response?;
    let inner = relabel_object(&data[span.clone()], r)?;
    Some(super::passthrough::splice(data, vec![(span, inner)]))
}

/// An SSE frame of this wire (`event: …` then `data: …` lines), relabelled when it is a
/// lifecycle event; `None` when nothing in it changes.
pub fn relabel_frame(frame: &[u8], r: Relabel<'_>) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(frame).ok()?;
    let json = frame_data(text)?;
    let relabelled = relabel_event(json.as_bytes(), r)?;
    // One `data:` line: an event's JSON split over lines (valid SSE) is joined, its
    // line breaks (whitespace between JSON tokens) made spaces.
    let mut out = Vec::with_capacity(frame.len() + 32);
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("data:"))
    {
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    out.extend(
        relabelled
            .into_iter()
            .map(|b| if b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\n\n");
    Some(out)
}

/// The data of an SSE frame: its `data:` lines joined by line breaks (the SSE rule).
fn frame_data(text: &str) -> Option<String> {
    let mut data: Option<String> = None;
    for line in text.lines() {
        if let Some(d) = line.strip_prefix("data:") {
            let d = d.strip_prefix(' ').unwrap_or(d);
            match &mut data {
                Some(all) => {
                    all.push('\n');
                    all.push_str(d);
                }
                None => data = Some(d.to_string()),
            }
        }
    }
    data
}

/// The event name of an SSE frame (`event: response.completed`).
pub fn frame_kind(frame: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(frame).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("event:"))
        .map(str::trim)
}

/// The `response` object of a lifecycle frame.
pub fn frame_response(frame: &[u8]) -> Option<Value> {
    let data = frame_data(std::str::from_utf8(frame).ok()?)?;
    let v: Value = serde_json::from_str(&data).ok()?;
    v.get("response").cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_is_read_into_text_calls_usage_and_finish() {
        let v = json!({
            "id": "resp_1", "object": "response", "status": "completed", "model": "gpt-4o-2024-08-06",
            "output": [
                {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Think."}]},
                {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": "Hello", "annotations": []},
                             {"type": "output_text", "text": " there", "annotations": []}]},
                {"id": "fc_1", "type": "function_call", "call_id": "call_9", "name": "f", "arguments": "{\"a\":1}", "status": "completed"}
            ],
            "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4},
                      "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 3}, "total_tokens": 17}
        });
        let p = parse_chat(&v).ok().unwrap();
        assert_eq!(p.text, "Hello there");
        assert_eq!(p.reasoning.as_deref(), Some("Think."));
        assert_eq!(p.tool_calls.len(), 1);
        assert_eq!(p.tool_calls[0].id, "call_9");
        assert_eq!(p.tool_calls[0].arguments, json!({"a": 1}));
        assert_eq!(p.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(p.model.as_deref(), Some("gpt-4o-2024-08-06"));
        assert_eq!(p.id.as_deref(), Some("resp_1"));
        assert_eq!(
            (
                p.usage.input_tokens,
                p.usage.output_tokens,
                p.usage.cached_tokens,
                p.usage.reasoning_tokens
            ),
            (10, 7, Some(4), Some(3))
        );
    }

    #[test]
    fn a_passed_on_response_carries_the_gateways_id_and_nothing_else_changes() {
        let body = br#"{"id":"resp_up","object":"response","previous_response_id":null,"output":[{"id":"msg_1","text":"\"id\":\"x\""}],"store":true}"#;
        let r = Relabel {
            id: "resp_gw",
            previous_response_id: Some("resp_prev"),
            stored: true,
        };
        let out = String::from_utf8(relabel_object(body, r).unwrap()).unwrap();
        assert_eq!(
            out,
            r#"{"id":"resp_gw","object":"response","previous_response_id":"resp_prev","output":[{"id":"msg_1","text":"\"id\":\"x\""}],"store":true}"#
        );
        // A body without the field gains it; an unstored conversation says so.
        let out = relabel_object(
            br#"{"id":"a","store":true}"#,
            Relabel { stored: false, ..r },
        )
        .unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (
                v["id"].as_str(),
                v["previous_response_id"].as_str(),
                v["store"].as_bool()
            ),
            (Some("resp_gw"), Some("resp_prev"), Some(false))
        );
        // No `store` in the body: added; no `id`: the gateway's given.
        let bare = relabel_object(br#"{"object":"response"}"#, Relabel { stored: false, ..r });
        let bare: Value = serde_json::from_slice(&bare.unwrap()).unwrap();
        assert_eq!(
            (bare["store"].as_bool(), bare["id"].as_str()),
            (Some(false), Some("resp_gw"))
        );
        // Events: only the lifecycle's `response` changes.
        let ev = br#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_up","status":"in_progress"}}"#;
        let out: Value = serde_json::from_slice(&relabel_event(ev, r).unwrap()).unwrap();
        assert_eq!(out["response"]["id"], "resp_gw");
        assert_eq!(out["sequence_number"], 0);
        assert!(
            relabel_event(br#"{"type":"response.output_text.delta","delta":"hi"}"#, r).is_none()
        );
    }

    #[test]
    fn a_lifecycle_frame_is_relabelled_in_place() {
        let frame = b"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_up\",\"store\":true}}\n\n";
        let r = Relabel {
            id: "resp_gw",
            previous_response_id: None,
            stored: false,
        };
        let out = relabel_frame(frame, r).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_gw\",\"store\":false}}\n\n"
        );
        assert_eq!(frame_kind(frame), Some("response.completed"));
        assert_eq!(frame_response(&out).unwrap()["id"], "resp_gw");
        assert!(relabel_frame(
            b"event: response.output_text.delta\ndata: {\"delta\":\"x\"}\n\n",
            r
        )
        .is_none());
        // An event's JSON over several `data:` lines is one event.
        let split = b"event: response.created\ndata: {\"type\":\"response.created\",\ndata: \"response\":{\"id\":\"resp_up\"}}\n\n";
        let out = relabel_frame(split, r).unwrap();
        assert_eq!(frame_response(&out).unwrap()["id"], "resp_gw");
        assert_eq!(frame_kind(&out), Some("response.created"));
        assert_eq!(frame_response(split).unwrap()["id"], "resp_up");
    }

    #[test]
    fn refusals_cuts_and_failures_are_told_apart() {
        let refusal = json!({"status": "completed", "output": [{"type": "message", "role": "assistant",
            "content": [{"type": "refusal", "refusal": "I can't help with that."}]}]});
        let p = parse_chat(&refusal).ok().unwrap();
        assert_eq!(p.refusal.as_deref(), Some("I can't help with that."));
        assert_eq!(p.text, "");
        let cut = json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "Half"}]}]});
        assert_eq!(
            parse_chat(&cut).ok().unwrap().finish_reason,
            Some(FinishReason::Length)
        );
        let filtered = json!({"status": "incomplete", "incomplete_details": {"reason": "content_filter"}, "output": []});
        assert_eq!(
            parse_chat(&filtered).ok().unwrap().refusal,
            Some(String::new())
        );
        let failed = json!({"status": "failed", "error": {"code": "server_error", "message": "boom"}, "output": []});
        match parse_chat(&failed) {
            Err(BadSuccess::Failed(f)) => assert_eq!(f.code.as_deref(), Some("server_error")),
            other => panic!("{:?}", other.is_ok()),
        }
        assert!(matches!(
            parse_chat(&json!({"status": "queued", "output": []})),
            Err(BadSuccess::Malformed(_))
        ));
        assert!(matches!(
            parse_chat(&json!({"status": "completed"})),
            Err(BadSuccess::Malformed(_))
        ));
    }
}
