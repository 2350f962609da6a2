//! `poolctl serve`: the router as an OpenAI- and Anthropic-compatible HTTP gateway.
//! Parses flags, resolves the pool once, opens the shared health store, and hands the
//! socket to `serve::listener`. Exit 0 after a clean drain; 2 on config or bind errors.

use super::args::ConfigArg;
use super::context::{env_key, load_config, open_redis, open_routing_store, Admission};
use super::exit::Exit;
use crate::config::pool::StateLocation;
use crate::core::clock::SystemClock;
use crate::core::secret::Secret;
use crate::serve::{self, choose::Lineup, Gateway, Readiness, Settings};
use crate::store::sessions::Sessions;
use clap::Args;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Address to listen on, HOST:PORT (loopback by default; expose it deliberately).
    #[arg(long, value_name = "ADDR", default_value = serve::DEFAULT_LISTEN, value_parser = super::args::listen_addr)]
    pub listen: SocketAddr,
    /// Largest request body accepted, in bytes (413 past it).
    #[arg(long, value_name = "BYTES", default_value_t = serve::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Request-body bytes buffered at once over all requests; past it, bodies wait.
    #[arg(long, value_name = "BYTES", default_value_t = serve::DEFAULT_MAX_BUFFERED_BODY_BYTES)]
    pub max_buffered_body_bytes: usize,
    /// How long a client may take to send its request head (408 past it).
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub header_timeout_ms: u64,
    /// How long a client may take to send its request body (408 past it).
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub body_timeout_ms: u64,
    /// How long a client may take nothing of a response (a stream it stopped reading)
    /// before its connection is closed and the upstream call cancelled.
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    pub send_timeout_ms: u64,
    /// Connections served at once; more are answered 429 and closed.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_connections: usize,
    /// On SIGTERM / SIGINT, how long in-flight requests and streams may finish.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub drain_ms: u64,
    /// Log the last user message of each chat request (off: no prompt is ever logged).
    #[arg(long)]
    pub log_prompts: bool,
    /// Lanes: threads that each serve their share of the connections, every request
    /// start to end on one thread (default: one per core).
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// An origin (`https://app.example.com`) whose web pages may call the gateway;
    /// repeat it for more, `*` for any. Without it, a request carrying `Origin` is 403.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
    /// Upstream answer bytes held at once over every call (bodies being read, streams'
    /// text); past it, the calls holding the most stop reading until room frees.
    #[arg(long, value_name = "BYTES", default_value_t = crate::wire::held::DEFAULT_MAX_HELD_ANSWER_BYTES)]
    pub max_held_answer_bytes: usize,
    /// Serve `/metrics` on an address of its own too, without the token (a scrape
    /// network the clients cannot reach). `/metrics` on --listen stays behind it.
    #[arg(long, value_name = "ADDR", value_parser = super::args::listen_addr)]
    pub metrics_listen: Option<SocketAddr>,
}

/// The lanes `serve` runs (see `ServeArgs::workers`).
pub fn worker_threads(args: &ServeArgs) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    args.workers.unwrap_or(cores).clamp(1, 1024)
}

pub async fn run(args: ServeArgs) -> anyhow::Result<Exit> {
    init_logging();
    let config = load_config(&args.config)?;
    let lineup = Lineup::build(&config, &env_key)?;
    // With `state: redis://`, health goes on with this process's own view while Redis
    // cannot be reached (each such decision counted in /metrics).
    let (store, shared_health) = open_routing_store(&config)?;
    // `/readyz` reads the store itself: through the cache or the fallback it would
    // always answer. A shared store gets a connection of its own for it.
    let readiness = Readiness {
        store: match config.state_location() {
            StateLocation::File(_) => store.clone(),
            StateLocation::Redis(url) => Arc::new(open_redis(&config, &url)?),
        },
        shared: shared_health.is_some(),
        on_store_error: config.on_store_error,
    };
    // A SQLite file is cached, and dropped by a thread watching it with inotify: a
    // request's two health reads cost no SQLite transaction and no system call, and a
    // change by another process is seen as soon as that thread has run.
    let store = match config.state_location() {
        StateLocation::File(path) => serve::health_cache::over(store, &path),
        StateLocation::Redis(_) => store,
    };
    // Admission (the config's `limits`): this process's buckets, as `walk` has, or the
    // fleet's in Redis.
    let admission = Admission::open(&config)?;
    // With a SQLite state, usage reaches the file's counters from a background flush.
    let usage = super::capacity::UsageRecorder::for_admission(&config, &admission)?.map(Arc::new);
    let flusher = usage
        .clone()
        .map(|u| u.spawn_periodic(super::capacity::FLUSH_EVERY));
    // Session pins, bounded by `sessions:`; with `state: redis://` the fleet's, so a
    // session keeps its route whichever process it reaches.
    let sessions = match config.state_location() {
        StateLocation::File(_) => Sessions::local(config.sessions),
        StateLocation::Redis(url) => Sessions::shared(config.sessions, open_redis(&config, &url)?),
    };
    let router = admission
        .apply(crate::router::Router::new(
            upstream_client(),
            Arc::new(SystemClock),
            store,
        ))
        .with_sessions(Arc::new(sessions));
    let (token, token_from, token_var) = serve_token(&config)?;
    let settings = Settings {
        listen: args.listen,
        max_body_bytes: args.max_body_bytes,
        max_buffered_body_bytes: args.max_buffered_body_bytes,
        header_read_timeout: Duration::from_millis(args.header_timeout_ms.max(1)),
        body_read_timeout: Duration::from_millis(args.body_timeout_ms.max(1)),
        send_timeout: Duration::from_millis(args.send_timeout_ms.max(1)),
        max_connections: args.max_connections.max(1),
        drain: Duration::from_millis(args.drain_ms),
        token,
        token_var,
        log_prompts: args.log_prompts,
        allow_origins: args.allow_origins.clone(),
    };
    crate::wire::held::HELD.set_cap(args.max_held_answer_bytes);
    let stop = stop_signal();
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr()?;
    let state_name = match &shared_health {
        Some(shared) => shared.target().to_string(),
        None => config.state_path().display().to_string(),
    };
    // The Responses API's conversations: a SQLite file beside the health file, or the
    // fleet's Redis.
    let conversations = {
        use crate::store::conversations::{sqlite_path, Conversations};
        match config.state_location() {
            StateLocation::File(path) => {
                Conversations::sqlite(&sqlite_path(&path), config.responses)?
            }
            StateLocation::Redis(url) => {
                // A conversation is up to `responses_max_bytes` (8 MiB), not a health
                // row: its reads and writes get at least 2 s, whatever `state_timeout_ms`.
                let mut c = config.clone();
                c.state_timeout_ms = c.state_timeout_ms.max(2_000);
                Conversations::redis(open_redis(&c, &url)?, config.responses)
            }
        }
    };
    let mut gw = Gateway::new(lineup, router, settings);
    gw.conversations = Arc::new(conversations);
    gw.shared_health = shared_health;
    gw.readiness = Some(Arc::new(readiness));
    // One gateway per lane, each with an upstream pool of its own (see
    // `serve::listener::serve`).
    let lanes = (0..worker_threads(&args))
        .map(|_| gw.lane(upstream_client()))
        .collect();
    let gw = Arc::new(gw);
    // Bound before the address is printed: whoever reads it may scrape at once.
    let metrics_listener = match args.metrics_listen {
        Some(at) => Some(
            tokio::net::TcpListener::bind(at)
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on {at} (--metrics-listen): {e}"))?,
        ),
        None => None,
    };
    // The address on stdout, alone on its line, so scripts and tests can find the port.
    crate::cli::out::line(&format!("poolctl serve: listening on http://{addr}"))?;
    crate::cli::out::warn(&format!(
        "poolctl serve: {} tiers from {}, health in {}{}",
        gw.lineup.tiers().count(),
        config.file.display(),
        state_name,
        match &token_from {
            Some(from) => format!(", clients must send {from}"),
            None => String::new(),
        }
    ));
    let metrics_task = match metrics_listener {
        Some(l) => {
            // On stderr: stdout holds the one address line scripts read.
            crate::cli::out::warn(&format!(
                "poolctl serve: metrics on http://{}/metrics",
                l.local_addr()?
            ));
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(serve::listener::serve_metrics(l, gw.clone(), async {
                let _ = rx.await;
            }));
            Some((tx, task))
        }
        None => None,
    };
    serve::listener::serve(listener, gw, lanes, stop).await;
    if let Some((tx, task)) = metrics_task {
        let _ = tx.send(());
        let _ = task.await;
    }
    if let Some(f) = flusher {
        f.abort();
    }
    if let Some(u) = &usage {
        u.flush_or_warn().await;
    }
    serve::log::flush();
    crate::cli::out::warn("poolctl serve: stopped");
    Ok(Exit::Ok)
}

/// Turns transparent huge pages off for this process. mimalloc asks for them
/// (`madvise(MADV_HUGEPAGE)`) on the regions it reserves, so a gateway whose live heap
/// is a few MiB held 2 MiB pages it barely touched: 20 MiB at idle and over 40 under
/// streaming load (scripts/bench-serve), against 13 and ~22 with 4 KiB pages, at no
/// measurable cost in throughput. Called before the runtime starts: pages faulted from
/// then on are small ones.
pub fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
        // Only memory is at stake: say so and serve anyway.
        crate::cli::out::warn(&format!(
            "poolctl serve: cannot turn transparent huge pages off ({e}); RSS may be higher"
        ));
    }
}

/// The wires' HTTP client settings (no redirects, no retries of its own), with idle
/// pools sized for a gateway: every concurrent client request holds one upstream
/// connection, and a pool smaller than the concurrency closes and reopens connections
/// on every request.
fn upstream_client() -> crate::wire::http::Client {
    match reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(1024)
        .tcp_nodelay(true)
        .build()
    {
        Ok(reqwest) => crate::wire::http::Client::new(reqwest, 1024),
        Err(_) => crate::wire::http_client(),
    }
}

/// One line per event on stderr (`serve::log`: masked, written by a log thread);
/// `RUST_LOG`-style filtering is left to the operator's log pipeline, so the default is
/// simply info.
fn init_logging() {
    serve::log::init();
}

/// Ctrl-C, or SIGTERM where there is one. The handlers are installed here, at the call,
/// not at the future's first poll: a SIGTERM that arrives once the address is printed
/// must drain the gateway, never kill it with the default action (and lose the log lines
/// still in the log thread's batch).
fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The client token: `$POOLCTL_SERVE_TOKEN`, else the variable `serve_token_env`
/// names (or the key a LiteLLM file's `master_key` holds under that name), and where
/// it came from. A `serve_token_env` that resolves to nothing stops the gateway: it
/// must never serve open when its config asks for a token.
fn serve_token(
    config: &crate::config::pool::PoolConfig,
) -> anyhow::Result<(Option<Secret>, Option<String>, String)> {
    if let Some(t) = std::env::var(serve::TOKEN_ENV)
        .ok()
        .filter(|t| !t.is_empty())
    {
        let from = format!("${}", serve::TOKEN_ENV);
        return Ok((Some(Secret::new(t)), Some(from), serve::TOKEN_ENV.into()));
    }
    let Some(var) = &config.serve_token_env else {
        return Ok((None, None, serve::TOKEN_ENV.into()));
    };
    match config.key(var, &env_key) {
        Some(t) => Ok((
            Some(Secret::new(t)),
            Some(format!("the token of `serve_token_env` (${var})")),
            var.clone(),
        )),
        None => anyhow::bail!(
            "{}: field `serve_token_env`: environment variable `{var}` is not set or is empty (set it, or ${})",
            config.file.display(),
            serve::TOKEN_ENV
        ),
    }
}
