//! Issue 21: `poolctl serve` safe to expose. Each test drives the built binary over
//! loopback, with a real client or a raw socket, against loopback mock providers (and a
//! real `redis-server` where the store is shared). Socket deadlines are real time and
//! small; nothing sleeps.

use futures_util::FutureExt;
use poolctl::core::vocab::{CallPath, Route, Wire};
use poolctl::harness::mock::{MockRoute, MockServer};
use poolctl::harness::redis_server::RedisServer;
use poolctl::harness::scenario::Reply;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[path = "support/gateway.rs"]
mod gateway;
use gateway::{Gateway, DEADLINE};

const KEY_VAR: &str = "POOLCTL_EXPOSED_TEST_KEY";
const KEY: &str = "sk-exposed-SENTINEL-9f2c";

/// The model string of issue 21: a newline, a forged INFO line and an ANSI escape.
const FORGED: &str =
    "nope\n2026-12-01T00:00:00Z  INFO request … status=200 outcome=\"success\" \u{1b}[31mRED";

async fn mock_ok() -> MockServer {
    MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        vec![MockRoute {
            route: Route::parse("prim/model-a").unwrap(),
            wire: Wire::OpenAi,
            path: CallPath::Chat,
            replies: vec![Reply::Ok {
                text: "hi".into(),
                headers: vec![],
                usage: None,
            }],
            outage: None,
            record: false,
        }],
    )
    .await
    .unwrap()
}

/// A config of tier `high` = `prim/model-a` on `mock`, plus `extra` top-level YAML.
fn config(dir: &Path, mock: &MockServer, extra: &str) -> PathBuf {
    let yaml = format!(
        "providers:\n  prim:\n    wire: openai\n    base_url: {}\n    api_key_env: {KEY_VAR}\n\
         tiers:\n  high:\n    - prim/model-a\n{extra}",
        mock.base_url("prim", Wire::OpenAi)
    );
    let path = dir.join("pool.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

async fn start(config: &Path, flags: &[&str], env: &[(&str, &str)]) -> Gateway {
    let mut all = vec![(KEY_VAR, KEY)];
    all.extend_from_slice(env);
    gateway::start(config, flags, &all).await
}

fn chat(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

/// Sends `request` whole on a fresh connection and reads the answer to its close.
async fn raw(gw: &Gateway, request: &[u8]) -> String {
    let mut tcp = TcpStream::connect(gw.addr).await.unwrap();
    tcp.write_all(request).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(DEADLINE, tcp.read_to_end(&mut out))
        .await
        .expect("the gateway answers and closes in time")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// The gateway's `request` log lines.
fn request_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains(" request ")).collect()
}

#[tokio::test]
async fn a_model_that_forges_a_log_line_is_quoted_escaped_and_cut() {
    let mock = mock_ok().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(&config(dir.path(), &mock, ""), &[], &[]).await;
    let client = reqwest::Client::new();
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .json(&chat(FORGED))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // A 1 MB model is cut in the log line and in the 404 body alike.
    let huge = "m".repeat(1 << 20);
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .json(&chat(&huge))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let body = r.text().await.unwrap();
    assert!(
        body.len() < 8 * 1024,
        "the 404 body is {} bytes",
        body.len()
    );
    assert!(body.contains("…[cut "), "{body}");
    let (_, stderr) = gw.stop().await;
    assert!(!stderr.contains('\u{1b}'), "no raw escape reaches the log");
    let lines = request_lines(&stderr);
    assert_eq!(
        lines.len(),
        2,
        "one line per request, none forged:\n{stderr}"
    );
    assert!(
        lines[0].contains(r#"model="nope\n2026-12-01T00:00:00Z  INFO request … status=200 outcome=\"success\" \u{1b}[31mRED""#),
        "the model is one quoted, escaped field: {}",
        lines[0]
    );
    assert!(!stderr
        .lines()
        .any(|l| l.starts_with("2026-12-01T00:00:00Z")));
    assert!(
        lines[1].len() < 2048,
        "the 1 MB model's line is {} bytes",
        lines[1].len()
    );
    assert!(lines[1].contains("…[cut 1048320 bytes]"), "{}", lines[1]);
    assert_eq!(mock.calls(&Route::parse("prim/model-a").unwrap()), 0);
}

#[tokio::test]
async fn a_json_endpoint_refuses_text_plain_and_a_missing_content_type_with_415() {
    let mock = mock_ok().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(&config(dir.path(), &mock, ""), &[], &[]).await;
    let client = reqwest::Client::new();
    let body = chat("high").to_string();
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let mut req = client
            .post(gw.url("/v1/chat/completions"))
            .body(body.clone());
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 415, "content-type {ct:?}");
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["error"]["code"], "unsupported_media_type", "{b}");
    }
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .header("content-type", "application/json; charset=utf-8")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(mock.calls(&Route::parse("prim/model-a").unwrap()), 1);
}

#[tokio::test]
async fn a_compressed_body_is_refused_with_415_naming_its_coding() {
    let mock = mock_ok().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(&config(dir.path(), &mock, ""), &[], &[]).await;
    let client = reqwest::Client::new();
    // The first bytes of a gzip stream: read as JSON it would be "not valid JSON".
    let gz = vec![0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03];
    for coding in ["gzip", "br", "zstd"] {
        let r = client
            .post(gw.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .header("content-encoding", coding)
            .body(gz.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 415, "{coding}");
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["error"]["code"], "unsupported_media_type", "{b}");
        let msg = b["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(&format!("Content-Encoding: {coding}")),
            "{msg}"
        );
    }
    // `identity` is the body as it stands.
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("content-encoding", "identity")
        .body(chat("high").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(mock.calls(&Route::parse("prim/model-a").unwrap()), 1);
}

#[tokio::test]
async fn a_loopback_gateway_refuses_a_rebound_host_name() {
    let mock = mock_ok().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(&config(dir.path(), &mock, ""), &[], &[]).await;
    let body = chat("high").to_string();
    let post = |host: &str| {
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let port = gw.addr.port();
    for evil in ["evil.example.com", &format!("evil.example.com:{port}")] {
        let answer = raw(&gw, post(evil).as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 421"), "{evil}: {answer}");
        assert!(answer.contains("misdirected_request"), "{answer}");
        let metrics = raw(
            &gw,
            format!("GET /metrics HTTP/1.1\r\nhost: {evil}\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await;
        assert!(metrics.starts_with("HTTP/1.1 421"), "{metrics}");
    }
    for good in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "localhost".to_string(),
    ] {
        let answer = raw(&gw, post(&good).as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{good}: {answer}");
    }
    // An absolute-form target names its host itself, and wins over `Host` (RFC 9112
    // §3.2.2): a foreign one beside a loopback `Host` was served.
    let absolute = |target_host: &str| {
        format!(
            "POST http://{target_host}/v1/chat/completions HTTP/1.1\r\nhost: localhost:{port}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let answer = raw(&gw, absolute("evil.example.com").as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
    let answer = raw(&gw, absolute(&format!("127.0.0.1:{port}")).as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(mock.calls(&Route::parse("prim/model-a").unwrap()), 4);
}

/// Guards RFC 9112 §3.2 ("a server MUST respond with a 400 to any HTTP/1.1 request
/// message that lacks a Host header field"): one without `Host` was served, on the
/// gateway and on its metrics address. HTTP/1.0 predates `Host` and is still served.
#[tokio::test]
async fn an_http_1_1_request_without_host_is_a_400_naming_the_header() {
    let mock = mock_ok().await;
    let dir = tempfile::tempdir().unwrap();
    let free = dead_port();
    let gw = start(
        &config(dir.path(), &mock, ""),
        &["--metrics-listen", &format!("127.0.0.1:{free}")],
        &[],
    )
    .await;
    let body = chat("high").to_string();
    let post = |version: &str| {
        format!(
            "POST /v1/chat/completions {version}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let answer = raw(&gw, post("HTTP/1.1").as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let (_, json) = answer.split_once("\r\n\r\n").unwrap();
    let b: Value = serde_json::from_str(json).unwrap();
    assert_eq!(b["error"]["type"], "invalid_request_error", "{b}");
    assert_eq!(b["error"]["code"], "missing_host", "{b}");
    assert!(
        b["error"]["message"].as_str().unwrap().contains("`Host`"),
        "{b}"
    );
    assert_eq!(mock.calls(&Route::parse("prim/model-a").unwrap()), 0);

    let mut tcp = TcpStream::connect(("127.0.0.1", free)).await.unwrap();
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(DEADLINE, tcp.read_to_end(&mut out))
        .await
        .expect("the metrics address answers and closes in time")
        .unwrap();
    let metrics = String::from_utf8_lossy(&out);
    assert!(metrics.starts_with("HTTP/1.1 400"), "{metrics}");
    assert!(metrics.contains("missing_host"), "{metrics}");

    let answer = raw(&gw, post("HTTP/1.0").as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    assert_eq!(mock.calls(&Route::parse("prim/model-a").unwrap()), 1);
}

/// Guards RFC 9112 §3.2's other half ("... and to any request message that contains
/// more than one Host header field line"): a request with two was judged by its first
/// `Host` alone, so `localhost` then another name reached the loopback gateway.
#[tokio::test]
async fn a_request_with_two_host_lines_is_a_400_and_calls_nothing() {
    let mock = mock_ok().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(&config(dir.path(), &mock, ""), &[], &[]).await;
    let body = chat("high").to_string();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\nhost: evil.example\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = raw(&gw, request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let (_, json) = answer.split_once("\r\n\r\n").unwrap();
    let b: Value = serde_json::from_str(json).unwrap();
    assert_eq!(b["error"]["code"], "several_hosts", "{b}");
    assert_eq!(mock.calls(&Route::parse("prim/model-a").unwrap()), 0);
}

#[tokio::test]
async fn a_request_from_a_web_page_is_refused_unless_its_origin_is_allowed() {
    let mock = mock_ok().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &mock, "");
    let client = reqwest::Client::new();
    let post_from = |gw: &Gateway, origin: &'static str| {
        client
            .post(gw.url("/v1/chat/completions"))
            .header("origin", origin)
            .json(&chat("high"))
            .send()
            .map(Result::unwrap)
    };
    let gw = start(&cfg, &[], &[]).await;
    let r = post_from(&gw, "https://evil.example.com").await;
    assert_eq!(r.status(), 403);
    assert!(
        r.headers().get("access-control-allow-origin").is_none(),
        "a refused origin is never told it may read"
    );
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["error"]["code"], "origin_not_allowed");
    drop(gw);

    let gw = start(&cfg, &["--allow-origin", "https://app.example.com"], &[]).await;
    let r = post_from(&gw, "https://evil.example.com").await;
    assert_eq!(r.status(), 403, "an origin not listed is still refused");
    let r = client
        .request(reqwest::Method::OPTIONS, gw.url("/v1/chat/completions"))
        .header("origin", "https://app.example.com")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204, "the listed origin's preflight");
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://app.example.com"
    );
    assert_eq!(
        r.headers()["access-control-allow-headers"],
        "authorization, content-type"
    );
    let r = post_from(&gw, "https://app.example.com").await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://app.example.com"
    );
    assert_eq!(mock.calls(&Route::parse("prim/model-a").unwrap()), 1);
}

#[tokio::test]
async fn head_healthz_and_readyz_answer_like_get_without_a_body() {
    let mock = mock_ok().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(&config(dir.path(), &mock, ""), &[], &[]).await;
    for path in ["/healthz", "/readyz"] {
        let get = raw(
            &gw,
            format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await;
        let head = raw(
            &gw,
            format!("HEAD {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await;
        let (get_head, get_body) = get.split_once("\r\n\r\n").unwrap();
        assert!(get_head.starts_with("HTTP/1.1 200"), "{get}");
        assert!(!get_body.is_empty());
        assert!(head.starts_with("HTTP/1.1 200"), "HEAD {path}: {head}");
        assert!(
            head.ends_with("\r\n\r\n"),
            "HEAD {path} has no body: {head:?}"
        );
        assert!(
            head.contains(&format!("content-length: {}", get_body.len())),
            "HEAD {path} says how long GET's body is: {head}"
        );
    }
}

/// A loopback port nothing listens on.
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn readyz_is_degraded_with_local_share_and_503_with_fail_closed_when_redis_is_down() {
    let mock = mock_ok().await;
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let state = format!(
        "state: redis://127.0.0.1:{}/0\nstate_timeout_ms: 200\n",
        dead_port()
    );
    for (policy, status) in [("local_share", 200), ("fail_closed", 503)] {
        let cfg = config(
            dir.path(),
            &mock,
            &format!("{state}on_store_error: {policy}\n"),
        );
        let gw = start(&cfg, &[], &[]).await;
        let r = client.get(gw.url("/readyz")).send().await.unwrap();
        assert_eq!(r.status(), status, "{policy}");
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["ready"], status == 200, "{policy}: {b}");
        let expect = if status == 200 {
            "degraded"
        } else {
            "unreachable"
        };
        assert_eq!(b["store"], expect, "{policy}: {b}");
        assert!(!b["reason"].as_str().unwrap_or("").is_empty(), "{b}");
        assert_eq!(
            client
                .get(gw.url("/healthz"))
                .send()
                .await
                .unwrap()
                .status(),
            200,
            "liveness is not readiness"
        );
    }
}

#[tokio::test]
async fn readyz_answers_ready_with_a_reachable_redis_and_503_for_an_unreadable_sqlite_file() {
    let mock = mock_ok().await;
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let redis = RedisServer::must_start();
    let cfg = config(dir.path(), &mock, &format!("state: {}\n", redis.url()));
    let gw = start(&cfg, &[], &[]).await;
    let r = client.get(gw.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b, json!({"ready": true}));
    drop(gw);

    let file = dir.path().join("state.db");
    let cfg = config(dir.path(), &mock, &format!("state: {}\n", file.display()));
    let gw = start(&cfg, &[], &[]).await;
    assert_eq!(
        client.get(gw.url("/readyz")).send().await.unwrap().status(),
        200
    );
    // The file and its write-ahead log overwritten: SQLite can no longer read them.
    for name in ["state.db", "state.db-wal", "state.db-shm"] {
        let path = dir.path().join(name);
        if let Ok(bytes) = std::fs::read(&path) {
            std::fs::write(&path, vec![b'x'; bytes.len().max(4096)]).unwrap();
        }
    }
    let r = client.get(gw.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["store"], "unreachable", "{b}");
}

#[tokio::test]
async fn metrics_require_the_token_when_set_or_are_served_on_their_own_address() {
    let mock = mock_ok().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &mock, "");
    let free = dead_port();
    let gw = start(
        &cfg,
        &["--metrics-listen", &format!("127.0.0.1:{free}")],
        &[("POOLCTL_SERVE_TOKEN", "gw-token-77")],
    )
    .await;
    let client = reqwest::Client::new();
    let r = client.get(gw.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 401, "no token, no metrics");
    let r = client
        .get(gw.url("/metrics"))
        .bearer_auth("gw-token-77")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("poolctl_route_health"));
    let own = format!("http://127.0.0.1:{free}/metrics");
    let r = client.get(&own).send().await.unwrap();
    assert_eq!(r.status(), 200, "the metrics address needs no token");
    assert!(r.text().await.unwrap().contains("poolctl_route_health"));
    let r = client
        .get(format!("http://127.0.0.1:{free}/v1/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "the metrics address serves nothing else");
}

/// Commands Redis has processed so far.
fn redis_commands(redis: &RedisServer) -> u64 {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port().to_string(), "INFO", "stats"])
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO stats names total_commands_processed")
}

#[tokio::test]
async fn twenty_scrapes_in_a_burst_read_the_shared_store_about_once() {
    let mock = mock_ok().await;
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::must_start();
    let cfg = config(
        dir.path(),
        &mock,
        &format!(
            "state: {}\nlimits:\n  prim/model-a: {{ rpm: 60 }}\n",
            redis.url()
        ),
    );
    let gw = start(&cfg, &[], &[]).await;
    gw.metrics().await; // connections open, scripts loaded
    let before = redis_commands(&redis);
    for _ in 0..20 {
        gw.metrics().await;
    }
    let during = redis_commands(&redis) - before - 1; // the INFO itself
                                                      // One scrape reads one route's health and one bucket's level: a few commands. Twenty
                                                      // uncached scrapes were ≥ 40; within the second they share one read (two at most,
                                                      // should the burst straddle the cache's second).
    assert!(during <= 8, "20 scrapes cost Redis {during} commands");
}

#[tokio::test]
async fn a_request_no_bucket_can_ever_hold_is_a_429_request_too_large_without_retry_after() {
    let mock = mock_ok().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &mock,
        "limits:\n  prim/model-a: { tpm: 100000 }\nheadroom: 1.0\n",
    );
    let gw = start(&cfg, &[], &[]).await;
    let client = reqwest::Client::new();
    for _ in 0..2 {
        let mut body = chat("high");
        body["max_tokens"] = json!(200000);
        let r = client
            .post(gw.url("/v1/chat/completions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 429);
        assert!(
            r.headers().get("retry-after").is_none(),
            "no wait would admit it"
        );
        assert_eq!(r.headers()["x-should-retry"], "false");
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["error"]["code"], "request_too_large", "{b}");
        assert_eq!(b["error"]["type"], "too_large", "{b}");
        let message = b["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("holds at most 100000 tokens") && message.contains("reserves 2000"),
            "the message names the capacity and the reservation: {message}"
        );
    }
    // Below interactive a request may use the bucket only down to the interactive
    // floor (20 %): 95 000 tokens fit the bucket, so the request is not too large, but
    // no refill admits it at `background`: shed (admission), with no Retry-After, for
    // no wait would admit it either.
    let mut body = chat("high");
    body["max_tokens"] = json!(95000);
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .header("x-poolctl-priority", "background")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503, "a shed with no instant to retry at");
    assert!(r.headers().get("retry-after").is_none());
    assert_eq!(r.headers()["x-poolctl-outcome"], "shed");
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["error"]["type"], "admission", "{b}");
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .json(&chat("high"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the bucket was never spent on it");
    let (_, stderr) = gw.stop().await;
    assert!(
        stderr.contains("skipped=\"prim/model-a:exceeds_bucket\""),
        "the skip reason is in the log line: {stderr}"
    );
    assert_eq!(mock.calls(&Route::parse("prim/model-a").unwrap()), 1);
}

#[tokio::test]
async fn a_session_id_longer_than_the_bound_is_a_400_and_is_never_kept() {
    let mock = mock_ok().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &mock, "sessions: { max_id_bytes: 64 }\n");
    let gw = start(&cfg, &[], &[]).await;
    let client = reqwest::Client::new();
    let send = |id: String| {
        client
            .post(gw.url("/v1/chat/completions"))
            .header("x-poolctl-session", id)
            .json(&chat("high"))
            .send()
    };
    let r = send("s".repeat(65)).await.unwrap();
    assert_eq!(r.status(), 400);
    let b: Value = r.json().await.unwrap();
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("longer than 64 bytes"),
        "{b}"
    );
    assert_eq!(send("s".repeat(64)).await.unwrap().status(), 200);
    assert_eq!(mock.calls(&Route::parse("prim/model-a").unwrap()), 1);
}

#[test]
fn a_session_bound_of_zero_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.yaml");
    std::fs::write(
        &path,
        "providers:\n  prim:\n    wire: openai\n    base_url: http://127.0.0.1:9/v1\n    api_key_env: K\n\
         tiers:\n  high:\n    - prim/model-a\nsessions: { max: 0, idle_minutes: 5 }\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "check finds errors: {text}");
    assert!(
        text.contains("unknown field `idle_minutes`") && text.contains("did you mean `idle_ms`"),
        "the unknown field is named: {text}"
    );
    assert!(
        text.contains("`sessions.max`: must be at least 1"),
        "{text}"
    );
}

/// `redis-cli -p PORT ARGS…`, its answer trimmed.
fn redis_cli(redis: &RedisServer, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port().to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn with_redis_state_a_fleet_shares_session_pins_that_expire_when_idle() {
    // Two routes, both ready: a pin is the only reason to start with the second.
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        ["prim/model-a", "back/model-b"]
            .iter()
            .map(|r| MockRoute {
                route: Route::parse(r).unwrap(),
                wire: Wire::OpenAi,
                path: CallPath::Chat,
                replies: vec![Reply::Ok {
                    text: r.to_string(),
                    headers: vec![],
                    usage: None,
                }],
                outage: None,
                record: false,
            })
            .collect(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::must_start();
    let yaml = format!(
        "providers:\n  prim:\n    wire: openai\n    base_url: {}\n    api_key_env: {KEY_VAR}\n\
         \x20 back:\n    wire: openai\n    base_url: {}\n    api_key_env: {KEY_VAR}\n\
         tiers:\n  high:\n    - prim/model-a\n    - back/model-b\n\
         state: {}\nsessions: {{ idle_ms: 60000 }}\n",
        mock.base_url("prim", Wire::OpenAi),
        mock.base_url("back", Wire::OpenAi),
        redis.url()
    );
    let cfg = dir.path().join("pool.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let (one, two) = (start(&cfg, &[], &[]).await, start(&cfg, &[], &[]).await);
    let client = reqwest::Client::new();
    let ask = |gw: &Gateway, session: &str| {
        client
            .post(gw.url("/v1/chat/completions"))
            .header("x-poolctl-session", session.to_string())
            .json(&chat("high"))
            .send()
    };
    // A pin written by another process (as `one` writes its own, below) moves `two`.
    redis_cli(
        &redis,
        &["SET", "poolctl:s:{conv-1}", "back/model-b", "PX", "60000"],
    );
    let r = ask(&two, "conv-1").await.unwrap();
    assert_eq!(r.headers()["x-poolctl-served-by"], "back/model-b");
    // `one` serves a new session on the first route and pins it in Redis, with the
    // idle expiry as its time to live.
    let r = ask(&one, "conv-2").await.unwrap();
    assert_eq!(r.headers()["x-poolctl-served-by"], "prim/model-a");
    let pinned = tokio::time::timeout(DEADLINE, async {
        loop {
            let v = redis_cli(&redis, &["GET", "poolctl:s:{conv-2}"]);
            if !v.is_empty() {
                return v;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the pin reaches Redis");
    assert_eq!(pinned, "prim/model-a");
    let ttl: i64 = redis_cli(&redis, &["PTTL", "poolctl:s:{conv-2}"])
        .parse()
        .unwrap();
    assert!((1..=60_000).contains(&ttl), "expires within idle_ms: {ttl}");
    assert_eq!(mock.calls(&Route::parse("prim/model-a").unwrap()), 1);
    assert_eq!(mock.calls(&Route::parse("back/model-b").unwrap()), 1);
}

fn mock_route(route: &str, replies: Vec<Reply>) -> MockRoute {
    MockRoute {
        route: Route::parse(route).unwrap(),
        wire: Wire::OpenAi,
        path: CallPath::Chat,
        replies,
        outage: None,
        record: false,
    }
}

/// A whole answer `ms` after the request: a request still in flight meanwhile.
fn late(ms: u64) -> Reply {
    Reply::Delay {
        ms,
        then: Box::new(Reply::Ok {
            text: "late".into(),
            headers: vec![],
            usage: None,
        }),
    }
}

async fn mock_with(routes: Vec<MockRoute>) -> MockServer {
    MockServer::start(([127, 0, 0, 1], 0).into(), routes)
        .await
        .unwrap()
}

/// A stream of `n` chunks `gap_ms` apart: long enough to be cut.
fn slow_stream(n: usize, gap_ms: u64) -> Reply {
    use poolctl::harness::scenario::{StreamEnd, StreamItem, StreamReply};
    Reply::Stream(StreamReply {
        items: (0..n).map(|i| StreamItem::Text(format!("t{i} "))).collect(),
        end: StreamEnd::Done,
        first_token_ms: 0,
        gap_ms,
        headers: vec![],
        usage: None,
    })
}

/// Polls the gateway's `/metrics` until `series` reads `value`.
async fn wait_metric(gw: &Gateway, series: &str, value: f64) {
    let found = tokio::time::timeout(DEADLINE, async {
        loop {
            let text = gw.metrics().await;
            let v = text
                .lines()
                .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok());
            if v == Some(value) {
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(found.is_ok(), "{series} never reached {value}");
}

#[tokio::test]
async fn a_request_or_stream_the_client_abandons_is_logged_and_counted_cancelled() {
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        vec![mock_route(
            "prim/model-a",
            vec![late(15_000), slow_stream(200, 100)],
        )],
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gw = start(&config(dir.path(), &mock, ""), &[], &[]).await;
    // A whole answer the client stops waiting for.
    let gone = reqwest::Client::new()
        .post(gw.url("/v1/chat/completions"))
        .timeout(std::time::Duration::from_millis(300))
        .json(&chat("high"))
        .send()
        .await;
    assert!(gone.is_err(), "the client gave up first");
    wait_metric(
        &gw,
        r#"poolctl_requests_total{workflow="high",outcome="cancelled"}"#,
        1.0,
    )
    .await;
    // A stream the client drops after its first chunk.
    let mut body = chat("high");
    body["stream"] = json!(true);
    let mut r = reqwest::Client::new()
        .post(gw.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.chunk().await.unwrap().is_some());
    drop(r);
    wait_metric(
        &gw,
        r#"poolctl_requests_total{workflow="high",outcome="cancelled"}"#,
        2.0,
    )
    .await;
    let (_, stderr) = gw.stop().await;
    let lines = request_lines(&stderr);
    assert_eq!(lines.len(), 2, "one line per request:\n{stderr}");
    assert!(
        lines[0].contains("status=499")
            && lines[0].contains(r#"outcome="cancelled""#)
            && lines[0].contains(r#"reason="client_gone""#),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains("status=200") && lines[1].contains(r#"outcome="cancelled""#),
        "a stream's client saw its 200 head: {}",
        lines[1]
    );
    // The head named the route serving the stream; so does its line.
    assert!(lines[1].contains("served_by=prim/model-a "), "{}", lines[1]);
}

#[tokio::test]
async fn a_stream_cut_by_the_drain_deadline_ends_with_stream_interrupted_and_its_outcome() {
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        vec![mock_route("prim/model-a", vec![slow_stream(200, 50)])],
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gw = start(&config(dir.path(), &mock, ""), &["--drain-ms", "300"], &[]).await;
    let mut body = chat("high");
    body["stream"] = json!(true);
    let mut r = reqwest::Client::new()
        .post(gw.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut seen = String::from_utf8_lossy(&r.chunk().await.unwrap().unwrap()).into_owned();
    let pid = gw.child.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let rest = tokio::time::timeout(DEADLINE, async {
        while let Ok(Some(c)) = r.chunk().await {
            seen.push_str(&String::from_utf8_lossy(&c));
        }
    })
    .await;
    assert!(rest.is_ok(), "the cut stream ends");
    assert!(seen.contains(r#""code":"stream_interrupted""#), "{seen}");
    assert!(
        seen.contains(": poolctl outcome=cancelled attempts=1"),
        "{seen}"
    );
    assert!(
        !seen.contains("[DONE]"),
        "a cut answer is never presented as complete"
    );
    let (code, stderr) = gw.stop().await;
    assert_eq!(code, Some(0), "{stderr}");
    let lines = request_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains(r#"outcome="cancelled""#)
            && lines[0].contains(r#"reason="drain_deadline""#)
            && lines[0].contains("served_by=prim/model-a "),
        "{}",
        lines[0]
    );
}

#[tokio::test]
async fn requests_hyper_cannot_parse_get_the_documented_json_error_and_no_retry() {
    let mock = mock_ok().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(&config(dir.path(), &mock, ""), &[], &[]).await;
    let post = |extra: &str| {
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n{extra}\r\n"
        )
        .into_bytes()
    };
    let many_headers: String = (0..10_000).map(|i| format!("x-h{i}: 1\r\n")).collect();
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "a malformed request line",
            b"GARBAGE\r\n\r\n".to_vec(),
            400,
            "malformed_request",
        ),
        (
            "an unknown HTTP version",
            b"GET /healthz HTTP/9.9\r\nhost: localhost\r\n\r\n".to_vec(),
            400,
            "malformed_request",
        ),
        (
            "a 200 KB request line",
            format!(
                "GET /{} HTTP/1.1\r\nhost: localhost\r\n\r\n",
                "a".repeat(200_000)
            )
            .into_bytes(),
            414,
            "uri_too_long",
        ),
        (
            "10,000 headers",
            format!("GET /healthz HTTP/1.1\r\nhost: localhost\r\n{many_headers}\r\n").into_bytes(),
            431,
            "headers_too_large",
        ),
        (
            "a bad Content-Length",
            post("content-length: abc\r\n"),
            400,
            "malformed_request",
        ),
        (
            "a duplicate Content-Length",
            post("content-length: 5\r\ncontent-length: 6\r\n"),
            400,
            "malformed_request",
        ),
        (
            "an unknown Transfer-Encoding",
            post("transfer-encoding: gzip\r\n"),
            400,
            "malformed_request",
        ),
        (
            "Content-Length: 2^64-1",
            post("content-length: 18446744073709551615\r\n"),
            413,
            "request_too_large",
        ),
    ];
    for (what, request, status, code) in cases {
        let answer = raw(&gw, &request).await;
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        assert!(
            head.starts_with(&format!("HTTP/1.1 {status} ")),
            "{what}: {head}"
        );
        assert!(head.contains("x-should-retry: false"), "{what}: {head}");
        assert!(head.contains("x-poolctl-outcome: failed"), "{what}: {head}");
        let b: Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: {e}: {body:?}"));
        assert_eq!(b["error"]["code"], code, "{what}: {b}");
    }
    assert_eq!(mock.calls(&Route::parse("prim/model-a").unwrap()), 0);
    let (_, stderr) = gw.stop().await;
    let lines = request_lines(&stderr);
    assert_eq!(
        lines.len(),
        8,
        "one line for each refusal hyper made:\n{stderr}"
    );
    assert!(lines
        .iter()
        .any(|l| l.contains("status=413") && l.contains(r#"reason="request_too_large""#)));
}

#[tokio::test]
async fn past_the_held_answer_cap_a_newer_large_stream_waits_while_the_oldest_and_small_go_on() {
    // Streams of one tool call in 4,000 argument deltas with no gap (a tool call is
    // assembled whole, so what it streams is held), and a small whole answer beside.
    use poolctl::harness::scenario::{StreamEnd, StreamItem, StreamReply};
    // The arguments of 4,000 deltas make one JSON object: `{"k":"a…a…"}`.
    let delta = |i: usize| {
        let mut piece = format!("a{i:0>90}");
        if i == 0 {
            piece = format!("{{\"k\":\"{piece}");
        }
        if i == 3_999 {
            piece.push_str("\"}");
        }
        let mut call = json!({"index": 0, "function": {"arguments": piece}});
        if i == 0 {
            call["id"] = json!("call_1");
            call["type"] = json!("function");
            call["function"]["name"] = json!("f");
        }
        let chunk = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}]});
        StreamItem::Raw {
            raw: format!("data: {chunk}\n\n"),
        }
    };
    let tool_stream = Reply::Stream(StreamReply {
        items: (0..4_000).map(delta).collect(),
        end: StreamEnd::Done,
        first_token_ms: 0,
        gap_ms: 0,
        headers: vec![],
        usage: None,
    });
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        vec![
            mock_route("prim/model-a", vec![tool_stream]),
            mock_route(
                "back/model-b",
                vec![Reply::Ok {
                    text: "small".into(),
                    headers: vec![],
                    usage: None,
                }],
            ),
        ],
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "providers:\n  prim:\n    wire: openai\n    base_url: {}\n    api_key_env: {KEY_VAR}\n\
         \x20 back:\n    wire: openai\n    base_url: {}\n    api_key_env: {KEY_VAR}\n\
         tiers:\n  big:\n    - prim/model-a\n  small:\n    - back/model-b\n",
        mock.base_url("prim", Wire::OpenAi),
        mock.base_url("back", Wire::OpenAi),
    );
    let cfg = dir.path().join("pool.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let gw = start(&cfg, &["--max-held-answer-bytes", "32768"], &[]).await;
    let client = reqwest::Client::new();
    let mut body = chat("big");
    body["stream"] = json!(true);
    let mut bigs = Vec::new();
    for _ in 0..3 {
        let big = client
            .post(gw.url("/v1/chat/completions"))
            .json(&body)
            .send();
        bigs.push(tokio::spawn(async move {
            let r = big.await.unwrap();
            r.text().await.unwrap_or_default()
        }));
    }
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .json(&chat("small"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        200,
        "a small answer is read beside the large ones"
    );
    for big in bigs {
        let text = tokio::time::timeout(DEADLINE, big).await.unwrap().unwrap();
        assert!(
            text.contains("data: [DONE]") && text.contains(&format!("a{:0>90}", 3999)),
            "each large stream is read to its end in turn: {}",
            &text[text.len().saturating_sub(300)..]
        );
    }
    let m = gw.metrics().await;
    let waits = m
        .lines()
        .find_map(|l| l.strip_prefix("poolctl_held_answer_waits_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap();
    assert!(waits >= 1.0, "a newer large stream waited for room:\n{m}");
    wait_metric(&gw, "poolctl_held_answer_bytes", 0.0).await;
}

#[tokio::test]
async fn a_request_sent_whole_then_closed_at_once_still_gets_its_line() {
    let mock = mock_with(vec![mock_route("prim/model-a", vec![late(2_000)])]).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(&config(dir.path(), &mock, ""), &[], &[]).await;
    let body = chat("high").to_string();
    for _ in 0..5 {
        let mut tcp = TcpStream::connect(gw.addr).await.unwrap();
        let req = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        tcp.write_all(req.as_bytes()).await.unwrap();
        drop(tcp);
    }
    // Counted whatever their workflow label (none yet, when hyper dropped a request
    // before its handler ran).
    let counted = tokio::time::timeout(DEADLINE, async {
        loop {
            let text = gw.metrics().await;
            let n: f64 = text
                .lines()
                .filter(|l| {
                    l.starts_with("poolctl_requests_total") && l.contains(r#"outcome="cancelled""#)
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            if n == 5.0 {
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(counted.is_ok(), "five cancelled requests counted");
    let (_, stderr) = gw.stop().await;
    let lines = request_lines(&stderr);
    assert_eq!(lines.len(), 5, "one line each:\n{stderr}");
    assert!(
        lines.iter().all(|l| l.contains(r#"outcome="cancelled""#)),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_request_still_routing_at_the_drain_deadline_is_a_503_logged_as_cut() {
    let mock = mock_with(vec![mock_route("prim/model-a", vec![late(10_000)])]).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(&config(dir.path(), &mock, ""), &["--drain-ms", "300"], &[]).await;
    let asked = reqwest::Client::new()
        .post(gw.url("/v1/chat/completions"))
        .json(&chat("high"))
        .send();
    let asked = tokio::spawn(asked);
    tokio::time::timeout(DEADLINE, async {
        while mock.calls(&Route::parse("prim/model-a").unwrap()) == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the request reaches the upstream");
    let pid = gw.child.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let r = tokio::time::timeout(DEADLINE, asked)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["x-poolctl-outcome"], "cancelled");
    // The call the deadline cut was made: counted (it said 0).
    assert_eq!(r.headers()["x-poolctl-attempts"], "1");
    let (code, stderr) = gw.stop().await;
    assert_eq!(code, Some(0), "{stderr}");
    let lines = request_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("status=503") && lines[0].contains(r#"reason="drain_deadline""#),
        "{}",
        lines[0]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_tells_the_truth_about_a_redis_cluster_and_a_tls_node() {
    use poolctl::harness::redis_server::{RedisCluster, TestCa};
    let mock = mock_ok().await;
    let client = reqwest::Client::new();
    let ready = |gw: &Gateway| {
        let url = gw.url("/readyz");
        let client = client.clone();
        async move {
            let r = client.get(url).send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        }
    };
    // A cluster: ready while it answers; degraded (still 200, local_share) once gone.
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::must_start(None);
    let cfg = config(
        dir.path(),
        &mock,
        &format!("state: \"{}\"\n", cluster.url()),
    );
    let gw = start(&cfg, &[], &[]).await;
    assert_eq!(ready(&gw).await, (200, json!({"ready": true})));
    drop(cluster);
    let (status, b) = ready(&gw).await;
    assert_eq!((status, &b["store"]), (200, &json!("degraded")), "{b}");
    drop(gw);
    // A TLS node, trusted through state_tls.ca_file; with fail_closed, 503 once gone.
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::generate().unwrap();
    let mut node = RedisServer::start_tls(&ca, false).unwrap();
    let cfg = config(
        dir.path(),
        &mock,
        &format!(
            "state: {}\nstate_tls: {{ ca_file: {} }}\non_store_error: fail_closed\n",
            node.url(),
            ca.ca_file().display()
        ),
    );
    let gw = start(&cfg, &[], &[]).await;
    assert_eq!(ready(&gw).await, (200, json!({"ready": true})));
    node.kill();
    let (status, b) = ready(&gw).await;
    assert_eq!((status, &b["store"]), (503, &json!("unreachable")), "{b}");
}
