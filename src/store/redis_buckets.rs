//! The fleet's admission buckets, in the Redis of `state: redis://…`: every process that
//! names it spends one budget. The buckets that cover a route all belong to its provider
//! (its own `provider/model` entry and the provider-wide one), so they live in one hash,
//! `poolctl:{PROVIDER}:buckets`, and an acquire or a settle is ONE Lua script on the keys
//! of that provider (`redis/acquire.lua`, `redis/settle.lua`: `admission::Bucket`'s
//! arithmetic, transcribed and checked against it on a real server). A settle also adds
//! what was spent to the provider's usage counter of the minute
//! (`poolctl:{PROVIDER}:usage:MINUTE`, kept [`USAGE_TTL_S`]), and a shed counts in
//! `poolctl:{PROVIDER}:shed:MINUTE`: what `poolctl capacity` reads.
//!
//! Every call is bounded by the store's deadline. What a caller does when it fails
//! (`on_store_error`) is [`SharedBuckets`]'s choice, not this module's.

use super::redis::{RedisStore, PREFIX};
use super::StoreError;
use crate::admission::bucket::{Cost, Dimension, Limits, Spent};
use crate::admission::buckets::{AdmissionConfig, BucketView, Refused};
use crate::core::clock::UnixMs;
use crate::core::vocab::{Priority, Route};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// Usage counters are kept a little over a week: `capacity --window` reads up to that.
pub const USAGE_TTL_S: u64 = 8 * 24 * 3_600;

static ACQUIRE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("redis/acquire.lua")));
static SETTLE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("redis/settle.lua")));

/// The buckets that cover one route, as the scripts name them.
#[derive(Debug)]
pub struct RedisCover {
    provider: String,
    key: String,
    /// Field prefix (`NAME|DIM`), dimension, capacity.
    members: Vec<(String, Dimension, f64)>,
}

/// What an admitted call holds until it is settled.
#[derive(Debug, Clone)]
pub struct RedisReservation {
    cover: Arc<RedisCover>,
    pub cost: Cost,
}

pub struct RedisBuckets {
    store: RedisStore,
    limits: BTreeMap<String, Limits>,
    headroom: f64,
    floor: f64,
    covers: Mutex<HashMap<Route, Option<Arc<RedisCover>>>>,
}

/// The provider's bucket hash.
pub fn buckets_key(provider: &str) -> String {
    format!("{PREFIX}{{{provider}}}:buckets")
}

/// The provider's usage hash for the minute that holds `now`.
pub fn usage_key(provider: &str, minute: i64) -> String {
    format!("{PREFIX}{{{provider}}}:usage:{minute}")
}

/// The provider's shed counters (`PRIORITY|ROUTE` → count) for one minute.
pub fn shed_key(provider: &str, minute: i64) -> String {
    format!("{PREFIX}{{{provider}}}:shed:{minute}")
}

/// The field prefix of one bucket: its `limits:` name and dimension.
pub fn field(name: &str, dim: Dimension) -> String {
    format!("{name}|{}", dim.as_str())
}

impl RedisBuckets {
    pub fn new(store: RedisStore, cfg: &AdmissionConfig) -> Self {
        RedisBuckets {
            store,
            limits: cfg.limits.clone(),
            headroom: cfg.headroom,
            floor: cfg.interactive_floor,
            covers: Mutex::new(HashMap::new()),
        }
    }

    pub fn store(&self) -> &RedisStore {
        &self.store
    }

    /// The buckets that cover `route`, or `None` when no limit names it.
    pub fn cover(&self, route: &Route) -> Option<Arc<RedisCover>> {
        let mut covers = self.covers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = covers.get(route) {
            return c.clone();
        }
        let members: Vec<(String, Dimension, f64)> = self
            .limits
            .iter()
            .filter(|(name, _)| *name == route.as_str() || *name == route.provider())
            .flat_map(|(name, l)| {
                l.contracts()
                    .map(|(dim, contract)| (field(name, dim), dim, contract as f64 * self.headroom))
                    .collect::<Vec<_>>()
            })
            .collect();
        let cover = (!members.is_empty()).then(|| {
            Arc::new(RedisCover {
                provider: route.provider().to_string(),
                key: buckets_key(route.provider()),
                members,
            })
        });
        covers.insert(route.clone(), cover.clone());
        cover
    }

    /// Admits `cost` on every bucket of `cover` at once, or on none: one script.
    pub async fn acquire(
        &self,
        cover: &Arc<RedisCover>,
        cost: Cost,
        priority: Priority,
        now: UnixMs,
    ) -> Result<Result<RedisReservation, Refused>, StoreError> {
        match self.run_acquire(cover, cost, priority, now, true).await? {
            None => Ok(Ok(RedisReservation {
                cover: cover.clone(),
                cost,
            })),
            Some(refused) => Ok(Err(refused)),
        }
    }

    /// How long until the refill alone would admit `cost` on `cover` (`Some(0)`: now,
    /// `None`: never), taking nothing: the same script, told not to write.
    pub async fn wait_ms(
        &self,
        cover: &Arc<RedisCover>,
        cost: Cost,
        priority: Priority,
        now: UnixMs,
    ) -> Result<Option<u64>, StoreError> {
        Ok(
            match self.run_acquire(cover, cost, priority, now, false).await? {
                None => Some(0),
                Some(refused) => refused.wait_ms,
            },
        )
    }

    /// The acquire script: `None` when it admits (taken when `take`), else the refusal.
    async fn run_acquire(
        &self,
        cover: &Arc<RedisCover>,
        cost: Cost,
        priority: Priority,
        now: UnixMs,
        take: bool,
    ) -> Result<Option<Refused>, StoreError> {
        let share = match priority {
            Priority::Interactive => 0.0,
            _ => self.floor,
        };
        let mut inv = ACQUIRE.key(&cover.key);
        inv.arg(now).arg(share).arg(u8::from(take));
        for (field, dim, capacity) in &cover.members {
            inv.arg(field).arg(capacity).arg(cost.on(*dim));
        }
        let v: Vec<i64> = self
            .store
            .within(|mut c| async move { inv.invoke_async(&mut c).await })
            .await?;
        match (v.as_slice(), take) {
            ([1], true) | ([2], false) => Ok(None),
            ([0, wait], _) => Ok(Some(Refused {
                wait_ms: u64::try_from(*wait).ok(),
            })),
            _ => Err(self.store.err(format!("acquire script answered {v:?}"))),
        }
    }

    /// Trues the reservation up to what was spent, lowers the buckets to the provider's
    /// remaining counts (× headroom, never raising), and counts the minute's usage: one
    /// script.
    pub async fn settle(
        &self,
        r: &RedisReservation,
        spent: Spent,
        remaining: &[(Dimension, u64)],
        now: UnixMs,
    ) -> Result<(), StoreError> {
        let minute = now.div_euclid(60_000);
        let mut inv = SETTLE.key(&r.cover.key);
        inv.key(usage_key(&r.cover.provider, minute));
        inv.arg(now).arg(self.headroom).arg(USAGE_TTL_S);
        for (field, dim, capacity) in &r.cover.members {
            let count = remaining
                .iter()
                .filter(|(d, _)| d == dim)
                .map(|(_, n)| *n as i64)
                .min()
                .unwrap_or(-1);
            inv.arg(field)
                .arg(capacity)
                .arg(r.cost.on(*dim))
                .arg(spent.on(*dim, &r.cost))
                .arg(count);
        }
        let _: i64 = self
            .store
            .within(|mut c| async move { inv.invoke_async(&mut c).await })
            .await?;
        Ok(())
    }

    /// The level of every bucket of `cover` as stored (not refilled): `(level, at)`,
    /// `None` for one never touched.
    pub async fn stored(
        &self,
        cover: &RedisCover,
    ) -> Result<Vec<Option<(f64, UnixMs)>>, StoreError> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&cover.key);
        for (field, _, _) in &cover.members {
            cmd.arg(format!("{field}:l")).arg(format!("{field}:a"));
        }
        let v: Vec<Option<String>> = self
            .store
            .within(|mut c| async move { cmd.query_async(&mut c).await })
            .await?;
        Ok(v.chunks(2)
            .map(|p| {
                let level = p[0].as_deref()?.parse::<f64>().ok()?;
                let at = p[1].as_deref()?.parse::<f64>().ok()? as UnixMs;
                Some((level, at))
            })
            .collect())
    }

    /// Every bucket's level at `now` as the fleet shares it (refilled to `now`; one never
    /// touched is full), in config order of names then dimensions, like
    /// `Buckets::snapshot`. One HMGET per provider, pipelined.
    pub async fn snapshot(&self, now: UnixMs) -> Result<Vec<BucketView>, StoreError> {
        let mut rows: Vec<(String, String, Dimension, u64, f64)> = Vec::new();
        for (name, l) in &self.limits {
            let provider = name.split('/').next().unwrap_or(name).to_string();
            for (dim, contract) in l.contracts() {
                let capacity = contract as f64 * self.headroom;
                rows.push((name.clone(), provider.clone(), dim, contract, capacity));
            }
        }
        let mut pipe = redis::pipe();
        for (name, provider, dim, _, _) in &rows {
            let f = field(name, *dim);
            pipe.cmd("HMGET")
                .arg(buckets_key(provider))
                .arg(format!("{f}:l"))
                .arg(format!("{f}:a"))
                .arg(format!("{f}:r"));
        }
        let got: Vec<Vec<Option<String>>> = self
            .store
            .within(|mut c| async move { pipe.query_async(&mut c).await })
            .await?;
        let num = |v: &Option<String>| v.as_deref().and_then(|x| x.parse::<f64>().ok());
        let mut out: Vec<BucketView> = rows
            .into_iter()
            .zip(got)
            .map(|((name, _, dim, contract, capacity), v)| {
                let level = match (v.first().and_then(num), v.get(1).and_then(num)) {
                    (Some(level), Some(at)) => {
                        let dt = (now as f64 - at).max(0.0);
                        (level + dt * capacity / 60_000.0).min(capacity)
                    }
                    _ => capacity,
                };
                BucketView {
                    bucket: name,
                    dimension: dim,
                    contract,
                    capacity,
                    level,
                    reserved: v.get(2).and_then(num).unwrap_or(0.0),
                }
            })
            .collect();
        out.sort_by(|a, b| (&a.bucket, a.dimension).cmp(&(&b.bucket, b.dimension)));
        Ok(out)
    }

    /// What was spent per minute on each bucket of `provider` from minute `from` to `to`
    /// (inclusive): `(minute, field, amount)`.
    pub async fn usage(
        &self,
        provider: &str,
        from: i64,
        to: i64,
    ) -> Result<Vec<(i64, String, f64)>, StoreError> {
        let mut pipe = redis::pipe();
        for m in from..=to {
            pipe.cmd("HGETALL").arg(usage_key(provider, m));
        }
        let rows: Vec<HashMap<String, String>> = self
            .store
            .within(|mut c| async move { pipe.query_async(&mut c).await })
            .await?;
        let mut out = Vec::new();
        for (m, row) in (from..=to).zip(rows) {
            for (field, v) in row {
                if let Ok(v) = v.parse::<f64>() {
                    out.push((m, field, v));
                }
            }
        }
        Ok(out)
    }
}

impl RedisBuckets {
    /// Counts a request shed by `route`'s buckets in the minute that holds `now`
    /// (kept [`USAGE_TTL_S`], as usage is), so `poolctl capacity --window` counts the
    /// sheds of its window and no others.
    pub async fn record_shed(
        &self,
        priority: Priority,
        route: &Route,
        now: UnixMs,
    ) -> Result<(), StoreError> {
        let key = shed_key(route.provider(), now.div_euclid(60_000));
        let field = format!("{}|{}", priority.as_str(), route.as_str());
        self.store
            .within(|mut c| async move {
                // MULTI/EXEC: a counter is never left without its expiry.
                redis::pipe()
                    .atomic()
                    .cmd("HINCRBY")
                    .arg(&key)
                    .arg(&field)
                    .arg(1)
                    .ignore()
                    .cmd("EXPIRE")
                    .arg(&key)
                    .arg(USAGE_TTL_S)
                    .ignore()
                    .query_async::<()>(&mut c)
                    .await
            })
            .await
    }

    /// Sheds of `provider`'s routes from minute `from` to `to` (inclusive), summed:
    /// `(priority, route, count)`.
    pub async fn sheds(
        &self,
        provider: &str,
        from: i64,
        to: i64,
    ) -> Result<Vec<(Priority, String, u64)>, StoreError> {
        let mut pipe = redis::pipe();
        for m in from..=to {
            pipe.cmd("HGETALL").arg(shed_key(provider, m));
        }
        let rows: Vec<HashMap<String, u64>> = self
            .store
            .within(|mut c| async move { pipe.query_async(&mut c).await })
            .await?;
        let mut sum: BTreeMap<(Priority, String), u64> = BTreeMap::new();
        for (f, n) in rows.into_iter().flatten() {
            if let Some((p, route)) = f.split_once('|') {
                if let Some(p) = Priority::parse(p) {
                    *sum.entry((p, route.to_string())).or_default() += n;
                }
            }
        }
        Ok(sum.into_iter().map(|((p, r), n)| (p, r, n)).collect())
    }

    /// Adds counts made elsewhere (a process's local share while Redis failed) to the
    /// per-minute usage and shed counters, in one round trip.
    pub async fn add_counts(
        &self,
        spent: &[(i64, String, Dimension, f64)],
        sheds: &BTreeMap<(i64, Priority, Route), u64>,
    ) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        for (minute, bucket, dim, x) in spent {
            let provider = bucket.split('/').next().unwrap_or(bucket);
            let key = usage_key(provider, *minute);
            pipe.cmd("HINCRBYFLOAT")
                .arg(&key)
                .arg(field(bucket, *dim))
                .arg(*x)
                .ignore();
            pipe.cmd("EXPIRE").arg(&key).arg(USAGE_TTL_S).ignore();
        }
        for ((minute, priority, route), n) in sheds {
            let key = shed_key(route.provider(), *minute);
            pipe.cmd("HINCRBY")
                .arg(&key)
                .arg(format!("{}|{}", priority.as_str(), route.as_str()))
                .arg(*n)
                .ignore();
            pipe.cmd("EXPIRE").arg(&key).arg(USAGE_TTL_S).ignore();
        }
        self.store
            .within(|mut c| async move { pipe.query_async::<()>(&mut c).await })
            .await
    }

    /// Records a provider's own limit on a dimension for a route, as `probe` saw it.
    pub async fn record_provider_limit(
        &self,
        route: &Route,
        dim: Dimension,
        limit: u64,
    ) -> Result<(), StoreError> {
        let key = format!("{PREFIX}{{{}}}:provider_limits", route.provider());
        let field = field(route.as_str(), dim);
        self.store
            .within(|mut c| async move {
                redis::cmd("HSET")
                    .arg(&key)
                    .arg(&field)
                    .arg(limit)
                    .query_async::<i64>(&mut c)
                    .await
            })
            .await
            .map(|_| ())
    }

    /// The provider's own limits `probe` recorded, by field (`ROUTE|DIM`).
    pub async fn provider_limits(
        &self,
        provider: &str,
    ) -> Result<HashMap<String, u64>, StoreError> {
        let key = format!("{PREFIX}{{{provider}}}:provider_limits");
        self.store
            .within(
                |mut c| async move { redis::cmd("HGETALL").arg(&key).query_async(&mut c).await },
            )
            .await
    }
}
