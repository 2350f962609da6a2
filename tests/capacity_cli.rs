//! `poolctl capacity` as a process against the test's own Redis: usage recorded per
//! minute by settles (through the library, as a fleet's routers do) comes back as
//! utilisation of each contract; a hot bucket and a tier whose backups cannot absorb the
//! primary warn and exit 1; a quiet pool exits 0.

use poolctl::admission::{Cost, Dimension, Priority, Spent};
use poolctl::clock::wall_now_ms;
use poolctl::harness::redis_server::RedisServer;
use poolctl::store::redis_buckets::RedisBuckets;
use poolctl::store::RedisStore;
use poolctl::vocab::Route;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

fn pool(dir: &Path, url: &str) -> std::path::PathBuf {
    let yaml = format!(
        "providers:\n  openai:\n    base_url: http://127.0.0.1:9/v1\n    api_key_env: K\n  groq:\n    base_url: http://127.0.0.1:9/v1\n    api_key_env: K\n\
tiers:\n  high: [openai/gpt-4o, groq/llama]\n\
limits:\n  openai/gpt-4o: {{ rpm: 100, tpm: 100000 }}\n  groq: {{ rpm: 30 }}\n\
headroom: 0.9\nstate: {url}\n"
    );
    let path = dir.join("pool.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

async fn capacity(config: &Path) -> (Option<i32>, Value, String) {
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(["capacity", "--json", "--window", "30m", "--config"])
        .arg(config)
        .output()
        .await
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {text}"));
    (o.status.code(), v, text)
}

/// `n` requests through `route`'s buckets in each of the last `minutes` minutes, each
/// spending `tokens`.
async fn spend(b: &RedisBuckets, route: &str, minutes: i64, n: usize, tokens: u64) {
    let r = Route::parse(route).unwrap();
    let c = b.cover(&r).unwrap();
    for i in (0..minutes).rev() {
        for _ in 0..n {
            let now = wall_now_ms() - i * 60_000;
            let held = b
                .acquire(
                    &c,
                    Cost {
                        input_tokens: tokens,
                        output_tokens: 0,
                    },
                    Priority::Interactive,
                    now,
                )
                .await
                .unwrap()
                .unwrap();
            let spent = Spent::Reported {
                input_tokens: tokens,
                output_tokens: 0,
            };
            b.settle(&held, spent, &[], now).await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn capacity_reports_utilisation_and_the_failover_ceiling_from_redis() {
    let server = RedisServer::must_start();
    let dir = tempfile::tempdir().unwrap();
    let config = pool(dir.path(), &server.url());

    // Quiet: nothing spent, no warning.
    let (code, v, text) = capacity(&config).await;
    assert_eq!(v["window_ms"], 1_800_000);
    let gpt_rpm = v["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["bucket"] == "openai/gpt-4o" && b["dimension"] == "rpm")
        .unwrap()
        .clone();
    assert_eq!(gpt_rpm["contract"], 100);
    assert_eq!(gpt_rpm["capacity"], 90.0);
    assert_eq!(gpt_rpm["utilisation_pct_now"], 0.0);
    for k in [
        "utilisation_pct_p95",
        "slope_pct_per_hour",
        "shed",
        "provider_limit",
        "warnings",
    ] {
        assert!(gpt_rpm.get(k).is_some(), "missing {k}: {gpt_rpm}");
    }
    // The primary carries nothing yet: the ceiling holds.
    assert_eq!(v["tiers"][0]["ceiling_holds"], true, "{text}");
    assert_eq!(code, Some(0), "{text}");

    // 80 requests a minute on gpt-4o for the whole window: 80 % of its rpm contract at
    // the p95; groq has 30 rpm free, which cannot absorb 80.
    let store = RedisStore::open(&server.url(), Duration::from_millis(500)).unwrap();
    let cfg = poolctl::config::PoolConfig::load(&config)
        .unwrap()
        .admission();
    let b = RedisBuckets::new(store, &cfg);
    spend(&b, "openai/gpt-4o", 30, 80, 1_000).await;
    let (code, v, text) = capacity(&config).await;
    assert_eq!(code, Some(1), "{text}");
    let find = |bucket: &str, dim: &str| {
        v["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["bucket"] == bucket && b["dimension"] == dim)
            .unwrap()
            .clone()
    };
    assert_eq!(
        find("openai/gpt-4o", "rpm")["utilisation_pct_now"],
        80.0,
        "{text}"
    );
    assert_eq!(
        find("openai/gpt-4o", "rpm")["utilisation_pct_p95"],
        80.0,
        "{text}"
    );
    assert_eq!(
        find("openai/gpt-4o", "rpm")["slope_pct_per_hour"],
        0.0,
        "{text}"
    );
    let hot = find("openai/gpt-4o", "rpm")["warnings"].to_string();
    assert!(hot.contains("at or above 70"), "{hot}");
    assert_eq!(
        find("openai/gpt-4o", "tpm")["utilisation_pct_now"],
        80.0,
        "{text}"
    );
    assert_eq!(find("groq", "rpm")["utilisation_pct_now"], 0.0);
    let tier = &v["tiers"][0];
    assert_eq!(tier["primary"], "openai/gpt-4o");
    assert_eq!(tier["ceiling_holds"], false, "{text}");
    let rpm = tier["dimensions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["dimension"] == "rpm")
        .unwrap();
    assert_eq!(rpm["backups_free"], 30.0);
    assert_eq!(rpm["primary_load_p95"], 80.0);
    assert!(
        v["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("backups absorb 30 of")),
        "{text}"
    );
    let _ = Dimension::Rpm;
}

#[tokio::test(flavor = "multi_thread")]
async fn capacity_on_an_sqlite_state_says_where_usage_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let config = pool(dir.path(), "state.db");
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(["capacity", "--config"])
        .arg(&config)
        .output()
        .await
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("redis://"));
}
