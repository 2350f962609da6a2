//! Rendering `poolctl chaos`: one line per scenario (the verdict first, as nextest
//! prints tests), the failures in full, the summary, `--json` and JUnit XML.

use super::look::{Look, Tone};
use super::render::hang;
use super::table::{width, wrap};
use crate::harness::compare::attempt_label;
use crate::harness::runner::{RequestRun, ScenarioRun};
use serde_json::{json, Value};

/// Chaos results, one line per scenario as nextest prints tests: the verdict first, so
/// `grep ^FAIL` finds a failure in a CI log; the attempts below on continuation lines
/// wrapped to the width, never padded to the widest.
pub fn chaos_results(runs: &[ScenarioRun], look: &Look) -> String {
    const INDENT: usize = 6;
    let mut out = String::new();
    for r in runs {
        let (verdict, tone) = if r.passed {
            ("PASS", Tone::Good)
        } else {
            ("FAIL", Tone::Fail)
        };
        let time = format!("[{:.0} ms]", r.wall_ms);
        let head = format!("{verdict}  {}", r.name);
        let mut lines: Vec<Vec<String>> = Vec::new();
        if width(&head) + 2 + width(&time) <= look.width {
            out.push_str(&format!(
                "{}  {}  {time}\n",
                look.paint(tone, verdict),
                r.name
            ));
        } else {
            out.push_str(&format!("{}  {}\n", look.paint(tone, verdict), r.name));
            lines.push(vec![time]);
        }
        let many = r.requests.len() > 1;
        // Consecutive requests that made the same attempts share one line (`#3-1002`):
        // a scenario of 1,000 copies is a line, not a thousand.
        let mut runs: Vec<(usize, usize, Vec<String>)> = Vec::new();
        for (i, req) in r.requests.iter().enumerate() {
            let mut items: Vec<String> = req.report.attempts.iter().map(attempt_label).collect();
            if items.is_empty() {
                items.push("(no upstream call)".into());
            }
            match runs.last_mut() {
                Some((_, last, same)) if *same == items => *last = i,
                _ => runs.push((i, i, items)),
            }
        }
        for (first, last, mut items) in runs {
            if many {
                let at = if last > first {
                    format!("#{}-{}", first + 1, last + 1)
                } else {
                    format!("#{}", first + 1)
                };
                items[0] = format!("{at} {}", items[0]);
            }
            lines.push(items);
        }
        let room = look.width.saturating_sub(INDENT);
        for line in wrap(&lines, ", ", room) {
            out.push_str(&format!("{}{line}\n", " ".repeat(INDENT)));
        }
    }
    out
}

/// For each failed scenario: expected against got, long values wrapped under
/// themselves.
pub fn chaos_failures(runs: &[ScenarioRun], look: &Look) -> String {
    let mut out = String::new();
    for r in runs.iter().filter(|r| !r.passed) {
        out.push_str(&format!(
            "\n{} {} ({})\n",
            look.paint(Tone::Fail, "FAIL"),
            r.name,
            r.file.display()
        ));
        if let Some(e) = &r.error {
            out.push_str(&hang("  error: ", e, look.width));
        }
        // Each field already names its `requests:` entry (the harness knows which
        // copies of a `repeat` belong to which entry; a flat index would not).
        for req in &r.requests {
            for m in &req.mismatches {
                out.push_str(&format!("  {}\n", m.field));
                out.push_str(&hang("    expected: ", &m.expected, look.width));
                out.push_str(&hang("    got:      ", &m.got, look.width));
            }
        }
    }
    out
}

pub fn chaos_summary(runs: &[ScenarioRun], look: &Look) -> String {
    let passed = runs.iter().filter(|r| r.passed).count();
    let failed = runs.len() - passed;
    let total_ms: f64 = runs.iter().map(|r| r.wall_ms).sum();
    let failed_text = format!("{failed} failed");
    let failed_text = if failed > 0 {
        look.paint(Tone::Fail, &failed_text)
    } else {
        failed_text
    };
    format!(
        "{passed} passed, {failed_text} ({} scenarios, {:.0} ms of scenario time)",
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
        // scenario-format.md v2: every request carries its admission wait and levels.
        "queued_ms": req.report.queued_ms,
        "buckets": req.buckets,
        "mismatches": req.mismatches,
    })
}

/// One scenario as one JSON object (spec/scenario-format.md "Output"). The top-level
/// fields describe the last request; `requests` holds each one.
pub fn chaos_json(r: &ScenarioRun) -> String {
    let mut obj = r.requests.last().map(request_json).unwrap_or_else(|| {
        json!({"outcome": null, "reason": null, "served_by": null, "attempts": [], "skipped": [],
               "health": {}, "upstream_calls": {}, "waits_ms": [], "queued_ms": null, "buckets": {},
               "mismatches": []})
    });
    let all_mismatches: Vec<Value> = r
        .requests
        .iter()
        .flat_map(|req| {
            req.mismatches
                .iter()
                .map(|m| json!({"field": m.field, "expected": m.expected, "got": m.got}))
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
            s.set_description(chaos_failures(
                std::slice::from_ref(r),
                &Look::plain(usize::MAX),
            ));
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
