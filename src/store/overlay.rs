//! A store with some routes forced into a state for one command only (`walk --retire`):
//! reads of forced routes see the forced state, every other read and write goes to the
//! real store, which never learns of the forcing.

use super::{HealthStore, StoreError};
use crate::health::Health;
use crate::vocab::Route;
use std::collections::BTreeMap;
use std::sync::Arc;

pub struct OverlayStore {
    base: Arc<dyn HealthStore>,
    forced: BTreeMap<Route, Health>,
}

impl OverlayStore {
    pub fn new(base: Arc<dyn HealthStore>, forced: BTreeMap<Route, Health>) -> Self {
        OverlayStore { base, forced }
    }
}

impl HealthStore for OverlayStore {
    fn get(&self, route: &Route) -> Result<Health, StoreError> {
        match self.forced.get(route) {
            Some(h) => Ok(h.clone()),
            None => self.base.get(route),
        }
    }

    fn set(&self, route: &Route, health: Health) -> Result<(), StoreError> {
        if self.forced.contains_key(route) {
            return Ok(()); // forced for this command; the real store keeps its own state
        }
        self.base.set(route, health)
    }

    fn list(&self) -> Result<Vec<(Route, Health)>, StoreError> {
        let mut all: BTreeMap<Route, Health> = self.base.list()?.into_iter().collect();
        all.extend(self.forced.clone());
        Ok(all.into_iter().collect())
    }
}
