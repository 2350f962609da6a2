//! `poolctl capacity [--json] [--window DURATION]`: utilisation of every limited bucket
//! over the window from the per-minute usage counters in the state store (the SQLite
//! file or the fleet's Redis), sheds per class, the provider's own limits where `probe`
//! recorded them, warnings, and each tier's failover ceiling. The numbers are
//! `crate::admission::capacity`'s; this file reads the store and prints. Exit 1 on any warning, so
//! that it can gate a deploy next to `probe`.
//!
//! Also [`UsageRecorder`]: with a SQLite state, what a process's buckets spent and shed
//! reaches the file's counters from here, off the request path (a Redis state counts
//! them in its settle script instead).

use super::args::ConfigArg;
use super::context::{load_config, Admission};
use super::exit::Exit;
use super::{out, table};
use crate::admission::bucket::Dimension;
use crate::admission::buckets::{Buckets, UsageDelta};
use crate::admission::capacity::{self, BucketReport, BucketUse, Covering, RouteLoad, TierCeiling};
use crate::config::pool::{PoolConfig, StateLocation};
use crate::core::clock::wall_now_ms;
use crate::core::vocab::{Priority, Route};
use crate::store::redis_buckets::RedisBuckets;
use crate::store::{RedisStore, SqliteStore, StoreError};
use clap::Args;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The text output's width: it fits a plain 80-column terminal.
const WIDTH: usize = 80;

#[derive(Debug, Args)]
pub struct CapacityArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Print JSON (spec/cli.md, `capacity --json`).
    #[arg(long)]
    pub json: bool,
    /// The window: 30m, 2h, 1d (default 1h; at most 8d, as long as usage is kept).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = capacity::parse_window)]
    pub window: u64,
}

/// What the state store recorded over the window.
#[derive(Debug, Default)]
struct Recorded {
    /// Per bucket (`limits:` name) and dimension: what was spent in each minute.
    spent: HashMap<(String, Dimension), Vec<f64>>,
    /// `(priority, route, count)`.
    sheds: Vec<(Priority, String, u64)>,
    /// `(route, dimension, limit)` as `probe` saw them.
    provider_limits: Vec<(String, Dimension, u64)>,
}

impl Recorded {
    fn add_spent(&mut self, minutes: usize, at: usize, name: String, dim: Dimension, x: f64) {
        if at < minutes {
            self.spent
                .entry((name, dim))
                .or_insert_with(|| vec![0.0; minutes])[at] += x;
        }
    }
}

fn dimension(s: &str) -> Option<Dimension> {
    Dimension::ALL.into_iter().find(|d| d.as_str() == s)
}

/// The fleet's counters: settles count usage, and sheds count, per provider and minute;
/// provider limits per provider.
async fn read_redis(
    config: &PoolConfig,
    url: &str,
    from: i64,
    to: i64,
) -> anyhow::Result<Recorded> {
    let store = RedisStore::open_with(
        url,
        config.state_tls().as_ref(),
        std::time::Duration::from_millis(config.state_timeout_ms),
    )?;
    let buckets = RedisBuckets::new(store, &config.admission());
    let minutes = (to - from + 1) as usize;
    let providers: BTreeSet<&str> = config
        .limits
        .keys()
        .map(|k| k.split('/').next().unwrap_or(k))
        .collect();
    let mut rec = Recorded::default();
    for p in providers {
        for (m, field, x) in buckets.usage(p, from, to).await? {
            let Some((name, dim)) = field.rsplit_once('|') else {
                continue;
            };
            if let Some(dim) = dimension(dim) {
                rec.add_spent(minutes, (m - from) as usize, name.to_string(), dim, x);
            }
        }
        rec.sheds.extend(buckets.sheds(p, from, to).await?);
        for (field, limit) in buckets.provider_limits(p).await? {
            if let Some((route, dim)) = field.rsplit_once('|') {
                if let Some(dim) = dimension(dim) {
                    rec.provider_limits.push((route.to_string(), dim, limit));
                }
            }
        }
    }
    Ok(rec)
}

/// The file's counters. A state file that does not exist yet has recorded nothing, and
/// reading it does not create it.
async fn read_sqlite(path: &Path, from: i64, to: i64) -> anyhow::Result<Recorded> {
    let mut rec = Recorded::default();
    if !path.exists() {
        return Ok(rec);
    }
    let store = SqliteStore::open(path)?;
    let minutes = (to - from + 1) as usize;
    for (m, name, dim, x) in store.usage(from, to).await? {
        rec.add_spent(minutes, (m - from) as usize, name, dim, x);
    }
    rec.sheds = store.sheds(from, to).await?;
    rec.provider_limits = store.provider_limits().await?;
    Ok(rec)
}

pub async fn run(args: CapacityArgs) -> anyhow::Result<Exit> {
    let config = load_config(&args.config)?;
    let minutes = (args.window / 60_000).max(1) as i64;
    // The window ends with the minute in progress.
    let to = wall_now_ms().div_euclid(60_000);
    let from = to - minutes + 1;
    let rec = match config.state_location() {
        StateLocation::Redis(url) => read_redis(&config, &url, from, to).await?,
        StateLocation::File(path) => read_sqlite(&path, from, to).await?,
    };
    let (reports, tiers) = report(&config, &rec, minutes as usize);

    let mut warnings: Vec<String> = reports.iter().flat_map(|r| r.warnings.clone()).collect();
    for t in &tiers {
        warnings.extend(t.warnings.iter().map(|w| format!("tier `{}`: {w}", t.tier)));
    }
    if args.json {
        // A struct, not a `json!` map: the fields keep cli.md's order.
        #[derive(serde::Serialize)]
        struct Doc<'a> {
            window_ms: u64,
            buckets: &'a [BucketReport],
            tiers: &'a [TierCeiling],
            warnings: &'a [String],
        }
        let doc = Doc {
            window_ms: args.window,
            buckets: &reports,
            tiers: &tiers,
            warnings: &warnings,
        };
        out::line(&serde_json::to_string(&doc)?)?;
    } else {
        out::print(&render(
            &reports,
            &tiers,
            &warnings,
            args.window,
            std::io::stdout().is_terminal(),
        ))?;
    }
    Ok(if warnings.is_empty() {
        Exit::Ok
    } else {
        Exit::Failed
    })
}

/// Every bucket's report and every limited tier's ceiling, from what was recorded.
fn report(
    config: &PoolConfig,
    rec: &Recorded,
    minutes: usize,
) -> (Vec<BucketReport>, Vec<TierCeiling>) {
    // A shed counts against every bucket that covers the route that refused it.
    let mut sheds: HashMap<&str, BTreeMap<Priority, u64>> = HashMap::new();
    for (priority, route, n) in &rec.sheds {
        let provider = route.split('/').next().unwrap_or(route);
        for name in [route.as_str(), provider] {
            if let Some((key, _)) = config.limits.get_key_value(name) {
                *sheds
                    .entry(key.as_str())
                    .or_default()
                    .entry(*priority)
                    .or_default() += n;
            }
        }
    }
    let headroom = config.admission().headroom;
    let mut reports = Vec::new();
    let mut p95_used: HashMap<(String, Dimension), f64> = HashMap::new();
    for (name, limits) in &config.limits {
        for (dim, contract) in limits.contracts() {
            let per_minute = rec
                .spent
                .get(&(name.clone(), dim))
                .cloned()
                .unwrap_or_else(|| vec![0.0; minutes]);
            p95_used.insert((name.clone(), dim), capacity::p95(&per_minute));
            // The provider's limit for a route entry; for a provider entry, the
            // tightest any of its routes reported (one key: one limit).
            let provider_limit = rec
                .provider_limits
                .iter()
                .filter(|(route, d, _)| {
                    *d == dim && (route == name || route.split('/').next() == Some(name))
                })
                .map(|(_, _, limit)| *limit)
                .min();
            reports.push(capacity::bucket_report(&BucketUse {
                bucket: name.clone(),
                dimension: dim,
                contract,
                capacity: contract as f64 * headroom,
                per_minute,
                shed: sheds.get(name.as_str()).cloned().unwrap_or_default(),
                provider_limit,
            }));
        }
    }
    (reports, ceilings(config, &p95_used))
}

/// The buckets that cover `route`, per dimension, with their capacity and p95 use: its
/// own entry first.
fn load_of(
    config: &PoolConfig,
    route: &Route,
    p95: &HashMap<(String, Dimension), f64>,
) -> RouteLoad {
    let headroom = config.admission().headroom;
    let mut load = RouteLoad::default();
    for name in [route.as_str(), route.provider()] {
        let Some(limits) = config.limits.get(name) else {
            continue;
        };
        for (dim, contract) in limits.contracts() {
            load.buckets.entry(dim).or_default().push(Covering {
                name: name.to_string(),
                own: name == route.as_str(),
                capacity: contract as f64 * headroom,
                used_p95: p95.get(&(name.to_string(), dim)).copied().unwrap_or(0.0),
            });
        }
    }
    load
}

/// Each tier whose primary is limited: its failover ceiling. The approved backups are
/// the routes after the primary, narrowed to `fallback_routes` when a card names the
/// tier; when several cards name it, to the routes every one of them approves (the
/// ceiling must hold for each workflow on the tier).
fn ceilings(config: &PoolConfig, p95: &HashMap<(String, Dimension), f64>) -> Vec<TierCeiling> {
    let mut out = Vec::new();
    for (tier, entries) in &config.tiers {
        let Some(primary) = entries.first() else {
            continue;
        };
        let primary_load = load_of(config, &primary.route, p95);
        if primary_load.buckets.is_empty() {
            continue;
        }
        let cards: Vec<&crate::policy::card::Policy> = config
            .policies
            .values()
            .filter(|p| p.tier.as_deref() == Some(tier.as_str()))
            .collect();
        let backups: Vec<(String, RouteLoad)> = entries[1..]
            .iter()
            .filter(|e| e.route != primary.route)
            .filter(|e| cards.iter().all(|c| c.approves_fallback(&e.route)))
            .map(|e| (e.route.as_str().to_string(), load_of(config, &e.route, p95)))
            .collect();
        let refs: Vec<(&str, &RouteLoad)> = backups.iter().map(|(n, l)| (n.as_str(), l)).collect();
        out.push(capacity::ceiling(
            tier,
            (primary.route.as_str(), &primary_load),
            &refs,
        ));
    }
    out
}

/// `3600000` ms as `1h`, `90` minutes as `90m`.
fn window_words(ms: u64) -> String {
    let m = ms / 60_000;
    match m {
        m if m % 1_440 == 0 => format!("{}d", m / 1_440),
        m if m % 60 == 0 => format!("{}h", m / 60),
        m => format!("{m}m"),
    }
}

/// `text` wrapped at [`WIDTH`] between words, continuation lines indented by `indent`.
fn wrapped(text: &str, indent: &str) -> String {
    let lines = table::wrap(&[vec![text.to_string()]], " ", WIDTH - indent.len());
    let mut s = String::new();
    for (i, l) in lines.iter().enumerate() {
        if i > 0 {
            s.push_str(indent);
        }
        s.push_str(l);
        s.push('\n');
    }
    s
}

fn number(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn render(
    reports: &[BucketReport],
    tiers: &[TierCeiling],
    warnings: &[String],
    window_ms: u64,
    terminal: bool,
) -> String {
    let mut s = String::new();
    if reports.is_empty() {
        s.push_str("no limits: in the pool config; nothing to show\n");
    }
    for r in reports {
        s.push_str(&wrapped(
            &format!(
                "{} {}: contract {}, capacity {}/min",
                r.bucket,
                r.dimension.as_str(),
                r.contract,
                number(r.capacity)
            ),
            "    ",
        ));
        let mut figures = format!(
            "  p95 {:.1} %  now {:.1} %  trend {:+.1} %/h",
            r.utilisation_pct_p95, r.utilisation_pct_now, r.slope_pct_per_hour
        );
        if let Some(l) = r.provider_limit {
            figures.push_str(&format!("  provider limit {l}"));
        }
        s.push_str(&wrapped(&figures, "  "));
        let sheds: Vec<String> = r
            .shed
            .by_class()
            .map(|(k, v)| format!("{} {v}", k.as_str()))
            .collect();
        s.push_str(&format!("  shed: {}\n", sheds.join(", ")));
        if terminal {
            // Two spaces, the line, and the legend: within the width whatever the window.
            // The bars span the window's range, so the legend says what it is.
            // The range depends on how minutes share a bar, and the legend's width on the
            // range: narrow the line until both fit.
            let mut room = WIDTH - 2;
            let (line, legend) = loop {
                let spark = capacity::sparkline(&r.series_pct, room);
                let legend = format!(
                    " {}–{} % last {}",
                    number(round1(spark.low)),
                    number(round1(spark.high)),
                    window_words(window_ms)
                );
                let used = 2 + table::width(&spark.line) + table::width(&legend);
                if used <= WIDTH || room <= 1 {
                    break (spark.line, legend);
                }
                room -= used - WIDTH;
            };
            s.push_str(&format!("  {line}{legend}\n"));
        }
    }
    for t in tiers {
        s.push_str(&wrapped(
            &format!(
                "tier {}: failover ceiling {}",
                t.tier,
                if t.ceiling_holds { "yes" } else { "no" }
            ),
            "    ",
        ));
        s.push_str(&wrapped(
            &format!(
                "  if {} went to zero, the backups {} absorb its load",
                t.primary,
                if t.ceiling_holds { "can" } else { "cannot" }
            ),
            "    ",
        ));
        for d in &t.dimensions {
            let free = d
                .backups_free
                .map_or("unbounded".to_string(), |f| format!("{}/min", number(f)));
            s.push_str(&format!(
                "  {:<4} primary p95 {}/min, backups free {free}\n",
                d.dimension.as_str(),
                number(d.primary_load_p95)
            ));
        }
    }
    for w in warnings {
        s.push_str(&wrapped(&format!("warning: {w}"), "  "));
    }
    s
}

/// With a SQLite state, carries what this process's buckets spent and shed into the
/// file's per-minute counters. The router only adds to an in-memory accumulator
/// (`Buckets::drain_usage`); this flushes it, one transaction per flush, at the end of
/// `walk` and `probe` and every few seconds in `serve`. A flush that fails keeps its
/// delta for the next one, and is said once until one succeeds.
pub struct UsageRecorder {
    store: SqliteStore,
    buckets: Arc<Buckets>,
    pending: tokio::sync::Mutex<UsageDelta>,
    warned: AtomicBool,
}

/// How often `serve` flushes its usage to the SQLite state.
pub const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

impl UsageRecorder {
    /// A recorder for `buckets`, when the state is a SQLite file and `limits:` names
    /// something (a Redis state counts usage in its own settle script).
    pub fn open(config: &PoolConfig, buckets: &Arc<Buckets>) -> anyhow::Result<Option<Self>> {
        let StateLocation::File(path) = config.state_location() else {
            return Ok(None);
        };
        if buckets.is_empty() {
            return Ok(None);
        }
        Ok(Some(UsageRecorder {
            store: SqliteStore::open(&path)?,
            buckets: buckets.clone(),
            pending: tokio::sync::Mutex::new(UsageDelta::default()),
            warned: AtomicBool::new(false),
        }))
    }

    /// A recorder for the buckets a routing command spends (`walk`, `serve`).
    pub fn for_admission(
        config: &PoolConfig,
        admission: &Admission,
    ) -> anyhow::Result<Option<Self>> {
        match admission {
            Admission::Local(b) => Self::open(config, b),
            Admission::Shared(..) => Ok(None),
        }
    }

    /// The store the counters go to.
    pub fn store(&self) -> &SqliteStore {
        &self.store
    }

    /// Adds what was spent and shed since the last flush to the file's counters.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let mut pending = self.pending.lock().await;
        pending.merge(self.buckets.drain_usage());
        if pending.is_empty() {
            return Ok(());
        }
        let delta = std::mem::take(&mut *pending);
        match self.store.add_usage(delta.clone(), wall_now_ms()).await {
            Ok(()) => Ok(()),
            Err(e) => {
                *pending = delta;
                Err(e)
            }
        }
    }

    /// [`Self::flush`], a failure said on stderr once until a flush succeeds again.
    pub async fn flush_or_warn(&self) {
        match self.flush().await {
            Ok(()) => self.warned.store(false, Ordering::Relaxed),
            Err(e) => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    out::warn(&format!(
                        "poolctl: warning: usage counters not recorded yet (kept for the next flush): {e}"
                    ));
                }
            }
        }
    }

    /// Flushes every `every` until the task is aborted.
    pub fn spawn_periodic(
        self: Arc<Self>,
        every: std::time::Duration,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                self.flush_or_warn().await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_fits_80_columns_whatever_the_window() {
        let u = BucketUse {
            bucket: "openai/gpt-4o-2024-08-06".into(),
            dimension: Dimension::Tpm,
            contract: 30_000_000,
            capacity: 27_000_000.0,
            per_minute: vec![29_000_000.0; 8 * 1_440],
            shed: BTreeMap::from([(Priority::Speculative, 123_456)]),
            provider_limit: Some(1_000_000),
        };
        let r = capacity::bucket_report(&u);
        assert!(r.warnings.len() >= 2, "{:?}", r.warnings);
        let warnings: Vec<String> = r.warnings.clone();
        let tier = TierCeiling {
            tier: "high".into(),
            primary: "openai/gpt-4o-2024-08-06".into(),
            ceiling_holds: false,
            dimensions: vec![capacity::CeilingDimension {
                dimension: Dimension::Tpm,
                primary_load_p95: 29_000_000.0,
                backups_free: Some(12_345.5),
            }],
            warnings: vec![],
        };
        let text = render(&[r], &[tier], &warnings, 8 * 86_400_000, true);
        for line in text.lines() {
            assert!(
                table::width(line) <= WIDTH,
                "{} wide: {line}",
                table::width(line)
            );
        }
        assert!(text.contains("last 8d"), "{text}");
        assert!(text.contains("█"), "{text}");
        assert!(
            text.contains("tier high: failover ceiling no\n")
                && text.contains("the backups cannot absorb its load"),
            "{text}"
        );
        // A burst far below capacity rises from the floor, and the legend says the
        // range the bars span.
        let mut minutes = vec![300_000.0; 60];
        minutes[30] = 1_200_000.0;
        let burst = capacity::bucket_report(&BucketUse {
            per_minute: minutes,
            ..u.clone()
        });
        let text = render(&[burst], &[], &[], 3_600_000, true);
        let spark = text.lines().find(|l| l.contains("last 1h")).unwrap();
        assert!(spark.contains('█') && spark.contains('▁'), "{text}");
        assert!(spark.ends_with(" 1–4 % last 1h"), "{text}");
        assert!(table::width(spark) <= WIDTH, "{text}");
        let plain = render(&[], &[], &[], 3_600_000, false);
        assert!(!plain.contains('▁'));
    }
}
