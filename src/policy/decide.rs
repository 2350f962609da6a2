//! `decide()`: the default decision table of spec/decisions.md, one visible branch per
//! row. Pure: everything it needs is in `Situation`, including the jitter draw, so a
//! table test can pin every row.

use crate::classify::hint::Hint;
use crate::core::vocab::{Action, CallPath, Class, Why};
use crate::policy::budget::Spent;
use crate::policy::card::{OnRefusal, Policy};

/// Everything the table reads about one attempt.
#[derive(Debug, Clone, Copy)]
pub struct Situation<'a> {
    pub class: Class,
    pub path: CallPath,
    pub hint: Option<Hint>,
    pub policy: &'a Policy,
    /// Spent so far, including the attempt being decided.
    pub spent: Spent,
    /// Retries already made on this route in this request.
    pub retries_on_route: u32,
    /// A stream already delivered a visible token to the caller.
    pub visible_token: bool,
    /// An approved route that is neither cooling nor retired remains after this one.
    pub fallback_available: bool,
    /// Such a route remains with a larger context window than this one.
    pub larger_window_available: bool,
    /// This attempt was a half-open breaker trial: a trial is never retried.
    pub trial: bool,
    /// Estimated cost of retrying this route, and of calling the next fallback (0 without
    /// a price table).
    pub retry_cost_usd: f64,
    pub fallback_cost_usd: f64,
    /// A uniform draw in [0, 1) for backoff jitter.
    pub jitter: f64,
    /// How long from now until this route's admission buckets hold a retry: `Some(0)`
    /// at once (or no limits), `None` never. A retry is an upstream call like any other:
    /// row 4 applies only when its wait is at least this long.
    pub retry_admission_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub action: Action,
    /// How long to wait before a retry.
    pub wait_ms: Option<u64>,
    /// The table row (1–6) that matched.
    pub row: u8,
    pub why: Why,
}

impl Decision {
    /// Row 6: the request ended because nothing was left to try (no approved live
    /// route, or the budget), so the routes after this one count as passed over.
    pub fn left_nothing(&self) -> bool {
        matches!(self.why, Why::BudgetSpent | Why::NothingLeft)
    }
}

/// The decision table, rows checked in order.
pub fn decide(s: &Situation) -> Decision {
    let d = |action, row, why| Decision {
        action,
        wait_ms: None,
        row,
        why,
    };

    // Row 1.
    if s.class == Class::Ok {
        return d(Action::Done, 1, Why::Answered);
    }
    // Rows 2 and 2a: a refusal is an answer (fidelity.md §4). After a visible token it
    // is delivered as it stands; before one, a card with `on_refusal: fallback` asks the
    // next approved route while one remains and the budget allows one more attempt.
    if s.class == Class::Refusal {
        let may_move = !(s.path == CallPath::Stream && s.visible_token)
            && s.policy.on_refusal == OnRefusal::Fallback
            && s.fallback_available
            && s.spent.allows(s.policy, 0, s.fallback_cost_usd);
        return if may_move {
            d(Action::Fallback, 2, Why::Fallback)
        } else {
            d(Action::Done, 2, Why::Refused)
        };
    }
    // Row 2: never splice a second answer onto output the caller already saw.
    if s.path == CallPath::Stream && s.visible_token {
        return d(Action::Interrupt, 2, Why::AfterVisibleToken);
    }
    // Row 3a: a prompt too long for this route moves to an approved route with a larger
    // window, where one exists, instead of failing (issue 5).
    if s.class == Class::ContextOverflow
        && s.larger_window_available
        && s.spent.allows(s.policy, 0, s.fallback_cost_usd)
    {
        return d(Action::Fallback, 3, Why::Fallback);
    }
    // Row 3, on every path: a bad key or a bad request is the caller's to fix, and a
    // rerank that answered with the recall order would hide it. Rerank degrades only
    // where the table runs out (row 6).
    if s.policy.stops_on(s.class) {
        return d(Action::FailClosed, 3, Why::StopOn);
    }
    // Row 4. `timeout` is absent on purpose: waiting on a silent route again only doubles
    // the wait.
    let mut budget_blocked = false;
    if matches!(
        s.class,
        Class::RateLimited | Class::Overloaded | Class::ServerError | Class::Network
    ) && !s.trial
        && s.retries_on_route < s.policy.max_retries_per_route
    {
        let wait = retry_wait(s.hint, s.retries_on_route, s.jitter);
        let admitted = s.retry_admission_ms.is_some_and(|a| wait >= a);
        if wait <= s.policy.max_retry_wait_ms && admitted {
            if s.spent.allows(s.policy, wait, s.retry_cost_usd) {
                return Decision {
                    action: Action::Retry,
                    wait_ms: Some(wait),
                    row: 4,
                    why: Why::Retryable,
                };
            }
            budget_blocked = true;
        }
    }
    // Row 5 (and a blocked prompt under `on_content_policy: fallback`).
    let moves = moves_on(s.class)
        || (s.class == Class::ContentPolicy && s.policy.moves_on_content_policy());
    if moves && s.fallback_available {
        if s.spent.allows(s.policy, 0, s.fallback_cost_usd) {
            return d(Action::Fallback, 5, Why::Fallback);
        }
        budget_blocked = true;
    }
    // Row 6. A timeout that ran into `max_elapsed_ms` had the budget's deadline, not
    // the route's (an attempt may take no longer than what is left): the budget ended
    // the request, on the last route as on any other.
    let budget_cut = s.class == Class::Timeout && s.spent.elapsed_ms >= s.policy.max_elapsed_ms;
    let why = if budget_blocked || budget_cut {
        Why::BudgetSpent
    } else {
        Why::NothingLeft
    };
    d(when_nothing_left(s.path, s.policy), 6, why)
}

/// Classes that another route may fix (row 5). `stream_interrupted` only reaches here
/// before a visible token: row 2 caught the rest.
pub fn moves_on(class: Class) -> bool {
    matches!(
        class,
        Class::RateLimited
            | Class::QuotaExhausted
            | Class::ModelUnavailable
            | Class::Overloaded
            | Class::ServerError
            | Class::Timeout
            | Class::Network
            | Class::StreamInterrupted
            | Class::InvalidOutput
    )
}

/// Row 6's answer, also used when a chain runs out with every route skipped.
pub fn when_nothing_left(path: CallPath, policy: &Policy) -> Action {
    if path == CallPath::Rerank {
        Action::Degrade
    } else if policy.queue_allowed {
        Action::Queue
    } else if policy.degrade_allowed {
        Action::Degrade
    } else {
        Action::FailClosed
    }
}

/// The provider's hint, else capped exponential backoff with jitter: 250–500 ms before
/// the first retry, doubling after each.
pub fn retry_wait(hint: Option<Hint>, retries_so_far: u32, jitter: f64) -> u64 {
    if let Some(h) = hint {
        return h.ms;
    }
    let base = 250u64.saturating_mul(1u64 << retries_so_far.min(20));
    base + (base as f64 * jitter.clamp(0.0, 1.0)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::hint::HintSource;

    fn hint(ms: u64) -> Option<Hint> {
        Some(Hint {
            ms,
            source: HintSource::RetryAfter,
        })
    }

    fn base(policy: &Policy) -> Situation<'_> {
        Situation {
            class: Class::RateLimited,
            path: CallPath::Chat,
            hint: None,
            policy,
            spent: Spent {
                attempts: 1,
                elapsed_ms: 0,
                extra_cost_usd: 0.0,
            },
            retries_on_route: 0,
            visible_token: false,
            fallback_available: true,
            larger_window_available: false,
            trial: false,
            retry_cost_usd: 0.0,
            fallback_cost_usd: 0.0,
            jitter: 0.0,
            retry_admission_ms: Some(0),
        }
    }

    #[test]
    fn row_1_ok_is_done() {
        let p = Policy::default();
        let got = decide(&Situation {
            class: Class::Ok,
            ..base(&p)
        });
        assert_eq!((got.action, got.row), (Action::Done, 1));
    }

    /// Row 2a: a refusal is the answer, delivered whatever the path; a card with
    /// `on_refusal: fallback` moves on while a route remains, never after a visible token.
    #[test]
    fn row_2a_a_refusal_is_done_unless_the_card_moves_on() {
        let deliver = Policy::default();
        for path in [CallPath::Chat, CallPath::Stream] {
            for visible_token in [false, true] {
                let s = Situation {
                    class: Class::Refusal,
                    path,
                    visible_token,
                    ..base(&deliver)
                };
                assert_eq!((decide(&s).action, decide(&s).row), (Action::Done, 2));
            }
        }
        let fallback = Policy {
            on_refusal: crate::policy::card::OnRefusal::Fallback,
            ..Policy::default()
        };
        let s = Situation {
            class: Class::Refusal,
            ..base(&fallback)
        };
        assert_eq!(decide(&s).action, Action::Fallback);
        let last = Situation {
            fallback_available: false,
            ..s
        };
        assert_eq!(decide(&last).action, Action::Done);
        let seen = Situation {
            path: CallPath::Stream,
            visible_token: true,
            ..s
        };
        assert_eq!(decide(&seen).action, Action::Done);
    }

    /// Row 3 with `on_content_policy: fallback`: a blocked prompt takes row 5.
    #[test]
    fn on_content_policy_fallback_moves_a_blocked_prompt_on() {
        let stop = Policy::default();
        let s = Situation {
            class: Class::ContentPolicy,
            ..base(&stop)
        };
        assert_eq!(decide(&s).action, Action::FailClosed);
        let moves = Policy {
            on_content_policy: crate::policy::card::OnContentPolicy::Fallback,
            ..Policy::default()
        };
        let s = Situation {
            class: Class::ContentPolicy,
            ..base(&moves)
        };
        assert_eq!((decide(&s).action, decide(&s).row), (Action::Fallback, 5));
    }

    #[test]
    fn row_2_stream_after_token_interrupts_whatever_the_class() {
        let p = Policy::default();
        let answers = |c: &Class| matches!(c, Class::Ok | Class::Refusal);
        for class in Class::ALL.iter().copied().filter(|c| !answers(c)) {
            let s = Situation {
                class,
                path: CallPath::Stream,
                visible_token: true,
                ..base(&p)
            };
            assert_eq!(decide(&s).action, Action::Interrupt, "{class}");
        }
        // Before the first token a stream follows the rest of the table.
        let s = Situation {
            class: Class::StreamInterrupted,
            path: CallPath::Stream,
            ..base(&p)
        };
        assert_eq!(decide(&s).action, Action::Fallback);
    }

    #[test]
    fn row_3_stop_on_fails_closed() {
        let p = Policy::default();
        for class in [
            Class::Auth,
            Class::InvalidRequest,
            Class::ContextOverflow,
            Class::ContentPolicy,
            Class::Unknown,
        ] {
            let got = decide(&Situation { class, ..base(&p) });
            assert_eq!(
                (got.action, got.row, got.why),
                (Action::FailClosed, 3, Why::StopOn),
                "{class}"
            );
        }
        let rerank = Situation {
            class: Class::Auth,
            path: CallPath::Rerank,
            ..base(&p)
        };
        // Rerank too: the table's rows are checked in order, and row 6's degrade is
        // reached only where no earlier row decided.
        assert_eq!(
            (decide(&rerank).action, decide(&rerank).row),
            (Action::FailClosed, 3)
        );
        // A card may take a class out of stop_on: auth then moves on... but auth is not a
        // row-5 class, so it ends in row 6.
        let lenient = Policy {
            stop_on: vec![],
            ..Policy::default()
        };
        assert_eq!(
            decide(&Situation {
                class: Class::Auth,
                ..base(&lenient)
            })
            .row,
            6
        );
    }

    #[test]
    fn row_4_retries_transient_classes_within_limits() {
        let p = Policy::default();
        for class in [
            Class::RateLimited,
            Class::Overloaded,
            Class::ServerError,
            Class::Network,
        ] {
            let got = decide(&Situation {
                class,
                hint: hint(1_000),
                ..base(&p)
            });
            assert_eq!(
                (got.action, got.wait_ms, got.row),
                (Action::Retry, Some(1_000), 4),
                "{class}"
            );
        }
        // Timeout is never retried on the same route.
        assert_eq!(
            decide(&Situation {
                class: Class::Timeout,
                ..base(&p)
            })
            .action,
            Action::Fallback
        );
        // Already retried max_retries_per_route times.
        assert_eq!(
            decide(&Situation {
                retries_on_route: 1,
                ..base(&p)
            })
            .action,
            Action::Fallback
        );
        // A wait over max_retry_wait_ms is no retry.
        assert_eq!(
            decide(&Situation {
                hint: hint(2_001),
                ..base(&p)
            })
            .action,
            Action::Fallback
        );
        assert_eq!(
            decide(&Situation {
                hint: hint(2_000),
                ..base(&p)
            })
            .action,
            Action::Retry
        );
        // max_retry_wait_ms: 0 turns retries off, except after an explicit hint of 0.
        let off = Policy {
            max_retry_wait_ms: 0,
            ..Policy::default()
        };
        assert_eq!(decide(&base(&off)).action, Action::Fallback);
        assert_eq!(
            decide(&Situation {
                hint: hint(0),
                ..base(&off)
            })
            .action,
            Action::Retry
        );
    }

    #[test]
    fn row_3a_context_overflow_moves_to_a_larger_window() {
        let p = Policy::default();
        let s = Situation {
            class: Class::ContextOverflow,
            larger_window_available: true,
            ..base(&p)
        };
        assert_eq!(decide(&s).action, Action::Fallback);
        let s = Situation {
            class: Class::ContextOverflow,
            ..base(&p)
        };
        assert_eq!(
            decide(&s).action,
            Action::FailClosed,
            "no larger window: row 3"
        );
    }

    #[test]
    fn a_breaker_trial_is_never_retried() {
        let p = Policy::default();
        let s = Situation {
            class: Class::ServerError,
            trial: true,
            ..base(&p)
        };
        assert_eq!(decide(&s).action, Action::Fallback);
    }

    #[test]
    fn extra_cost_bounds_retries_and_fallbacks() {
        let p = Policy {
            max_extra_cost_usd: Some(0.01),
            ..Policy::default()
        };
        let spent = Spent {
            attempts: 1,
            elapsed_ms: 0,
            extra_cost_usd: 0.0,
        };
        let s = Situation {
            hint: hint(100),
            spent,
            retry_cost_usd: 0.02,
            fallback_cost_usd: 0.005,
            ..base(&p)
        };
        assert_eq!(
            decide(&s).action,
            Action::Fallback,
            "the retry costs too much, the fallback does not"
        );
        let s = Situation {
            retry_cost_usd: 0.02,
            fallback_cost_usd: 0.02,
            ..s
        };
        let got = decide(&s);
        assert_eq!(
            (got.action, got.why),
            (Action::FailClosed, Why::BudgetSpent)
        );
    }

    #[test]
    fn row_4_backoff_without_hint() {
        assert_eq!(retry_wait(None, 0, 0.0), 250);
        assert_eq!(retry_wait(None, 0, 0.999), 499);
        assert_eq!(retry_wait(None, 1, 0.0), 500);
        let p = Policy::default();
        let got = decide(&Situation {
            jitter: 0.5,
            ..base(&p)
        });
        assert_eq!(got.wait_ms, Some(375));
    }

    #[test]
    fn row_4_budget_must_cover_wait_and_one_more_attempt() {
        let p = Policy {
            max_elapsed_ms: 1_500,
            ..Policy::default()
        };
        let s = Situation {
            hint: hint(1_500),
            fallback_available: false,
            ..base(&p)
        };
        let got = decide(&s);
        assert_eq!(
            (got.action, got.why),
            (Action::FailClosed, Why::BudgetSpent)
        );
        let p = Policy {
            max_total_attempts: Some(1),
            ..Policy::default()
        };
        let got = decide(&Situation {
            hint: hint(10),
            ..base(&p)
        });
        assert_eq!(
            (got.action, got.why),
            (Action::FailClosed, Why::BudgetSpent)
        );
    }

    #[test]
    fn row_5_fallback_for_route_level_classes() {
        let p = Policy::default();
        for class in [
            Class::RateLimited,
            Class::QuotaExhausted,
            Class::ModelUnavailable,
            Class::Overloaded,
            Class::ServerError,
            Class::Timeout,
            Class::Network,
            Class::StreamInterrupted,
        ] {
            let s = Situation {
                class,
                retries_on_route: 1,
                ..base(&p)
            };
            let got = decide(&s);
            assert_eq!((got.action, got.row), (Action::Fallback, 5), "{class}");
        }
    }

    #[test]
    fn row_6_when_nothing_is_left() {
        let none = |p: &Policy, path| {
            decide(&Situation {
                path,
                retries_on_route: 1,
                fallback_available: false,
                ..base(p)
            })
            .action
        };
        let p = Policy::default();
        assert_eq!(none(&p, CallPath::Chat), Action::FailClosed);
        assert_eq!(none(&p, CallPath::Rerank), Action::Degrade);
        let q = Policy {
            queue_allowed: true,
            degrade_allowed: true,
            ..Policy::default()
        };
        assert_eq!(none(&q, CallPath::Embed), Action::Queue);
        let g = Policy {
            degrade_allowed: true,
            ..Policy::default()
        };
        assert_eq!(none(&g, CallPath::Chat), Action::Degrade);
        // Quota is never retried on the same route.
        let s = Situation {
            class: Class::QuotaExhausted,
            fallback_available: false,
            ..base(&p)
        };
        assert_eq!(decide(&s).why, Why::NothingLeft);
    }

    #[test]
    fn row_4_needs_the_retry_admitted_after_its_wait() {
        let p = Policy::default();
        let hinted = |retry_admission_ms| Situation {
            hint: hint(1_000),
            retry_admission_ms,
            ..base(&p)
        };
        assert_eq!(decide(&hinted(Some(1_000))).action, Action::Retry);
        assert_eq!(decide(&hinted(Some(0))).action, Action::Retry);
        // The bucket refills too slowly, or never holds the cost: row 5 instead.
        assert_eq!(decide(&hinted(Some(1_001))).action, Action::Fallback);
        assert_eq!(decide(&hinted(None)).action, Action::Fallback);
    }
}
