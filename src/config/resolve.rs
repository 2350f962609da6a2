//! From a valid config to what the router runs: endpoints, tiers, dialects, the
//! admission config and the state location, and the `Pool` resolved once with the keys
//! read from the environment.

use super::catalogue;
use super::pool::{
    line_of, ConfigError, DialectSource, PoolConfig, ProviderConfig, StateLocation, TierEntry,
    DEFAULT_STATE,
};
use super::validate::nearest_route;
use crate::admission::buckets::AdmissionConfig;
use crate::classify::dialect::Dialect;
use crate::config::route::{Group, RouteSpec, Tier};
use crate::config::yaml::{self};
use crate::core::secret::Secret;
use crate::core::vocab::{CallPath, Route};
use crate::policy::capability::ModelFacts;
use crate::policy::card::Policy;
use crate::wire::Endpoint;
use indexmap::IndexMap;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

impl PoolConfig {
    pub(super) fn provider(&self, name: &str) -> Result<&ProviderConfig, ConfigError> {
        self.providers
            .get(name)
            .ok_or_else(|| ConfigError::UnknownProvider {
                name: name.to_string(),
                nearest: self.nearest_provider(name),
            })
    }

    pub(super) fn nearest_provider(&self, name: &str) -> Option<String> {
        crate::core::suggest::nearest(name, self.providers.keys().map(String::as_str))
    }

    pub(super) fn nearest_tier(&self, name: &str) -> Option<String> {
        crate::core::suggest::nearest(name, self.tiers.keys().map(String::as_str))
    }

    /// The dialect whose error conventions apply to `provider`, and how it was chosen.
    pub fn dialect_of(&self, provider: &str) -> Result<(Dialect, DialectSource), ConfigError> {
        Ok(self.provider(provider)?.dialect())
    }

    /// `provider` as the router calls it, with its key read through `env` (the CLI passes
    /// `&|v| std::env::var(v).ok()`; tests pass a map and leave the process alone).
    pub fn endpoint(
        &self,
        provider: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Endpoint, ConfigError> {
        let p = self.provider(provider)?;
        // The text is not kept once parsed; an error is rare enough to read it again. A
        // config read from another format names that file's line and field.
        let (file, line, field) = match self.key_origins.get(provider) {
            Some(o) => (o.file.clone(), o.line, o.field.clone()),
            None => (
                self.file.clone(),
                yaml::read_text(&self.file).ok().and_then(|t| {
                    line_of(&t, &["providers:", &format!("{provider}:"), "api_key_env:"])
                }),
                format!("providers.{provider}.api_key_env"),
            ),
        };
        let key = self
            .key(&p.api_key_env, env)
            .ok_or_else(|| ConfigError::MissingKey {
                file: file.clone(),
                line,
                field: field.clone(),
                provider: provider.to_string(),
                var: p.api_key_env.clone(),
            })?;
        if key.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(ConfigError::UnsendableKey {
                file,
                line,
                field,
                provider: provider.to_string(),
                var: p.api_key_env.clone(),
            });
        }
        Ok(p.settings().endpoint(
            provider,
            p.base_url.clone(),
            Secret::new(key),
            Some(&p.base_url),
        ))
    }

    /// The value of key variable `var`: the environment's, else a key the config holds
    /// in memory under that name (`inline_keys`).
    pub fn key(&self, var: &str, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
        env(var)
            .filter(|k| !k.is_empty())
            .or_else(|| self.inline_keys.get(var).map(|s| s.expose().to_string()))
    }

    /// What `route`'s model can serve and costs: its `models:` entry, each fact it does
    /// not write taken from the catalogue's row for the provider's family and the model.
    /// The family is the provider's dialect when written or inferred from its host; a
    /// dialect only defaulted from the wire (a loopback mock, a private gateway) is a
    /// guess, and picks no row.
    pub fn facts_of(&self, route: &Route) -> ModelFacts {
        let written = self.models.get(route).copied().unwrap_or_default();
        let known = self
            .providers
            .get(route.provider())
            .filter(|_| self.catalogue)
            .map(ProviderConfig::dialect)
            .filter(|(_, source)| *source != DialectSource::WireDefault)
            .and_then(|(family, _)| catalogue::lookup(family, route.model()));
        match known {
            Some(row) => written.over(&row.facts),
            None => written,
        }
    }

    /// The entries of tier `name`, each with its call path.
    pub fn tier_entries(&self, name: &str) -> Result<&[TierEntry], ConfigError> {
        self.tiers
            .get(name)
            .map(Vec::as_slice)
            .ok_or_else(|| ConfigError::UnknownTier {
                name: name.to_string(),
                nearest: self.nearest_tier(name),
                known: self.tiers.keys().cloned().collect(),
            })
    }

    /// Tier `name` resolved for the router. Routes of one provider share one endpoint.
    pub fn tier(
        &self,
        name: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Tier, ConfigError> {
        let mut endpoints: BTreeMap<&str, Arc<Endpoint>> = BTreeMap::new();
        let mut routes = Vec::new();
        for entry in self.tier_entries(name)? {
            let provider = entry.route.provider();
            let endpoint = match endpoints.get(provider) {
                Some(e) => e.clone(),
                None => {
                    let e = Arc::new(self.endpoint(provider, env)?);
                    endpoints.insert(provider, e.clone());
                    e
                }
            };
            routes.push(RouteSpec {
                route: entry.route.clone(),
                endpoint,
                facts: self.facts_of(&entry.route),
                policy: self.provider(provider)?.settings().policy(),
            });
        }
        Ok(Tier {
            name: name.to_string(),
            path: self.tier_path(name)?,
            routes,
            groups: self.tier_groups(name),
        })
    }

    /// The group steps of tier `name`, their weights resolved (`Group::weights_of`).
    fn tier_groups(&self, name: &str) -> Vec<Group> {
        let groups = self.groups.get(name).map(Vec::as_slice).unwrap_or_default();
        groups
            .iter()
            .map(|g| Group {
                start: g.first,
                weights: Group::weights_of(
                    g.weights.as_deref(),
                    &g.members.iter().collect::<Vec<_>>(),
                    &self.limits,
                ),
                strategy: g.strategy,
            })
            .collect()
    }

    /// The call path of tier `name`: its first entry's (`walk` and `probe` default to it).
    pub fn tier_path(&self, name: &str) -> Result<CallPath, ConfigError> {
        Ok(self
            .tier_entries(name)?
            .first()
            .map(|e| e.path)
            .unwrap_or_default())
    }

    /// The admission set-up: `limits:`, `headroom:`, `interactive_floor:`, with the
    /// defaults of decisions.md.
    pub fn admission(&self) -> AdmissionConfig {
        AdmissionConfig::written(&self.limits, self.headroom, self.interactive_floor)
    }

    /// Every tier resolved once, keys read from `env` once per provider: what a
    /// long-running process (the gateway) builds at startup.
    pub fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Pool {
        let tiers = self
            .tiers
            .keys()
            .map(|name| {
                (
                    name.clone(),
                    self.tier(name, env).map_err(|e| e.to_string()),
                )
            })
            .collect();
        Pool {
            tiers,
            policies: self.policies.clone(),
        }
    }

    /// Every route of every tier, once each, in config order (chain order within a tier).
    pub fn route_names(&self) -> Vec<Route> {
        let mut seen: BTreeSet<&Route> = BTreeSet::new();
        self.tiers
            .values()
            .flatten()
            .map(|e| &e.route)
            .filter(|r| seen.insert(r))
            .cloned()
            .collect()
    }

    /// `s` as a route of some tier (`retire`, `restore`, `walk --retire` take these).
    pub fn find_route(&self, s: &str) -> Result<Route, ConfigError> {
        let routes = self.route_names();
        routes
            .iter()
            .find(|r| r.as_str() == s)
            .cloned()
            .ok_or_else(|| ConfigError::UnknownRoute {
                route: s.to_string(),
                nearest: nearest_route(s, &routes),
                known: routes.iter().map(|r| r.to_string()).collect(),
            })
    }

    /// Where health is persisted: `state` relative to the config file's directory,
    /// else `.poolctl/state.db` beside the config file.
    pub fn state_path(&self) -> PathBuf {
        let dir = self.file.parent().unwrap_or(Path::new(""));
        dir.join(self.state.as_deref().unwrap_or(Path::new(DEFAULT_STATE)))
    }

    /// `state_tls`, its paths relative to the config file's directory (as `state` is).
    pub fn state_tls(&self) -> Option<crate::store::redis::StateTls> {
        let dir = self.file.parent().unwrap_or(Path::new(""));
        self.state_tls
            .as_ref()
            .map(|t| crate::store::redis::StateTls {
                ca_file: t.ca_file.as_ref().map(|p| dir.join(p)),
                cert_file: t.cert_file.as_ref().map(|p| dir.join(p)),
                key_file: t.key_file.as_ref().map(|p| dir.join(p)),
            })
    }

    /// Where state lives: a `redis://` URL, else the file of [`PoolConfig::state_path`].
    pub fn state_location(&self) -> StateLocation {
        match self.state.as_ref().and_then(|s| s.to_str()) {
            Some(url) if crate::store::redis::is_redis_url(url) => {
                StateLocation::Redis(url.to_string())
            }
            _ => StateLocation::File(self.state_path()),
        }
    }
}

impl ProviderConfig {
    /// The explicit `dialect`, else the one the host implies, else the wire's own.
    pub fn dialect(&self) -> (Dialect, DialectSource) {
        self.settings().dialect(Some(&self.base_url))
    }
}

/// A pool config resolved once: every tier built (or why it cannot be: a missing key),
/// and the policy cards.
#[derive(Debug, Clone)]
pub struct Pool {
    /// In config order.
    tiers: IndexMap<String, Result<Tier, String>>,
    pub policies: BTreeMap<String, Policy>,
}

impl Pool {
    /// Tier `name`, or why it could not be built.
    pub fn tier(&self, name: &str) -> Result<&Tier, String> {
        match self.tiers.get(name) {
            Some(Ok(t)) => Ok(t),
            Some(Err(e)) => Err(e.clone()),
            None => Err(format!("unknown tier `{name}`")),
        }
    }

    /// The names of every tier, in config order.
    pub fn tier_names(&self) -> impl Iterator<Item = &str> {
        self.tiers.keys().map(String::as_str)
    }
}
