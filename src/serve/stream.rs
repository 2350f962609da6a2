//! Streamed chat answers: the routing of one stream runs inside its request, events
//! are encoded in the client's shape as they arrive, nothing is sent before the first
//! visible token, and the end is the finish, the usage, the `: poolctl outcome=…`
//! comment and `[DONE]`, or after a failure the in-band error and no `[DONE]`.

use super::adapter::{self, Called, Event, Finish, Progress};
use super::ask::{last_user_text, Ask};
use super::choose::Wants;
use super::egress_responses::ResponsesStream;
use super::egress_stream::{self, AnthropicStream, OpenAiStream};
use super::errors::{ApiError, Flavor};
use super::http::{dropped_header, error_response, full, lock, refusal, trace_headers, Body};
use super::ingress::{ChatIn, Turn};
use super::respond::{self, Context};
use super::Gateway;
use crate::core::clock::Stopwatch;
use crate::core::key_guard::{Channel, KeyGuard, Part, Released};
use crate::core::vocab::Route;
use bytes::Bytes;
use futures_util::FutureExt;
use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{HeaderMap, Response};
use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use tokio::sync::mpsc;

/// What reasoning the client cannot be shown is named as (fidelity.md §2, §3), as the
/// whole answer names it (`handler::chat`).
const UNSIGNED: &str = "reasoning_content";

/// A stream's encoder, in the client's shape.
enum Encoder {
    OpenAi(OpenAiStream),
    Anthropic(AnthropicStream),
    Responses(ResponsesStream),
    /// Same wire: the upstream's events are forwarded as they came (fidelity.md §1).
    PassThrough,
}

/// What flows from the routing task to the handler and the response body.
enum Msg {
    /// The first visible token arrived: headers as of that token.
    Started {
        route: Option<Route>,
        attempts: usize,
        /// The request fields that route is called without.
        dropped: Vec<String>,
    },
    Bytes(Bytes),
    /// The request ended without a visible token: the handler answers it whole.
    Unstarted {
        called: Box<Called>,
        error: Option<ApiError>,
        include_usage: bool,
    },
}

/// What the routing task shares with its event callback.
struct Live {
    tx: mpsc::UnboundedSender<Msg>,
    flavor: Flavor,
    /// A Responses API request's conversation: its id labels every lifecycle event.
    turn: Option<Arc<Turn>>,
    include_usage: bool,
    id: String,
    order: Vec<Route>,
    /// The routes of the client's wire, when the request carries the client's body:
    /// a stream on one of them is forwarded as the upstream sent it.
    same_wire: Vec<Route>,
    /// Per route, the request fields it is called without (`wire::carry`): named in
    /// the headers, which go out before the attempt's record exists.
    drops: Vec<(Route, Vec<String>)>,
    progress: Progress,
    state: Mutex<LiveState>,
}

impl Live {
    fn dropped(&self, route: Option<&Route>) -> Vec<String> {
        route
            .and_then(|r| self.drops.iter().find(|(d, _)| d == r))
            .map(|(_, d)| d.clone())
            .unwrap_or_default()
    }

    /// The client cannot be shown `route`'s reasoning: an Anthropic client served by
    /// another wire (no signed `thinking` block can hold it, fidelity.md §2). It is
    /// dropped and named, and it is no visible token (§5).
    fn hides_reasoning(&self, route: Option<&Route>) -> bool {
        self.flavor == Flavor::Anthropic && !route.is_some_and(|r| self.same_wire.contains(r))
    }
}

#[derive(Default)]
struct LiveState {
    encoder: Option<Encoder>,
    /// Events before the first visible token (a usage report), sent with it.
    held: Vec<(usize, Event)>,
    finish_sent: bool,
    usage_sent: bool,
    /// The choice the events now arriving are for (`Event::Choice`).
    choice: u32,
    /// Same-wire frames before the first visible token (`message_start`, the role
    /// chunk), with the attempt they came from: only the serving attempt's are sent.
    held_raw: Vec<(usize, Bytes)>,
    /// The upstream's `message_stop` was forwarded (Anthropic).
    stop_sent: bool,
    /// The `sequence_number` after the last a same-wire Responses frame carried: the
    /// events the gateway ends such a stream with go on from it.
    next_seq: u64,
    /// The model an attempt's upstream said is answering, with that attempt: the
    /// model every chunk names, where the route's configured name is only a guess.
    answering: Option<(usize, String)>,
    /// A same-wire Responses stream's last event (`response.completed`), held until
    /// its conversation is kept: the client may send the next turn once it reads it.
    held_final: Option<Bytes>,
    /// The usage an attempt's upstream reported before the first visible token, with
    /// that attempt: Anthropic's `message_start` states its input (fidelity.md §2).
    start_usage: Option<(usize, crate::core::request::Usage)>,
    /// The attempt whose reasoning the client was not shown (`Live::hides_reasoning`):
    /// named as dropped when that attempt serves.
    unsigned: Option<usize>,
    /// The attempt that sent the first visible token.
    started_at: usize,
    /// The deltas the gateway encodes (text, refusal, reasoning, tool-call
    /// arguments), held while one may be the start of a key that the next delta of its
    /// channel completes (`core::key_guard`).
    text_guard: KeyGuard<Event>,
    /// The same for a same-wire stream's frames, with the text of the frame to come
    /// and which text it is (its decoded event precedes its `Event::Raw`).
    frame_guard: KeyGuard<Bytes>,
    frame_text: String,
    frame_part: Option<Part>,
}

/// The text a delta adds to, and which: what the key guard searches.
fn piece(ev: &Event) -> Option<(Part, &str)> {
    match ev {
        Event::Text(t) => Some((Part::Text, t)),
        Event::Refusal(t) => Some((Part::Refusal, t)),
        Event::Reasoning(t) => Some((Part::Reasoning, t)),
        Event::ToolCall {
            index, arguments, ..
        } => Some((Part::Arguments(*index), arguments)),
        _ => None,
    }
}

/// `ev` showing `text` instead of its own.
fn with_piece(ev: Event, text: String) -> Event {
    match ev {
        Event::Text(_) => Event::Text(text),
        Event::Refusal(_) => Event::Refusal(text),
        Event::Reasoning(_) => Event::Reasoning(text),
        Event::ToolCall {
            index, id, name, ..
        } => Event::ToolCall {
            index,
            id,
            name,
            arguments: text,
        },
        other => other,
    }
}

impl Live {
    /// A same-wire Responses frame: lifecycle events carry the gateway's id.
    fn relabel(&self, frame: Bytes) -> Bytes {
        let Some(turn) = &self.turn else {
            return frame;
        };
        match crate::wire::responses::relabel_frame(&frame, turn.relabel(true)) {
            Some(b) => b.into(),
            None => frame,
        }
    }

    fn on_event(&self, ev: Event) {
        let mut s = lock(&self.state);
        if let Event::Raw { frame, .. } = ev {
            let frame = self.relabel(frame);
            match &s.encoder {
                Some(Encoder::PassThrough) => {
                    s.stop_sent |= frame.starts_with(b"event: message_stop");
                    s.note_seq(&frame);
                    if self.turn.is_some()
                        && matches!(
                            crate::wire::responses::frame_kind(&frame),
                            Some("response.completed" | "response.incomplete")
                        )
                    {
                        s.held_final = Some(frame);
                        return;
                    }
                    let text = std::mem::take(&mut s.frame_text);
                    let guarded = match s.frame_part.take() {
                        Some(part) => {
                            let channel = Channel {
                                choice: s.choice,
                                part,
                            };
                            s.frame_guard.push_in(channel, frame, &text)
                        }
                        None => s.frame_guard.push(frame, ""),
                    };
                    if s.held_raw.is_empty() {
                        if guarded.len() == 1 && guarded[0].1.is_none() {
                            let (frame, _) = guarded.into_iter().next().expect("one");
                            let _ = self.tx.send(Msg::Bytes(frame));
                        } else if !guarded.is_empty() {
                            let out = released_frames(guarded, s.frame_guard.channel());
                            let _ = self.tx.send(Msg::Bytes(out.into()));
                        }
                        return;
                    }
                    // The frames held before the first visible token go out in one write
                    // with it, as the upstream's first token came.
                    let (_, attempt) = self.progress.current(&self.order);
                    let mut out = Vec::new();
                    for (a, held) in std::mem::take(&mut s.held_raw) {
                        if a == attempt {
                            out.extend_from_slice(&held);
                        }
                    }
                    out.extend(released_frames(guarded, s.frame_guard.channel()));
                    let _ = self.tx.send(Msg::Bytes(out.into()));
                }
                Some(_) => {}
                None => {
                    let (_, attempt) = self.progress.current(&self.order);
                    s.held_raw.retain(|(a, _)| *a == attempt);
                    s.held_raw.push((attempt, frame));
                }
            }
            return;
        }
        if matches!(s.encoder, Some(Encoder::PassThrough)) {
            // The upstream's own frames carry it; its text is what the frame shows.
            s.note_frame_text(&ev);
            return;
        }
        if let Event::Model(m) = &ev {
            if s.encoder.is_none() {
                let (_, attempt) = self.progress.current(&self.order);
                s.answering = Some((attempt, m.clone()));
            }
            return;
        }
        if let Event::Usage(u) = &ev {
            if s.encoder.is_none() {
                // Reported before the first visible token: what the message starts with.
                let (_, attempt) = self.progress.current(&self.order);
                s.start_usage = Some((attempt, *u));
                return;
            }
        }
        if let Event::Reasoning(t) = &ev {
            let hidden = match &s.encoder {
                Some(e) => matches!(e, Encoder::Anthropic(_)),
                None => self.hides_reasoning(self.progress.current(&self.order).0.as_ref()),
            };
            if hidden {
                if !t.is_empty() {
                    s.unsigned = Some(match s.encoder {
                        Some(_) => s.started_at,
                        None => self.progress.current(&self.order).1,
                    });
                }
                return;
            }
        }
        let visible = match &ev {
            Event::Text(t) | Event::Refusal(t) | Event::Reasoning(t) => !t.is_empty(),
            Event::ToolCall { .. } => true,
            Event::Finish(_)
            | Event::Usage(_)
            | Event::Model(_)
            | Event::Raw { .. }
            | Event::Choice(_) => false,
        };
        if s.encoder.is_none() {
            if !visible {
                // Held with its attempt: a failed attempt's events (its finish, the
                // choice it named last) are not the next attempt's.
                let (_, attempt) = self.progress.current(&self.order);
                s.held.retain(|(a, _)| *a == attempt);
                s.held.push((attempt, ev));
                return;
            }
            let (route, attempts) = self.progress.current(&self.order);
            s.started_at = attempts;
            if route.as_ref().is_some_and(|r| self.same_wire.contains(r)) {
                s.encoder = Some(Encoder::PassThrough);
                s.note_frame_text(&ev);
                s.held.clear();
                // The held frames go out with this token's own frame, which follows.
                s.held_raw.retain(|(a, _)| *a == attempts);
                let dropped = self.dropped(route.as_ref());
                let _ = self.tx.send(Msg::Started {
                    route,
                    attempts,
                    dropped,
                });
                return;
            }
            let model = match s.answering.take() {
                Some((a, m)) if a == attempts => m,
                _ => route
                    .as_ref()
                    .map(|r| r.model().to_string())
                    .unwrap_or_default(),
            };
            let reported = match s.start_usage.take() {
                Some((a, u)) if a == attempts => Some(u),
                _ => None,
            };
            s.encoder = Some(match (self.flavor, &self.turn) {
                (Flavor::Anthropic, _) => {
                    let mut e = AnthropicStream::new(self.id.clone(), model);
                    if let Some(u) = reported {
                        // Writes nothing: `message_start` (with the token) states it.
                        e.event(&Event::Usage(u));
                    }
                    Encoder::Anthropic(e)
                }
                (Flavor::Responses, Some(turn)) => {
                    Encoder::Responses(ResponsesStream::new(turn.clone(), model))
                }
                (Flavor::OpenAi | Flavor::Responses, _) => Encoder::OpenAi(OpenAiStream::new(
                    self.id.clone(),
                    crate::core::clock::wall_now_ms() / 1000,
                    model,
                    self.include_usage,
                )),
            });
            let mut dropped = self.dropped(route.as_ref());
            if s.unsigned == Some(attempts) && !dropped.iter().any(|d| d == UNSIGNED) {
                // Known before the headers go: named there too (fidelity.md §3).
                dropped.push(UNSIGNED.into());
            }
            let _ = self.tx.send(Msg::Started {
                route,
                attempts,
                dropped,
            });
            let held = std::mem::take(&mut s.held);
            for (_, h) in held.into_iter().filter(|(a, _)| *a == attempts) {
                let bytes = s.encode(&h);
                let _ = self.tx.send(Msg::Bytes(bytes.into()));
            }
        }
        let bytes = s.encode(&ev);
        if !bytes.is_empty() {
            let _ = self.tx.send(Msg::Bytes(bytes.into()));
        }
    }
}

impl LiveState {
    /// A same-wire stream that answered without a visible token: the serving attempt's
    /// held frames, with the pass-through encoder set to end them, so the client gets
    /// the upstream's stream as it came (fidelity.md §1, §4). `None` for anything else:
    /// a failure, a started stream, another wire, or a Responses stream (its
    /// conversation is kept from the gateway's own rendering).
    fn release_unshown(
        &mut self,
        live: &Live,
        called: &Called,
        error: Option<&ApiError>,
    ) -> Option<Vec<u8>> {
        let served = called.report.attempts.len();
        let same_wire = called
            .report
            .served_by
            .as_ref()
            .is_some_and(|r| live.same_wire.contains(r));
        if self.encoder.is_some()
            || error.is_some()
            || called.reply.is_none()
            || !same_wire
            || live.turn.is_some()
            || !self.held_raw.iter().any(|(a, _)| *a == served)
        {
            return None;
        }
        self.encoder = Some(Encoder::PassThrough);
        let mut out = Vec::new();
        for (a, frame) in std::mem::take(&mut self.held_raw) {
            if a == served {
                self.stop_sent |= frame.starts_with(b"event: message_stop");
                self.note_seq(&frame);
                out.extend_from_slice(&frame);
            }
        }
        Some(out)
    }

    /// A same-wire stream's decoded event: the text its frame (the `Event::Raw` to
    /// come) shows, for the key guard.
    /// Notes a passed-on frame's `sequence_number` (Responses events number from 0).
    fn note_seq(&mut self, frame: &[u8]) {
        const KEY: &[u8] = b"\"sequence_number\":";
        if let Some(at) = memchr::memmem::find(frame, KEY) {
            let digits = frame[at + KEY.len()..]
                .iter()
                .skip_while(|b| **b == b' ')
                .take_while(|b| b.is_ascii_digit())
                .fold(0u64, |n, d| {
                    n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
                });
            self.next_seq = self.next_seq.max(digits.saturating_add(1));
        }
    }

    fn note_frame_text(&mut self, ev: &Event) {
        match ev {
            Event::Choice(i) => self.choice = *i,
            _ => {
                // Filed under the part that shows text: a frame that starts one tool
                // call as another's arguments end belongs to the one with text.
                if let Some((part, t)) = piece(ev).filter(|(_, t)| !t.is_empty()) {
                    self.frame_text.push_str(t);
                    self.frame_part = Some(part);
                }
            }
        }
    }

    /// `ev` in the client's shape, its text through the key guard: held while it may
    /// start a key, released (masked where it completed one) with what comes next.
    fn encode(&mut self, ev: &Event) -> Vec<u8> {
        let encoded = matches!(
            self.encoder,
            Some(Encoder::OpenAi(_) | Encoder::Anthropic(_) | Encoder::Responses(_))
        );
        if !encoded {
            return self.encode_now(ev);
        }
        // An Anthropic or Responses client is shown choice 0 alone (it has no `n`):
        // another choice's events are dropped here, before the key guard, and a switch
        // of choice lets nothing go. Flushed at each switch, a key the upstream
        // interleaved with another choice's chunks reached the client whole, piece by
        // piece, in choice 0's text.
        if !matches!(self.encoder, Some(Encoder::OpenAi(_))) {
            if let Event::Choice(i) = ev {
                self.choice = *i;
                return Vec::new();
            }
            if self.choice != 0 && choice_bound(ev) {
                return Vec::new();
            }
        }
        if let Some((part, t)) = piece(ev) {
            if t.is_empty() && !self.text_guard.is_holding() {
                return self.encode_now(ev);
            }
            let channel = Channel {
                choice: self.choice,
                part,
            };
            let released = self.text_guard.push_in(channel, ev.clone(), t);
            return self.encode_released(released);
        }
        if matches!(ev, Event::Choice(i) if *i == self.choice) {
            return Vec::new();
        }
        let mut out = self.flush_text();
        out.extend(self.encode_now(ev));
        out
    }

    /// The deltas the key guard let go, encoded in order: consecutive pieces of one
    /// text joined into one delta, each as it was or as it must show.
    fn encode_released(&mut self, released: Vec<Released<Event>>) -> Vec<u8> {
        let mut events: Vec<Event> = Vec::new();
        for (ev, instead) in released {
            let ev = match instead {
                Some(t) => with_piece(ev, t),
                None => ev,
            };
            match (events.last_mut(), ev) {
                (Some(Event::Text(a)), Event::Text(b))
                | (Some(Event::Refusal(a)), Event::Refusal(b))
                | (Some(Event::Reasoning(a)), Event::Reasoning(b)) => a.push_str(&b),
                (
                    Some(Event::ToolCall {
                        index: i,
                        arguments: a,
                        ..
                    }),
                    Event::ToolCall {
                        index: j,
                        id: None,
                        name: None,
                        arguments: b,
                    },
                ) if *i == j => a.push_str(&b),
                (_, ev) => events.push(ev),
            }
        }
        let mut out = Vec::new();
        for ev in events {
            // Text emptied by the mask says nothing; an empty refusal is a marker (a
            // content filter's) and goes as it came.
            let empty = matches!(&ev, Event::Text(t) | Event::Reasoning(t) if t.is_empty());
            if !empty {
                out.extend(self.encode_now(&ev));
            }
        }
        out
    }

    /// What the key guards hold, released unchanged: the stream ends, or an event
    /// comes that no key continues across.
    fn flush_text(&mut self) -> Vec<u8> {
        // The held frames are all of the guard's channel (another's would have let
        // them go): a text to show instead is written into them.
        let channel = self.frame_guard.channel();
        let mut out = released_frames(self.frame_guard.flush(), channel);
        let pending = self.text_guard.flush();
        out.extend(self.encode_released(pending));
        out
    }

    fn encode_now(&mut self, ev: &Event) -> Vec<u8> {
        if let Event::Choice(i) = ev {
            self.choice = *i;
        }
        // Only OpenAI chunks say which choice they carry; the other encoders are given
        // choice 0's events alone (their clients have no `n`).
        let openai = matches!(self.encoder, Some(Encoder::OpenAi(_)));
        if self.choice != 0 && !openai && choice_bound(ev) {
            return Vec::new();
        }
        match ev {
            Event::Finish(_) if self.choice == 0 => self.finish_sent = true,
            Event::Usage(_) => self.usage_sent = true,
            _ => {}
        }
        match &mut self.encoder {
            Some(Encoder::OpenAi(e)) => e.event(ev),
            // Anthropic carries the finish in `message_delta`, written at the end.
            Some(Encoder::Anthropic(e)) => match ev {
                Event::Finish(_) => Vec::new(),
                _ => e.event(ev),
            },
            Some(Encoder::Responses(e)) => e.encode(ev),
            Some(Encoder::PassThrough) | None => Vec::new(),
        }
    }

    /// The end of a started stream: finish, usage, the outcome comment, and `[DONE]`;
    /// or after a failure, the in-band error and the comment, never `[DONE]`.
    /// `responses_end`: a Responses stream's last events, written once its
    /// conversation was kept (`keep_stream`).
    fn tail(
        &mut self,
        called: &Called,
        error: Option<&ApiError>,
        flavor: Flavor,
        responses_end: Vec<u8>,
    ) -> Vec<u8> {
        let report = &called.report;
        let mut out = self.flush_text();
        let finish = called
            .reply
            .as_ref()
            .map(|r| r.finish.clone())
            .unwrap_or(Finish::Stop);
        let usage = called.reply.as_ref().and_then(|r| r.usage);
        let (finish_sent, usage_sent) = (self.finish_sent, self.usage_sent);
        match (&mut self.encoder, error) {
            (Some(Encoder::OpenAi(e)), None) => {
                if !finish_sent {
                    out.extend(e.event(&Event::Finish(finish)));
                }
                if let (false, Some(u)) = (usage_sent, usage) {
                    out.extend(e.event(&Event::Usage(u)));
                }
                out.extend(egress_stream::outcome_comment(
                    report.outcome.as_str(),
                    report.attempts.len(),
                ));
                out.extend(e.done());
            }
            (Some(Encoder::OpenAi(e)), Some(err)) => {
                out.extend(e.error(err));
                out.extend(egress_stream::outcome_comment(
                    report.outcome.as_str(),
                    report.attempts.len(),
                ));
            }
            (Some(Encoder::Anthropic(e)), None) => {
                out.extend(e.finish(&finish, usage.as_ref()));
                out.extend(egress_stream::outcome_comment(
                    report.outcome.as_str(),
                    report.attempts.len(),
                ));
            }
            (Some(Encoder::Anthropic(e)), Some(err)) => {
                out.extend(e.error(err));
                out.extend(egress_stream::outcome_comment(
                    report.outcome.as_str(),
                    report.attempts.len(),
                ));
            }
            (Some(Encoder::Responses(e)), error) => {
                match error {
                    Some(err) => out.extend(e.error(err)),
                    None => out.extend(responses_end),
                }
                out.extend(egress_stream::outcome_comment(
                    report.outcome.as_str(),
                    report.attempts.len(),
                ));
            }
            (Some(Encoder::PassThrough), error) => {
                // The upstream's frames carried the finish and the usage; the gateway
                // adds only what ends the stream.
                let openai = || OpenAiStream::new(String::new(), 0, String::new(), false);
                let anthropic = || AnthropicStream::new(String::new(), String::new());
                match (flavor, error) {
                    (Flavor::OpenAi, Some(err)) => out.extend(openai().error(err)),
                    (Flavor::Anthropic, Some(err)) => out.extend(anthropic().error(err)),
                    (Flavor::Anthropic, None) if !self.stop_sent => {
                        out.extend(b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
                    }
                    // Ended by the caller: a failure, or the held last event.
                    (Flavor::Responses, _) => out.extend(responses_end),
                    _ => {}
                }
                out.extend(egress_stream::outcome_comment(
                    report.outcome.as_str(),
                    report.attempts.len(),
                ));
                if flavor == Flavor::OpenAi && error.is_none() {
                    out.extend(b"data: [DONE]\n\n");
                }
            }
            (None, _) => {}
        }
        out
    }
}

/// The routing of one stream: the router call and the rendering of its events. It runs
/// inside the request, polled first by the handler (until the first visible token) and
/// then by the response body, so dropping the body (the client went away) drops the
/// upstream call with it, and no cross-task wake-up stands between a token and its
/// write.
type Routing = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

struct Driver {
    rx: mpsc::UnboundedReceiver<Msg>,
    routing: Option<Routing>,
    gw: Arc<Gateway>,
    /// Once the stream's head is out: the drain deadline, which cuts it with an end
    /// the client can read.
    cut: Option<Cut>,
}

/// A started stream's side of the drain deadline.
struct Cut {
    deadline: Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    ending: super::ask::Ending,
    flavor: Flavor,
    /// The response's id (a Responses stream's failure names it).
    id: String,
    /// Upstream calls made by the first token: after it, a stream makes no other.
    attempts: usize,
    /// The deadline passed (its future is not polled again).
    fired: bool,
    /// The cut's end was handed out: nothing follows it.
    done: bool,
}

impl Cut {
    /// What a stream cut by the drain deadline ends with: the in-band error event
    /// (`stream_interrupted`, no `[DONE]`: the answer is not complete) and the outcome.
    fn tail(&self) -> Bytes {
        let e = ApiError::new(
            503,
            "stream_interrupted",
            "stream_interrupted",
            "the gateway is shutting down: its drain deadline cut this stream",
        );
        let mut out = match self.flavor {
            Flavor::OpenAi => OpenAiStream::new(String::new(), 0, String::new(), false).error(&e),
            Flavor::Anthropic => AnthropicStream::new(String::new(), String::new()).error(&e),
            Flavor::Responses => responses_failed(&self.id, &e, 0),
        };
        out.extend(egress_stream::outcome_comment(
            crate::core::vocab::Outcome::Cancelled.as_str(),
            self.attempts,
        ));
        out.into()
    }
}

impl Driver {
    /// The next message, driving the routing while none is queued. `None` once the
    /// routing has ended and every message was taken.
    fn poll_msg(&mut self, cx: &mut TaskContext<'_>) -> Poll<Option<Msg>> {
        if let Some(cut) = &mut self.cut {
            if cut.done {
                return Poll::Ready(None);
            }
            if !cut.fired && self.routing.is_some() {
                cut.fired = cut.deadline.as_mut().poll(cx).is_ready();
            }
            if cut.fired && self.routing.is_some() {
                // What the routing already produced goes out before the cut's end.
                if let Poll::Ready(Some(m)) = self.rx.poll_recv(cx) {
                    return Poll::Ready(Some(m));
                }
                cut.done = true;
                cut.ending.cut(0);
                // Dropping the routing cancels the upstream call, and its request's
                // line says `cancelled` (the Ask goes with it).
                self.routing = None;
                return Poll::Ready(Some(Msg::Bytes(cut.tail())));
            }
        }
        loop {
            if let Poll::Ready(m) = self.rx.poll_recv(cx) {
                return Poll::Ready(m);
            }
            match &mut self.routing {
                Some(f) => match f.as_mut().poll(cx) {
                    Poll::Ready(()) => self.routing = None,
                    Poll::Pending => return Poll::Pending,
                },
                // The routing ended and dropped its sender: the channel is closing.
                None => return self.rx.poll_recv(cx),
            }
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if self.routing.is_some() {
            // Dropping the routing future cancels the upstream call; the request's own
            // line (outcome `cancelled`) is written as its Ask goes with it.
            self.gw.metrics.disconnected();
        }
    }
}

/// The SSE response body: bytes rendered by the routing, until it ends.
struct SseBody {
    driver: Driver,
}

impl hyper::body::Body for SseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        loop {
            return match self.driver.poll_msg(cx) {
                Poll::Ready(Some(Msg::Bytes(b))) => {
                    // Keys masked on every event, as on whole bodies (`handler::full`).
                    Poll::Ready(Some(Ok(Frame::data(super::errors::mask_body(b)))))
                }
                Poll::Ready(Some(_)) => continue,
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            };
        }
    }
}

pub(super) async fn stream(ask: Ask, c: ChatIn) -> Response<Body> {
    let (tx, rx) = mpsc::unbounded_channel::<Msg>();
    let gw = ask.gw.clone();
    let n = gw.next_id();
    let turn = c.responses.clone();
    let id = match (ask.flavor, &turn) {
        (_, Some(turn)) => turn.id.clone(),
        (Flavor::Anthropic, None) => format!("msg_poolctl_{n}"),
        (Flavor::OpenAi | Flavor::Responses, None) => format!("chatcmpl-poolctl-{n}"),
    };
    let cut_id = id.clone();
    let unstarted_turn = turn.clone();
    let ask = Arc::new(ask);
    let routing = {
        let (ask, gw) = (ask.clone(), gw.clone());
        async move {
            let Ok(choice) = gw.lineup.choose(&c.model, Wants::Chat) else {
                return;
            };
            let order = adapter::try_order(&gw.router, choice.tier, ask.session.as_deref()).await;
            let target = ask.target(&choice);
            let wire = match ask.flavor {
                Flavor::OpenAi => crate::core::vocab::Wire::OpenAi,
                Flavor::Anthropic => crate::core::vocab::Wire::Anthropic,
                Flavor::Responses => crate::core::vocab::Wire::Responses,
            };
            let same_wire = match &c.request.original {
                Some(_) => std::iter::once(target.tier)
                    .chain(target.degrade_tier)
                    .flat_map(|t| &t.routes)
                    .filter(|r| r.endpoint.wire == wire)
                    .map(|r| r.route.clone())
                    .collect(),
                None => Vec::new(),
            };
            let drops = std::iter::once(target.tier)
                .chain(target.degrade_tier)
                .flat_map(|t| &t.routes)
                .map(|r| {
                    let d = crate::wire::carry(&c.request, &r.endpoint).unwrap_or_default();
                    (r.route.clone(), d)
                })
                .collect();
            let live = Live {
                same_wire,
                drops,
                tx: tx.clone(),
                flavor: ask.flavor,
                turn: turn.clone(),
                include_usage: c.include_usage,
                id,
                order,
                progress: Progress::default(),
                state: Mutex::new(LiveState::default()),
            };
            let prompt = gw
                .settings
                .log_prompts
                .then(|| last_user_text(&c))
                .flatten();
            let rt = Stopwatch::start();
            let on_event = |ev: Event| live.on_event(ev);
            let untranslatable = c.untranslatable.is_some();
            let mut called = adapter::stream(
                &gw.router,
                ask.target(&choice),
                c.request,
                untranslatable,
                turn.is_some(),
                &on_event,
                &live.progress,
            )
            .await;
            let in_router = rt.elapsed();
            {
                // The serving attempt's reasoning the client was not shown: dropped, and
                // named in the log line and the metric (and the headers, when it came
                // before them).
                let s = lock(&live.state);
                let served = match s.encoder {
                    Some(_) => s.started_at,
                    None => called.report.attempts.len(),
                };
                if s.unsigned == Some(served)
                    && !super::ask::served_dropped(&called.report)
                        .iter()
                        .any(|d| d == UNSIGNED)
                {
                    super::ask::name_dropped(&mut called.report, UNSIGNED);
                }
            }
            let error = match called.reply {
                None => Some(ask.failure(&choice, &called.report).await),
                Some(_) => None,
            };
            let started = lock(&live.state).encoder.is_some();
            let error = match (started, error) {
                (true, Some(mut e)) => {
                    e.kind = "stream_interrupted".into();
                    e.code = "stream_interrupted".into();
                    Some(e)
                }
                (_, e) => e,
            };
            let responses_end = match (&live.turn, &error) {
                (Some(turn), None) if started => responses_end(&ask, turn, &live, &called).await,
                (Some(turn), Some(e)) if started => {
                    responses_failed(&turn.id, e, lock(&live.state).next_seq)
                }
                _ => Vec::new(),
            };
            let mut state = lock(&live.state);
            if let Some(frames) = state.release_unshown(&live, &called, error.as_ref()) {
                // A same-wire answer with no visible token (a refusal's finish alone, an
                // empty answer) is still the upstream's: its own frames, not a rewrite.
                let route = called.report.served_by.clone();
                let dropped = live.dropped(route.as_ref());
                let attempts = called.report.attempts.len();
                let _ = tx.send(Msg::Started {
                    route,
                    attempts,
                    dropped,
                });
                let _ = tx.send(Msg::Bytes(frames.into()));
            }
            if state.encoder.is_some() {
                let tail = state.tail(&called, error.as_ref(), ask.flavor, responses_end);
                drop(state);
                ask.finish(&choice, &c.model, &called.report, 200, in_router, prompt);
                let _ = tx.send(Msg::Bytes(tail.into()));
            } else {
                drop(state);
                let status = error.as_ref().map_or(200, |e| e.status);
                ask.finish(&choice, &c.model, &called.report, status, in_router, prompt);
                let include_usage = c.include_usage;
                let _ = tx.send(Msg::Unstarted {
                    called: Box::new(called),
                    error,
                    include_usage,
                });
            }
        }
    };
    // A panic while routing ends this stream, never the connection task or the process.
    let routing: Routing = Box::pin(AssertUnwindSafe(routing).catch_unwind().map(|r| {
        if r.is_err() {
            tracing::error!(target: "poolctl::serve", "a stream's routing panicked");
        }
    }));
    let mut driver = Driver {
        rx,
        routing: Some(routing),
        gw: gw.clone(),
        cut: None,
    };
    match std::future::poll_fn(|cx| driver.poll_msg(cx)).await {
        Some(Msg::Started {
            route,
            attempts,
            dropped,
        }) => {
            ask.ending().started(route.as_ref());
            driver.cut = Some(Cut {
                deadline: Box::pin(gw.until_cut()),
                ending: ask.ending(),
                flavor: ask.flavor,
                id: cut_id,
                attempts,
                fired: false,
                done: false,
            });
            let mut r = Response::new(SseBody { driver }.boxed_unsync());
            sse_headers(r.headers_mut());
            trace_headers(r.headers_mut(), route.as_ref(), "streaming", attempts);
            dropped_header(r.headers_mut(), &dropped);
            r
        }
        Some(Msg::Unstarted {
            called,
            error,
            include_usage,
        }) => {
            // Its last act was to send this: nothing is left to cancel.
            driver.routing = None;
            unstarted(&ask, *called, error, include_usage, unstarted_turn).await
        }
        // The routing ended without a word: it panicked.
        Some(Msg::Bytes(_)) | None => {
            driver.routing = None;
            refusal(
                &ApiError::new(
                    500,
                    "error",
                    "internal",
                    "the gateway failed while routing this request",
                ),
                ask.flavor,
            )
        }
    }
}

/// A Responses stream's end, once its answer is whole: the open item closed, the
/// conversation kept, then the last event (`response.completed`), which says whether
/// it was kept. A same-wire stream ends with the upstream's own last event, held until
/// now.
async fn responses_end(ask: &Ask, turn: &Turn, live: &Live, called: &Called) -> Vec<u8> {
    let served = called.report.served_by.clone();
    let (mut out, object) = {
        let mut s = lock(&live.state);
        // What the key guard holds goes before the items close.
        let held = s.flush_text();
        let (closing, object) = match &mut s.encoder {
            Some(Encoder::Responses(e)) => {
                let finish = called
                    .reply
                    .as_ref()
                    .map(|r| r.finish.clone())
                    .unwrap_or(Finish::Stop);
                let usage = called.reply.as_ref().and_then(|r| r.usage);
                let closing = e.close_all(&finish);
                let object = e.completed_object(&finish, usage.as_ref());
                (closing, Some(object))
            }
            Some(Encoder::PassThrough) => (
                Vec::new(),
                s.held_final
                    .as_ref()
                    .and_then(|f| crate::wire::responses::frame_response(f)),
            ),
            _ => (Vec::new(), None),
        };
        let mut out = held;
        out.extend(closing);
        (out, object)
    };
    let Some(mut object) = object else {
        return out;
    };
    let stored = keep_streamed(ask, turn, served.as_ref(), &object, called.reply.as_ref()).await;
    let mut s = lock(&live.state);
    match &mut s.encoder {
        Some(Encoder::Responses(e)) => {
            if !stored {
                object["store"] = serde_json::json!(false);
            }
            out.extend(e.completed_event(&object));
        }
        Some(Encoder::PassThrough) => {
            if let Some(frame) = s.held_final.take() {
                match crate::wire::responses::relabel_frame(&frame, turn.relabel(stored)) {
                    Some(b) => out.extend(b),
                    None => out.extend_from_slice(&frame),
                }
            }
        }
        _ => {}
    }
    out
}

/// Keeps a streamed answer's conversation: the `output` of the response it ended with,
/// unless that differs from what was streamed (a same-wire stream's last event may say
/// `output: []` after its deltas), when the conversation keeps what was streamed.
async fn keep_streamed(
    ask: &Ask,
    turn: &Turn,
    served: Option<&Route>,
    object: &serde_json::Value,
    reply: Option<&adapter::Reply>,
) -> bool {
    let mut output = object["output"].as_array().cloned().unwrap_or_default();
    if let Some(reply) = reply.filter(|r| !streamed_as(&output, r)) {
        output = super::egress_responses::response(turn, reply).1;
    }
    super::keep::keep(ask, turn, served, output, object.clone()).await
}

/// Whether `output` items hold the text and the calls `reply` was streamed.
fn streamed_as(output: &[serde_json::Value], reply: &adapter::Reply) -> bool {
    let mut text = String::new();
    let mut calls = 0;
    for item in output {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    if part["type"] == "output_text" {
                        text.push_str(part["text"].as_str().unwrap_or(""));
                    }
                }
            }
            Some("function_call") => calls += 1,
            _ => {}
        }
    }
    text == reply.text && calls == reply.tool_calls.len()
}

/// What ends a Responses stream whose answer failed after its first event (a
/// same-wire stream, or one cut by the drain deadline): the error, then the response,
/// failed, numbered on from `seq` (the upstream's events were numbered before them).
fn responses_failed(id: &str, e: &ApiError, seq: u64) -> Vec<u8> {
    // Flat, as OpenAI's `ResponseErrorEvent` is (`code`, `message`, `param`).
    let error = serde_json::json!({"type": "error", "sequence_number": seq,
        "code": e.code, "message": e.message, "param": null});
    let failed = serde_json::json!({"type": "response.failed", "sequence_number": seq + 1,
        "response": {"id": id, "object": "response", "status": "failed", "output": [],
            "error": {"code": "server_error", "message": e.message}}});
    let mut out = Vec::new();
    for (kind, v) in [("error", error), ("response.failed", failed)] {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\ndata: ");
        out.extend(serde_json::to_vec(&v).unwrap_or_default());
        out.extend_from_slice(b"\n\n");
    }
    out
}

/// Same-wire frames the key guard let go, in order: each as the upstream sent it, or,
/// where a key was masked across frames of `channel`, with that text replaced. A frame
/// whose text cannot be replaced is left out: it held part of a key.
/// Whether an event belongs to the choice it comes in (`Event::Choice`).
fn choice_bound(ev: &Event) -> bool {
    matches!(
        ev,
        Event::Text(_)
            | Event::Refusal(_)
            | Event::Reasoning(_)
            | Event::ToolCall { .. }
            | Event::Finish(_)
    )
}

fn released_frames(released: Vec<Released<Bytes>>, channel: Option<Channel>) -> Vec<u8> {
    let mut out = Vec::new();
    for (frame, instead) in released {
        match (instead, channel) {
            (None, _) => out.extend_from_slice(&frame),
            (Some(text), Some(c)) => {
                if let Some(f) = crate::wire::passthrough::with_text(&frame, &text, c.part) {
                    out.extend(f);
                }
            }
            // Text to show comes only from a push within a channel.
            (Some(_), None) => {}
        }
    }
    out
}

fn sse_headers(h: &mut HeaderMap) {
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert("cache-control", HeaderValue::from_static("no-cache"));
}

/// A stream request that ended before any visible token: a failure gets the status
/// table's status; an empty answer is sent as a whole, complete stream.
async fn unstarted(
    ask: &Ask,
    called: Called,
    error: Option<ApiError>,
    include_usage: bool,
    turn: Option<Arc<Turn>>,
) -> Response<Body> {
    let report = &called.report;
    let mut r = match (&called.reply, error) {
        (_, Some(e)) => error_response(&e, ask.flavor),
        (None, None) => error_response(
            &respond::failure(report, Context::default(), &|s| ask.gw.mask(s)),
            ask.flavor,
        ),
        (Some(reply), None) => {
            let mut s = LiveState::default();
            let id = format!("poolctl-{}", ask.gw.next_id());
            s.encoder = Some(match (ask.flavor, &turn) {
                (Flavor::Anthropic, _) => {
                    let mut e = AnthropicStream::new(id, reply.model.clone());
                    if let Some(u) = reply.usage {
                        // The whole answer is in: `message_start` states its input, as
                        // a live stream's does once the upstream has reported it.
                        e.event(&Event::Usage(u));
                    }
                    Encoder::Anthropic(e)
                }
                (Flavor::Responses, Some(turn)) => {
                    Encoder::Responses(ResponsesStream::new(turn.clone(), reply.model.clone()))
                }
                (Flavor::OpenAi | Flavor::Responses, _) => Encoder::OpenAi(OpenAiStream::new(
                    id,
                    crate::core::clock::wall_now_ms() / 1000,
                    reply.model.clone(),
                    include_usage,
                )),
            });
            let mut bytes = s.encode(&Event::Text(String::new()));
            // An empty answer is an answer: a Responses conversation keeps it too.
            let end = match (&turn, &mut s.encoder) {
                (Some(turn), Some(Encoder::Responses(e))) => {
                    let mut end = e.close_all(&reply.finish);
                    let mut object = e.completed_object(&reply.finish, reply.usage.as_ref());
                    let served = report.served_by.as_ref();
                    let stored = keep_streamed(ask, turn, served, &object, Some(reply)).await;
                    if !stored {
                        object["store"] = serde_json::json!(false);
                    }
                    end.extend(e.completed_event(&object));
                    end
                }
                _ => Vec::new(),
            };
            bytes.extend(s.tail(&called, None, ask.flavor, end));
            let mut r = Response::new(full(bytes));
            sse_headers(r.headers_mut());
            r
        }
    };
    trace_headers(
        r.headers_mut(),
        report.served_by.as_ref(),
        report.outcome.as_str(),
        report.attempts.len(),
    );
    dropped_header(r.headers_mut(), super::ask::served_dropped(report));
    r
}
