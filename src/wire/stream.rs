//! Streaming chat on every wire: the request, the SSE events each wire sends, and the
//! driver that hands visible text to the caller as it arrives (never buffered whole)
//! while watching two real-time deadlines — the first visible token, then the longest
//! silence between chunks. A stream that sent its finish is complete even without the
//! terminator; one that closes before its finish is truncated, never a success.

use super::endpoint::Endpoint;
use super::http::{read_capped, transport_failure, HttpCall, ERROR_BODY_CAP};
use super::sse::SseFramer;
use super::stream_event::{parse_event, WireEvent};
use super::stream_limits::{Ended, StreamLimits, StreamWatch, Verdict};
use crate::classify::failure::{Headers, Transport, UpstreamFailure};
use crate::core::answer::{FinishReason, StreamEvent};
use crate::core::clock::Stopwatch;
use crate::core::conversation::ToolCall;
use crate::core::request::{ChatRequest, Usage};
use crate::core::vocab::Wire;
use serde_json::Value;
use std::time::Duration;

pub fn stream_call(ep: &Endpoint, model: &str, req: &ChatRequest) -> HttpCall {
    stream_call_settling(ep, model, req, true)
}

/// The stream call; `settle_usage`: the router settles a token bucket (`tpm`, `itpm`,
/// `otpm`) of this route with the stream's usage, so a same-wire OpenAI stream asks for
/// it (`stream_options.include_usage: true`). Without one the client's body goes as it
/// was sent (fidelity.md §1).
pub fn stream_call_settling(
    ep: &Endpoint,
    model: &str,
    req: &ChatRequest,
    settle_usage: bool,
) -> HttpCall {
    let mut call = stream_call_whole(ep, model, req, settle_usage);
    call.body = super::carry::fit(call.body, req, ep);
    call
}

/// Whether a same-wire stream is asked for its usage (`stream_options.include_usage`):
/// on the OpenAI wire, where a token bucket is settled with it (`settle`), and never of
/// Mistral, which rejects `stream_options` (below).
fn asks_usage(ep: &Endpoint, settle: bool) -> bool {
    settle && ep.wire == Wire::OpenAi && ep.dialect != crate::classify::dialect::Dialect::Mistral
}

/// The stream call before [`super::carry::fit`] removes what the provider rejects.
fn stream_call_whole(ep: &Endpoint, model: &str, req: &ChatRequest, settle: bool) -> HttpCall {
    // Same wire: the client's body (it asked `stream: true` itself), with the usage the
    // router settles admission with asked of an OpenAI stream, only where a token
    // bucket needs it.
    if let Some(orig) = req.same_wire(ep.wire) {
        let usage = asks_usage(ep, settle);
        return super::passthrough::chat_call(ep, model, orig.for_provider(&ep.provider), usage);
    }
    match ep.wire {
        Wire::OpenAi => {
            let mut call = super::openai::chat_call(ep, model, req);
            if let Some(body) = call.body.json_mut() {
                body["stream"] = Value::Bool(true);
                // Mistral rejects every field it does not know, `stream_options`
                // included (422 extra_forbidden at body.stream_options.include_usage:
                // reported in avante.nvim#2347, anon-kode#53, llxprt-code#114); it sends
                // the usage in its last chunk without being asked.
                if ep.dialect != crate::classify::dialect::Dialect::Mistral {
                    body["stream_options"] = serde_json::json!({"include_usage": true});
                }
            }
            call
        }
        Wire::Anthropic => {
            let mut call = super::anthropic::chat_call(ep, model, req);
            if let Some(body) = call.body.json_mut() {
                body["stream"] = Value::Bool(true);
            }
            call
        }
        Wire::Gemini => {
            let mut call = super::gemini::chat_call(ep, model, req);
            call.url = ep.url(&format!(
                "/v1beta/models/{model}:streamGenerateContent?alt=sse"
            ));
            call
        }
        Wire::Responses => {
            let mut call = super::responses::chat_call(ep, model, req);
            if let Some(body) = call.body.json_mut() {
                body["stream"] = Value::Bool(true);
            }
            call
        }
    }
}

/// A stream that completed. Its text is what `StreamAttempt::delivered` holds.
#[derive(Debug, Clone)]
pub struct StreamSuccess {
    pub usage: Option<Usage>,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<FinishReason>,
    pub model: Option<String>,
    pub request_id: Option<String>,
    pub headers: Headers,
    /// Events that could not be read and were skipped.
    pub skipped_events: u32,
    /// A refusal (class `refusal`): its text from `delta.refusal`, else empty.
    pub refusal: Option<String>,
}

/// One streaming attempt: its result, and whether anything reached the caller.
#[derive(Debug)]
pub struct StreamAttempt {
    pub result: Result<StreamSuccess, UpstreamFailure>,
    /// Text already delivered.
    pub delivered: String,
    /// Text or a tool-call delta reached the caller: after this, no other route may
    /// answer (decision row 2).
    pub visible: bool,
}

/// Sends one streaming call and drives it to its end, handing each text and tool-call
/// delta to `on_event` as it arrives. The finish and usage events follow once the
/// stream completed; before the first visible token, each usage the upstream reports
/// is also handed on as it comes, ahead of the content of its event.
pub async fn stream_chat(
    client: &super::http::Client,
    ep: &Endpoint,
    model: &str,
    req: &ChatRequest,
    on_event: &(dyn Fn(StreamEvent<'_>) + Send + Sync),
) -> StreamAttempt {
    stream_chat_keeping(client, ep, model, req, on_event, true).await
}

/// `stream_chat`, keeping the text delivered (`StreamAttempt::delivered`) only when
/// `keep_text`: a caller that has already passed every delta on (the gateway) need not
/// hold a second copy of a 16 MiB answer while it streams.
pub async fn stream_chat_keeping(
    client: &super::http::Client,
    ep: &Endpoint,
    model: &str,
    req: &ChatRequest,
    on_event: &(dyn Fn(StreamEvent<'_>) + Send + Sync),
    keep_text: bool,
) -> StreamAttempt {
    stream_chat_settling(client, ep, model, req, on_event, keep_text, true).await
}

/// `stream_chat_keeping`, asking a same-wire OpenAI stream for its usage only when
/// `settle_usage` (see [`stream_call_settling`]).
pub async fn stream_chat_settling(
    client: &super::http::Client,
    ep: &Endpoint,
    model: &str,
    req: &ChatRequest,
    on_event: &(dyn Fn(StreamEvent<'_>) + Send + Sync),
    keep_text: bool,
    settle_usage: bool,
) -> StreamAttempt {
    let mut seen = Seen {
        keep_text,
        settle_usage,
        ..Seen::default()
    };
    let result = drive(client, ep, model, req, on_event, &mut seen).await;
    if let Ok(ok) = &result {
        if let Some(f) = &ok.finish_reason {
            on_event(StreamEvent::Finish(f));
        }
        if let Some(u) = &ok.usage {
            on_event(StreamEvent::Usage(u));
        }
    }
    StreamAttempt {
        result,
        delivered: seen.text,
        visible: seen.visible,
    }
}

/// What a stream has delivered so far.
#[derive(Default)]
struct Seen {
    text: String,
    /// `text` is kept (else only what it takes to know a delta went out).
    keep_text: bool,
    /// A token bucket is settled with the usage (see [`stream_call_settling`]).
    settle_usage: bool,
    visible: bool,
    calls: Vec<PendingCall>,
    /// The stream is a refusal: its refusal text so far (empty when only a finish
    /// reason said so).
    refusal: Option<String>,
}

/// A tool call being assembled from its deltas.
struct PendingCall {
    index: u32,
    id: Option<String>,
    name: String,
    arguments: String,
}

/// The tool calls a stream has begun, by choice and upstream index: what makes a later
/// piece of one a continuation, and what a new call. Some OpenAI-compatible servers
/// repeat a call's `id` (or send `"id": ""`) and its whole `name` on every chunk of its
/// arguments: passed on, each repeat opened a new call for the client (an Anthropic
/// client got one `tool_use` block per chunk, each with half the arguments), and the
/// name was assembled twice over. Others (Ollama, SGLang) send every parallel call at
/// `index: 0`, told apart only by a new `id`: such a call is given an index of its own,
/// or its name and arguments would be glued onto the first's.
#[derive(Default)]
struct BegunCalls(Vec<BegunCall>);

struct BegunCall {
    choice: u32,
    /// The index the upstream gives the call.
    upstream: u32,
    /// The index it is passed on with: the upstream's, unless another call had it.
    index: u32,
    id: Option<String>,
    name: String,
}

impl BegunCalls {
    /// A piece of call `index` of `choice` as it is passed on: its index, and the id and
    /// name it adds (what it repeats of its call's start is left out). A name piece
    /// equal to the whole name so far is taken for a repeat.
    fn piece(
        &mut self,
        choice: u32,
        index: u32,
        id: Option<String>,
        name: Option<String>,
    ) -> (u32, Option<String>, Option<String>) {
        let id = id.filter(|i| !i.is_empty());
        // The latest call the upstream gave this index.
        let latest = self
            .0
            .iter()
            .rposition(|c| c.choice == choice && c.upstream == index);
        let fresh = match (latest, &id) {
            (None, _) => true,
            (Some(at), Some(id)) => self.0[at].id.as_ref().is_some_and(|had| had != id),
            (Some(_), None) => false,
        };
        if fresh {
            // Its own index, unless an earlier call of this choice took it.
            let taken = |i: u32| self.0.iter().any(|c| c.choice == choice && c.index == i);
            let own = if taken(index) {
                let top = self
                    .0
                    .iter()
                    .filter(|c| c.choice == choice)
                    .map(|c| c.index);
                top.max().map_or(index, |m| m.max(index) + 1)
            } else {
                index
            };
            self.0.push(BegunCall {
                choice,
                upstream: index,
                index: own,
                id: id.clone(),
                name: name.clone().unwrap_or_default(),
            });
            return (own, id, name);
        }
        let call = &mut self.0[latest.expect("a begun call")];
        let id = if call.id.is_some() { None } else { id };
        if id.is_some() {
            call.id.clone_from(&id);
        }
        let name = name.filter(|n| !n.is_empty() && *n != call.name);
        if let Some(n) = &name {
            call.name.push_str(n);
        }
        (call.index, id, name)
    }
}

/// A later usage report fills in what it states and keeps what only an earlier one
/// said (Anthropic sends input tokens at the start, output tokens at the end).
fn merge_usage(old: Option<Usage>, new: Usage) -> Usage {
    let Some(old) = old else { return new };
    let pick = |n: u64, o: u64| if n > 0 { n } else { o };
    Usage {
        input_tokens: pick(new.input_tokens, old.input_tokens),
        output_tokens: pick(new.output_tokens, old.output_tokens),
        cached_tokens: new.cached_tokens.or(old.cached_tokens),
        cache_creation_tokens: new.cache_creation_tokens.or(old.cache_creation_tokens),
        reasoning_tokens: new.reasoning_tokens.or(old.reasoning_tokens),
    }
}

/// The assembled calls in index order; arguments must be JSON objects (an empty string
/// is a call without arguments).
fn finish_calls(mut calls: Vec<PendingCall>) -> Result<Vec<ToolCall>, String> {
    calls.sort_by_key(|c| c.index);
    calls
        .into_iter()
        .map(|c| {
            let arguments = if c.arguments.trim().is_empty() {
                Value::Object(Default::default())
            } else {
                serde_json::from_str::<Value>(&c.arguments)
                    .ok()
                    .filter(Value::is_object)
                    .ok_or_else(|| {
                        format!("tool call {} arguments are not a JSON object", c.index)
                    })?
            };
            Ok(ToolCall {
                // Gemini has no call ids: number them as the non-streaming parser does.
                id: c.id.unwrap_or_else(|| format!("call_{}", c.index)),
                name: c.name,
                arguments,
            })
        })
        .collect()
}

/// A same-wire stream's events, forwarded as the upstream sent them (fidelity.md §1).
struct Forward {
    wire: Wire,
    /// The router asked for the usage and the client did not: the usage-only chunk is
    /// the router's, and does not reach the client. Otherwise every chunk does.
    strip_usage: bool,
}

impl Forward {
    /// The frame to forward for `event`, and whether it holds a visible token; `None`
    /// for what the gateway writes itself (OpenAI's `[DONE]`, after the outcome comment)
    /// and for the usage-only chunk only the router asked for.
    fn frame(&self, event: &super::sse::SseEvent, parsed: &[WireEvent]) -> Option<(Vec<u8>, bool)> {
        // A malformed event is skipped and counted, never shown, on this path as on a
        // translated one: forwarded, it broke the client's SDK mid-stream.
        if !parsed.is_empty() && parsed.iter().all(|e| matches!(e, WireEvent::Malformed(_))) {
            return None;
        }
        if self.wire == Wire::OpenAi {
            if event.data.trim() == "[DONE]" {
                return None;
            }
            let usage_only = parsed.iter().any(|e| matches!(e, WireEvent::Usage(_)))
                && parsed
                    .iter()
                    .all(|e| matches!(e, WireEvent::Usage(_) | WireEvent::Model(_)));
            if usage_only && self.strip_usage {
                return None;
            }
        }
        let visible = parsed.iter().any(|e| match e {
            // A refusal or reasoning delta is a visible token (fidelity.md §5).
            WireEvent::Delta(t) | WireEvent::Refusal(t) | WireEvent::Reasoning(t) => !t.is_empty(),
            WireEvent::ToolCall { .. } => true,
            _ => false,
        });
        let mut out = Vec::with_capacity(event.data.len() + event.event.len() + 16);
        if self.wire != Wire::OpenAi {
            out.extend_from_slice(b"event: ");
            out.extend_from_slice(event.event.as_bytes());
            out.push(b'\n');
        }
        for line in event.data.split('\n') {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
        out.push(b'\n');
        Some((out, visible))
    }
}

/// Whether the client's own body asked `stream_options.include_usage: true`.
fn client_asked_usage(orig: &crate::core::request::Original) -> bool {
    orig.stream_options
        .as_ref()
        .and_then(|span| orig.bytes.get(span.clone()))
        .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        .and_then(|v| v.get("include_usage").and_then(Value::as_bool))
        .unwrap_or(false)
}

async fn drive(
    client: &super::http::Client,
    ep: &Endpoint,
    model: &str,
    req: &ChatRequest,
    on_event: &(dyn Fn(StreamEvent<'_>) + Send + Sync),
    seen: &mut Seen,
) -> Result<StreamSuccess, UpstreamFailure> {
    let mut watch = StreamWatch::new(limits_of(ep));
    let sw = Stopwatch::start();

    let call = stream_call_settling(ep, model, req, seen.settle_usage);
    // Reasoning of another wire cannot reach an Anthropic client (no signed `thinking`
    // block holds it, fidelity.md §2): for it, that reasoning is no visible token (§5),
    // so it neither stops the first-token deadline nor commits the stream to its route.
    let shows_reasoning = !(ep.wire != Wire::Anthropic
        && req
            .original
            .as_ref()
            .is_some_and(|o| o.wire == Wire::Anthropic));
    let passthrough = call.body.is_raw().then(|| Forward {
        wire: ep.wire,
        strip_usage: asks_usage(ep, seen.settle_usage)
            && !req.same_wire(ep.wire).is_some_and(client_asked_usage),
    });
    let (wait, why) = watch
        .next_wait(sw.elapsed())
        .map_err(|why| ended(&watch, why, None, &Headers::default()))?;
    let mut resp = match tokio::time::timeout(wait, super::http::exchange(client, &call)).await {
        Err(_) => return Err(ended(&watch, why, None, &Headers::default())),
        Ok(Err(e)) => return Err(transport_failure(e)),
        Ok(Ok(r)) => r,
    };
    let status = resp.status();
    let headers = resp.headers();
    if !(200..300).contains(&status) {
        let (left, why) = watch
            .next_wait(sw.elapsed())
            .unwrap_or((Duration::from_millis(1), Ended::NoFirstToken));
        return match tokio::time::timeout(
            left,
            read_capped(resp, ERROR_BODY_CAP, &mut Default::default()),
        )
        .await
        {
            Ok(Ok((raw, _))) => Err(UpstreamFailure::from_response(status, headers, &raw)),
            Ok(Err(cut)) => Err(super::http::body_cut_off(status, headers, cut)),
            Err(_) => Err(ended(&watch, why, Some(status), &headers)),
        };
    }
    // A JSON body where an event stream was asked for (MiniMax answers a throttled
    // stream so, with `base_resp`): no answer, and an error inside it is judged by its code.
    if headers
        .get("content-type")
        .is_some_and(|c| c.trim_start().starts_with("application/json"))
    {
        let (left, deadline) = watch
            .next_wait(sw.elapsed())
            .unwrap_or((Duration::from_millis(1), Ended::NoFirstToken));
        let why = || super::codec::BadSuccess::Malformed("a JSON body, not an event stream".into());
        return match tokio::time::timeout(
            left,
            read_capped(resp, ERROR_BODY_CAP, &mut Default::default()),
        )
        .await
        {
            Ok(Ok((raw, _))) => Err(super::codec::bad_success(status, headers, &raw, why())),
            Ok(Err(cut)) => Err(super::http::body_cut_off(status, headers, cut)),
            Err(_) => Err(ended(&watch, deadline, Some(status), &headers)),
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
    // The Responses API's last events repeat the whole answer (`response.completed`,
    // `output_item.done`): on that wire one event may be as large as a stream may
    // deliver, `max_stream_bytes`, still bounded.
    let event_cap = match ep.wire {
        Wire::Responses => ep.max_event_bytes.max(ep.max_stream_bytes),
        _ => ep.max_event_bytes,
    };
    let mut framer = SseFramer::new(usize::try_from(event_cap).unwrap_or(usize::MAX));
    let mut events = Vec::new();
    let mut usage: Option<Usage> = None;
    let mut finish_reason: Option<FinishReason> = None;
    let mut answering: Option<String> = None;
    let mut finished = false;
    let mut skipped = 0u32;
    // Several choices in one stream (Gemini candidates for a client's `n`): the choice
    // the events being read belong to, the one the caller was last told of, and the
    // choices past the first that have not finished yet. Only choice 0's text, tool
    // calls, refusal and finish make the attempt's answer; the others are passed on.
    let mut told = 0u32;
    // Gemini's candidates for `n` may first show up after choice 0 has finished, with
    // the usage it sends on every chunk: each asked-for choice is waited for.
    let mut open_choices: Vec<u32> = match req.n {
        Some(n) if ep.wire == Wire::Gemini => {
            (1..n.min(super::stream_event::MAX_CHOICES)).collect()
        }
        _ => Vec::new(),
    };
    let mut closed_choices: Vec<u32> = Vec::new();
    // The tool calls each choice has sent so far, by choice: numbers a Gemini call.
    let mut calls_so_far: Vec<u32> = vec![0];
    let mut begun = BegunCalls::default();
    // The ids Gemini's calls take in this conversation (`gemini::history::AnswerCallIds`).
    let call_ids = (ep.wire == Wire::Gemini)
        .then(|| super::gemini::history::AnswerCallIds::of(&req.conversation));
    // The stream's share of the process's answer bytes: what it keeps (its text, when
    // kept; its tool calls), charged as it arrives; what it only passes on is not held.
    // Past the cap, the largest holders wait before their next read, inside the same
    // deadline as the read itself (a stream kept waiting fails as a stalled one).
    let mut held = super::held::Holding::new();
    'read: loop {
        let (wait, why) = match watch.next_wait(sw.elapsed()) {
            Ok(next) => next,
            // A forwarded stream reads on past its finish for the upstream's last
            // events, and a stream of several choices for the others; a deadline there
            // ends an answer whose first choice is already whole.
            Err(_) if finished && (passthrough.is_some() || !open_choices.is_empty()) => break,
            Err(why) => return Err(ended(&watch, why, Some(status), &headers)),
        };
        let next = async {
            held.room().await;
            resp.chunk().await
        };
        let chunk = match tokio::time::timeout(wait, next).await {
            Err(_) if finished && (passthrough.is_some() || !open_choices.is_empty()) => break,
            Err(_) => return Err(ended(&watch, why, Some(status), &headers)),
            Ok(Ok(Some(chunk))) => chunk,
            Ok(Ok(None)) if finished => break,
            Ok(Ok(None)) => {
                let why = "the stream closed before its finish";
                let why = match super::http::unlike(&headers, "event-stream") {
                    Some(said) => format!("{why} ({said}, not an event stream)"),
                    None => why.to_string(),
                };
                return Err(broke(&headers, why));
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
            calls_so_far[0] = seen.calls.len() as u32;
            let mut parsed = parse_event(ep.wire, &event.event, &event.data, &calls_so_far);
            if let Some(ids) = &call_ids {
                // Numbered on from the conversation's calls, as a whole answer's are.
                for e in &mut parsed {
                    if let WireEvent::ToolCall { index, id, .. } = e {
                        *id = Some(ids.id(*index as usize));
                    }
                }
            }
            let mut choice = 0u32;
            let forward = passthrough.as_ref().and_then(|p| p.frame(&event, &parsed));
            let terminal = parsed.iter().any(|e| matches!(e, WireEvent::Terminator));
            if !seen.visible {
                // The usage an event reports is passed on before its content: an
                // encoder that states the input at the start (Anthropic's
                // `message_start`, written with the first visible token) has it then.
                let reported = parsed.iter().fold(None, |acc, e| match e {
                    WireEvent::Usage(u) | WireEvent::Finish(_, Some(u)) => {
                        Some(merge_usage(acc.or(usage), *u))
                    }
                    _ => acc,
                });
                if let Some(u) = reported {
                    on_event(StreamEvent::Usage(&u));
                }
            }
            for ev in parsed {
                let ev = match ev {
                    WireEvent::ToolCall {
                        index,
                        id,
                        name,
                        arguments,
                    } => {
                        let (index, id, name) = begun.piece(choice, index, id, name);
                        WireEvent::ToolCall {
                            index,
                            id,
                            name,
                            arguments,
                        }
                    }
                    ev => ev,
                };
                if choice > 0 && closed_choices.contains(&choice) {
                    // A finished choice says nothing more: a repeated finish or a late
                    // delta reaches neither the client nor any list.
                    match ev {
                        WireEvent::Finish(_, Some(u)) => usage = Some(merge_usage(usage, u)),
                        WireEvent::Delta(_)
                        | WireEvent::Reasoning(_)
                        | WireEvent::Refusal(_)
                        | WireEvent::ToolCall { .. }
                        | WireEvent::Finish(_, None) => skipped += 1,
                        _ => {}
                    }
                    if !matches!(
                        ev,
                        WireEvent::Usage(_) | WireEvent::Model(_) | WireEvent::Choice(_)
                    ) {
                        continue;
                    }
                }
                let for_caller = matches!(
                    ev,
                    WireEvent::Delta(_)
                        | WireEvent::Reasoning(_)
                        | WireEvent::Refusal(_)
                        | WireEvent::ToolCall { .. }
                );
                if for_caller && choice != told {
                    on_event(StreamEvent::Choice(choice));
                    told = choice;
                }
                if choice > 0 {
                    match ev {
                        WireEvent::Finish(reason, u) => {
                            open_choices.retain(|&c| c != choice);
                            closed_choices.push(choice);
                            if let Some(u) = u {
                                usage = Some(merge_usage(usage, u));
                            }
                            if let Some(reason) = reason {
                                if choice != told {
                                    on_event(StreamEvent::Choice(choice));
                                    told = choice;
                                }
                                on_event(StreamEvent::Finish(&reason));
                            }
                            continue;
                        }
                        WireEvent::Delta(ref t) | WireEvent::Refusal(ref t) => {
                            if let Err(why) = watch.deliver(t.len()) {
                                return Err(ended(&watch, why, Some(status), &headers));
                            }
                            if !t.is_empty() {
                                seen.visible = true;
                                on_event(match ev {
                                    WireEvent::Delta(_) => StreamEvent::Text(t),
                                    _ => StreamEvent::Refusal(t),
                                });
                            }
                            continue;
                        }
                        WireEvent::ToolCall {
                            index,
                            ref id,
                            ref name,
                            ref arguments,
                        } => {
                            let size = arguments.len() + name.as_ref().map_or(0, String::len);
                            if let Err(why) = watch.deliver(size) {
                                return Err(ended(&watch, why, Some(status), &headers));
                            }
                            seen.visible = true;
                            let i = choice as usize;
                            if calls_so_far.len() <= i {
                                calls_so_far.resize(i + 1, 0);
                            }
                            calls_so_far[i] += 1;
                            on_event(StreamEvent::ToolCall {
                                index,
                                id: id.as_deref(),
                                name: name.as_deref(),
                                arguments,
                            });
                            continue;
                        }
                        _ => {}
                    }
                }
                match ev {
                    WireEvent::Choice(c) => {
                        choice = c;
                        if c > 0 && !open_choices.contains(&c) && !closed_choices.contains(&c) {
                            open_choices.push(c);
                        }
                    }
                    WireEvent::Delta(t) => {
                        // Nothing past `max_stream_bytes` reaches the caller.
                        if let Err(why) = watch.deliver(t.len()) {
                            return Err(ended(&watch, why, Some(status), &headers));
                        }
                        seen.visible = true;
                        on_event(StreamEvent::Text(&t));
                        if seen.keep_text {
                            held.charge(t.len());
                            seen.text.push_str(&t);
                        }
                    }
                    // Reasoning is visible output too (fidelity.md §5): it commits the
                    // stream and stops the first-token deadline, where the client is
                    // shown it.
                    WireEvent::Reasoning(t) => {
                        if shows_reasoning {
                            if let Err(why) = watch.deliver(t.len()) {
                                return Err(ended(&watch, why, Some(status), &headers));
                            }
                            seen.visible = true;
                        }
                        // Passed on either way: a caller that cannot show it names it
                        // as dropped.
                        on_event(StreamEvent::Reasoning(&t));
                    }
                    // A refusal is visible output like text (fidelity.md §5); an empty
                    // one only marks the finish that follows as a refusal.
                    WireEvent::Refusal(t) => {
                        if let Err(why) = watch.deliver(t.len()) {
                            return Err(ended(&watch, why, Some(status), &headers));
                        }
                        let refusal = seen.refusal.get_or_insert_with(String::new);
                        if !t.is_empty() {
                            seen.visible = true;
                            on_event(StreamEvent::Refusal(&t));
                            refusal.push_str(&t);
                        }
                    }
                    WireEvent::ToolCall {
                        index,
                        id,
                        name,
                        arguments,
                    } => {
                        let size = arguments.len() + name.as_ref().map_or(0, String::len);
                        // Tool calls are assembled whole: what they hold is held.
                        held.charge(size);
                        if let Err(why) = watch.deliver(size) {
                            return Err(ended(&watch, why, Some(status), &headers));
                        }
                        seen.visible = true;
                        on_event(StreamEvent::ToolCall {
                            index,
                            id: id.as_deref(),
                            name: name.as_deref(),
                            arguments: &arguments,
                        });
                        match seen.calls.iter_mut().find(|c| c.index == index) {
                            Some(call) => {
                                call.id = call.id.take().or(id);
                                if let Some(n) = name {
                                    call.name.push_str(&n);
                                }
                                call.arguments.push_str(&arguments);
                            }
                            None => seen.calls.push(PendingCall {
                                index,
                                id,
                                name: name.unwrap_or_default(),
                                arguments,
                            }),
                        }
                    }
                    WireEvent::Finish(reason, u) => {
                        finished = true;
                        finish_reason = reason.or(finish_reason);
                        if let Some(u) = u {
                            usage = Some(merge_usage(usage, u));
                        }
                    }
                    WireEvent::Usage(u) => usage = Some(merge_usage(usage, u)),
                    WireEvent::Model(m) => {
                        on_event(StreamEvent::Model(&m));
                        answering = Some(m);
                    }
                    WireEvent::Terminator => finished = true,
                    WireEvent::Error(fields) => {
                        return Err(UpstreamFailure {
                            status: Some(status),
                            headers: headers.clone(),
                            excerpt: fields.message.clone().unwrap_or_default(),
                            error: Some(*fields),
                            transport: None,
                            malformed: None,
                        })
                    }
                    WireEvent::Malformed(_) => skipped += 1,
                }
            }
            if let Some((frame, visible)) = forward {
                on_event(StreamEvent::Raw {
                    frame: &frame,
                    visible,
                });
            }
            // A finish with its usage is a complete answer: finalise at once rather than
            // wait for a terminator that may never come. A forwarded stream ends on its
            // terminator, so every event the upstream sent reaches the client
            // (`message_stop` with whatever it carries, fidelity.md §1).
            let complete = match passthrough {
                Some(_) => terminal,
                None => {
                    usage.is_some()
                        || event.data.trim() == "[DONE]"
                        || event.event == "message_stop"
                }
            };
            if finished && open_choices.is_empty() && complete {
                break 'read;
            }
        }
        // A busy peer must not starve the runtime's other tasks (and timers).
        tokio::task::yield_now().await;
    }
    // Nothing shown and a safety stop that is no refusal of §4 (Gemini's RECITATION,
    // ...): no answer, as the same answer unstreamed is (`BadSuccess::Refused`), not an
    // empty success. A refusal shape is the answer (class `refusal`), shown or not.
    if !seen.visible && seen.refusal.is_none() && finish_reason == Some(FinishReason::ContentFilter)
    {
        let why =
            super::codec::BadSuccess::Refused("the stream stopped on a content filter".into());
        return Err(super::codec::bad_success(status, headers, &[], why));
    }
    // Nothing shown and a failed generation (Gemini MALFORMED_FUNCTION_CALL, ...): no
    // answer, the provider's fault, as unstreamed (`gemini::parse_chat`).
    if let Some(FinishReason::Other(r)) = &finish_reason {
        if !seen.visible && super::gemini::is_failed_finish(r) {
            let why =
                super::codec::BadSuccess::Malformed(format!("finishReason {r} with no answer"));
            return Err(super::codec::bad_success(status, headers, &[], why));
        }
    }
    let tool_calls =
        finish_calls(std::mem::take(&mut seen.calls)).map_err(|why| broke(&headers, why))?;
    if told != 0 {
        // The finish and usage the caller is given next are choice 0's.
        on_event(StreamEvent::Choice(0));
    }
    Ok(StreamSuccess {
        usage,
        tool_calls,
        finish_reason,
        model: answering,
        request_id,
        headers,
        skipped_events: skipped,
        refusal: seen.refusal.take(),
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
    use crate::classify::dialect::Dialect;

    fn endpoint(dialect: Dialect) -> Endpoint {
        Endpoint {
            provider: "p".into(),
            wire: Wire::OpenAi,
            dialect,
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key: crate::core::secret::Secret::new("sk-test"),
            timeout_ms: 1_000,
            first_token_timeout_ms: 1_000,
            stream_idle_ms: 1_000,
            stream_max_ms: 1_000,
            max_stream_bytes: 1_000,
            max_event_bytes: 1_000,
            drop_params: false,
        }
    }

    /// Guards Mistral's 422 (extra_forbidden) on `stream_options.include_usage`, which
    /// every OpenAI-wire stream carried.
    #[test]
    fn mistral_streams_are_sent_without_stream_options() {
        let req = ChatRequest::user("hi", 16);
        let json = |mut call: HttpCall| call.body.json_mut().cloned().unwrap();
        let mistral = json(stream_call(&endpoint(Dialect::Mistral), "m", &req));
        assert_eq!(mistral["stream"], true);
        assert!(mistral.get("stream_options").is_none(), "{mistral}");
        let openai = json(stream_call(&endpoint(Dialect::Openai), "m", &req));
        assert_eq!(openai["stream_options"]["include_usage"], true);
        // Same wire: the client's body, still without what Mistral rejects.
        let raw = br#"{"model":"high","stream":true,"messages":[]}"#;
        let spans = crate::wire::passthrough::spans(raw).unwrap();
        let mut same = req.clone();
        same.original = Some(std::sync::Arc::new(crate::core::request::Original {
            wire: Wire::OpenAi,
            bytes: bytes::Bytes::from_static(raw),
            model: spans.model.unwrap(),
            stream_options: None,
            headers: Vec::new(),
            untranslatable: None,
            per_provider: Vec::new(),
            left_out: Vec::new(),
        }));
        let sent = |d| match stream_call(&endpoint(d), "m", &same).body {
            super::super::http::CallBody::Raw(b) => String::from_utf8(b.to_vec()).unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            sent(Dialect::Mistral),
            r#"{"model":"m","stream":true,"messages":[]}"#
        );
        assert!(sent(Dialect::Openai).contains(r#""stream_options":{"include_usage":true}"#));
    }

    /// Guards the audit's §1 finding: every same-wire OpenAI stream was sent
    /// `stream_options.include_usage: true`, a client's `false` rewritten, though only a
    /// token bucket is settled with the usage. Without one the body goes as it came.
    #[test]
    fn a_same_wire_stream_asks_for_the_usage_only_for_a_token_bucket() {
        let raw = br#"{"model":"high","stream":true,"stream_options":{"include_usage":false},"messages":[]}"#;
        let spans = crate::wire::passthrough::spans(raw).unwrap();
        let mut same = ChatRequest::user("hi", 16);
        same.original = Some(std::sync::Arc::new(crate::core::request::Original {
            wire: Wire::OpenAi,
            bytes: bytes::Bytes::from_static(raw),
            model: spans.model.unwrap(),
            stream_options: spans.stream_options,
            headers: Vec::new(),
            untranslatable: None,
            per_provider: Vec::new(),
            left_out: Vec::new(),
        }));
        let sent = |settle| match stream_call_settling(
            &endpoint(Dialect::Openai),
            "m",
            &same,
            settle,
        )
        .body
        {
            super::super::http::CallBody::Raw(b) => String::from_utf8(b.to_vec()).unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            sent(false),
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":false},"messages":[]}"#
        );
        assert!(sent(true).contains(r#""stream_options":{"include_usage":true}"#));
        // Another wire's stream is translated: its usage is always asked for.
        let mut cross = stream_call_settling(
            &endpoint(Dialect::Openai),
            "m",
            &ChatRequest::user("hi", 16),
            false,
        );
        let body = cross.body.json_mut().unwrap();
        assert_eq!(body["stream_options"]["include_usage"], true);
    }

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cached_tokens: None,
            ..Default::default()
        }
    }

    /// Guards two choices spliced into one answer: a chunk of choice 1 was read as
    /// choice 0's, and its text reached an Anthropic client inside the answer's block.
    #[test]
    fn an_openai_chunk_of_another_choice_is_marked_with_it() {
        let other =
            r#"{"id":"c","choices":[{"index":1,"delta":{"content":"zz"},"finish_reason":null}]}"#;
        assert_eq!(
            parse_event(Wire::OpenAi, "", other, &[]),
            vec![WireEvent::Choice(1), WireEvent::Delta("zz".into())]
        );
        let absurd = r#"{"id":"c","choices":[{"index":99999,"delta":{"content":"zz"}}]}"#;
        assert!(matches!(
            parse_event(Wire::OpenAi, "", absurd, &[])[..],
            [WireEvent::Malformed(_)]
        ));
    }

    #[test]
    fn openai_events() {
        let d =
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#;
        assert_eq!(
            parse_event(Wire::OpenAi, "", d, &[]),
            vec![WireEvent::Delta("Hi".into())]
        );
        let f = r#"{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        assert_eq!(
            parse_event(Wire::OpenAi, "", f, &[]),
            vec![WireEvent::Finish(Some(FinishReason::Stop), None)]
        );
        let u = r#"{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
        assert_eq!(
            parse_event(Wire::OpenAi, "", u, &[]),
            vec![WireEvent::Usage(usage(3, 2))]
        );
        assert_eq!(
            parse_event(Wire::OpenAi, "", "[DONE]", &[]),
            vec![WireEvent::Terminator]
        );
        assert!(matches!(
            parse_event(Wire::OpenAi, "", "{not json", &[])[0],
            WireEvent::Malformed(_)
        ));
        let e = r#"{"error":{"message":"boom","type":"server_error"}}"#;
        assert!(matches!(
            parse_event(Wire::OpenAi, "", e, &[])[0],
            WireEvent::Error(_)
        ));
    }

    /// Guards OpenRouter's mid-generation failure inside the choice of a chunk
    /// (`choices[0].error`, or `finish_reason: "error"` alone): it was read as a finish,
    /// so an empty or cut-off stream ended as a success.
    #[test]
    fn an_openai_chunk_that_finishes_on_error_is_an_error_event() {
        let with_error = r#"{"id":"gen-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":""},"finish_reason":"error","error":{"code":502,"message":"Upstream error"}}]}"#;
        match &parse_event(Wire::OpenAi, "", with_error, &[])[..] {
            [WireEvent::Error(f)] => assert_eq!(f.code.as_deref(), Some("502")),
            other => panic!("{other:?}"),
        }
        let bare = r#"{"id":"gen-1","choices":[{"index":0,"delta":{"content":"tail"},"finish_reason":"error"}]}"#;
        match &parse_event(Wire::OpenAi, "", bare, &[])[..] {
            [WireEvent::Delta(t), WireEvent::Error(f)] => {
                assert_eq!(t, "tail");
                assert_eq!(f.code, None);
            }
            other => panic!("{other:?}"),
        }
        let glm =
            r#"{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"network_error"}]}"#;
        assert!(matches!(
            &parse_event(Wire::OpenAi, "", glm, &[])[..],
            [WireEvent::Error(_)]
        ));
    }

    /// Guards MiniMax's in-stream `base_resp` error chunk, followed by `[DONE]`: it was
    /// skipped, so the cut-off stream ended as a complete success.
    #[test]
    fn a_minimax_base_resp_chunk_is_an_error_event() {
        let d = r#"{"id":"b","choices":[],"model":"MiniMax-M1","base_resp":{"status_code":1027,"status_msg":"output new_sensitive"}}"#;
        match &parse_event(Wire::OpenAi, "", d, &[])[..] {
            [WireEvent::Error(f)] => assert_eq!(f.code.as_deref(), Some("1027")),
            other => panic!("{other:?}"),
        }
        let fine = r#"{"id":"b","choices":[{"index":0,"delta":{"content":"hi"}}],"base_resp":{"status_code":0,"status_msg":""}}"#;
        assert_eq!(
            parse_event(Wire::OpenAi, "", fine, &[]),
            vec![WireEvent::Delta("hi".into())]
        );
    }

    #[test]
    fn a_call_piece_that_repeats_its_id_or_name_continues_the_call() {
        let mut begun = BegunCalls::default();
        let s = |t: &str| Some(t.to_string());
        assert_eq!(
            begun.piece(0, 0, s("call_a"), s("f")),
            (0, s("call_a"), s("f"))
        );
        assert_eq!(begun.piece(0, 0, s("call_a"), s("f")), (0, None, None));
        assert_eq!(begun.piece(0, 0, s(""), None), (0, None, None));
        // Another index, or the same index of another choice, is a call of its own.
        assert_eq!(
            begun.piece(0, 1, s("call_b"), s("g")),
            (1, s("call_b"), s("g"))
        );
        assert_eq!(
            begun.piece(1, 0, s("call_c"), s("f")),
            (0, s("call_c"), s("f"))
        );
        // An id that comes only after the start is passed on once; a name in pieces
        // is passed on piece by piece.
        assert_eq!(begun.piece(0, 2, None, s("get_")), (2, None, s("get_")));
        assert_eq!(
            begun.piece(0, 2, s("call_d"), s("weather")),
            (2, s("call_d"), s("weather"))
        );
        assert_eq!(
            begun.piece(0, 2, s("call_d"), s("get_weather")),
            (2, None, None)
        );
    }

    /// Guards parallel calls streamed all at `index: 0` (Ollama, SGLang), told apart
    /// by their ids: with every later id dropped, they were glued into one call
    /// (`addmultiply`, `{"a":3}{"b":4}`).
    #[test]
    fn a_new_id_at_a_begun_index_is_a_call_of_its_own() {
        let mut begun = BegunCalls::default();
        let s = |t: &str| Some(t.to_string());
        assert_eq!(
            begun.piece(0, 0, s("call_1"), s("add")),
            (0, s("call_1"), s("add"))
        );
        assert_eq!(begun.piece(0, 0, None, None), (0, None, None));
        assert_eq!(
            begun.piece(0, 0, s("call_2"), s("multiply")),
            (1, s("call_2"), s("multiply"))
        );
        // Its continuation follows it, not the first call.
        assert_eq!(begun.piece(0, 0, None, None), (1, None, None));
        // A third at index 0 takes the next free index, past one the upstream used.
        assert_eq!(
            begun.piece(0, 2, s("call_3"), s("x")),
            (2, s("call_3"), s("x"))
        );
        assert_eq!(
            begun.piece(0, 0, s("call_4"), s("y")),
            (3, s("call_4"), s("y"))
        );
    }

    #[test]
    fn openai_tool_call_deltas_and_model() {
        let start = r#"{"id":"c","model":"gpt-x-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get","arguments":""}}]}}]}"#;
        assert_eq!(
            parse_event(Wire::OpenAi, "", start, &[]),
            vec![
                WireEvent::Model("gpt-x-1".into()),
                WireEvent::ToolCall {
                    index: 0,
                    id: Some("call_a".into()),
                    name: Some("get".into()),
                    arguments: String::new()
                }
            ]
        );
        let more = r#"{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"q\":1}"}}]},"finish_reason":"tool_calls"}]}"#;
        assert_eq!(
            parse_event(Wire::OpenAi, "", more, &[]),
            vec![
                WireEvent::ToolCall {
                    index: 0,
                    id: None,
                    name: None,
                    arguments: r#"{"q":1}"#.into()
                },
                WireEvent::Finish(Some(FinishReason::ToolCalls), None)
            ]
        );
    }

    #[test]
    fn anthropic_events() {
        let d =
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#;
        assert_eq!(
            parse_event(Wire::Anthropic, "content_block_delta", d, &[]),
            vec![WireEvent::Delta("Hi".into())]
        );
        let m = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}"#;
        assert_eq!(
            parse_event(Wire::Anthropic, "message_delta", m, &[]),
            vec![WireEvent::Finish(
                Some(FinishReason::Stop),
                Some(usage(0, 5))
            )]
        );
        assert_eq!(
            parse_event(
                Wire::Anthropic,
                "message_stop",
                r#"{"type":"message_stop"}"#,
                &[]
            ),
            vec![WireEvent::Terminator]
        );
        let e = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        match &parse_event(Wire::Anthropic, "error", e, &[])[0] {
            WireEvent::Error(f) => assert_eq!(f.kind.as_deref(), Some("overloaded_error")),
            other => panic!("{other:?}"),
        }
        assert!(parse_event(Wire::Anthropic, "ping", r#"{"type":"ping"}"#, &[]).is_empty());
    }

    #[test]
    fn anthropic_tool_use_blocks_model_and_cached_usage() {
        let start = r#"{"type":"message_start","message":{"model":"claude-x-1","usage":{"input_tokens":9,"output_tokens":1,"cache_read_input_tokens":6}}}"#;
        assert_eq!(
            parse_event(Wire::Anthropic, "message_start", start, &[]),
            vec![
                WireEvent::Model("claude-x-1".into()),
                WireEvent::Usage(Usage {
                    // The whole prompt: 9 uncached + 6 read from the cache.
                    input_tokens: 15,
                    output_tokens: 1,
                    cached_tokens: Some(6),
                    ..Default::default()
                })
            ]
        );
        let block = r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get","input":{}}}"#;
        assert_eq!(
            parse_event(Wire::Anthropic, "content_block_start", block, &[]),
            vec![WireEvent::ToolCall {
                index: 1,
                id: Some("toolu_1".into()),
                name: Some("get".into()),
                arguments: String::new()
            }]
        );
        let delta = r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"q\""}}"#;
        assert_eq!(
            parse_event(Wire::Anthropic, "content_block_delta", delta, &[]),
            vec![WireEvent::ToolCall {
                index: 1,
                id: None,
                name: None,
                arguments: r#"{"q""#.into()
            }]
        );
    }

    #[test]
    fn gemini_events() {
        let d =
            r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"},"index":0}]}"#;
        assert_eq!(
            parse_event(Wire::Gemini, "", d, &[]),
            vec![WireEvent::Delta("Hi".into())]
        );
        let f = r#"{"candidates":[{"content":{"parts":[{"text":""}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":2,"candidatesTokenCount":1}}"#;
        assert_eq!(
            parse_event(Wire::Gemini, "", f, &[]),
            vec![WireEvent::Finish(
                Some(FinishReason::Stop),
                Some(usage(2, 1))
            )]
        );
    }

    /// Guards Gemini's streamed prompt block (`promptFeedback.blockReason`, no
    /// candidates): it was skipped as malformed, and the stream then read as broken.
    #[test]
    fn a_gemini_blocked_prompt_chunk_is_a_content_filter_error() {
        let d = r#"{"promptFeedback":{"blockReason":"PROHIBITED_CONTENT"},"usageMetadata":{"promptTokenCount":8}}"#;
        match &parse_event(Wire::Gemini, "", d, &[])[..] {
            [WireEvent::Error(f)] => assert_eq!(f.code.as_deref(), Some("content_filter")),
            other => panic!("{other:?}"),
        }
    }

    /// Also guards review finding 2: a streamed Gemini call had no id, so a client could
    /// not answer it; it gets the `call_{k}` the whole answer gives.
    #[test]
    fn gemini_function_calls_are_numbered_across_chunks() {
        let c = r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"get","args":{"q":1}}}]},"finishReason":"STOP"}]}"#;
        assert_eq!(
            parse_event(Wire::Gemini, "", c, &[2]),
            vec![
                WireEvent::ToolCall {
                    index: 2,
                    id: Some("call_2".into()),
                    name: Some("get".into()),
                    arguments: r#"{"q":1}"#.into()
                },
                WireEvent::Finish(Some(FinishReason::ToolCalls), None)
            ]
        );
    }

    /// Several candidates in one chunk: each marked with its `index`, its calls
    /// numbered from that choice's own count, its finish its own.
    #[test]
    fn gemini_candidates_are_marked_by_choice_and_number_their_own_calls() {
        let c = r#"{"candidates":[
            {"content":{"parts":[{"text":"A"}]},"finishReason":"STOP","index":0},
            {"content":{"parts":[{"functionCall":{"name":"get","args":{}}}]},"finishReason":"STOP","index":1}],
            "usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2}}"#;
        assert_eq!(
            parse_event(Wire::Gemini, "", c, &[0, 1]),
            vec![
                WireEvent::Choice(0),
                WireEvent::Delta("A".into()),
                WireEvent::Finish(Some(FinishReason::Stop), Some(usage(3, 2))),
                WireEvent::Choice(1),
                WireEvent::ToolCall {
                    index: 1,
                    id: Some("call_1".into()),
                    name: Some("get".into()),
                    arguments: "{}".into()
                },
                WireEvent::Finish(Some(FinishReason::ToolCalls), None),
            ]
        );
    }

    /// A hostile index is no choice: the reader keeps a slot per choice, and an index
    /// of 4 billion must not size one.
    #[test]
    fn a_gemini_candidate_index_past_any_n_is_malformed_not_a_choice() {
        let c = r#"{"candidates":[{"content":{"parts":[{"text":"A"}]},"index":0},
            {"content":{"parts":[{"functionCall":{"name":"f","args":{}}}]},"index":4294967295}]}"#;
        let events = parse_event(Wire::Gemini, "", c, &[]);
        assert_eq!(
            events[..2],
            [WireEvent::Choice(0), WireEvent::Delta("A".into())]
        );
        assert!(
            matches!(&events[2..], [WireEvent::Malformed(m)] if m.contains("4294967295")),
            "{events:?}"
        );
    }

    /// Proto3 JSON leaves a zero `index` out: a candidate without one is candidate 0,
    /// wherever it stands; a second candidate of the same index is no choice.
    #[test]
    fn a_gemini_candidate_without_index_is_candidate_0_and_a_repeated_index_malformed() {
        let c = r#"{"candidates":[{"content":{"parts":[{"text":"B"}]},"index":1},
            {"content":{"parts":[{"text":"A"}]}},
            {"content":{"parts":[{"text":"C"}]},"index":1}]}"#;
        let events = parse_event(Wire::Gemini, "", c, &[]);
        assert_eq!(
            events[..4],
            [
                WireEvent::Choice(1),
                WireEvent::Delta("B".into()),
                WireEvent::Choice(0),
                WireEvent::Delta("A".into()),
            ]
        );
        assert!(
            matches!(&events[4..], [WireEvent::Malformed(m)] if m.contains("index 1")),
            "{events:?}"
        );
    }

    #[test]
    fn assembled_tool_calls_need_json_object_arguments() {
        let call = |args: &str| PendingCall {
            index: 0,
            id: None,
            name: "get".into(),
            arguments: args.into(),
        };
        let ok = finish_calls(vec![call(r#"{"q":1}"#)]).unwrap();
        assert_eq!(
            (ok[0].id.as_str(), &ok[0].arguments),
            ("call_0", &serde_json::json!({"q":1}))
        );
        assert!(finish_calls(vec![call(r#"{"q":"#)]).is_err());
    }
}
