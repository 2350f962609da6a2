//! `poolctl check`: validate a pool config before anything runs — syntax, unknown
//! fields, duplicate routes and unknown providers (all caught by loading), plus key
//! variables that are not set (named, never printed) and dialects that cannot be
//! inferred.

use super::context::{env_key, load_config};
use super::exit::Exit;
use super::{out, ConfigArg};
use crate::config::DialectSource;
use clap::Args;
use serde::Serialize;

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Print JSON: {file, ok, errors:[..], warnings:[..]}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Default, Serialize)]
pub struct Findings {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

pub fn findings(
    config: &crate::config::PoolConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Findings {
    let mut f = Findings::default();
    for (name, p) in &config.providers {
        if env(&p.api_key_env).is_none_or(|v| v.is_empty()) {
            f.errors.push(format!(
                "provider `{name}`: environment variable `{}` is not set",
                p.api_key_env
            ));
        }
        if p.dialect().1 == DialectSource::WireDefault {
            f.warnings.push(format!(
                "provider `{name}`: the dialect cannot be inferred from {}; assuming `{}` error conventions (set `dialect:` to be sure)",
                crate::secret::display_url(&p.base_url),
                p.dialect().0
            ));
        }
    }
    // Equivalence contracts: a backup that cannot serve what its primary serves is a
    // fallback that will fail exactly when it is needed.
    for (tier, entries) in &config.tiers {
        let Some(primary) = entries.first() else {
            continue;
        };
        let facts = |r: &crate::vocab::Route| config.models.get(r).copied().unwrap_or_default();
        for backup in &entries[1..] {
            let gaps =
                crate::capability::backup_gaps(&facts(&primary.route), &facts(&backup.route));
            if !gaps.is_empty() {
                f.warnings.push(format!(
                    "tier `{tier}`: backup `{}` cannot serve what primary `{}` serves: {}",
                    backup.route,
                    primary.route,
                    gaps.join(", ")
                ));
            }
        }
    }
    let used: std::collections::BTreeSet<&str> = config
        .tiers
        .values()
        .flatten()
        .map(|e| e.route.provider())
        .collect();
    for name in config.providers.keys() {
        if !used.contains(&name.as_str()) {
            f.warnings
                .push(format!("provider `{name}` is used by no tier"));
        }
    }
    f
}

pub fn run(args: CheckArgs) -> anyhow::Result<Exit> {
    let config = load_config(&args.config)?;
    let f = findings(&config, &env_key);
    if args.json {
        let v = serde_json::json!({
            "file": config.file, "ok": f.errors.is_empty(), "errors": f.errors, "warnings": f.warnings,
        });
        out::line(&v.to_string())?;
    } else {
        for e in &f.errors {
            out::line(&format!("error: {e}"))?;
        }
        for w in &f.warnings {
            out::line(&format!("warning: {w}"))?;
        }
        let routes = config.route_names().len();
        out::line(&format!(
            "{}: {} providers, {} tiers, {routes} routes — {} error(s), {} warning(s)",
            config.file.display(),
            config.providers.len(),
            config.tiers.len(),
            f.errors.len(),
            f.warnings.len()
        ))?;
    }
    Ok(if f.errors.is_empty() {
        Exit::Ok
    } else {
        Exit::Failed
    })
}
