//! What several commands share: finding and loading the pool config, opening the
//! health store it names, and reading keys from the environment.

use super::ConfigArg;
use crate::config::{locate, PoolConfig};
use crate::store::SqliteStore;
use anyhow::Context;
use std::sync::Arc;

/// Loads the pool config named by `--config`, `$POOLCTL_CONFIG` or `./pool.yaml`.
pub fn load_config(arg: &ConfigArg) -> anyhow::Result<PoolConfig> {
    let path = locate(arg.config.as_deref());
    if !path.exists() {
        anyhow::bail!(
            "no pool config at {} (give --config FILE or set $POOLCTL_CONFIG)",
            path.display()
        );
    }
    Ok(PoolConfig::load(&path)?)
}

/// Opens the health store the config names (default `.poolctl/state.db` beside it).
pub fn open_store(config: &PoolConfig) -> anyhow::Result<Arc<SqliteStore>> {
    let path = config.state_path();
    let store = SqliteStore::open(&path)
        .with_context(|| format!("cannot open the health store {}", path.display()))?;
    Ok(Arc::new(store))
}

/// Reads a key variable from the process environment.
pub fn env_key(var: &str) -> Option<String> {
    std::env::var(var).ok()
}
