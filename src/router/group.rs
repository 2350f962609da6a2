//! Groups of equal routes: the order in which one request tries a group's members, and
//! the requests this process has in flight to each member (what `least_busy` reads).
//!
//! A request orders every member of a group once, when its walk starts; selection then
//! walks that order like any stretch of the chain, so a member that is cooling, retired,
//! refused by admission, breaker-blocked or unable to serve is passed over (and named)
//! exactly as a single route would be, and a `fallback` reaches the next member before
//! the step after the group. The order is a pure function of the weights, the in-flight
//! counts and the draws of the router's seeded RNG.

use crate::config::route::GroupStrategy;
use crate::core::vocab::Route;
use std::collections::HashMap;
use std::sync::Mutex;

/// The order in which a request tries a group's members, as indices into the group.
///
/// - `Weighted`: a draw without replacement in proportion to `weights`: member `i` gets
///   the key `-ln(1 - draws[i]) / weights[i]` (an exponential of rate `weights[i]`) and
///   the keys are sorted. The first member is drawn in proportion to its weight, and so
///   is the first of any subset (the members still ready, say): among the ready ones,
///   the first in this order is drawn in proportion to their weights alone.
/// - `LeastBusy`: fewest requests in flight first; ties in the order of `draws`.
///
/// `draws` are uniform in `[0, 1)`, one per member; `weights` are above zero (checked
/// where the config is read: a weight that is not counts as never drawn first).
pub fn member_order(
    strategy: GroupStrategy,
    weights: &[f64],
    in_flight: &[u32],
    draws: &[f64],
) -> Vec<usize> {
    let n = weights.len();
    let mut order: Vec<usize> = (0..n).collect();
    let draw = |i: usize| draws.get(i).copied().unwrap_or(0.0);
    match strategy {
        GroupStrategy::Weighted => {
            let key = |i: usize| {
                let w = weights[i];
                if w.is_finite() && w > 0.0 {
                    // 1 - draw is in (0, 1]: the logarithm is finite.
                    -(1.0 - draw(i)).ln() / w
                } else {
                    f64::INFINITY
                }
            };
            let keys: Vec<f64> = (0..n).map(key).collect();
            order.sort_by(|a, b| keys[*a].total_cmp(&keys[*b]).then(a.cmp(b)));
        }
        GroupStrategy::LeastBusy => {
            let busy = |i: usize| in_flight.get(i).copied().unwrap_or(0);
            order.sort_by(|a, b| {
                busy(*a)
                    .cmp(&busy(*b))
                    .then(draw(*a).total_cmp(&draw(*b)))
                    .then(a.cmp(b))
            });
        }
    }
    order
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each critical section is one map operation: a poisoned lock is still sound.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Requests this process has in flight to each group member, counted while their
/// upstream call runs (through any group step of any tier).
#[derive(Debug, Default)]
pub struct InFlight {
    counts: Mutex<HashMap<Route, u32>>,
}

impl InFlight {
    /// Counts one call to `route` until the guard is dropped (also when the request's
    /// future is dropped mid-call: a client that went away is no longer in flight).
    pub fn enter<'a>(&'a self, route: &Route) -> Busy<'a> {
        *lock(&self.counts).entry(route.clone()).or_default() += 1;
        Busy {
            of: self,
            route: route.clone(),
        }
    }

    /// The calls in flight to `route` now.
    pub fn count(&self, route: &Route) -> u32 {
        lock(&self.counts).get(route).copied().unwrap_or(0)
    }
}

/// One call counted in flight; dropping it ends the count.
pub struct Busy<'a> {
    of: &'a InFlight,
    route: Route,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut counts = lock(&self.of.counts);
        if let Some(n) = counts.get_mut(&self.route) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.route);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn draws(rng: &mut fastrand::Rng, n: usize) -> Vec<f64> {
        (0..n).map(|_| rng.f64()).collect()
    }

    #[test]
    fn weighted_first_pick_follows_the_weights() {
        let weights = [3.0, 1.0];
        let mut rng = fastrand::Rng::with_seed(7);
        let mut first = [0u32; 2];
        for _ in 0..20_000 {
            let d = draws(&mut rng, 2);
            first[member_order(GroupStrategy::Weighted, &weights, &[], &d)[0]] += 1;
        }
        // 3:1 is 15,000 of 20,000; four standard deviations are about 245.
        assert!((14_700..=15_300).contains(&first[0]), "{first:?}");
    }

    #[test]
    fn the_first_ready_member_follows_the_weights_of_the_ready_ones() {
        // Member 0 (the heaviest) is cooling: among 1 and 2 (weights 1 and 3), the
        // first of them in the order is member 2 three times in four.
        let weights = [10.0, 1.0, 3.0];
        let mut rng = fastrand::Rng::with_seed(11);
        let mut two = 0u32;
        for _ in 0..20_000 {
            let d = draws(&mut rng, 3);
            let order = member_order(GroupStrategy::Weighted, &weights, &[], &d);
            let ready = order.iter().find(|i| **i != 0).copied().unwrap();
            two += u32::from(ready == 2);
        }
        assert!((14_700..=15_300).contains(&two), "{two}");
    }

    #[test]
    fn least_busy_orders_by_calls_in_flight_and_breaks_ties_by_the_draw() {
        let w = [1.0; 4];
        let order = member_order(
            GroupStrategy::LeastBusy,
            &w,
            &[2, 0, 1, 0],
            &[0.0, 0.9, 0.5, 0.1],
        );
        assert_eq!(order, vec![3, 1, 2, 0]);
        // Same draws, other counts: the draw decides only between equals.
        let order = member_order(
            GroupStrategy::LeastBusy,
            &w,
            &[0, 0, 0, 0],
            &[0.4, 0.3, 0.2, 0.1],
        );
        assert_eq!(order, vec![3, 2, 1, 0]);
    }

    #[test]
    fn a_weight_that_is_not_above_zero_is_never_drawn_before_a_positive_one() {
        for d in [[0.0, 0.0], [0.99, 0.01], [0.5, 0.5]] {
            let order = member_order(GroupStrategy::Weighted, &[0.0, 1.0], &[], &d);
            assert_eq!(order, vec![1, 0], "{d:?}");
        }
    }

    #[test]
    fn in_flight_counts_while_the_guard_lives() {
        let f = InFlight::default();
        let r = Route::parse("a/x").unwrap();
        let one = f.enter(&r);
        let two = f.enter(&r);
        assert_eq!(f.count(&r), 2);
        drop(one);
        assert_eq!(f.count(&r), 1);
        drop(two);
        assert_eq!(f.count(&r), 0);
        assert!(lock(&f.counts).is_empty());
    }

    proptest! {
        #[test]
        fn every_order_is_a_permutation_of_the_members(
            weights in prop::collection::vec(0.01f64..100.0, 1..8),
            seed in any::<u64>(),
            busy in prop::collection::vec(0u32..4, 8),
            least in any::<bool>(),
        ) {
            let mut rng = fastrand::Rng::with_seed(seed);
            let d = draws(&mut rng, weights.len());
            let strategy = if least { GroupStrategy::LeastBusy } else { GroupStrategy::Weighted };
            let busy = &busy[..weights.len()];
            let order = member_order(strategy, &weights, busy, &d);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..weights.len()).collect::<Vec<_>>());
            if least {
                // Never a busier member before a less busy one.
                for w in order.windows(2) {
                    prop_assert!(busy[w[0]] <= busy[w[1]]);
                }
            }
        }
    }
}
