//! End-to-end: the built `poolctl` binary runs chaos scenarios against loopback mocks.
//! Exit codes, diffs, load errors and bad bodies are checked as a user sees them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn poolctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(args)
        .output()
        .expect("the poolctl binary runs")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

const PASSING: &str = r#"
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
    openai/gpt-x: { state: retired, reason: quota }
  upstream_calls: { openai/gpt-x: 1, backup/model-b: 1 }
"#;

#[test]
fn the_spec_example_passes_unchanged() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/misworded-429-cools-not-retires.yaml");
    let out = poolctl(&["chaos", example.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(text(&out.stdout).contains("1 passed, 0 failed"));
}

#[test]
fn a_passing_scenario_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "ok.yaml", PASSING);
    let out = poolctl(&["chaos", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

#[test]
fn a_wrong_expectation_exits_1_with_a_diff() {
    let dir = tempfile::tempdir().unwrap();
    let wrong = PASSING
        .replace("class: quota_exhausted", "class: rate_limited")
        .replace("openai/gpt-x: 1,", "openai/gpt-x: 2,");
    write(dir.path(), "wrong.yaml", &wrong);
    let out = poolctl(&["chaos", dir.path().to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("FAIL quota-then-backup"), "{stdout}");
    assert!(stdout.contains("attempts[0].class"), "{stdout}");
    assert!(stdout.contains("expected: rate_limited"), "{stdout}");
    assert!(stdout.contains("got:      quota_exhausted"), "{stdout}");
    assert!(stdout.contains("upstream_calls.openai/gpt-x"), "{stdout}");
    assert!(stdout.contains("0 passed, 1 failed"), "{stdout}");
}

#[test]
fn a_malformed_file_exits_2_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "good.yaml", PASSING);
    write(
        dir.path(),
        "broken.yaml",
        "name: x\nchain:\n  - route: a/b\n    replies: [ { ok: \"x\" }\n",
    );
    let out = poolctl(&["chaos", dir.path().to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("broken.yaml:"), "{stderr}");
    // Nothing runs when a file cannot be loaded.
    assert!(!text(&out.stdout).contains("quota-then-backup"));
}

#[test]
fn load_errors_name_what_is_wrong() {
    let cases = [
        (
            "typo.yaml",
            PASSING.replace("expect:", "expct:"),
            "did you mean `expect`",
        ),
        (
            "field.yaml",
            PASSING.replace("served_by:", "served_bye:"),
            "did you mean `served_by`",
        ),
        (
            "route.yaml",
            PASSING.replace("served_by: backup/model-b", "served_by: backup/model-c"),
            "not in the chain",
        ),
        (
            "class.yaml",
            PASSING.replace("class: ok", "class: okay"),
            "unknown variant `okay`",
        ),
        (
            "reply.yaml",
            PASSING.replace("- ok: \"fine\"", "- { ok: \"fine\", status: 200 }"),
            "exactly one of",
        ),
        (
            "header.yaml",
            PASSING.replace(
                "- ok: \"fine\"",
                "- { status: 500, headers: { \"bad header\": \"x\" } }",
            ),
            "not a valid HTTP header",
        ),
        // A request's typos: a message field, a part type, an http image.
        (
            "message.yaml",
            PASSING.replace(
                "expect:",
                "request: { messages: [ { role: user, contnet: Hi } ] }\nexpect:",
            ),
            "messages[0].contnet is not a message field (did you mean `content`?)",
        ),
        (
            "part.yaml",
            PASSING.replace(
                "expect:",
                "request: { messages: [ { role: user, content: [ { type: imagee_url, image_url: { url: \"https://x.test/a.png\" } } ] } ] }\nexpect:",
            ),
            "`imagee_url` is not a part type (did you mean `image_url`?)",
        ),
        (
            "http.yaml",
            PASSING.replace(
                "expect:",
                "request: { messages: [ { role: user, content: [ { type: image_url, image_url: { url: \"http://x.test/a.png\" } } ] } ] }\nexpect:",
            ),
            "must be an https or `data:` URL",
        ),
        // Guards metadata values YAML reads as a number or a boolean: turned into
        // strings the scenario never wrote.
        (
            "metadata.yaml",
            PASSING.replace("expect:", "request: { metadata: { a: 1 } }\nexpect:"),
            "metadata.a must be a string",
        ),
        // Guards a data URL whose payload is not base64: it loaded, and the route got
        // bytes no provider reads.
        (
            "data.yaml",
            PASSING.replace(
                "expect:",
                "request: { messages: [ { role: user, content: [ { type: image_url, image_url: { url: \"data:image/png;base64,@@@###\" } } ] } ] }\nexpect:",
            ),
            "must be `data:MIME;base64,` and base64",
        ),
        (
            "both.yaml",
            PASSING.replace(
                "expect:",
                "request: { max_tokens: 5, max_completion_tokens: 5 }\nexpect:",
            ),
            "not both",
        ),
        ("empty.yaml", String::new(), "empty"),
        (
            "html.yaml",
            "<html><body>oops</body></html>".to_string(),
            "html.yaml",
        ),
    ];
    for (file, body, needle) in cases {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), file, &body);
        let out = poolctl(&["chaos", p.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{file}: wanted `{needle}` in: {stderr}"
        );
        assert!(
            stderr.contains(file),
            "{file}: the file is not named in: {stderr}"
        );
    }
}

/// A mistake found after the YAML parsed (a reference to a route that is not in the
/// chain, a tier that does not exist, a duplicate name) still names the line it is on:
/// scenario-format.md asks for "file, line and what is wrong" on every load error.
#[test]
fn errors_found_after_parsing_name_file_and_line() {
    let many = r#"name: many
chain:
  - route: a/one
    replies: [ { ok: "A" } ]
  - route: g/gemini-2.5-flash
    replies: [ { ok: "G" } ]
limits:
  g/gemini-2.5-flahs: { rpm: 1 }
requests:
  - expect: { outcome: success }
"#;
    let cases = [
        (
            "route.yaml",
            PASSING.replace("served_by: backup/model-b", "served_by: backup/model-c"),
            "route.yaml:13:14: field `expect.served_by`",
        ),
        (
            "state.yaml",
            PASSING.replace("expect:", "state: { backup/model-c: retired }\nexpect:"),
            "state.yaml:11:26: field `state.backup/model-c`",
        ),
        (
            "limits.yaml",
            many.to_string(),
            "limits.yaml:8:23: field `limits.g/gemini-2.5-flahs`",
        ),
        (
            "later.yaml",
            many.replace("gemini-2.5-flahs", "gemini-2.5-flash")
                + "  - after_ms: 5\n    expect: { outcome: success, served_by: b/two }\n",
            "later.yaml:12:44: field `requests[1].expect.served_by`",
        ),
        (
            "tier.yaml",
            PASSING.replace("expect:", "policy: { degrade_tier: small }\nexpect:"),
            "tier.yaml:11:25: field `policy.degrade_tier`",
        ),
        (
            "type.yaml",
            PASSING.replace("expect:", "policy: { max_total_attempts: four }\nexpect:"),
            "type.yaml:11:31: field `policy.max_total_attempts`: invalid type: string \"four\", expected a whole number",
        ),
    ];
    for (file, body, needle) in cases {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), file, &body);
        let out = poolctl(&["chaos", p.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{file}: wanted `{needle}` in: {stderr}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", PASSING);
    write(dir.path(), "b.yaml", PASSING);
    let out = poolctl(&["chaos", dir.path().to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("b.yaml:2:7: field `name`"), "{stderr}");
}

/// A hostile or mistyped burst is a load error naming the field, never an allocation
/// that aborts the process (`repeat: 4000000000` asked for a terabyte) or a clock that
/// silently stops (`after_ms` past what the virtual clock can hold).
#[test]
fn a_huge_repeat_or_after_ms_is_a_load_error_not_an_abort() {
    let base = "name: burst\nchain:\n  - route: a/one\n    replies: [ { ok: \"A\" } ]\nrequests:\n";
    let cases = [
        (
            "  - repeat: 4000000000\n    expect: { outcome: success }\n",
            "burst.yaml:6:13: field `requests[0].repeat`: a scenario sends at most 100000",
        ),
        (
            "  - repeat: 60000\n    expect: { outcome: success }\n  - repeat: 60000\n    expect: { outcome: success }\n",
            "field `requests[1].repeat`",
        ),
        (
            "  - after_ms: 18446744073709551615\n    expect: { outcome: success }\n",
            "field `requests[0].after_ms`",
        ),
    ];
    for (requests, needle) in cases {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "burst.yaml", &format!("{base}{requests}"));
        let out = poolctl(&["chaos", p.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(needle), "wanted `{needle}` in: {stderr}");
    }
}

const QUEUED: &str = r#"name: queued
chain:
  - route: a/one
    replies: [ { ok: "OK" } ]
limits: { a/one: { rpm: 1 } }
headroom: 1.0
policy: { max_queue_ms: 60000, max_elapsed_ms: 120000 }
requests:
  - repeat: 2
    expect: { outcome: success }
  - expect: { outcome: success }
"#;

/// scenario-format.md, Admission: "The `--json` object of a scenario carries, per
/// request, `queued_ms` and `buckets`."
#[test]
fn json_carries_queued_ms_and_buckets_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "q.yaml", QUEUED);
    let out = poolctl(&["chaos", "--json", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let v: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    let queued: Vec<u64> = v["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["queued_ms"].as_u64().expect("queued_ms on every request"))
        .collect();
    assert_eq!(queued, [0, 60000, 60000]);
    for r in v["requests"].as_array().unwrap() {
        assert_eq!(r["buckets"]["a/one"]["requests"], 0, "{r}");
    }
    assert_eq!(v["queued_ms"], 60000);
}

/// With `repeat`, the copies of one entry are several runs: a mismatch must name the
/// `requests:` entry it belongs to, not the run's place among all copies.
#[test]
fn a_mismatch_names_its_requests_entry_not_its_copy() {
    let dir = tempfile::tempdir().unwrap();
    let wrong = QUEUED.replace(
        "  - expect: { outcome: success }\n",
        "  - expect: { outcome: shed }\n",
    );
    let p = write(dir.path(), "q.yaml", &wrong);
    let out = poolctl(&["chaos", p.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("requests[1].outcome"), "{stdout}");
    assert!(!stdout.contains("requests[2]"), "{stdout}");
    let out = poolctl(&["chaos", "--json", p.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(v["mismatches"][0]["field"], "requests[1].outcome", "{v}");
}

#[test]
fn duplicate_names_and_missing_paths_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", PASSING);
    write(dir.path(), "b.yaml", PASSING);
    let out = poolctl(&["chaos", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("already used"));
    let out = poolctl(&["chaos", "/nonexistent/scenarios"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn json_and_junit_outputs() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "ok.yaml", PASSING);
    let junit = dir.path().join("report.xml");
    let out = poolctl(&[
        "chaos",
        dir.path().to_str().unwrap(),
        "--json",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let line = text(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    for key in [
        "file",
        "name",
        "passed",
        "outcome",
        "reason",
        "served_by",
        "attempts",
        "skipped",
        "health",
        "upstream_calls",
        "waits_ms",
        "mismatches",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    assert_eq!(v["attempts"][0]["class"], "quota_exhausted");
    // Seed 001's per-attempt fields.
    for key in [
        "index",
        "requested_route",
        "chosen",
        "wait_ms",
        "tokens",
        "cost_usd",
        "action",
        "latency_ms",
    ] {
        assert!(
            v["attempts"][0].get(key).is_some(),
            "attempt lacks {key}: {}",
            v["attempts"][0]
        );
    }
    assert_eq!(v["attempts"][1]["chosen"], "fallback");
    assert_eq!(v["attempts"][1]["requested_route"], "openai/gpt-x");
    assert_eq!(v["attempts"][0]["status"], 429);
    assert_eq!(v["upstream_calls"]["backup/model-b"], 1);
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("<testcase") && xml.contains("quota-then-backup"),
        "{xml}"
    );
}

/// Bodies that are huge, empty, HTML or truncated are classified by status; none panics.
#[test]
fn bad_bodies_are_classified_not_fatal() {
    let huge = "x".repeat(3 * 1024 * 1024);
    let scenario = format!(
        r#"
name: bad-bodies
chain:
  - route: a/html
    replies: [ {{ status: 502, body: "<html><body><h1>502 Bad Gateway</h1></body></html>" }} ]
  - route: b/empty
    replies: [ {{ status: 500, body: "" }} ]
  - route: c/huge
    replies: [ {{ status: 503, body: "{huge}" }} ]
  - route: d/truncated
    replies: [ {{ status: 429, body: '{{"error":{{"message":"Rate lim' }} ]
  - route: e/garbled-ok
    replies: [ {{ status: 200, body: "not json at all" }} ]
  - route: f/ok
    replies: [ {{ ok: "survived" }} ]
policy: {{ max_retries_per_route: 0 }}
expect:
  outcome: success
  served_by: f/ok
  attempts:
    - {{ route: a/html, class: server_error, action: fallback }}
    - {{ route: b/empty, class: server_error, action: fallback }}
    - {{ route: c/huge, class: overloaded, action: fallback }}
    - {{ route: d/truncated, class: rate_limited, action: fallback }}
    - {{ route: e/garbled-ok, status: 200, class: server_error, action: fallback }}
    - {{ route: f/ok, class: ok, action: done }}
"#
    );
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "bad.yaml", &scenario);
    let out = poolctl(&["chaos", dir.path().to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// A one-hour Retry-After is honoured on the virtual clock: the wait is recorded, the
/// route is retried, and nothing sleeps.
#[test]
fn an_hour_long_retry_after_is_virtual() {
    let scenario = r#"
name: hour-long-retry-after
policy: { max_retry_wait_ms: 3600000, max_elapsed_ms: 7200000 }
chain:
  - route: a/slow
    replies:
      - { status: 429, headers: { retry-after: "3600" } }
      - { ok: "after an hour" }
expect:
  outcome: success
  text: "after an hour"
  waits_ms: [3600000]
  attempts:
    - { route: a/slow, class: rate_limited, action: retry, wait_ms: 3600000 }
    - { route: a/slow, class: ok, action: done }
  health:
    a/slow: { state: ready }
"#;
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "hour.yaml", scenario);
    let out = poolctl(&["chaos", dir.path().to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}
