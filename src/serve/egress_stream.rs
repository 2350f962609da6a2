//! The stream encoders of egress: wire-neutral stream events turned into OpenAI chunks
//! (`OpenAiStream`) or Anthropic typed events (`AnthropicStream`), and the closing
//! `: poolctl outcome=` comment.

use super::adapter::{Event, Finish};
use super::egress::{anthropic_stop, anthropic_usage, openai_finish, openai_usage, to_bytes};
use super::errors::ApiError;
use crate::core::request::Usage;
use serde_json::{json, Value};

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
    /// The choice the next chunks are for (`Event::Choice`; 0 unless the client asked
    /// for `n` > 1), and the choices past the first whose role was sent.
    choice: u32,
    roles: Vec<u32>,
    /// The choice and upstream index of each tool call, in the order they started: the
    /// position among its choice's calls is the index the client sees. OpenAI clients
    /// count a choice's calls from 0 whatever blocks came before (an Anthropic text
    /// block is index 0 upstream, its first tool_use 1; the SDK's
    /// `chat.completions.stream` helper indexes a list with it).
    calls: Vec<(u32, u32)>,
    /// The choices that refused: each ends `content_filter`, whatever finish its wire
    /// gave it (a Responses refusal part ends `completed`), as the same answer
    /// unstreamed does (`adapter::reply_of`).
    refused: Vec<u32>,
}

impl OpenAiStream {
    pub fn new(id: String, created: i64, model: String, include_usage: bool) -> Self {
        OpenAiStream {
            id,
            created,
            model,
            include_usage,
            role_sent: false,
            choice: 0,
            roles: Vec::new(),
            calls: Vec::new(),
            refused: Vec::new(),
        }
    }

    /// The role goes on each choice's first chunk: true once, for the current choice.
    fn take_role(&mut self) -> bool {
        if self.choice == 0 {
            return !std::mem::replace(&mut self.role_sent, true);
        }
        if self.roles.contains(&self.choice) {
            return false;
        }
        self.roles.push(self.choice);
        true
    }

    pub(super) fn chunk(&mut self, delta: Value, finish: Option<&str>) -> Vec<u8> {
        let mut delta = delta;
        if self.take_role() {
            delta["role"] = json!("assistant");
        }
        self.typed_chunk(delta, finish)
    }

    fn typed_chunk<D: serde::Serialize>(&self, delta: D, finish: Option<&str>) -> Vec<u8> {
        let chunk = Chunk {
            choices: [ChunkChoice {
                delta,
                finish_reason: finish,
                index: self.choice,
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
        let role = self.take_role().then_some("assistant");
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
            // The refusal as OpenAI streams it: `delta.refusal`, the role on the first.
            Event::Refusal(t) => {
                if !self.refused.contains(&self.choice) {
                    self.refused.push(self.choice);
                }
                self.chunk(json!({"refusal": t}), None)
            }
            // Another wire's reasoning as OpenAI-compatible APIs stream it.
            Event::Reasoning(t) => self.chunk(json!({"reasoning_content": t}), None),
            Event::ToolCall {
                index,
                id,
                name,
                arguments,
            } => {
                let choice = self.choice;
                let mine = || self.calls.iter().filter(|(c, _)| *c == choice);
                let index = match mine().position(|(_, i)| i == index) {
                    Some(i) => i,
                    None => {
                        let next = mine().count();
                        self.calls.push((choice, *index));
                        next
                    }
                };
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
            Event::Finish(f) => {
                let finish = if self.refused.contains(&self.choice) {
                    "content_filter"
                } else {
                    openai_finish(f)
                };
                self.chunk(json!({}), Some(finish))
            }
            Event::Usage(u) if self.include_usage => {
                let v = json!({
                    "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                    "model": self.model, "choices": [], "usage": openai_usage(u),
                });
                data_line(&v)
            }
            Event::Usage(_) => Vec::new(),
            Event::Choice(i) => {
                self.choice = *i;
                Vec::new()
            }
            // Named in every chunk (`model`) from the start; a same-wire frame is
            // forwarded as it is, never encoded.
            Event::Model(_) | Event::Raw { .. } => Vec::new(),
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

/// A block held back behind an open `tool_use` block (`AnthropicStream::waiting`).
#[derive(Debug)]
enum Waiting {
    Call {
        call: u32,
        id: String,
        name: String,
        arguments: String,
    },
    Text(String),
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
    /// What came while a call's block was open and needs a block of its own: another
    /// call, or text. Anthropic blocks never overlap, and the open call may still get
    /// pieces (an OpenAI-compatible stream may interleave its calls), so what would
    /// close it waits, whole and in order, until it can get no more: the finish.
    waiting: Vec<Waiting>,
    /// The usage reported so far: `message_start` carries its input when known.
    usage: Option<Usage>,
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
            waiting: Vec::new(),
            usage: None,
        }
    }

    /// What waited behind the open call, in order, each as a block of its own: a call's
    /// start, its whole input, its stop; text as one text block.
    fn release_waiting(&mut self, out: &mut Vec<u8>) {
        for w in std::mem::take(&mut self.waiting) {
            match w {
                Waiting::Call {
                    call,
                    id,
                    name,
                    arguments,
                } => {
                    let block = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
                    let b = self.open_block(out, block, false);
                    self.tool_index = Some(call);
                    if !arguments.is_empty() {
                        out.extend(event_line(
                            "content_block_delta",
                            &json!({"type": "content_block_delta", "index": b,
                            "delta": {"type": "input_json_delta", "partial_json": arguments}}),
                        ));
                    }
                }
                Waiting::Text(t) => self.text_delta(out, &t),
            }
        }
    }

    /// `t` as a delta of the open text block, opened when none is.
    fn text_delta(&mut self, out: &mut Vec<u8>, t: &str) {
        let index = match self.open {
            Some((i, true)) => i,
            _ => self.open_block(out, json!({"type": "text", "text": ""}), true),
        };
        out.extend(event_line(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "text_delta", "text": t}}),
        ));
    }

    /// Whether a call's block is open: what would close it must wait.
    fn call_open(&self) -> bool {
        matches!(self.open, Some((_, false)))
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        // The usage reported so far, input and cache counts as Anthropic's own
        // `message_start` carries them; 0 when the upstream has said nothing yet.
        let usage = anthropic_usage(&self.usage.unwrap_or_default());
        out.extend(event_line(
            "message_start",
            &json!({"type": "message_start", "message": {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": usage}}),
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
        match e {
            Event::Usage(u) => {
                // Known before the message starts, it is what `message_start` says.
                self.usage = Some(*u);
                return out;
            }
            // Reasoning from another wire cannot become a signed `thinking` block: it
            // writes nothing, so it does not start the message either (fidelity.md §5).
            // An Anthropic request has no `n`: `stream` keeps the events of every
            // choice but the first from this encoder.
            Event::Finish(_)
            | Event::Model(_)
            | Event::Reasoning(_)
            | Event::Raw { .. }
            | Event::Choice(_) => return out,
            _ => {}
        }
        self.start(&mut out);
        match e {
            // Anthropic has no refusal field: the refusal text is the message's text
            // (its `stop_reason` says `refusal`).
            Event::Text(t) | Event::Refusal(t) => {
                if self.call_open() {
                    match self.waiting.last_mut() {
                        Some(Waiting::Text(w)) => w.push_str(t),
                        _ => self.waiting.push(Waiting::Text(t.clone())),
                    }
                    return out;
                }
                self.text_delta(&mut out, t);
            }
            Event::ToolCall {
                index: call,
                id,
                name,
                arguments,
            } => {
                let waiting = self.waiting.iter_mut().find_map(|w| match w {
                    Waiting::Call {
                        call: c, arguments, ..
                    } if c == call => Some(arguments),
                    _ => None,
                });
                if let Some(w) = waiting {
                    w.push_str(arguments);
                    return out;
                }
                // While a call's block is open, only its own pieces go into it: anything
                // else (another call, this call started again) waits. So no piece ever
                // reaches a block already closed.
                let its_piece = self.tool_index == Some(*call) && id.is_none();
                if self.call_open() && !its_piece {
                    self.waiting.push(Waiting::Call {
                        call: *call,
                        id: id.clone().unwrap_or_default(),
                        name: name.clone().unwrap_or_default(),
                        arguments: arguments.clone(),
                    });
                    return out;
                }
                let index = match self.open {
                    // The open call's own piece.
                    Some((i, false)) => i,
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
            Event::Usage(_)
            | Event::Finish(_)
            | Event::Model(_)
            | Event::Reasoning(_)
            | Event::Raw { .. }
            | Event::Choice(_) => {}
        }
        out
    }

    /// Closes the message: the stop reason and usage, then `message_stop`.
    pub fn finish(&mut self, finish: &Finish, usage: Option<&Usage>) -> Vec<u8> {
        let mut out = Vec::new();
        self.start(&mut out);
        self.release_waiting(&mut out);
        if self.blocks == 0 {
            self.open_block(&mut out, json!({"type": "text", "text": ""}), true);
        }
        self.close(&mut out);
        // The whole usage, input and cache counts included, as Anthropic's own last
        // `message_delta` may carry it: a client's final message is then right.
        let usage = usage.copied().or(self.usage).unwrap_or_default();
        out.extend(event_line(
            "message_delta",
            &json!({"type": "message_delta",
            "delta": {"stop_reason": anthropic_stop(finish), "stop_sequence": null},
            "usage": anthropic_usage(&usage)}),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn start_usage(events: &[u8]) -> Value {
        let text = String::from_utf8(events.to_vec()).unwrap();
        let start = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str::<Value>(d).unwrap())
            .find(|e| e["type"] == "message_start")
            .unwrap();
        start["message"]["usage"].clone()
    }

    /// Guards a refusal that ended `content_filter` unstreamed and `stop` streamed: a
    /// Responses route's refusal part ends `completed`, and the stream passed that on,
    /// so the SDK's `.parse()` and its stream helper disagreed on one answer.
    #[test]
    fn a_streamed_refusal_ends_content_filter_whatever_finish_its_wire_gave() {
        let finish = |events: &[Event]| {
            let mut s = OpenAiStream::new("c".into(), 1, "m".into(), false);
            let out: Vec<u8> = events.iter().flat_map(|e| s.event(e)).collect();
            let text = String::from_utf8(out).unwrap();
            let last = text
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .map(|d| serde_json::from_str::<Value>(d).unwrap())
                .next_back()
                .unwrap();
            last["choices"][0]["finish_reason"].clone()
        };
        let refused = [
            Event::Refusal("I can't.".into()),
            Event::Finish(Finish::Stop),
        ];
        assert_eq!(finish(&refused), "content_filter");
        let answered = [Event::Text("Hi".into()), Event::Finish(Finish::Stop)];
        assert_eq!(finish(&answered), "stop");
    }

    /// Guards the audit's §2 finding: `message_start` said `input_tokens: 0` though the
    /// upstream had reported the prompt before the first token. A usage report writes
    /// nothing and starts nothing; the message then starts with it.
    #[test]
    fn message_start_carries_the_usage_reported_before_it() {
        let mut s = AnthropicStream::new("m1".into(), "claude".into());
        let reported = Usage {
            input_tokens: 20,
            cached_tokens: Some(8),
            ..Default::default()
        };
        assert!(s.event(&Event::Usage(reported)).is_empty());
        assert!(s.event(&Event::Reasoning("unsigned".into())).is_empty());
        let out = s.event(&Event::Text("Hi".into()));
        assert_eq!(
            start_usage(&out),
            json!({"input_tokens": 12, "cache_read_input_tokens": 8, "output_tokens": 0})
        );
        // Nothing reported by then: 0, as before.
        let mut s = AnthropicStream::new("m2".into(), "claude".into());
        assert_eq!(
            start_usage(&s.event(&Event::Text("Hi".into()))),
            json!({"input_tokens": 0, "output_tokens": 0})
        );
    }
}
