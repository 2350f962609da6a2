//! `poolctl serve` end to end: the built binary in front of real loopback mock
//! providers, driven by a real HTTP client and by hostile raw sockets. Socket deadlines
//! are real time and kept small; no test sleeps.

use poolctl::core::vocab::{CallPath, Route, Wire};
use poolctl::harness::mock::{MockRoute, MockServer};
use poolctl::harness::scenario::{Body, Reply, StreamEnd, StreamItem, StreamReply};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

#[path = "support/gateway.rs"]
mod gateway;
use gateway::{Gateway, DEADLINE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const KEY_VAR: &str = "POOLCTL_SERVE_TEST_KEY";
/// The gateway's upstream key: it must reach the upstream and nothing else.
const UPSTREAM_KEY: &str = "sk-upstream-SENTINEL-4b1d";

fn route(s: &str) -> Route {
    Route::parse(s).unwrap()
}

fn mock_route(r: &str, wire: Wire, replies: Vec<Reply>) -> MockRoute {
    MockRoute {
        route: route(r),
        wire,
        path: CallPath::Chat,
        replies,
        outage: None,
        record: false,
    }
}

fn ok(text: &str) -> Reply {
    Reply::Ok {
        text: text.into(),
        headers: vec![],
        usage: None,
    }
}

fn rate_limited() -> Reply {
    Reply::Status {
        status: 429,
        headers: vec![("retry-after".into(), "3600".into())],
        body: Body::Json(
            json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}),
        ),
    }
}

fn stream(chunks: &[&str], end: StreamEnd, gap_ms: u64) -> Reply {
    Reply::Stream(StreamReply {
        items: chunks
            .iter()
            .map(|c| StreamItem::Text(c.to_string()))
            .collect(),
        end,
        first_token_ms: 0,
        gap_ms,
        headers: vec![],
        usage: None,
    })
}

/// A pool config for `providers` (name, wire, base_url) and `tiers`.
fn write_config(
    dir: &Path,
    providers: &[(&str, Wire, String)],
    tiers: &[(&str, &[&str])],
) -> std::path::PathBuf {
    let mut yaml = String::from("providers:\n");
    for (name, wire, url) in providers {
        yaml.push_str(&format!(
            "  {name}:\n    wire: {wire}\n    base_url: {url}\n    api_key_env: {KEY_VAR}\n"
        ));
    }
    yaml.push_str("tiers:\n");
    for (name, routes) in tiers {
        yaml.push_str(&format!("  {name}:\n"));
        for r in *routes {
            yaml.push_str(&format!("    - {r}\n"));
        }
    }
    let path = dir.join("pool.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// A pool config whose tier `high` is `routes`, each of an OpenAI-wire provider (named
/// as the route names it) served by `mock`.
fn openai_high(dir: &Path, mock: &MockServer, routes: &[&str]) -> std::path::PathBuf {
    let providers: Vec<(&str, Wire, String)> = routes
        .iter()
        .map(|r| {
            let p = r.split('/').next().unwrap();
            (p, Wire::OpenAi, mock.base_url(p, Wire::OpenAi))
        })
        .collect();
    write_config(dir, &providers, &[("high", routes)])
}

/// `poolctl serve` with the upstream key in its environment.
async fn start(config: &Path, extra: &[&str], env: &[(&str, &str)]) -> Gateway {
    let mut all = vec![(KEY_VAR, UPSTREAM_KEY)];
    all.extend_from_slice(env);
    gateway::start(config, extra, &all).await
}

/// POSTs `body` to the gateway's chat completions, within [`DEADLINE`].
async fn post_chat(gw: &Gateway, body: &Value) -> reqwest::Response {
    gateway::send(gw, "/v1/chat/completions", body.to_string(), &[]).await
}

fn chat_body(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "Say hello."}]})
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> &'a str {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// The value of the metric line that starts with `series` (labels included).
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn openai_mock(routes: Vec<MockRoute>) -> MockServer {
    MockServer::start(([127, 0, 0, 1], 0).into(), routes)
        .await
        .unwrap()
}

#[tokio::test]
async fn failing_primary_is_served_by_the_backup_with_headers_and_metrics() {
    let mock = openai_mock(vec![
        mock_route("prim/model-a", Wire::OpenAi, vec![rate_limited()]),
        mock_route(
            "back/model-b",
            Wire::OpenAi,
            vec![ok("hello from the backup")],
        ),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a", "back/model-b"]);
    let gw = start(&config, &[], &[]).await;
    let client = reqwest::Client::new();
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("client-secret-never-forwarded")
        .json(&chat_body("high", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-served-by"), "back/model-b");
    assert_eq!(header(&r, "x-poolctl-outcome"), "success");
    assert_eq!(header(&r, "x-poolctl-attempts"), "2");
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "hello from the backup"
    );
    assert_eq!(body["model"], "model-b", "the model that actually answered");
    assert_eq!(
        (
            mock.calls(&route("prim/model-a")),
            mock.calls(&route("back/model-b"))
        ),
        (1, 1)
    );

    let m = gw.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"poolctl_requests_total{workflow="high",outcome="success"}"#
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, r#"poolctl_recoveries_total{kind="fallback"}"#),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, r#"poolctl_recoveries_total{kind="primary"}"#),
        Some(0.0),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            r#"poolctl_attempts_total{route="prim/model-a",class="rate_limited",action="fallback"}"#
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            r#"poolctl_attempts_total{route="back/model-b",class="ok",action="done"}"#
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            r#"poolctl_route_health{route="prim/model-a",state="cooling"}"#
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            r#"poolctl_route_health{route="back/model-b",state="ready"}"#
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, "poolctl_gateway_overhead_seconds_count"),
        Some(1.0),
        "{m}"
    );
    let (code, stderr) = gw.stop().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !stderr.contains(UPSTREAM_KEY) && !stderr.contains("client-secret"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("Say hello"),
        "no prompt in the log unless asked: {stderr}"
    );
    assert!(
        stderr.contains("served_by=back/model-b"),
        "one line per request: {stderr}"
    );
}

/// Guards a panic: masking keys in an upstream's message sliced it at every byte, so
/// any non-ASCII message (DashScope's Chinese 429, an accented French one) panicked the
/// handler, and the client got a 500 instead of the 429 the router decided.
#[tokio::test]
async fn a_chinese_worded_429_reaches_the_client_as_a_429_not_a_500() {
    let zh = Reply::Status {
        status: 429,
        headers: vec![],
        body: Body::Json(json!({"error": {
            "message": "请登录platform进行实名认证以获取更高rpm",
            "type": "requests", "code": "rate_limit_exceeded"}})),
    };
    let mock = openai_mock(vec![mock_route("prim/model-a", Wire::OpenAi, vec![zh])]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    let gw = start(&config, &[], &[]).await;
    let r = post_chat(&gw, &chat_body("high", false)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(header(&r, "x-poolctl-outcome"), "failed");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "capacity", "{body}");
    let (code, stderr) = gw.stop().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Guards an unexplained failure: an upstream redirect (never followed, so a POST is not
/// replayed elsewhere) reached the client as `attempts: prim/model-a unknown`, naming
/// neither the status nor the redirect, as its body is empty.
#[tokio::test]
async fn an_upstream_redirect_is_named_in_the_error_with_its_status() {
    let moved = Reply::Status {
        status: 307,
        headers: vec![("location".into(), "http://127.0.0.1:9/v1/elsewhere".into())],
        body: Body::Empty,
    };
    let mock = openai_mock(vec![mock_route("prim/model-a", Wire::OpenAi, vec![moved])]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    let gw = start(&config, &[], &[]).await;
    let r = post_chat(&gw, &chat_body("high", false)).await;
    assert_eq!(r.status(), 502);
    let body: Value = r.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("upstream answered 307 (a redirect, not followed)"),
        "{body}"
    );
    let (code, stderr) = gw.stop().await;
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test]
async fn every_route_rate_limited_is_one_429_with_retry_after_and_no_retry_hint() {
    let mock = openai_mock(vec![
        mock_route("prim/model-a", Wire::OpenAi, vec![rate_limited()]),
        mock_route("back/model-b", Wire::OpenAi, vec![rate_limited()]),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a", "back/model-b"]);
    let gw = start(&config, &[], &[]).await;
    let client = reqwest::Client::new();
    for round in 0..2 {
        let r = client
            .post(gw.url("/v1/chat/completions"))
            .json(&chat_body("high", false))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 429, "round {round}");
        assert_eq!(header(&r, "x-should-retry"), "false");
        let retry: u64 = header(&r, "retry-after")
            .parse()
            .expect("a Retry-After in seconds");
        assert!((3500..=3600).contains(&retry), "retry-after {retry}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["type"], "capacity");
        assert_eq!(body["error"]["code"], "capacity");
    }
    // The second request found both routes cooling: no upstream call at all.
    assert_eq!(
        (
            mock.calls(&route("prim/model-a")),
            mock.calls(&route("back/model-b"))
        ),
        (1, 1)
    );
    let m = gw.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"poolctl_requests_total{workflow="high",outcome="failed"}"#
        ),
        Some(2.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, r#"poolctl_recoveries_total{kind="failed_closed"}"#),
        Some(2.0),
        "{m}"
    );
}

/// A route that cannot carry the request is no route for it at any time: its being
/// ready must not hide the wait of the one route that could serve it.
#[tokio::test]
async fn retry_after_comes_from_the_routes_that_could_carry_the_request() {
    let mock = openai_mock(vec![
        mock_route("prim/model-a", Wire::OpenAi, vec![rate_limited()]),
        mock_route("ant/claude-x", Wire::Anthropic, vec![ok("never")]),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &[
            ("prim", Wire::OpenAi, mock.base_url("prim", Wire::OpenAi)),
            (
                "ant",
                Wire::Anthropic,
                mock.base_url("ant", Wire::Anthropic),
            ),
        ],
        &[("high", &["ant/claude-x", "prim/model-a"])],
    );
    let gw = start(&config, &[], &[]).await;
    let mut body = chat_body("high", false);
    body["n"] = json!(2);
    for round in 0..2 {
        let r = post_chat(&gw, &body).await;
        assert_eq!(r.status(), 429, "round {round}");
        let retry: u64 = header(&r, "retry-after")
            .parse()
            .unwrap_or_else(|_| panic!("round {round}: a Retry-After in seconds"));
        assert!((3500..=3600).contains(&retry), "retry-after {retry}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "capacity", "round {round}");
    }
    // Round 2 found the OpenAI route cooling; the Anthropic one is never called.
    assert_eq!(
        (
            mock.calls(&route("prim/model-a")),
            mock.calls(&route("ant/claude-x"))
        ),
        (1, 0)
    );
}

/// A 429 that asks for a wait of `ms` milliseconds (`retry-after-ms`).
fn rate_limited_for_ms(ms: u64) -> Reply {
    Reply::Status {
        status: 429,
        headers: vec![("retry-after-ms".into(), ms.to_string())],
        body: Body::Json(
            json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}),
        ),
    }
}

/// Guards cli.md's "429 with Retry-After when an instant is known": a route whose
/// cooling ran out while the request retried another (its instant is now) made the
/// answer a 503 with no Retry-After, and the SDKs read a capacity failure as a server
/// fault. The retries wait real milliseconds: 30 on A, then 100 on B, by which time A
/// is back.
#[tokio::test]
async fn a_capacity_failure_whose_first_route_is_already_back_is_a_429_with_retry_after() {
    let mock = openai_mock(vec![
        mock_route(
            "pa/model-a",
            Wire::OpenAi,
            vec![rate_limited_for_ms(30), rate_limited_for_ms(30)],
        ),
        mock_route(
            "pb/model-b",
            Wire::OpenAi,
            vec![rate_limited_for_ms(100), rate_limited_for_ms(100)],
        ),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["pa/model-a", "pb/model-b"]);
    let gw = start(&config, &[], &[]).await;
    let r = post_chat(&gw, &chat_body("high", false)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(header(&r, "retry-after"), "1");
    assert_eq!(header(&r, "x-poolctl-attempts"), "4");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "capacity");
}

/// A route back from its cooling whose buckets still refuse it (its retry was
/// refused by admission) is back when they refill, not now: the Retry-After said 1 s
/// where `rpm: 2` refills the call it needs in about 7.
#[tokio::test]
async fn a_route_back_from_cooling_but_held_by_its_buckets_is_back_when_they_refill() {
    let mock = openai_mock(vec![mock_route(
        "pa/model-a",
        Wire::OpenAi,
        vec![rate_limited_for_ms(1), ok("never")],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["pa/model-a"]);
    let mut yaml = std::fs::read_to_string(&config).unwrap();
    yaml.push_str("limits:\n  pa/model-a: { rpm: 2 }\n");
    std::fs::write(&config, yaml).unwrap();
    let gw = start(&config, &[], &[]).await;
    let r = post_chat(&gw, &chat_body("high", false)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(
        header(&r, "x-poolctl-attempts"),
        "1",
        "the retry was never sent"
    );
    let retry: u64 = header(&r, "retry-after").parse().unwrap();
    // 1.8 calls a minute (rpm 2 at 0.9 headroom), 0.8 left after the first: the one
    // the retry needs is back in 0.2 / 1.8 of a minute, about 6.7 s.
    assert!((6..=7).contains(&retry), "retry-after {retry}");
}

#[tokio::test]
async fn a_stream_that_fails_after_its_first_token_ends_with_an_error_event_and_no_done() {
    let mock = openai_mock(vec![mock_route(
        "prim/model-a",
        Wire::OpenAi,
        vec![stream(&["Hel", "lo"], StreamEnd::Reset, 0)],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    let gw = start(&config, &[], &[]).await;
    let r = post_chat(&gw, &chat_body("high", true)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-outcome"), "streaming");
    assert_eq!(header(&r, "x-poolctl-served-by"), "prim/model-a");
    let text = r.text().await.unwrap();
    assert!(text.contains("\"content\":\"Hel\""), "{text}");
    assert!(text.contains("\"code\":\"stream_interrupted\""), "{text}");
    assert!(
        text.contains(": poolctl outcome=interrupted attempts=1"),
        "{text}"
    );
    assert!(
        !text.contains("[DONE]"),
        "a truncated answer never looks complete: {text}"
    );
}

#[tokio::test]
async fn a_stream_that_fails_before_its_first_token_moves_unseen_to_the_backup() {
    let server_error = Reply::Status {
        status: 400,
        headers: vec![],
        body: Body::Json(
            json!({"error": {"message": "The model `model-a` does not exist", "type": "invalid_request_error", "code": "model_not_found"}}),
        ),
    };
    let mock = openai_mock(vec![
        mock_route("prim/model-a", Wire::OpenAi, vec![server_error]),
        mock_route(
            "back/model-b",
            Wire::OpenAi,
            vec![stream(&["Hi", " there"], StreamEnd::Done, 0)],
        ),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a", "back/model-b"]);
    let gw = start(&config, &[], &[]).await;
    let r = post_chat(&gw, &chat_body("high", true)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-served-by"), "back/model-b");
    assert_eq!(header(&r, "x-poolctl-attempts"), "2");
    let text = r.text().await.unwrap();
    assert!(
        text.contains("\"model\":\"model-b\""),
        "every chunk names the model: {text}"
    );
    assert!(
        text.contains(": poolctl outcome=success attempts=2\n\ndata: [DONE]"),
        "{text}"
    );
}

#[tokio::test]
async fn hostile_requests_get_clear_openai_shaped_4xx() {
    let mock = openai_mock(vec![mock_route(
        "prim/model-a",
        Wire::OpenAi,
        vec![ok("hi")],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    let gw = start(&config, &["--max-body-bytes", "2048"], &[]).await;
    let client = reqwest::Client::new();
    let post = |body: String| {
        client
            .post(gw.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };

    let r = post("{\"model\": \"high\", \"messages\": [".into())
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), header(&r, "x-should-retry")),
        (400, "false")
    );
    let b: Value = r.json().await.unwrap();
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{b}"
    );

    let r = post(chat_body("hihg", false).to_string()).await.unwrap();
    assert_eq!(r.status(), 404);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["error"]["code"], "model_not_found");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the nearest is `high`"),
        "{b}"
    );

    let big = json!({"model": "high", "messages": [{"role": "user", "content": "x".repeat(4096)}]});
    let r = post(big.to_string()).await.unwrap();
    assert_eq!(
        (r.status().as_u16(), header(&r, "x-should-retry")),
        (413, "false")
    );
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["error"]["code"], "request_too_large");

    // The same oversize body, chunked (no Content-Length): cut off at the cap.
    let chunks =
        futures_util::stream::iter((0..8).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1024])));
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);

    assert_eq!(
        mock.calls(&route("prim/model-a")),
        0,
        "nothing reached the upstream"
    );
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, r#"poolctl_rejected_total{why="body_too_large"}"#),
        Some(2.0),
        "{m}"
    );
}

#[tokio::test]
async fn headers_that_never_finish_get_408_after_the_header_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &[("prim", Wire::OpenAi, "http://127.0.0.1:9/v1".into())],
        &[("high", &["prim/model-a"])],
    );
    let gw = start(&config, &["--header-timeout-ms", "200"], &[]).await;
    let mut tcp = TcpStream::connect(gw.addr).await.unwrap();
    tcp.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/js",
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(DEADLINE, tcp.read_to_end(&mut got))
        .await
        .expect("the gateway answers, never hangs")
        .unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        text.contains("\"code\":\"request_timeout\"") && text.contains("x-should-retry: false"),
        "{text}"
    );
    assert!(
        text.contains("x-poolctl-outcome: failed\r\nx-poolctl-attempts: 0\r\n"),
        "every answer carries the x-poolctl headers, a refusal too: {text}"
    );
}

#[tokio::test]
async fn connections_past_the_cap_get_429_and_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &[("prim", Wire::OpenAi, "http://127.0.0.1:9/v1".into())],
        &[("high", &["prim/model-a"])],
    );
    let gw = start(&config, &["--max-connections", "2"], &[]).await;
    // Two connections that send a whole request and keep their connection open.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut tcp = TcpStream::connect(gw.addr).await.unwrap();
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = tokio::time::timeout(DEADLINE, tcp.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        held.push(tcp);
    }
    let mut third = TcpStream::connect(gw.addr).await.unwrap();
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(DEADLINE, third.read_to_end(&mut got))
        .await
        .expect("refused, not left hanging")
        .unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 429"), "{text}");
    assert!(text.contains("too_many_connections"), "{text}");
    assert!(
        text.contains("x-poolctl-served-by: \r\nx-poolctl-outcome: failed\r\n"),
        "{text}"
    );
    drop(held);
}

/// A one-shot upstream speaking the OpenAI wire: records the request head, sends SSE
/// headers and one chunk, then reports whether the gateway closed the connection.
async fn stalling_upstream() -> (String, tokio::task::JoinHandle<(String, bool)>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 8192];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tcp.read(&mut buf).await.unwrap();
            assert!(n > 0, "the gateway closed before sending a request");
            head.extend_from_slice(&buf[..n]);
        }
        let chunk = r#"data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"model-a","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}"#;
        let response =
            format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n{chunk}\n\n");
        tcp.write_all(response.as_bytes()).await.unwrap();
        // Now silent: the only way this read ends is the gateway closing the connection,
        // well before the gateway's own stream idle deadline (20 s by default) would.
        let closed = loop {
            match tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break true,
                Ok(Ok(_)) => continue,
                Err(_) => break false,
            }
        };
        (String::from_utf8_lossy(&head).to_string(), closed)
    });
    (url, task)
}

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_cancels_the_upstream_call() {
    let (url, upstream) = stalling_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &[("prim", Wire::OpenAi, url)],
        &[("high", &["prim/model-a"])],
    );
    let gw = start(&config, &[], &[]).await;
    let mut r = reqwest::Client::new()
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("client-secret-never-forwarded")
        .json(&chat_body("high", true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let first = tokio::time::timeout(DEADLINE, r.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).contains("Hel"));
    // In flight now: the open stream and the scrape that asks (the gauge read 0 always).
    let m = gw.metrics().await;
    assert_eq!(metric(&m, "poolctl_in_flight_requests"), Some(2.0), "{m}");
    drop(r);
    let (head, closed) = upstream.await.unwrap();
    assert!(
        closed,
        "the upstream call was not cancelled when the client went away"
    );
    let head = head.to_ascii_lowercase();
    assert!(
        head.contains(&format!(
            "authorization: bearer {}",
            UPSTREAM_KEY.to_ascii_lowercase()
        )),
        "{head}"
    );
    assert!(
        !head.contains("client-secret"),
        "a client's credentials are never forwarded: {head}"
    );
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, "poolctl_client_disconnects_total"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(metric(&m, "poolctl_in_flight_requests"), Some(1.0), "{m}");
}

#[tokio::test]
async fn the_serve_token_is_required_when_set() {
    let mock = openai_mock(vec![mock_route(
        "prim/model-a",
        Wire::OpenAi,
        vec![ok("hi")],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    let gw = start(&config, &[], &[("POOLCTL_SERVE_TOKEN", "gw-token-123")]).await;
    let client = reqwest::Client::new();
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .json(&chat_body("high", false))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), header(&r, "x-should-retry")),
        (401, "false")
    );
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("wrong")
        .json(&chat_body("high", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth("gw-token-123")
        .json(&chat_body("high", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = client.post(gw.url("/v1/messages")).header("x-api-key", "gw-token-123")
        .json(&json!({"model": "high", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let b: Value = r.json().await.unwrap();
    assert_eq!(
        (b["type"].as_str(), b["content"][0]["text"].as_str()),
        (Some("message"), Some("hi"))
    );
    assert_eq!(mock.calls(&route("prim/model-a")), 2);
    // Every credential sent is read, whatever the order of the lines: the token passes
    // beside a stray `Authorization`, and a wrong one alone never does.
    for stray in [
        ["Bearer wrong", "Bearer gw-token-123"],
        ["Bearer gw-token-123", "Bearer wrong"],
    ] {
        let r = client
            .post(gw.url("/v1/chat/completions"))
            .header("authorization", stray[0])
            .header("authorization", stray[1])
            .json(&chat_body("high", false))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{stray:?}");
    }
    let r = client.post(gw.url("/v1/messages")).header("x-api-key", "gw-token-123")
        .header("authorization", "Bearer junk")
        .json(&json!({"model": "high", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(mock.calls(&route("prim/model-a")), 5);
    // Probes stay open for the orchestrator.
    assert_eq!(
        client
            .get(gw.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_stream_finish_then_exits_zero() {
    let mock = openai_mock(vec![mock_route(
        "prim/model-a",
        Wire::OpenAi,
        vec![stream(&["a", "b", "c", "d", "e"], StreamEnd::Done, 150)],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    let gw = start(&config, &[], &[]).await;
    let mut r = post_chat(&gw, &chat_body("high", true)).await;
    let first = r.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("\"a\""));
    let pid = gw.child.id().unwrap().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    let mut rest = Vec::new();
    while let Some(c) = tokio::time::timeout(DEADLINE, r.chunk())
        .await
        .unwrap()
        .unwrap()
    {
        rest.extend_from_slice(&c);
    }
    let rest = String::from_utf8_lossy(&rest);
    assert!(
        rest.contains("\"e\"") && rest.ends_with("data: [DONE]\n\n"),
        "the stream finished: {rest}"
    );
    let (code, stderr) = gw.stop().await;
    assert_eq!(code, Some(0), "{stderr}");
}

/// Each connection is served on one lane (`serve::listener`); the drain must wait for
/// the streams of every lane, not only the accepting thread's.
#[tokio::test]
async fn sigterm_lets_the_streams_of_every_lane_finish_then_exits_zero() {
    let slow = || stream(&["a", "b", "c", "d", "e"], StreamEnd::Done, 150);
    let mock = openai_mock(vec![mock_route(
        "prim/model-a",
        Wire::OpenAi,
        vec![slow(), slow(), slow()],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    // Three lanes, three connections: one each (connections are handed round robin).
    let gw = start(&config, &["--workers", "3"], &[]).await;
    let mut streams = Vec::new();
    for _ in 0..3 {
        // A client each, so each stream has a connection of its own.
        let mut r = post_chat(&gw, &chat_body("high", true)).await;
        let first = tokio::time::timeout(DEADLINE, r.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(String::from_utf8_lossy(&first).contains("\"a\""));
        streams.push(r);
    }
    let pid = gw.child.id().unwrap().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    for (i, mut r) in streams.into_iter().enumerate() {
        let mut rest = Vec::new();
        while let Some(c) = tokio::time::timeout(DEADLINE, r.chunk())
            .await
            .unwrap()
            .unwrap()
        {
            rest.extend_from_slice(&c);
        }
        let rest = String::from_utf8_lossy(&rest);
        assert!(
            rest.contains("\"e\"") && rest.ends_with("data: [DONE]\n\n"),
            "stream {i} finished: {rest}"
        );
    }
    let (code, stderr) = gw.stop().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("drained"), "{stderr}");
}

#[tokio::test]
async fn readyz_reports_a_tier_without_a_ready_route() {
    let mock = openai_mock(vec![mock_route(
        "prim/model-a",
        Wire::OpenAi,
        vec![rate_limited()],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    let gw = start(&config, &[], &[]).await;
    let client = reqwest::Client::new();
    assert_eq!(
        client.get(gw.url("/readyz")).send().await.unwrap().status(),
        200
    );
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .json(&chat_body("high", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let r = client.get(gw.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let b: Value = r.json().await.unwrap();
    assert!(b["why"][0].as_str().unwrap().contains("tier `high`"), "{b}");
    let models: Value = client
        .get(gw.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["high", "prim/model-a"]);
}

#[tokio::test]
async fn embeddings_and_rerank_through_the_gateway_and_a_failing_rerank_degrades_to_recall_order() {
    let failing = Reply::Status {
        status: 500,
        headers: vec![],
        body: Body::Json(json!({"message": "internal error"})),
    };
    let mut routes = vec![
        mock_route("emb/text-embed", Wire::OpenAi, vec![ok("v")]),
        mock_route("rr/rerank-good", Wire::OpenAi, vec![ok("r")]),
        mock_route("rr/rerank-bad", Wire::OpenAi, vec![failing]),
    ];
    routes[0].path = CallPath::Embed;
    routes[1].path = CallPath::Rerank;
    routes[2].path = CallPath::Rerank;
    let mock = openai_mock(routes).await;
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "providers:\n  emb: {{ wire: openai, base_url: {}, api_key_env: {KEY_VAR} }}\n  rr: {{ wire: openai, base_url: {}, api_key_env: {KEY_VAR} }}\n\
         tiers:\n  embed:\n    - {{ route: emb/text-embed, path: embed }}\n  rerank:\n    - {{ route: rr/rerank-good, path: rerank }}\n  \
         rerank-down:\n    - {{ route: rr/rerank-bad, path: rerank }}\n",
        mock.base_url("emb", Wire::OpenAi),
        mock.base_url("rr", Wire::OpenAi)
    );
    let config = dir.path().join("pool.yaml");
    std::fs::write(&config, yaml).unwrap();
    let gw = start(&config, &[], &[]).await;
    let client = reqwest::Client::new();

    let r = client
        .post(gw.url("/v1/embeddings"))
        .json(&json!({"model": "embed", "input": ["a", "b"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["data"].as_array().unwrap().len(), 2, "{b}");
    assert!(b["data"][1]["embedding"][0].is_f64(), "{b}");
    let r = client
        .post(gw.url("/v1/embeddings"))
        .json(&json!({"model": "embed", "input": "a", "encoding_format": "base64"}))
        .send()
        .await
        .unwrap();
    let b: Value = r.json().await.unwrap();
    assert!(b["data"][0]["embedding"].is_string(), "{b}");

    let docs = json!(["alpha", "beta", "gamma"]);
    let r = client
        .post(gw.url("/v1/rerank"))
        .json(&json!({"model": "rerank", "query": "q", "documents": docs}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (
            r.status().as_u16(),
            header(&r, "x-poolctl-outcome").to_string()
        ),
        (200, "success".to_string())
    );
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["results"].as_array().unwrap().len(), 3, "{b}");

    let r = client
        .post(gw.url("/v1/rerank"))
        .json(&json!({"model": "rerank-down", "query": "q", "documents": docs, "top_n": 2, "return_documents": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (
            r.status().as_u16(),
            header(&r, "x-poolctl-outcome").to_string()
        ),
        (200, "degraded".to_string())
    );
    let b: Value = r.json().await.unwrap();
    assert_eq!(
        b["results"],
        json!([{"index": 0, "document": {"text": "alpha"}}, {"index": 1, "document": {"text": "beta"}}])
    );

    // A chat tier is not an embedding model.
    let r = client
        .post(gw.url("/v1/embeddings"))
        .json(&json!({"model": "rerank", "input": "a"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, r#"poolctl_recoveries_total{kind="degraded"}"#),
        Some(1.0),
        "{m}"
    );
}

#[tokio::test]
async fn an_anthropic_stream_cut_after_its_first_token_ends_with_an_error_event() {
    let mock = openai_mock(vec![mock_route(
        "cl/claude-x",
        Wire::Anthropic,
        vec![stream(&["Hel", "lo"], StreamEnd::Reset, 0)],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &[("cl", Wire::Anthropic, mock.base_url("cl", Wire::Anthropic))],
        &[("high", &["cl/claude-x"])],
    );
    let gw = start(&config, &[], &[]).await;
    let r = reqwest::Client::new()
        .post(gw.url("/v1/messages"))
        .json(&json!({"model": "high", "max_tokens": 16, "stream": true, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.starts_with("event: message_start"), "{text}");
    assert!(text.contains("\"text\":\"Hel\""), "{text}");
    assert!(
        text.contains("event: error\ndata: {\"error\":{\"message\""),
        "{text}"
    );
    assert!(text.contains("\"type\":\"stream_interrupted\""), "{text}");
    assert!(
        !text.contains("message_stop"),
        "an interrupted message never looks complete: {text}"
    );
    assert!(
        text.trim_end()
            .ends_with(": poolctl outcome=interrupted attempts=1"),
        "{text}"
    );
}

#[tokio::test]
async fn a_route_retired_by_another_process_is_skipped_by_the_running_gateway() {
    let mock = openai_mock(vec![
        mock_route("prim/model-a", Wire::OpenAi, vec![ok("from the primary")]),
        mock_route("back/model-b", Wire::OpenAi, vec![ok("from the backup")]),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a", "back/model-b"]);
    let gw = start(&config, &[], &[]).await;
    let client = reqwest::Client::new();
    let served = |r: &reqwest::Response| header(r, "x-poolctl-served-by").to_string();
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .json(&chat_body("high", false))
        .send()
        .await
        .unwrap();
    assert_eq!(served(&r), "prim/model-a");
    let retire = tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(["retire", "prim/model-a", "--reason", "operator"])
        .arg("--config")
        .arg(&config)
        .env(KEY_VAR, UPSTREAM_KEY)
        .output()
        .await
        .unwrap();
    assert!(
        retire.status.success(),
        "{}",
        String::from_utf8_lossy(&retire.stderr)
    );
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .json(&chat_body("high", false))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (served(&r), header(&r, "x-poolctl-attempts").to_string()),
        ("back/model-b".to_string(), "1".to_string())
    );
    assert_eq!(
        mock.calls(&route("prim/model-a")),
        1,
        "the retired route is never called"
    );
    let m = gw.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"poolctl_route_health{route="prim/model-a",state="retired"}"#
        ),
        Some(1.0),
        "{m}"
    );
}

#[tokio::test]
async fn a_request_error_keeps_the_upstreams_status_code_and_message_and_moves_nowhere() {
    let too_long = Reply::Status {
        status: 400,
        headers: vec![],
        body: Body::Json(
            json!({"error": {"message": "This model's maximum context length is 4097 tokens. However, your messages resulted in 4294 tokens.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
        ),
    };
    let mock = openai_mock(vec![
        mock_route("prim/model-a", Wire::OpenAi, vec![too_long]),
        mock_route("back/model-b", Wire::OpenAi, vec![ok("never")]),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a", "back/model-b"]);
    let gw = start(&config, &[], &[]).await;
    let r = post_chat(&gw, &chat_body("high", false)).await;
    assert_eq!(
        (r.status().as_u16(), header(&r, "x-should-retry")),
        (400, "false")
    );
    assert_eq!(
        (
            header(&r, "x-poolctl-outcome"),
            header(&r, "x-poolctl-attempts")
        ),
        ("failed", "1")
    );
    let b: Value = r.json().await.unwrap();
    assert_eq!(
        (b["error"]["type"].as_str(), b["error"]["code"].as_str()),
        (Some("request"), Some("context_length_exceeded"))
    );
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("This model's maximum context length"),
        "{b}"
    );
    assert_eq!(
        mock.calls(&route("back/model-b")),
        0,
        "another route would not fix the request"
    );
}

#[tokio::test]
async fn prompts_reach_the_log_only_when_the_operator_asks() {
    let mock = openai_mock(vec![mock_route(
        "prim/model-a",
        Wire::OpenAi,
        vec![ok("the completion")],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    for (flags, logged) in [(&[][..], false), (&["--log-prompts"][..], true)] {
        let gw = start(&config, flags, &[]).await;
        let body =
            json!({"model": "high", "messages": [{"role": "user", "content": "PROMPT-MARKER-42"}]});
        let r = post_chat(&gw, &body).await;
        assert_eq!(r.status(), 200);
        let (code, stderr) = gw.stop().await;
        // A SIGTERM right after the answer drains (exit 0), with the log written out.
        assert_eq!(code, Some(0), "flags {flags:?}: {stderr}");
        assert_eq!(
            stderr.contains("PROMPT-MARKER-42"),
            logged,
            "flags {flags:?}: {stderr}"
        );
        assert!(
            !stderr.contains("the completion"),
            "a completion is never logged: {stderr}"
        );
    }
}

/// A gateway whose workflow `careful-answer` holds streams whole (`safe_replay_until:
/// buffered`) on the tier `[prim/model-a, back/model-b]`, which answer `primary` and
/// `backup`. The directory holds the config while the gateway runs.
async fn careful_answer(primary: Reply, backup: Reply) -> (MockServer, tempfile::TempDir, Gateway) {
    let mock = openai_mock(vec![
        mock_route("prim/model-a", Wire::OpenAi, vec![primary]),
        mock_route("back/model-b", Wire::OpenAi, vec![backup]),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a", "back/model-b"]);
    let mut yaml = std::fs::read_to_string(&config).unwrap();
    yaml.push_str(
        "policies:\n  careful-answer:\n    tier: high\n    safe_replay_until: buffered\n",
    );
    std::fs::write(&config, yaml).unwrap();
    let gw = start(&config, &[], &[]).await;
    (mock, dir, gw)
}

#[tokio::test]
async fn a_buffered_workflow_moves_a_stream_cut_mid_way_to_the_backup_unseen() {
    let (_mock, _dir, gw) = careful_answer(
        stream(&["PRIMARY-", "PARTIAL"], StreamEnd::Reset, 0),
        stream(&["whole ", "answer"], StreamEnd::Done, 0),
    )
    .await;
    let r = post_chat(&gw, &chat_body("careful-answer", true)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-served-by"), "back/model-b");
    let text = r.text().await.unwrap();
    assert!(
        !text.contains("PRIMARY"),
        "nothing of the cut stream reached the client: {text}"
    );
    assert!(
        text.contains("whole ") && text.contains(": poolctl outcome=success attempts=2"),
        "{text}"
    );
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let m = gw.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"poolctl_requests_total{workflow="careful-answer",outcome="success"}"#
        ),
        Some(1.0),
        "{m}"
    );
}

/// Guards validation on a held stream (fidelity.md §3): under `safe_replay_until:
/// buffered` the whole answer is held, yet one that broke the request's JSON schema
/// was released as a success; it is `invalid_output`, and the backup is asked unseen.
#[tokio::test]
async fn a_buffered_stream_that_breaks_the_schema_moves_to_the_backup_unseen() {
    let (mock, _dir, gw) = careful_answer(
        stream(&["NOT-", "JSON"], StreamEnd::Done, 0),
        stream(&["{\"a\":", "1}"], StreamEnd::Done, 0),
    )
    .await;
    let mut body = chat_body("careful-answer", true);
    body["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "t",
        "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}});
    let r = post_chat(&gw, &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-served-by"), "back/model-b");
    let text = r.text().await.unwrap();
    assert!(
        !text.contains("NOT-"),
        "the failing answer stayed unseen: {text}"
    );
    assert!(
        text.contains(": poolctl outcome=success attempts=2"),
        "{text}"
    );
    assert_eq!(
        (
            mock.calls(&route("prim/model-a")),
            mock.calls(&route("back/model-b"))
        ),
        (1, 1)
    );
}

#[tokio::test]
async fn an_upstream_that_echoes_its_key_never_leaks_it_through_the_gateway() {
    let echo_error = Reply::Status {
        status: 400,
        headers: vec![],
        body: Body::Json(
            json!({"error": {"message": format!("Incorrect API key provided: {UPSTREAM_KEY}."), "type": "invalid_request_error", "code": "context_length_exceeded"}}),
        ),
    };
    let echo = format!("your key is {UPSTREAM_KEY}");
    let mock = openai_mock(vec![mock_route(
        "prim/model-a",
        Wire::OpenAi,
        vec![
            ok(&echo),
            echo_error,
            stream(&["your key is ", UPSTREAM_KEY, " ok"], StreamEnd::Done, 0),
        ],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    let gw = start(&config, &["--log-prompts"], &[]).await;
    let client = reqwest::Client::new();
    let mut seen = Vec::new();
    for stream in [false, false, true] {
        // The logged prompt carries the key too (`--log-prompts`): masked in the log.
        let body = json!({"model": "high", "stream": stream, "messages": [{"role": "user", "content": format!("PROMPT {UPSTREAM_KEY}")}]});
        let r = client
            .post(gw.url("/v1/chat/completions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        seen.push((status, text));
    }
    assert_eq!(
        seen.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        [200, 400, 200],
        "{seen:?}"
    );
    for (_, text) in &seen {
        assert!(!text.contains(UPSTREAM_KEY), "key leaked: {text}");
    }
    assert!(seen[0].1.contains("your key is ***"), "{}", seen[0].1);
    assert!(
        seen[1].1.contains("Incorrect API key provided"),
        "{}",
        seen[1].1
    );
    let (_, stderr) = gw.stop().await;
    assert!(!stderr.contains(UPSTREAM_KEY), "key in the log: {stderr}");
    assert!(
        stderr.contains("PROMPT ***"),
        "the prompt is logged, masked: {stderr}"
    );
}

/// The text a client joins from an SSE answer: OpenAI `delta.content`s, or Anthropic
/// `text_delta`s.
fn joined_text(sse: &str) -> String {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v.pointer("/choices/0/delta/content")
                .or_else(|| v.pointer("/delta/text"))
                .or_else(|| (v["type"] == "response.output_text.delta").then(|| &v["delta"]))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect()
}

/// Guards a leak no single event shows: an upstream that echoes its key in pieces
/// (two deltas, or one character a delta) had every event masked on its own, and the
/// client joined the key back together. Same wire (the upstream's frames) and cross
/// wire (the gateway's own encoding) alike.
#[tokio::test]
async fn a_key_split_across_stream_deltas_reaches_the_client_masked() {
    let (head, rest) = UPSTREAM_KEY.split_at(9);
    let by_char: Vec<String> = UPSTREAM_KEY.chars().map(String::from).collect();
    let mut one_a_delta: Vec<&str> = vec!["key: "];
    one_a_delta.extend(by_char.iter().map(String::as_str));
    one_a_delta.push(" ok.");
    let mock = openai_mock(vec![mock_route(
        "prim/model-a",
        Wire::OpenAi,
        vec![
            stream(&["key: ", head, rest, " ok."], StreamEnd::Done, 0),
            stream(&one_a_delta, StreamEnd::Done, 0),
            stream(&["key: ", head, rest, " ok."], StreamEnd::Done, 0),
            stream(&["key: ", head, rest, " ok."], StreamEnd::Done, 0),
            stream(&["this is fine."], StreamEnd::Done, 0),
        ],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    let gw = start(&config, &[], &[]).await;
    let client = reqwest::Client::new();
    let ask = |path: &'static str, body: Value| {
        let r = client.post(gw.url(path)).json(&body).send();
        async move { r.await.unwrap().text().await.unwrap() }
    };
    for round in 0..2 {
        let sse = ask("/v1/chat/completions", chat_body("high", true)).await;
        assert!(!sse.contains(rest), "round {round}: {sse}");
        assert_eq!(joined_text(&sse), "key: *** ok.", "round {round}: {sse}");
        assert!(sse.ends_with("data: [DONE]\n\n"), "{sse}");
    }
    let anthropic = json!({"model": "high", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    let sse = ask("/v1/messages", anthropic).await;
    assert!(!sse.contains(rest), "{sse}");
    assert_eq!(joined_text(&sse), "key: *** ok.", "{sse}");
    let responses = json!({"model": "high", "stream": true, "input": "hi"});
    let sse = ask("/v1/responses", responses).await;
    assert!(!sse.contains(rest), "{sse}");
    assert_eq!(joined_text(&sse), "key: *** ok.", "{sse}");
    assert!(sse.contains("response.completed"), "{sse}");
    // Text that is no key goes through whole.
    let sse = ask("/v1/chat/completions", chat_body("high", true)).await;
    assert_eq!(joined_text(&sse), "this is fine.", "{sse}");
}

/// Reads `/metrics` until `series` shows `value` (within the deadline): the gateway's
/// own account of where a request stands, instead of a sleep.
async fn wait_for_metric(gw: &Gateway, series: &str, value: f64) {
    tokio::time::timeout(DEADLINE, async {
        while metric(&gw.metrics().await, series) != Some(value) {}
    })
    .await
    .unwrap_or_else(|_| panic!("{series} reaches {value}"))
}

#[tokio::test]
async fn buffered_request_bodies_are_bounded_in_total_across_connections() {
    let mock = openai_mock(vec![mock_route(
        "prim/model-a",
        Wire::OpenAi,
        vec![ok("hi")],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    let flags = [
        "--max-body-bytes",
        "1000",
        "--max-buffered-body-bytes",
        "1000",
    ];
    let gw = start(&config, &flags, &[]).await;
    // A holds 900 of the 1000 buffered bytes and does not finish its body.
    let mut a = TcpStream::connect(gw.addr).await.unwrap();
    a.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n",
    )
    .await
    .unwrap();
    a.write_all(&[b' '; 900]).await.unwrap();
    a.flush().await.unwrap();
    wait_for_metric(&gw, "poolctl_buffered_body_bytes", 900.0).await;
    // B's 500 bytes do not fit beside A's 900: B waits.
    let body = format!("{:<500}", chat_body("high", false).to_string());
    let b = tokio::spawn(
        reqwest::Client::new()
            .post(gw.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(body)
            .send(),
    );
    wait_for_metric(&gw, "poolctl_body_waits_total", 1.0).await;
    assert!(!b.is_finished(), "B is served only once A's bytes are free");
    let held = metric(&gw.metrics().await, "poolctl_buffered_body_bytes").unwrap();
    assert!(held <= 1000.0, "never past the budget: {held}");
    // A goes away: its bytes are given back, and B is served.
    drop(a);
    let r = tokio::time::timeout(DEADLINE, b)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(r.status(), 200);
    wait_for_metric(&gw, "poolctl_buffered_body_bytes", 0.0).await;
}

/// Guards a deadlock of the body budget: two bodies that each held half of it and
/// waited for the rest of theirs waited on each other, until both were 408s (seen with
/// two 50 MB images under a raised `--max-body-bytes`). A body that must wait gives its
/// part back and waits for all of it at once: they are served in turn.
#[tokio::test]
async fn two_bodies_that_each_hold_half_the_budget_are_served_in_turn() {
    let mock = openai_mock(vec![mock_route(
        "prim/model-a",
        Wire::OpenAi,
        vec![ok("one"), ok("two")],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    let flags = [
        "--max-body-bytes",
        "1000",
        "--max-buffered-body-bytes",
        "1000",
        "--body-timeout-ms",
        "60000",
    ];
    let gw = start(&config, &flags, &[]).await;
    let body = format!("{:<900}", chat_body("high", false).to_string());
    let (first, rest) = body.as_bytes().split_at(500);
    let head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 900\r\n\r\n";
    let mut a = TcpStream::connect(gw.addr).await.unwrap();
    a.write_all(head).await.unwrap();
    a.write_all(first).await.unwrap();
    wait_for_metric(&gw, "poolctl_buffered_body_bytes", 500.0).await;
    let mut b = TcpStream::connect(gw.addr).await.unwrap();
    b.write_all(head).await.unwrap();
    b.write_all(first).await.unwrap();
    wait_for_metric(&gw, "poolctl_buffered_body_bytes", 1000.0).await;
    // Each now sends the rest, which fits only once the other's part is free.
    a.write_all(rest).await.unwrap();
    wait_for_metric(&gw, "poolctl_body_waits_total", 1.0).await;
    b.write_all(rest).await.unwrap();
    for (name, conn) in [("A", &mut a), ("B", &mut b)] {
        let mut got = vec![0u8; 12];
        tokio::time::timeout(DEADLINE, conn.read_exact(&mut got))
            .await
            .unwrap_or_else(|_| panic!("{name} is answered, not left waiting"))
            .unwrap();
        assert_eq!(&got, b"HTTP/1.1 200", "{name}");
    }
}

#[tokio::test]
async fn a_single_worker_gateway_serves_chat_and_streams() {
    let mock = openai_mock(vec![mock_route(
        "prim/model-a",
        Wire::OpenAi,
        vec![ok("one"), stream(&["t", "wo"], StreamEnd::Done, 0)],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    let gw = start(&config, &["--workers", "1"], &[]).await;
    let client = reqwest::Client::new();
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .json(&chat_body("high", false))
        .send()
        .await
        .unwrap();
    let b: Value = r.json().await.unwrap();
    assert_eq!(b["choices"][0]["message"]["content"], "one");
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .json(&chat_body("high", true))
        .send()
        .await
        .unwrap();
    let text = r.text().await.unwrap();
    assert!(text.contains("\"wo\"") && text.contains("[DONE]"), "{text}");
}

#[tokio::test]
async fn a_request_admission_sheds_is_one_429_with_retry_after_and_counted_in_metrics() {
    let mock = openai_mock(vec![mock_route(
        "prim/model-a",
        Wire::OpenAi,
        vec![ok("first"), ok("never")],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    // 2 requests a minute at 0.9 headroom: room for one request now, not two.
    let mut yaml = std::fs::read_to_string(&config).unwrap();
    yaml.push_str("limits:\n  prim/model-a: { rpm: 2 }\n");
    std::fs::write(&config, yaml).unwrap();
    let gw = start(&config, &[], &[]).await;
    let client = reqwest::Client::new();
    let send = || {
        client
            .post(gw.url("/v1/chat/completions"))
            .json(&chat_body("high", false))
            .send()
    };
    assert_eq!(send().await.unwrap().status(), 200);
    let r = send().await.unwrap();
    assert_eq!(
        (
            r.status().as_u16(),
            header(&r, "x-should-retry"),
            header(&r, "x-poolctl-outcome")
        ),
        (429, "false", "shed")
    );
    let retry_after: u64 = header(&r, "retry-after").parse().expect("a Retry-After");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(
        mock.calls(&route("prim/model-a")),
        1,
        "a shed calls nothing"
    );
    let m = gw.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"poolctl_shed_total{priority="interactive",route="prim/model-a"}"#
        ),
        Some(1.0),
        "{m}"
    );
    assert!(
        m.contains(r#"poolctl_bucket_level{bucket="prim/model-a",dimension="rpm"}"#),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            r#"poolctl_bucket_reserved{bucket="prim/model-a",dimension="rpm"}"#
        ),
        Some(0.0),
        "nothing is held once both requests ended: {m}"
    );
}

#[tokio::test]
async fn a_backup_that_serves_while_the_primary_cools_counts_as_a_fallback_recovery() {
    let mock = openai_mock(vec![
        mock_route("prim/model-a", Wire::OpenAi, vec![rate_limited()]),
        mock_route("back/model-b", Wire::OpenAi, vec![ok("from the backup")]),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a", "back/model-b"]);
    let gw = start(&config, &[], &[]).await;
    let client = reqwest::Client::new();
    // The first request falls back after the 429; the second finds the primary cooling
    // and is served by the backup in one attempt, without calling the primary.
    for _ in 0..2 {
        let r = client
            .post(gw.url("/v1/chat/completions"))
            .json(&chat_body("high", false))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-poolctl-served-by"), "back/model-b");
    }
    assert_eq!(mock.calls(&route("prim/model-a")), 1);
    let m = gw.metrics().await;
    // Seed 001: a success served by a backup is a fallback recovery, never a retry or a
    // primary success, or the broken primary hides behind the success rate.
    for (kind, want) in [("fallback", 2.0), ("retry", 0.0), ("primary", 0.0)] {
        assert_eq!(
            metric(&m, &format!(r#"poolctl_recoveries_total{{kind="{kind}"}}"#)),
            Some(want),
            "{kind}: {m}"
        );
    }
    let (code, stderr) = gw.stop().await;
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test]
async fn every_gateway_answer_carries_served_by_outcome_and_attempts_even_a_failure() {
    let mock = openai_mock(vec![
        mock_route("prim/model-a", Wire::OpenAi, vec![rate_limited()]),
        mock_route("back/model-b", Wire::OpenAi, vec![rate_limited()]),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a", "back/model-b"]);
    let gw = start(&config, &[], &[]).await;
    let client = reqwest::Client::new();
    let bodies: [(&str, Value, u16, &str); 4] = [
        // Routed and failed: both routes called, neither served.
        ("/v1/chat/completions", chat_body("high", false), 429, "2"),
        // Refused before routing: no route called.
        ("/v1/chat/completions", chat_body("hihg", false), 404, "0"),
        (
            "/v1/messages",
            json!({"model": "nope", "max_tokens": 5,
            "messages": [{"role": "user", "content": "hi"}]}),
            404,
            "0",
        ),
        ("/v1/chat/completions", json!({"messages": []}), 400, "0"),
    ];
    for (path, body, status, attempts) in bodies {
        let r = client.post(gw.url(path)).json(&body).send().await.unwrap();
        assert_eq!(r.status(), status, "{path} {body}");
        let h = r.headers();
        assert_eq!(
            h.get("x-poolctl-served-by").map(|v| v.as_bytes()),
            Some(&b""[..]),
            "{path} {body}: present, empty when nothing served"
        );
        assert_eq!(header(&r, "x-poolctl-outcome"), "failed", "{path} {body}");
        assert_eq!(header(&r, "x-poolctl-attempts"), attempts, "{path} {body}");
        assert_eq!(header(&r, "x-should-retry"), "false", "{path} {body}");
    }
    let (code, stderr) = gw.stop().await;
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test]
async fn a_model_is_retrieved_by_id_routes_with_their_slash_and_an_unknown_id_names_the_nearest() {
    let mock = openai_mock(vec![mock_route(
        "prim/model-a",
        Wire::OpenAi,
        vec![ok("hi")],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    let gw = start(&config, &[], &[]).await;
    let client = reqwest::Client::new();
    for (id, kind) in [
        ("high", "tier"),
        ("prim/model-a", "route"),
        ("prim%2Fmodel-a", "route"),
    ] {
        let r = client
            .get(gw.url(&format!("/v1/models/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{id}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["id"], id.replace("%2F", "/"), "{v}");
        assert_eq!(v["object"], "model", "{v}");
        assert_eq!(v["poolctl"]["kind"], kind, "{v}");
    }
    let r = client.get(gw.url("/v1/models/hihg")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "model_not_found", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("`high`"),
        "{v}"
    );
    let (code, stderr) = gw.stop().await;
    assert_eq!(code, Some(0), "{stderr}");
}

/// `degrade_allowed` on a chat with no `degrade_tier`: the status table's 200 carries an
/// answer the client's SDK can read (an empty one), not an error body under a 200.
#[tokio::test]
async fn a_degraded_chat_is_a_readable_empty_answer_not_an_error_body_under_200() {
    let fail = || Reply::Status {
        status: 500,
        headers: vec![],
        body: Body::Json(json!({"error": {"message": "boom", "type": "server_error"}})),
    };
    let mock = openai_mock(vec![mock_route(
        "prim/model-a",
        Wire::OpenAi,
        vec![fail(), fail(), fail(), fail()],
    )])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = openai_high(dir.path(), &mock, &["prim/model-a"]);
    let mut yaml = std::fs::read_to_string(&config).unwrap();
    yaml.push_str(
        "policies:\n  lenient:\n    tier: high\n    degrade_allowed: true\n    max_retries_per_route: 0\n",
    );
    std::fs::write(&config, yaml).unwrap();
    let gw = start(&config, &[], &[]).await;
    let client = reqwest::Client::new();
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .json(&chat_body("lenient", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-outcome"), "degraded");
    let v: Value = r.json().await.unwrap();
    assert!(v.get("error").is_none(), "{v}");
    assert_eq!(v["object"], "chat.completion", "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], "", "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    let r = client
        .post(gw.url("/v1/messages"))
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": "lenient", "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-outcome"), "degraded");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "message", "{v}");
    assert_eq!(v["stop_reason"], "end_turn", "{v}");
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .json(&chat_body("lenient", true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-outcome"), "degraded");
    let text = r.text().await.unwrap();
    assert!(text.contains("\"finish_reason\":\"stop\""), "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let (code, stderr) = gw.stop().await;
    assert_eq!(code, Some(0), "{stderr}");
}
