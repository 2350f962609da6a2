//! In-process health, for the chaos harness and tests: each scenario gets a fresh one.
//! A transition runs under the map's lock, so it sees exactly the state it replaces.

use super::{ready, HealthStore, StoreFuture};
use crate::health::{apply, Health, Transition};
use crate::vocab::Route;
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Debug, Default)]
pub struct MemoryStore {
    routes: Mutex<BTreeMap<Route, Health>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Route, Health>> {
        // A panic elsewhere while holding the lock cannot leave a half-written Health
        // (inserts are single operations), so the poisoned map is still sound.
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `t` at once (the memory store never waits and never fails).
    pub fn apply_now(&self, route: &Route, t: Transition) -> (Health, Health) {
        // One search of the map per write (the routing hot path writes once per
        // attempt); the replaced health is moved out, not copied.
        match self.lock().entry(route.clone()) {
            Entry::Vacant(slot) => {
                let new = apply(&Health::Ready, t);
                if new != Health::Ready {
                    slot.insert(new.clone());
                }
                (Health::Ready, new)
            }
            Entry::Occupied(mut slot) => {
                let new = apply(slot.get(), t);
                let old = if new == Health::Ready {
                    slot.remove()
                } else if new != *slot.get() {
                    std::mem::replace(slot.get_mut(), new.clone())
                } else {
                    slot.get().clone()
                };
                (old, new)
            }
        }
    }

    /// The health of a route now.
    pub fn get_now(&self, route: &Route) -> Health {
        self.lock().get(route).cloned().unwrap_or(Health::Ready)
    }
}

impl HealthStore for MemoryStore {
    fn get<'a>(&'a self, route: &'a Route) -> StoreFuture<'a, Health> {
        ready(Ok(self.get_now(route)))
    }

    fn get_many<'a>(
        &'a self,
        routes: &'a [&'a Route],
        out: &'a mut Vec<Health>,
    ) -> StoreFuture<'a, ()> {
        let map = self.lock();
        out.extend(
            routes
                .iter()
                .map(|r| map.get(*r).cloned().unwrap_or(Health::Ready)),
        );
        ready(Ok(()))
    }

    fn list(&self) -> StoreFuture<'_, Vec<(Route, Health)>> {
        ready(Ok(self
            .lock()
            .iter()
            .map(|(r, h)| (r.clone(), h.clone()))
            .collect()))
    }

    fn apply<'a>(&'a self, route: &'a Route, t: Transition) -> StoreFuture<'a, (Health, Health)> {
        ready(Ok(self.apply_now(route, t)))
    }
}
