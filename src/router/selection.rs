//! Selection: which route a request tries next. Reads the health of the routes still
//! ahead once per selection (a snapshot), then passes over the cooling, retired,
//! unapproved, incapable and breaker-blocked ones, recording each skip.

use super::{lock, Router, Walk};
use crate::breaker::{self, Admit};
use crate::capability::cannot_serve;
use crate::clock::UnixMs;
use crate::health::Health;
use crate::route::Tier;
use crate::trace::{Report, Skip, SkipWhy, Step};
use crate::vocab::{HealthState, Route};

/// The health of the routes ahead, each read from the store at most once per selection:
/// `health[i]` is the route at try-order position `from + i`, `None` until it is needed.
/// Read on demand rather than all at once, so that a walk down a long chain stays linear.
#[derive(Debug, Default)]
pub(super) struct Snapshot {
    from: usize,
    health: Vec<Option<Health>>,
}

impl Snapshot {
    /// The health of the route at try-order position `pos` (ready when never read).
    pub(super) fn at(&self, pos: usize) -> &Health {
        const READY: Health = Health::Ready;
        pos.checked_sub(self.from)
            .and_then(|i| self.health.get(i))
            .and_then(Option::as_ref)
            .unwrap_or(&READY)
    }

    /// Records a health this request itself just stored.
    pub(super) fn set_at(&mut self, pos: usize, health: Health) {
        if let Some(cell) = pos
            .checked_sub(self.from)
            .and_then(|i| self.health.get_mut(i))
        {
            *cell = Some(health);
        }
    }
}

impl Router {
    /// Starts a new selection at `walk.pos`: nothing read yet.
    fn new_snapshot(walk: &mut Walk<'_>) {
        walk.snapshot.from = walk.pos;
        walk.snapshot.health.clear();
    }

    /// Reads the health of the route at try-order position `pos` unless this selection
    /// already has.
    pub(super) async fn read_health(
        &self,
        walk: &mut Walk<'_>,
        pos: usize,
        notes: &mut Vec<String>,
    ) {
        let Some(i) = pos.checked_sub(walk.snapshot.from) else {
            return;
        };
        if walk.snapshot.health.len() <= i {
            walk.snapshot.health.resize(i + 1, None);
        }
        if walk.snapshot.health[i].is_some() {
            return;
        }
        let route = &walk.tier.routes[walk.order[pos]].route;
        let health = match self.inner.store.get(route).await {
            Ok(h) => h,
            // An unreadable store must not take traffic down: treat the route as ready.
            Err(e) => {
                notes.push(e.to_string());
                Health::Ready
            }
        };
        walk.snapshot.health[i] = Some(health);
    }

    /// The try order: the chain, with a session's route first while it is ready.
    pub(super) async fn order(
        &self,
        tier: &Tier,
        session: Option<&str>,
        now: UnixMs,
    ) -> (Vec<usize>, Option<usize>) {
        let mut order: Vec<usize> = (0..tier.routes.len()).collect();
        let Some(pinned) = session.and_then(|s| lock(&self.inner.sessions).get(s).cloned()) else {
            return (order, None);
        };
        let mut sticky = tier.routes.iter().position(|r| r.route == pinned);
        if let Some(i) = sticky {
            let health = self.inner.store.get(&tier.routes[i].route).await;
            if !health.map(|h| h.is_available(now)).unwrap_or(true) {
                sticky = None;
            }
        }
        if let Some(i) = sticky {
            order.remove(i);
            order.insert(0, i);
        }
        (order, sticky)
    }

    /// Advances to the next route that may be called, recording each one passed over.
    /// `false` when the chain has run out.
    pub(super) async fn next_route(&self, walk: &mut Walk<'_>, report: &mut Report) -> bool {
        walk.retries_on_route = 0;
        walk.trial = false;
        Self::new_snapshot(walk);
        while walk.pos < walk.order.len() {
            let idx = walk.current();
            self.read_health(walk, walk.pos, &mut report.notes).await;
            if let Some(skip) = self.skip_reason(walk, walk.pos) {
                self.emit_skip(walk, report, skip);
                walk.pos += 1;
                continue;
            }
            let route = &walk.tier.routes[idx];
            if let Some(cfg) = &route.policy.breaker {
                let now = self.inner.clock.now_ms();
                let mut breakers = lock(&self.inner.breakers);
                let state = breakers.entry(route.route.clone()).or_default();
                let blocked = match breaker::admit(state, cfg, now) {
                    Admit::Yes => None,
                    Admit::Trial => {
                        walk.trial = true;
                        None
                    }
                    Admit::Open(until) => Some((
                        SkipWhy::Open,
                        Some(format!("open for {} ms more", until - now)),
                    )),
                    Admit::Busy => Some((SkipWhy::HalfOpen, None)),
                };
                drop(breakers);
                if let Some((why, cause)) = blocked {
                    let skip = Skip {
                        route: route.route.clone(),
                        why,
                        cause,
                    };
                    self.emit_skip(walk, report, skip);
                    walk.pos += 1;
                    continue;
                }
            }
            return true;
        }
        false
    }

    /// Records every route after the current one that must be passed over (the request
    /// ended because none was left).
    pub(super) async fn pass_over_rest(&self, walk: &mut Walk<'_>, report: &mut Report) {
        walk.pos += 1;
        while walk.pos < walk.order.len() {
            self.read_health(walk, walk.pos, &mut report.notes).await;
            if let Some(skip) = self.skip_reason(walk, walk.pos) {
                self.emit_skip(walk, report, skip);
            }
            walk.pos += 1;
        }
    }

    pub(super) fn emit_skip(&self, walk: &Walk<'_>, report: &mut Report, skip: Skip) {
        report.skipped.push(skip);
        if let Some(observe) = walk.opts.observer {
            observe(Step::Skipped(report.skipped.last().expect("just pushed")));
        }
    }

    /// Why the route at try-order position `pos` must be passed over right now, if it
    /// must.
    pub(super) fn skip_reason(&self, walk: &Walk<'_>, pos: usize) -> Option<Skip> {
        let idx = walk.order[pos];
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
        let health = walk.snapshot.at(pos);
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
    pub(super) async fn fallback_candidate(
        &self,
        walk: &mut Walk<'_>,
        now: UnixMs,
        larger_than: Option<u64>,
        notes: &mut Vec<String>,
    ) -> Option<usize> {
        let mut needs = walk.needs;
        if let Some(w) = larger_than {
            needs.min_window = w;
        }
        for p in walk.pos + 1..walk.order.len() {
            let i = walk.order[p];
            let spec = &walk.tier.routes[i];
            // The checks that need no store first: health is read only when it decides.
            let eligible = (i == 0 || walk.opts.policy.approves_fallback(&spec.route))
                && cannot_serve(&spec.facts, &needs).is_none()
                && larger_than.is_none_or(|w| spec.facts.context_window.is_some_and(|c| c > w))
                && !self.breaker_open(&spec.route, now);
            if !eligible {
                continue;
            }
            self.read_health(walk, p, notes).await;
            if walk.snapshot.at(p).is_available(now) {
                return Some(i);
            }
        }
        None
    }

    fn breaker_open(&self, route: &Route, now: UnixMs) -> bool {
        matches!(lock(&self.inner.breakers).get(route), Some(breaker::State::Open { until, .. }) if now < *until)
    }
}
