//! The one place the gateway calls the router. Everything else in `serve` speaks the
//! gateway's own types (`ChatIn`, `Reply`, `Event`), so a change of the router's
//! surface is a change of this file alone. No routing logic lives here: it translates
//! requests in and answers out, and reads health only to tell a client when to retry.

use super::ingress::{ChatIn, EmbedIn, RerankIn};
use crate::conversation::ToolCall;
use crate::policy::Policy;
use crate::request::{ChatRequest, EmbedRequest, RerankRequest, Usage};
use crate::router::{CallOptions, Router, Tier};
use crate::trace::{Report, Step};
use crate::vocab::{Action, Route};
use std::sync::Mutex;

/// A priority class (`x-poolctl-priority`), carried to the router for admission control.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Priority {
    #[default]
    Interactive,
    Retry,
    Background,
    Speculative,
}

impl Priority {
    pub fn parse(s: &str) -> Option<Priority> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "interactive" => Priority::Interactive,
            "retry" => Priority::Retry,
            "background" => Priority::Background,
            "speculative" => Priority::Speculative,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Interactive => "interactive",
            Priority::Retry => "retry",
            Priority::Background => "background",
            Priority::Speculative => "speculative",
        }
    }
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
}

/// One piece of a streamed answer, as it arrives.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Text(String),
    ToolCall {
        index: u32,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    Finish(Finish),
    Usage(Usage),
}

/// Where a request goes and under which card.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub tier: &'a Tier,
    pub policy: &'a Policy,
    pub workflow: Option<&'a str>,
    pub session: Option<&'a str>,
    /// Not used by the router yet: admission control (issue 10) reads it.
    pub priority: Priority,
}

impl<'a> Target<'a> {
    fn options(&self) -> CallOptions<'a> {
        let mut opts = CallOptions::new(self.policy);
        opts.workflow = self.workflow;
        opts.session = self.session;
        opts
    }
}

/// What a call produced: the trace, and the answer when there is one.
pub struct Called {
    pub report: Report,
    pub reply: Option<Reply>,
}

/// The output cap when the client names none: the wire needs one (Anthropic requires it).
const DEFAULT_MAX_TOKENS: u32 = 4096;

fn chat_request(c: &ChatIn) -> ChatRequest {
    // Today's router carries the conversation, tools, output cap and schema; tool
    // choice, sampling, user and metadata pass through once the router's request has them.
    ChatRequest {
        conversation: c.conversation.clone(),
        tools: c.tools.clone(),
        max_tokens: c.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        token_estimate: None,
        json_schema: c.json_schema.clone(),
    }
}

fn served_model(report: &Report) -> String {
    report
        .served_by
        .as_ref()
        .map(|r| r.model().to_string())
        .unwrap_or_default()
}

fn answered(report: &Report) -> bool {
    matches!(
        report.outcome,
        crate::vocab::Outcome::Success | crate::vocab::Outcome::Degraded
    )
}

pub async fn chat(router: &Router, t: Target<'_>, c: &ChatIn) -> Called {
    let report = router.chat(t.tier, &chat_request(c), t.options()).await;
    let reply = answered(&report).then(|| Reply {
        text: report.text.clone().unwrap_or_default(),
        tool_calls: Vec::new(),
        finish: Finish::Stop,
        model: served_model(&report),
        usage: report.usage,
    });
    Called { report, reply }
}

/// Streams `c`: each event reaches `on_event` as it arrives, each attempt and skip
/// reaches `progress` as it happens.
pub async fn stream(
    router: &Router,
    t: Target<'_>,
    c: &ChatIn,
    on_event: &(dyn Fn(Event) + Send + Sync),
    progress: &Progress,
) -> Called {
    let observe = |step: Step<'_>| progress.observe(step);
    let mut opts = t.options();
    opts.observer = Some(&observe);
    let on_delta = |text: &str| on_event(Event::Text(text.to_string()));
    let report = router
        .stream(t.tier, &chat_request(c), opts, &on_delta)
        .await;
    let reply = answered(&report).then(|| Reply {
        text: report.text.clone().unwrap_or_default(),
        tool_calls: Vec::new(),
        finish: Finish::Stop,
        model: served_model(&report),
        usage: report.usage,
    });
    Called { report, reply }
}

pub struct Embedded {
    pub report: Report,
    pub vectors: Option<Vec<Vec<f32>>>,
}

pub async fn embed(router: &Router, t: Target<'_>, e: &EmbedIn) -> Embedded {
    let req = EmbedRequest {
        inputs: e.inputs.clone(),
    };
    let mut report = router.embed(t.tier, &req, t.options()).await;
    let vectors = report.embeddings.take();
    Embedded { report, vectors }
}

pub struct Reranked {
    pub report: Report,
    pub ranking: Option<Vec<usize>>,
}

pub async fn rerank(router: &Router, t: Target<'_>, r: &RerankIn) -> Reranked {
    let req = RerankRequest {
        query: r.query.clone(),
        documents: r.documents.clone(),
        top_n: r.top_n.unwrap_or(r.documents.len()),
    };
    let mut report = router.rerank(t.tier, &req, t.options()).await;
    let ranking = report.ranking.take();
    Reranked { report, ranking }
}

/// Milliseconds until the earliest cooling route of `tier` takes traffic again, when
/// every route is out and at least one will come back by time (a retired route never
/// does). `None`: no instant is known.
pub fn ready_again_in_ms(router: &Router, tier: &Tier) -> Option<u64> {
    let now = router.clock().now_ms();
    let mut earliest: Option<i64> = None;
    for spec in &tier.routes {
        let health = router.store().get(&spec.route).ok()?;
        if health.is_available(now) {
            return None;
        }
        if let Some(until) = health.until() {
            earliest = Some(earliest.map_or(until, |e| e.min(until)));
        }
    }
    earliest.map(|u| u.saturating_sub(now).max(0) as u64)
}

/// Whether the stored health of every route of `tier` can be read and one is ready
/// (`/readyz`).
pub fn tier_ready(router: &Router, tier: &Tier) -> Result<bool, String> {
    let now = router.clock().now_ms();
    let mut any = false;
    for spec in &tier.routes {
        let h = router.store().get(&spec.route).map_err(|e| e.to_string())?;
        any |= h.is_available(now);
    }
    Ok(any)
}

/// Every route's stored health, for `/metrics`.
pub fn route_states(router: &Router, routes: &[Route]) -> Vec<(Route, &'static str)> {
    let now = router.clock().now_ms();
    routes
        .iter()
        .map(|r| {
            let state = router
                .store()
                .get(r)
                .map(|h| h.state_at(now).as_str())
                .unwrap_or("unknown");
            (r.clone(), state)
        })
        .collect()
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

    /// The route now streaming and the upstream calls including its own: the first
    /// route of `order` the walk has not left.
    pub fn current(&self, order: &[Route]) -> (Option<Route>, usize) {
        let s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let route = order.iter().find(|r| !s.left.contains(r)).cloned();
        (route, s.attempts + 1)
    }
}

/// The order a walk tries `tier` in: the chain, with a session's pinned route first
/// while it is available (as the router orders it).
pub fn try_order(router: &Router, tier: &Tier, session: Option<&str>) -> Vec<Route> {
    let mut order: Vec<Route> = tier.routes.iter().map(|s| s.route.clone()).collect();
    let now = router.clock().now_ms();
    if let Some(pinned) = session.and_then(|s| router.session_route(s)) {
        let available = router
            .store()
            .get(&pinned)
            .map(|h| h.is_available(now))
            .unwrap_or(true);
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
