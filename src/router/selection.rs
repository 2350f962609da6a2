//! Selection: which route a request tries next. The try order is the chain, each group
//! step's members in the order the request drew for them ([`super::group`]). Reads the
//! health of the routes still ahead once per selection (a snapshot), then passes over
//! the cooling, retired, unapproved, incapable and breaker-blocked ones, recording each
//! skip.

use super::group::member_order;
use super::state::{lock, Router, Walk};
use crate::config::route::{GroupStrategy, RouteSpec, Tier};
use crate::core::clock::UnixMs;
use crate::core::request::Needs;
use crate::core::trace::{Report, Skip, SkipWhy, Step};
use crate::core::vocab::HealthState;
use crate::policy::breaker::{self, Admit};
use crate::policy::capability::cannot_serve;
use crate::policy::card::Policy;
use crate::policy::health::Health;

impl Router {
    /// Starts a new selection at `walk.pos`. What this attempt's settlement already read
    /// of the routes ahead (the fallback candidate) is kept: it was read for this very
    /// move, so reading it again would only double the store calls of a walk.
    fn new_snapshot(walk: &mut Walk<'_>) {
        let snap = &mut walk.snapshot;
        let passed = walk.pos.checked_sub(snap.from);
        snap.read = match passed {
            Some(n) if n < 64 => snap.read >> n,
            _ => 0,
        };
        if passed.is_none() {
            snap.held.clear();
        } else if !snap.held.is_empty() {
            let pos = walk.pos;
            snap.held.retain(|(p, _)| *p >= pos);
        }
        snap.from = walk.pos;
    }

    /// Reads the health of the route at try-order position `pos` unless this selection
    /// already has.
    pub(super) async fn read_health(
        &self,
        walk: &mut Walk<'_>,
        pos: usize,
        notes: &mut Vec<String>,
    ) {
        if pos < walk.snapshot.from || walk.snapshot.is_read(pos) {
            return;
        }
        let route = &walk.tier.routes[walk.order[pos]].route;
        let answer = match self.inner.store.get(route).now() {
            Ok(answer) => answer,
            Err(later) => later.await,
        };
        let health = match answer {
            Ok(h) => h,
            // An unreadable store must not take traffic down: treat the route as ready.
            Err(e) => {
                notes.push(e.to_string());
                Health::Ready
            }
        };
        walk.snapshot.put(pos, health);
    }

    /// The try order: the chain, each group's members in the order this request drew
    /// for them, with a session's route first while it is ready; the sticky route; and
    /// the primary (the first step's route, or the member drawn first).
    pub(super) async fn order(
        &self,
        tier: &Tier,
        session: Option<&str>,
        now: UnixMs,
    ) -> (Vec<usize>, Option<usize>, usize) {
        let mut order: Vec<usize> = (0..tier.routes.len()).collect();
        if !tier.groups.is_empty() {
            self.order_groups(tier, &mut order);
        }
        let primary = order.first().copied().unwrap_or(0);
        let pinned = match session {
            Some(s) => self.inner.sessions.get(s, now).await,
            None => None,
        };
        let Some(pinned) = pinned else {
            return (order, None, primary);
        };
        let mut sticky = tier.routes.iter().position(|r| r.route == pinned);
        if let Some(i) = sticky {
            let health = self.inner.store.get(&tier.routes[i].route).await;
            if !health.map(|h| h.is_available(now)).unwrap_or(true) {
                sticky = None;
            }
        }
        if let Some(i) = sticky {
            // A pinned member leaves its group's place; the rest keep their drawn order.
            if let Some(p) = order.iter().position(|&x| x == i) {
                order.remove(p);
            }
            order.insert(0, i);
        }
        (order, sticky, primary)
    }

    /// Puts each group's members in the order this request tries them
    /// (`group::member_order`), drawing from the router's seeded RNG.
    fn order_groups(&self, tier: &Tier, order: &mut [usize]) {
        for g in &tier.groups {
            let members = g.members();
            let n = members.len();
            if n < 2 || members.end > order.len() {
                continue;
            }
            let draws: Vec<f64> = {
                let mut rng = lock(&self.inner.rng);
                (0..n).map(|_| rng.f64()).collect()
            };
            let in_flight: Vec<u32> = match g.strategy {
                GroupStrategy::LeastBusy => members
                    .clone()
                    .map(|i| self.inner.in_flight.count(&tier.routes[i].route))
                    .collect(),
                GroupStrategy::Weighted => Vec::new(),
            };
            let picked = member_order(g.strategy, &g.weights, &in_flight, &draws);
            for (slot, m) in members.clone().zip(picked) {
                order[slot] = g.start + m;
            }
        }
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
            let pos = walk.pos;
            if !self.admit(walk, report, pos).await {
                walk.pos += 1;
                continue;
            }
            let route = &walk.tier.routes[idx];
            if let Some(cfg) = route.policy.breaker {
                let now = self.inner.clock.now_ms();
                let admitted = self
                    .inner
                    .store
                    .breaker(&route.route, cfg, breaker::Step::Admit { now })
                    .await;
                let blocked = match admitted {
                    Ok(breaker::Answer::Admit(Admit::Yes)) => None,
                    Ok(breaker::Answer::Admit(Admit::Trial)) => {
                        walk.trial = true;
                        None
                    }
                    Ok(breaker::Answer::Admit(Admit::Open(until))) => Some((
                        SkipWhy::Open,
                        Some(format!("open for {} ms more", until - now)),
                    )),
                    Ok(breaker::Answer::Admit(Admit::Busy)) => Some((SkipWhy::HalfOpen, None)),
                    // An unreadable store must not take traffic down: health still
                    // guards the route.
                    Ok(breaker::Answer::Recorded(_)) => None,
                    Err(e) => {
                        report.notes.push(e.to_string());
                        None
                    }
                };
                if let Some((why, cause)) = blocked {
                    // Not called after all: its reservation comes back whole.
                    self.release_admission(walk).await;
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
        // A request that waited for admission walks the routes again: each route is
        // listed once per reason.
        if report
            .skipped
            .iter()
            .any(|s| s.route == skip.route && s.why == skip.why)
        {
            return;
        }
        if report.skipped.capacity() == 0 {
            report.skipped.reserve(walk.tier.routes.len());
        }
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
        if !walk.tier.in_first_step(idx) && !walk.opts.policy.approves_fallback(&spec.route) {
            return skip(SkipWhy::Unapproved, None);
        }
        // Before health: a route that cannot carry the request is named for that, cooling
        // or not, so a request no route can carry is a 400 naming every route's reason
        // rather than a 429 that invites the client to send it again (fidelity.md §3).
        if let Err(cannot) = walk.asked.carry(&spec.endpoint) {
            let why = format!("cannot carry: {}", cannot.field);
            return skip(SkipWhy::CannotCarry, Some(why));
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
        if let Some(why) = cannot_serve(&spec.facts, &walk.needs) {
            return skip(SkipWhy::Incapable, Some(why));
        }
        overflow_bars(walk.opts.policy, spec, &walk.needs)
            .or_else(|| blocked_bars(walk.opts.policy, spec, &walk.needs))
            .and_then(|why| skip(SkipWhy::Incapable, Some(why.into())))
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
            needs.overflowed = true;
        }
        for p in walk.pos + 1..walk.order.len() {
            let i = walk.order[p];
            let spec = &walk.tier.routes[i];
            // The checks that need no store first: health is read only when it decides.
            let eligible = (walk.tier.in_first_step(i)
                || walk.opts.policy.approves_fallback(&spec.route))
                && cannot_serve(&spec.facts, &needs).is_none()
                && walk.asked.carry(&spec.endpoint).is_ok()
                && overflow_bars(walk.opts.policy, spec, &needs).is_none()
                && blocked_bars(walk.opts.policy, spec, &needs).is_none()
                && !self.breaker_open(spec, now).await;
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

    /// Whether the route has a breaker and it is open; an unreadable store says no.
    async fn breaker_open(&self, spec: &RouteSpec, now: UnixMs) -> bool {
        if spec.policy.breaker.is_none() {
            return false;
        }
        let open = self.inner.store.breaker_open(&spec.route, now).await;
        open.unwrap_or(false)
    }
}

/// Why a route may not take a prompt that overflowed another route, once one has. A
/// route of unknown window is no answer to an overflow (it may be as small), unless the
/// card names it as where an overflow goes (`overflow_routes`).
fn overflow_bars(policy: &Policy, spec: &RouteSpec, needs: &Needs) -> Option<&'static str> {
    if !needs.overflowed
        || policy.takes_overflow(&spec.route, spec.facts.context_window, needs.min_window)
    {
        return None;
    }
    Some(match (&policy.overflow_routes, spec.facts.context_window) {
        (Some(_), _) => "not among the card's overflow_routes",
        (None, None) => "context window unknown, not known larger (overflowed there)",
        (None, Some(_)) => "context window not known larger (overflowed there)",
    })
}

/// Why a route may not take a request another route blocked (`content_policy`), once
/// one has: the card names where a blocked prompt goes, and this route is not there.
fn blocked_bars(policy: &Policy, spec: &RouteSpec, needs: &Needs) -> Option<&'static str> {
    let list = policy.content_policy_routes.as_ref()?;
    (needs.blocked && !list.contains(&spec.route))
        .then_some("not among the card's content_policy_routes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::snapshot::Snapshot;

    fn cooling(until: UnixMs) -> Health {
        Health::Cooling {
            until,
            reason: "rate_limited".into(),
        }
    }

    #[test]
    fn snapshot_holds_only_what_is_not_ready_and_remembers_what_it_read() {
        let mut s = Snapshot::default();
        s.put(3, cooling(50));
        s.put(1, Health::Ready);
        s.put(2, cooling(40));
        assert_eq!(s.held.len(), 2, "ready healths are not held");
        assert!(s.is_read(1) && s.is_read(2) && s.is_read(3) && !s.is_read(0));
        assert_eq!(s.at(2), &cooling(40));
        assert_eq!(s.at(3), &cooling(50));
        assert_eq!(s.at(1), &Health::Ready);
        // A health this request stored replaces the one read; an unread one is not taken.
        s.set_at(2, Health::Ready);
        s.set_at(5, cooling(9));
        assert_eq!(s.at(2), &Health::Ready);
        assert_eq!(s.at(5), &Health::Ready);
        assert!(!s.is_read(5));
    }

    #[test]
    fn snapshot_positions_past_the_64th_ahead_are_held_but_read_again() {
        let mut s = Snapshot::default();
        s.put(70, cooling(1));
        assert!(!s.is_read(70));
        assert_eq!(s.at(70), &cooling(1));
    }
}
