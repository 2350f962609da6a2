//! Snapshots of what people read: the chaos, probe, walk and status renderings, with
//! table widths fixed and times redacted so the snapshots hold on any machine.

use poolctl::cli::probe::TierProbe;
use poolctl::cli::render;
use poolctl::harness::compare::{HealthView, Mismatch};
use poolctl::harness::runner::{RequestRun, ScenarioRun};
use poolctl::health::Health;
use poolctl::probe::{Headroom, ProbeResult};
use poolctl::trace::{AttemptRecord, Chosen, HealthChange, Report, Skip, SkipWhy, Step};
use poolctl::vocab::{Action, CallPath, Class, HealthState, Outcome, Reason, Route};
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

#[test]
fn chaos_table_and_diff() {
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
            mismatches: vec![],
        }],
        wall_ms: 3.2,
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
            mismatches: vec![Mismatch {
                field: "attempts[0].class".into(),
                expected: "rate_limited".into(),
                got: "quota_exhausted".into(),
            }],
        }],
        wall_ms: 1.0,
        error: None,
    };
    let runs = [passed, failed];
    let text = format!(
        "{}{}{}",
        render::chaos_table(&runs, Some(110)),
        render::chaos_failures(&runs),
        render::chaos_summary(&runs)
    );
    redact().bind(|| insta::assert_snapshot!(text));
}

#[test]
fn probe_tier_with_a_dead_tail() {
    let live = ProbeResult {
        route: route("dashscope/qwen-flash"),
        status: Some(200),
        class: Class::Ok,
        latency_ms: 180,
        retry_after_ms: None,
        request_id: Some("req_1".into()),
        headroom: Some(Headroom {
            requests_remaining: Some(59),
            requests_limit: Some(60),
            tokens_remaining: Some(99000),
            tokens_limit: Some(100000),
        }),
        detail: None,
        transition: None,
    };
    let dead = ProbeResult {
        route: route("dashscope/qwen3.8-max"),
        status: Some(403),
        class: Class::QuotaExhausted,
        latency_ms: 212,
        retry_after_ms: None,
        request_id: None,
        headroom: None,
        detail: Some("The free tier of the model has been exhausted.".into()),
        transition: None,
    };
    let t = TierProbe {
        tier: "high".into(),
        live: 1,
        first_live: Some(live.route.clone()),
        routes: vec![live, dead],
    };
    redact().bind(|| insta::assert_snapshot!(render::probe_tier(&t, Some(140))));
    let none = TierProbe {
        tier: "empty".into(),
        live: 0,
        first_live: None,
        routes: vec![t.routes[1].clone()],
    };
    redact().bind(|| insta::assert_snapshot!(render::probe_tier(&none, Some(140))));
}

#[test]
fn walk_steps_and_outcome() {
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
    let lines = [
        render::walk_step(Step::Skipped(&skip)),
        render::walk_step(Step::Attempt(&a1)),
        render::walk_step(Step::Attempt(&a2)),
        render::walk_step(Step::Attempt(&a3)),
        render::walk_outcome(&report(Outcome::Success, None, vec![a3.clone()], vec![])),
        render::walk_outcome(&report(
            Outcome::Failed,
            Some(Reason::Error),
            vec![a1.clone()],
            vec![],
        )),
    ]
    .join("\n");
    redact().bind(|| insta::assert_snapshot!(lines));
}

#[test]
fn status_table_and_json() {
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
            route("b/retired"),
            Health::Retired {
                reason: "quota".into(),
            },
        ),
        (route("c/ready"), Health::Ready),
    ];
    insta::assert_snapshot!(render::status_table(&rows, now, Some(100)));
    let v: serde_json::Value = serde_json::from_str(&render::status_json(&rows, now)).unwrap();
    insta::assert_json_snapshot!(v);
}
