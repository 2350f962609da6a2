//! What several commands share: finding and loading the pool config, opening the
//! health store it names, and reading keys from the environment.

use super::ConfigArg;
use crate::config::{locate, PoolConfig, CONFIG_ENV};
use crate::store::SqliteStore;
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
    Ok(PoolConfig::load(&path)?)
}

/// Where the missing path came from, so the hint never suggests what was already done.
pub fn missing_hint(explicit: bool, env_set: bool) -> String {
    match (explicit, env_set) {
        (true, _) => " (from --config)".into(),
        (false, true) => format!(" (from ${CONFIG_ENV}; give --config FILE or fix ${CONFIG_ENV})"),
        (false, false) => format!(" (give --config FILE or set ${CONFIG_ENV})"),
    }
}

/// Opens the health store the config names (default `.poolctl/state.db` beside it).
/// The store's own errors already name its path.
pub fn open_store(config: &PoolConfig) -> anyhow::Result<Arc<SqliteStore>> {
    let path = config.state_path();
    let store = SqliteStore::open(&path).map_err(|e| {
        anyhow::anyhow!("{e} (move the file away to start clean: every route is then ready)")
    })?;
    Ok(Arc::new(store))
}

/// Reads a key variable from the process environment.
pub fn env_key(var: &str) -> Option<String> {
    std::env::var(var).ok()
}
