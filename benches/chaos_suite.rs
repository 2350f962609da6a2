//! The chaos suite as a benchmark: every scenario under `scenarios/` repeated until
//! 1,000 scenario runs, through the same runner `poolctl chaos` uses. Prints the total
//! wall time, runs per second, and the slowest single scenario (target: 1,000 runs in
//! 10 s or less on 2 cores, no scenario over 100 ms whatever its Retry-After).
//!
//! `cargo bench --bench chaos_suite [-- RUNS [JOBS]]`

use poolctl::core::clock::Stopwatch;
use poolctl::harness::suite::{load_all, run_all};
use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let runs: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let jobs: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let scenarios = load_all(&[dir]).unwrap_or_else(|errors| {
        for e in errors {
            eprintln!("error: {e}");
        }
        std::process::exit(2);
    });
    let batch: Vec<_> = scenarios.iter().cycle().take(runs).cloned().collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();

    let sw = Stopwatch::start();
    let results = rt.block_on(run_all(batch, jobs, &|_| {}));
    let total = sw.elapsed().as_secs_f64();

    let failed = results.iter().filter(|r| !r.passed).count();
    let mut walls: Vec<f64> = results.iter().map(|r| r.wall_ms).collect();
    walls.sort_by(f64::total_cmp);
    let pct = |p: f64| walls[((walls.len() as f64 - 1.0) * p).round() as usize];
    let slowest = results
        .iter()
        .max_by(|a, b| a.wall_ms.total_cmp(&b.wall_ms))
        .expect("at least one run");
    println!(
        "chaos suite: {} scenarios, {} runs, {} at once",
        scenarios.len(),
        results.len(),
        jobs
    );
    println!("  total wall time      {total:.2} s   (target <= 10 s)");
    println!("  runs per second      {:.0}", results.len() as f64 / total);
    println!("  per-scenario wall    p50 {:.1} ms   p99 {:.1} ms   max {:.1} ms   (target max <= 100 ms)", pct(0.5), pct(0.99), slowest.wall_ms);
    println!("  slowest scenario     {}", slowest.name);
    println!("  failed runs          {failed}");
    if failed > 0 {
        std::process::exit(1);
    }
}
