//! Where session affinity lives: a session id (`x-poolctl-session`) → the route that
//! last served it. Bounded on every side, since every id is a client's choice: an id
//! longer than `max_id_bytes` is refused before it gets here, at most `max` sessions
//! are kept (the least recently used evicted first), and one idle for `idle_ms` is
//! forgotten. In memory for one process; in Redis (`redis_sessions`) for a fleet.

use crate::core::clock::UnixMs;
use crate::core::vocab::Route;
use lru::LruCache;
use std::sync::Mutex;

/// The bounds of the session map (`sessions:` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionLimits {
    /// The longest id accepted; a longer `x-poolctl-session` is answered 400.
    pub max_id_bytes: usize,
    /// Sessions kept at once; past it the least recently used is forgotten.
    pub max: usize,
    /// A session unused for this long is forgotten (and expires in Redis).
    pub idle_ms: u64,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            // A UUID is 36 bytes, a hash in hex 64: 256 leaves room for any sane scheme.
            max_id_bytes: 256,
            // About 40 MB at the longest ids; a few MB at typical ones.
            max: 100_000,
            // A conversation idle for an hour has no cache left to keep warm upstream.
            idle_ms: 3_600_000,
        }
    }
}

/// The sessions a router pins: this process's map, and with `state: redis://` the
/// fleet's in Redis, so that a session keeps its route whichever process it reaches.
pub struct Sessions {
    local: MemorySessions,
    shared: Option<super::redis_sessions::RedisSessions>,
}

impl Sessions {
    /// One process's sessions, in memory.
    pub fn local(limits: SessionLimits) -> Self {
        Sessions {
            local: MemorySessions::new(limits),
            shared: None,
        }
    }

    /// The fleet's sessions in `redis`, each expiring `idle_ms` after its last pin.
    pub fn shared(limits: SessionLimits, redis: super::RedisStore) -> Self {
        Sessions {
            local: MemorySessions::new(limits),
            shared: Some(super::redis_sessions::RedisSessions::new(
                redis,
                limits.idle_ms,
            )),
        }
    }

    pub fn limits(&self) -> SessionLimits {
        self.local.limits()
    }

    /// The route `id` is pinned to: the fleet's answer when Redis gives one in time,
    /// else this process's own.
    pub async fn get(&self, id: &str, now: UnixMs) -> Option<Route> {
        if let Some(shared) = &self.shared {
            if let Ok(pinned) = shared.get(id).await {
                return pinned;
            }
        }
        self.local.get(id, now)
    }

    /// Pins `id` to `route`: here at once, in Redis in the background (a request does
    /// not wait on the fleet's copy of its pin).
    pub fn put(&self, id: &str, route: &Route, now: UnixMs) {
        self.local.put(id, route, now);
        if let Some(shared) = &self.shared {
            shared.put_later(id, route);
        }
    }

    /// Sessions this process holds now.
    pub fn len(&self) -> usize {
        self.local.len()
    }

    pub fn is_empty(&self) -> bool {
        self.local.is_empty()
    }
}

/// One process's sessions, least recently used first out.
pub struct MemorySessions {
    limits: SessionLimits,
    map: Mutex<LruCache<Box<str>, Pin>>,
}

struct Pin {
    route: Route,
    /// When the session was last used.
    at: UnixMs,
}

impl MemorySessions {
    pub fn new(limits: SessionLimits) -> Self {
        // Unbounded to the crate, bounded here: `LruCache::new(cap)` sizes its table for
        // `cap` entries at once, megabytes for every router built (a chaos run builds
        // hundreds), where the table should grow only as sessions come.
        MemorySessions {
            limits,
            map: Mutex::new(LruCache::unbounded()),
        }
    }

    pub fn limits(&self) -> SessionLimits {
        self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<Box<str>, Pin>> {
        // Every critical section is one map operation: a poisoned lock is still sound.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn idle(&self, pin: &Pin, now: UnixMs) -> bool {
        now.saturating_sub(pin.at) >= i64::try_from(self.limits.idle_ms).unwrap_or(i64::MAX)
    }

    /// The route `id` is pinned to, unless it went idle; a hit counts as a use.
    pub fn get(&self, id: &str, now: UnixMs) -> Option<Route> {
        let mut map = self.lock();
        let idle = match map.peek(id) {
            None => return None,
            Some(pin) => self.idle(pin, now),
        };
        if idle {
            map.pop(id);
            return None;
        }
        let pin = map.get_mut(id)?;
        pin.at = now;
        Some(pin.route.clone())
    }

    /// Pins `id` to `route`. The least recently used session goes when the map is full,
    /// and every idle one at the cold end goes with it: the order of use is the order
    /// of time, so the idle ones are all there.
    pub fn put(&self, id: &str, route: &Route, now: UnixMs) {
        let mut map = self.lock();
        if let Some(pin) = map.get_mut(id) {
            pin.at = now;
            if pin.route != *route {
                pin.route = route.clone();
            }
        } else {
            map.put(
                id.into(),
                Pin {
                    route: route.clone(),
                    at: now,
                },
            );
        }
        while map.len() > self.limits.max.max(1)
            || map.peek_lru().is_some_and(|(_, pin)| self.idle(pin, now))
        {
            map.pop_lru();
        }
    }

    /// Sessions held now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> Route {
        Route::parse(s).unwrap()
    }

    fn limits(max: usize, idle_ms: u64) -> SessionLimits {
        SessionLimits {
            max_id_bytes: 256,
            max,
            idle_ms,
        }
    }

    #[test]
    fn a_pinned_session_finds_its_route() {
        let s = MemorySessions::new(SessionLimits::default());
        s.put("s1", &r("a/one"), 0);
        assert_eq!(s.get("s1", 10), Some(r("a/one")));
        assert_eq!(s.get("s2", 10), None);
        s.put("s1", &r("b/two"), 20);
        assert_eq!(s.get("s1", 30), Some(r("b/two")));
    }

    #[test]
    fn past_the_maximum_the_least_recently_used_session_is_forgotten() {
        let s = MemorySessions::new(limits(2, u64::MAX));
        s.put("old", &r("a/one"), 0);
        s.put("mid", &r("a/one"), 1);
        // A use makes `old` recent: `mid` is now the least recently used.
        assert!(s.get("old", 2).is_some());
        s.put("new", &r("a/one"), 3);
        assert_eq!(s.len(), 2);
        assert!(s.get("mid", 4).is_none());
        assert!(s.get("old", 4).is_some() && s.get("new", 4).is_some());
    }

    #[test]
    fn an_idle_session_expires_and_is_swept_by_the_next_put() {
        let s = MemorySessions::new(limits(100, 1000));
        s.put("a", &r("a/one"), 0);
        s.put("b", &r("a/one"), 500);
        assert!(s.get("a", 999).is_some(), "used at 999: idle from there");
        assert!(s.get("b", 1500).is_none(), "idle since 500");
        s.put("c", &r("a/one"), 2000);
        // `a`, idle since 999, went with the put; only `c` is left.
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn a_hundred_thousand_distinct_ids_never_hold_more_than_the_maximum() {
        let s = MemorySessions::new(limits(1000, u64::MAX));
        for i in 0..100_000 {
            s.put(&format!("session-{i}"), &r("a/one"), i);
        }
        assert_eq!(s.len(), 1000);
        assert!(s.get("session-99999", 100_000).is_some());
        assert!(s.get("session-0", 100_000).is_none());
    }
}
