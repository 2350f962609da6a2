//! Rendering: plain functions from data to strings, so output is snapshot-testable and
//! commands stay thin.

use crate::harness::compare::attempt_label;
use crate::harness::runner::{RequestRun, ScenarioRun};
use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};
use serde_json::{json, Value};

/// The chaos table: one row per scenario. `width` fixes the table width (snapshots).
pub fn chaos_table(runs: &[ScenarioRun], width: Option<u16>) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(vec!["scenario", "result", "attempts", "time"]);
    if let Some(w) = width {
        t.set_width(w);
    }
    for r in runs {
        let attempts = r
            .requests
            .iter()
            .map(|req| {
                let steps: Vec<String> = req.report.attempts.iter().map(attempt_label).collect();
                if steps.is_empty() {
                    "(no upstream call)".to_string()
                } else {
                    steps.join(", ")
                }
            })
            .collect::<Vec<_>>()
            .join(" | ");
        t.add_row(vec![
            r.name.clone(),
            if r.passed {
                "pass".into()
            } else {
                "FAIL".into()
            },
            attempts,
            format!("{:.0} ms", r.wall_ms),
        ]);
    }
    format!("{t}\n")
}

/// For each failed scenario: expected against got.
pub fn chaos_failures(runs: &[ScenarioRun]) -> String {
    let mut out = String::new();
    for r in runs.iter().filter(|r| !r.passed) {
        out.push_str(&format!("\nFAIL {} ({})\n", r.name, r.file.display()));
        if let Some(e) = &r.error {
            out.push_str(&format!("  error: {e}\n"));
        }
        let many = r.requests.len() > 1;
        for (i, req) in r.requests.iter().enumerate() {
            for m in &req.mismatches {
                let at = if many {
                    format!("requests[{i}].")
                } else {
                    String::new()
                };
                out.push_str(&format!(
                    "  {at}{}\n    expected: {}\n    got:      {}\n",
                    m.field, m.expected, m.got
                ));
            }
        }
    }
    out
}

pub fn chaos_summary(runs: &[ScenarioRun]) -> String {
    let passed = runs.iter().filter(|r| r.passed).count();
    let failed = runs.len() - passed;
    let total_ms: f64 = runs.iter().map(|r| r.wall_ms).sum();
    format!(
        "{passed} passed, {failed} failed ({} scenarios, {:.0} ms of scenario time)",
        runs.len(),
        total_ms
    )
}

fn request_json(req: &RequestRun) -> Value {
    // Every field of every attempt record (workflow, requested and chosen route, why,
    // wait, tokens, cost, action, ...), as the library serializes it.
    let attempts = json!(req.report.attempts);
    let skipped: Vec<&str> = req
        .report
        .skipped
        .iter()
        .map(|s| s.route.as_str())
        .collect();
    json!({
        "outcome": req.report.outcome,
        "reason": req.report.reason,
        "served_by": req.report.served_by,
        "text": req.report.text,
        "attempts": attempts,
        "skipped": skipped,
        "skipped_why": req.report.skipped,
        "health": req.health,
        "upstream_calls": req.upstream_calls,
        "waits_ms": req.report.waits_ms,
        "mismatches": req.mismatches,
    })
}

/// One scenario as one JSON object (spec/scenario-format.md "Output"). The top-level
/// fields describe the last request; `requests` holds each one.
pub fn chaos_json(r: &ScenarioRun) -> String {
    let mut obj = r.requests.last().map(request_json).unwrap_or_else(|| {
        json!({"outcome": null, "reason": null, "served_by": null, "attempts": [], "skipped": [],
               "health": {}, "upstream_calls": {}, "waits_ms": [], "mismatches": []})
    });
    let all_mismatches: Vec<Value> = r
        .requests
        .iter()
        .enumerate()
        .flat_map(|(i, req)| {
            req.mismatches.iter().map(move |m| {
                let field = if r.requests.len() > 1 {
                    format!("requests[{i}].{}", m.field)
                } else {
                    m.field.clone()
                };
                json!({"field": field, "expected": m.expected, "got": m.got})
            })
        })
        .collect();
    let map = obj.as_object_mut().expect("built as an object");
    map.insert("file".into(), json!(r.file));
    map.insert("name".into(), json!(r.name));
    map.insert("passed".into(), json!(r.passed));
    map.insert("mismatches".into(), Value::Array(all_mismatches));
    map.insert("error".into(), json!(r.error));
    map.insert(
        "wall_ms".into(),
        json!((r.wall_ms * 1000.0).round() / 1000.0),
    );
    if r.requests.len() > 1 {
        map.insert(
            "requests".into(),
            Value::Array(r.requests.iter().map(request_json).collect()),
        );
    }
    obj.to_string()
}

/// JUnit XML: one test case per scenario, the diff as the failure text.
pub fn chaos_junit(runs: &[ScenarioRun]) -> String {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
    let mut suite = TestSuite::new("poolctl chaos");
    for r in runs {
        let status = if r.passed {
            TestCaseStatus::success()
        } else {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            s.set_message("scenario expectations not met");
            s.set_description(chaos_failures(std::slice::from_ref(r)));
            s
        };
        let mut case = TestCase::new(r.name.clone(), status);
        case.set_classname(r.file.display().to_string());
        case.set_time(std::time::Duration::from_secs_f64(r.wall_ms / 1000.0));
        suite.add_test_case(case);
    }
    let mut report = Report::new("poolctl");
    report.add_test_suite(suite);
    report
        .to_string()
        .unwrap_or_else(|e| format!("<!-- cannot render JUnit: {e} -->"))
}

/// An instant as RFC 3339 (UTC, seconds).
/// RFC 3339 has four-digit years: an instant past 9999 (a state file written by hand,
/// or by an older build) prints as the last second of 9999, never as a bare number.
pub fn rfc3339(ms: crate::clock::UnixMs) -> String {
    const LAST_RFC3339_MS: i64 = 253_402_300_799_000; // 9999-12-31T23:59:59Z
    chrono::DateTime::from_timestamp_millis(ms.clamp(0, LAST_RFC3339_MS))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| "9999-12-31T23:59:59Z".to_string())
}

/// One tier of `probe`: a table, then the summary line and any loud warning.
pub fn probe_tier(t: &crate::cli::probe::TierProbe, width: Option<u16>) -> String {
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(vec![
            "route",
            "status",
            "class",
            "latency",
            "retry hint",
            "request id",
            "headroom",
            "detail",
        ]);
    if let Some(w) = width {
        table.set_width(w);
    }
    for r in &t.routes {
        let headroom = r
            .headroom
            .map(|h| {
                let pair = |rem: Option<u64>, lim: Option<u64>, unit: &str| match (rem, lim) {
                    (None, None) => None,
                    (r, l) => Some(format!(
                        "{}/{} {unit}",
                        r.map(|v| v.to_string()).unwrap_or_else(|| "?".into()),
                        l.map(|v| v.to_string()).unwrap_or_else(|| "?".into())
                    )),
                };
                [
                    pair(h.requests_remaining, h.requests_limit, "req"),
                    pair(h.tokens_remaining, h.tokens_limit, "tok"),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", ")
            })
            .unwrap_or_default();
        table.add_row(vec![
            r.route.to_string(),
            r.status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "—".into()),
            r.class.to_string(),
            format!("{} ms", r.latency_ms),
            r.retry_after_ms
                .map(|ms| format!("{ms} ms"))
                .unwrap_or_default(),
            r.request_id.clone().unwrap_or_default(),
            headroom,
            r.detail.clone().unwrap_or_default(),
        ]);
    }
    let mut out = format!("tier `{}`\n{table}\n", t.tier);
    let first = t
        .first_live
        .as_ref()
        .map(|r| r.to_string())
        .unwrap_or_else(|| "none".into());
    out.push_str(&format!(
        "{} of {} routes live; first live: {first}\n",
        t.live,
        t.routes.len()
    ));
    if t.live == 0 {
        out.push_str(&format!(
            "WARNING: tier `{}` has NO live route: every request to it will fail\n",
            t.tier
        ));
    } else if t.dead_tail() {
        let last = t
            .routes
            .last()
            .map(|r| format!("{} ({})", r.route, r.class))
            .unwrap_or_default();
        out.push_str(&format!(
            "WARNING: dead tail: the last route of tier `{}` is not live: {last}; the chain has no working end\n",
            t.tier
        ));
    }
    out.push('\n');
    out
}

/// One step of `walk`, as seed 002's log prints it.
pub fn walk_step(step: crate::trace::Step<'_>) -> String {
    use crate::trace::Step;
    match step {
        Step::Skipped(s) => {
            let cause = s
                .cause
                .as_deref()
                .map(|c| format!(" ({c})"))
                .unwrap_or_default();
            format!(
                "  skip  {:<40} {}{cause}",
                s.route.to_string(),
                s.why.as_str()
            )
        }
        Step::Attempt(a) => {
            let status = a
                .status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "—".into());
            let health = a
                .health
                .as_ref()
                .map(|h| {
                    let reason = h
                        .reason
                        .as_deref()
                        .map(|r| format!(" {r}"))
                        .unwrap_or_default();
                    match h.until {
                        Some(until) => format!("  → {}{reason} until {}", h.state, rfc3339(until)),
                        None => format!("  → {}{reason}", h.state),
                    }
                })
                .unwrap_or_default();
            let wait = a
                .wait_ms
                .map(|w| format!(" (wait {w} ms)"))
                .unwrap_or_default();
            format!(
                "  {:>3}  {:<40} {status:>4}  {} → {}{wait}{health}  [{} ms]",
                a.index,
                a.route.to_string(),
                a.class,
                a.action,
                a.latency_ms
            )
        }
    }
}

/// The last line of `walk`: outcome, reason, and who served.
pub fn walk_outcome(r: &crate::trace::Report) -> String {
    let mut line = format!("outcome: {}", r.outcome);
    if let Some(reason) = r.reason {
        line.push_str(&format!(" (reason: {reason})"));
    }
    if let Some(by) = &r.served_by {
        line.push_str(&format!(" — served by {by}"));
    }
    if let Some(text) = &r.text {
        let short: String = text.chars().take(120).collect();
        line.push_str(&format!(": {short:?}"));
    }
    line
}

/// `walk --json` (spec/cli.md).
pub fn walk_json(tier: &str, r: &crate::trace::Report) -> String {
    let attempts = json!(r.attempts);
    let skipped = json!(r.skipped);
    json!({"tier": tier, "outcome": r.outcome, "reason": r.reason, "served_by": r.served_by,
           "text": r.text, "attempts": attempts, "skipped": skipped})
    .to_string()
}

fn status_row(
    route: &crate::vocab::Route,
    h: &crate::health::Health,
    now: crate::clock::UnixMs,
) -> (String, String, Option<String>, Option<String>) {
    let state = h.state_at(now);
    let until = (state == crate::vocab::HealthState::Cooling)
        .then(|| h.until().map(rfc3339))
        .flatten();
    let reason = (state != crate::vocab::HealthState::Ready)
        .then(|| h.reason().map(str::to_string))
        .flatten();
    (route.to_string(), state.to_string(), until, reason)
}

/// `status --json` (spec/cli.md): `{routes:[{route, state, until, reason}]}`.
pub fn status_json(
    rows: &[(crate::vocab::Route, crate::health::Health)],
    now: crate::clock::UnixMs,
) -> String {
    let routes: Vec<Value> = rows
        .iter()
        .map(|(r, h)| {
            let (route, state, until, reason) = status_row(r, h, now);
            json!({"route": route, "state": state, "until": until, "reason": reason})
        })
        .collect();
    json!({ "routes": routes }).to_string()
}

pub fn status_table(
    rows: &[(crate::vocab::Route, crate::health::Health)],
    now: crate::clock::UnixMs,
    width: Option<u16>,
) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(vec!["route", "state", "until", "reason"]);
    if let Some(w) = width {
        t.set_width(w);
    }
    for (r, h) in rows {
        let (route, state, until, reason) = status_row(r, h, now);
        t.add_row(vec![
            route,
            state,
            until.unwrap_or_default(),
            reason.unwrap_or_default(),
        ]);
    }
    format!("{t}\n")
}
