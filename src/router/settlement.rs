//! Settlement: everything decided about one finished attempt — the action (by the
//! decision table), the route's new health (applied to the store as one atomic
//! transition), its breaker, the session's pin — and the attempt record.

use super::state::{lock, Reply, Router, Walk};
use crate::classify::classifier::Verdict;
use crate::classify::failure::UpstreamFailure;
use crate::core::answer::{Answer, RawAnswer};
use crate::core::clock::UnixMs;
use crate::core::request::Usage;
use crate::core::trace::{AttemptRecord, Chosen, HealthChange, Report, Step};
use crate::core::vocab::{Action, Class};
use crate::policy::breaker;
use crate::policy::capability::estimate_cost_usd;
use crate::policy::card::OnRefusal;
use crate::policy::decide::{decide, Decision, Situation};
use crate::policy::health::{is_route_fault, transition, Health, Transition};

/// What the classifier and the wire said about one attempt.
#[derive(Debug, Clone)]
pub struct Observed {
    pub verdict: Verdict,
    pub status: Option<u16>,
    pub request_id: Option<String>,
    pub detail: Option<String>,
    /// The upstream's own error code, when it sent one.
    pub code: Option<String>,
    pub latency_ms: u64,
    /// A stream already delivered a visible delta.
    pub visible_token: bool,
    pub tokens: Option<Usage>,
    /// Request fields the route's wire could not express.
    pub dropped: Vec<String>,
}

/// Why the attempt went to its route. `primary`: the route is the one the request
/// asked for first (chain position 0, or the member a first-step group drew first).
/// Pure.
fn chosen(retries_on_route: u32, trial: bool, sticky: bool, primary: bool) -> Chosen {
    if retries_on_route > 0 {
        Chosen::Retry
    } else if trial {
        Chosen::HalfOpenTrial
    } else if sticky {
        Chosen::SessionAffinity
    } else if primary {
        Chosen::Primary
    } else {
        Chosen::Fallback
    }
}

impl Router {
    /// Classifies nothing, decides everything about one finished attempt: the action,
    /// the route's new health, its breaker, and the attempt record. Only the store is
    /// awaited; the decision and the record are plain synchronous steps.
    pub(super) async fn settle(
        &self,
        walk: &mut Walk<'_>,
        report: &mut Report,
        seen: Observed,
    ) -> Decision {
        let now = self.inner.clock.now_ms();
        let idx = walk.current();
        if seen.verdict.class == Class::ContentPolicy {
            // A blocked prompt goes on only to the routes the card names for it (when it
            // names any): the fallback looked up below and every later step alike.
            walk.needs.blocked = true;
        }
        // The window an overflow moves past: the route's own, or, where the card names
        // the routes an overflow goes to, 0 when it is unknown (LiteLLM moves on to its
        // `context_window_fallbacks` whatever it knows of the windows).
        let window = (seen.verdict.class == Class::ContextOverflow)
            .then(|| {
                let own = walk.tier.routes[idx].facts.context_window;
                match walk.opts.policy.overflow_routes {
                    Some(_) => Some(own.unwrap_or(0)),
                    None => own,
                }
            })
            .flatten();
        // Row 1 ends an answered attempt whatever lies ahead, so no fallback is looked up
        // for it: a success reads the health of no other route.
        // A refusal the card delivers ends it too.
        let ends = seen.verdict.class == Class::Ok
            || (seen.verdict.class == Class::Refusal
                && walk.opts.policy.on_refusal == OnRefusal::Deliver);
        let next_fallback = if ends {
            None
        } else {
            self.fallback_candidate(walk, now, None, &mut report.notes)
                .await
        };
        let larger = match window {
            Some(w) => {
                self.fallback_candidate(walk, now, Some(w), &mut report.notes)
                    .await
            }
            None => None,
        };
        // The breaker first: an attempt that opens it must not be retried on the route it
        // just closed off (issue 9, item 12); the request moves to the fallback instead.
        let breaker_open_until = self
            .record_breaker(walk, report, seen.verdict.class, now)
            .await;
        // Row 4 needs it: whether the buckets would hold a retry on this route, and when.
        // Not for an answered attempt (row 1 ends it): with shared buckets that would be a
        // round trip to the store on every success.
        let retry_admission_ms = if ends {
            Some(0)
        } else {
            self.retry_admission_ms(walk).await
        };
        let (decision, cost_usd, target) = self.judge(
            walk,
            report,
            &seen,
            now,
            next_fallback,
            larger.is_some(),
            breaker_open_until.is_some(),
            retry_admission_ms,
        );
        let health = match target {
            Some(target) => self.store_health(walk, report, target).await,
            None => None,
        };
        self.record(
            walk,
            report,
            seen,
            decision,
            cost_usd,
            health,
            breaker_open_until,
        );
        decision
    }

    /// The decision for one attempt and the health it asks for. Pure but for the jitter
    /// draw.
    #[allow(clippy::too_many_arguments)]
    fn judge(
        &self,
        walk: &mut Walk<'_>,
        report: &Report,
        seen: &Observed,
        now: UnixMs,
        next_fallback: Option<usize>,
        larger_window_available: bool,
        breaker_opened: bool,
        retry_admission_ms: Option<u64>,
    ) -> (Decision, f64, Option<Health>) {
        let spec = &walk.tier.routes[walk.current()];
        let cost_usd = estimate_cost_usd(&spec.facts, &walk.needs);
        if !report.attempts.is_empty() {
            walk.extra_cost_usd += cost_usd;
        }
        let class = seen.verdict.class;
        let situation = Situation {
            class,
            path: walk.path,
            hint: seen.verdict.hint,
            policy: walk.opts.policy,
            spent: self.spent(walk, report.attempts.len() as u32 + 1),
            retries_on_route: walk.retries_on_route,
            visible_token: seen.visible_token,
            fallback_available: next_fallback.is_some(),
            larger_window_available,
            // A trial is never retried, and neither is a route whose breaker is now open.
            trial: walk.trial || breaker_opened,
            retry_cost_usd: cost_usd,
            fallback_cost_usd: next_fallback
                .map(|i| estimate_cost_usd(&walk.tier.routes[i].facts, &walk.needs))
                .unwrap_or(0.0),
            jitter: lock(&self.inner.rng).f64(),
            retry_admission_ms,
        };
        let decision = decide(&situation);
        if decision.action == Action::Fallback && class == Class::ContextOverflow {
            // Only a larger window may serve it now, and only a route that takes an
            // overflow: the walk passes over the rest, not just the fallback candidate.
            walk.needs.min_window = spec.facts.context_window.unwrap_or(0);
            walk.needs.overflowed = true;
        }
        let target = transition(
            class,
            decision.action,
            seen.verdict.hint,
            decision.wait_ms,
            spec.policy.cooldowns,
            now,
        );
        (decision, cost_usd, target)
    }

    /// Applies the transition toward `target` to the store; the change, for the trace.
    async fn store_health(
        &self,
        walk: &mut Walk<'_>,
        report: &mut Report,
        target: Health,
    ) -> Option<HealthChange> {
        let route = &walk.tier.routes[walk.current()].route;
        let answer = match self
            .inner
            .store
            .apply(route, Transition::toward(target))
            .now()
        {
            Ok(answer) => answer,
            Err(later) => later.await,
        };
        match answer {
            Ok((old, new)) => {
                let change = (old != new).then(|| HealthChange::from(&new));
                walk.snapshot.set_at(walk.pos, new);
                change
            }
            // An unwritable store must not take traffic down; the trace says so.
            Err(e) => {
                report.notes.push(e.to_string());
                None
            }
        }
    }

    /// Records the attempt on the route's breaker, in the store; when it opened the
    /// breaker, until when.
    async fn record_breaker(
        &self,
        walk: &Walk<'_>,
        report: &mut Report,
        class: Class,
        now: UnixMs,
    ) -> Option<UnixMs> {
        let spec = &walk.tier.routes[walk.current()];
        let cfg = spec.policy.breaker?;
        let op = breaker::Step::Record {
            trial: walk.trial,
            ok: !is_route_fault(class),
            now,
        };
        match self.inner.store.breaker(&spec.route, cfg, op).await {
            Ok(breaker::Answer::Recorded(opened)) => opened,
            Ok(breaker::Answer::Admit(_)) => None,
            Err(e) => {
                report.notes.push(e.to_string());
                None
            }
        }
    }

    /// The session pin and the attempt record.
    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        walk: &mut Walk<'_>,
        report: &mut Report,
        seen: Observed,
        decision: Decision,
        cost_usd: f64,
        health: Option<HealthChange>,
        breaker_open_until: Option<UnixMs>,
    ) {
        let idx = walk.current();
        let spec = &walk.tier.routes[idx];
        let class = seen.verdict.class;
        if class == Class::Ok {
            if let Some(session) = walk.opts.session {
                let now = self.inner.clock.now_ms();
                self.inner.sessions.put(session, &spec.route, now);
            }
        }
        if report.attempts.len() == report.attempts.capacity() {
            report.attempts.reserve(walk.tier.routes.len() + 2);
        }
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
            code: seen.code,
            workflow: walk.opts.workflow.map(str::to_string),
            requested_route: walk.tier.routes[walk.primary].route.clone(),
            chosen: chosen(
                walk.retries_on_route,
                walk.trial,
                walk.sticky == Some(idx),
                idx == walk.primary,
            ),
            dropped: seen.dropped,
            tokens: seen.tokens,
            cost_usd,
            breaker_open_until,
        });
        if let Some(observe) = walk.opts.observer {
            observe(Step::Attempt(report.attempts.last().expect("just pushed")));
        }
        walk.last_why = Some(decision.why);
    }

    /// The answer of the reply that ended the request; the report notes who served.
    /// The answer of the reply that ended the request, given by the route at chain
    /// position `at`; the report notes who served.
    pub(super) fn answered(
        &self,
        walk: &Walk<'_>,
        report: &mut Report,
        at: usize,
        reply: Reply,
    ) -> Answer {
        let spec = &walk.tier.routes[at];
        report.served_by = Some(spec.route.clone());
        let wire = spec.endpoint.wire;
        let usage = reply.usage();
        match reply {
            Reply::Chat(ok) => {
                report.text = Some(
                    crate::core::answer::shown_text(&ok.text, ok.refusal.as_deref()).to_string(),
                );
                Answer {
                    text: ok.text,
                    tool_calls: ok.tool_calls,
                    finish_reason: ok.finish_reason,
                    model: ok.model,
                    usage,
                    raw: ok.raw.map(|bytes| Box::new(RawAnswer { wire, bytes })),
                    refusal: ok.refusal,
                    reasoning: ok.reasoning,
                    more_choices: ok.more_choices,
                    ..Answer::default()
                }
            }
            // The text went out as it arrived; the report holds it.
            Reply::Stream(ok) => Answer {
                text: report.text.get_or_insert_with(String::new).clone(),
                tool_calls: ok.tool_calls,
                finish_reason: ok.finish_reason,
                model: ok.model,
                usage,
                refusal: ok.refusal,
                ..Answer::default()
            },
            Reply::Embed(ok) => Answer {
                embeddings: Some(ok.vectors),
                usage,
                raw: ok.raw.map(|bytes| Box::new(RawAnswer { wire, bytes })),
                ..Answer::default()
            },
            Reply::Rerank(ok) => Answer {
                ranking: Some(ok.ranking),
                usage,
                raw: ok.raw.map(|bytes| Box::new(RawAnswer { wire, bytes })),
                ..Answer::default()
            },
        }
    }
}

/// A short note on a failure for traces (at most 200 characters).
pub(super) fn detail_of(f: &UpstreamFailure) -> Option<String> {
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
    // Masked before it is cut, so no part of a key survives as a fragment: a message may
    // quote a key that is not one of ours (the one it refused), and the trace reaches
    // walk, probe and chaos output.
    let text = crate::core::secret::mask_key_shaped(text);
    // At most 200 bytes is at most 200 characters: no need to walk them (the hot path
    // of a failing walk notes every failure).
    let cut = if text.len() <= 200 {
        text.len()
    } else {
        text.char_indices().nth(200).map_or(text.len(), |(i, _)| i)
    };
    Some(text[..cut].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards a key in a trace: an upstream that quotes the key it refused (not one the
    /// config registered) reached walk, probe and chaos output whole.
    #[test]
    fn a_key_quoted_in_an_upstream_message_is_masked_in_the_trace() {
        let body = br#"{"error":{"message":"Incorrect API key provided: sk-proj-abcdEFGH1234ijkl. You can find your API key at https://platform.openai.com.","type":"invalid_request_error","code":"invalid_api_key"}}"#;
        let f =
            UpstreamFailure::from_response(401, crate::classify::failure::Headers::default(), body);
        let d = detail_of(&f).unwrap();
        assert!(d.contains("sk-***") && !d.contains("abcdEFGH"), "{d}");
    }

    #[test]
    fn chosen_names_why_the_route_was_tried() {
        assert_eq!(chosen(1, true, true, true), Chosen::Retry);
        assert_eq!(chosen(0, true, true, true), Chosen::HalfOpenTrial);
        assert_eq!(chosen(0, false, true, false), Chosen::SessionAffinity);
        assert_eq!(chosen(0, false, false, true), Chosen::Primary);
        assert_eq!(chosen(0, false, false, false), Chosen::Fallback);
    }
}
