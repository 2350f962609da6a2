//! Real `poolctl` processes sharing one real Redis (`state: redis://…`, the test's own
//! `redis-server` on a free loopback port): a route retired through one process, by an
//! attempt or by an operator, is skipped by every other at once; with the Redis gone, a
//! walk neither hangs nor fails, and says how many decisions it made on its own view.

use poolctl::core::vocab::{CallPath, Route, Wire};
use poolctl::harness::mock::{MockRoute, MockServer};
use poolctl::harness::redis_server::RedisServer;
use poolctl::harness::scenario::{Body, Reply};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Output;

const KEY_VAR: &str = "POOLCTL_TEST_KEY";
const SENTINEL_KEY: &str = "sk-SENTINEL-redis-never-print-me";

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

/// Mocks for `routes`, and a pool config with one tier `t` of them in order, its state in
/// the Redis at `state`.
async fn setup(dir: &Path, routes: Vec<(&str, Reply)>, state: &str) -> (MockServer, PathBuf) {
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        routes
            .iter()
            .map(|(r, reply)| MockRoute {
                route: route(r),
                wire: Wire::OpenAi,
                path: CallPath::Chat,
                replies: vec![reply.clone()],
                outage: None,
                record: false,
            })
            .collect(),
    )
    .await
    .unwrap();
    let mut yaml = format!(
        "providers:\n  dash:\n    wire: openai\n    dialect: dashscope\n    base_url: {}\n    api_key_env: {KEY_VAR}\ntiers:\n  t:\n",
        mock.base_url("dash", Wire::OpenAi)
    );
    for (r, _) in &routes {
        yaml.push_str(&format!("    - {r}\n"));
    }
    yaml.push_str(&format!("state: {state}\nstate_timeout_ms: 150\n"));
    let path = dir.join("pool.yaml");
    std::fs::write(&path, yaml).unwrap();
    (mock, path)
}

async fn poolctl(config: &Path, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env(KEY_VAR, SENTINEL_KEY)
        .output()
        .await
        .expect("poolctl runs")
}

fn text(o: &Output) -> String {
    let t = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!t.contains(SENTINEL_KEY), "the key leaked: {t}");
    t
}

fn walk_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
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

#[tokio::test(flavor = "multi_thread")]
async fn a_route_retired_through_one_process_is_skipped_by_the_others_at_once() {
    let server = RedisServer::must_start();
    let dir = tempfile::tempdir().unwrap();
    let (mock, config) = setup(
        dir.path(),
        vec![
            ("dash/gone", model_not_exist()),
            ("dash/live-1", ok("one")),
            ("dash/live-2", ok("two")),
        ],
        &server.url(),
    )
    .await;

    // Process 1: its attempt retires `dash/gone` (model_unavailable) in Redis.
    let o = poolctl(&config, &["walk", "t", "--json"]).await;
    let v = walk_json(&o);
    assert_eq!(v["served_by"], "dash/live-1", "{}", text(&o));
    assert_eq!(mock.calls(&route("dash/gone")), 1);

    // Process 2: an operator retires `dash/live-1` through Redis.
    let o = poolctl(
        &config,
        &["retire", "dash/live-1", "--reason", "incident 7"],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains(&server.url()[..20]),
        "names the store: {}",
        text(&o)
    );

    // Processes 3..6, at once: every one skips both, and neither is called again.
    let walks: Vec<_> = (0..4)
        .map(|_| poolctl(&config, &["walk", "t", "--json"]))
        .collect();
    for o in futures_util::future::join_all(walks).await {
        let v = walk_json(&o);
        assert_eq!(v["served_by"], "dash/live-2", "{}", text(&o));
        assert_eq!(
            skipped(&v),
            vec![
                ("dash/gone".to_string(), "retired".to_string()),
                ("dash/live-1".to_string(), "retired".to_string())
            ]
        );
    }
    assert_eq!(mock.calls(&route("dash/gone")), 1);
    assert_eq!(mock.calls(&route("dash/live-1")), 1);
    assert_eq!(mock.calls(&route("dash/live-2")), 4);

    // Another process reads both from Redis, with their reasons.
    let o = poolctl(&config, &["status", "--json"]).await;
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let state = |r: &str| {
        let row = v["routes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["route"] == r)
            .unwrap()
            .clone();
        (row["state"].clone(), row["reason"].clone())
    };
    assert_eq!(
        state("dash/gone"),
        (json!("retired"), json!("model_unavailable"))
    );
    assert_eq!(
        state("dash/live-1"),
        (json!("retired"), json!("incident 7"))
    );

    // Restored through one process: the next walk, in another, uses it again.
    let o = poolctl(&config, &["restore", "dash/live-1"]).await;
    assert!(
        text(&o).contains("was retired (incident 7)"),
        "{}",
        text(&o)
    );
    let o = poolctl(&config, &["walk", "t", "--json"]).await;
    assert_eq!(walk_json(&o)["served_by"], "dash/live-1");
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_redis_gone_a_walk_goes_on_and_counts_its_degraded_decisions() {
    let mut server = RedisServer::must_start();
    let url = server.url();
    server.kill();
    let dir = tempfile::tempdir().unwrap();
    let (mock, config) = setup(
        dir.path(),
        vec![("dash/gone", model_not_exist()), ("dash/live-1", ok("one"))],
        &url,
    )
    .await;
    let o = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        poolctl(&config, &["walk", "t", "--json"]),
    )
    .await
    .expect("the walk hung on a dead store");
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert_eq!(walk_json(&o)["served_by"], "dash/live-1");
    assert_eq!(mock.calls(&route("dash/gone")), 1);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        stderr.matches("warning").count(),
        1,
        "one warning for the episode: {stderr}"
    );
    let count: u64 = stderr
        .split("state store degraded: ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {stderr}"));
    assert!(
        count >= 2,
        "every store call was answered locally: {stderr}"
    );

    // An operator's retire must not claim a change the store did not take: exit 2.
    let o = poolctl(&config, &["retire", "dash/live-1"]).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}
