//! The fleet's buckets in a real Redis (the test's own `redis-server`): the acquire and
//! settle scripts follow the in-process `Buckets` exactly (same admissions, same waits,
//! same levels, bit for bit), each touches only its provider's keys, and a settle counts
//! the minute's usage.

use poolctl::admission::bucket::{Cost, Dimension, Limits, Spent};
use poolctl::admission::buckets::{AdmissionConfig, Buckets};
use poolctl::core::vocab::Priority;
use poolctl::core::vocab::Route;
use poolctl::harness::redis_server::RedisServer;
use poolctl::store::redis_buckets::{field, RedisBuckets};
use poolctl::store::RedisStore;
use std::collections::BTreeMap;
use std::time::Duration;

fn config() -> AdmissionConfig {
    let mut limits = BTreeMap::new();
    limits.insert(
        "openai/gpt".to_string(),
        Limits {
            rpm: Some(20),
            tpm: Some(40_000),
            ..Limits::default()
        },
    );
    limits.insert(
        "anthropic".to_string(),
        Limits {
            rpm: Some(12),
            itpm: Some(9_000),
            otpm: Some(3_000),
            ..Limits::default()
        },
    );
    limits.insert(
        "anthropic/opus".to_string(),
        Limits {
            rpm: Some(5),
            ..Limits::default()
        },
    );
    AdmissionConfig {
        limits,
        headroom: 0.9,
        interactive_floor: 0.2,
    }
}

#[tokio::test]
async fn acquire_and_settle_scripts_follow_the_in_process_buckets_exactly() {
    let server = RedisServer::must_start();
    let store = RedisStore::open(&server.url(), Duration::from_millis(500)).unwrap();
    let cfg = config();
    let t0 = 1_700_000_000_000_i64;
    let local = Buckets::new(&cfg, t0);
    let shared = RedisBuckets::new(store, &cfg);
    let routes = [
        Route::parse("openai/gpt").unwrap(),
        Route::parse("anthropic/opus").unwrap(),
        Route::parse("anthropic/haiku").unwrap(),
    ];
    // Touch every bucket at t0 so both start full at the same instant.
    for r in &routes {
        let c = shared.cover(r).unwrap();
        let res = shared
            .acquire(&c, Cost::default(), Priority::Interactive, t0)
            .await
            .unwrap()
            .unwrap();
        shared.settle(&res, Spent::Nothing, &[], t0).await.unwrap();
    }
    let mut rng = fastrand::Rng::with_seed(4);
    let mut now = t0;
    let (mut admitted, mut refused, mut never) = (0, 0, 0);
    let mut held = Vec::new();
    for step in 0..1_500 {
        now += rng.i64(0..900);
        let r = &routes[rng.usize(..routes.len())];
        let cost = Cost {
            input_tokens: rng.u64(0..2_500),
            output_tokens: rng.u64(0..3_000),
        };
        let priority = Priority::ALL[rng.usize(..4)];
        let lc = local.cover(r).unwrap();
        let sc = shared.cover(r).unwrap();
        let want = local.acquire(&lc, cost, priority, now);
        let got = shared.acquire(&sc, cost, priority, now).await.unwrap();
        match (want, got) {
            (Ok(lr), Ok(sr)) => {
                admitted += 1;
                held.push((lr, sr));
            }
            (Err(w), Err(g)) => {
                assert_eq!(g, w, "step {step}: the same wait");
                if w.wait_ms.is_none() {
                    never += 1;
                } else {
                    refused += 1;
                }
            }
            (w, g) => panic!("step {step}: in-process {w:?}, Redis {g:?}"),
        }
        // Settle some of what is held, in any order.
        while !held.is_empty() && rng.u8(..3) > 0 {
            let (lr, sr) = held.swap_remove(rng.usize(..held.len()));
            let spent = match rng.u8(..3) {
                0 => Spent::Nothing,
                1 => Spent::Unreported,
                _ => Spent::Reported {
                    input_tokens: rng.u64(0..3_000),
                    output_tokens: rng.u64(0..2_000),
                },
            };
            let remaining: Vec<(Dimension, u64)> = match rng.u8(..4) {
                0 => vec![(Dimension::Rpm, rng.u64(0..20))],
                1 => vec![
                    (Dimension::Tpm, rng.u64(0..50_000)),
                    (Dimension::Itpm, rng.u64(0..9_000)),
                ],
                _ => vec![],
            };
            local.settle(lr, spent, &remaining, now);
            shared.settle(&sr, spent, &remaining, now).await.unwrap();
        }
        for r in &routes {
            let sc = shared.cover(r).unwrap();
            let stored = shared.stored(&sc).await.unwrap();
            for ((name, dim), s) in names(r, &cfg).into_iter().zip(stored) {
                let (level, at) = s.expect("touched at t0");
                let want = local.level(&name, dim, now).unwrap();
                let cap = local
                    .snapshot(now)
                    .into_iter()
                    .find(|v| v.bucket == name && v.dimension == dim)
                    .unwrap()
                    .capacity;
                let b = poolctl::admission::bucket::Bucket {
                    capacity: cap,
                    level,
                    at,
                };
                assert_eq!(b.level_at(now), want, "step {step}: {name} {dim:?}");
            }
        }
    }
    println!("admitted {admitted}, refused {refused} (with a wait), {never} never fit");
    assert!(
        admitted > 100 && refused > 100 && never > 0,
        "every branch was exercised"
    );
}

/// The bucket names and dimensions that cover `r`, in the order the cover lists them.
fn names(r: &Route, cfg: &AdmissionConfig) -> Vec<(String, Dimension)> {
    cfg.limits
        .iter()
        .filter(|(n, _)| *n == r.as_str() || *n == r.provider())
        .flat_map(|(n, l)| {
            l.contracts()
                .map(|(d, _)| (n.clone(), d))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test]
async fn a_settle_counts_the_minutes_usage_under_the_providers_hash_tag() {
    let server = RedisServer::must_start();
    let store = RedisStore::open(&server.url(), Duration::from_millis(500)).unwrap();
    let shared = RedisBuckets::new(store, &config());
    let r = Route::parse("openai/gpt").unwrap();
    let c = shared.cover(&r).unwrap();
    let now = 1_700_000_030_000_i64;
    let cost = Cost {
        input_tokens: 100,
        output_tokens: 50,
    };
    for _ in 0..3 {
        let res = shared
            .acquire(&c, cost, Priority::Interactive, now)
            .await
            .unwrap()
            .unwrap();
        let spent = Spent::Reported {
            input_tokens: 100,
            output_tokens: 7,
        };
        shared.settle(&res, spent, &[], now).await.unwrap();
    }
    let minute = now / 60_000;
    let mut usage = shared.usage("openai", minute - 1, minute).await.unwrap();
    usage.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(
        usage,
        vec![
            (minute, field("openai/gpt", Dimension::Rpm), 3.0),
            (minute, field("openai/gpt", Dimension::Tpm), 321.0),
        ]
    );
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            "poolctl:{openai}:buckets".to_string(),
            format!("poolctl:{{openai}}:usage:{minute}")
        ]
    );
}

#[tokio::test]
async fn a_bucket_admits_down_to_exactly_zero_and_not_one_past() {
    let server = RedisServer::must_start();
    let store = RedisStore::open(&server.url(), Duration::from_millis(500)).unwrap();
    let shared = RedisBuckets::new(store, &config());
    let c = shared.cover(&Route::parse("openai/gpt").unwrap()).unwrap();
    let now = 1_700_000_000_000_i64;
    let one = Cost::default();
    // rpm 20 × headroom 0.9: 18 requests at one instant, the 18th leaving exactly 0.
    for i in 0..18 {
        let got = shared
            .acquire(&c, one, Priority::Interactive, now)
            .await
            .unwrap();
        assert!(got.is_ok(), "request {} of 18 refused", i + 1);
    }
    let got = shared
        .acquire(&c, one, Priority::Interactive, now)
        .await
        .unwrap();
    // One request refills in 60 000 / 18 ms.
    assert_eq!(got.unwrap_err().wait_ms, Some(3_334));
}

#[tokio::test]
async fn redis_sheds_count_per_minute_so_a_window_holds_only_its_own() {
    let server = RedisServer::must_start();
    let store = RedisStore::open(&server.url(), Duration::from_millis(500)).unwrap();
    let shared = RedisBuckets::new(store, &config());
    let gpt = Route::parse("openai/gpt").unwrap();
    let minute = 28_333_333_i64;
    let at = |m: i64| m * 60_000 + 17_000;
    // Two hours ago, a burst of background sheds; in the last minutes, a few others.
    for _ in 0..5 {
        shared
            .record_shed(Priority::Background, &gpt, at(minute - 120))
            .await
            .unwrap();
    }
    for m in [minute - 1, minute] {
        shared
            .record_shed(Priority::Speculative, &gpt, at(m))
            .await
            .unwrap();
    }
    shared
        .record_shed(Priority::Background, &gpt, at(minute))
        .await
        .unwrap();
    let recent = shared.sheds("openai", minute - 29, minute).await.unwrap();
    assert_eq!(
        recent,
        vec![
            (Priority::Background, "openai/gpt".to_string(), 1),
            (Priority::Speculative, "openai/gpt".to_string(), 2),
        ]
    );
    let all = shared.sheds("openai", minute - 180, minute).await.unwrap();
    assert_eq!(
        all,
        vec![
            (Priority::Background, "openai/gpt".to_string(), 6),
            (Priority::Speculative, "openai/gpt".to_string(), 2),
        ]
    );
    // Each minute's counters expire as usage does: none is kept for ever.
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let ttl: i64 = redis::cmd("TTL")
        .arg(format!("poolctl:{{openai}}:shed:{}", minute - 120))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 0, "ttl {ttl}");
}

/// While Redis cannot answer, the local share admits; once it answers again, what was
/// spent and shed meanwhile reaches its per-minute counters (capacity reads the fleet's
/// real use, not only what went through Redis).
#[tokio::test]
async fn what_the_local_share_spent_and_shed_during_an_outage_reaches_redis_once_it_answers() {
    use poolctl::store::shared_buckets::SharedBuckets;
    use poolctl::store::OnStoreError;
    let server = RedisServer::must_start();
    let store = RedisStore::open(&server.url(), Duration::from_millis(150)).unwrap();
    let cfg = config();
    let now = 1_700_000_030_000_i64;
    let minute = now / 60_000;
    let shared = SharedBuckets::new(
        RedisBuckets::new(store, &cfg),
        &cfg,
        OnStoreError::LocalShare,
        2,
        now,
    )
    .with_log(std::sync::Arc::new(|_: &str| {}));
    let gpt = Route::parse("openai/gpt").unwrap();
    let cost = Cost {
        input_tokens: 100,
        output_tokens: 50,
    };
    let spent = Spent::Reported {
        input_tokens: 100,
        output_tokens: 7,
    };
    // Admitted through Redis before the outage; settled after it.
    let before = shared
        .acquire(&gpt, cost, Priority::Interactive, now)
        .await
        .unwrap();
    server.signal("STOP").unwrap();
    // Redis is silent: the local share (1/2 of each contract) admits one, and a shed is
    // counted here only.
    let during = shared
        .acquire(&gpt, cost, Priority::Interactive, now)
        .await
        .unwrap();
    assert!(
        matches!(during, poolctl::store::shared_buckets::Hold::Local(_)),
        "{during:?}"
    );
    assert_eq!(shared.degraded(), 1);
    shared.settle(during, spent, &[], now).await;
    shared.record_shed(Priority::Background, &gpt, now).await;
    server.signal("CONT").unwrap();
    // The first call Redis answers ends the episode and carries the counts over.
    shared.settle(before, spent, &[], now).await;
    let store = RedisStore::open(&server.url(), Duration::from_millis(500)).unwrap();
    let reader = RedisBuckets::new(store, &cfg);
    let mut usage = reader.usage("openai", minute, minute).await.unwrap();
    usage.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(
        usage,
        vec![
            (minute, field("openai/gpt", Dimension::Rpm), 2.0),
            (minute, field("openai/gpt", Dimension::Tpm), 214.0),
        ],
        "one request through Redis, one on the local share"
    );
    assert_eq!(
        reader.sheds("openai", minute, minute).await.unwrap(),
        vec![(Priority::Background, "openai/gpt".to_string(), 1)]
    );
    // Carried over once: a later healthy call adds nothing more.
    let again = shared
        .acquire(&gpt, cost, Priority::Interactive, now)
        .await
        .unwrap();
    shared.settle(again, spent, &[], now).await;
    let usage = reader.usage("openai", minute, minute).await.unwrap();
    let rpm = usage
        .iter()
        .find(|u| u.1 == field("openai/gpt", Dimension::Rpm))
        .unwrap();
    assert_eq!(rpm.2, 3.0);
}
