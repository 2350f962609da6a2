//! The conversations the gateway keeps for the Responses API: each response's whole
//! conversation (every input and output item, oldest first) under the response's id, so
//! that a request with `previous_response_id` is re-sent whole to whichever route serves
//! it, whatever provider answered before (seed 003: a conversation is never left behind
//! on a provider).
//!
//! Bounded three ways, each a config field (`responses_ttl`, `responses_max_bytes`,
//! `responses_max`): a conversation expires `ttl` after it was stored; one larger than
//! `max_bytes` is not stored; past `max` conversations the oldest are dropped. Kept in
//! memory (tests, chaos), in a SQLite file beside the health file (one machine), or in
//! Redis (a fleet: every process sees every conversation).

use super::{RedisStore, SqliteStore, StoreError};
use crate::core::clock::UnixMs;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The bounds on what is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// How long a stored conversation can be continued.
    pub ttl_ms: u64,
    /// A conversation larger than this (serialised) is not stored.
    pub max_bytes: usize,
    /// The most conversations kept at once; past it, the oldest go.
    pub max: usize,
    /// The most bytes all kept conversations take together; past it, the oldest go
    /// (a SQLite file checks at most once a second, so it may pass it by a second's
    /// writes).
    pub max_total_bytes: usize,
}

/// 24 h, as OpenAI keeps nothing shorter and a chat rarely pauses longer.
pub const DEFAULT_TTL_MS: u64 = 24 * 60 * 60 * 1000;
/// A long conversation with an image or two fits; a runaway one does not.
pub const DEFAULT_MAX_BYTES: usize = 8 * 1024 * 1024;
pub const DEFAULT_MAX: usize = 10_000;
/// 1 GiB: a few thousand long conversations, or many more short ones.
pub const DEFAULT_MAX_TOTAL_BYTES: usize = 1 << 30;
/// The largest `max_bytes` a config may set: a conversation is read whole on each turn.
pub const MAX_MAX_BYTES: usize = 64 * 1024 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            ttl_ms: DEFAULT_TTL_MS,
            max_bytes: DEFAULT_MAX_BYTES,
            max: DEFAULT_MAX,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
        }
    }
}

/// One stored response: the conversation up to and including its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    pub id: String,
    /// The route that answered.
    pub route: String,
    /// Every item of the conversation, oldest first: the inputs, then this answer's
    /// output items.
    pub items: Vec<Value>,
    /// How many of `items`, at the end, are this answer's output.
    pub output_len: usize,
    /// Items only their provider may be sent again (reasoning items, items with that
    /// provider's ids): `(index into items, provider)`.
    pub origins: Vec<(usize, String)>,
    /// The `response` object as the client received it (`GET /v1/responses/{id}`).
    pub response: Value,
    /// How many bytes it took in the store (set when read; not stored).
    #[serde(skip)]
    pub size: usize,
}

impl Stored {
    /// The conversation's input items (all but this answer's output).
    pub fn input_items(&self) -> &[Value] {
        &self.items[..self.items.len().saturating_sub(self.output_len)]
    }
}

/// Why a conversation was not stored.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PutError {
    #[error("the conversation is {size} bytes, over `responses_max_bytes` ({max})")]
    TooLarge { size: usize, max: usize },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Serialised bodies with their expiry, least recently stored first out, and their
/// bytes in all.
type MemoryMap = Mutex<(
    lru::LruCache<String, (std::sync::Arc<Vec<u8>>, UnixMs)>,
    usize,
)>;

enum Backend {
    Memory(MemoryMap),
    Sqlite(SqliteStore),
    Redis(RedisStore),
}

pub struct Conversations {
    limits: Limits,
    backend: Backend,
    /// When a SQLite store last dropped its expired rows: at most once a second, so a
    /// write costs no scan (a read never returns an expired one anyway).
    swept: std::sync::atomic::AtomicI64,
}

impl std::fmt::Debug for Conversations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.backend {
            Backend::Memory(_) => "memory",
            Backend::Sqlite(_) => "sqlite",
            Backend::Redis(_) => "redis",
        };
        f.debug_struct("Conversations")
            .field("backend", &kind)
            .field("limits", &self.limits)
            .finish()
    }
}

/// A conversation's key in Redis. Every conversation and the index share one hash
/// tag: the bound is kept by one script on one node.
fn redis_key(id: &str) -> String {
    format!("{}resp:{{responses}}:{id}", super::redis::PREFIX)
}

fn redis_index() -> String {
    format!("{}resp:{{responses}}", super::redis::PREFIX)
}

/// Each stored conversation's size, and their sum (`total`).
fn redis_sizes() -> String {
    format!("{}resp:{{responses}}:sizes", super::redis::PREFIX)
}

static PUT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("redis/conversation.lua")));

/// Forgets one conversation and its size (KEYS: the conversation, the index, the sizes).
static FORGET: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        "local size = tonumber(redis.call('HGET', KEYS[3], KEYS[1]) or '0')
         redis.call('HDEL', KEYS[3], KEYS[1])
         redis.call('HINCRBY', KEYS[3], 'total', -size)
         redis.call('ZREM', KEYS[2], KEYS[1])
         return redis.call('DEL', KEYS[1])",
    )
});

/// The SQLite file conversations are kept in, beside the health file `state`:
/// `state.db` → `state.responses.db`. A file of their own, so that a conversation's
/// write never waits on a health transition's lock, nor wakes the gateway's watch on
/// the health file.
pub fn sqlite_path(state: &Path) -> PathBuf {
    let stem = state
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "state".into());
    state.with_file_name(format!("{stem}.responses.db"))
}

impl Conversations {
    pub fn memory(limits: Limits) -> Self {
        let cap =
            std::num::NonZeroUsize::new(limits.max.max(1)).unwrap_or(std::num::NonZeroUsize::MIN);
        Conversations {
            limits,
            backend: Backend::Memory(Mutex::new((lru::LruCache::new(cap), 0))),
            swept: Default::default(),
        }
    }

    /// Conversations in the SQLite file at `path` (see [`sqlite_path`]).
    pub fn sqlite(path: &Path, limits: Limits) -> Result<Self, StoreError> {
        Ok(Conversations {
            limits,
            backend: Backend::Sqlite(SqliteStore::open(path)?),
            swept: Default::default(),
        })
    }

    /// Conversations shared by a fleet in Redis.
    pub fn redis(redis: RedisStore, limits: Limits) -> Self {
        Conversations {
            limits,
            backend: Backend::Redis(redis),
            swept: Default::default(),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Stores `c` at `now`; it can be continued until `now + ttl`.
    pub async fn put(&self, c: &Stored, now: UnixMs) -> Result<(), PutError> {
        self.put_text(&c.id, serde_json::to_string(c).unwrap_or_default(), now)
            .await
    }

    /// Stores `text`, a [`Stored`] as JSON (the gateway masks keys in it first), under
    /// `id` at `now`.
    pub async fn put_text(&self, id: &str, text: String, now: UnixMs) -> Result<(), PutError> {
        let body = text.into_bytes();
        if body.len() > self.limits.max_bytes {
            return Err(PutError::TooLarge {
                size: body.len(),
                max: self.limits.max_bytes,
            });
        }
        let ttl = self.limits.ttl_ms.max(1);
        let expires = now.saturating_add(i64::try_from(ttl).unwrap_or(i64::MAX));
        match &self.backend {
            Backend::Memory(m) => {
                let mut guard = m.lock().unwrap_or_else(|p| p.into_inner());
                let (map, total) = &mut *guard;
                *total += body.len();
                if let Some((_, (old, _))) =
                    map.push(id.to_string(), (std::sync::Arc::new(body), expires))
                {
                    *total -= old.len();
                }
                while *total > self.limits.max_total_bytes && map.len() > 1 {
                    match map.pop_lru() {
                        Some((_, (old, _))) => *total -= old.len(),
                        None => break,
                    }
                }
                Ok(())
            }
            Backend::Sqlite(s) => {
                use std::sync::atomic::Ordering;
                let last = self.swept.load(Ordering::Relaxed);
                let sweep = now.saturating_sub(last) >= 1_000
                    && self
                        .swept
                        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok();
                let (max, total) = (self.limits.max, self.limits.max_total_bytes);
                Ok(
                    s.put_response(id.to_string(), body, now, expires, max, total, sweep)
                        .await?,
                )
            }
            Backend::Redis(r) => {
                let (key, index, sizes) = (redis_key(id), redis_index(), redis_sizes());
                let (max, total) = (self.limits.max.max(1), self.limits.max_total_bytes);
                r.within(|mut conn| async move {
                    PUT.key(&key)
                        .key(&index)
                        .key(&sizes)
                        .arg(body)
                        .arg(ttl)
                        .arg(now)
                        .arg(max)
                        .arg(total)
                        .invoke_async::<i64>(&mut conn)
                        .await
                })
                .await?;
                Ok(())
            }
        }
    }

    /// The conversation stored under `id`, unless it expired or was never stored. A
    /// stored value this version cannot read is no conversation.
    pub async fn get(&self, id: &str, now: UnixMs) -> Result<Option<Stored>, StoreError> {
        let body: Option<Vec<u8>> = match &self.backend {
            Backend::Memory(m) => {
                let mut guard = m.lock().unwrap_or_else(|p| p.into_inner());
                let (map, total) = &mut *guard;
                match map.peek(id) {
                    Some((_, expires)) if *expires <= now => {
                        if let Some((old, _)) = map.pop(id) {
                            *total -= old.len();
                        }
                        None
                    }
                    Some((body, _)) => Some(body.as_ref().clone()),
                    None => None,
                }
            }
            Backend::Sqlite(s) => s.get_response(id.to_string(), now).await?,
            Backend::Redis(r) => {
                let key = redis_key(id);
                r.within(|mut c| async move {
                    redis::cmd("GET")
                        .arg(&key)
                        .query_async::<Option<Vec<u8>>>(&mut c)
                        .await
                })
                .await?
            }
        };
        Ok(body.and_then(|b| {
            let mut s: Stored = serde_json::from_slice(&b).ok()?;
            s.size = b.len();
            Some(s)
        }))
    }

    /// Forgets `id`; whether a conversation was stored under it.
    pub async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Memory(m) => {
                let mut guard = m.lock().unwrap_or_else(|p| p.into_inner());
                let (map, total) = &mut *guard;
                Ok(match map.pop(id) {
                    Some((old, _)) => {
                        *total -= old.len();
                        true
                    }
                    None => false,
                })
            }
            Backend::Sqlite(s) => s.delete_response(id.to_string()).await,
            Backend::Redis(r) => {
                let (key, index, sizes) = (redis_key(id), redis_index(), redis_sizes());
                let removed: i64 = r
                    .within(|mut c| async move {
                        FORGET
                            .key(&key)
                            .key(&index)
                            .key(&sizes)
                            .invoke_async::<i64>(&mut c)
                            .await
                    })
                    .await?;
                Ok(removed > 0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(id: &str, text: &str) -> Stored {
        Stored {
            id: id.into(),
            route: "openai/gpt-4o".into(),
            items: vec![
                json!({"role": "user", "content": text}),
                json!({"type": "message", "role": "assistant", "content": []}),
            ],
            output_len: 1,
            origins: vec![],
            response: json!({"id": id, "object": "response"}),
            size: 0,
        }
    }

    async fn bounds_hold(c: &Conversations) {
        c.put(&stored("resp_a", "hi"), 1_000).await.unwrap();
        let mut got = c.get("resp_a", 1_001).await.unwrap().unwrap();
        assert!(got.size > 0);
        got.size = 0;
        assert_eq!(got, stored("resp_a", "hi"));
        assert_eq!(got.input_items().len(), 1);
        // Expired at stored + ttl.
        assert!(c.get("resp_a", 1_000 + 60_000).await.unwrap().is_none());
        // Past `max`, the oldest goes.
        c.put(&stored("resp_1", "1"), 2_000).await.unwrap();
        c.put(&stored("resp_2", "2"), 2_001).await.unwrap();
        c.put(&stored("resp_3", "3"), 2_002).await.unwrap();
        assert!(c.get("resp_1", 2_003).await.unwrap().is_none());
        assert!(c.get("resp_3", 2_003).await.unwrap().is_some());
        // Too large: refused, and the error says by how much.
        let big = stored("resp_big", &"x".repeat(5_000));
        match c.put(&big, 2_004).await {
            Err(PutError::TooLarge { size, max }) => assert!(size > max && max == 4_096),
            other => panic!("{other:?}"),
        }
        assert!(c.delete("resp_3").await.unwrap());
        assert!(!c.delete("resp_3").await.unwrap());
        assert!(c.get("resp_3", 2_005).await.unwrap().is_none());
    }

    const LIMITS: Limits = Limits {
        ttl_ms: 60_000,
        max_bytes: 4_096,
        max: 2,
        max_total_bytes: 1 << 20,
    };

    #[tokio::test]
    async fn past_the_stores_bytes_the_oldest_go() {
        let c = Conversations::memory(Limits {
            max: 100,
            max_total_bytes: 700,
            ..LIMITS
        });
        for i in 0..5 {
            c.put(&stored(&format!("resp_{i}"), &"x".repeat(100)), 1_000)
                .await
                .unwrap();
        }
        // Each is a little over 300 bytes: two fit in 700.
        assert!(c.get("resp_2", 1_001).await.unwrap().is_none());
        assert!(c.get("resp_3", 1_001).await.unwrap().is_some());
        assert!(c.get("resp_4", 1_001).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn memory_conversations_keep_their_bounds() {
        bounds_hold(&Conversations::memory(LIMITS)).await;
    }

    #[tokio::test]
    async fn sqlite_conversations_keep_their_bounds() {
        let dir = tempfile_dir();
        let c = Conversations::sqlite(&sqlite_path(&dir.join("state.db")), LIMITS).unwrap();
        bounds_hold(&c).await;
        assert!(dir.join("state.responses.db").exists());
        let _ = std::fs::remove_dir_all(dir);
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "poolctl-conv-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
