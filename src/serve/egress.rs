//! Egress: the router's answers rendered in the shape the client speaks, whatever the
//! wire of the route that served. Pure functions and small stream encoders that turn
//! wire-neutral events into OpenAI chunks or Anthropic events; the handler only writes
//! the bytes they return.

use super::adapter::{Event, Finish, Reply};
use super::errors::ApiError;
use crate::core::request::Usage;
use serde_json::{json, Value};

fn openai_finish(f: &Finish) -> &str {
    match f {
        Finish::Stop => "stop",
        Finish::Length => "length",
        Finish::ToolCalls => "tool_calls",
        Finish::ContentFilter => "content_filter",
        Finish::Other(s) => s,
    }
}

fn anthropic_stop(f: &Finish) -> &str {
    match f {
        Finish::Stop => "end_turn",
        Finish::Length => "max_tokens",
        Finish::ToolCalls => "tool_use",
        Finish::ContentFilter => "refusal",
        Finish::Other(s) => s,
    }
}

fn openai_usage(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
    })
}

fn to_bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// A `chat.completion` body, serialized straight from typed fields: no `Value` tree
/// (maps, strings copied in, all freed again) on every answer. Field order is the
/// alphabetical one `json!` gives, so the bytes are the same as they always were.
pub fn openai_completion(id: &str, created: i64, r: &Reply) -> Vec<u8> {
    let tool_calls: Vec<WireToolCall<'_>> = r
        .tool_calls
        .iter()
        .map(|c| WireToolCall {
            function: WireFunction {
                arguments: c.arguments.to_string(),
                name: &c.name,
            },
            id: &c.id,
            kind: "function",
        })
        .collect();
    let content = (r.tool_calls.is_empty() || !r.text.is_empty()).then_some(r.text.as_str());
    let body = Completion {
        choices: [CompletionChoice {
            finish_reason: openai_finish(&r.finish),
            index: 0,
            logprobs: (),
            message: Message {
                content,
                role: "assistant",
                tool_calls,
            },
        }],
        created,
        id,
        model: &r.model,
        object: "chat.completion",
        usage: r.usage.as_ref().map(WireUsage::of),
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

// Field names in alphabetical order throughout: the order `serde_json::Value` writes.
#[derive(serde::Serialize)]
struct Completion<'a> {
    choices: [CompletionChoice<'a>; 1],
    created: i64,
    id: &'a str,
    model: &'a str,
    object: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<WireUsage>,
}

#[derive(serde::Serialize)]
struct CompletionChoice<'a> {
    finish_reason: &'a str,
    index: u32,
    logprobs: (),
    message: Message<'a>,
}

#[derive(serde::Serialize)]
struct Message<'a> {
    content: Option<&'a str>,
    role: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
}

#[derive(serde::Serialize)]
struct WireToolCall<'a> {
    function: WireFunction<'a>,
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(serde::Serialize)]
struct WireFunction<'a> {
    arguments: String,
    name: &'a str,
}

#[derive(serde::Serialize)]
struct WireUsage {
    completion_tokens: u64,
    prompt_tokens: u64,
    total_tokens: u64,
}

impl WireUsage {
    fn of(u: &Usage) -> WireUsage {
        WireUsage {
            completion_tokens: u.output_tokens,
            prompt_tokens: u.input_tokens,
            total_tokens: u.input_tokens + u.output_tokens,
        }
    }
}

/// One `chat.completion.chunk`, typed like `Completion`; `D` is the delta.
#[derive(serde::Serialize)]
struct Chunk<'a, D: serde::Serialize> {
    choices: [ChunkChoice<'a, D>; 1],
    created: i64,
    id: &'a str,
    model: &'a str,
    object: &'static str,
    /// `Some(())` is `"usage": null`; `None` leaves the field out.
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<()>,
}

#[derive(serde::Serialize)]
struct ChunkChoice<'a, D: serde::Serialize> {
    delta: D,
    finish_reason: Option<&'a str>,
    index: u32,
    logprobs: (),
}

/// The delta of a text chunk, the one a stream sends hundreds of.
#[derive(serde::Serialize)]
struct TextDelta<'a> {
    content: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
}

/// An Anthropic `message` body.
pub fn anthropic_message(id: &str, r: &Reply) -> Vec<u8> {
    let mut content: Vec<Value> = Vec::new();
    if !r.text.is_empty() || r.tool_calls.is_empty() {
        content.push(json!({"type": "text", "text": r.text}));
    }
    for c in &r.tool_calls {
        content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}));
    }
    let u = r.usage.unwrap_or_default();
    to_bytes(&json!({
        "id": id, "type": "message", "role": "assistant", "model": r.model,
        "content": content, "stop_reason": anthropic_stop(&r.finish), "stop_sequence": null,
        "usage": {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens},
    }))
}

/// The `: poolctl outcome=… attempts=N` comment that ends every stream.
pub fn outcome_comment(outcome: &str, attempts: usize) -> Vec<u8> {
    format!(": poolctl outcome={outcome} attempts={attempts}\n\n").into_bytes()
}

fn data_line(v: &Value) -> Vec<u8> {
    let mut out = b"data: ".to_vec();
    out.extend(to_bytes(v));
    out.extend(b"\n\n");
    out
}

fn event_line(name: &str, v: &Value) -> Vec<u8> {
    let mut out = format!("event: {name}\ndata: ").into_bytes();
    out.extend(to_bytes(v));
    out.extend(b"\n\n");
    out
}

/// Encodes one stream as `chat.completion.chunk` events; every chunk names the model.
#[derive(Debug)]
pub struct OpenAiStream {
    pub id: String,
    pub created: i64,
    pub model: String,
    pub include_usage: bool,
    role_sent: bool,
}

impl OpenAiStream {
    pub fn new(id: String, created: i64, model: String, include_usage: bool) -> Self {
        OpenAiStream {
            id,
            created,
            model,
            include_usage,
            role_sent: false,
        }
    }

    fn chunk(&mut self, delta: Value, finish: Option<&str>) -> Vec<u8> {
        let mut delta = delta;
        if !self.role_sent {
            delta["role"] = json!("assistant");
            self.role_sent = true;
        }
        self.typed_chunk(delta, finish)
    }

    fn typed_chunk<D: serde::Serialize>(&self, delta: D, finish: Option<&str>) -> Vec<u8> {
        let chunk = Chunk {
            choices: [ChunkChoice {
                delta,
                finish_reason: finish,
                index: 0,
                logprobs: (),
            }],
            created: self.created,
            id: &self.id,
            model: &self.model,
            object: "chat.completion.chunk",
            // OpenAI sends `usage: null` on every chunk but the last when usage is asked for.
            usage: self.include_usage.then_some(()),
        };
        let mut out = Vec::with_capacity(160 + self.model.len());
        out.extend_from_slice(b"data: ");
        // Writing to a Vec cannot fail, and these types always serialize.
        let _ = serde_json::to_writer(&mut out, &chunk);
        out.extend_from_slice(b"\n\n");
        out
    }

    fn text_chunk(&mut self, text: &str) -> Vec<u8> {
        let role = (!std::mem::replace(&mut self.role_sent, true)).then_some("assistant");
        self.typed_chunk(
            TextDelta {
                content: text,
                role,
            },
            None,
        )
    }

    /// The bytes for one event; empty for an event the OpenAI shape carries elsewhere.
    pub fn event(&mut self, e: &Event) -> Vec<u8> {
        match e {
            Event::Text(t) => self.text_chunk(t),
            Event::ToolCall {
                index,
                id,
                name,
                arguments,
            } => {
                let mut call = json!({"index": index, "function": {"arguments": arguments}});
                if let Some(id) = id {
                    call["id"] = json!(id);
                    call["type"] = json!("function");
                }
                if let Some(name) = name {
                    call["function"]["name"] = json!(name);
                }
                self.chunk(json!({"tool_calls": [call]}), None)
            }
            Event::Finish(f) => self.chunk(json!({}), Some(openai_finish(f))),
            Event::Usage(u) if self.include_usage => {
                let v = json!({
                    "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                    "model": self.model, "choices": [], "usage": openai_usage(u),
                });
                data_line(&v)
            }
            Event::Usage(_) => Vec::new(),
        }
    }

    /// The in-band error that ends an interrupted stream (no `[DONE]` follows).
    pub fn error(&self, e: &ApiError) -> Vec<u8> {
        data_line(&json!({"error": {"message": e.message, "type": e.kind, "code": e.code}}))
    }

    pub fn done(&self) -> Vec<u8> {
        b"data: [DONE]\n\n".to_vec()
    }
}

/// Encodes one stream as Anthropic Messages events.
#[derive(Debug)]
pub struct AnthropicStream {
    pub id: String,
    pub model: String,
    started: bool,
    /// Index of the open content block and whether it is text.
    open: Option<(usize, bool)>,
    /// Blocks started so far.
    blocks: usize,
    /// Upstream tool-call index of the open tool_use block.
    tool_index: Option<u32>,
    output_tokens: u64,
}

impl AnthropicStream {
    pub fn new(id: String, model: String) -> Self {
        AnthropicStream {
            id,
            model,
            started: false,
            open: None,
            blocks: 0,
            tool_index: None,
            output_tokens: 0,
        }
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        out.extend(event_line(
            "message_start",
            &json!({"type": "message_start", "message": {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 0, "output_tokens": 0}}}),
        ));
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if let Some((index, _)) = self.open.take() {
            out.extend(event_line(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            ));
        }
    }

    fn open_block(&mut self, out: &mut Vec<u8>, block: Value, text: bool) -> usize {
        self.close(out);
        let index = self.blocks;
        self.blocks += 1;
        self.open = Some((index, text));
        out.extend(event_line(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        index
    }

    pub fn event(&mut self, e: &Event) -> Vec<u8> {
        let mut out = Vec::new();
        self.start(&mut out);
        match e {
            Event::Text(t) => {
                let index = match self.open {
                    Some((i, true)) => i,
                    _ => self.open_block(&mut out, json!({"type": "text", "text": ""}), true),
                };
                out.extend(event_line(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "text_delta", "text": t}}),
                ));
            }
            Event::ToolCall {
                index: call,
                id,
                name,
                arguments,
            } => {
                let index = match (self.open, self.tool_index) {
                    (Some((i, false)), Some(c)) if c == *call && id.is_none() => i,
                    _ => {
                        self.tool_index = Some(*call);
                        let block = json!({"type": "tool_use", "id": id.clone().unwrap_or_default(),
                                           "name": name.clone().unwrap_or_default(), "input": {}});
                        self.open_block(&mut out, block, false)
                    }
                };
                if !arguments.is_empty() {
                    out.extend(event_line(
                        "content_block_delta",
                        &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": arguments}}),
                    ));
                }
            }
            Event::Usage(u) => self.output_tokens = u.output_tokens,
            Event::Finish(_) => {}
        }
        out
    }

    /// Closes the message: the stop reason and usage, then `message_stop`.
    pub fn finish(&mut self, finish: &Finish, usage: Option<&Usage>) -> Vec<u8> {
        let mut out = Vec::new();
        self.start(&mut out);
        if self.blocks == 0 {
            self.open_block(&mut out, json!({"type": "text", "text": ""}), true);
        }
        self.close(&mut out);
        let output = usage.map(|u| u.output_tokens).unwrap_or(self.output_tokens);
        out.extend(event_line(
            "message_delta",
            &json!({"type": "message_delta",
            "delta": {"stop_reason": anthropic_stop(finish), "stop_sequence": null},
            "usage": {"output_tokens": output}}),
        ));
        out.extend(event_line("message_stop", &json!({"type": "message_stop"})));
        out
    }

    pub fn error(&self, e: &ApiError) -> Vec<u8> {
        event_line(
            "error",
            &json!({"type": "error", "error": {"type": e.kind, "message": e.message}}),
        )
    }
}

/// `embeddings` as a JSON list, floats or base64 (little-endian f32s).
pub fn embeddings(
    model: &str,
    vectors: &[Vec<f32>],
    base64: bool,
    usage: Option<&Usage>,
) -> Vec<u8> {
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
                json!(base64_encode(&bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let prompt = usage.map(|u| u.input_tokens).unwrap_or(0);
    to_bytes(&json!({"object": "list", "data": data, "model": model,
                     "usage": {"prompt_tokens": prompt, "total_tokens": prompt}}))
}

/// A rerank answer in the Cohere / Jina shape: results best first. The router returns
/// an order, not scores, so no `relevance_score` is invented.
pub fn rerank(
    id: &str,
    model: &str,
    ranking: &[usize],
    documents: &[String],
    return_documents: bool,
) -> Vec<u8> {
    let results: Vec<Value> = ranking
        .iter()
        .filter(|&&i| i < documents.len())
        .map(|&i| {
            let mut r = json!({"index": i});
            if return_documents {
                r["document"] = json!({"text": documents[i]});
            }
            r
        })
        .collect();
    to_bytes(&json!({"id": id, "model": model, "results": results}))
}

/// Standard base64 with padding (RFC 4648).
pub fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].iter().enumerate() {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> shift) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::conversation::ToolCall;

    fn reply(text: &str, calls: Vec<ToolCall>, finish: Finish) -> Reply {
        Reply {
            text: text.into(),
            tool_calls: calls,
            finish,
            model: "qwen-flash".into(),
            usage: Some(Usage {
                input_tokens: 5,
                output_tokens: 2,
                cached_tokens: None,
            }),
        }
    }

    /// The `Value`-built body the typed one replaced: the reference for its bytes.
    fn value_completion(id: &str, created: i64, r: &Reply) -> Vec<u8> {
        let mut message = json!({"role": "assistant", "content": r.text});
        if !r.tool_calls.is_empty() {
            if r.text.is_empty() {
                message["content"] = Value::Null;
            }
            message["tool_calls"] = r
                .tool_calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments.to_string()}})
                })
                .collect();
        }
        let mut body = json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": r.model,
            "choices": [{"index": 0, "message": message, "logprobs": null,
                         "finish_reason": openai_finish(&r.finish)}],
        });
        if let Some(u) = &r.usage {
            body["usage"] = openai_usage(u);
        }
        to_bytes(&body)
    }

    #[test]
    fn typed_completion_bodies_are_byte_for_byte_the_value_built_ones() {
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "lookup".into(),
            arguments: json!({"q": "a \"quoted\" ünï", "n": [1, 2.5]}),
        };
        let mut no_usage = reply("plain", vec![], Finish::Stop);
        no_usage.usage = None;
        for r in [
            reply("OK", vec![], Finish::Stop),
            reply("", vec![], Finish::Length),
            reply("", vec![call("c1"), call("c2")], Finish::ToolCalls),
            reply(
                "text and a call",
                vec![call("c3")],
                Finish::Other("weird".into()),
            ),
            reply("esc \n \u{1b} </script>", vec![], Finish::ContentFilter),
            no_usage,
        ] {
            assert_eq!(
                String::from_utf8(openai_completion("chatcmpl-poolctl-9", 1_700_000_000, &r))
                    .unwrap(),
                String::from_utf8(value_completion("chatcmpl-poolctl-9", 1_700_000_000, &r))
                    .unwrap()
            );
        }
    }

    #[test]
    fn typed_text_chunks_are_byte_for_byte_the_value_built_ones() {
        for include_usage in [false, true] {
            let mut typed = OpenAiStream::new("c-1".into(), 5, "m".into(), include_usage);
            let mut reference = OpenAiStream::new("c-1".into(), 5, "m".into(), include_usage);
            for text in ["first", "second \"q\"", ""] {
                assert_eq!(
                    String::from_utf8(typed.event(&Event::Text(text.into()))).unwrap(),
                    String::from_utf8(reference.chunk(json!({"content": text}), None)).unwrap()
                );
            }
        }
    }

    #[test]
    fn completion_carries_tool_calls_finish_model_and_usage() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "f".into(),
            arguments: json!({"a": 1.5}),
        };
        let b: Value = serde_json::from_slice(&openai_completion(
            "id1",
            7,
            &reply("", vec![call], Finish::ToolCalls),
        ))
        .unwrap();
        assert_eq!(b["model"], "qwen-flash");
        assert_eq!(b["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(b["choices"][0]["message"]["content"], Value::Null);
        assert_eq!(
            b["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"a\":1.5}"
        );
        assert_eq!(b["usage"]["total_tokens"], 7);
        let a: Value = serde_json::from_slice(&anthropic_message(
            "m1",
            &reply("hi", vec![], Finish::Length),
        ))
        .unwrap();
        assert_eq!(a["stop_reason"], "max_tokens");
        assert_eq!(a["content"][0]["text"], "hi");
        assert_eq!(a["usage"]["output_tokens"], 2);
    }

    #[test]
    fn openai_chunks_name_the_model_and_end_with_usage() {
        let mut s = OpenAiStream::new("c1".into(), 1, "m".into(), true);
        let first = String::from_utf8(s.event(&Event::Text("He".into()))).unwrap();
        assert!(
            first.starts_with("data: {") && first.ends_with("\n\n"),
            "{first}"
        );
        let v: Value = serde_json::from_str(first.trim_start_matches("data: ").trim()).unwrap();
        assert_eq!(v["model"], "m");
        assert_eq!(v["choices"][0]["delta"]["role"], "assistant");
        let usage = String::from_utf8(s.event(&Event::Usage(Usage {
            input_tokens: 3,
            output_tokens: 4,
            cached_tokens: None,
        })))
        .unwrap();
        let u: Value = serde_json::from_str(usage.trim_start_matches("data: ").trim()).unwrap();
        assert_eq!(u["choices"], json!([]));
        assert_eq!(u["usage"]["completion_tokens"], 4);
        let mut quiet = OpenAiStream::new("c1".into(), 1, "m".into(), false);
        assert!(quiet.event(&Event::Usage(Usage::default())).is_empty());
        assert_eq!(
            outcome_comment("success", 2),
            b": poolctl outcome=success attempts=2\n\n"
        );
    }

    #[test]
    fn anthropic_events_open_and_close_blocks() {
        let mut s = AnthropicStream::new("m1".into(), "claude".into());
        let mut all = s.event(&Event::Text("Hi".into()));
        all.extend(s.event(&Event::ToolCall {
            index: 0,
            id: Some("t1".into()),
            name: Some("f".into()),
            arguments: "{\"a\"".into(),
        }));
        all.extend(s.event(&Event::ToolCall {
            index: 0,
            id: None,
            name: None,
            arguments: ":1}".into(),
        }));
        all.extend(s.finish(
            &Finish::ToolCalls,
            Some(&Usage {
                input_tokens: 1,
                output_tokens: 9,
                cached_tokens: None,
            }),
        ));
        let text = String::from_utf8(all).unwrap();
        let events: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(
            events,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert!(text.contains("\"stop_reason\":\"tool_use\""));
        assert!(text.contains("\"output_tokens\":9"));
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        assert_eq!(base64_encode(b""), "");
        assert_eq!(base64_encode(b"f"), "Zg==");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_encode(b"foo"), "Zm9v");
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
    }
}
