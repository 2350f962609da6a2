//! `poolctl check`: validate a pool config before anything runs, and report every
//! problem in one run — unknown fields, bad values, duplicate routes, unknown providers,
//! key variables that are not set (named, never printed) — each with its line, plus
//! warnings (dialects that cannot be inferred, backups that cannot serve what their
//! primary serves, providers no tier uses).
//!
//! Exit (spec/cli.md, "`check --json`"): 0 no problem; 1 problems in a file that is
//! valid YAML; 2 only when the file cannot be read or is not YAML. `--json` always
//! prints one JSON document, whatever the problems.

use super::args::ConfigArg;
use super::context::{env_key, missing_hint, reads_as_litellm};
use super::exit::Exit;
use super::out;
use crate::config::pool::{locate, DialectSource, PoolConfig, CONFIG_ENV};
use crate::config::problems;
use crate::config::yaml::YamlError;
use crate::harness::target_config::ConfigFormat;
use clap::Args;
use serde::Serialize;
use serde_path_to_error::Segment;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Print one JSON document: {file, ok, errors:[..], warnings:[..]}, each entry
    /// {file, line, field, message, suggestion}.
    #[arg(long)]
    pub json: bool,
}

/// One problem or warning, as `check --json` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub file: PathBuf,
    /// 1-based; null when the finding is about the whole file.
    pub line: Option<usize>,
    /// The field path (`providers.openai.timeout_ms`, `tiers.high[2]`); empty for the
    /// whole file.
    pub field: String,
    pub message: String,
    /// The nearest valid name, for a typo.
    pub suggestion: Option<String>,
}

impl Finding {
    fn from_yaml(e: &YamlError) -> Finding {
        Finding {
            file: e.file.clone(),
            line: e.line,
            field: if e.field == "." {
                String::new()
            } else {
                e.field.clone()
            },
            message: e.message.clone(),
            suggestion: suggestion_in(&e.message),
        }
    }

    pub(super) fn as_yaml(&self) -> YamlError {
        YamlError {
            file: self.file.clone(),
            line: self.line,
            column: None,
            field: self.field.clone(),
            message: self.message.clone(),
        }
    }
}

/// The name in "…; did you mean `x`?".
fn suggestion_in(message: &str) -> Option<String> {
    let (_, rest) = message.rsplit_once("did you mean `")?;
    rest.split_once('`').map(|(name, _)| name.to_string())
}

/// Everything `check` found in one file.
#[derive(Debug, Default, Serialize)]
pub struct Findings {
    pub errors: Vec<Finding>,
    pub warnings: Vec<Finding>,
}

/// What one run of `check` found, and whether the file could be read as YAML at all.
#[derive(Debug)]
pub struct Report {
    pub file: PathBuf,
    pub findings: Findings,
    /// Unreadable or not YAML: exit 2.
    pub unloadable: bool,
    pub config: Option<PoolConfig>,
}

impl Report {
    pub fn exit(&self) -> Exit {
        if self.unloadable {
            Exit::Usage
        } else if self.findings.errors.is_empty() {
            Exit::Ok
        } else {
            Exit::Failed
        }
    }

    pub fn json(&self) -> String {
        serde_json::json!({
            "file": self.file,
            "ok": self.findings.errors.is_empty() && !self.unloadable,
            "errors": self.findings.errors,
            "warnings": self.findings.warnings,
        })
        .to_string()
    }

    pub fn text(&self) -> String {
        let mut out = String::new();
        for e in &self.findings.errors {
            out.push_str(&format!("error: {}\n", e.as_yaml()));
        }
        for w in &self.findings.warnings {
            out.push_str(&format!("warning: {}\n", w.as_yaml()));
        }
        let (e, w) = (self.findings.errors.len(), self.findings.warnings.len());
        match &self.config {
            Some(config) => {
                // Groups are named only where a config has some: the line of every
                // other config stays as it was.
                let groups: usize = config.groups.values().map(Vec::len).sum();
                let groups = match groups {
                    0 => String::new(),
                    1 => ", 1 group".to_string(),
                    n => format!(", {n} groups"),
                };
                out.push_str(&format!(
                    "{}: {} providers, {} tiers, {} routes{groups} — {e} error(s), {w} warning(s)\n",
                    self.file.display(),
                    config.providers.len(),
                    config.tiers.len(),
                    config.route_names().len(),
                ));
                // A valid config's groups, in tier order: what each step shares.
                let listed = config.tiers.keys().filter(|_| e == 0);
                for (tier, list) in listed.filter_map(|t| Some((t, config.groups.get(t)?))) {
                    for g in list {
                        let members: Vec<&str> = g.members.iter().map(|r| r.as_str()).collect();
                        out.push_str(&format!(
                            "  tiers.{tier}[{}]: group of {}, {}: {}\n",
                            g.step,
                            members.len(),
                            g.strategy,
                            members.join(", ")
                        ));
                    }
                }
            }
            None => out.push_str(&format!(
                "{}: {e} error(s), {w} warning(s)\n",
                self.file.display()
            )),
        }
        out
    }
}

/// Checks the config at `file`, reading keys through `env`.
pub fn check_file(file: &Path, env: &dyn Fn(&str) -> Option<String>) -> Report {
    check_file_as(file, ConfigFormat::Pool, env)
}

/// `check_file` in format `format` (`pool` reads a file with a top-level `model_list`
/// as LiteLLM's).
pub fn check_file_as(
    file: &Path,
    format: ConfigFormat,
    env: &dyn Fn(&str) -> Option<String>,
) -> Report {
    let unloadable = |message: String| Report {
        file: file.to_path_buf(),
        findings: Findings {
            errors: vec![Finding {
                file: file.to_path_buf(),
                line: None,
                field: String::new(),
                message,
                suggestion: None,
            }],
            warnings: Vec::new(),
        },
        unloadable: true,
        config: None,
    };
    // The same bounded read as every load: no more than the size limit in memory.
    let text = match crate::config::yaml::read_text(file) {
        Ok(t) => t,
        Err(e) => return unloadable(e.message),
    };
    if reads_as_litellm(format, &text) {
        return check_litellm(file, &text, env);
    }
    match PoolConfig::lint(file, &text) {
        Err(not_yaml) => Report {
            findings: Findings {
                errors: vec![Finding::from_yaml(&not_yaml)],
                warnings: Vec::new(),
            },
            ..unloadable(String::new())
        },
        Ok(lint) => from_lint(file, lint, &text, env, &|_| {}),
    }
}

/// What `lint` found in `text`, and what the parsed config's fields cannot say alone.
/// `prepare` gives the parsed config what its text does not hold (a LiteLLM file's
/// literal keys).
fn from_lint(
    file: &Path,
    lint: crate::config::pool::Lint,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    prepare: &dyn Fn(&mut PoolConfig),
) -> Report {
    let mut findings = Findings {
        errors: lint.problems.iter().map(Finding::from_yaml).collect(),
        warnings: Vec::new(),
    };
    let mut config = lint.config;
    if let Some(config) = config.as_mut() {
        prepare(config);
        let more = findings_of(config, text, env);
        // A value that only stood in for a missing field (`api_key_env`,
        // `base_url`) is not the file's: nothing to say about it.
        findings.errors.extend(
            more.errors
                .into_iter()
                .filter(|f| !lint.stand_ins.contains(&f.field)),
        );
        findings.warnings.extend(
            more.warnings
                .into_iter()
                .filter(|f| !lint.stand_ins.contains(&f.field)),
        );
    }
    // In file order, as a person fixes them; the whole-file ones first.
    findings.errors.sort_by_key(|f| f.line.unwrap_or(0));
    findings.warnings.sort_by_key(|f| f.line.unwrap_or(0));
    Report {
        file: file.to_path_buf(),
        findings,
        unloadable: false,
        config,
    }
}

/// `check` of a LiteLLM config: its translation checked like any pool config, every
/// finding at the LiteLLM line it came from, with the mapping's own problems, its
/// literal secrets and every field poolctl does not use.
pub(super) fn check_litellm(
    file: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Report {
    let import = match crate::config::litellm::translate(file, text, env) {
        Ok(import) => import,
        Err(e) => {
            return Report {
                file: file.to_path_buf(),
                findings: Findings {
                    errors: vec![Finding::from_yaml(&e)],
                    warnings: Vec::new(),
                },
                unloadable: true,
                config: None,
            }
        }
    };
    let mut report = match PoolConfig::lint(file, &import.text) {
        Ok(lint) => from_lint(file, lint, &import.text, env, &|c| import.apply(c)),
        Err(e) => Report {
            file: file.to_path_buf(),
            findings: Findings {
                errors: vec![Finding::from_yaml(&e)],
                warnings: Vec::new(),
            },
            unloadable: false,
            config: None,
        },
    };
    let remap = |f: Finding| Finding::from_yaml(&import.remap(f.as_yaml()));
    let f = &mut report.findings;
    f.errors = std::mem::take(&mut f.errors)
        .into_iter()
        .map(remap)
        .collect();
    f.warnings = std::mem::take(&mut f.warnings)
        .into_iter()
        .map(remap)
        .collect();
    // A LiteLLM file with no deployment poolctl can call says so at its `model_list`;
    // the translation's empty `tiers` is the same problem in a key the file lacks.
    let no_deployment = import
        .errors
        .iter()
        .any(|e| e.message.starts_with(crate::config::litellm::NO_DEPLOYMENT));
    if no_deployment {
        f.errors.retain(|e| e.field != "tiers");
    }
    f.errors
        .extend(import.errors.iter().map(Finding::from_yaml));
    f.warnings.extend(import.notices().map(Finding::from_yaml));
    f.errors.sort_by_key(|f| f.line.unwrap_or(0));
    f.warnings.sort_by_key(|f| f.line.unwrap_or(0));
    report
}

/// The line of a field path given as keys, e.g. `["providers", "openai", "api_key_env"]`.
fn line(text: &str, keys: &[&str]) -> Option<usize> {
    let path: Vec<Segment> = keys
        .iter()
        .map(|k| Segment::Map { key: k.to_string() })
        .collect();
    problems::locate(text, &path)
}

/// What a parsed config's fields cannot say alone: unset key variables, guessed
/// dialects, backups that cannot serve what their primary serves, unused providers.
pub fn findings_of(
    config: &PoolConfig,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Findings {
    let file = &config.file;
    let finding = |keys: &[&str], message: String| Finding {
        file: file.clone(),
        line: line(text, keys),
        field: keys.join("."),
        message,
        suggestion: None,
    };
    let mut f = Findings::default();
    // One unset variable is one problem, however many providers share it; it is
    // reported where the first of them names it.
    let mut unset: Vec<(&str, Vec<&str>)> = Vec::new();
    for (name, p) in &config.providers {
        if config.key(&p.api_key_env, env).is_none() {
            match unset.iter_mut().find(|(v, _)| *v == p.api_key_env) {
                Some((_, users)) => users.push(name),
                None => unset.push((&p.api_key_env, vec![name])),
            }
        }
    }
    for (var, users) in unset {
        let shown: Vec<String> = users.iter().map(|u| format!("`{u}`")).collect();
        let who = if users.len() == 1 {
            "provider"
        } else {
            "providers"
        };
        f.errors.push(finding(
            &["providers", users[0], "api_key_env"],
            format!(
                "environment variable `{var}` is not set or is empty (used by {who} {})",
                shown.join(", ")
            ),
        ));
    }
    for (name, p) in &config.providers {
        // An anthropic or gemini wire speaks its own vendor's error conventions; only an
        // OpenAI-compatible wire can be any vendor behind it.
        if p.dialect().1 == DialectSource::WireDefault && p.wire == crate::core::vocab::Wire::OpenAi
        {
            f.warnings.push(finding(
                &["providers", name, "base_url"],
                format!(
                    "provider `{name}`: the dialect cannot be inferred from {}; assuming `{}` error conventions (set `dialect:` to be sure)",
                    crate::core::secret::display_url(&p.base_url),
                    p.dialect().0
                ),
            ));
        }
    }
    // Equivalence contracts: a backup that cannot serve what its primary serves is a
    // fallback that will fail exactly when it is needed.
    for (tier, entries) in &config.tiers {
        let Some(primary) = entries.first() else {
            continue;
        };
        // What the router will use: `models:` over the catalogue.
        let facts = |r: &crate::core::vocab::Route| config.facts_of(r);
        for backup in &entries[1..] {
            let gaps = crate::policy::capability::backup_gaps(
                &facts(&primary.route),
                &facts(&backup.route),
            );
            if !gaps.is_empty() {
                f.warnings.push(finding(
                    &["tiers", tier],
                    format!(
                        "tier `{tier}`: backup `{}` cannot serve what primary `{}` serves: {}",
                        backup.route,
                        primary.route,
                        gaps.join(", ")
                    ),
                ));
            }
        }
    }
    // A group of one balances nothing: legal (a LiteLLM model with one deployment is
    // one), but worth saying.
    for (tier, list) in &config.groups {
        for g in list.iter().filter(|g| g.members.len() == 1) {
            f.warnings.push(Finding {
                field: format!("tiers.{tier}[{}]", g.step),
                ..finding(
                    &["tiers", tier],
                    format!(
                        "tier `{tier}`: this group has one route (`{}`), nothing to share the load with; write it as a plain route",
                        g.members[0]
                    ),
                )
            });
        }
    }
    if let Some(var) = &config.serve_token_env {
        if config.key(var, env).is_none() {
            f.warnings.push(finding(
                &["serve_token_env"],
                format!("environment variable `{var}` is not set or is empty: `poolctl serve` refuses to start without the token it names"),
            ));
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
            f.warnings.push(finding(
                &["providers", name],
                format!("provider `{name}` is used by no tier"),
            ));
        }
    }
    f
}

/// `findings_of` without the file's text: the same findings, without lines.
pub fn findings(config: &PoolConfig, env: &dyn Fn(&str) -> Option<String>) -> Findings {
    findings_of(config, "", env)
}

pub fn run(args: CheckArgs) -> anyhow::Result<Exit> {
    let path = locate(args.config.config.as_deref());
    let report = if path.exists() {
        check_file_as(&path, args.config.config_format, &env_key)
    } else {
        let env = std::env::var_os(CONFIG_ENV).filter(|v| !v.is_empty());
        let message = format!(
            "no pool config at {}{}",
            path.display(),
            missing_hint(args.config.config.is_some(), env.is_some())
        );
        Report {
            file: path.clone(),
            findings: Findings {
                errors: vec![Finding {
                    file: path.clone(),
                    line: None,
                    field: String::new(),
                    message,
                    suggestion: None,
                }],
                warnings: Vec::new(),
            },
            unloadable: true,
            config: None,
        }
    };
    if args.json {
        out::line(&report.json())?;
    } else if report.unloadable {
        for e in &report.findings.errors {
            out::warn(&format!("error: {}", e.as_yaml()));
        }
    } else {
        out::print(&report.text())?;
    }
    Ok(report.exit())
}
