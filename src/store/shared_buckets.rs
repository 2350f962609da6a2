//! A fleet's admission: the buckets in Redis, and what a process does while Redis
//! cannot be reached (`on_store_error`). It must neither hang (every call is bounded by
//! the store's deadline, and during an episode Redis is tried again only every
//! `fallback::RETRY_MS`) nor silently multiply the limit:
//!
//! - `local_share`: each process admits from local buckets of `1 / workers` of each
//!   contract. Such a bucket starts where the fleet was, never full: at `1 / workers` of
//!   the level this process last saw in the shared bucket, refilled since at
//!   `1 / workers` of the rate. So over an outage of T the fleet admits at most the last
//!   shared level plus the refill over T (each process its share of both);
//! - `fail_closed`: refused (never fits: the router sheds it, reason `admission`).
//!
//! Each such decision is counted and logged once per episode. What the local share
//! admitted meanwhile, and the sheds Redis could not count, are added to Redis's
//! per-minute counters once it answers again, so `poolctl capacity` sees what the fleet
//! really spent and shed, and what the local share admitted is taken off the shared
//! buckets (`debit.lua`), so the refill of the outage is not handed out twice.
//!
//! A store that lost its data (restarted without persistence) does not refill the
//! buckets: the scripts re-create a bucket this process has seen at its view
//! ([`RedisBuckets`]), and the first such loss is logged once.

use super::redis_buckets::{RedisBuckets, RedisReservation};
use super::{Degraded, OnStoreError};
use crate::admission::bucket::{Cost, Dimension, Limits, Spent};
use crate::admission::buckets::{AdmissionConfig, Buckets, Refused, Reservation};
use crate::core::clock::UnixMs;
use crate::core::vocab::{Priority, Route};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// What an admitted call holds until it is settled.
#[derive(Debug)]
pub enum Hold {
    /// No limit covers the route.
    Unlimited,
    Shared(RedisReservation),
    /// Admitted from this process's local share while the shared store failed.
    Local(Reservation),
}

pub struct SharedBuckets {
    shared: RedisBuckets,
    local: Arc<Buckets>,
    on_error: OnStoreError,
    degraded: Degraded,
    /// Counts Redis has not taken yet (see [`Missed`]).
    missed: Mutex<Missed>,
    workers: u32,
    /// The episode whose local share was last lowered to the shared view (0: none).
    seeded: std::sync::atomic::AtomicU64,
    /// The store's losses already logged ([`RedisBuckets::losses`]).
    losses_logged: std::sync::atomic::AtomicU64,
    log: super::LogSink,
}

/// What happened while Redis could not count it: spent on the local share
/// (`(minute, bucket, dimension, amount)`) and shed (`(minute, priority, route)` →
/// count). Kept until a write of it to Redis succeeds.
#[derive(Default)]
struct Missed {
    spent: Vec<(i64, String, Dimension, f64)>,
    sheds: BTreeMap<(i64, Priority, Route), u64>,
    /// What the local share admitted, still to be taken off the shared buckets.
    debit: BTreeMap<(String, Dimension), f64>,
}

/// `cfg` with every contract divided by `workers` (rounded down: never more than the
/// share).
pub fn local_share(cfg: &AdmissionConfig, workers: u32) -> AdmissionConfig {
    let w = u64::from(workers.max(1));
    let share = |c: Option<u64>| c.map(|c| c / w);
    AdmissionConfig {
        limits: cfg
            .limits
            .iter()
            .map(|(k, l)| {
                (
                    k.clone(),
                    Limits {
                        rpm: share(l.rpm),
                        tpm: share(l.tpm),
                        itpm: share(l.itpm),
                        otpm: share(l.otpm),
                    },
                )
            })
            .collect(),
        ..cfg.clone()
    }
}

impl SharedBuckets {
    pub fn new(
        shared: RedisBuckets,
        cfg: &AdmissionConfig,
        on_error: OnStoreError,
        workers: u32,
        now: UnixMs,
    ) -> Self {
        let meanwhile = match on_error {
            OnStoreError::LocalShare => {
                "admission uses this process's local share (1 / workers) of each bucket"
            }
            OnStoreError::FailClosed => {
                "admission sheds every limited request (on_store_error: fail_closed)"
            }
        };
        let target = shared.store().target().to_string();
        SharedBuckets {
            shared,
            local: Arc::new(Buckets::new(&local_share(cfg, workers), now)),
            on_error,
            degraded: Degraded::new(target, meanwhile),
            missed: Mutex::default(),
            workers: workers.max(1),
            seeded: std::sync::atomic::AtomicU64::new(0),
            losses_logged: std::sync::atomic::AtomicU64::new(0),
            log: Arc::new(|line| eprintln!("{line}")),
        }
    }

    /// The local share, lowered (once per episode, before its first decision) to
    /// `1 / workers` of the level this process last saw in each shared bucket, refilled
    /// since: never a fresh full bucket. A bucket this process never saw (it started
    /// while the store was down, or never spent it) starts empty and fills at its share
    /// of the refill: the fleet may have spent it all, and nothing says otherwise.
    fn local_now(&self, now: UnixMs) -> &Buckets {
        use std::sync::atomic::Ordering;
        let episode = self.degraded.episodes();
        if self.seeded.swap(episode, Ordering::Relaxed) != episode {
            let w = f64::from(self.workers);
            let seen = self.shared.seen();
            for (name, dim, (level, at)) in &seen {
                self.local.lower_to_view(name, *dim, level / w, *at, now);
            }
            for v in self.local.snapshot(now) {
                if !seen
                    .iter()
                    .any(|(n, d, _)| *n == v.bucket && *d == v.dimension)
                {
                    self.local
                        .lower_to_view(&v.bucket, v.dimension, 0.0, now, now);
                }
            }
        }
        &self.local
    }

    /// Logs, once per loss, that the store lost buckets this process had seen.
    fn note_losses(&self) {
        use std::sync::atomic::Ordering;
        let losses = self.shared.losses();
        if losses > self.losses_logged.swap(losses, Ordering::Relaxed) {
            (self.log)(&format!(
                "poolctl: warning: state store {} lost the admission buckets this process had seen (restarted without persistence, failed over, or flushed); re-created at this process's view of their levels, not full",
                self.shared.store().target()
            ));
        }
    }

    fn missed(&self) -> std::sync::MutexGuard<'_, Missed> {
        // Only whole pushes and takes happen under it: a poisoned lock is still sound.
        self.missed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The shared store answered `attempt`; when that ended an episode, what was
    /// admitted and shed meanwhile is added to Redis's counters.
    async fn answered(&self, attempt: super::fallback::Attempt, now: UnixMs) {
        if self.degraded.answered(attempt) {
            self.catch_up(now).await;
        }
    }

    /// Adds to Redis's per-minute counters what the local share spent and what was shed
    /// while Redis could not count it. A write that fails keeps it for the next time
    /// Redis answers.
    async fn catch_up(&self, now: UnixMs) {
        let (spent, sheds, debit) = {
            let mut m = self.missed();
            let fresh = self.local.drain_usage().spent;
            for (_, bucket, dim, x) in &fresh {
                *m.debit.entry((bucket.clone(), *dim)).or_default() += x;
            }
            m.spent.extend(fresh);
            (
                std::mem::take(&mut m.spent),
                std::mem::take(&mut m.sheds),
                std::mem::take(&mut m.debit),
            )
        };
        if !debit.is_empty() {
            if self.shared.debit(&debit, now).await.is_err() {
                let mut m = self.missed();
                for (k, x) in debit {
                    *m.debit.entry(k).or_default() += x;
                }
            }
            self.note_losses();
        }
        if spent.is_empty() && sheds.is_empty() {
            return;
        }
        if self.shared.add_counts(&spent, &sheds).await.is_err() {
            let mut m = self.missed();
            m.spent.extend(spent);
            for (k, n) in sheds {
                *m.sheds.entry(k).or_default() += n;
            }
        }
    }

    /// Sends the episode log lines to `log` instead of stderr.
    pub fn with_log(mut self, log: super::LogSink) -> Self {
        self.degraded = self.degraded.with_log(log.clone());
        self.log = log;
        self
    }

    /// Decisions made without the shared store, in all.
    pub fn degraded(&self) -> u64 {
        self.degraded.decisions()
    }

    pub fn episodes(&self) -> u64 {
        self.degraded.episodes()
    }

    /// The local share's buckets (what a degraded process admits from).
    pub fn local(&self) -> &Arc<Buckets> {
        &self.local
    }

    /// How long until the refill alone would admit `cost` on `route`'s buckets
    /// (`Some(0)`: now, `None`: never), in Redis; while Redis fails, by
    /// `on_store_error` (the local share's refill, or never).
    pub async fn wait_ms(
        &self,
        route: &Route,
        cost: Cost,
        priority: Priority,
        now: UnixMs,
    ) -> Option<u64> {
        let cover = self.shared.cover(route)?;
        if let Some(attempt) = self.degraded.try_shared() {
            match self.shared.wait_ms(&cover, cost, priority, now).await {
                Ok(wait) => {
                    self.answered(attempt, now).await;
                    return wait;
                }
                Err(e) => self.degraded.failed(&e),
            }
        }
        match self.on_error {
            OnStoreError::FailClosed => None,
            OnStoreError::LocalShare => {
                let local = self.local_now(now);
                match local.cover(route) {
                    Some(c) => local.wait_ms(&c, cost, priority, now),
                    None => Some(0),
                }
            }
        }
    }

    /// Every bucket's level as the fleet shares it; while Redis fails, the local share's
    /// (what this process admits from meanwhile). Not an admission decision: not counted.
    pub async fn snapshot(&self, now: UnixMs) -> Vec<crate::admission::buckets::BucketView> {
        if self.degraded.healthy().is_some() {
            if let Ok(views) = self.shared.snapshot(now).await {
                return views;
            }
        }
        self.local.snapshot(now)
    }

    /// Counts a shed here and in Redis (where `poolctl capacity` reads the fleet's).
    /// During an episode Redis is not asked (a count is not a decision, so it is not
    /// counted as degraded); a count Redis does not take opens one.
    pub async fn record_shed(&self, priority: Priority, route: &Route, now: UnixMs) {
        self.local.record_shed(priority, route);
        if let Some(attempt) = self.degraded.healthy() {
            match self.shared.record_shed(priority, route, now).await {
                Ok(()) => return self.answered(attempt, now).await,
                Err(e) => self.degraded.failed(&e),
            }
        }
        let minute = now.div_euclid(60_000);
        *self
            .missed()
            .sheds
            .entry((minute, priority, route.clone()))
            .or_default() += 1;
    }

    /// Admits `cost` on every bucket that covers `route`, in Redis; while Redis fails,
    /// by `on_store_error`.
    pub async fn acquire(
        &self,
        route: &Route,
        cost: Cost,
        priority: Priority,
        now: UnixMs,
    ) -> Result<Hold, Refused> {
        let Some(cover) = self.shared.cover(route) else {
            return Ok(Hold::Unlimited);
        };
        if let Some(attempt) = self.degraded.try_shared() {
            match self.shared.acquire(&cover, cost, priority, now).await {
                Ok(got) => {
                    self.note_losses();
                    self.answered(attempt, now).await;
                    return got.map(Hold::Shared);
                }
                Err(e) => self.degraded.failed(&e),
            }
        }
        match self.on_error {
            OnStoreError::FailClosed => Err(Refused { wait_ms: None }),
            OnStoreError::LocalShare => {
                let local = self.local_now(now);
                match local.cover(route) {
                    Some(c) => local.acquire(&c, cost, priority, now).map(Hold::Local),
                    None => Ok(Hold::Unlimited),
                }
            }
        }
    }

    /// Trues a reservation up. A shared one whose settle fails is left to the refill:
    /// its unused part is not refunded, which can only under-admit.
    pub async fn settle(
        &self,
        held: Hold,
        spent: Spent,
        remaining: &[(Dimension, u64)],
        now: UnixMs,
    ) {
        match held {
            Hold::Unlimited => {}
            Hold::Local(r) => {
                self.local.settle(r, spent, remaining, now);
                // Admitted during an episode that has ended since: its spend goes to
                // Redis now, not at the next episode's end.
                if self.degraded.healthy().is_some() {
                    self.catch_up(now).await;
                }
            }
            Hold::Shared(r) => {
                let attempt = self.degraded.begin();
                match self.shared.settle(&r, spent, remaining, now).await {
                    Ok(()) => self.answered(attempt, now).await,
                    Err(e) => self.degraded.failed(&e),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_share_never_rounds_up() {
        let mut limits = std::collections::BTreeMap::new();
        limits.insert(
            "a".to_string(),
            Limits {
                rpm: Some(10),
                tpm: Some(3),
                ..Limits::default()
            },
        );
        let cfg = AdmissionConfig {
            limits,
            ..AdmissionConfig::default()
        };
        let l = local_share(&cfg, 4).limits["a"];
        assert_eq!((l.rpm, l.tpm, l.itpm), (Some(2), Some(0), None));
    }
}
