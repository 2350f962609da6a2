//! Two real `poolctl serve` processes (`workers: 2`) share `dash/m: { rpm: 120 }` in the
//! test's own `redis-server`, under steady load, through five phases of a few seconds:
//! healthy; Redis killed; Redis restarted empty (no persistence: its buckets and records
//! are lost); Redis frozen (SIGSTOP: it accepts connections and never answers); Redis
//! thawed. The bound (README, Redis section): over the whole run the fleet admits at most
//! the bucket's capacity plus its refill, whatever the store does, with a small slack
//! per outage edge for the requests in flight when it changed. Before the fixes of issue
//! 22 each process's local share started full and the restarted Redis handed out a full
//! bucket again, which this bound catches many times over.
//!
//! Also: a route retired before the outage stays retired after Redis comes back empty
//! (the processes write it back, and say so once each), and every request is answered
//! within its deadline. The counts per phase are printed.

use poolctl::core::clock::Stopwatch;
use poolctl::core::vocab::{CallPath, Route, Wire};
use poolctl::harness::mock::{MockRoute, MockServer};
use poolctl::harness::redis_server::RedisServer;
use poolctl::harness::scenario::Reply;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[path = "support/gateway.rs"]
mod gateway;

const KEY_VAR: &str = "POOLCTL_OUTAGE_TEST_KEY";
const KEY: &str = "sk-outage-SENTINEL-never-print-me";
const GATEWAYS: usize = 2;
const CLIENTS: usize = 3;
/// Refill 2 a second: a phase of PHASE lets in about 5 more.
const RPM: u64 = 120;
const PHASE: Duration = Duration::from_millis(2_500);
/// A request's deadline: far above the store's (200 ms), so an answer later than this
/// is a hang.
const REQUEST_DEADLINE: Duration = Duration::from_secs(3);
/// Per process, per outage edge (the store going away or coming back): the requests
/// already past their admission when it changed, and one re-created bucket's race.
const SLACK_PER_EDGE: f64 = 2.0;

fn route(s: &str) -> Route {
    Route::parse(s).unwrap()
}

fn ok() -> Reply {
    Reply::Ok {
        text: "fine".into(),
        headers: vec![],
        usage: None,
    }
}

async fn poolctl(config: &std::path::Path, args: &[&str]) -> std::process::Output {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env(KEY_VAR, KEY)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("poolctl finishes in time")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_restarted_and_frozen_redis_never_lets_the_fleet_over_admit() {
    let mut redis = RedisServer::must_start();
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        ["dash/retired", "dash/m"]
            .into_iter()
            .map(|r| MockRoute {
                route: route(r),
                wire: Wire::OpenAi,
                path: CallPath::Chat,
                replies: vec![ok()],
                outage: None,
                record: false,
            })
            .collect(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pool.yaml");
    std::fs::write(
        &config,
        format!(
            "providers:\n  dash:\n    wire: openai\n    base_url: {}\n    api_key_env: {KEY_VAR}\n\
             tiers:\n  t:\n    - dash/retired\n    - dash/m\n\
             limits:\n  dash/m: {{ rpm: {RPM} }}\nheadroom: 1.0\n\
             state: {}\nstate_timeout_ms: 200\non_store_error: local_share\nworkers: {GATEWAYS}\n",
            mock.base_url("dash", Wire::OpenAi),
            redis.url()
        ),
    )
    .unwrap();
    // Retired before anything runs; unlimited, so a route un-retired by a lost store
    // would both be called and admit without a bucket.
    let o = poolctl(
        &config,
        &["retire", "dash/retired", "--reason", "incident 9"],
    )
    .await;
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    let mut gateways = Vec::new();
    for _ in 0..GATEWAYS {
        gateways.push(gateway::start(&config, &["--workers", "1"], &[(KEY_VAR, KEY)]).await);
    }

    const PHASES: [&str; 5] = [
        "healthy",
        "killed",
        "restarted empty",
        "frozen (SIGSTOP)",
        "thawed",
    ];
    let phase = Arc::new(AtomicUsize::new(0));
    let admitted: Arc<[AtomicUsize; 5]> = Arc::new(Default::default());
    let shed: Arc<[AtomicUsize; 5]> = Arc::new(Default::default());
    let slowest_ms = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let client = reqwest::Client::builder()
        .timeout(REQUEST_DEADLINE)
        .build()
        .unwrap();
    let mut tasks = Vec::new();
    for gw in &gateways {
        for _ in 0..CLIENTS {
            let url = gw.url("/v1/chat/completions");
            let (client, phase, admitted, shed, slowest_ms, stop) = (
                client.clone(),
                phase.clone(),
                admitted.clone(),
                shed.clone(),
                slowest_ms.clone(),
                stop.clone(),
            );
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let p = phase.load(Ordering::SeqCst);
                    let sw = Stopwatch::start();
                    let r = client
                        .post(&url)
                        .json(
                            &json!({"model": "t", "messages": [{"role": "user", "content": "hi"}]}),
                        )
                        .send()
                        .await
                        .expect("answered within its deadline: nothing hangs");
                    let status = r.status().as_u16();
                    let text = r
                        .text()
                        .await
                        .expect("the body arrives within the deadline");
                    slowest_ms.fetch_max(sw.elapsed_ms(), Ordering::SeqCst);
                    assert!(!text.contains(KEY), "the key leaked: {text}");
                    match status {
                        200 => admitted[p].fetch_add(1, Ordering::SeqCst),
                        429 | 503 => {
                            assert!(text.contains("admission"), "a shed names admission: {text}");
                            shed[p].fetch_add(1, Ordering::SeqCst)
                        }
                        _ => panic!("unexpected answer {status}: {text}"),
                    };
                }
            }));
        }
    }

    let run = Stopwatch::start();
    let mut ends = Vec::new();
    for (i, _) in PHASES.iter().enumerate() {
        match i {
            0 => {}
            1 => redis.kill(),
            2 => redis.restart().unwrap(),
            3 => redis.signal("STOP").unwrap(),
            _ => redis.signal("CONT").unwrap(),
        }
        phase.store(i, Ordering::SeqCst);
        // The one wait on real time: a phase lasts PHASE while the load runs.
        poolctl::core::clock::real_sleep(PHASE).await;
        ends.push(run.elapsed());
    }
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        tokio::time::timeout(REQUEST_DEADLINE * 2, t)
            .await
            .expect("every client finishes in time")
            .expect("no client task panicked");
    }

    // Allowed: capacity at the start, plus the refill over each phase; four outage
    // edges (kill, restart, stop, thaw), each with the slack of every process.
    let refill = |d: Duration| RPM as f64 * d.as_secs_f64() / 60.0;
    let mut cumulative = 0usize;
    let mut start = Duration::ZERO;
    println!("phase               allowed  admitted  shed   (cumulative admitted / allowed)");
    for (i, name) in PHASES.iter().enumerate() {
        let end = ends[i] + REQUEST_DEADLINE.min(Duration::from_millis(300));
        let allowed_phase = if i == 0 { RPM as f64 } else { 0.0 } + refill(ends[i] - start);
        let a = admitted[i].load(Ordering::SeqCst);
        cumulative += a;
        let allowed_so_far = RPM as f64 + refill(end) + SLACK_PER_EDGE * GATEWAYS as f64 * i as f64;
        println!(
            "{name:<19} {allowed_phase:>7.1} {a:>9} {:>5}   ({cumulative} / {allowed_so_far:.1})",
            shed[i].load(Ordering::SeqCst)
        );
        assert!(
            cumulative as f64 <= allowed_so_far,
            "over-admitted by the end of `{name}`: {cumulative} > {allowed_so_far:.1}"
        );
        start = ends[i];
    }
    let slowest = slowest_ms.load(Ordering::SeqCst);
    println!(
        "slowest answer: {slowest} ms (deadline {} ms)",
        REQUEST_DEADLINE.as_millis()
    );
    assert!(
        admitted[0].load(Ordering::SeqCst) as u64 >= RPM,
        "the load never drained the bucket: it tested nothing"
    );
    assert!(
        shed.iter().all(|s| s.load(Ordering::SeqCst) > 0),
        "every phase was over its budget"
    );

    // The retirement outlived the store's loss: never called, retired in the store.
    assert_eq!(
        mock.calls(&route("dash/retired")),
        0,
        "a lost store un-retired a route"
    );
    let o = poolctl(&config, &["status", "--json"]).await;
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let row = v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["route"] == "dash/retired")
        .unwrap()
        .clone();
    assert_eq!(
        (row["state"].clone(), row["reason"].clone()),
        (json!("retired"), json!("incident 9")),
        "{v}"
    );

    let mut wrote_back = 0;
    for gw in gateways {
        let (code, stderr) = gw.stop().await;
        assert_eq!(code, Some(0), "{stderr}");
        assert!(!stderr.contains(KEY), "the key leaked: {stderr}");
        let lines = stderr.matches("lost its data").count();
        assert!(lines <= 1, "said once, not {lines} times: {stderr}");
        wrote_back += lines;
        assert!(
            stderr.matches("lost the admission buckets").count() <= 1,
            "{stderr}"
        );
    }
    assert!(
        wrote_back >= 1,
        "some process wrote the retirement back, and said so"
    );
}

/// FLUSHALL while the fleet runs (no outage at all): a bucket this process has seen is
/// re-created at its view, so a drained bucket stays drained; one never seen starts full.
#[tokio::test(flavor = "multi_thread")]
async fn a_flushed_store_re_creates_seen_buckets_at_their_view_not_full() {
    use poolctl::admission::bucket::{Cost, Limits};
    use poolctl::admission::buckets::AdmissionConfig;
    use poolctl::core::vocab::Priority;
    use poolctl::store::redis_buckets::RedisBuckets;
    use poolctl::store::RedisStore;
    let server = RedisServer::must_start();
    let mut limits = std::collections::BTreeMap::new();
    for name in ["seen", "unseen"] {
        limits.insert(
            name.to_string(),
            Limits {
                rpm: Some(10),
                ..Limits::default()
            },
        );
    }
    let cfg = AdmissionConfig {
        limits,
        headroom: 1.0,
        ..AdmissionConfig::default()
    };
    let open = || RedisStore::open(&server.url(), Duration::from_millis(1_000)).unwrap();
    let b = RedisBuckets::new(open(), &cfg);
    let cost = Cost {
        input_tokens: 1,
        output_tokens: 1,
    };
    let now = 1_700_000_000_000;
    let seen = b.cover(&route("seen/m")).unwrap();
    let mut admitted = 0;
    for _ in 0..10 {
        admitted += usize::from(
            b.acquire(&seen, cost, Priority::Interactive, now)
                .await
                .unwrap()
                .is_ok(),
        );
    }
    assert_eq!(admitted, 10);
    assert_eq!(b.losses(), 0);
    let _: () = redis::cmd("FLUSHALL")
        .query_async(
            &mut redis::Client::open(server.url())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap(),
        )
        .await
        .unwrap();
    // Six seconds later the refill has added one: one admitted, not a full bucket.
    let later = now + 6_000;
    let mut again = 0;
    for _ in 0..10 {
        again += usize::from(
            b.acquire(&seen, cost, Priority::Interactive, later)
                .await
                .unwrap()
                .is_ok(),
        );
    }
    assert_eq!(
        again, 1,
        "re-created at the view (0) plus the refill (1), not at 10"
    );
    assert_eq!(b.losses(), 1, "the loss is reported once");
    // Another process that never saw a bucket gets it full, as before.
    let other = RedisBuckets::new(open(), &cfg);
    let unseen = other.cover(&route("unseen/m")).unwrap();
    let mut full = 0;
    for _ in 0..12 {
        full += usize::from(
            other
                .acquire(&unseen, cost, Priority::Interactive, later)
                .await
                .unwrap()
                .is_ok(),
        );
    }
    assert_eq!(full, 10);
    assert_eq!(other.losses(), 0);
}

/// A Redis restarted empty under a process that knows a retirement and an open breaker:
/// the first call after it answers again writes both back (and says so), so the read
/// it makes, and every other process's, sees them.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_restarted_empty_gets_the_retirements_and_open_breakers_written_back() {
    use poolctl::policy::breaker::{Answer, BreakerConfig, Step};
    use poolctl::policy::health::{Health, Transition};
    use poolctl::store::{FallbackStore, HealthStore, RedisStore};
    use std::sync::Mutex;
    let mut server = RedisServer::must_start();
    let url = server.url();
    let open = || RedisStore::open(&url, Duration::from_millis(300)).unwrap();
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = lines.clone();
    let store = FallbackStore::new(Arc::new(open()), "redis")
        .with_log(Arc::new(move |l| sink.lock().unwrap().push(l.to_string())));
    let (retired, broken) = (route("a/retired"), route("b/broken"));
    store
        .apply(
            &retired,
            Transition::Retire {
                reason: "incident 3".into(),
            },
        )
        .await
        .unwrap();
    let cfg = BreakerConfig {
        consecutive_failures: 1,
        open_ms: 600_000,
        max_open_ms: 600_000,
        ..BreakerConfig::default()
    };
    let now = poolctl::core::clock::wall_now_ms();
    let opened = store
        .breaker(
            &broken,
            cfg,
            Step::Record {
                trial: false,
                ok: false,
                now,
            },
        )
        .await
        .unwrap();
    assert!(matches!(opened, Answer::Recorded(Some(_))), "{opened:?}");
    // A read: the process checks the store's epoch (its first look).
    assert_eq!(
        store.get(&retired).await.unwrap(),
        Health::Retired {
            reason: "incident 3".into()
        }
    );

    server.kill();
    // Down: answered on the local view, in time; an episode opens.
    let sw = Stopwatch::start();
    assert!(matches!(
        store.get(&retired).await.unwrap(),
        Health::Retired { .. }
    ));
    assert!(sw.elapsed_ms() < 1_000);
    server.restart().unwrap();
    // The episode's retry comes every RETRY_MS (the first may still meet the connection
    // the restart broke): bounded waits on real time until the store answers again.
    for _ in 0..20 {
        if lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("answers again"))
        {
            break;
        }
        poolctl::core::clock::real_sleep(Duration::from_millis(poolctl::store::RETRY_MS + 10))
            .await;
        assert_eq!(
            store.get(&retired).await.unwrap(),
            Health::Retired {
                reason: "incident 3".into()
            }
        );
    }
    // Another process, on the store itself, sees both.
    let fresh = open();
    assert_eq!(
        fresh.get(&retired).await.unwrap(),
        Health::Retired {
            reason: "incident 3".into()
        }
    );
    assert!(
        fresh.breaker_open(&broken, now + 1).await.unwrap(),
        "the open breaker was written back"
    );
    let lines = lines.lock().unwrap();
    let said = lines.iter().filter(|l| l.contains("lost its data")).count();
    assert_eq!(said, 1, "said once: {lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("a/retired") && l.contains("b/broken")),
        "{lines:?}"
    );
}

/// A process that starts while Redis is down has no view of the fleet's buckets: its
/// local share starts empty and fills at its share of the refill, never full (the fleet
/// may have spent it all).
#[tokio::test(flavor = "multi_thread")]
async fn a_local_share_never_seen_starts_empty_not_full() {
    use poolctl::admission::bucket::{Cost, Limits};
    use poolctl::admission::buckets::AdmissionConfig;
    use poolctl::core::vocab::Priority;
    use poolctl::store::redis_buckets::RedisBuckets;
    use poolctl::store::shared_buckets::SharedBuckets;
    use poolctl::store::{OnStoreError, RedisStore};
    let mut server = RedisServer::must_start();
    let url = server.url();
    server.kill();
    let mut limits = std::collections::BTreeMap::new();
    limits.insert(
        "dash/m".to_string(),
        Limits {
            rpm: Some(60),
            ..Limits::default()
        },
    );
    let cfg = AdmissionConfig {
        limits,
        headroom: 1.0,
        ..AdmissionConfig::default()
    };
    let now = 1_700_000_000_000;
    let shared = RedisBuckets::new(
        RedisStore::open(&url, Duration::from_millis(200)).unwrap(),
        &cfg,
    );
    let b = SharedBuckets::new(shared, &cfg, OnStoreError::LocalShare, 2, now)
        .with_log(Arc::new(|_| {}));
    let cost = Cost {
        input_tokens: 1,
        output_tokens: 1,
    };
    let r = route("dash/m");
    assert!(
        b.acquire(&r, cost, Priority::Interactive, now)
            .await
            .is_err(),
        "not a full share"
    );
    // Two seconds on: its share of the refill (30 / minute) has added one.
    let later = now + 2_000;
    let admitted = {
        let mut n = 0;
        for _ in 0..5 {
            n += usize::from(
                b.acquire(&r, cost, Priority::Interactive, later)
                    .await
                    .is_ok(),
            );
        }
        n
    };
    assert_eq!(admitted, 1);
}
