//! What several commands share: finding and loading the pool config, opening the
//! health store it names, and reading keys from the environment.

use super::args::ConfigArg;
use crate::admission::buckets::Buckets;
use crate::config::pool::{locate, PoolConfig, StateLocation, CONFIG_ENV};
use crate::harness::target_config::ConfigFormat;
use crate::router::Router;
use crate::store::redis_buckets::RedisBuckets;
use crate::store::shared_buckets::SharedBuckets;
use crate::store::{FallbackStore, HealthStore, RedisStore, SqliteStore};
use anyhow::Context;
use std::sync::Arc;

/// Loads the pool config named by `--config`, `$POOLCTL_CONFIG` or `./pool.yaml`.
pub fn load_config(arg: &ConfigArg) -> anyhow::Result<PoolConfig> {
    let path = locate(arg.config.as_deref());
    if !path.exists() {
        let env = std::env::var_os(CONFIG_ENV).filter(|v| !v.is_empty());
        anyhow::bail!(
            "no pool config at {}{}",
            path.display(),
            missing_hint(arg.config.is_some(), env.is_some())
        );
    }
    let text = crate::config::yaml::read_text(&path)?;
    if !reads_as_litellm(arg.config_format, &text) {
        return Ok(PoolConfig::parse(&path, &text)?);
    }
    let (config, import) = crate::config::litellm::load(&path, &text, &env_key)?;
    // Once per command: the literal secrets (their lines, never their values), and how
    // many fields were left out (`check` and `import` name each).
    for w in &import.warnings {
        super::out::warn(&format!("warning: {w}"));
    }
    if !import.unused.is_empty() {
        super::out::warn(&format!(
            "warning: {}: {} LiteLLM field(s) not used by poolctl (`poolctl check` names each)",
            path.display(),
            import.unused.len()
        ));
    }
    Ok(config)
}

/// Whether a config is read as LiteLLM's: `--config-format litellm`, or a top-level
/// `model_list`.
pub fn reads_as_litellm(format: ConfigFormat, text: &str) -> bool {
    format == ConfigFormat::Litellm || crate::config::litellm::is_litellm(text)
}

/// Where the missing path came from, so the hint never suggests what was already done.
pub fn missing_hint(explicit: bool, env_set: bool) -> String {
    match (explicit, env_set) {
        (true, _) => " (from --config)".into(),
        (false, true) => format!(" (from ${CONFIG_ENV}; give --config FILE or fix ${CONFIG_ENV})"),
        (false, false) => format!(" (give --config FILE or set ${CONFIG_ENV})"),
    }
}

/// The state store the config names, opened.
pub struct Opened {
    pub store: Arc<dyn HealthStore>,
    /// Where it is (a file, or a Redis URL without credentials).
    pub name: String,
}

/// Opens the state store the config names (default `.poolctl/state.db` beside it). Its
/// errors reach the caller: an operator's `retire` must never claim a change that the
/// shared store did not take.
pub fn open_store(config: &PoolConfig) -> anyhow::Result<Opened> {
    match config.state_location() {
        StateLocation::File(path) => {
            // The store's own errors already name its path.
            let store = SqliteStore::open(&path).map_err(|e| {
                anyhow::anyhow!(
                    "{e} (move the file away to start clean: every route is then ready)"
                )
            })?;
            Ok(Opened {
                store: Arc::new(store),
                name: path.display().to_string(),
            })
        }
        StateLocation::Redis(url) => {
            let store = open_redis(config, &url)?;
            Ok(Opened {
                name: store.target().to_string(),
                store: Arc::new(store),
            })
        }
    }
}

pub fn open_redis(config: &PoolConfig, url: &str) -> anyhow::Result<RedisStore> {
    let deadline = std::time::Duration::from_millis(config.state_timeout_ms);
    RedisStore::open_with(url, config.state_tls().as_ref(), deadline).with_context(|| {
        format!(
            "{}: cannot use the state store named by `state`",
            config.file.display()
        )
    })
}

/// A routing store, and the wrapper that counts its degraded decisions (shared stores).
pub type RoutingStore = (Arc<dyn HealthStore>, Option<Arc<FallbackStore>>);

/// The store a routing command (`walk`) routes on. A shared store is wrapped so that
/// when it cannot be reached, requests go on with this process's own view; the wrapper
/// counts every such decision (returned, to be reported).
pub fn open_routing_store(config: &PoolConfig) -> anyhow::Result<RoutingStore> {
    match config.state_location() {
        StateLocation::File(_) => Ok((open_store(config)?.store, None)),
        StateLocation::Redis(url) => {
            let shared = open_redis(config, &url)?;
            let name = shared.target().to_string();
            let store = Arc::new(FallbackStore::new(Arc::new(shared), name));
            Ok((store.clone(), Some(store)))
        }
    }
}

/// The buckets a routing command (`walk`, `serve`) spends: this process's own, or with
/// `state: redis://` the fleet's, in Redis, falling back by `on_store_error`.
pub enum Admission {
    Local(Arc<Buckets>),
    /// The fleet's buckets, and the same at their full size (`Router::with_ceiling`).
    Shared(Arc<SharedBuckets>, Arc<Buckets>),
}

impl Admission {
    /// Builds them from the config's `limits:` (none: empty local buckets, which admit
    /// everything at no cost).
    pub fn open(config: &PoolConfig) -> anyhow::Result<Admission> {
        let cfg = config.admission();
        let now = crate::core::clock::wall_now_ms();
        match config.state_location() {
            StateLocation::Redis(url) if !cfg.limits.is_empty() => {
                let store = open_redis(config, &url)?;
                let shared = SharedBuckets::new(
                    RedisBuckets::new(store, &cfg),
                    &cfg,
                    config.on_store_error,
                    config.workers,
                    now,
                );
                let ceiling = Arc::new(Buckets::new(&cfg, now));
                Ok(Admission::Shared(Arc::new(shared), ceiling))
            }
            _ => Ok(Admission::Local(Arc::new(Buckets::new(&cfg, now)))),
        }
    }

    /// `router`, spending these buckets.
    pub fn apply(&self, router: Router) -> Router {
        match self {
            Admission::Local(b) => router.with_buckets(b.clone()),
            Admission::Shared(s, ceiling) => router
                .with_shared_buckets(s.clone())
                .with_ceiling(ceiling.clone()),
        }
    }

    /// Admission decisions made without the shared store (0 for local buckets).
    pub fn degraded(&self) -> u64 {
        match self {
            Admission::Local(_) => 0,
            Admission::Shared(s, _) => s.degraded(),
        }
    }
}

/// Reads a key variable from the process environment.
pub fn env_key(var: &str) -> Option<String> {
    std::env::var(var).ok()
}
