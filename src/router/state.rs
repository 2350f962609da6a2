//! What the router holds (`Router`: the store, the clock, sessions, buckets, the
//! queue, shared by every request) and what one request carries down the chain (`Walk`,
//! the reply of each attempt, the stream events held back), with the options a caller
//! passes and the answer it gets (`CallOptions`, `Called`).

use super::snapshot::Snapshot;
use crate::admission::buckets::Buckets;
use crate::admission::queue::{AdmissionQueue, Ticket};
use crate::classify::failure::UpstreamFailure;
use crate::config::route::Tier;
use crate::core::answer::{Answer, FinishReason, StreamEvent};
use crate::core::clock::{Clock, UnixMs};
use crate::core::request::{ChatRequest, EmbedRequest, Needs, Usage};
use crate::core::trace::{Report, Step};
use crate::core::vocab::{CallPath, Priority, Why};
use crate::policy::card::Policy;
use crate::store::sessions::{SessionLimits, Sessions};
use crate::store::shared_buckets::{Hold, SharedBuckets};
use crate::store::HealthStore;
use crate::wire;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, LazyLock, Mutex};

/// Per-request options.
#[derive(Clone, Copy)]
pub struct CallOptions<'a> {
    pub policy: &'a Policy,
    /// The workflow (policy card name), recorded on every attempt.
    pub workflow: Option<&'a str>,
    /// A session key: the session stays on the route that last served it while that
    /// route is ready.
    pub session: Option<&'a str>,
    /// Called for every attempt and skip as it happens (`walk` prints them live).
    pub observer: Option<&'a (dyn Fn(Step<'_>) + Send + Sync)>,
    /// Streams: called with each delta as it reaches the caller (text, tool-call
    /// pieces), then the finish reason and the final usage.
    pub on_event: Option<&'a (dyn Fn(StreamEvent<'_>) + Send + Sync)>,
    /// Counted up as each upstream call starts: a caller that may be cut off before
    /// the report exists (the gateway's drain deadline) still knows how many it made.
    pub calls: Option<&'a AtomicU32>,
    /// Told the route of each upstream call as it starts: a stream names the route it
    /// is on in its headers before that attempt's record exists, and in a load-balanced
    /// group the router, not the chain's order, chooses the member.
    pub calling: Option<&'a (dyn Fn(&crate::core::vocab::Route) + Send + Sync)>,
    /// The request's priority class, from its source (never inferred): admission
    /// orders waiters and keeps the interactive floor by it.
    pub priority: Priority,
    /// The card's `degrade_tier`, resolved: where a request that admission would shed,
    /// or that no bucket of the chain could ever hold (`too_large`), is offered instead.
    pub degrade_tier: Option<&'a Tier>,
    /// Streams: keep the text delivered, for the report and the answer (`walk`, chaos).
    /// The gateway, which has sent every delta on as it came, turns it off.
    pub keep_stream_text: bool,
}

impl<'a> CallOptions<'a> {
    pub fn new(policy: &'a Policy) -> Self {
        CallOptions {
            policy,
            workflow: None,
            session: None,
            observer: None,
            on_event: None,
            calls: None,
            calling: None,
            priority: Priority::Interactive,
            degrade_tier: None,
            keep_stream_text: true,
        }
    }
}

/// What a call returns: the answer beside the trace. `answer` is `None` unless the
/// outcome is `success` or `degraded`.
#[derive(Debug, Clone)]
pub struct Called {
    pub answer: Option<Answer>,
    pub report: Report,
}

#[derive(Clone)]
pub struct Router {
    pub(super) inner: Arc<Inner>,
    /// The HTTP client the wires send through. Beside `inner`, not in it: routers that
    /// share every piece of state may still send through clients of their own
    /// (`with_client`), as each of `serve`'s lanes does with its own connection pool.
    pub(super) client: crate::wire::http::Client,
}

pub(super) struct Inner {
    pub(super) clock: Arc<dyn Clock>,
    pub(super) store: Arc<dyn HealthStore>,
    /// Backoff jitter. Seeded in the harness so a scenario's waits repeat exactly.
    pub(super) rng: Mutex<fastrand::Rng>,
    /// Session id → the route that last served it, bounded (`sessions:`).
    pub(super) sessions: Arc<Sessions>,
    /// Admission buckets: this process's budget (empty when no `limits:`). With shared
    /// buckets, the local share they fall back on (and the provider groups the queue
    /// orders by).
    pub(super) buckets: Arc<Buckets>,
    /// The fleet's buckets in the shared store (`state: redis://`), when set: admission
    /// spends these, not `buckets`.
    pub(super) shared: Option<Arc<SharedBuckets>>,
    /// The buckets at their full size (the fleet's contracts, when shared): what a
    /// reservation must fit in to be admitted ever (`exceeds_bucket`).
    pub(super) ceiling: Arc<Buckets>,
    /// Requests waiting for admission, in priority order.
    pub(super) queue: Arc<AdmissionQueue>,
    /// Calls in flight to each group member (`strategy: least_busy` reads them).
    pub(super) in_flight: super::group::InFlight,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section here is a single map operation: a panic elsewhere cannot
    // leave the data half-written, so a poisoned lock is still sound.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What one upstream call produced, per path.
pub(super) enum Reply {
    Chat(wire::ChatSuccess),
    Stream(wire::stream::StreamSuccess),
    Embed(wire::EmbedSuccess),
    Rerank(wire::RerankSuccess),
}

impl Reply {
    pub(super) fn request_id(&self) -> Option<String> {
        match self {
            Reply::Chat(a) => a.request_id.clone(),
            Reply::Stream(a) => a.request_id.clone(),
            Reply::Embed(a) => a.request_id.clone(),
            Reply::Rerank(a) => a.request_id.clone(),
        }
    }

    pub(super) fn usage(&self) -> Option<Usage> {
        match self {
            Reply::Chat(a) => Some(a.usage),
            Reply::Stream(a) => a.usage,
            Reply::Embed(a) => Some(a.usage),
            Reply::Rerank(a) => Some(a.usage),
        }
    }

    /// A note for the trace on an answer that is whole but not clean: a stream some of
    /// whose events could not be read and were skipped. Said, never silent: the
    /// answer the client got may lack what those events held.
    pub(super) fn detail(&self) -> Option<String> {
        match self {
            Reply::Stream(a) if a.skipped_events > 0 => Some(format!(
                "{} stream event(s) could not be read and were skipped",
                a.skipped_events
            )),
            _ => None,
        }
    }

    /// Whether the reply is the model's refusal (class `refusal`, fidelity.md §4).
    pub(super) fn is_refusal(&self) -> bool {
        match self {
            Reply::Chat(a) => a.refusal.is_some(),
            Reply::Stream(a) => a.refusal.is_some(),
            Reply::Embed(_) | Reply::Rerank(_) => false,
        }
    }

    pub(super) fn headers(&self) -> &crate::classify::failure::Headers {
        match self {
            Reply::Chat(a) => &a.headers,
            Reply::Stream(a) => &a.headers,
            Reply::Embed(a) => &a.headers,
            Reply::Rerank(a) => &a.headers,
        }
    }
}

/// What an attempt spent, for its admission reservation. A reply without usage (all
/// zeros is how a wire reports none) spends like a failure: the request and its input.
pub(super) fn spent_by(result: &Result<Reply, UpstreamFailure>) -> crate::admission::bucket::Spent {
    use crate::admission::bucket::Spent;
    match result.as_ref().ok().and_then(Reply::usage) {
        Some(u) if u.input_tokens + u.output_tokens > 0 => Spent::Reported {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
        },
        _ => Spent::Unreported,
    }
}

/// One upstream call as the loop sees it: the reply or failure, and what already
/// reached the caller (streams only).
pub(super) struct Attempted {
    pub(super) result: Result<Reply, UpstreamFailure>,
    pub(super) delivered: String,
    /// Text or a tool-call delta reached the caller.
    pub(super) visible: bool,
}

impl From<Result<Reply, UpstreamFailure>> for Attempted {
    fn from(result: Result<Reply, UpstreamFailure>) -> Self {
        Attempted {
            result,
            delivered: String::new(),
            visible: false,
        }
    }
}

/// A stream event held back under `safe_replay_until: buffered`, replayed on success.
pub(super) enum Held {
    Text(String),
    Refusal(String),
    ToolCall {
        index: u32,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    Finish(FinishReason),
    Usage(Usage),
    Model(String),
    Reasoning(String),
    Raw(Vec<u8>, bool),
    Choice(u32),
}

impl Held {
    pub(super) fn of(ev: StreamEvent<'_>) -> Held {
        match ev {
            StreamEvent::Text(t) => Held::Text(t.to_string()),
            StreamEvent::Refusal(t) => Held::Refusal(t.to_string()),
            StreamEvent::ToolCall {
                index,
                id,
                name,
                arguments,
            } => Held::ToolCall {
                index,
                id: id.map(str::to_string),
                name: name.map(str::to_string),
                arguments: arguments.to_string(),
            },
            StreamEvent::Finish(f) => Held::Finish(f.clone()),
            StreamEvent::Usage(u) => Held::Usage(*u),
            StreamEvent::Model(m) => Held::Model(m.to_string()),
            StreamEvent::Reasoning(t) => Held::Reasoning(t.to_string()),
            StreamEvent::Raw { frame, visible } => Held::Raw(frame.to_vec(), visible),
            StreamEvent::Choice(i) => Held::Choice(i),
        }
    }

    pub(super) fn replay(&self, to: &(dyn Fn(StreamEvent<'_>) + Send + Sync)) {
        to(match self {
            Held::Text(t) => StreamEvent::Text(t),
            Held::Refusal(t) => StreamEvent::Refusal(t),
            Held::ToolCall {
                index,
                id,
                name,
                arguments,
            } => StreamEvent::ToolCall {
                index: *index,
                id: id.as_deref(),
                name: name.as_deref(),
                arguments,
            },
            Held::Finish(f) => StreamEvent::Finish(f),
            Held::Usage(u) => StreamEvent::Usage(u),
            Held::Model(m) => StreamEvent::Model(m),
            Held::Reasoning(t) => StreamEvent::Reasoning(t),
            Held::Raw(frame, visible) => StreamEvent::Raw {
                frame,
                visible: *visible,
            },
            Held::Choice(i) => StreamEvent::Choice(*i),
        })
    }
}

/// The request a walk carries, as far as what a route can carry of it goes
/// (spec/fidelity.md §3): a chat or stream (`wire::carry`), an embedding batch
/// (`wire::carry_embed`); a rerank, which every rerank route carries whole, or a dry
/// run: nothing to judge.
#[derive(Clone, Copy)]
pub(super) enum Asked<'a> {
    Chat(&'a ChatRequest),
    Embed(&'a EmbedRequest),
    Whole,
}

impl Asked<'_> {
    /// What `endpoint` cannot carry: `Err` with the semantic field that skips it, else
    /// the advisory fields it is called without.
    pub(super) fn carry(&self, endpoint: &wire::Endpoint) -> Result<Vec<String>, wire::Cannot> {
        match self {
            Asked::Chat(c) => wire::carry(c, endpoint),
            Asked::Embed(e) => wire::carry_embed(e, endpoint),
            Asked::Whole => Ok(Vec::new()),
        }
    }
}

/// The state of one request while it walks its tier.
pub(super) struct Walk<'a> {
    pub(super) tier: &'a Tier,
    pub(super) path: CallPath,
    pub(super) opts: CallOptions<'a>,
    pub(super) needs: Needs,
    /// The request, for what each route's wire can carry of it (and drops).
    pub(super) asked: Asked<'a>,
    pub(super) start: UnixMs,
    /// Chain positions in the order they are tried (a session's route first).
    pub(super) order: Vec<usize>,
    /// Position in `order` of the route being tried.
    pub(super) pos: usize,
    /// Chain position of the sticky route, when the session put it first.
    pub(super) sticky: Option<usize>,
    /// Chain position of the route this request asked for first: 0, or the member its
    /// draw put first when the first step is a group.
    pub(super) primary: usize,
    pub(super) retries_on_route: u32,
    /// The current route's attempt is a half-open breaker trial.
    pub(super) trial: bool,
    pub(super) extra_cost_usd: f64,
    pub(super) last_why: Option<Why>,
    /// The last refusal a card's `on_refusal: fallback` moved past, and the chain
    /// position of the route that gave it: delivered when the chain runs out.
    pub(super) last_refusal: Option<(usize, Reply)>,
    /// Health of the routes from `pos` on, read once per selection.
    pub(super) snapshot: Snapshot,
    /// What the current route's admitted call holds until it is settled.
    pub(super) reservation: Option<Hold>,
    /// Routes this selection skipped for admission: try-order position, the refill
    /// each needs (`None`: never), and its provider group.
    pub(super) refused: Vec<(usize, Option<u64>, usize)>,
    /// The request's place in the admission queue while it waits.
    pub(super) ticket: Option<Ticket>,
    pub(super) queued_ms: u64,
    /// Real time spent on sockets: on a virtual clock it is counted into the budget.
    pub(super) socket_ms: u64,
}

impl Walk<'_> {
    pub(super) fn current(&self) -> usize {
        self.order[self.pos]
    }
}

pub(super) fn no_events(_: StreamEvent<'_>) {}

impl Router {
    pub fn new(
        client: impl Into<crate::wire::http::Client>,
        clock: Arc<dyn Clock>,
        store: Arc<dyn HealthStore>,
    ) -> Self {
        // Without `limits:` admission passes every call at once and nothing ever waits
        // in the queue, so every such router shares one empty pair: building and
        // dropping a router allocates and frees neither.
        static UNLIMITED: LazyLock<(Arc<Buckets>, Arc<AdmissionQueue>)> = LazyLock::new(|| {
            (
                Arc::new(Buckets::new(&Default::default(), 0)),
                Arc::default(),
            )
        });
        let unlimited = &*UNLIMITED;
        Router {
            client: client.into(),
            inner: Arc::new(Inner {
                clock,
                store,
                rng: Mutex::new(fastrand::Rng::new()),
                sessions: Arc::new(Sessions::local(SessionLimits::default())),
                buckets: unlimited.0.clone(),
                shared: None,
                ceiling: unlimited.0.clone(),
                queue: unlimited.1.clone(),
                in_flight: Default::default(),
            }),
        }
    }

    /// The same router, spending `buckets` before every upstream call. Call it on a
    /// router just built: clones made before it keep the old buckets.
    pub fn with_buckets(self, buckets: Arc<Buckets>) -> Self {
        self.with_admission(buckets, None)
    }

    /// The same router, spending the fleet's `shared` buckets before every upstream
    /// call (and, while the shared store fails, its local share, by `on_store_error`).
    pub fn with_shared_buckets(self, shared: Arc<SharedBuckets>) -> Self {
        self.with_admission(shared.local().clone(), Some(shared))
    }

    pub(super) fn with_admission(
        self,
        buckets: Arc<Buckets>,
        shared: Option<Arc<SharedBuckets>>,
    ) -> Self {
        let client = self.client;
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                // Local buckets are their own ceiling; shared ones are given theirs
                // (`with_ceiling`), the local share being a fraction of the fleet's.
                inner.ceiling = buckets.clone();
                inner.buckets = buckets;
                inner.shared = shared;
                // Its own queue: the one it had may be the one every unlimited router shares.
                inner.queue = Arc::default();
                Router {
                    client,
                    inner: Arc::new(inner),
                }
            }
            Err(other) => {
                let r = Router::new(client, other.clock.clone(), other.store.clone());
                r.with_admission(buckets, shared)
            }
        }
    }

    /// The same router (health, breakers, sessions, admission and jitter all shared with
    /// this one) sending through `client`. A tokio HTTP client runs each connection on
    /// the runtime that opened it, so a runtime of its own wants a client of its own:
    /// its requests then never wake another thread.
    pub fn with_client(&self, client: impl Into<crate::wire::http::Client>) -> Self {
        Router {
            inner: self.inner.clone(),
            client: client.into(),
        }
    }

    /// The same router, pinning sessions in `sessions` (bounded as the config says;
    /// shared by a fleet with `state: redis://`). Call it on a router just built.
    pub fn with_sessions(self, sessions: Arc<Sessions>) -> Self {
        self.edited(|inner| inner.sessions = sessions)
    }

    /// The sessions this router pins.
    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.inner.sessions
    }

    /// The same router, judging whether a reservation can ever be admitted against
    /// `ceiling`: with shared buckets, the fleet's whole contracts (not the local share
    /// `with_shared_buckets` holds). Call it on a router just built.
    pub fn with_ceiling(self, ceiling: Arc<Buckets>) -> Self {
        self.edited(|inner| inner.ceiling = ceiling)
    }

    /// This router with `edit` applied to what it holds, when no clone shares it yet
    /// (as the builders' "call it on a router just built" asks); a router already
    /// shared is returned as it was.
    fn edited(mut self, edit: impl FnOnce(&mut Inner)) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            edit(inner);
        }
        self
    }

    /// The fleet's shared buckets, when admission spends them.
    pub fn shared_buckets(&self) -> Option<&Arc<SharedBuckets>> {
        self.inner.shared.as_ref()
    }

    /// This router's admission buckets (levels, sheds).
    pub fn buckets(&self) -> &Arc<Buckets> {
        &self.inner.buckets
    }

    /// A router whose backoff jitter follows `seed`.
    pub fn with_seed(
        client: impl Into<crate::wire::http::Client>,
        clock: Arc<dyn Clock>,
        store: Arc<dyn HealthStore>,
        seed: u64,
    ) -> Self {
        let r = Router::new(client, clock, store);
        *lock(&r.inner.rng) = fastrand::Rng::with_seed(seed);
        r
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    pub fn store(&self) -> &Arc<dyn HealthStore> {
        &self.inner.store
    }
}
