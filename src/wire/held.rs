//! The answer bytes a process holds at once, over every upstream call: a whole body
//! being read, a stream's text so far. One hostile upstream may send up to
//! `max_stream_bytes`; sixty at once would take the gateway's memory with them.
//!
//! Bytes are charged as they arrive, never reserved up front (an answer's size is not
//! known before it comes), and given back when the call's holding is dropped. Past the
//! cap (`poolctl serve --max-held-answer-bytes`), a reader that holds more than its fair
//! share (the cap over the calls holding bytes) waits before it reads again: the
//! upstreams that hold the most stop being read (TCP backpressure) while the small ones
//! go on, until room frees. Of the calls that would wait, the oldest goes on: with
//! sixty equal streams past the cap, one reads to its end and frees its bytes, then the
//! next, instead of all sixty waiting for each other until their idle deadlines (and a
//! call that holds little, however old, never makes a large one wait for room it
//! cannot free). A stream that waits past its idle deadline fails as any stalled stream
//! does.

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
    /// Calls holding bytes: a fair share is the cap over them.
    holding: AtomicUsize,
    /// The calls that would wait now, by the order they began: the first goes on.
    over: Mutex<BTreeSet<u64>>,
    next: AtomicU64,
}

/// The one budget of the process. Unbounded until `set_cap` (the gateway sets it).
pub static HELD: LazyLock<Held> = LazyLock::new(|| Held {
    total: AtomicUsize::new(0),
    cap: AtomicUsize::new(usize::MAX),
    holders: AtomicUsize::new(0),
    waits: AtomicU64::new(0),
    freed: Notify::new(),
    holding: AtomicUsize::new(0),
    over: Mutex::new(BTreeSet::new()),
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

/// Whether a reader holding `mine` of `total` is over: past the cap and above its fair
/// share of it (`holders`: the calls holding bytes). Of the calls over, all wait but the
/// oldest. Pure, so the rule can be read and tested alone.
pub fn is_over(total: usize, cap: usize, holders: usize, mine: usize) -> bool {
    total > cap && mine > cap / holders.max(1)
}

fn over() -> std::sync::MutexGuard<'static, BTreeSet<u64>> {
    // One insert, removal or look under it: a poisoned lock is still sound.
    HELD.over.lock().unwrap_or_else(|p| p.into_inner())
}

/// One call's share of the budget: the bytes it holds, given back when dropped.
pub struct Holding {
    bytes: usize,
    /// The order the call began in.
    seq: u64,
    /// It is in the set of calls over their share.
    in_over: std::sync::atomic::AtomicBool,
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
        Holding {
            bytes: 0,
            seq,
            in_over: false.into(),
        }
    }

    /// `n` more bytes arrived and are held.
    pub fn charge(&mut self, n: usize) {
        if self.bytes == 0 && n > 0 {
            HELD.holding.fetch_add(1, Ordering::Relaxed);
        }
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
                let total = held.total.load(Ordering::Relaxed);
                let cap = held.cap.load(Ordering::Relaxed);
                let holding = held.holding.load(Ordering::Relaxed);
                // The set is touched only past the cap: never on the common path.
                if !is_over(total, cap, holding, self.bytes) {
                    self.leave_over();
                    return false;
                }
                self.in_over.store(true, Ordering::Relaxed);
                let mut over = over();
                over.insert(self.seq);
                over.first() != Some(&self.seq)
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

impl Holding {
    /// This call is no longer over: out of the set, and the next oldest may go on.
    fn leave_over(&self) {
        if !self.in_over.swap(false, Ordering::Relaxed) {
            return;
        }
        let was_first = {
            let mut over = over();
            let first = over.first() == Some(&self.seq);
            over.remove(&self.seq);
            first
        };
        if was_first {
            HELD.freed.notify_waiters();
        }
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        HELD.total.fetch_sub(self.bytes, Ordering::Relaxed);
        HELD.holders.fetch_sub(1, Ordering::Relaxed);
        if self.bytes > 0 {
            HELD.holding.fetch_sub(1, Ordering::Relaxed);
            self.leave_over();
            // Room freed.
            HELD.freed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_the_cap_nobody_is_over() {
        assert!(!is_over(100, 256, 3, 90));
    }

    #[test]
    fn past_the_cap_only_those_above_their_fair_share_are_over() {
        // Cap 300 over 3 holders: a fair share is 100.
        assert!(is_over(400, 300, 3, 250), "the largest holder");
        assert!(!is_over(400, 300, 3, 100), "a fair share goes on");
        assert!(!is_over(400, 300, 3, 50), "a small one goes on");
        assert!(is_over(300, 256, 1, 300), "a lone holder past the cap");
    }
}
