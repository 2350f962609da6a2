//! What one SSE event means, whatever the wire: each wire's events (OpenAI chunks,
//! Anthropic typed events, Gemini candidates) read into the same `WireEvent`s. Pure:
//! the driver in `stream` owns the bytes and the deadlines.

use crate::classify::failure::ErrorFields;
use crate::core::answer::FinishReason;
use crate::core::request::Usage;
use crate::core::vocab::Wire;
use serde_json::Value;

/// What one SSE event means, whatever the wire.
#[derive(Debug, Clone, PartialEq)]
pub enum WireEvent {
    /// Text for the caller.
    Delta(String),
    /// The model refuses (fidelity.md §4): refusal text for the caller (OpenAI
    /// `delta.refusal`), or empty where a finish reason says so (`content_filter`,
    /// Anthropic `refusal`, Gemini `SAFETY`, ...), just before that finish.
    Refusal(String),
    /// Reasoning text (Anthropic `thinking_delta`, an OpenAI-compatible
    /// `delta.reasoning_content`, a Gemini thought part): visible where the client is
    /// shown it (fidelity.md §5; an Anthropic client is not shown another wire's).
    Reasoning(String),
    /// A piece of tool call `index`: id and name when it starts, argument text to append.
    ToolCall {
        index: u32,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    /// The model finished (finish reason / stop reason), maybe with usage.
    Finish(Option<FinishReason>, Option<Usage>),
    /// Usage arriving in its own event (OpenAI's `include_usage` chunk, Anthropic's
    /// `message_start`).
    Usage(Usage),
    /// The model the stream says is answering.
    Model(String),
    /// The events that follow, up to the next `Choice` or the end of this SSE event,
    /// are choice `i`'s (a Gemini stream of several candidates, a client's `n`). An
    /// event without one is choice 0's.
    Choice(u32),
    /// The wire's end-of-stream marker (`[DONE]`, `message_stop`).
    Terminator,
    /// The wire's in-stream error event.
    Error(Box<ErrorFields>),
    /// An event that could not be read; skipped, and counted.
    Malformed(String),
}

/// Reads one SSE event of `wire`. Pure, so every wire's event table is unit-tested.
/// `calls_so_far` numbers Gemini's whole function calls on from the earlier chunks:
/// how many each choice has sent, by choice (none named: none sent).
pub fn parse_event(wire: Wire, event: &str, data: &str, calls_so_far: &[u32]) -> Vec<WireEvent> {
    let data = data.trim();
    if data.is_empty() {
        return Vec::new();
    }
    if wire == Wire::OpenAi && data == "[DONE]" {
        return vec![WireEvent::Terminator];
    }
    let v: Value = match serde_json::from_str(data) {
        Ok(v) => v,
        Err(e) => return vec![WireEvent::Malformed(format!("not JSON: {e}"))],
    };
    if wire == Wire::Anthropic && event == "error" || v.get("error").is_some_and(Value::is_object) {
        return vec![WireEvent::Error(Box::new(
            ErrorFields::from_value(&v).unwrap_or_default(),
        ))];
    }
    // MiniMax reports a failure mid-stream as a chunk with a non-zero
    // `base_resp.status_code` (1027 "output new_sensitive" after the first deltas, then
    // `[DONE]`: seen in public client code, find_string `"base_resp":{"status_code":1027`).
    // Read as a chunk with no choices, the cut-off answer ended as a success.
    if let Some(fields) = crate::classify::failure::embedded_error(&v) {
        return vec![WireEvent::Error(Box::new(fields))];
    }
    match wire {
        Wire::OpenAi => openai_event(&v),
        Wire::Anthropic => anthropic_event(event, &v),
        Wire::Gemini => gemini_event(&v, calls_so_far),
        Wire::Responses => responses_event(event, &v),
    }
}

/// One typed event of the Responses API (`type` in the data, else the SSE event name).
/// A function call's deltas carry its `output_index` as their index; the lifecycle's
/// last event (`response.completed` / `incomplete`) is the finish, with the usage, and
/// ends the stream (this wire sends no `[DONE]`).
fn responses_event(event: &str, v: &Value) -> Vec<WireEvent> {
    let kind = v.get("type").and_then(Value::as_str).unwrap_or(event);
    let text = |key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    let index = || v.get("output_index").and_then(Value::as_u64).unwrap_or(0) as u32;
    match kind {
        "response.created" | "response.in_progress" => v
            .pointer("/response/model")
            .and_then(Value::as_str)
            .map(|m| vec![WireEvent::Model(m.to_string())])
            .unwrap_or_default(),
        "response.output_text.delta" => {
            let t = text("delta");
            if t.is_empty() {
                Vec::new()
            } else {
                vec![WireEvent::Delta(t)]
            }
        }
        "response.refusal.delta" => vec![WireEvent::Refusal(text("delta"))],
        "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
            vec![WireEvent::Reasoning(text("delta"))]
        }
        "response.output_item.added"
            if v.pointer("/item/type").and_then(Value::as_str) == Some("function_call") =>
        {
            let item = |key: &str| {
                v.pointer(&format!("/item/{key}"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            vec![WireEvent::ToolCall {
                index: index(),
                id: item("call_id"),
                name: item("name"),
                arguments: item("arguments").unwrap_or_default(),
            }]
        }
        "response.function_call_arguments.delta" => vec![WireEvent::ToolCall {
            index: index(),
            id: None,
            name: None,
            arguments: text("delta"),
        }],
        "response.completed" | "response.incomplete" => {
            let response = v.get("response").unwrap_or(&Value::Null);
            // The last event of a response that failed (or never finished) is no answer.
            match response.get("status").and_then(Value::as_str) {
                None | Some("completed" | "incomplete") => {}
                Some("failed") => {
                    return vec![WireEvent::Error(Box::new(super::responses::error_fields(
                        response.get("error"),
                    )))]
                }
                Some(other) => {
                    return vec![WireEvent::Error(Box::new(ErrorFields {
                        message: Some(format!("the stream ended on a response `{other}`")),
                        ..Default::default()
                    }))]
                }
            }
            let mut out = Vec::new();
            if let Some(m) = response.get("model").and_then(Value::as_str) {
                out.push(WireEvent::Model(m.to_string()));
            }
            let finish = super::responses::finish(response);
            // A response the content filter cut is a refusal (fidelity.md §4).
            if finish == Some(FinishReason::ContentFilter) {
                out.push(WireEvent::Refusal(String::new()));
            }
            let usage = response
                .get("usage")
                .filter(|u| u.is_object())
                .map(|u| super::responses::usage(Some(u)));
            out.push(WireEvent::Finish(finish, usage));
            out.push(WireEvent::Terminator);
            out
        }
        "response.failed" => vec![WireEvent::Error(Box::new(super::responses::error_fields(
            v.pointer("/response/error"),
        )))],
        // The documented flat form: `code` and `message` beside `type`.
        "error" => vec![WireEvent::Error(Box::new(ErrorFields {
            code: v.get("code").and_then(Value::as_str).map(str::to_string),
            message: v.get("message").and_then(Value::as_str).map(str::to_string),
            ..Default::default()
        }))],
        _ => Vec::new(),
    }
}

fn openai_event(v: &Value) -> Vec<WireEvent> {
    let mut out = Vec::new();
    if let Some(model) = v.get("model").and_then(Value::as_str) {
        out.push(WireEvent::Model(model.to_string()));
    }
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first());
    if let Some(choice) = choice {
        // A chunk of another choice (a client's `n`, or one an upstream sends unasked)
        // is marked with its `index`, as Gemini's candidates are: read as choice 0's,
        // its text was spliced into the answer.
        let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
        match u32::try_from(index).ok().filter(|&i| i < MAX_CHOICES) {
            Some(0) => {}
            Some(i) => out.push(WireEvent::Choice(i)),
            None => {
                out.push(WireEvent::Malformed(format!("a choice with index {index}")));
                return out;
            }
        }
        if let Some(text) = choice.pointer("/delta/content").and_then(Value::as_str) {
            if !text.is_empty() {
                out.push(WireEvent::Delta(text.to_string()));
            }
        }
        if let Some(text) = choice
            .pointer("/delta/reasoning_content")
            .and_then(Value::as_str)
        {
            if !text.is_empty() {
                out.push(WireEvent::Reasoning(text.to_string()));
            }
        }
        if let Some(text) = choice.pointer("/delta/refusal").and_then(Value::as_str) {
            if !text.is_empty() {
                out.push(WireEvent::Refusal(text.to_string()));
            }
        }
        let calls = choice
            .pointer("/delta/tool_calls")
            .and_then(Value::as_array);
        for (j, call) in calls.into_iter().flatten().enumerate() {
            let str_at = |ptr: &str| {
                call.pointer(ptr)
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            out.push(WireEvent::ToolCall {
                index: call
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(j as u64) as u32,
                id: str_at("/id"),
                name: str_at("/function/name"),
                arguments: str_at("/function/arguments").unwrap_or_default(),
            });
        }
        // A failure mid-generation inside the choice (OpenRouter: `choices[0].error`, or
        // `finish_reason: "error"` alone; Zhipu: `network_error`) ends the stream as that
        // error, never as a finish.
        if let Some(err) = choice.get("error").filter(|e| e.is_object()) {
            let fields =
                ErrorFields::from_value(&serde_json::json!({ "error": err })).unwrap_or_default();
            out.push(WireEvent::Error(Box::new(fields)));
            return out;
        }
        if let Some(reason) = choice.get("finish_reason").filter(|f| !f.is_null()) {
            if let Some(r) = reason
                .as_str()
                .filter(|r| super::openai::is_failure_finish(r))
            {
                out.push(WireEvent::Error(Box::new(
                    super::openai::finished_on_error(r),
                )));
                return out;
            }
            let reason = reason.as_str().map(super::openai::finish_reason);
            if reason == Some(FinishReason::ContentFilter) {
                out.push(WireEvent::Refusal(String::new()));
            }
            out.push(WireEvent::Finish(reason, None));
        }
    }
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        out.push(WireEvent::Usage(super::openai::usage(Some(u))));
    }
    if choice.is_none() && v.get("usage").is_none() && v.get("id").is_none() {
        out.push(WireEvent::Malformed(
            "a chunk with no choices, usage or id".into(),
        ));
    }
    out
}

fn anthropic_event(event: &str, v: &Value) -> Vec<WireEvent> {
    let kind = v.get("type").and_then(Value::as_str).unwrap_or(event);
    let index = v.get("index").and_then(Value::as_u64).unwrap_or(0) as u32;
    match kind {
        "message_start" => {
            let mut out = Vec::new();
            if let Some(model) = v.pointer("/message/model").and_then(Value::as_str) {
                out.push(WireEvent::Model(model.to_string()));
            }
            if let Some(u) = v.pointer("/message/usage").filter(|u| u.is_object()) {
                out.push(WireEvent::Usage(super::anthropic::usage(Some(u))));
            }
            out
        }
        "content_block_start" => match v.get("content_block") {
            Some(b) if b.get("type").and_then(Value::as_str) == Some("tool_use") => {
                vec![WireEvent::ToolCall {
                    index,
                    id: b.get("id").and_then(Value::as_str).map(str::to_string),
                    name: b.get("name").and_then(Value::as_str).map(str::to_string),
                    arguments: String::new(),
                }]
            }
            _ => Vec::new(),
        },
        "content_block_delta" => {
            if let Some(t) = v.pointer("/delta/text").and_then(Value::as_str) {
                return match t.is_empty() {
                    true => Vec::new(),
                    false => vec![WireEvent::Delta(t.to_string())],
                };
            }
            if let Some(t) = v.pointer("/delta/thinking").and_then(Value::as_str) {
                return match t.is_empty() {
                    true => Vec::new(),
                    false => vec![WireEvent::Reasoning(t.to_string())],
                };
            }
            match v.pointer("/delta/partial_json").and_then(Value::as_str) {
                Some(json) => vec![WireEvent::ToolCall {
                    index,
                    id: None,
                    name: None,
                    arguments: json.to_string(),
                }],
                None => Vec::new(),
            }
        }
        "message_delta" => {
            let stop = v.pointer("/delta/stop_reason").filter(|s| !s.is_null());
            let usage = v.get("usage").map(|u| super::anthropic::usage(Some(u)));
            match stop {
                Some(s) => {
                    let reason = s.as_str().map(super::anthropic::finish_reason);
                    let refused = s.as_str() == Some("refusal");
                    let finish = WireEvent::Finish(reason, usage);
                    if refused {
                        vec![WireEvent::Refusal(String::new()), finish]
                    } else {
                        vec![finish]
                    }
                }
                None => usage.map(WireEvent::Usage).into_iter().collect(),
            }
        }
        "message_stop" => vec![WireEvent::Terminator],
        _ => Vec::new(), // content_block_stop, ping
    }
}

/// OpenAI's largest `n`: no stream has more choices than a client may ask for.
pub(super) const MAX_CHOICES: u32 = 128;

fn gemini_event(v: &Value, calls_so_far: &[u32]) -> Vec<WireEvent> {
    // A blocked prompt streams one chunk with `promptFeedback.blockReason` and no
    // candidates: the same refusal as unstreamed (`gemini::parse_chat`).
    if let Some(reason) = v
        .pointer("/promptFeedback/blockReason")
        .and_then(Value::as_str)
    {
        return vec![WireEvent::Error(Box::new(ErrorFields {
            code: Some("content_filter".into()),
            message: Some(format!("prompt blocked: {reason}")),
            ..Default::default()
        }))];
    }
    let mut out = Vec::new();
    if let Some(model) = v.get("modelVersion").and_then(Value::as_str) {
        out.push(WireEvent::Model(model.to_string()));
    }
    let candidates: &[Value] = v
        .get("candidates")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    // `candidateCount` > 1 (a client's `n`): each candidate's events are marked with
    // its `index`, so they are never spliced into one answer. A lone candidate 0, the
    // common stream, is marked with nothing.
    let several = candidates.len() > 1
        || candidates.iter().any(|c| {
            c.get("index")
                .and_then(Value::as_u64)
                .is_some_and(|i| i > 0)
        });
    let usage = v
        .get("usageMetadata")
        .map(|u| super::gemini::usage(Some(u)));
    let mut finished = false;
    let mut indices: Vec<u32> = Vec::new();
    for c in candidates {
        // Proto3 JSON leaves a zero out: a candidate without `index` is candidate 0.
        let index = c.get("index").and_then(Value::as_u64).unwrap_or(0);
        // A choice is a slot the reader keeps state for: an index past any `n` a client
        // may ask for is not a candidate of this request.
        // Twice in one chunk is no answer either: its calls would share their ids.
        let Some(index) = u32::try_from(index)
            .ok()
            .filter(|&i| i < MAX_CHOICES && !indices.contains(&i))
        else {
            out.push(WireEvent::Malformed(format!(
                "a candidate with index {index}"
            )));
            continue;
        };
        indices.push(index);
        if several {
            out.push(WireEvent::Choice(index));
        }
        // Each choice's calls are numbered from 0, as the whole answer numbers them.
        let before = calls_so_far.get(index as usize).copied().unwrap_or(0);
        let mut calls = 0u32;
        let thought: String = c
            .pointer("/content/parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|p| p.get("thought").and_then(Value::as_bool) == Some(true))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        if !thought.is_empty() {
            out.push(WireEvent::Reasoning(thought));
        }
        let text = super::gemini::candidate_text(c);
        if !text.is_empty() {
            out.push(WireEvent::Delta(text));
        }
        // Gemini sends each function call whole, in one part; it has no call ids.
        let parts = c.pointer("/content/parts").and_then(Value::as_array);
        for call in parts
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("functionCall"))
        {
            // Gemini has no call ids: the same `call_{k}` the whole answer gets, so a
            // client can answer the call (an OpenAI SDK reads `id` from its first delta).
            out.push(WireEvent::ToolCall {
                index: before + calls,
                id: Some(format!("call_{}", before + calls)),
                name: call.get("name").and_then(Value::as_str).map(str::to_string),
                arguments: call
                    .get("args")
                    .map(Value::to_string)
                    .unwrap_or_else(|| "{}".into()),
            });
            calls += 1;
        }
        if let Some(f) = c.get("finishReason").and_then(Value::as_str) {
            if super::gemini::REFUSALS.contains(&f) {
                out.push(WireEvent::Refusal(String::new()));
            }
            // The usage is the whole answer's: stated once, with the first finish.
            out.push(WireEvent::Finish(
                Some(super::gemini::finish_reason(f, before + calls > 0)),
                if finished { None } else { usage },
            ));
            finished = true;
        }
    }
    if !finished {
        out.extend(usage.map(WireEvent::Usage));
    }
    if candidates.is_empty() && !out.iter().any(|e| matches!(e, WireEvent::Usage(_))) {
        out.push(WireEvent::Malformed("a chunk with no candidates".into()));
    }
    out
}

#[cfg(test)]
mod responses_tests {
    use super::*;

    fn events(data: &str) -> Vec<WireEvent> {
        parse_event(Wire::Responses, "", data, &[])
    }

    #[test]
    fn the_typed_events_read_into_deltas_calls_and_a_finish() {
        assert_eq!(
            events(r#"{"type":"response.output_text.delta","delta":"Hel"}"#),
            vec![WireEvent::Delta("Hel".into())]
        );
        assert_eq!(
            events(
                r#"{"type":"response.output_item.added","output_index":2,"item":{"type":"function_call","call_id":"call_1","name":"f","arguments":""}}"#
            ),
            vec![WireEvent::ToolCall {
                index: 2,
                id: Some("call_1".into()),
                name: Some("f".into()),
                arguments: String::new()
            }]
        );
        let done = events(
            r#"{"type":"response.completed","response":{"status":"completed","model":"m","output":[],"usage":{"input_tokens":3,"output_tokens":1}}}"#,
        );
        assert!(
            matches!(
                done.as_slice(),
                [
                    WireEvent::Model(_),
                    WireEvent::Finish(Some(FinishReason::Stop), Some(_)),
                    WireEvent::Terminator
                ]
            ),
            "{done:?}"
        );
    }

    /// Guards a stream whose last event was `response.completed` with `status: failed`:
    /// it was rendered as a completed empty answer, and an empty turn was kept.
    #[test]
    fn a_last_event_of_a_failed_response_is_an_error_not_a_finish() {
        let failed = events(
            r#"{"type":"response.completed","response":{"status":"failed","error":{"code":"server_error","message":"boom"},"output":[]}}"#,
        );
        assert!(
            matches!(failed.as_slice(), [WireEvent::Error(e)] if e.code.as_deref() == Some("server_error")),
            "{failed:?}"
        );
        let odd = events(
            r#"{"type":"response.completed","response":{"status":"cancelled","output":[]}}"#,
        );
        assert!(matches!(odd.as_slice(), [WireEvent::Error(_)]), "{odd:?}");
        let flat = events(r#"{"type":"error","code":"rate_limit_exceeded","message":"slow"}"#);
        assert!(
            matches!(flat.as_slice(), [WireEvent::Error(e)] if e.code.as_deref() == Some("rate_limit_exceeded")),
            "{flat:?}"
        );
    }
}
