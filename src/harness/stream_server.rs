//! The streaming side of the mock: a 200 SSE stream in the route's wire, sent chunk by
//! chunk with real pacing, ending however the scenario says — the wire's proper finish,
//! a finish without terminator, a clean close mid-answer, a TCP reset, silence, or the
//! wire's in-stream error event.

use super::mock_call::{request_id_header, reset, ReplyCtx};
use super::scenario::{StreamEnd, StreamItem, StreamReply};
use super::wire_bodies::{prompt_tokens, tokens_of};
use crate::core::clock::real_sleep;
use crate::core::vocab::Wire;
use serde_json::json;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// How long a `stall` stays silent: past any sane idle deadline. The server's shutdown
/// ends it sooner.
const STALL: Duration = Duration::from_secs(3600);

pub async fn serve_stream(stream: &mut TcpStream, sr: &StreamReply, ctx: &ReplyCtx<'_>) {
    let _ = write_stream(stream, sr, ctx).await;
}

async fn write_stream(
    stream: &mut TcpStream,
    sr: &StreamReply,
    ctx: &ReplyCtx<'_>,
) -> std::io::Result<()> {
    let mut head = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: close\r\n",
    );
    let (rk, rv) = request_id_header(ctx.wire, ctx.seq);
    head.push_str(&format!("{rk}: {rv}\r\n"));
    for (k, v) in &sr.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.flush().await?;

    let include_usage = ctx
        .request
        .pointer("/stream_options/include_usage")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    let sse = Sse {
        wire: ctx.wire,
        model: ctx.model,
        seq: ctx.seq,
        include_usage,
        sequence: std::cell::Cell::new(0),
    };
    let prompt = sr
        .usage
        .map_or_else(|| prompt_tokens(ctx.request), |u| u.input);
    if let Some(pre) = sse.preamble(prompt) {
        chunk(stream, &pre).await?;
    }
    let mut text = String::new();
    for (i, item) in sr.items.iter().enumerate() {
        let wait = if i == 0 { sr.first_token_ms } else { sr.gap_ms };
        if wait > 0 {
            real_sleep(Duration::from_millis(wait)).await;
        }
        let event = match item {
            StreamItem::Text(t) => {
                text.push_str(t);
                sse.delta(t)
            }
            StreamItem::Raw { raw } => format!("{raw}\n\n"),
        };
        chunk(stream, &event).await?;
    }
    if sr.items.is_empty() && sr.first_token_ms > 0 {
        real_sleep(Duration::from_millis(sr.first_token_ms)).await;
    }
    let usage = sr
        .usage
        .map_or_else(|| (prompt, tokens_of(&text)), |u| (u.input, u.output));
    match sr.end {
        StreamEnd::Done => {
            chunk(stream, &sse.finish(usage, &text)).await?;
            if let Some(t) = sse.terminator() {
                chunk(stream, &t).await?;
            }
            close(stream).await
        }
        StreamEnd::NoDone => {
            chunk(stream, &sse.finish(usage, &text)).await?;
            close(stream).await
        }
        StreamEnd::Eof => close(stream).await,
        StreamEnd::Error => {
            chunk(stream, &sse.error()).await?;
            close(stream).await
        }
        StreamEnd::Reset => {
            stream.flush().await?;
            reset(stream);
            Ok(())
        }
        StreamEnd::Stall => {
            real_sleep(STALL).await;
            Ok(())
        }
    }
}

/// One HTTP chunk.
async fn chunk(stream: &mut TcpStream, data: &str) -> std::io::Result<()> {
    let framed = format!("{:x}\r\n{data}\r\n", data.len());
    stream.write_all(framed.as_bytes()).await?;
    stream.flush().await
}

/// A clean end of the HTTP body, then the connection closes.
async fn close(stream: &mut TcpStream) -> std::io::Result<()> {
    stream.write_all(b"0\r\n\r\n").await?;
    stream.flush().await?;
    stream.shutdown().await
}

/// SSE events in one wire's format.
struct Sse<'a> {
    wire: Wire,
    model: &'a str,
    seq: usize,
    /// OpenAI sends a usage chunk only when the request asks (`stream_options.include_usage`).
    include_usage: bool,
    /// The Responses API numbers every event of a stream.
    sequence: std::cell::Cell<u64>,
}

impl Sse<'_> {
    fn data(v: serde_json::Value) -> String {
        format!("data: {v}\n\n")
    }

    fn event(name: &str, v: serde_json::Value) -> String {
        format!("event: {name}\ndata: {v}\n\n")
    }

    fn id(&self) -> String {
        format!("chatcmpl-mock-{}", self.seq)
    }

    /// A Responses API event: `type` and the next `sequence_number` added to `v`.
    fn typed(&self, kind: &str, mut v: serde_json::Value) -> String {
        let n = self.sequence.get();
        self.sequence.set(n + 1);
        v["type"] = json!(kind);
        v["sequence_number"] = json!(n);
        Self::event(kind, v)
    }

    fn item_id(&self) -> String {
        format!("msg_mock_{:04}", self.seq)
    }

    /// Events before any text: OpenAI's role chunk, Anthropic's message and block start.
    fn preamble(&self, prompt: u64) -> Option<String> {
        match self.wire {
            Wire::OpenAi => Some(Self::data(json!({
                "id": self.id(), "object": "chat.completion.chunk", "created": 1_767_225_600, "model": self.model,
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]
            }))),
            Wire::Anthropic => Some(
                Self::event(
                    "message_start",
                    json!({"type": "message_start", "message": {
                    "id": format!("msg_mock_{:04}", self.seq), "type": "message", "role": "assistant",
                    "model": self.model, "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": prompt, "output_tokens": 1}}}),
                ) + &Self::event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0,
                        "content_block": {"type": "text", "text": ""}}),
                ) + &Self::event("ping", json!({"type": "ping"})),
            ),
            Wire::Gemini => None,
            Wire::Responses => {
                let r = super::wire_bodies::responses_object(
                    self.model,
                    self.seq,
                    "in_progress",
                    "",
                    (0, 0),
                );
                Some(
                    self.typed("response.created", json!({"response": r}))
                        + &self.typed("response.in_progress", json!({"response": r}))
                        + &self.typed("response.output_item.added", json!({"output_index": 0,
                            "item": {"id": self.item_id(), "type": "message", "status": "in_progress",
                                     "role": "assistant", "content": []}}))
                        + &self.typed("response.content_part.added", json!({"item_id": self.item_id(),
                            "output_index": 0, "content_index": 0,
                            "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}})),
                )
            }
        }
    }

    fn delta(&self, text: &str) -> String {
        match self.wire {
            Wire::OpenAi => Self::data(json!({
                "id": self.id(), "object": "chat.completion.chunk", "created": 1_767_225_600, "model": self.model,
                "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]
            })),
            Wire::Anthropic => Self::event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}}),
            ),
            Wire::Gemini => Self::data(json!({
                "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}],
                "modelVersion": self.model, "responseId": format!("mock-{}", self.seq)
            })),
            Wire::Responses => self.typed(
                "response.output_text.delta",
                json!({"item_id": self.item_id(), "output_index": 0, "content_index": 0,
                       "delta": text, "logprobs": []}),
            ),
        }
    }

    /// The finish: finish reason and usage (not yet the terminator). `text` is the
    /// whole answer, which the Responses API repeats at its end.
    fn finish(&self, (prompt, completion): (u64, u64), text: &str) -> String {
        match self.wire {
            Wire::OpenAi => {
                let finish = Self::data(json!({
                    "id": self.id(), "object": "chat.completion.chunk", "created": 1_767_225_600, "model": self.model,
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]
                }));
                if !self.include_usage {
                    return finish;
                }
                finish
                    + &Self::data(json!({
                        "id": self.id(), "object": "chat.completion.chunk", "created": 1_767_225_600, "model": self.model,
                        "choices": [],
                        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
                    }))
            }
            Wire::Anthropic => {
                Self::event(
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": 0}),
                ) + &Self::event(
                    "message_delta",
                    json!({"type": "message_delta",
                        "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                        "usage": {"output_tokens": completion}}),
                )
            }
            Wire::Gemini => Self::data(json!({
                "candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": completion,
                                  "totalTokenCount": prompt + completion},
                "modelVersion": self.model, "responseId": format!("mock-{}", self.seq)
            })),
            Wire::Responses => {
                let part =
                    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
                let r = super::wire_bodies::responses_object(
                    self.model,
                    self.seq,
                    "completed",
                    text,
                    (prompt, completion),
                );
                self.typed(
                    "response.output_text.done",
                    json!({"item_id": self.item_id(),
                        "output_index": 0, "content_index": 0, "text": text, "logprobs": []}),
                ) + &self.typed(
                    "response.content_part.done",
                    json!({"item_id": self.item_id(),
                        "output_index": 0, "content_index": 0, "part": part}),
                ) + &self.typed(
                    "response.output_item.done",
                    json!({"output_index": 0,
                        "item": r["output"][0]}),
                ) + &self.typed("response.completed", json!({"response": r}))
            }
        }
    }

    /// The wire's end-of-stream marker; Gemini and the Responses API have none (their
    /// finish ends it).
    fn terminator(&self) -> Option<String> {
        match self.wire {
            Wire::OpenAi => Some("data: [DONE]\n\n".to_string()),
            Wire::Anthropic => Some(Self::event("message_stop", json!({"type": "message_stop"}))),
            Wire::Gemini | Wire::Responses => None,
        }
    }

    /// The wire's in-stream error event.
    fn error(&self) -> String {
        match self.wire {
            Wire::OpenAi => Self::data(json!({"error": {
                "message": "The server had an error while processing your request. Sorry about that!",
                "type": "server_error", "param": null, "code": null}})),
            Wire::Anthropic => Self::event(
                "error",
                json!({"type": "error",
                "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            ),
            Wire::Gemini => Self::data(json!({"error": {"code": 503,
                "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}})),
            // What OpenAI sends once a stream's 200 is out: the response, failed.
            Wire::Responses => {
                let mut r = super::wire_bodies::responses_object(
                    self.model,
                    self.seq,
                    "failed",
                    "",
                    (0, 0),
                );
                r["error"] = json!({"code": "server_error",
                    "message": "The server had an error while processing your request. Sorry about that!"});
                self.typed("response.failed", json!({"response": r}))
            }
        }
    }
}
