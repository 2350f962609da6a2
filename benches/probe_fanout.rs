//! `probe` fan-out: 100 routes across 25 providers, each answering after 300 ms, probed
//! with the default caps (16 at once, 4 per provider). Prints the wall time (target
//! <= 2.5 s) and the most requests any provider saw in flight (target <= 4), as counted
//! by the loopback mock itself.
//!
//! `cargo bench --bench probe_fanout`

use poolctl::core::clock::{wall_now_ms, Stopwatch};
use poolctl::core::secret::Secret;
use poolctl::core::vocab::{CallPath, Route, Wire};
use poolctl::harness::mock::{MockRoute, MockServer};
use poolctl::harness::scenario::Reply;
use poolctl::router::probe::{probe_all, Target, DEFAULT_CONCURRENCY, PER_PROVIDER};
use poolctl::wire::Endpoint;
use std::sync::Arc;

const PROVIDERS: usize = 25;
const ROUTES_EACH: usize = 4;
const ANSWER_MS: u64 = 300;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let routes: Vec<Route> = (0..PROVIDERS)
            .flat_map(|p| (0..ROUTES_EACH).map(move |m| Route::parse(&format!("p{p:02}/model-{m}")).unwrap()))
            .collect();
        let slow_ok = Reply::Delay {
            ms: ANSWER_MS,
            then: Box::new(Reply::Ok { text: "pong".into(), headers: vec![], usage: None }),
        };
        let mock = MockServer::start(
            ([127, 0, 0, 1], 0).into(),
            routes
                .iter()
                .map(|r| MockRoute { route: r.clone(), wire: Wire::OpenAi, path: CallPath::Chat, replies: vec![slow_ok.clone()], outage: None, record: false })
                .collect(),
        )
        .await
        .unwrap();
        let targets: Vec<Target> = routes
            .iter()
            .map(|r| Target {
                route: r.clone(),
                path: CallPath::Chat,
                endpoint: Arc::new(Endpoint {
                    provider: r.provider().to_string(),
                    wire: Wire::OpenAi,
                    dialect: poolctl::classify::dialect::Dialect::Openai,
                    base_url: mock.base_url(r.provider(), Wire::OpenAi),
                    api_key: Secret::new("sk-bench"),
                    timeout_ms: 5_000,
                    first_token_timeout_ms: 5_000,
                    stream_idle_ms: 5_000,
                    stream_max_ms: poolctl::core::limits::DEFAULT_STREAM_MAX_MS,
                    max_stream_bytes: poolctl::core::limits::DEFAULT_MAX_STREAM_BYTES,
                    max_event_bytes: poolctl::core::limits::DEFAULT_MAX_EVENT_BYTES,
                    drop_params: false,
                }),
                policy: Default::default(),
            })
            .collect();
        let client = poolctl::wire::http_client();
        let sw = Stopwatch::start();
        let results = probe_all(&client, &targets, DEFAULT_CONCURRENCY, PER_PROVIDER, None, wall_now_ms(), None, &|_| {}).await;
        let took = sw.elapsed().as_secs_f64();
        let live = results.iter().filter(|r| r.is_live()).count();
        let max_per_provider = (0..PROVIDERS).map(|p| mock.max_in_flight(&format!("p{p:02}"))).max().unwrap_or(0);
        println!("probe fan-out: {} routes across {PROVIDERS} providers, each answering after {ANSWER_MS} ms", targets.len());
        println!("  caps                         {DEFAULT_CONCURRENCY} at once, {PER_PROVIDER} per provider");
        println!("  wall time                    {took:.2} s   (target <= 2.5 s)");
        println!("  live routes                  {live}/{}", targets.len());
        println!("  most in flight to a provider {max_per_provider}   (target <= 4)");
        assert_eq!(live, targets.len(), "every route should have answered");
    });
}
