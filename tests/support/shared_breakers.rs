//! Shared by the store tests: a chain whose primary fails and whose breaker opens after
//! two failures, and the check that several handles on one store share that breaker.

use poolctl::classify::dialect::Dialect;
use poolctl::config::route::RoutePolicy;
use poolctl::config::route::{RouteSpec, Tier};
use poolctl::core::clock::ManualClock;
use poolctl::core::request::{ChatRequest, Request};
use poolctl::core::secret::Secret;
use poolctl::core::trace::SkipWhy;
use poolctl::core::vocab::{Class, Outcome, Route, Wire};
use poolctl::policy::breaker::BreakerConfig;
use poolctl::policy::card::Policy;
use poolctl::router::{CallOptions, Router};
use poolctl::store::HealthStore;
use poolctl::wire::Endpoint;
use serde_json::json;
use std::sync::Arc;
use wiremock::matchers::{body_partial_json, method};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn spec(server: &MockServer, route: &str, breaker: Option<BreakerConfig>) -> RouteSpec {
    let route = Route::parse(route).unwrap();
    RouteSpec {
        endpoint: Arc::new(Endpoint {
            provider: route.provider().to_string(),
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
        route,
        facts: Default::default(),
        policy: RoutePolicy {
            breaker,
            ..Default::default()
        },
    }
}

/// `a/bad` answers 500 (its breaker opens after 2 consecutive failures, for 60 s);
/// `b/good` answers 200.
async fn chain() -> (MockServer, Tier) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"model": "bad"})))
        .respond_with(
            ResponseTemplate::new(500)
                .set_body_json(json!({"error": {"message": "boom", "type": "server_error"}})),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({"model": "good"})))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "c1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"}, "finish_reason": "stop"}]
        })))
        .mount(&server)
        .await;
    let breaker = BreakerConfig {
        consecutive_failures: 2,
        open_ms: 60_000,
        ..BreakerConfig::default()
    };
    let tier = Tier {
        groups: Vec::new(),
        name: "t".into(),
        path: poolctl::core::vocab::CallPath::Chat,
        routes: vec![
            spec(&server, "a/bad", Some(breaker)),
            spec(&server, "b/good", None),
        ],
    };
    (server, tier)
}

/// One request through a router on `store` at virtual instant `now`.
async fn one(store: Arc<dyn HealthStore>, tier: &Tier, now: i64) -> poolctl::core::trace::Report {
    let router = Router::new(
        poolctl::wire::http_client(),
        Arc::new(ManualClock::new(now)),
        store,
    );
    // No same-route retry: each request fails on `a/bad` exactly once.
    let policy = Policy {
        max_retries_per_route: 0,
        ..Policy::default()
    };
    let req = Request::Chat(ChatRequest::user("hi", 8));
    router
        .call(tier, &req, CallOptions::new(&policy))
        .await
        .report
}

/// Three stores on one shared state (three processes). Transient cooling is 5 s, so the
/// calls are spaced by 6 s: only the breaker can keep `a/bad` out of the third.
pub async fn a_breaker_opened_through_two_processes_blocks_the_third(
    stores: [Arc<dyn HealthStore>; 3],
) {
    let (_server, tier) = chain().await;
    let [one_store, two_store, three_store] = stores;
    let first = one(one_store, &tier, 0).await;
    assert_eq!(first.attempts[0].class, Class::ServerError);
    assert_eq!(first.attempts.len(), 2, "{:?}", first.attempts);
    assert_eq!(
        first.attempts[0].breaker_open_until, None,
        "one failure of two"
    );
    let second = one(two_store, &tier, 6_000).await;
    assert_eq!(
        second.attempts[0].breaker_open_until,
        Some(66_000),
        "the second failure, seen through another handle, opened it: {:?}",
        second.attempts
    );
    let third = one(three_store, &tier, 12_000).await;
    assert_eq!(third.outcome, Outcome::Success);
    assert_eq!(third.attempts.len(), 1, "{:?}", third.attempts);
    assert_eq!(third.attempts[0].route.as_str(), "b/good");
    assert_eq!(third.skipped[0].why, SkipWhy::Open, "{:?}", third.skipped);
}
