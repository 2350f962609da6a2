//! In-process health, for the chaos harness and tests: each scenario gets a fresh one.
//! A transition (or a breaker step) runs under its map's lock, so it sees exactly the
//! state it replaces.

use super::health_store::ready;
use super::{HealthStore, StoreFuture};
use crate::core::clock::UnixMs;
use crate::core::vocab::Route;
use crate::policy::breaker::{self, BreakerConfig};
use crate::policy::health::{apply, Health, Transition};
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Debug, Default)]
pub struct MemoryStore {
    routes: Mutex<BTreeMap<Route, Health>>,
    /// Breaker states other than the fresh closed one.
    breakers: Mutex<BTreeMap<Route, breaker::State>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock cannot leave a half-written entry
    // (inserts are single operations), so the poisoned map is still sound.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Route, Health>> {
        lock(&self.routes)
    }

    /// Applies a breaker step at once.
    pub fn breaker_now(
        &self,
        route: &Route,
        cfg: &BreakerConfig,
        op: breaker::Step,
    ) -> breaker::Answer {
        let mut map = lock(&self.breakers);
        match map.get_mut(route) {
            Some(state) => {
                let answer = breaker::step(state, cfg, op);
                if state.is_fresh() {
                    map.remove(route);
                }
                answer
            }
            None => {
                // Most routes' breakers are closed with no history: no entry, no clone.
                let mut state = breaker::State::default();
                let answer = breaker::step(&mut state, cfg, op);
                if !state.is_fresh() {
                    map.insert(route.clone(), state);
                }
                answer
            }
        }
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

    /// Sets a route's health as another store answered it (a mirror of a shared store).
    pub fn put(&self, route: &Route, health: Health) {
        let mut map = self.lock();
        if health == Health::Ready {
            map.remove(route);
        } else if map.get(route) != Some(&health) {
            map.insert(route.clone(), health);
        }
    }

    /// Every route with a stored state, sorted by route.
    pub fn list_now(&self) -> Vec<(Route, Health)> {
        self.lock()
            .iter()
            .map(|(r, h)| (r.clone(), h.clone()))
            .collect()
    }

    /// Whether the route's breaker is open at `now`.
    pub fn breaker_open_now(&self, route: &Route, now: UnixMs) -> bool {
        lock(&self.breakers)
            .get(route)
            .is_some_and(|s| s.is_open(now))
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
        ready(Ok(self.list_now()))
    }

    fn apply<'a>(&'a self, route: &'a Route, t: Transition) -> StoreFuture<'a, (Health, Health)> {
        ready(Ok(self.apply_now(route, t)))
    }

    fn breaker<'a>(
        &'a self,
        route: &'a Route,
        cfg: BreakerConfig,
        op: breaker::Step,
    ) -> StoreFuture<'a, breaker::Answer> {
        ready(Ok(self.breaker_now(route, &cfg, op)))
    }

    fn breaker_open<'a>(&'a self, route: &'a Route, now: UnixMs) -> StoreFuture<'a, bool> {
        ready(Ok(self.breaker_open_now(route, now)))
    }
}
