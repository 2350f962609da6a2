//! `Router::call`: the only loop. It selects a route, calls the wire, settles the
//! attempt (classify, decide, transition) and waits through the clock, until the
//! request is answered or nothing is left to try.

use super::settlement::{self, Observed};
use super::snapshot::Snapshot;
use super::state::{
    lock, no_events, spent_by, Asked, Attempted, CallOptions, Called, Held, Reply, Router, Walk,
};
use crate::classify::classifier::{classify, Verdict};
use crate::classify::failure::UpstreamFailure;
use crate::config::route::{RouteSpec, Tier};
use crate::core::answer::{Answer, StreamEvent};
use crate::core::clock::{Stopwatch, UnixMs};
use crate::core::outcome::{failure_reason, outcome_of};
use crate::core::request::{Needs, Request, Usage};
use crate::core::trace::{Report, SkipWhy};
use crate::core::vocab::{Action, CallPath, Class, Outcome, Route, Why};
use crate::policy::budget::Spent;
use crate::policy::card::SafeReplay;
use crate::policy::decide::when_nothing_left;
use crate::wire;
use std::sync::Mutex;

impl Router {
    /// Sends one request of any path down `tier`.
    ///
    /// - Chat: with a JSON schema, an answer that does not satisfy it is rejected
    ///   (`invalid_output`) and the next route is asked.
    /// - Stream: each delta reaches `opts.on_event` as it arrives. Routes change only
    ///   before the first visible delta; after it a failure ends the request
    ///   `interrupted` with exactly the text already delivered. Under
    ///   `safe_replay_until: buffered` the deltas are held until the upstream completes,
    ///   so a mid-stream failure can still move to another route, unseen.
    /// - Rerank is an optimisation: when no route can answer, the outcome is `degraded`
    ///   and the answer's ranking is the recall order, unchanged.
    pub async fn call(&self, tier: &Tier, req: &Request, opts: CallOptions<'_>) -> Called {
        let mut called = self.call_tier(tier, req, opts).await;
        // Nothing admitted it in time, or no bucket of the chain could ever hold it
        // (`too_large`): either way nothing of this tier admits it.
        let unadmitted = called.report.outcome == Outcome::Shed
            || called.report.reason == Some(crate::core::vocab::Reason::TooLarge);
        if unadmitted {
            if let Some(small) = opts.degrade_tier {
                // The card's degrade tier (a smaller or cheaper model) is offered the
                // request instead, through admission like any call (decisions.md).
                let lesser = CallOptions {
                    degrade_tier: None,
                    ..opts
                };
                let second = self.call_tier(small, req, lesser).await;
                called = degraded(called, second);
            }
        }
        if called.report.outcome == Outcome::Shed {
            // Counted per priority class and per route that refused it.
            for skip in &called.report.skipped {
                if skip.why == SkipWhy::Admission {
                    match &self.inner.shared {
                        Some(shared) => {
                            let now = self.inner.clock.now_ms();
                            shared.record_shed(opts.priority, &skip.route, now).await
                        }
                        None => self.inner.buckets.record_shed(opts.priority, &skip.route),
                    }
                }
            }
        }
        called
    }

    /// One request down one tier.
    async fn call_tier(&self, tier: &Tier, req: &Request, opts: CallOptions<'_>) -> Called {
        let client = &self.client;
        match req {
            Request::Chat(chat) => {
                let schema = chat.json_schema.as_ref();
                self.run(
                    tier,
                    CallPath::Chat,
                    req.needs(),
                    Asked::Chat(chat),
                    opts,
                    |spec, left| async move {
                        let ep = spec.endpoint.within(left);
                        let result = wire::chat(client, &ep, spec.route.model(), chat).await;
                        match result {
                            // A refusal is never validated: it is an answer, not one that
                            // claims to satisfy the schema (fidelity.md §4).
                            Ok(ok) if ok.refusal.is_some() => Ok(Reply::Chat(ok)),
                            Ok(ok) => {
                                let text = || {
                                    schema.and_then(|s| {
                                        crate::policy::validate::answer_violation(
                                            s,
                                            &ok.text,
                                            &ok.tool_calls,
                                        )
                                    })
                                };
                                let calls = || {
                                    crate::policy::validate::call_violation(
                                        &chat.tools,
                                        &ok.tool_calls,
                                    )
                                };
                                match text().or_else(calls) {
                                    Some(why) => {
                                        Err(crate::policy::validate::rejected(&ok.headers, why))
                                    }
                                    None => Ok(Reply::Chat(ok)),
                                }
                            }
                            Err(f) => Err(f),
                        }
                        .into()
                    },
                )
                .await
            }
            Request::Stream(chat) => {
                let on_event = opts.on_event.unwrap_or(&no_events);
                let buffered = opts.policy.safe_replay_until == SafeReplay::Buffered;
                let keep = opts.keep_stream_text;
                let buckets = &self.inner.buckets;
                self.run(
                    tier,
                    CallPath::Stream,
                    req.needs(),
                    Asked::Chat(chat),
                    opts,
                    |spec, left| async move {
                        let model = spec.route.model();
                        let ep = spec.endpoint.within(left);
                        // The usage is asked of a same-wire stream only where a token
                        // bucket is settled with it (fidelity.md §1).
                        let settle = buckets
                            .cover(&spec.route)
                            .is_some_and(|c| c.counts_tokens());
                        // A route whose wire has no form of its own for the response
                        // format or a strict tool is held to them by validation
                        // (fidelity.md §3), and an answer can only be checked whole: its
                        // stream is held, so one that fails moves on to the next route
                        // unseen, as an unstreamed one does.
                        let checked =
                            chat.json_schema.is_some() || chat.tools.iter().any(|t| t.strict);
                        let validates = checked && !spec.endpoint.wire.has_native_output_contract();
                        if !buffered && !validates {
                            let a = wire::stream::stream_chat_settling(
                                client, &ep, model, chat, on_event, keep, settle,
                            )
                            .await;
                            return Attempted {
                                result: a.result.map(Reply::Stream),
                                delivered: a.delivered,
                                visible: a.visible,
                            };
                        }
                        let held = Mutex::new(Vec::<Held>::new());
                        let hold = |ev: StreamEvent<'_>| lock(&held).push(Held::of(ev));
                        let a = wire::stream::stream_chat_settling(
                            client, &ep, model, chat, &hold, true, settle,
                        )
                        .await;
                        // Held whole, the answer can be checked as an unstreamed one is
                        // (fidelity.md §3), and a failing one moves on unseen; a refusal
                        // is an answer, never checked (§4).
                        let violation = match &a.result {
                            Ok(ok) if ok.refusal.is_none() => chat
                                .json_schema
                                .as_ref()
                                .and_then(|s| {
                                    crate::policy::validate::answer_violation(
                                        s,
                                        &a.delivered,
                                        &ok.tool_calls,
                                    )
                                })
                                .or_else(|| {
                                    crate::policy::validate::call_violation(
                                        &chat.tools,
                                        &ok.tool_calls,
                                    )
                                })
                                .map(|why| crate::policy::validate::rejected(&ok.headers, why)),
                            _ => None,
                        };
                        if let Some(rejected) = violation {
                            return Attempted::from(Err(rejected));
                        }
                        match a.result {
                            Ok(ok) => {
                                for ev in lock(&held).iter() {
                                    ev.replay(on_event);
                                }
                                Attempted {
                                    result: Ok(Reply::Stream(ok)),
                                    delivered: a.delivered,
                                    visible: a.visible,
                                }
                            }
                            // Nothing reached the caller: the failure is one before the first token.
                            Err(f) => Attempted::from(Err(f)),
                        }
                    },
                )
                .await
            }
            Request::Embed(embed) => {
                self.run(
                    tier,
                    CallPath::Embed,
                    req.needs(),
                    Asked::Embed(embed),
                    opts,
                    |spec, left| async move {
                        let ep = spec.endpoint.within(left);
                        wire::embed(client, &ep, spec.route.model(), embed)
                            .await
                            .map(Reply::Embed)
                            .into()
                    },
                )
                .await
            }
            Request::Rerank(rerank) => {
                let mut called = self
                    .run(
                        tier,
                        CallPath::Rerank,
                        req.needs(),
                        Asked::Whole,
                        opts,
                        |spec, left| async move {
                            let ep = spec.endpoint.within(left);
                            wire::rerank(client, &ep, spec.route.model(), rerank)
                                .await
                                .map(Reply::Rerank)
                                .into()
                        },
                    )
                    .await;
                if called.report.outcome == Outcome::Degraded {
                    called.answer = Some(Answer {
                        ranking: Some((0..rerank.documents.len()).take(rerank.top_n).collect()),
                        ..Answer::default()
                    });
                }
                called
            }
        }
    }

    /// Whether any route of `tier` is ready now (the embedding queue re-offers batches
    /// only then).
    pub async fn any_ready(&self, tier: &Tier) -> bool {
        let now = self.inner.clock.now_ms();
        let routes: Vec<&Route> = tier.routes.iter().map(|s| &s.route).collect();
        let mut all = Vec::with_capacity(routes.len());
        match self.inner.store.get_many(&routes, &mut all).await {
            Ok(()) => all.iter().any(|h| h.is_available(now)),
            // An unreadable store must not hold batches back for ever.
            Err(_) => true,
        }
    }

    /// The route a session is pinned to, if any.
    pub async fn session_route(&self, session: &str) -> Option<Route> {
        let now = self.inner.clock.now_ms();
        self.inner.sessions.get(session, now).await
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
            Asked::Whole,
            opts,
            |_spec, _left| {
                let result = match lock(&results).next() {
                    Some(Ok(())) | None => Ok(Reply::Chat(wire::ChatSuccess {
                        text: String::new(),
                        tool_calls: Vec::new(),
                        finish_reason: None,
                        model: None,
                        usage: Usage::default(),
                        request_id: None,
                        headers: Default::default(),
                        raw: None,
                        refusal: None,
                        reasoning: None,
                        more_choices: Vec::new(),
                    })),
                    Some(Err(f)) => Err(f),
                };
                std::future::ready(Attempted::from(result))
            },
        )
        .await
        .report
    }

    /// The chain walk shared by every path; `call` makes one upstream call.
    async fn run<'s, F, Fut>(
        &self,
        tier: &'s Tier,
        path: CallPath,
        needs: Needs,
        asked: Asked<'s>,
        opts: CallOptions<'s>,
        call: F,
    ) -> Called
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
            // Most requests make one attempt and skip nothing: room for one record, a
            // small block. Records are large, so the second attempt reserves for the
            // whole chain at once (`record`) and a walk moves them once, not at every
            // doubling; the first skip does the same (`emit_skip`).
            attempts: Vec::with_capacity(1),
            skipped: Vec::new(),
            waits_ms: Vec::new(),
            queued_ms: 0,
            elapsed_ms: 0,
            notes: Vec::new(),
        };
        let (order, sticky, primary) = self.order(tier, opts.session, start).await;
        let mut walk = Walk {
            tier,
            path,
            opts,
            needs,
            asked,
            start,
            order,
            pos: 0,
            sticky,
            primary,
            retries_on_route: 0,
            trial: false,
            extra_cost_usd: 0.0,
            last_why: None,
            last_refusal: None,
            socket_ms: 0,
            snapshot: Snapshot::default(),
            reservation: None,
            refused: Vec::new(),
            ticket: None,
            queued_ms: 0,
        };

        let mut answer = None;
        let mut ended = false;
        'chain: loop {
            if !self.next_route(&mut walk, &mut report).await {
                // Nothing left to call. When admission refused some route, the request
                // may wait in the local queue for it; else the chain is done.
                let made = report.attempts.len() as u32;
                if !walk.refused.is_empty() && self.queue_for_admission(&mut walk, made).await {
                    continue 'chain;
                }
                break 'chain;
            }
            loop {
                let spent = self.spent(&walk, report.attempts.len() as u32);
                if !spent.allows(walk.opts.policy, 0, 0.0) {
                    self.release_admission(&mut walk).await;
                    walk.last_why = Some(Why::BudgetSpent);
                    break 'chain;
                }
                let spec = &tier.routes[walk.current()];
                let sw = Stopwatch::start();
                // The attempt may take no longer than what is left of the budget.
                let left = spent.time_left_ms(walk.opts.policy);
                // A group member's call counts as in flight while it runs.
                let busy = tier
                    .group_of(walk.current())
                    .map(|_| self.inner.in_flight.enter(&spec.route));
                if let Some(calls) = walk.opts.calls {
                    calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                if let Some(calling) = walk.opts.calling {
                    calling(&spec.route);
                }
                let Attempted {
                    result,
                    delivered,
                    visible,
                } = call(spec, left).await;
                drop(busy);
                let latency_ms = sw.elapsed_ms();
                walk.socket_ms += latency_ms;
                if visible {
                    // Only one attempt can ever deliver: after it, no route changes.
                    report.text = Some(delivered);
                    report.served_by = Some(spec.route.clone());
                }
                let headers = match &result {
                    Ok(reply) => reply.headers(),
                    Err(f) => &f.headers,
                };
                self.settle_admission(&mut walk, spent_by(&result), headers)
                    .await;
                let now = clock.now_ms();
                let dropped = walk.asked.carry(&spec.endpoint).unwrap_or_default();
                let observed = match &result {
                    Ok(reply) => Observed {
                        verdict: Verdict {
                            class: if reply.is_refusal() {
                                Class::Refusal
                            } else {
                                Class::Ok
                            },
                            hint: None,
                        },
                        status: Some(200),
                        request_id: reply.request_id(),
                        detail: reply.detail(),
                        code: None,
                        latency_ms,
                        visible_token: visible,
                        tokens: reply.usage(),
                        dropped,
                    },
                    Err(f) => Observed {
                        verdict: classify(spec.endpoint.dialect, f, now),
                        status: f.status,
                        request_id: f.headers.request_id().map(str::to_string),
                        detail: settlement::detail_of(f),
                        code: f.error.as_ref().and_then(|e| e.code.clone()),
                        latency_ms,
                        visible_token: visible,
                        tokens: None,
                        dropped,
                    },
                };
                let decision = self.settle(&mut walk, &mut report, observed).await;
                match decision.action {
                    Action::Retry => {
                        let wait = decision.wait_ms.unwrap_or(0);
                        report.waits_ms.push(wait);
                        clock.sleep(wait).await;
                        walk.retries_on_route += 1;
                        // The retry is an upstream call: it needs admission, checked
                        // after its wait, and never queues.
                        let pos = walk.pos;
                        if !self.admit(&mut walk, &mut report, pos).await {
                            walk.refused.pop();
                            walk.pos += 1;
                            continue 'chain;
                        }
                    }
                    Action::Fallback => {
                        // A refusal moved past under `on_refusal: fallback` is kept: if
                        // nothing after it answers, it is the answer after all.
                        if let Ok(reply) = result {
                            walk.last_refusal = Some((walk.current(), reply));
                        }
                        walk.pos += 1;
                        continue 'chain;
                    }
                    action => {
                        if let Ok(reply) = result {
                            let at = walk.current();
                            answer = Some(self.answered(&walk, &mut report, at, reply));
                        }
                        report.outcome = outcome_of(action);
                        if decision.left_nothing() {
                            // The request ended because no approved live route was left:
                            // the routes after this one were passed over.
                            self.pass_over_rest(&mut walk, &mut report).await;
                        }
                        ended = true;
                        break 'chain;
                    }
                }
            }
        }

        let failed = !ended || report.outcome == Outcome::Failed;
        if let (true, Some((at, reply))) = (failed, walk.last_refusal.take()) {
            // Row 2a: after `on_refusal: fallback` moved past a refusal, the chain ran
            // out (or what came after failed): the last refusal is the answer.
            answer = Some(self.answered(&walk, &mut report, at, reply));
            report.outcome = Outcome::Success;
            report.reason = None;
            report
                .notes
                .push("the chain ran out: the last refusal is the answer".into());
            ended = true;
        }
        if !ended {
            // The chain ran out (or the budget did) without a decision that ends the
            // request: a route that admission refused sheds it; else row 6 answers.
            let action = if walk.last_why == Some(Why::BudgetSpent) {
                Action::FailClosed
            } else if !walk.refused.is_empty() {
                Action::Shed
            } else {
                when_nothing_left(path, walk.opts.policy)
            };
            report.outcome = outcome_of(action);
            if action == Action::Shed {
                report.reason = Some(crate::core::vocab::Reason::Admission);
            }
        }
        if report.outcome == Outcome::Failed {
            let failures: Vec<Class> = report
                .attempts
                .iter()
                .map(|a| a.class)
                .filter(|c| !matches!(c, Class::Ok | Class::Refusal))
                .collect();
            let causes: Vec<(SkipWhy, Option<&str>)> = report
                .skipped
                .iter()
                .map(|s| (s.why, s.cause.as_deref()))
                .collect();
            let last = report.attempts.last().map(|a| a.class);
            report.reason = Some(failure_reason(walk.last_why, last, &failures, &causes));
        }
        report.queued_ms = walk.queued_ms;
        report.elapsed_ms = elapsed(start, clock.now_ms());
        if !matches!(report.outcome, Outcome::Success | Outcome::Degraded) {
            answer = None;
        }
        Called { answer, report }
    }

    /// What the request has spent. On a virtual clock (chaos) time spent on sockets does
    /// not move the clock, so it is added here: the budget counts both.
    pub(super) fn spent(&self, walk: &Walk<'_>, attempts: u32) -> Spent {
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

/// The request as its degrade tier answered it, after admission shed it on its own
/// tier: one trace of both walks. A success there is `degraded`.
pub(super) fn degraded(shed: Called, second: Called) -> Called {
    let mut report = shed.report;
    let next = second.report;
    let offset = report.attempts.len() as u32;
    report
        .attempts
        .extend(next.attempts.into_iter().map(|mut a| {
            a.index += offset;
            a
        }));
    for skip in next.skipped {
        if !report
            .skipped
            .iter()
            .any(|s| s.route == skip.route && s.why == skip.why)
        {
            report.skipped.push(skip);
        }
    }
    report.waits_ms.extend(next.waits_ms);
    report.notes.extend(next.notes);
    report.queued_ms += next.queued_ms;
    report.elapsed_ms += next.elapsed_ms;
    report.served_by = next.served_by;
    report.text = next.text;
    report.outcome = match next.outcome {
        Outcome::Success => Outcome::Degraded,
        other => other,
    };
    report.reason = next.reason;
    Called {
        answer: second.answer,
        report,
    }
}

pub(super) fn elapsed(start: UnixMs, now: UnixMs) -> u64 {
    now.saturating_sub(start).max(0) as u64
}

#[allow(dead_code)]
pub(super) fn _assert_send_sync() {
    fn is<T: Send + Sync + Clone>() {}
    is::<Router>();
}
