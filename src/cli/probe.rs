//! `poolctl probe`: the real status of every route of every tier, so a dead chain tail
//! is found before a deploy. `--apply` writes what the probe proved into the store.

use super::args::ConfigArg;
use super::context::{env_key, load_config, open_store};
use super::exit::Exit;
use super::look::Look;
use super::out;
use super::render;
use crate::core::clock::wall_now_ms;
use crate::router::probe::{
    apply, probe_all, ProbeResult, Target, DEFAULT_CONCURRENCY, MAX_CONCURRENCY, PER_PROVIDER,
};
use clap::Args;

#[derive(Debug, Args)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Probe only this tier (repeatable); default every tier.
    #[arg(long = "tier", value_name = "T")]
    pub tiers: Vec<String>,
    /// Print one JSON document on one line (spec/cli.md) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Probes in flight at once, over all providers (never more than 4 per provider);
    /// 1 to 4096.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_CONCURRENCY, value_parser = parse_concurrency)]
    pub concurrency: usize,
    /// Deadline of each probe in ms, 1 to 600000 (default: each provider's timeout_ms).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub timeout_ms: Option<u64>,
    /// Write what the probe proved into the health store: retire routes found
    /// quota_exhausted, model_unavailable or auth; restore retired routes that answered.
    #[arg(long)]
    pub apply: bool,
    /// Send probes that the routes' admission buckets (`limits:`) refuse, too. Without
    /// it such a route is reported `skipped: admission` and counts as not live.
    #[arg(long)]
    pub force: bool,
}

pub use crate::router::probe::TierProbe;

pub async fn run(args: ProbeArgs, look: &Look) -> anyhow::Result<Exit> {
    let config = load_config(&args.config)?;
    let tier_names: Vec<String> = if args.tiers.is_empty() {
        config.tiers.keys().cloned().collect()
    } else {
        // `--tier high --tier high` is one tier: the report lists each tier once.
        let mut seen = std::collections::HashSet::new();
        args.tiers
            .iter()
            .filter(|t| seen.insert(t.as_str()))
            .cloned()
            .collect()
    };
    // Resolve everything first, so a missing key or unknown tier fails before any traffic.
    let mut plan: Vec<(String, Vec<Target>)> = Vec::new();
    for name in &tier_names {
        let tier = config.tier(name, &env_key)?;
        let entries = config.tier_entries(name)?;
        let targets = tier
            .routes
            .iter()
            .zip(entries)
            .map(|(spec, entry)| Target {
                route: spec.route.clone(),
                path: entry.path,
                endpoint: spec.endpoint.clone(),
                policy: spec.policy,
            })
            .collect();
        plan.push((name.clone(), targets));
    }
    // A route in several tiers is probed once.
    let mut unique: Vec<Target> = Vec::new();
    for (_, targets) in &plan {
        for t in targets {
            if !unique
                .iter()
                .any(|u| u.route == t.route && u.path == t.path)
            {
                unique.push(t.clone());
            }
        }
    }

    let bar = super::out::progress_bar(unique.len(), "probing {pos}/{len} routes", args.json);
    let on_done = |r: &ProbeResult| {
        if let Some(b) = &bar {
            b.inc(1);
            b.set_message(r.route.to_string());
        }
    };
    let client = crate::wire::http_client();
    let now = wall_now_ms();
    // Probes spend the provider's quota like any call: from the same buckets, at
    // background priority. This process's own, or with `state: redis://` the fleet's.
    let opened = super::context::Admission::open(&config)?;
    let (buckets, limited) = match &opened {
        super::context::Admission::Local(b) => {
            (crate::router::probe::ProbeBuckets::Local(b), !b.is_empty())
        }
        super::context::Admission::Shared(s, _) => {
            (crate::router::probe::ProbeBuckets::Shared(s), true)
        }
    };
    let admission = crate::router::probe::ProbeAdmission {
        buckets,
        force: args.force,
    };
    let results = probe_all(
        &client,
        &unique,
        args.concurrency,
        PER_PROVIDER,
        args.timeout_ms,
        now,
        limited.then_some(&admission),
        &on_done,
    )
    .await;
    if let Some(b) = bar {
        b.finish_and_clear();
    }

    let tiers: Vec<TierProbe> = plan
        .iter()
        .map(|(name, targets)| {
            let routes: Vec<ProbeResult> = targets
                .iter()
                .map(|t| {
                    let i = unique
                        .iter()
                        .position(|u| u.route == t.route && u.path == t.path)
                        .expect("probed");
                    results[i].clone()
                })
                .collect();
            TierProbe::of(name, routes)
        })
        .collect();

    record_provider_limits(&config, &results).await;
    // With a SQLite state, what the probes spent reaches the file's usage counters.
    if let Some(usage) = super::capacity::UsageRecorder::for_admission(&config, &opened)? {
        usage.flush_or_warn().await;
    }
    let changes = if args.apply {
        let store = open_store(&config)?;
        apply(store.store.as_ref(), &results, wall_now_ms()).await?
    } else {
        Vec::new()
    };
    if args.json {
        // One document on one line, as every command prints (README, "Output").
        let mut doc = serde_json::json!({ "tiers": tiers });
        if args.apply {
            doc["applied"] = serde_json::json!(changes);
        }
        out::line(&doc.to_string())?;
    } else {
        for t in &tiers {
            out::print(&render::probe_tier(t, look))?;
        }
        for line in changes {
            out::line(&format!("applied: {line}"))?;
        }
    }
    Ok(if tiers.iter().all(|t| t.live > 0) {
        Exit::Ok
    } else {
        Exit::Failed
    })
}

/// `--concurrency`: 1 to `MAX_CONCURRENCY`, so an absurd value is a usage error, not a
/// panic deep in a semaphore.
fn parse_concurrency(s: &str) -> Result<usize, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if (1..=MAX_CONCURRENCY as u64).contains(&n) => Ok(n as usize),
        _ => Err(format!(
            "must be a whole number from 1 to {MAX_CONCURRENCY}"
        )),
    }
}

/// Records the limits providers stated (`x-ratelimit-limit-*`,
/// `anthropic-ratelimit-*-limit`) in the state store, for `poolctl capacity`. Best
/// effort: a probe's answer does not depend on it, and a failure is said once.
async fn record_provider_limits(config: &crate::config::pool::PoolConfig, results: &[ProbeResult]) {
    use crate::admission::bucket::Dimension;
    let seen: Vec<(crate::core::vocab::Route, Dimension, u64)> = results
        .iter()
        .filter_map(|r| Some((r, r.headroom.as_ref()?)))
        .flat_map(|(r, h)| {
            h.limits()
                .into_iter()
                .map(|(dim, limit)| (r.route.clone(), dim, limit))
        })
        .collect();
    if seen.is_empty() {
        return;
    }
    let failed = |e: &dyn std::fmt::Display| {
        out::warn(&format!(
            "poolctl: warning: provider limits not recorded: {e}"
        ));
    };
    match config.state_location() {
        crate::config::pool::StateLocation::File(path) => {
            match crate::store::SqliteStore::open(&path) {
                Ok(store) => {
                    if let Err(e) = store.record_provider_limits(seen, wall_now_ms()).await {
                        failed(&e);
                    }
                }
                Err(e) => failed(&e),
            }
        }
        crate::config::pool::StateLocation::Redis(url) => {
            let deadline = std::time::Duration::from_millis(config.state_timeout_ms);
            let tls = config.state_tls();
            let store = match crate::store::RedisStore::open_with(&url, tls.as_ref(), deadline) {
                Ok(s) => s,
                Err(e) => return failed(&e),
            };
            let b = crate::store::redis_buckets::RedisBuckets::new(store, &config.admission());
            for (route, dim, limit) in seen {
                if let Err(e) = b.record_provider_limit(&route, dim, limit).await {
                    return failed(&e);
                }
            }
        }
    }
}
