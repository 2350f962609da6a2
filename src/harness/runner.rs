//! Runs one scenario: fresh mocks on loopback, a fresh health store, a virtual clock at
//! the scenario's `now`, and the production `Router` pointed at the mocks. Sends each
//! request, then compares the report, health and upstream call counts with `expect`.

use super::compare::{bucket_levels, compare, BucketLevels, HealthView, Mismatch};
use super::mock::{MockRoute, MockServer, Outage};
use super::scenario::{ChainEntry, Preset, RequestShape, RequestSpec, Scenario};
use crate::admission::bucket::Limits;
use crate::admission::buckets::Buckets;
use crate::config::route::{Group, RouteSpec, Tier};
use crate::core::clock::{Clock, ManualClock, Stopwatch, UnixMs};
use crate::core::request::{ChatRequest, EmbedRequest, Request, RerankRequest};
use crate::core::secret::Secret;
use crate::core::trace::Report;
use crate::core::vocab::{CallPath, Route};
use crate::policy::card::Policy;
use crate::policy::health::{Health, Transition};
use crate::router::{CallOptions, Router};
use crate::store::MemoryStore;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The key every mock accepts; real keys never reach a scenario.
pub const MOCK_KEY: &str = "sk-poolctl-mock";

/// The prompt chaos sends on the chat path.
pub fn scenario_chat_request() -> ChatRequest {
    ChatRequest::user("Reply with the single word OK.", 16)
}

/// The chat request of a scenario: the default prompt, shaped by its `request:`.
pub fn shaped_chat_request(shape: Option<&RequestShape>) -> ChatRequest {
    let req = scenario_chat_request();
    match shape {
        // The shape was checked when the scenario loaded. A Responses scenario's shape
        // is no chat (its `input`, its own spelling of fields): its cap still counts.
        Some(s) => s.chat(req.clone()).unwrap_or_else(|_| {
            let mut req = req;
            if let Some(n) = s.cap() {
                req.max_tokens = Some(n);
            }
            req
        }),
        None => req,
    }
}

/// What one request of a scenario did, and how it compared.
#[derive(Debug, Clone, Serialize)]
pub struct RequestRun {
    pub report: Report,
    pub health: BTreeMap<Route, HealthView>,
    pub upstream_calls: BTreeMap<Route, u64>,
    /// Admission bucket levels after the request, rounded down.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub buckets: BucketLevels,
    pub mismatches: Vec<Mismatch>,
}

/// What a whole scenario did.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioRun {
    pub file: PathBuf,
    pub name: String,
    pub passed: bool,
    pub requests: Vec<RequestRun>,
    /// Real time the scenario took.
    pub wall_ms: f64,
    /// Set when the scenario could not be run at all (a mock could not bind, ...).
    pub error: Option<String>,
}

/// The chain as the router sees it, with base URLs pointing at `mock`.
pub fn tier_for(scenario: &Scenario, mock: &MockServer) -> Tier {
    tier_of(&scenario.name, &scenario.chain, scenario, mock)
}

/// The scenario's extra tiers (`tiers:`), by name, pointing at `mock`.
pub fn extra_tiers(scenario: &Scenario, mock: &MockServer) -> BTreeMap<String, Tier> {
    scenario
        .tiers
        .iter()
        .map(|(name, entries)| (name.clone(), tier_of(name, entries, scenario, mock)))
        .collect()
}

fn tier_of(name: &str, entries: &[ChainEntry], scenario: &Scenario, mock: &MockServer) -> Tier {
    let routes = entries
        .iter()
        .map(|entry| {
            let provider = entry.route.provider();
            let settings = entry.settings();
            let base_url = mock.base_url(provider, entry.wire);
            // A mock's loopback URL implies no dialect: only an explicit one, else the wire's.
            let endpoint = settings.endpoint(provider, base_url, Secret::new(MOCK_KEY), None);
            RouteSpec {
                route: entry.route.clone(),
                endpoint: Arc::new(endpoint),
                facts: entry.model.unwrap_or_default(),
                policy: settings.policy(),
            }
        })
        .collect();
    Tier {
        name: name.to_string(),
        path: scenario.path,
        routes,
        groups: groups_of(entries, &scenario.limits),
    }
}

/// The groups of a scenario chain: consecutive entries with the same `group:` name
/// (validated when the scenario loaded), weighted as a pool config's groups are
/// (`Group::weights_of`: `weight:` as written, else the scenario's rpm limits, else equal).
fn groups_of(entries: &[ChainEntry], limits: &BTreeMap<String, Limits>) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let mut i = 0;
    while i < entries.len() {
        let Some(name) = entries[i].group.as_deref() else {
            i += 1;
            continue;
        };
        let n = entries[i..]
            .iter()
            .take_while(|e| e.group.as_deref() == Some(name))
            .count();
        let members = &entries[i..i + n];
        let written: Option<Vec<f64>> = members.iter().map(|e| e.weight).collect();
        let routes: Vec<&Route> = members.iter().map(|e| &e.route).collect();
        groups.push(Group {
            start: i,
            weights: Group::weights_of(written.as_deref(), &routes, limits),
            strategy: members.iter().find_map(|e| e.strategy).unwrap_or_default(),
        });
        i += n;
    }
    groups
}

/// The mock routes a scenario's chain describes.
/// `clock` and `start` place each route's `outage` in time: the scenario's virtual
/// clock in chaos, the wall clock for `poolctl mock`.
pub fn mock_routes(scenario: &Scenario, clock: &Arc<dyn Clock>, start: UnixMs) -> Vec<MockRoute> {
    scenario
        .entries()
        .map(|(_, e)| MockRoute {
            route: e.route.clone(),
            wire: e.wire,
            path: scenario.path,
            replies: e.replies.clone(),
            record: e.received.is_some(),
            outage: e.outage.as_ref().map(|o| Outage {
                until: crate::core::clock::plus_ms(start, o.until_ms),
                reply: o.reply.clone(),
                clock: clock.clone(),
            }),
        })
        .collect()
}

/// A stable seed per scenario, so backoff jitter repeats run to run.
fn seed_of(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

pub async fn run_scenario(scenario: &Scenario, client: &reqwest::Client) -> ScenarioRun {
    let sw = Stopwatch::start();
    let mut run = ScenarioRun {
        file: scenario.file.clone(),
        name: scenario.name.clone(),
        passed: false,
        requests: Vec::new(),
        wall_ms: 0.0,
        error: None,
    };
    let start = scenario.start_ms();
    let clock = Arc::new(ManualClock::new(start));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let routes = mock_routes(scenario, &dyn_clock, start);
    let mock = match MockServer::start(([127, 0, 0, 1], 0).into(), routes).await {
        Ok(m) => m,
        Err(e) => {
            run.error = Some(format!("cannot start the mock providers: {e}"));
            return run;
        }
    };
    let tier = tier_for(scenario, &mock);
    let store = Arc::new(MemoryStore::new());
    for (route, preset) in &scenario.state {
        let health = match preset {
            Preset::Ready => Health::Ready,
            Preset::Retired => Health::Retired {
                reason: "preset".into(),
            },
            Preset::Cooling(ms) => Health::Cooling {
                until: crate::core::clock::plus_ms(start, *ms),
                reason: "preset".into(),
            },
        };
        store.apply_now(route, Transition::toward(health));
    }
    // Admission buckets start full at the scenario's `now` and refill on its clock.
    let buckets = Arc::new(Buckets::new(&scenario.admission(), start));
    let router = Router::with_seed(
        client.clone(),
        clock.clone(),
        store.clone(),
        seed_of(&scenario.name),
    )
    .with_buckets(buckets.clone());
    let policy = scenario.policy.clone().unwrap_or_default();
    let tiers = extra_tiers(scenario, &mock);
    let degrade = policy.degrade_tier.as_ref().and_then(|t| tiers.get(t));
    let conversations = crate::store::conversations::Conversations::memory(Default::default());
    let call = Call {
        router: &router,
        tier: &tier,
        degrade,
        scenario,
        policy: &policy,
        conversations: &conversations,
        last_response: std::sync::Mutex::new(None),
    };
    // What the scenario can see after a request: health, calls, bucket levels.
    let observe = || {
        let now = clock.now_ms();
        let health: BTreeMap<Route, HealthView> = scenario
            .entries()
            .map(|(_, e)| {
                (
                    e.route.clone(),
                    HealthView::of(&store.get_now(&e.route), now),
                )
            })
            .collect();
        let calls: BTreeMap<Route, u64> = scenario
            .entries()
            .map(|(_, e)| (e.route.clone(), mock.calls(&e.route)))
            .collect();
        (health, calls, bucket_levels(&buckets, now))
    };

    for (entry, spec) in scenario.request_specs().iter().enumerate() {
        clock.advance(spec.after_ms);
        let copies = spec.copies() as usize;
        let mut runs: Vec<RequestRun> = Vec::with_capacity(copies);
        if spec.concurrent {
            // Every copy is admitted or refused before any is settled: each reaches its
            // upstream call (or its shed) on the first poll, before any answer is read.
            let reports =
                futures_util::future::join_all((0..copies).map(|_| call.send(spec))).await;
            let (health, upstream_calls, levels) = observe();
            for report in reports {
                runs.push(RequestRun {
                    report,
                    health: health.clone(),
                    upstream_calls: upstream_calls.clone(),
                    buckets: levels.clone(),
                    mismatches: Vec::new(),
                });
            }
        } else {
            for _ in 0..copies {
                let report = call.send(spec).await;
                let (health, upstream_calls, buckets) = observe();
                runs.push(RequestRun {
                    report,
                    health,
                    upstream_calls,
                    buckets,
                    mismatches: Vec::new(),
                });
            }
        }
        // A mismatch names the `requests:` entry it belongs to (not the copy's place
        // among all copies, which `repeat` shifts); a top-level `expect` needs no name.
        let at = scenario.requests.as_ref().map(|_| entry);
        judge(spec, at, &mut runs);
        run.requests.extend(runs);
    }
    // `received:` is judged once every request has been sent, against every body the
    // route's mock got; a difference is reported on the last request.
    if let Some(last) = run.requests.last_mut() {
        for (_, e) in scenario.entries() {
            let Some(want) = &e.received else { continue };
            let bodies = mock.received(&e.route);
            let field = |f: &str| format!("chain[{}].received.{f}", e.route);
            if bodies.is_empty() {
                last.mismatches.push(Mismatch {
                    field: field("calls"),
                    expected: "at least one request".into(),
                    got: "none".into(),
                });
            }
            for (i, body) in bodies.iter().enumerate() {
                for (f, expected, got) in want.check(body) {
                    let copy = if bodies.len() > 1 {
                        format!(" (request {} of {})", i + 1, bodies.len())
                    } else {
                        String::new()
                    };
                    last.mismatches.push(Mismatch {
                        field: format!("{}{copy}", field(&f)),
                        expected,
                        got,
                    });
                }
            }
        }
    }
    run.passed = run.error.is_none() && run.requests.iter().all(|r| r.mismatches.is_empty());
    run.wall_ms = sw.elapsed().as_secs_f64() * 1000.0;
    run
}

/// The chat request one entry of `requests:` sends: the scenario's shape, with the
/// entry's declared input and output tokens (`chaos`, and `chaos --target`).
pub fn request_chat(scenario: &Scenario, spec: &RequestSpec) -> ChatRequest {
    let shape = scenario.request.as_ref();
    let mut chat = shaped_chat_request(shape);
    if !scenario.limits.is_empty() {
        // Under admission a request declares no maximum output unless it says so
        // (scenario-format v2): the model's max_output_tokens, else 4 096, is
        // reserved. v1 scenarios keep the default prompt's small maximum.
        chat.max_tokens = shape.and_then(RequestShape::cap);
    }
    if let Some(n) = spec.input_tokens {
        chat.token_estimate = Some(n);
    }
    if let Some(n) = spec.max_output_tokens {
        chat.max_tokens = Some(n);
    }
    chat
}

/// The Responses body one entry of `requests:` sends to `model` (`chaos`, and `chaos
/// --target`), continuing the previous request's response when it says `continue`:
/// `last` holds that response's id, taken here. When that request kept none, the id
/// sent is one never kept, as a client continuing a turn that failed would send, and
/// the request fails unrouted.
pub fn request_responses(
    scenario: &Scenario,
    spec: &RequestSpec,
    model: &str,
    last: &std::sync::Mutex<Option<String>>,
) -> serde_json::Value {
    let previous = spec.continues.then(|| {
        last.lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_else(|| "resp_never_kept".to_string())
    });
    super::scenario::responses_body(
        model,
        scenario.request.as_ref(),
        spec,
        scenario.path == CallPath::Stream,
        request_chat(scenario, spec).max_tokens,
        previous.as_deref(),
    )
}

/// The embedding batch chaos sends on the embed path.
pub fn scenario_embed_request() -> EmbedRequest {
    EmbedRequest {
        inputs: vec!["alpha".into(), "beta".into(), "gamma".into()],
        dimensions: None,
        original: None,
        ..Default::default()
    }
}

/// The candidates chaos reranks on the rerank path.
pub fn scenario_rerank_request() -> RerankRequest {
    RerankRequest {
        query: "Which document answers the question?".into(),
        documents: vec![
            "document zero".into(),
            "document one".into(),
            "document two".into(),
        ],
        top_n: 3,
        ..Default::default()
    }
}

/// Compares each copy of a request entry with its `expect`, or the copies' outcomes
/// with `expect_counts` (the difference is reported on the last copy). Each mismatch's
/// field is prefixed with `requests[entry].` when the entry is one of `requests:`.
fn judge(spec: &RequestSpec, entry: Option<usize>, runs: &mut [RequestRun]) {
    if let Some(expect) = &spec.expect {
        let copies = runs.len();
        for (i, r) in runs.iter_mut().enumerate() {
            r.mismatches = compare(expect, &r.report, &r.health, &r.upstream_calls, &r.buckets);
            if copies > 1 {
                for m in &mut r.mismatches {
                    m.field = format!("copy {} of {copies}: {}", i + 1, m.field);
                }
            }
        }
    }
    if let (Some(want), Some(last)) = (&spec.expect_counts, runs.last()) {
        let mut got: BTreeMap<crate::core::vocab::Outcome, u64> = BTreeMap::new();
        for r in runs.iter() {
            *got.entry(r.report.outcome).or_default() += 1;
        }
        let show = |m: &BTreeMap<crate::core::vocab::Outcome, u64>| {
            m.iter()
                .filter(|(_, n)| **n > 0)
                .map(|(o, n)| format!("{o}: {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (want_s, got_s) = (show(want), show(&got));
        if want_s != got_s {
            let _ = last;
            let last = runs.last_mut().expect("checked above");
            last.mismatches.push(Mismatch {
                field: "expect_counts".into(),
                expected: want_s,
                got: got_s,
            });
        }
    }
    if let (Some(within), Some(last)) = (&spec.upstream_calls_within, runs.last_mut()) {
        for (route, [lo, hi]) in within {
            let got = last.upstream_calls.get(route).copied().unwrap_or(0);
            if !(*lo..=*hi).contains(&got) {
                last.mismatches.push(Mismatch {
                    field: format!("upstream_calls_within.{route}"),
                    expected: format!("{lo} to {hi}"),
                    got: got.to_string(),
                });
            }
        }
    }
    if let Some(i) = entry {
        for m in runs.iter_mut().flat_map(|r| r.mismatches.iter_mut()) {
            m.field = format!("requests[{i}].{}", m.field);
        }
    }
}

/// What every request of one scenario is sent with.
struct Call<'a> {
    router: &'a Router,
    tier: &'a Tier,
    degrade: Option<&'a Tier>,
    scenario: &'a Scenario,
    policy: &'a Policy,
    /// `ingress: responses`: the conversations the scenario's responses keep, and the
    /// id of the previous request's response when it was kept (what `continue: true`
    /// continues).
    conversations: &'a crate::store::conversations::Conversations,
    last_response: std::sync::Mutex<Option<String>>,
}

impl Call<'_> {
    async fn send(&self, spec: &RequestSpec) -> Report {
        let scenario = self.scenario;
        let shape = scenario.request.as_ref();
        let opts = CallOptions {
            workflow: shape.and_then(|s| s.workflow.as_deref()),
            session: spec.session.as_deref(),
            priority: spec.priority.unwrap_or_default(),
            degrade_tier: self.degrade,
            ..CallOptions::new(self.policy)
        };
        if scenario.ingress == super::scenario::ingress::Ingress::Responses {
            return self.send_responses(spec, opts).await;
        }
        let chat = request_chat(scenario, spec);
        let req = match scenario.path {
            CallPath::Chat => Request::Chat(chat),
            CallPath::Stream => Request::Stream(chat),
            CallPath::Embed => Request::Embed(scenario_embed_request()),
            CallPath::Rerank => Request::Rerank(scenario_rerank_request()),
        };
        self.router.call(self.tier, &req, opts).await.report
    }

    /// One request of the Responses API: its body read as the gateway reads a client's,
    /// joined to the conversation it continues, and the answer's conversation kept.
    async fn send_responses(&self, spec: &RequestSpec, opts: CallOptions<'_>) -> Report {
        use crate::wire::responses::output;
        let scenario = self.scenario;
        let shape = scenario.request.as_ref();
        let stream = scenario.path == CallPath::Stream;
        let body = request_responses(scenario, spec, &scenario.name, &self.last_response);
        let body = bytes::Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
        let now = self.router.clock().now_ms();
        let begun = match crate::router::conversation::begin(self.conversations, body, now).await {
            Ok(b) => b,
            Err(e) => return refused(scenario.path, e.to_string()),
        };
        let mut chat = begun.request;
        if let Some(n) = spec.input_tokens.or(shape.and_then(|s| s.prompt_tokens)) {
            chat.token_estimate = Some(n);
        }
        let req = if stream {
            Request::Stream(chat)
        } else {
            Request::Chat(chat)
        };
        let called = self.router.call(self.tier, &req, opts).await;
        *self.last_response.lock().unwrap_or_else(|p| p.into_inner()) = None;
        if let (Some(a), Some(served)) = (&called.answer, &called.report.served_by) {
            let id = output::new_id("resp");
            // A same-wire answer's own items; else the answer written as items.
            let same_wire = a
                .raw
                .as_ref()
                .filter(|r| r.wire == crate::core::vocab::Wire::Responses)
                .and_then(|r| serde_json::from_slice::<serde_json::Value>(&r.bytes).ok())
                .and_then(|v| v.get("output").and_then(|o| o.as_array()).cloned());
            let finish = a
                .finish_reason
                .clone()
                .unwrap_or(crate::core::answer::FinishReason::Stop);
            let items = same_wire.unwrap_or_else(|| {
                output::output_items(&output::Answered {
                    text: &a.text,
                    refusal: a.refusal.as_deref(),
                    reasoning: a.reasoning.as_deref(),
                    tool_calls: &a.tool_calls,
                    finish: &finish,
                })
            });
            if begun.body.store {
                let kept = crate::router::conversation::stored(
                    &id,
                    &begun.history,
                    &begun.origins,
                    served,
                    items,
                    serde_json::json!({ "id": id }),
                );
                if self.conversations.put(&kept, now).await.is_ok() {
                    *self.last_response.lock().unwrap_or_else(|p| p.into_inner()) = Some(id);
                }
            }
        }
        called.report
    }
}

/// A request that never reached the router (a `continue` with nothing to continue):
/// failed, for `why`, with no attempt.
fn refused(path: CallPath, why: String) -> Report {
    Report {
        path,
        outcome: crate::core::vocab::Outcome::Failed,
        reason: Some(crate::core::vocab::Reason::Request),
        served_by: None,
        text: None,
        attempts: Vec::new(),
        skipped: Vec::new(),
        waits_ms: Vec::new(),
        queued_ms: 0,
        elapsed_ms: 0,
        notes: vec![why],
    }
}
