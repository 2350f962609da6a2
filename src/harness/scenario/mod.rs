//! The chaos scenario file (spec/scenario-format.md, v1): parsed strictly (an unknown
//! field is an error, so a typo cannot silently pass a scenario) and validated before
//! anything runs. A scenario is a fault script ([`script`]: the chain, what each mock
//! replies, health presets) and what must then have happened ([`expect`]).

mod expect;
pub mod ingress;
mod locate;
mod script;

pub use expect::{AttemptExpect, Expect, HealthExpect};
pub use script::{
    Body, ChainEntry, OutageSpec, Preset, Received, Reply, StreamEnd, StreamItem, StreamReply,
    UsageSpec,
};

use crate::config::yaml::YamlError;
use crate::core::clock::UnixMs;
use crate::core::vocab::{CallPath, Outcome, Route, Wire};
use crate::policy::card::Policy;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The virtual clock's start when a scenario names none.
pub const DEFAULT_NOW: &str = "2026-01-01T00:00:00Z";

/// The most copies a scenario may send, over all its `repeat`s: a burst large enough for
/// any bucket a test states, small enough that a typo (`repeat: 4000000000`) is an
/// error, not an allocation that aborts the process.
pub const MAX_COPIES: u64 = 100_000;

/// The longest one `after_ms` may be (100 years): beyond it the virtual clock would
/// saturate and time would silently stop passing.
pub const MAX_AFTER_MS: u64 = 100 * 365 * 24 * 60 * 60 * 1000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub about: Option<String>,
    #[serde(default)]
    pub path: CallPath,
    /// The API the client speaks: `chat` (default) or `responses`.
    #[serde(default)]
    pub ingress: ingress::Ingress,
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
    /// v2: more tiers (a card's `degrade_tier`), shaped like `chain`.
    #[serde(default)]
    pub tiers: BTreeMap<String, Vec<ChainEntry>>,
    /// v2: admission buckets, keyed by a route or a provider, as in the pool config.
    #[serde(default)]
    pub limits: BTreeMap<String, crate::admission::bucket::Limits>,
    #[serde(default)]
    pub headroom: Option<f64>,
    #[serde(default)]
    pub interactive_floor: Option<f64>,
    /// Where it was loaded from (not a YAML field).
    #[serde(skip)]
    pub file: PathBuf,
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
    /// The cap under OpenAI's newer name: sent as named on a wire that has both.
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    /// A JSON Schema the answer must satisfy.
    #[serde(default)]
    pub json_schema: Option<serde_json::Value>,
    /// The workflow name recorded on every attempt.
    #[serde(default)]
    pub workflow: Option<String>,
    /// The conversation, as OpenAI chat `messages` (content strings or parts: text,
    /// `image_url` with an https or `data:` URL, `file` with `file_data`); the default
    /// prompt when absent.
    #[serde(default)]
    pub messages: Option<Vec<serde_json::Value>>,
    /// `ingress: responses`: the Responses `input` (a string or items).
    #[serde(default)]
    pub input: Option<serde_json::Value>,
    /// `ingress: responses`: the Responses `instructions`.
    #[serde(default)]
    pub instructions: Option<String>,
    /// Tools offered: `{name, description, parameters}`.
    #[serde(default)]
    pub tools: Vec<ToolShape>,
    #[serde(default)]
    pub n: Option<u32>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// `low`, `medium` or `high`.
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub top_k: Option<u32>,
    /// A string or a list of strings.
    #[serde(default)]
    pub stop: Option<serde_json::Value>,
    /// `auto`, `none`, `required`, or `{type: function, function: {name}}`.
    #[serde(default)]
    pub tool_choice: Option<serde_json::Value>,
    /// `{type: json_object}` or `{type: json_schema, json_schema: {name, schema, strict}}`.
    #[serde(default)]
    pub response_format: Option<serde_json::Value>,
    /// String values, as OpenAI's `metadata` takes: YAML would read `1` or `true` into
    /// a string quietly, and the route would get a value the scenario never wrote.
    #[serde(default, deserialize_with = "string_values")]
    pub metadata: BTreeMap<String, String>,
    /// Other client fields, which the canonical request does not hold (`logprobs`,
    /// `presence_penalty`, ...): a route of another wire than the client's cannot carry
    /// them (spec/fidelity.md §3). Semantic or advisory as the gateway judges them.
    #[serde(default)]
    pub fields: BTreeMap<String, serde_json::Value>,
}

/// The message keys and content part types a scenario's `messages` may hold (OpenAI
/// chat's): a typo is an error, not a message with its content silently missing.
fn check_messages(messages: &[serde_json::Value]) -> Result<(), String> {
    const KEYS: &[&str] = &[
        "role",
        "content",
        "name",
        "tool_calls",
        "tool_call_id",
        "refusal",
    ];
    const PARTS: &[&str] = &["text", "image_url", "file", "input_audio", "refusal"];
    for (i, m) in messages.iter().enumerate() {
        let Some(o) = m.as_object() else {
            return Err(format!("messages[{i}] must be a mapping"));
        };
        if let Some(k) = o.keys().find(|k| !KEYS.contains(&k.as_str())) {
            let hint = crate::core::suggest::nearest(k, KEYS.iter().copied())
                .map(|n| format!(" (did you mean `{n}`?)"))
                .unwrap_or_default();
            return Err(format!(
                "messages[{i}].{k} is not a message field{hint}; a message has {}",
                KEYS.join(", ")
            ));
        }
        let Some(parts) = o.get("content").and_then(|c| c.as_array()) else {
            continue;
        };
        for (j, p) in parts.iter().enumerate() {
            let kind = p.get("type").and_then(|t| t.as_str()).unwrap_or("");
            if !PARTS.contains(&kind) {
                let hint = crate::core::suggest::nearest(kind, PARTS.iter().copied())
                    .map(|n| format!(" (did you mean `{n}`?)"))
                    .unwrap_or_default();
                return Err(format!(
                    "messages[{i}].content[{j}].type `{kind}` is not a part type{hint}; one of {}",
                    PARTS.join(", ")
                ));
            }
            if let Some(url) = p.pointer("/image_url/url").and_then(|u| u.as_str()) {
                if !(url.starts_with("https://") || url.starts_with("data:")) {
                    return Err(format!(
                        "messages[{i}].content[{j}].image_url.url must be an https or `data:` URL"
                    ));
                }
                // A data URL's payload is what the route receives: base64, whole.
                if let Some(rest) = url.strip_prefix("data:") {
                    use base64::Engine;
                    let payload = rest
                        .split_once(',')
                        .filter(|(meta, _)| meta.ends_with(";base64"))
                        .map(|(_, data)| data);
                    let valid = payload.is_some_and(|d| {
                        base64::engine::general_purpose::STANDARD.decode(d).is_ok()
                    });
                    if !valid {
                        return Err(format!(
                            "messages[{i}].content[{j}].image_url.url must be `data:MIME;base64,` and base64"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// A map whose values must each be a string in the file (quoted where YAML would read
/// a number or a boolean).
fn string_values<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    let raw = BTreeMap::<String, serde_yaml::Value>::deserialize(d)?;
    raw.into_iter()
        .map(|(k, v)| match v {
            serde_yaml::Value::String(s) => Ok((k, s)),
            _ => Err(serde::de::Error::custom(format!(
                "metadata.{k} must be a string (quote it)"
            ))),
        })
        .collect()
}

/// A tool a scenario's request offers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolShape {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub parameters: Option<serde_json::Value>,
    /// The call's arguments must satisfy `parameters` (checked where a wire cannot).
    #[serde(default)]
    pub strict: bool,
}

impl RequestShape {
    /// The chat request this shape describes, on top of `base` (the default prompt).
    pub fn chat(
        &self,
        mut base: crate::core::request::ChatRequest,
    ) -> Result<crate::core::request::ChatRequest, String> {
        use crate::core::request::{Effort, Reasoning, Unmapped};
        if self.input.is_some() || self.instructions.is_some() {
            return Err(
                "`input` and `instructions` are the Responses API's: set `ingress: responses`"
                    .into(),
            );
        }
        if let Some(m) = &self.messages {
            if m.is_empty() {
                return Err("`messages` must not be empty".into());
            }
            check_messages(m)?;
            base.conversation =
                crate::wire::openai::history::from_openai_messages(m).map_err(|e| e.to_string())?;
            base.conversation
                .validate()
                .map_err(|e| format!("messages: {e}"))?;
            // The default prompt's cap of 16 goes with it: a conversation of the
            // scenario's own is sent with the cap it sets, or none.
            base.max_tokens = None;
        }
        base.tools = self.tools.iter().map(ToolShape::spec).collect();
        base.token_estimate = self.prompt_tokens;
        match (self.max_tokens, self.max_completion_tokens) {
            (Some(_), Some(_)) => {
                return Err("give `max_tokens` or `max_completion_tokens`, not both".into())
            }
            (Some(n), None) => {
                base.max_tokens = Some(n);
                base.max_tokens_name = Some("max_tokens");
            }
            (None, Some(n)) => {
                base.max_tokens = Some(n);
                base.max_tokens_name = Some("max_completion_tokens");
            }
            (None, None) => {}
        }
        base.json_schema = self.json_schema.clone();
        if let Some(rf) = &self.response_format {
            if self.json_schema.is_some() {
                return Err("give `json_schema` or `response_format`, not both".into());
            }
            let f = crate::wire::openai::response_format(rf)?;
            (base.json_schema, base.schema_name, base.schema_strict) = (f.schema, f.name, f.strict);
        }
        base.tool_choice = self
            .tool_choice
            .as_ref()
            .map(crate::wire::openai::tool_choice)
            .transpose()?;
        base.sampling.top_p = self.top_p;
        base.sampling.top_k = self.top_k;
        base.sampling.stop = match &self.stop {
            None => Vec::new(),
            Some(serde_json::Value::String(s)) => vec![s.clone()],
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or("`stop` must be a string or a list of strings")?,
            Some(_) => return Err("`stop` must be a string or a list of strings".into()),
        };
        base.metadata = self.metadata.clone();
        base.n = self.n;
        base.parallel_tool_calls = self.parallel_tool_calls;
        base.reasoning = match &self.reasoning_effort {
            None => None,
            Some(w) => Some(Reasoning::Effort(Effort::parse(w).ok_or_else(|| {
                format!("`reasoning_effort` `{w}` is not minimal, low, medium or high")
            })?)),
        };
        base.sampling.temperature = self.temperature;
        base.sampling.seed = self.seed;
        base.user = self.user.clone();
        // A field the request maps itself is set above, never twice (a `model` here
        // would be removed from every body sent).
        if let Some(k) = self
            .fields
            .keys()
            .find(|k| Unmapped::OPENAI_MAPPED.contains(&k.as_str()))
        {
            return Err(format!(
                "`fields.{k}` is a field the request maps itself: set it as `request.{k}`{}",
                if matches!(
                    k.as_str(),
                    "model" | "stream" | "stream_options" | "messages" | "tools"
                ) {
                    " (`model` and `stream` come from the scenario's tier and path)"
                } else {
                    ""
                }
            ));
        }
        base.unmapped = self
            .fields
            .iter()
            .map(|(k, v)| Unmapped::openai(k, v))
            .collect();
        Ok(base)
    }

    /// The output cap the request declares, under either name.
    pub fn cap(&self) -> Option<u32> {
        self.max_tokens.or(self.max_completion_tokens)
    }

    /// Fields of `request:` the Responses API has no place for.
    pub fn responses_unsupported(&self) -> Option<&'static str> {
        if self.messages.is_some() {
            Some("messages (give `input` and `instructions`)")
        } else if self.n.is_some() {
            Some("n")
        } else if self.seed.is_some() {
            Some("seed")
        } else if self.max_completion_tokens.is_some() {
            Some("max_completion_tokens (give `max_tokens`: it is sent as `max_output_tokens`)")
        } else if self.top_k.is_some() {
            Some("top_k")
        } else if self.stop.is_some() {
            Some("stop")
        } else if self.top_p.is_some()
            || self.tool_choice.is_some()
            || self.response_format.is_some()
            || !self.metadata.is_empty()
        {
            Some("top_p, tool_choice, response_format or metadata (give them in `fields` as the Responses API spells them)")
        } else {
            None
        }
    }
}

impl ToolShape {
    /// The tool as the canonical request offers it (no `parameters`: no arguments).
    pub fn spec(&self) -> crate::core::conversation::ToolSpec {
        crate::core::conversation::ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: self
                .parameters
                .clone()
                .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
            strict: self.strict,
        }
    }
}

/// The Responses body a request of the scenario sends: `model` (the tier's name),
/// the entry's `input` (else the scenario's, else the default prompt), `instructions`,
/// `stream`, tools, the output cap, the JSON schema, sampling, reasoning, `user`, the
/// other `fields` as the client's own, and `previous_response_id` when it continues one.
pub fn responses_body(
    model: &str,
    shape: Option<&RequestShape>,
    spec: &RequestSpec,
    stream: bool,
    max_output_tokens: Option<u32>,
    previous: Option<&str>,
) -> Value {
    let mut o = Map::new();
    o.insert("model".into(), json!(model));
    let input = spec
        .input
        .clone()
        .or_else(|| shape.and_then(|s| s.input.clone()))
        .unwrap_or_else(|| json!(ingress::DEFAULT_INPUT));
    o.insert("input".into(), input);
    if let Some(p) = previous {
        o.insert("previous_response_id".into(), json!(p));
    }
    if stream {
        o.insert("stream".into(), json!(true));
    }
    if let Some(n) = max_output_tokens {
        o.insert("max_output_tokens".into(), json!(n));
    }
    let Some(s) = shape else {
        return Value::Object(o);
    };
    if let Some(i) = &s.instructions {
        o.insert("instructions".into(), json!(i));
    }
    if !s.tools.is_empty() {
        let tools: Vec<_> = s.tools.iter().map(ToolShape::spec).collect();
        o.insert("tools".into(), crate::wire::responses::items::tools(&tools));
    }
    if let Some(p) = s.parallel_tool_calls {
        o.insert("parallel_tool_calls".into(), json!(p));
    }
    if let Some(schema) = &s.json_schema {
        o.insert(
            "text".into(),
            json!({"format": {"type": "json_schema", "name": "answer", "schema": schema}}),
        );
    }
    if let Some(t) = s.temperature {
        o.insert("temperature".into(), json!(t));
    }
    if let Some(e) = &s.reasoning_effort {
        o.insert("reasoning".into(), json!({ "effort": e }));
    }
    if let Some(u) = &s.user {
        o.insert("user".into(), json!(u));
    }
    for (k, v) in &s.fields {
        o.entry(k.clone()).or_insert_with(|| v.clone());
    }
    Value::Object(o)
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
    /// v2: this many copies of the request (one after another, or all at once).
    #[serde(default)]
    pub repeat: Option<u32>,
    /// v2: the copies are in flight at once.
    #[serde(default)]
    pub concurrent: bool,
    /// v2: the request's input-token estimate.
    #[serde(default)]
    pub input_tokens: Option<u64>,
    /// v2: the request's declared maximum output.
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    /// What each copy must have done.
    #[serde(default)]
    pub expect: Option<Expect>,
    /// v2, with `repeat`: how many copies end in each outcome.
    #[serde(default)]
    pub expect_counts: Option<BTreeMap<Outcome, u64>>,
    /// After the last copy: each route's upstream calls so far lie in `[least, most]`
    /// (weights honoured within a stated tolerance).
    #[serde(default)]
    pub upstream_calls_within: Option<BTreeMap<Route, [u64; 2]>>,
    /// `ingress: responses`: this turn's `input` (a string or items), in place of the
    /// scenario's.
    #[serde(default)]
    pub input: Option<serde_json::Value>,
    /// `ingress: responses`: the turn continues the previous request's response
    /// (`previous_response_id`).
    #[serde(default, rename = "continue")]
    pub continues: bool,
}

impl RequestSpec {
    /// How many copies of the request are sent.
    pub fn copies(&self) -> u32 {
        self.repeat.unwrap_or(1)
    }
}

pub use crate::core::vocab::Priority;

impl Scenario {
    /// Reads, parses and validates one scenario file.
    pub fn load(file: &Path) -> Result<Scenario, YamlError> {
        let text = crate::config::yaml::read_text(file)?;
        Scenario::parse(file, &text)
    }

    pub fn parse(file: &Path, text: &str) -> Result<Scenario, YamlError> {
        let mut s: Scenario = crate::config::yaml::parse(file, text).map_err(not_a_scenario)?;
        s.file = file.to_path_buf();
        s.validate().map_err(|e| at_line(e, text))?;
        Ok(s)
    }

    /// Every route entry: the chain's, then each extra tier's, with its field path.
    pub fn entries(&self) -> impl Iterator<Item = (String, &ChainEntry)> {
        let chain = self
            .chain
            .iter()
            .enumerate()
            .map(|(i, e)| (format!("chain[{i}]"), e));
        let tiers = self.tiers.iter().flat_map(|(name, list)| {
            list.iter()
                .enumerate()
                .map(move |(i, e)| (format!("tiers.{name}[{i}]"), e))
        });
        chain.chain(tiers)
    }

    /// The admission set-up of the scenario's `limits:`, `headroom:` and
    /// `interactive_floor:`, with the defaults of decisions.md.
    pub fn admission(&self) -> crate::admission::buckets::AdmissionConfig {
        crate::admission::buckets::AdmissionConfig::written(
            &self.limits,
            self.headroom,
            self.interactive_floor,
        )
    }

    /// The virtual clock's start.
    pub fn start_ms(&self) -> UnixMs {
        let text = self.now.as_deref().unwrap_or(DEFAULT_NOW);
        crate::classify::hint::parse_instant(text).expect("validated in load")
    }

    /// The requests to send, with their expectations.
    pub fn request_specs(&self) -> Vec<RequestSpec> {
        match (&self.expect, &self.requests) {
            (Some(e), None) => vec![RequestSpec {
                after_ms: 0,
                session: None,
                priority: None,
                repeat: None,
                concurrent: false,
                input_tokens: None,
                max_output_tokens: None,
                expect: Some(e.clone()),
                expect_counts: None,
                upstream_calls_within: None,
                input: None,
                continues: false,
            }],
            (_, Some(list)) => list.clone(),
            (None, None) => Vec::new(),
        }
    }

    /// `ingress: responses`: a chat or stream path, a request the Responses API can
    /// say, and `continue` only after a request.
    fn validate_responses(&self) -> Result<(), YamlError> {
        let err = |field: &str, msg: String| {
            Err(YamlError::new(&self.file, msg).at_field(field.to_string()))
        };
        if !matches!(self.path, CallPath::Chat | CallPath::Stream) {
            return err(
                "ingress",
                format!(
                    "the Responses API has no `{}` path: use chat or stream",
                    self.path
                ),
            );
        }
        if let Some(f) = self
            .request
            .as_ref()
            .and_then(RequestShape::responses_unsupported)
        {
            return err(
                "request",
                format!("`{f}` has no place in a Responses request"),
            );
        }
        for (i, spec) in self.request_specs().iter().enumerate() {
            if i == 0 && spec.continues {
                return err(
                    "requests[0].continue",
                    "the first request has no response to continue".into(),
                );
            }
            let body = responses_body(
                &self.name,
                self.request.as_ref(),
                spec,
                self.path == CallPath::Stream,
                Some(16),
                None,
            );
            let parsed = serde_json::to_vec(&body)
                .map_err(|e| e.to_string())
                .and_then(|b| crate::wire::responses::request::parse(&b))
                .and_then(|b| crate::wire::responses::request::chat_request(&b, &[]).map(|_| ()));
            if let Err(e) = parsed {
                let field = if self.requests.is_some() {
                    format!("requests[{i}]")
                } else {
                    "request".into()
                };
                return err(&field, format!("the Responses request is not usable: {e}"));
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), YamlError> {
        let err = |field: &str, msg: String| {
            Err(YamlError::new(&self.file, msg).at_field(field.to_string()))
        };
        if self.name.trim().is_empty() {
            return err("name", "a scenario needs a non-empty `name`".into());
        }
        if let Some(now) = &self.now {
            if crate::classify::hint::parse_instant(now).is_none() {
                return err(
                    "now",
                    format!("`{now}` is not an RFC 3339 instant such as 2026-11-30T12:00:00Z"),
                );
            }
        }
        if self.chain.is_empty() {
            return err("chain", "the chain needs at least one route".into());
        }
        match self.ingress {
            ingress::Ingress::Chat => {
                if let Some(shape) = &self.request {
                    let base = crate::core::request::ChatRequest::user("", 16);
                    if let Err(e) = shape.chat(base) {
                        return err("request", format!("the request is not usable: {e}"));
                    }
                }
                if let Some(i) = self
                    .requests
                    .iter()
                    .flatten()
                    .position(|r| r.input.is_some() || r.continues)
                {
                    return err(
                        &format!("requests[{i}]"),
                        "`input` and `continue` are the Responses API's: set `ingress: responses`"
                            .into(),
                    );
                }
            }
            ingress::Ingress::Responses => self.validate_responses()?,
        }
        let mut routes = BTreeSet::new();
        let mut wires: BTreeMap<&str, Wire> = BTreeMap::new();
        for (name, list) in &self.tiers {
            if list.is_empty() {
                return err(
                    &format!("tiers.{name}"),
                    "a tier needs at least one route".into(),
                );
            }
        }
        check_groups("chain", &self.chain).map_err(|(f, m)| self.at(f, m))?;
        for (name, list) in &self.tiers {
            check_groups(&format!("tiers.{name}"), list).map_err(|(f, m)| self.at(f, m))?;
        }
        for (field, entry) in self.entries() {
            let field = field.as_str();
            if !routes.insert(entry.route.clone()) {
                return err(
                    field,
                    format!(
                        "route `{}` appears twice in the scenario's chain and tiers",
                        entry.route
                    ),
                );
            }
            if let Err((f, why)) =
                crate::core::limits::check_fields(&entry.settings().limit_fields())
            {
                return err(&format!("{field}.{f}"), why);
            }
            let provider = entry.route.provider();
            if !provider
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            {
                return err(
                    field,
                    format!("provider `{provider}` must be letters, digits, `-`, `_` or `.`"),
                );
            }
            if let Some(w) = wires.insert(provider, entry.wire) {
                if w != entry.wire {
                    return err(
                        field,
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
                CallPath::Rerank => matches!(entry.wire, Wire::OpenAi | Wire::Responses),
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
            let nearest =
                crate::core::suggest::nearest(r.as_str(), routes.iter().map(|r| r.as_str()));
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
                if let Err(why) = crate::core::limits::check(crate::core::limits::Kind::Wait, *ms) {
                    return err(&format!("state.{r}"), format!("`cooling {ms}`: {why}"));
                }
            }
        }
        if let Some(p) = &self.policy {
            if let Err((f, why)) =
                crate::core::limits::check_fields(&crate::policy::card::policy_fields(p))
            {
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
        for (name, list) in [
            (
                "policy.overflow_routes",
                self.policy
                    .as_ref()
                    .and_then(|p| p.overflow_routes.as_ref()),
            ),
            (
                "policy.content_policy_routes",
                self.policy
                    .as_ref()
                    .and_then(|p| p.content_policy_routes.as_ref()),
            ),
        ] {
            for r in list.into_iter().flatten() {
                known(r, name.into())?;
            }
        }
        let providers: BTreeSet<&str> = routes.iter().map(|r| r.provider()).collect();
        for (name, limits) in &self.limits {
            let field = format!("limits.{name}");
            let named = match Route::parse(name) {
                Ok(r) => routes.contains(&r),
                Err(_) => providers.contains(name.as_str()),
            };
            if !named {
                let names = routes
                    .iter()
                    .map(|r| r.as_str())
                    .chain(providers.iter().copied());
                let hint = crate::core::suggest::nearest(name, names)
                    .map(|n| format!("; did you mean `{n}`?"))
                    .unwrap_or_default();
                return err(
                    &field,
                    format!("`{name}` is neither a route nor a provider of the scenario{hint}"),
                );
            }
            if limits.contracts().next().is_none() {
                return err(&field, "name at least one of rpm, tpm, itpm, otpm".into());
            }
        }
        for (name, v) in [
            ("headroom", self.headroom),
            ("interactive_floor", self.interactive_floor),
        ] {
            if let Some(v) = v {
                let ok = if name == "headroom" {
                    v > 0.0 && v <= 1.0
                } else {
                    // A floor of 1 keeps every bucket for interactive traffic.
                    (0.0..=1.0).contains(&v)
                };
                if !ok {
                    let range = if name == "headroom" {
                        "(0, 1]"
                    } else {
                        "[0, 1]"
                    };
                    return err(name, format!("{v} is outside {range}"));
                }
            }
        }
        if let Some(t) = self.policy.as_ref().and_then(|p| p.degrade_tier.as_ref()) {
            if !self.tiers.contains_key(t) {
                let hint = crate::core::suggest::nearest(t, self.tiers.keys().map(String::as_str))
                    .map(|n| format!("; did you mean `{n}`?"))
                    .unwrap_or_default();
                return err(
                    "policy.degrade_tier",
                    format!("`{t}` is not a tier of `tiers:`{hint}"),
                );
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
        let mut copies: u64 = 0;
        for (i, spec) in specs.iter().enumerate() {
            let req = format!("requests[{i}]");
            let at = if self.requests.is_some() {
                format!("{req}.expect")
            } else {
                "expect".to_string()
            };
            if spec.repeat == Some(0) {
                return err(
                    &format!("{req}.repeat"),
                    "`repeat` must be at least 1".into(),
                );
            }
            copies += u64::from(spec.copies());
            if copies > MAX_COPIES {
                return err(
                    &format!("{req}.repeat"),
                    format!("a scenario sends at most {MAX_COPIES} requests in all (the limit)"),
                );
            }
            if spec.after_ms > MAX_AFTER_MS {
                return err(
                    &format!("{req}.after_ms"),
                    format!(
                        "{} is more than {MAX_AFTER_MS} ms (100 years, the limit)",
                        spec.after_ms
                    ),
                );
            }
            let e = match (&spec.expect, &spec.expect_counts) {
                (Some(e), None) => e,
                (None, Some(counts)) => {
                    let Some(n) = spec.repeat else {
                        return err(
                            &format!("{req}.expect_counts"),
                            "`expect_counts` goes with `repeat`".into(),
                        );
                    };
                    let total: u64 = counts.values().sum();
                    if total != n as u64 {
                        return err(
                            &format!("{req}.expect_counts"),
                            format!("the counts add up to {total}, not to `repeat: {n}`"),
                        );
                    }
                    continue;
                }
                (Some(_), Some(_)) => {
                    return err(&req, "give `expect` or `expect_counts`, not both".into())
                }
                (None, None) => {
                    return err(&req, "a request needs `expect` (or `expect_counts`)".into())
                }
            };
            if let Some(Some(r)) = &e.served_by {
                known(r, format!("{at}.served_by"))?;
            }
            if e.reason.as_ref().is_some_and(|r| r.is_some())
                && !matches!(e.outcome, Outcome::Failed | Outcome::Shed)
            {
                return err(
                    &format!("{at}.reason"),
                    "`reason` goes only with `outcome: failed` or `shed`".into(),
                );
            }
            for (name, dims) in e.buckets.iter().flatten() {
                if !self.limits.contains_key(name) {
                    return err(
                        &format!("{at}.buckets.{name}"),
                        format!("`{name}` is not a bucket of `limits:`"),
                    );
                }
                for dim in dims.keys() {
                    if crate::admission::bucket::Dimension::from_level_name(dim).is_none() {
                        return err(
                            &format!("{at}.buckets.{name}.{dim}"),
                            format!(
                                "`{dim}` is not a bucket level; use requests, tokens, input_tokens or output_tokens"
                            ),
                        );
                    }
                }
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
        for (i, spec) in specs.iter().enumerate() {
            for (r, [lo, hi]) in spec.upstream_calls_within.iter().flatten() {
                let field = format!("requests[{i}].upstream_calls_within.{r}");
                known(r, field.clone())?;
                if lo > hi {
                    return err(&field, format!("[{lo}, {hi}]: the least is above the most"));
                }
            }
        }
        Ok(())
    }

    fn at(&self, field: String, message: String) -> YamlError {
        YamlError::new(&self.file, message).at_field(field)
    }
}

/// The groups of one chain (`list`, at `field`): consecutive entries naming the same
/// `group:`; `weight` and `strategy` only on a member; weights on every member or on
/// none, each above zero; one strategy per group.
fn check_groups(field: &str, list: &[ChainEntry]) -> Result<(), (String, String)> {
    let mut closed: BTreeSet<&str> = BTreeSet::new();
    let mut open: Option<&str> = None;
    for (i, e) in list.iter().enumerate() {
        let at = |f: &str| format!("{field}[{i}].{f}");
        let Some(name) = e.group.as_deref() else {
            if e.weight.is_some() || e.strategy.is_some() {
                let f = if e.weight.is_some() {
                    "weight"
                } else {
                    "strategy"
                };
                return Err((at(f), format!("`{f}` belongs to a member of a `group:`")));
            }
            closed.extend(open.take());
            continue;
        };
        if open != Some(name) {
            if closed.contains(name) {
                return Err((
                    at("group"),
                    format!(
                        "the members of group `{name}` must be consecutive entries of the chain"
                    ),
                ));
            }
            closed.extend(open.replace(name));
        }
        if let Some(w) = e.weight {
            if !(w.is_finite() && w > 0.0) {
                return Err((at("weight"), format!("weight {w} is not above zero")));
            }
        }
        let first = list[..i]
            .iter()
            .rposition(|p| p.group.as_deref() != Some(name))
            .map_or(0, |p| p + 1);
        let lead = &list[first];
        if lead.weight.is_some() != e.weight.is_some() {
            return Err((
                at("weight"),
                format!("give every member of group `{name}` a `weight`, or none"),
            ));
        }
        if let (Some(a), Some(b)) = (list[first..i].iter().find_map(|p| p.strategy), e.strategy) {
            if a != b {
                return Err((
                    at("strategy"),
                    format!("group `{name}` is given two strategies ({a} and {b})"),
                ));
            }
        }
    }
    Ok(())
}

/// A check made after parsing knows the field, not the line: find the line in `text`,
/// so that every load error names file, line and what is wrong (scenario-format.md).
pub fn at_line(mut e: YamlError, text: &str) -> YamlError {
    if e.line.is_none() && !e.field.is_empty() {
        if let Some((line, column)) = locate::locate(text, &e.field) {
            e.line = Some(line);
            e.column = Some(column);
        }
    }
    e
}

/// serde's "expected struct Scenario" names a Rust type; say what the file must hold.
/// So does "expected struct Policy": a scenario's author wrote YAML. (Number types are
/// put in words for every file by `yaml::strip_location`.)
fn not_a_scenario(mut e: YamlError) -> YamlError {
    if let Some((found, _)) = e.message.split_once(", expected struct Scenario") {
        e.message = format!(
            "{found}: a scenario file is a YAML mapping with `name`, `chain` (the routes and \
             their replies) and `expect` (or `requests`); see scenario-format.md"
        );
        return e;
    }
    if let Some((found, rust)) = e.message.rsplit_once(", expected ") {
        if rust.starts_with("struct ") {
            e.message = format!("{found}, expected a mapping of fields");
        }
    }
    e
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
