//! Policy cards (seed 001): one per workflow, bounding the one recovery budget every
//! layer shares. Every default of spec/decisions.md lives here and nowhere else.

use crate::core::limits::Kind;
use crate::core::vocab::{Class, Route};
use serde::{Deserialize, Serialize};

/// How long a stream's output may be replayed on another route (seed 001).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SafeReplay {
    /// Switch routes only before the first visible token (the decision table's row 2).
    #[default]
    FirstVisibleToken,
    /// Hold output until the upstream completes, so a mid-stream failure can still move.
    Buffered,
}

/// What a refusal (class `refusal`, fidelity.md §4) does under this card.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnRefusal {
    /// The refusal is the answer: delivered as the model gave it (row 2a).
    #[default]
    Deliver,
    /// Ask the next approved route; the refusing route's health does not change, and
    /// when the chain runs out the last refusal is delivered.
    Fallback,
}

/// What `content_policy` (a request blocked before any answer) does under this card.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnContentPolicy {
    /// Row 3: fail closed (reason `request`).
    #[default]
    Stop,
    /// Row 5: another route may judge the prompt differently (LiteLLM's
    /// `content_policy_fallbacks`).
    Fallback,
}

/// A policy card. Absent fields take the defaults of spec/decisions.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Policy {
    /// The tier this workflow uses (pool config only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// Upstream calls per request, all layers together; `None` = bounded by the chain.
    pub max_total_attempts: Option<u32>,
    pub max_elapsed_ms: u64,
    pub max_extra_cost_usd: Option<f64>,
    pub safe_replay_until: SafeReplay,
    /// When set, only these routes may be used as fallbacks.
    pub fallback_routes: Option<Vec<Route>>,
    /// When set, a `context_overflow` moves only to these routes, and to one whose
    /// window is unknown too (LiteLLM's `context_window_fallbacks`, which it tries
    /// without knowing their windows); a route whose facts give a window no larger is
    /// still passed over. Unset: only a route the facts know is larger.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overflow_routes: Option<Vec<Route>>,
    /// When set (with `on_content_policy: fallback`), a `content_policy` moves only to
    /// these routes: LiteLLM's `content_policy_fallbacks`, kept apart from the fallbacks
    /// other failures take. Unset: any approved route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_policy_routes: Option<Vec<Route>>,
    pub queue_allowed: bool,
    pub degrade_allowed: bool,
    pub stop_on: Vec<Class>,
    pub max_retry_wait_ms: u64,
    pub max_retries_per_route: u32,
    /// Admission: how long a request may wait in the local queue for a bucket to
    /// refill before it is shed (or offered to `degrade_tier`).
    pub max_queue_ms: u64,
    /// Admission: requests waiting at once; past it, a request is shed at once.
    pub max_queue_len: u32,
    /// Admission: the tier a request that would be shed is offered instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub degrade_tier: Option<String>,
    /// A refusal: delivered (default) or, with `fallback`, the next route is asked.
    pub on_refusal: OnRefusal,
    /// A blocked prompt: fail closed (default) or, with `fallback`, move on.
    pub on_content_policy: OnContentPolicy,
}

pub const DEFAULT_STOP_ON: [Class; 5] = [
    Class::Auth,
    Class::InvalidRequest,
    Class::ContextOverflow,
    Class::ContentPolicy,
    Class::Unknown,
];

impl Default for Policy {
    fn default() -> Self {
        Policy {
            tier: None,
            max_total_attempts: None,
            max_elapsed_ms: 60_000,
            max_extra_cost_usd: None,
            safe_replay_until: SafeReplay::FirstVisibleToken,
            fallback_routes: None,
            overflow_routes: None,
            content_policy_routes: None,
            queue_allowed: false,
            degrade_allowed: false,
            stop_on: DEFAULT_STOP_ON.to_vec(),
            max_retry_wait_ms: 2_000,
            max_retries_per_route: 1,
            max_queue_ms: 0,
            max_queue_len: crate::admission::bucket::DEFAULT_MAX_QUEUE_LEN,
            degrade_tier: None,
            on_refusal: OnRefusal::Deliver,
            on_content_policy: OnContentPolicy::Stop,
        }
    }
}

impl Policy {
    /// Whether `route` may serve as a fallback under this card.
    pub fn approves_fallback(&self, route: &Route) -> bool {
        self.fallback_routes
            .as_ref()
            .is_none_or(|list| list.contains(route))
    }

    /// Rows 3a and 5 after an overflow: whether `route`, whose window the facts give as
    /// `window`, may take a prompt that overflowed a window of `overflowed_at` tokens
    /// (0: unknown). Only a window known to be larger, or under `overflow_routes` a
    /// listed route not known to be smaller: a route no larger would only overflow again,
    /// and an unlisted one is not where the operator sends long prompts.
    pub fn takes_overflow(&self, route: &Route, window: Option<u64>, overflowed_at: u64) -> bool {
        match &self.overflow_routes {
            Some(list) => list.contains(route) && window.is_none_or(|c| c > overflowed_at),
            None => overflowed_at > 0 && window.is_some_and(|c| c > overflowed_at),
        }
    }

    /// Row 3. `on_content_policy: fallback` takes `content_policy` out of `stop_on`.
    pub fn stops_on(&self, class: Class) -> bool {
        if class == Class::ContentPolicy && self.on_content_policy == OnContentPolicy::Fallback {
            return false;
        }
        self.stop_on.contains(&class)
    }

    /// Row 5 for a blocked prompt, under `on_content_policy: fallback`.
    pub fn moves_on_content_policy(&self) -> bool {
        self.on_content_policy == OnContentPolicy::Fallback
    }
}

/// A policy card's durations, as named fields.
pub fn policy_fields(p: &Policy) -> [(&'static str, Option<u64>, Kind); 2] {
    [
        ("max_elapsed_ms", Some(p.max_elapsed_ms), Kind::Deadline),
        ("max_retry_wait_ms", Some(p.max_retry_wait_ms), Kind::Wait),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_spec() {
        let p: Policy = serde_yaml::from_str("{}").unwrap();
        assert_eq!(p, Policy::default());
        assert_eq!(p.max_elapsed_ms, 60_000);
        assert_eq!(p.max_retry_wait_ms, 2_000);
        assert_eq!(p.max_retries_per_route, 1);
        assert!(p.stops_on(Class::Unknown) && !p.stops_on(Class::RateLimited));
    }

    #[test]
    fn unknown_fields_are_errors() {
        let err = serde_yaml::from_str::<Policy>("max_total_atempts: 3").unwrap_err();
        assert!(err.to_string().contains("max_total_atempts"), "{err}");
    }

    #[test]
    fn fallback_routes_restrict_fallbacks() {
        let p: Policy = serde_yaml::from_str("fallback_routes: [a/x]").unwrap();
        assert!(p.approves_fallback(&Route::parse("a/x").unwrap()));
        assert!(!p.approves_fallback(&Route::parse("b/y").unwrap()));
        assert!(Policy::default().approves_fallback(&Route::parse("b/y").unwrap()));
    }
}
