//! `poolctl capacity` as a process, on both state stores. Usage comes from real `walk`s
//! and `probe`s (real processes, real HTTP to a wiremock provider) into a real SQLite
//! file or the test's own Redis, and comes back as utilisation of each contract; exact
//! per-minute histories for the warnings and the failover ceiling are written through
//! the library's store API (as a process's flush or a fleet's settles write them), then
//! read by the real binary.

use poolctl::admission::bucket::{Cost, Dimension, Spent};
use poolctl::admission::buckets::UsageDelta;
use poolctl::core::clock::wall_now_ms;
use poolctl::core::vocab::Priority;
use poolctl::core::vocab::Route;
use poolctl::harness::redis_server::RedisServer;
use poolctl::store::redis_buckets::RedisBuckets;
use poolctl::store::{RedisStore, SqliteStore};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

const KEY_VAR: &str = "POOLCTL_CAPACITY_TEST_KEY";

/// An OpenAI-compatible provider that answers every call with 10 + 5 tokens of usage
/// and states its own limit of 50 requests a minute.
async fn provider() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("x-ratelimit-limit-requests", "50")
                .insert_header("x-ratelimit-remaining-requests", "49")
                .set_body_json(json!({
                    "id": "c1", "object": "chat.completion", "model": "m1",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "OK"}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
                })),
        )
        .mount(&server)
        .await;
    server
}

/// A pool with providers `up` (at `base`) and `b`, `c` (nowhere: never called), tier
/// `high`, and the given `limits:` / extra lines.
fn pool(dir: &Path, state: &str, base: &str, tier: &str, limits: &str, extra: &str) -> PathBuf {
    let mut y = String::from("providers:\n");
    for (name, url) in [
        ("up", format!("{base}/v1")),
        ("b", "http://127.0.0.1:9/v1".into()),
        ("c", "http://127.0.0.1:9/v1".into()),
    ] {
        y.push_str(&format!(
            "  {name}:\n    wire: openai\n    base_url: \"{url}\"\n    api_key_env: {KEY_VAR}\n"
        ));
    }
    y.push_str(&format!(
        "tiers:\n  high: [{tier}]\nlimits:\n{limits}state: {state}\n{extra}"
    ));
    let path = dir.join("pool.yaml");
    std::fs::write(&path, y).unwrap();
    path
}

/// A SQLite-state pool whose tier `high` is `up/m1, up/m2`, with `up/m1` limited.
fn m1_limited(dir: &Path, up: &MockServer) -> PathBuf {
    pool(
        dir,
        "state.db",
        &up.uri(),
        "up/m1, up/m2",
        "  up/m1: { rpm: 100, tpm: 100000 }\n",
        "",
    )
}

async fn poolctl(args: &[&str], config: &Path) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env(KEY_VAR, "sk-capacity-test")
        .env_remove("POOLCTL_CONFIG")
        .output()
        .await
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

async fn capacity(config: &Path, window: &str) -> (Option<i32>, Value, String) {
    let o = poolctl(&["capacity", "--json", "--window", window], config).await;
    let t = text(&o);
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {t}"));
    (o.status.code(), v, t)
}

fn bucket(v: &Value, name: &str, dim: &str) -> Value {
    v["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["bucket"] == name && b["dimension"] == dim)
        .unwrap_or_else(|| panic!("no bucket {name} {dim}: {v}"))
        .clone()
}

fn warned(v: &Value, needle: &str) -> bool {
    v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains(needle))
}

/// What the SQLite file's counters hold for one bucket, over every minute.
fn counted(state: &Path, name: &str, dim: &str) -> f64 {
    let conn = rusqlite::Connection::open(state).unwrap();
    conn.query_row(
        "SELECT COALESCE(SUM(spent), 0) FROM usage WHERE bucket = ?1 AND dimension = ?2",
        [name, dim],
        |r| r.get(0),
    )
    .unwrap()
}

async fn walk(config: &Path) {
    let o = poolctl(&["walk", "high", "--json"], config).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// `n` walks in `n` processes at once, each of which must exit 0.
async fn walks_at_once(config: &Path, n: usize) {
    let walks: Vec<_> = (0..n)
        .map(|_| {
            let config = config.to_path_buf();
            tokio::spawn(async move { walk(&config).await })
        })
        .collect();
    for w in walks {
        w.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_walk_lands_in_the_sqlite_counters_and_capacity_shows_it() {
    let up = provider().await;
    let dir = tempfile::tempdir().unwrap();
    let config = pool(
        dir.path(),
        "state.db",
        &up.uri(),
        "up/m1, up/m2",
        "  up/m1: { rpm: 1, tpm: 1000 }\n",
        "headroom: 1.0\n",
    );
    let (code, v, t) = capacity(&config, "2m").await;
    assert_eq!(code, Some(0), "quiet before any traffic: {t}");
    assert!(
        !dir.path().join("state.db").exists(),
        "capacity only reads: it creates no state file"
    );

    walk(&config).await;
    let state = dir.path().join("state.db");
    assert_eq!(counted(&state, "up/m1", "rpm"), 1.0);
    assert_eq!(
        counted(&state, "up/m1", "tpm"),
        15.0,
        "what was spent, not reserved"
    );
    // Two minutes: whichever side of a minute the walk fell on, the p95 (here the max)
    // holds it.
    let (code, v2, t) = capacity(&config, "2m").await;
    assert_eq!(
        bucket(&v2, "up/m1", "rpm")["utilisation_pct_p95"],
        100.0,
        "{t}"
    );
    assert_eq!(
        bucket(&v2, "up/m1", "tpm")["utilisation_pct_p95"],
        1.5,
        "{t}"
    );
    assert!(warned(&v2, "up/m1 rpm: p95 utilisation 100.0 %"), "{t}");
    assert_eq!(code, Some(1), "a warning exits 1: {t}");
    // The backup is unlimited: nothing bounds what it could absorb.
    let tier = &v2["tiers"][0];
    assert_eq!(tier["ceiling_holds"], true, "{t}");
    assert_eq!(tier["dimensions"][0]["backups_free"], Value::Null, "{t}");
    let _ = v;
}

#[tokio::test(flavor = "multi_thread")]
async fn walks_in_four_processes_at_once_add_up_in_one_sqlite_file() {
    let up = provider().await;
    let dir = tempfile::tempdir().unwrap();
    let config = m1_limited(dir.path(), &up);
    walks_at_once(&config, 4).await;
    let state = dir.path().join("state.db");
    assert_eq!(counted(&state, "up/m1", "rpm"), 4.0, "no increment lost");
    assert_eq!(counted(&state, "up/m1", "tpm"), 60.0);
    let (code, v, t) = capacity(&config, "2m").await;
    let p95 = bucket(&v, "up/m1", "rpm")["utilisation_pct_p95"]
        .as_f64()
        .unwrap();
    assert!(
        (2.0..=4.0).contains(&p95),
        "4 of 100 over at most 2 minutes: {t}"
    );
    assert_eq!(code, Some(0), "{t}");
}

/// Guards two races on one state file. Each walk opens the file twice (health, then
/// usage); the second open used to open and close the file itself, which dropped the
/// first connection's POSIX locks, so another process could check the WAL in and
/// remove it under this one: an increment lost without an error. And processes that
/// set up a new file together could get "database is locked" at once.
#[tokio::test(flavor = "multi_thread")]
async fn eight_walks_at_once_lose_no_increment_on_a_new_or_an_existing_state_file() {
    let up = provider().await;
    for existing in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let config = m1_limited(dir.path(), &up);
        if existing {
            walk(&config).await;
        }
        walks_at_once(&config, 8).await;
        let want = if existing { 9.0 } else { 8.0 };
        assert_eq!(
            counted(&dir.path().join("state.db"), "up/m1", "rpm"),
            want,
            "existing file: {existing}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_walk_lands_in_the_redis_counters_and_capacity_shows_it() {
    let server = RedisServer::must_start();
    let up = provider().await;
    let dir = tempfile::tempdir().unwrap();
    let config = pool(
        dir.path(),
        &server.url(),
        &up.uri(),
        "up/m1",
        "  up/m1: { rpm: 1, tpm: 1000 }\n",
        "headroom: 1.0\n",
    );
    walk(&config).await;
    let (code, v, t) = capacity(&config, "2m").await;
    assert_eq!(
        bucket(&v, "up/m1", "rpm")["utilisation_pct_p95"],
        100.0,
        "{t}"
    );
    assert_eq!(
        bucket(&v, "up/m1", "tpm")["utilisation_pct_p95"],
        1.5,
        "{t}"
    );
    assert_eq!(code, Some(1), "{t}");
}

#[tokio::test(flavor = "multi_thread")]
async fn probe_records_the_providers_own_limit_and_a_larger_contract_warns() {
    let up = provider().await;
    let dir = tempfile::tempdir().unwrap();
    let config = pool(
        dir.path(),
        "state.db",
        &up.uri(),
        "up/m1",
        "  up/m1: { rpm: 100 }\n",
        "",
    );
    let o = poolctl(&["probe", "--json"], &config).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // The probe spent one request from the bucket, and the file counted it.
    assert_eq!(counted(&dir.path().join("state.db"), "up/m1", "rpm"), 1.0);
    let (code, v, t) = capacity(&config, "1h").await;
    let b = bucket(&v, "up/m1", "rpm");
    assert_eq!(b["provider_limit"], 50, "{t}");
    assert!(
        b["warnings"][0]
            .as_str()
            .unwrap()
            .contains("contract 100 is larger than the provider's own limit 50"),
        "{t}"
    );
    assert_eq!(code, Some(1), "{t}");
}

/// `per_minute(i)` spent on each of `buckets` in each of the last `n` minutes (i = 0
/// the oldest, n − 1 the minute in progress), and `sheds`, into the SQLite file.
async fn history(
    state: &Path,
    buckets: &[(&str, Dimension)],
    n: i64,
    per_minute: impl Fn(i64) -> f64,
    sheds: &[(Priority, &str, u64)],
) {
    let store = SqliteStore::open(state).unwrap();
    let now = wall_now_ms();
    let to = now / 60_000;
    let mut d = UsageDelta::default();
    for i in 0..n {
        for (name, dim) in buckets {
            d.spent
                .push((to - n + 1 + i, name.to_string(), *dim, per_minute(i)));
        }
    }
    d.sheds = sheds
        .iter()
        .map(|(p, r, k)| (*p, Route::parse(r).unwrap(), *k))
        .collect();
    store.add_usage(d, now).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_failover_ceiling_says_yes_and_no_with_the_numbers_narrowed_by_a_card() {
    let dir = tempfile::tempdir().unwrap();
    let limits = "  up/m1: { rpm: 100 }\n  b: { rpm: 50 }\n  c/y: { rpm: 20 }\n";
    let tier = "up/m1, b/x, c/y";
    let config = pool(
        dir.path(),
        "state.db",
        "http://127.0.0.1:9",
        tier,
        limits,
        "",
    );
    let state = dir.path().join("state.db");
    // The primary carries 30 a minute; b used 5 of its 45 capacity, c/y nothing of 18.
    history(&state, &[("up/m1", Dimension::Rpm)], 10, |_| 30.0, &[]).await;
    history(&state, &[("b", Dimension::Rpm)], 10, |_| 5.0, &[]).await;
    let (code, v, t) = capacity(&config, "10m").await;
    let high = &v["tiers"][0];
    assert_eq!(high["primary"], "up/m1");
    assert_eq!(high["ceiling_holds"], true, "40 + 18 free absorb 30: {t}");
    assert_eq!(
        high["dimensions"],
        json!([{"dimension": "rpm", "primary_load_p95": 30.0, "backups_free": 58.0}]),
        "{t}"
    );
    assert_eq!(code, Some(0), "{t}");

    // A card that names the tier approves only c/y: 18 free cannot absorb 30.
    let config = pool(
        dir.path(),
        "state.db",
        "http://127.0.0.1:9",
        tier,
        limits,
        "policies:\n  answer:\n    tier: high\n    fallback_routes: [c/y]\n",
    );
    let (code, v, t) = capacity(&config, "10m").await;
    let high = &v["tiers"][0];
    assert_eq!(high["ceiling_holds"], false, "{t}");
    assert_eq!(high["dimensions"][0]["backups_free"], 18.0, "{t}");
    assert_eq!(
        high["warnings"],
        json!(["backups absorb 18 of 30 rpm: 60 %"]),
        "{t}"
    );
    assert!(
        warned(&v, "tier `high`: backups absorb 18 of 30 rpm"),
        "{t}"
    );
    assert_eq!(code, Some(1), "a ceiling that fails exits 1: {t}");
    let o = poolctl(&["capacity", "--window", "10m"], &config).await;
    let plain = String::from_utf8_lossy(&o.stdout);
    assert!(
        plain.contains("tier high: failover ceiling no\n  if up/m1 went to zero, the backups cannot absorb its load\n"),
        "{plain}"
    );
    assert!(
        plain.contains("rpm  primary p95 30/min, backups free 18/min"),
        "{plain}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rising_trend_warns_before_the_p95_does_and_sheds_are_counted_per_class() {
    let dir = tempfile::tempdir().unwrap();
    let config = pool(
        dir.path(),
        "state.db",
        "http://127.0.0.1:9",
        "up/m1",
        "  up/m1: { rpm: 1000 }\n",
        "",
    );
    let state = dir.path().join("state.db");
    // +10 a minute from 0: +1 % of the contract a minute, 60 %/h; 29 % at the end.
    history(
        &state,
        &[("up/m1", Dimension::Rpm)],
        30,
        |i| 10.0 * i as f64,
        &[
            (Priority::Speculative, "up/m1", 3),
            (Priority::Background, "up/m1", 1),
        ],
    )
    .await;
    let (code, v, t) = capacity(&config, "30m").await;
    let b = bucket(&v, "up/m1", "rpm");
    assert_eq!(b["slope_pct_per_hour"], 60.0, "{t}");
    assert!(b["utilisation_pct_p95"].as_f64().unwrap() < 70.0, "{t}");
    assert_eq!(b["warnings"].as_array().unwrap().len(), 1, "{t}");
    assert!(
        b["warnings"][0].as_str().unwrap().contains("reaches 100 %"),
        "{t}"
    );
    assert_eq!(
        b["shed"],
        json!({"interactive": 0, "retry": 0, "background": 1, "speculative": 3}),
        "{t}"
    );
    assert_eq!(code, Some(1), "{t}");
    // The text, piped: within 80 columns, no sparkline off a terminal.
    let o = poolctl(&["capacity"], &config).await;
    assert_eq!(o.status.code(), Some(1));
    let plain = String::from_utf8_lossy(&o.stdout);
    for line in plain.lines() {
        assert!(line.chars().count() <= 80, "wider than 80: {line}");
    }
    assert!(
        plain.contains("shed: interactive 0, retry 0, background 1, speculative 3"),
        "{plain}"
    );
    assert!(!plain.contains('▁') && !plain.contains('█'), "{plain}");
}

#[tokio::test(flavor = "multi_thread")]
async fn capacity_exits_2_on_a_bad_window_or_no_config() {
    let dir = tempfile::tempdir().unwrap();
    let config = pool(
        dir.path(),
        "state.db",
        "http://127.0.0.1:9",
        "up/m1",
        "  up/m1: { rpm: 10 }\n",
        "",
    );
    let o = poolctl(&["capacity", "--window", "10"], &config).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("give a unit"), "{}", text(&o));
    let o = poolctl(&["capacity", "--window", "9d"], &config).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = poolctl(&["capacity"], &dir.path().join("missing.yaml")).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no pool config"), "{}", text(&o));
}

/// `n` requests through `route`'s shared buckets in each of the last `minutes`
/// minutes, each spending `tokens`, as a fleet's settles do. Every minute is counted
/// from one instant read once: read per request, a loop that crossed a minute boundary
/// on a busy machine split its oldest minute's requests over two minutes, and the
/// trend came out +17 %/h instead of flat (a CI run).
async fn spend(b: &RedisBuckets, route: &str, minutes: i64, n: usize, tokens: u64) {
    let r = Route::parse(route).unwrap();
    let c = b.cover(&r).unwrap();
    let base = wall_now_ms();
    for i in (0..minutes).rev() {
        for _ in 0..n {
            let now = base - i * 60_000;
            let cost = Cost {
                input_tokens: tokens,
                output_tokens: 0,
            };
            let held = b
                .acquire(&c, cost, Priority::Interactive, now)
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
async fn capacity_reports_utilisation_and_a_failing_ceiling_from_redis() {
    let server = RedisServer::must_start();
    let dir = tempfile::tempdir().unwrap();
    let config = pool(
        dir.path(),
        &server.url(),
        "http://127.0.0.1:9",
        "up/m1, b/x",
        "  up/m1: { rpm: 100, tpm: 100000 }\n  b: { rpm: 30 }\n",
        // The store's 200 ms default deadline is for production; a fresh redis-server
        // on a CI machine busy compiling once missed it on its first connection.
        "headroom: 0.9\nstate_timeout_ms: 2000\n",
    );
    let (code, v, t) = capacity(&config, "30m").await;
    assert_eq!(v["window_ms"], 1_800_000);
    let rpm = bucket(&v, "up/m1", "rpm");
    assert_eq!(rpm["contract"], 100);
    assert_eq!(rpm["capacity"], 90.0);
    assert_eq!(v["tiers"][0]["ceiling_holds"], true, "{t}");
    assert_eq!(code, Some(0), "{t}");

    // 80 requests a minute on up/m1 for the whole window: 80 % at the p95; b has 27 of
    // capacity free, which cannot absorb 80.
    let store = RedisStore::open(&server.url(), Duration::from_millis(500)).unwrap();
    let cfg = poolctl::config::pool::PoolConfig::load(&config)
        .unwrap()
        .admission();
    let b = RedisBuckets::new(store, &cfg);
    spend(&b, "up/m1", 30, 80, 1_000).await;
    let (code, v, t) = capacity(&config, "30m").await;
    assert_eq!(code, Some(1), "{t}");
    let rpm = bucket(&v, "up/m1", "rpm");
    assert_eq!(rpm["utilisation_pct_p95"], 80.0, "{t}");
    assert_eq!(rpm["slope_pct_per_hour"], 0.0, "{t}");
    assert!(
        rpm["warnings"].to_string().contains("at or above 70"),
        "{t}"
    );
    assert_eq!(
        bucket(&v, "up/m1", "tpm")["utilisation_pct_p95"],
        80.0,
        "{t}"
    );
    assert_eq!(bucket(&v, "b", "rpm")["utilisation_pct_now"], 0.0);
    let tier = &v["tiers"][0];
    assert_eq!(tier["ceiling_holds"], false, "{t}");
    assert_eq!(
        tier["dimensions"][0],
        json!({"dimension": "rpm", "primary_load_p95": 80.0, "backups_free": 27.0}),
        "{t}"
    );
    assert!(warned(&v, "backups absorb 27 of 80 rpm: 34 %"), "{t}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateways_usage_reaches_the_sqlite_counters_by_its_shutdown() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
    let up = provider().await;
    let dir = tempfile::tempdir().unwrap();
    let config = m1_limited(dir.path(), &up);
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .env(KEY_VAR, "sk-capacity-test")
        .env_remove("POOLCTL_SERVE_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let stderr = tokio::spawn(async move {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s).await;
        s
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("serve prints its address in time")
        .unwrap()
        .expect("serve prints its address");
    let base = line.rsplit(' ').next().unwrap().to_string();
    let client = reqwest::Client::new();
    for _ in 0..3 {
        let r = client
            .post(format!("{base}/v1/chat/completions"))
            .json(&json!({"model": "high", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let pid = child.id().unwrap().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("serve stops in time")
        .unwrap();
    let stderr = stderr.await.unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let state = dir.path().join("state.db");
    assert_eq!(counted(&state, "up/m1", "rpm"), 3.0, "{stderr}");
    assert_eq!(counted(&state, "up/m1", "tpm"), 45.0, "{stderr}");
}

/// Issue 21: on a terminal the sparkline spans the window's own range, so a burst from
/// 1 % to 4 % of the contract rises from `▁` to `█`, where a 0-100 % scale drew it flat.
/// The sparkline is only drawn on a terminal; `script` (util-linux) gives the binary one.
#[tokio::test(flavor = "multi_thread")]
async fn on_a_terminal_a_burst_far_below_capacity_shows_in_the_sparkline() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("no `script` to give poolctl a terminal: nothing to check here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = pool(
        dir.path(),
        "state.db",
        "http://127.0.0.1:9",
        "up/m1",
        "  up/m1: { rpm: 1000 }\n",
        "headroom: 1.0\n",
    );
    let state = dir.path().join("state.db");
    // 10 a minute (1 %), 40 (4 %) in the 20th minute of 30.
    let burst = |i: i64| if i == 19 { 40.0 } else { 10.0 };
    history(&state, &[("up/m1", Dimension::Rpm)], 30, burst, &[]).await;
    let command = format!(
        "'{}' capacity --window 30m --config '{}'",
        env!("CARGO_BIN_EXE_poolctl"),
        config.display()
    );
    let o = tokio::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env(KEY_VAR, "sk-capacity-test")
        .env_remove("POOLCTL_CONFIG")
        .output()
        .await
        .unwrap();
    let t = String::from_utf8_lossy(&o.stdout).replace('\r', "");
    let spark = t
        .lines()
        .find(|l| l.contains("last 30m"))
        .unwrap_or_else(|| panic!("no sparkline on a terminal:\n{t}"));
    assert!(spark.contains('█'), "the burst is flat: {spark}");
    assert!(spark.contains('▁'), "{spark}");
    assert!(spark.ends_with(" 1–4 % last 30m"), "{spark}");
    assert!(spark.chars().count() <= 80, "{spark}");
}
