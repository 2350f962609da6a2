//! Expected against got, field by field, per the comparison rules of
//! spec/scenario-format.md. Pure: a scenario's verdict is a function of its report.

use super::scenario::{AttemptExpect, Expect};
use crate::core::clock::UnixMs;
use crate::core::trace::{AttemptRecord, Report};
use crate::core::vocab::{HealthState, Route};
use crate::policy::health::Health;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Display;

/// One difference between the scenario and what happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    pub field: String,
    pub expected: String,
    pub got: String,
}

/// A route's health as a scenario sees it at the end of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthView {
    pub state: HealthState,
    /// `until - now` for a cooling route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl HealthView {
    pub fn of(h: &Health, now: UnixMs) -> HealthView {
        let state = h.state_at(now);
        HealthView {
            state,
            ms: (state == HealthState::Cooling).then(|| h.until().unwrap_or(now) - now),
            reason: (state != HealthState::Ready)
                .then(|| h.reason().map(str::to_string))
                .flatten(),
        }
    }
}

/// `status class→action`, as the chaos table prints an attempt.
pub fn attempt_label(a: &AttemptRecord) -> String {
    let status = a
        .status
        .map(|s| s.to_string())
        .unwrap_or_else(|| "—".into());
    format!("{status} {}→{}", a.class, a.action)
}

fn opt<T: Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map(|x| x.to_string())
        .unwrap_or_else(|| "null".into())
}

/// Bucket levels as a scenario sees them: bucket → level name → level, rounded down.
pub type BucketLevels = BTreeMap<String, BTreeMap<String, i64>>;

/// The levels of `buckets` at `now`, rounded down, by their scenario names.
pub fn bucket_levels(buckets: &crate::admission::buckets::Buckets, now: UnixMs) -> BucketLevels {
    let mut out = BucketLevels::new();
    for v in buckets.snapshot(now) {
        out.entry(v.bucket)
            .or_default()
            .insert(v.dimension.level_name().to_string(), v.level.floor() as i64);
    }
    out
}

pub fn compare(
    expect: &Expect,
    report: &Report,
    health: &BTreeMap<Route, HealthView>,
    calls: &BTreeMap<Route, u64>,
    buckets: &BucketLevels,
) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let mut check = |field: String, expected: String, got: String| {
        if expected != got {
            out.push(Mismatch {
                field,
                expected,
                got,
            });
        }
    };
    check(
        "outcome".into(),
        expect.outcome.to_string(),
        report.outcome.to_string(),
    );
    if let Some(reason) = &expect.reason {
        check("reason".into(), opt(reason), opt(&report.reason));
    }
    if let Some(served_by) = &expect.served_by {
        check("served_by".into(), opt(served_by), opt(&report.served_by));
    }
    if let Some(text) = &expect.text {
        check(
            "text".into(),
            format!("{text:?}"),
            report
                .text
                .as_ref()
                .map(|t| format!("{t:?}"))
                .unwrap_or_else(|| "null".into()),
        );
    }
    if let Some(attempts) = &expect.attempts {
        compare_attempts(attempts, &report.attempts, &mut check);
    }
    if let Some(skipped) = &expect.skipped {
        for r in skipped {
            let was_skipped = report.skipped.iter().any(|s| &s.route == r);
            let got = if was_skipped {
                "skipped"
            } else {
                "not skipped"
            };
            check(format!("skipped.{r}"), "skipped".into(), got.into());
        }
    }
    if let Some(expected) = &expect.health {
        for (route, want) in expected {
            let got = health.get(route);
            let got_state = got
                .map(|h| h.state.to_string())
                .unwrap_or_else(|| "ready".into());
            check(
                format!("health.{route}.state"),
                want.state.to_string(),
                got_state,
            );
            if let Some(ms) = want.ms {
                check(
                    format!("health.{route}.ms"),
                    ms.to_string(),
                    opt(&got.and_then(|h| h.ms)),
                );
            }
            if let Some(reason) = &want.reason {
                check(
                    format!("health.{route}.reason"),
                    reason.clone(),
                    opt(&got.and_then(|h| h.reason.clone())),
                );
            }
        }
    }
    if let Some(expected) = &expect.upstream_calls {
        for (route, want) in expected {
            check(
                format!("upstream_calls.{route}"),
                want.to_string(),
                calls.get(route).copied().unwrap_or(0).to_string(),
            );
        }
    }
    if let Some(waits) = &expect.waits_ms {
        check(
            "waits_ms".into(),
            format!("{waits:?}"),
            format!("{:?}", report.waits_ms),
        );
    }
    if let Some(q) = expect.queued_ms {
        check(
            "queued_ms".into(),
            q.to_string(),
            report.queued_ms.to_string(),
        );
    }
    for (name, dims) in expect.buckets.iter().flatten() {
        for (dim, want) in dims {
            let got = buckets
                .get(name)
                .and_then(|d| d.get(dim))
                .map_or_else(|| "absent".to_string(), i64::to_string);
            check(format!("buckets.{name}.{dim}"), want.to_string(), got);
        }
    }
    out
}

fn compare_attempts(
    expected: &[AttemptExpect],
    got: &[AttemptRecord],
    check: &mut impl FnMut(String, String, String),
) {
    if expected.len() != got.len() {
        let want: Vec<String> = expected.iter().map(expect_label).collect();
        let have: Vec<String> = got
            .iter()
            .map(|a| format!("{} {}", a.route, attempt_label(a)))
            .collect();
        check(
            "attempts".into(),
            format!("{} attempts [{}]", expected.len(), want.join(", ")),
            format!("{} attempts [{}]", got.len(), have.join(", ")),
        );
        return;
    }
    for (i, (want, have)) in expected.iter().zip(got).enumerate() {
        if let Some(route) = &want.route {
            check(
                format!("attempts[{i}].route"),
                route.to_string(),
                have.route.to_string(),
            );
        }
        if let Some(status) = &want.status {
            check(
                format!("attempts[{i}].status"),
                opt(status),
                opt(&have.status),
            );
        }
        if let Some(class) = want.class {
            check(
                format!("attempts[{i}].class"),
                class.to_string(),
                have.class.to_string(),
            );
        }
        if let Some(action) = want.action {
            check(
                format!("attempts[{i}].action"),
                action.to_string(),
                have.action.to_string(),
            );
        }
        if let Some(wait) = &want.wait_ms {
            check(
                format!("attempts[{i}].wait_ms"),
                opt(wait),
                opt(&have.wait_ms),
            );
        }
    }
}

fn expect_label(a: &AttemptExpect) -> String {
    let mut parts = Vec::new();
    if let Some(r) = &a.route {
        parts.push(r.to_string());
    }
    if let Some(Some(s)) = &a.status {
        parts.push(s.to_string());
    }
    match (a.class, a.action) {
        (Some(c), Some(act)) => parts.push(format!("{c}→{act}")),
        (Some(c), None) => parts.push(c.to_string()),
        (None, Some(act)) => parts.push(format!("→{act}")),
        (None, None) => {}
    }
    if parts.is_empty() {
        "(any)".into()
    } else {
        parts.join(" ")
    }
}
