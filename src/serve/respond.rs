//! A finished request that did not answer, as the error a client sees: the status from
//! the status table, `type` the outcome's reason, `code` the upstream's own code for a
//! request error, and the upstream's message (keys masked) or the gateway's own.
//! A pure function of the report, so every row is testable without a socket.

use super::errors::ApiError;
use super::status::{http_status, retry_after_secs, StatusFacts};
use crate::core::trace::{AttemptRecord, Report};
use crate::core::vocab::{Class, Outcome, Reason};

/// The error-code word clients know for a request-error class (OpenAI's codes).
fn is_request_class(c: Class) -> bool {
    matches!(
        c,
        Class::InvalidRequest | Class::ContextOverflow | Class::ContentPolicy
    )
}

/// What `failure` needs beside the report.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context {
    /// When a route of the chain takes traffic again, if known.
    pub retry_after_ms: Option<u64>,
    /// The card's `max_elapsed_ms`, to tell a spent deadline (504) from other budgets.
    pub max_elapsed_ms: u64,
}

fn summary(report: &Report) -> String {
    let attempts: Vec<String> = report
        .attempts
        .iter()
        .map(|a| format!("{} {}", a.route, a.class))
        .collect();
    let skipped: Vec<String> = report
        .skipped
        .iter()
        .map(|s| format!("{} {}", s.route, s.why.as_str()))
        .collect();
    let mut parts = Vec::new();
    if !attempts.is_empty() {
        parts.push(format!("attempts: {}", attempts.join(", ")));
    }
    if !skipped.is_empty() {
        parts.push(format!("skipped: {}", skipped.join(", ")));
    }
    if parts.is_empty() {
        "no route was tried".into()
    } else {
        parts.join("; ")
    }
}

/// Which field no route could carry, and each route's reason: `no route of the chain
/// can carry this request: anthropic/claude: cannot carry: n; ...`.
/// Each route passed over, with why: `route: cause`.
fn skip_causes(report: &Report) -> String {
    let routes: Vec<String> = report
        .skipped
        .iter()
        .map(|s| {
            let why = s.cause.as_deref().unwrap_or(s.why.as_str());
            format!("{}: {why}", s.route)
        })
        .collect();
    routes.join("; ")
}

/// The error for a report whose outcome is not an answer. `mask` removes keys.
pub fn failure(report: &Report, ctx: Context, mask: &dyn Fn(&str) -> String) -> ApiError {
    let reason = report.reason;
    let word = match (report.outcome, reason) {
        (Outcome::Shed, _) => "admission".to_string(),
        (Outcome::Queued, _) => "queued".to_string(),
        (Outcome::Interrupted, _) => "stream_interrupted".to_string(),
        (_, Some(r)) => r.as_str().to_string(),
        (_, None) => Reason::Error.as_str().to_string(),
    };
    let request_attempt: Option<&AttemptRecord> = (reason == Some(Reason::Request))
        .then(|| {
            report
                .attempts
                .iter()
                .rev()
                .find(|a| is_request_class(a.class))
        })
        .flatten();
    let last = report.attempts.last();
    let deadline = last.is_some_and(|a| a.class == Class::Timeout)
        || (reason == Some(Reason::Budget) && report.elapsed_ms >= ctx.max_elapsed_ms);
    let facts = StatusFacts {
        upstream_status: request_attempt.and_then(|a| a.status),
        retry_after_ms: ctx.retry_after_ms.filter(|_| {
            matches!(report.outcome, Outcome::Shed) || reason == Some(Reason::Capacity)
        }),
        deadline,
    };
    let status = http_status(report.outcome, reason, facts);
    // A request error keeps the upstream's own code; one that sent none gets the
    // reason (cli.md), never a code the upstream did not say.
    // Gemini's `error.code` is only the HTTP status again: "400" is no code of its own.
    if reason == Some(Reason::Unsupported) {
        return ApiError::new(
            status,
            &word,
            "unsupported_by_chain",
            format!(
                "no route of the chain can carry this request: {}",
                skip_causes(report)
            ),
        );
    }
    if reason == Some(Reason::TooLarge) {
        // No Retry-After: no wait would admit it.
        return ApiError::new(
            status,
            &word,
            "request_too_large",
            format!(
                "the request is larger than any route's rate limit can ever admit: {}; \
                 lower max_tokens or the prompt",
                skip_causes(report)
            ),
        );
    }
    let code = match request_attempt {
        Some(a) => a
            .code
            .clone()
            .filter(|c| a.status.is_none_or(|s| *c != s.to_string()))
            .unwrap_or_else(|| word.clone()),
        None => word.clone(),
    };
    let upstream_message = request_attempt
        .or(last)
        .and_then(|a| a.detail.as_deref())
        .map(mask);
    let own = format!("{} ({}): {}", report.outcome, word, summary(report));
    let message = match upstream_message {
        Some(m) if reason == Some(Reason::Request) => m,
        Some(m) => format!("{own}; last upstream message: {m}"),
        None => own,
    };
    let mut e = ApiError::new(status, &word, &code, message);
    if status == 429 {
        e.retry_after_secs = facts.retry_after_ms.map(retry_after_secs);
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::trace::AttemptRecord;
    use crate::core::vocab::{Action, CallPath, Route};

    fn attempt(route: &str, status: Option<u16>, class: Class, detail: &str) -> AttemptRecord {
        let route = Route::parse(route).unwrap();
        AttemptRecord {
            index: 1,
            route: route.clone(),
            status,
            class,
            action: Action::FailClosed,
            wait_ms: None,
            health: None,
            latency_ms: 1,
            request_id: None,
            hint_ms: None,
            row: 3,
            detail: Some(detail.into()),
            code: None,
            workflow: None,
            requested_route: route,
            chosen: crate::core::trace::Chosen::Primary,
            dropped: vec![],
            tokens: None,
            cost_usd: 0.0,
            breaker_open_until: None,
        }
    }

    fn report(outcome: Outcome, reason: Option<Reason>, attempts: Vec<AttemptRecord>) -> Report {
        Report {
            path: CallPath::Chat,
            outcome,
            reason,
            served_by: None,
            text: None,
            attempts,
            skipped: vec![],
            waits_ms: vec![],
            queued_ms: 0,
            elapsed_ms: 10,
            notes: vec![],
        }
    }

    #[test]
    fn request_errors_pass_the_upstream_status_code_and_message() {
        let mut a = attempt(
            "openai/gpt",
            Some(400),
            Class::ContextOverflow,
            "This model's maximum context length is 4097 tokens.",
        );
        a.code = Some("context_length_exceeded".into());
        let r = report(Outcome::Failed, Some(Reason::Request), vec![a.clone()]);
        let e = failure(&r, Context::default(), &|s| s.to_string());
        assert_eq!(
            (e.status, e.kind.as_str(), e.code.as_str()),
            (400, "request", "context_length_exceeded")
        );
        assert!(e.message.starts_with("This model's maximum context length"));
        // An upstream that reported no code of its own: the reason (cli.md), never a
        // code it did not say.
        a.code = None;
        let r = report(Outcome::Failed, Some(Reason::Request), vec![a]);
        let e = failure(&r, Context::default(), &|s| s.to_string());
        assert_eq!((e.status, e.code.as_str()), (400, "request"));
    }

    #[test]
    fn a_request_error_code_that_only_repeats_the_http_status_gives_way_to_the_reason() {
        // Gemini: {"error": {"code": 400, "status": "INVALID_ARGUMENT", ...}}.
        let mut a = attempt(
            "gemini/gemini-pro",
            Some(400),
            Class::ContextOverflow,
            "The input token count (1200000) exceeds the maximum number of tokens allowed.",
        );
        a.code = Some("400".into());
        let r = report(Outcome::Failed, Some(Reason::Request), vec![a.clone()]);
        let e = failure(&r, Context::default(), &|s| s.to_string());
        assert_eq!((e.status, e.code.as_str()), (400, "request"));
        // A vendor's own numeric code (Zhipu's 1261) is its code, and is kept.
        a.code = Some("1261".into());
        let r = report(Outcome::Failed, Some(Reason::Request), vec![a]);
        let e = failure(&r, Context::default(), &|s| s.to_string());
        assert_eq!(e.code, "1261");
    }

    #[test]
    fn capacity_is_429_with_retry_after_only_when_an_instant_is_known() {
        let r = report(
            Outcome::Failed,
            Some(Reason::Capacity),
            vec![attempt(
                "a/x",
                Some(429),
                Class::RateLimited,
                "slow down sk-abcdefgh12345",
            )],
        );
        let known = Context {
            retry_after_ms: Some(2500),
            max_elapsed_ms: 60_000,
        };
        let e = failure(&r, known, &|s| super::super::errors::mask_keys(s, &[]));
        assert_eq!((e.status, e.retry_after_secs), (429, Some(3)));
        assert_eq!((e.kind.as_str(), e.code.as_str()), ("capacity", "capacity"));
        assert!(!e.message.contains("abcdefgh"), "{}", e.message);
        let e = failure(&r, Context::default(), &|s| s.to_string());
        assert_eq!((e.status, e.retry_after_secs), (503, None));
    }

    #[test]
    fn auth_is_502_and_a_timeout_is_504() {
        let r = report(
            Outcome::Failed,
            Some(Reason::Auth),
            vec![attempt("a/x", Some(401), Class::Auth, "bad key")],
        );
        assert_eq!(
            failure(&r, Context::default(), &|s| s.to_string()).status,
            502
        );
        let r = report(
            Outcome::Failed,
            Some(Reason::Error),
            vec![attempt("a/x", None, Class::Timeout, "deadline")],
        );
        let e = failure(&r, Context::default(), &|s| s.to_string());
        assert_eq!((e.status, e.kind.as_str()), (504, "error"));
    }
}
