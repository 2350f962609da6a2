//! `poolctl capacity [--json] [--window DURATION]`: utilisation of every limited bucket
//! over the window from the per-minute usage counters in the shared store, sheds per
//! class, the provider's own limits where `probe` recorded them, warnings, and each
//! tier's failover ceiling. The numbers are `crate::capacity`'s; this file reads the
//! store and prints. Exit 1 on any warning, so that it can gate a deploy next to `probe`.

use super::context::load_config;
use super::exit::Exit;
use super::{out, ConfigArg};
use crate::admission::{Dimension, Priority};
use crate::capacity::{self, BucketReport, BucketUse, RouteLoad, TierCeiling};
use crate::clock::wall_now_ms;
use crate::config::{PoolConfig, StateLocation};
use crate::store::redis_buckets::{field, RedisBuckets};
use crate::store::RedisStore;
use crate::vocab::Route;
use clap::Args;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::IsTerminal;

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

pub async fn run(args: CapacityArgs) -> anyhow::Result<Exit> {
    let config = load_config(&args.config)?;
    let url = match config.state_location() {
        StateLocation::Redis(url) => url,
        StateLocation::File(path) => anyhow::bail!(
            "{}: usage per minute is kept in a shared store only (`state: redis://…`); {} holds health, not usage",
            config.file.display(),
            path.display()
        ),
    };
    let store = RedisStore::open(
        &url,
        std::time::Duration::from_millis(config.state_timeout_ms),
    )?;
    let buckets = RedisBuckets::new(store, &config.admission());
    let minutes = (args.window / 60_000).max(1) as i64;
    let to = wall_now_ms().div_euclid(60_000);
    let from = to - minutes + 1;

    let providers: BTreeSet<String> = config
        .limits
        .keys()
        .map(|k| k.split('/').next().unwrap_or(k).to_string())
        .collect();
    // What each bucket spent per minute, its sheds, and the provider's own limits.
    let mut spent: HashMap<String, Vec<f64>> = HashMap::new();
    let mut sheds: HashMap<String, BTreeMap<Priority, u64>> = HashMap::new();
    let mut provider_limits: HashMap<String, u64> = HashMap::new();
    for p in &providers {
        for (m, f, v) in buckets.usage(p, from, to).await? {
            spent
                .entry(f)
                .or_insert_with(|| vec![0.0; minutes as usize])[(m - from) as usize] += v;
        }
        for (priority, route, n) in buckets.sheds(p).await? {
            for name in [route.as_str(), &p[..]] {
                if config.limits.contains_key(name) {
                    *sheds
                        .entry(name.to_string())
                        .or_default()
                        .entry(priority)
                        .or_default() += n;
                }
            }
        }
        provider_limits.extend(buckets.provider_limits(p).await?);
    }

    let mut reports: Vec<BucketReport> = Vec::new();
    let mut p95_used: HashMap<(String, Dimension), f64> = HashMap::new();
    for (name, limits) in &config.limits {
        for (dim, contract) in limits.contracts() {
            let f = field(name, dim);
            let per_minute = spent
                .get(&f)
                .cloned()
                .unwrap_or_else(|| vec![0.0; minutes as usize]);
            p95_used.insert((name.clone(), dim), capacity::p95(&per_minute));
            // The provider's limit for a route entry, or the tightest any of a
            // provider's routes reported for a provider entry.
            let provider_limit = provider_limits
                .iter()
                .filter(|(k, _)| {
                    k.rsplit_once('|').is_some_and(|(r, d)| {
                        d == dim.as_str() && (r == name || r.split('/').next() == Some(name))
                    })
                })
                .map(|(_, v)| *v)
                .min();
            reports.push(capacity::bucket_report(&BucketUse {
                bucket: name.clone(),
                dimension: dim,
                contract,
                capacity: contract as f64 * config.admission().headroom,
                per_minute,
                shed: sheds.get(name).cloned().unwrap_or_default(),
                provider_limit,
            }));
        }
    }
    let tiers = ceilings(&config, &p95_used);

    let mut warnings: Vec<String> = reports.iter().flat_map(|r| r.warnings.clone()).collect();
    for t in &tiers {
        warnings.extend(t.warnings.iter().map(|w| format!("tier `{}`: {w}", t.tier)));
    }
    if args.json {
        let doc = serde_json::json!({
            "window_ms": args.window,
            "buckets": reports,
            "tiers": tiers,
            "warnings": warnings,
        });
        out::line(&doc.to_string())?;
    } else {
        out::print(&render(
            &reports,
            &tiers,
            &warnings,
            std::io::stdout().is_terminal(),
        ))?;
    }
    Ok(if warnings.is_empty() {
        Exit::Ok
    } else {
        Exit::Failed
    })
}

/// The load each route's covering buckets saw (p95 per minute), per dimension.
fn load_of(
    config: &PoolConfig,
    route: &Route,
    p95: &HashMap<(String, Dimension), f64>,
) -> RouteLoad {
    let mut load = RouteLoad::default();
    for (name, limits) in &config.limits {
        if name != route.as_str() && name != route.provider() {
            continue;
        }
        for (dim, contract) in limits.contracts() {
            let used = p95.get(&(name.clone(), dim)).copied().unwrap_or(0.0);
            load.buckets
                .entry(dim)
                .or_default()
                .push((name.clone(), contract as f64, used));
        }
    }
    load
}

/// Each tier whose primary is limited: its failover ceiling. Backups are the routes
/// after the primary, narrowed to `fallback_routes` when a card names the tier.
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
        let approved: Option<Vec<&Route>> = config
            .policies
            .values()
            .filter(|p| p.tier.as_deref() == Some(tier.as_str()))
            .find_map(|p| p.fallback_routes.as_ref().map(|r| r.iter().collect()));
        let backups: Vec<(String, RouteLoad)> = entries[1..]
            .iter()
            .filter(|e| approved.as_ref().is_none_or(|a| a.contains(&&e.route)))
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

fn render(
    reports: &[BucketReport],
    tiers: &[TierCeiling],
    warnings: &[String],
    terminal: bool,
) -> String {
    let mut s = String::new();
    if reports.is_empty() {
        s.push_str("no limits: in the pool config; nothing to show\n");
    }
    for r in reports {
        s.push_str(&format!(
            "{:<32} {:<4} contract {:>9}  p95 {:>5.1} %  now {:>5.1} %  trend {:>+6.1} %/h  shed {}",
            r.bucket,
            r.dimension.as_str(),
            r.contract,
            r.utilisation_pct_p95,
            r.utilisation_pct_now,
            r.slope_pct_per_hour,
            r.shed.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "),
        ));
        if let Some(l) = r.provider_limit {
            s.push_str(&format!("  provider says {l}"));
        }
        s.push('\n');
        if terminal {
            s.push_str(&format!(
                "{:<37} {}\n",
                "",
                capacity::sparkline(&r.series_pct)
            ));
        }
    }
    for t in tiers {
        s.push_str(&format!(
            "tier {}: if {} went to zero, the backups {} absorb it\n",
            t.tier,
            t.primary,
            if t.ceiling_holds { "CAN" } else { "CANNOT" }
        ));
        for d in &t.dimensions {
            let free = d
                .backups_free
                .map_or("unbounded".to_string(), |f| format!("{f:.0}"));
            s.push_str(&format!(
                "    {:<4} primary p95 {:.0}/min, backups free {free}\n",
                d.dimension.as_str(),
                d.primary_load_p95
            ));
        }
    }
    for w in warnings {
        s.push_str(&format!("warning: {w}\n"));
    }
    s
}
