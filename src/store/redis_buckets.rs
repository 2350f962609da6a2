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
//!
//! Each process keeps its last view of every bucket it has touched (the level and
//! instant the last script left it at). A store that lost its data (a restart without
//! persistence, a failover to a replica that lagged, FLUSHALL) must not hand out full
//! buckets again: each script is given the caller's view, and a bucket missing in the
//! store that the caller has seen is re-created at that view refilled to now, never at
//! capacity; the reply says the store lost it. A bucket never seen starts full.
//!
//! [`SharedBuckets`]: super::shared_buckets::SharedBuckets

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
static DEBIT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("redis/debit.lua")));

/// One bucket's level at an instant, as a script last left it.
pub type View = (f64, UnixMs);

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
    /// This process's last view of each bucket, by (hash key, field prefix).
    views: Mutex<HashMap<(String, String), View>>,
    /// How many times a script found a bucket this process had seen missing.
    lost: std::sync::atomic::AtomicU64,
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

/// A dimension by its `as_str` name (the field prefix's second part).
fn dim_of(s: &str) -> Option<Dimension> {
    Dimension::ALL.into_iter().find(|d| d.as_str() == s)
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
            views: Mutex::new(HashMap::new()),
            lost: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn views(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), View>> {
        // Only whole inserts and reads happen under it: a poisoned lock is still sound.
        self.views.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This process's view of `field` on `key` as script arguments: level and at, or
    /// two empty strings for a bucket never seen.
    fn view_args(&self, key: &str, field: &str) -> (String, String) {
        match self.views().get(&(key.to_string(), field.to_string())) {
            Some((level, at)) => (format!("{level:?}"), at.to_string()),
            None => (String::new(), String::new()),
        }
    }

    /// Takes in what a script answered: `lost` (1 when it found a bucket this process
    /// had seen missing), then each bucket's level and at, in `fields` order.
    fn take_views<'a>(
        &self,
        key: &str,
        fields: impl Iterator<Item = &'a str>,
        lost: &str,
        levels: &[String],
    ) -> Result<bool, StoreError> {
        let bad = || {
            self.store
                .err(format!("a bucket script answered levels {levels:?}"))
        };
        let mut views = self.views();
        for (field, pair) in fields.zip(levels.chunks(2)) {
            let [level, at] = pair else { return Err(bad()) };
            let level: f64 = level.parse().map_err(|_| bad())?;
            let at: f64 = at.parse().map_err(|_| bad())?;
            views.insert((key.to_string(), field.to_string()), (level, at as UnixMs));
        }
        let lost = lost == "1";
        if lost {
            self.lost.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(lost)
    }

    /// Every bucket this process has seen, by (limits name, dimension): its last view.
    pub fn seen(&self) -> Vec<(String, Dimension, View)> {
        self.views()
            .iter()
            .filter_map(|((_, field), view)| {
                let (name, dim) = field.rsplit_once('|')?;
                let dim = dim_of(dim)?;
                Some((name.to_string(), dim, *view))
            })
            .collect()
    }

    /// How many script answers found a bucket this process had seen missing: the store
    /// lost its data.
    pub fn losses(&self) -> u64 {
        self.lost.load(std::sync::atomic::Ordering::Relaxed)
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
            let (vl, va) = self.view_args(&cover.key, field);
            inv.arg(field)
                .arg(capacity)
                .arg(cost.on(*dim))
                .arg(vl)
                .arg(va);
        }
        let v: Vec<String> = self
            .store
            .within(|mut c| async move { inv.invoke_async(&mut c).await })
            .await?;
        let bad = || self.store.err(format!("acquire script answered {v:?}"));
        let [code, wait, lost, levels @ ..] = v.as_slice() else {
            return Err(bad());
        };
        self.take_views(
            &cover.key,
            cover.members.iter().map(|(f, _, _)| f.as_str()),
            lost,
            levels,
        )?;
        match (code.as_str(), take) {
            ("1", true) | ("2", false) => Ok(None),
            ("0", _) => Ok(Some(Refused {
                wait_ms: wait.parse::<i64>().ok().and_then(|w| u64::try_from(w).ok()),
            })),
            _ => Err(bad()),
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
            let (vl, va) = self.view_args(&r.cover.key, field);
            inv.arg(field)
                .arg(capacity)
                .arg(r.cost.on(*dim))
                .arg(spent.on(*dim, &r.cost))
                .arg(count)
                .arg(vl)
                .arg(va);
        }
        let v: Vec<String> = self
            .store
            .within(|mut c| async move { inv.invoke_async(&mut c).await })
            .await?;
        let [lost, levels @ ..] = v.as_slice() else {
            return Err(self.store.err(format!("settle script answered {v:?}")));
        };
        self.take_views(
            &r.cover.key,
            r.cover.members.iter().map(|(f, _, _)| f.as_str()),
            lost,
            levels,
        )?;
        Ok(())
    }

    /// Takes `amounts` (by limits name and dimension: what the local share admitted
    /// while the store failed) off the shared buckets, one script per provider; a lost
    /// bucket is re-created at this process's view first. Names with no limit are
    /// skipped. True when the store had lost a bucket this process had seen.
    pub async fn debit(
        &self,
        amounts: &BTreeMap<(String, Dimension), f64>,
        now: UnixMs,
    ) -> Result<bool, StoreError> {
        let mut by_provider: BTreeMap<String, Vec<(String, f64, f64)>> = BTreeMap::new();
        for ((name, dim), x) in amounts {
            let Some(l) = self.limits.get(name) else {
                continue;
            };
            let Some((_, contract)) = l.contracts().find(|(d, _)| d == dim) else {
                continue;
            };
            let provider = name.split('/').next().unwrap_or(name).to_string();
            by_provider.entry(provider).or_default().push((
                field(name, *dim),
                contract as f64 * self.headroom,
                *x,
            ));
        }
        let mut lost_any = false;
        for (provider, rows) in by_provider {
            let key = buckets_key(&provider);
            let mut inv = DEBIT.key(&key);
            inv.arg(now);
            for (f, capacity, x) in &rows {
                let (vl, va) = self.view_args(&key, f);
                inv.arg(f).arg(capacity).arg(x).arg(vl).arg(va);
            }
            let v: Vec<String> = self
                .store
                .within(|mut c| async move { inv.invoke_async(&mut c).await })
                .await?;
            let [lost, levels @ ..] = v.as_slice() else {
                return Err(self.store.err(format!("debit script answered {v:?}")));
            };
            lost_any |=
                self.take_views(&key, rows.iter().map(|(f, _, _)| f.as_str()), lost, levels)?;
        }
        Ok(lost_any)
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
        // One HMGET per bucket, on its provider's key: across providers, so on a cluster
        // the store runs them each on its own slot.
        let cmds = rows
            .iter()
            .map(|(name, provider, dim, _, _)| {
                let f = field(name, *dim);
                let mut c = redis::cmd("HMGET");
                c.arg(buckets_key(provider))
                    .arg(format!("{f}:l"))
                    .arg(format!("{f}:a"))
                    .arg(format!("{f}:r"));
                c
            })
            .collect();
        let got: Vec<Vec<Option<String>>> = self.store.each(cmds).await?;
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
        // Each counter and its expiry together, on one key: one group (one slot) each.
        let mut groups: Vec<Vec<redis::Cmd>> = Vec::new();
        let expire = |key: &str| {
            let mut c = redis::cmd("EXPIRE");
            c.arg(key).arg(USAGE_TTL_S);
            c
        };
        for (minute, bucket, dim, x) in spent {
            let provider = bucket.split('/').next().unwrap_or(bucket);
            let key = usage_key(provider, *minute);
            let mut c = redis::cmd("HINCRBYFLOAT");
            c.arg(&key).arg(field(bucket, *dim)).arg(*x);
            groups.push(vec![c, expire(&key)]);
        }
        for ((minute, priority, route), n) in sheds {
            let key = shed_key(route.provider(), *minute);
            let mut c = redis::cmd("HINCRBY");
            c.arg(&key)
                .arg(format!("{}|{}", priority.as_str(), route.as_str()))
                .arg(*n);
            groups.push(vec![c, expire(&key)]);
        }
        self.store.groups(groups).await
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
