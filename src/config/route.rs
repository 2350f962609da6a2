//! Routes as the router walks them, and the one place where a route's settings become a
//! resolved route. A pool config's provider and a scenario's chain entry accept the same
//! provider settings ([`provider_settings!`] declares them once for both file formats);
//! [`ProviderSettings`] turns them into the wire's [`Endpoint`] (base URL, key,
//! deadlines, dialect) and the [`RoutePolicy`] the router applies (cooldowns, breaker),
//! with the defaults of spec/decisions.md and dialect inference, for both.

use crate::classify::dialect::Dialect;
use crate::core::limits;
use crate::core::secret::Secret;
use crate::core::vocab::{CallPath, Route, Wire};
use crate::policy::breaker::BreakerConfig;
use crate::policy::capability::ModelFacts;
use crate::policy::health::Cooldowns;
use crate::wire::{
    Endpoint, DEFAULT_FIRST_TOKEN_TIMEOUT_MS, DEFAULT_STREAM_IDLE_MS, DEFAULT_TIMEOUT_MS,
};
use std::sync::Arc;

/// What the router does with a route's failures: routing policy, not wire format.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RoutePolicy {
    pub cooldowns: Cooldowns,
    /// The circuit breaker, when configured.
    pub breaker: Option<BreakerConfig>,
}

/// One route of a tier, resolved: the route, the endpoint that serves it, what the model
/// can serve, and the routing policy that applies to it.
#[derive(Debug, Clone)]
pub struct RouteSpec {
    pub route: Route,
    pub endpoint: Arc<Endpoint>,
    pub facts: ModelFacts,
    pub policy: RoutePolicy,
}

/// An ordered chain of routes and the kind of call it serves. Whether a chat call
/// streams is chosen per request; `path: stream` is the default for `walk` and `probe`.
///
/// A step of the chain may be a group of interchangeable routes ([`Group`]): its
/// members stay in `routes`, one after another, so everything that reads a route by its
/// chain position (health, breakers, admission, the trace) reads a member the same way;
/// `groups` only says which positions belong together and how a request orders them.
#[derive(Debug, Clone)]
pub struct Tier {
    pub name: String,
    pub path: CallPath,
    pub routes: Vec<RouteSpec>,
    /// The tier's groups, in chain order; empty for a chain of single routes.
    pub groups: Vec<Group>,
}

impl Tier {
    /// The group chain position `idx` belongs to, if it is a member of one.
    pub fn group_of(&self, idx: usize) -> Option<&Group> {
        self.groups.iter().find(|g| g.members().contains(&idx))
    }

    /// Whether chain position `idx` is the tier's first step: the primary route, or any
    /// member of a group that is the first step. A card's `fallback_routes` approves the
    /// steps after it; the first step needs no approval, whichever member is drawn.
    pub fn in_first_step(&self, idx: usize) -> bool {
        idx == 0
            || self
                .groups
                .first()
                .is_some_and(|g| g.start == 0 && g.members().contains(&idx))
    }
}

/// How a request orders the members of a group (`strategy:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupStrategy {
    /// A draw in proportion to each member's weight, without replacement.
    #[default]
    Weighted,
    /// Fewest requests in flight from this process first; ties by a draw.
    LeastBusy,
}

impl std::fmt::Display for GroupStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GroupStrategy::Weighted => "weighted",
            GroupStrategy::LeastBusy => "least_busy",
        })
    }
}

/// One group step of a tier: the members are `routes[start..start + weights.len()]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub start: usize,
    /// One per member, each above zero: as written, else the member's rpm limit, else 1.
    pub weights: Vec<f64>,
    pub strategy: GroupStrategy,
}

impl Group {
    /// The chain positions of the members.
    pub fn members(&self) -> std::ops::Range<usize> {
        self.start..self.start + self.weights.len()
    }

    /// The members' weights: `written`, else each member's rpm limit (its route's
    /// `limits:` entry, else its provider's) when every member has one, else equal. The
    /// same for a pool config and a scenario.
    pub fn weights_of(
        written: Option<&[f64]>,
        members: &[&Route],
        limits: &std::collections::BTreeMap<String, crate::admission::bucket::Limits>,
    ) -> Vec<f64> {
        if let Some(w) = written {
            return w.to_vec();
        }
        let rpm = |r: &Route| {
            [r.as_str(), r.provider()]
                .iter()
                .find_map(|k| limits.get(*k).and_then(|l| l.rpm))
                .filter(|n| *n > 0)
                .map(|n| n as f64)
        };
        members
            .iter()
            .map(|r| rpm(r))
            .collect::<Option<Vec<f64>>>()
            .unwrap_or_else(|| vec![1.0; members.len()])
    }
}

/// Where a provider's dialect came from; `poolctl check` warns on `WireDefault`, since a
/// guessed dialect can misread the provider's errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DialectSource {
    Explicit,
    Inferred,
    WireDefault,
}

/// Declares a file-format struct (a pool config provider, a scenario chain entry) with
/// the provider settings every such struct accepts, plus its own fields, and a
/// `settings()` that hands them to the one builder. A macro rather than
/// `#[serde(flatten)]`, which cannot be combined with `deny_unknown_fields`: unknown
/// field errors, with their nearest-name hints, must keep working.
#[macro_export]
macro_rules! provider_settings {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $field:ident : $ty:ty,)* }) => {
        $(#[$m])*
        pub struct $name {
            $($(#[$fm])* pub $field: $ty,)*
            #[serde(default)]
            pub wire: $crate::core::vocab::Wire,
            /// Whose error conventions apply; inferred when absent.
            #[serde(default)]
            pub dialect: Option<$crate::classify::dialect::Dialect>,
            #[serde(default)]
            pub timeout_ms: Option<u64>,
            #[serde(default)]
            pub first_token_timeout_ms: Option<u64>,
            #[serde(default)]
            pub stream_idle_ms: Option<u64>,
            /// Streams: the whole stream (spec/cli.md "Limits on what is read").
            #[serde(default)]
            pub stream_max_ms: Option<u64>,
            /// Streams: text and tool-call arguments delivered.
            #[serde(default)]
            pub max_stream_bytes: Option<u64>,
            /// Streams: one SSE event.
            #[serde(default)]
            pub max_event_bytes: Option<u64>,
            #[serde(default)]
            pub cooldown_ms: Option<u64>,
            #[serde(default)]
            pub transient_cooldown_ms: Option<u64>,
            /// The circuit breaker (off when absent).
            #[serde(default)]
            pub breaker: Option<$crate::policy::breaker::BreakerConfig>,
            /// Call without a semantic field the route cannot carry, naming it,
            /// rather than skip the route (spec/fidelity.md §3).
            #[serde(default)]
            pub drop_params: bool,
        }

        impl $name {
            /// The provider settings, as written.
            pub fn settings(&self) -> $crate::config::route::ProviderSettings {
                $crate::config::route::ProviderSettings {
                    wire: self.wire,
                    dialect: self.dialect,
                    timeout_ms: self.timeout_ms,
                    first_token_timeout_ms: self.first_token_timeout_ms,
                    stream_idle_ms: self.stream_idle_ms,
                    stream_max_ms: self.stream_max_ms,
                    max_stream_bytes: self.max_stream_bytes,
                    max_event_bytes: self.max_event_bytes,
                    cooldown_ms: self.cooldown_ms,
                    transient_cooldown_ms: self.transient_cooldown_ms,
                    breaker: self.breaker,
                    drop_params: self.drop_params,
                }
            }
        }
    };
}

/// A provider's settings as written: `None` takes the default.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProviderSettings {
    pub wire: Wire,
    pub dialect: Option<Dialect>,
    pub timeout_ms: Option<u64>,
    pub first_token_timeout_ms: Option<u64>,
    pub stream_idle_ms: Option<u64>,
    pub stream_max_ms: Option<u64>,
    pub max_stream_bytes: Option<u64>,
    pub max_event_bytes: Option<u64>,
    pub cooldown_ms: Option<u64>,
    pub transient_cooldown_ms: Option<u64>,
    pub breaker: Option<BreakerConfig>,
    pub drop_params: bool,
}

impl ProviderSettings {
    /// Every number of these settings that has a range, named as in the file: a pool
    /// config and a scenario refuse the same values with the same message
    /// (`limits::check_fields`; cooldowns and waits 0 to 24 h, deadlines 1 ms to 24 h).
    pub fn limit_fields(&self) -> Vec<(&'static str, Option<u64>, limits::Kind)> {
        use limits::Kind::{Bytes, Deadline, Wait};
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
        fields.extend(crate::policy::breaker::breaker_fields(
            self.breaker.as_ref(),
        ));
        fields
    }

    /// The explicit `dialect`, else the one the host of `base_url` implies (a real
    /// provider's URL; a mock's loopback URL implies none), else the wire's own.
    pub fn dialect(&self, base_url: Option<&str>) -> (Dialect, DialectSource) {
        if let Some(d) = self.dialect {
            (d, DialectSource::Explicit)
        } else if let Some(d) = base_url.and_then(Dialect::infer_from_url) {
            (d, DialectSource::Inferred)
        } else {
            (Dialect::of_wire(self.wire), DialectSource::WireDefault)
        }
    }

    /// The endpoint the wire calls. `infer_from` is the URL whose host may imply the
    /// dialect (`None` for mocks).
    pub fn endpoint(
        &self,
        provider: &str,
        base_url: String,
        api_key: Secret,
        infer_from: Option<&str>,
    ) -> Endpoint {
        Endpoint {
            provider: provider.to_string(),
            wire: self.wire,
            dialect: self.dialect(infer_from).0,
            base_url,
            api_key,
            timeout_ms: self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS),
            first_token_timeout_ms: self
                .first_token_timeout_ms
                .unwrap_or(DEFAULT_FIRST_TOKEN_TIMEOUT_MS),
            stream_idle_ms: self.stream_idle_ms.unwrap_or(DEFAULT_STREAM_IDLE_MS),
            stream_max_ms: self.stream_max_ms.unwrap_or(limits::DEFAULT_STREAM_MAX_MS),
            max_stream_bytes: self
                .max_stream_bytes
                .unwrap_or(limits::DEFAULT_MAX_STREAM_BYTES),
            max_event_bytes: self
                .max_event_bytes
                .unwrap_or(limits::DEFAULT_MAX_EVENT_BYTES),
            drop_params: self.drop_params,
        }
    }

    /// The routing policy of the provider's routes.
    pub fn policy(&self) -> RoutePolicy {
        RoutePolicy {
            cooldowns: Cooldowns {
                cooldown_ms: self.cooldown_ms,
                transient_cooldown_ms: self
                    .transient_cooldown_ms
                    .unwrap_or(Cooldowns::default().transient_cooldown_ms),
            },
            breaker: self.breaker,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_dialect_inference_in_one_place() {
        let s = ProviderSettings::default();
        let ep = s.endpoint(
            "ds",
            "https://dashscope.aliyuncs.com/compatible-mode/v1".into(),
            Secret::new("k"),
            Some("https://dashscope.aliyuncs.com/compatible-mode/v1"),
        );
        assert_eq!(ep.dialect, Dialect::Dashscope);
        assert_eq!(ep.timeout_ms, DEFAULT_TIMEOUT_MS);
        // A mock's URL implies nothing: the wire's own dialect.
        assert_eq!(
            s.dialect(None),
            (Dialect::Openai, DialectSource::WireDefault)
        );
        assert_eq!(s.policy(), RoutePolicy::default());
    }
}
