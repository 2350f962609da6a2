//! The answer bytes a process holds at once, over every upstream call: a whole body
//! being read, a stream's text so far. One hostile upstream may send up to
//! `max_stream_bytes`; sixty at once would take the gateway's memory with them.
//!
//! Bytes are charged as they arrive, never reserved up front (an answer's size is not
//! known before it comes), and given back when the call's holding is dropped. Past the
//! cap (`poolctl serve --max-held-answer-bytes`), a reader that holds more than its fair
//! share (the cap over the calls holding bytes) waits before it reads again: the
//! upstreams that hold the most stop being read (TCP backpressure) while the small ones
//! go on, until room frees. The oldest call never waits: with sixty equal streams past
//! the cap, one goes on to its end and frees its bytes, then the next, instead of all
//! sixty waiting for each other until their idle deadlines. A stream that waits past
//! its idle deadline fails as any stalled stream does.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};
use tokio::sync::Notify;

/// The process's answer bytes, and its cap.
pub struct Held {
    total: AtomicUsize,
    cap: AtomicUsize,
    holders: AtomicUsize,
    waits: AtomicU64,
    freed: Notify,
    /// The live calls, by the order they began: the first never waits.
    live: Mutex<BTreeSet<u64>>,
    next: AtomicU64,
}

/// The one budget of the process. Unbounded until `set_cap` (the gateway sets it).
pub static HELD: LazyLock<Held> = LazyLock::new(|| Held {
    total: AtomicUsize::new(0),
    cap: AtomicUsize::new(usize::MAX),
    holders: AtomicUsize::new(0),
    waits: AtomicU64::new(0),
    freed: Notify::new(),
    live: Mutex::new(BTreeSet::new()),
    next: AtomicU64::new(0),
});

/// The gateway's default cap: 256 MiB.
pub const DEFAULT_MAX_HELD_ANSWER_BYTES: usize = 256 << 20;

impl Held {
    pub fn set_cap(&self, cap: usize) {
        self.cap.store(cap.max(1), Ordering::Relaxed);
        self.freed.notify_waiters();
    }

    /// Answer bytes held now, over every call.
    pub fn total(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// Times a reader waited for room.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }
}

/// Whether a reader holding `mine` of `total` must wait: past the cap, above its fair
/// share of it, and not the oldest call (which always goes on, so that room frees).
/// Pure, so the rule can be read and tested alone.
pub fn must_wait(total: usize, cap: usize, holders: usize, mine: usize, oldest: bool) -> bool {
    total > cap && mine > cap / holders.max(1) && !oldest
}

fn live() -> std::sync::MutexGuard<'static, BTreeSet<u64>> {
    // One insert or removal under it: a poisoned lock is still sound.
    HELD.live.lock().unwrap_or_else(|p| p.into_inner())
}

/// One call's share of the budget: the bytes it holds, given back when dropped.
pub struct Holding {
    bytes: usize,
    /// The order the call began in.
    seq: u64,
}

impl Default for Holding {
    fn default() -> Self {
        Holding::new()
    }
}

impl Holding {
    pub fn new() -> Self {
        HELD.holders.fetch_add(1, Ordering::Relaxed);
        let seq = HELD.next.fetch_add(1, Ordering::Relaxed);
        live().insert(seq);
        Holding { bytes: 0, seq }
    }

    /// `n` more bytes arrived and are held.
    pub fn charge(&mut self, n: usize) {
        self.bytes += n;
        HELD.total.fetch_add(n, Ordering::Relaxed);
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Waits until this call may read again (at once, nearly always).
    pub async fn room(&self) {
        let mut counted = false;
        loop {
            let held = &*HELD;
            let blocked = || {
                let (total, cap) = (
                    held.total.load(Ordering::Relaxed),
                    held.cap.load(Ordering::Relaxed),
                );
                // The set is read only past the cap: never on the common path.
                total > cap
                    && must_wait(
                        total,
                        cap,
                        held.holders.load(Ordering::Relaxed),
                        self.bytes,
                        live().first() == Some(&self.seq),
                    )
            };
            if !blocked() {
                return;
            }
            let freed = held.freed.notified();
            tokio::pin!(freed);
            // Registered before the second look, so a release in between is not missed.
            freed.as_mut().enable();
            if !blocked() {
                return;
            }
            if !std::mem::replace(&mut counted, true) {
                held.waits.fetch_add(1, Ordering::Relaxed);
            }
            freed.await;
        }
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        HELD.total.fetch_sub(self.bytes, Ordering::Relaxed);
        HELD.holders.fetch_sub(1, Ordering::Relaxed);
        let was_first = {
            let mut live = live();
            let first = live.first() == Some(&self.seq);
            live.remove(&self.seq);
            first
        };
        // Room freed, or a new oldest call that may now go on.
        if self.bytes > 0 || was_first {
            HELD.freed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_the_cap_nobody_waits() {
        assert!(!must_wait(100, 256, 3, 90, false));
    }

    #[test]
    fn past_the_cap_only_those_above_their_fair_share_wait() {
        // Cap 300 over 3 readers: a fair share is 100.
        assert!(
            must_wait(400, 300, 3, 250, false),
            "the largest holder waits"
        );
        assert!(!must_wait(400, 300, 3, 100, false), "a fair share goes on");
        assert!(!must_wait(400, 300, 3, 50, false), "a small one goes on");
    }

    #[test]
    fn the_oldest_call_always_goes_on_so_that_room_frees() {
        assert!(!must_wait(400, 300, 3, 250, true));
        assert!(
            !must_wait(300, 256, 1, 300, true),
            "a lone reader is the oldest"
        );
    }
}
