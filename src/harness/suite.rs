//! A suite of scenarios: loaded together (every load error at once, names unique) and
//! run a few at a time, each with its own mocks, clock and health. `poolctl chaos` and
//! the chaos benchmark both run scenarios through here.

use super::runner::{run_scenario, ScenarioRun};
use super::scenario::{at_line, discover, Scenario};
use crate::config::yaml::YamlError;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

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
                    let e = YamlError::new(
                        &file,
                        format!(
                            "scenario name `{}` is already used by {}",
                            s.name,
                            first.display()
                        ),
                    )
                    .at_field("name");
                    // The file was just read whole; reading it again only finds the line.
                    let e = match crate::config::yaml::read_text(&file) {
                        Ok(text) => at_line(e, &text),
                        Err(_) => e,
                    };
                    errors.push(e);
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

/// Runs scenarios `jobs` at a time, in file order in the result; `on_done` sees each run
/// as it is collected (the CLI's progress bar). A scenario whose task
/// dies counts as failed, never as passed.
pub async fn run_all(
    scenarios: Vec<Scenario>,
    jobs: usize,
    on_done: &(dyn Fn(&ScenarioRun) + Send + Sync),
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
        on_done(&run);
        runs.push(run);
    }
    runs
}
