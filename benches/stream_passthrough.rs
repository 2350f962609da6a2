//! Stream pass-through through the production router, from a loopback mock:
//! - time-to-first-token added by the router: median TTFT through `Router::stream`
//!   minus median TTFT of a raw HTTP read of the same mock stream (target <= 1 ms);
//! - sustained SSE text throughput through the router (target >= 50 MB/s).
//!
//! `cargo bench --bench stream_passthrough`

use poolctl::config::route::{RouteSpec, Tier};
use poolctl::core::answer::StreamEvent;
use poolctl::core::clock::{ManualClock, Stopwatch};
use poolctl::core::request::{ChatRequest, Request};
use poolctl::core::secret::Secret;
use poolctl::core::vocab::{CallPath, Route, Wire};
use poolctl::harness::mock::{MockRoute, MockServer};
use poolctl::harness::scenario::{Reply, StreamEnd, StreamItem, StreamReply};
use poolctl::policy::card::Policy;
use poolctl::router::{CallOptions, Router};
use poolctl::store::MemoryStore;
use poolctl::wire::Endpoint;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TTFT_RUNS: usize = 300;
const CHUNK: usize = 4096;
const CHUNKS: usize = 8192; // 32 MiB of text

fn stream_reply(items: Vec<StreamItem>) -> Reply {
    Reply::Stream(StreamReply {
        items,
        usage: None,
        end: StreamEnd::Done,
        first_token_ms: 0,
        gap_ms: 0,
        headers: vec![],
    })
}

async fn serve(route: &str, reply: Reply) -> (MockServer, Tier) {
    let route = Route::parse(route).unwrap();
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        vec![MockRoute {
            route: route.clone(),
            wire: Wire::OpenAi,
            path: CallPath::Stream,
            replies: vec![reply],
            outage: None,
            record: false,
        }],
    )
    .await
    .unwrap();
    let endpoint = Endpoint {
        provider: route.provider().to_string(),
        wire: Wire::OpenAi,
        dialect: poolctl::classify::dialect::Dialect::Openai,
        base_url: mock.base_url(route.provider(), Wire::OpenAi),
        api_key: Secret::new("sk-bench"),
        timeout_ms: 30_000,
        first_token_timeout_ms: 15_000,
        stream_idle_ms: 20_000,
        stream_max_ms: poolctl::core::limits::DEFAULT_STREAM_MAX_MS,
        max_stream_bytes: poolctl::core::limits::DEFAULT_MAX_STREAM_BYTES,
        max_event_bytes: poolctl::core::limits::DEFAULT_MAX_EVENT_BYTES,
        drop_params: false,
    };
    let tier = Tier {
        groups: Vec::new(),
        name: "bench".into(),
        path: poolctl::core::vocab::CallPath::Chat,
        routes: vec![RouteSpec {
            route,
            endpoint: Arc::new(endpoint),
            facts: Default::default(),
            policy: Default::default(),
        }],
    };
    (mock, tier)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = poolctl::wire::http_client();
        let router = Router::new(client.clone(), Arc::new(ManualClock::new(0)), Arc::new(MemoryStore::new()));
        let policy = Policy::default();
        let req = Request::Stream(ChatRequest::user("ping", 16));

        // Time to first token: raw HTTP against the router, same mock, alternating runs.
        let items = vec![StreamItem::Text("FIRSTTOKEN".into()), StreamItem::Text(" and the rest".into())];
        let (_mock, tier) = serve("bench/ttft", stream_reply(items)).await;
        let url = format!("{}/chat/completions", tier.routes[0].endpoint.base());
        let body = serde_json::json!({"model": "ttft", "messages": [{"role": "user", "content": "ping"}], "stream": true});
        let (mut raw, mut routed) = (Vec::new(), Vec::new());
        for _ in 0..TTFT_RUNS {
            let sw = Stopwatch::start();
            let mut resp = client.post(&url).bearer_auth("sk-bench").json(&body).send().await.unwrap();
            let mut seen = Vec::new();
            while let Some(chunk) = resp.chunk().await.unwrap() {
                seen.extend_from_slice(&chunk);
                if seen.windows(10).any(|w| w == b"FIRSTTOKEN") {
                    break;
                }
            }
            raw.push(sw.elapsed().as_secs_f64() * 1000.0);
            drop(resp);

            let first = Mutex::new(None);
            let sw = Stopwatch::start();
            let sink = |_: StreamEvent<'_>| {
                first.lock().unwrap().get_or_insert_with(|| sw.elapsed());
            };
            let opts = CallOptions { on_event: Some(&sink), ..CallOptions::new(&policy) };
            let report = router.call(&tier, &req, opts).await.report;
            assert_eq!(report.outcome, poolctl::core::vocab::Outcome::Success);
            routed.push(first.into_inner().unwrap().unwrap().as_secs_f64() * 1000.0);
        }
        let (raw_ms, routed_ms) = (median(raw), median(routed));
        println!("stream pass-through, {TTFT_RUNS} runs each");
        println!("  TTFT raw HTTP (median)        {raw_ms:.3} ms");
        println!("  TTFT through router (median)  {routed_ms:.3} ms");
        println!("  added by the router           {:.3} ms   (target <= 1 ms)", routed_ms - raw_ms);

        // Throughput: 32 MiB of text in 4 KiB deltas through the router.
        let text = "x".repeat(CHUNK);
        let items = vec![StreamItem::Text(text); CHUNKS];
        let (_mock, tier) = serve("bench/throughput", stream_reply(items)).await;
        let bytes = AtomicUsize::new(0);
        let sink = |ev: StreamEvent<'_>| {
            if let StreamEvent::Text(t) = ev {
                bytes.fetch_add(t.len(), Ordering::Relaxed);
            }
        };
        let sw = Stopwatch::start();
        let opts = CallOptions { on_event: Some(&sink), ..CallOptions::new(&policy) };
        let report = router.call(&tier, &req, opts).await.report;
        let secs = sw.elapsed().max(Duration::from_micros(1)).as_secs_f64();
        assert_eq!(report.outcome, poolctl::core::vocab::Outcome::Success);
        let total = bytes.load(Ordering::Relaxed);
        assert_eq!(total, CHUNK * CHUNKS);
        println!("  throughput                    {:.0} MB/s of SSE text ({} MiB in {:.3} s)   (target >= 50 MB/s)",
            total as f64 / 1e6 / secs, total >> 20, secs);
    });
}
