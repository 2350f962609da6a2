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
    let attempts: Vec<Value> = req
        .report
        .attempts
        .iter()
        .map(|a| {
            json!({
                "route": a.route, "status": a.status, "class": a.class, "action": a.action,
                "wait_ms": a.wait_ms, "health": a.health, "latency_ms": a.latency_ms,
                "request_id": a.request_id, "hint_ms": a.hint_ms, "row": a.row, "detail": a.detail,
            })
        })
        .collect();
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
