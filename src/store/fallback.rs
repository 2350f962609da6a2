//! What a serving process does while its shared store cannot be reached: it keeps
//! routing on its own view, and says so. Every read and write goes to the shared store
//! first (which bounds each call by its deadline); what it answers is mirrored into a
//! local [`MemoryStore`], so that when the shared store fails, health follows the last
//! shared view plus this process's own transitions since. Each call answered locally is
//! a degraded decision: counted, and logged once per episode (when the store first
//! fails and when it answers again), never once per request. While an episode lasts the
//! shared store is tried again at most every [`RETRY_MS`], so a slow store costs one
//! deadline per interval, not one per call.
//!
//! A store can also come back without its data (a Redis restarted without persistence,
//! a failover to a replica that lagged, FLUSHALL), and a lost retirement would un-retire
//! a route (decisions.md: retired records outlive processes). So at most every
//! [`WRITE_BACK_CHECK_MS`], and when an episode ends, the process asks the store whether
//! it lost its data ([`HealthStore::write_back_if_lost`]) and, if so, writes back the
//! retired records and open breakers it knows, and says so once in its log.
//!
//! Health never fails closed: a store outage must not take traffic down (a route would
//! otherwise be refused for a reason that is not its own). `on_store_error` decides what
//! admission does (`local_share` or `fail_closed`); health and breakers always follow
//! the local view.

use super::{HealthStore, Known, MemoryStore, StoreError, StoreFuture};
use crate::core::clock::{Stopwatch, UnixMs};
use crate::core::vocab::Route;
use crate::policy::breaker::{self, BreakerConfig};
use crate::policy::health::{Health, Transition};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How often, at most, a failed shared store is tried again during an episode.
pub const RETRY_MS: u64 = 250;

/// How often, at most, a process checks whether the shared store lost its data: one
/// small script per provider it knows a retirement or an open breaker of.
pub const WRITE_BACK_CHECK_MS: u64 = 1_000;

/// Where the episode log lines go (stderr by default).
pub type LogSink = Arc<dyn Fn(&str) + Send + Sync>;

/// The episodes of one shared store's failures: when to try it again, what to log, and
/// how many decisions were made without it. One per thing that degrades (health, the
/// buckets), each with its own words for what it does meanwhile.
pub struct Degraded {
    /// The shared store's name, for the log.
    target: String,
    /// What the process does while the store fails, for the log.
    meanwhile: &'static str,
    episode: Mutex<Option<Episode>>,
    decisions: AtomicU64,
    episodes: AtomicU64,
    log: LogSink,
}

/// A call to the shared store: how many episodes had opened when it began.
#[derive(Debug, Clone, Copy)]
pub struct Attempt(u64);

/// One stretch of time during which the shared store failed.
struct Episode {
    decisions: u64,
    /// Since the shared store was last tried.
    last_try: Stopwatch,
}

impl Degraded {
    pub fn new(target: impl Into<String>, meanwhile: &'static str) -> Self {
        Degraded {
            target: target.into(),
            meanwhile,
            episode: Mutex::new(None),
            decisions: AtomicU64::new(0),
            episodes: AtomicU64::new(0),
            log: Arc::new(|line| eprintln!("{line}")),
        }
    }

    /// Sends the episode log lines to `log` instead of stderr.
    pub fn with_log(mut self, log: LogSink) -> Self {
        self.log = log;
        self
    }

    /// Decisions made without the shared store, in all.
    pub fn decisions(&self) -> u64 {
        self.decisions.load(Ordering::Relaxed)
    }

    /// How many times the shared store started failing.
    pub fn episodes(&self) -> u64 {
        self.episodes.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Episode>> {
        self.episode.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this call should try the shared store: always, unless an episode is open
    /// and the store was tried too recently. A `None` is a degraded decision, counted.
    pub fn try_shared(&self) -> Option<Attempt> {
        let mut ep = self.lock();
        match ep.as_mut() {
            None => Some(self.begin()),
            Some(e) if e.last_try.elapsed_ms() >= RETRY_MS => {
                // This call is the one that tries again; the others stay local meanwhile.
                e.last_try = Stopwatch::start();
                Some(self.begin())
            }
            Some(e) => {
                e.decisions += 1;
                self.decisions.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Whether an episode is open: the shared store failed and has not answered since.
    pub fn in_episode(&self) -> bool {
        self.lock().is_some()
    }

    /// A call to the shared store while no episode is open (`None` during one).
    pub fn healthy(&self) -> Option<Attempt> {
        self.lock().is_none().then(|| self.begin())
    }

    /// A call to the shared store, begun now.
    pub fn begin(&self) -> Attempt {
        Attempt(self.episodes.load(Ordering::Relaxed))
    }

    /// The shared store answered the call `a`: an open episode ends (logged once),
    /// unless it opened after `a` began — a reply already on its way when the store
    /// went down says nothing about the store now. True when this ended an episode.
    pub fn answered(&self, a: Attempt) -> bool {
        let mut ep = self.lock();
        if ep.is_some() && self.episodes.load(Ordering::Relaxed) != a.0 {
            return false;
        }
        match ep.take() {
            Some(e) => {
                (self.log)(&format!(
                    "poolctl: state store {} answers again; {} decisions were made without it meanwhile",
                    self.target, e.decisions
                ));
                true
            }
            None => false,
        }
    }

    /// The shared store failed: a degraded decision, counted; the first of an episode
    /// is logged.
    pub fn failed(&self, e: &StoreError) {
        self.decisions.fetch_add(1, Ordering::Relaxed);
        let mut ep = self.lock();
        match ep.as_mut() {
            Some(ep) => ep.decisions += 1,
            None => {
                self.episodes.fetch_add(1, Ordering::Relaxed);
                *ep = Some(Episode {
                    decisions: 1,
                    last_try: Stopwatch::start(),
                });
                (self.log)(&format!(
                    "poolctl: warning: {e}; {} until it answers (each such decision is counted)",
                    self.meanwhile
                ));
            }
        }
    }
}

pub struct FallbackStore {
    shared: Arc<dyn HealthStore>,
    /// What the shared store last answered, plus what this process did while it could not.
    local: MemoryStore,
    degraded: Degraded,
    /// The breakers this process saw open in the shared store (encoded state), to be
    /// written back if the store loses them.
    open_breakers: Mutex<std::collections::BTreeMap<Route, String>>,
    /// Since the last check for a lost store (None: never checked).
    last_check: Mutex<Option<Stopwatch>>,
    /// The retirements this process knows, with their reasons: confirmed (the store said
    /// retired last), or not (it said otherwise since: a restore, or a loss; the next
    /// check tells which, and drops it or writes it back).
    retired: Mutex<std::collections::BTreeMap<Route, (String, bool)>>,
    /// Set when this process learns a retirement or an open breaker it did not know:
    /// the next call checks the store's epoch at once, so it is known from then on.
    grew: std::sync::atomic::AtomicBool,
}

impl FallbackStore {
    pub fn new(shared: Arc<dyn HealthStore>, target: impl Into<String>) -> Self {
        FallbackStore {
            shared,
            local: MemoryStore::new(),
            degraded: Degraded::new(target, "health and breakers follow this process's own view"),
            open_breakers: Mutex::default(),
            last_check: Mutex::default(),
            retired: Mutex::default(),
            grew: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Sends the episode log lines to `log` instead of stderr.
    pub fn with_log(mut self, log: LogSink) -> Self {
        self.degraded = self.degraded.with_log(log);
        self
    }

    /// The shared store's name, without credentials.
    pub fn target(&self) -> &str {
        &self.degraded.target
    }

    /// Decisions made on the local view because the shared store failed, in all.
    pub fn degraded(&self) -> u64 {
        self.degraded.decisions()
    }

    /// How many times the shared store started failing.
    pub fn episodes(&self) -> u64 {
        self.degraded.episodes()
    }

    /// Runs `shared` unless the episode says local; on failure, `local`.
    async fn either<'a, T: Unpin>(
        &'a self,
        shared: impl FnOnce() -> StoreFuture<'a, T>,
        local: impl FnOnce() -> T,
        mirror: impl FnOnce(&T),
    ) -> Result<T, StoreError> {
        let Some(attempt) = self.degraded.try_shared() else {
            return Ok(local());
        };
        // The call that tries again during an episode first asks whether the store lost
        // what this process knows, and writes it back: so the read that follows sees a
        // retirement a restarted Redis forgot, and no request uses the route meanwhile.
        // A store still down fails this call as it would have failed the read.
        if self.degraded.in_episode() {
            if let Err(e) = self.check_lost(true).await {
                self.degraded.failed(&e);
                return Ok(local());
            }
        }
        match shared().await {
            Ok(v) => {
                self.degraded.answered(attempt);
                mirror(&v);
                // Periodically, for a store that lost its data without an outage
                // (FLUSHALL, a quick failover); a failure is left to the next check.
                let _ = self.check_lost(false).await;
                Ok(v)
            }
            Err(e) => {
                self.degraded.failed(&e);
                Ok(local())
            }
        }
    }
}

impl FallbackStore {
    /// When an episode just ended, or [`WRITE_BACK_CHECK_MS`] has passed: asks the shared
    /// store whether it lost the data of what this process knows, which it writes back
    /// then (logged once per loss). A failed check is left to the next one.
    async fn check_lost(&self, now: bool) -> Result<(), StoreError> {
        {
            let mut last = self.last_check.lock().unwrap_or_else(|p| p.into_inner());
            let due = now
                || self.grew.swap(false, Ordering::Relaxed)
                || last
                    .as_ref()
                    .is_none_or(|w| w.elapsed_ms() >= WRITE_BACK_CHECK_MS);
            if !due {
                return Ok(());
            }
            *last = Some(Stopwatch::start());
        }
        let breakers = self
            .open_breakers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let retired = self
            .retired
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut known: Vec<Known> = retired
            .iter()
            .map(|(route, (reason, _))| Known {
                route: route.clone(),
                retired: Some(reason.clone()),
                open_breaker: breakers.get(route).cloned(),
            })
            .collect();
        for (route, b) in &breakers {
            if !retired.contains_key(route) {
                known.push(Known {
                    route: route.clone(),
                    retired: None,
                    open_breaker: Some(b.clone()),
                });
            }
        }
        if known.is_empty() {
            return Ok(());
        }
        let written = self.shared.write_back_if_lost(&known).await?;
        {
            let mut r = self.retired.lock().unwrap_or_else(|p| p.into_inner());
            for route in &written {
                if let Some((reason, confirmed)) = r.get_mut(route) {
                    *confirmed = true;
                    self.local.put(
                        route,
                        Health::Retired {
                            reason: reason.clone(),
                        },
                    );
                }
            }
            // Not written back: the store changed them itself (a restore), not a loss.
            r.retain(|route, (_, confirmed)| *confirmed || written.contains(route));
        }
        if !written.is_empty() {
            let names: Vec<&str> = written.iter().map(|r| r.as_str()).collect();
            (self.degraded.log)(&format!(
                "poolctl: warning: state store {} lost its data (restarted without persistence, failed over, or flushed); wrote back the retired records and open breakers this process knows: {}",
                self.degraded.target,
                names.join(", ")
            ));
        }
        Ok(())
    }

    /// Mirrors what the shared store said of `route` into the local view, and keeps the
    /// retirements this process knows.
    fn mirror(&self, route: &Route, h: &Health) {
        self.local.put(route, h.clone());
        let mut r = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        match h {
            Health::Retired { reason } => {
                if r.insert(route.clone(), (reason.clone(), true)).is_none() {
                    self.grew.store(true, Ordering::Relaxed);
                }
            }
            _ => {
                if let Some((_, confirmed)) = r.get_mut(route) {
                    *confirmed = false;
                }
            }
        }
    }

    /// Keeps what a shared breaker answer says of the route's breaker: open (until an
    /// instant) or not.
    fn note_breaker(&self, route: &Route, cfg: &BreakerConfig, a: &breaker::Answer) {
        let mut open = self.open_breakers.lock().unwrap_or_else(|p| p.into_inner());
        let until = match a {
            breaker::Answer::Admit(breaker::Admit::Open(until))
            | breaker::Answer::Recorded(Some(until)) => *until,
            breaker::Answer::Admit(breaker::Admit::Yes) => {
                open.remove(route);
                return;
            }
            _ => return,
        };
        let state = breaker::State::Open {
            until,
            open_ms: cfg.open_ms,
        };
        if open.insert(route.clone(), state.encode()).is_none() {
            self.grew.store(true, Ordering::Relaxed);
        }
    }
}

impl HealthStore for FallbackStore {
    fn get<'a>(&'a self, route: &'a Route) -> StoreFuture<'a, Health> {
        StoreFuture::waiting(self.either(
            || self.shared.get(route),
            || self.local.get_now(route),
            |h| self.mirror(route, h),
        ))
    }

    fn get_many<'a>(
        &'a self,
        routes: &'a [&'a Route],
        out: &'a mut Vec<Health>,
    ) -> StoreFuture<'a, ()> {
        StoreFuture::waiting(async move {
            let start = out.len();
            let mut got = Vec::with_capacity(routes.len());
            let shared = async {
                let r = self.shared.get_many(routes, &mut got).await;
                r.map(|()| got)
            };
            let all = self
                .either(
                    || StoreFuture::waiting(shared),
                    || routes.iter().map(|r| self.local.get_now(r)).collect(),
                    |all: &Vec<Health>| {
                        for (r, h) in routes.iter().zip(all) {
                            self.mirror(r, h);
                        }
                    },
                )
                .await?;
            out.truncate(start);
            out.extend(all);
            Ok(())
        })
    }

    fn list(&self) -> StoreFuture<'_, Vec<(Route, Health)>> {
        StoreFuture::waiting(self.either(|| self.shared.list(), || self.local.list_now(), |_| {}))
    }

    fn apply<'a>(&'a self, route: &'a Route, t: Transition) -> StoreFuture<'a, (Health, Health)> {
        let local_t = t.clone();
        StoreFuture::waiting(self.either(
            || self.shared.apply(route, t),
            || self.local.apply_now(route, local_t),
            |(_, new)| self.mirror(route, new),
        ))
    }

    fn breaker<'a>(
        &'a self,
        route: &'a Route,
        cfg: BreakerConfig,
        op: breaker::Step,
    ) -> StoreFuture<'a, breaker::Answer> {
        StoreFuture::waiting(self.either(
            move || self.shared.breaker(route, cfg, op),
            move || self.local.breaker_now(route, &cfg, op),
            move |a| self.note_breaker(route, &cfg, a),
        ))
    }

    fn breaker_open<'a>(&'a self, route: &'a Route, now: UnixMs) -> StoreFuture<'a, bool> {
        StoreFuture::waiting(self.either(
            move || self.shared.breaker_open(route, now),
            move || self.local.breaker_open_now(route, now),
            |_| {},
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quiet(lines: &Arc<Mutex<Vec<String>>>) -> Degraded {
        let lines = lines.clone();
        Degraded::new("redis://x/0", "meanwhile")
            .with_log(Arc::new(move |l| lines.lock().unwrap().push(l.to_string())))
    }

    fn down() -> StoreError {
        StoreError::Backend {
            path: "redis://x/0".into(),
            message: "connection refused".into(),
        }
    }

    #[test]
    fn a_reply_already_on_its_way_when_the_store_went_down_does_not_end_the_episode() {
        let lines = Arc::default();
        let d = quiet(&lines);
        let in_flight = d.try_shared().expect("no episode yet");
        let failing = d.try_shared().expect("no episode yet");
        d.failed(&down());
        // The call sent before the failure answers afterwards: the store is still down.
        d.answered(in_flight);
        assert!(d.healthy().is_none(), "the episode ended on a stale reply");
        assert_eq!(d.episodes(), 1);
        let _ = failing;
        assert_eq!(lines.lock().unwrap().len(), 1, "logged once");
    }

    #[test]
    fn the_call_that_tries_again_during_an_episode_ends_it_when_it_answers() {
        let lines = Arc::default();
        let d = quiet(&lines);
        let first = d.try_shared().unwrap();
        d.failed(&down());
        let _ = first;
        assert!(d.try_shared().is_none(), "tried again too soon");
        assert_eq!(d.decisions(), 2);
        // The episode's own attempt (begun after it opened) answers: it ends.
        let retry = d.begin();
        d.answered(retry);
        assert!(d.healthy().is_some());
        assert_eq!(
            lines.lock().unwrap().len(),
            2,
            "opened and closed, once each"
        );
    }
}
