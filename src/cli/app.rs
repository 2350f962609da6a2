//! The command line as a whole: `Cli` (global flags), one `Command` per subcommand,
//! and `run`, which hands each to its file.

use super::exit::Exit;
use super::look::{ColorChoice, Look};
use super::{capacity, chaos, check, health_cmds, import, mock, models, probe, serve, walk};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "poolctl",
    version,
    // Help wraps to the terminal, never wider than 80 columns (a file or a pipe gets 80).
    max_term_width = 80,
    about = "One router for chains of fallback LLM routes, and the tools to prove it works.",
    long_about = "poolctl classifies every upstream failure from protocol fields, answers it with exactly one \
action (retry, fallback, interrupt, degrade, queue, shed, fail_closed) and moves routes through \
ready / cooling / retired.\n\nExit codes: 0 success; 1 the command ran and what it checked did not hold; \
2 usage, config or input error."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Colour: on a terminal unless NO_COLOR is set (auto), always, or never.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay fault scenarios against local mock providers with the production router.
    ///
    /// Runs every scenario file found under PATH (files, or directories searched recursively
    /// for *.yaml / *.yml). Exit: 0 all passed; 1 any scenario failed; 2 a file could not be loaded.
    Chaos(chaos::ChaosArgs),
    /// Send one minimal request to every route of every tier and report its real status.
    ///
    /// Exit: 0 every probed tier has a live route; 1 some tier has none; 2 usage or config error.
    Probe(probe::ProbeArgs),
    /// Send one real request down a tier and print every step as it happens.
    ///
    /// Exit: 0 the request succeeded; 1 any other outcome; 2 usage or config error.
    Walk(walk::WalkArgs),
    /// Retire a route in the persisted health store until it is restored.
    ///
    /// Exit: 0 retired; 2 unknown route (the nearest is named), usage, config or store error.
    Retire(health_cmds::RetireArgs),
    /// Bring a retired or cooling route back to ready.
    ///
    /// Exit: 0 restored; 2 unknown route (the nearest is named), usage, config or store error.
    Restore(health_cmds::RestoreArgs),
    /// Show the persisted health of every route.
    ///
    /// Exit: 0 shown; 2 usage, config or store error.
    Status(health_cmds::StatusArgs),
    /// Serve a scenario's chain as live mock providers and print a pool config for them.
    ///
    /// Exit: 0 on a clean stop (Ctrl-C / SIGTERM); 2 the scenario cannot be loaded or the
    /// address cannot be listened on.
    Mock(mock::MockArgs),
    /// Validate a pool config: fields, routes, providers, key variables, dialects.
    ///
    /// Exit: 0 valid (warnings allowed); 1 problems found; 2 the file cannot be loaded.
    Check(check::CheckArgs),
    /// Utilisation of every limited bucket over a window, its trend and sheds, and each
    /// tier's failover ceiling, from the shared store's usage counters.
    ///
    /// Exit: 0 no warning; 1 a warning or a tier whose ceiling fails; 2 usage or config.
    Capacity(capacity::CapacityArgs),
    /// Serve the router as an OpenAI- and Anthropic-compatible HTTP gateway.
    ///
    /// Exit: 0 on a clean stop (SIGINT / SIGTERM, after draining); 2 config or bind error.
    Serve(serve::ServeArgs),
    /// List the models the router already knows: window, max output, images, tools,
    /// JSON schema, prices, and the source and date of each row.
    ///
    /// PATTERN matches `family/model` case-insensitively (a substring, or a glob with * and
    /// ?). A config's `models:` overrides these facts one by one. Exit: 0 listed; 1 no
    /// model matches; 2 usage error.
    Models(models::ModelsArgs),
    /// Print the pool config another gateway's config is read as (`import litellm
    /// FILE`): each line names the field it came from; what is not used is listed.
    ///
    /// Every command reads a LiteLLM config.yaml as this text. Exit: 0 printed; 1 printed,
    /// with problems on stderr; 2 the file cannot be read or is not YAML.
    Import(import::ImportArgs),
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<Exit> {
    let look = Look::detect(cli.color);
    match cli.command {
        Command::Chaos(args) => chaos::run(args, &look).await,
        Command::Probe(args) => probe::run(args, &look).await,
        Command::Walk(args) => walk::run(args, &look).await,
        Command::Retire(args) => health_cmds::retire(args).await,
        Command::Restore(args) => health_cmds::restore(args).await,
        Command::Status(args) => health_cmds::status(args, &look).await,
        Command::Mock(args) => mock::run(args).await,
        Command::Check(args) => check::run(args),
        Command::Capacity(args) => capacity::run(args).await,
        Command::Serve(args) => serve::run(args).await,
        Command::Models(args) => models::run(args, &look),
        Command::Import(args) => import::run(args),
    }
}
