//! The gateway's status table (spec/cli.md, "serve"): how a request's outcome becomes an
//! HTTP status a client can act on. One pure function, so the table can be read and
//! tested as a table.

use crate::core::vocab::{Outcome, Reason};

/// What the status depends on, beside the outcome and reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusFacts {
    /// The status of the upstream attempt that reported a request error, when it had one.
    pub upstream_status: Option<u16>,
    /// Milliseconds until a route is expected to take traffic again, when known.
    pub retry_after_ms: Option<u64>,
    /// A deadline ran out (the last attempt timed out, or the elapsed budget was spent).
    pub deadline: bool,
}

/// The HTTP status for a finished, non-streamed request (or a stream that failed before
/// its first visible token).
pub fn http_status(outcome: Outcome, reason: Option<Reason>, facts: StatusFacts) -> u16 {
    match (outcome, reason) {
        (Outcome::Success | Outcome::Degraded, _) => 200,
        (Outcome::Queued, _) => 202,
        // No answer reaches the client; nginx's word for it, in the log line.
        (Outcome::Cancelled, _) => 499,
        // The upstream's own 4xx tells the client what is wrong with its request.
        (Outcome::Failed, Some(Reason::Request)) => facts
            .upstream_status
            .filter(|s| (400..500).contains(s))
            .unwrap_or(400),
        // The request asks what no route of its chain can carry (fidelity.md §3).
        (Outcome::Failed, Some(Reason::Unsupported)) => 400,
        // No bucket of the chain can ever hold the reservation: a 429 as OpenAI answers a
        // request larger than a limit, and never a Retry-After (no wait would help).
        (Outcome::Failed, Some(Reason::TooLarge)) => 429,
        // The gateway's key is bad, not the caller's: never a 401 the caller would act on.
        (Outcome::Failed, Some(Reason::Auth)) => 502,
        (Outcome::Failed, Some(Reason::Capacity | Reason::Admission)) | (Outcome::Shed, _) => {
            if facts.retry_after_ms.is_some() {
                429
            } else {
                503
            }
        }
        (Outcome::Failed, Some(Reason::Budget | Reason::Error) | None)
        | (Outcome::Interrupted, _) => {
            if facts.deadline {
                504
            } else {
                502
            }
        }
    }
}

/// `Retry-After` in whole seconds, rounded up so a client never comes back early.
pub fn retry_after_secs(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(upstream: Option<u16>, retry: Option<u64>, deadline: bool) -> StatusFacts {
        StatusFacts {
            upstream_status: upstream,
            retry_after_ms: retry,
            deadline,
        }
    }

    #[test]
    fn status_table_rows() {
        use Outcome::*;
        let none = StatusFacts::default();
        let rows: &[(Outcome, Option<Reason>, StatusFacts, u16)] = &[
            (Success, None, none, 200),
            (Degraded, None, none, 200),
            (Queued, None, none, 202),
            (
                Failed,
                Some(Reason::Request),
                facts(Some(400), None, false),
                400,
            ),
            (
                Failed,
                Some(Reason::Request),
                facts(Some(413), None, false),
                413,
            ),
            (
                Failed,
                Some(Reason::Request),
                facts(Some(422), None, false),
                422,
            ),
            // A request error the upstream reported with a 200 body, or none at all.
            (
                Failed,
                Some(Reason::Request),
                facts(Some(200), None, false),
                400,
            ),
            (Failed, Some(Reason::Request), none, 400),
            (
                Failed,
                Some(Reason::Auth),
                facts(Some(401), None, false),
                502,
            ),
            (
                Failed,
                Some(Reason::Capacity),
                facts(None, Some(3000), false),
                429,
            ),
            (Failed, Some(Reason::Capacity), none, 503),
            (Shed, None, facts(None, Some(10), false), 429),
            (Shed, None, none, 503),
            (Failed, Some(Reason::Unsupported), none, 400),
            (Failed, Some(Reason::TooLarge), none, 429),
            (Failed, Some(Reason::Budget), none, 502),
            (Failed, Some(Reason::Budget), facts(None, None, true), 504),
            (Failed, Some(Reason::Error), none, 502),
            (Failed, Some(Reason::Error), facts(None, None, true), 504),
            (Failed, None, none, 502),
        ];
        for (outcome, reason, f, want) in rows {
            assert_eq!(
                http_status(*outcome, *reason, *f),
                *want,
                "{outcome} / {reason:?} / {f:?}"
            );
        }
    }

    #[test]
    fn retry_after_rounds_up_and_is_never_zero() {
        assert_eq!(retry_after_secs(0), 1);
        assert_eq!(retry_after_secs(1), 1);
        assert_eq!(retry_after_secs(1000), 1);
        assert_eq!(retry_after_secs(1001), 2);
        assert_eq!(retry_after_secs(3_600_000), 3600);
    }
}
