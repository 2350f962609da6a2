//! The Redis store against a real `redis-server` of the test's own (a free loopback
//! port, stopped after): its scripts follow the pure rules exactly, its calls are bounded
//! by the deadline when Redis is gone or frozen, and a router on it keeps serving on its
//! own view, counted and logged once per episode.

#[path = "support/shared_breakers.rs"]
mod shared_breakers;

use poolctl::core::clock::Stopwatch;
use poolctl::core::vocab::Route;
use poolctl::harness::redis_server::RedisServer;
use poolctl::policy::breaker::{self, BreakerConfig};
use poolctl::policy::health::{self, Health, Transition};
use poolctl::store::{FallbackStore, HealthStore, RedisStore};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_millis(150);

fn store(server: &RedisServer) -> RedisStore {
    RedisStore::open(&server.url(), DEADLINE).unwrap()
}

fn route(s: &str) -> Route {
    Route::parse(s).unwrap()
}

/// A random transition, with untils that collide often (so "the later until wins" is
/// exercised both ways).
fn transition(rng: &mut fastrand::Rng) -> Transition {
    let reason = ["rate_limited", "quota", "operator"][rng.usize(..3)].to_string();
    match rng.u8(..4) {
        0 => Transition::Succeeded,
        1 => Transition::Cool {
            until: rng.i64(1_700_000_000_000..1_700_000_000_004),
            reason,
        },
        2 => Transition::Retire { reason },
        _ => Transition::Restore,
    }
}

#[tokio::test]
async fn the_health_script_follows_health_apply_exactly() {
    let server = RedisServer::must_start();
    let s = store(&server);
    let mut rng = fastrand::Rng::with_seed(12);
    let routes = [route("a/x"), route("a/y"), route("openrouter/vendor/m")];
    let mut model: Vec<Health> = vec![Health::Ready; routes.len()];
    for step in 0..3000 {
        let i = rng.usize(..routes.len());
        let t = transition(&mut rng);
        let want_new = health::apply(&model[i], t.clone());
        let (old, new) = s.apply(&routes[i], t.clone()).await.unwrap();
        assert_eq!(old, model[i], "step {step}: {t:?}");
        assert_eq!(new, want_new, "step {step}: {t:?} after {old:?}");
        model[i] = want_new;
        assert_eq!(s.get(&routes[i]).await.unwrap(), model[i]);
    }
    let mut many = Vec::new();
    let refs: Vec<&Route> = routes.iter().collect();
    s.get_many(&refs, &mut many).await.unwrap();
    assert_eq!(many, model);
    let mut listed = s.list().await.unwrap();
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut want: Vec<(Route, Health)> = routes
        .iter()
        .cloned()
        .zip(model)
        .filter(|(_, h)| *h != Health::Ready)
        .collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(listed, want);
}

#[tokio::test]
async fn the_breaker_script_follows_breaker_step_exactly() {
    let server = RedisServer::must_start();
    let s = store(&server);
    let mut rng = fastrand::Rng::with_seed(8);
    for case in 0..12 {
        let cfg = BreakerConfig {
            consecutive_failures: rng.u32(0..4),
            failure_rate: [None, Some(0.5), Some(0.34)][rng.usize(..3)],
            window: rng.u32(1..6),
            open_ms: rng.u64(1..50),
            max_open_ms: rng.u64(50..200),
            half_open_trials: rng.u32(0..3),
        };
        let r = route(&format!("p/case-{case}"));
        let mut model = breaker::State::default();
        let mut now = 1_700_000_000_000_i64;
        for step in 0..300 {
            now += rng.i64(0..40);
            let op = if rng.bool() {
                breaker::Step::Admit { now }
            } else {
                breaker::Step::Record {
                    trial: rng.bool(),
                    ok: rng.u8(..3) == 0,
                    now,
                }
            };
            let want = breaker::step(&mut model, &cfg, op);
            let got = s.breaker(&r, cfg, op).await.unwrap();
            assert_eq!(got, want, "case {case} step {step}: {op:?} with {cfg:?}");
            assert_eq!(
                s.breaker_open(&r, now).await.unwrap(),
                model.is_open(now),
                "case {case} step {step}"
            );
        }
    }
}

#[tokio::test]
async fn breaker_and_health_share_one_record_without_touching_each_other() {
    let server = RedisServer::must_start();
    let s = store(&server);
    let r = route("a/x");
    let cfg = BreakerConfig {
        consecutive_failures: 1,
        ..BreakerConfig::default()
    };
    let fail = breaker::Step::Record {
        trial: false,
        ok: false,
        now: 10,
    };
    s.breaker(&r, cfg, fail).await.unwrap();
    let retire = Transition::Retire {
        reason: "auth".into(),
    };
    s.apply(&r, retire).await.unwrap();
    s.apply(&r, Transition::Restore).await.unwrap();
    assert!(
        s.breaker_open(&r, 11).await.unwrap(),
        "restore kept the breaker"
    );
    assert_eq!(s.get(&r).await.unwrap(), Health::Ready);
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        keys,
        vec!["poolctl:{a}:r:x".to_string()],
        "one record, under the provider's hash tag"
    );
}

#[tokio::test]
async fn a_breaker_opened_through_two_processes_blocks_the_third_in_redis() {
    let server = RedisServer::must_start();
    let open = || -> Arc<dyn HealthStore> { Arc::new(store(&server)) };
    shared_breakers::a_breaker_opened_through_two_processes_blocks_the_third([
        open(),
        open(),
        open(),
    ])
    .await;
}

#[tokio::test]
async fn a_store_that_is_gone_or_frozen_answers_an_error_within_the_deadline() {
    let mut server = RedisServer::must_start();
    let s = store(&server);
    let r = route("a/x");
    s.ping().await.unwrap();

    // Frozen: the socket is open, nothing answers.
    server.signal("STOP").unwrap();
    let sw = Stopwatch::start();
    let err = s.get(&r).await.unwrap_err().to_string();
    let took = sw.elapsed();
    server.signal("CONT").unwrap();
    assert!(
        err.contains("no answer within 150 ms") || err.contains("timed out"),
        "{err}"
    );
    // Bounded: printed, not asserted as a speed target beyond "no hang".
    println!("frozen store answered an error after {took:?}");
    assert!(took < Duration::from_secs(5), "hung for {took:?}");

    // Gone: connection refused, at once.
    server.kill();
    let sw = Stopwatch::start();
    let err = s
        .apply(&r, Transition::Succeeded)
        .await
        .unwrap_err()
        .to_string();
    println!(
        "dead store answered an error after {:?}: {err}",
        sw.elapsed()
    );
    assert!(sw.elapsed() < Duration::from_secs(5));
    assert!(err.contains("redis://127.0.0.1:"), "names the store: {err}");
}

#[tokio::test]
async fn while_the_store_is_gone_health_follows_the_local_view_counted_and_logged_once() {
    let mut server = RedisServer::must_start();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    let fb = FallbackStore::new(Arc::new(store(&server)), "test-store")
        .with_log(Arc::new(move |l| sink.lock().unwrap().push(l.to_string())));
    let r = route("a/x");
    let cool = Transition::Cool {
        until: 5_000,
        reason: "rate_limited".into(),
    };
    fb.apply(&r, cool).await.unwrap();
    assert_eq!(fb.degraded(), 0);
    server.kill();
    // The last shared view survives: still cooling.
    assert_eq!(fb.get(&r).await.unwrap().until(), Some(5_000));
    let retire = Transition::Retire {
        reason: "auth".into(),
    };
    fb.apply(&r, retire).await.unwrap();
    for _ in 0..20 {
        // This process's own transition holds in its own view.
        assert!(matches!(fb.get(&r).await.unwrap(), Health::Retired { .. }));
    }
    assert_eq!(
        fb.degraded(),
        22,
        "every decision on the local view is counted"
    );
    assert_eq!(fb.episodes(), 1);
    let logged = lines.lock().unwrap().clone();
    assert_eq!(
        logged.len(),
        1,
        "logged once per episode, not per call: {logged:?}"
    );
    assert!(logged[0].contains("this process's own view"), "{logged:?}");
}

/// The Responses API's conversations in Redis keep the bounds a memory or SQLite store
/// keeps: `max` (the oldest goes, by one script on one node), `max_bytes`, a delete.
/// Expiry is Redis's own (`PX`): a stored conversation carries its TTL.
#[tokio::test]
async fn redis_conversations_keep_max_max_bytes_and_a_ttl() {
    use poolctl::store::conversations::{Conversations, Limits, PutError, Stored};
    let server = RedisServer::must_start();
    let limits = Limits {
        ttl_ms: 60_000,
        max_bytes: 4_096,
        max: 2,
        max_total_bytes: 1 << 20,
    };
    let c = Conversations::redis(
        RedisStore::open(&server.url(), Duration::from_secs(2)).unwrap(),
        limits,
    );
    let stored = |id: &str, text: &str| Stored {
        id: id.into(),
        route: "openai/gpt-4o".into(),
        items: vec![serde_json::json!({"role": "user", "content": text})],
        output_len: 0,
        origins: vec![],
        response: serde_json::json!({"id": id}),
        size: 0,
    };
    let now = poolctl::core::clock::wall_now_ms();
    for (i, id) in ["resp_1", "resp_2", "resp_3"].iter().enumerate() {
        c.put(&stored(id, "hi"), now + i as i64).await.unwrap();
    }
    assert!(
        c.get("resp_1", now).await.unwrap().is_none(),
        "past max, the oldest goes"
    );
    let mut got = c.get("resp_3", now).await.unwrap().unwrap();
    got.size = 0;
    assert_eq!(got, stored("resp_3", "hi"));
    let ttl: i64 = redis_cli(&server, &["PTTL", "poolctl:resp:{responses}:resp_3"])
        .parse()
        .unwrap();
    assert!((1..=60_000).contains(&ttl), "{ttl}");
    assert!(matches!(
        c.put(&stored("resp_big", &"x".repeat(5_000)), now).await,
        Err(PutError::TooLarge { .. })
    ));
    assert!(c.delete("resp_3").await.unwrap());
    assert!(c.get("resp_3", now).await.unwrap().is_none());
    assert_eq!(
        redis_cli(&server, &["ZCARD", "poolctl:resp:{responses}"]),
        "1"
    );
}

fn redis_cli(server: &RedisServer, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &server.port().to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs (Debian package redis-tools)");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
