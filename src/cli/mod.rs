//! The command line: clap parsing and dispatch, one file per command. Commands turn
//! their arguments into library calls and hand data to `render`; exit codes live in
//! `exit`.

pub mod capacity;
pub mod chaos;
pub mod check;
pub mod context;
pub mod exit;
pub mod health_cmds;
pub mod look;
pub mod mock;
pub mod out;
pub mod probe;
pub mod render;
pub mod serve;
pub mod table;
pub mod walk;

use clap::{Parser, Subcommand};
use exit::Exit;
use look::{ColorChoice, Look};
use std::path::PathBuf;

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
    }
}

/// `--config FILE`, shared by every command that reads the pool config.
#[derive(Debug, Clone, clap::Args)]
pub struct ConfigArg {
    /// The pool config (default: $POOLCTL_CONFIG, else ./pool.yaml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// A count flag (`--jobs`, `--concurrency`): 1 to `MAX`. Zero would run nothing, or wait
/// forever for a permit.
pub fn positive<const MAX: usize>(s: &str) -> Result<usize, String> {
    let n: usize = s
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number"))?;
    if (1..=MAX).contains(&n) {
        Ok(n)
    } else {
        Err(format!("must be between 1 and {MAX}"))
    }
}

/// `--listen ADDR`: an IP address and port (`127.0.0.1:8700`, `[::1]:8700`), or a host
/// name and port (`localhost:8700`), resolved once here to its first IPv4 address (else
/// its first address), so a name that cannot be listened on fails as a usage error.
pub fn listen_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let hint = "expected HOST:PORT, e.g. 127.0.0.1:8700 or localhost:8700";
    if !s
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
    {
        return Err(format!("`{s}` is not an address to listen on: {hint}"));
    }
    let addrs: Vec<std::net::SocketAddr> = s
        .to_socket_addrs()
        .map_err(|e| format!("`{s}` cannot be resolved ({e}): {hint}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("`{s}` resolves to no address: {hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_takes_an_ip_and_port_or_a_host_name_and_port() {
        assert_eq!(
            listen_addr("127.0.0.1:8700").unwrap(),
            "127.0.0.1:8700".parse().unwrap()
        );
        assert_eq!(listen_addr("[::1]:0").unwrap(), "[::1]:0".parse().unwrap());
        let local = listen_addr("localhost:8701").unwrap();
        assert!(local.ip().is_loopback(), "{local}");
        assert_eq!(local.port(), 8701);
        for bad in [
            "notanaddr",
            "localhost",
            ":8700",
            "localhost:99999",
            "127.0.0.1:x",
        ] {
            let e = listen_addr(bad).unwrap_err();
            assert!(e.contains("HOST:PORT"), "{bad}: {e}");
        }
    }
}
