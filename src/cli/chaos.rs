//! `poolctl chaos PATH...`: load every scenario (all load errors first, exit 2), run
//! them against loopback mocks with the production router, print the verdicts.

use super::exit::Exit;
use super::{out, render};
use crate::harness::runner::{run_scenario, ScenarioRun};
use crate::harness::scenario::{discover, Scenario};
use crate::yaml::YamlError;
use clap::Args;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

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
    /// Run only scenarios whose name contains TEXT.
    #[arg(long, value_name = "TEXT")]
    pub filter: Option<String>,
    /// Scenarios run at once (each has its own mocks, clock and health).
    #[arg(long, value_name = "N", default_value_t = default_jobs())]
    pub jobs: usize,
}

fn default_jobs() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Loads every scenario under `paths`; returns them, or every load error.
pub fn load_all(paths: &[PathBuf]) -> Result<Vec<Scenario>, Vec<YamlError>> {
    let files = discover(paths).map_err(|e| vec![e])?;
    if files.is_empty() {
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(vec![YamlError::new(
            &paths[0],
            format!(
                "no scenario files (*.yaml, *.yml) under {}",
                shown.join(", ")
            ),
        )]);
    }
    let mut errors = Vec::new();
    let mut scenarios: Vec<Scenario> = Vec::new();
    let mut names: BTreeMap<String, PathBuf> = BTreeMap::new();
    for file in files {
        match Scenario::load(&file) {
            Ok(s) => {
                if let Some(first) = names.insert(s.name.clone(), file.clone()) {
                    errors.push(
                        YamlError::new(
                            &file,
                            format!(
                                "scenario name `{}` is already used by {}",
                                s.name,
                                first.display()
                            ),
                        )
                        .at_field("name"),
                    );
                } else {
                    scenarios.push(s);
                }
            }
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(scenarios)
    } else {
        Err(errors)
    }
}

pub async fn run(args: ChaosArgs) -> anyhow::Result<Exit> {
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
    let selected: Vec<Scenario> = scenarios
        .into_iter()
        .filter(|s| {
            args.filter
                .as_ref()
                .is_none_or(|f| s.name.contains(f.as_str()))
        })
        .collect();
    if selected.is_empty() {
        out::warn(&format!(
            "error: no scenario matches --filter {:?}",
            args.filter.unwrap_or_default()
        ));
        return Ok(Exit::Usage);
    }

    let progress = (!args.json && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(selected.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {pos}/{len} scenarios {wide_msg}")
                .expect("static template"),
        );
        bar
    });
    let runs = run_all(selected, args.jobs.max(1), progress.as_ref()).await;
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }

    if args.json {
        let mut text = String::new();
        for r in &runs {
            text.push_str(&render::chaos_json(r).to_string());
            text.push('\n');
        }
        out::print(&text)?;
    } else {
        out::print(&render::chaos_table(&runs, None))?;
        out::print(&render::chaos_failures(&runs))?;
        out::line(&render::chaos_summary(&runs))?;
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, render::chaos_junit(&runs))
            .map_err(|e| anyhow::anyhow!("cannot write JUnit report {}: {e}", path.display()))?;
    }
    Ok(if runs.iter().all(|r| r.passed) {
        Exit::Ok
    } else {
        Exit::Failed
    })
}

/// Runs scenarios `jobs` at a time, in file order in the result. A scenario whose task
/// dies counts as failed, never as passed.
pub async fn run_all(
    scenarios: Vec<Scenario>,
    jobs: usize,
    progress: Option<&indicatif::ProgressBar>,
) -> Vec<ScenarioRun> {
    let client = crate::wire::http_client();
    let limit = Arc::new(tokio::sync::Semaphore::new(jobs));
    let handles: Vec<_> = scenarios
        .into_iter()
        .map(|s| {
            let client = client.clone();
            let limit = limit.clone();
            let (name, file) = (s.name.clone(), s.file.clone());
            let handle = tokio::spawn(async move {
                let _permit = limit.acquire_owned().await.expect("never closed");
                run_scenario(&s, &client).await
            });
            (name, file, handle)
        })
        .collect();
    let mut runs = Vec::with_capacity(handles.len());
    for (name, file, handle) in handles {
        let run = handle.await.unwrap_or_else(|e| ScenarioRun {
            file,
            name: name.clone(),
            passed: false,
            requests: Vec::new(),
            wall_ms: 0.0,
            error: Some(format!("the scenario task died: {e}")),
        });
        if let Some(bar) = progress {
            bar.inc(1);
            bar.set_message(name);
        }
        runs.push(run);
    }
    runs
}
