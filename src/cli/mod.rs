//! The command line: clap parsing and dispatch, one file per command. Commands turn
//! their arguments into library calls and hand data to `render`; exit codes live in
//! `exit`.

pub mod chaos;
pub mod exit;
pub mod render;

use clap::{Parser, Subcommand};
use exit::Exit;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "poolctl",
    version,
    about = "One router for chains of fallback LLM routes, and the tools to prove it works.",
    long_about = "poolctl classifies every upstream failure from protocol fields, answers it with exactly one \
action (retry, fallback, interrupt, degrade, queue, shed, fail_closed) and moves routes through \
ready / cooling / retired.\n\nExit codes: 0 success; 1 the command ran and what it checked did not hold; \
2 usage, config or input error."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay fault scenarios against local mock providers with the production router.
    ///
    /// Runs every scenario file found under PATH (files, or directories searched recursively
    /// for *.yaml / *.yml). Exit: 0 all passed; 1 any scenario failed; 2 a file could not be loaded.
    Chaos(chaos::ChaosArgs),
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<Exit> {
    match cli.command {
        Command::Chaos(args) => chaos::run(args).await,
    }
}

/// `--config FILE`, shared by every command that reads the pool config.
#[derive(Debug, Clone, clap::Args)]
pub struct ConfigArg {
    /// The pool config (default: $POOLCTL_CONFIG, else ./pool.yaml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}
