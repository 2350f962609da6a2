//! How a request's end maps to an outcome and, when it failed, to a reason a user
//! message can be built from. "Out of capacity" is said only when every failure was a
//! capacity failure: a missing model must never read as "no quota" (seed 002).

use crate::core::trace::SkipWhy;
use crate::core::vocab::{Action, Class, Outcome, Reason, Why};

pub fn outcome_of(action: Action) -> Outcome {
    match action {
        Action::Done => Outcome::Success,
        Action::Interrupt => Outcome::Interrupted,
        Action::Degrade => Outcome::Degraded,
        Action::Queue => Outcome::Queued,
        Action::Shed => Outcome::Shed,
        // Retry and fallback never end a request; treat them as failure if they ever do.
        Action::FailClosed | Action::Retry | Action::Fallback => Outcome::Failed,
    }
}

/// The reason of a failed request.
/// - `why`: why the last decision ended the request (`None`: the chain ran out).
/// - `last`: the class of the last attempt, if any.
/// - `failures`: the class of every failed attempt.
/// - `skips`: for a request that made no attempt, why each route was passed over and
///   the stored cause of its health (`rate_limited`, `quota`, `model_unavailable`, ...).
pub fn failure_reason(
    why: Option<Why>,
    last: Option<Class>,
    failures: &[Class],
    skips: &[(SkipWhy, Option<&str>)],
) -> Reason {
    if why == Some(Why::BudgetSpent) {
        return Reason::Budget;
    }
    // Capacity whenever every failure was a capacity failure — even when a card put a
    // capacity class in `stop_on`: the user-facing cause is still "no capacity".
    if !failures.is_empty() && failures.iter().all(|c| c.is_capacity()) {
        return Reason::Capacity;
    }
    if why == Some(Why::StopOn) {
        return match last {
            Some(Class::Auth) => Reason::Auth,
            Some(Class::InvalidRequest | Class::ContextOverflow | Class::ContentPolicy) => {
                Reason::Request
            }
            _ => Reason::Error,
        };
    }
    if !failures.is_empty() {
        if failures.iter().all(|c| *c == Class::Auth) {
            return Reason::Auth;
        }
        // Every route turned the request down (a card let a blocked prompt or a bad
        // request move on, and the chain ran out): the request's fault, as if the first
        // had stopped it, never a gateway error.
        if failures.iter().all(|c| {
            matches!(
                c,
                Class::InvalidRequest | Class::ContextOverflow | Class::ContentPolicy
            )
        }) {
            return Reason::Request;
        }
        return Reason::Error;
    }
    // A route cooling for anything but a transient fault is out of capacity for now; a
    // retired one only when it was retired for quota.
    let capacity_skip = |(why, cause): &(SkipWhy, Option<&str>)| match why {
        SkipWhy::Cooling => !matches!(
            cause,
            Some("server_error" | "timeout" | "network" | "stream_interrupted")
        ),
        SkipWhy::Retired => matches!(cause, Some("quota" | "quota_exhausted")),
        _ => false,
    };
    // No route's buckets could ever hold the reservation (the rest could not serve it at
    // all): no wait would admit it, so it is no capacity problem (decisions.md).
    if skips.iter().any(|(why, _)| *why == SkipWhy::ExceedsBucket)
        && skips.iter().all(|(why, _)| {
            matches!(
                why,
                SkipWhy::ExceedsBucket | SkipWhy::CannotCarry | SkipWhy::Incapable
            )
        })
    {
        return Reason::TooLarge;
    }
    // No route could carry the request: a fact of the request and the chain, never of
    // health (fidelity.md §3).
    if skips.iter().any(|(why, _)| *why == SkipWhy::CannotCarry)
        && skips
            .iter()
            .all(|(why, _)| matches!(why, SkipWhy::CannotCarry | SkipWhy::Incapable))
    {
        return Reason::Unsupported;
    }
    let health_skips: Vec<_> = skips
        .iter()
        .filter(|(why, _)| matches!(why, SkipWhy::Cooling | SkipWhy::Retired))
        .collect();
    // Every route retired for a bad key: the request failed for auth, as it would have
    // had each been called.
    let auth_skip = |(why, cause): &&(SkipWhy, Option<&str>)| {
        *why == SkipWhy::Retired && matches!(cause, Some("auth"))
    };
    if health_skips.is_empty() {
        Reason::Error
    } else if health_skips.iter().all(auth_skip) {
        Reason::Auth
    } else if health_skips.into_iter().all(capacity_skip) {
        Reason::Capacity
    } else {
        Reason::Error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_only_when_every_failure_is_capacity() {
        let all_cap = [Class::RateLimited, Class::QuotaExhausted, Class::Overloaded];
        assert_eq!(
            failure_reason(
                Some(Why::NothingLeft),
                Some(Class::Overloaded),
                &all_cap,
                &[]
            ),
            Reason::Capacity
        );
        let mixed = [Class::QuotaExhausted, Class::ModelUnavailable];
        assert_eq!(
            failure_reason(None, Some(Class::ModelUnavailable), &mixed, &[]),
            Reason::Error
        );
    }

    #[test]
    fn a_reservation_no_bucket_can_hold_is_too_large_not_capacity() {
        let exceeds = (SkipWhy::ExceedsBucket, Some("tpm"));
        assert_eq!(
            failure_reason(None, None, &[], &[exceeds]),
            Reason::TooLarge
        );
        // The rest of the chain could not serve it at all: still too large.
        assert_eq!(
            failure_reason(None, None, &[], &[exceeds, (SkipWhy::Incapable, None)]),
            Reason::TooLarge
        );
        // A route cooling for capacity could hold it later: capacity, with a wait.
        assert_eq!(
            failure_reason(
                None,
                None,
                &[],
                &[exceeds, (SkipWhy::Cooling, Some("rate_limited"))]
            ),
            Reason::Capacity
        );
    }

    #[test]
    fn stop_on_and_budget() {
        // A card that stops on a capacity class still reports capacity.
        let quota = [Class::QuotaExhausted];
        assert_eq!(
            failure_reason(Some(Why::StopOn), Some(Class::QuotaExhausted), &quota, &[]),
            Reason::Capacity
        );
        assert_eq!(
            failure_reason(Some(Why::StopOn), Some(Class::Auth), &[Class::Auth], &[]),
            Reason::Auth
        );
        assert_eq!(
            failure_reason(
                Some(Why::StopOn),
                Some(Class::ContextOverflow),
                &[Class::ContextOverflow],
                &[]
            ),
            Reason::Request
        );
        assert_eq!(
            failure_reason(
                Some(Why::StopOn),
                Some(Class::Unknown),
                &[Class::Unknown],
                &[]
            ),
            Reason::Error
        );
        assert_eq!(
            failure_reason(
                Some(Why::BudgetSpent),
                Some(Class::RateLimited),
                &[Class::RateLimited],
                &[]
            ),
            Reason::Budget
        );
    }

    #[test]
    fn a_chain_that_ran_out_on_blocked_prompts_is_the_requests_fault_not_an_error() {
        // `on_content_policy: fallback`: every route blocked the prompt.
        let blocked = [Class::ContentPolicy, Class::ContentPolicy];
        assert_eq!(
            failure_reason(None, Some(Class::ContentPolicy), &blocked, &[]),
            Reason::Request
        );
        // A route that failed for its own sake makes it an error again.
        let mixed = [Class::ContentPolicy, Class::ServerError];
        assert_eq!(
            failure_reason(None, Some(Class::ServerError), &mixed, &[]),
            Reason::Error
        );
    }

    #[test]
    fn no_attempt_at_all() {
        let (c, r) = (SkipWhy::Cooling, SkipWhy::Retired);
        let reason = |skips: &[(SkipWhy, Option<&str>)]| failure_reason(None, None, &[], skips);
        assert_eq!(
            reason(&[(r, Some("quota")), (c, Some("rate_limited"))]),
            Reason::Capacity
        );
        assert_eq!(
            reason(&[(c, Some("preset"))]),
            Reason::Capacity,
            "cooling is capacity for now"
        );
        assert_eq!(
            reason(&[(r, Some("quota")), (r, Some("model_unavailable"))]),
            Reason::Error
        );
        assert_eq!(reason(&[(c, Some("server_error"))]), Reason::Error);
        assert_eq!(
            reason(&[(r, Some("auth")), (r, Some("auth"))]),
            Reason::Auth,
            "every route retired for a bad key fails for auth"
        );
        assert_eq!(
            reason(&[(r, Some("auth")), (r, Some("quota"))]),
            Reason::Error
        );
        assert_eq!(reason(&[(SkipWhy::Unapproved, None)]), Reason::Error);
        assert_eq!(reason(&[]), Reason::Error);
    }
}
