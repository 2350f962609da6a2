//! Shared admission buckets in Redis, on loopback, from 4 processes (this machine's 2
//! cores shared with Redis): acquire+settle pairs per second in total, over-admission on
//! a bucket that binds (admissions against capacity + refill over the burst, computed),
//! and the latency one acquire+settle adds against the in-process buckets. The
//! throughput is measured side by side on one node, a 3-master Redis Cluster
//! (`redis+cluster://`) and one TLS node (`rediss://`, a throwaway CA), in one run.
//!
//!   cargo bench --bench redis_buckets
//!
//! The bench starts its own `redis-server`s on free loopback ports (the cluster with
//! `redis-cli --cluster create`, package redis-tools), and runs its workers
//! as copies of this binary (`POOLCTL_BENCH_WORKER` set), so they are real processes with
//! their own connections.

use poolctl::admission::bucket::{Cost, Limits, Spent};
use poolctl::admission::buckets::{AdmissionConfig, Buckets};
use poolctl::core::clock::{wall_now_ms, Stopwatch};
use poolctl::core::vocab::Priority;
use poolctl::core::vocab::Route;
use poolctl::harness::redis_server::{RedisCluster, RedisServer, TestCa};
use poolctl::store::redis::StateTls;
use poolctl::store::redis_buckets::RedisBuckets;
use poolctl::store::RedisStore;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const PROCESSES: usize = 4;
/// Calls in flight per process (one multiplexed connection each).
const IN_FLIGHT: usize = 32;
const BURST_MS: u64 = 3_000;
/// The binding bucket: rpm contract, headroom 1, so capacity = contract and the refill
/// is contract / 60 000 per ms.
const TIGHT_RPM: u64 = 6_000;

fn config(rpm: u64) -> AdmissionConfig {
    let mut limits = BTreeMap::new();
    limits.insert(
        "bench/model".to_string(),
        Limits {
            rpm: Some(rpm),
            tpm: Some(rpm * 1_000),
            ..Limits::default()
        },
    );
    AdmissionConfig {
        limits,
        headroom: 1.0,
        interactive_floor: 0.2,
    }
}

fn cost() -> Cost {
    Cost {
        input_tokens: 200,
        output_tokens: 300,
    }
}

fn spent() -> Spent {
    Spent::Reported {
        input_tokens: 200,
        output_tokens: 40,
    }
}

/// A worker: acquire+settle for BURST_MS; prints `pairs admitted refused first last`.
/// `ca`: the CA file a TLS store is trusted by.
fn worker(url: &str, rpm: u64, ca: Option<&str>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tls = ca.map(|ca| StateTls {
            ca_file: Some(ca.into()),
            ..StateTls::default()
        });
        let store = RedisStore::open_with(url, tls.as_ref(), Duration::from_millis(1_000)).unwrap();
        let b = Arc::new(RedisBuckets::new(store, &config(rpm)));
        let route = Route::parse("bench/model").unwrap();
        let cover = b.cover(&route).unwrap();
        let admitted = Arc::new(AtomicU64::new(0));
        let refused = Arc::new(AtomicU64::new(0));
        let first = wall_now_ms();
        let sw = Stopwatch::start();
        let mut tasks = Vec::new();
        for _ in 0..IN_FLIGHT {
            let (b, cover) = (b.clone(), cover.clone());
            let (admitted, refused) = (admitted.clone(), refused.clone());
            tasks.push(tokio::spawn(async move {
                while sw.elapsed_ms() < BURST_MS {
                    let now = wall_now_ms();
                    match b.acquire(&cover, cost(), Priority::Interactive, now).await {
                        Ok(Ok(r)) => {
                            admitted.fetch_add(1, Ordering::Relaxed);
                            b.settle(&r, spent(), &[], wall_now_ms()).await.unwrap();
                        }
                        Ok(Err(_)) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let last = wall_now_ms();
        let a = admitted.load(Ordering::Relaxed);
        let r = refused.load(Ordering::Relaxed);
        println!("{a} {r} {first} {last}");
    });
}

/// Runs PROCESSES workers at once; (admitted, refused, first instant, last instant).
fn fleet(url: &str, rpm: u64, ca: Option<&str>) -> (u64, u64, i64, i64) {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .env(
                    "POOLCTL_BENCH_WORKER",
                    format!("{url} {rpm} {}", ca.unwrap_or("-")),
                )
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let (mut a, mut r, mut first, mut last) = (0, 0, i64::MAX, i64::MIN);
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "a worker failed");
        let text = String::from_utf8_lossy(&out.stdout);
        let f: Vec<i64> = text
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        a += f[0] as u64;
        r += f[1] as u64;
        first = first.min(f[2]);
        last = last.max(f[3]);
    }
    (a, r, first, last)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn main() {
    if let Ok(spec) = std::env::var("POOLCTL_BENCH_WORKER") {
        let f: Vec<&str> = spec.split(' ').collect();
        let ca = (f[2] != "-").then_some(f[2]);
        worker(f[0], f[1].parse().unwrap(), ca);
        return;
    }
    let server = RedisServer::must_start();
    let url = server.url();
    println!("redis_buckets: {PROCESSES} processes × {IN_FLIGHT} in flight, {BURST_MS} ms bursts, redis-server on 127.0.0.1:{}", server.port());

    // 1. Throughput: a bucket that never binds, so every acquire is a pair; on one
    //    node, a cluster (the bucket's provider on one of its masters, reached through
    //    the slot map) and a TLS node.
    let ca = TestCa::generate().unwrap();
    let ca_file = ca.ca_file().display().to_string();
    let cluster = RedisCluster::must_start(None);
    let tls = RedisServer::start_tls(&ca, false).unwrap();
    let mut row = Vec::new();
    for (name, url, ca) in [
        ("one node", url.clone(), None),
        ("cluster (3 masters)", cluster.url(), None),
        ("TLS node", tls.url(), Some(ca_file.as_str())),
    ] {
        let (a, r, first, last) = fleet(&url, 1_000_000_000, ca);
        let secs = (last - first) as f64 / 1_000.0;
        println!(
            "throughput, {name}: {a} acquire+settle pairs in {secs:.2} s = {:.0} pairs/s in total ({r} refused)",
            a as f64 / secs
        );
        row.push(format!("{name} {:.0}", a as f64 / secs));
    }
    println!("acquire+settle pairs/s, side by side: {}", row.join(" · "));
    drop((cluster, tls));

    // 2. Over-admission: a bucket that binds. Everything admitted between the first and
    //    the last instant must fit in the capacity plus the refill over that span.
    let (a, r, first, last) = fleet(&url.replace("/0", "/1"), TIGHT_RPM, None);
    let span = (last - first) as f64;
    let bound = TIGHT_RPM as f64 + span * TIGHT_RPM as f64 / 60_000.0;
    let over = a as f64 - bound.floor();
    println!(
        "binding bucket (rpm {TIGHT_RPM}): {a} admitted, {r} refused over {span:.0} ms; bound capacity + refill = {bound:.1}; over-admission {}",
        over.max(0.0)
    );
    assert!(over <= 0.0, "over-admitted by {over}");

    // 3. Added latency per request: one acquire+settle, sequential, in-process vs Redis.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let n = 5_000;
    let route = Route::parse("bench/model").unwrap();
    let local = Buckets::new(&config(1_000_000_000), wall_now_ms());
    let lc = local.cover(&route).unwrap();
    let mut l = Vec::with_capacity(n);
    for _ in 0..n {
        let sw = Stopwatch::start();
        let res = local
            .acquire(&lc, cost(), Priority::Interactive, wall_now_ms())
            .unwrap();
        local.settle(res, spent(), &[], wall_now_ms());
        l.push(sw.elapsed());
    }
    let _rt = rt.enter();
    let store = RedisStore::open(&url.replace("/0", "/2"), Duration::from_millis(1_000)).unwrap();
    let shared = RedisBuckets::new(store, &config(1_000_000_000));
    let sc = shared.cover(&route).unwrap();
    let mut s = Vec::with_capacity(n);
    rt.block_on(async {
        for _ in 0..n {
            let sw = Stopwatch::start();
            let res = shared
                .acquire(&sc, cost(), Priority::Interactive, wall_now_ms())
                .await
                .unwrap()
                .unwrap();
            shared
                .settle(&res, spent(), &[], wall_now_ms())
                .await
                .unwrap();
            s.push(sw.elapsed());
        }
    });
    l.sort();
    s.sort();
    println!(
        "latency of one acquire+settle: in-process p50 {:?} p99 {:?}; Redis p50 {:?} p99 {:?}; added per request p50 {:?}",
        percentile(&l, 0.5),
        percentile(&l, 0.99),
        percentile(&s, 0.5),
        percentile(&s, 0.99),
        percentile(&s, 0.5).saturating_sub(percentile(&l, 0.5))
    );
}
