//! Route health — ready, cooling until an instant, retired with a reason — and the pure
//! transition a finished attempt causes (spec/decisions.md). Cooling ends by time;
//! retirement never does: only a manual restore brings a retired route back.

use crate::classify::hint::Hint;
use crate::core::clock::UnixMs;
use crate::core::trace::HealthChange;
use crate::core::vocab::{Action, Class, HealthState};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Health {
    Ready,
    Cooling { until: UnixMs, reason: String },
    Retired { reason: String },
}

impl Health {
    /// The state as of `now`: a cooling whose `until` has passed is ready again.
    pub fn state_at(&self, now: UnixMs) -> HealthState {
        match self {
            Health::Ready => HealthState::Ready,
            Health::Cooling { until, .. } if *until > now => HealthState::Cooling,
            Health::Cooling { .. } => HealthState::Ready,
            Health::Retired { .. } => HealthState::Retired,
        }
    }

    pub fn is_available(&self, now: UnixMs) -> bool {
        self.state_at(now) == HealthState::Ready
    }

    pub fn until(&self) -> Option<UnixMs> {
        match self {
            Health::Cooling { until, .. } => Some(*until),
            _ => None,
        }
    }

    pub fn reason(&self) -> Option<&str> {
        match self {
            Health::Ready => None,
            Health::Cooling { reason, .. } | Health::Retired { reason } => Some(reason),
        }
    }
}

/// A provider's cooling lengths, from the pool config (defaults in spec/decisions.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cooldowns {
    /// Overrides both the 60 s (rate_limited) and 20 s (overloaded) defaults.
    pub cooldown_ms: Option<u64>,
    pub transient_cooldown_ms: u64,
}

impl Default for Cooldowns {
    fn default() -> Self {
        Cooldowns {
            cooldown_ms: None,
            transient_cooldown_ms: 5_000,
        }
    }
}

pub const RATE_LIMITED_COOLDOWN_MS: u64 = 60_000;
pub const OVERLOADED_COOLDOWN_MS: u64 = 20_000;

/// Failures that are the route's fault, not the request's: they change its health, and
/// count against its circuit breaker.
pub fn is_route_fault(class: Class) -> bool {
    !matches!(
        class,
        Class::Ok
            | Class::Refusal
            | Class::InvalidRequest
            | Class::ContextOverflow
            | Class::ContentPolicy
            | Class::InvalidOutput
            | Class::Unknown
    )
}

/// The health a route takes after an attempt; `None` leaves it unchanged (the request's
/// fault, not the route's). `wait_ms` is the retry wait when the action is `retry`.
pub fn transition(
    class: Class,
    action: Action,
    hint: Option<Hint>,
    wait_ms: Option<u64>,
    cooldowns: Cooldowns,
    now: UnixMs,
) -> Option<Health> {
    let cool = |ms: u64| Health::Cooling {
        until: crate::core::clock::plus_ms(now, ms),
        reason: class.as_str().to_string(),
    };
    let retire = |reason: &str| Health::Retired {
        reason: reason.to_string(),
    };
    if action == Action::Retry {
        // The route cools only for the wait before the retry.
        return Some(cool(wait_ms.unwrap_or(0)));
    }
    Some(match class {
        Class::Ok => Health::Ready,
        Class::RateLimited => cool(
            hint.map(|h| h.ms)
                .or(cooldowns.cooldown_ms)
                .unwrap_or(RATE_LIMITED_COOLDOWN_MS),
        ),
        Class::Overloaded => cool(
            hint.map(|h| h.ms)
                .or(cooldowns.cooldown_ms)
                .unwrap_or(OVERLOADED_COOLDOWN_MS),
        ),
        Class::ServerError | Class::Timeout | Class::Network | Class::StreamInterrupted => {
            cool(cooldowns.transient_cooldown_ms)
        }
        // Out of money stays until someone acts — unless the provider states when it
        // resets (decisions.md: Retry-After, RetryInfo, a stated reset in the body).
        // Bucket refills (x-ratelimit-reset-*) are not such a statement, and neither is
        // the RetryInfo Google attaches to a quota of 0 (the classifier drops it).
        Class::QuotaExhausted => match hint.filter(|h| h.source.is_explicit()) {
            Some(h) => cool(h.ms),
            None => retire("quota"),
        },
        Class::ModelUnavailable => retire("model_unavailable"),
        Class::Auth => retire("auth"),
        // The request's fault, or one answer's (a refusal is the model's answer): not
        // the route's health.
        Class::Refusal
        | Class::InvalidRequest
        | Class::ContextOverflow
        | Class::ContentPolicy
        | Class::InvalidOutput
        | Class::Unknown => return None,
    })
}

/// A change of health as data: what a store applies, atomically, to the state it
/// replaces. Data rather than a closure, so that any store — a mutex, an SQLite
/// transaction, a Redis script — runs the same rule, [`apply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Transition {
    /// An attempt succeeded: ready, unless retired (a success never un-retires).
    Succeeded,
    /// Cool until `until`, unless retired, or already cooling longer: the later `until`
    /// wins.
    Cool { until: UnixMs, reason: String },
    /// Retire until an explicit restore.
    Retire { reason: String },
    /// An explicit restore (`poolctl restore`, `probe --apply` on a route it proved live):
    /// ready, whatever the state was.
    Restore,
}

impl Transition {
    /// The transition that moves a route toward `target`, the health an attempt asks for
    /// ([`transition`]'s answer).
    pub fn toward(target: Health) -> Transition {
        match target {
            Health::Ready => Transition::Succeeded,
            Health::Cooling { until, reason } => Transition::Cool { until, reason },
            Health::Retired { reason } => Transition::Retire { reason },
        }
    }
}

/// The rule of spec/decisions.md: the health `t` leaves after `old`. Pure, so every store
/// applies exactly this, under whatever atomicity it has.
pub fn apply(old: &Health, t: Transition) -> Health {
    match (old, t) {
        (_, Transition::Restore) => Health::Ready,
        (_, Transition::Retire { reason }) => Health::Retired { reason },
        (Health::Retired { .. }, Transition::Succeeded | Transition::Cool { .. }) => old.clone(),
        (_, Transition::Succeeded) => Health::Ready,
        (Health::Cooling { until: longer, .. }, Transition::Cool { until, .. })
            if *longer > until =>
        {
            old.clone()
        }
        (_, Transition::Cool { until, reason }) => Health::Cooling { until, reason },
    }
}

impl From<&Health> for HealthChange {
    fn from(h: &Health) -> Self {
        HealthChange {
            state: match h {
                Health::Ready => HealthState::Ready,
                Health::Cooling { .. } => HealthState::Cooling,
                Health::Retired { .. } => HealthState::Retired,
            },
            until: h.until(),
            reason: h.reason().map(str::to_string),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cool(until: UnixMs) -> Transition {
        Transition::Cool {
            until,
            reason: "rate_limited".into(),
        }
    }

    #[test]
    fn a_success_never_unretires() {
        let retired = Health::Retired {
            reason: "auth".into(),
        };
        assert_eq!(apply(&retired, Transition::Succeeded), retired);
        assert_eq!(apply(&retired, cool(5)), retired);
        assert_eq!(apply(&retired, Transition::Restore), Health::Ready);
        let cooling = apply(&Health::Ready, cool(5));
        assert_eq!(apply(&cooling, Transition::Succeeded), Health::Ready);
    }

    #[test]
    fn the_later_cooling_wins() {
        let long = apply(&Health::Ready, cool(9_000));
        assert_eq!(apply(&long, cool(1_000)), long);
        let longer = apply(&long, cool(20_000));
        assert_eq!(longer.until(), Some(20_000));
        let retire = Transition::Retire {
            reason: "quota".into(),
        };
        assert!(matches!(apply(&longer, retire), Health::Retired { .. }));
    }
    use crate::classify::hint::HintSource;

    const NOW: UnixMs = 1_000_000;

    fn t(class: Class, hint: Option<Hint>) -> Option<Health> {
        transition(
            class,
            Action::Fallback,
            hint,
            None,
            Cooldowns::default(),
            NOW,
        )
    }

    fn cooling(ms: i64, class: Class) -> Option<Health> {
        Some(Health::Cooling {
            until: NOW + ms,
            reason: class.as_str().into(),
        })
    }

    #[test]
    fn table_of_transitions() {
        let h20 = Some(Hint {
            ms: 20_000,
            source: HintSource::RetryAfter,
        });
        assert_eq!(t(Class::Ok, None), Some(Health::Ready));
        assert_eq!(
            t(Class::RateLimited, h20),
            cooling(20_000, Class::RateLimited)
        );
        assert_eq!(
            t(Class::RateLimited, None),
            cooling(60_000, Class::RateLimited)
        );
        assert_eq!(
            t(Class::Overloaded, None),
            cooling(20_000, Class::Overloaded)
        );
        for c in [
            Class::ServerError,
            Class::Timeout,
            Class::Network,
            Class::StreamInterrupted,
        ] {
            assert_eq!(t(c, h20), cooling(5_000, c));
        }
        assert_eq!(
            t(Class::QuotaExhausted, None),
            Some(Health::Retired {
                reason: "quota".into()
            })
        );
        assert_eq!(
            t(Class::QuotaExhausted, h20),
            cooling(20_000, Class::QuotaExhausted)
        );
        let refill = Some(Hint {
            ms: 6_000,
            source: HintSource::RatelimitReset,
        });
        assert_eq!(
            t(Class::QuotaExhausted, refill),
            Some(Health::Retired {
                reason: "quota".into()
            })
        );
        // A spent daily quota's RetryInfo states when to come back: cooling, so the route
        // returns by itself once the quota does (retired, it would wait for an operator).
        let retry_info = Some(Hint {
            ms: 38_000,
            source: HintSource::RetryInfo,
        });
        assert!(matches!(
            t(Class::QuotaExhausted, retry_info),
            Some(Health::Cooling { .. })
        ));
        assert_eq!(
            t(Class::ModelUnavailable, None),
            Some(Health::Retired {
                reason: "model_unavailable".into()
            })
        );
        assert_eq!(
            t(Class::Auth, None),
            Some(Health::Retired {
                reason: "auth".into()
            })
        );
        for c in [
            Class::InvalidRequest,
            Class::ContextOverflow,
            Class::ContentPolicy,
            Class::Unknown,
        ] {
            assert_eq!(t(c, None), None);
        }
    }

    #[test]
    fn provider_cooldown_overrides_defaults() {
        let cd = Cooldowns {
            cooldown_ms: Some(7_000),
            transient_cooldown_ms: 900,
        };
        let got = transition(Class::Overloaded, Action::Fallback, None, None, cd, NOW);
        assert_eq!(got, cooling(7_000, Class::Overloaded));
        let got = transition(Class::Timeout, Action::Fallback, None, None, cd, NOW);
        assert_eq!(got, cooling(900, Class::Timeout));
    }

    #[test]
    fn retry_cools_only_for_the_wait() {
        let got = transition(
            Class::RateLimited,
            Action::Retry,
            None,
            Some(300),
            Cooldowns::default(),
            NOW,
        );
        assert_eq!(got, cooling(300, Class::RateLimited));
    }

    #[test]
    fn cooling_ends_by_time_retirement_never() {
        let c = Health::Cooling {
            until: NOW + 10,
            reason: "x".into(),
        };
        assert_eq!(c.state_at(NOW), HealthState::Cooling);
        assert_eq!(c.state_at(NOW + 10), HealthState::Ready);
        let r = Health::Retired {
            reason: "quota".into(),
        };
        assert_eq!(r.state_at(i64::MAX), HealthState::Retired);
    }
}
