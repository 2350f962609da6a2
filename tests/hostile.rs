//! Hostile upstreams and hostile input (issue 9): the built `poolctl` binary against
//! raw-socket upstreams on loopback that echo keys, never end a line, talk forever or
//! never answer, and against input built to hurt. One test per defect, named after what
//! it guards.

#[path = "support/gateway.rs"]
mod gateway;
mod support;

use std::path::Path;
use std::process::{Output, Stdio};
use support::{respond, Head};
use tokio::net::TcpStream;

const KEY_VAR: &str = "POOLCTL_HOSTILE_KEY";
/// Never printed, whole or in part.
const SENTINEL: &str = "sk-HOSTILE-5e1f0a9b7c3d2e4f6a8b1c0d";

fn bin() -> tokio::process::Command {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"));
    c.env(KEY_VAR, SENTINEL).kill_on_drop(true);
    c
}

async fn run(config: &Path, args: &[&str]) -> Output {
    bin()
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .await
        .expect("poolctl runs")
}

fn all(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Neither the key nor any 8-character piece of it.
fn assert_no_key_piece(text: &str, key: &str) {
    for i in 0..=key.len() - 8 {
        let piece = &key[i..i + 8];
        assert!(
            !text.contains(piece),
            "`{piece}` (part of a key) leaked into:\n{text}"
        );
    }
}

/// An upstream that answers 401 with the key it was sent copied into the message (placed
/// to straddle a 200-character cut) and into `x-request-id`, in `wire`'s error shape; a
/// second path answers 502 with a plain-text body holding the key.
async fn echo_key(head: Head, mut s: TcpStream) {
    let key = head.key();
    if head.target.contains("text502") {
        let body = format!("upstream said: bad gateway for Authorization: Bearer {key}");
        respond(
            &mut s,
            502,
            &[("x-request-id", &key)],
            "text/plain",
            body.as_bytes(),
        )
        .await;
        return;
    }
    let msg = format!("{}{key}", "x".repeat(190));
    let body = if head.target.contains("/v1/messages") {
        serde_json::json!({"type":"error","error":{"type":"authentication_error","message":msg}})
    } else if head.target.contains("v1beta") {
        serde_json::json!({"error":{"code":401,"status":"UNAUTHENTICATED","message":msg}})
    } else {
        serde_json::json!({"error":{"type":"invalid_request_error","code":"invalid_api_key","message":msg}})
    };
    let rid = format!("req-{key}");
    respond(
        &mut s,
        401,
        &[("x-request-id", &rid), ("request-id", &rid)],
        "application/json",
        body.to_string().as_bytes(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_the_upstream_echoes_is_masked_on_every_wire_and_every_output() {
    let up = support::start(echo_key).await;
    for wire in ["openai", "anthropic", "gemini"] {
        for path in ["chat", "stream"] {
            let dir = tempfile::tempdir().unwrap();
            let yaml = support::pool_yaml(
                &[("a", wire, &up.url("/a")), ("b", wire, &up.url("/text502"))],
                &["a/m", "b/m"],
                path,
                "",
            );
            let config = dir.path().join("pool.yaml");
            std::fs::write(&config, yaml).unwrap();
            for args in [
                &["probe"][..],
                &["probe", "--json"],
                &["walk", "t", "--json"],
                &["walk", "t"],
                &["status", "--json"],
            ] {
                let o = run(&config, args).await;
                let text = all(&o);
                assert!(
                    text.contains("***") || args[0] == "status" || args == ["walk", "t"],
                    "{wire} {path} {args:?}: the echo should show as a mask:\n{text}"
                );
                assert_no_key_piece(&text, SENTINEL);
            }
            let state = std::fs::read(dir.path().join(".poolctl/state.db")).unwrap_or_default();
            assert_no_key_piece(&String::from_utf8_lossy(&state), SENTINEL);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn userinfo_in_base_url_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = support::pool_yaml(
        &[("a", "openai", "http://user:hunter2-password@127.0.0.1:9/v1")],
        &["a/m"],
        "chat",
        "",
    );
    let config = dir.path().join("pool.yaml");
    std::fs::write(&config, yaml).unwrap();
    for args in [&["check"][..], &["walk", "t"]] {
        let o = run(&config, args).await;
        let text = all(&o);
        // `check` reports a problem in a valid YAML file with 1 (spec/cli.md); the
        // commands that need the config refuse it as a config error.
        let want = if args[0] == "check" { 1 } else { 2 };
        assert_eq!(o.status.code(), Some(want), "{args:?}: {text}");
        assert!(text.contains("providers.a.base_url"), "{text}");
        assert!(text.contains("api_key_env"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_query_in_base_url_stays_after_the_path_and_is_masked_in_output() {
    // The upstream echoes the whole target it was asked for in its error.
    let up = support::start(|head: Head, mut s: TcpStream| async move {
        let body = serde_json::json!({"error":{"message":format!("no route {}", head.target),"type":"server_error"}});
        respond(&mut s, 500, &[], "application/json", body.to_string().as_bytes()).await;
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let gw_key = "gwkey-QUERY-8d7c6b";
    let yaml = support::pool_yaml(
        &[
            ("a", "openai", &up.url(&format!("/gw/v1?key={gw_key}"))),
            ("g", "gemini", &up.url(&format!("/gem?key={gw_key}"))),
        ],
        &["a/m"],
        "chat",
        "",
    ) + "  s: [ { route: g/m, path: stream } ]\n";
    let config = dir.path().join("pool.yaml");
    std::fs::write(&config, yaml).unwrap();
    for args in [
        &["check"][..],
        &["walk", "t", "--json"],
        &["walk", "s", "--json"],
    ] {
        let o = run(&config, args).await;
        assert_no_key_piece(&all(&o), gw_key);
    }
    let targets: Vec<String> = up.requests().iter().map(|h| h.target.clone()).collect();
    assert!(
        targets.contains(&format!("/gw/v1/chat/completions?key={gw_key}")),
        "{targets:?}"
    );
    assert!(
        targets.contains(&format!(
            "/gem/v1beta/models/m:streamGenerateContent?key={gw_key}&alt=sse"
        )),
        "{targets:?}"
    );
    for h in up.requests() {
        let auths = h
            .headers
            .iter()
            .filter(|(k, _)| k == "authorization")
            .count();
        assert!(auths <= 1, "{h:?}");
    }
}

fn plain_config(dir: &Path) -> std::path::PathBuf {
    let yaml = support::pool_yaml(
        &[("a", "openai", "http://127.0.0.1:9/v1")],
        &["a/m"],
        "chat",
        "",
    );
    let config = dir.join("pool.yaml");
    std::fs::write(&config, yaml).unwrap();
    config
}

#[tokio::test(flavor = "multi_thread")]
async fn an_absurd_probe_concurrency_is_a_usage_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let config = plain_config(dir.path());
    for n in ["2305843009213693952", "0", "lots"] {
        let o = run(&config, &["probe", "--concurrency", n]).await;
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{n}: {err}");
        assert!(err.contains("--concurrency"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn stdout_at_dev_full_is_one_clear_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let config = plain_config(dir.path());
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["walk", "t"],
        &["check"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = bin()
            .args(args)
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::from(full))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
            .wait_with_output()
            .await
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("cannot write to stdout"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_closed_pipe_ends_quietly_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let config = plain_config(dir.path());
    let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let chaos = ["chaos", scenarios.to_str().unwrap()];
    for args in [
        &["walk", "t", "--config"][..],
        &["status", "--config"],
        &chaos,
    ] {
        // Both stdout and stderr go to a pipe nobody reads any more (`2>&1 | head -0`).
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut cmd = bin();
        cmd.args(args);
        if args.last() == Some(&"--config") {
            cmd.arg(&config);
        }
        let status = cmd
            .stdout(Stdio::from(writer.try_clone().unwrap()))
            .stderr(Stdio::from(writer))
            .status()
            .await
            .unwrap();
        assert_eq!(status.code(), Some(141), "{args:?}: {status:?}");
    }
}

// ---- item 7: the mock under a flood ------------------------------------------------

/// `poolctl mock` on a scenario, optionally under `prlimit`; returns the child and the
/// base URL of its first provider.
async fn spawn_mock(nofile: Option<u32>) -> (tokio::process::Child, std::net::SocketAddr) {
    use tokio::io::AsyncBufReadExt;
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/model-not-exist-mid-chain-falls-through.yaml");
    let mut cmd = match nofile {
        Some(n) => {
            let mut c = tokio::process::Command::new("prlimit");
            c.arg(format!("--nofile={n}"))
                .arg(env!("CARGO_BIN_EXE_poolctl"));
            c
        }
        None => tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl")),
    };
    let mut child = cmd
        .arg("mock")
        .arg(&scenario)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(url) = line.trim().strip_prefix("base_url: http://") {
            let addr = url.split('/').next().unwrap().parse().unwrap();
            return (child, addr);
        }
    }
    panic!("poolctl mock printed no base_url");
}

fn proc_stat(pid: u32) -> (u64, u64) {
    // utime + stime in clock ticks, and the peak resident set in KiB.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit_once(')').unwrap().1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    (ticks, hwm)
}

/// The pid of `poolctl` itself, which `prlimit` execs in place.
fn pid(child: &tokio::process::Child) -> u32 {
    child.id().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn mock_at_the_descriptor_limit_backs_off_instead_of_spinning() {
    let (child, addr) = spawn_mock(Some(48)).await;
    let mut idle = Vec::new();
    for _ in 0..120 {
        if let Ok(s) = TcpStream::connect(addr).await {
            idle.push(s);
        }
    }
    let (before, _) = proc_stat(pid(&child));
    // A real second of wall time: the only way to see a spin is to give it time to spin.
    // The bound is generous (half a core): a spinning accept loop uses a whole one.
    poolctl::core::clock::real_sleep(std::time::Duration::from_millis(1000)).await;
    let (after, _) = proc_stat(pid(&child));
    let ticks_per_sec = 100; // USER_HZ on Linux
    assert!(
        after - before < ticks_per_sec / 2,
        "the accept loop used {} ticks of CPU in 1 s",
        after - before
    );
    // Once the flood leaves, the mock serves again.
    drop(idle);
    let body =
        serde_json::json!({"model":"qwen-flash","messages":[{"role":"user","content":"hi"}]});
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("http://{addr}/dashscope/chat/completions"))
        .bearer_auth("k")
        .json(&body)
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    assert!(resp.status().as_u16() < 500, "{}", resp.status());
}

#[tokio::test(flavor = "multi_thread")]
async fn mock_caps_open_connections() {
    use poolctl::harness::mock::{MockServer, MAX_CONNECTIONS};
    let server = MockServer::start(([127, 0, 0, 1], 0).into(), Vec::new())
        .await
        .unwrap();
    let mut idle = Vec::new();
    for _ in 0..MAX_CONNECTIONS + 64 {
        idle.push(TcpStream::connect(server.addr()).await.unwrap());
    }
    // Wait (bounded) until the server has taken all it will take.
    let settled = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while server.open_connections() < MAX_CONNECTIONS as u64 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(
        settled.is_ok(),
        "only {} accepted",
        server.open_connections()
    );
    tokio::task::yield_now().await;
    assert_eq!(server.max_connections(), MAX_CONNECTIONS as u64);
}

#[tokio::test(flavor = "multi_thread")]
async fn mock_bounds_the_memory_of_buffered_request_bodies() {
    use tokio::io::AsyncWriteExt;
    let (child, addr) = spawn_mock(None).await;
    let (_, base_kib) = proc_stat(pid(&child));
    let body_len = 7 * 1024 * 1024;
    // 40 clients each send all of a 7 MiB body but its last byte, at once, so an
    // unbounded server holds 280 MiB together. A bounded one stops reading the ones
    // past its budget; their writes stall (bounded here by a real deadline).
    let clients = (0..40).map(|_| async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST /dashscope/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {body_len}\r\n\r\n"
        );
        let body = vec![b' '; body_len - 1];
        let send = async {
            s.write_all(head.as_bytes()).await?;
            s.write_all(&body).await
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), send).await;
        s
    });
    let held = futures_util::future::join_all(clients).await;
    let (_, peak_kib) = proc_stat(pid(&child));
    drop(held);
    let grown_mib = (peak_kib.saturating_sub(base_kib)) / 1024;
    // The budget is 64 MiB (+ slack for the allocator); unbounded it is 280 MiB.
    assert!(grown_mib < 160, "the mock grew by {grown_mib} MiB");
}

// ---- item 8: config parsing stays linear and bounded ---------------------------------

/// Hangs are caught, speed is not measured: the bound is far past what a linear check needs.
const HANG: std::time::Duration = std::time::Duration::from_secs(30);

async fn run_bounded(cmd: &mut tokio::process::Command) -> Output {
    tokio::time::timeout(HANG, cmd.output())
        .await
        .expect("poolctl must not hang")
        .expect("poolctl runs")
}

#[tokio::test(flavor = "multi_thread")]
async fn check_on_dev_zero_stops_at_the_file_cap() {
    let o = run_bounded(bin().args(["check", "--config", "/dev/zero"])).await;
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("larger than 16777216 bytes"), "{err}");
    assert!(err.contains("POOLCTL_MAX_FILE_BYTES"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_file_cap_follows_poolctl_max_file_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let config = plain_config(dir.path());
    let o = run_bounded(
        bin()
            .env("POOLCTL_MAX_FILE_BYTES", "64")
            .args(["check", "--config"])
            .arg(&config),
    )
    .await;
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("larger than 64 bytes"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn yaml_nested_100000_deep_is_refused_before_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let flow = format!(
        "providers: {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let block: String = (0..1000)
        .map(|i| format!("{}a:\n", " ".repeat(i)))
        .collect();
    let deep_json = format!(
        "name: deep\nchain:\n  - route: a/m\n    replies:\n      - status: 500\n        json: {}1{}\nexpect: {{ outcome: failed }}\n",
        "{a: ".repeat(100_000),
        "}".repeat(100_000)
    );
    for (name, text, cmd) in [
        ("flow.yaml", flow, "check"),
        ("block.yaml", block, "check"),
        ("scenario.yaml", deep_json, "chaos"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let mut c = bin();
        if cmd == "check" {
            c.args(["check", "--config"]).arg(&path);
        } else {
            c.arg("chaos").arg(&path);
        }
        let o = run_bounded(&mut c).await;
        let err = all(&o);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains("nesting deeper than 64"), "{name}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tier_of_100000_routes_is_checked_in_linear_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = String::from(
        "providers:\n  a:\n    wire: openai\n    base_url: http://127.0.0.1:9/v1\n    api_key_env: POOLCTL_HOSTILE_KEY\ntiers:\n  t:\n",
    );
    for i in 0..100_000 {
        yaml.push_str(&format!("    - a/m{i}\n"));
    }
    yaml.push_str("    - a/m99999\n");
    let config = dir.path().join("pool.yaml");
    std::fs::write(&config, yaml).unwrap();
    let o = run_bounded(bin().args(["check", "--config"]).arg(&config)).await;
    let err = all(&o);
    // A duplicate route is a problem in valid YAML: exit 1 (spec/cli.md, `check`).
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("appears twice in this tier (first at [99999])"),
        "{err}"
    );
}

// ---- item 9: the state file ------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_symlinked_state_path_is_refused_and_its_target_never_created() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere.db");
    let link = dir.path().join("state.db");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let yaml = support::pool_yaml(
        &[("a", "openai", "http://127.0.0.1:9/v1")],
        &["a/m"],
        "chat",
        "",
    ) + "state: state.db\n";
    let config = dir.path().join("pool.yaml");
    std::fs::write(&config, yaml).unwrap();
    for args in [&["status"][..], &["retire", "a/m"], &["walk", "t"]] {
        let o = run(&config, args).await;
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("symbolic link"), "{err}");
        assert!(!target.exists(), "{args:?} created the link's target");
    }
}

// ---- item 13: the status that came back is recorded --------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_2xx_cut_off_mid_body_records_its_status_as_server_error() {
    use tokio::io::AsyncWriteExt;
    let up = support::start(|head: Head, mut s: TcpStream| async move {
        if head.target.starts_with("/cut") {
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5000\r\n\r\n{\"id\":\"chatcmpl-1\",\"choi")
                .await;
        } else {
            let body = br#"{"id":"chatcmpl-1","choices":[{"index":0,"message":{"role":"assistant","content":"OK"},"finish_reason":"stop"}]}"#;
            respond(&mut s, 200, &[], "application/json", body).await;
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let yaml = support::pool_yaml(
        &[
            ("a", "openai", &up.url("/cut")),
            ("b", "openai", &up.url("/ok")),
        ],
        &["a/m", "b/m"],
        "chat",
        "",
    );
    let config = dir.path().join("pool.yaml");
    std::fs::write(&config, yaml).unwrap();
    let o = run(&config, &["walk", "t", "--json"]).await;
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", all(&o)));
    let first = &v["attempts"][0];
    assert_eq!(first["status"], 200, "{v}");
    assert_eq!(first["class"], "server_error", "{v}");
    assert_eq!(v["outcome"], "success", "{v}");
}

// ---- items 1, 2, 11: every stream ends, on its deadlines and caps ------------------------

/// One visible delta of `text` in `wire`'s SSE format.
fn delta(wire: &str, text: &str) -> String {
    let t = serde_json::Value::String(text.into());
    match wire {
        "anthropic" => format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{t}}}}}\n\n"
        ),
        "gemini" => format!(
            "data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":{t}}}],\"role\":\"model\"}},\"index\":0}}]}}\n\n"
        ),
        _ => format!(
            "data: {{\"id\":\"c\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{t}}},\"finish_reason\":null}}]}}\n\n"
        ),
    }
}

/// An event that carries no visible text (a keep-alive of the wire's own kind).
fn empty_delta(wire: &str) -> String {
    match wire {
        "anthropic" => "event: ping\ndata: {\"type\":\"ping\"}\n\n".into(),
        _ => delta(wire, ""),
    }
}

/// A complete, proper stream answering "OK".
fn proper_stream(wire: &str) -> String {
    match wire {
        "anthropic" => format!(
            "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"m\",\"usage\":{{\"input_tokens\":1}}}}}}\n\n{}event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\"}},\"usage\":{{\"output_tokens\":1}}}}\n\nevent: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n",
            delta(wire, "OK")
        ),
        "gemini" => "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"OK\"}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":1,\"candidatesTokenCount\":1}}\n\n".into(),
        _ => format!(
            "{}data: {{\"id\":\"c\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}],\"usage\":{{\"prompt_tokens\":1,\"completion_tokens\":1}}}}\n\ndata: [DONE]\n\n",
            delta(wire, "OK")
        ),
    }
}

/// Hostile stream bodies, chosen by the path prefix of the provider's base_url.
async fn hostile_stream(head: Head, mut s: TcpStream) {
    let wire = if head.target.contains("/v1/messages") {
        "anthropic"
    } else if head.target.contains("v1beta") {
        "gemini"
    } else {
        "openai"
    };
    let t = head.target.clone();
    if t.starts_with("/silent") {
        std::future::pending::<()>().await;
    }
    if support::sse_head(&mut s).await.is_err() {
        return;
    }
    let endless = async {
        if t.starts_with("/noline") {
            support::chunk(&mut s, b"data: ").await?;
            let block = vec![b'a'; 64 * 1024];
            loop {
                support::chunk(&mut s, &block).await?;
            }
        } else if t.starts_with("/talker") {
            let d = delta(wire, &"x".repeat(1000));
            loop {
                support::chunk(&mut s, d.as_bytes()).await?;
            }
        } else if t.starts_with("/onetoken") {
            support::chunk(&mut s, delta(wire, "Hi").as_bytes()).await?;
            let e = empty_delta(wire);
            loop {
                support::chunk(&mut s, e.as_bytes()).await?;
                // Paced a little, as a real keep-alive would be: never idle long enough
                // for the idle deadline, never ending.
                poolctl::core::clock::real_sleep(std::time::Duration::from_millis(5)).await;
            }
        } else {
            support::chunk(&mut s, proper_stream(wire).as_bytes()).await?;
            support::chunk(&mut s, b"").await?;
            use tokio::io::AsyncWriteExt;
            s.write_all(b"0\r\n\r\n").await
        }
    };
    let _: std::io::Result<()> = endless.await;
}

/// Runs `walk t --json` (plus `extra` args) on a two-route stream tier: `a` at `hostile`
/// with `fields`, `b` a proper stream. Returns the JSON and the real time it took.
async fn walk_stream(
    wire: &str,
    hostile: &str,
    fields: &str,
    extra_yaml: &str,
    args: &[&str],
) -> (serde_json::Value, std::time::Duration) {
    let up = support::start(hostile_stream).await;
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = String::from("providers:\n");
    yaml.push_str(&format!(
        "  a:\n    wire: {wire}\n    base_url: \"{}\"\n    api_key_env: {KEY_VAR}\n{fields}",
        up.url(hostile)
    ));
    yaml.push_str(&format!(
        "  b:\n    wire: {wire}\n    base_url: \"{}\"\n    api_key_env: {KEY_VAR}\n",
        up.url("/proper")
    ));
    yaml.push_str(
        "tiers:\n  t:\n    - { route: a/m, path: stream }\n    - { route: b/m, path: stream }\n",
    );
    yaml.push_str(extra_yaml);
    let config = dir.path().join("pool.yaml");
    std::fs::write(&config, yaml).unwrap();
    let sw = poolctl::core::clock::Stopwatch::start();
    let mut all_args = vec!["walk", "t", "--json"];
    all_args.extend_from_slice(args);
    let o = run_bounded(bin().args(&all_args).arg("--config").arg(&config)).await;
    let took = sw.elapsed();
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", all(&o)));
    (v, took)
}

/// The generous bound of a deadline test: the deadline plus 2 s catches a hang, never
/// measures speed (the exact overshoot is a bench figure).
fn within(took: std::time::Duration, deadline_ms: u64, what: &str) {
    assert!(
        took.as_millis() as u64 <= deadline_ms + 2000,
        "{what}: took {took:?} for a {deadline_ms} ms deadline"
    );
}

const WIRES: [&str; 3] = ["openai", "anthropic", "gemini"];

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_that_never_ends_a_line_fails_at_the_event_cap_and_falls_back() {
    for wire in WIRES {
        let (v, took) = walk_stream(
            wire,
            "/noline",
            "    first_token_timeout_ms: 1500\n",
            "",
            &[],
        )
        .await;
        within(took, 1500, wire);
        let first = &v["attempts"][0];
        assert_eq!(first["class"], "server_error", "{wire}: {v}");
        assert!(
            first["detail"].as_str().unwrap_or("").contains("1048576"),
            "{wire}: {v}"
        );
        assert_eq!(v["served_by"], "b/m", "{wire}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_that_never_ends_a_line_still_meets_its_first_token_deadline() {
    for wire in WIRES {
        let fields = "    first_token_timeout_ms: 1500\n    max_event_bytes: 1073741824\n";
        let (v, took) = walk_stream(wire, "/noline", fields, "", &[]).await;
        within(took, 1500, wire);
        assert_eq!(v["attempts"][0]["class"], "timeout", "{wire}: {v}");
        assert_eq!(v["served_by"], "b/m", "{wire}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endless_stream_of_text_stops_at_max_stream_bytes() {
    for wire in WIRES {
        let (v, took) =
            walk_stream(wire, "/talker", "    max_stream_bytes: 1048576\n", "", &[]).await;
        within(took, 0, wire);
        assert_eq!(
            v["attempts"][0]["class"], "stream_interrupted",
            "{wire}: {v}"
        );
        assert_eq!(v["outcome"], "interrupted", "{wire}: {v}");
        let delivered = v["text"].as_str().unwrap_or("").len();
        assert!(
            delivered > 0 && delivered <= 1_048_576,
            "{wire}: {delivered} bytes delivered"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_token_then_empty_deltas_forever_ends_at_stream_max_ms() {
    for wire in WIRES {
        let (v, took) = walk_stream(wire, "/onetoken", "    stream_max_ms: 1500\n", "", &[]).await;
        within(took, 1500, wire);
        assert_eq!(
            v["attempts"][0]["class"], "stream_interrupted",
            "{wire}: {v}"
        );
        assert_eq!(v["text"], "Hi", "{wire}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn max_elapsed_ms_bounds_a_whole_stream() {
    let card = "policies:\n  short: { max_elapsed_ms: 1500 }\n";
    for wire in WIRES {
        let (v, took) = walk_stream(wire, "/onetoken", "", card, &["--workflow", "short"]).await;
        within(took, 1500, wire);
        assert_eq!(
            v["attempts"][0]["class"], "stream_interrupted",
            "{wire}: {v}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_recovery_budget_bounds_an_attempt_in_flight() {
    let card = "policies:\n  short: { max_elapsed_ms: 1500 }\n";
    for wire in WIRES {
        let fields = "    first_token_timeout_ms: 15000\n    timeout_ms: 15000\n";
        let (v, took) = walk_stream(wire, "/silent", fields, card, &["--workflow", "short"]).await;
        within(took, 1500, wire);
        assert_eq!(v["attempts"][0]["class"], "timeout", "{wire}: {v}");
    }
}

// ---- item 5: durations out of range are refused ------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn out_of_range_durations_in_a_config_are_refused_naming_the_range() {
    let dir = tempfile::tempdir().unwrap();
    for (field, value, range) in [
        ("cooldown_ms", "18446744073709551615", "0 to 86400000"),
        ("cooldown_ms", "9223372036854775807", "0 to 86400000"),
        ("transient_cooldown_ms", "86400001", "0 to 86400000"),
        ("timeout_ms", "0", "1 to 86400000"),
        ("stream_max_ms", "99999999999", "1 to 86400000"),
    ] {
        let yaml = support::pool_yaml(
            &[("a", "openai", "http://127.0.0.1:9/v1")],
            &["a/m"],
            "chat",
            &format!("    {field}: {value}\n"),
        );
        let config = dir.path().join("pool.yaml");
        std::fs::write(&config, yaml).unwrap();
        let o = run(&config, &["check"]).await;
        let err = all(&o);
        // A value out of range is a problem in valid YAML: exit 1 (spec/cli.md, `check`).
        assert_eq!(o.status.code(), Some(1), "{field}: {value}: {err}");
        assert!(
            err.contains(field) && err.contains(range),
            "{field}: {value}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn out_of_range_durations_in_a_scenario_are_refused_naming_the_range() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (tweak, range)) in [
        (
            "state:\n  a/m: cooling 9223372036854775807\n",
            "0 to 86400000",
        ),
        ("", "0 to 86400000"),
    ]
    .into_iter()
    .enumerate()
    {
        let cooldown = if tweak.is_empty() {
            "    cooldown_ms: 18446744073709551615\n"
        } else {
            ""
        };
        let text = format!(
            "name: range-{i}\nchain:\n  - route: a/m\n{cooldown}    replies:\n      - ok: \"x\"\n{tweak}expect: {{ outcome: success }}\n"
        );
        let path = dir.path().join(format!("s{i}.yaml"));
        std::fs::write(&path, text).unwrap();
        let o = run_bounded(bin().arg("chaos").arg(&path)).await;
        let err = all(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(range), "{err}");
    }
}

// ---- the property: arbitrary bytes as an SSE body, on each wire ---------------------------

mod arbitrary_sse {
    use super::support;
    use poolctl::core::request::ChatRequest;
    use poolctl::core::secret::Secret;
    use poolctl::core::vocab::Wire;
    use poolctl::wire::Endpoint;
    use proptest::prelude::*;
    use std::sync::{Arc, Mutex};
    use tokio::io::AsyncWriteExt;

    const MAX_EVENT: u64 = 512;
    const MAX_STREAM: u64 = 1024;
    const STREAM_MAX_MS: u64 = 600;

    fn endpoint(wire: Wire, base_url: String) -> Endpoint {
        Endpoint {
            provider: "p".into(),
            wire,
            dialect: poolctl::classify::dialect::Dialect::of_wire(wire),
            base_url,
            api_key: Secret::new("sk-prop"),
            timeout_ms: 2_000,
            first_token_timeout_ms: 400,
            stream_idle_ms: 200,
            stream_max_ms: STREAM_MAX_MS,
            max_stream_bytes: MAX_STREAM,
            max_event_bytes: MAX_EVENT,
            drop_params: false,
        }
    }

    /// Bytes built from pieces a hostile peer would send: valid deltas of each wire,
    /// line ends of every kind, long runs without one, and raw noise.
    fn body() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            3 => Just(b"data: {\"choices\":[{\"delta\":{\"content\":\"abc\"}}]}\n\n".to_vec()),
            3 => Just(b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"abc\"}}\n\n".to_vec()),
            3 => Just(b"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"abc\"}]}}]}\n\n".to_vec()),
            3 => Just(format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n", "x".repeat(200)).into_bytes()),
            3 => Just(format!("data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":\"{}\"}}]}}}}]}}\n\n", "y".repeat(200)).into_bytes()),
            3 => Just(format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"delta\":{{\"text\":\"{}\"}}}}\n\n", "z".repeat(200)).into_bytes()),
            3 => Just(b"data: [DONE]\n\n".to_vec()),
            3 => Just(b"\r\n".to_vec()),
            3 => Just(b"\n\n".to_vec()),
            3 => Just(b"\r".to_vec()),
            3 => Just(b": ping\n".to_vec()),
            1 => Just(vec![b'a'; 600]),
            1 => proptest::collection::vec(any::<u8>(), 0..64),
        ];
        proptest::collection::vec(piece, 0..40).prop_map(|p| p.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
        #[test]
        fn arbitrary_bytes_never_pass_the_caps_and_always_end(
            bytes in body(),
            close in proptest::bool::weighted(0.8),
        ) {
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let shared = Arc::new(bytes);
                let up = support::start(move |_head, mut s| {
                    let bytes = shared.clone();
                    async move {
                        if support::sse_head(&mut s).await.is_err() {
                            return;
                        }
                        for part in bytes.chunks(97) {
                            if support::chunk(&mut s, part).await.is_err() {
                                return;
                            }
                        }
                        if close {
                            let _ = s.write_all(b"0\r\n\r\n").await;
                        } else {
                            std::future::pending::<()>().await;
                        }
                    }
                })
                .await;
                let client = poolctl::wire::http_client();
                for wire in [Wire::OpenAi, Wire::Anthropic, Wire::Gemini] {
                    let ep = endpoint(wire, up.url("/p"));
                    let seen = Mutex::new(0usize);
                    let on_delta = |ev: poolctl::core::answer::StreamEvent<'_>| match ev {
                        poolctl::core::answer::StreamEvent::Text(t) => *seen.lock().unwrap() += t.len(),
                        poolctl::core::answer::StreamEvent::ToolCall { arguments, name, .. } => {
                            *seen.lock().unwrap() += arguments.len() + name.map_or(0, str::len)
                        }
                        _ => {}
                    };
                    let req = ChatRequest::user("hi", 16);
                    let bound = std::time::Duration::from_millis(STREAM_MAX_MS + 2_000);
                    let attempt = tokio::time::timeout(
                        bound,
                        poolctl::wire::stream::stream_chat(&client, &ep, "m", &req, &on_delta),
                    )
                    .await
                    .expect("every stream ends");
                    let handed = *seen.lock().unwrap();
                    assert!(handed as u64 <= MAX_STREAM, "{wire}: {handed} bytes handed over");
                    assert_eq!(attempt.delivered.len(), handed);
                }
            });
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn status_json_prints_an_rfc3339_until_whatever_the_state_file_holds() {
    use poolctl::policy::health::Transition;
    use poolctl::store::{HealthStore, SqliteStore};
    let dir = tempfile::tempdir().unwrap();
    let config = plain_config(dir.path());
    // A state file written by an older build, before durations were range-checked.
    let store = SqliteStore::open(&dir.path().join(".poolctl/state.db")).unwrap();
    let route = poolctl::core::vocab::Route::parse("a/m").unwrap();
    store
        .apply(
            &route,
            Transition::Cool {
                until: i64::MAX,
                reason: "rate_limited".into(),
            },
        )
        .await
        .unwrap();
    drop(store);
    let o = run(&config, &["status", "--json"]).await;
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", all(&o)));
    let until = v["routes"][0]["until"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        chrono::DateTime::parse_from_rfc3339(&until).is_ok(),
        "`until` is not RFC 3339: {v}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cooldown_of_2_pow_64_minus_1_never_leaves_a_429_route_ready() {
    // The arithmetic itself: were the range check bypassed, the instant still saturates.
    let now = 1_764_504_000_000;
    let cooled = poolctl::policy::health::transition(
        poolctl::core::vocab::Class::RateLimited,
        poolctl::core::vocab::Action::Fallback,
        None,
        None,
        poolctl::policy::health::Cooldowns {
            cooldown_ms: Some(u64::MAX),
            transient_cooldown_ms: 5_000,
        },
        now,
    );
    match cooled {
        Some(poolctl::policy::health::Health::Cooling { until, .. }) => assert!(until > now),
        other => panic!("{other:?}"),
    }
}

/// Guards a client that stops reading a stream and keeps its connection: the stream's
/// body was polled only while the socket took bytes, and that polling drives the
/// upstream call and its `stream_max_ms`, so the stream, its connection slot and a paid
/// upstream call stayed open for as long as the client liked. Past `--send-timeout-ms`
/// with nothing taken, the connection closes and the upstream call goes with it.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_stops_reading_a_stream_loses_it_and_the_upstream_call_ends() {
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<(u64, bool)>();
    let ended_tx = std::sync::Arc::new(std::sync::Mutex::new(Some(ended_tx)));
    let up = support::start(move |_head, mut s| {
        let ended_tx = ended_tx.clone();
        async move {
            // A model that talks faster than any buffer holds, bounded: 400k chunks.
            let frame = b"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"flood flood flood flood\"},\"finish_reason\":null}]}\n\n";
            let mut sent = 0u64;
            let mut cut = support::sse_head(&mut s).await.is_err();
            while !cut && sent < 400_000 {
                cut = support::chunk(&mut s, frame).await.is_err();
                sent += 1;
            }
            if let Some(tx) = ended_tx.lock().unwrap().take() {
                let _ = tx.send((sent, cut));
            }
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("pool.yaml");
    std::fs::write(
        &cfg,
        support::pool_yaml(&[("up", "openai", &up.url("/v1"))], &["up/m"], "stream", ""),
    )
    .unwrap();
    let gw = gateway::start(&cfg, &["--send-timeout-ms", "300"], &[(KEY_VAR, SENTINEL)]).await;
    let body = r#"{"model":"t","stream":true,"messages":[{"role":"user","content":"go"}]}"#;
    let mut client = TcpStream::connect(gw.addr).await.unwrap();
    use tokio::io::AsyncWriteExt;
    client
        .write_all(
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                gw.addr,
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // The client reads nothing, and keeps its socket open until the upstream ends.
    let (sent, cut) = tokio::time::timeout(gateway::DEADLINE, ended_rx)
        .await
        .expect("the upstream call ends while the client still holds its connection")
        .unwrap();
    assert!(
        cut,
        "the upstream saw its connection closed, after {sent} chunks"
    );
    drop(client);
    let (_, stderr) = gw.stop().await;
    let line = stderr
        .lines()
        .find(|l| l.contains(" request "))
        .unwrap_or_default();
    assert!(line.contains("outcome=\"cancelled\""), "{stderr}");
}
