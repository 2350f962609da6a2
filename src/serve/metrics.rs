//! The gateway's Prometheus metrics (spec/cli.md, "/metrics"): counters kept in memory
//! by the handlers, and a renderer for the text exposition format. Which recovery a
//! request took (seed 001's split) is a pure function of its report.

use crate::core::trace::Report;
use crate::core::vocab::Outcome;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Upper bounds (seconds) of the overhead histogram: the gateway's own cost is
/// expected in tens of microseconds.
pub const OVERHEAD_BUCKETS: [f64; 12] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
];

/// Seed 001's split: how a request was answered, or that it was not. `primary`: the
/// head of the chain answered at once; `retry`: it answered after retries of itself;
/// `fallback`: another route answered, whether the head failed or was passed over
/// (cooling, retired, admission), since a success served by a backup is exactly what
/// would hide a broken primary if it were counted as a primary success.
pub fn recovery_kind(report: &Report) -> Option<&'static str> {
    match report.outcome {
        Outcome::Success => {
            // Every attempt records the head of its chain as the route it asked for.
            let head = report.attempts.first().map(|a| &a.requested_route);
            Some(match (head, report.served_by.as_ref()) {
                (Some(head), Some(served)) if head != served => "fallback",
                _ if report.attempts.len() > 1 => "retry",
                _ => "primary",
            })
        }
        Outcome::Degraded => Some("degraded"),
        Outcome::Failed | Outcome::Interrupted => Some("failed_closed"),
        Outcome::Queued | Outcome::Shed | Outcome::Cancelled => None,
    }
}

#[derive(Default)]
struct Counters {
    requests: BTreeMap<(String, &'static str), u64>,
    recoveries: BTreeMap<&'static str, u64>,
    attempts: BTreeMap<(String, &'static str, &'static str), u64>,
    rejected: BTreeMap<&'static str, u64>,
    /// `(param, wire)`: request fields a serving route was called without.
    dropped: BTreeMap<(&'static str, &'static str), u64>,
}

pub struct Metrics {
    counters: Mutex<Counters>,
    overhead_buckets: [AtomicU64; OVERHEAD_BUCKETS.len()],
    overhead_count: AtomicU64,
    /// Sum in nanoseconds.
    overhead_sum_ns: AtomicU64,
    disconnects: AtomicU64,
    in_flight: AtomicU64,
    body_waits: AtomicU64,
}

/// The field names spec/fidelity.md §3 lists as dropped when a route cannot carry
/// them: the label values of `poolctl_dropped_params_total` (anything else is `other`).
const KNOWN_PARAMS: &[&str] = &[
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "service_tier",
    "store",
    "prediction",
    "metadata",
    "user",
    "messages[].name",
    "top_k",
    "detail",
    "cache_control",
    "anthropic-beta",
    "reasoning_content",
    "messages[].thinking",
    "reasoning_effort",
    "temperature",
    "n",
    "logprobs",
    "top_logprobs",
    "modalities",
    "parallel_tool_calls",
    "image_url",
    "document_url",
    "input_audio",
    "file_id",
];

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            counters: Mutex::default(),
            overhead_buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            overhead_count: AtomicU64::new(0),
            overhead_sum_ns: AtomicU64::new(0),
            disconnects: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            body_waits: AtomicU64::new(0),
        }
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Counters> {
        // Counters are plain adds: a panic elsewhere cannot leave one half-written.
        self.counters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one finished request: its outcome, its recovery kind and every attempt.
    pub fn record(&self, workflow: &str, report: &Report) {
        let mut c = self.lock();
        *c.requests
            .entry((workflow.to_string(), report.outcome.as_str()))
            .or_default() += 1;
        if let Some(kind) = recovery_kind(report) {
            *c.recoveries.entry(kind).or_default() += 1;
        }
        for a in &report.attempts {
            *c.attempts
                .entry((a.route.to_string(), a.class.as_str(), a.action.as_str()))
                .or_default() += 1;
        }
    }

    /// Fields the serving route of `wire` was called without. The label is a name
    /// spec/fidelity.md lists, or `other`: clients choose the names, and a label set
    /// they could grow without bound would be a memory leak.
    pub fn dropped(&self, params: &[String], wire: crate::core::vocab::Wire) {
        if params.is_empty() {
            return;
        }
        let mut c = self.lock();
        for p in params {
            let label = KNOWN_PARAMS
                .iter()
                .find(|k| **k == p.as_str())
                .copied()
                .unwrap_or("other");
            *c.dropped.entry((label, wire.as_str())).or_default() += 1;
        }
    }

    /// A request the gateway refused before routing (bad JSON, unknown model, ...).
    /// One request of `workflow` ended in `outcome`, without a report: a refusal
    /// before routing, or one cancelled.
    pub fn count(&self, workflow: &str, outcome: &'static str) {
        *self
            .lock()
            .requests
            .entry((workflow.to_string(), outcome))
            .or_default() += 1;
    }

    pub fn rejected(&self, why: &'static str) {
        *self.lock().rejected.entry(why).or_default() += 1;
    }

    /// A request body waited for room in the buffered-body budget.
    pub fn body_waited(&self) {
        self.body_waits.fetch_add(1, Ordering::Relaxed);
    }

    pub fn body_waits(&self) -> u64 {
        self.body_waits.load(Ordering::Relaxed)
    }

    pub fn disconnected(&self) {
        self.disconnects.fetch_add(1, Ordering::Relaxed);
    }

    pub fn in_flight(&self) -> &AtomicU64 {
        &self.in_flight
    }

    pub fn overhead(&self, seconds: f64) {
        for (i, bound) in OVERHEAD_BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                self.overhead_buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.overhead_count.fetch_add(1, Ordering::Relaxed);
        self.overhead_sum_ns
            .fetch_add((seconds * 1e9) as u64, Ordering::Relaxed);
    }

    /// The text exposition format. `health` is each route's current state.
    /// `sheds` and `buckets` come from the router's admission buckets.
    pub fn render(
        &self,
        health: &[(crate::core::vocab::Route, &'static str)],
        sheds: &BTreeMap<(crate::core::vocab::Priority, crate::core::vocab::Route), u64>,
        buckets: &[crate::admission::buckets::BucketView],
    ) -> String {
        let c = self.lock();
        let mut s = String::with_capacity(4096);
        let head = |s: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        head(
            &mut s,
            "poolctl_requests_total",
            "counter",
            "Requests by workflow (or tier/route named) and outcome.",
        );
        for ((w, o), n) in &c.requests {
            let _ = writeln!(
                s,
                "poolctl_requests_total{{workflow=\"{}\",outcome=\"{o}\"}} {n}",
                escape(w)
            );
        }
        head(
            &mut s,
            "poolctl_recoveries_total",
            "counter",
            "How requests were answered: primary, retry, fallback, degraded, failed_closed.",
        );
        for kind in ["primary", "retry", "fallback", "degraded", "failed_closed"] {
            let n = c.recoveries.get(kind).copied().unwrap_or(0);
            let _ = writeln!(s, "poolctl_recoveries_total{{kind=\"{kind}\"}} {n}");
        }
        head(
            &mut s,
            "poolctl_attempts_total",
            "counter",
            "Upstream calls by route, class and action.",
        );
        for ((r, cl, a), n) in &c.attempts {
            let _ = writeln!(
                s,
                "poolctl_attempts_total{{route=\"{}\",class=\"{cl}\",action=\"{a}\"}} {n}",
                escape(r)
            );
        }
        head(
            &mut s,
            "poolctl_shed_total",
            "counter",
            "Requests shed by admission control, by priority and route.",
        );
        for ((p, r), n) in sheds {
            let _ = writeln!(
                s,
                "poolctl_shed_total{{priority=\"{}\",route=\"{}\"}} {n}",
                p.as_str(),
                escape(r.as_str())
            );
        }
        head(
            &mut s,
            "poolctl_bucket_level",
            "gauge",
            "Admission bucket level by bucket and dimension.",
        );
        for b in buckets {
            let _ = writeln!(
                s,
                "poolctl_bucket_level{{bucket=\"{}\",dimension=\"{}\"}} {}",
                escape(&b.bucket),
                b.dimension.as_str(),
                b.level
            );
        }
        head(
            &mut s,
            "poolctl_bucket_reserved",
            "gauge",
            "Admission bucket reservations in flight by bucket and dimension.",
        );
        for b in buckets {
            let _ = writeln!(
                s,
                "poolctl_bucket_reserved{{bucket=\"{}\",dimension=\"{}\"}} {}",
                escape(&b.bucket),
                b.dimension.as_str(),
                b.reserved
            );
        }
        head(
            &mut s,
            "poolctl_route_health",
            "gauge",
            "1 for each route's current health state.",
        );
        for (route, state) in health {
            for st in ["ready", "cooling", "retired"] {
                let v = u8::from(*state == st);
                let _ = writeln!(
                    s,
                    "poolctl_route_health{{route=\"{}\",state=\"{st}\"}} {v}",
                    escape(route.as_str())
                );
            }
        }
        head(
            &mut s,
            "poolctl_rejected_total",
            "counter",
            "Requests refused by the gateway before routing, by why.",
        );
        for (why, n) in &c.rejected {
            let _ = writeln!(s, "poolctl_rejected_total{{why=\"{why}\"}} {n}");
        }
        head(
            &mut s,
            "poolctl_dropped_params_total",
            "counter",
            "Request fields a serving route could not carry and was called without, by field and wire.",
        );
        for ((param, wire), n) in &c.dropped {
            let _ = writeln!(
                s,
                "poolctl_dropped_params_total{{param=\"{param}\",wire=\"{wire}\"}} {n}"
            );
        }
        drop(c);
        head(
            &mut s,
            "poolctl_client_disconnects_total",
            "counter",
            "Streams whose client went away before the end; the upstream call was cancelled.",
        );
        let _ = writeln!(
            s,
            "poolctl_client_disconnects_total {}",
            self.disconnects.load(Ordering::Relaxed)
        );
        head(
            &mut s,
            "poolctl_in_flight_requests",
            "gauge",
            "Requests being served now.",
        );
        let _ = writeln!(
            s,
            "poolctl_in_flight_requests {}",
            self.in_flight.load(Ordering::Relaxed)
        );
        head(
            &mut s,
            "poolctl_gateway_overhead_seconds",
            "histogram",
            "Time a request spent in the gateway outside the router call (parse, choose, render).",
        );
        for (i, bound) in OVERHEAD_BUCKETS.iter().enumerate() {
            let n = self.overhead_buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(
                s,
                "poolctl_gateway_overhead_seconds_bucket{{le=\"{bound}\"}} {n}"
            );
        }
        let count = self.overhead_count.load(Ordering::Relaxed);
        let _ = writeln!(
            s,
            "poolctl_gateway_overhead_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let sum = self.overhead_sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(s, "poolctl_gateway_overhead_seconds_sum {sum}");
        let _ = writeln!(s, "poolctl_gateway_overhead_seconds_count {count}");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::trace::{AttemptRecord, Chosen, Skip, SkipWhy};
    use crate::core::vocab::{Action, CallPath, Class, Route};

    fn route(s: &str) -> Route {
        Route::parse(s).unwrap()
    }

    fn attempt(
        at: &str,
        head: &str,
        class: Class,
        action: Action,
        chosen: Chosen,
    ) -> AttemptRecord {
        AttemptRecord {
            index: 1,
            route: route(at),
            status: Some(200),
            class,
            action,
            wait_ms: None,
            health: None,
            latency_ms: 1,
            request_id: None,
            hint_ms: None,
            row: 1,
            detail: None,
            code: None,
            workflow: None,
            requested_route: route(head),
            chosen,
            dropped: vec![],
            tokens: None,
            cost_usd: 0.0,
            breaker_open_until: None,
        }
    }

    fn success(served: &str, attempts: Vec<AttemptRecord>, skipped: Vec<Skip>) -> Report {
        Report {
            path: CallPath::Chat,
            outcome: Outcome::Success,
            reason: None,
            served_by: Some(route(served)),
            text: Some("ok".into()),
            attempts,
            skipped,
            waits_ms: vec![],
            queued_ms: 0,
            elapsed_ms: 1,
            notes: vec![],
        }
    }

    #[test]
    fn a_backup_that_serves_while_the_primary_cools_is_a_fallback_not_a_retry() {
        // One attempt, on the second route: the head was passed over without a call.
        let r = success(
            "b/two",
            vec![attempt(
                "b/two",
                "a/one",
                Class::Ok,
                Action::Done,
                Chosen::Fallback,
            )],
            vec![Skip {
                route: route("a/one"),
                why: SkipWhy::Cooling,
                cause: None,
            }],
        );
        assert_eq!(recovery_kind(&r), Some("fallback"));
    }

    #[test]
    fn recovery_kinds_split_primary_retry_and_fallback() {
        let ok = |at: &str, chosen| attempt(at, "a/one", Class::Ok, Action::Done, chosen);
        let failed =
            |at: &str, action| attempt(at, "a/one", Class::ServerError, action, Chosen::Primary);
        let primary = success("a/one", vec![ok("a/one", Chosen::Primary)], vec![]);
        assert_eq!(recovery_kind(&primary), Some("primary"));
        let retry = success(
            "a/one",
            vec![failed("a/one", Action::Retry), ok("a/one", Chosen::Retry)],
            vec![],
        );
        assert_eq!(recovery_kind(&retry), Some("retry"));
        let fallback = success(
            "b/two",
            vec![
                failed("a/one", Action::Fallback),
                ok("b/two", Chosen::Fallback),
            ],
            vec![],
        );
        assert_eq!(recovery_kind(&fallback), Some("fallback"));
        let mut degraded = primary.clone();
        degraded.outcome = Outcome::Degraded;
        assert_eq!(recovery_kind(&degraded), Some("degraded"));
        let mut failed_closed = fallback.clone();
        failed_closed.outcome = Outcome::Failed;
        failed_closed.served_by = None;
        assert_eq!(recovery_kind(&failed_closed), Some("failed_closed"));
    }
}
