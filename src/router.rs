//! The router: the only loop, and the only retry layer. It walks a tier, skips routes
//! that are cooling, retired, unapproved, incapable or behind an open breaker, calls the
//! wire, and for each attempt asks `classify`, `decide` and `transition` — pure
//! functions — then carries out the decision: wait through the injected clock, move on,
//! or end the request. Selection (`next_route`) and settlement (`settle`) are plain
//! synchronous steps; the async loop only calls the wire and sleeps between them.
//! `Router` is `Send + Sync` and cheap to clone: every request through one router
//! shares its health, breakers and session affinities.

use crate::breaker::{self, Admit};
use crate::budget::Spent;
use crate::capability::{cannot_serve, estimate_cost_usd, ModelFacts, Needs};
use crate::classify::{classify, Verdict};
use crate::clock::{Clock, Stopwatch, UnixMs};
use crate::decide::{decide, when_nothing_left, Decision, Situation, Why};
use crate::failure::UpstreamFailure;
use crate::health::{is_route_fault, transition, Health};
use crate::outcome::{failure_reason, outcome_of};
use crate::policy::{Policy, SafeReplay};
use crate::request::{ChatRequest, EmbedRequest, RerankRequest, Usage};
use crate::store::HealthStore;
use crate::trace::{AttemptRecord, HealthChange, Report, Skip, SkipWhy, Step};
use crate::vocab::{Action, CallPath, Class, HealthState, Outcome, Route};
use crate::wire::{self, Endpoint};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// One route of a tier, resolved: the route, the endpoint that serves it, and what the
/// model can serve.
#[derive(Debug, Clone)]
pub struct RouteSpec {
    pub route: Route,
    pub endpoint: Arc<Endpoint>,
    pub facts: ModelFacts,
}

/// An ordered chain of routes.
#[derive(Debug, Clone)]
pub struct Tier {
    pub name: String,
    pub routes: Vec<RouteSpec>,
}

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
}

impl<'a> CallOptions<'a> {
    pub fn new(policy: &'a Policy) -> Self {
        CallOptions {
            policy,
            workflow: None,
            session: None,
            observer: None,
        }
    }
}

#[derive(Clone)]
pub struct Router {
    inner: Arc<Inner>,
}

struct Inner {
    client: reqwest::Client,
    clock: Arc<dyn Clock>,
    store: Arc<dyn HealthStore>,
    /// Backoff jitter. Seeded in the harness so a scenario's waits repeat exactly.
    rng: Mutex<fastrand::Rng>,
    breakers: Mutex<BTreeMap<Route, breaker::State>>,
    /// Session key → the route that last served it.
    sessions: Mutex<HashMap<String, Route>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section here is a single map operation: a panic elsewhere cannot
    // leave the data half-written, so a poisoned lock is still sound.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What one upstream call produced.
enum Answer {
    Chat(wire::ChatSuccess),
    Stream(wire::stream::StreamSuccess),
    Embed(wire::EmbedSuccess),
    Rerank(wire::RerankSuccess),
}

impl Answer {
    fn request_id(&self) -> Option<String> {
        match self {
            Answer::Chat(a) => a.request_id.clone(),
            Answer::Stream(a) => a.request_id.clone(),
            Answer::Embed(a) => a.request_id.clone(),
            Answer::Rerank(a) => a.request_id.clone(),
        }
    }

    fn usage(&self) -> Option<Usage> {
        match self {
            Answer::Chat(a) => Some(a.usage),
            Answer::Stream(a) => a.usage,
            Answer::Embed(a) => Some(a.usage),
            Answer::Rerank(a) => Some(a.usage),
        }
    }
}

/// One upstream call as the loop sees it: the answer or failure, and any text already
/// delivered to the caller (streams only).
struct Attempted {
    result: Result<Answer, UpstreamFailure>,
    delivered: String,
}

impl From<Result<Answer, UpstreamFailure>> for Attempted {
    fn from(result: Result<Answer, UpstreamFailure>) -> Self {
        Attempted {
            result,
            delivered: String::new(),
        }
    }
}

/// What the classifier and the wire said about one attempt.
#[derive(Debug, Clone)]
pub struct Observed {
    pub verdict: Verdict,
    pub status: Option<u16>,
    pub request_id: Option<String>,
    pub detail: Option<String>,
    pub latency_ms: u64,
    /// A stream already delivered visible text.
    pub visible_token: bool,
    pub tokens: Option<Usage>,
}

/// The state of one request while it walks its tier.
struct Walk<'a> {
    tier: &'a Tier,
    path: CallPath,
    opts: CallOptions<'a>,
    needs: Needs,
    start: UnixMs,
    /// Chain positions in the order they are tried (a session's route first).
    order: Vec<usize>,
    /// Position in `order` of the route being tried.
    pos: usize,
    /// Chain position of the sticky route, when the session put it first.
    sticky: Option<usize>,
    retries_on_route: u32,
    /// The current route's attempt is a half-open breaker trial.
    trial: bool,
    extra_cost_usd: f64,
    last_why: Option<Why>,
    /// Real time spent on sockets: on a virtual clock it is counted into the budget.
    socket_ms: u64,
}

impl Walk<'_> {
    fn current(&self) -> usize {
        self.order[self.pos]
    }
}

impl Router {
    pub fn new(
        client: reqwest::Client,
        clock: Arc<dyn Clock>,
        store: Arc<dyn HealthStore>,
    ) -> Self {
        Router {
            inner: Arc::new(Inner {
                client,
                clock,
                store,
                rng: Mutex::new(fastrand::Rng::new()),
                breakers: Mutex::new(BTreeMap::new()),
                sessions: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// A router whose backoff jitter follows `seed`.
    pub fn with_seed(
        client: reqwest::Client,
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

    /// Sends a chat request down `tier`. With a JSON schema, an answer that does not
    /// satisfy it is rejected (`invalid_output`) and the next route is asked.
    pub async fn chat(&self, tier: &Tier, req: &ChatRequest, opts: CallOptions<'_>) -> Report {
        let client = &self.inner.client;
        let schema = req.json_schema.as_ref();
        self.run(
            tier,
            CallPath::Chat,
            req.needs(false),
            opts,
            |spec, left| async move {
                let ep = spec.endpoint.within(left);
                let result = wire::chat(client, &ep, spec.route.model(), req).await;
                match result {
                    Ok(ok) => match schema.and_then(|s| crate::validate::violation(s, &ok.text)) {
                        Some(why) => Err(crate::validate::rejected(&ok.headers, why)),
                        None => Ok(Answer::Chat(ok)),
                    },
                    Err(f) => Err(f),
                }
                .into()
            },
        )
        .await
    }

    /// Streams a chat answer down `tier`: each piece of visible text reaches `on_delta`
    /// as it arrives. Routes change only before the first visible token; after it a
    /// failure ends the request `interrupted` with exactly the text already delivered.
    /// Under `safe_replay_until: buffered` the text is held until the upstream completes,
    /// so a mid-stream failure can still move to another route, unseen.
    pub async fn stream(
        &self,
        tier: &Tier,
        req: &ChatRequest,
        opts: CallOptions<'_>,
        on_delta: &(dyn Fn(&str) + Send + Sync),
    ) -> Report {
        let client = &self.inner.client;
        let buffered = opts.policy.safe_replay_until == SafeReplay::Buffered;
        self.run(
            tier,
            CallPath::Stream,
            req.needs(true),
            opts,
            |spec, left| async move {
                let ep = spec.endpoint.within(left);
                if !buffered {
                    let a =
                        wire::stream::stream_chat(client, &ep, spec.route.model(), req, on_delta)
                            .await;
                    return Attempted {
                        result: a.result.map(Answer::Stream),
                        delivered: a.delivered,
                    };
                }
                let held = Mutex::new(Vec::<String>::new());
                let hold = |t: &str| lock(&held).push(t.to_string());
                let a =
                    wire::stream::stream_chat(client, &ep, spec.route.model(), req, &hold).await;
                match a.result {
                    Ok(ok) => {
                        for piece in lock(&held).iter() {
                            on_delta(piece);
                        }
                        Attempted {
                            result: Ok(Answer::Stream(ok)),
                            delivered: a.delivered,
                        }
                    }
                    // Nothing reached the caller: the failure is one before the first token.
                    Err(f) => Attempted {
                        result: Err(f),
                        delivered: String::new(),
                    },
                }
            },
        )
        .await
    }

    /// Embeds a batch down `tier`; the vectors are in `Report::embeddings`.
    pub async fn embed(&self, tier: &Tier, req: &EmbedRequest, opts: CallOptions<'_>) -> Report {
        let client = &self.inner.client;
        self.run(
            tier,
            CallPath::Embed,
            req.needs(),
            opts,
            |spec, left| async move {
                wire::embed(client, &spec.endpoint.within(left), spec.route.model(), req)
                    .await
                    .map(Answer::Embed)
                    .into()
            },
        )
        .await
    }

    /// Reranks candidates down `tier`; the order is in `Report::ranking`. Rerank is an
    /// optimisation: when no route can answer, the outcome is `degraded` and the ranking
    /// is the recall order, unchanged.
    pub async fn rerank(&self, tier: &Tier, req: &RerankRequest, opts: CallOptions<'_>) -> Report {
        let client = &self.inner.client;
        let mut report = self
            .run(
                tier,
                CallPath::Rerank,
                req.needs(),
                opts,
                |spec, left| async move {
                    wire::rerank(client, &spec.endpoint.within(left), spec.route.model(), req)
                        .await
                        .map(Answer::Rerank)
                        .into()
                },
            )
            .await;
        if report.outcome == Outcome::Degraded {
            report.ranking = Some((0..req.documents.len()).take(req.top_n).collect());
        }
        report
    }

    /// Whether any route of `tier` is ready now (the embedding queue re-offers batches
    /// only then).
    pub fn any_ready(&self, tier: &Tier) -> bool {
        let now = self.inner.clock.now_ms();
        tier.routes.iter().any(|spec| {
            self.inner
                .store
                .get(&spec.route)
                .map(|h| h.is_available(now))
                .unwrap_or(true)
        })
    }

    /// The route a session is pinned to, if any.
    pub fn session_route(&self, session: &str) -> Option<Route> {
        lock(&self.inner.sessions).get(session).cloned()
    }

    /// Walks `tier` with canned attempt results instead of network calls: the same
    /// selection, classification, decision and health code as a real request, for
    /// benchmarks of the routing itself. `results[i]` answers the i-th call.
    pub async fn dry_run(
        &self,
        tier: &Tier,
        opts: CallOptions<'_>,
        results: Vec<Result<(), UpstreamFailure>>,
    ) -> Report {
        let results = Mutex::new(results.into_iter());
        self.run(
            tier,
            CallPath::Chat,
            Needs::default(),
            opts,
            |_spec, _left| {
                let result = match lock(&results).next() {
                    Some(Ok(())) | None => Ok(Answer::Chat(wire::ChatSuccess {
                        text: String::new(),
                        tool_calls: Vec::new(),
                        usage: Usage::default(),
                        request_id: None,
                        headers: Default::default(),
                    })),
                    Some(Err(f)) => Err(f),
                };
                std::future::ready(Attempted::from(result))
            },
        )
        .await
    }

    /// The chain walk shared by every path; `call` makes one upstream call.
    async fn run<'s, F, Fut>(
        &self,
        tier: &'s Tier,
        path: CallPath,
        needs: Needs,
        opts: CallOptions<'_>,
        call: F,
    ) -> Report
    where
        F: Fn(&'s RouteSpec, u64) -> Fut,
        Fut: std::future::Future<Output = Attempted>,
    {
        let clock = &self.inner.clock;
        let start = clock.now_ms();
        let mut report = Report {
            path,
            outcome: Outcome::Failed,
            reason: None,
            served_by: None,
            text: None,
            ranking: None,
            embeddings: None,
            usage: None,
            // Sized once: records are large, and regrowing moves them all.
            attempts: Vec::with_capacity(tier.routes.len() + 2),
            skipped: Vec::with_capacity(tier.routes.len()),
            waits_ms: Vec::new(),
            elapsed_ms: 0,
            notes: Vec::new(),
        };
        let (order, sticky) = self.order(tier, opts.session, start);
        let mut walk = Walk {
            tier,
            path,
            opts,
            needs,
            start,
            order,
            pos: 0,
            sticky,
            retries_on_route: 0,
            trial: false,
            extra_cost_usd: 0.0,
            last_why: None,
            socket_ms: 0,
        };

        let mut ended = false;
        'chain: while self.next_route(&mut walk, &mut report) {
            loop {
                let spent = self.spent(&walk, report.attempts.len() as u32);
                if !spent.allows(walk.opts.policy, 0, 0.0) {
                    walk.last_why = Some(Why::BudgetSpent);
                    break 'chain;
                }
                let spec = &tier.routes[walk.current()];
                let sw = Stopwatch::start();
                // The attempt may take no longer than what is left of the budget.
                let left = spent.time_left_ms(walk.opts.policy);
                let Attempted { result, delivered } = call(spec, left).await;
                let latency_ms = sw.elapsed_ms();
                walk.socket_ms += latency_ms;
                let visible_token = !delivered.is_empty();
                if visible_token {
                    // Only one attempt can ever deliver text: after it, no route changes.
                    report.text = Some(delivered);
                    report.served_by = Some(spec.route.clone());
                }
                let now = clock.now_ms();
                let observed = match &result {
                    Ok(answer) => Observed {
                        verdict: Verdict {
                            class: Class::Ok,
                            hint: None,
                        },
                        status: Some(200),
                        request_id: answer.request_id(),
                        detail: None,
                        latency_ms,
                        visible_token,
                        tokens: answer.usage(),
                    },
                    Err(f) => Observed {
                        verdict: classify(spec.endpoint.dialect, f, now),
                        status: f.status,
                        request_id: f.headers.request_id().map(str::to_string),
                        detail: detail_of(f),
                        latency_ms,
                        visible_token,
                        tokens: None,
                    },
                };
                let decision = self.settle(&mut walk, &mut report, observed);
                match decision.action {
                    Action::Retry => {
                        let wait = decision.wait_ms.unwrap_or(0);
                        report.waits_ms.push(wait);
                        clock.sleep(wait).await;
                        walk.retries_on_route += 1;
                    }
                    Action::Fallback => {
                        walk.pos += 1;
                        continue 'chain;
                    }
                    action => {
                        if let Ok(answer) = result {
                            self.answered(&walk, &mut report, answer);
                        }
                        report.outcome = outcome_of(action);
                        if decision.row == 6 {
                            // Row 6 ended the request because no approved live route was
                            // left: the routes after this one were passed over.
                            walk.pos += 1;
                            while walk.pos < walk.order.len() {
                                if let Some(skip) =
                                    self.skip_reason(&walk, walk.current(), &mut report.notes)
                                {
                                    self.emit_skip(&walk, &mut report, skip);
                                }
                                walk.pos += 1;
                            }
                        }
                        ended = true;
                        break 'chain;
                    }
                }
            }
        }

        if !ended {
            // The chain ran out (or the budget did) without a decision that ends the
            // request: row 6 answers.
            let action = if walk.last_why == Some(Why::BudgetSpent) {
                Action::FailClosed
            } else {
                when_nothing_left(path, walk.opts.policy)
            };
            report.outcome = outcome_of(action);
        }
        if report.outcome == Outcome::Failed {
            let failures: Vec<Class> = report
                .attempts
                .iter()
                .map(|a| a.class)
                .filter(|c| *c != Class::Ok)
                .collect();
            let causes: Vec<(SkipWhy, Option<&str>)> = report
                .skipped
                .iter()
                .map(|s| (s.why, s.cause.as_deref()))
                .collect();
            let last = report.attempts.last().map(|a| a.class);
            report.reason = Some(failure_reason(walk.last_why, last, &failures, &causes));
        }
        report.elapsed_ms = elapsed(start, clock.now_ms());
        report
    }

    /// The try order: the chain, with a session's route first while it is ready.
    fn order(
        &self,
        tier: &Tier,
        session: Option<&str>,
        now: UnixMs,
    ) -> (Vec<usize>, Option<usize>) {
        let mut order: Vec<usize> = (0..tier.routes.len()).collect();
        let pinned = session.and_then(|s| lock(&self.inner.sessions).get(s).cloned());
        let sticky = pinned
            .and_then(|route| tier.routes.iter().position(|r| r.route == route))
            .filter(|i| {
                let route = &tier.routes[*i].route;
                self.inner
                    .store
                    .get(route)
                    .map(|h| h.is_available(now))
                    .unwrap_or(true)
            });
        if let Some(i) = sticky {
            order.remove(i);
            order.insert(0, i);
        }
        (order, sticky)
    }

    /// Advances to the next route that may be called, recording each one passed over.
    /// `false` when the chain has run out.
    fn next_route(&self, walk: &mut Walk<'_>, report: &mut Report) -> bool {
        walk.retries_on_route = 0;
        walk.trial = false;
        while walk.pos < walk.order.len() {
            let idx = walk.current();
            match self.skip_reason(walk, idx, &mut report.notes) {
                Some(skip) => {
                    self.emit_skip(walk, report, skip);
                    walk.pos += 1;
                }
                None => {
                    let route = &walk.tier.routes[idx];
                    if let Some(cfg) = &route.endpoint.breaker {
                        let now = self.inner.clock.now_ms();
                        let mut breakers = lock(&self.inner.breakers);
                        let state = breakers.entry(route.route.clone()).or_default();
                        match breaker::admit(state, cfg, now) {
                            Admit::Yes => {}
                            Admit::Trial => walk.trial = true,
                            Admit::Open(until) => {
                                drop(breakers);
                                let skip = Skip {
                                    route: route.route.clone(),
                                    why: SkipWhy::Open,
                                    cause: Some(format!("open for {} ms more", until - now)),
                                };
                                self.emit_skip(walk, report, skip);
                                walk.pos += 1;
                                continue;
                            }
                            Admit::Busy => {
                                drop(breakers);
                                let skip = Skip {
                                    route: route.route.clone(),
                                    why: SkipWhy::HalfOpen,
                                    cause: None,
                                };
                                self.emit_skip(walk, report, skip);
                                walk.pos += 1;
                                continue;
                            }
                        }
                    }
                    return true;
                }
            }
        }
        false
    }

    fn emit_skip(&self, walk: &Walk<'_>, report: &mut Report, skip: Skip) {
        report.skipped.push(skip);
        if let Some(observe) = walk.opts.observer {
            observe(Step::Skipped(report.skipped.last().expect("just pushed")));
        }
    }

    /// Classifies nothing, decides everything about one finished attempt: the action,
    /// the route's new health, its breaker, and the attempt record.
    fn settle(&self, walk: &mut Walk<'_>, report: &mut Report, seen: Observed) -> Decision {
        let now = self.inner.clock.now_ms();
        let idx = walk.current();
        let spec = &walk.tier.routes[idx];
        let policy = walk.opts.policy;
        let cost_usd = estimate_cost_usd(&spec.facts, &walk.needs);
        if !report.attempts.is_empty() {
            walk.extra_cost_usd += cost_usd;
        }
        let class = seen.verdict.class;
        let next_fallback = self.fallback_candidate(walk, now, None);
        let larger = (class == Class::ContextOverflow)
            .then_some(spec.facts.context_window)
            .flatten()
            .and_then(|window| self.fallback_candidate(walk, now, Some(window)));
        // The breaker first: an attempt that opens it must not be retried on the route it
        // just closed off (issue 9, item 12); the request moves to the fallback instead.
        let breaker_open_until = spec.endpoint.breaker.as_ref().and_then(|cfg| {
            let mut breakers = lock(&self.inner.breakers);
            let state = breakers.entry(spec.route.clone()).or_default();
            breaker::record(state, cfg, walk.trial, !is_route_fault(class), now)
        });
        let situation = Situation {
            class,
            path: walk.path,
            hint: seen.verdict.hint,
            policy,
            spent: self.spent(walk, report.attempts.len() as u32 + 1),
            retries_on_route: walk.retries_on_route,
            visible_token: seen.visible_token,
            fallback_available: next_fallback.is_some(),
            larger_window_available: larger.is_some(),
            // A trial is never retried, and neither is a route whose breaker is now open.
            trial: walk.trial || breaker_open_until.is_some(),
            retry_cost_usd: cost_usd,
            fallback_cost_usd: next_fallback
                .map(|i| estimate_cost_usd(&walk.tier.routes[i].facts, &walk.needs))
                .unwrap_or(0.0),
            jitter: lock(&self.inner.rng).f64(),
        };
        let decision = decide(&situation);
        if decision.action == Action::Fallback && class == Class::ContextOverflow {
            // Only a larger window may serve it now.
            walk.needs.min_window = spec.facts.context_window.unwrap_or(0);
        }
        let new_health = transition(
            class,
            decision.action,
            seen.verdict.hint,
            decision.wait_ms,
            spec.endpoint.cooldowns,
            now,
        );
        let health = new_health.and_then(|h| self.apply_health(&spec.route, h, &mut report.notes));
        if class == Class::Ok {
            if let Some(session) = walk.opts.session {
                lock(&self.inner.sessions).insert(session.to_string(), spec.route.clone());
            }
        }
        let chosen = if walk.retries_on_route > 0 {
            "retry"
        } else if walk.trial {
            "half-open trial"
        } else if walk.sticky == Some(idx) {
            "session affinity"
        } else if idx == 0 {
            "primary"
        } else {
            "fallback"
        };
        report.attempts.push(AttemptRecord {
            index: report.attempts.len() as u32 + 1,
            route: spec.route.clone(),
            status: seen.status,
            class,
            action: decision.action,
            wait_ms: decision.wait_ms,
            health,
            latency_ms: seen.latency_ms,
            request_id: seen.request_id,
            hint_ms: seen.verdict.hint.map(|h| h.ms),
            row: decision.row,
            detail: seen.detail,
            workflow: walk.opts.workflow.map(str::to_string),
            requested_route: walk.tier.routes[0].route.clone(),
            chosen,
            tokens: seen.tokens,
            cost_usd,
            breaker_open_until,
        });
        if let Some(observe) = walk.opts.observer {
            observe(Step::Attempt(report.attempts.last().expect("just pushed")));
        }
        walk.last_why = Some(decision.why);
        decision
    }

    /// Fills the report from the answer that ended the request.
    fn answered(&self, walk: &Walk<'_>, report: &mut Report, answer: Answer) {
        report.served_by = Some(walk.tier.routes[walk.current()].route.clone());
        report.usage = answer.usage();
        match answer {
            Answer::Chat(ok) => report.text = Some(ok.text),
            // The text went out as it arrived; `delivered` holds it.
            Answer::Stream(_) => {
                report.text.get_or_insert_with(String::new);
            }
            Answer::Embed(ok) => report.embeddings = Some(ok.vectors),
            Answer::Rerank(ok) => report.ranking = Some(ok.ranking),
        }
    }

    /// Why the route at chain position `idx` must be passed over right now, if it must.
    fn skip_reason(&self, walk: &Walk<'_>, idx: usize, notes: &mut Vec<String>) -> Option<Skip> {
        let spec = &walk.tier.routes[idx];
        let skip = |why, cause: Option<String>| {
            Some(Skip {
                route: spec.route.clone(),
                why,
                cause,
            })
        };
        if idx > 0 && !walk.opts.policy.approves_fallback(&spec.route) {
            return skip(SkipWhy::Unapproved, None);
        }
        let health = self.health_of(&spec.route, notes);
        match health.state_at(self.inner.clock.now_ms()) {
            HealthState::Ready => {}
            HealthState::Cooling => {
                return skip(SkipWhy::Cooling, health.reason().map(str::to_string))
            }
            HealthState::Retired => {
                return skip(SkipWhy::Retired, health.reason().map(str::to_string))
            }
        }
        cannot_serve(&spec.facts, &walk.needs).and_then(|why| skip(SkipWhy::Incapable, Some(why)))
    }

    /// The next route a fallback would reach: approved, neither cooling nor retired, able
    /// to serve, its breaker not open — and with a window larger than `larger_than` when
    /// given (rows 3a and 5).
    fn fallback_candidate(
        &self,
        walk: &Walk<'_>,
        now: UnixMs,
        larger_than: Option<u64>,
    ) -> Option<usize> {
        let mut needs = walk.needs;
        if let Some(w) = larger_than {
            needs.min_window = w;
        }
        walk.order[walk.pos + 1..].iter().copied().find(|&i| {
            let spec = &walk.tier.routes[i];
            (i == 0 || walk.opts.policy.approves_fallback(&spec.route))
                && self
                    .inner
                    .store
                    .get(&spec.route)
                    .map(|h| h.is_available(now))
                    .unwrap_or(true)
                && cannot_serve(&spec.facts, &needs).is_none()
                && larger_than.is_none_or(|w| spec.facts.context_window.is_some_and(|c| c > w))
                && !self.breaker_open(&spec.route, now)
        })
    }

    fn breaker_open(&self, route: &Route, now: UnixMs) -> bool {
        matches!(lock(&self.inner.breakers).get(route), Some(breaker::State::Open { until, .. }) if now < *until)
    }

    fn health_of(&self, route: &Route, notes: &mut Vec<String>) -> Health {
        self.inner.store.get(route).unwrap_or_else(|e| {
            // An unreadable store must not take traffic down: treat the route as ready.
            notes.push(e.to_string());
            Health::Ready
        })
    }

    /// Stores a new health; returns it for the trace when it differs from the old one.
    fn apply_health(
        &self,
        route: &Route,
        new: Health,
        notes: &mut Vec<String>,
    ) -> Option<HealthChange> {
        let old = self.health_of(route, notes);
        if old == new {
            return None;
        }
        if let Err(e) = self.inner.store.set(route, new.clone()) {
            notes.push(e.to_string());
        }
        Some(HealthChange::from(&new))
    }

    /// What the request has spent. On a virtual clock (chaos) time spent on sockets does
    /// not move the clock, so it is added here: the budget counts both.
    fn spent(&self, walk: &Walk<'_>, attempts: u32) -> Spent {
        let clock = &self.inner.clock;
        let socket_ms = if clock.is_virtual() {
            walk.socket_ms
        } else {
            0
        };
        Spent {
            attempts,
            elapsed_ms: elapsed(walk.start, clock.now_ms()).saturating_add(socket_ms),
            extra_cost_usd: walk.extra_cost_usd,
        }
    }
}

fn elapsed(start: UnixMs, now: UnixMs) -> u64 {
    now.saturating_sub(start).max(0) as u64
}

/// A short note on a failure for traces (at most 200 characters).
fn detail_of(f: &UpstreamFailure) -> Option<String> {
    let text = match (
        &f.malformed,
        f.error.as_ref().and_then(|e| e.message.as_deref()),
    ) {
        (Some(m), _) => m.as_str(),
        (None, Some(msg)) => msg,
        (None, None) => f.excerpt.as_str(),
    };
    if text.is_empty() {
        return None;
    }
    let cut = text.char_indices().nth(200).map_or(text.len(), |(i, _)| i);
    Some(text[..cut].to_string())
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync + Clone>() {}
    is::<Router>();
}
