//! Admission in one process: acquire + settle pairs on the in-process buckets.
//! Targets (issue 10): at least 5 million pairs per second on one thread; under 8
//! threads on one bucket, the figure and the contention are reported.
//!
//! `cargo bench --bench admission`

use criterion::{criterion_group, criterion_main, Criterion};
use poolctl::admission::bucket::{Cost, Limits, Spent};
use poolctl::admission::buckets::{AdmissionConfig, Buckets};
use poolctl::core::vocab::Priority;
use poolctl::core::vocab::Route;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn buckets() -> (Buckets, poolctl::admission::buckets::Cover) {
    let mut limits = std::collections::BTreeMap::new();
    // Contracts large enough that the bench never runs a bucket dry: what is measured
    // is the admission path, not refusals.
    limits.insert(
        "openai/gpt-4o".to_string(),
        Limits {
            rpm: Some(u64::MAX / 4),
            tpm: Some(u64::MAX / 4),
            ..Default::default()
        },
    );
    limits.insert(
        "openai".to_string(),
        Limits {
            rpm: Some(u64::MAX / 4),
            ..Default::default()
        },
    );
    let cfg = AdmissionConfig {
        limits,
        ..Default::default()
    };
    let b = Buckets::new(&cfg, 0);
    let cover = b.cover(&Route::parse("openai/gpt-4o").unwrap()).unwrap();
    (b, cover)
}

const COST: Cost = Cost {
    input_tokens: 500,
    output_tokens: 500,
};
const USED: Spent = Spent::Reported {
    input_tokens: 500,
    output_tokens: 20,
};

fn pair(b: &Buckets, cover: &poolctl::admission::buckets::Cover, now: i64) {
    let r = b
        .acquire(cover, COST, Priority::Interactive, now)
        .expect("the bench buckets never run dry");
    b.settle(r, USED, &[], now);
}

fn one_thread(c: &mut Criterion) {
    let (b, cover) = buckets();
    let mut now = 0i64;
    c.bench_function("acquire+settle, 3 buckets, one thread", |bench| {
        bench.iter(|| {
            now += 1;
            pair(&b, &cover, now)
        })
    });
}

/// Pairs per second from `threads` threads on one bucket group for `ms` of real time.
#[allow(clippy::disallowed_methods)] // a throughput figure is real time by definition
fn throughput(threads: usize, ms: u64) -> f64 {
    let (b, cover) = buckets();
    let b = Arc::new(b);
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let start = std::time::Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (b, cover, done, stop) = (b.clone(), cover.clone(), done.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        pair(&b, &cover, n as i64);
                        n += 1;
                    }
                }
                done.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(ms));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().expect("bench thread");
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn contention(_c: &mut Criterion) {
    let single = throughput(1, 1_000);
    let eight = throughput(8, 1_000);
    println!();
    println!(
        "admission: acquire+settle pairs per second (3 buckets per route, one lock per provider)"
    );
    println!(
        "  1 thread : {:>12.0} pairs/s   (target >= 5,000,000)",
        single
    );
    println!(
        "  8 threads: {:>12.0} pairs/s   on one bucket group, {:.2}x the one-thread figure (contention)",
        eight,
        eight / single
    );
}

criterion_group!(benches, one_thread, contention);
criterion_main!(benches);
