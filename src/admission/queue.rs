//! The local admission queue: requests that no route could admit wait here, in *our*
//! queue, where they can be seen, ordered and shed (seed 004). It holds at most
//! `max_queue_len` requests; past it a request is shed at once. Waiters are served in
//! priority order (`interactive`, `retry`, `background`, `speculative`), first come
//! first served within a class: a request may take capacity from a provider's buckets
//! only when nobody ahead of it waits for that same provider.
//!
//! The queue only keeps order; the waiting itself is the router's, on its clock.

use crate::core::vocab::Priority;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A request's place: its class, then its arrival.
pub type Place = (Priority, u64);

#[derive(Debug, Default)]
pub struct AdmissionQueue {
    /// Place → the provider groups the waiter waits for.
    waiting: Mutex<BTreeMap<Place, Vec<usize>>>,
    arrivals: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // One map operation per critical section: a poisoned lock still guards sound data.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A place in the queue; leaving it (drop) frees the place.
#[derive(Debug)]
pub struct Ticket {
    queue: Arc<AdmissionQueue>,
    pub place: Place,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        lock(&self.queue.waiting).remove(&self.place);
    }
}

impl AdmissionQueue {
    /// Takes a place for a request of `priority` waiting on `groups`, unless
    /// `max_len` requests already wait: `None`, shed at once.
    pub fn enter(
        self: &Arc<Self>,
        priority: Priority,
        groups: Vec<usize>,
        max_len: u32,
    ) -> Option<Ticket> {
        let mut waiting = lock(&self.waiting);
        if waiting.len() >= max_len as usize {
            return None;
        }
        let place = (priority, self.arrivals.fetch_add(1, Ordering::Relaxed));
        waiting.insert(place, groups);
        Some(Ticket {
            queue: self.clone(),
            place,
        })
    }

    /// The provider groups a waiter now waits for (they change as routes refill).
    pub fn wait_on(&self, ticket: &Ticket, groups: Vec<usize>) {
        if let Some(g) = lock(&self.waiting).get_mut(&ticket.place) {
            *g = groups;
        }
    }

    /// Whether someone ahead of `me` waits for `group`, so that `me` must let them take
    /// its capacity first. A request not in the queue (`None`) stands behind every
    /// waiter of its own class and of every more urgent one.
    pub fn blocked(&self, me: Option<Place>, priority: Priority, group: usize) -> bool {
        let waiting = lock(&self.waiting);
        if waiting.is_empty() {
            return false;
        }
        let me = me.unwrap_or((priority, u64::MAX));
        waiting
            .range(..me)
            .any(|(_, groups)| groups.contains(&group))
    }

    pub fn len(&self) -> usize {
        lock(&self.waiting).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_bounded_and_a_place_is_freed_on_leaving() {
        let q = Arc::new(AdmissionQueue::default());
        let a = q.enter(Priority::Background, vec![0], 2).unwrap();
        let _b = q.enter(Priority::Background, vec![0], 2).unwrap();
        assert!(q.enter(Priority::Interactive, vec![0], 2).is_none());
        drop(a);
        assert!(q.enter(Priority::Interactive, vec![0], 2).is_some());
    }

    #[test]
    fn more_urgent_and_earlier_waiters_go_first_per_provider() {
        let q = Arc::new(AdmissionQueue::default());
        let bg = q.enter(Priority::Background, vec![0], 10).unwrap();
        let int = q.enter(Priority::Interactive, vec![0], 10).unwrap();
        // The interactive waiter is ahead of the background one although it came later.
        assert!(!q.blocked(Some(int.place), Priority::Interactive, 0));
        assert!(q.blocked(Some(bg.place), Priority::Background, 0));
        // A newcomer stands behind the waiters of its own class and more urgent ones...
        assert!(q.blocked(None, Priority::Interactive, 0));
        assert!(q.blocked(None, Priority::Speculative, 0));
        // ...but only for the provider they wait for.
        assert!(!q.blocked(None, Priority::Interactive, 1));
        q.wait_on(&int, vec![1]);
        assert!(!q.blocked(Some(bg.place), Priority::Background, 0));
    }
}
