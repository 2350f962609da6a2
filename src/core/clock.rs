//! The one place that reads time. The router decides on a `Clock` it is given:
//! the system clock in real use, a `ManualClock` in the chaos harness whose `sleep`
//! advances virtual time at once, so a `Retry-After: 3600` costs nothing in a test.
//! `clippy.toml` bans direct clock reads everywhere else.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Milliseconds since the Unix epoch: the instant type of every pure function here.
pub type UnixMs = i64;

/// A boxed future, so `Clock` stays object-safe and `Router` can hold `Arc<dyn Clock>`.
pub type Sleep<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Routing time: what the router reads for `now`, budgets and cooling instants, and
/// how it waits before a retry.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now_ms(&self) -> UnixMs;
    fn sleep(&self, ms: u64) -> Sleep<'_>;
    /// Waits until the instant `at` (at once when it has passed). Requests that wait
    /// side by side for one instant end together: on virtual time the clock moves to
    /// the latest instant waited for, never to the sum of the waits.
    fn sleep_until(&self, at: UnixMs) -> Sleep<'_> {
        let ms = at.saturating_sub(self.now_ms()).max(0) as u64;
        self.sleep(ms)
    }

    /// Virtual time does not pass while a socket is read: the router then adds the real
    /// time spent on sockets to the budget itself (issue 9, item 11).
    fn is_virtual(&self) -> bool {
        false
    }
}

/// Wall-clock time and real sleeps.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // this is the one sanctioned read of the wall clock
    fn now_ms(&self) -> UnixMs {
        // `SystemTime` directly: chrono's `Utc::now()` builds a calendar date from the
        // same reading and `timestamp_millis` turns it back into a count (callgrind: 1.6k
        // instructions a request over the router's four reads, for a subtraction).
        let now = std::time::SystemTime::now();
        match now.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            // Before 1970, as chrono counts it: negative, rounded toward the past.
            Err(e) => {
                let d = e.duration();
                let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
                let part = d.as_nanos() % 1_000_000 != 0;
                -ms - i64::from(part)
            }
        }
    }

    #[allow(clippy::disallowed_methods)]
    fn sleep(&self, ms: u64) -> Sleep<'_> {
        Box::pin(tokio::time::sleep(Duration::from_millis(ms)))
    }
}

/// `at` + `ms`, saturating: a duration of 2^63 ms or more must not wrap an instant
/// into the past (a cooldown that would leave the route ready at once).
pub fn plus_ms(at: UnixMs, ms: u64) -> UnixMs {
    at.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// Virtual time: `sleep` advances the clock and returns at once. Shared by every
/// request of one scenario, so cooling instants and waits line up exactly.
#[derive(Debug)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    pub fn new(start: UnixMs) -> Self {
        ManualClock {
            now: AtomicI64::new(start),
        }
    }

    /// Lets virtual time pass (a scenario's `after_ms`).
    pub fn advance(&self, ms: u64) {
        let _ = self
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| Some(plus_ms(t, ms)));
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> UnixMs {
        self.now.load(Ordering::SeqCst)
    }

    fn sleep(&self, ms: u64) -> Sleep<'_> {
        self.advance(ms);
        Box::pin(std::future::ready(()))
    }

    fn sleep_until(&self, at: UnixMs) -> Sleep<'_> {
        // Yield once before the clock moves: requests in flight at the same instant
        // (a concurrent burst) all reach their own decision at that instant first, so
        // they wait side by side and the clock ends at the latest instant, not the sum.
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.now.fetch_max(at, Ordering::SeqCst);
        })
    }

    fn is_virtual(&self) -> bool {
        true
    }
}

/// Real elapsed time, for latencies and the socket deadlines that guard real I/O.
/// Routing decisions never read it.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(std::time::Instant);

impl Stopwatch {
    #[allow(clippy::disallowed_methods)] // latency is real time by definition
    pub fn start() -> Self {
        Stopwatch(std::time::Instant::now())
    }

    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }

    pub fn elapsed_ms(&self) -> u64 {
        self.0.elapsed().as_millis() as u64
    }
}

/// A real sleep, for the mock providers (they play the outside world, which runs on
/// real time) and for socket-level pacing. Never used for routing waits.
#[allow(clippy::disallowed_methods)]
pub async fn real_sleep(d: Duration) {
    tokio::time::sleep(d).await
}

/// The wall clock for edges that are not routing decisions (CLI rendering, store
/// timestamps of manual actions).
pub fn wall_now_ms() -> UnixMs {
    SystemClock.now_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_clock_sleep_advances_without_waiting() {
        let c = ManualClock::new(1_000);
        let sw = Stopwatch::start();
        c.sleep(3_600_000).await;
        assert_eq!(c.now_ms(), 3_601_000);
        assert!(sw.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn waits_side_by_side_end_at_the_latest_instant_not_the_sum() {
        let c = ManualClock::new(0);
        c.sleep_until(6_000).await;
        c.sleep_until(6_000).await;
        c.sleep_until(4_000).await;
        assert_eq!(c.now_ms(), 6_000);
    }
}
