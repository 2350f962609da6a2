//! The answer bytes a process holds at once, over every upstream call: a whole body
//! being read, a stream's text so far. One hostile upstream may send up to
//! `max_stream_bytes`; sixty at once would take the gateway's memory with them.
//!
//! Bytes are charged as they arrive, never reserved up front (an answer's size is not
//! known before it comes), and given back when the call's holding is dropped. Past the
//! cap (`poolctl serve --max-held-answer-bytes`), a reader that holds more than its fair
//! share (the cap over the calls holding bytes) waits before it reads again: the
//! upstreams that hold the most stop being read (TCP backpressure) while the small ones
//! go on, until room frees. A stream that waits past its idle deadline then fails as
//! any stalled stream does.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::LazyLock;
use tokio::sync::Notify;

/// The process's answer bytes, and its cap.
pub struct Held {
    total: AtomicUsize,
    cap: AtomicUsize,
    holders: AtomicUsize,
    waits: AtomicU64,
    freed: Notify,
}

/// The one budget of the process. Unbounded until `set_cap` (the gateway sets it).
pub static HELD: LazyLock<Held> = LazyLock::new(|| Held {
    total: AtomicUsize::new(0),
    cap: AtomicUsize::new(usize::MAX),
    holders: AtomicUsize::new(0),
    waits: AtomicU64::new(0),
    freed: Notify::new(),
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

/// Whether a reader holding `mine` of `total` must wait: past the cap, and above its
/// fair share of it. Pure, so the rule can be read and tested alone.
pub fn must_wait(total: usize, cap: usize, holders: usize, mine: usize) -> bool {
    total > cap && mine > cap / holders.max(1)
}

/// One call's share of the budget: the bytes it holds, given back when dropped.
pub struct Holding {
    bytes: usize,
}

impl Default for Holding {
    fn default() -> Self {
        Holding::new()
    }
}

impl Holding {
    pub fn new() -> Self {
        HELD.holders.fetch_add(1, Ordering::Relaxed);
        Holding { bytes: 0 }
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
                must_wait(
                    held.total.load(Ordering::Relaxed),
                    held.cap.load(Ordering::Relaxed),
                    held.holders.load(Ordering::Relaxed),
                    self.bytes,
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
        if self.bytes > 0 {
            HELD.freed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_the_cap_nobody_waits() {
        assert!(!must_wait(100, 256, 3, 90));
    }

    #[test]
    fn past_the_cap_only_those_above_their_fair_share_wait() {
        // Cap 300 over 3 readers: a fair share is 100.
        assert!(must_wait(400, 300, 3, 250), "the largest holder waits");
        assert!(!must_wait(400, 300, 3, 100), "a fair share goes on");
        assert!(!must_wait(400, 300, 3, 50), "a small one goes on");
    }

    #[test]
    fn a_lone_reader_past_the_cap_waits() {
        assert!(must_wait(300, 256, 1, 300));
    }
}
