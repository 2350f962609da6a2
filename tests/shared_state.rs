//! State shared through one store by several routers (stand-ins for several processes,
//! each with its own handle on the store): a breaker opened by failures seen through two
//! routers blocks a third at once.

#[path = "support/shared_breakers.rs"]
mod shared_breakers;

use poolctl::store::{HealthStore, SqliteStore};
use std::sync::Arc;

#[tokio::test]
async fn a_breaker_opened_through_two_processes_blocks_the_third_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let open = || -> Arc<dyn HealthStore> { Arc::new(SqliteStore::open(&path).unwrap()) };
    shared_breakers::a_breaker_opened_through_two_processes_blocks_the_third([
        open(),
        open(),
        open(),
    ])
    .await;
}
