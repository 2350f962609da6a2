//! The fleet's store: health and breaker state in Redis, shared by every process that
//! names the same `state: redis://…`. Each route's record is one hash,
//! `poolctl:{PROVIDER}:r:MODEL`, under its provider's hash tag, so that every script
//! touches the keys of one provider only and runs unchanged on Redis Cluster. Every
//! change is ONE Lua script (`redis/health.lua`, `redis/breaker.lua`: the pure rules of
//! `health::apply` and `breaker::step`, transcribed), so it sees exactly the state it
//! replaces whatever other processes do. Every call is bounded by a deadline: an
//! unreachable or slow Redis answers an error in time, never a hang. What a caller does
//! then is its own choice (see [`super::FallbackStore`] for the router's).

use super::{HealthStore, StoreError, StoreFuture};
use crate::core::clock::UnixMs;
use crate::core::vocab::Route;
use crate::policy::breaker::{self, Admit, BreakerConfig};
use crate::policy::health::{Health, Transition};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::Arc;
use std::time::Duration;

/// Every key this store writes starts with it: `FLUSHALL` is never needed to clean up,
/// and a Redis shared with other software keeps its own keys.
pub const PREFIX: &str = "poolctl:";

/// How long one store call may take by default: well under any request deadline, well
/// over a loopback or same-zone round trip.
pub const DEFAULT_DEADLINE_MS: u64 = 200;

static HEALTH: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("redis/health.lua")));
static BREAKER: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("redis/breaker.lua")));

#[derive(Clone)]
pub struct RedisStore {
    /// The URL without credentials, for messages.
    target: Arc<str>,
    conn: ConnectionManager,
    deadline: Duration,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.target)
            .finish()
    }
}

/// A `redis://` URL names a Redis; anything else (a path) names SQLite.
pub fn is_redis_url(state: &str) -> bool {
    state.starts_with("redis://")
}

/// The record of a route.
pub fn key(route: &Route) -> String {
    format!("{PREFIX}{{{}}}:r:{}", route.provider(), route.model())
}

/// The route a record's key names, if it is one.
fn route_of_key(key: &str) -> Option<Route> {
    let rest = key.strip_prefix(PREFIX)?.strip_prefix('{')?;
    let (provider, model) = rest.split_once("}:r:")?;
    Route::parse(&format!("{provider}/{model}")).ok()
}

impl RedisStore {
    /// A store on the Redis at `url`. Connects lazily: opening never waits on the
    /// network, and a Redis that is down now may be up by the first call.
    /// Call it inside a tokio runtime (the connection manager's task lives there).
    pub fn open(url: &str, deadline: Duration) -> Result<Self, StoreError> {
        let client = redis::Client::open(url).map_err(|e| StoreError::Backend {
            path: "redis".into(),
            // The URL may hold a password: name only what is wrong.
            message: format!("`state` is not a usable redis:// URL ({:?})", e.kind()),
        })?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(StoreError::Backend {
                path: "redis".into(),
                message: "opened outside a tokio runtime".into(),
            });
        }
        let info = client.get_connection_info();
        let target: Arc<str> =
            format!("redis://{}/{}", info.addr(), info.redis_settings().db()).into();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(deadline))
            .set_response_timeout(Some(deadline))
            // Reconnection is retried on the next call, not in a loop that outlives it.
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(deadline);
        let conn = ConnectionManager::new_lazy_with_config(client, config).map_err(|e| {
            StoreError::Backend {
                path: target.to_string(),
                message: e.to_string(),
            }
        })?;
        Ok(RedisStore {
            target,
            conn,
            deadline,
        })
    }

    /// Where it is, without credentials.
    pub fn target(&self) -> &str {
        &self.target
    }

    pub(crate) fn err(&self, message: String) -> StoreError {
        StoreError::Backend {
            path: self.target.to_string(),
            message,
        }
    }

    /// Runs `work` on a connection, within the deadline.
    pub(crate) async fn within<T, F, Fut>(&self, work: F) -> Result<T, StoreError>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        match tokio::time::timeout(self.deadline, work(self.conn.clone())).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.err(e.to_string())),
            Err(_) => Err(self.err(format!("no answer within {} ms", self.deadline.as_millis()))),
        }
    }

    /// One round trip: `Ok` when Redis answers in time.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.within(|mut c| async move { redis::cmd("PING").query_async::<String>(&mut c).await })
            .await
            .map(|_| ())
    }

    async fn read(&self, route: &Route) -> Result<Health, StoreError> {
        let key = key(route);
        let fields: Vec<Option<String>> = self
            .within(|mut c| async move {
                redis::cmd("HMGET")
                    .arg(&key)
                    .arg("s")
                    .arg("u")
                    .arg("r")
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(health_of(
            fields.first().cloned().flatten(),
            fields.get(1).cloned().flatten(),
            fields.get(2).cloned().flatten(),
        ))
    }
}

/// A record's fields as health; absent state is ready.
fn health_of(state: Option<String>, until: Option<String>, reason: Option<String>) -> Health {
    let reason = reason.unwrap_or_default();
    match state.as_deref() {
        None | Some("") => Health::Ready,
        Some("cooling") => match until.and_then(|u| u.parse().ok()) {
            Some(until) => Health::Cooling { until, reason },
            // A cooling with no readable end: the safe reading of a damaged record.
            None => Health::Retired { reason },
        },
        Some(_) => Health::Retired { reason },
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

impl HealthStore for RedisStore {
    fn get<'a>(&'a self, route: &'a Route) -> StoreFuture<'a, Health> {
        StoreFuture::waiting(self.read(route))
    }

    fn get_many<'a>(
        &'a self,
        routes: &'a [&'a Route],
        out: &'a mut Vec<Health>,
    ) -> StoreFuture<'a, ()> {
        StoreFuture::waiting(async move {
            // One pipeline, one round trip; each command touches one key.
            let mut pipe = redis::pipe();
            for r in routes {
                pipe.cmd("HMGET").arg(key(r)).arg("s").arg("u").arg("r");
            }
            let rows: Vec<Vec<Option<String>>> = self
                .within(|mut c| async move { pipe.query_async(&mut c).await })
                .await?;
            for row in rows {
                let mut f = row.into_iter();
                out.push(health_of(
                    f.next().flatten(),
                    f.next().flatten(),
                    f.next().flatten(),
                ));
            }
            Ok(())
        })
    }

    fn list(&self) -> StoreFuture<'_, Vec<(Route, Health)>> {
        StoreFuture::waiting(async move {
            let mut keys: Vec<String> = Vec::new();
            let mut cursor: u64 = 0;
            loop {
                let (next, batch): (u64, Vec<String>) = self
                    .within(|mut c| async move {
                        redis::cmd("SCAN")
                            .arg(cursor)
                            .arg("MATCH")
                            .arg(format!("{PREFIX}{{*}}:r:*"))
                            .arg("COUNT")
                            .arg(1000)
                            .query_async(&mut c)
                            .await
                    })
                    .await?;
                keys.extend(batch);
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
            let mut out = Vec::new();
            for key in keys {
                let Some(route) = route_of_key(&key) else {
                    continue;
                };
                let health = self.read(&route).await?;
                if health != Health::Ready {
                    out.push((route, health));
                }
            }
            out.sort_by(|a, b| a.0.cmp(&b.0));
            out.dedup_by(|a, b| a.0 == b.0);
            Ok(out)
        })
    }

    fn apply<'a>(&'a self, route: &'a Route, t: Transition) -> StoreFuture<'a, (Health, Health)> {
        StoreFuture::waiting(async move {
            let (kind, until, reason) = match t {
                Transition::Succeeded => ("succeeded", String::new(), String::new()),
                Transition::Cool { until, reason } => ("cool", until.to_string(), reason),
                Transition::Retire { reason } => ("retire", String::new(), reason),
                Transition::Restore => ("restore", String::new(), String::new()),
            };
            let key = key(route);
            let v: Vec<String> = self
                .within(|mut c| async move {
                    HEALTH
                        .key(&key)
                        .arg(kind)
                        .arg(until)
                        .arg(reason)
                        .invoke_async(&mut c)
                        .await
                })
                .await?;
            if v.len() != 6 {
                return Err(self.err(format!("health script answered {} fields, not 6", v.len())));
            }
            let h =
                |i: usize| health_of(non_empty(&v[i]), non_empty(&v[i + 1]), non_empty(&v[i + 2]));
            Ok((h(0), h(3)))
        })
    }

    fn breaker<'a>(
        &'a self,
        route: &'a Route,
        cfg: BreakerConfig,
        op: breaker::Step,
    ) -> StoreFuture<'a, breaker::Answer> {
        StoreFuture::waiting(async move {
            let (name, now, trial, ok) = match op {
                breaker::Step::Admit { now } => ("admit", now, false, false),
                breaker::Step::Record { trial, ok, now } => ("record", now, trial, ok),
            };
            let key = key(route);
            let v: Vec<String> = self
                .within(|mut c| async move {
                    BREAKER
                        .key(&key)
                        .arg(name)
                        .arg(now)
                        .arg(u8::from(trial))
                        .arg(u8::from(ok))
                        .arg(cfg.consecutive_failures)
                        .arg(cfg.failure_rate.map(|r| r.to_string()).unwrap_or_default())
                        .arg(cfg.window)
                        .arg(cfg.open_ms)
                        .arg(cfg.max_open_ms)
                        .arg(cfg.half_open_trials)
                        .invoke_async(&mut c)
                        .await
                })
                .await?;
            let instant = || v.get(1).and_then(|s| s.parse::<UnixMs>().ok());
            let bad = || self.err(format!("breaker script answered {v:?}"));
            Ok(match v.first().map(String::as_str) {
                Some("yes") => breaker::Answer::Admit(Admit::Yes),
                Some("trial") => breaker::Answer::Admit(Admit::Trial),
                Some("busy") => breaker::Answer::Admit(Admit::Busy),
                Some("open") => breaker::Answer::Admit(Admit::Open(instant().ok_or_else(bad)?)),
                Some("opened") => breaker::Answer::Recorded(Some(instant().ok_or_else(bad)?)),
                Some("none") => breaker::Answer::Recorded(None),
                _ => return Err(bad()),
            })
        })
    }

    fn breaker_open<'a>(&'a self, route: &'a Route, now: UnixMs) -> StoreFuture<'a, bool> {
        StoreFuture::waiting(async move {
            let key = key(route);
            let text: Option<String> = self
                .within(|mut c| async move {
                    redis::cmd("HGET")
                        .arg(&key)
                        .arg("b")
                        .query_async(&mut c)
                        .await
                })
                .await?;
            Ok(text
                .as_deref()
                .and_then(breaker::State::decode)
                .is_some_and(|s| s.is_open(now)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_the_provider_hash_tag_and_round_trip() {
        let r = Route::parse("openrouter/anthropic/claude-x").unwrap();
        assert_eq!(key(&r), "poolctl:{openrouter}:r:anthropic/claude-x");
        assert_eq!(route_of_key(&key(&r)), Some(r));
        assert_eq!(route_of_key("poolctl:{a}:x:m"), None);
        assert_eq!(route_of_key("other:{a}:r:m"), None);
    }

    #[test]
    fn a_damaged_record_reads_as_retired_never_ready() {
        assert_eq!(health_of(None, None, None), Health::Ready);
        assert_eq!(
            health_of(Some("cooling".into()), Some("x".into()), Some("r".into())),
            Health::Retired { reason: "r".into() }
        );
        assert_eq!(
            health_of(Some("cooling".into()), Some("5".into()), None),
            Health::Cooling {
                until: 5,
                reason: String::new()
            }
        );
    }

    #[test]
    fn a_bad_url_names_the_field_never_the_password() {
        let err = RedisStore::open("redis://:hunter2@[bad", Duration::from_millis(10))
            .unwrap_err()
            .to_string();
        assert!(err.contains("state"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}
