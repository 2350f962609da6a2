//! `poolctl serve`: the production router behind an HTTP endpoint that the official
//! OpenAI and Anthropic SDKs already speak. HTTP in (`ingress`), the router through one
//! adapter (`adapter`), HTTP out (`egress`, `errors`, `status`); no routing logic of
//! its own. `listener` owns the sockets: connection cap, header read timeout, drain.

pub mod adapter;
pub mod ask;
pub mod bare_errors;
pub mod body_budget;
pub mod choose;
pub mod egress;
pub mod egress_responses;
pub mod egress_stream;
pub mod errors;
pub mod guard;
pub mod handler;
pub mod health_cache;
pub mod http;
pub mod ingress;
pub mod keep;
pub mod listener;
pub mod log;
pub mod metrics;
pub mod respond;
pub mod responses;
pub mod send_deadline;
pub mod status;
pub mod stream;

use crate::core::secret::Secret;
use crate::router::Router;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The variable whose value, when set, every client must send as its bearer token.
pub const TOKEN_ENV: &str = "POOLCTL_SERVE_TOKEN";
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8700";
pub const DEFAULT_MAX_BODY_BYTES: usize = 10 * 1024 * 1024;
/// Request-body bytes buffered at once over all requests, by default.
pub const DEFAULT_MAX_BUFFERED_BODY_BYTES: usize = 64 * 1024 * 1024;

/// How the gateway runs: limits and deadlines on what clients may do.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    /// Request bodies larger than this are refused with 413.
    pub max_body_bytes: usize,
    /// Request-body bytes held at once over all requests; past it, bodies wait. Never
    /// below `max_body_bytes`, so one body of the largest size can always be read.
    pub max_buffered_body_bytes: usize,
    /// A client that has not sent its whole request head by then is answered 408.
    pub header_read_timeout: Duration,
    /// A request body not fully received by then is answered 408.
    pub body_read_timeout: Duration,
    /// A client that takes nothing of a response for this long loses its connection
    /// (`send_deadline`).
    pub send_timeout: Duration,
    /// Connections past this are answered 429 and closed.
    pub max_connections: usize,
    /// On SIGTERM / SIGINT: how long in-flight requests and streams may finish.
    pub drain: Duration,
    pub token: Option<Secret>,
    /// The variable the token was read from, for the 401 that asks for it
    /// (`POOLCTL_SERVE_TOKEN`, or the one `serve_token_env:` names).
    pub token_var: String,
    /// Log the last user message of each chat request (off by default).
    pub log_prompts: bool,
    /// Origins whose web pages may call the gateway (`--allow-origin`); none by default.
    pub allow_origins: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            listen: DEFAULT_LISTEN.parse().expect("a valid literal address"),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_buffered_body_bytes: DEFAULT_MAX_BUFFERED_BODY_BYTES,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            send_timeout: Duration::from_secs(60),
            max_connections: 1024,
            drain: Duration::from_secs(30),
            token: None,
            token_var: TOKEN_ENV.to_string(),
            log_prompts: false,
            allow_origins: Vec::new(),
        }
    }
}

/// What `/readyz` reads to say whether the state store answers.
pub struct Readiness {
    /// The store itself: a SQLite file, or the shared store without its fallback.
    pub store: Arc<dyn crate::store::HealthStore>,
    /// Whether it is shared (`state: redis://`), so that an outage is survivable.
    pub shared: bool,
    /// What admission does meanwhile: with `local_share` the gateway still serves.
    pub on_store_error: crate::store::OnStoreError,
}

/// Everything a request handler shares. Each of the listener's lanes has one of its
/// own (`lane`): the same gateway, its router sending through the lane's HTTP client.
pub struct Gateway {
    pub lineup: Arc<choose::Lineup>,
    pub router: Router,
    pub metrics: Arc<metrics::Metrics>,
    pub settings: Settings,
    /// The shared health store's wrapper (`state: redis://`), for its degraded counts.
    pub shared_health: Option<std::sync::Arc<crate::store::FallbackStore>>,
    /// The state store as `/readyz` reads it (no cache, no fallback); `None`: not read.
    pub readiness: Option<Arc<Readiness>>,
    /// The Responses API's conversations (`previous_response_id`).
    pub conversations: Arc<crate::store::conversations::Conversations>,
    /// The upstream keys, only to mask them out of upstream messages.
    keys: Vec<Secret>,
    /// One permit per request-body byte buffered now (`max_buffered_body_bytes`).
    pub(crate) body_budget: Arc<tokio::sync::Semaphore>,
    body_budget_total: usize,
    next_id: Arc<AtomicU64>,
    draining: Arc<AtomicBool>,
    /// Set when the drain deadline passes: whatever still runs ends now (`until_cut`).
    cut: Arc<tokio::sync::watch::Sender<bool>>,
    /// What the last scrape read from the store, and when (`scrape_state`).
    scraped: Arc<tokio::sync::Mutex<Option<Scraped>>>,
}

/// Route health and bucket levels as a scrape last read them.
type ScrapeState = (
    Vec<(crate::core::vocab::Route, &'static str)>,
    Vec<crate::admission::buckets::BucketView>,
);

struct Scraped {
    at: crate::core::clock::Stopwatch,
    state: Arc<ScrapeState>,
}

/// How long a scrape's store reads serve later scrapes: whoever scrapes, and however
/// often, `/metrics` costs the shared store at most one read of each key a second.
pub const SCRAPE_CACHE: Duration = Duration::from_secs(1);

impl Gateway {
    pub fn new(lineup: choose::Lineup, router: Router, settings: Settings) -> Self {
        let mut keys: Vec<Secret> = Vec::new();
        for tier in lineup.tiers() {
            for spec in &tier.routes {
                if !keys.contains(&spec.endpoint.api_key) {
                    keys.push(spec.endpoint.api_key.clone());
                }
            }
        }
        let budget = settings
            .max_buffered_body_bytes
            .max(settings.max_body_bytes)
            .min(tokio::sync::Semaphore::MAX_PERMITS)
            .min(u32::MAX as usize);
        Gateway {
            body_budget: Arc::new(tokio::sync::Semaphore::new(budget)),
            body_budget_total: budget,
            lineup: Arc::new(lineup),
            router,
            metrics: Arc::default(),
            settings,
            shared_health: None,
            readiness: None,
            conversations: Arc::new(crate::store::conversations::Conversations::memory(
                Default::default(),
            )),
            keys,
            next_id: Arc::new(AtomicU64::new(1)),
            draining: Arc::new(AtomicBool::new(false)),
            scraped: Arc::default(),
            cut: Arc::new(tokio::sync::watch::channel(false).0),
        }
    }

    /// This gateway for a lane of its own: every counter, budget, store and bucket
    /// shared with it, and upstream calls sent through `client`, whose connections run
    /// on the lane's runtime.
    pub fn lane(&self, client: impl Into<crate::wire::http::Client>) -> Gateway {
        Gateway {
            lineup: self.lineup.clone(),
            router: self.router.with_client(client),
            metrics: self.metrics.clone(),
            settings: self.settings.clone(),
            shared_health: self.shared_health.clone(),
            readiness: self.readiness.clone(),
            conversations: self.conversations.clone(),
            keys: self.keys.clone(),
            body_budget: self.body_budget.clone(),
            body_budget_total: self.body_budget_total,
            next_id: self.next_id.clone(),
            draining: self.draining.clone(),
            scraped: self.scraped.clone(),
            cut: self.cut.clone(),
        }
    }

    /// A response id unique within this process.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// `text` with every upstream key masked.
    pub fn mask(&self, text: &str) -> String {
        let keys: Vec<&str> = self.keys.iter().map(Secret::expose).collect();
        errors::mask_keys(&crate::core::secret::mask(text), &keys)
    }

    /// The budget of request-body bytes held at once, in all.
    pub fn body_budget_total(&self) -> usize {
        self.body_budget_total
    }

    /// Request-body bytes buffered now, over all requests.
    pub fn buffered_body_bytes(&self) -> usize {
        self.body_budget_total
            .saturating_sub(self.body_budget.available_permits())
    }

    /// Route health and bucket levels for a scrape: read from the store at most once
    /// per [`SCRAPE_CACHE`], one scrape reading while the others wait for its answer.
    pub async fn scrape_state(&self) -> Arc<ScrapeState> {
        let mut cached = self.scraped.lock().await;
        if let Some(c) = cached.as_ref().filter(|c| c.at.elapsed() < SCRAPE_CACHE) {
            return c.state.clone();
        }
        let health = adapter::route_states(&self.router, &self.lineup.routes()).await;
        let now = crate::core::clock::wall_now_ms();
        // Levels as admission sees them: the fleet's when the buckets are shared.
        let levels = match self.router.shared_buckets() {
            Some(shared) => shared.snapshot(now).await,
            None => self.router.buckets().snapshot(now),
        };
        let state = Arc::new((health, levels));
        *cached = Some(Scraped {
            at: crate::core::clock::Stopwatch::start(),
            state: state.clone(),
        });
        state
    }

    /// The drain deadline passed: every request and stream still running ends now,
    /// each with an answer it can read (a 503, or a stream's in-band error).
    pub fn cut_everything(&self) {
        self.cut.send_replace(true);
    }

    /// Resolves once `cut_everything` is called (at once if it was).
    pub fn until_cut(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.cut.subscribe();
        async move {
            // The sender lives as long as any gateway: an error only means no cut ever.
            if rx.wait_for(|cut| *cut).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }
}
