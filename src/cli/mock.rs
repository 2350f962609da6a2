//! `poolctl mock SCENARIO`: serve a scenario's chain as live mock providers until
//! stopped, and print a pool config that points at them, so `probe`, `walk` or any
//! client (an official SDK included) can be run against a replayed incident.

use super::exit::Exit;
use crate::harness::mock::MockServer;
use crate::harness::runner::mock_routes;
use crate::harness::scenario::Scenario;
use crate::vocab::CallPath;
use clap::Args;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The variable the printed config names; the mocks accept any non-empty key.
pub const MOCK_KEY_ENV: &str = "POOLCTL_MOCK_KEY";

#[derive(Debug, Args)]
pub struct MockArgs {
    /// The scenario whose chain to serve.
    pub scenario: PathBuf,
    /// Address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
}

pub async fn run(args: MockArgs) -> anyhow::Result<Exit> {
    let scenario = Scenario::load(&args.scenario)?;
    // Outages run on the wall clock here, from the moment the server starts.
    let clock: std::sync::Arc<dyn crate::clock::Clock> =
        std::sync::Arc::new(crate::clock::SystemClock);
    let routes = mock_routes(&scenario, &clock, crate::clock::wall_now_ms());
    let server = MockServer::start(args.listen, routes)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    super::out::print(&pool_config(&scenario, &server))?;
    super::out::warn(&format!(
        "poolctl mock: serving `{}` on http://{} until interrupted (Ctrl-C)",
        scenario.name,
        server.addr()
    ));
    wait_for_stop().await;
    super::out::warn("poolctl mock: stopped");
    Ok(Exit::Ok)
}

/// Ctrl-C, or SIGTERM where there is one.
async fn wait_for_stop() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// A pool config for the served chain: one provider per scenario provider, one tier
/// named after the scenario.
pub fn pool_config(scenario: &Scenario, server: &MockServer) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# poolctl mock: scenario `{}` ({})",
        scenario.name,
        scenario.file.display()
    );
    let _ = writeln!(
        s,
        "# the mocks accept any key: export {MOCK_KEY_ENV}=anything"
    );
    s.push_str("providers:\n");
    let mut seen = Vec::new();
    for entry in &scenario.chain {
        let provider = entry.route.provider();
        if seen.contains(&provider) {
            continue;
        }
        seen.push(provider);
        let _ = writeln!(s, "  {provider}:");
        let _ = writeln!(s, "    wire: {}", entry.wire);
        let _ = writeln!(s, "    base_url: {}", server.base_url(provider, entry.wire));
        let _ = writeln!(s, "    api_key_env: {MOCK_KEY_ENV}");
        if let Some(d) = entry.dialect {
            let _ = writeln!(s, "    dialect: {d}");
        }
        for (name, v) in [
            ("timeout_ms", entry.timeout_ms),
            ("first_token_timeout_ms", entry.first_token_timeout_ms),
            ("stream_idle_ms", entry.stream_idle_ms),
            ("stream_max_ms", entry.stream_max_ms),
            ("max_stream_bytes", entry.max_stream_bytes),
            ("max_event_bytes", entry.max_event_bytes),
            ("cooldown_ms", entry.cooldown_ms),
            ("transient_cooldown_ms", entry.transient_cooldown_ms),
        ] {
            if let Some(v) = v {
                let _ = writeln!(s, "    {name}: {v}");
            }
        }
    }
    s.push_str("tiers:\n");
    let _ = writeln!(s, "  {}:", scenario.name);
    for entry in &scenario.chain {
        match scenario.path {
            CallPath::Chat => {
                let _ = writeln!(s, "    - {}", entry.route);
            }
            path => {
                let _ = writeln!(s, "    - {{ route: {}, path: {path} }}", entry.route);
            }
        }
    }
    s
}
