//! The one place the gateway calls the router. Everything else in `serve` speaks the
//! gateway's own types (`ChatIn`, `Reply`, `Event`), so a change of the router's
//! surface is a change of this file alone. No routing logic lives here: it translates
//! requests in and answers out, and reads health only to tell a client when to retry.

use super::ingress::{EmbedIn, RerankIn};
use crate::config::route::Tier;
use crate::core::answer::{Answer, FinishReason, StreamEvent};
use crate::core::conversation::ToolCall;
use crate::core::request::{ChatRequest, EmbedRequest, Request, RerankRequest, Usage};
use crate::core::trace::{Report, Step};
use crate::core::vocab::{Action, Outcome, Route};
use crate::policy::card::Policy;
use crate::router::{CallOptions, Router};
use std::sync::atomic::AtomicU32;
use std::sync::Mutex;

/// A priority class (`x-poolctl-priority`), carried to the router for admission control.
pub use crate::core::vocab::Priority;

/// The header's words for a priority class.
pub fn parse_priority(s: &str) -> Option<Priority> {
    Some(match s.trim().to_ascii_lowercase().as_str() {
        "interactive" => Priority::Interactive,
        "retry" => Priority::Retry,
        "background" => Priority::Background,
        "speculative" => Priority::Speculative,
        _ => return None,
    })
}

/// Why an answer ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
    Other(String),
}

/// A chat answer, wire-neutral.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish: Finish,
    /// The model that actually answered.
    pub model: String,
    pub usage: Option<Usage>,
    /// The answer as the upstream sent it, on the wire it was sent on (same wire): the
    /// gateway returns it unchanged.
    pub raw: Option<Box<crate::core::answer::RawAnswer>>,
    /// The answer is a refusal (fidelity.md §4): the refusal's own text, or empty when
    /// a finish reason said so.
    pub refusal: Option<String>,
    /// The model's reasoning text, where its wire showed it.
    pub reasoning: Option<String>,
    /// The answers after the first (`n > 1` on a wire that answers them apart).
    pub more_choices: Vec<(String, Vec<ToolCall>, Finish)>,
}

/// One piece of a streamed answer, as it arrives.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Text(String),
    /// Refusal text (OpenAI `delta.refusal`).
    Refusal(String),
    ToolCall {
        index: u32,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    Finish(Finish),
    Usage(Usage),
    /// The model the upstream says is answering (see `StreamEvent::Model`).
    Model(String),
    /// Reasoning text (see `StreamEvent::Reasoning`).
    Reasoning(String),
    /// The events that follow are choice `i`'s (see `StreamEvent::Choice`).
    Choice(u32),
    /// A same-wire stream's event as the upstream sent it (see `StreamEvent::Raw`).
    Raw {
        frame: bytes::Bytes,
        visible: bool,
    },
}

/// Where a request goes and under which card.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub tier: &'a Tier,
    pub policy: &'a Policy,
    pub workflow: Option<&'a str>,
    pub session: Option<&'a str>,
    /// `x-poolctl-priority`: admission orders waiters and keeps the floor by it.
    pub priority: Priority,
    /// The card's `degrade_tier`, resolved: where a request admission would shed, or one
    /// too large for every bucket of the chain, goes.
    pub degrade_tier: Option<&'a Tier>,
    /// Counts the upstream calls as they happen: a request the drain deadline cuts
    /// has no report, and its answer still says how many calls it made.
    pub calls: Option<&'a AtomicU32>,
}

impl<'a> Target<'a> {
    fn options(&self) -> CallOptions<'a> {
        let mut opts = CallOptions::new(self.policy);
        opts.workflow = self.workflow;
        opts.session = self.session;
        opts.priority = self.priority;
        opts.degrade_tier = self.degrade_tier;
        opts.calls = self.calls;
        // Every delta of a stream is sent on as it comes: the gateway holds no copy.
        opts.keep_stream_text = false;
        opts
    }
}

/// What a call produced: the trace, and the answer when there is one.
pub struct Called {
    pub report: Report,
    pub reply: Option<Reply>,
}

/// The router's request: the client's, moved, not copied (a conversation can be large).
/// `untranslatable`: the canonical form could not hold the conversation (it is empty),
/// so its size is guessed from the body (about four bytes a token).
fn chat_request(mut r: ChatRequest, untranslatable: bool) -> ChatRequest {
    if untranslatable {
        r.token_estimate = r
            .original
            .as_ref()
            .map(|o| (o.bytes.len() as u64).div_ceil(4));
    }
    r
}

fn finish_of(f: &FinishReason) -> Finish {
    match f {
        FinishReason::Stop => Finish::Stop,
        FinishReason::Length => Finish::Length,
        FinishReason::ToolCalls => Finish::ToolCalls,
        FinishReason::ContentFilter => Finish::ContentFilter,
        FinishReason::Other(s) => Finish::Other(s.clone()),
    }
}

fn event_of(e: StreamEvent<'_>) -> Event {
    match e {
        StreamEvent::Text(t) => Event::Text(t.to_string()),
        StreamEvent::Refusal(t) => Event::Refusal(t.to_string()),
        StreamEvent::ToolCall {
            index,
            id,
            name,
            arguments,
        } => Event::ToolCall {
            index,
            id: id.map(str::to_string),
            name: name.map(str::to_string),
            arguments: arguments.to_string(),
        },
        StreamEvent::Finish(f) => Event::Finish(finish_of(f)),
        StreamEvent::Usage(u) => Event::Usage(*u),
        StreamEvent::Model(m) => Event::Model(m.to_string()),
        StreamEvent::Reasoning(t) => Event::Reasoning(t.to_string()),
        StreamEvent::Choice(i) => Event::Choice(i),
        StreamEvent::Raw { frame, visible } => Event::Raw {
            frame: bytes::Bytes::copy_from_slice(frame),
            visible,
        },
    }
}

/// The answer in the gateway's terms. The model is the one the body named, else the
/// served route's; the finish reason, when the wire gave none, follows the tool calls.
fn reply_of(a: Answer, report: &Report) -> Reply {
    let finish = match &a.finish_reason {
        // A refusal ends as one in the client's words (`content_filter` / `refusal`),
        // whatever finish its wire gave it (OpenAI's refusal comes with `stop`).
        _ if a.refusal.is_some() => Finish::ContentFilter,
        Some(f) => finish_of(f),
        None if !a.tool_calls.is_empty() => Finish::ToolCalls,
        None => Finish::Stop,
    };
    Reply {
        model: a.model.unwrap_or_else(|| served_model(report)),
        text: a.text,
        tool_calls: a.tool_calls,
        finish,
        usage: a.usage,
        raw: a.raw,
        refusal: a.refusal,
        reasoning: a.reasoning,
        more_choices: a
            .more_choices
            .into_iter()
            .map(|c| {
                let finish = match &c.finish_reason {
                    Some(f) => finish_of(f),
                    None if !c.tool_calls.is_empty() => Finish::ToolCalls,
                    None => Finish::Stop,
                };
                (c.text, c.tool_calls, finish)
            })
            .collect(),
    }
}

/// A `degrade` with nothing lesser to give (a chat under `degrade_allowed` and no
/// `degrade_tier`): an empty answer in the client's own shape, so the 200 the status
/// table gives `degraded` is one an SDK can read; `x-poolctl-outcome: degraded` says
/// what it is. An error body under a 200 is read as an answer with no choices.
fn degraded_empty(report: &Report, tier: &Tier) -> Option<Reply> {
    (report.outcome == Outcome::Degraded).then(|| Reply {
        text: String::new(),
        tool_calls: Vec::new(),
        finish: Finish::Stop,
        model: tier.name.clone(),
        usage: None,
        raw: None,
        refusal: None,
        reasoning: None,
        more_choices: Vec::new(),
    })
}

fn served_model(report: &Report) -> String {
    report
        .served_by
        .as_ref()
        .map(|r| r.model().to_string())
        .unwrap_or_default()
}

/// Calls `request` (a `ChatIn`'s, `untranslatable` when its conversation could not be read).
pub async fn chat(
    router: &Router,
    t: Target<'_>,
    request: ChatRequest,
    untranslatable: bool,
) -> Called {
    let called = router
        .call(
            t.tier,
            &Request::Chat(chat_request(request, untranslatable)),
            t.options(),
        )
        .await;
    let report = called.report;
    let reply = called
        .answer
        .map(|a| reply_of(a, &report))
        .or_else(|| degraded_empty(&report, t.tier));
    Called { report, reply }
}

/// Streams `request` (as `chat` takes it): each event reaches `on_event` as it arrives,
/// each attempt and skip reaches `progress` as it happens. `keep_text`: the reply holds
/// the text the stream delivered (a Responses conversation keeps it), else none.
pub async fn stream(
    router: &Router,
    t: Target<'_>,
    request: ChatRequest,
    untranslatable: bool,
    keep_text: bool,
    on_event: &(dyn Fn(Event) + Send + Sync),
    progress: &Progress,
) -> Called {
    let observe = |step: Step<'_>| progress.observe(step);
    let calling = |route: &Route| progress.calling(route);
    let forward = |e: StreamEvent<'_>| on_event(event_of(e));
    let mut opts = t.options();
    opts.keep_stream_text = keep_text;
    opts.observer = Some(&observe);
    opts.calling = Some(&calling);
    opts.on_event = Some(&forward);
    let called = router
        .call(
            t.tier,
            &Request::Stream(chat_request(request, untranslatable)),
            opts,
        )
        .await;
    let report = called.report;
    let reply = called
        .answer
        .map(|a| reply_of(a, &report))
        .or_else(|| degraded_empty(&report, t.tier));
    Called { report, reply }
}

pub struct Embedded {
    pub report: Report,
    pub vectors: Option<Vec<Vec<f32>>>,
    pub usage: Option<Usage>,
    /// The answer as the upstream sent it (same wire).
    pub raw: Option<Box<crate::core::answer::RawAnswer>>,
}

pub async fn embed(router: &Router, t: Target<'_>, e: &EmbedIn) -> Embedded {
    let req = Request::Embed(EmbedRequest {
        inputs: e.inputs.clone(),
        dimensions: e.dimensions,
        original: e.original.clone(),
        token_arrays: e.token_arrays.clone(),
        unmapped: e.unmapped.clone(),
    });
    let called = router.call(t.tier, &req, t.options()).await;
    let (vectors, usage, raw) = called
        .answer
        .map(|a| (a.embeddings, a.usage, a.raw))
        .unwrap_or_default();
    Embedded {
        report: called.report,
        vectors,
        usage,
        raw,
    }
}

pub struct Reranked {
    pub report: Report,
    pub ranking: Option<Vec<usize>>,
    /// The answer as the upstream sent it (same wire); `None` for the gateway's own
    /// `degrade` answer (the recall order).
    pub raw: Option<Box<crate::core::answer::RawAnswer>>,
}

pub async fn rerank(router: &Router, t: Target<'_>, r: &RerankIn) -> Reranked {
    let req = Request::Rerank(RerankRequest {
        query: r.query.clone(),
        documents: r.documents.clone(),
        top_n: r.top_n.unwrap_or(r.documents.len()),
        original: r.original.clone(),
    });
    let called = router.call(t.tier, &req, t.options()).await;
    let (ranking, raw) = called
        .answer
        .map(|a| (a.ranking, a.raw))
        .unwrap_or_default();
    Reranked {
        report: called.report,
        ranking,
        raw,
    }
}

/// Milliseconds until the earliest cooling route of `tier` takes traffic again, when
/// every route is out and at least one will come back by time (a retired route never
/// does): the later of its cooling's end and its buckets' refill. A route this request
/// called that is already back counts from now. `None`: no instant is known. A route
/// `report` skipped for what the request is (it cannot carry it, cannot serve it, or
/// its buckets can never hold it) is no route for this request at any time: its health
/// says nothing of when to come back.
pub async fn ready_again_in_ms(
    router: &Router,
    tier: &Tier,
    report: &Report,
    priority: Priority,
) -> Option<u64> {
    use crate::core::trace::SkipWhy;
    let never_for_this = |route: &Route| {
        report.skipped.iter().any(|s| {
            s.route == *route
                && matches!(
                    s.why,
                    SkipWhy::CannotCarry | SkipWhy::Incapable | SkipWhy::ExceedsBucket
                )
        })
    };
    let now = router.clock().now_ms();
    let mut earliest: Option<i64> = None;
    for spec in tier.routes.iter().filter(|r| !never_for_this(&r.route)) {
        let health = router.store().get(&spec.route).await.ok()?;
        let cooled_until = if health.is_available(now) {
            // A route this request called, whose cooling ran out while the request
            // waited on another (retries on both): back now, an instant known. Any
            // other ready route says nothing of when to come back.
            if !report.attempts.iter().any(|a| a.route == spec.route) {
                return None;
            }
            now
        } else {
            match health.until() {
                Some(until) => until,
                // Retired: never back by time.
                None => continue,
            }
        };
        // Its buckets may hold it back longer (a retry that admission refused).
        let Some(refill) = router
            .admission_wait_ms(&spec.route, output_reservation(spec), priority)
            .await
        else {
            continue;
        };
        let back = cooled_until.max(now.saturating_add(i64::try_from(refill).unwrap_or(i64::MAX)));
        earliest = Some(earliest.map_or(back, |e| e.min(back)));
    }
    earliest.map(|u| u.saturating_sub(now).max(0) as u64)
}

/// The least a request reserves on `spec`'s buckets: its output reservation (the
/// model's maximum, else 4 096) without the input estimate, so a wait computed from it
/// is the earliest instant, never later than the router's own.
fn output_reservation(spec: &crate::config::route::RouteSpec) -> crate::admission::bucket::Cost {
    crate::admission::bucket::Cost {
        input_tokens: 0,
        output_tokens: spec
            .facts
            .max_output_tokens
            .unwrap_or(crate::admission::bucket::DEFAULT_MAX_OUTPUT_TOKENS),
    }
}

/// For a request admission shed: how long until the refill could admit it on one of
/// the routes that refused it (`None` when no refill ever would). The cost is the
/// router's output reservation (the model's maximum, else 4 096) without the input
/// estimate, so this is the earliest instant, never later than the router's own.
pub async fn shed_retry_after_ms(
    router: &Router,
    tier: &Tier,
    report: &Report,
    priority: Priority,
) -> Option<u64> {
    let mut earliest: Option<u64> = None;
    // A refusal no refill would lift has no instant to retry at.
    let never = |s: &&crate::core::trace::Skip| {
        s.cause
            .as_deref()
            .is_some_and(|c| c.starts_with(crate::router::NEVER_ADMITTED))
    };
    let refused = report
        .skipped
        .iter()
        .filter(|s| s.why == crate::core::trace::SkipWhy::Admission);
    if refused.clone().any(|s| never(&s)) {
        return None;
    }
    for s in refused {
        let Some(spec) = tier.routes.iter().find(|r| r.route == s.route) else {
            continue;
        };
        if let Some(ms) = router
            .admission_wait_ms(&s.route, output_reservation(spec), priority)
            .await
        {
            earliest = Some(earliest.map_or(ms, |e| e.min(ms)));
        }
    }
    earliest.map(|ms| ms.max(1))
}

/// Whether the stored health of every route of `tier` can be read and one is ready
/// (`/readyz`).
pub async fn tier_ready(router: &Router, tier: &Tier) -> Result<bool, String> {
    let now = router.clock().now_ms();
    let mut any = false;
    for spec in &tier.routes {
        let h = router
            .store()
            .get(&spec.route)
            .await
            .map_err(|e| e.to_string())?;
        any |= h.is_available(now);
    }
    Ok(any)
}

/// Every route's stored health, for `/metrics`.
pub async fn route_states(router: &Router, routes: &[Route]) -> Vec<(Route, &'static str)> {
    let now = router.clock().now_ms();
    let mut out = Vec::with_capacity(routes.len());
    for r in routes {
        let state = match router.store().get(r).await {
            Ok(h) => h.state_at(now).as_str(),
            Err(_) => "unknown",
        };
        out.push((r.clone(), state));
    }
    out
}

/// A stream's progress as the router reports it, to name the route and count the
/// upstream calls as of the first visible token.
#[derive(Default)]
pub struct Progress {
    inner: Mutex<ProgressState>,
}

#[derive(Default)]
struct ProgressState {
    attempts: usize,
    /// Routes passed over or fallen back from: the stream is on none of them.
    left: Vec<Route>,
    /// The route of the upstream call in flight, as the router names it.
    calling: Option<Route>,
}

impl Progress {
    fn observe(&self, step: Step<'_>) {
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match step {
            Step::Attempt(a) => {
                s.attempts += 1;
                if a.action != Action::Retry {
                    s.left.push(a.route.clone());
                }
            }
            Step::Skipped(k) => s.left.push(k.route.clone()),
        }
    }

    fn calling(&self, route: &Route) {
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        s.calling = Some(route.clone());
    }

    /// The route now streaming and the upstream calls including its own: the route
    /// of the call in flight (a group's member is the router's choice), else the first
    /// route of `order` the walk has not left.
    pub fn current(&self, order: &[Route]) -> (Option<Route>, usize) {
        let s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let route = s
            .calling
            .clone()
            .or_else(|| order.iter().find(|r| !s.left.contains(r)).cloned());
        (route, s.attempts + 1)
    }
}

/// The order a walk tries `tier` in: the chain, with a session's pinned route first
/// while it is available (as the router orders it).
pub async fn try_order(router: &Router, tier: &Tier, session: Option<&str>) -> Vec<Route> {
    let mut order: Vec<Route> = tier.routes.iter().map(|s| s.route.clone()).collect();
    let now = router.clock().now_ms();
    let pinned = match session {
        Some(s) => router.session_route(s).await,
        None => None,
    };
    if let Some(pinned) = pinned {
        let available = match router.store().get(&pinned).await {
            Ok(h) => h.is_available(now),
            Err(_) => true,
        };
        if let Some(i) = order
            .iter()
            .position(|r| *r == pinned)
            .filter(|_| available)
        {
            let r = order.remove(i);
            order.insert(0, r);
        }
    }
    order
}
