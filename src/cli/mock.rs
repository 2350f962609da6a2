//! `poolctl mock SCENARIO`: serve a scenario's chain as live mock providers until
//! stopped, and print a pool config that points at them, so `probe`, `walk` or any
//! client (an official SDK included) can be run against a replayed incident.

use super::exit::Exit;
use crate::core::vocab::CallPath;
use crate::harness::mock::MockServer;
use crate::harness::runner::mock_routes;
use crate::harness::scenario::Scenario;
use clap::Args;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The variable the printed config names; the mocks accept any non-empty key.
pub const MOCK_KEY_ENV: &str = "POOLCTL_MOCK_KEY";

#[derive(Debug, Args)]
pub struct MockArgs {
    /// The scenario whose chain to serve.
    pub scenario: PathBuf,
    /// Address to listen on, HOST:PORT (port 0: any free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0", value_parser = super::args::listen_addr)]
    pub listen: SocketAddr,
    /// Write the pool config to FILE instead of stdout, atomically and only once the
    /// mocks are listening: a command that finds the file can use it at once.
    #[arg(long, value_name = "FILE")]
    pub write_config: Option<PathBuf>,
    /// Put `state: FILE` in the printed config, so the health a walk persists goes to a
    /// throwaway store you name (default: `.poolctl/state.db` beside the config).
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// With --write-config: run in the background and return once the mocks listen and
    /// the config is written, printing the server's process id (stop it with `kill`).
    #[arg(long, requires = "write_config")]
    pub detach: bool,
    /// Internal (--detach): print `ready` on stdout once the config is written.
    #[arg(long, hide = true)]
    pub notify_ready: bool,
}

/// How long `--detach` waits for the background server to report ready.
const DETACH_READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

pub async fn run(args: MockArgs) -> anyhow::Result<Exit> {
    if args.detach {
        return detach(&args).await;
    }
    let scenario = Scenario::load(&args.scenario)?;
    // Outages run on the wall clock here, from the moment the server starts.
    let clock: std::sync::Arc<dyn crate::core::clock::Clock> =
        std::sync::Arc::new(crate::core::clock::SystemClock);
    let routes = mock_routes(&scenario, &clock, crate::core::clock::wall_now_ms());
    let server = MockServer::start(args.listen, routes)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    let config = pool_config(&scenario, &server, args.state.as_deref());
    match &args.write_config {
        Some(path) => write_atomically(path, &config)
            .map_err(|e| anyhow::anyhow!("cannot write the pool config {}: {e}", path.display()))?,
        None => super::out::print(&config)?,
    }
    if args.notify_ready {
        super::out::line("ready")?;
    }
    // In the background (--detach) nobody reads stderr any more; say nothing.
    let talk = !args.notify_ready;
    if talk {
        super::out::warn(&format!(
            "poolctl mock: serving `{}` on http://{} until interrupted (Ctrl-C)",
            scenario.name,
            server.addr()
        ));
    }
    wait_for_stop().await;
    if talk {
        super::out::warn("poolctl mock: stopped");
    }
    Ok(Exit::Ok)
}

/// Writes `text` to a temporary file beside `path`, then renames it over `path`: a reader
/// sees no file or the whole file, never an empty or half-written one.
pub fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "pool.yaml".into());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// `--detach`: start this same command in the background, wait until it reports that it
/// listens and wrote the config, print its process id and return.
async fn detach(args: &MockArgs) -> anyhow::Result<Exit> {
    use tokio::io::AsyncBufReadExt;
    let config = args.write_config.as_ref().expect("clap requires it");
    let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
    cmd.arg("mock")
        .arg(&args.scenario)
        .arg("--listen")
        .arg(args.listen.to_string())
        .arg("--write-config")
        .arg(config)
        .arg("--notify-ready");
    if let Some(state) = &args.state {
        cmd.arg("--state").arg(state);
    }
    // The server must hold none of our pipes: a caller reading our output to its end
    // (`MOCK=$(poolctl mock ... --detach)`, a test) would otherwise wait for it forever.
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(false)
        .spawn()?;
    let pid = child.id().unwrap_or_default();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("piped")).lines();
    let ready = tokio::time::timeout(DETACH_READY_TIMEOUT, lines.next_line()).await;
    match ready {
        Ok(Ok(Some(line))) if line == "ready" => {
            // From here on nobody reads the server's stderr: close it so a later message
            // can never block it.
            drop(child.stderr.take());
            super::out::line(&pid.to_string())?;
            super::out::warn(&format!(
                "poolctl mock: serving in the background (pid {pid}); config in {}; stop it with: kill {pid}",
                config.display()
            ));
            Ok(Exit::Ok)
        }
        Err(_) => {
            let _ = child.kill().await;
            anyhow::bail!(
                "the mock server did not start within {} s",
                DETACH_READY_TIMEOUT.as_secs()
            )
        }
        _ => {
            let mut why = String::new();
            if let Some(mut err) = child.stderr.take() {
                use tokio::io::AsyncReadExt;
                let mut buf = Vec::new();
                let _ = (&mut err).take(64 * 1024).read_to_end(&mut buf).await;
                why = String::from_utf8_lossy(&buf).trim().to_string();
            }
            let _ = child.wait().await;
            anyhow::bail!("the mock server did not start: {why}")
        }
    }
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
pub fn pool_config(scenario: &Scenario, server: &MockServer, state: Option<&Path>) -> String {
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
    if let Some(state) = state {
        // Quoted: a path may hold characters YAML would read otherwise.
        let _ = writeln!(s, "state: {:?}", state.display().to_string());
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
