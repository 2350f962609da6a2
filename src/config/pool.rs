//! The pool config (`pool.yaml`, spec/cli.md): parsed and validated once, so the router,
//! `probe` and `walk` can trust every name in it. Every error names the file, line and
//! field; keys never enter it, only the names of the variables that hold them.

use crate::classify::dialect::Dialect;
use crate::config::route::{RouteSpec, Tier};
use crate::config::yaml::{self, YamlError};
use crate::core::limits;
use crate::core::secret::Secret;
use crate::core::vocab::{CallPath, Route};
use crate::policy::capability::ModelFacts;
use crate::policy::card::Policy;
use crate::store::OnStoreError;
use crate::wire::Endpoint;
use indexmap::IndexMap;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The variable that names the config file when `--config` is absent.
pub const CONFIG_ENV: &str = "POOLCTL_CONFIG";
pub const DEFAULT_CONFIG_FILE: &str = "pool.yaml";
/// Where health survives restarts when `state` is absent, beside the config file.
pub const DEFAULT_STATE: &str = ".poolctl/state.db";

/// A validated pool config.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// The file it came from: errors name it, and `state` is relative to it.
    pub file: PathBuf,
    /// In config order, as every listing shows them.
    pub providers: IndexMap<String, ProviderConfig>,
    /// In config order; each tier's routes in chain order.
    pub tiers: IndexMap<String, Vec<TierEntry>>,
    pub policies: BTreeMap<String, Policy>,
    /// Per-model facts (equivalence contracts and prices), by route.
    pub models: BTreeMap<Route, ModelFacts>,
    pub state: Option<PathBuf>,
    /// Admission contracts, keyed by a route or a provider (decisions.md "Admission").
    pub limits: BTreeMap<String, crate::admission::bucket::Limits>,
    pub headroom: Option<f64>,
    pub interactive_floor: Option<f64>,
    /// What admission does while a shared store cannot be reached.
    pub on_store_error: OnStoreError,
    /// How many processes share the buckets (sizes `local_share`); at least 1.
    pub workers: u32,
    /// The deadline of one call to a shared store.
    pub state_timeout_ms: u64,
}

/// Where health (and, with a fleet, the buckets) lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateLocation {
    /// An embedded SQLite file.
    File(PathBuf),
    /// A Redis shared by a fleet (the URL as written: it may hold a password).
    Redis(String),
}

crate::provider_settings! {
    /// One provider: where it is, the variable that holds its key, and the provider
    /// settings (wire, dialect, deadlines, cooldowns, breaker). Absent values take the
    /// defaults of spec/decisions.md, applied by `route::ProviderSettings` so this stays
    /// a plain copy of the file.
    #[derive(Debug, Clone, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields, expecting = "a provider: a map with `wire`, `base_url` and `api_key_env`")]
    pub struct ProviderConfig {
        pub base_url: String,
        pub api_key_env: String,
    }
}

/// What `PoolConfig::lint` found: the config as far as it parsed (None when nothing
/// usable did), every problem, and the fields that only parsed with a stand-in value.
#[derive(Debug)]
pub struct Lint {
    pub config: Option<PoolConfig>,
    pub problems: Vec<YamlError>,
    pub stand_ins: Vec<String>,
}

/// One route of a tier and the kind of call it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierEntry {
    pub route: Route,
    pub path: CallPath,
}

pub use crate::config::route::DialectSource;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Unreadable, malformed or invalid file: file, line, field and message.
    #[error(transparent)]
    Yaml(#[from] YamlError),
    /// Names the file, line and field like any config error, and the variable; never
    /// a value.
    #[error(
        "{}: field `providers.{provider}.api_key_env`: environment variable `{var}` is not set or is empty (provider `{provider}`)",
        at(.file, *.line)
    )]
    MissingKey {
        file: PathBuf,
        line: Option<usize>,
        provider: String,
        var: String,
    },
    #[error("unknown provider `{name}`{}", did_you_mean(.nearest))]
    UnknownProvider {
        name: String,
        nearest: Option<String>,
    },
    #[error("unknown tier `{name}`{}", suggest(.nearest, "tiers", .known))]
    UnknownTier {
        name: String,
        nearest: Option<String>,
        /// Every tier, in config order, listed when none is near.
        known: Vec<String>,
    },
    #[error("unknown route `{route}`{}", suggest(.nearest, "routes", .known))]
    UnknownRoute {
        route: String,
        nearest: Option<String>,
        known: Vec<String>,
    },
}

/// `file:line`, or `file` when the line is not known.
fn at(file: &Path, line: Option<usize>) -> String {
    match line {
        Some(n) => format!("{}:{n}", file.display()),
        None => file.display().to_string(),
    }
}

/// The nearest name when there is one, else the names to choose from (the first ten).
pub fn suggest(nearest: &Option<String>, what: &str, known: &[String]) -> String {
    if nearest.is_some() || known.is_empty() {
        return did_you_mean(nearest);
    }
    let shown: Vec<String> = known.iter().take(10).map(|k| format!("`{k}`")).collect();
    let more = if known.len() > 10 {
        format!(" and {} more", known.len() - 10)
    } else {
        String::new()
    };
    format!("; the {what} are {}{more}", shown.join(", "))
}

fn did_you_mean(nearest: &Option<String>) -> String {
    nearest
        .as_ref()
        .map(|n| format!("; did you mean `{n}`?"))
        .unwrap_or_default()
}

/// The config file: `--config FILE`, else `$POOLCTL_CONFIG`, else `./pool.yaml`.
pub fn locate(explicit: Option<&Path>) -> PathBuf {
    locate_with(explicit, std::env::var_os(CONFIG_ENV).as_deref())
}

/// `locate` with the environment variable's value passed in; an empty value is unset.
pub fn locate_with(explicit: Option<&Path>, env_value: Option<&OsStr>) -> PathBuf {
    match (explicit, env_value) {
        (Some(path), _) => path.to_path_buf(),
        (None, Some(v)) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(DEFAULT_CONFIG_FILE),
    }
}

impl PoolConfig {
    pub fn load(file: &Path) -> Result<PoolConfig, ConfigError> {
        let text = yaml::read_text(file)?;
        PoolConfig::parse(file, &text)
    }

    /// Parses and validates `text`, the contents of `file`.
    pub fn parse(file: &Path, text: &str) -> Result<PoolConfig, ConfigError> {
        if let Some(e) = not_yaml(file, text) {
            return Err(e.into());
        }
        let raw: RawConfig = yaml::parse(file, text)?;
        let config = raw.into_config(file);
        config.validate(text)?;
        Ok(config)
    }

    /// `poolctl check`: every problem in `text` at once, field errors and semantic ones,
    /// each with its line. `Err` only when `text` is not YAML at all.
    pub fn lint(file: &Path, text: &str) -> Result<Lint, YamlError> {
        let parsed = crate::config::problems::parse_all::<RawConfig>(file, text)?;
        let mut problems = parsed.problems;
        let config = parsed.value.map(|raw| raw.into_config(file));
        if let Some(config) = &config {
            // A field that only parsed with a stand-in is already reported.
            let stood_in = |field: &str| {
                parsed
                    .stand_ins
                    .iter()
                    .any(|s| field == s || field.starts_with(&format!("{s}.")))
            };
            // An empty tier because its only entry was bad is that entry's problem.
            let inside = |field: &str| {
                problems.iter().any(|p: &YamlError| {
                    p.field.starts_with(&format!("{field}["))
                        || p.field.starts_with(&format!("{field}."))
                })
            };
            // A provider whose own entry is broken (`p: [1]`) is dropped from the parsed
            // config, and already reported: a route naming it is not "not under providers".
            let broken: Vec<String> = problems
                .iter()
                .filter_map(|p| p.field.strip_prefix("providers."))
                .map(|rest| rest.split('.').next().unwrap_or(rest))
                .filter(|name| !config.providers.contains_key(*name))
                .map(|name| format!("names provider `{name}`, which is not under"))
                .collect();
            let names_broken = |p: &YamlError| broken.iter().any(|b| p.message.contains(b));
            let semantic: Vec<YamlError> = config
                .problems(text)
                .into_iter()
                .filter(|p| !stood_in(&p.field) && !inside(&p.field) && !names_broken(p))
                .collect();
            problems.extend(semantic);
        }
        Ok(Lint {
            config,
            problems,
            stand_ins: parsed.stand_ins,
        })
    }

    /// Loading stops at the first problem; `check` wants them all.
    fn validate(&self, text: &str) -> Result<(), YamlError> {
        match self.problems(text).into_iter().next() {
            Some(first) => Err(first),
            None => Ok(()),
        }
    }

    /// Every semantic problem of a parsed config, in file order of sections.
    fn problems(&self, text: &str) -> Vec<YamlError> {
        let mut out = Vec::new();
        let invalid = |field: String, needles: &[&str], message: String| YamlError {
            file: self.file.clone(),
            line: line_of(text, needles),
            column: None,
            field,
            message,
        };

        for (name, p) in &self.providers {
            let key = format!("{name}:");
            let bad = |f: &str, message: String| {
                let needle = format!("{f}:");
                invalid(
                    format!("providers.{name}.{f}"),
                    &["providers:", &key, &needle],
                    message,
                )
            };
            if let Err(why) = check_url(&p.base_url) {
                out.push(bad("base_url", why));
            }
            // A gateway key in `?key=` is a credential: masked wherever it is echoed.
            crate::core::secret::register_url_query(&p.base_url);
            if p.api_key_env.trim().is_empty() {
                out.push(bad(
                    "api_key_env",
                    "name the variable that holds the key".into(),
                ));
            }
            // Out of range is refused, never wrapped: a cooldown of 2^64 - 1 ms would set
            // `until` in the past, a zero deadline fails every call before it starts.
            if let Err((f, why)) = limits::check_fields(&p.settings().limit_fields()) {
                out.push(bad(f, why));
            }
        }

        if self.tiers.is_empty() {
            let msg = "define at least one tier".to_string();
            out.push(invalid("tiers".into(), &["tiers:"], msg));
        }
        for (tier, entries) in &self.tiers {
            let key = format!("{tier}:");
            if entries.is_empty() {
                let msg = "a tier needs at least one route".to_string();
                out.push(invalid(format!("tiers.{tier}"), &["tiers:", &key], msg));
                continue;
            }
            // Where each route was first seen: one pass, so a tier of 100,000 routes is
            // checked in milliseconds, not minutes.
            let mut first_at: std::collections::HashMap<&Route, usize> =
                std::collections::HashMap::with_capacity(entries.len());
            for (i, entry) in entries.iter().enumerate() {
                let route = entry.route.as_str();
                let field = format!("tiers.{tier}[{i}]");
                let provider = entry.route.provider();
                if !self.providers.contains_key(provider) {
                    let msg = format!(
                        "route `{route}` names provider `{provider}`, which is not under `providers`{}",
                        suggest(
                            &self.nearest_provider(provider),
                            "providers",
                            &self.providers.keys().cloned().collect::<Vec<_>>()
                        )
                    );
                    out.push(invalid(field.clone(), &["tiers:", &key, route], msg));
                }
                if let Some(&first) = first_at.get(&entry.route) {
                    let msg =
                        format!("route `{route}` appears twice in this tier (first at [{first}])");
                    out.push(invalid(field, &["tiers:", &key, route, route], msg));
                }
                first_at.insert(&entry.route, i);
            }
        }

        for (name, policy) in &self.policies {
            let key = format!("{name}:");
            if let Err((f, why)) = limits::check_fields(&crate::policy::card::policy_fields(policy))
            {
                let needle = format!("{f}:");
                out.push(invalid(
                    format!("policies.{name}.{f}"),
                    &["policies:", &key, &needle],
                    why,
                ));
            }
            // A fallback outside the card's own tier can never be used: the router walks
            // that tier alone.
            let (within, allowed): (String, Vec<Route>) = match &policy.tier {
                None => ("any tier".into(), self.route_names()),
                Some(tier) => match self.tiers.get(tier) {
                    Some(entries) => (
                        format!("tier `{tier}`"),
                        entries.iter().map(|e| e.route.clone()).collect(),
                    ),
                    None => {
                        let msg = format!(
                            "unknown tier `{tier}`{}",
                            did_you_mean(&self.nearest_tier(tier))
                        );
                        let field = format!("policies.{name}.tier");
                        out.push(invalid(field, &["policies:", &key, "tier:"], msg));
                        continue;
                    }
                },
            };
            for (i, route) in policy.fallback_routes.iter().flatten().enumerate() {
                if !allowed.contains(route) {
                    let msg = format!(
                        "route `{route}` is not in {within}{}",
                        did_you_mean(&nearest_route(route.as_str(), &allowed))
                    );
                    let field = format!("policies.{name}.fallback_routes[{i}]");
                    out.push(invalid(field, &["policies:", &key, route.as_str()], msg));
                }
            }
        }
        if self.workers == 0 {
            let msg = "must be at least 1: the number of processes that share the buckets".into();
            out.push(invalid("workers".into(), &["workers:"], msg));
        }
        if self.state_timeout_ms == 0 {
            let msg = "must be at least 1 ms: a store call with no time cannot succeed".into();
            out.push(invalid(
                "state_timeout_ms".into(),
                &["state_timeout_ms:"],
                msg,
            ));
        }
        if let Some(state) = self.state.as_ref().and_then(|s| s.to_str()) {
            if state.contains("://") && !state.starts_with("redis://") {
                // Only the scheme is echoed: the rest may hold a password.
                let scheme = state.split("://").next().unwrap_or("");
                let msg = format!(
                    "`{scheme}://…` is neither a file path nor a redis:// URL (rediss:// and other schemes are not supported)"
                );
                out.push(invalid("state".into(), &["state:"], msg));
            } else if state.starts_with("redis://") {
                // Parsed here, not first at the store's opening, so `check` finds it and
                // the error has its line. `Client::open` parses only: it never connects.
                if let Err(e) = redis::Client::open(state) {
                    // The URL may hold a password: name only what is wrong.
                    let msg = format!(
                        "`state` is not a usable redis:// URL ({}): expected redis://[:password@]host[:port][/db]",
                        e.detail().unwrap_or("cannot be parsed")
                    );
                    out.push(invalid("state".into(), &["state:"], msg));
                }
            }
        }
        // Admission: a contract names a route of some tier or a provider; shares are
        // shares; a degrade tier exists.
        let all = self.route_names();
        // Config order is not sorted order: membership by set, never by binary search.
        let known: BTreeSet<&Route> = all.iter().collect();
        for (name, limits) in &self.limits {
            let field = format!("limits.{name}");
            let named = match Route::parse(name) {
                Ok(r) => known.contains(&r),
                Err(_) => self.providers.contains_key(name),
            };
            if !named {
                let names = all
                    .iter()
                    .map(|r| r.as_str())
                    .chain(self.providers.keys().map(String::as_str));
                let msg = format!(
                    "`{name}` is neither a route of a tier nor a provider{}",
                    did_you_mean(&crate::core::suggest::nearest(name, names))
                );
                out.push(invalid(field, &["limits:", name], msg));
            } else if limits.contracts().next().is_none() {
                let msg = "name at least one of rpm, tpm, itpm, otpm".to_string();
                out.push(invalid(field, &["limits:", name], msg));
            }
        }
        if let Some(h) = self.headroom.filter(|h| !(*h > 0.0 && *h <= 1.0)) {
            let msg = format!("headroom {h} is outside (0, 1]");
            out.push(invalid("headroom".into(), &["headroom:"], msg));
        }
        if let Some(f) = self.interactive_floor.filter(|f| !(0.0..1.0).contains(f)) {
            let msg = format!("interactive_floor {f} is outside [0, 1)");
            out.push(invalid(
                "interactive_floor".into(),
                &["interactive_floor:"],
                msg,
            ));
        }
        for (name, policy) in &self.policies {
            if let Some(t) = &policy.degrade_tier {
                if !self.tiers.contains_key(t) {
                    let key = format!("{name}:");
                    let msg = format!("unknown tier `{t}`{}", did_you_mean(&self.nearest_tier(t)));
                    let field = format!("policies.{name}.degrade_tier");
                    out.push(invalid(field, &["policies:", &key, "degrade_tier:"], msg));
                }
            }
        }
        // Facts for a route no tier uses are a typo, not a harmless extra.
        for route in self.models.keys() {
            if !known.contains(route) {
                let msg = format!(
                    "route `{route}` is in no tier{}",
                    did_you_mean(&nearest_route(route.as_str(), &all))
                );
                out.push(invalid(
                    format!("models.{route}"),
                    &["models:", route.as_str()],
                    msg,
                ));
            }
        }
        out
    }

    fn provider(&self, name: &str) -> Result<&ProviderConfig, ConfigError> {
        self.providers
            .get(name)
            .ok_or_else(|| ConfigError::UnknownProvider {
                name: name.to_string(),
                nearest: self.nearest_provider(name),
            })
    }

    fn nearest_provider(&self, name: &str) -> Option<String> {
        crate::core::suggest::nearest(name, self.providers.keys().map(String::as_str))
    }

    fn nearest_tier(&self, name: &str) -> Option<String> {
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
        let key = env(&p.api_key_env)
            .filter(|k| !k.is_empty())
            .ok_or_else(|| ConfigError::MissingKey {
                file: self.file.clone(),
                // The text is not kept once parsed; an error is rare enough to read it again.
                line: yaml::read_text(&self.file).ok().and_then(|t| {
                    line_of(&t, &["providers:", &format!("{provider}:"), "api_key_env:"])
                }),
                provider: provider.to_string(),
                var: p.api_key_env.clone(),
            })?;
        Ok(p.settings().endpoint(
            provider,
            p.base_url.clone(),
            Secret::new(key),
            Some(&p.base_url),
        ))
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
                facts: self.models.get(&entry.route).copied().unwrap_or_default(),
                policy: self.provider(provider)?.settings().policy(),
            });
        }
        Ok(Tier {
            name: name.to_string(),
            path: self.tier_path(name)?,
            routes,
        })
    }

    /// The call path of tier `name`: its first entry's (`walk` and `probe` default to it).
    pub fn tier_path(&self, name: &str) -> Result<CallPath, ConfigError> {
        Ok(self
            .tier_entries(name)?
            .first()
            .map(|e| e.path)
            .unwrap_or_default())
    }

    /// Every tier resolved once, keys read from `env` once per provider: what a
    /// long-running process (the gateway) builds at startup.
    /// The admission set-up: `limits:`, `headroom:`, `interactive_floor:`, with the
    /// defaults of decisions.md.
    pub fn admission(&self) -> crate::admission::buckets::AdmissionConfig {
        let d = crate::admission::buckets::AdmissionConfig::default();
        crate::admission::buckets::AdmissionConfig {
            limits: self.limits.clone(),
            headroom: self.headroom.unwrap_or(d.headroom),
            interactive_floor: self.interactive_floor.unwrap_or(d.interactive_floor),
        }
    }

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

/// The file as written; `PoolConfig` adds the file name and is only built once valid.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a pool config: a map with `providers` and `tiers`"
)]
struct RawConfig {
    providers: IndexMap<String, ProviderConfig>,
    tiers: IndexMap<String, Vec<TierEntry>>,
    #[serde(default)]
    policies: BTreeMap<String, Policy>,
    #[serde(default)]
    models: BTreeMap<Route, ModelFacts>,
    #[serde(default)]
    state: Option<PathBuf>,
    #[serde(default)]
    on_store_error: OnStoreError,
    #[serde(default)]
    workers: Option<u32>,
    #[serde(default)]
    state_timeout_ms: Option<u64>,
    #[serde(default)]
    limits: BTreeMap<String, crate::admission::bucket::Limits>,
    #[serde(default)]
    headroom: Option<f64>,
    #[serde(default)]
    interactive_floor: Option<f64>,
}

impl RawConfig {
    fn into_config(self, file: &Path) -> PoolConfig {
        PoolConfig {
            file: file.to_path_buf(),
            providers: self.providers,
            tiers: self.tiers,
            policies: self.policies,
            models: self.models,
            state: self.state,
            limits: self.limits,
            headroom: self.headroom,
            interactive_floor: self.interactive_floor,
            on_store_error: self.on_store_error,
            workers: self.workers.unwrap_or(1),
            state_timeout_ms: self
                .state_timeout_ms
                .unwrap_or(crate::store::redis::DEFAULT_DEADLINE_MS),
        }
    }
}

/// The syntax error of `text` when it is not YAML at all, as `check` reports it, before
/// any typed parsing: that can stop at a type error inside a broken flow collection first
/// (`unknown variant \`openai q\``), hiding that the file itself is malformed, and it
/// silently keeps the last of two duplicate keys (a second `openai:` provider or `high:`
/// tier would shadow the first). A config is read once per process: parsing it twice
/// costs microseconds.
fn not_yaml(file: &Path, text: &str) -> Option<YamlError> {
    // The size and depth limits are checked before any parsing, and their errors stand.
    if text.len() as u64 > yaml::max_file_bytes() || yaml::too_deep(text, yaml::MAX_DEPTH).is_some()
    {
        return None;
    }
    let e = serde_yaml::from_str::<serde_yaml::Value>(text).err()?;
    let loc = e.location();
    Some(YamlError {
        file: file.to_path_buf(),
        line: loc.as_ref().map(|l| l.line()),
        column: loc.as_ref().map(|l| l.column()),
        field: String::new(),
        message: format!("not valid YAML: {}", yaml::strip_location(&e.to_string())),
    })
}

/// A tier entry is a plain route string (path `chat`) or `{ route, path }`. Written by
/// hand rather than `#[serde(untagged)]`, which would swallow the real error of a bad map
/// (an unknown field, a bad path) behind "did not match any variant".
impl<'de> Deserialize<'de> for TierEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Full {
            route: Route,
            #[serde(default)]
            path: CallPath,
        }

        struct EntryVisitor;
        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = TierEntry;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a route `provider/model` or `{ route, path }`")
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<TierEntry, E> {
                let route = Route::parse(s).map_err(E::custom)?;
                Ok(TierEntry {
                    route,
                    path: CallPath::default(),
                })
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TierEntry, A::Error> {
                let full = Full::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(TierEntry {
                    route: full.route,
                    path: full.path,
                })
            }
        }

        deserializer.deserialize_any(EntryVisitor)
    }
}

/// Checked here rather than at the first call, so a typo in a URL fails `check`, not a
/// request in production. The URL is only ever shown through `secret::display_url`: its
/// query may carry a key.
fn check_url(url: &str) -> Result<(), String> {
    let shown = crate::core::secret::display_url(url);
    let parsed =
        reqwest::Url::parse(url).map_err(|e| format!("`{shown}` is not a valid URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(format!("`{shown}` is not an http(s) URL with a host"));
    }
    // A `user:password@` would be sent as a second `Authorization` header beside the
    // key, and printed wherever the URL is: keys belong in `api_key_env`.
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!(
            "`{shown}` carries credentials (`user:password@`); put the key in the variable `api_key_env` names"
        ));
    }
    if parsed.fragment().is_some() {
        return Err(format!(
            "`{shown}` has a `#fragment`, which no request can use"
        ));
    }
    Ok(())
}

fn nearest_route(s: &str, routes: &[Route]) -> Option<String> {
    crate::core::suggest::nearest(s, routes.iter().map(Route::as_str))
}

/// The 1-based line of a semantic error. serde has no positions once parsing is done,
/// so this searches the text for `needles` in order, each after the previous, and
/// returns the line of the last one found (e.g. `["tiers:", "high:", route]`). A
/// needle ending in `:` matches a key; any other matches a whole value, so `a/x` does not
/// match inside `a/x-mini`.
fn line_of(text: &str, needles: &[&str]) -> Option<usize> {
    let mut from = 0;
    let mut found = None;
    for needle in needles {
        if let Some(at) = find_token(text, needle, from) {
            found = Some(at);
            from = at + needle.len();
        }
    }
    found.map(|at| text[..at].matches('\n').count() + 1)
}

fn find_token(text: &str, needle: &str, from: usize) -> Option<usize> {
    let is_word = |c: char| c.is_alphanumeric() || "-_./".contains(c);
    let mut start = from;
    while let Some(i) = text.get(start..)?.find(needle) {
        let at = start + i;
        let end = at + needle.len();
        let before_ok = !text[..at].chars().next_back().is_some_and(is_word);
        let after = text[end..].chars().next();
        let after_ok = if needle.ends_with(':') {
            after.is_none_or(char::is_whitespace)
        } else {
            !after.is_some_and(is_word)
        };
        if before_ok && after_ok {
            return Some(at);
        }
        start = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_of_follows_needles_and_respects_word_bounds() {
        let text = "tiers:\n  high:\n    - a/x-mini\n    - a/x\n    - a/x\n  low: [a/x]\n";
        assert_eq!(line_of(text, &["tiers:", "high:", "a/x"]), Some(4));
        assert_eq!(line_of(text, &["tiers:", "high:", "a/x", "a/x"]), Some(5));
        assert_eq!(line_of(text, &["tiers:", "low:", "a/x"]), Some(6));
        assert_eq!(line_of(text, &["tiers:", "nope:"]), Some(1));
        assert_eq!(line_of(text, &["absent"]), None);
    }

    #[test]
    fn key_needles_skip_values_of_the_same_word() {
        let text = "providers:\n  ds:\n    wire: openai\n  openai:\n    base_url: x\n";
        assert_eq!(
            line_of(text, &["providers:", "openai:", "base_url:"]),
            Some(5)
        );
    }

    #[test]
    fn locate_precedence() {
        let explicit = Path::new("a.yaml");
        let env = OsStr::new("b.yaml");
        assert_eq!(locate_with(Some(explicit), Some(env)), explicit);
        assert_eq!(locate_with(None, Some(env)), Path::new("b.yaml"));
        assert_eq!(
            locate_with(None, Some(OsStr::new(""))),
            Path::new("pool.yaml")
        );
        assert_eq!(locate_with(None, None), Path::new("pool.yaml"));
    }

    const BASE: &str = "providers:\n  a:\n    base_url: http://127.0.0.1:1/v1\n    api_key_env: K\ntiers:\n  t: [a/x]\n";

    fn parse(extra: &str) -> Result<PoolConfig, ConfigError> {
        PoolConfig::parse(Path::new("/etc/pool.yaml"), &format!("{BASE}{extra}"))
    }

    #[test]
    fn shared_state_fields_parse_with_their_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c.on_store_error, OnStoreError::LocalShare);
        assert_eq!(c.workers, 1);
        assert_eq!(
            c.state_location(),
            StateLocation::File(PathBuf::from("/etc/.poolctl/state.db"))
        );
        let c = parse("state: redis://127.0.0.1:6390/2\non_store_error: fail_closed\nworkers: 4\n")
            .unwrap();
        assert_eq!(c.on_store_error, OnStoreError::FailClosed);
        assert_eq!(c.workers, 4);
        assert_eq!(
            c.state_location(),
            StateLocation::Redis("redis://127.0.0.1:6390/2".into())
        );
    }

    #[test]
    fn bad_shared_state_fields_name_the_field_and_never_echo_a_password() {
        for (extra, field) in [
            ("workers: 0\n", "workers"),
            ("on_store_error: fail_open\n", "on_store_error"),
            ("state: memcache://u:hunter2@h/0\n", "state"),
            ("state_timeout_ms: 0\n", "state_timeout_ms"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(field), "{extra}: {err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn a_redis_url_that_cannot_be_parsed_is_a_located_config_error_not_a_store_failure() {
        for extra in [
            "state: \"redis://:hunter2@127.0.0.1:notaport/0\"\n",
            "state: \"redis://:hunter2@127.0.0.1:6379/x\"\n",
        ] {
            let err = parse(extra).unwrap_err();
            let ConfigError::Yaml(e) = &err else {
                panic!("{extra}: {err:?}");
            };
            assert_eq!(e.field, "state", "{err}");
            assert!(e.line.is_some(), "{err}");
            let shown = err.to_string();
            assert!(shown.contains("redis://"), "{shown}");
            assert!(!shown.contains("hunter2"), "{shown}");
        }
        assert!(parse("state: redis://127.0.0.1:6379/0\n").is_ok());
    }
}
