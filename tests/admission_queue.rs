//! The local admission queue with the production router, real loopback mocks and the
//! chaos harness's virtual clock: what a scenario file cannot say, because its
//! concurrent copies share one priority.

use poolctl::admission::buckets::Buckets;
use poolctl::core::clock::{Clock, ManualClock};
use poolctl::core::request::Request;
use poolctl::core::vocab::Outcome;
use poolctl::core::vocab::Priority;
use poolctl::harness::mock::MockServer;
use poolctl::harness::runner::{mock_routes, scenario_chat_request, tier_for};
use poolctl::harness::scenario::Scenario;
use poolctl::policy::card::Policy;
use poolctl::router::{CallOptions, Router};
use poolctl::store::MemoryStore;
use std::path::Path;
use std::sync::Arc;

const ONE_ROUTE: &str = r#"
name: queue-order
chain:
  - route: a/one
    replies: [ { ok: "OK" } ]
limits:
  a/one: { rpm: 6 }
headroom: 1.0
interactive_floor: 0.0
expect: { outcome: success }
"#;

/// The scenario's mock on loopback, its tier, and a router with its buckets on a
/// virtual clock at the scenario's `now`.
async fn setup() -> (
    MockServer,
    poolctl::config::route::Tier,
    Router,
    Arc<ManualClock>,
    i64,
) {
    let scenario = Scenario::parse(Path::new("queue-order.yaml"), ONE_ROUTE).unwrap();
    let start = scenario.start_ms();
    let clock = Arc::new(ManualClock::new(start));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        mock_routes(&scenario, &dyn_clock, start),
    )
    .await
    .unwrap();
    let tier = tier_for(&scenario, &mock);
    let router = Router::with_seed(
        poolctl::wire::http_client(),
        clock.clone(),
        Arc::new(MemoryStore::new()),
        1,
    )
    .with_buckets(Arc::new(Buckets::new(&scenario.admission(), start)));
    (mock, tier, router, clock, start)
}

#[tokio::test]
async fn an_interactive_waiter_is_served_before_an_earlier_background_one() {
    let (_mock, tier, router, clock, start) = setup().await;
    let policy = Policy {
        max_queue_ms: 60_000,
        ..Policy::default()
    };
    let req = Request::Chat(scenario_chat_request());
    let send = |priority| {
        let opts = CallOptions {
            priority,
            ..CallOptions::new(&policy)
        };
        router.call(&tier, &req, opts)
    };
    // Six requests empty the bucket (one request refills every 10 000 ms).
    for _ in 0..6 {
        assert_eq!(
            send(Priority::Interactive).await.report.outcome,
            Outcome::Success
        );
    }
    // A background request queues first, an interactive one after it: the interactive
    // one is admitted at the first refill, the background one at the second.
    let (bg, int) = tokio::join!(send(Priority::Background), send(Priority::Interactive));
    assert_eq!(int.report.outcome, Outcome::Success);
    assert_eq!(bg.report.outcome, Outcome::Success);
    assert_eq!(int.report.queued_ms, 10_000, "interactive goes first");
    assert_eq!(bg.report.queued_ms, 20_000, "background waits its turn");
    assert_eq!(clock.now_ms() - start, 20_000);
    assert_eq!(
        router.buckets().sheds().values().sum::<u64>(),
        0,
        "nothing was shed"
    );
}

#[tokio::test]
async fn a_shed_is_counted_per_priority_and_route() {
    let (mock, tier, router, _clock, _start) = setup().await;
    let policy = Policy::default();
    let req = Request::Chat(scenario_chat_request());
    for i in 0..8 {
        let priority = if i % 2 == 0 {
            Priority::Interactive
        } else {
            Priority::Speculative
        };
        let opts = CallOptions {
            priority,
            ..CallOptions::new(&policy)
        };
        router.call(&tier, &req, opts).await;
    }
    let sheds = router.buckets().sheds();
    let route = poolctl::core::vocab::Route::parse("a/one").unwrap();
    // 6 admitted (i = 0..5), then i = 6 (interactive) and i = 7 (speculative) shed.
    assert_eq!(sheds.get(&(Priority::Interactive, route.clone())), Some(&1));
    assert_eq!(sheds.get(&(Priority::Speculative, route)), Some(&1));
    assert_eq!(
        mock.calls(&poolctl::core::vocab::Route::parse("a/one").unwrap()),
        6
    );
}
