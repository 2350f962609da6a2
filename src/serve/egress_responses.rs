//! Egress for the Responses API: a `response` object for an answer a route of another
//! wire gave, and the typed SSE events of a streamed one (`response.created`, the
//! output items and their parts, the deltas, `response.completed`), in the order the
//! official SDK's stream helper assembles them: an item is added before its deltas, a
//! content part before its text, and the stream ends with the whole response.

use super::adapter::{Event, Finish, Reply};
use super::errors::ApiError;
use super::ingress::Turn;
use crate::core::answer::FinishReason;
use crate::core::request::Usage;
use crate::wire::responses::output::{self, Answered, Envelope};
use serde_json::{json, Value};

pub(super) fn finish_reason(f: &Finish) -> FinishReason {
    match f {
        Finish::Stop => FinishReason::Stop,
        Finish::Length => FinishReason::Length,
        Finish::ToolCalls => FinishReason::ToolCalls,
        Finish::ContentFilter => FinishReason::ContentFilter,
        Finish::Other(s) => FinishReason::Other(s.clone()),
    }
}

/// The `response` object of an answer from a route of another wire, and its output
/// items (what the conversation keeps).
pub(super) fn response(turn: &Turn, reply: &Reply) -> (Value, Vec<Value>) {
    let finish = finish_reason(&reply.finish);
    let answered = Answered {
        text: &reply.text,
        refusal: reply.refusal.as_deref(),
        reasoning: reply.reasoning.as_deref(),
        tool_calls: &reply.tool_calls,
        finish: &finish,
    };
    let items = output::output_items(&answered);
    let (status, incomplete) = output::status_of(&answered);
    let envelope = Envelope {
        id: &turn.id,
        created_at: turn.created_at,
        model: &reply.model,
        status,
        incomplete,
        error: None,
        previous_response_id: turn.previous_response_id.as_deref(),
        usage: Some(output::usage(reply.usage.as_ref())),
    };
    (
        output::response_object(&envelope, &turn.fields, items.clone()),
        items,
    )
}

/// The output item open now, and where its text goes.
#[derive(Debug)]
enum Open {
    /// A message; `part` is its content index, `refusal` whether that part is one.
    Message {
        index: usize,
        id: String,
        part: usize,
        refusal: bool,
    },
    Reasoning {
        index: usize,
        id: String,
    },
    /// A function call, by the upstream's index of it.
    Call {
        index: usize,
        upstream: u32,
    },
}

/// A function call being streamed.
#[derive(Debug)]
struct Call {
    upstream: u32,
    /// Its output index; `None` while it waits behind an open call.
    index: Option<usize>,
    id: String,
    call_id: String,
    name: String,
    arguments: String,
}

/// Encodes one stream as Responses API events. It keeps what the final
/// `response.completed` repeats (every item whole): the API asks it of any server.
#[derive(Debug)]
pub struct ResponsesStream {
    turn: std::sync::Arc<Turn>,
    model: String,
    seq: u64,
    started: bool,
    /// Every output item so far, in order; the open one's text is in `text`.
    output: Vec<Value>,
    open: Option<Open>,
    /// The open message's parts (text, refusal), or the open reasoning's text.
    text: String,
    parts: Vec<Value>,
    calls: Vec<Call>,
}

impl ResponsesStream {
    pub fn new(turn: std::sync::Arc<Turn>, model: String) -> Self {
        ResponsesStream {
            turn,
            model,
            seq: 0,
            started: false,
            output: Vec::new(),
            open: None,
            text: String::new(),
            parts: Vec::new(),
            calls: Vec::new(),
        }
    }

    fn event(&mut self, kind: &str, mut v: Value, out: &mut Vec<u8>) {
        v["type"] = json!(kind);
        v["sequence_number"] = json!(self.seq);
        self.seq += 1;
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        let _ = serde_json::to_writer(&mut *out, &v);
        out.extend_from_slice(b"\n\n");
    }

    /// The `response` object as of now.
    fn object(
        &self,
        status: &str,
        incomplete: Option<&str>,
        usage: Option<Value>,
        error: Option<Value>,
    ) -> Value {
        let envelope = Envelope {
            id: &self.turn.id,
            created_at: self.turn.created_at,
            model: &self.model,
            status,
            incomplete,
            error,
            previous_response_id: self.turn.previous_response_id.as_deref(),
            usage,
        };
        let output = if status == "in_progress" {
            Vec::new()
        } else {
            self.output.clone()
        };
        output::response_object(&envelope, &self.turn.fields, output)
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        let r = self.object("in_progress", None, None, None);
        self.event("response.created", json!({ "response": r }), out);
        self.event("response.in_progress", json!({ "response": r }), out);
    }

    /// Closes the open item: its parts and the item, done, with `status`: `completed`
    /// when its text is whole, `incomplete` when the stream was cut inside it.
    fn close(&mut self, status: &str, out: &mut Vec<u8>) {
        match self.open.take() {
            None => {}
            Some(Open::Message {
                index,
                id,
                part,
                refusal,
            }) => {
                self.close_part(index, &id, part, refusal, out);
                let item = json!({"id": id, "type": "message", "status": status, "role": "assistant",
                    "content": std::mem::take(&mut self.parts)});
                self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                    out,
                );
                self.output[index] = item;
            }
            Some(Open::Reasoning { index, id }) => {
                let text = std::mem::take(&mut self.text);
                let part = json!({"type": "summary_text", "text": text});
                self.event(
                    "response.reasoning_summary_text.done",
                    json!({"item_id": id, "output_index": index, "summary_index": 0, "text": text}),
                    out,
                );
                self.event(
                    "response.reasoning_summary_part.done",
                    json!({"item_id": id, "output_index": index, "summary_index": 0, "part": part}),
                    out,
                );
                let item = output::reasoning_item(&id, &text);
                self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                    out,
                );
                self.output[index] = item;
            }
            Some(Open::Call { index, upstream }) => self.close_call(index, upstream, status, out),
        }
    }

    fn close_call(&mut self, index: usize, upstream: u32, status: &str, out: &mut Vec<u8>) {
        let Some(call) = self.calls.iter().find(|c| c.upstream == upstream) else {
            return;
        };
        let item = json!({"id": call.id, "type": "function_call", "status": status,
            "call_id": call.call_id, "name": call.name, "arguments": call.arguments});
        let done = json!({"item_id": call.id, "output_index": index, "arguments": call.arguments});
        self.event("response.function_call_arguments.done", done, out);
        self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
            out,
        );
        self.output[index] = item;
    }

    /// Opens an output item for the call at `at` of `calls`.
    fn open_call(&mut self, at: usize, out: &mut Vec<u8>) -> usize {
        let index = self.output.len();
        let call = &mut self.calls[at];
        call.index = Some(index);
        let item = json!({"id": call.id, "type": "function_call", "status": "in_progress",
            "call_id": call.call_id, "name": call.name, "arguments": ""});
        let upstream = call.upstream;
        self.output.push(item.clone());
        self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
            out,
        );
        self.open = Some(Open::Call { index, upstream });
        index
    }

    fn close_part(
        &mut self,
        index: usize,
        id: &str,
        part: usize,
        refusal: bool,
        out: &mut Vec<u8>,
    ) {
        let text = std::mem::take(&mut self.text);
        let (done, value) = if refusal {
            (
                "response.refusal.done",
                json!({"type": "refusal", "refusal": text}),
            )
        } else {
            ("response.output_text.done", output::output_text(&text))
        };
        let key = if refusal { "refusal" } else { "text" };
        let mut v = json!({"item_id": id, "output_index": index, "content_index": part});
        v[key] = json!(text);
        if !refusal {
            v["logprobs"] = json!([]);
        }
        self.event(done, v, out);
        self.event(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": part, "part": value}),
            out,
        );
        self.parts.push(value);
    }

    /// Text (or a refusal) goes to the open message's part of its kind, opening the
    /// message, or a part, as needed.
    fn message_text(&mut self, t: &str, refusal: bool, out: &mut Vec<u8>) {
        let same = matches!(&self.open, Some(Open::Message { refusal: r, .. }) if *r == refusal);
        if !same {
            if let Some(Open::Message {
                index,
                id,
                part,
                refusal: r,
            }) = self.open.take_if(|o| matches!(o, Open::Message { .. }))
            {
                // The message goes on with a part of the other kind.
                self.close_part(index, &id, part, r, out);
                self.open = Some(Open::Message {
                    index,
                    id,
                    part: part + 1,
                    refusal,
                });
            } else {
                self.close("completed", out);
                let index = self.output.len();
                let id = output::new_id("msg");
                let item = json!({"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []});
                self.output.push(item.clone());
                self.event(
                    "response.output_item.added",
                    json!({"output_index": index, "item": item}),
                    out,
                );
                self.open = Some(Open::Message {
                    index,
                    id,
                    part: 0,
                    refusal,
                });
            }
            if let Some(Open::Message {
                index, id, part, ..
            }) = &self.open
            {
                let empty = if refusal {
                    json!({"type": "refusal", "refusal": ""})
                } else {
                    output::output_text("")
                };
                let v = json!({"item_id": id, "output_index": index, "content_index": part, "part": empty});
                self.event("response.content_part.added", v, out);
            }
        }
        if let Some(Open::Message {
            index, id, part, ..
        }) = &self.open
        {
            let v = if refusal {
                json!({"item_id": id, "output_index": index, "content_index": part, "delta": t})
            } else {
                json!({"item_id": id, "output_index": index, "content_index": part, "delta": t, "logprobs": []})
            };
            let kind = if refusal {
                "response.refusal.delta"
            } else {
                "response.output_text.delta"
            };
            self.event(kind, v, out);
        }
        self.text.push_str(t);
    }

    fn reasoning(&mut self, t: &str, out: &mut Vec<u8>) {
        if !matches!(self.open, Some(Open::Reasoning { .. })) {
            self.close("completed", out);
            let index = self.output.len();
            let id = output::new_id("rs");
            let item = json!({"id": id, "type": "reasoning", "summary": []});
            self.output.push(item.clone());
            self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
                out,
            );
            self.event(
                "response.reasoning_summary_part.added",
                json!({"item_id": id, "output_index": index,
                "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
                out,
            );
            self.open = Some(Open::Reasoning { index, id });
        }
        if let Some(Open::Reasoning { index, id }) = &self.open {
            let v = json!({"item_id": id, "output_index": index, "summary_index": 0, "delta": t});
            self.event("response.reasoning_summary_text.delta", v, out);
        }
        self.text.push_str(t);
    }

    fn call(
        &mut self,
        upstream: u32,
        id: Option<&str>,
        name: Option<&str>,
        arguments: &str,
        out: &mut Vec<u8>,
    ) {
        let known = self.calls.iter().position(|c| c.upstream == upstream);
        let at = match known {
            Some(at) => at,
            None => {
                self.calls.push(Call {
                    upstream,
                    index: None,
                    id: output::new_id("fc"),
                    call_id: id
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("call_{upstream}")),
                    name: name.unwrap_or_default().to_string(),
                    arguments: String::new(),
                });
                let at = self.calls.len() - 1;
                // A chat upstream may start a call while another's arguments still
                // come (its chunks name each call by `index`): an item closed now
                // would lose what comes for it later. So a call that starts while
                // another is open waits, whole, until the finish (`close_all`).
                if !matches!(self.open, Some(Open::Call { .. })) {
                    self.close("completed", out);
                    self.open_call(at, out);
                }
                at
            }
        };
        if arguments.is_empty() {
            return;
        }
        self.calls[at].arguments.push_str(arguments);
        let open = matches!(self.open, Some(Open::Call { upstream: u, .. }) if u == upstream);
        match self.calls[at].index {
            Some(index) if open => {
                let v = json!({"item_id": self.calls[at].id, "output_index": index, "delta": arguments});
                self.event("response.function_call_arguments.delta", v, out);
            }
            // Closed already (text came between): the item the response ends with
            // holds every piece, though its events could not.
            Some(index) => self.output[index]["arguments"] = json!(self.calls[at].arguments),
            // Waiting: sent whole at the finish.
            None => {}
        }
    }

    /// The calls that waited behind another, each as an item of its own, whole.
    fn release_waiting(&mut self, out: &mut Vec<u8>) {
        while let Some(at) = self.calls.iter().position(|c| c.index.is_none()) {
            self.close("completed", out);
            let index = self.open_call(at, out);
            let call = &self.calls[at];
            if !call.arguments.is_empty() {
                let v = json!({"item_id": call.id, "output_index": index, "delta": call.arguments});
                self.event("response.function_call_arguments.delta", v, out);
            }
        }
    }

    /// The bytes for one event (the response's first two events with the first).
    pub fn encode(&mut self, e: &Event) -> Vec<u8> {
        let mut out = Vec::new();
        match e {
            Event::Text(t) => {
                self.start(&mut out);
                if !t.is_empty() || self.output.is_empty() {
                    self.message_text(t, false, &mut out);
                }
            }
            Event::Refusal(t) => {
                self.start(&mut out);
                self.message_text(t, true, &mut out);
            }
            Event::Reasoning(t) => {
                self.start(&mut out);
                self.reasoning(t, &mut out);
            }
            Event::ToolCall {
                index,
                id,
                name,
                arguments,
            } => {
                self.start(&mut out);
                self.call(*index, id.as_deref(), name.as_deref(), arguments, &mut out);
            }
            // The finish and the usage come in `finish`, with the whole response.
            // Never reached: a Responses request has no `n`, and `stream` keeps the
            // events of every choice but the first from this encoder.
            Event::Finish(_)
            | Event::Usage(_)
            | Event::Model(_)
            | Event::Raw { .. }
            | Event::Choice(_) => {}
        }
        out
    }

    /// Closes the open item: its last events. An answer that `finish` cut (the token
    /// cap, a filter) leaves that item `incomplete`, as the unstreamed answer's message is.
    pub fn close_all(&mut self, finish: &Finish) -> Vec<u8> {
        let (status, _) = output::status(&finish_reason(finish), self.refused());
        let mut out = Vec::new();
        if self.calls.iter().any(|c| c.index.is_none()) {
            self.close("completed", &mut out);
            self.release_waiting(&mut out);
        }
        // As the unstreamed answer has it: a function call is whole (its arguments
        // arrived, or it would not be one), and the finish's status is the message's,
        // in the response the stream ends with, whether or not a call followed it.
        let open_call = matches!(self.open, Some(Open::Call { .. }));
        self.close(if open_call { "completed" } else { status }, &mut out);
        if status != "completed" {
            for item in self.output.iter_mut().filter(|i| i["type"] == "message") {
                item["status"] = json!(status);
            }
        }
        out
    }

    /// Whether the answer holds a refusal: a closed item's part, or one the open
    /// message holds or is writing.
    fn refused(&self) -> bool {
        let is_refusal = |p: &Value| p["type"] == "refusal";
        self.output.iter().any(|i| {
            i["content"]
                .as_array()
                .is_some_and(|c| c.iter().any(is_refusal))
        }) || self.parts.iter().any(is_refusal)
            || matches!(self.open, Some(Open::Message { refusal: true, .. }))
    }

    /// The whole `response` the stream ends with, its items closed (`close_all` first):
    /// completed, or incomplete when the answer was cut (`max_output_tokens`,
    /// `content_filter`).
    pub fn completed_object(&self, finish: &Finish, usage: Option<&Usage>) -> Value {
        let (status, incomplete) = output::status(&finish_reason(finish), self.refused());
        self.object(status, incomplete, Some(output::usage(usage)), None)
    }

    /// The last event, carrying `response`: `response.completed`, or
    /// `response.incomplete` for a cut one.
    pub fn completed_event(&mut self, response: &Value) -> Vec<u8> {
        let kind = if response["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        let mut out = Vec::new();
        self.event(kind, json!({ "response": response }), &mut out);
        out
    }

    /// What ends a stream an upstream failure cut: the error, then the response,
    /// failed (OpenAI sends both; the SDK raises on the first).
    pub fn error(&mut self, e: &ApiError) -> Vec<u8> {
        let mut out = Vec::new();
        self.start(&mut out);
        // The item open now is the one the failure cut: its text is not whole, and
        // "completed" would present a truncated answer as complete (cli.md).
        self.close("incomplete", &mut out);
        // OpenAI's `ResponseErrorEvent` is flat: `code`, `message`, `param` beside `type`
        // (an `error` object inside would make the SDK raise, not yield the event).
        let error = json!({"code": e.code, "message": e.message, "param": null});
        self.event("error", error, &mut out);
        let failed = json!({"code": "server_error", "message": e.message});
        let r = self.object("failed", None, None, Some(failed));
        self.event("response.failed", json!({ "response": r }), &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    fn turn() -> std::sync::Arc<Turn> {
        std::sync::Arc::new(Turn {
            id: "resp_gw".into(),
            created_at: 7,
            previous_response_id: None,
            store: true,
            fields: std::sync::Arc::new(Map::new()),
            history: vec![],
            origins: vec![],
            held: Default::default(),
        })
    }

    fn events(bytes: &[u8]) -> Vec<Value> {
        std::str::from_utf8(bytes)
            .unwrap()
            .split("\n\n")
            .filter_map(|f| f.lines().find_map(|l| l.strip_prefix("data: ")))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn a_stream_is_the_lifecycle_the_sdk_helper_assembles() {
        let mut s = ResponsesStream::new(turn(), "claude-x".into());
        let mut bytes = Vec::new();
        for e in [
            Event::Reasoning("hmm".into()),
            Event::Text("Hel".into()),
            Event::Text("lo".into()),
            Event::ToolCall {
                index: 1,
                id: Some("toolu_1".into()),
                name: Some("f".into()),
                arguments: String::new(),
            },
            Event::ToolCall {
                index: 1,
                id: None,
                name: None,
                arguments: "{\"a\":".into(),
            },
            Event::ToolCall {
                index: 1,
                id: None,
                name: None,
                arguments: "1}".into(),
            },
        ] {
            bytes.extend(s.encode(&e));
        }
        let usage = Usage {
            input_tokens: 5,
            output_tokens: 3,
            ..Usage::default()
        };
        bytes.extend(s.close_all(&Finish::ToolCalls));
        let r = s.completed_object(&Finish::ToolCalls, Some(&usage));
        bytes.extend(s.completed_event(&r));
        let ev = events(&bytes);
        let kinds: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(kinds[..2], ["response.created", "response.in_progress"]);
        assert_eq!(*kinds.last().unwrap(), "response.completed");
        // Sequence numbers count every event from 0.
        for (i, e) in ev.iter().enumerate() {
            assert_eq!(e["sequence_number"], i as u64);
        }
        // Each item is added before its deltas, each text part before its text.
        let pos = |k: &str| kinds.iter().position(|x| *x == k).unwrap();
        assert!(pos("response.content_part.added") < pos("response.output_text.delta"));
        assert!(pos("response.output_item.added") < pos("response.reasoning_summary_text.delta"));
        let output = r["output"].as_array().unwrap();
        let types: Vec<&str> = output.iter().map(|i| i["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["reasoning", "message", "function_call"]);
        assert_eq!(output[1]["content"][0]["text"], "Hello");
        assert_eq!(output[2]["arguments"], "{\"a\":1}");
        assert_eq!(output[2]["call_id"], "toolu_1");
        assert_eq!(r["usage"]["input_tokens"], 5);
        assert_eq!(r["id"], "resp_gw");
        assert_eq!(output.len(), 3);
    }

    #[test]
    fn a_cut_answer_ends_incomplete_and_a_failure_failed() {
        let mut s = ResponsesStream::new(turn(), "m".into());
        let mut bytes = s.encode(&Event::Text("Half".into()));
        bytes.extend(s.close_all(&Finish::Length));
        let r = s.completed_object(&Finish::Length, None);
        bytes.extend(s.completed_event(&r));
        assert_eq!(r["status"], "incomplete");
        assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
        assert_eq!(
            events(&bytes).last().unwrap()["type"],
            "response.incomplete"
        );
        let mut s = ResponsesStream::new(turn(), "m".into());
        let mut bytes = s.encode(&Event::Text("Hal".into()));
        bytes.extend(s.error(&ApiError::new(
            502,
            "stream_interrupted",
            "stream_interrupted",
            "cut",
        )));
        let ev = events(&bytes);
        let n = ev.len();
        assert_eq!(ev[n - 2]["type"], "error");
        assert_eq!(ev[n - 2]["code"], "stream_interrupted");
        assert!(ev[n - 2].get("error").is_none(), "{}", ev[n - 2]);
        assert_eq!(ev[n - 1]["type"], "response.failed");
        assert_eq!(ev[n - 1]["response"]["status"], "failed");
    }

    /// Guards a truncated answer presented as complete (cli.md): a streamed answer the
    /// token cap cut closed its message `completed`, where the same answer unstreamed
    /// has it `incomplete`; a refusal in words that a filter ended is whole.
    #[test]
    fn a_message_the_token_cap_cuts_closes_incomplete_as_unstreamed() {
        let done_item = |bytes: &[u8]| {
            events(bytes)
                .into_iter()
                .find(|e| e["type"] == "response.output_item.done")
                .unwrap()["item"]
                .clone()
        };
        let mut s = ResponsesStream::new(turn(), "m".into());
        let mut bytes = s.encode(&Event::Text("Half".into()));
        bytes.extend(s.close_all(&Finish::Length));
        let r = s.completed_object(&Finish::Length, None);
        assert_eq!(done_item(&bytes)["status"], "incomplete");
        assert_eq!(r["output"][0]["status"], "incomplete");

        let mut s = ResponsesStream::new(turn(), "m".into());
        let mut bytes = s.encode(&Event::Refusal("I can't help with that.".into()));
        bytes.extend(s.close_all(&Finish::ContentFilter));
        let r = s.completed_object(&Finish::ContentFilter, None);
        assert_eq!(done_item(&bytes)["status"], "completed");
        assert_eq!(r["status"], "completed");
    }

    /// Guards a truncated answer presented as complete (cli.md): the item a failure cut
    /// was closed `completed`; one closed whole before it stays so.
    /// Guards interleaved calls from a chat upstream (call 0 starts, call 1 starts,
    /// then each one's arguments): call 0's item was closed when call 1 started, and
    /// its arguments, arriving after, were lost from every event and from the response,
    /// which still said `completed`. A call that starts while another is open now waits
    /// and is sent whole at the finish; every event of an item falls between its
    /// `added` and its `done`.
    #[test]
    fn interleaved_calls_keep_every_argument_and_each_items_events_in_its_span() {
        let call = |index: u32, id: Option<&str>, arguments: &str| Event::ToolCall {
            index,
            id: id.map(str::to_string),
            name: id.map(|_| "get_weather".to_string()),
            arguments: arguments.into(),
        };
        let mut s = ResponsesStream::new(turn(), "m".into());
        let mut bytes = Vec::new();
        for e in [
            call(0, Some("call_A"), ""),
            call(1, Some("call_B"), ""),
            call(0, None, "{\"city\":"),
            call(1, None, "{\"city\":\"Rome\"}"),
            call(0, None, "\"Paris\"}"),
        ] {
            bytes.extend(s.encode(&e));
        }
        bytes.extend(s.close_all(&Finish::ToolCalls));
        let r = s.completed_object(&Finish::ToolCalls, None);
        bytes.extend(s.completed_event(&r));
        let output = r["output"].as_array().unwrap();
        assert_eq!(output.len(), 2);
        assert_eq!(output[0]["call_id"], "call_A");
        assert_eq!(output[0]["arguments"], "{\"city\":\"Paris\"}");
        assert_eq!(output[1]["call_id"], "call_B");
        assert_eq!(output[1]["arguments"], "{\"city\":\"Rome\"}");
        let ev = events(&bytes);
        for (i, e) in ev.iter().enumerate() {
            assert_eq!(e["sequence_number"], i as u64);
        }
        // What the SDK's helper accumulates: each item's deltas, in its own span.
        for (index, args) in [(0, "{\"city\":\"Paris\"}"), (1, "{\"city\":\"Rome\"}")] {
            let at = |kind: &str| {
                ev.iter()
                    .position(|e| e["type"] == kind && e["output_index"] == index)
                    .unwrap()
            };
            let (added, done) = (
                at("response.output_item.added"),
                at("response.output_item.done"),
            );
            let deltas: String = ev
                .iter()
                .enumerate()
                .filter(|(_, e)| {
                    e["type"] == "response.function_call_arguments.delta"
                        && e["output_index"] == index
                })
                .map(|(i, e)| {
                    assert!(
                        added < i && i < done,
                        "a delta of item {index} outside its span"
                    );
                    e["delta"].as_str().unwrap().to_string()
                })
                .collect();
            assert_eq!(deltas, args);
        }
    }

    /// Guards the statuses a streamed answer ends with against the unstreamed one's:
    /// with text, then a call, then the token cap, the stream closed the message
    /// `completed` and the call `incomplete`, the unstreamed answer the other way round.
    #[test]
    fn a_capped_answer_with_a_call_ends_with_the_unstreamed_answers_statuses() {
        let mut s = ResponsesStream::new(turn(), "m".into());
        s.encode(&Event::Text("Looking".into()));
        s.encode(&Event::ToolCall {
            index: 0,
            id: Some("call_1".into()),
            name: Some("f".into()),
            arguments: "{}".into(),
        });
        s.close_all(&Finish::Length);
        let streamed = s.completed_object(&Finish::Length, None);
        let calls = [crate::core::conversation::ToolCall {
            id: "call_1".into(),
            name: "f".into(),
            arguments: json!({}),
        }];
        let whole = output::output_items(&Answered {
            text: "Looking",
            refusal: None,
            reasoning: None,
            tool_calls: &calls,
            finish: &FinishReason::Length,
        });
        let statuses = |items: &[Value]| -> Vec<(String, String)> {
            items
                .iter()
                .map(|i| (i["type"].to_string(), i["status"].to_string()))
                .collect()
        };
        assert_eq!(
            statuses(streamed["output"].as_array().unwrap()),
            statuses(&whole)
        );
        assert_eq!(streamed["output"][0]["status"], "incomplete");
    }

    #[test]
    fn an_item_a_failure_cuts_is_incomplete_and_one_closed_before_it_completed() {
        let mut s = ResponsesStream::new(turn(), "m".into());
        let mut bytes = s.encode(&Event::ToolCall {
            index: 0,
            id: Some("call_1".into()),
            name: Some("f".into()),
            arguments: "{}".into(),
        });
        bytes.extend(s.encode(&Event::Text("Hal".into())));
        bytes.extend(s.error(&ApiError::new(
            502,
            "stream_interrupted",
            "stream_interrupted",
            "cut",
        )));
        let ev = events(&bytes);
        let done: Vec<&Value> = ev
            .iter()
            .filter(|e| e["type"] == "response.output_item.done")
            .map(|e| &e["item"])
            .collect();
        assert_eq!(done[0]["type"], "function_call");
        assert_eq!(done[0]["status"], "completed");
        assert_eq!(done[1]["type"], "message");
        assert_eq!(done[1]["status"], "incomplete");
        let failed = &ev.last().unwrap()["response"];
        assert_eq!(failed["output"][0]["status"], "completed");
        assert_eq!(failed["output"][1]["status"], "incomplete");
    }
}
