//! `poolctl retire`, `restore` and `status`: the persisted health of routes, changed or
//! shown by hand. Every permanent state has this recovery path.

use super::context::{load_config, open_store};
use super::exit::Exit;
use super::{out, render, ConfigArg};
use crate::clock::wall_now_ms;
use crate::health::{Health, Transition};
use crate::store::HealthStore;
use crate::vocab::Route;
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
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The route to bring back to ready.
    pub route: String,
    #[command(flatten)]
    pub config: ConfigArg,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Print JSON: {routes:[{route, state, until, reason}]}.
    #[arg(long)]
    pub json: bool,
}

pub async fn retire(args: RetireArgs) -> anyhow::Result<Exit> {
    let config = load_config(&args.config)?;
    let route = config.find_route(&args.route)?;
    let store = open_store(&config)?;
    let retire = Transition::Retire {
        reason: args.reason.clone(),
    };
    store.apply(&route, retire).await?;
    out::line(&format!(
        "{route} retired ({}) in {}",
        args.reason,
        store.path().display()
    ))?;
    Ok(Exit::Ok)
}

pub async fn restore(args: RestoreArgs) -> anyhow::Result<Exit> {
    let config = load_config(&args.config)?;
    let route = config.find_route(&args.route)?;
    let store = open_store(&config)?;
    let (before, _) = store.apply(&route, Transition::Restore).await?;
    let was = match before {
        Health::Ready => "was already ready".to_string(),
        Health::Cooling { reason, .. } => format!("was cooling ({reason})"),
        Health::Retired { reason } => format!("was retired ({reason})"),
    };
    out::line(&format!("{route} restored to ready ({was})"))?;
    Ok(Exit::Ok)
}

/// Every route the config names, plus any the store knows that the config no longer does.
pub async fn status(args: StatusArgs) -> anyhow::Result<Exit> {
    let config = load_config(&args.config)?;
    let store = open_store(&config)?;
    let mut all: BTreeMap<Route, Health> = config
        .route_names()
        .into_iter()
        .map(|r| (r, Health::Ready))
        .collect();
    all.extend(store.list().await?);
    let rows: Vec<(Route, Health)> = all.into_iter().collect();
    let now = wall_now_ms();
    if args.json {
        out::line(&render::status_json(&rows, now).to_string())?;
    } else {
        out::print(&render::status_table(&rows, now, None))?;
    }
    Ok(Exit::Ok)
}
