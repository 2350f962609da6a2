//! The fleet checks every shared store must pass, whatever the Redis is (one node, a
//! cluster, TLS): shared by tests/redis_cluster.rs and tests/redis_tls.rs, so each runs
//! the same real processes against its own Redis.
//!
//! - a route retired by one process's attempt, and one by an operator, are skipped by
//!   every other process; `status` reads both with their reasons; `restore` in one is
//!   used by the next; `capacity` reads the fleet's counters;
//! - breakers: opened through two store handles, they block the third;
//! - buckets: two handles spend one budget.
//!
//! The three providers' hash tags are chosen to fall in the three slot ranges that
//! `redis-cli --cluster create` gives three masters, so on a cluster every step crosses
//! nodes (MOVED would fail it without the cluster client).
#![allow(dead_code)]

#[path = "../support/shared_breakers.rs"]
pub mod shared_breakers;

use poolctl::admission::bucket::{Cost, Limits};
use poolctl::admission::buckets::AdmissionConfig;
use poolctl::core::vocab::{CallPath, Priority, Route, Wire};
use poolctl::harness::mock::{MockRoute, MockServer};
use poolctl::harness::scenario::{Body, Reply};
use poolctl::store::redis_buckets::RedisBuckets;
use poolctl::store::{HealthStore, RedisStore};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Output;
use std::sync::Arc;

const KEY_VAR: &str = "POOLCTL_TEST_KEY";
const SENTINEL_KEY: &str = "sk-SENTINEL-fleet-never-print-me";

/// Redis Cluster's slot of a key (CRC16/XMODEM of its hash tag, mod 16384).
pub fn slot(tag: &str) -> u16 {
    let mut crc: u16 = 0;
    for b in tag.bytes() {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16_384
}

/// Three provider names, one in each third of the slots (the ranges of three masters
/// created by `redis-cli --cluster create`: 0-5460, 5461-10922, 10923-16383).
pub fn providers() -> [String; 3] {
    let mut found: [Option<String>; 3] = [None, None, None];
    for i in 0.. {
        let name = format!("p{i}");
        let third = match slot(&name) {
            0..=5460 => 0,
            5461..=10922 => 1,
            _ => 2,
        };
        if found[third].is_none() {
            found[third] = Some(name);
        }
        if found.iter().all(Option::is_some) {
            break;
        }
    }
    found.map(|n| n.unwrap())
}

fn route(s: &str) -> Route {
    Route::parse(s).unwrap()
}

fn ok(text: &str) -> Reply {
    Reply::Ok {
        text: text.into(),
        headers: vec![],
        usage: None,
    }
}

fn model_not_exist() -> Reply {
    Reply::Status {
        status: 400,
        headers: vec![],
        body: Body::Json(
            json!({"code": "InvalidParameter", "message": "Model not exist.", "request_id": "x"}),
        ),
    }
}

async fn poolctl(config: &Path, args: &[&str]) -> Output {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env(KEY_VAR, SENTINEL_KEY)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(std::time::Duration::from_secs(60), run)
        .await
        .expect("poolctl finishes in time")
        .expect("poolctl runs")
}

/// Both streams; fails if the key or `secret` (the store's password) was printed.
fn text(o: &Output, secret: Option<&str>) -> String {
    let t = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!t.contains(SENTINEL_KEY), "the key leaked: {t}");
    if let Some(s) = secret {
        assert!(!t.contains(s), "the store's password leaked: {t}");
    }
    t
}

fn skipped(v: &Value) -> Vec<(String, String)> {
    v["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["route"].as_str().unwrap().to_string(),
                s["why"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Real `poolctl` processes on the store named by `state_yaml` (the `state:` line and
/// anything it needs, e.g. `state_tls:`): retire through one seen by the others,
/// `status`, `restore`, `capacity`. `secret`: a password that must never be printed.
pub async fn processes_share_health_and_counters(state_yaml: &str, secret: Option<&str>) {
    let [a, b, c] = providers();
    let (gone, live1, live2) = (
        format!("{a}/gone"),
        format!("{b}/live-1"),
        format!("{c}/live-2"),
    );
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        [
            (&gone, model_not_exist()),
            (&live1, ok("one")),
            (&live2, ok("two")),
        ]
        .into_iter()
        .map(|(r, reply)| MockRoute {
            route: route(r),
            wire: Wire::OpenAi,
            path: CallPath::Chat,
            replies: vec![reply],
            outage: None,
            record: false,
        })
        .collect(),
    )
    .await
    .unwrap();
    let mut yaml = String::from("providers:\n");
    for p in [&a, &b, &c] {
        yaml.push_str(&format!(
            "  {p}:\n    wire: openai\n    dialect: dashscope\n    base_url: {}\n    api_key_env: {KEY_VAR}\n",
            mock.base_url(p, Wire::OpenAi)
        ));
    }
    yaml.push_str(&format!(
        "tiers:\n  t:\n    - {gone}\n    - {live1}\n    - {live2}\n"
    ));
    yaml.push_str(&format!(
        "limits:\n  {live2}: {{ rpm: 100 }}\nheadroom: 1.0\n"
    ));
    // Generous: a TLS handshake or a cluster's slot map on a machine busy compiling.
    yaml.push_str(&format!("{state_yaml}\nstate_timeout_ms: 2000\n"));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pool.yaml");
    std::fs::write(&config, yaml).unwrap();
    let json_of = |o: &Output| -> Value {
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o, secret)))
    };

    // Process 1: its attempt retires `gone` (model_unavailable) in the store.
    let o = poolctl(&config, &["walk", "t", "--json"]).await;
    assert_eq!(
        json_of(&o)["served_by"],
        live1.as_str(),
        "{}",
        text(&o, secret)
    );
    assert_eq!(mock.calls(&route(&gone)), 1);

    // Process 2: an operator retires `live1`.
    let o = poolctl(&config, &["retire", &live1, "--reason", "incident 7"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o, secret));

    // Processes 3..5, at once: each skips both, and neither is called again.
    let walks: Vec<_> = (0..3)
        .map(|_| poolctl(&config, &["walk", "t", "--json"]))
        .collect();
    for o in futures_util::future::join_all(walks).await {
        let v = json_of(&o);
        assert_eq!(v["served_by"], live2.as_str(), "{}", text(&o, secret));
        assert_eq!(
            skipped(&v),
            vec![
                (gone.clone(), "retired".to_string()),
                (live1.clone(), "retired".to_string())
            ],
            "{}",
            text(&o, secret)
        );
        assert!(
            !text(&o, secret).contains("degraded"),
            "{}",
            text(&o, secret)
        );
    }
    assert_eq!(mock.calls(&route(&gone)), 1);
    assert_eq!(mock.calls(&route(&live1)), 1);
    assert_eq!(mock.calls(&route(&live2)), 3);

    // `status` reads both, with their reasons, from every node.
    let o = poolctl(&config, &["status", "--json"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o, secret));
    let v = json_of(&o);
    let state = |r: &str| {
        let row = v["routes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["route"] == r)
            .unwrap_or_else(|| panic!("no {r}: {v}"))
            .clone();
        (row["state"].clone(), row["reason"].clone())
    };
    assert_eq!(state(&gone), (json!("retired"), json!("model_unavailable")));
    assert_eq!(state(&live1), (json!("retired"), json!("incident 7")));

    // Restored through one process: the next walk, in another, uses it again.
    let o = poolctl(&config, &["restore", &live1]).await;
    assert!(
        text(&o, secret).contains("was retired (incident 7)"),
        "{}",
        text(&o, secret)
    );
    let o = poolctl(&config, &["walk", "t", "--json"]).await;
    assert_eq!(
        json_of(&o)["served_by"],
        live1.as_str(),
        "{}",
        text(&o, secret)
    );

    // `capacity` reads what the walks spent on live2's bucket from the store.
    let o = poolctl(&config, &["capacity", "--json", "--window", "2m"]).await;
    let t = text(&o, secret);
    assert_ne!(o.status.code(), Some(2), "{t}");
    let v = json_of(&o);
    let rpm = v["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["bucket"] == live2.as_str() && b["dimension"] == "rpm")
        .unwrap_or_else(|| panic!("no bucket: {t}"))
        .clone();
    assert!(
        rpm["utilisation_pct_p95"].as_f64().unwrap() > 0.0,
        "three requests counted: {t}"
    );
}

/// Three handles on one store share a breaker (the router's own chain).
pub async fn handles_share_breakers(open: impl Fn() -> RedisStore) {
    let s = || -> Arc<dyn HealthStore> { Arc::new(open()) };
    shared_breakers::a_breaker_opened_through_two_processes_blocks_the_third([s(), s(), s()]).await;
}

/// Two handles on one store spend one budget per provider, on every provider's node:
/// each bucket admits exactly its capacity in all, then refuses.
pub async fn handles_share_buckets(open: impl Fn() -> RedisStore) {
    let providers = providers();
    let mut limits = std::collections::BTreeMap::new();
    for p in &providers {
        limits.insert(
            p.clone(),
            Limits {
                rpm: Some(5),
                ..Limits::default()
            },
        );
    }
    let cfg = AdmissionConfig {
        limits,
        headroom: 1.0,
        ..AdmissionConfig::default()
    };
    let one = RedisBuckets::new(open(), &cfg);
    let two = RedisBuckets::new(open(), &cfg);
    let now = 1_700_000_000_000;
    let cost = Cost {
        input_tokens: 1,
        output_tokens: 1,
    };
    for p in &providers {
        let r = route(&format!("{p}/m"));
        let (c1, c2) = (one.cover(&r).unwrap(), two.cover(&r).unwrap());
        let mut admitted = 0;
        for i in 0..12 {
            let (b, c) = if i % 2 == 0 { (&one, &c1) } else { (&two, &c2) };
            if b.acquire(c, cost, Priority::Interactive, now)
                .await
                .unwrap()
                .is_ok()
            {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 5, "{p}: one budget of 5 for both handles");
    }
    // The snapshot reads every provider's bucket, on every node, in one call.
    let views = one.snapshot(now).await.unwrap();
    assert_eq!(views.len(), 3);
    assert!(views.iter().all(|v| v.level < 0.5), "{views:?}");
}
