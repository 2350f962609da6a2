//! The pool config (`pool.yaml`, spec/cli.md): parsed and validated once, so the router,
//! `probe` and `walk` can trust every name in it. Every error names the file, line and
//! field; keys never enter it, only the names of the variables that hold them.

use crate::config::route::GroupStrategy;
use crate::config::yaml::{self, YamlError};
use crate::core::vocab::{CallPath, Route};
use crate::policy::capability::ModelFacts;
use crate::policy::card::Policy;
use crate::store::OnStoreError;
use indexmap::IndexMap;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

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
    /// In config order; each tier's routes in chain order (a group's members in turn).
    pub tiers: IndexMap<String, Vec<TierEntry>>,
    /// The group steps of each tier that has any, in chain order.
    pub groups: BTreeMap<String, Vec<GroupConfig>>,
    pub policies: BTreeMap<String, Policy>,
    /// Per-model facts (equivalence contracts and prices), by route.
    pub models: BTreeMap<Route, ModelFacts>,
    /// `catalogue: false`: only `models:` facts, never the shipped catalogue's (a
    /// config `poolctl mock` writes, so a replayed scenario means what it says).
    pub catalogue: bool,
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
    /// The bounds of session affinity (`x-poolctl-session`).
    pub sessions: crate::store::sessions::SessionLimits,
    /// The bounds of the conversations `serve` keeps for the Responses API
    /// (`responses_ttl`, `responses_max_bytes`, `responses_max`).
    pub responses: crate::store::conversations::Limits,
    /// `state_tls:` (paths as written): trust and identity for a `rediss://` store.
    pub state_tls: Option<crate::store::redis::StateTls>,
    /// `serve_token_env:` the variable that holds the gateway's client token
    /// (`POOLCTL_SERVE_TOKEN` wins over it).
    pub serve_token_env: Option<String>,
    /// Keys a config read from another format holds in memory (a LiteLLM file's literal
    /// `api_key`), by the variable name the config gives them; that variable, when set,
    /// wins. Never in a pool.yaml, never printed.
    pub inline_keys: BTreeMap<String, crate::core::secret::Secret>,
    /// Where each provider's key variable came from in a file of another format (a
    /// LiteLLM `api_key` line), by provider: the line and that file's field, which a
    /// missing or unsendable key names instead of the translated `api_key_env`.
    pub key_origins: BTreeMap<String, KeyOrigin>,
}

/// Where a provider's key variable came from in a file of another format.
#[derive(Debug, Clone)]
pub struct KeyOrigin {
    /// The file it is written in (a LiteLLM config, or one of its `include:` files).
    pub file: PathBuf,
    pub line: Option<usize>,
    pub field: String,
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

/// One route of a tier and the kind of call it serves. A group step's members are one
/// entry each, in the order written, so every listing of a tier's routes (probe, serve's
/// per-route chains, capacity) sees each member as a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierEntry {
    pub route: Route,
    pub path: CallPath,
    /// The step of the tier as written (`tiers.NAME[step]`): a group's members share it.
    pub step: usize,
    /// The member's group: an index into the tier's `PoolConfig::groups`.
    pub group: Option<usize>,
}

/// A group step as written: `{ group: [a/x, b/x], weights: [3, 1], strategy, path }`.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupConfig {
    /// The step of the tier as written.
    pub step: usize,
    /// The first member's index in the tier's entries.
    pub first: usize,
    pub members: Vec<Route>,
    pub weights: Option<Vec<f64>>,
    pub strategy: GroupStrategy,
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
        "{}: field `{field}`: environment variable `{var}` is not set or is empty (provider `{provider}`)",
        at(.file, *.line)
    )]
    MissingKey {
        file: PathBuf,
        line: Option<usize>,
        /// `providers.NAME.api_key_env`, or the field of the file it came from.
        field: String,
        provider: String,
        var: String,
    },
    /// A key no HTTP header can carry (a secret file read with its line break): every
    /// call would fail as a network error, far from its cause. Never shows the value.
    #[error(
        "{}: field `{field}`: environment variable `{var}` holds a line break or another control character, which no HTTP header can carry (a secret file read with its trailing newline?) (provider `{provider}`)",
        at(.file, *.line)
    )]
    UnsendableKey {
        file: PathBuf,
        line: Option<usize>,
        /// `providers.NAME.api_key_env`, or the field of the file it came from.
        field: String,
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
pub(super) fn at(file: &Path, line: Option<usize>) -> String {
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

pub(super) fn did_you_mean(nearest: &Option<String>) -> String {
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
}

/// The file as written; `PoolConfig` adds the file name and is only built once valid.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a pool config: a map with `providers` and `tiers`"
)]
struct RawConfig {
    providers: IndexMap<String, ProviderConfig>,
    tiers: IndexMap<String, Vec<TierStep>>,
    #[serde(default)]
    policies: BTreeMap<String, Policy>,
    #[serde(default)]
    models: BTreeMap<Route, ModelFacts>,
    #[serde(default)]
    catalogue: Option<bool>,
    #[serde(default)]
    state: Option<PathBuf>,
    #[serde(default)]
    on_store_error: OnStoreError,
    #[serde(default)]
    workers: Option<u32>,
    #[serde(default)]
    state_timeout_ms: Option<u64>,
    #[serde(default)]
    state_tls: Option<crate::store::redis::StateTls>,
    #[serde(default)]
    limits: BTreeMap<String, crate::admission::bucket::Limits>,
    #[serde(default)]
    headroom: Option<f64>,
    #[serde(default)]
    interactive_floor: Option<f64>,
    #[serde(default)]
    sessions: crate::store::sessions::SessionLimits,
    #[serde(default)]
    responses_ttl: Option<Ttl>,
    #[serde(default)]
    responses_max_bytes: Option<usize>,
    #[serde(default)]
    responses_max: Option<usize>,
    #[serde(default)]
    responses_store_max_bytes: Option<usize>,
    #[serde(default)]
    serve_token_env: Option<String>,
}

/// `responses_ttl`: milliseconds, or a duration with its unit (`90s`, `30m`, `24h`, `7d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ttl(u64);

impl<'de> Deserialize<'de> for Ttl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Ms(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Ms(ms) => Ok(Ttl(ms)),
            Raw::Text(t) => ttl_ms(&t).map(Ttl).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "`{t}` is not a duration: write milliseconds, or a number with ms, s, m, h or d (`24h`)"
                ))
            }),
        }
    }
}

/// A duration with its unit, in milliseconds.
fn ttl_ms(t: &str) -> Option<u64> {
    let t = t.trim();
    let split = t.find(|c: char| !c.is_ascii_digit())?;
    let n: u64 = t[..split].parse().ok()?;
    let scale = match t[split..].trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(scale)
}

impl RawConfig {
    fn into_config(self, file: &Path) -> PoolConfig {
        let mut tiers = IndexMap::new();
        let mut groups = BTreeMap::new();
        for (name, steps) in self.tiers {
            let (entries, found) = flatten(steps);
            if !found.is_empty() {
                groups.insert(name.clone(), found);
            }
            tiers.insert(name, entries);
        }
        PoolConfig {
            file: file.to_path_buf(),
            providers: self.providers,
            tiers,
            groups,
            policies: self.policies,
            models: self.models,
            catalogue: self.catalogue.unwrap_or(true),
            state: self.state,
            limits: self.limits,
            headroom: self.headroom,
            interactive_floor: self.interactive_floor,
            on_store_error: self.on_store_error,
            workers: self.workers.unwrap_or(1),
            state_timeout_ms: self
                .state_timeout_ms
                .unwrap_or(crate::store::redis::DEFAULT_DEADLINE_MS),
            sessions: self.sessions,
            responses: {
                use crate::store::conversations as c;
                c::Limits {
                    ttl_ms: self.responses_ttl.map_or(c::DEFAULT_TTL_MS, |t| t.0),
                    max_bytes: self.responses_max_bytes.unwrap_or(c::DEFAULT_MAX_BYTES),
                    max: self.responses_max.unwrap_or(c::DEFAULT_MAX),
                    max_total_bytes: self
                        .responses_store_max_bytes
                        .unwrap_or(c::DEFAULT_MAX_TOTAL_BYTES),
                }
            },
            state_tls: self.state_tls,
            serve_token_env: self.serve_token_env,
            inline_keys: BTreeMap::new(),
            key_origins: BTreeMap::new(),
        }
    }
}

/// The syntax error of `text` when it is not YAML at all, as `check` reports it, before
/// any typed parsing: that can stop at a type error inside a broken flow collection first
/// (`unknown variant \`openai q\``), hiding that the file itself is malformed, and it
/// silently keeps the last of two duplicate keys (a second `openai:` provider or `high:`
/// tier would shadow the first). A config is read once per process: parsing it twice
/// costs microseconds.
pub(super) fn not_yaml(file: &Path, text: &str) -> Option<YamlError> {
    // The size and depth limits are checked before any parsing, and their errors stand.
    if text.len() as u64 > yaml::max_file_bytes() || yaml::too_deep(text, yaml::MAX_DEPTH).is_some()
    {
        return None;
    }
    let e = yaml::tree(text).err()?;
    let loc = e.location();
    Some(YamlError {
        file: file.to_path_buf(),
        line: loc.as_ref().map(|l| l.line()),
        column: loc.as_ref().map(|l| l.column()),
        field: String::new(),
        message: format!("not valid YAML: {}", yaml::strip_location(&e.to_string())),
    })
}

/// One step of a tier as written: a route (a plain string, path `chat`, or
/// `{ route, path }`) or a group of routes.
#[derive(Debug)]
enum TierStep {
    Route(Route, CallPath),
    Group {
        members: Vec<Route>,
        weights: Option<Vec<f64>>,
        strategy: GroupStrategy,
        path: CallPath,
    },
}

/// The steps of a tier as the entries the router walks: a group's members one after
/// another, each marked with its group.
fn flatten(steps: Vec<TierStep>) -> (Vec<TierEntry>, Vec<GroupConfig>) {
    let mut entries = Vec::with_capacity(steps.len());
    let mut groups = Vec::new();
    for (step, s) in steps.into_iter().enumerate() {
        match s {
            TierStep::Route(route, path) => entries.push(TierEntry {
                route,
                path,
                step,
                group: None,
            }),
            TierStep::Group {
                members,
                weights,
                strategy,
                path,
            } => {
                let group = Some(groups.len());
                let first = entries.len();
                entries.extend(members.iter().map(|route| TierEntry {
                    route: route.clone(),
                    path,
                    step,
                    group,
                }));
                groups.push(GroupConfig {
                    step,
                    first,
                    members,
                    weights,
                    strategy,
                });
            }
        }
    }
    (entries, groups)
}

/// A tier step is a plain route string (path `chat`), `{ route, path }`, or
/// `{ group: [..], weights, strategy, path }`. Written by hand rather than
/// `#[serde(untagged)]`, which would swallow the real error of a bad map (an unknown
/// field, a bad path) behind "did not match any variant".
impl<'de> Deserialize<'de> for TierStep {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Full {
            #[serde(default)]
            route: Option<Route>,
            #[serde(default)]
            group: Option<Vec<Route>>,
            #[serde(default)]
            weights: Option<Vec<f64>>,
            #[serde(default)]
            strategy: Option<GroupStrategy>,
            #[serde(default)]
            path: CallPath,
        }

        struct StepVisitor;
        impl<'de> Visitor<'de> for StepVisitor {
            type Value = TierStep;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a route `provider/model`, `{ route, path }` or `{ group: [..] }`")
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<TierStep, E> {
                let route = Route::parse(s).map_err(E::custom)?;
                Ok(TierStep::Route(route, CallPath::default()))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TierStep, A::Error> {
                let full = Full::deserialize(de::value::MapAccessDeserializer::new(map))?;
                match (full.route, full.group) {
                    (Some(route), None) => {
                        if full.weights.is_some() || full.strategy.is_some() {
                            return Err(de::Error::custom(
                                "`weights` and `strategy` belong to a `group:` step, not to one route",
                            ));
                        }
                        Ok(TierStep::Route(route, full.path))
                    }
                    (None, Some(members)) => Ok(TierStep::Group {
                        members,
                        weights: full.weights,
                        strategy: full.strategy.unwrap_or_default(),
                        path: full.path,
                    }),
                    (Some(_), Some(_)) => Err(de::Error::custom(
                        "a step is one `route` or one `group` of routes, not both",
                    )),
                    (None, None) => Err(de::Error::custom(
                        "a step needs `route: provider/model` or `group: [provider/model, ..]`",
                    )),
                }
            }
        }

        deserializer.deserialize_any(StepVisitor)
    }
}

/// The 1-based line of a semantic error. serde has no positions once parsing is done,
/// so this searches the text for `needles` in order, each after the previous, and
/// returns the line of the last one found (e.g. `["tiers:", "high:", route]`). A
/// needle ending in `:` matches a key; any other matches a whole value, so `a/x` does not
/// match inside `a/x-mini`.
pub(super) fn line_of(text: &str, needles: &[&str]) -> Option<usize> {
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

pub(super) fn find_token(text: &str, needle: &str, from: usize) -> Option<usize> {
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
    fn tls_and_cluster_state_urls_parse_and_state_tls_is_checked() {
        for url in [
            "rediss://:pw@127.0.0.1:6390/0",
            "rediss://127.0.0.1:6390/0#insecure",
            "redis+cluster://127.0.0.1:7001,127.0.0.1:7002",
            "rediss+cluster://u:pw@127.0.0.1:7001,127.0.0.1:7002/0",
        ] {
            let c = parse(&format!("state: \"{url}\"\n")).unwrap();
            assert_eq!(
                c.state_location(),
                StateLocation::Redis(url.into()),
                "{url}"
            );
        }
        // state_tls: unknown fields refused, a missing file named, only with a TLS URL.
        let err = parse("state: rediss://h:1/0\nstate_tls: { ca: x }\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("state_tls") && err.contains("ca_file"),
            "{err}"
        );
        let err = parse("state: rediss://h:1/0\nstate_tls: { ca_file: /nonexistent/ca.pem }\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("state_tls.ca_file") && err.contains("/nonexistent/ca.pem"),
            "{err}"
        );
        let err = parse("state: redis://:hunter2@h:1/0\nstate_tls: { ca_file: /x }\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a TLS Redis URL"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        let err = parse("state: rediss://h:1/0\nstate_tls: { cert_file: /x }\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("key_file"), "{err}");
        let err = parse("state: \"redis+cluster://:hunter2@h:1,h:2/3\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("database 0"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        assert!(parse("state: \"rediss+cluster://:hunter2@h:1,,h:2\"\n").is_err());
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
