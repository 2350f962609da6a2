//! End-to-end tests of the operator commands: the built `poolctl` binary against real
//! loopback mocks and a real SQLite store shared by several processes.

use poolctl::core::vocab::{CallPath, Route, Wire};
use poolctl::harness::mock::{MockRoute, MockServer};
use poolctl::harness::scenario::{Body, Reply};
use poolctl::policy::health::{Health, Transition};
use poolctl::store::{HealthStore, SqliteStore};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Output;

const KEY_VAR: &str = "POOLCTL_TEST_KEY";
/// A key value that must never appear in any output, log or state file.
const SENTINEL_KEY: &str = "sk-SENTINEL-7f3a9c-never-print-me";

/// Runs a store future to its end outside the test's runtime: the store answers from its
/// own thread, so any executor will do.
fn block_on<F>(f: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(f)
        })
        .join()
        .unwrap()
    })
}

fn route(s: &str) -> Route {
    Route::parse(s).unwrap()
}

fn quota_403() -> Reply {
    Reply::Status {
        status: 403,
        headers: vec![],
        body: Body::Json(
            json!({"error": {"code": "AllocationQuota.FreeTierOnly", "message": "The free tier of the model has been exhausted."}}),
        ),
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

fn ok(text: &str) -> Reply {
    Reply::Ok {
        text: text.into(),
        headers: vec![],
        usage: None,
    }
}

/// Mocks for `routes` and a pool config (one provider per route provider, dialect
/// dashscope) with the given tiers, written into `dir`.
async fn setup(
    dir: &Path,
    routes: Vec<(&str, Reply)>,
    tiers: &[(&str, Vec<&str>)],
) -> (MockServer, PathBuf) {
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
    let mut yaml = String::from("providers:\n");
    let mut providers: Vec<&str> = routes
        .iter()
        .map(|(r, _)| r.split('/').next().unwrap())
        .collect();
    providers.dedup();
    for p in providers {
        yaml.push_str(&format!(
            "  {p}:\n    wire: openai\n    dialect: dashscope\n    base_url: {}\n    api_key_env: {KEY_VAR}\n",
            mock.base_url(p, Wire::OpenAi)
        ));
    }
    yaml.push_str("tiers:\n");
    for (name, list) in tiers {
        yaml.push_str(&format!("  {name}:\n"));
        for r in list {
            yaml.push_str(&format!("    - {r}\n"));
        }
    }
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

fn out(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn assert_no_key(text: &str) {
    assert!(
        !text.contains(SENTINEL_KEY),
        "the API key leaked into: {text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn probe_exits_1_on_a_tier_with_no_live_route_and_warns_on_a_dead_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, config) = setup(
        dir.path(),
        vec![
            ("dash/dead-a", quota_403()),
            ("dash/dead-b", model_not_exist()),
            ("dash/live", ok("pong")),
        ],
        &[
            ("dead", vec!["dash/dead-a", "dash/dead-b"]),
            ("tail", vec!["dash/live", "dash/dead-a"]),
        ],
    )
    .await;
    let o = poolctl(&config, &["probe"]).await;
    let text = out(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("tier `dead` has NO live route"), "{text}");
    assert!(text.contains("dead tail"), "{text}");
    assert_no_key(&text);

    // The tail tier alone has a live route: exit 0, still warned.
    let o = poolctl(&config, &["probe", "--tier", "tail"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert!(out(&o).contains("dead tail"));

    // --json follows spec/cli.md.
    let o = poolctl(&config, &["probe", "--json"]).await;
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let dead = v["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tier"] == "dead")
        .unwrap();
    assert_eq!(dead["live"], 0);
    assert_eq!(dead["first_live"], Value::Null);
    let r0 = &dead["routes"][0];
    for key in [
        "route",
        "status",
        "class",
        "latency_ms",
        "retry_after_ms",
        "request_id",
        "headroom",
        "detail",
    ] {
        assert!(r0.get(key).is_some(), "missing {key}: {r0}");
    }
    assert_eq!(r0["status"], 403);
    assert_eq!(r0["class"], "quota_exhausted");
    assert_eq!(dead["routes"][1]["class"], "model_unavailable");
    let tail = v["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tier"] == "tail")
        .unwrap();
    assert_eq!(tail["first_live"], "dash/live");
}

/// Issue 21: at the default width of 100, `probe` laid each route out as a block of five
/// lines (55 for 11 routes). Now one line a route: the tier, the column names, a line
/// per route, then a note of any column left out, the summary and the dead-tail warning.
#[tokio::test(flavor = "multi_thread")]
async fn probe_of_eleven_routes_prints_one_line_a_route_at_the_default_width() {
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..11)
        .map(|i| format!("dashscope/qwen3.7-max-2026-05-{:02}", i + 10))
        .collect();
    let routes: Vec<(&str, Reply)> = names
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let reply = match i % 3 {
                0 => ok("pong"),
                1 => quota_403(),
                _ => model_not_exist(),
            };
            (r.as_str(), reply)
        })
        .collect();
    let (_mock, config) = setup(
        dir.path(),
        routes,
        &[("eleven", names.iter().map(String::as_str).collect())],
    )
    .await;
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(["probe", "--config"])
        .arg(&config)
        .env(KEY_VAR, SENTINEL_KEY)
        .env_remove("COLUMNS")
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    for name in &names {
        let on = text
            .lines()
            .filter(|l| l.starts_with(name.as_str()))
            .count();
        assert_eq!(on, 1, "{name} is on {on} lines:\n{text}");
    }
    assert!(
        text.lines().count() <= 11 + 7,
        "{} lines:\n{text}",
        text.lines().count()
    );
    for line in text.lines() {
        assert!(
            line.chars().count() <= 100,
            "wider than 100: {line}\n{text}"
        );
    }
    // The class of each dead route is on its line, whole.
    let route_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("dashscope/"))
        .collect();
    let with = |class: &str| route_lines.iter().filter(|l| l.contains(class)).count();
    assert_eq!(with("  quota_exhausted  "), 4, "{text}");
    assert_eq!(with("  model_unavailable  "), 3, "{text}");
    assert!(text.contains("4 of 11 routes live"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn probe_apply_retires_and_restores() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, config) = setup(
        dir.path(),
        vec![("dash/dead", quota_403()), ("dash/live", ok("pong"))],
        &[("t", vec!["dash/live", "dash/dead"])],
    )
    .await;
    assert_eq!(
        poolctl(&config, &["retire", "dash/live"])
            .await
            .status
            .code(),
        Some(0)
    );
    // Without --apply nothing changes.
    poolctl(&config, &["probe"]).await;
    let store = SqliteStore::open(&dir.path().join(".poolctl/state.db")).unwrap();
    assert_eq!(
        block_on(store.get(&route("dash/dead"))).unwrap(),
        Health::Ready
    );
    let o = poolctl(&config, &["probe", "--apply"]).await;
    assert!(out(&o).contains("dash/dead retired (quota)"), "{}", out(&o));
    assert!(out(&o).contains("dash/live restored"), "{}", out(&o));
    assert_eq!(
        block_on(store.get(&route("dash/dead"))).unwrap(),
        Health::Retired {
            reason: "quota".into()
        }
    );
    assert_eq!(
        block_on(store.get(&route("dash/live"))).unwrap(),
        Health::Ready
    );
}

/// Seed 002's verification: retire the primary by force and walk a ten-route chain to
/// its last model. The store never learns of the forcing.
#[tokio::test(flavor = "multi_thread")]
async fn walk_with_the_primary_retired_reaches_the_last_of_ten_routes() {
    let dir = tempfile::tempdir().unwrap();
    let mut routes = vec![("agnes/agnes-2.5-flash", ok("primary"))];
    let names = [
        "dash/qwen3.8-max",
        "dash/qwen3.7-max-preview",
        "dash/qwen3.7-max-2026-05-20",
        "dash/qwen3.6-max-preview",
        "dash/deepseek-v3.1",
        "dash/glm-5.2",
        "dash/kimi-k2.6",
        "dash/qwen3.6-plus",
    ];
    for (i, n) in names.iter().enumerate() {
        routes.push((
            n,
            if i == 3 || i == 4 {
                model_not_exist()
            } else {
                quota_403()
            },
        ));
    }
    routes.push(("dash/qwen-flash-2025-07-28", ok("OK")));
    let chain: Vec<&str> = routes.iter().map(|(r, _)| *r).collect();
    assert_eq!(chain.len(), 10);
    let (mock, config) = setup(dir.path(), routes.clone(), &[("high", chain)]).await;

    let o = poolctl(
        &config,
        &["walk", "high", "--retire", "agnes/agnes-2.5-flash"],
    )
    .await;
    let text = out(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(text.contains("skip  agnes/agnes-2.5-flash"), "{text}");
    assert!(
        text.contains("served by dash/qwen-flash-2025-07-28: \"OK\""),
        "{text}"
    );
    assert!(
        text.contains("Model not exist") || text.contains("model_unavailable → fallback"),
        "{text}"
    );
    assert_eq!(mock.calls(&route("agnes/agnes-2.5-flash")), 0);
    assert_eq!(mock.calls(&route("dash/qwen-flash-2025-07-28")), 1);
    assert_no_key(&text);

    // --json: every step, and the forced route skipped.
    let o = poolctl(
        &config,
        &[
            "walk",
            "high",
            "--retire",
            "agnes/agnes-2.5-flash",
            "--json",
        ],
    )
    .await;
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tier"], "high");
    assert_eq!(v["outcome"], "success");
    assert_eq!(v["served_by"], "dash/qwen-flash-2025-07-28");
    assert_eq!(v["skipped"][0]["route"], "agnes/agnes-2.5-flash");
    assert_eq!(v["skipped"][0]["why"], "retired");
    // The routes already retired by the first walk are skipped too; the last answers.
    let last = v["attempts"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["route"], "dash/qwen-flash-2025-07-28");
    for key in ["route", "status", "class", "action", "wait_ms", "health"] {
        assert!(last.get(key).is_some(), "missing {key}");
    }

    // The forcing never reached the store.
    let o = poolctl(&config, &["status", "--json"]).await;
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let agnes = v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["route"] == "agnes/agnes-2.5-flash")
        .unwrap();
    assert_eq!(agnes["state"], "ready");
    let qwen = v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["route"] == "dash/qwen3.8-max")
        .unwrap();
    assert_eq!(
        (
            qwen["state"].clone(),
            qwen["reason"].clone(),
            qwen["until"].clone()
        ),
        (json!("retired"), json!("quota"), Value::Null)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_route_retired_by_one_process_stays_retired_in_others_until_restored() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, config) = setup(
        dir.path(),
        vec![("a/primary", ok("primary")), ("b/backup", ok("backup"))],
        &[("t", vec!["a/primary", "b/backup"])],
    )
    .await;
    let o = poolctl(&config, &["retire", "a/primary", "--reason", "incident 42"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));

    // Another process (a walk) skips it: it never reaches the mock.
    let o = poolctl(&config, &["walk", "t", "--json"]).await;
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["served_by"], "b/backup");
    assert_eq!(v["skipped"][0]["route"], "a/primary");
    assert_eq!(mock.calls(&route("a/primary")), 0);

    // Later processes (a "restart") still see it retired, with its reason.
    let o = poolctl(&config, &["status", "--json"]).await;
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["route"] == "a/primary")
        .unwrap();
    assert_eq!(
        (p["state"].clone(), p["reason"].clone()),
        (json!("retired"), json!("incident 42"))
    );

    let o = poolctl(&config, &["restore", "a/primary"]).await;
    assert!(out(&o).contains("was retired (incident 42)"), "{}", out(&o));
    let o = poolctl(&config, &["walk", "t", "--json"]).await;
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["served_by"], "a/primary");
    assert_eq!(mock.calls(&route("a/primary")), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_routes_and_tiers_exit_2_naming_the_nearest() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, config) = setup(
        dir.path(),
        vec![("a/primary", ok("x"))],
        &[("high", vec!["a/primary"])],
    )
    .await;
    let o = poolctl(&config, &["retire", "a/primery"]).await;
    assert_eq!(o.status.code(), Some(2));
    assert!(out(&o).contains("a/primary"), "{}", out(&o));
    let o = poolctl(&config, &["restore", "zzz/unknown"]).await;
    assert_eq!(o.status.code(), Some(2));
    let o = poolctl(&config, &["walk", "hihg"]).await;
    assert_eq!(o.status.code(), Some(2));
    assert!(out(&o).contains("high"), "{}", out(&o));
    let o = poolctl(&config, &["probe", "--tier", "nope"]).await;
    assert_eq!(o.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread")]
async fn check_names_missing_key_variables_without_printing_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, config) = setup(
        dir.path(),
        vec![("a/primary", ok("x"))],
        &[("high", vec!["a/primary"])],
    )
    .await;
    let o = poolctl(&config, &["check"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert_no_key(&out(&o));
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(["check", "--config"])
        .arg(&config)
        .env_remove(KEY_VAR)
        .output()
        .await
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(out(&o).contains(KEY_VAR), "{}", out(&o));
    // A walk without the key fails before any traffic, naming the variable.
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(["walk", "high", "--config"])
        .arg(&config)
        .env_remove(KEY_VAR)
        .output()
        .await
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(out(&o).contains(KEY_VAR), "{}", out(&o));
}

/// The key is set for every command above; here every output and the state file itself
/// are searched for it after a run that exercises each command.
#[tokio::test(flavor = "multi_thread")]
async fn the_key_never_reaches_output_or_state() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, config) = setup(
        dir.path(),
        vec![("a/dead", quota_403()), ("a/live", ok("pong"))],
        &[("t", vec!["a/dead", "a/live"])],
    )
    .await;
    let mut all = String::new();
    for args in [
        vec!["check"],
        vec!["check", "--json"],
        vec!["probe"],
        vec!["probe", "--json", "--apply"],
        vec!["walk", "t"],
        vec!["walk", "t", "--json"],
        vec!["retire", "a/live"],
        vec!["status"],
        vec!["status", "--json"],
        vec!["restore", "a/live"],
    ] {
        all.push_str(&out(&poolctl(&config, &args).await));
    }
    assert_no_key(&all);
    for entry in std::fs::read_dir(dir.path().join(".poolctl")).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        assert!(
            !bytes
                .windows(SENTINEL_KEY.len())
                .any(|w| w == SENTINEL_KEY.as_bytes()),
            "the key is in the state"
        );
    }
}

/// Forty processes retire forty different routes at once: no update is lost.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_processes_lose_no_update() {
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..40).map(|i| format!("p/m{i:02}")).collect();
    let routes: Vec<(&str, Reply)> = names.iter().map(|n| (n.as_str(), ok("x"))).collect();
    let (_mock, config) = setup(
        dir.path(),
        routes,
        &[("t", names.iter().map(String::as_str).collect())],
    )
    .await;
    let runs = names.iter().map(|n| {
        let config = config.clone();
        async move { poolctl(&config, &["retire", n, "--reason", "load test"]).await }
    });
    let outputs = futures_util::future::join_all(runs).await;
    for o in &outputs {
        assert_eq!(o.status.code(), Some(0), "{}", out(o));
    }
    let store = SqliteStore::open(&dir.path().join(".poolctl/state.db")).unwrap();
    let stored = block_on(store.list()).unwrap();
    assert_eq!(stored.len(), 40);
    assert!(stored.iter().all(|(_, h)| *h
        == Health::Retired {
            reason: "load test".into()
        }));
    assert_eq!(block_on(store.integrity_check()).unwrap(), "ok");
}

/// The child half of the SIGKILL test: writes health changes as fast as it can, forever,
/// printing a line every 200 writes. Run only by `a_writer_killed_mid_stream_...`.
#[test]
#[ignore = "child process of a_writer_killed_mid_stream_leaves_the_store_valid"]
fn store_hammer_child() {
    let Ok(path) = std::env::var("POOLCTL_HAMMER_DB") else {
        return;
    };
    let store = SqliteStore::open(Path::new(&path)).unwrap();
    let routes: Vec<Route> = (0..50).map(|i| route(&format!("h/m{i}"))).collect();
    for n in 0u64.. {
        let r = &routes[(n % 50) as usize];
        let t = match n % 3 {
            0 => Transition::Retire {
                reason: format!("write {n}"),
            },
            1 => Transition::Cool {
                until: n as i64,
                reason: "hammer".into(),
            },
            _ => Transition::Restore,
        };
        block_on(store.apply(r, t)).unwrap();
        if n % 200 == 0 {
            println!("wrote {n}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_writer_killed_mid_stream_leaves_the_store_valid() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    for round in 0..3 {
        let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "store_hammer_child", "--nocapture"])
            .env("POOLCTL_HAMMER_DB", &db)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        // Let it get well into its writes, then SIGKILL it wherever it is.
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = 0;
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("wrote ") {
                seen += 1;
                if seen == 5 + round {
                    break;
                }
            }
        }
        assert!(seen > 0, "the child never wrote");
        child.start_kill().unwrap(); // SIGKILL on unix
        let status = child.wait().await.unwrap();
        assert!(!status.success());
        let store = SqliteStore::open(&db).unwrap();
        assert_eq!(
            block_on(store.integrity_check()).unwrap(),
            "ok",
            "round {round}"
        );
        let listed = block_on(store.list()).unwrap();
        assert!(listed.len() <= 50);
    }
}

/// Appends `limits:` (and anything else) to a config `setup` wrote.
fn append(config: &Path, text: &str) {
    let mut yaml = std::fs::read_to_string(config).unwrap();
    yaml.push_str(text);
    std::fs::write(config, yaml).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn probe_skips_a_route_its_buckets_refuse_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, config) = setup(
        dir.path(),
        vec![("p/tight", ok("OK")), ("q/free", ok("OK"))],
        &[("t", vec!["p/tight", "q/free"])],
    )
    .await;
    // 1 rpm × 0.9 headroom holds less than one background request above the floor.
    append(&config, "limits:\n  p: { rpm: 1 }\n");
    let o = poolctl(&config, &["probe", "--json"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    let routes = &v["tiers"][0]["routes"];
    assert_eq!(routes[0]["route"], "p/tight");
    assert_eq!(routes[0]["class"], Value::Null);
    assert_eq!(routes[0]["skipped"], "admission");
    assert_eq!(routes[1]["class"], "ok");
    assert_eq!(v["tiers"][0]["live"], 1);
    assert_eq!(
        mock.calls(&route("p/tight")),
        0,
        "a refused probe is never sent"
    );

    let o = poolctl(&config, &["probe", "--json", "--force"]).await;
    let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    assert_eq!(v["tiers"][0]["routes"][0]["class"], "ok", "{}", out(&o));
    assert_eq!(mock.calls(&route("p/tight")), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn walk_goes_through_admission_and_status_shows_the_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, config) = setup(
        dir.path(),
        vec![("p/big", ok("big")), ("q/next", ok("next"))],
        &[("t", vec!["p/big", "q/next"])],
    )
    .await;
    // The walk's prompt declares 64 output tokens: 10 tpm can never hold it.
    append(
        &config,
        "limits:\n  p/big: { rpm: 100, tpm: 10 }\nheadroom: 1.0\n",
    );
    let o = poolctl(&config, &["walk", "t", "--json"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["served_by"], "q/next");
    assert_eq!(v["skipped"][0]["route"], "p/big");
    assert_eq!(v["skipped"][0]["why"], "exceeds_bucket");
    assert_eq!(mock.calls(&route("p/big")), 0);

    // No route's bucket can ever hold it: failed, reason too_large (not shed: no wait
    // would admit it), exit 1, no upstream call.
    let yaml = std::fs::read_to_string(&config)
        .unwrap()
        .replace("limits:\n", "limits:\n  q: { tpm: 10 }\n");
    std::fs::write(&config, yaml).unwrap();
    let o = poolctl(&config, &["walk", "t", "--json"]).await;
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["outcome"].as_str(), v["reason"].as_str()),
        (Some("failed"), Some("too_large"))
    );
    assert_eq!(mock.calls(&route("q/next")), 1);

    let o = poolctl(&config, &["status", "--json"]).await;
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let buckets = v["buckets"].as_array().expect("status lists the buckets");
    assert!(buckets
        .iter()
        .any(|b| b["bucket"] == "p/big" && b["dimension"] == "tpm" && b["capacity"] == 10.0));
    assert_eq!(v["routes"][0]["buckets"], json!(["p/big"]));
    let o = poolctl(&config, &["status"]).await;
    assert!(out(&o).contains("tpm 10/10"), "{}", out(&o));
}

/// `walk --image FILE` sends the prompt and the file inline as one user message of two
/// parts; a route whose facts say `images: false` is skipped, never called.
#[tokio::test(flavor = "multi_thread")]
async fn walk_with_an_image_skips_a_route_without_image_input_and_sends_it_inline() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        ["a/text-only", "b/vision"]
            .iter()
            .map(|r| MockRoute {
                route: route(r),
                wire: Wire::OpenAi,
                path: CallPath::Chat,
                replies: vec![ok("a red pixel")],
                outage: None,
                record: true,
            })
            .collect(),
    )
    .await
    .unwrap();
    let yaml = format!(
        "providers:\n  a:\n    wire: openai\n    base_url: {}\n    api_key_env: {KEY_VAR}\n  b:\n    wire: openai\n    base_url: {}\n    api_key_env: {KEY_VAR}\nmodels:\n  a/text-only: {{ images: false }}\ntiers:\n  t: [a/text-only, b/vision]\n",
        mock.base_url("a", Wire::OpenAi),
        mock.base_url("b", Wire::OpenAi)
    );
    let config = dir.path().join("pool.yaml");
    std::fs::write(&config, yaml).unwrap();
    let png = dir.path().join("pixel.png");
    std::fs::write(&png, b"\x89PNG\r\n\x1a\n").unwrap();
    let o = poolctl(
        &config,
        &[
            "walk",
            "t",
            "--json",
            "--prompt",
            "What is it?",
            "--image",
            png.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["served_by"], "b/vision");
    assert_eq!(v["skipped"][0]["route"], "a/text-only");
    assert_eq!(mock.calls(&route("a/text-only")), 0);
    let got = mock.received(&route("b/vision"));
    assert_eq!(
        got[0]["messages"][0]["content"],
        json!([
            {"type": "text", "text": "What is it?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
        ])
    );
    let o = poolctl(&config, &["walk", "t", "--image", "notes.txt"]).await;
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    assert!(out(&o).contains("--image notes.txt"), "{}", out(&o));
    // Guards a plain-http image URL: it was sent, where a scenario's request refuses
    // one and a provider fetches images over https only.
    let o = poolctl(&config, &["walk", "t", "--image", "http://x.test/a.png"]).await;
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    assert!(out(&o).contains("must be https"), "{}", out(&o));
}
