//! The admission buckets of one pool, in this process (the default). This is one
//! process's budget, not a fleet's: N processes with the same `limits:` admit up to N
//! times the contract between them (a shared store is issue 12's `state: redis://`).
//!
//! Buckets are grouped by provider, one lock per group, because every bucket that
//! covers a route belongs to its provider (its own `provider/model` entry and the
//! provider-wide entry): an acquire checks and takes all of them atomically under one
//! lock, and requests to different providers never contend. A shared store keeps the
//! same shape (one script per provider, under one hash tag).

use crate::admission::bucket::{
    Bucket, Cost, Dimension, Limits, Spent, DEFAULT_HEADROOM, DEFAULT_INTERACTIVE_FLOOR,
};
use crate::core::clock::UnixMs;
use crate::core::vocab::{Priority, Route};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// Minutes of usage a bucket keeps for a drain that never comes: as long as the state
/// store keeps them (8 days).
const MAX_UNDRAINED_MINUTES: usize = 8 * 24 * 60;

/// How a pool's admission is set up (`limits:`, `headroom:`, `interactive_floor:`).
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionConfig {
    /// Keyed by a route (`provider/model`) or a provider name.
    pub limits: BTreeMap<String, Limits>,
    pub headroom: f64,
    pub interactive_floor: f64,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            limits: BTreeMap::new(),
            headroom: DEFAULT_HEADROOM,
            interactive_floor: DEFAULT_INTERACTIVE_FLOOR,
        }
    }
}

impl AdmissionConfig {
    /// The set-up a pool config or a scenario writes (`limits:`, and `headroom:` and
    /// `interactive_floor:` when given), with the defaults of decisions.md for the rest:
    /// one builder, so the two can never default differently.
    pub fn written(
        limits: &BTreeMap<String, Limits>,
        headroom: Option<f64>,
        floor: Option<f64>,
    ) -> Self {
        let d = AdmissionConfig::default();
        AdmissionConfig {
            limits: limits.clone(),
            headroom: headroom.unwrap_or(d.headroom),
            interactive_floor: floor.unwrap_or(d.interactive_floor),
        }
    }
}

/// The buckets that cover one route: its group and the members in it. Resolved once
/// per route, so an acquire does no lookup by name.
#[derive(Debug, Clone)]
pub struct Cover {
    group: usize,
    members: Arc<[(usize, Dimension)]>,
}

impl Cover {
    /// Some bucket of the cover counts tokens (`tpm`, `itpm`, `otpm`): it is settled
    /// with the usage the provider reports.
    pub fn counts_tokens(&self) -> bool {
        self.members.iter().any(|(_, d)| *d != Dimension::Rpm)
    }
}

/// What an admitted call holds until it is settled.
#[derive(Debug, Clone)]
pub struct Reservation {
    cover: Cover,
    pub cost: Cost,
}

/// Why an acquire was refused: how long the refill alone needs (`None`: never, the
/// cost does not fit in some bucket at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub wait_ms: Option<u64>,
}

/// A bucket that can never hold a cost: even full, its capacity is below the cost on
/// its dimension.
#[derive(Debug, Clone, PartialEq)]
pub struct Exceeds {
    /// The `limits:` key: a route or a provider.
    pub bucket: String,
    pub dimension: Dimension,
    pub capacity: f64,
    pub reservation: f64,
}

impl std::fmt::Display for Exceeds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "bucket `{}` holds at most {} {} a minute; the request reserves {}",
            self.bucket,
            self.capacity.floor() as u64,
            self.dimension.level_name(),
            self.reservation.ceil() as u64
        )
    }
}

#[derive(Debug)]
struct Slot {
    /// The `limits:` key: a route or a provider.
    name: Arc<str>,
    dim: Dimension,
    contract: u64,
    bucket: Bucket,
    /// Held by calls in flight, for `poolctl_bucket_reserved`.
    reserved: f64,
    /// What settles spent on it, per minute (`(minute, amount)`, oldest first), not yet
    /// drained to the state store. One add under the group lock the settle holds anyway.
    used: Vec<(i64, f64)>,
}

/// What this process spent and shed since the last drain, for the state store's usage
/// counters (`poolctl capacity`). Flushed by the CLI, never on a request's path.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageDelta {
    /// `(minute, bucket name, dimension, amount spent)`.
    pub spent: Vec<(i64, String, Dimension, f64)>,
    /// `(priority, route, sheds)`.
    pub sheds: Vec<(Priority, Route, u64)>,
}

impl UsageDelta {
    pub fn is_empty(&self) -> bool {
        self.spent.is_empty() && self.sheds.is_empty()
    }

    /// Adds `other` to this one (a flush that failed keeps its delta for the next).
    pub fn merge(&mut self, other: UsageDelta) {
        for (m, name, dim, x) in other.spent {
            match self
                .spent
                .iter_mut()
                .find(|(m2, n2, d2, _)| *m2 == m && *n2 == name && *d2 == dim)
            {
                Some(row) => row.3 += x,
                None => self.spent.push((m, name, dim, x)),
            }
        }
        for (p, route, n) in other.sheds {
            match self
                .sheds
                .iter_mut()
                .find(|(p2, r2, _)| *p2 == p && *r2 == route)
            {
                Some(row) => row.2 += n,
                None => self.sheds.push((p, route, n)),
            }
        }
    }
}

/// One bucket as `status`, `/metrics` and a scenario's `buckets:` see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BucketView {
    pub bucket: String,
    pub dimension: Dimension,
    pub contract: u64,
    pub capacity: f64,
    pub level: f64,
    pub reserved: f64,
}

#[derive(Debug)]
pub struct Buckets {
    headroom: f64,
    floor: f64,
    groups: Vec<Mutex<Vec<Slot>>>,
    group_of: HashMap<String, usize>,
    covers: Mutex<HashMap<Route, Option<Cover>>>,
    sheds: Mutex<BTreeMap<(Priority, Route), u64>>,
    /// Sheds not yet drained to the state store.
    sheds_undrained: Mutex<BTreeMap<(Priority, Route), u64>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each critical section is plain arithmetic on numbers that are valid at every
    // step: a poisoned lock still guards sound data.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Cover {
    /// The provider group these buckets belong to (one lock, one queue line).
    pub fn group(&self) -> usize {
        self.group
    }
}

impl Buckets {
    /// Full buckets for every contract in `cfg`, at `now`.
    pub fn new(cfg: &AdmissionConfig, now: UnixMs) -> Buckets {
        let mut groups: Vec<Vec<Slot>> = Vec::new();
        let mut group_of: HashMap<String, usize> = HashMap::new();
        for (name, limits) in &cfg.limits {
            let provider = name.split('/').next().unwrap_or(name).to_string();
            let g = *group_of.entry(provider).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            let name: Arc<str> = name.as_str().into();
            for (dim, contract) in limits.contracts() {
                groups[g].push(Slot {
                    name: name.clone(),
                    dim,
                    contract,
                    bucket: Bucket::full(contract, cfg.headroom, now),
                    reserved: 0.0,
                    used: Vec::new(),
                });
            }
        }
        Buckets {
            headroom: cfg.headroom,
            floor: cfg.interactive_floor,
            groups: groups.into_iter().map(Mutex::new).collect(),
            group_of,
            covers: Mutex::new(HashMap::new()),
            sheds: Mutex::new(BTreeMap::new()),
            sheds_undrained: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    pub fn headroom(&self) -> f64 {
        self.headroom
    }

    pub fn interactive_floor(&self) -> f64 {
        self.floor
    }

    /// The buckets that cover `route` (its own entry and its provider's), or `None`
    /// when no limit names it: such a route is always admitted.
    pub fn cover(&self, route: &Route) -> Option<Cover> {
        if let Some(c) = lock(&self.covers).get(route) {
            return c.clone();
        }
        let cover = self.group_of.get(route.provider()).and_then(|&g| {
            let slots = lock(&self.groups[g]);
            let members: Vec<(usize, Dimension)> = slots
                .iter()
                .enumerate()
                .filter(|(_, s)| &*s.name == route.as_str() || &*s.name == route.provider())
                .map(|(i, s)| (i, s.dim))
                .collect();
            (!members.is_empty()).then(|| Cover {
                group: g,
                members: members.into(),
            })
        });
        lock(&self.covers).insert(route.clone(), cover.clone());
        cover
    }

    /// Admits `cost` on every bucket of `cover` at once, or on none of them.
    pub fn acquire(
        &self,
        cover: &Cover,
        cost: Cost,
        priority: Priority,
        now: UnixMs,
    ) -> Result<Reservation, Refused> {
        let mut slots = lock(&self.groups[cover.group]);
        let admits = cover.members.iter().all(|&(i, dim)| {
            slots[i]
                .bucket
                .admits(cost.on(dim), priority, self.floor, now)
        });
        if !admits {
            return Err(Refused {
                wait_ms: self.wait_in(&slots, cover, cost, priority, now),
            });
        }
        for &(i, dim) in cover.members.iter() {
            let c = cost.on(dim);
            slots[i].bucket.take(c, now);
            slots[i].reserved += c;
        }
        Ok(Reservation {
            cover: cover.clone(),
            cost,
        })
    }

    /// The first bucket of `cover` that could not hold `cost` even full: the request is
    /// too large for it (decisions.md: `too_large`, "no route's buckets can ever hold
    /// the request's reservation"), and no wait would change that. The interactive
    /// floor is not counted: a request below interactive that only the floor keeps out
    /// fits the bucket, and is refused by admission (`shed`), not as too large.
    pub fn exceeds(&self, cover: &Cover, cost: Cost) -> Option<Exceeds> {
        let slots = lock(&self.groups[cover.group]);
        cover.members.iter().find_map(|&(i, dim)| {
            let (slot, need) = (&slots[i], cost.on(dim));
            (need > slot.bucket.capacity).then(|| Exceeds {
                bucket: slot.name.to_string(),
                dimension: dim,
                capacity: slot.bucket.capacity,
                reservation: need,
            })
        })
    }

    /// How long until the refill alone would admit `cost` on `cover` (`None`: never).
    pub fn wait_ms(
        &self,
        cover: &Cover,
        cost: Cost,
        priority: Priority,
        now: UnixMs,
    ) -> Option<u64> {
        let slots = lock(&self.groups[cover.group]);
        self.wait_in(&slots, cover, cost, priority, now)
    }

    /// The refill every bucket of `cover` needs to hold `cost` (`None`: never).
    fn wait_in(
        &self,
        slots: &[Slot],
        cover: &Cover,
        cost: Cost,
        priority: Priority,
        now: UnixMs,
    ) -> Option<u64> {
        crate::admission::bucket::wait_for_all(
            cover
                .members
                .iter()
                .map(|&(i, dim)| (&slots[i].bucket, cost.on(dim))),
            priority,
            self.floor,
            now,
        )
    }

    /// Trues the reservation up to what the attempt spent, then lowers every covering
    /// bucket to the provider's own remaining counts (× headroom), never raising one.
    pub fn settle(
        &self,
        r: Reservation,
        spent: Spent,
        remaining: &[(Dimension, u64)],
        now: UnixMs,
    ) {
        let minute = now.div_euclid(60_000);
        let mut slots = lock(&self.groups[r.cover.group]);
        for &(i, dim) in r.cover.members.iter() {
            let reserved = r.cost.on(dim);
            let actual = spent.on(dim, &r.cost);
            let slot = &mut slots[i];
            slot.bucket.true_up(reserved, actual, now);
            slot.reserved = (slot.reserved - reserved).max(0.0);
            if actual > 0.0 {
                // The minute the settle happened in, as the shared store's settle counts it.
                match slot.used.last_mut() {
                    Some((m, x)) if *m == minute => *x += actual,
                    _ => {
                        // Never drained (chaos, a library caller): the oldest minute
                        // goes, as the store would drop it anyway.
                        if slot.used.len() >= MAX_UNDRAINED_MINUTES {
                            slot.used.remove(0);
                        }
                        slot.used.push((minute, actual))
                    }
                }
            }
        }
        for &(dim, count) in remaining {
            for &(i, d) in r.cover.members.iter() {
                if d == dim {
                    slots[i].bucket.lower_to(count, self.headroom, now);
                }
            }
        }
    }

    /// Counts a request shed by `route`'s buckets.
    pub fn record_shed(&self, priority: Priority, route: &Route) {
        *lock(&self.sheds)
            .entry((priority, route.clone()))
            .or_insert(0) += 1;
        *lock(&self.sheds_undrained)
            .entry((priority, route.clone()))
            .or_insert(0) += 1;
    }

    /// Takes what was spent and shed since the last drain (for the state store's usage
    /// counters); the buckets themselves are untouched.
    pub fn drain_usage(&self) -> UsageDelta {
        let mut spent = Vec::new();
        for g in &self.groups {
            for s in lock(g).iter_mut() {
                for (m, x) in s.used.drain(..) {
                    spent.push((m, s.name.to_string(), s.dim, x));
                }
            }
        }
        let sheds = std::mem::take(&mut *lock(&self.sheds_undrained))
            .into_iter()
            .map(|((p, r), n)| (p, r, n))
            .collect();
        UsageDelta { spent, sheds }
    }

    /// Sheds so far, per priority class and route.
    pub fn sheds(&self) -> BTreeMap<(Priority, Route), u64> {
        lock(&self.sheds).clone()
    }

    /// Every bucket's level at `now`, in config order of names then dimensions.
    pub fn snapshot(&self, now: UnixMs) -> Vec<BucketView> {
        let mut out: Vec<BucketView> = self
            .groups
            .iter()
            .flat_map(|g| {
                lock(g)
                    .iter()
                    .map(|s| BucketView {
                        bucket: s.name.to_string(),
                        dimension: s.dim,
                        contract: s.contract,
                        capacity: s.bucket.capacity,
                        level: s.bucket.level_at(now),
                        reserved: s.reserved,
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        out.sort_by(|a, b| (&a.bucket, a.dimension).cmp(&(&b.bucket, b.dimension)));
        out
    }

    /// Lowers one bucket (never raising it) to `level` as of `at`, refilled at this
    /// bucket's own rate to `now`: a local share that starts where a shared bucket was
    /// last seen, not full (store::shared_buckets). False when no such bucket exists.
    pub fn lower_to_view(
        &self,
        name: &str,
        dim: Dimension,
        level: f64,
        at: UnixMs,
        now: UnixMs,
    ) -> bool {
        self.groups.iter().any(|g| {
            let mut slots = lock(g);
            match slots.iter_mut().find(|s| &*s.name == name && s.dim == dim) {
                Some(s) => {
                    let b = &mut s.bucket;
                    b.refill(now);
                    let dt = now.saturating_sub(at).max(0) as f64;
                    let target = (level + dt * b.rate()).min(b.capacity);
                    b.level = b.level.min(target);
                    true
                }
                None => false,
            }
        })
    }

    /// The level of one bucket (`name` a route or provider) at `now`.
    pub fn level(&self, name: &str, dim: Dimension, now: UnixMs) -> Option<f64> {
        self.groups.iter().find_map(|g| {
            lock(g)
                .iter()
                .find(|s| &*s.name == name && s.dim == dim)
                .map(|s| s.bucket.level_at(now))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(entries: &[(&str, Limits)]) -> AdmissionConfig {
        AdmissionConfig {
            limits: entries.iter().map(|(k, l)| (k.to_string(), *l)).collect(),
            headroom: 1.0,
            interactive_floor: 0.2,
        }
    }

    fn route(s: &str) -> Route {
        Route::parse(s).unwrap()
    }

    const TEN_RPM: Limits = Limits {
        rpm: Some(10),
        tpm: None,
        itpm: None,
        otpm: None,
    };

    #[test]
    fn a_provider_entry_is_shared_by_every_route_of_the_provider() {
        let b = Buckets::new(&cfg(&[("a", TEN_RPM)]), 0);
        let (x, y) = (
            b.cover(&route("a/x")).unwrap(),
            b.cover(&route("a/y")).unwrap(),
        );
        for _ in 0..5 {
            b.acquire(&x, Cost::default(), Priority::Interactive, 0)
                .unwrap();
            b.acquire(&y, Cost::default(), Priority::Interactive, 0)
                .unwrap();
        }
        assert!(b
            .acquire(&x, Cost::default(), Priority::Interactive, 0)
            .is_err());
        assert!(b.cover(&route("other/z")).is_none());
    }

    #[test]
    fn an_acquire_takes_every_covering_bucket_or_none() {
        let own = Limits {
            tpm: Some(1_000),
            ..Default::default()
        };
        let b = Buckets::new(&cfg(&[("a", TEN_RPM), ("a/x", own)]), 0);
        let x = b.cover(&route("a/x")).unwrap();
        let big = Cost {
            input_tokens: 900,
            output_tokens: 200,
        };
        let refused = b.acquire(&x, big, Priority::Interactive, 0).unwrap_err();
        assert_eq!(refused.wait_ms, None, "1 100 tokens never fit in 1 000");
        assert_eq!(b.level("a", Dimension::Rpm, 0), Some(10.0), "rpm untouched");
        let r = b
            .acquire(
                &x,
                Cost {
                    input_tokens: 400,
                    output_tokens: 400,
                },
                Priority::Interactive,
                0,
            )
            .unwrap();
        assert_eq!(b.level("a", Dimension::Rpm, 0), Some(9.0));
        assert_eq!(b.level("a/x", Dimension::Tpm, 0), Some(200.0));
        b.settle(
            r,
            Spent::Reported {
                input_tokens: 400,
                output_tokens: 20,
            },
            &[],
            0,
        );
        assert_eq!(b.level("a/x", Dimension::Tpm, 0), Some(580.0));
        assert!(b.snapshot(0).iter().all(|v| v.reserved == 0.0));
    }

    #[test]
    fn remaining_counts_lower_every_covering_bucket_of_that_dimension() {
        let b = Buckets::new(&cfg(&[("a", TEN_RPM)]), 0);
        let x = b.cover(&route("a/x")).unwrap();
        let r = b
            .acquire(&x, Cost::default(), Priority::Interactive, 0)
            .unwrap();
        b.settle(
            r,
            Spent::Unreported,
            &[(Dimension::Rpm, 3), (Dimension::Tpm, 1)],
            0,
        );
        assert_eq!(b.level("a", Dimension::Rpm, 0), Some(3.0));
    }

    #[test]
    fn a_refusal_says_how_long_the_refill_needs() {
        let b = Buckets::new(&cfg(&[("a/x", TEN_RPM)]), 0);
        let x = b.cover(&route("a/x")).unwrap();
        for _ in 0..8 {
            b.acquire(&x, Cost::default(), Priority::Background, 0)
                .unwrap();
        }
        let refused = b
            .acquire(&x, Cost::default(), Priority::Background, 0)
            .unwrap_err();
        assert_eq!(refused.wait_ms, Some(6_000));
        assert!(b
            .acquire(&x, Cost::default(), Priority::Interactive, 0)
            .is_ok());
        b.record_shed(Priority::Background, &route("a/x"));
        assert_eq!(b.sheds().values().sum::<u64>(), 1);
    }

    #[test]
    fn settles_count_what_was_spent_per_minute_and_a_drain_takes_it_once() {
        let own = Limits {
            tpm: Some(10_000),
            ..Default::default()
        };
        let b = Buckets::new(&cfg(&[("a", TEN_RPM), ("a/x", own)]), 0);
        let x = b.cover(&route("a/x")).unwrap();
        let cost = Cost {
            input_tokens: 100,
            output_tokens: 400,
        };
        let spent = Spent::Reported {
            input_tokens: 100,
            output_tokens: 20,
        };
        for now in [1_000, 59_000, 61_000] {
            let r = b.acquire(&x, cost, Priority::Interactive, now).unwrap();
            b.settle(r, spent, &[], now);
        }
        // A call that was never made spends nothing and counts nothing.
        let r = b.acquire(&x, cost, Priority::Interactive, 61_000).unwrap();
        b.settle(r, Spent::Nothing, &[], 61_000);
        b.record_shed(Priority::Speculative, &route("a/x"));
        let mut d = b.drain_usage();
        d.spent
            .sort_by(|p, q| (p.0, &p.1, p.2).cmp(&(q.0, &q.1, q.2)));
        assert_eq!(
            d.spent,
            vec![
                (0, "a".to_string(), Dimension::Rpm, 2.0),
                (0, "a/x".to_string(), Dimension::Tpm, 240.0),
                (1, "a".to_string(), Dimension::Rpm, 1.0),
                (1, "a/x".to_string(), Dimension::Tpm, 120.0),
            ]
        );
        assert_eq!(d.sheds, vec![(Priority::Speculative, route("a/x"), 1)]);
        assert!(b.drain_usage().is_empty(), "drained once");
        assert_eq!(
            b.sheds().values().sum::<u64>(),
            1,
            "the running count stays"
        );
        let mut twice = d.clone();
        twice.merge(d);
        assert_eq!(twice.spent[0].3 + twice.spent[1].3, 2.0 * 242.0);
        assert_eq!(twice.sheds[0].2, 2);
    }
}
