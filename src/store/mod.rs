//! Where route health lives. One trait, so the router neither knows nor cares whether
//! health is in memory (tests, chaos), in an embedded file, or shared by a fleet.
//! Every `set` is atomic: concurrent requests and other processes change health at
//! once, and no update may be lost.

mod memory;
mod overlay;
mod sqlite;

pub use memory::MemoryStore;
pub use overlay::OverlayStore;
pub use sqlite::SqliteStore;

use crate::health::Health;
use crate::vocab::Route;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("health store {path}: {message}")]
    Backend { path: String, message: String },
}

pub trait HealthStore: Send + Sync {
    /// The stored health of a route; `Ready` when nothing is stored.
    fn get(&self, route: &Route) -> Result<Health, StoreError>;
    fn set(&self, route: &Route, health: Health) -> Result<(), StoreError>;
    /// Every route with a stored state, sorted by route.
    fn list(&self) -> Result<Vec<(Route, Health)>, StoreError>;
    /// The health of each of `routes`, in order: one read for a whole selection.
    fn get_many(&self, routes: &[&Route]) -> Result<Vec<Health>, StoreError> {
        routes.iter().map(|r| self.get(r)).collect()
    }
}
