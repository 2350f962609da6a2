//! Where route health lives. One async trait, so the router neither knows nor cares
//! whether health is in memory (tests, chaos), in an embedded file, or shared by a fleet.
//! Health changes only through [`HealthStore::apply`]: a [`Transition`] (data, not a
//! closure) that the store applies atomically to the state it replaces, by the one rule
//! in [`crate::policy::health::apply`]. Concurrent requests and other processes change health at
//! once, and no update may be lost: a success in flight while a route was retired
//! leaves it retired.
//!
//! Each route's circuit breaker lives beside its health, in the same store, and changes
//! the same way: a [`breaker::Step`] (data) that the store applies atomically with the
//! pure [`breaker::step`]. So a fleet that shares a store shares its breakers too.

pub mod conversations;
mod fallback;
mod health_store;
mod memory;
mod overlay;
pub mod redis;
pub mod redis_buckets;
pub mod redis_sessions;
pub mod sessions;
pub mod shared_buckets;
mod sqlite;

pub use self::redis::RedisStore;
pub use fallback::{Degraded, FallbackStore, LogSink, RETRY_MS};
pub use health_store::{HealthStore, Known, OnStoreError, StoreError, StoreFuture};
pub use memory::MemoryStore;
pub use overlay::OverlayStore;
pub use sqlite::SqliteStore;
