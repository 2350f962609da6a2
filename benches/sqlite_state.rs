//! Concurrent requests sharing one SQLite state file: N requests in flight at once on a
//! multi-threaded runtime, each through the production router (`Router::dry_run`: canned
//! upstream results, no network) doing what a gateway's requests do to the store — one
//! health read per selection and one atomic transition per attempt (a 429 with a
//! zero hint, a retry, an answer: two writes). The SQLite connection lives on its own
//! thread, so the async workers never block on it. Prints requests per second and the
//! p50 / p99 latency per N, with the in-memory store beside it for reference.
//!
//! `cargo bench --bench sqlite_state`

// Canned results mirror what a wire returns: `Result<_, UpstreamFailure>`, large by nature.
#![allow(clippy::result_large_err)]

use poolctl::classify::failure::{Headers, UpstreamFailure};
use poolctl::config::route::{RouteSpec, Tier};
use poolctl::core::clock::{ManualClock, Stopwatch};
use poolctl::core::secret::Secret;
use poolctl::core::vocab::{CallPath, Outcome, Route, Wire};
use poolctl::policy::card::Policy;
use poolctl::router::{CallOptions, Router};
use poolctl::store::{HealthStore, MemoryStore, SqliteStore};
use poolctl::wire::Endpoint;
use std::sync::Arc;
use std::time::Duration;

const REQUESTS: usize = 2_000;

fn tier() -> Tier {
    let route = Route::parse("p/model").unwrap();
    let endpoint = Endpoint {
        provider: "p".into(),
        wire: Wire::OpenAi,
        dialect: poolctl::classify::dialect::Dialect::Openai,
        base_url: "http://127.0.0.1:9/v1".into(),
        api_key: Secret::new("sk-bench"),
        timeout_ms: 30_000,
        first_token_timeout_ms: 15_000,
        stream_idle_ms: 20_000,
        stream_max_ms: poolctl::core::limits::DEFAULT_STREAM_MAX_MS,
        max_stream_bytes: poolctl::core::limits::DEFAULT_MAX_STREAM_BYTES,
        max_event_bytes: poolctl::core::limits::DEFAULT_MAX_EVENT_BYTES,
        drop_params: false,
    };
    Tier {
        groups: Vec::new(),
        name: "bench".into(),
        path: CallPath::Chat,
        routes: vec![RouteSpec {
            route,
            endpoint: Arc::new(endpoint),
            facts: Default::default(),
            policy: Default::default(),
        }],
    }
}

fn canned() -> Vec<Result<(), UpstreamFailure>> {
    let busy = UpstreamFailure::from_response(
        429,
        Headers::from_pairs([("retry-after-ms".to_string(), "0".to_string())]),
        br#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#,
    );
    vec![Err(busy), Ok(())]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

async fn run(store: Arc<dyn HealthStore>, concurrency: usize) -> (f64, Duration, Duration) {
    let router = Router::new(
        poolctl::wire::http_client(),
        Arc::new(ManualClock::new(1_000_000)),
        store,
    );
    let tier = Arc::new(tier());
    let policy = Arc::new(Policy::default());
    let per_worker = REQUESTS / concurrency;
    let sw = Stopwatch::start();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (router, tier, policy) = (router.clone(), tier.clone(), policy.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_worker);
                for _ in 0..per_worker {
                    let one = Stopwatch::start();
                    let report = router
                        .dry_run(&tier, CallOptions::new(&policy), canned())
                        .await;
                    assert_eq!(report.outcome, Outcome::Success, "{:?}", report.notes);
                    assert!(report.notes.is_empty(), "{:?}", report.notes);
                    latencies.push(one.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::with_capacity(REQUESTS);
    for w in workers {
        all.extend(w.await.unwrap());
    }
    let secs = sw.elapsed().as_secs_f64();
    all.sort();
    (
        all.len() as f64 / secs,
        percentile(&all, 0.50),
        percentile(&all, 0.99),
    )
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        println!("concurrent requests on one state file ({REQUESTS} requests each; 1 health read + 2 transitions per request)");
        println!("  {:<8} {:>4}  {:>10}  {:>10}  {:>10}", "store", "N", "req/s", "p50", "p99");
        for n in [1, 8, 32, 128] {
            let dir = tempfile::tempdir().unwrap();
            let sqlite = SqliteStore::open(&dir.path().join("state.db")).unwrap();
            let stores: [(&str, Arc<dyn HealthStore>); 2] =
                [("sqlite", Arc::new(sqlite)), ("memory", Arc::new(MemoryStore::new()))];
            for (name, store) in stores {
                let (rps, p50, p99) = run(store, n).await;
                println!(
                    "  {name:<8} {n:>4}  {rps:>10.0}  {:>8.3}ms  {:>8.3}ms",
                    p50.as_secs_f64() * 1e3,
                    p99.as_secs_f64() * 1e3
                );
            }
        }
    });
}
