//! A store with some routes forced into a state for one command only (`walk --retire`):
//! reads of forced routes see the forced state, every other read and write goes to the
//! real store, which never learns of the forcing.

use super::{HealthStore, StoreFuture};
use crate::core::clock::UnixMs;
use crate::core::vocab::Route;
use crate::policy::breaker::{self, BreakerConfig};
use crate::policy::health::{Health, Transition};
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
    fn get<'a>(&'a self, route: &'a Route) -> StoreFuture<'a, Health> {
        match self.forced.get(route) {
            Some(h) => super::health_store::ready(Ok(h.clone())),
            None => self.base.get(route),
        }
    }

    fn get_many<'a>(
        &'a self,
        routes: &'a [&'a Route],
        out: &'a mut Vec<Health>,
    ) -> StoreFuture<'a, ()> {
        StoreFuture::waiting(async move {
            let start = out.len();
            self.base.get_many(routes, out).await?;
            for (h, r) in out[start..].iter_mut().zip(routes) {
                if let Some(forced) = self.forced.get(*r) {
                    *h = forced.clone();
                }
            }
            Ok(())
        })
    }

    fn list(&self) -> StoreFuture<'_, Vec<(Route, Health)>> {
        StoreFuture::waiting(async move {
            let mut all: BTreeMap<Route, Health> = self.base.list().await?.into_iter().collect();
            all.extend(self.forced.clone());
            Ok(all.into_iter().collect())
        })
    }

    fn apply<'a>(&'a self, route: &'a Route, t: Transition) -> StoreFuture<'a, (Health, Health)> {
        match self.forced.get(route) {
            // Forced for this command; the real store keeps its own state.
            Some(h) => super::health_store::ready(Ok((h.clone(), h.clone()))),
            None => self.base.apply(route, t),
        }
    }

    // Breakers are never forced: a forced route is skipped before its breaker is asked.
    fn breaker<'a>(
        &'a self,
        route: &'a Route,
        cfg: BreakerConfig,
        op: breaker::Step,
    ) -> StoreFuture<'a, breaker::Answer> {
        self.base.breaker(route, cfg, op)
    }

    fn breaker_open<'a>(&'a self, route: &'a Route, now: UnixMs) -> StoreFuture<'a, bool> {
        self.base.breaker_open(route, now)
    }
}
