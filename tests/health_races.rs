//! Health under concurrency: a transition sees the state it replaces. A request that
//! will succeed is in flight on a route when an operator (or another request) retires
//! it: when the success lands, the route stays retired — on the in-memory store and on
//! the shared SQLite file and the shared Redis alike.

use poolctl::classify::dialect::Dialect;
use poolctl::config::route::{RouteSpec, Tier};
use poolctl::core::clock::ManualClock;
use poolctl::core::request::{ChatRequest, Request};
use poolctl::core::secret::Secret;
use poolctl::core::vocab::{Outcome, Route, Wire};
use poolctl::policy::card::Policy;
use poolctl::policy::health::{Health, Transition};
use poolctl::router::{CallOptions, Router};
use poolctl::store::{HealthStore, MemoryStore, SqliteStore};
use poolctl::wire::Endpoint;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Respond, ResponseTemplate};

/// Answers 200 after a delay, and says when the request arrived.
struct Signal {
    arrived: Mutex<Option<oneshot::Sender<()>>>,
}

impl Respond for Signal {
    fn respond(&self, _: &wiremock::Request) -> ResponseTemplate {
        if let Some(tx) = self.arrived.lock().unwrap().take() {
            let _ = tx.send(());
        }
        ResponseTemplate::new(200)
            .set_body_json(json!({
                "id": "c1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"}, "finish_reason": "stop"}]
            }))
            // Real time, small: the retirement below lands well inside it.
            .set_delay(Duration::from_millis(300))
    }
}

async fn retire_while_in_flight(store: Arc<dyn HealthStore>) {
    let server = MockServer::start().await;
    let (tx, arrived) = oneshot::channel();
    Mock::given(method("POST"))
        .respond_with(Signal {
            arrived: Mutex::new(Some(tx)),
        })
        .expect(1)
        .mount(&server)
        .await;
    let route = Route::parse("a/m").unwrap();
    let tier = Tier {
        groups: Vec::new(),
        name: "t".into(),
        path: poolctl::core::vocab::CallPath::Chat,
        routes: vec![RouteSpec {
            route: route.clone(),
            endpoint: Arc::new(Endpoint {
                provider: "a".into(),
                wire: Wire::OpenAi,
                dialect: Dialect::of_wire(Wire::OpenAi),
                base_url: server.uri(),
                api_key: Secret::new("k"),
                timeout_ms: 5_000,
                first_token_timeout_ms: 5_000,
                stream_idle_ms: 5_000,
                stream_max_ms: poolctl::core::limits::DEFAULT_STREAM_MAX_MS,
                max_stream_bytes: poolctl::core::limits::DEFAULT_MAX_STREAM_BYTES,
                max_event_bytes: poolctl::core::limits::DEFAULT_MAX_EVENT_BYTES,
                drop_params: false,
            }),
            facts: Default::default(),
            policy: Default::default(),
        }],
    };
    let router = Router::new(
        poolctl::wire::http_client(),
        Arc::new(ManualClock::new(0)),
        store.clone(),
    );
    let policy = Policy::default();
    let req = Request::Chat(ChatRequest::user("hi", 8));
    let call = router.call(&tier, &req, CallOptions::new(&policy));
    let retire = async {
        arrived.await.expect("the request reached the mock");
        let t = Transition::Retire {
            reason: "operator".into(),
        };
        store.apply(&route, t).await.unwrap();
    };
    let (called, ()) = tokio::join!(call, retire);
    assert_eq!(called.report.outcome, Outcome::Success);
    assert_eq!(
        store.get(&route).await.unwrap(),
        Health::Retired {
            reason: "operator".into()
        },
        "the success in flight un-retired the route"
    );
    // Nor did the attempt record claim a change it did not make.
    assert!(called.report.attempts[0].health.is_none());
}

#[tokio::test]
async fn a_success_in_flight_does_not_unretire_a_route_in_memory() {
    retire_while_in_flight(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn a_success_in_flight_does_not_unretire_a_route_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("state.db")).unwrap();
    retire_while_in_flight(Arc::new(store)).await;
}

#[tokio::test]
async fn a_shorter_cooling_never_cuts_a_longer_one_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("state.db")).unwrap();
    let r = Route::parse("a/m").unwrap();
    let cool = |until| Transition::Cool {
        until,
        reason: "rate_limited".into(),
    };
    store.apply(&r, cool(60_000)).await.unwrap();
    let (_, after) = store.apply(&r, cool(5_000)).await.unwrap();
    assert_eq!(after.until(), Some(60_000));
}

#[tokio::test]
async fn a_success_in_flight_does_not_unretire_a_route_in_redis() {
    let server = poolctl::harness::redis_server::RedisServer::must_start();
    let store =
        poolctl::store::RedisStore::open(&server.url(), Duration::from_millis(500)).unwrap();
    retire_while_in_flight(Arc::new(store)).await;
}
