//! What a request did, attempt by attempt: the record `chaos` compares, `walk` prints
//! and `--json` emits. "What did this request do?" is answered from these alone.

use crate::core::clock::UnixMs;
use crate::core::request::Usage;
use crate::core::vocab::{Action, CallPath, Class, HealthState, Outcome, Reason, Route};
use serde::Serialize;

/// A route's health after an attempt changed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthChange {
    pub state: HealthState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<UnixMs>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One upstream call.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptRecord {
    /// 1-based position among this request's upstream calls.
    pub index: u32,
    pub route: Route,
    /// HTTP status, `null` when none came back.
    pub status: Option<u16>,
    pub class: Class,
    pub action: Action,
    /// The wait before the retry this attempt led to.
    pub wait_ms: Option<u64>,
    /// The route's new health, when this attempt changed it.
    pub health: Option<HealthChange>,
    /// Real time the call took.
    pub latency_ms: u64,
    pub request_id: Option<String>,
    /// The provider's retry hint, when it sent one.
    pub hint_ms: Option<u64>,
    /// The decision-table row that chose the action.
    pub row: u8,
    /// A short, key-free note on what came back (error excerpt, transport error).
    pub detail: Option<String>,
    /// The upstream's own error code (`context_length_exceeded`, ...), when it sent one:
    /// the gateway passes it on for request errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The workflow (policy card) the request ran under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// The route the request asked for (the head of its chain).
    pub requested_route: Route,
    /// Why this route was chosen.
    pub chosen: Chosen,
    /// Request fields this route's wire cannot express, so they were not sent
    /// (Anthropic has no `seed`, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
    /// Tokens the provider reported, when it answered.
    pub tokens: Option<Usage>,
    /// Estimated cost of this call (0 without a price table).
    pub cost_usd: f64,
    /// When this attempt opened the route's circuit breaker: until when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker_open_until: Option<UnixMs>,
}

/// Why an attempt went to its route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Chosen {
    /// The head of the chain.
    #[serde(rename = "primary")]
    Primary,
    /// A later route, after the ones before it failed or were passed over.
    #[serde(rename = "fallback")]
    Fallback,
    /// The same route again, after a wait.
    #[serde(rename = "retry")]
    Retry,
    /// The route that last served this session.
    #[serde(rename = "session affinity")]
    SessionAffinity,
    /// The one trial call a half-open breaker lets through.
    #[serde(rename = "half-open trial")]
    HalfOpenTrial,
}

impl Chosen {
    pub fn as_str(self) -> &'static str {
        match self {
            Chosen::Primary => "primary",
            Chosen::Fallback => "fallback",
            Chosen::Retry => "retry",
            Chosen::SessionAffinity => "session affinity",
            Chosen::HalfOpenTrial => "half-open trial",
        }
    }
}

impl std::fmt::Display for Chosen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a route was passed over without a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SkipWhy {
    #[serde(rename = "cooling")]
    Cooling,
    #[serde(rename = "retired")]
    Retired,
    /// Not in the policy card's `fallback_routes`.
    #[serde(rename = "unapproved")]
    Unapproved,
    /// Cannot serve this request (its equivalence contract: window, tools, ...).
    #[serde(rename = "incapable")]
    Incapable,
    /// Its circuit breaker is open.
    #[serde(rename = "breaker_open")]
    Open,
    /// Its breaker is half-open and every trial slot is taken.
    #[serde(rename = "half_open")]
    HalfOpen,
    /// Its admission buckets cannot hold the request's cost now.
    #[serde(rename = "admission")]
    Admission,
    /// Its wire cannot carry what the request holds (spec/fidelity.md §3): the cause
    /// names what.
    #[serde(rename = "cannot_carry")]
    CannotCarry,
    /// Its admission buckets can never hold the request's reservation, however long it
    /// waits: the cause names the bucket's capacity and the reservation.
    #[serde(rename = "exceeds_bucket")]
    ExceedsBucket,
}

impl SkipWhy {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipWhy::Cooling => "cooling",
            SkipWhy::Retired => "retired",
            SkipWhy::Unapproved => "unapproved",
            SkipWhy::Incapable => "incapable",
            SkipWhy::Open => "breaker_open",
            SkipWhy::HalfOpen => "half_open",
            SkipWhy::Admission => "admission",
            SkipWhy::CannotCarry => "cannot_carry",
            SkipWhy::ExceedsBucket => "exceeds_bucket",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Skip {
    pub route: Route,
    pub why: SkipWhy,
    /// The stored reason of the health that caused the skip (`quota`, `rate_limited`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

/// One step of a request, as it happens (`walk` prints these live).
#[derive(Debug, Clone, Copy)]
pub enum Step<'a> {
    Attempt(&'a AttemptRecord),
    Skipped(&'a Skip),
}

/// How one request ended, and everything it did on the way.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub path: CallPath,
    pub outcome: Outcome,
    pub reason: Option<Reason>,
    pub served_by: Option<Route>,
    /// The text the caller received (a stream: everything delivered, even when
    /// interrupted). The whole answer is in [`crate::core::answer::Answer`].
    pub text: Option<String>,
    pub attempts: Vec<AttemptRecord>,
    pub skipped: Vec<Skip>,
    pub waits_ms: Vec<u64>,
    /// Time spent waiting in the local admission queue (virtual in the chaos harness).
    pub queued_ms: u64,
    /// Routing time the request took (virtual in the chaos harness).
    pub elapsed_ms: u64,
    /// Problems that did not stop the request (a health store that could not be written).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}
