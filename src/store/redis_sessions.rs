//! The fleet's session pins in Redis: one string key per session,
//! `poolctl:s:{ID}` → the route, expiring `idle_ms` after it was last pinned, so Redis
//! itself forgets idle sessions and a fleet's memory of them is bounded by its clients'
//! activity. One command a call, bounded by the store's deadline.

use super::{RedisStore, StoreError};
use crate::core::vocab::Route;

pub struct RedisSessions {
    redis: RedisStore,
    /// A pin's time to live: the sessions' idle expiry.
    idle_ms: u64,
}

/// A session's key. The id is between braces: it is its own hash tag on a cluster.
fn key(id: &str) -> String {
    format!("{}s:{{{id}}}", super::redis::PREFIX)
}

impl RedisSessions {
    pub fn new(redis: RedisStore, idle_ms: u64) -> Self {
        RedisSessions { redis, idle_ms }
    }

    /// The route `id` is pinned to in the fleet (`None`: not pinned, or expired).
    pub async fn get(&self, id: &str) -> Result<Option<Route>, StoreError> {
        let key = key(id);
        let got: Option<String> = self
            .redis
            .within(|mut c| async move { redis::cmd("GET").arg(&key).query_async(&mut c).await })
            .await?;
        // A value this store did not write is no pin.
        Ok(got.and_then(|r| Route::parse(&r).ok()))
    }

    /// Pins `id` to `route` for `idle_ms`.
    pub async fn put(&self, id: &str, route: &Route) -> Result<(), StoreError> {
        let (key, value) = (key(id), route.as_str().to_string());
        let ttl = self.idle_ms.max(1);
        self.redis
            .within(|mut c| async move {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(&value)
                    .arg("PX")
                    .arg(ttl)
                    .query_async::<()>(&mut c)
                    .await
            })
            .await
    }

    /// `put` on a task of its own: the caller does not wait, and a failure leaves only
    /// this process's pin (the next success writes the fleet's again).
    pub fn put_later(&self, id: &str, route: &Route) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let this = RedisSessions {
            redis: self.redis.clone(),
            idle_ms: self.idle_ms,
        };
        let (id, route) = (id.to_string(), route.clone());
        tokio::spawn(async move {
            let _ = this.put(&id, &route).await;
        });
    }
}
