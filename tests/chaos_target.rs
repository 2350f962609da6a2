//! End-to-end: `poolctl chaos --target` / `--target-exec` runs scenarios against a
//! gateway over real HTTP, with the suite's mocks behind it. Against `poolctl serve`
//! they pass; against gateways that misbehave (one that never calls upstream, one
//! that answers HTML, one that hangs) they fail, naming what was wrong, within the
//! scenario's deadline; an unreachable target is a clear usage error.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn poolctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(args)
        .env_remove("POOLCTL_TARGET_TOKEN")
        .output()
        .expect("the poolctl binary runs")
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const FALLBACK: &str = r#"
name: quota-then-backup
chain:
  - route: openai/gpt-x
    replies:
      - status: 429
        json: { error: { message: "You exceeded your current quota", type: insufficient_quota, code: insufficient_quota } }
  - route: backup/model-b
    replies:
      - ok: "fine"
expect:
  outcome: success
  served_by: backup/model-b
  text: "fine"
  attempts:
    - { route: openai/gpt-x, status: 429, class: quota_exhausted, action: fallback }
    - { route: backup/model-b, class: ok, action: done }
  health:
    openai/gpt-x: { state: retired, reason: quota_exhausted }
  upstream_calls: { openai/gpt-x: 1, backup/model-b: 1 }
"#;

const CUT_STREAM: &str = r#"
name: stream-cut-after-token-not-spliced
path: stream
chain:
  - route: anthropic/claude-x
    wire: anthropic
    replies:
      - { stream: ["Hel", "lo"], end: eof }
  - route: backup/model-b
    replies:
      - ok: "other"
expect:
  outcome: interrupted
  served_by: anthropic/claude-x
  text: "Hello"
  upstream_calls: { anthropic/claude-x: 1, backup/model-b: 0 }
"#;

/// Two members of one group share the model name: which one answered must still be
/// told apart (regression: the last member was always named).
const GROUP_FIRST_ANSWERS: &str = r#"
name: group-member-that-answers-is-named
chain:
  - route: azure-eu/gpt-4o
    group: g
    weight: 1000
    dialect: azure
    replies:
      - ok: "EU"
  - route: azure-us/gpt-4o
    group: g
    weight: 1
    dialect: azure
    replies:
      - status: 503
        json: { error: { message: "overloaded", code: "server_is_overloaded" } }
expect:
  outcome: success
  served_by: azure-eu/gpt-4o
  text: "EU"
"#;

const LONG_WAIT: &str = r#"
name: second-request-an-hour-later
chain:
  - route: openai/gpt-x
    replies:
      - ok: "one"
requests:
  - expect: { outcome: success }
  - after_ms: 3600000
    expect: { outcome: success }
"#;

const SHORT_DEADLINE: &str = r#"
name: short-deadline
policy: { max_elapsed_ms: 300 }
chain:
  - route: openai/gpt-x
    replies:
      - ok: "one"
expect:
  outcome: success
  served_by: openai/gpt-x
  upstream_calls: { openai/gpt-x: 1 }
"#;

fn suite(scenarios: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, body) in scenarios {
        write(dir.path(), name, body);
    }
    dir
}

/// The JSON lines of `chaos --json`: one object per scenario, then the tally.
fn json_lines(out: &Output) -> (Vec<Value>, Value) {
    let mut lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let tally = lines.pop().expect("a tally line");
    (lines, tally)
}

fn by_name<'a>(runs: &'a [Value], name: &str) -> &'a Value {
    runs.iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no run named {name}"))
}

fn check<'a>(run: &'a Value, field: &str) -> &'a Value {
    run["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["field"] == field)
        .unwrap_or_else(|| panic!("no check {field} in {run}"))
}

fn serve_cmd() -> String {
    format!(
        "{} serve --config {{config}} --listen 127.0.0.1:{{port}}",
        env!("CARGO_BIN_EXE_poolctl")
    )
}

#[test]
fn target_exec_against_poolctl_serve_passes_and_reports_what_it_cannot_see() {
    let dir = suite(&[
        ("a.yaml", FALLBACK),
        ("b.yaml", CUT_STREAM),
        ("c.yaml", LONG_WAIT),
        ("e.yaml", GROUP_FIRST_ANSWERS),
    ]);
    let d = dir.path().to_str().unwrap();
    let out = poolctl(&["chaos", d, "--json", "--target-exec", &serve_cmd()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (runs, tally) = json_lines(&out);
    let fallback = by_name(&runs, "quota-then-backup");
    assert_eq!(fallback["verdict"], "pass");
    assert_eq!(check(fallback, "served_by")["got"], "backup/model-b");
    // The keys of a local run's object a target can fill (scenario-format.md).
    assert_eq!(fallback["passed"], true);
    assert_eq!(fallback["served_by"], "backup/model-b");
    assert_eq!(fallback["mismatches"], serde_json::json!([]));
    assert_eq!(
        by_name(&runs, "second-request-an-hour-later")["passed"],
        false
    );
    assert_eq!(check(fallback, "upstream_calls.openai/gpt-x")["got"], "1");
    assert_eq!(check(fallback, "upstream_calls.backup/model-b")["got"], "1");
    // Health and attempts are the router's own: never reported as passed.
    assert_eq!(check(fallback, "health")["status"], "not_observable");
    assert_eq!(check(fallback, "attempts")["status"], "not_observable");
    let cut = by_name(&runs, "stream-cut-after-token-not-spliced");
    assert_eq!(cut["verdict"], "pass", "{cut}");
    assert_eq!(check(cut, "stream.splice")["status"], "passed");
    assert_eq!(check(cut, "served_by")["got"], "anthropic/claude-x");
    let wait = by_name(&runs, "second-request-an-hour-later");
    assert_eq!(wait["verdict"], "skip");
    assert_eq!(wait["skip"], "max_wait");
    let group = by_name(&runs, "group-member-that-answers-is-named");
    assert_eq!(
        check(group, "served_by")["got"],
        "azure-eu/gpt-4o",
        "{group}"
    );
    assert_eq!(tally["tally"]["passed"], 3);
    assert_eq!(tally["tally"]["skipped"], 1);
    // The gateway's output file is named at the end.
    assert!(text(&out.stderr).contains("the gateway's output: "));
}

/// A gateway on a thread: `answer` gets each request's head and body and returns the
/// bytes to send back (`None`: hold the connection open and never answer).
fn fake_gateway(answer: fn(&str) -> Option<Vec<u8>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut head = String::new();
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body = vec![0u8; len];
            let _ = reader.read_exact(&mut body);
            match answer(&head) {
                Some(bytes) => {
                    let _ = conn.write_all(&bytes);
                }
                None => held.push(conn),
            }
        }
    });
    format!("http://{addr}")
}

fn http(status: &str, ctype: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// `poolctl mock DIR` in the background; its address, and a guard that stops it.
struct Mock {
    addr: String,
    pid: String,
    /// Holds the config it wrote (outside the scenarios' folder).
    config: tempfile::TempDir,
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(&self.pid).status();
    }
}

fn mock(dir: &Path) -> Mock {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("mock-config.yaml");
    let out = poolctl(&[
        "mock",
        dir.join("a.yaml").to_str().unwrap(),
        dir.join("d.yaml").to_str().unwrap(),
        "--listen",
        &addr,
        "--write-config",
        config.to_str().unwrap(),
        "--detach",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    Mock {
        addr,
        pid: text(&out.stdout).trim().to_string(),
        config: config_dir,
    }
}

#[test]
fn a_gateway_that_never_calls_upstream_fails_on_calls_and_on_who_answered() {
    let dir = suite(&[("a.yaml", FALLBACK), ("d.yaml", SHORT_DEADLINE)]);
    let m = mock(dir.path());
    let url = fake_gateway(|_| {
        Some(http(
            "200 OK",
            "application/json",
            r#"{"id":"x","object":"chat.completion","model":"made-up","choices":[{"index":0,"message":{"role":"assistant","content":"fine"},"finish_reason":"stop"}]}"#,
        ))
    });
    let out = poolctl(&[
        "chaos",
        dir.path().join("a.yaml").to_str().unwrap(),
        dir.path().join("d.yaml").to_str().unwrap(),
        "--json",
        "--target",
        &url,
        "--mock",
        &m.addr,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let (runs, tally) = json_lines(&out);
    let run = by_name(&runs, "quota-then-backup");
    assert_eq!(run["verdict"], "fail");
    assert_eq!(
        check(run, "upstream_calls.backup/model-b")["status"],
        "failed"
    );
    assert_eq!(
        check(run, "upstream_calls.backup/model-b")["wrong"],
        "upstream_calls"
    );
    assert_eq!(check(run, "served_by")["status"], "failed");
    assert_eq!(run["passed"], false);
    let mismatched: Vec<&str> = run["mismatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["field"].as_str().unwrap())
        .collect();
    assert!(mismatched.contains(&"served_by"), "{run}");
    assert!(!mismatched.contains(&"text"), "{run}");
    // The text it made up happens to match: that check passes, the rest does not.
    assert_eq!(check(run, "text")["status"], "passed");
    assert_eq!(tally["tally"]["failed"], 2);
    assert_eq!(tally["tally"]["wrong"]["upstream calls"], 2);
}

#[test]
fn a_target_that_answers_html_fails_each_scenario_naming_the_page() {
    let dir = suite(&[("a.yaml", FALLBACK), ("d.yaml", SHORT_DEADLINE)]);
    let m = mock(dir.path());
    let url = fake_gateway(|_| {
        Some(http(
            "502 Bad Gateway",
            "text/html",
            "<html><body><h1>502 Bad Gateway</h1></body></html>",
        ))
    });
    let out = poolctl(&[
        "chaos",
        dir.path().join("a.yaml").to_str().unwrap(),
        dir.path().join("d.yaml").to_str().unwrap(),
        "--target",
        &url,
        "--mock",
        &m.addr,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("FAIL  quota-then-backup"), "{stdout}");
    assert!(stdout.contains("an HTML page"), "{stdout}");
}

#[test]
fn a_target_that_hangs_fails_within_the_scenario_deadline_not_the_run() {
    let dir = suite(&[("a.yaml", FALLBACK), ("d.yaml", SHORT_DEADLINE)]);
    let m = mock(dir.path());
    // Answers the reachability probe, then never answers a request.
    let url = fake_gateway(|head| {
        head.starts_with("GET ")
            .then(|| http("200 OK", "application/json", r#"{"data":[]}"#))
    });
    let started = poolctl::core::clock::Stopwatch::start();
    let out = poolctl(&[
        "chaos",
        dir.path().join("d.yaml").to_str().unwrap(),
        dir.path().join("a.yaml").to_str().unwrap(),
        "--json",
        "--filter",
        "short-deadline",
        "--target",
        &url,
        "--mock",
        &m.addr,
    ]);
    // 300 ms of deadline and the runner's slack for a loaded machine: far from a hang.
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let (runs, tally) = json_lines(&out);
    let run = by_name(&runs, "short-deadline");
    assert_eq!(check(run, "deadline")["status"], "failed");
    assert_eq!(check(run, "deadline")["wrong"], "hang");
    assert_eq!(tally["tally"]["wrong"]["hang"], 1);
}

#[test]
fn an_unreachable_target_is_a_clear_error() {
    let dir = suite(&[("a.yaml", FALLBACK), ("d.yaml", SHORT_DEADLINE)]);
    let m = mock(dir.path());
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = poolctl(&[
        "chaos",
        dir.path().to_str().unwrap(),
        "--target",
        &url,
        "--mock",
        &m.addr,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains(&format!("cannot reach the target at {url}")),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_suite_mock_counts_calls_per_renamed_route_and_reset_rewinds_them() {
    let dir = suite(&[("a.yaml", FALLBACK), ("d.yaml", SHORT_DEADLINE)]);
    let m = mock(dir.path());
    let config = std::fs::read_to_string(m.config.path().join("mock-config.yaml")).unwrap();
    // Each scenario is a tier of its own, its routes renamed so none is shared.
    assert!(
        config.contains(
            "  quota-then-backup:\n    - openai~quota-then-backup/gpt-x~openai~quota-then-backup\n"
        ),
        "{config}"
    );
    assert!(config.contains("  short-deadline: {"), "{config}");
    let body =
        r#"{"model":"gpt-x~openai~quota-then-backup","messages":[{"role":"user","content":"hi"}]}"#;
    let call = || {
        raw(
            &m.addr,
            &format!(
                "POST /openai~quota-then-backup/v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer k\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            ),
        )
        .0
    };
    let calls = || -> Value {
        let (_, body) = raw(&m.addr, "GET /calls HTTP/1.1\r\nhost: x\r\n\r\n");
        serde_json::from_str(&body).unwrap()
    };
    assert_eq!(call(), 429);
    assert_eq!(call(), 429, "the last reply repeats");
    let route = "openai~quota-then-backup/gpt-x~openai~quota-then-backup";
    assert_eq!(calls()["routes"][route]["calls"], 2);
    assert_eq!(calls()["routes"][route]["answered"], 0);
    let (status, _) = raw(
        &m.addr,
        "POST /reset HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n",
    );
    assert_eq!(status, 200);
    assert_eq!(calls()["routes"][route]["calls"], 0);
}

/// One request on its own connection (the mock closes each): status and body.
fn raw(addr: &str, request: &str) -> (u16, String) {
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn.write_all(request.as_bytes()).unwrap();
    let mut all = String::new();
    conn.read_to_string(&mut all).unwrap();
    let status = all[9..12].parse().unwrap();
    let body = all
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn interrupting_chaos_stops_the_gateway_it_started() {
    const SLOW: &str = r#"
name: slow-second-request
chain:
  - route: openai/gpt-x
    replies:
      - ok: "one"
requests:
  - expect: { outcome: success }
  - after_ms: 4000
    expect: { outcome: success }
"#;
    // The quick scenario runs first (file order); once its verdict is printed the
    // gateway is up and chaos is inside the slow one's 4 s gap.
    let dir = suite(&[("a.yaml", FALLBACK), ("s.yaml", SLOW)]);
    let pid_file = dir.path().join("gateway.pid");
    // `exec`: the gateway keeps the shell's pid, which it writes first.
    let cmd = format!(
        "echo $$ > {}; exec {} serve --config {{config}} --listen 127.0.0.1:{{port}}",
        pid_file.display(),
        env!("CARGO_BIN_EXE_poolctl")
    );
    let mut chaos = Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(["chaos", dir.path().to_str().unwrap(), "--target-exec", &cmd])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(chaos.stdout.take().unwrap());
    let mut line = String::new();
    assert!(
        stdout.read_line(&mut line).unwrap() > 0,
        "chaos ended early"
    );
    assert!(line.contains("quota-then-backup"), "{line}");
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_string();
    let alive = |pid: &str| {
        Command::new("kill")
            .args(["-0", pid])
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
            .success()
    };
    assert!(alive(&pid), "the gateway runs");
    let chaos_pid = chaos.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &chaos_pid])
        .status()
        .unwrap()
        .success());
    let out = chaos.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("interrupted: the gateway was stopped"),
        "{stderr}"
    );
    assert!(!alive(&pid), "the gateway outlived chaos");
}

#[test]
fn two_scenarios_that_would_share_routes_on_a_mock_are_refused() {
    let a = FALLBACK.replace("name: quota-then-backup", "name: \"a b\"");
    let b = FALLBACK.replace("name: quota-then-backup", "name: a_b");
    let dir = suite(&[("a.yaml", &a), ("b.yaml", &b)]);
    let out = poolctl(&["mock", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("serve as the same `a_b`"),
        "{}",
        text(&out.stderr)
    );
}

/// A LiteLLM config written for `poolctl serve` keeps each route's dialect under
/// LiteLLM's own provider prefix (`dashscope/`, `fireworks_ai/`, `xai/`), so a scenario
/// that passes on the pool format passes on it too; one that needs what the format
/// cannot carry (`stream_max_ms`, a dialect LiteLLM has no prefix for) is skipped as not
/// comparable, never failed. Regression: every OpenAI-wire route was `openai/`.
#[test]
fn a_litellm_config_keeps_each_routes_dialect_and_skips_what_it_cannot_express() {
    let dir = tempfile::tempdir().unwrap();
    let names = [
        "dashscope-free-tier-403-retires-quota",
        "fireworks-412-account-suspended-retires-quota-falls-back",
        "xai-spent-credits-403-retires-quota-not-auth",
        "spec-stream-max-ms-before-token-is-timeout",
        "hunyuan-resource-pack-exhausted-inside-200-retires-quota",
    ];
    for n in names {
        let from = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("scenarios/{n}.yaml"));
        std::fs::copy(&from, dir.path().join(format!("{n}.yaml"))).unwrap();
    }
    let d = dir.path().to_str().unwrap();
    let out = poolctl(&[
        "chaos",
        d,
        "--json",
        "--config-format",
        "litellm",
        "--target-exec",
        &serve_cmd(),
    ]);
    let (runs, _) = json_lines(&out);
    for n in &names[..3] {
        let run = by_name(&runs, n);
        assert_eq!(run["verdict"], "pass", "{run}");
    }
    for n in &names[3..] {
        let run = by_name(&runs, n);
        assert_eq!(run["verdict"], "skip", "{run}");
        assert_eq!(run["skip"], "not_comparable", "{run}");
    }
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}
