//! `poolctl import litellm FILE`: the pool config a LiteLLM proxy config is read as,
//! printed. It is exactly the text every other command runs on when given the LiteLLM
//! file: each line from a LiteLLM field ends in `# from FILE:LINE FIELD`, and what
//! poolctl does not use is listed at the end. Keys never appear in it: a literal key is
//! named by the variable to export it as.
//!
//! Exit: 0 printed (an unset key variable is a warning); 1 printed, with the problems
//! (on stderr) that `check` reports; 2 the file cannot be read or is not YAML.

use super::context::env_key;
use super::exit::Exit;
use super::out;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Source {
    /// A LiteLLM proxy config.yaml (`model_list`, `router_settings`, ...).
    Litellm,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The format of FILE.
    #[arg(value_enum)]
    pub from: Source,
    /// The file to read.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

pub fn run(args: ImportArgs) -> anyhow::Result<Exit> {
    let Source::Litellm = args.from;
    let text = match crate::config::yaml::read_text(&args.file) {
        Ok(t) => t,
        Err(e) => {
            out::warn(&format!("error: {e}"));
            return Ok(Exit::Usage);
        }
    };
    let import = match crate::config::litellm::translate(&args.file, &text, &env_key) {
        Ok(i) => i,
        Err(e) => {
            out::warn(&format!("error: {e}"));
            return Ok(Exit::Usage);
        }
    };
    out::print(&import.text)?;
    for w in &import.warnings {
        out::warn(&format!("warning: {w}"));
    }
    // The problems `check` reports: the mapping's own, and what the translation has as
    // a pool config (a group with no deployment poolctl can call, a bad value), each at
    // its LiteLLM line. The mapping's alone missed the second kind, and a config no
    // command could run exited 0 here. An unset key variable is said but does not fail
    // the import: the text is often made on a machine that does not hold the keys.
    let report = super::check::check_litellm(&args.file, &text, &env_key);
    let mut failed = false;
    for e in &report.findings.errors {
        if is_unset_key(&e.message) {
            out::warn(&format!("warning: {}", e.as_yaml()));
        } else {
            failed = true;
            out::warn(&format!("error: {}", e.as_yaml()));
        }
    }
    Ok(if failed { Exit::Failed } else { Exit::Ok })
}

/// Whether a finding of `check` is an unset key variable (config::pool's wording).
fn is_unset_key(message: &str) -> bool {
    message.starts_with("environment variable `") && message.contains("is not set")
}
