//! The router: the only loop, and the only retry layer. It walks a tier, skips routes
//! that are cooling, retired or unapproved, calls the wire, and for each attempt asks
//! `classify`, `decide` and `transition` — pure functions — then carries out the
//! decision: wait through the injected clock, move on, or end the request. It never
//! decides anything itself. `Router` is `Send + Sync` and cheap to clone: every request
//! through one router shares its health.

use crate::budget::Spent;
use crate::classify::{classify, Verdict};
use crate::clock::{Clock, Stopwatch, UnixMs};
use crate::decide::{decide, when_nothing_left, Situation, Why};
use crate::failure::UpstreamFailure;
use crate::health::{transition, Health};
use crate::outcome::{failure_reason, outcome_of};
use crate::policy::Policy;
use crate::request::{ChatRequest, EmbedRequest, RerankRequest};
use crate::store::HealthStore;
use crate::trace::{AttemptRecord, HealthChange, Report, Skip, SkipWhy, Step};
use crate::vocab::{Action, CallPath, Class, Outcome, Route};
use crate::wire::{self, Endpoint};
use std::sync::{Arc, Mutex};

/// One route of a tier, resolved: the route and the endpoint that serves it.
#[derive(Debug, Clone)]
pub struct RouteSpec {
    pub route: Route,
    pub endpoint: Arc<Endpoint>,
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
    /// Called for every attempt and skip as it happens (`walk` prints them live).
    pub observer: Option<&'a (dyn Fn(Step<'_>) + Send + Sync)>,
}

impl<'a> CallOptions<'a> {
    pub fn new(policy: &'a Policy) -> Self {
        CallOptions {
            policy,
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
        *r.inner.rng.lock().unwrap_or_else(|p| p.into_inner()) = fastrand::Rng::with_seed(seed);
        r
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    pub fn store(&self) -> &Arc<dyn HealthStore> {
        &self.inner.store
    }

    /// Sends a chat request down `tier`.
    pub async fn chat(&self, tier: &Tier, req: &ChatRequest, opts: CallOptions<'_>) -> Report {
        let client = &self.inner.client;
        self.run(tier, CallPath::Chat, opts, |spec| async move {
            wire::chat(client, &spec.endpoint, spec.route.model(), req)
                .await
                .map(Answer::Chat)
                .into()
        })
        .await
    }

    /// Streams a chat answer down `tier`: each piece of visible text reaches `on_delta`
    /// as it arrives. Routes change only before the first visible token; after it a
    /// failure ends the request `interrupted` with exactly the text already delivered.
    pub async fn stream(
        &self,
        tier: &Tier,
        req: &ChatRequest,
        opts: CallOptions<'_>,
        on_delta: &(dyn Fn(&str) + Send + Sync),
    ) -> Report {
        let client = &self.inner.client;
        self.run(tier, CallPath::Stream, opts, |spec| async move {
            let a = wire::stream::stream_chat(
                client,
                &spec.endpoint,
                spec.route.model(),
                req,
                on_delta,
            )
            .await;
            Attempted {
                result: a.result.map(Answer::Stream),
                delivered: a.delivered,
            }
        })
        .await
    }

    /// Embeds a batch down `tier`; the vectors are in `Report::embeddings`.
    pub async fn embed(&self, tier: &Tier, req: &EmbedRequest, opts: CallOptions<'_>) -> Report {
        let client = &self.inner.client;
        self.run(tier, CallPath::Embed, opts, |spec| async move {
            wire::embed(client, &spec.endpoint, spec.route.model(), req)
                .await
                .map(Answer::Embed)
                .into()
        })
        .await
    }

    /// Reranks candidates down `tier`; the order is in `Report::ranking`. Rerank is an
    /// optimisation: when no route can answer, the outcome is `degraded` and the ranking
    /// is the recall order, unchanged.
    pub async fn rerank(&self, tier: &Tier, req: &RerankRequest, opts: CallOptions<'_>) -> Report {
        let client = &self.inner.client;
        let mut report = self
            .run(tier, CallPath::Rerank, opts, |spec| async move {
                wire::rerank(client, &spec.endpoint, spec.route.model(), req)
                    .await
                    .map(Answer::Rerank)
                    .into()
            })
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

    /// The chain walk shared by every path; `call` makes one upstream call.
    async fn run<'s, F, Fut>(
        &self,
        tier: &'s Tier,
        path: CallPath,
        opts: CallOptions<'_>,
        call: F,
    ) -> Report
    where
        F: Fn(&'s RouteSpec) -> Fut,
        Fut: std::future::Future<Output = Attempted>,
    {
        let clock = &self.inner.clock;
        let policy = opts.policy;
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
            attempts: Vec::new(),
            skipped: Vec::new(),
            waits_ms: Vec::new(),
            elapsed_ms: 0,
            notes: Vec::new(),
        };
        let emit = |step: Step<'_>| {
            if let Some(observe) = opts.observer {
                observe(step);
            }
        };

        let mut last_why: Option<Why> = None;
        let mut ended = false;
        let mut idx = 0;
        'chain: while idx < tier.routes.len() {
            let spec = &tier.routes[idx];
            let now = clock.now_ms();
            if let Some(skip) = self.skip_reason(spec, idx, policy, now, &mut report.notes) {
                report.skipped.push(skip);
                emit(Step::Skipped(report.skipped.last().expect("just pushed")));
                idx += 1;
                continue;
            }
            let mut retries_on_route = 0;
            loop {
                let spent = self.spent(start, report.attempts.len() as u32);
                if !spent.allows(policy, 0, 0.0) {
                    last_why = Some(Why::BudgetSpent);
                    break 'chain;
                }
                let sw = Stopwatch::start();
                let Attempted { result, delivered } = call(spec).await;
                let latency_ms = sw.elapsed_ms();
                let now = clock.now_ms();
                let visible_token = !delivered.is_empty();
                if visible_token {
                    // Only one attempt can ever deliver text: after it, no route changes.
                    report.text = Some(delivered);
                    report.served_by = Some(spec.route.clone());
                }
                let (verdict, status, request_id, detail) = match &result {
                    Ok(answer) => (
                        Verdict {
                            class: Class::Ok,
                            hint: None,
                        },
                        Some(200),
                        answer.request_id(),
                        None,
                    ),
                    Err(f) => (
                        classify(spec.endpoint.dialect, f, now),
                        f.status,
                        f.headers.request_id().map(str::to_string),
                        detail_of(f),
                    ),
                };
                let spent = self.spent(start, report.attempts.len() as u32 + 1);
                let situation = Situation {
                    class: verdict.class,
                    path,
                    hint: verdict.hint,
                    policy,
                    spent,
                    retries_on_route,
                    visible_token,
                    fallback_available: self.fallback_available(tier, idx, policy, now),
                    next_cost_usd: 0.0,
                    jitter: self.jitter(),
                };
                let decision = decide(&situation);
                let new_health = transition(
                    verdict.class,
                    decision.action,
                    verdict.hint,
                    decision.wait_ms,
                    spec.endpoint.cooldowns,
                    now,
                );
                let health =
                    new_health.and_then(|h| self.apply_health(&spec.route, h, &mut report.notes));
                report.attempts.push(AttemptRecord {
                    index: report.attempts.len() as u32 + 1,
                    route: spec.route.clone(),
                    status,
                    class: verdict.class,
                    action: decision.action,
                    wait_ms: decision.wait_ms,
                    health,
                    latency_ms,
                    request_id,
                    hint_ms: verdict.hint.map(|h| h.ms),
                    row: decision.row,
                    detail,
                });
                emit(Step::Attempt(report.attempts.last().expect("just pushed")));
                last_why = Some(decision.why);

                match decision.action {
                    Action::Retry => {
                        let wait = decision.wait_ms.unwrap_or(0);
                        report.waits_ms.push(wait);
                        clock.sleep(wait).await;
                        retries_on_route += 1;
                    }
                    Action::Fallback => {
                        idx += 1;
                        continue 'chain;
                    }
                    action => {
                        if let Ok(answer) = result {
                            report.served_by = Some(spec.route.clone());
                            match answer {
                                Answer::Chat(ok) => {
                                    report.text = Some(ok.text);
                                    report.usage = Some(ok.usage);
                                }
                                Answer::Stream(ok) => {
                                    // The text went out as it arrived; `delivered` holds it.
                                    report.text.get_or_insert_with(String::new);
                                    report.usage = ok.usage;
                                }
                                Answer::Embed(ok) => {
                                    report.embeddings = Some(ok.vectors);
                                    report.usage = Some(ok.usage);
                                }
                                Answer::Rerank(ok) => {
                                    report.ranking = Some(ok.ranking);
                                    report.usage = Some(ok.usage);
                                }
                            }
                        }
                        report.outcome = outcome_of(action);
                        if decision.row == 6 {
                            // Row 6 ended the request because no approved live route was
                            // left: the routes after this one were passed over.
                            let now = clock.now_ms();
                            for (later_idx, later) in tier.routes.iter().enumerate().skip(idx + 1) {
                                if let Some(skip) = self.skip_reason(
                                    later,
                                    later_idx,
                                    policy,
                                    now,
                                    &mut report.notes,
                                ) {
                                    report.skipped.push(skip);
                                    emit(Step::Skipped(
                                        report.skipped.last().expect("just pushed"),
                                    ));
                                }
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
            let action = if last_why == Some(Why::BudgetSpent) {
                Action::FailClosed
            } else {
                when_nothing_left(path, policy)
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
            let causes: Vec<Option<&str>> = report
                .skipped
                .iter()
                .filter(|s| s.why != SkipWhy::Unapproved)
                .map(|s| s.cause.as_deref())
                .collect();
            let last = report.attempts.last().map(|a| a.class);
            report.reason = Some(failure_reason(last_why, last, &failures, &causes));
        }
        report.elapsed_ms = elapsed(start, clock.now_ms());
        report
    }

    /// Why `spec` must be passed over right now, if it must.
    fn skip_reason(
        &self,
        spec: &RouteSpec,
        idx: usize,
        policy: &Policy,
        now: UnixMs,
        notes: &mut Vec<String>,
    ) -> Option<Skip> {
        if idx > 0 && !policy.approves_fallback(&spec.route) {
            return Some(Skip {
                route: spec.route.clone(),
                why: SkipWhy::Unapproved,
                cause: None,
            });
        }
        let health = self.health_of(&spec.route, notes);
        let why = match health.state_at(now) {
            crate::vocab::HealthState::Ready => return None,
            crate::vocab::HealthState::Cooling => SkipWhy::Cooling,
            crate::vocab::HealthState::Retired => SkipWhy::Retired,
        };
        Some(Skip {
            route: spec.route.clone(),
            why,
            cause: health.reason().map(str::to_string),
        })
    }

    /// Row 5's question: does an approved route that is neither cooling nor retired
    /// remain after position `idx`?
    fn fallback_available(&self, tier: &Tier, idx: usize, policy: &Policy, now: UnixMs) -> bool {
        tier.routes[idx + 1..].iter().any(|spec| {
            policy.approves_fallback(&spec.route)
                && self
                    .inner
                    .store
                    .get(&spec.route)
                    .map(|h| h.is_available(now))
                    .unwrap_or(true)
        })
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

    fn spent(&self, start: UnixMs, attempts: u32) -> Spent {
        Spent {
            attempts,
            elapsed_ms: elapsed(start, self.inner.clock.now_ms()),
            extra_cost_usd: 0.0,
        }
    }

    fn jitter(&self) -> f64 {
        self.inner
            .rng
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .f64()
    }
}

fn elapsed(start: UnixMs, now: UnixMs) -> u64 {
    now.saturating_sub(start).max(0) as u64
}

/// A short note on a failure for traces.
fn detail_of(f: &UpstreamFailure) -> Option<String> {
    let text = match (
        &f.malformed,
        f.error.as_ref().and_then(|e| e.message.clone()),
    ) {
        (Some(m), _) => m.clone(),
        (None, Some(msg)) => msg,
        (None, None) => f.excerpt.clone(),
    };
    let text: String = text.chars().take(200).collect();
    (!text.is_empty()).then_some(text)
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync + Clone>() {}
    is::<Router>();
}
