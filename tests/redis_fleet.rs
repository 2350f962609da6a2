//! The fleet test of issue 12: four real `poolctl serve` processes share one real Redis
//! (the test's own `redis-server` on a free loopback port) and one admission bucket.
//!
//! 1. A bounded burst from every side: the fleet admits no more than the bucket's
//!    capacity plus its refill over the burst's duration (computed and asserted), every
//!    admitted request reached the upstream exactly once, every other was shed.
//! 2. `redis-server` is killed in the middle of a second burst: no request hangs, no
//!    process panics, every admission decision made without Redis is counted in each
//!    gateway's `/metrics` and logged once per episode, and the over-admission stays
//!    within the `local_share` bound (each process's `1 / workers` of the contract,
//!    plus its share of the refill).
//!
//! Socket deadlines are real time and small; nothing sleeps.

use poolctl::core::clock::Stopwatch;
use poolctl::core::vocab::{CallPath, Route, Wire};
use poolctl::harness::mock::{MockRoute, MockServer};
use poolctl::harness::redis_server::RedisServer;
use poolctl::harness::scenario::Reply;
use serde_json::json;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[path = "support/gateway.rs"]
mod gateway;
use gateway::Gateway;

const KEY_VAR: &str = "POOLCTL_FLEET_TEST_KEY";
const KEY: &str = "sk-fleet-SENTINEL-never-print-me";
const GATEWAYS: usize = 4;
/// The one bucket the fleet spends: requests per minute of route `dash/m`.
const RPM: u64 = 40;
/// Clients per gateway, each sending its requests one after another.
const CLIENTS: usize = 4;
const PER_CLIENT: usize = 8;
/// Any one request, or any one wait, longer than this is a hang.
const DEADLINE: Duration = gateway::DEADLINE;

fn write_config(dir: &Path, mock: &MockServer, redis: &str, on_error: &str) -> std::path::PathBuf {
    write_config_rpm(dir, mock, redis, on_error, RPM, 1000)
}

fn write_config_rpm(
    dir: &Path,
    mock: &MockServer,
    redis: &str,
    on_error: &str,
    rpm: u64,
    state_timeout_ms: u64,
) -> std::path::PathBuf {
    // `state_timeout_ms` is well above a loaded machine's Redis round trip (1000) where a
    // test counts what the shared bucket admitted: a call that times out spends the local
    // share instead, and a burst would then admit fewer than the bucket holds (seen once,
    // with builds running beside the suite). A kill is a refused connection, which never
    // waits for it; only the test of a Redis that never answers waits, and sets it short.
    let yaml = format!(
        "providers:\n  dash:\n    wire: openai\n    base_url: {}\n    api_key_env: {KEY_VAR}\n\
         tiers:\n  t:\n    - dash/m\n\
         limits:\n  dash/m: {{ rpm: {rpm} }}\n\
         headroom: 1.0\n\
         state: {redis}\nstate_timeout_ms: {state_timeout_ms}\non_store_error: {on_error}\nworkers: {GATEWAYS}\n",
        mock.base_url("dash", Wire::OpenAi)
    );
    let path = dir.join("pool.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// A gateway of the fleet: one runtime worker each, as four small pods would run.
async fn start(config: &Path) -> Gateway {
    gateway::start(config, &["--workers", "1"], &[(KEY_VAR, KEY)]).await
}

/// One chat request to tier `t` at `url`: its status, `x-poolctl-outcome` and body. The
/// client's deadline turns a hang into a failure.
async fn chat(client: &reqwest::Client, url: &str) -> (u16, String, String) {
    let r = client
        .post(url)
        .json(&json!({"model": "t", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("the gateway answers within the deadline: nothing hangs");
    let outcome = r
        .headers()
        .get("x-poolctl-outcome")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let status = r.status().as_u16();
    (status, outcome, r.text().await.unwrap())
}

/// What one burst saw.
#[derive(Default, Debug)]
struct Burst {
    admitted: usize,
    shed: usize,
    /// Requests sent after `redis-server` was killed, per gateway.
    after_kill: [usize; GATEWAYS],
    elapsed: Duration,
}

/// Every gateway's clients send their requests; when `kill_after` is set, once that many
/// have been answered, `redis` is killed while the rest are still being sent.
async fn burst(gateways: &[Gateway], redis: Option<(&mut RedisServer, usize)>) -> Burst {
    let client = reqwest::Client::builder()
        .timeout(DEADLINE)
        .build()
        .unwrap();
    let answered = Arc::new(AtomicUsize::new(0));
    let reached = Arc::new(tokio::sync::Notify::new());
    let kill_at = redis.as_ref().map_or(usize::MAX, |(_, n)| *n);
    // Once `kill_at` requests are answered, the clients hold their next request until
    // the server is gone, so that part of the burst is surely sent after the kill.
    let (kill_tx, kill_rx) = tokio::sync::watch::channel(false);
    let admitted = Arc::new(AtomicUsize::new(0));
    let shed = Arc::new(AtomicUsize::new(0));
    let after: Arc<[AtomicUsize; GATEWAYS]> = Arc::new(Default::default());
    let t0 = Stopwatch::start();
    let mut tasks = Vec::new();
    for (g, gw) in gateways.iter().enumerate() {
        for _ in 0..CLIENTS {
            let (client, url) = (client.clone(), format!("{}/v1/chat/completions", gw.base));
            let reached = reached.clone();
            let (answered, mut killed, admitted, shed, after) = (
                answered.clone(),
                kill_rx.clone(),
                admitted.clone(),
                shed.clone(),
                after.clone(),
            );
            tasks.push(tokio::spawn(async move {
                for _ in 0..PER_CLIENT {
                    if answered.load(Ordering::SeqCst) >= kill_at {
                        killed
                            .wait_for(|k| *k)
                            .await
                            .expect("the test is still running");
                        after[g].fetch_add(1, Ordering::SeqCst);
                    }
                    let (status, outcome, text) = chat(&client, &url).await;
                    assert!(!text.contains(KEY), "the key leaked: {text}");
                    match (status, outcome.as_str()) {
                        (200, "success") => admitted.fetch_add(1, Ordering::SeqCst),
                        (429 | 503, "shed") => {
                            assert!(text.contains("admission"), "a shed names admission: {text}");
                            shed.fetch_add(1, Ordering::SeqCst)
                        }
                        _ => panic!("unexpected answer {status} {outcome}: {text}"),
                    };
                    if answered.fetch_add(1, Ordering::SeqCst) + 1 == kill_at {
                        reached.notify_one();
                    }
                }
            }));
        }
    }
    if let Some((redis, _)) = redis {
        tokio::time::timeout(DEADLINE, reached.notified())
            .await
            .expect("the burst stalled before the kill");
        redis.kill();
        // Only requests sent once the server is gone count as sent after the kill.
        kill_tx.send_replace(true);
    }
    for t in tasks {
        t.await.expect("no client task panicked");
    }
    let mut after_kill = [0; GATEWAYS];
    for (i, a) in after.iter().enumerate() {
        after_kill[i] = a.load(Ordering::SeqCst);
    }
    Burst {
        admitted: admitted.load(Ordering::SeqCst),
        shed: shed.load(Ordering::SeqCst),
        after_kill,
        elapsed: t0.elapsed(),
    }
}

/// One route, `dash/m`, that always answers.
async fn upstream() -> MockServer {
    MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        vec![MockRoute {
            route: Route::parse("dash/m").unwrap(),
            wire: Wire::OpenAi,
            path: CallPath::Chat,
            replies: vec![Reply::Ok {
                text: "fine".into(),
                headers: vec![],
                usage: None,
            }],
            outage: None,
            record: false,
        }],
    )
    .await
    .unwrap()
}

/// What the refill adds to `contract` per minute over `d`.
fn refill(contract: u64, d: Duration) -> f64 {
    contract as f64 * d.as_secs_f64() / 60.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_gateways_spend_one_bucket_and_stay_within_the_local_share_bound_when_redis_dies() {
    let mut redis = RedisServer::must_start();
    let mock = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &mock, &redis.url(), "local_share");
    let mut gateways = Vec::new();
    for _ in 0..GATEWAYS {
        gateways.push(start(&config).await);
    }
    let sent = GATEWAYS * CLIENTS * PER_CLIENT;

    // 1. One budget: capacity plus the refill over the burst, no more.
    let first = burst(&gateways, None).await;
    let bound = RPM as f64 + refill(RPM, first.elapsed);
    println!(
        "burst 1: {sent} sent, {} admitted (bound {bound:.2} over {:?}), {} shed",
        first.admitted, first.elapsed, first.shed
    );
    assert_eq!(first.admitted + first.shed, sent);
    assert!(
        first.admitted as f64 <= bound,
        "the fleet over-admitted: {} > {bound:.2}",
        first.admitted
    );
    assert!(
        first.admitted as u64 >= RPM,
        "the burst never drained the bucket ({} admitted): it tested nothing",
        first.admitted
    );
    let route = Route::parse("dash/m").unwrap();
    assert_eq!(
        mock.calls(&route),
        first.admitted as u64,
        "every admitted request reached the upstream once, no shed one did"
    );
    // Each gateway's /metrics shows the fleet's level (drained), not its own share.
    for gw in &gateways {
        let level = gw
            .metric("poolctl_bucket_level{bucket=\"dash/m\",dimension=\"rpm\"}")
            .await;
        assert!(
            level < 2.0,
            "a gateway shows its own view of the bucket: {level}"
        );
    }

    // 2. Redis dies mid-burst.
    let kill_after = sent / 4;
    let second = burst(&gateways, Some((&mut redis, kill_after))).await;
    let after_kill: usize = second.after_kill.iter().sum();
    println!(
        "burst 2: {sent} sent, redis killed after {kill_after} answers; {} admitted, {} shed, {after_kill} sent after the kill, in {:?}",
        second.admitted, second.shed, second.elapsed
    );
    assert_eq!(second.admitted + second.shed, sent);
    assert!(
        after_kill > 0,
        "the kill came after the burst: it tested nothing"
    );
    // Through Redis, until the kill: only what refilled since burst 1 began. Without it:
    // each process's local share, RPM / workers, plus its share of the refill; so the
    // fleet stays within one more contract plus the refill.
    let total_elapsed = first.elapsed + second.elapsed + Duration::from_secs(1);
    let shared_bound = RPM as f64 + refill(RPM, total_elapsed);
    let local_bound = RPM as f64 + refill(RPM, second.elapsed);
    let admitted = first.admitted + second.admitted;
    println!(
        "over both bursts: {admitted} admitted against one budget of {shared_bound:.2}; local_share bound {:.2}",
        shared_bound + local_bound
    );
    assert!(
        admitted as f64 <= shared_bound + local_bound,
        "over-admission beyond the local_share bound: {admitted} > {:.2}",
        shared_bound + local_bound
    );
    assert_eq!(mock.calls(&route), admitted as u64);

    // Every admission decision without Redis is counted; each gateway made at least one
    // per request it was sent after the kill.
    for (g, gw) in gateways.iter().enumerate() {
        let degraded = gw
            .metric("poolctl_store_degraded_total{decision=\"admission\"}")
            .await as u64;
        let episodes = gw
            .metric("poolctl_store_degraded_episodes_total{decision=\"admission\"}")
            .await as u64;
        println!(
            "gateway {g}: {} sent after the kill, {degraded} degraded admission decisions, {episodes} episode(s)",
            second.after_kill[g]
        );
        assert!(
            degraded >= second.after_kill[g] as u64,
            "gateway {g}: {degraded} degraded decisions counted for {} requests after the kill",
            second.after_kill[g]
        );
        if second.after_kill[g] > 0 {
            assert_eq!(episodes, 1, "gateway {g}: one episode");
        }
    }
    for (g, gw) in gateways.into_iter().enumerate() {
        let (code, stderr) = gw.stop().await;
        assert_eq!(code, Some(0), "gateway {g} stops cleanly:\n{stderr}");
        assert!(
            !stderr.contains("panicked"),
            "gateway {g} panicked:\n{stderr}"
        );
        assert!(!stderr.contains(KEY), "gateway {g} logged the key");
        let logged = stderr
            .lines()
            .filter(|l| l.contains("admission uses this process's local share"))
            .count();
        if second.after_kill[g] > 0 {
            assert_eq!(logged, 1, "gateway {g}: logged once per episode:\n{stderr}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_fail_closed_a_redis_that_never_answers_sheds_within_the_deadline_and_calls_nothing() {
    let redis = RedisServer::must_start();
    let mock = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_rpm(dir.path(), &mock, &redis.url(), "fail_closed", RPM, 150);
    let gw = start(&config).await;
    // Accepts connections, never answers: only the store's deadline (150 ms) ends a call.
    redis.signal("STOP").unwrap();
    let client = reqwest::Client::builder()
        .timeout(DEADLINE)
        .build()
        .unwrap();
    let url = format!("{}/v1/chat/completions", gw.base);
    for i in 0..3 {
        let sw = Stopwatch::start();
        let (status, outcome, body) = chat(&client, &url).await;
        println!("request {i}: {status} {outcome} in {:?}", sw.elapsed());
        assert_eq!(outcome, "shed", "{body}");
        assert_eq!(
            status, 503,
            "no refill instant is known without the store: {body}"
        );
        assert!(body.contains("admission"), "{body}");
    }
    assert_eq!(mock.calls(&Route::parse("dash/m").unwrap()), 0);
    let degraded = gw
        .metric("poolctl_store_degraded_total{decision=\"admission\"}")
        .await;
    assert!(
        degraded >= 3.0,
        "every shed without the store is counted: {degraded}"
    );
    redis.signal("CONT").unwrap();
    let (code, stderr) = gw.stop().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.contains("admission sheds every limited request"))
            .count(),
        1,
        "logged once per episode:\n{stderr}"
    );
}

#[tokio::test]
async fn walks_in_separate_processes_spend_one_shared_bucket() {
    // With their own buckets every walk would start full and all three would be served.
    let redis = RedisServer::must_start();
    let mock = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_rpm(dir.path(), &mock, &redis.url(), "local_share", 2, 1000);
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
            .args(["walk", "t", "--json", "--config"])
            .arg(&config)
            .env(KEY_VAR, KEY)
            .output()
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
        outcomes.push(v["outcome"].as_str().unwrap().to_string());
        if v["outcome"] == "shed" {
            assert_eq!(v["skipped"][0]["why"], "admission", "{v}");
        }
    }
    assert_eq!(outcomes, ["success", "success", "shed"]);
    assert_eq!(mock.calls(&Route::parse("dash/m").unwrap()), 2);
}

#[tokio::test]
async fn probe_spends_the_fleets_shared_bucket_not_a_fresh_one_of_its_own() {
    // Two walks drain the shared rpm-2 bucket; a probe with buckets of its own would
    // start full and be sent.
    let redis = RedisServer::must_start();
    let mock = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_rpm(dir.path(), &mock, &redis.url(), "local_share", 2, 1000);
    let run = |args: &'static [&'static str]| {
        let config = config.clone();
        async move {
            let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
                .args(args)
                .arg("--config")
                .arg(&config)
                .env(KEY_VAR, KEY)
                .output()
                .await
                .unwrap();
            serde_json::from_slice::<serde_json::Value>(&o.stdout)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)))
        }
    };
    for _ in 0..2 {
        assert_eq!(run(&["walk", "t", "--json"]).await["outcome"], "success");
    }
    let v = run(&["probe", "--json"]).await;
    let r = &v["tiers"][0]["routes"][0];
    assert_eq!(r["route"], "dash/m", "{v}");
    assert_eq!(r["skipped"], "admission", "{v}");
    assert_eq!(r["class"], serde_json::Value::Null, "{v}");
    assert_eq!(
        mock.calls(&Route::parse("dash/m").unwrap()),
        2,
        "the refused probe is never sent"
    );
}
