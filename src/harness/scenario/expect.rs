//! What a scenario's requests must have done: outcome, reason, the route that served,
//! each attempt, the routes passed over, health afterwards, upstream calls, waits.
//! Absent fields are not compared.

use crate::core::vocab::{Action, Class, HealthState, Outcome, Reason, Route};
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;

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
    /// v2: time spent in the admission queue, whole ms rounded up.
    #[serde(default)]
    pub queued_ms: Option<u64>,
    /// v2: bucket levels after the request, rounded down: bucket → level name
    /// (`requests`, `tokens`, `input_tokens`, `output_tokens`) → level.
    #[serde(default)]
    pub buckets: Option<BTreeMap<String, BTreeMap<String, i64>>>,
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
