//! The chaos scenario file (spec/scenario-format.md, v1): parsed strictly (an unknown
//! field is an error, so a typo cannot silently pass a scenario) and validated before
//! anything runs.

use crate::clock::UnixMs;
use crate::dialect::Dialect;
use crate::policy::Policy;
use crate::vocab::{Action, CallPath, Class, HealthState, Outcome, Reason, Route, Wire};
use crate::yaml::YamlError;
use serde::{Deserialize, Deserializer};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The virtual clock's start when a scenario names none.
pub const DEFAULT_NOW: &str = "2026-01-01T00:00:00Z";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub about: Option<String>,
    #[serde(default)]
    pub path: CallPath,
    #[serde(default)]
    pub now: Option<String>,
    #[serde(default)]
    pub policy: Option<Policy>,
    #[serde(default)]
    pub request: Option<RequestShape>,
    pub chain: Vec<ChainEntry>,
    #[serde(default)]
    pub state: BTreeMap<Route, Preset>,
    #[serde(default)]
    pub expect: Option<Expect>,
    #[serde(default)]
    pub requests: Option<Vec<RequestSpec>>,
    /// Where it was loaded from (not a YAML field).
    #[serde(skip)]
    pub file: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainEntry {
    pub route: Route,
    #[serde(default)]
    pub wire: Wire,
    #[serde(default)]
    pub dialect: Option<Dialect>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub first_token_timeout_ms: Option<u64>,
    #[serde(default)]
    pub stream_idle_ms: Option<u64>,
    /// Streams: the whole stream, real time (spec/cli.md "Limits on what is read").
    #[serde(default)]
    pub stream_max_ms: Option<u64>,
    #[serde(default)]
    pub max_stream_bytes: Option<u64>,
    #[serde(default)]
    pub max_event_bytes: Option<u64>,
    /// The pool config's cooling overrides, per route here.
    #[serde(default)]
    pub cooldown_ms: Option<u64>,
    #[serde(default)]
    pub transient_cooldown_ms: Option<u64>,
    /// The route's circuit breaker (off when absent).
    #[serde(default)]
    pub breaker: Option<crate::breaker::BreakerConfig>,
    /// What the model can serve and what it costs (its equivalence contract).
    #[serde(default)]
    pub model: Option<crate::capability::ModelFacts>,
    /// A provider outage in virtual time: until `until_ms` after `now`, every call gets
    /// `reply`; after it, `replies` are served as usual.
    #[serde(default)]
    pub outage: Option<OutageSpec>,
    pub replies: Vec<Reply>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutageSpec {
    pub until_ms: u64,
    pub reply: Reply,
}

/// The request chaos sends, when a scenario needs more than the default prompt.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestShape {
    /// The prompt size the router plans with (the body stays small).
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// A JSON Schema the answer must satisfy.
    #[serde(default)]
    pub json_schema: Option<serde_json::Value>,
    /// The workflow name recorded on every attempt.
    #[serde(default)]
    pub workflow: Option<String>,
}

/// One reply of a mock route.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A valid success for the route's wire and path.
    Ok { text: String, headers: Headers },
    /// A status with a JSON or raw body.
    Status {
        status: u16,
        headers: Headers,
        body: Body,
    },
    /// Waits, then replies.
    Delay { ms: u64, then: Box<Reply> },
    /// A 200 SSE stream.
    Stream(StreamReply),
    /// The connection is closed before any response.
    Reset,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    Json(serde_json::Value),
    Raw(String),
    Empty,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StreamReply {
    pub items: Vec<StreamItem>,
    pub end: StreamEnd,
    pub first_token_ms: u64,
    pub gap_ms: u64,
    pub headers: Headers,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum StreamItem {
    Text(String),
    Raw { raw: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamEnd {
    #[default]
    Done,
    NoDone,
    Eof,
    Reset,
    Stall,
    Error,
}

/// Header names (lowercase) and values, in file order.
pub type Headers = Vec<(String, String)>;

/// The YAML shape of a reply: every form's fields, checked for a legal combination.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReply {
    ok: Option<String>,
    status: Option<u16>,
    headers: Option<BTreeMap<String, Scalar>>,
    json: Option<serde_json::Value>,
    body: Option<String>,
    delay_ms: Option<u64>,
    then: Option<Box<RawReply>>,
    stream: Option<Vec<StreamItem>>,
    end: Option<StreamEnd>,
    first_token_ms: Option<u64>,
    gap_ms: Option<u64>,
    reset: Option<bool>,
}

/// A header value: YAML may write `retry-after: 20` without quotes.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Scalar {
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    fn into_string(self) -> String {
        match self {
            Scalar::Text(s) => s,
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

impl<'de> Deserialize<'de> for Reply {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawReply::deserialize(d)?;
        Reply::try_from(raw).map_err(serde::de::Error::custom)
    }
}

impl TryFrom<RawReply> for Reply {
    type Error = String;

    fn try_from(r: RawReply) -> Result<Self, String> {
        let headers = match r.headers {
            Some(map) => {
                let mut out = Vec::new();
                for (k, v) in map {
                    let v = v.into_string();
                    if !valid_header(&k, &v) {
                        return Err(format!(
                            "header `{k}` is not a valid HTTP header name and value"
                        ));
                    }
                    out.push((k.to_ascii_lowercase(), v));
                }
                out
            }
            None => Vec::new(),
        };
        let forms = [
            r.ok.is_some(),
            r.status.is_some(),
            r.delay_ms.is_some(),
            r.stream.is_some(),
            r.reset.is_some(),
        ];
        if forms.iter().filter(|f| **f).count() != 1 {
            return Err(
                "a reply is exactly one of `ok`, `status`, `delay_ms` (with `then`), `stream`, `reset`"
                    .into(),
            );
        }
        let stray = |what: &str, present: bool| -> Result<(), String> {
            if present {
                Err(format!("`{what}` does not belong to this form of reply"))
            } else {
                Ok(())
            }
        };
        if let Some(text) = r.ok {
            stray("json", r.json.is_some())?;
            stray("body", r.body.is_some())?;
            stray("then", r.then.is_some())?;
            stray("end", r.end.is_some())?;
            return Ok(Reply::Ok { text, headers });
        }
        if let Some(status) = r.status {
            if !(100..=599).contains(&status) {
                return Err(format!("status {status} is not an HTTP status (100-599)"));
            }
            stray("then", r.then.is_some())?;
            stray("end", r.end.is_some())?;
            let body = match (r.json, r.body) {
                (Some(_), Some(_)) => return Err("give `json` or `body`, not both".into()),
                (Some(j), None) => Body::Json(j),
                (None, Some(b)) => Body::Raw(b),
                (None, None) => Body::Empty,
            };
            return Ok(Reply::Status {
                status,
                headers,
                body,
            });
        }
        if let Some(ms) = r.delay_ms {
            let then = r.then.ok_or("`delay_ms` needs `then: <another reply>`")?;
            stray("headers", !headers.is_empty())?;
            return Ok(Reply::Delay {
                ms,
                then: Box::new(Reply::try_from(*then)?),
            });
        }
        if let Some(items) = r.stream {
            stray("json", r.json.is_some())?;
            stray("body", r.body.is_some())?;
            return Ok(Reply::Stream(StreamReply {
                items,
                end: r.end.unwrap_or_default(),
                first_token_ms: r.first_token_ms.unwrap_or(0),
                gap_ms: r.gap_ms.unwrap_or(0),
                headers,
            }));
        }
        match r.reset {
            Some(true) => Ok(Reply::Reset),
            _ => Err("`reset` must be `true`".into()),
        }
    }
}

fn valid_header(name: &str, value: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_!#$%&'*+.^`|~".contains(&b))
        && !value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0)
}

/// A health preset: `retired`, `cooling 30000` (ms from `now`), or `ready`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    Ready,
    Cooling(u64),
    Retired,
}

impl<'de> Deserialize<'de> for Preset {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let words: Vec<&str> = s.split_whitespace().collect();
        match words.as_slice() {
            ["ready"] => Ok(Preset::Ready),
            ["retired"] => Ok(Preset::Retired),
            ["cooling", ms] => ms.parse().map(Preset::Cooling).map_err(|_| {
                serde::de::Error::custom(format!(
                    "`cooling {ms}`: the milliseconds must be a whole number"
                ))
            }),
            _ => Err(serde::de::Error::custom(format!(
                "state `{s}` is not `ready`, `retired` or `cooling <ms>`"
            ))),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestSpec {
    #[serde(default)]
    pub after_ms: u64,
    #[serde(default)]
    pub session: Option<String>,
    #[serde(default)]
    pub priority: Option<Priority>,
    pub expect: Expect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    Interactive,
    Background,
    Retry,
    Speculative,
}

/// What one request must have done. Absent fields are not compared.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub outcome: Outcome,
    #[serde(default, deserialize_with = "present")]
    pub reason: Option<Option<Reason>>,
    #[serde(default, deserialize_with = "present")]
    pub served_by: Option<Option<Route>>,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub attempts: Option<Vec<AttemptExpect>>,
    #[serde(default)]
    pub skipped: Option<Vec<Route>>,
    #[serde(default)]
    pub health: Option<BTreeMap<Route, HealthExpect>>,
    #[serde(default)]
    pub upstream_calls: Option<BTreeMap<Route, u64>>,
    #[serde(default)]
    pub waits_ms: Option<Vec<u64>>,
}

/// Tells "absent" (outer `None`) from an explicit `null` (`Some(None)`).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptExpect {
    #[serde(default)]
    pub route: Option<Route>,
    #[serde(default, deserialize_with = "present")]
    pub status: Option<Option<u16>>,
    #[serde(default)]
    pub class: Option<Class>,
    #[serde(default)]
    pub action: Option<Action>,
    #[serde(default, deserialize_with = "present")]
    pub wait_ms: Option<Option<u64>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthExpect {
    pub state: HealthState,
    /// `until - now`, exact (cooling only).
    #[serde(default)]
    pub ms: Option<i64>,
    #[serde(default)]
    pub reason: Option<String>,
}

impl ChainEntry {
    /// Every number of this route that has a range (`limits::check_fields`), the same
    /// as a pool config provider's.
    pub fn limit_fields(&self) -> Vec<(&'static str, Option<u64>, crate::limits::Kind)> {
        use crate::limits::Kind::{Bytes, Deadline, Wait};
        let mut fields = vec![
            ("timeout_ms", self.timeout_ms, Deadline),
            (
                "first_token_timeout_ms",
                self.first_token_timeout_ms,
                Deadline,
            ),
            ("stream_idle_ms", self.stream_idle_ms, Deadline),
            ("stream_max_ms", self.stream_max_ms, Deadline),
            ("max_stream_bytes", self.max_stream_bytes, Bytes),
            ("max_event_bytes", self.max_event_bytes, Bytes),
            ("cooldown_ms", self.cooldown_ms, Wait),
            ("transient_cooldown_ms", self.transient_cooldown_ms, Wait),
        ];
        fields.extend(crate::limits::breaker_fields(self.breaker.as_ref()));
        fields
    }
}

impl Scenario {
    /// Reads, parses and validates one scenario file.
    pub fn load(file: &Path) -> Result<Scenario, YamlError> {
        let mut s: Scenario = crate::yaml::load(file)?;
        s.file = file.to_path_buf();
        s.validate()?;
        Ok(s)
    }

    pub fn parse(file: &Path, text: &str) -> Result<Scenario, YamlError> {
        let mut s: Scenario = crate::yaml::parse(file, text)?;
        s.file = file.to_path_buf();
        s.validate()?;
        Ok(s)
    }

    /// The virtual clock's start.
    pub fn start_ms(&self) -> UnixMs {
        let text = self.now.as_deref().unwrap_or(DEFAULT_NOW);
        crate::hint::parse_instant(text).expect("validated in load")
    }

    /// The requests to send, with their expectations.
    pub fn request_specs(&self) -> Vec<RequestSpec> {
        match (&self.expect, &self.requests) {
            (Some(e), None) => vec![RequestSpec {
                after_ms: 0,
                session: None,
                priority: None,
                expect: e.clone(),
            }],
            (_, Some(list)) => list.clone(),
            (None, None) => Vec::new(),
        }
    }

    fn validate(&self) -> Result<(), YamlError> {
        let err = |field: &str, msg: String| {
            Err(YamlError::new(&self.file, msg).at_field(field.to_string()))
        };
        if self.name.trim().is_empty() {
            return err("name", "a scenario needs a non-empty `name`".into());
        }
        if let Some(now) = &self.now {
            if crate::hint::parse_instant(now).is_none() {
                return err(
                    "now",
                    format!("`{now}` is not an RFC 3339 instant such as 2026-11-30T12:00:00Z"),
                );
            }
        }
        if self.chain.is_empty() {
            return err("chain", "the chain needs at least one route".into());
        }
        let mut routes = BTreeSet::new();
        let mut wires: BTreeMap<&str, Wire> = BTreeMap::new();
        for (i, entry) in self.chain.iter().enumerate() {
            let field = format!("chain[{i}]");
            if !routes.insert(entry.route.clone()) {
                return err(
                    &field,
                    format!("route `{}` appears twice in the chain", entry.route),
                );
            }
            if let Err((f, why)) = crate::limits::check_fields(&entry.limit_fields()) {
                return err(&format!("{field}.{f}"), why);
            }
            let provider = entry.route.provider();
            if !provider
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            {
                return err(
                    &field,
                    format!("provider `{provider}` must be letters, digits, `-`, `_` or `.`"),
                );
            }
            if let Some(w) = wires.insert(provider, entry.wire) {
                if w != entry.wire {
                    return err(
                        &field,
                        format!(
                            "provider `{provider}` is given two wires ({w} and {})",
                            entry.wire
                        ),
                    );
                }
            }
            let wire_serves_path = match self.path {
                CallPath::Chat | CallPath::Stream => true,
                CallPath::Embed => entry.wire != Wire::Anthropic,
                CallPath::Rerank => entry.wire == Wire::OpenAi,
            };
            if !wire_serves_path {
                return err(
                    &format!("{field}.wire"),
                    format!(
                        "the {} wire has no {} endpoint (path `{}`)",
                        entry.wire,
                        match self.path {
                            CallPath::Embed => "embeddings",
                            _ => "rerank",
                        },
                        self.path
                    ),
                );
            }
            if entry.replies.is_empty() {
                return err(
                    &format!("{field}.replies"),
                    "a route needs at least one reply".into(),
                );
            }
            for (name, v) in [
                ("timeout_ms", entry.timeout_ms),
                ("first_token_timeout_ms", entry.first_token_timeout_ms),
                ("stream_idle_ms", entry.stream_idle_ms),
            ] {
                if v == Some(0) {
                    return err(
                        &format!("{field}.{name}"),
                        "a deadline of 0 ms can never be met".into(),
                    );
                }
            }
        }
        let known = |r: &Route, field: String| -> Result<(), YamlError> {
            if routes.contains(r) {
                return Ok(());
            }
            let nearest = crate::yaml::nearest(r.as_str(), routes.iter().map(|r| r.as_str()));
            let hint = nearest
                .map(|n| format!("; did you mean `{n}`?"))
                .unwrap_or_default();
            Err(
                YamlError::new(&self.file, format!("route `{r}` is not in the chain{hint}"))
                    .at_field(field),
            )
        };
        for (r, preset) in &self.state {
            known(r, format!("state.{r}"))?;
            if let Preset::Cooling(ms) = preset {
                if let Err(why) = crate::limits::check(crate::limits::Kind::Wait, *ms) {
                    return err(&format!("state.{r}"), format!("`cooling {ms}`: {why}"));
                }
            }
        }
        if let Some(p) = &self.policy {
            if let Err((f, why)) = crate::limits::check_fields(&crate::limits::policy_fields(p)) {
                return err(&format!("policy.{f}"), why);
            }
        }
        if let Some(list) = self
            .policy
            .as_ref()
            .and_then(|p| p.fallback_routes.as_ref())
        {
            for r in list {
                known(r, "policy.fallback_routes".into())?;
            }
        }
        let specs = match (&self.expect, &self.requests) {
            (Some(_), Some(_)) => {
                return err("requests", "give `expect` or `requests`, not both".into())
            }
            (None, None) => {
                return err("expect", "a scenario needs `expect` (or `requests`)".into())
            }
            (None, Some(r)) if r.is_empty() => {
                return err("requests", "`requests` is empty".into())
            }
            _ => self.request_specs(),
        };
        for (i, spec) in specs.iter().enumerate() {
            let at = if self.requests.is_some() {
                format!("requests[{i}].expect")
            } else {
                "expect".to_string()
            };
            let e = &spec.expect;
            if let Some(Some(r)) = &e.served_by {
                known(r, format!("{at}.served_by"))?;
            }
            if e.reason.as_ref().is_some_and(|r| r.is_some()) && e.outcome != Outcome::Failed {
                return err(
                    &format!("{at}.reason"),
                    "`reason` goes only with `outcome: failed`".into(),
                );
            }
            for (j, a) in e.attempts.iter().flatten().enumerate() {
                if let Some(r) = &a.route {
                    known(r, format!("{at}.attempts[{j}].route"))?;
                }
            }
            for r in e.skipped.iter().flatten() {
                known(r, format!("{at}.skipped"))?;
            }
            for r in e.health.iter().flat_map(|h| h.keys()) {
                known(r, format!("{at}.health.{r}"))?;
            }
            for r in e.upstream_calls.iter().flat_map(|h| h.keys()) {
                known(r, format!("{at}.upstream_calls.{r}"))?;
            }
        }
        Ok(())
    }
}

/// Every scenario file under `paths`: files as given, directories searched
/// recursively for `*.yaml` / `*.yml`, sorted for a stable order.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>, YamlError> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk(p, &mut out)
                .map_err(|e| YamlError::new(p, format!("cannot read directory: {e}")))?;
        } else if p.is_file() {
            out.push(p.clone());
        } else {
            return Err(YamlError::new(p, "no such file or directory"));
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out)?;
        } else if matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")) {
            out.push(p);
        }
    }
    Ok(())
}
