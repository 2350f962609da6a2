//! Rendering: plain functions from data to strings, so output is snapshot-testable and
//! commands stay thin.

use super::look::{Look, Tone};
use super::table::{self, ellipsis, width, wrap, Cell, Column};
use serde_json::{json, Value};

/// `lead` then `text` wrapped between words, continuation lines aligned under the text.
pub(super) fn hang(lead: &str, text: &str, total: usize) -> String {
    let room = total.saturating_sub(width(lead)).max(20);
    let words: Vec<Vec<String>> = text
        .lines()
        .map(|l| l.split(' ').map(str::to_string).collect())
        .collect();
    let mut out = String::new();
    for (n, line) in wrap(&words, " ", room).iter().enumerate() {
        if n == 0 {
            out.push_str(lead);
        } else {
            out.push_str(&" ".repeat(width(lead)));
        }
        out.push_str(line);
        out.push('\n');
    }
    if out.is_empty() {
        out = format!("{}\n", lead.trim_end());
    }
    out
}

/// An instant as RFC 3339 (UTC, seconds).
/// RFC 3339 has four-digit years: an instant past 9999 (a state file written by hand,
/// or by an older build) prints as the last second of 9999, never as a bare number.
pub fn rfc3339(ms: crate::core::clock::UnixMs) -> String {
    const LAST_RFC3339_MS: i64 = 253_402_300_799_000; // 9999-12-31T23:59:59Z
    chrono::DateTime::from_timestamp_millis(ms.clamp(0, LAST_RFC3339_MS))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| "9999-12-31T23:59:59Z".to_string())
}

const PROBE_COLUMNS: [Column; 8] = [
    Column::ident("route"),
    Column::ident("status"),
    Column::ident("class"),
    Column::ident("latency"),
    Column::ident("retry hint"),
    Column::ident("request id"),
    Column::text("headroom", 2),
    Column::text("detail", 3),
];

/// The probe columns left out, in this order, while a line per route does not fit:
/// route, status and class always stay.
const PROBE_DROPPABLE: [&str; 5] = ["request id", "headroom", "latency", "retry hint", "detail"];

fn class_tone(class: crate::core::vocab::Class) -> Tone {
    use crate::core::vocab::Class;
    // A refusal is the model's answer: the route is live.
    if matches!(class, Class::Ok | Class::Refusal) {
        Tone::Good
    } else {
        Tone::Fail
    }
}

/// One tier of `probe`: a table, then the summary line and any loud warning.
pub fn probe_tier(t: &crate::cli::probe::TierProbe, look: &Look) -> String {
    let rows: Vec<Vec<Cell>> = t
        .routes
        .iter()
        .map(|r| {
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
                })
                .unwrap_or_default();
            vec![
                Cell::new(r.route.to_string()),
                Cell::new(
                    r.status
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "—".into()),
                ),
                match r.class {
                    Some(class) => Cell::new(class.to_string()).tone(Some(class_tone(class))),
                    None => Cell::new(
                        r.skipped
                            .map(|s| format!("skipped: {}", s.as_str()))
                            .unwrap_or_else(|| "—".into()),
                    ),
                },
                Cell::new(format!("{} ms", r.latency_ms)),
                Cell::new(
                    r.retry_after_ms
                        .map(|ms| format!("{ms} ms"))
                        .unwrap_or_default(),
                ),
                Cell::new(r.request_id.clone().unwrap_or_default()),
                Cell::items(vec![headroom], ", "),
                Cell::new(r.detail.clone().unwrap_or_default()),
            ]
        })
        .collect();
    let mut out = format!("tier `{}`\n", t.tier);
    // One line per route, as many lines as the tier has routes (issue 21: a bordered
    // table too wide for 100 columns became five lines a route). What a reader needs
    // least is left out first when the width is short; `--json` keeps everything.
    match table::lines(&PROBE_COLUMNS, &rows, &PROBE_DROPPABLE, look) {
        Some(lines) => {
            out.push_str(&lines.text);
            if !lines.dropped.is_empty() {
                let text = format!(
                    "(not shown at this width: {}; `probe --json` has every field)",
                    lines.dropped.join(", ")
                );
                out.push_str(&hang("", &text, look.width));
            }
        }
        None => out.push_str(&table::render(&PROBE_COLUMNS, &rows, look)),
    }
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
        let text = format!(
            "WARNING: tier `{}` has NO live route: every request to it will fail",
            t.tier
        );
        out.push_str(&paint_lines(look, Tone::Fail, &hang("", &text, look.width)));
    } else if t.dead_tail() {
        let last = t
            .routes
            .last()
            .map(|r| {
                let what = r
                    .class
                    .map(|c| c.to_string())
                    .or_else(|| r.skipped.map(|s| format!("skipped: {}", s.as_str())))
                    .unwrap_or_default();
                format!("{} ({what})", r.route)
            })
            .unwrap_or_default();
        let text = format!(
            "WARNING: dead tail: the last route of tier `{}` is not live: {last}; the chain has no working end",
            t.tier
        );
        out.push_str(&paint_lines(look, Tone::Warn, &hang("", &text, look.width)));
    }
    out.push('\n');
    out
}

/// Text and how it stands out; measured plain, printed painted.
type Pieces = Vec<(String, Option<Tone>)>;

fn pieces_width(p: &Pieces) -> usize {
    p.iter().map(|(t, _)| width(t)).sum()
}

fn paint_pieces(p: &Pieces, look: &Look) -> String {
    p.iter()
        .map(|(t, tone)| match tone {
            Some(tone) => look.paint(*tone, t),
            None => t.clone(),
        })
        .collect()
}

/// Every line of `text` in `tone`, so no escape sequence spans a line break.
fn paint_lines(look: &Look, tone: Tone, text: &str) -> String {
    text.lines()
        .map(|l| format!("{}\n", look.paint(tone, l)))
        .collect()
}

/// `head`, then each extra on the same line while it fits `look.width`, else on
/// continuation lines indented by `indent`.
fn flow(head: Pieces, extras: Vec<Pieces>, indent: usize, look: &Look) -> String {
    let mut lines: Vec<Pieces> = vec![head];
    for extra in extras {
        let cur = lines.last_mut().expect("never empty");
        if pieces_width(cur) + 2 + pieces_width(&extra) <= look.width {
            cur.push(("  ".into(), None));
            cur.extend(extra);
        } else {
            let mut next: Pieces = vec![(" ".repeat(indent), None)];
            next.extend(extra);
            lines.push(next);
        }
    }
    lines
        .iter()
        .map(|l| paint_pieces(l, look))
        .collect::<Vec<_>>()
        .join("\n")
}

fn health_tone(state: crate::core::vocab::HealthState) -> Option<Tone> {
    match state {
        crate::core::vocab::HealthState::Retired => Some(Tone::Warn),
        crate::core::vocab::HealthState::Cooling => Some(Tone::Mild),
        crate::core::vocab::HealthState::Ready => None,
    }
}

/// The width `walk` pads route names to: the tier's longest, so columns line up
/// without padding every line to a fixed 40.
pub fn walk_route_width<'a>(
    routes: impl IntoIterator<Item = &'a crate::core::vocab::Route>,
) -> usize {
    routes
        .into_iter()
        .map(|r| width(r.as_str()))
        .max()
        .unwrap_or(0)
}

/// One step of `walk`, as seed 002's log prints it; what does not fit the width goes on
/// continuation lines, never broken mid-word.
pub fn walk_step(step: crate::core::trace::Step<'_>, route_width: usize, look: &Look) -> String {
    use crate::core::trace::Step;
    match step {
        Step::Skipped(s) => {
            let head: Pieces = vec![
                ("  ".into(), None),
                ("skip".into(), Some(Tone::Mild)),
                (
                    format!(
                        "  {:<route_width$}  {}",
                        s.route.to_string(),
                        s.why.as_str()
                    ),
                    None,
                ),
            ];
            let extras = s
                .cause
                .iter()
                .map(|c| vec![(format!("({c})"), None)])
                .collect();
            flow(head, extras, 8, look)
        }
        Step::Attempt(a) => {
            let status = a
                .status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "—".into());
            let lead = format!(
                "  {:>3}  {:<route_width$}  {status:>4}  ",
                a.index,
                a.route.to_string()
            );
            let head: Pieces = vec![
                (lead.clone(), None),
                (a.class.to_string(), Some(class_tone(a.class))),
                (format!(" → {}", a.action), None),
            ];
            let mut extras: Vec<Pieces> = Vec::new();
            if let Some(w) = a.wait_ms {
                extras.push(vec![(format!("(wait {w} ms)"), None)]);
            }
            if let Some(h) = &a.health {
                let reason = h
                    .reason
                    .as_deref()
                    .map(|r| format!(" {r}"))
                    .unwrap_or_default();
                let until = h
                    .until
                    .map(|u| format!(" until {}", rfc3339(u)))
                    .unwrap_or_default();
                extras.push(vec![
                    ("→ ".into(), None),
                    (format!("{}{reason}", h.state), health_tone(h.state)),
                    (until, None),
                ]);
            }
            extras.push(vec![(format!("[{} ms]", a.latency_ms), None)]);
            // Continuation lines start under the class when there is room for them.
            let indent = if width(&lead) + 40 <= look.width {
                width(&lead)
            } else {
                8
            };
            flow(head, extras, indent, look)
        }
    }
}

/// The end of `walk`: outcome, reason and who served; when nothing was called, a line
/// that says so and why.
pub fn walk_outcome(r: &crate::core::trace::Report, look: &Look) -> String {
    let tone = if r.outcome == crate::core::vocab::Outcome::Success {
        Tone::Good
    } else {
        Tone::Fail
    };
    let mut head = format!("outcome: {}", r.outcome);
    if let Some(reason) = r.reason {
        head.push_str(&format!(" (reason: {reason})"));
    }
    let mut line: Pieces = vec![(head, Some(tone))];
    if let Some(by) = &r.served_by {
        line.push((format!(" — served by {by}"), None));
    }
    if let Some(text) = &r.text {
        let room = look.width.saturating_sub(pieces_width(&line) + 2).max(20);
        let short: String = text.chars().take(120).collect();
        line.push((format!(": {}", ellipsis(&format!("{short:?}"), room)), None));
    }
    let mut out = paint_pieces(&line, look);
    if r.attempts.is_empty() && r.outcome != crate::core::vocab::Outcome::Success {
        out.push('\n');
        out.push_str(hang("", &nothing_called(&r.skipped), look.width).trim_end());
    }
    out
}

/// Why a request made no upstream call: the skips, grouped by why and cause in chain
/// order, and what would bring a route back.
pub fn nothing_called(skipped: &[crate::core::trace::Skip]) -> String {
    use crate::core::trace::SkipWhy;
    if skipped.is_empty() {
        return "no route was called: the tier has no route this request can use".into();
    }
    // By why, in chain order; within each, the stored causes with their counts.
    type Causes = Vec<(String, usize)>;
    let mut groups: Vec<(SkipWhy, usize, Causes)> = Vec::new();
    for s in skipped {
        let at = match groups.iter().position(|(w, _, _)| *w == s.why) {
            Some(at) => at,
            None => {
                groups.push((s.why, 0, Vec::new()));
                groups.len() - 1
            }
        };
        let (_, n, causes) = &mut groups[at];
        *n += 1;
        if let Some(c) = &s.cause {
            match causes.iter_mut().find(|(k, _)| k == c) {
                Some((_, k)) => *k += 1,
                None => causes.push((c.clone(), 1)),
            }
        }
    }
    let listed: Vec<String> = groups
        .iter()
        .map(|(why, n, causes)| {
            let causes: Vec<String> = match causes.as_slice() {
                [] => Vec::new(),
                [(c, k)] if k == n => vec![c.clone()],
                many => many.iter().map(|(c, k)| format!("{k} {c}")).collect(),
            };
            if causes.is_empty() {
                format!("{n} {}", why.as_str())
            } else {
                format!("{n} {} ({})", why.as_str(), causes.join(", "))
            }
        })
        .collect();
    let mut text = format!(
        "no route was called: all {} routes were skipped: {}.",
        skipped.len(),
        listed.join(", ")
    );
    let stored = skipped.iter().any(|s| {
        s.why == SkipWhy::Cooling
            || (s.why == SkipWhy::Retired && s.cause.as_deref() != Some(FORCED_BY_WALK))
    });
    if stored {
        text.push_str(
            " `poolctl status` shows each route's health; `poolctl restore ROUTE` brings one back.",
        );
    }
    text
}

/// The reason `walk --retire` records on the routes it forces out.
pub const FORCED_BY_WALK: &str = "forced by walk --retire";

/// `walk --json` (spec/cli.md).
pub fn walk_json(tier: &str, r: &crate::core::trace::Report) -> String {
    let attempts = json!(r.attempts);
    let skipped = json!(r.skipped);
    json!({"tier": tier, "outcome": r.outcome, "reason": r.reason, "served_by": r.served_by,
           "text": r.text, "attempts": attempts, "skipped": skipped})
    .to_string()
}

fn status_row(
    route: &crate::core::vocab::Route,
    h: &crate::policy::health::Health,
    now: crate::core::clock::UnixMs,
) -> (String, String, Option<String>, Option<String>) {
    let state = h.state_at(now);
    let until = (state == crate::core::vocab::HealthState::Cooling)
        .then(|| h.until().map(rfc3339))
        .flatten();
    let reason = (state != crate::core::vocab::HealthState::Ready)
        .then(|| h.reason().map(str::to_string))
        .flatten();
    (route.to_string(), state.to_string(), until, reason)
}

/// `status --json` (spec/cli.md): `{routes:[{route, state, until, reason}]}`.
pub fn status_json(
    rows: &[(crate::core::vocab::Route, crate::policy::health::Health)],
    now: crate::core::clock::UnixMs,
    buckets: &[crate::admission::buckets::BucketView],
) -> String {
    let routes: Vec<Value> = rows
        .iter()
        .map(|(r, h)| {
            let (route, state, until, reason) = status_row(r, h, now);
            let mut row = json!({"route": route, "state": state, "until": until, "reason": reason});
            if !buckets.is_empty() {
                let mut names: Vec<&str> = Vec::new();
                for b in covering(buckets, r) {
                    if !names.contains(&b.bucket.as_str()) {
                        names.push(&b.bucket);
                    }
                }
                row["buckets"] = json!(names);
            }
            row
        })
        .collect();
    let mut doc = json!({ "routes": routes });
    if !buckets.is_empty() {
        doc["buckets"] = json!(buckets);
    }
    doc.to_string()
}

/// The buckets that cover `route`: its own entry and its provider's.
fn covering<'a>(
    buckets: &'a [crate::admission::buckets::BucketView],
    route: &'a crate::core::vocab::Route,
) -> impl Iterator<Item = &'a crate::admission::buckets::BucketView> {
    buckets
        .iter()
        .filter(move |b| b.bucket == route.as_str() || b.bucket == route.provider())
}

/// `rpm 450/450` for each bucket covering the route, named when it is the provider's:
/// one item each, so a narrow column wraps between buckets, never inside one.
fn bucket_levels(
    buckets: &[crate::admission::buckets::BucketView],
    route: &crate::core::vocab::Route,
) -> Vec<String> {
    covering(buckets, route)
        .map(|b| {
            let owner = if b.bucket == route.as_str() {
                String::new()
            } else {
                format!("{} ", b.bucket)
            };
            format!(
                "{owner}{} {}/{}",
                b.dimension.as_str(),
                b.level.floor(),
                b.capacity.floor()
            )
        })
        .collect()
}

const STATUS_COLUMNS: [Column; 4] = [
    Column::ident("route"),
    Column::ident("state"),
    Column::ident("until"),
    Column::text("reason", 2),
];

const STATUS_COLUMNS_WITH_BUCKETS: [Column; 5] = [
    Column::ident("route"),
    Column::ident("state"),
    Column::ident("until"),
    Column::text("reason", 2),
    Column::text("buckets (level/capacity)", 3),
];

pub fn status_table(
    rows: &[(crate::core::vocab::Route, crate::policy::health::Health)],
    now: crate::core::clock::UnixMs,
    buckets: &[crate::admission::buckets::BucketView],
    look: &Look,
) -> String {
    let cells: Vec<Vec<Cell>> = rows
        .iter()
        .map(|(r, h)| {
            let (route, state, until, reason) = status_row(r, h, now);
            let mut row = vec![
                Cell::new(route),
                Cell::new(state).tone(health_tone(h.state_at(now))),
                Cell::new(until.unwrap_or_default()),
                Cell::new(reason.unwrap_or_default()),
            ];
            if !buckets.is_empty() {
                row.push(Cell::items(vec![bucket_levels(buckets, r)], ", "));
            }
            row
        })
        .collect();
    if buckets.is_empty() {
        return table::render(&STATUS_COLUMNS, &cells, look);
    }
    let mut out = table::render(&STATUS_COLUMNS_WITH_BUCKETS, &cells, look);
    // Wrapped like the table: printed whole, a terminal narrower than the note would
    // break it in the middle of a word.
    out.push_str(&hang(
        "",
        "admission buckets are per process: these are a new process's (full); a running gateway's are on its /metrics",
        look.width,
    ));
    out
}
