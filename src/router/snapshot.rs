//! One request's view of the healths ahead of it in the chain, read from the store at
//! most once per selection.

use crate::policy::health::Health;

/// The health of the routes ahead, each read from the store at most once per selection
/// (positions are try-order positions). Read on demand rather than all at once, so that
/// a walk down a long chain stays linear. Only the healths that are not ready are held,
/// sorted by position: a request whose routes are all ready allocates nothing here.
#[derive(Debug, Default)]
pub(super) struct Snapshot {
    pub(super) from: usize,
    /// Bit `i`: position `from + i` has been read. Positions past the 64th ahead are
    /// read again whenever asked (correct, only slower, on chains that long).
    pub(super) read: u64,
    pub(super) held: Vec<(usize, Health)>,
}

impl Snapshot {
    /// The health of the route at try-order position `pos` (ready when never read).
    pub(super) fn at(&self, pos: usize) -> &Health {
        const READY: Health = Health::Ready;
        match self.held.binary_search_by_key(&pos, |(p, _)| *p) {
            Ok(k) => &self.held[k].1,
            Err(_) => &READY,
        }
    }

    pub(super) fn is_read(&self, pos: usize) -> bool {
        pos.checked_sub(self.from)
            .is_some_and(|i| i < 64 && self.read & (1 << i) != 0)
    }

    pub(super) fn put(&mut self, pos: usize, health: Health) {
        if let Some(i) = pos.checked_sub(self.from).filter(|i| *i < 64) {
            self.read |= 1 << i;
        }
        if self.held.is_empty() && matches!(health, Health::Ready) {
            // The common case, every route ahead ready: nothing to search or hold.
            return;
        }
        match (self.held.binary_search_by_key(&pos, |(p, _)| *p), health) {
            (Ok(k), Health::Ready) => {
                self.held.remove(k);
            }
            (Ok(k), h) => self.held[k].1 = h,
            (Err(_), Health::Ready) => {}
            (Err(k), h) => self.held.insert(k, (pos, h)),
        }
    }

    /// Records a health this request itself just stored.
    pub(super) fn set_at(&mut self, pos: usize, health: Health) {
        if self.is_read(pos) {
            self.put(pos, health);
        }
    }
}
