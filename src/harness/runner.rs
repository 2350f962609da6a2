//! Runs one scenario: fresh mocks on loopback, a fresh health store, a virtual clock at
//! the scenario's `now`, and the production `Router` pointed at the mocks. Sends each
//! request, then compares the report, health and upstream call counts with `expect`.

use super::compare::{compare, HealthView, Mismatch};
use super::mock::{MockRoute, MockServer, Outage};
use super::scenario::{Preset, RequestShape, RequestSpec, Scenario};
use crate::clock::{Clock, ManualClock, Stopwatch, UnixMs};
use crate::health::{Health, Transition};
use crate::policy::Policy;
use crate::request::{ChatRequest, EmbedRequest, Request, RerankRequest};
use crate::router::{CallOptions, RouteSpec, Router, Tier};
use crate::secret::Secret;
use crate::store::MemoryStore;
use crate::trace::Report;
use crate::vocab::{CallPath, Route};
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
    let mut req = scenario_chat_request();
    if let Some(s) = shape {
        req.token_estimate = s.prompt_tokens;
        req.max_tokens = s.max_tokens.or(req.max_tokens);
        req.json_schema = s.json_schema.clone();
    }
    req
}

/// What one request of a scenario did, and how it compared.
#[derive(Debug, Clone, Serialize)]
pub struct RequestRun {
    pub report: Report,
    pub health: BTreeMap<Route, HealthView>,
    pub upstream_calls: BTreeMap<Route, u64>,
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
    let routes = scenario
        .chain
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
        name: scenario.name.clone(),
        path: scenario.path,
        routes,
    }
}

/// The mock routes a scenario's chain describes.
/// `clock` and `start` place each route's `outage` in time: the scenario's virtual
/// clock in chaos, the wall clock for `poolctl mock`.
pub fn mock_routes(scenario: &Scenario, clock: &Arc<dyn Clock>, start: UnixMs) -> Vec<MockRoute> {
    scenario
        .chain
        .iter()
        .map(|e| MockRoute {
            route: e.route.clone(),
            wire: e.wire,
            path: scenario.path,
            replies: e.replies.clone(),
            outage: e.outage.as_ref().map(|o| Outage {
                until: crate::clock::plus_ms(start, o.until_ms),
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
                until: crate::clock::plus_ms(start, *ms),
                reason: "preset".into(),
            },
        };
        store.apply_now(route, Transition::toward(health));
    }
    let router = Router::with_seed(
        client.clone(),
        clock.clone(),
        store.clone(),
        seed_of(&scenario.name),
    );
    let policy = scenario.policy.clone().unwrap_or_default();

    for spec in scenario.request_specs() {
        clock.advance(spec.after_ms);
        let report = send(&router, &tier, scenario, &spec, &policy).await;
        let now = clock.now_ms();
        let health: BTreeMap<Route, HealthView> = scenario
            .chain
            .iter()
            .map(|e| {
                let h = store.get_now(&e.route);
                (e.route.clone(), HealthView::of(&h, now))
            })
            .collect();
        let upstream_calls: BTreeMap<Route, u64> = scenario
            .chain
            .iter()
            .map(|e| (e.route.clone(), mock.calls(&e.route)))
            .collect();
        let mismatches = compare(&spec.expect, &report, &health, &upstream_calls);
        run.requests.push(RequestRun {
            report,
            health,
            upstream_calls,
            mismatches,
        });
    }
    run.passed = run.error.is_none() && run.requests.iter().all(|r| r.mismatches.is_empty());
    run.wall_ms = sw.elapsed().as_secs_f64() * 1000.0;
    run
}

/// The embedding batch chaos sends on the embed path.
pub fn scenario_embed_request() -> EmbedRequest {
    EmbedRequest {
        inputs: vec!["alpha".into(), "beta".into(), "gamma".into()],
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
    }
}

async fn send(
    router: &Router,
    tier: &Tier,
    scenario: &Scenario,
    spec: &RequestSpec,
    policy: &Policy,
) -> Report {
    let shape = scenario.request.as_ref();
    let opts = CallOptions {
        workflow: shape.and_then(|s| s.workflow.as_deref()),
        session: spec.session.as_deref(),
        ..CallOptions::new(policy)
    };
    let chat = shaped_chat_request(shape);
    let req = match scenario.path {
        CallPath::Chat => Request::Chat(chat),
        CallPath::Stream => Request::Stream(chat),
        CallPath::Embed => Request::Embed(scenario_embed_request()),
        CallPath::Rerank => Request::Rerank(scenario_rerank_request()),
    };
    router.call(tier, &req, opts).await.report
}
