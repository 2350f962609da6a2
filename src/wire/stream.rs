//! Streaming chat on every wire: the request, the SSE events each wire sends, and the
//! driver that hands visible text to the caller as it arrives (never buffered whole)
//! while watching two real-time deadlines — the first visible token, then the longest
//! silence between chunks. A stream that sent its finish is complete even without the
//! terminator; one that closes before its finish is truncated, never a success.

use super::sse::SseFramer;
use super::stream_limits::{Ended, StreamLimits, StreamWatch, Verdict};
use super::{read_capped, transport_failure, Endpoint, HttpCall, ERROR_BODY_CAP};
use crate::clock::Stopwatch;
use crate::failure::{ErrorFields, Headers, Transport, UpstreamFailure};
use crate::request::{ChatRequest, Usage};
use crate::vocab::Wire;
use serde_json::Value;
use std::time::Duration;

/// What one SSE event means, whatever the wire.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// Text for the caller.
    Delta(String),
    /// The model finished (finish reason / stop reason), maybe with usage.
    Finish(Option<Usage>),
    /// Usage arriving in its own event (OpenAI's `include_usage` chunk).
    Usage(Usage),
    /// The wire's end-of-stream marker (`[DONE]`, `message_stop`).
    Terminator,
    /// The wire's in-stream error event.
    Error(Box<ErrorFields>),
    /// An event that could not be read; skipped, and counted.
    Malformed(String),
}

pub fn stream_call(ep: &Endpoint, model: &str, req: &ChatRequest) -> HttpCall {
    match ep.wire {
        Wire::OpenAi => {
            let mut call = super::openai::chat_call(ep, model, req);
            call.body["stream"] = Value::Bool(true);
            call.body["stream_options"] = serde_json::json!({"include_usage": true});
            call
        }
        Wire::Anthropic => {
            let mut call = super::anthropic::chat_call(ep, model, req);
            call.body["stream"] = Value::Bool(true);
            call
        }
        Wire::Gemini => {
            let mut call = super::gemini::chat_call(ep, model, req);
            call.url = ep.url(&format!(
                "/v1beta/models/{model}:streamGenerateContent?alt=sse"
            ));
            call
        }
    }
}

/// Reads one SSE event of `wire`. Pure, so every wire's event table is unit-tested.
pub fn parse_event(wire: Wire, event: &str, data: &str) -> Vec<StreamEvent> {
    let data = data.trim();
    if data.is_empty() {
        return Vec::new();
    }
    if wire == Wire::OpenAi && data == "[DONE]" {
        return vec![StreamEvent::Terminator];
    }
    let v: Value = match serde_json::from_str(data) {
        Ok(v) => v,
        Err(e) => return vec![StreamEvent::Malformed(format!("not JSON: {e}"))],
    };
    if wire == Wire::Anthropic && event == "error" || v.get("error").is_some_and(Value::is_object) {
        return vec![StreamEvent::Error(Box::new(
            ErrorFields::from_value(&v).unwrap_or_default(),
        ))];
    }
    match wire {
        Wire::OpenAi => openai_event(&v),
        Wire::Anthropic => anthropic_event(event, &v),
        Wire::Gemini => gemini_event(&v),
    }
}

fn openai_event(v: &Value) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first());
    if let Some(choice) = choice {
        if let Some(text) = choice.pointer("/delta/content").and_then(Value::as_str) {
            if !text.is_empty() {
                out.push(StreamEvent::Delta(text.to_string()));
            }
        }
        if choice.get("finish_reason").is_some_and(|f| !f.is_null()) {
            out.push(StreamEvent::Finish(None));
        }
    }
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        out.push(StreamEvent::Usage(Usage {
            input_tokens: super::tokens(u.get("prompt_tokens")),
            output_tokens: super::tokens(u.get("completion_tokens")),
        }));
    }
    if out.is_empty() && choice.is_none() && v.get("usage").is_none() && v.get("id").is_none() {
        out.push(StreamEvent::Malformed(
            "a chunk with no choices, usage or id".into(),
        ));
    }
    out
}

fn anthropic_event(event: &str, v: &Value) -> Vec<StreamEvent> {
    let kind = v.get("type").and_then(Value::as_str).unwrap_or(event);
    match kind {
        "content_block_delta" => match v.pointer("/delta/text").and_then(Value::as_str) {
            Some(t) if !t.is_empty() => vec![StreamEvent::Delta(t.to_string())],
            _ => Vec::new(),
        },
        "message_delta" => {
            let finished = v
                .pointer("/delta/stop_reason")
                .is_some_and(|s| !s.is_null());
            let usage = v.get("usage").map(|u| Usage {
                input_tokens: super::tokens(u.get("input_tokens")),
                output_tokens: super::tokens(u.get("output_tokens")),
            });
            if finished {
                vec![StreamEvent::Finish(usage)]
            } else {
                usage.map(StreamEvent::Usage).into_iter().collect()
            }
        }
        "message_stop" => vec![StreamEvent::Terminator],
        _ => Vec::new(), // message_start, content_block_start/stop, ping
    }
}

fn gemini_event(v: &Value) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    let candidate = v
        .get("candidates")
        .and_then(Value::as_array)
        .and_then(|c| c.first());
    if let Some(c) = candidate {
        let text = super::gemini::candidate_text(c);
        if !text.is_empty() {
            out.push(StreamEvent::Delta(text));
        }
    }
    let usage = v.get("usageMetadata").map(|u| Usage {
        input_tokens: super::tokens(u.get("promptTokenCount")),
        output_tokens: super::tokens(u.get("candidatesTokenCount")),
    });
    match candidate
        .and_then(|c| c.get("finishReason"))
        .and_then(Value::as_str)
    {
        Some(_) => out.push(StreamEvent::Finish(usage)),
        None => out.extend(usage.map(StreamEvent::Usage)),
    }
    if candidate.is_none() && out.is_empty() {
        out.push(StreamEvent::Malformed("a chunk with no candidates".into()));
    }
    out
}

/// A stream that completed. Its text is what `StreamAttempt::delivered` holds.
#[derive(Debug, Clone)]
pub struct StreamSuccess {
    pub usage: Option<Usage>,
    pub request_id: Option<String>,
    pub headers: Headers,
    /// Events that could not be read and were skipped.
    pub skipped_events: u32,
}

/// One streaming attempt: its result, and whether visible text reached the caller.
#[derive(Debug)]
pub struct StreamAttempt {
    pub result: Result<StreamSuccess, UpstreamFailure>,
    /// Text already delivered: after this, no other route may answer (decision row 2).
    pub delivered: String,
}

/// Sends one streaming call and drives it to its end, handing each piece of visible
/// text to `on_delta` as it arrives.
pub async fn stream_chat(
    client: &reqwest::Client,
    ep: &Endpoint,
    model: &str,
    req: &ChatRequest,
    on_delta: &(dyn Fn(&str) + Send + Sync),
) -> StreamAttempt {
    let mut delivered = String::new();
    let result = drive(client, ep, model, req, on_delta, &mut delivered).await;
    StreamAttempt { result, delivered }
}

async fn drive(
    client: &reqwest::Client,
    ep: &Endpoint,
    model: &str,
    req: &ChatRequest,
    on_delta: &(dyn Fn(&str) + Send + Sync),
    delivered: &mut String,
) -> Result<StreamSuccess, UpstreamFailure> {
    let mut watch = StreamWatch::new(limits_of(ep));
    let sw = Stopwatch::start();

    let call = stream_call(ep, model, req);
    let mut builder = client.post(&call.url).json(&call.body);
    for (name, value) in &call.headers {
        builder = builder.header(*name, value);
    }
    let (wait, why) = watch
        .next_wait(sw.elapsed())
        .map_err(|why| ended(&watch, why, None, &Headers::default()))?;
    let mut resp = match tokio::time::timeout(wait, builder.send()).await {
        Err(_) => return Err(ended(&watch, why, None, &Headers::default())),
        Ok(Err(e)) => return Err(transport_failure(e)),
        Ok(Ok(r)) => r,
    };
    let status = resp.status().as_u16();
    let headers = Headers::from_reqwest(resp.headers());
    if !(200..300).contains(&status) {
        let (left, why) = watch
            .next_wait(sw.elapsed())
            .unwrap_or((Duration::from_millis(1), Ended::NoFirstToken));
        return match tokio::time::timeout(left, read_capped(resp, ERROR_BODY_CAP)).await {
            Ok(Ok((raw, _))) => Err(UpstreamFailure::from_response(status, headers, &raw)),
            Ok(Err(cut)) => Err(super::body_cut_off(status, headers, cut)),
            Err(_) => Err(ended(&watch, why, Some(status), &headers)),
        };
    }
    let request_id = headers.request_id().map(str::to_string);
    let broke = |headers: &Headers, why: String| UpstreamFailure {
        status: Some(status),
        headers: headers.clone(),
        transport: Some(Transport::StreamInterrupted),
        excerpt: why,
        ..Default::default()
    };

    // Framed here, chunk by chunk, by the bounded framer: between two chunks the driver
    // checks every deadline, so a peer that never lets a read wait cannot outrun them.
    let mut framer = SseFramer::new(usize::try_from(ep.max_event_bytes).unwrap_or(usize::MAX));
    let mut events = Vec::new();
    let mut usage: Option<Usage> = None;
    let mut finished = false;
    let mut skipped = 0u32;
    'read: loop {
        let (wait, why) = watch
            .next_wait(sw.elapsed())
            .map_err(|why| ended(&watch, why, Some(status), &headers))?;
        let chunk = match tokio::time::timeout(wait, resp.chunk()).await {
            Err(_) => return Err(ended(&watch, why, Some(status), &headers)),
            Ok(Ok(Some(chunk))) => chunk,
            Ok(Ok(None)) if finished => break,
            Ok(Ok(None)) => {
                return Err(broke(
                    &headers,
                    "the stream closed before its finish".into(),
                ))
            }
            Ok(Err(_)) if finished => break,
            Ok(Err(e)) => {
                let e = e.without_url();
                return Err(broke(&headers, format!("the stream broke: {e}")));
            }
        };
        watch.chunk(sw.elapsed());
        if framer.feed(&chunk, &mut events).is_err() {
            return Err(ended(&watch, Ended::EventTooLarge, Some(status), &headers));
        }
        for event in events.drain(..) {
            for ev in parse_event(ep.wire, &event.event, &event.data) {
                match ev {
                    StreamEvent::Delta(t) => {
                        // Nothing past `max_stream_bytes` reaches the caller.
                        if let Err(why) = watch.deliver(t.len()) {
                            return Err(ended(&watch, why, Some(status), &headers));
                        }
                        on_delta(&t);
                        delivered.push_str(&t);
                    }
                    StreamEvent::Finish(u) => {
                        finished = true;
                        usage = u.or(usage);
                    }
                    StreamEvent::Usage(u) => usage = Some(u),
                    StreamEvent::Terminator => finished = true,
                    StreamEvent::Error(fields) => {
                        return Err(UpstreamFailure {
                            status: Some(status),
                            headers: headers.clone(),
                            excerpt: fields.message.clone().unwrap_or_default(),
                            error: Some(*fields),
                            transport: None,
                            malformed: None,
                        })
                    }
                    StreamEvent::Malformed(_) => skipped += 1,
                }
            }
            // A finish with its usage is a complete answer: finalise at once rather than
            // wait for a terminator that may never come.
            if finished
                && (usage.is_some()
                    || event.data.trim() == "[DONE]"
                    || event.event == "message_stop")
            {
                break 'read;
            }
        }
        // A busy peer must not starve the runtime's other tasks (and timers).
        tokio::task::yield_now().await;
    }
    Ok(StreamSuccess {
        usage,
        request_id,
        headers,
        skipped_events: skipped,
    })
}

/// The endpoint's stream limits.
pub fn limits_of(ep: &Endpoint) -> StreamLimits {
    StreamLimits {
        first_token_ms: ep.first_token_timeout_ms,
        idle_ms: ep.stream_idle_ms,
        stream_max_ms: ep.stream_max_ms,
        max_stream_bytes: ep.max_stream_bytes,
        max_event_bytes: ep.max_event_bytes,
    }
}

/// The failure of a stream a limit ended, as spec/cli.md words it: `stream_interrupted`
/// after the first visible token; before it, `timeout` for a deadline and
/// `server_error` for a cap (the 200 carried no usable answer).
fn ended(
    watch: &StreamWatch,
    why: Ended,
    status: Option<u16>,
    headers: &Headers,
) -> UpstreamFailure {
    let detail = why.detail(&watch.limits);
    let transport = match why.verdict(watch.visible()) {
        Verdict::Timeout => Some(Transport::Timeout),
        Verdict::Interrupted => Some(Transport::StreamInterrupted),
        Verdict::BrokenSuccess => None,
    };
    UpstreamFailure {
        status,
        headers: headers.clone(),
        malformed: transport.is_none().then(|| detail.clone()),
        excerpt: detail,
        transport,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_events() {
        let d =
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#;
        assert_eq!(
            parse_event(Wire::OpenAi, "", d),
            vec![StreamEvent::Delta("Hi".into())]
        );
        let f = r#"{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        assert_eq!(
            parse_event(Wire::OpenAi, "", f),
            vec![StreamEvent::Finish(None)]
        );
        let u = r#"{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
        assert_eq!(
            parse_event(Wire::OpenAi, "", u),
            vec![StreamEvent::Usage(Usage {
                input_tokens: 3,
                output_tokens: 2
            })]
        );
        assert_eq!(
            parse_event(Wire::OpenAi, "", "[DONE]"),
            vec![StreamEvent::Terminator]
        );
        assert!(matches!(
            parse_event(Wire::OpenAi, "", "{not json")[0],
            StreamEvent::Malformed(_)
        ));
        let e = r#"{"error":{"message":"boom","type":"server_error"}}"#;
        assert!(matches!(
            parse_event(Wire::OpenAi, "", e)[0],
            StreamEvent::Error(_)
        ));
    }

    #[test]
    fn anthropic_events() {
        let d =
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#;
        assert_eq!(
            parse_event(Wire::Anthropic, "content_block_delta", d),
            vec![StreamEvent::Delta("Hi".into())]
        );
        let m = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}"#;
        assert_eq!(
            parse_event(Wire::Anthropic, "message_delta", m),
            vec![StreamEvent::Finish(Some(Usage {
                input_tokens: 0,
                output_tokens: 5
            }))]
        );
        assert_eq!(
            parse_event(
                Wire::Anthropic,
                "message_stop",
                r#"{"type":"message_stop"}"#
            ),
            vec![StreamEvent::Terminator]
        );
        let e = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        match &parse_event(Wire::Anthropic, "error", e)[0] {
            StreamEvent::Error(f) => assert_eq!(f.kind.as_deref(), Some("overloaded_error")),
            other => panic!("{other:?}"),
        }
        assert!(parse_event(Wire::Anthropic, "ping", r#"{"type":"ping"}"#).is_empty());
    }

    #[test]
    fn gemini_events() {
        let d =
            r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"},"index":0}]}"#;
        assert_eq!(
            parse_event(Wire::Gemini, "", d),
            vec![StreamEvent::Delta("Hi".into())]
        );
        let f = r#"{"candidates":[{"content":{"parts":[{"text":""}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":2,"candidatesTokenCount":1}}"#;
        assert_eq!(
            parse_event(Wire::Gemini, "", f),
            vec![StreamEvent::Finish(Some(Usage {
                input_tokens: 2,
                output_tokens: 1
            }))]
        );
    }
}
