//! One parsed request's context (`Ask`): who asked, on which API, with which priority
//! and session; how a request refused before routing is answered; and how every
//! request's end is counted and written as its one log line.

use super::adapter::{self, Priority, Target};
use super::choose::Choice;
use super::errors::{ApiError, Flavor};
use super::http::{dropped_header, refusal, trace_headers, Body};
use super::ingress::ChatIn;
use super::respond::{self, Context};
use super::Gateway;
use crate::core::clip::{clip, LOG_FIELD_BYTES};
use crate::core::clock::Stopwatch;
use crate::core::trace::{AttemptRecord, Report, SkipWhy};
use crate::core::vocab::Outcome;
use hyper::{Method, Response};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// What one request's log line says. Never a prompt, a completion or a key. Names are
/// borrowed from the request and its report: the line is written before they go, and
/// copying each into a string of its own was three allocations a request.
#[derive(Default)]
struct Line<'a> {
    model: &'a str,
    workflow: &'a str,
    status: u16,
    outcome: &'static str,
    reason: &'static str,
    served_by: &'a str,
    attempts: String,
    /// Routes passed over, `route:why` (`cannot_carry`, `cooling`, ...); `None` when
    /// none was.
    skipped: Option<String>,
    /// Request fields the serving route was called without (spec/fidelity.md §3).
    dropped: Option<String>,
    /// The serving attempt's note on its answer (`Reply::detail`).
    note: Option<&'a str>,
    prompt: Option<String>,
}

impl<'a> Line<'a> {
    fn of(report: &'a Report, status: u16) -> Line<'a> {
        // Each list is pushed into one string: a `format!` per attempt and a `join` were
        // a string and a vector a request for one log field.
        let mut attempts = String::new();
        for (i, a) in report.attempts.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            for part in [
                sep,
                a.route.as_str(),
                ":",
                a.class.as_str(),
                ":",
                a.action.as_str(),
            ] {
                attempts.push_str(part);
            }
        }
        let skipped = (!report.skipped.is_empty()).then(|| {
            let mut out = String::new();
            for (i, s) in report.skipped.iter().enumerate() {
                let sep = if i == 0 { "" } else { "," };
                for part in [sep, s.route.as_str(), ":", s.why.as_str()] {
                    out.push_str(part);
                }
                // The field is the reason: `anthropic/claude:cannot_carry:n`.
                if s.why == SkipWhy::CannotCarry {
                    let field = s.cause.as_deref().unwrap_or("");
                    out.push(':');
                    out.push_str(field.trim_start_matches("cannot carry: "));
                }
            }
            out
        });
        Line {
            status,
            outcome: report.outcome.as_str(),
            reason: report.reason.map(|r| r.as_str()).unwrap_or(""),
            served_by: report.served_by.as_ref().map_or("", |r| r.as_str()),
            attempts,
            skipped,
            dropped: served_attempt(report)
                .filter(|a| !a.dropped.is_empty())
                .map(|a| a.dropped.join(",")),
            note: served_attempt(report).and_then(|a| a.detail.as_deref()),
            ..Line::default()
        }
    }
}

/// The attempt that delivered the answer, when one did.
fn served_attempt(report: &Report) -> Option<&AttemptRecord> {
    let served = report.served_by.as_ref()?;
    report.attempts.iter().rev().find(|a| &a.route == served)
}

/// Names `field` as dropped by the serving attempt: something of the answer its route
/// gave that the client's API cannot hold.
pub(super) fn name_dropped(report: &mut Report, field: &str) {
    let Some(served) = report.served_by.clone() else {
        return;
    };
    if let Some(a) = report.attempts.iter_mut().rev().find(|a| a.route == served) {
        a.dropped.push(field.to_string());
    }
}

/// The request fields the route that served `report` was called without.
pub(super) fn served_dropped(report: &Report) -> &[String] {
    served_attempt(report).map_or(&[], |a| a.dropped.as_slice())
}

fn log(method: &Method, path: &str, line: &Line, elapsed: Duration) {
    // What a client chose (path, model, field names, the prompt) is recorded as a
    // string, so the formatter quotes it and escapes newlines, control characters and
    // ANSI codes (no forged second line, no escape reaching a terminal), and is cut to
    // a bound with the cut marked.
    let (path, model) = (
        clip(path, LOG_FIELD_BYTES),
        clip(line.model, LOG_FIELD_BYTES),
    );
    let skipped = line
        .skipped
        .as_deref()
        .map(|s| clip(s, LOG_FIELD_BYTES * 4));
    let dropped = line
        .dropped
        .as_deref()
        .map(|s| clip(s, LOG_FIELD_BYTES * 4));
    let prompt = line
        .prompt
        .as_deref()
        .map(|s| clip(s, LOG_FIELD_BYTES * 16));
    // A method is a token (no control character), but of any length.
    let method = clip(method.as_str(), LOG_FIELD_BYTES);
    super::log::request(&super::log::RequestLine {
        method: &method,
        path: &path,
        model: &model,
        workflow: line.workflow,
        status: line.status,
        outcome: line.outcome,
        reason: line.reason,
        served_by: line.served_by,
        attempts: &line.attempts,
        skipped: skipped.as_deref(),
        dropped: dropped.as_deref(),
        note: line.note,
        prompt: prompt.as_deref(),
        elapsed_us: elapsed.as_micros() as u64,
    });
}

/// A request no handler saw (hyper refused its head, or it never finished): its one
/// log line, with what can be known of it, and its count.
pub(super) fn unparsed(gw: &Gateway, status: u16, why: &'static str) {
    gw.metrics.rejected(why);
    gw.metrics.count("", Outcome::Failed.as_str());
    let line = Line {
        status,
        outcome: "rejected",
        reason: why,
        ..Line::default()
    };
    log(
        &Method::from_bytes(b"-").unwrap_or_default(),
        "-",
        &line,
        Duration::ZERO,
    );
}

/// One request's context, from its head on: who asked, on which API, with which
/// priority and session. It writes the request's one log line and counts it: when the
/// request is answered (`finish`, `refuse`), or, when it is dropped unanswered (the
/// client went away, or the drain deadline cut it), as `cancelled`.
pub(super) struct Ask {
    pub(super) gw: Arc<Gateway>,
    pub(super) method: Method,
    pub(super) path: String,
    pub(super) flavor: Flavor,
    pub(super) priority: Priority,
    pub(super) session: Option<String>,
    pub(super) sw: Stopwatch,
    /// The line is written (or the request is one that writes none).
    done: AtomicBool,
    /// The model asked for and the workflow chosen, once known.
    chosen: OnceLock<(String, String)>,
    ending: Ending,
}

/// How an unanswered request ends, shared with whoever may end it: the status the
/// client saw (none: 499, nginx's word for a client that closed first; 200 once a
/// stream's head went out), and whether the drain deadline cut it.
#[derive(Clone, Default)]
pub(super) struct Ending(Arc<(AtomicU16, AtomicBool, AtomicU32, OnceLock<String>)>);

impl Ending {
    /// A stream's head went out, naming the route that serves it: the client saw a 200,
    /// and a line written when the stream is cut names that route, as the head did.
    pub(super) fn started(&self, route: Option<&crate::core::vocab::Route>) {
        self.0 .0.store(200, Ordering::Relaxed);
        if let Some(r) = route {
            let _ = self.0 .3.set(r.as_str().to_string());
        }
    }

    /// The route a started stream was served by.
    fn served_by(&self) -> &str {
        self.0 .3.get().map_or("", String::as_str)
    }

    /// The drain deadline cut the request; the client is answered `status` (0: the
    /// status it already saw).
    pub(super) fn cut(&self, status: u16) {
        if status != 0 {
            self.0 .0.store(status, Ordering::Relaxed);
        }
        self.0 .1.store(true, Ordering::Relaxed);
    }

    fn status(&self) -> u16 {
        match self.0 .0.load(Ordering::Relaxed) {
            0 => 499,
            s => s,
        }
    }

    fn was_cut(&self) -> bool {
        self.0 .1.load(Ordering::Relaxed)
    }

    /// The upstream calls the request made so far (`Target::calls` counts them).
    pub(super) fn calls(&self) -> &AtomicU32 {
        &self.0 .2
    }
}

impl Drop for Ask {
    fn drop(&mut self) {
        self.gw.metrics.in_flight().fetch_sub(1, Ordering::Relaxed);
        if self.done.load(Ordering::Relaxed) {
            return;
        }
        let (model, workflow) = self
            .chosen
            .get()
            .map_or(("", ""), |(m, w)| (m.as_str(), w.as_str()));
        self.gw.metrics.count(workflow, Outcome::Cancelled.as_str());
        let reason = if self.ending.was_cut() {
            "drain_deadline"
        } else {
            "client_gone"
        };
        let line = Line {
            model,
            workflow,
            status: self.ending.status(),
            outcome: Outcome::Cancelled.as_str(),
            reason,
            served_by: self.ending.served_by(),
            ..Line::default()
        };
        log(&self.method, &self.path, &line, self.sw.elapsed());
    }
}

impl Ask {
    pub(super) fn new(gw: Arc<Gateway>, method: Method, path: String, flavor: Flavor) -> Self {
        // Counted from here until the Ask goes: a stream's Ask lives as long as its
        // routing, so an open stream is in flight.
        gw.metrics.in_flight().fetch_add(1, Ordering::Relaxed);
        Ask {
            gw,
            method,
            path,
            flavor,
            priority: Priority::default(),
            session: None,
            sw: Stopwatch::start(),
            done: AtomicBool::new(false),
            chosen: OnceLock::new(),
            ending: Ending::default(),
        }
    }

    /// A request that writes no line: a probe, a scrape, a listing.
    pub(super) fn quiet(&self) {
        self.done.store(true, Ordering::Relaxed);
    }

    /// What ends this request if it is not answered.
    pub(super) fn ending(&self) -> Ending {
        self.ending.clone()
    }

    /// The model asked for and the workflow chosen: named by a `cancelled` line too.
    pub(super) fn chose(&self, model: &str, workflow: &str) {
        let _ = self.chosen.set((model.to_string(), workflow.to_string()));
    }

    pub(super) fn target<'a>(&'a self, choice: &Choice<'a>) -> Target<'a> {
        Target {
            tier: choice.tier,
            policy: choice.policy,
            workflow: Some(choice.workflow),
            session: self.session.as_deref(),
            priority: self.priority,
            degrade_tier: choice
                .policy
                .degrade_tier
                .as_deref()
                .and_then(|name| self.gw.lineup.tier_named(name)),
            calls: Some(self.ending.calls()),
        }
    }

    /// A request refused before routing.
    pub(super) fn refuse(&self, why: &'static str, e: ApiError, model: &str) -> Response<Body> {
        self.done.store(true, Ordering::Relaxed);
        self.gw.metrics.rejected(why);
        // Counted as every request is; the outcome is the one its headers say.
        self.gw.metrics.count("", Outcome::Failed.as_str());
        let line = Line {
            model,
            status: e.status,
            outcome: "rejected",
            reason: why,
            ..Line::default()
        };
        log(&self.method, &self.path, &line, self.sw.elapsed());
        refusal(&e, self.flavor)
    }

    pub(super) async fn failure(&self, choice: &Choice<'_>, report: &Report) -> ApiError {
        let retry_after_ms = if report.outcome == Outcome::Shed {
            adapter::shed_retry_after_ms(&self.gw.router, choice.tier, report, self.priority).await
        } else {
            adapter::ready_again_in_ms(&self.gw.router, choice.tier, report, self.priority).await
        };
        let ctx = Context {
            retry_after_ms,
            max_elapsed_ms: choice.policy.max_elapsed_ms,
        };
        respond::failure(report, ctx, &|s| self.gw.mask(s))
    }

    /// Counts and logs a routed request; `in_router` is excluded from the overhead.
    pub(super) fn finish(
        &self,
        choice: &Choice<'_>,
        model: &str,
        report: &Report,
        status: u16,
        in_router: Duration,
        prompt: Option<String>,
    ) {
        self.done.store(true, Ordering::Relaxed);
        let total = self.sw.elapsed();
        self.gw.metrics.record(choice.workflow, report);
        if let Some(route) = &report.served_by {
            let t = self.target(choice);
            let wire = std::iter::once(t.tier)
                .chain(t.degrade_tier)
                .flat_map(|t| &t.routes)
                .find(|r| &r.route == route)
                .map(|r| r.endpoint.wire);
            if let Some(wire) = wire {
                self.gw.metrics.dropped(served_dropped(report), wire);
            }
        }
        self.gw
            .metrics
            .overhead(total.saturating_sub(in_router).as_secs_f64());
        let mut line = Line::of(report, status);
        line.model = model;
        line.workflow = choice.workflow;
        line.prompt = prompt;
        log(&self.method, &self.path, &line, total);
    }
}

impl Ask {
    /// A routed chat request's answer, finished: the trace headers, the fields its
    /// route was called without, then the count and the log line.
    pub(super) fn answered(
        &self,
        choice: &Choice<'_>,
        model: &str,
        report: &Report,
        mut response: Response<Body>,
        in_router: Duration,
        prompt: Option<String>,
    ) -> Response<Body> {
        trace_headers(
            response.headers_mut(),
            report.served_by.as_ref(),
            report.outcome.as_str(),
            report.attempts.len(),
        );
        dropped_header(response.headers_mut(), served_dropped(report));
        let status = response.status().as_u16();
        self.finish(choice, model, report, status, in_router, prompt);
        response
    }
}

pub(super) fn last_user_text(c: &ChatIn) -> Option<String> {
    c.request
        .conversation
        .turns
        .iter()
        .rev()
        .find_map(|t| match t {
            crate::core::conversation::Turn::User { parts } => {
                let texts: Vec<&str> = parts.iter().filter_map(|p| p.as_text()).collect();
                Some(texts.join("\n"))
            }
            _ => None,
        })
}
