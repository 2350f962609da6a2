//! `chaos --target`: the fault scenarios against a gateway poolctl does not run in
//! process (LiteLLM, Portkey, a deployed `poolctl serve`). The gateway's config points
//! at one mock server for the whole suite (`suite_mock`, `target_config`); this module
//! sends each scenario's requests to the gateway over real HTTP, one scenario after
//! another, and compares what a client can see with the scenario's expectations:
//!
//! - the outcome: success or failure, and (on a pool target, whose status table is
//!   documented) the status class;
//! - which route's answer arrived: the mock names each route's model uniquely, and
//!   records which routes answered;
//! - the upstream calls per route, read from the mock's `GET /calls`;
//! - whether a stream was spliced from two answers, or cut and presented as complete;
//! - whether the request ended within the scenario's deadline.
//!
//! What only a poolctl router can show (health, attempts and their classes, waits,
//! buckets) is reported as "not observable", never as passed. What the target's config
//! format cannot express (a policy card on LiteLLM, whose router settings are global)
//! is "not comparable". A scenario that would wait longer than `max_wait` of real time,
//! or that needs what a target cannot be given (preset health, its own clock), is
//! skipped and counted.

use super::runner::MOCK_KEY;
use super::scenario::{Expect, Reply, RequestSpec, Scenario};
use super::suite_mock::Naming;
use super::target_config::{portkey_configs, target_model, ConfigFormat, Globals};
use crate::core::clock::Stopwatch;
use crate::core::request::ChatRequest;
use crate::core::secret::Secret;
use crate::core::vocab::{CallPath, Outcome, Reason, Route};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Bytes read of one answer from the target: a scenario's answers are small; a
/// target that sends more is cut and the check fails naming the cap.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// Added to a scenario's deadline before a request counts as hung: the target's own
/// overhead and a loaded CI machine.
const DEADLINE_SLACK_MS: u64 = 3_000;
/// The mock's control endpoints answer at once; a slow one is a broken run.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the suite runs.
#[derive(Debug, Clone)]
pub struct Target {
    /// The gateway's base URL, without `/v1`.
    pub url: String,
    /// Sent as `Authorization: Bearer`; never printed.
    pub token: Option<Secret>,
    pub format: ConfigFormat,
    /// The suite's mock server (its routes named by `naming`).
    pub mock: SocketAddr,
    pub naming: Naming,
    /// Scenarios that would wait longer than this in real time are skipped.
    pub max_wait_ms: u64,
}

/// How one check of one request went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    Passed,
    Failed,
    /// Only a poolctl router shows it (health, attempts, waits, buckets).
    NotObservable,
    /// The target's config format cannot express what it depends on.
    NotComparable,
}

/// The kind of wrong conduct a failed check shows, for the peers' table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Wrong {
    /// More upstream calls than the scenario allows (a retry storm, a retired route
    /// called again) or fewer (a chain cut short).
    UpstreamCalls,
    /// Success where failure was right, or the reverse; the wrong status class; the
    /// wrong route's answer; the wrong text.
    Outcome,
    /// A stream with two answers spliced together, or cut and presented as complete.
    Splice,
    /// No end within the scenario's deadline.
    Hang,
}

impl Wrong {
    pub const ALL: [Wrong; 4] = [
        Wrong::UpstreamCalls,
        Wrong::Outcome,
        Wrong::Splice,
        Wrong::Hang,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Wrong::UpstreamCalls => "upstream calls",
            Wrong::Outcome => "outcome",
            Wrong::Splice => "splice",
            Wrong::Hang => "hang",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// The request's place among the scenario's requests (copies counted), from 0.
    pub request: usize,
    pub field: String,
    pub status: CheckStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wrong: Option<Wrong>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub expected: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub got: String,
}

/// Why a scenario was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipKind {
    /// It would wait longer than `--max-wait` of real time.
    MaxWait,
    /// It presets health (`state:`), which a target cannot be given.
    PresetHealth,
    /// It reads hints against its own clock (`now:`).
    OwnClock,
    /// Its copies run at once, and what it expects depends on the order in which
    /// they reach the upstream, which only a virtual clock fixes.
    Interleaving,
    /// Its pool-wide settings differ from the suite's, or the format cannot carry its
    /// path.
    NotComparable,
}

impl SkipKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipKind::MaxWait => "over --max-wait",
            SkipKind::PresetHealth => "preset health",
            SkipKind::OwnClock => "own clock",
            SkipKind::Interleaving => "concurrent copies",
            SkipKind::NotComparable => "not comparable",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Fail,
    Skip,
}

/// What one scenario did against the target.
#[derive(Debug, Clone, Serialize)]
pub struct TargetRun {
    pub file: PathBuf,
    pub name: String,
    pub verdict: Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip: Option<SkipKind>,
    /// Why it was skipped, or what stopped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub checks: Vec<Check>,
    pub wall_ms: f64,
    /// Every request it sent got no HTTP answer at all (refused, reset, timed out).
    #[serde(skip)]
    pub unanswered: bool,
}

impl TargetRun {
    pub fn failed(&self) -> impl Iterator<Item = &Check> {
        self.checks
            .iter()
            .filter(|c| c.status == CheckStatus::Failed)
    }

    pub fn count(&self, status: CheckStatus) -> usize {
        self.checks.iter().filter(|c| c.status == status).count()
    }

    /// The kinds of wrong conduct this scenario showed, each once.
    pub fn wrongs(&self) -> Vec<Wrong> {
        let mut w: Vec<Wrong> = self.failed().filter_map(|c| c.wrong).collect();
        w.sort();
        w.dedup();
        w
    }
}

/// Why `scenario` cannot be sent to `target`, if it cannot.
pub fn skip_reason(
    scenario: &Scenario,
    target: &Target,
    globals: &Globals,
) -> Option<(SkipKind, String)> {
    if !scenario.state.is_empty() {
        return Some((
            SkipKind::PresetHealth,
            "it presets health (`state:`), which a target cannot be given".into(),
        ));
    }
    if scenario.now.is_some() {
        return Some((
            SkipKind::OwnClock,
            "it reads hints against its own clock (`now:`)".into(),
        ));
    }
    if scenario.request_specs().iter().any(|r| r.concurrent) {
        return Some((
            SkipKind::Interleaving,
            "its concurrent copies interleave as the target schedules them, not as its virtual clock orders them".into(),
        ));
    }
    let wait = real_wait_ms(scenario);
    if wait > target.max_wait_ms {
        return Some((
            SkipKind::MaxWait,
            format!(
                "it waits about {} of real time (over --max-wait {})",
                secs(wait),
                secs(target.max_wait_ms)
            ),
        ));
    }
    if target.format == ConfigFormat::Pool {
        if let Some(why) = globals.differ(scenario) {
            return Some((SkipKind::NotComparable, why));
        }
        if let Some(p) = split_provider(scenario) {
            return Some((
                SkipKind::NotComparable,
                format!("its routes of provider `{p}` have different settings, which a pool config holds once per provider"),
            ));
        }
    }
    if target.format != ConfigFormat::Pool
        && scenario
            .entries()
            .any(|(_, e)| e.wire == crate::core::vocab::Wire::Responses)
    {
        // Their configs name a provider, and send it chat completions.
        return Some((
            SkipKind::NotComparable,
            format!(
                "a route of the Responses wire, which a {} config does not call",
                target.format.as_str()
            ),
        ));
    }
    if target.format != ConfigFormat::Pool && scenario.path == CallPath::Rerank {
        return Some((
            SkipKind::NotComparable,
            format!(
                "a {} config has no rerank route to mock",
                target.format.as_str()
            ),
        ));
    }
    None
}

/// A provider whose routes in `scenario` carry different settings (the in-process
/// runner gives each route its own; a pool config one per provider).
fn split_provider(scenario: &Scenario) -> Option<String> {
    let mut seen: BTreeMap<&str, crate::config::route::ProviderSettings> = BTreeMap::new();
    for (_, e) in scenario.entries() {
        let p = e.route.provider();
        match seen.get(p) {
            Some(first) if *first != e.settings() => return Some(p.to_string()),
            Some(_) => {}
            None => {
                seen.insert(p, e.settings());
            }
        }
    }
    None
}

/// Which of `scenarios`' routes the mock at `mock` does not serve: a mock started on
/// other paths (one scenario is served as written, a suite renamed).
pub async fn missing_on_mock(
    client: &reqwest::Client,
    mock: SocketAddr,
    scenarios: &[Scenario],
    naming: Naming,
) -> Result<Vec<String>, String> {
    let calls = read_calls(client, mock).await?;
    Ok(scenarios
        .iter()
        .flat_map(|s| {
            s.entries()
                .map(move |(_, e)| naming.route(&e.route, &s.name).to_string())
        })
        .filter(|r| !calls.calls.contains_key(r))
        .collect())
}

pub fn secs(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// The real time a scenario spends waiting: the gaps between its requests, the waits
/// its expectations name (Retry-After honoured), and the delays its mocks play.
pub fn real_wait_ms(scenario: &Scenario) -> u64 {
    let specs = scenario.request_specs();
    let gaps: u64 = specs.iter().map(|s| s.after_ms).sum();
    let waits: u64 = specs
        .iter()
        .filter_map(|s| s.expect.as_ref())
        .map(|e| e.waits_ms.iter().flatten().sum::<u64>() + e.queued_ms.unwrap_or(0))
        .sum();
    let delays: u64 = scenario
        .entries()
        .map(|(_, e)| e.replies.iter().map(reply_delay_ms).sum::<u64>())
        .sum();
    gaps + waits + delays
}

fn reply_delay_ms(reply: &Reply) -> u64 {
    match reply {
        Reply::Delay { ms, then } => ms + reply_delay_ms(then),
        Reply::Stream(s) => s.first_token_ms + s.gap_ms * s.items.len() as u64,
        _ => 0,
    }
}

/// What a client saw of one request.
#[derive(Debug, Clone, Default)]
struct Seen {
    status: u16,
    /// `Some` for a transport error or a body that is not the API's shape.
    broken: Option<String>,
    /// The answer's text (a stream's deltas joined).
    text: String,
    /// Every `model` the answer named, in order, each once.
    models: Vec<String>,
    /// A stream: a finish reason and `[DONE]` arrived, and no error.
    clean_end: bool,
    /// A stream: an error event (or an error object in a chunk) arrived.
    stream_error: bool,
    stream: bool,
    elapsed_ms: u64,
    timed_out: bool,
    /// A Responses API answer's id (what the next turn's `continue` sends).
    response_id: Option<String>,
}

impl Seen {
    /// Whether the client got an answer it would take as whole.
    fn success(&self) -> bool {
        (200..300).contains(&self.status)
            && self.broken.is_none()
            && !self.timed_out
            && (!self.stream || (self.clean_end && !self.stream_error))
    }
}

/// The mock's `GET /calls`, by route as the mock names it.
#[derive(Debug, Clone, Default)]
struct Calls {
    calls: BTreeMap<String, u64>,
    answered: BTreeMap<String, u64>,
}

/// One scenario's names on the target: the mock's name of each of its routes, and
/// back.
struct Names {
    /// The mock's route name -> the scenario's route.
    back: BTreeMap<String, Route>,
    /// A model name as an answer may carry it -> the scenario's route.
    by_model: BTreeMap<String, Route>,
}

impl Names {
    fn of(scenario: &Scenario, naming: Naming) -> Names {
        let mut back = BTreeMap::new();
        let mut served: BTreeMap<String, Vec<&Route>> = BTreeMap::new();
        let mut written: BTreeMap<&str, Vec<&Route>> = BTreeMap::new();
        for (_, e) in scenario.entries() {
            let name = naming.route(&e.route, &scenario.name);
            served
                .entry(name.model().to_string())
                .or_default()
                .push(&e.route);
            back.insert(name.to_string(), e.route.clone());
            written.entry(e.route.model()).or_default().push(&e.route);
        }
        // A model name points at a route only where no other route has it (two group
        // members served as written share one); a scripted body names the model as the
        // scenario wrote it, which points at its route too.
        let mut by_model = BTreeMap::new();
        for (model, routes) in served
            .into_iter()
            .chain(written.into_iter().map(|(m, r)| (m.to_string(), r)))
        {
            if let [one] = routes.as_slice() {
                by_model.entry(model).or_insert_with(|| (*one).clone());
            }
        }
        Names { back, by_model }
    }

    /// The upstream calls the mock counted for the scenario's `route`.
    fn calls_of(&self, route: &Route, calls: &Calls) -> u64 {
        self.back
            .iter()
            .find(|(_, r)| *r == route)
            .and_then(|(served, _)| calls.calls.get(served))
            .copied()
            .unwrap_or(0)
    }

    /// The route an answer's `model` names: as sent, or with a gateway's `provider/`
    /// prefix.
    fn route_of_model(&self, model: &str) -> Option<&Route> {
        self.by_model.get(model).or_else(|| {
            model
                .split_once('/')
                .and_then(|(_, rest)| self.by_model.get(rest))
        })
    }
}

/// Runs every scenario against `target`, one after another; `on_done` sees each.
pub async fn run_suite(
    scenarios: &[Scenario],
    target: &Target,
    on_done: &(dyn Fn(&TargetRun) + Send + Sync),
) -> Vec<TargetRun> {
    let client = crate::wire::http_client();
    let globals = Globals::of(scenarios);
    let portkey = match target.format {
        ConfigFormat::Portkey => portkey_configs(scenarios, target.mock, target.naming),
        _ => BTreeMap::new(),
    };
    let mut runs = Vec::with_capacity(scenarios.len());
    let mut silent = 0;
    for s in scenarios {
        // A target that stopped answering would cost every remaining scenario its whole
        // deadline: after a few in a row, the rest are failed at once, saying why.
        if silent >= GIVE_UP_AFTER {
            let run = TargetRun {
                file: s.file.clone(),
                name: s.name.clone(),
                verdict: Verdict::Fail,
                skip: None,
                note: Some(format!(
                    "not sent: the target gave no answer to {GIVE_UP_AFTER} scenarios in a row"
                )),
                checks: Vec::new(),
                wall_ms: 0.0,
                unanswered: true,
            };
            on_done(&run);
            runs.push(run);
            continue;
        }
        let run = run_one(
            s,
            target,
            &globals,
            portkey.get(&target_model(s, target.naming)),
            &client,
        )
        .await;
        silent = if run.unanswered { silent + 1 } else { 0 };
        on_done(&run);
        runs.push(run);
    }
    runs
}

/// Scenarios in a row with no HTTP answer at all before the rest are not sent.
const GIVE_UP_AFTER: usize = 3;

async fn run_one(
    scenario: &Scenario,
    target: &Target,
    globals: &Globals,
    portkey: Option<&Value>,
    client: &reqwest::Client,
) -> TargetRun {
    let sw = Stopwatch::start();
    let mut run = TargetRun {
        file: scenario.file.clone(),
        name: scenario.name.clone(),
        verdict: Verdict::Skip,
        skip: None,
        note: None,
        checks: Vec::new(),
        wall_ms: 0.0,
        unanswered: false,
    };
    if let Some((kind, why)) = skip_reason(scenario, target, globals) {
        run.skip = Some(kind);
        run.note = Some(why);
        return run;
    }
    if let Err(e) = reset_mock(client, target.mock).await {
        run.verdict = Verdict::Fail;
        run.note = Some(e);
        return run;
    }
    let names = Names::of(scenario, target.naming);
    let comparable = Comparable::of(scenario, target.format);
    let mut index = 0;
    let (mut sent, mut unanswered) = (0usize, 0usize);
    // `ingress: responses`: the previous request's response id, for `continue: true`.
    let last_response: std::sync::Mutex<Option<String>> = Default::default();
    for spec in scenario.request_specs() {
        if spec.after_ms > 0 {
            crate::core::clock::real_sleep(Duration::from_millis(spec.after_ms)).await;
        }
        let copies = spec.copies() as usize;
        // As the in-process runner observes: after each copy, or after a concurrent
        // batch as a whole.
        let mut seen: Vec<(Seen, Calls, Calls)> = Vec::with_capacity(copies);
        let mut broke = None;
        if spec.concurrent {
            match read_calls(client, target.mock).await {
                Ok(before) => {
                    let all =
                        futures_util::future::join_all((0..copies).map(|_| {
                            send(client, target, scenario, &spec, portkey, &last_response)
                        }))
                        .await;
                    match read_calls(client, target.mock).await {
                        Ok(after) => {
                            seen.extend(all.into_iter().map(|s| (s, before.clone(), after.clone())))
                        }
                        Err(e) => broke = Some(e),
                    }
                }
                Err(e) => broke = Some(e),
            }
        } else {
            for _ in 0..copies {
                let before = match read_calls(client, target.mock).await {
                    Ok(c) => c,
                    Err(e) => {
                        broke = Some(e);
                        break;
                    }
                };
                let s = send(client, target, scenario, &spec, portkey, &last_response).await;
                match read_calls(client, target.mock).await {
                    Ok(after) => seen.push((s, before, after)),
                    Err(e) => {
                        broke = Some(e);
                        break;
                    }
                }
            }
        }
        if let Some(e) = broke {
            run.verdict = Verdict::Fail;
            run.note = Some(e);
            break;
        }
        let after = seen.last().map(|(_, _, a)| a.clone()).unwrap_or_default();
        sent += seen.len();
        unanswered += seen.iter().filter(|(s, _, _)| s.status == 0).count();
        let deadline = deadline_ms(scenario);
        for (s, before, after) in &seen {
            if let Some(e) = &spec.expect {
                judge(
                    &mut run.checks,
                    index,
                    e,
                    s,
                    &names,
                    &comparable,
                    (before, after),
                    if spec.concurrent { copies } else { 1 },
                    target.format,
                );
            }
            let within = !s.timed_out && s.elapsed_ms <= deadline + DEADLINE_SLACK_MS;
            run.checks.push(check(
                index,
                "deadline",
                within,
                Wrong::Hang,
                format!("an end within {}", secs(deadline)),
                if s.timed_out {
                    format!("no end after {} (cut)", secs(s.elapsed_ms))
                } else {
                    secs(s.elapsed_ms)
                },
            ));
            index += 1;
        }
        if let Some(counts) = &spec.expect_counts {
            let all: Vec<Seen> = seen.iter().map(|(s, _, _)| s.clone()).collect();
            judge_counts(&mut run.checks, index - 1, counts, &all, &comparable);
        }
        if let Some(within) = &spec.upstream_calls_within {
            judge_within(
                &mut run.checks,
                index - 1,
                within,
                &names,
                &after,
                &comparable,
            );
        }
    }
    run.unanswered = sent > 0 && unanswered == sent;
    if run.verdict != Verdict::Fail {
        let judged = run.checks.iter().any(|c| {
            c.status == CheckStatus::Passed
                && !matches!(c.field.as_str(), "deadline" | "stream.splice")
        });
        run.verdict = if run.failed().next().is_some() {
            Verdict::Fail
        } else if judged {
            Verdict::Pass
        } else {
            run.skip = Some(SkipKind::NotComparable);
            run.note = Some(format!(
                "nothing it expects can be compared on a {} target",
                target.format.as_str()
            ));
            Verdict::Skip
        };
    }
    run.wall_ms = sw.elapsed().as_secs_f64() * 1000.0;
    run
}

/// The longest one request of `scenario` may take: its card's elapsed budget, or the
/// default card's (decisions.md: `max_elapsed_ms` 60 000) when it states none, capped
/// at twice that so a hung target costs a bounded wait.
fn deadline_ms(scenario: &Scenario) -> u64 {
    let default = crate::policy::card::Policy::default().max_elapsed_ms;
    scenario
        .policy
        .as_ref()
        .map_or(default, |p| p.max_elapsed_ms)
        .min(default * 2)
        + real_wait_ms(scenario)
}

/// What of a scenario's routes a LiteLLM config cannot carry: a dialect LiteLLM has no
/// provider prefix for (written as `openai/`, its error conventions are lost), or a
/// provider setting LiteLLM has no field for. Either changes how the chain is walked.
fn litellm_cannot_express(scenario: &Scenario) -> Option<&'static str> {
    for (_, e) in scenario.entries() {
        let (dialect, _) = e.settings().dialect(None);
        if e.wire != crate::core::vocab::Wire::Responses
            && crate::config::litellm::prefix_for(e.wire, dialect).is_none()
        {
            return Some("a route of a dialect no LiteLLM provider prefix carries");
        }
        // `stream_idle_ms` is left comparable: the stall scenarios pass on LiteLLM's
        // defaults, so none hinges on the value.
        let unwritten = [
            ("a route's stream_max_ms", e.stream_max_ms.is_some()),
            ("a route's max_stream_bytes", e.max_stream_bytes.is_some()),
            ("a route's max_event_bytes", e.max_event_bytes.is_some()),
            ("a route's drop_params", e.drop_params),
        ];
        if let Some((what, _)) = unwritten.into_iter().find(|(_, set)| *set) {
            return Some(what);
        }
    }
    None
}

/// What a target's format can express of a scenario.
struct Comparable {
    /// The chain's behaviour depends on a card, limits, tiers or headers the format
    /// cannot carry: outcomes, routes and calls are not comparable.
    why_not: Option<String>,
}

impl Comparable {
    fn of(scenario: &Scenario, format: ConfigFormat) -> Comparable {
        let why_not = match format {
            ConfigFormat::Pool => None,
            f => {
                let what = if scenario.policy.is_some() {
                    Some("a policy card")
                } else if !scenario.limits.is_empty() {
                    Some("admission limits")
                } else if !scenario.tiers.is_empty() {
                    Some("extra tiers")
                } else if scenario.entries().any(|(_, e)| e.breaker.is_some()) {
                    Some("a breaker")
                } else if scenario.entries().any(|(_, e)| e.model.is_some()) {
                    Some("model facts")
                } else if let Some(what) = (f == ConfigFormat::Litellm)
                    .then(|| litellm_cannot_express(scenario))
                    .flatten()
                {
                    Some(what)
                } else if scenario.entries().any(|(_, e)| {
                    e.strategy == Some(crate::config::route::GroupStrategy::LeastBusy)
                }) {
                    Some("a least_busy group")
                } else if f == ConfigFormat::Portkey
                    && scenario.path == CallPath::Embed
                    && scenario
                        .entries()
                        .any(|(_, e)| e.wire == crate::core::vocab::Wire::Gemini)
                {
                    // Portkey embeds on Gemini with `embedContent`; the mock serves
                    // `batchEmbedContents`, as poolctl calls it.
                    Some("a Gemini embedding route (Portkey's method the mock lacks)")
                } else if scenario
                    .request_specs()
                    .iter()
                    .any(|r| r.session.is_some() || r.priority.is_some())
                {
                    Some("sessions or priorities")
                } else {
                    None
                };
                what.map(|w| format!("{w}, which a {} config cannot express", f.as_str()))
            }
        };
        Comparable { why_not }
    }
}

fn check(
    request: usize,
    field: &str,
    ok: bool,
    wrong: Wrong,
    expected: String,
    got: String,
) -> Check {
    Check {
        request,
        field: field.into(),
        status: if ok {
            CheckStatus::Passed
        } else {
            CheckStatus::Failed
        },
        wrong: (!ok).then_some(wrong),
        expected: printable(&expected),
        got: printable(&got),
    }
}

/// `text` with control characters escaped: what a target sends (a model name, an
/// error) reaches a terminal and a JUnit file, and must not drive either.
fn printable(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn unjudged(request: usize, field: &str, status: CheckStatus, why: &str) -> Check {
    Check {
        request,
        field: field.into(),
        status,
        wrong: None,
        expected: String::new(),
        got: printable(why),
    }
}

/// Success or failure, as a scenario's outcome word means it to a client. `degraded`
/// is neither: a 2xx whose body may be the degraded answer (a rerank's recall order)
/// or the error a caller's own fallback acts on.
fn wants_success(outcome: Outcome) -> Option<bool> {
    match outcome {
        Outcome::Success => Some(true),
        Outcome::Failed | Outcome::Shed | Outcome::Interrupted | Outcome::Cancelled => Some(false),
        Outcome::Degraded | Outcome::Queued => None,
    }
}

/// The status classes a failure may carry on a pool target (spec/cli.md's status
/// table): the client's fault is a 4xx, the gateway's or upstream's a 5xx; a shed is
/// a 429 or a 503.
fn failure_classes(outcome: Outcome, reason: Option<Reason>) -> &'static [u16] {
    match (outcome, reason) {
        (Outcome::Shed, _) | (_, Some(Reason::Capacity | Reason::Admission)) => &[4, 5],
        (_, Some(Reason::Request | Reason::Unsupported | Reason::TooLarge)) => &[4],
        _ => &[5],
    }
}

fn described(s: &Seen) -> String {
    if s.timed_out {
        return format!("no answer within {}", secs(s.elapsed_ms));
    }
    if let Some(b) = &s.broken {
        return if s.status == 0 {
            b.clone()
        } else {
            format!("{} ({b})", s.status)
        };
    }
    if s.stream && (200..300).contains(&s.status) {
        return if s.stream_error {
            "a stream that ended in an error".into()
        } else if s.clean_end {
            "a complete stream".into()
        } else {
            "a stream cut without an error".into()
        };
    }
    s.status.to_string()
}

#[allow(clippy::too_many_arguments)]
fn judge(
    out: &mut Vec<Check>,
    i: usize,
    e: &Expect,
    s: &Seen,
    names: &Names,
    comparable: &Comparable,
    (before, after): (&Calls, &Calls),
    copies: usize,
    format: ConfigFormat,
) {
    let not = |field: &str| {
        unjudged(
            i,
            field,
            CheckStatus::NotObservable,
            "only a poolctl router shows it",
        )
    };
    let blocked = |field: &str, why: &str| unjudged(i, field, CheckStatus::NotComparable, why);
    // What a poolctl router alone can show.
    for (present, field) in [
        (e.reason.is_some(), "reason"),
        (e.attempts.is_some(), "attempts"),
        (e.skipped.is_some(), "skipped"),
        (e.health.is_some(), "health"),
        (e.waits_ms.is_some(), "waits_ms"),
        (e.queued_ms.is_some(), "queued_ms"),
        (e.buckets.is_some(), "buckets"),
    ] {
        if present {
            out.push(not(field));
        }
    }
    // A stream spliced from two answers is wrong whatever the scenario expects; it can
    // be seen only where the chunks name the routes' models.
    let routes: Vec<&Route> = s
        .models
        .iter()
        .filter_map(|m| names.route_of_model(m))
        .collect();
    if s.stream && routes.is_empty() {
        out.push(unjudged(
            i,
            "stream.splice",
            CheckStatus::NotObservable,
            "no chunk names a route's model",
        ));
    } else if s.stream {
        let mut distinct = routes.clone();
        distinct.dedup();
        out.push(check(
            i,
            "stream.splice",
            distinct.len() <= 1,
            Wrong::Splice,
            "one answer per stream".into(),
            routes
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(" + "),
        ));
    }
    if let Some(why) = &comparable.why_not {
        for (present, field) in [
            (true, "outcome"),
            (e.served_by.is_some(), "served_by"),
            (e.text.is_some(), "text"),
            (e.upstream_calls.is_some(), "upstream_calls"),
        ] {
            if present {
                out.push(blocked(field, why));
            }
        }
        return;
    }
    if e.outcome == Outcome::Degraded {
        let ok = (200..300).contains(&s.status) && !s.timed_out;
        out.push(check(
            i,
            "outcome",
            ok,
            Wrong::Outcome,
            "degraded (a 2xx)".into(),
            described(s),
        ));
    }
    if let Some(want) = wants_success(e.outcome) {
        let ok = s.success() == want;
        let kind = if !want && s.stream && s.clean_end && !s.stream_error {
            // Cut upstream, yet presented to the client as a whole answer.
            Wrong::Splice
        } else {
            Wrong::Outcome
        };
        out.push(check(
            i,
            "outcome",
            ok,
            kind,
            if want {
                "success (2xx, a whole answer)".into()
            } else {
                format!("failure ({})", e.outcome)
            },
            described(s),
        ));
        if !want && ok && format == ConfigFormat::Pool && s.status >= 400 {
            let reason = e.reason.flatten();
            let classes = failure_classes(e.outcome, reason);
            let class = s.status / 100;
            out.push(check(
                i,
                "status",
                classes.contains(&class),
                Wrong::Outcome,
                classes
                    .iter()
                    .map(|c| format!("{c}xx"))
                    .collect::<Vec<_>>()
                    .join(" or "),
                s.status.to_string(),
            ));
        }
    }
    if let Some(want) = &e.served_by {
        let got = served_by(s, names, before, after, copies);
        let ok = want == &got;
        out.push(check(
            i,
            "served_by",
            ok,
            Wrong::Outcome,
            want.as_ref()
                .map(|r| r.to_string())
                .unwrap_or_else(|| "none".into()),
            match got {
                Some(r) => r.to_string(),
                None if s.models.is_empty() => "none".into(),
                // A model no route of the scenario has: the target renamed it.
                None => format!("none (the answer names model {})", s.models.join(", ")),
            },
        ));
    }
    if let Some(want) = &e.text {
        if (200..300).contains(&s.status) || wants_success(e.outcome) == Some(true) {
            out.push(check(
                i,
                "text",
                &s.text == want,
                Wrong::Outcome,
                format!("{want:?}"),
                format!("{:?}", crate::core::clip::clip(&s.text, 120)),
            ));
        }
    }
    if let Some(want) = &e.upstream_calls {
        for (route, n) in want {
            let got = names.calls_of(route, after);
            // Concurrent copies share one reading; each copy's expectation then holds
            // for the batch's end, as in the in-process runner.
            out.push(check(
                i,
                &format!("upstream_calls.{route}"),
                got == *n,
                Wrong::UpstreamCalls,
                n.to_string(),
                got.to_string(),
            ));
        }
    }
}

/// The route whose answer (or, for a stream cut after its first token, whose part of
/// an answer) reached the client: the one its `model` names, else the only route that
/// answered during the request.
fn served_by(
    s: &Seen,
    names: &Names,
    before: &Calls,
    after: &Calls,
    copies: usize,
) -> Option<Route> {
    if let Some(r) = s.models.iter().rev().find_map(|m| names.route_of_model(m)) {
        return Some(r.clone());
    }
    // A stream that failed before its first token carried no route's answer.
    let nothing = s.stream && s.text.is_empty() && !s.clean_end;
    if !(200..300).contains(&s.status) || copies != 1 || nothing {
        return None;
    }
    let answered: Vec<&String> = after
        .answered
        .iter()
        .filter(|(k, n)| **n > before.answered.get(*k).copied().unwrap_or(0))
        .map(|(k, _)| k)
        .collect();
    match answered.as_slice() {
        [one] => names.back.get(*one).cloned(),
        _ => None,
    }
}

fn judge_counts(
    out: &mut Vec<Check>,
    i: usize,
    counts: &BTreeMap<Outcome, u64>,
    seen: &[Seen],
    comparable: &Comparable,
) {
    if let Some(why) = &comparable.why_not {
        out.push(unjudged(
            i,
            "expect_counts",
            CheckStatus::NotComparable,
            why,
        ));
        return;
    }
    let want_ok: u64 = counts
        .iter()
        .filter(|(o, _)| wants_success(**o) == Some(true))
        .map(|(_, n)| n)
        .sum();
    let want_failed: u64 = counts
        .iter()
        .filter(|(o, _)| wants_success(**o) == Some(false))
        .map(|(_, n)| n)
        .sum();
    let ok = seen.iter().filter(|s| s.success()).count() as u64;
    let failed = seen.len() as u64 - ok;
    out.push(check(
        i,
        "expect_counts",
        ok == want_ok && failed == want_failed,
        Wrong::Outcome,
        format!("{want_ok} success, {want_failed} failure"),
        format!("{ok} success, {failed} failure"),
    ));
}

/// `upstream_calls_within`: each route's calls since the scenario began, in a range
/// (a weighted draw's share).
fn judge_within(
    out: &mut Vec<Check>,
    i: usize,
    within: &BTreeMap<Route, [u64; 2]>,
    names: &Names,
    after: &Calls,
    comparable: &Comparable,
) {
    for (route, [lo, hi]) in within {
        let field = format!("upstream_calls_within.{route}");
        if let Some(why) = &comparable.why_not {
            out.push(unjudged(i, &field, CheckStatus::NotComparable, why));
            continue;
        }
        let got = names.calls_of(route, after);
        out.push(check(
            i,
            &field,
            (*lo..=*hi).contains(&got),
            Wrong::UpstreamCalls,
            format!("{lo} to {hi}"),
            got.to_string(),
        ));
    }
}

/// The chat request a scenario sends, as an OpenAI chat-completions body: the same
/// request the in-process runner gives the router, including a prompt padded to the
/// token count the scenario declares (a gateway estimates it from the text).
pub fn chat_body(scenario: &Scenario, spec: &RequestSpec, model: &str) -> Value {
    let shape = scenario.request.as_ref();
    let mut chat = super::runner::request_chat(scenario, spec);
    pad_to_estimate(&mut chat);
    let ep = crate::config::route::ProviderSettings::default().endpoint(
        "target",
        "http://target/v1".into(),
        Secret::new(MOCK_KEY),
        None,
    );
    let call = crate::wire::openai::chat_call(&ep, model, &chat);
    let mut body = match call.body {
        crate::wire::http::CallBody::Json(v) => v,
        _ => json!({}),
    };
    // Fields the request does not map itself go as the scenario wrote them.
    if let (Some(obj), Some(shape)) = (body.as_object_mut(), shape) {
        for (k, v) in &shape.fields {
            obj.insert(k.clone(), v.clone());
        }
    }
    body["stream"] = json!(scenario.path == CallPath::Stream);
    body
}

/// Pads the last user text so a gateway's estimate of the prompt (about four
/// characters a token) is the scenario's declared `token_estimate`.
fn pad_to_estimate(chat: &mut ChatRequest) {
    use crate::core::conversation::{Part, Turn};
    let Some(want) = chat.token_estimate.take() else {
        return;
    };
    let have = chat.needs(false).prompt_tokens;
    if want <= have {
        return;
    }
    let last = chat
        .conversation
        .turns
        .iter_mut()
        .rev()
        .find_map(|t| match t {
            Turn::User { parts } => parts.iter_mut().rev().find_map(|p| match p {
                Part::Text { text } => Some(text),
                _ => None,
            }),
            _ => None,
        });
    if let Some(text) = last {
        let c = text.chars().count() as u64;
        // A multiple of four characters estimates exactly; the rest of the prompt
        // stays as it was.
        let len = 4 * (c.div_ceil(4) + (want - have));
        text.push(' ');
        text.extend(std::iter::repeat_n('x', (len - c - 1) as usize));
    }
}

fn endpoint_path(scenario: &Scenario) -> &'static str {
    if scenario.ingress == super::scenario::ingress::Ingress::Responses {
        return "/v1/responses";
    }
    match scenario.path {
        CallPath::Chat | CallPath::Stream => "/v1/chat/completions",
        CallPath::Embed => "/v1/embeddings",
        CallPath::Rerank => "/v1/rerank",
    }
}

fn request_body(
    scenario: &Scenario,
    spec: &RequestSpec,
    model: &str,
    last_response: &std::sync::Mutex<Option<String>>,
) -> Value {
    if scenario.ingress == super::scenario::ingress::Ingress::Responses {
        return super::runner::request_responses(scenario, spec, model, last_response);
    }
    match scenario.path {
        CallPath::Chat | CallPath::Stream => chat_body(scenario, spec, model),
        CallPath::Embed => {
            let r = super::runner::scenario_embed_request();
            json!({ "model": model, "input": r.inputs })
        }
        CallPath::Rerank => {
            let r = super::runner::scenario_rerank_request();
            json!({ "model": model, "query": r.query, "documents": r.documents })
        }
    }
}

async fn send(
    client: &reqwest::Client,
    target: &Target,
    scenario: &Scenario,
    spec: &RequestSpec,
    portkey: Option<&Value>,
    last_response: &std::sync::Mutex<Option<String>>,
) -> Seen {
    let model = target_model(scenario, target.naming);
    let body = request_body(scenario, spec, &model, last_response);
    let url = format!(
        "{}{}",
        target.url.trim_end_matches('/'),
        endpoint_path(scenario)
    );
    let mut req = client.post(&url).json(&body);
    if let Some(t) = &target.token {
        req = req.bearer_auth(t.expose());
    }
    if let Some(cfg) = portkey {
        req = req.header("x-portkey-config", cfg.to_string());
    }
    if target.format == ConfigFormat::Pool {
        if let Some(s) = &spec.session {
            req = req.header("x-poolctl-session", s);
        }
        if let Some(p) = spec.priority {
            req = req.header("x-poolctl-priority", p.as_str());
        }
    }
    let deadline = Duration::from_millis(deadline_ms(scenario) + DEADLINE_SLACK_MS);
    let sw = Stopwatch::start();
    let stream = scenario.path == CallPath::Stream;
    let mut seen = match tokio::time::timeout(deadline, exchange(req, stream)).await {
        Ok(s) => s,
        Err(_) => Seen {
            timed_out: true,
            stream,
            ..Seen::default()
        },
    };
    seen.stream = stream;
    seen.elapsed_ms = sw.elapsed().as_millis() as u64;
    *last_response.lock().unwrap_or_else(|p| p.into_inner()) =
        seen.success().then(|| seen.response_id.clone()).flatten();
    seen
}

/// Sends one request and reads its answer, bounded in bytes (the caller bounds time).
async fn exchange(req: reqwest::RequestBuilder, stream: bool) -> Seen {
    let mut seen = Seen::default();
    let mut resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            seen.broken = Some(format!("no answer: {}", transport_error(&e)));
            return seen;
        }
    };
    seen.status = resp.status().as_u16();
    let ctype = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let mut raw: Vec<u8> = Vec::new();
    let mut sse = SseRead::default();
    let sse_body = ctype.starts_with("text/event-stream");
    let mut read = 0usize;
    loop {
        match resp.chunk().await {
            Ok(Some(bytes)) => {
                read += bytes.len();
                if read > MAX_ANSWER_BYTES {
                    seen.broken = Some(format!(
                        "the answer is over {} MiB",
                        MAX_ANSWER_BYTES / (1024 * 1024)
                    ));
                    return seen;
                }
                if sse_body {
                    // What a stream said is read as it arrives; only its size is kept.
                    sse.feed(&bytes, &mut seen);
                } else {
                    raw.extend_from_slice(&bytes);
                }
            }
            Ok(None) => break,
            Err(e) => {
                if sse_body {
                    // A stream cut mid-body: what arrived is what the client has.
                    return seen;
                }
                seen.broken = Some(format!("the body broke off: {}", transport_error(&e)));
                return seen;
            }
        }
    }
    if !(200..300).contains(&seen.status) {
        if ctype.contains("html") {
            seen.broken = Some(format!(
                "an HTML page, not a JSON error: {:?}",
                crate::core::clip::clip(&String::from_utf8_lossy(&raw), 60)
            ));
        }
        return seen;
    }
    if stream && sse_body {
        return seen;
    }
    match serde_json::from_slice::<Value>(&raw) {
        Ok(v) if v.is_object() => read_answer(&v, &mut seen),
        _ => {
            let what = if ctype.contains("html") {
                "an HTML page"
            } else {
                "not a JSON object"
            };
            seen.broken = Some(format!(
                "a {} answer that is {what}: {:?}",
                seen.status,
                crate::core::clip::clip(&String::from_utf8_lossy(&raw), 60)
            ));
        }
    }
    seen
}

fn transport_error(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg = format!("{msg}: {s}");
        src = s.source();
    }
    crate::core::clip::clip(&msg, 200).to_string()
}

fn note_model(seen: &mut Seen, v: &Value) {
    if let Some(m) = v.get("model").and_then(Value::as_str) {
        if seen.models.last().map(String::as_str) != Some(m) {
            seen.models.push(m.to_string());
        }
    }
}

/// A whole (non-streamed) answer: chat, a Responses object, embeddings or rerank.
fn read_answer(v: &Value, seen: &mut Seen) {
    note_model(seen, v);
    if v.get("object").and_then(Value::as_str) == Some("response") {
        seen.response_id = v.get("id").and_then(Value::as_str).map(str::to_string);
        if v.get("status").and_then(Value::as_str) == Some("failed") {
            seen.broken = Some("a response whose status is failed".into());
        }
        // The text of every message item: its text parts, else its refusal.
        for item in v
            .get("output")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for part in item
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                for f in ["text", "refusal"] {
                    if let Some(t) = part.get(f).and_then(Value::as_str) {
                        seen.text.push_str(t);
                    }
                }
            }
        }
        return;
    }
    if let Some(choices) = v.get("choices").and_then(Value::as_array) {
        let Some(first) = choices.first() else {
            seen.broken = Some("an answer with no choices".into());
            return;
        };
        let msg = first.get("message").unwrap_or(&Value::Null);
        // A refusal is an answer (fidelity.md): its text is the refusal; an empty
        // content with a `content_filter` finish is the provider's answer too.
        let text = |f: &str| msg.get(f).and_then(Value::as_str).filter(|t| !t.is_empty());
        seen.text = text("content")
            .or_else(|| text("refusal"))
            .unwrap_or_default()
            .to_string();
        if msg.is_null() {
            seen.broken = Some("a choice with no message".into());
        }
    } else if v.get("data").and_then(Value::as_array).is_some()
        || v.get("results").and_then(Value::as_array).is_some()
    {
        // Embeddings or rerank results.
    } else if v.get("error").is_some_and(|e| !e.is_null()) {
        seen.broken = Some("an error object in a 2xx".into());
    } else {
        seen.broken = Some("an answer with neither `choices`, `data` nor `results`".into());
    }
}

/// Reads SSE events as their bytes arrive: each complete line once, so a long stream
/// costs time in proportion to its length.
#[derive(Debug, Default)]
struct SseRead {
    /// Bytes of a line not ended yet.
    partial: Vec<u8>,
    /// The current event's `event:` name.
    event: String,
    finished: bool,
    done: bool,
    error: bool,
}

impl SseRead {
    /// One typed event of a Responses API stream: the lifecycle names the model and the
    /// id, deltas carry the text, and the last event (there is no `[DONE]`) ends it.
    fn responses_event(&mut self, kind: &str, v: &Value, seen: &mut Seen) {
        let response = v.get("response").unwrap_or(&Value::Null);
        match kind {
            "response.created" | "response.in_progress" => {
                note_model(seen, response);
                seen.response_id = response
                    .get("id")
                    .and_then(Value::as_str)
                    .map(str::to_string);
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(t) = v.get("delta").and_then(Value::as_str) {
                    seen.text.push_str(t);
                }
            }
            "response.completed" | "response.incomplete" => {
                note_model(seen, response);
                self.finished = true;
                self.done = true;
            }
            "response.failed" => self.error = true,
            _ => {}
        }
    }

    /// Reads the lines `bytes` completes into `seen`.
    fn feed(&mut self, bytes: &[u8], seen: &mut Seen) {
        self.partial.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(n) = self.partial[start..].iter().position(|b| *b == b'\n') {
            let line = String::from_utf8_lossy(&self.partial[start..start + n]).into_owned();
            start += n + 1;
            self.line(line.trim_end_matches('\r'), seen);
        }
        self.partial.drain(..start);
        seen.stream_error = self.error;
        seen.clean_end = self.finished && self.done && !self.error;
    }

    fn line(&mut self, line: &str, seen: &mut Seen) {
        if line.is_empty() {
            self.event.clear();
            return;
        }
        if let Some(name) = line.strip_prefix("event:") {
            self.event = name.trim().to_string();
            if self.event == "error" {
                self.error = true;
            }
            return;
        }
        let Some(data) = line.strip_prefix("data:") else {
            return;
        };
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return;
        };
        if v.get("error").is_some_and(|e| !e.is_null()) || self.event == "error" {
            self.error = true;
            return;
        }
        if let Some(kind) = v
            .get("type")
            .and_then(Value::as_str)
            .filter(|k| k.starts_with("response."))
        {
            self.responses_event(kind, &v, seen);
            return;
        }
        note_model(seen, &v);
        for c in v
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for field in ["/delta/content", "/delta/refusal"] {
                if let Some(t) = c.pointer(field).and_then(Value::as_str) {
                    seen.text.push_str(t);
                }
            }
            if c.get("finish_reason").is_some_and(|f| !f.is_null()) {
                self.finished = true;
            }
        }
    }
}

async fn reset_mock(client: &reqwest::Client, mock: SocketAddr) -> Result<(), String> {
    let url = format!("http://{mock}/reset");
    match client.post(&url).timeout(CONTROL_TIMEOUT).send().await {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(format!(
            "the mock at {mock} answered {} to POST /reset",
            r.status()
        )),
        Err(e) => Err(format!(
            "cannot reach the mock at {mock}: {}",
            transport_error(&e)
        )),
    }
}

async fn read_calls(client: &reqwest::Client, mock: SocketAddr) -> Result<Calls, String> {
    let url = format!("http://{mock}/calls");
    let resp = client
        .get(&url)
        .timeout(CONTROL_TIMEOUT)
        .send()
        .await
        .map_err(|e| format!("cannot reach the mock at {mock}: {}", transport_error(&e)))?;
    let v: Value = resp
        .json()
        .await
        .map_err(|e| format!("the mock's GET /calls is not JSON: {e}"))?;
    let mut calls = Calls::default();
    for (route, c) in v
        .get("routes")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let n = |f: &str| c.get(f).and_then(Value::as_u64).unwrap_or(0);
        calls.calls.insert(route.clone(), n("calls"));
        calls.answered.insert(route.clone(), n("answered"));
    }
    Ok(calls)
}

/// Whether the target answers HTTP at all: `GET /v1/models` (any status will do).
pub async fn reachable(
    client: &reqwest::Client,
    url: &str,
    token: Option<&Secret>,
    within: Duration,
) -> Result<u16, String> {
    let probe = format!("{}/v1/models", url.trim_end_matches('/'));
    let mut req = client.get(&probe).timeout(within);
    if let Some(t) = token {
        req = req.bearer_auth(t.expose());
    }
    match req.send().await {
        Ok(r) => Ok(r.status().as_u16()),
        Err(e) => Err(transport_error(&e)),
    }
}

/// The tally a closing line and the peers' table show.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tally {
    pub tried: usize,
    pub passed: usize,
    pub failed: usize,
    pub wrong: BTreeMap<&'static str, usize>,
    pub skipped: usize,
    pub skipped_by: BTreeMap<&'static str, usize>,
    pub not_observable_checks: usize,
    pub not_comparable_checks: usize,
}

impl Tally {
    pub fn of(runs: &[TargetRun]) -> Tally {
        let mut t = Tally::default();
        for r in runs {
            match r.verdict {
                Verdict::Pass => t.passed += 1,
                Verdict::Fail => t.failed += 1,
                Verdict::Skip => {
                    t.skipped += 1;
                    let kind = r.skip.map(SkipKind::as_str).unwrap_or("skipped");
                    *t.skipped_by.entry(kind).or_default() += 1;
                }
            }
            for w in r.wrongs() {
                *t.wrong.entry(w.as_str()).or_default() += 1;
            }
            t.not_observable_checks += r.count(CheckStatus::NotObservable);
            t.not_comparable_checks += r.count(CheckStatus::NotComparable);
        }
        t.tried = t.passed + t.failed;
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::runner::shaped_chat_request;

    fn scenario(text: &str) -> Scenario {
        Scenario::parse(std::path::Path::new("t.yaml"), text).expect("parses")
    }

    #[test]
    fn the_deadline_without_a_card_is_the_default_cards_budget() {
        // Guards the README's "its card's `max_elapsed_ms` (60 s by default)": a target
        // answering in 40 s was cut at 30 s as hung.
        let s = scenario("name: n\nchain:\n  - route: a/x\n    replies: [ { ok: \"hi\" } ]\nexpect: { outcome: success }\n");
        assert_eq!(deadline_ms(&s), 60_000);
        let s = scenario("name: n\npolicy: { max_elapsed_ms: 500000 }\nchain:\n  - route: a/x\n    replies: [ { ok: \"hi\" } ]\nexpect: { outcome: success }\n");
        assert_eq!(deadline_ms(&s), 120_000, "capped at twice the default");
    }

    #[test]
    fn real_wait_counts_gaps_waits_and_mock_delays() {
        let s = scenario(
            "name: t\nchain:\n  - route: openai/gpt-4o\n    replies:\n      - delay_ms: 300\n        then: { ok: \"OK\" }\nrequests:\n  - expect: { outcome: success, waits_ms: [1000] }\n  - after_ms: 2000\n    expect: { outcome: success }\n",
        );
        assert_eq!(real_wait_ms(&s), 3300);
    }

    #[test]
    fn padding_makes_the_estimate_the_declared_token_count() {
        let mut chat = shaped_chat_request(None);
        chat.token_estimate = Some(1000);
        pad_to_estimate(&mut chat);
        assert_eq!(chat.token_estimate, None);
        assert_eq!(chat.needs(false).prompt_tokens, 1000);
    }

    #[test]
    fn a_shed_may_be_a_429_or_a_503_and_a_bad_request_only_a_4xx() {
        assert_eq!(failure_classes(Outcome::Shed, None), &[4, 5]);
        assert_eq!(
            failure_classes(Outcome::Failed, Some(Reason::Request)),
            &[4]
        );
        assert_eq!(failure_classes(Outcome::Failed, Some(Reason::Auth)), &[5]);
    }

    #[test]
    fn a_stream_with_finish_and_done_is_clean_and_one_with_an_error_is_not() {
        let mut seen = Seen::default();
        let raw = b"data: {\"model\":\"m~s\",\"choices\":[{\"delta\":{\"content\":\"O\"}}]}\n\ndata: {\"model\":\"m~s\",\"choices\":[{\"delta\":{\"content\":\"K\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
        SseRead::default().feed(raw, &mut seen);
        assert!(seen.clean_end);
        assert_eq!(seen.text, "OK");
        assert_eq!(seen.models, vec!["m~s".to_string()]);
        let raw = b"data: {\"model\":\"m~s\",\"choices\":[{\"delta\":{\"content\":\"O\"}}]}\n\nevent: error\ndata: {\"error\":{\"message\":\"x\"}}\n\n";
        let mut seen = Seen::default();
        let mut sse = SseRead::default();
        // Fed in two pieces, split inside a line.
        sse.feed(&raw[..20], &mut seen);
        sse.feed(&raw[20..], &mut seen);
        assert_eq!(seen.text, "O");
        assert!(!seen.clean_end);
        assert!(seen.stream_error);
    }
}
