//! The fault script of a scenario: the chain of routes, what each mock provider
//! replies (statuses, bodies, headers, streams that break), outages in virtual time,
//! and the health the routes start in.

use crate::core::vocab::Route;
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;

crate::provider_settings! {
    /// One route of a scenario's chain: the provider settings a pool config accepts
    /// (wire, dialect, deadlines, cooldowns, breaker), the model's facts, and the mock's
    /// script.
    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct ChainEntry {
        pub route: Route,
        /// What the model can serve and what it costs (its equivalence contract).
        #[serde(default)]
        pub model: Option<crate::policy::capability::ModelFacts>,
        /// A provider outage in virtual time: until `until_ms` after `now`, every call gets
        /// `reply`; after it, `replies` are served as usual.
        #[serde(default)]
        pub outage: Option<OutageSpec>,
        pub replies: Vec<Reply>,
        /// What every request body this route's mock receives must hold.
        #[serde(default)]
        pub received: Option<Received>,
        /// Consecutive entries naming the same group are one group step of the chain
        /// (interchangeable routes; README, "Groups of equal routes").
        #[serde(default)]
        pub group: Option<String>,
        /// The member's weight in its group (every member gives one, or none does).
        #[serde(default)]
        pub weight: Option<f64>,
        /// The group's strategy (`weighted`, `least_busy`); members that name one agree.
        #[serde(default)]
        pub strategy: Option<crate::config::route::GroupStrategy>,
    }
}

/// What a route's mock must have received, in each request body: fields present,
/// absent, or equal to a value. A field is a dotted path into the JSON body, with
/// array indices as numbers (`messages.0.content.1.source.type`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Received {
    #[serde(default)]
    pub present: Vec<String>,
    #[serde(default)]
    pub absent: Vec<String>,
    #[serde(default)]
    pub equal: BTreeMap<String, serde_json::Value>,
}

impl Received {
    /// Where `body` breaks this expectation: `(field, expected, got)` each.
    pub fn check(&self, body: &serde_json::Value) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        let shown = |v: Option<&serde_json::Value>| match v {
            Some(v) => v.to_string(),
            None => "absent".to_string(),
        };
        for f in &self.present {
            if at(body, f).is_none() {
                out.push((f.clone(), "present".into(), "absent".into()));
            }
        }
        for f in &self.absent {
            if let Some(v) = at(body, f) {
                out.push((f.clone(), "absent".into(), v.to_string()));
            }
        }
        for (f, want) in &self.equal {
            let got = at(body, f);
            // Numbers compare as numbers: YAML's `2.0` is the body's `2`.
            let same = match (got, want) {
                (Some(serde_json::Value::Number(a)), serde_json::Value::Number(b)) => {
                    a.as_f64() == b.as_f64()
                }
                (g, w) => g == Some(w),
            };
            if !same {
                out.push((f.clone(), want.to_string(), shown(got)));
            }
        }
        out
    }
}

/// The value at a dotted path (`messages.0.content`), if there is one.
pub fn at<'a>(body: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(body, |v, key| match v {
        serde_json::Value::Object(m) => m.get(key),
        serde_json::Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutageSpec {
    pub until_ms: u64,
    pub reply: Reply,
}

/// One reply of a mock route.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A valid success for the route's wire and path; `usage` is what it reports
    /// (else the mock's own estimate).
    Ok {
        text: String,
        headers: Headers,
        usage: Option<UsageSpec>,
    },
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
    /// The usage the finish reports (else the mock's own estimate).
    pub usage: Option<UsageSpec>,
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

/// The token counts an `ok` reply reports in its wire's `usage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageSpec {
    pub input: u64,
    pub output: u64,
}

/// Header names (lowercase) and values, in file order.
pub type Headers = Vec<(String, String)>;

/// The YAML shape of a reply: every form's fields, checked for a legal combination.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReply {
    ok: Option<String>,
    usage: Option<UsageSpec>,
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
            return Ok(Reply::Ok {
                text,
                headers,
                usage: r.usage,
            });
        }
        if r.usage.is_some() {
            return Err("`usage` belongs to an `ok` reply".into());
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
                usage: None,
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
