//! `poolctl mock PATH...`: serve one scenario's chain, or a whole suite's, as live mock
//! providers until stopped, and print the config that points a gateway at them (a pool
//! config, a LiteLLM proxy config, or Portkey config objects), so `probe`, `walk`,
//! `chaos --target` or any client (an official SDK included) can be run against a
//! replayed incident.
//!
//! One scenario keeps its routes' names; a suite's are renamed per scenario
//! (`provider~scenario/model~provider~scenario`, harness::suite_mock) so no two scenarios share
//! a provider or a model. `GET /calls` reports the upstream calls per route and
//! `POST /reset` rewinds every script.

use super::exit::Exit;
use crate::harness::mock::MockServer;
use crate::harness::scenario::Scenario;
use crate::harness::suite_mock::{suite_routes, Naming};
use crate::harness::target_config::{config_text, ConfigFormat};
use clap::Args;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub use crate::harness::target_config::MOCK_KEY_ENV;

#[derive(Debug, Args)]
pub struct MockArgs {
    /// Scenario files or directories whose chains to serve.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Address to listen on, HOST:PORT (port 0: any free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0", value_parser = super::args::listen_addr)]
    pub listen: SocketAddr,
    /// Write the config to FILE instead of stdout, atomically and only once the
    /// mocks are listening: a command that finds the file can use it at once.
    #[arg(long, value_name = "FILE")]
    pub write_config: Option<PathBuf>,
    /// The config's format: pool (poolctl's), litellm (a LiteLLM proxy config), or
    /// portkey (one Portkey config object per scenario, as JSON).
    #[arg(long, value_name = "FORMAT", default_value = "pool", value_parser = super::args::config_format)]
    pub config_format: ConfigFormat,
    /// Put `state: FILE` in a pool config, so the health a walk persists goes to a
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

/// How a loaded suite is named on the mock: one scenario as written, more renamed.
/// `chaos --target` applies the same rule to the same paths.
pub fn naming_for(scenarios: &[Scenario]) -> Naming {
    if scenarios.len() == 1 {
        Naming::AsWritten
    } else {
        Naming::Tagged
    }
}

/// Every scenario under `paths`, or every load error as one message.
pub fn load_scenarios(paths: &[PathBuf]) -> anyhow::Result<Vec<Scenario>> {
    // The caller prints the message after "error: "; each further problem gets its own.
    crate::harness::suite::load_all(paths).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        match lines.as_slice() {
            [one] => anyhow::anyhow!("{one}"),
            many => anyhow::anyhow!(
                "{}\n{} problems in the scenario files; nothing is served",
                many.join("\nerror: "),
                many.len()
            ),
        }
    })
}

pub async fn run(args: MockArgs) -> anyhow::Result<Exit> {
    if args.detach {
        return detach(&args).await;
    }
    let scenarios = load_scenarios(&args.paths)?;
    let naming = naming_for(&scenarios);
    if naming == Naming::Tagged {
        if let Some(why) = crate::harness::suite_mock::tag_collision(&scenarios) {
            anyhow::bail!(why);
        }
    }
    // Outages run on the wall clock here, from the moment the server starts (and again
    // from each `POST /reset`).
    let clock: std::sync::Arc<dyn crate::core::clock::Clock> =
        std::sync::Arc::new(crate::core::clock::SystemClock);
    let routes = suite_routes(
        &scenarios,
        naming,
        &clock,
        crate::core::clock::wall_now_ms(),
    );
    let server = MockServer::start(args.listen, routes)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    let config = config_text(
        args.config_format,
        &scenarios,
        server.addr(),
        naming,
        args.state.as_deref(),
    );
    match &args.write_config {
        Some(path) => write_atomically(path, &config)
            .map_err(|e| anyhow::anyhow!("cannot write the config {}: {e}", path.display()))?,
        None => super::out::print(&config)?,
    }
    if args.notify_ready {
        super::out::line("ready")?;
    }
    // In the background (--detach) nobody reads stderr any more; say nothing.
    let talk = !args.notify_ready;
    if talk {
        let what = match scenarios.as_slice() {
            [one] => format!("`{}`", one.name),
            many => format!("{} scenarios", many.len()),
        };
        super::out::warn(&format!(
            "poolctl mock: serving {what} on http://{} until interrupted (Ctrl-C)",
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
        .args(&args.paths)
        .arg("--config-format")
        .arg(args.config_format.as_str())
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
pub async fn wait_for_stop() {
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
