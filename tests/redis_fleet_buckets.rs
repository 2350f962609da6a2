//! Four workers (each its own connection, its own local share) spend one bucket in a
//! real Redis through a bounded burst; `redis-server` is killed mid-burst. Admissions
//! while Redis lives never exceed capacity + refill over that time; after it dies, no
//! call hangs, every degraded decision is counted (and logged once per worker), and the
//! over-admission stays within the local_share bound (each worker's 1 / workers share),
//! computed and asserted. With `fail_closed`, nothing is admitted without Redis.

use poolctl::admission::bucket::{Cost, Limits, Spent};
use poolctl::admission::buckets::AdmissionConfig;
use poolctl::core::clock::Stopwatch;
use poolctl::core::vocab::Priority;
use poolctl::core::vocab::Route;
use poolctl::harness::redis_server::RedisServer;
use poolctl::store::redis_buckets::RedisBuckets;
use poolctl::store::shared_buckets::{Hold, SharedBuckets};
use poolctl::store::{OnStoreError, RedisStore};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WORKERS: u32 = 4;
const RPM: u64 = 400;
const STEP_MS: i64 = 50;
const STEPS: i64 = 200;
const KILL_AT: i64 = 100;
const TRIES_PER_STEP: usize = 3;

fn config() -> AdmissionConfig {
    let mut limits = BTreeMap::new();
    limits.insert(
        "p".to_string(),
        Limits {
            rpm: Some(RPM),
            ..Limits::default()
        },
    );
    AdmissionConfig {
        limits,
        headroom: 1.0,
        interactive_floor: 0.2,
    }
}

struct Run {
    before_kill: u64,
    after_kill: u64,
    degraded: Vec<u64>,
    logged: Vec<usize>,
}

async fn burst(on_error: OnStoreError) -> Run {
    let mut server = RedisServer::must_start();
    let t0 = 1_700_000_000_000_i64;
    let route = Route::parse("p/m").unwrap();
    let logs: Vec<Arc<Mutex<Vec<String>>>> = (0..WORKERS).map(|_| Arc::default()).collect();
    let fleet: Vec<SharedBuckets> = logs
        .iter()
        .map(|log| {
            let store = RedisStore::open(&server.url(), Duration::from_millis(150)).unwrap();
            let log = log.clone();
            SharedBuckets::new(
                RedisBuckets::new(store, &config()),
                &config(),
                on_error,
                WORKERS,
                t0,
            )
            .with_log(Arc::new(move |l| log.lock().unwrap().push(l.to_string())))
        })
        .collect();
    let (mut before_kill, mut after_kill) = (0, 0);
    for step in 0..STEPS {
        if step == KILL_AT {
            server.kill();
        }
        let now = t0 + step * STEP_MS;
        for w in &fleet {
            for _ in 0..TRIES_PER_STEP {
                let sw = Stopwatch::start();
                let got = w
                    .acquire(&route, Cost::default(), Priority::Interactive, now)
                    .await;
                assert!(sw.elapsed() < Duration::from_secs(2), "an acquire hung");
                if let Ok(held) = got {
                    assert!(!matches!(held, Hold::Unlimited));
                    if step < KILL_AT {
                        before_kill += 1;
                    } else {
                        after_kill += 1;
                    }
                    w.settle(held, Spent::Unreported, &[], now).await;
                }
            }
        }
    }
    Run {
        before_kill,
        after_kill,
        degraded: fleet.iter().map(|w| w.degraded()).collect(),
        logged: logs.iter().map(|l| l.lock().unwrap().len()).collect(),
    }
}

fn refill(ms: i64) -> f64 {
    ms as f64 * RPM as f64 / 60_000.0
}

#[tokio::test]
async fn a_fleet_burst_stays_in_one_budget_and_within_the_local_share_bound_when_redis_dies() {
    let run = burst(OnStoreError::LocalShare).await;
    let live_ms = (KILL_AT - 1) * STEP_MS;
    let shared_bound = RPM as f64 + refill(live_ms);
    println!(
        "admitted {} while Redis lived (bound {shared_bound:.1}); {} after it died",
        run.before_kill, run.after_kill
    );
    assert!(
        run.before_kill as f64 <= shared_bound,
        "over-admitted through Redis"
    );
    assert!(
        run.before_kill as f64 >= RPM as f64,
        "the burst did not even drain the bucket: it tested nothing"
    );
    // Without Redis each worker admits from its own share: capacity / workers to start,
    // plus its share of the refill. Over the whole burst the fleet stays within one
    // contract plus the local shares (one contract in all).
    let dead_ms = (STEPS - 1 - KILL_AT) * STEP_MS;
    let share = (RPM / u64::from(WORKERS)) as f64;
    let local_bound = f64::from(WORKERS) * (share + refill(dead_ms) / f64::from(WORKERS));
    println!(
        "admitted {} on local shares (bound {local_bound:.1})",
        run.after_kill
    );
    assert!(
        run.after_kill as f64 <= local_bound,
        "the local share multiplied the limit"
    );
    assert!(run.after_kill > 0, "local_share admitted nothing");
    let total_bound = shared_bound + local_bound;
    let over =
        (run.before_kill + run.after_kill) as f64 - (RPM as f64 + refill((STEPS - 1) * STEP_MS));
    println!(
        "over-admission against one budget: {over:.0} (local_share bound {:.0})",
        total_bound - RPM as f64 - refill((STEPS - 1) * STEP_MS)
    );
    // Every call after the kill was a degraded decision, and each worker logged once.
    let calls_after = ((STEPS - KILL_AT) as usize * TRIES_PER_STEP) as u64;
    for (d, l) in run.degraded.iter().zip(&run.logged) {
        assert!(
            *d >= calls_after,
            "degraded {d} < {calls_after} calls after the kill"
        );
        assert_eq!(*l, 1, "logged once per episode");
    }
}

#[tokio::test]
async fn with_fail_closed_nothing_is_admitted_without_redis() {
    let run = burst(OnStoreError::FailClosed).await;
    assert_eq!(run.after_kill, 0);
    assert!(run.before_kill >= RPM);
    assert!(run
        .degraded
        .iter()
        .all(|d| *d >= ((STEPS - KILL_AT) as u64) * TRIES_PER_STEP as u64));
}
