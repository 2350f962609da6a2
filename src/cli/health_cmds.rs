//! `poolctl retire`, `restore` and `status`: the persisted health of routes, changed or
//! shown by hand. Every permanent state has this recovery path.

use super::args::ConfigArg;
use super::context::{load_config, open_store};
use super::exit::Exit;
use super::look::Look;
use super::{out, render};
use crate::config::pool::StateLocation;
use crate::core::clock::wall_now_ms;
use crate::core::vocab::Route;
use crate::policy::health::{Health, Transition};
use clap::Args;
use std::collections::BTreeMap;

#[derive(Debug, Args)]
pub struct RetireArgs {
    /// The route (`provider/model`) to retire.
    pub route: String,
    /// Why, for whoever reads `status` later.
    #[arg(long, value_name = "TEXT", default_value = "manual")]
    pub reason: String,
    #[command(flatten)]
    pub config: ConfigArg,
    /// Print JSON: {route, state, reason, was, store}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The route to bring back to ready.
    pub route: String,
    #[command(flatten)]
    pub config: ConfigArg,
    /// Print JSON: {route, state, reason, was, store}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Print JSON: {routes:[{route, state, until, reason}]}.
    #[arg(long)]
    pub json: bool,
}

/// `retire --json` and `restore --json`: the route's new state and the one it left.
fn change_json(route: &Route, now: &Health, before: &Health, store: &str) -> String {
    let view = |h: &Health| {
        let (state, reason) = match h {
            Health::Ready => ("ready", None),
            Health::Cooling { reason, .. } => ("cooling", Some(reason.as_str())),
            Health::Retired { reason } => ("retired", Some(reason.as_str())),
        };
        serde_json::json!({"state": state, "reason": reason})
    };
    let new = view(now);
    serde_json::json!({
        "route": route, "state": new["state"], "reason": new["reason"],
        "was": view(before), "store": store,
    })
    .to_string()
}

pub async fn retire(args: RetireArgs) -> anyhow::Result<Exit> {
    let config = load_config(&args.config)?;
    let route = config.find_route(&args.route)?;
    let store = open_store(&config)?;
    let retire = Transition::Retire {
        reason: args.reason.clone(),
    };
    let (before, new) = store.store.apply(&route, retire).await?;
    if args.json {
        out::line(&change_json(&route, &new, &before, &store.name))?;
    } else {
        out::line(&format!(
            "{route} retired ({}) in {}",
            args.reason, store.name
        ))?;
    }
    Ok(Exit::Ok)
}

pub async fn restore(args: RestoreArgs) -> anyhow::Result<Exit> {
    let config = load_config(&args.config)?;
    let route = config.find_route(&args.route)?;
    let store = open_store(&config)?;
    let (before, _) = store.store.apply(&route, Transition::Restore).await?;
    if args.json {
        out::line(&change_json(&route, &Health::Ready, &before, &store.name))?;
        return Ok(Exit::Ok);
    }
    let was = match before {
        Health::Ready => "was already ready".to_string(),
        Health::Cooling { reason, .. } => format!("was cooling ({reason})"),
        Health::Retired { reason } => format!("was retired ({reason})"),
    };
    out::line(&format!("{route} restored to ready ({was})"))?;
    Ok(Exit::Ok)
}

/// Every route the config names, in config order (chain order), then any the store
/// knows that the config no longer does, sorted.
pub async fn status(args: StatusArgs, look: &Look) -> anyhow::Result<Exit> {
    let config = load_config(&args.config)?;
    // A read-only command: with no store yet, every route is ready, and none is created.
    // (A dangling symbolic link counts as there: opening it is refused, loudly.)
    let present = match config.state_location() {
        StateLocation::File(path) => std::fs::symlink_metadata(path).is_ok(),
        StateLocation::Redis(_) => true,
    };
    let mut stored: BTreeMap<Route, Health> = if present {
        open_store(&config)?
            .store
            .list()
            .await?
            .into_iter()
            .collect()
    } else {
        BTreeMap::new()
    };
    let mut rows: Vec<(Route, Health)> = config
        .route_names()
        .into_iter()
        .map(|r| {
            let h = stored.remove(&r).unwrap_or(Health::Ready);
            (r, h)
        })
        .collect();
    rows.extend(stored);
    let now = wall_now_ms();
    // With a file store, admission buckets live in each process (README, "Admission"): a
    // new process's are full, a gateway's live levels are on its /metrics. With
    // `state: redis://` they are the fleet's, read from Redis (an error if it cannot be:
    // status never shows levels it did not read).
    let admission = config.admission();
    let buckets = match config.state_location() {
        StateLocation::Redis(url) if !admission.limits.is_empty() => {
            let store = super::context::open_redis(&config, &url)?;
            crate::store::redis_buckets::RedisBuckets::new(store, &admission)
                .snapshot(now)
                .await?
        }
        _ => crate::admission::buckets::Buckets::new(&admission, now).snapshot(now),
    };
    if args.json {
        out::line(&render::status_json(&rows, now, &buckets).to_string())?;
    } else {
        out::print(&render::status_table(&rows, now, &buckets, look))?;
    }
    Ok(Exit::Ok)
}
