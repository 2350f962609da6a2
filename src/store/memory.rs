//! In-process health, for the chaos harness and tests: each scenario gets a fresh one.

use super::{HealthStore, StoreError};
use crate::health::Health;
use crate::vocab::Route;
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
}

impl HealthStore for MemoryStore {
    fn get(&self, route: &Route) -> Result<Health, StoreError> {
        Ok(self.lock().get(route).cloned().unwrap_or(Health::Ready))
    }

    fn set(&self, route: &Route, health: Health) -> Result<(), StoreError> {
        let mut map = self.lock();
        if health == Health::Ready {
            map.remove(route);
        } else {
            map.insert(route.clone(), health);
        }
        Ok(())
    }

    fn list(&self) -> Result<Vec<(Route, Health)>, StoreError> {
        Ok(self
            .lock()
            .iter()
            .map(|(r, h)| (r.clone(), h.clone()))
            .collect())
    }
}
