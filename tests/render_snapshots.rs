//! Snapshots of what people read: the chaos, probe, walk and status renderings at 80
//! and 200 columns and with no terminal (the fixed default width), times redacted so the
//! snapshots hold on any machine. In each: every identifier whole, no line wider than
//! the width.

use poolctl::cli::look::{self, strip_ansi, Look};
use poolctl::cli::probe::TierProbe;
use poolctl::cli::{render, render_chaos};
use poolctl::core::trace::{AttemptRecord, Chosen, HealthChange, Report, Skip, SkipWhy, Step};
use poolctl::core::vocab::{Action, CallPath, Class, HealthState, Outcome, Reason, Route};
use poolctl::harness::compare::{HealthView, Mismatch};
use poolctl::harness::runner::{RequestRun, ScenarioRun};
use poolctl::policy::health::Health;
use poolctl::router::probe::{Headroom, ProbeResult};
use std::collections::BTreeMap;

fn route(s: &str) -> Route {
    Route::parse(s).unwrap()
}

fn attempt(
    i: u32,
    r: &str,
    status: Option<u16>,
    class: Class,
    action: Action,
    health: Option<HealthChange>,
) -> AttemptRecord {
    AttemptRecord {
        index: i,
        route: route(r),
        status,
        class,
        action,
        wait_ms: None,
        health,
        latency_ms: 37,
        request_id: None,
        hint_ms: None,
        row: 5,
        detail: None,
        code: None,
        workflow: None,
        requested_route: route(r),
        chosen: Chosen::Fallback,
        dropped: Vec::new(),
        tokens: None,
        cost_usd: 0.0,
        breaker_open_until: None,
    }
}

fn report(
    outcome: Outcome,
    reason: Option<Reason>,
    attempts: Vec<AttemptRecord>,
    skipped: Vec<Skip>,
) -> Report {
    Report {
        path: CallPath::Chat,
        outcome,
        reason,
        served_by: attempts
            .last()
            .filter(|a| a.class == Class::Ok)
            .map(|a| a.route.clone()),
        text: Some("OK".into()).filter(|_| outcome == Outcome::Success),
        attempts,
        skipped,
        waits_ms: vec![],
        queued_ms: 0,
        elapsed_ms: 0,
        notes: vec![],
    }
}

fn redact() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.add_filter(r"\d+(\.\d+)? ms", "[time]");
    s
}

fn retired(reason: &str) -> Option<HealthChange> {
    Some(HealthChange {
        state: HealthState::Retired,
        until: None,
        reason: Some(reason.into()),
    })
}

/// 80 and 200 columns, and what a pipe or CI log gets (no terminal, no `$COLUMNS`).
fn widths() -> [(&'static str, usize); 3] {
    [
        ("80", 80),
        ("200", 200),
        ("no_terminal", look::width_from(None, None)),
    ]
}

/// No line wider than `width`, and every identifier printed whole on one line.
fn assert_fits(text: &str, width: usize, identifiers: &[&str]) {
    for line in text.lines() {
        assert!(
            line.chars().count() <= width,
            "line of {} > {width} columns: {line:?}\n{text}",
            line.chars().count()
        );
    }
    for id in identifiers {
        assert!(
            text.lines().any(|l| l.contains(id)),
            "`{id}` is not whole on one line at {width} columns:\n{text}"
        );
    }
}

fn chaos_runs() -> Vec<ScenarioRun> {
    let passed = ScenarioRun {
        file: "scenarios/model-not-exist.yaml".into(),
        name: "model-not-exist-mid-chain-falls-through".into(),
        passed: true,
        requests: vec![RequestRun {
            report: report(
                Outcome::Success,
                None,
                vec![
                    attempt(
                        1,
                        "dashscope/qwen3.6-max-preview",
                        Some(400),
                        Class::ModelUnavailable,
                        Action::Fallback,
                        retired("model_unavailable"),
                    ),
                    attempt(
                        2,
                        "dashscope/qwen-flash",
                        Some(200),
                        Class::Ok,
                        Action::Done,
                        None,
                    ),
                ],
                vec![],
            ),
            health: BTreeMap::new(),
            upstream_calls: BTreeMap::new(),
            buckets: BTreeMap::new(),
            mismatches: vec![],
        }],
        wall_ms: 3.2,
        error: None,
    };
    // A long chain: its attempts go on continuation lines, never one 1,700-column row.
    let long_chain: Vec<AttemptRecord> = (1..=9)
        .map(|i| {
            attempt(
                i,
                "dashscope/qwen3.8-max",
                Some(403),
                Class::QuotaExhausted,
                Action::Fallback,
                retired("quota"),
            )
        })
        .chain([attempt(
            10,
            "dashscope/qwen-flash-2025-07-28",
            Some(200),
            Class::Ok,
            Action::Done,
            None,
        )])
        .collect();
    let long = ScenarioRun {
        file: "scenarios/ten.yaml".into(),
        name: "ten-model-chain-walks-to-last-with-primary-retired".into(),
        passed: true,
        requests: vec![RequestRun {
            report: report(Outcome::Success, None, long_chain, vec![]),
            health: BTreeMap::new(),
            upstream_calls: BTreeMap::new(),
            buckets: BTreeMap::new(),
            mismatches: vec![],
        }],
        wall_ms: 12.0,
        error: None,
    };
    let failed = ScenarioRun {
        file: "scenarios/wrong.yaml".into(),
        name: "a-wrong-expectation".into(),
        passed: false,
        requests: vec![RequestRun {
            report: report(
                Outcome::Failed,
                Some(Reason::Capacity),
                vec![attempt(
                    1,
                    "openai/gpt-x",
                    Some(429),
                    Class::QuotaExhausted,
                    Action::FailClosed,
                    retired("quota"),
                )],
                vec![],
            ),
            health: BTreeMap::from([(
                route("openai/gpt-x"),
                HealthView {
                    state: HealthState::Retired,
                    ms: None,
                    reason: Some("quota".into()),
                },
            )]),
            upstream_calls: BTreeMap::new(),
            buckets: BTreeMap::new(),
            mismatches: vec![Mismatch {
                field: "attempts[0].class".into(),
                expected: "rate_limited".into(),
                got: "quota_exhausted".into(),
            }],
        }],
        wall_ms: 1.0,
        error: None,
    };
    vec![passed, long, failed]
}

fn chaos_text(runs: &[ScenarioRun], look: &Look) -> String {
    format!(
        "{}{}{}",
        render_chaos::chaos_results(runs, look),
        render_chaos::chaos_failures(runs, look),
        render_chaos::chaos_summary(runs, look)
    )
}

#[test]
fn chaos_results_at_80_200_and_no_terminal() {
    let runs = chaos_runs();
    for (name, w) in widths() {
        let text = chaos_text(&runs, &Look::plain(w));
        assert_fits(
            &text,
            w,
            &[
                "model-not-exist-mid-chain-falls-through",
                "ten-model-chain-walks-to-last-with-primary-retired",
                "model_unavailable→fallback",
                "quota_exhausted→fail_closed",
            ],
        );
        // A failure is found by the start of its line.
        assert!(text
            .lines()
            .any(|l| l.starts_with("FAIL  a-wrong-expectation")));
        redact().bind(|| insta::assert_snapshot!(format!("chaos_{name}"), text));
    }
}

#[test]
fn colour_marks_fail_and_strips_back_to_the_plain_text() {
    let runs = chaos_runs();
    let plain = chaos_text(&runs, &Look::plain(100));
    let colour = chaos_text(
        &runs,
        &Look {
            width: 100,
            color: true,
        },
    );
    assert!(colour.contains("\x1b[1;31mFAIL\x1b[0m"), "{colour:?}");
    assert!(!plain.contains('\x1b'));
    assert_eq!(strip_ansi(&colour), plain);
}

fn probe_tiers() -> (TierProbe, TierProbe) {
    let live = ProbeResult {
        route: route("dashscope/qwen-flash-2025-07-28"),
        status: Some(200),
        class: Some(Class::Ok),
        skipped: None,
        latency_ms: 180,
        retry_after_ms: None,
        request_id: Some("req_1".into()),
        headroom: Some(Headroom {
            requests_remaining: Some(59),
            requests_limit: Some(60),
            tokens_remaining: Some(99000),
            tokens_limit: Some(100000),
            ..Headroom::default()
        }),
        detail: None,
        transition: None,
    };
    let dead = ProbeResult {
        route: route("dashscope/free-tier403-qwen3-max"),
        status: Some(403),
        class: Some(Class::QuotaExhausted),
        skipped: None,
        latency_ms: 212,
        retry_after_ms: Some(3_600_000),
        request_id: None,
        headroom: None,
        detail: Some("The free tier of the model has been exhausted. If you wish to continue access the model on a paid basis, please disable the free tier only mode in the management console.".into()),
        transition: None,
    };
    let t = TierProbe {
        tier: "high".into(),
        live: 1,
        first_live: Some(live.route.clone()),
        routes: vec![live, dead],
    };
    let none = TierProbe {
        tier: "empty".into(),
        live: 0,
        first_live: None,
        routes: vec![t.routes[1].clone()],
    };
    (t, none)
}

#[test]
fn probe_tier_with_a_dead_tail_at_80_200_and_no_terminal() {
    let (t, none) = probe_tiers();
    for (name, w) in widths() {
        let look = Look::plain(w);
        let text = format!(
            "{}{}",
            render::probe_tier(&t, &look),
            render::probe_tier(&none, &look)
        );
        assert_fits(
            &text,
            w,
            &[
                "dashscope/qwen-flash-2025-07-28",
                "dashscope/free-tier403-qwen3-max",
                "quota_exhausted",
                "headroom",
            ],
        );
        assert!(text.contains("dead tail"), "{text}");
        assert!(text.contains("has NO live route"), "{text}");
        redact().bind(|| insta::assert_snapshot!(format!("probe_{name}"), text));
    }
}

fn walk_lines(look: &Look) -> String {
    let skip = Skip {
        route: route("agnes/agnes-2.5-flash"),
        why: SkipWhy::Retired,
        cause: Some("forced by walk --retire".into()),
    };
    let a1 = attempt(
        1,
        "dashscope/qwen3.8-max",
        Some(403),
        Class::QuotaExhausted,
        Action::Fallback,
        retired("quota"),
    );
    let a2 = AttemptRecord {
        health: Some(HealthChange {
            state: HealthState::Cooling,
            until: Some(1_767_225_620_000),
            reason: Some("rate_limited".into()),
        }),
        wait_ms: Some(1000),
        ..attempt(
            2,
            "deepseek/deepseek-chat",
            Some(429),
            Class::RateLimited,
            Action::Retry,
            None,
        )
    };
    let a3 = attempt(
        3,
        "dashscope/qwen-flash-2025-07-28",
        Some(200),
        Class::Ok,
        Action::Done,
        None,
    );
    let rw = render::walk_route_width([&skip.route, &a1.route, &a2.route, &a3.route]);
    let all_skipped = vec![
        Skip {
            route: route("dashscope/qwen3.8-max"),
            why: SkipWhy::Retired,
            cause: Some("quota".into()),
        },
        Skip {
            route: route("dashscope/qwen3.6-max-preview"),
            why: SkipWhy::Retired,
            cause: Some("model_unavailable".into()),
        },
        Skip {
            route: route("deepseek/deepseek-chat"),
            why: SkipWhy::Cooling,
            cause: Some("rate_limited".into()),
        },
    ];
    [
        render::walk_step(Step::Skipped(&skip), rw, look),
        render::walk_step(Step::Attempt(&a1), rw, look),
        render::walk_step(Step::Attempt(&a2), rw, look),
        render::walk_step(Step::Attempt(&a3), rw, look),
        render::walk_outcome(
            &report(Outcome::Success, None, vec![a3.clone()], vec![]),
            look,
        ),
        render::walk_outcome(
            &report(
                Outcome::Failed,
                Some(Reason::Error),
                vec![a1.clone()],
                vec![],
            ),
            look,
        ),
        render::walk_outcome(
            &report(Outcome::Failed, Some(Reason::Error), vec![], all_skipped),
            look,
        ),
    ]
    .join("\n")
}

#[test]
fn walk_steps_and_outcome_at_80_200_and_no_terminal() {
    for (name, w) in widths() {
        let text = walk_lines(&Look::plain(w));
        assert_fits(
            &text,
            w,
            &[
                "skip  agnes/agnes-2.5-flash",
                "dashscope/qwen-flash-2025-07-28",
                "quota_exhausted → fallback",
                "rate_limited → retry",
                "2026-01-01T00:00:20Z",
            ],
        );
        redact().bind(|| insta::assert_snapshot!(format!("walk_{name}"), text));
    }
}

#[test]
fn a_walk_that_called_nothing_says_so_and_why() {
    let text = walk_lines(&Look::plain(200));
    let at = text.find("no route was called").expect("a closing line");
    let last = text[at..].replace('\n', " ");
    assert!(
        last.starts_with("no route was called: all 3 routes were skipped: 2 retired"),
        "{last}"
    );
    assert!(last.contains("1 cooling (rate_limited)"), "{last}");
    assert!(last.contains("poolctl restore ROUTE"), "{last}");
}

#[test]
fn status_table_at_80_200_and_no_terminal_and_json() {
    let now = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    let rows = vec![
        (
            route("a/cooling"),
            Health::Cooling {
                until: now + 20_000,
                reason: "rate_limited".into(),
            },
        ),
        (
            route("a/expired"),
            Health::Cooling {
                until: now - 1,
                reason: "rate_limited".into(),
            },
        ),
        (
            route("dashscope/free-tier403-qwen3-max"),
            Health::Retired {
                reason: "quota".into(),
            },
        ),
        (
            route("b/retired"),
            Health::Retired {
                reason: "incident 42: the provider's free tier ran out during the launch; restore once billing is fixed".into(),
            },
        ),
        (route("c/ready"), Health::Ready),
    ];
    for (name, w) in widths() {
        let text = render::status_table(&rows, now, &[], &Look::plain(w));
        assert_fits(
            &text,
            w,
            &[
                "dashscope/free-tier403-qwen3-max",
                "2026-01-01T00:00:20Z",
                "retired",
                "cooling",
            ],
        );
        insta::assert_snapshot!(format!("status_{name}"), text);
    }
    let v: serde_json::Value = serde_json::from_str(&render::status_json(&rows, now, &[])).unwrap();
    insta::assert_json_snapshot!(v);
}

/// Guards the chaos listing of a scenario of many copies (`repeat: 1000`): consecutive
/// requests with the same attempts share one line, so it stays a few lines long.
#[test]
fn consecutive_requests_with_the_same_attempts_share_one_chaos_line() {
    let run = |attempts: Vec<AttemptRecord>| RequestRun {
        report: report(Outcome::Success, None, attempts, vec![]),
        health: BTreeMap::new(),
        upstream_calls: BTreeMap::new(),
        buckets: BTreeMap::new(),
        mismatches: vec![],
    };
    let ok = || attempt(1, "a/x", Some(200), Class::Ok, Action::Done, None);
    let failed_over = || {
        vec![
            attempt(
                1,
                "a/x",
                Some(429),
                Class::QuotaExhausted,
                Action::Fallback,
                None,
            ),
            attempt(2, "b/x", Some(200), Class::Ok, Action::Done, None),
        ]
    };
    let mut requests = vec![run(failed_over())];
    requests.extend((0..1000).map(|_| run(vec![ok()])));
    requests.push(run(failed_over()));
    let runs = vec![ScenarioRun {
        file: "scenarios/many.yaml".into(),
        name: "many".into(),
        passed: true,
        requests,
        wall_ms: 1.0,
        error: None,
    }];
    let text = render_chaos::chaos_results(&runs, &Look::plain(80));
    let lines: Vec<&str> = text.lines().skip(1).map(str::trim).collect();
    assert_eq!(
        lines,
        vec![
            "#1 429 quota_exhausted→fallback, 200 ok→done",
            "#2-1001 200 ok→done",
            "#1002 429 quota_exhausted→fallback, 200 ok→done",
        ],
        "{text}"
    );
}
