//! The four paths against real loopback mocks with the production router: streams hand
//! text over as it arrives and never splice; a stall ends on its deadline; embedding
//! batches queue and come back; rerank degrades to the recall order.

use poolctl::config::route::Tier;
use poolctl::core::answer::StreamEvent;
use poolctl::core::clock::{Clock, ManualClock, Stopwatch};
use poolctl::core::request::{EmbedRequest, Request};
use poolctl::core::trace::Report;
use poolctl::core::vocab::{Action, Class, Outcome, Route};
use poolctl::harness::mock::MockServer;
use poolctl::harness::runner::{
    mock_routes, scenario_chat_request, scenario_rerank_request, tier_for,
};
use poolctl::harness::scenario::Scenario;
use poolctl::policy::card::Policy;
use poolctl::router::embed_queue::{EmbedQueue, Offered};
use poolctl::router::{CallOptions, Called, Router};
use poolctl::store::MemoryStore;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct Rig {
    mock: MockServer,
    tier: Tier,
    router: Router,
    clock: Arc<ManualClock>,
}

/// Streams the scenario prompt down the rig's tier, each event to `sink`.
async fn stream(
    rig: &Rig,
    policy: &Policy,
    sink: &(dyn Fn(StreamEvent<'_>) + Send + Sync),
) -> Report {
    let opts = CallOptions {
        on_event: Some(sink),
        ..CallOptions::new(policy)
    };
    let req = Request::Stream(scenario_chat_request());
    rig.router.call(&rig.tier, &req, opts).await.report
}

/// A chain from scenario YAML (only `chain` matters), served by real mocks.
async fn rig(yaml: &str) -> Rig {
    let scenario = Scenario::parse(Path::new("inline.yaml"), yaml).expect("valid scenario");
    let clock = Arc::new(ManualClock::new(scenario.start_ms()));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let routes = mock_routes(&scenario, &dyn_clock, scenario.start_ms());
    let mock = MockServer::start(([127, 0, 0, 1], 0).into(), routes)
        .await
        .unwrap();
    let tier = tier_for(&scenario, &mock);
    let router = Router::new(
        poolctl::wire::http_client(),
        clock.clone(),
        Arc::new(MemoryStore::new()),
    );
    Rig {
        mock,
        tier,
        router,
        clock,
    }
}

fn route(s: &str) -> Route {
    Route::parse(s).unwrap()
}

#[tokio::test]
async fn an_interrupted_stream_delivers_exactly_its_prefix_and_never_splices() {
    let rig = rig(r#"
name: t
path: stream
chain:
  - route: a/primary
    replies: [ { stream: ["The answer ", "is 4"], end: reset } ]
  - route: b/backup
    replies: [ { ok: "A completely different answer" } ]
expect: { outcome: interrupted }
"#)
    .await;
    let got = Mutex::new(String::new());
    let sink = |ev: StreamEvent<'_>| {
        if let StreamEvent::Text(t) = ev {
            got.lock().unwrap().push_str(t)
        }
    };
    let policy = Policy::default();
    let report = stream(&rig, &policy, &sink).await;
    assert_eq!(report.outcome, Outcome::Interrupted);
    assert_eq!(*got.lock().unwrap(), "The answer is 4");
    assert_eq!(report.text.as_deref(), Some("The answer is 4"));
    assert_eq!(report.attempts.len(), 1);
    assert_eq!(
        (report.attempts[0].class, report.attempts[0].action),
        (Class::StreamInterrupted, Action::Interrupt)
    );
    assert_eq!(
        rig.mock.calls(&route("b/backup")),
        0,
        "a second route was called"
    );
}

#[tokio::test]
async fn deltas_reach_the_caller_as_they_arrive() {
    let rig = rig(r#"
name: t
path: stream
chain:
  - route: a/slow
    replies: [ { stream: ["one ", "two ", "three"], gap_ms: 60, end: done } ]
expect: { outcome: success }
"#)
    .await;
    let sw = Stopwatch::start();
    let arrivals = Mutex::new(Vec::new());
    let sink = |ev: StreamEvent<'_>| {
        if let StreamEvent::Text(t) = ev {
            arrivals.lock().unwrap().push((t.to_string(), sw.elapsed()))
        }
    };
    let policy = Policy::default();
    let report = stream(&rig, &policy, &sink).await;
    assert_eq!(report.outcome, Outcome::Success);
    let arrivals = arrivals.into_inner().unwrap();
    assert_eq!(arrivals.len(), 3);
    // The first piece arrived a whole gap (or more) before the last: nothing was buffered.
    assert!(
        arrivals[2].1 >= arrivals[0].1 + Duration::from_millis(100),
        "{arrivals:?}"
    );
}

#[tokio::test]
async fn a_stalled_stream_ends_within_its_idle_deadline_plus_100ms() {
    let rig = rig(r#"
name: t
path: stream
chain:
  - route: a/stall
    stream_idle_ms: 150
    replies: [ { stream: ["partial"], end: stall } ]
expect: { outcome: interrupted }
"#)
    .await;
    let policy = Policy::default();
    let sw = Stopwatch::start();
    let report = stream(&rig, &policy, &|_| {}).await;
    let took = sw.elapsed();
    assert_eq!(report.outcome, Outcome::Interrupted);
    assert_eq!(report.text.as_deref(), Some("partial"));
    assert!(
        took >= Duration::from_millis(150),
        "ended before its deadline: {took:?}"
    );
    assert!(took <= Duration::from_millis(250), "ended late: {took:?}");
}

#[tokio::test]
async fn a_silent_stream_ends_within_its_first_token_deadline_plus_100ms() {
    let rig = rig(r#"
name: t
path: stream
chain:
  - route: a/silent
    first_token_timeout_ms: 150
    replies: [ { stream: [], end: stall } ]
expect: { outcome: failed }
"#)
    .await;
    let policy = Policy::default();
    let sw = Stopwatch::start();
    let report = stream(&rig, &policy, &|_| {}).await;
    let took = sw.elapsed();
    assert_eq!(report.attempts[0].class, Class::Timeout);
    assert_eq!(report.outcome, Outcome::Failed);
    assert!(took <= Duration::from_millis(250), "ended late: {took:?}");
}

#[tokio::test]
async fn a_queued_embedding_batch_is_reoffered_once_a_route_is_ready() {
    let rig = rig(r#"
name: t
path: embed
chain:
  - route: a/embedder
    replies:
      - { status: 429, headers: { retry-after: "30" } }
      - { ok: "vectors" }
expect: { outcome: queued }
"#)
    .await;
    let policy = Policy {
        queue_allowed: true,
        ..Policy::default()
    };
    let queue = EmbedQueue::new();
    let batch = EmbedRequest {
        inputs: vec!["a".into(), "b".into()],
        dimensions: None,
        original: None,
        ..Default::default()
    };
    let first = queue.submit(&rig.router, &rig.tier, &policy, batch).await;
    assert!(matches!(first, Offered::Queued { .. }), "{first:?}");
    assert_eq!(queue.len(), 1);
    assert_eq!(rig.mock.calls(&route("a/embedder")), 1);

    // The route cools for 30 s: draining now offers nothing and calls nobody.
    assert!(queue
        .drain(&rig.router, &rig.tier, &policy)
        .await
        .is_empty());
    assert_eq!(rig.mock.calls(&route("a/embedder")), 1);

    rig.clock.advance(30_000);
    let offered = queue.drain(&rig.router, &rig.tier, &policy).await;
    match &offered[..] {
        [Offered::Finished { report, answer, .. }] => {
            assert_eq!(report.outcome, Outcome::Success);
            let vectors = answer.as_ref().unwrap().embeddings.as_ref().unwrap();
            assert_eq!(vectors.len(), 2);
        }
        other => panic!("{other:?}"),
    }
    assert!(queue.is_empty());
    assert_eq!(rig.mock.calls(&route("a/embedder")), 2);
    assert!(rig.clock.now_ms() > 0);
}

#[tokio::test]
async fn rerank_degrades_to_the_recall_order() {
    let rig = rig(r#"
name: t
path: rerank
chain:
  - route: a/reranker
    replies: [ { status: 503 } ]
expect: { outcome: degraded }
"#)
    .await;
    let policy = Policy::default();
    let req = scenario_rerank_request();
    let req = Request::Rerank(req);
    let Called { answer, report } = rig
        .router
        .call(&rig.tier, &req, CallOptions::new(&policy))
        .await;
    assert_eq!(report.outcome, Outcome::Degraded);
    assert_eq!(answer.unwrap().ranking, Some(vec![0, 1, 2]));
    assert_eq!(report.attempts.last().unwrap().action, Action::Degrade);

    // A working reranker changes the order (the mock ranks in reverse).
    let ok = rig_ok().await;
    let Called { answer, report } = ok
        .router
        .call(&ok.tier, &req, CallOptions::new(&policy))
        .await;
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(answer.unwrap().ranking, Some(vec![2, 1, 0]));
}

async fn rig_ok() -> Rig {
    rig(r#"
name: t
path: rerank
chain:
  - route: a/reranker
    replies: [ { ok: "ranked" } ]
expect: { outcome: success }
"#)
    .await
}
