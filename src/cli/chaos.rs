//! `poolctl chaos PATH...`: load every scenario (all load errors first, exit 2), run
//! them against loopback mocks with the production router, print the verdicts.

use super::exit::Exit;
use super::look::Look;
use super::{out, render_chaos};
use crate::harness::runner::ScenarioRun;
use crate::harness::scenario::{discover, Scenario};
use crate::harness::suite::{load_all, run_all};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ChaosArgs {
    /// Scenario files or directories.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Print one JSON object per scenario (JSON Lines) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also write JUnit XML to FILE, for CI systems.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Run only scenarios whose name contains TEXT, ignoring case.
    #[arg(long, value_name = "TEXT")]
    pub filter: Option<String>,
    /// Scenarios run at once (each has its own mocks, clock and health); 1 to 1024.
    #[arg(long, value_name = "N", default_value_t = default_jobs(),
          value_parser = super::args::positive::<1024>)]
    pub jobs: usize,
    /// Run the scenarios against the gateway at URL (its base, without /v1), one after
    /// another, instead of poolctl's own router. Its config must point at a running
    /// `poolctl mock PATH... --write-config` for the same PATHs (see --mock).
    #[arg(
        long,
        value_name = "URL",
        conflicts_with = "target_exec",
        help_heading = "Against a gateway"
    )]
    pub target: Option<String>,
    /// Start the gateway CMD (`{config}` and `{port}` are replaced) against mocks this
    /// run starts, run the suite against it, and stop it. Its output goes to a file
    /// named at the end.
    #[arg(long, value_name = "CMD", help_heading = "Against a gateway")]
    pub target_exec: Option<String>,
    /// The bearer token the target wants (also $POOLCTL_TARGET_TOKEN); never printed.
    #[arg(
        long,
        value_name = "T",
        env = "POOLCTL_TARGET_TOKEN",
        hide_env_values = true,
        help_heading = "Against a gateway"
    )]
    pub target_token: Option<String>,
    /// The target's config format: pool, litellm or portkey (Portkey's config object
    /// per scenario goes in the x-portkey-config header).
    #[arg(long, value_name = "FORMAT", default_value = "pool", value_parser = super::args::config_format, help_heading = "Against a gateway")]
    pub config_format: crate::harness::target_config::ConfigFormat,
    /// With --target: the address of the `poolctl mock` the target points at.
    #[arg(long, value_name = "ADDR", value_parser = super::args::listen_addr, help_heading = "Against a gateway")]
    pub mock: Option<std::net::SocketAddr>,
    /// Skip a scenario that would wait longer than this in real time (a Retry-After, a
    /// gap between requests); 500ms, 5s, 2m.
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = super::args::duration_ms, help_heading = "Against a gateway")]
    pub max_wait: u64,
    /// With --target-exec: how long the gateway may take to answer after it starts.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = super::args::duration_ms, help_heading = "Against a gateway")]
    pub start_timeout: u64,
}

fn default_jobs() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

pub async fn run(args: ChaosArgs, look: &Look) -> anyhow::Result<Exit> {
    // A report that cannot be written is found now, not after every scenario has run.
    if let Some(path) = &args.junit {
        if let Err(why) = junit_writable(path) {
            out::warn(&format!("error: --junit {}: {why}", path.display()));
            return Ok(Exit::Usage);
        }
    }
    match discover(&args.paths) {
        Ok(files) if files.is_empty() => {
            let shown: Vec<String> = args.paths.iter().map(|p| p.display().to_string()).collect();
            out::warn(&format!(
                "error: no scenario files (*.yaml, *.yml) found in {}",
                shown.join(", ")
            ));
            return Ok(Exit::Usage);
        }
        Ok(_) => {}
        Err(e) => {
            out::warn(&format!("error: {e}"));
            return Ok(Exit::Usage);
        }
    }
    let scenarios = match load_all(&args.paths) {
        Ok(s) => s,
        Err(errors) => {
            for e in &errors {
                out::warn(&format!("error: {e}"));
            }
            out::warn(&format!(
                "{} scenario file(s) could not be loaded; nothing was run",
                errors.len()
            ));
            return Ok(Exit::Usage);
        }
    };
    // Named as `poolctl mock` names the same paths (one scenario as written).
    let naming = super::mock::naming_for(&scenarios);
    let all = scenarios.clone();
    let wanted = args.filter.as_ref().map(|f| f.to_lowercase());
    let selected: Vec<Scenario> = scenarios
        .into_iter()
        .filter(|s| {
            wanted
                .as_ref()
                .is_none_or(|f| s.name.to_lowercase().contains(f.as_str()))
        })
        .collect();
    if selected.is_empty() {
        out::warn(&format!(
            "error: no scenario matches --filter {:?}",
            args.filter.unwrap_or_default()
        ));
        return Ok(Exit::Usage);
    }

    if args.target.is_some() || args.target_exec.is_some() {
        let target = super::chaos_target::TargetArgs {
            url: args.target,
            exec: args.target_exec,
            token: args.target_token,
            format: args.config_format,
            mock: args.mock,
            max_wait_ms: args.max_wait,
            start_timeout_ms: args.start_timeout,
            json: args.json,
            junit: args.junit,
        };
        return super::chaos_target::run(target, &all, selected, naming, look).await;
    }

    let progress = out::progress_bar(selected.len(), "{pos}/{len} scenarios", args.json);
    let bump = |r: &ScenarioRun| {
        if let Some(bar) = &progress {
            bar.inc(1);
            bar.set_message(r.name.clone());
        }
    };
    let runs = run_all(selected, args.jobs.max(1), &bump).await;
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }

    if args.json {
        let mut text = String::new();
        for r in &runs {
            text.push_str(&render_chaos::chaos_json(r).to_string());
            text.push('\n');
        }
        out::print(&text)?;
    } else {
        out::print(&render_chaos::chaos_results(&runs, look))?;
        out::print(&render_chaos::chaos_failures(&runs, look))?;
        out::line(&render_chaos::chaos_summary(&runs, look))?;
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, render_chaos::chaos_junit(&runs))
            .map_err(|e| anyhow::anyhow!("cannot write JUnit report {}: {e}", path.display()))?;
    }
    Ok(if runs.iter().all(|r| r.passed) {
        Exit::Ok
    } else {
        Exit::Failed
    })
}

/// Whether a JUnit report can be written at `path`: its directory exists and it is not
/// itself a directory.
fn junit_writable(path: &std::path::Path) -> Result<(), String> {
    if path.is_dir() {
        return Err("is a directory; name a file".into());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        return Err(format!("directory {} does not exist", dir.display()));
    }
    Ok(())
}
