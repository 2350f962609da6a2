//! Cross wire through `poolctl serve` (spec/fidelity.md §2 and §3): a request that
//! enters on one API and is served by a route of another is translated whole (content
//! parts, images, later system messages, reasoning, `parallel_tool_calls`), and what a
//! route cannot carry either skips it (semantic: `cannot_carry`, and a 400
//! `unsupported_by_chain` when no route can) or is dropped and named (advisory:
//! `x-poolctl-dropped-params`, the log line, `poolctl_dropped_params_total`). The built
//! binary runs in front of recording wiremock upstreams; every upstream body is checked
//! field by field. No test sleeps.

use serde_json::{json, Value};
use std::path::PathBuf;
use wiremock::MockServer;

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/recording.rs"]
mod recording;
use gateway::Gateway;
use gateway::{data_lines, header, send};
use recording::{received, sse_upstream, upstream};

const KEY_VAR: &str = "POOLCTL_CROSS_WIRE_TEST_KEY";
const UPSTREAM_KEY: &str = "sk-upstream-CROSS-5d1f";

const ANTHROPIC_ANSWER: &str = r#"{"id":"msg_01","type":"message","role":"assistant","model":"claude-x-20250101",
  "content":[{"type":"text","text":"A red square."}],"stop_reason":"end_turn","stop_sequence":null,
  "usage":{"input_tokens":12,"output_tokens":4}}"#;

const OPENAI_ANSWER: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"gpt-x-2025",
  "choices":[{"index":0,"message":{"role":"assistant","content":"Two answers."},"finish_reason":"stop"},
             {"index":1,"message":{"role":"assistant","content":"Second."},"finish_reason":"stop"}],
  "usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16}}"#;

const GEMINI_ANSWER: &str = r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"A red square."}]},"finishReason":"STOP"}],
  "usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":4},"modelVersion":"gemini-x"}"#;

/// One provider of the pool: its name, wire, upstream and extra YAML lines.
struct Provider<'a> {
    name: &'a str,
    wire: &'a str,
    server: &'a MockServer,
    extra: &'a str,
}

/// A provider of `wire` named `name` in front of `server`, with no extra settings.
fn route_of<'a>(name: &'a str, wire: &'a str, server: &'a MockServer) -> Provider<'a> {
    Provider {
        name,
        wire,
        server,
        extra: "",
    }
}

/// `poolctl serve` with `providers` and the tier `high` of `routes`, in order.
async fn serve(providers: &[Provider<'_>], routes: &[&str]) -> (tempfile::TempDir, Gateway) {
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = String::from("providers:\n");
    for p in providers {
        let base = match p.wire {
            "openai" => format!("{}/v1", p.server.uri()),
            _ => p.server.uri(),
        };
        yaml.push_str(&format!(
            "  {}:\n    wire: {}\n    base_url: {base}\n    api_key_env: {KEY_VAR}\n{}",
            p.name, p.wire, p.extra
        ));
    }
    yaml.push_str("tiers:\n  high:\n");
    for r in routes {
        yaml.push_str(&format!("    - {r}\n"));
    }
    let cfg: PathBuf = dir.path().join("pool.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let gw = gateway::start(&cfg, &[], &[(KEY_VAR, UPSTREAM_KEY)]).await;
    (dir, gw)
}

async fn anthropic() -> MockServer {
    upstream("/v1/messages", ANTHROPIC_ANSWER).await
}

async fn openai() -> MockServer {
    upstream("/v1/chat/completions", OPENAI_ANSWER).await
}

/// The JSON bodies the upstream received, in order.
async fn bodies(server: &MockServer) -> Vec<Value> {
    received(server)
        .await
        .iter()
        .map(|r| serde_json::from_slice(&r.body).expect("the upstream got JSON"))
        .collect()
}

async fn post(gw: &Gateway, at: &str, body: &Value, headers: &[(&str, &str)]) -> reqwest::Response {
    send(gw, at, serde_json::to_vec(body).unwrap(), headers).await
}

/// The fields `x-poolctl-dropped-params` names, sorted.
fn dropped_sorted(r: &reqwest::Response) -> Vec<String> {
    let mut named: Vec<String> = header(r, "x-poolctl-dropped-params")
        .split(',')
        .map(str::to_string)
        .collect();
    named.sort();
    named
}

/// The `request` log lines the gateway wrote.
fn request_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains("request")).collect()
}

/// Stops `gw` and checks that a request's log line names `skip`
/// (`route:cannot_carry:field`).
async fn assert_skip_logged(gw: Gateway, skip: &str) {
    let (_, stderr) = gw.stop().await;
    let lines = request_lines(&stderr);
    assert!(
        lines.iter().any(|l| l.contains(skip)),
        "the log line names the skip and its field ({skip}): {lines:?}"
    );
}

/// Checks that `r` is the 400 `unsupported_by_chain` of a request no route can carry,
/// and answers its message (which names each route's reason).
async fn unsupported_by_chain(r: reqwest::Response) -> String {
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "unsupported_by_chain", "{e}");
    e["error"]["message"].as_str().unwrap().to_string()
}

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

fn image_request(extra: Value) -> Value {
    let mut body = json!({
        "model": "high",
        "max_completion_tokens": 300,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is in"},
            {"type": "text", "text": "this image?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG}")}}
        ]}]
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// Issue 20's acceptance: an inline image on `[anthropic route, openai route]` is
/// served by the first, which receives a base64 image block beside its text blocks.
#[tokio::test]
async fn inline_image_is_served_by_the_anthropic_route_as_a_base64_image_block() {
    let (ant, oai) = (anthropic().await, openai().await);
    let (_dir, gw) = serve(
        &[
            route_of("ant", "anthropic", &ant),
            route_of("oai", "openai", &oai),
        ],
        &["ant/claude-x", "oai/gpt-x"],
    )
    .await;
    let r = post(&gw, "/v1/chat/completions", &image_request(json!({})), &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-served-by"), "ant/claude-x");
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "A red square.");
    let sent = bodies(&ant).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0]["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "What is in"},
            {"type": "text", "text": "this image?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
        ]}])
    );
    assert_eq!(sent[0]["max_tokens"], 300);
    assert!(
        bodies(&oai).await.is_empty(),
        "the OpenAI route is not called"
    );
}

/// Issue 20's acceptance: the same request with `n: 2` skips the Anthropic route (it
/// has no `n`), with the reason in the log line, and is served by the OpenAI route,
/// which receives the client's body.
#[tokio::test]
async fn n_2_skips_the_anthropic_route_with_the_reason_and_is_served_by_openai() {
    let (ant, oai) = (anthropic().await, openai().await);
    let (_dir, gw) = serve(
        &[
            route_of("ant", "anthropic", &ant),
            route_of("oai", "openai", &oai),
        ],
        &["ant/claude-x", "oai/gpt-x"],
    )
    .await;
    let r = post(
        &gw,
        "/v1/chat/completions",
        &image_request(json!({"n": 2})),
        &[],
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-served-by"), "oai/gpt-x");
    let answer: Value = r.json().await.unwrap();
    assert_eq!(
        answer["choices"].as_array().unwrap().len(),
        2,
        "both choices"
    );
    assert!(
        bodies(&ant).await.is_empty(),
        "the Anthropic route is never called"
    );
    let sent = bodies(&oai).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["n"], 2);
    assert_eq!(sent[0]["model"], "gpt-x");
    assert_skip_logged(gw, "ant/claude-x:cannot_carry:n").await;
}

/// A request no route of its chain can carry is a 400 `unsupported_by_chain` that
/// names the field and each route's reason; no upstream is called.
#[tokio::test]
async fn a_request_no_route_can_carry_is_a_400_unsupported_by_chain() {
    let ant = anthropic().await;
    let (_dir, gw) = serve(&[route_of("ant", "anthropic", &ant)], &["ant/claude-x"]).await;
    let r = post(
        &gw,
        "/v1/chat/completions",
        &image_request(json!({"n": 3})),
        &[],
    )
    .await;
    assert_eq!(r.status(), 400);
    assert_eq!(header(&r, "x-poolctl-outcome"), "failed");
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "unsupported_by_chain");
    assert_eq!(e["error"]["type"], "unsupported");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(msg.contains("ant/claude-x: cannot carry: n"), "{msg}");
    assert!(bodies(&ant).await.is_empty());
}

/// Guards fidelity.md §3's "never from its health": a cooling route that could not
/// carry the request anyway was reported as cooling, so a request no route can carry
/// came back as a 429 `capacity` with a Retry-After, inviting the client to repeat it.
#[tokio::test]
async fn a_cooling_route_that_cannot_carry_the_request_is_named_for_what_it_cannot_carry() {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, ResponseTemplate};
    let ant = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(
            ResponseTemplate::new(529)
                .insert_header("retry-after", "600")
                .set_body_raw(
                    r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                    "application/json",
                ),
        )
        .mount(&ant)
        .await;
    let (_dir, gw) = serve(&[route_of("ant", "anthropic", &ant)], &["ant/claude-x"]).await;
    let plain = json!({"model": "high", "messages": [{"role": "user", "content": "hi"}]});
    let r = post(&gw, "/v1/chat/completions", &plain, &[]).await;
    assert_eq!(
        r.status(),
        429,
        "capacity: the 529 leaves the route cooling for 600 s"
    );
    let r = post(
        &gw,
        "/v1/chat/completions",
        &image_request(json!({"n": 2})),
        &[],
    )
    .await;
    let msg = unsupported_by_chain(r).await;
    assert!(msg.contains("ant/claude-x: cannot carry: n"), "{msg}");
    assert_eq!(
        bodies(&ant).await.len(),
        1,
        "only the first request was sent"
    );
}

/// Advisory fields (`seed`, `presence_penalty`, a field this router does not know) are
/// dropped on another wire and named: the response header, the log line, the metric.
#[tokio::test]
async fn advisory_fields_are_dropped_and_named_in_the_header_the_log_and_the_metric() {
    let ant = anthropic().await;
    let (_dir, gw) = serve(&[route_of("ant", "anthropic", &ant)], &["ant/claude-x"]).await;
    let body = json!({
        "model": "high",
        "messages": [{"role": "user", "name": "ada", "content": "hi"}],
        "seed": 7, "presence_penalty": 0.5, "x_future": {"a": 1}
    });
    let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(r.status(), 200);
    let named = dropped_sorted(&r);
    assert_eq!(
        named,
        ["messages[].name", "presence_penalty", "seed", "x_future"]
    );
    let sent = bodies(&ant).await;
    for f in ["seed", "presence_penalty", "x_future", "n"] {
        assert!(sent[0].get(f).is_none(), "{f} is not sent: {}", sent[0]);
    }
    assert_eq!(
        sent[0]["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    );
    let seed = gw
        .metric("poolctl_dropped_params_total{param=\"seed\",wire=\"anthropic\"}")
        .await;
    assert_eq!(seed, 1.0);
    let other = gw
        .metric("poolctl_dropped_params_total{param=\"other\",wire=\"anthropic\"}")
        .await;
    assert_eq!(other, 1.0, "a client's own field name is counted as other");
    let (_, stderr) = gw.stop().await;
    assert!(
        request_lines(&stderr)
            .iter()
            .any(|l| l.contains("dropped=") && l.contains("seed") && l.contains("x_future")),
        "the log line names what was dropped: {stderr}"
    );
}

/// Guards the fields inside messages that a translation leaves out: an earlier turn's
/// `reasoning_content` and `audio`, and fields no wire knows on a message or a part,
/// were dropped on another wire without a word. Named once each; on the client's own
/// wire nothing is dropped, so nothing is named.
#[tokio::test]
async fn fields_inside_messages_left_out_by_a_translation_are_named() {
    let (ant, oai) = (anthropic().await, openai().await);
    let (_dir, gw) = serve(
        &[
            route_of("ant", "anthropic", &ant),
            route_of("oai", "openai", &oai),
        ],
        &["ant/claude-x"],
    )
    .await;
    let body = json!({
        "model": "high", "max_completion_tokens": 50,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi", "foo": 1}], "bar": true},
            {"role": "assistant", "content": "Hello.", "reasoning_content": "They greet me.",
             "audio": {"id": "audio_1"}},
            {"role": "user", "content": "And?", "bar": false}
        ]
    });
    let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(r.status(), 200);
    let named = dropped_sorted(&r);
    assert_eq!(
        named,
        [
            "messages[].audio",
            "messages[].bar",
            "messages[].content[].foo",
            "messages[].reasoning_content"
        ]
    );
    drop(gw);
    let (_dir, gw) = serve(&[route_of("oai", "openai", &oai)], &["oai/gpt-x"]).await;
    let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "x-poolctl-dropped-params"),
        "",
        "the same wire drops nothing"
    );
    let anthropic_body = json!({
        "model": "high", "max_tokens": 50,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Summarise.", "zzz": 1},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"},
             "context": "a memo"}
        ]}]
    });
    let anthropic_body = {
        // A text document is Anthropic's own; a PDF by base64 translates.
        let mut b = anthropic_body;
        b["messages"][0]["content"][1]["source"] =
            json!({"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"});
        b
    };
    let r = post(&gw, "/v1/messages", &anthropic_body, &[]).await;
    assert_eq!(r.status(), 200);
    let named = dropped_sorted(&r);
    assert_eq!(
        named,
        ["messages[].content[].context", "messages[].content[].zzz"]
    );
}

/// fidelity.md §3 names "every field not listed": a field of a tool definition the
/// translation has no place for (`tools[].foo`, `tools[].function.foo`), and a
/// document's file name on Gemini (whose inline data has none), were left out without
/// a word, in both directions.
#[tokio::test]
async fn tool_fields_and_a_document_name_left_out_by_a_translation_are_named() {
    let (ant, oai) = (anthropic().await, openai().await);
    let gem = upstream("/v1beta/models/gemini-x:generateContent", GEMINI_ANSWER).await;
    let (_dir, gw) = serve(
        &[
            route_of("ant", "anthropic", &ant),
            route_of("oai", "openai", &oai),
            route_of("gem", "gemini", &gem),
        ],
        &["ant/claude-x"],
    )
    .await;
    let openai_body = json!({
        "model": "high", "max_completion_tokens": 50,
        "messages": [{"role": "user", "content": "Weather?"}],
        "tools": [{"type": "function", "x_tool": 1,
                   "function": {"name": "f", "parameters": {"type": "object"}, "x_fn": true}}]
    });
    let r = post(&gw, "/v1/chat/completions", &openai_body, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        dropped_sorted(&r),
        ["tools[].function.x_fn", "tools[].x_tool"]
    );
    let sent = &bodies(&ant).await[0];
    assert_eq!(
        sent["tools"][0]["name"], "f",
        "the tool itself goes: {sent}"
    );
    drop(gw);
    let (_dir, gw) = serve(&[route_of("oai", "openai", &oai)], &["oai/gpt-x"]).await;
    let anthropic_body = json!({
        "model": "high", "max_tokens": 50,
        "messages": [{"role": "user", "content": "Weather?"}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}, "x_tool": "a"}]
    });
    let r = post(&gw, "/v1/messages", &anthropic_body, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(dropped_sorted(&r), ["tools[].x_tool"]);
    let r = post(&gw, "/v1/chat/completions", &openai_body, &[]).await;
    assert_eq!(
        header(&r, "x-poolctl-dropped-params"),
        "",
        "the same wire drops nothing"
    );
    assert_eq!(bodies(&oai).await[1]["tools"][0]["x_tool"], 1);
    drop(gw);
    let (_dir, gw) = serve(&[route_of("gem", "gemini", &gem)], &["gem/gemini-x"]).await;
    let pdf = |named: Value| {
        let mut b = json!({"model": "high", "max_tokens": 50, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Summarise."}]}]});
        b["messages"][0]["content"]
            .as_array_mut()
            .unwrap()
            .push(named);
        b
    };
    let r = post(
        &gw,
        "/v1/messages",
        &pdf(json!({"type": "document", "title": "report.pdf",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}})),
        &[],
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(dropped_sorted(&r), ["messages[].content[].title"]);
    let r = post(
        &gw,
        "/v1/chat/completions",
        &pdf(json!({"type": "file", "file": {"filename": "report.pdf",
            "file_data": "data:application/pdf;base64,JVBERi0x"}})),
        &[],
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(dropped_sorted(&r), ["messages[].content[].file.filename"]);
}

/// Guards `cache_control` on an OpenAI client's content part (the mark gateways take
/// for Anthropic's prompt caching): it was dropped on another wire without a word.
#[tokio::test]
async fn cache_control_on_an_openai_part_is_named_where_it_is_dropped() {
    let ant = anthropic().await;
    let (_dir, gw) = serve(&[route_of("ant", "anthropic", &ant)], &["ant/claude-x"]).await;
    let body = json!({"model": "high", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Long context.", "cache_control": {"type": "ephemeral"}}
    ]}]});
    let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-dropped-params"), "cache_control");
    let sent = &bodies(&ant).await[0];
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "Long context."}]}])
    );
}

/// Guards the `anthropic-beta` header of an OpenAI client: a request translated for the
/// Anthropic wire went without it, and nothing said so.
#[tokio::test]
async fn anthropic_beta_from_an_openai_client_is_named_where_it_is_dropped() {
    let ant = anthropic().await;
    let (_dir, gw) = serve(&[route_of("ant", "anthropic", &ant)], &["ant/claude-x"]).await;
    let body = json!({"model": "high", "messages": [{"role": "user", "content": "hi"}]});
    let beta = [("anthropic-beta", "prompt-caching-2024-07-31")];
    let r = post(&gw, "/v1/chat/completions", &body, &beta).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-dropped-params"), "anthropic-beta");
    let got = received(&ant).await;
    assert_eq!(got.len(), 1);
    assert!(got[0].headers.get("anthropic-beta").is_none());
}

/// Guards the thinking of an Anthropic client's history: an earlier answer's signed
/// `thinking` block went to another wire's route left out without a word.
#[tokio::test]
async fn thinking_blocks_in_an_anthropic_history_are_named_where_they_are_dropped() {
    let oai = openai().await;
    let (_dir, gw) = serve(&[route_of("oai", "openai", &oai)], &["oai/gpt-x"]).await;
    let body = json!({"model": "high", "max_tokens": 64, "messages": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Add them.", "signature": "SIG"},
            {"type": "text", "text": "4"}]},
        {"role": "user", "content": "and 3+3?"}]});
    let r = post(&gw, "/v1/messages", &body, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "x-poolctl-dropped-params"),
        "messages[].thinking"
    );
    let sent = &bodies(&oai).await[0];
    assert_eq!(
        sent["messages"][1],
        json!({"role": "assistant", "content": "4"})
    );
    let named = gw
        .metric("poolctl_dropped_params_total{param=\"messages[].thinking\",wire=\"openai\"}")
        .await;
    assert_eq!(named, 1.0);
}

/// `drop_params: true` on a provider makes a semantic field it cannot carry advisory
/// there: the route is called without it, and it is named.
#[tokio::test]
async fn drop_params_calls_the_route_without_a_semantic_field_and_names_it() {
    let ant = anthropic().await;
    let (_dir, gw) = serve(
        &[Provider {
            extra: "    drop_params: true\n",
            ..route_of("ant", "anthropic", &ant)
        }],
        &["ant/claude-x"],
    )
    .await;
    let body = json!({"model": "high", "messages": [{"role": "user", "content": "hi"}], "n": 2, "logprobs": true});
    let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(r.status(), 200);
    let named = header(&r, "x-poolctl-dropped-params");
    assert!(named.split(',').any(|f| f == "n"), "{named}");
    assert!(named.split(',').any(|f| f == "logprobs"), "{named}");
    assert_eq!(bodies(&ant).await.len(), 1);
}

/// A request with an audio part (`input_audio`, which only the OpenAI wire carries).
fn audio_request() -> Value {
    json!({
        "model": "high",
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Transcribe this."},
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
        ]}]
    })
}

/// Audio is semantic (spec/fidelity.md §3): on `[anthropic, openai]` the Anthropic
/// route is skipped with `cannot_carry:input_audio` and never called, and the OpenAI
/// route receives the client's audio part unchanged.
#[tokio::test]
async fn audio_skips_a_route_of_another_wire_and_reaches_the_openai_route_unchanged() {
    let (ant, oai) = (anthropic().await, openai().await);
    let (_dir, gw) = serve(
        &[
            route_of("ant", "anthropic", &ant),
            route_of("oai", "openai", &oai),
        ],
        &["ant/claude-x", "oai/gpt-x"],
    )
    .await;
    let r = post(&gw, "/v1/chat/completions", &audio_request(), &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-served-by"), "oai/gpt-x");
    assert!(
        bodies(&ant).await.is_empty(),
        "the Anthropic route is never called"
    );
    let sent = bodies(&oai).await;
    assert_eq!(sent[0]["messages"], audio_request()["messages"]);
    assert_skip_logged(gw, "ant/claude-x:cannot_carry:input_audio").await;
}

/// A server tool (`web_search_20250305`) or a versioned one (`bash_20250124`) is
/// Anthropic's own: as an empty function of that name elsewhere, the model would call
/// a tool the client never runs. A route of another wire is skipped for it; the
/// Anthropic route gets it as sent.
#[tokio::test]
async fn an_anthropic_server_tool_skips_a_route_of_another_wire_and_reaches_anthropic_as_sent() {
    let (ant, oai) = (anthropic().await, openai().await);
    let (_dir, gw) = serve(
        &[
            route_of("oai", "openai", &oai),
            route_of("ant", "anthropic", &ant),
        ],
        &["oai/gpt-x", "ant/claude-x"],
    )
    .await;
    let tools = json!([
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
        {"type": "bash_20250124", "name": "bash"}
    ]);
    let body = json!({
        "model": "high", "max_tokens": 100, "tools": tools,
        "messages": [{"role": "user", "content": "What is new today?"}]
    });
    let r = post(&gw, "/v1/messages", &body, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-served-by"), "ant/claude-x");
    assert!(
        bodies(&oai).await.is_empty(),
        "the OpenAI route is never called"
    );
    assert_eq!(bodies(&ant).await[0]["tools"], tools);
    assert_skip_logged(gw, "oai/gpt-x:cannot_carry:`tools[0]` is Anthropic's").await;
}

/// A tool declared without a description goes to another wire without one, not with
/// an empty text the client never wrote.
#[tokio::test]
async fn a_tool_without_a_description_is_declared_without_one_on_another_wire() {
    let oai = openai().await;
    let (_dir, gw) = serve(&[route_of("oai", "openai", &oai)], &["oai/gpt-x"]).await;
    let body = json!({
        "model": "high", "max_tokens": 100,
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "q"}]
    });
    assert_eq!(post(&gw, "/v1/messages", &body, &[]).await.status(), 200);
    let sent = bodies(&oai).await;
    assert_eq!(
        sent[0]["tools"],
        json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])
    );
}

/// With no route that carries audio, the answer is a 400 naming the field; with
/// `drop_params: true` the route is called without the audio part and names it.
#[tokio::test]
async fn audio_no_route_carries_is_a_400_and_drop_params_sends_the_rest() {
    let ant = anthropic().await;
    let (_dir, gw) = serve(&[route_of("ant", "anthropic", &ant)], &["ant/claude-x"]).await;
    let r = post(&gw, "/v1/chat/completions", &audio_request(), &[]).await;
    let msg = unsupported_by_chain(r).await;
    assert!(
        msg.contains("ant/claude-x: cannot carry: input_audio"),
        "{msg}"
    );
    assert!(bodies(&ant).await.is_empty());
    gw.stop().await;

    let ant = anthropic().await;
    let (_dir, gw) = serve(
        &[Provider {
            extra: "    drop_params: true\n",
            ..route_of("ant", "anthropic", &ant)
        }],
        &["ant/claude-x"],
    )
    .await;
    let r = post(&gw, "/v1/chat/completions", &audio_request(), &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-dropped-params"), "input_audio");
    let audio = gw
        .metric("poolctl_dropped_params_total{param=\"input_audio\",wire=\"anthropic\"}")
        .await;
    assert_eq!(audio, 1.0, "audio is counted by its own name");
    let sent = bodies(&ant).await;
    assert_eq!(
        sent[0]["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "Transcribe this."}]}])
    );

    // A turn that is audio alone would be sent empty: no drop_params carries it.
    let only_audio = json!({"model": "high", "messages": [
        {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}
    ]});
    let r = post(&gw, "/v1/chat/completions", &only_audio, &[]).await;
    let msg = unsupported_by_chain(r).await;
    assert!(
        msg.contains("ant/claude-x: cannot carry: input_audio"),
        "{msg}"
    );
    assert_eq!(bodies(&ant).await.len(), 1, "never sent an empty turn");
}

/// OpenAI → Anthropic: a `developer` message and a system message after the first turn
/// are appended to `system` in order, one text block each (Anthropic takes blocks, so
/// nothing is joined); `reasoning_effort` becomes `thinking` with
/// `max_tokens` = budget + the output asked for, and the temperature Anthropic refuses
/// beside thinking is dropped and named; `parallel_tool_calls: false` becomes
/// `disable_parallel_tool_use`.
#[tokio::test]
async fn openai_to_anthropic_keeps_later_system_messages_reasoning_and_serial_tools() {
    let ant = anthropic().await;
    let (_dir, gw) = serve(&[route_of("ant", "anthropic", &ant)], &["ant/claude-x"]).await;
    let body = json!({
        "model": "high",
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "Paris."}
        ],
        "reasoning_effort": "low", "temperature": 0.3, "max_completion_tokens": 300,
        "parallel_tool_calls": false,
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]
    });
    let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-dropped-params"), "temperature");
    let sent = &bodies(&ant).await[0];
    assert_eq!(
        sent["system"],
        json!([{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Answer in French."}])
    );
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "Weather?"}, {"type": "text", "text": "Paris."}
        ]}])
    );
    assert_eq!(
        sent["thinking"],
        json!({"type": "enabled", "budget_tokens": 1024})
    );
    assert_eq!(sent["max_tokens"], 1024 + 300);
    assert!(sent.get("temperature").is_none());
    assert_eq!(
        sent["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
    // One system message stays the plain string; a temperature of 1 is the one thinking
    // takes, so it is sent, and nothing is named.
    let one = json!({"model": "high", "reasoning_effort": "low", "temperature": 1,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]});
    let r = post(&gw, "/v1/chat/completions", &one, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-dropped-params"), "");
    let sent = &bodies(&ant).await[1];
    assert_eq!(sent["system"], "Be brief.");
    assert_eq!(sent["temperature"], 1.0);
    assert_eq!(sent["thinking"]["budget_tokens"], 1024);
}

/// A tool result of several text parts keeps them apart across wires, in both
/// directions: never glued (`row1row2` changed what the model read) nor joined.
#[tokio::test]
async fn a_tool_result_of_several_text_parts_keeps_them_apart_in_both_directions() {
    let (ant, oai) = (anthropic().await, openai().await);
    let (_dir, gw) = serve(
        &[
            route_of("ant", "anthropic", &ant),
            route_of("oai", "openai", &oai),
        ],
        &["ant/claude-x"],
    )
    .await;
    let openai_body = json!({
        "model": "high", "max_completion_tokens": 100,
        "messages": [
            {"role": "user", "content": "Rows?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "rows", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": [
                {"type": "text", "text": "row1"}, {"type": "text", "text": "row2"}
            ]}
        ]
    });
    assert_eq!(
        post(&gw, "/v1/chat/completions", &openai_body, &[])
            .await
            .status(),
        200
    );
    let sent = &bodies(&ant).await[0];
    assert_eq!(
        sent["messages"][2]["content"][0]["content"],
        json!([{"type": "text", "text": "row1"}, {"type": "text", "text": "row2"}]),
        "{sent}"
    );
    drop(gw);

    let (_dir, gw) = serve(&[route_of("oai", "openai", &oai)], &["oai/gpt-x"]).await;
    let anthropic_body = json!({
        "model": "high", "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "Rows?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "rows", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                {"type": "text", "text": "row1"}, {"type": "text", "text": "row2"}
            ]}]}
        ]
    });
    assert_eq!(
        post(&gw, "/v1/messages", &anthropic_body, &[])
            .await
            .status(),
        200
    );
    let sent = &bodies(&oai).await[0];
    assert_eq!(
        sent["messages"][2],
        json!({"role": "tool", "tool_call_id": "toolu_1", "content": [
            {"type": "text", "text": "row1"}, {"type": "text", "text": "row2"}
        ]}),
        "{sent}"
    );
}

/// Guards an Anthropic client's assistant message of several text blocks on an OpenAI
/// route: it used to arrive as two assistant messages (the calls on the second only),
/// and an error result of several blocks as one joined string. One message keeps its
/// texts as parts with its calls; the error result keeps its parts, marked on the first.
#[tokio::test]
async fn an_anthropic_assistant_message_of_several_text_blocks_is_one_openai_message() {
    let oai = openai().await;
    let (_dir, gw) = serve(&[route_of("oai", "openai", &oai)], &["oai/gpt-x"]).await;
    let body = json!({
        "model": "high", "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "Rows?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "A1"},
                {"type": "text", "text": "A2"},
                {"type": "tool_use", "id": "toolu_1", "name": "rows", "input": {}}
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                "is_error": true, "content": [
                    {"type": "text", "text": "R1"}, {"type": "text", "text": "R2"}
            ]}]}
        ]
    });
    assert_eq!(post(&gw, "/v1/messages", &body, &[]).await.status(), 200);
    let sent = &bodies(&oai).await[0];
    assert_eq!(
        sent["messages"],
        json!([
            {"role": "user", "content": "Rows?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "A1"}, {"type": "text", "text": "A2"}
            ], "tool_calls": [{"id": "toolu_1", "type": "function",
                "function": {"name": "rows", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": [
                {"type": "text", "text": "[tool error] R1"}, {"type": "text", "text": "R2"}
            ]}
        ]),
        "{sent}"
    );
}

/// Guards an agent loop with reasoning on an Anthropic route: Anthropic refuses
/// thinking when the last assistant turn (the one that called the tools) does not
/// start with its signed thinking block, which a conversation from another wire never
/// holds. The loop's next call goes without thinking, named; a new exchange after the
/// loop has ended takes thinking again.
#[tokio::test]
async fn reasoning_in_a_tool_loop_from_another_wire_goes_without_thinking_and_is_named() {
    let ant = anthropic().await;
    let (_dir, gw) = serve(&[route_of("ant", "anthropic", &ant)], &["ant/claude-x"]).await;
    let mut body = json!({
        "model": "high", "max_completion_tokens": 300, "reasoning_effort": "low",
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "messages": [
            {"role": "user", "content": "Look it up."},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"}
        ]
    });
    let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-dropped-params"), "reasoning_effort");
    let sent = &bodies(&ant).await[0];
    assert!(sent.get("thinking").is_none(), "{sent}");
    assert_eq!(sent["max_tokens"], 300);
    // The loop ended with an answer; the user's next message starts a new exchange.
    let msgs = body["messages"].as_array_mut().unwrap();
    msgs.push(json!({"role": "assistant", "content": "It is 42."}));
    msgs.push(json!({"role": "user", "content": "Why?"}));
    let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-dropped-params"), "");
    let sent = &bodies(&ant).await[1];
    assert_eq!(sent["thinking"]["budget_tokens"], 1024, "{sent}");
}

/// Guards an OpenAI client's assistant turn of several text parts: it reached
/// Anthropic as one text block and Gemini as one part, joined by a blank line the
/// client never sent. Each part is now a block (a part) of the one assistant message.
#[tokio::test]
async fn an_assistant_turn_of_several_text_parts_keeps_them_apart_on_anthropic_and_gemini() {
    let ant = anthropic().await;
    let gem = upstream("/v1beta/models/gemini-x:generateContent", GEMINI_ANSWER).await;
    let body = json!({
        "model": "high", "max_completion_tokens": 100,
        "messages": [
            {"role": "user", "content": "Two things?"},
            {"role": "assistant", "content": [{"type": "text", "text": "t1"}, {"type": "text", "text": "t2"}]},
            {"role": "user", "content": "Go on."}
        ]
    });
    let (_dir, gw) = serve(&[route_of("ant", "anthropic", &ant)], &["ant/claude-x"]).await;
    assert_eq!(
        post(&gw, "/v1/chat/completions", &body, &[]).await.status(),
        200
    );
    let sent = &bodies(&ant).await[0];
    assert_eq!(
        sent["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "t1"}, {"type": "text", "text": "t2"}
        ]}),
        "{sent}"
    );
    drop(gw);
    let (_dir, gw) = serve(&[route_of("gem", "gemini", &gem)], &["gem/gemini-x"]).await;
    assert_eq!(
        post(&gw, "/v1/chat/completions", &body, &[]).await.status(),
        200
    );
    let sent = &bodies(&gem).await[0];
    assert_eq!(
        sent["contents"][1],
        json!({"role": "model", "parts": [{"text": "t1"}, {"text": "t2"}]}),
        "{sent}"
    );
}

const GEMINI_CALL_ANSWER: &str = r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Rome"}}}]},"finishReason":"STOP"}],
"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":4},"modelVersion":"gemini-x-001"}"#;
const GEMINI_CALL_STREAM: &str = "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"get_weather\",\"args\":{\"city\":\"Rome\"}}}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":9,\"candidatesTokenCount\":4},\"modelVersion\":\"gemini-x-001\"}\n\n";

/// Guards Gemini's call ids in a tool loop: Gemini gives calls none, and each answer
/// numbered its own from `call_0`, so the second turn's call repeated the first's id
/// in the client's history (and on any route it moved to). An answer's calls are now
/// numbered on from the calls the conversation already holds, streamed or not.
#[tokio::test]
async fn a_gemini_call_in_a_later_turn_gets_an_id_no_earlier_call_holds() {
    let gem = upstream(
        "/v1beta/models/gemini-x:generateContent",
        GEMINI_CALL_ANSWER,
    )
    .await;
    let gem_sse = sse_upstream(
        "/v1beta/models/gemini-x:streamGenerateContent",
        GEMINI_CALL_STREAM,
    )
    .await;
    let history = json!([
        {"role": "user", "content": "Weather in Paris, then Rome?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_0", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "18C"}
    ]);
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let (_dir, gw) = serve(&[route_of("gem", "gemini", &gem)], &["gem/gemini-x"]).await;
    let body = json!({"model": "high", "messages": history, "tools": tools});
    let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["id"], "call_1",
        "{v}"
    );
    drop(gw);
    let (_dir, gw) = serve(&[route_of("gem", "gemini", &gem_sse)], &["gem/gemini-x"]).await;
    let body = json!({"model": "high", "messages": history, "tools": tools, "stream": true});
    let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(r.status(), 200);
    let chunks = data_lines(&r.text().await.unwrap());
    let ids: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0/id"))
        .collect();
    assert_eq!(ids, [&json!("call_1")], "{chunks:?}");
    // The client's index still counts this answer's calls from 0.
    let index = chunks
        .iter()
        .find_map(|c| c.pointer("/choices/0/delta/tool_calls/0/index"))
        .unwrap();
    assert_eq!(index, &json!(0));
}

/// Anthropic → OpenAI: each text block stays a text part, an image block becomes an
/// `image_url` data URL, `thinking.budget_tokens` becomes `reasoning_effort`,
/// `max_tokens` is `max_completion_tokens` on the `openai` dialect, and `top_k` (which
/// OpenAI lacks) is dropped and named.
#[tokio::test]
async fn anthropic_to_openai_keeps_parts_images_and_reasoning() {
    let oai = openai().await;
    let (_dir, gw) = serve(
        &[Provider {
            extra: "    dialect: openai\n",
            ..route_of("oai", "openai", &oai)
        }],
        &["oai/gpt-x"],
    )
    .await;
    let body = json!({
        "model": "high", "max_tokens": 200, "top_k": 5,
        "system": [{"type": "text", "text": "Be brief."}],
        "thinking": {"type": "enabled", "budget_tokens": 1500},
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
        "tools": [{"name": "t", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "One."},
            {"type": "text", "text": "Two."},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
        ]}]
    });
    let r = post(
        &gw,
        "/v1/messages",
        &body,
        &[("anthropic-version", "2023-06-01")],
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-dropped-params"), "top_k");
    let sent = &bodies(&oai).await[0];
    assert_eq!(
        sent["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "text", "text": "One."},
                {"type": "text", "text": "Two."},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG}")}},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
            ]}
        ])
    );
    assert_eq!(sent["reasoning_effort"], "medium");
    assert_eq!(sent["max_completion_tokens"], 200);
    assert!(sent.get("max_tokens").is_none());
    assert_eq!(sent["parallel_tool_calls"], false);
    assert!(sent.get("top_k").is_none());
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["type"], "message");
    assert_eq!(answer["content"][0]["text"], "Two answers.");
}

/// Gemini has no part for an image by URL: the route is skipped with the field; an
/// inline image reaches it as `inline_data`.
#[tokio::test]
async fn gemini_takes_inline_images_and_is_skipped_for_an_image_by_url() {
    let gem = upstream("/v1beta/models/gemini-x:generateContent", GEMINI_ANSWER).await;
    let oai = openai().await;
    let (_dir, gw) = serve(
        &[
            route_of("gem", "gemini", &gem),
            route_of("oai", "openai", &oai),
        ],
        &["gem/gemini-x", "oai/gpt-x"],
    )
    .await;
    let mut with_system = image_request(json!({}));
    let messages = with_system["messages"].as_array_mut().unwrap();
    messages.insert(0, json!({"role": "system", "content": "Be brief."}));
    messages.push(json!({"role": "developer", "content": "Answer in French."}));
    let r = post(&gw, "/v1/chat/completions", &with_system, &[]).await;
    assert_eq!(header(&r, "x-poolctl-served-by"), "gem/gemini-x");
    let sent = &bodies(&gem).await[0];
    // fidelity.md §2's name, one part a system message, in order.
    assert_eq!(
        sent["system_instruction"],
        json!({"parts": [{"text": "Be brief."}, {"text": "Answer in French."}]})
    );
    assert_eq!(
        sent["contents"],
        json!([{"role": "user", "parts": [
            {"text": "What is in"}, {"text": "this image?"},
            {"inline_data": {"mime_type": "image/png", "data": PNG}}
        ]}])
    );
    let by_url = json!({"model": "high", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    ]}]});
    let r = post(&gw, "/v1/chat/completions", &by_url, &[]).await;
    assert_eq!(header(&r, "x-poolctl-served-by"), "oai/gpt-x");
    assert_eq!(
        bodies(&gem).await.len(),
        1,
        "Gemini is not called for a URL"
    );
}

/// Guards `drop_params` on Gemini: an image by URL was named dropped yet sent as
/// `file_data` (which takes only Gemini's own uploaded files). Named, it is left out.
#[tokio::test]
async fn drop_params_on_gemini_leaves_an_image_by_url_out_as_it_names_it() {
    let gem = upstream("/v1beta/models/gemini-x:generateContent", GEMINI_ANSWER).await;
    let (_dir, gw) = serve(
        &[Provider {
            extra: "    drop_params: true\n",
            ..route_of("gem", "gemini", &gem)
        }],
        &["gem/gemini-x"],
    )
    .await;
    let by_url = json!({"model": "high", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    ]}]});
    let r = post(&gw, "/v1/chat/completions", &by_url, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-dropped-params"), "image_url");
    let sent = &bodies(&gem).await[0];
    assert_eq!(
        sent["contents"],
        json!([{"role": "user", "parts": [{"text": "What is this?"}]}])
    );
}

/// Groq answers 400 to `logit_bias` and a message's `name` (console.groq.com/docs/openai):
/// on the same wire they are removed from the client's body and named; `logprobs`,
/// which changes the answer, skips the route.
#[tokio::test]
async fn groq_gets_the_client_body_without_the_fields_it_rejects() {
    let groq = openai().await;
    let (_dir, gw) = serve(
        &[Provider {
            extra: "    dialect: groq\n",
            ..route_of("groq", "openai", &groq)
        }],
        &["groq/llama-x"],
    )
    .await;
    let body = json!({
        "model": "high", "temperature": 0.2, "x_keep": true,
        "messages": [{"role": "user", "name": "ada", "content": "hi"}],
        "logit_bias": {"1": -100}
    });
    let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(r.status(), 200);
    let named = dropped_sorted(&r);
    assert_eq!(named, ["logit_bias", "messages[].name"]);
    let sent = &bodies(&groq).await[0];
    assert_eq!(
        sent,
        &json!({"model": "llama-x", "temperature": 0.2, "x_keep": true,
                "messages": [{"role": "user", "content": "hi"}]})
    );
    let r = post(
        &gw,
        "/v1/chat/completions",
        &json!({"model": "high", "messages": [{"role": "user", "content": "hi"}], "logprobs": true}),
        &[],
    )
    .await;
    unsupported_by_chain(r).await;
    assert_eq!(bodies(&groq).await.len(), 1);
}

/// Mistral answers 422 `extra_forbidden` to every field it does not know, so it is
/// described by the fields it accepts (fidelity.md §1): everything else the client
/// sent is left out and named, its two renamed fields arrive under Mistral's names,
/// and `reasoning_effort`, which changes the answer, skips the route.
#[tokio::test]
async fn mistral_gets_only_the_fields_it_knows_and_the_rest_is_named() {
    let mis = openai().await;
    let (_dir, gw) = serve(
        &[Provider {
            extra: "    dialect: mistral\n",
            ..route_of("mis", "openai", &mis)
        }],
        &["mis/mistral-x"],
    )
    .await;
    let body = json!({
        "model": "high", "temperature": 0.2, "presence_penalty": 0.5, "safe_prompt": true,
        "seed": 7, "max_completion_tokens": 50, "verbosity": "low", "zz_future": {"a": 1},
        "stream_options": {"include_usage": true}, "user": "u-1",
        "tools": [{"type": "function", "x_tool": 1, "function": {"name": "f", "parameters": {"type": "object"}}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": "yes", "reasoning_content": "thought"},
            {"role": "user", "content": "and?"},
            {"role": "assistant", "content": "So", "prefix": true}
        ]
    });
    let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        dropped_sorted(&r),
        [
            "cache_control",
            "messages[].reasoning_content",
            "stream_options",
            "tools[].x_tool",
            "user",
            "verbosity",
            "zz_future"
        ]
    );
    let sent = &bodies(&mis).await[0];
    assert_eq!(
        sent,
        &json!({"model": "mistral-x", "temperature": 0.2, "presence_penalty": 0.5,
        "safe_prompt": true, "random_seed": 7, "max_tokens": 50,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": "yes"},
            {"role": "user", "content": "and?"},
            {"role": "assistant", "content": "So", "prefix": true}
        ]})
    );
    let r = post(
        &gw,
        "/v1/chat/completions",
        &json!({"model": "high", "messages": [{"role": "user", "content": "hi"}],
                "reasoning_effort": "high"}),
        &[],
    )
    .await;
    unsupported_by_chain(r).await;
    assert_eq!(bodies(&mis).await.len(), 1);
}

const ANTHROPIC_TOOL_STREAM: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-x-20250101\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":12,\"cache_read_input_tokens\":3,\"output_tokens\":1}}}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Let me check.\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{}}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}\n\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":9}}\n\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\n";

/// Guards issue 20: streamed tool calls from an Anthropic route reached an OpenAI
/// client with `index: 1` after a text block (the SDK's `chat.completions.stream`
/// helper crashed with IndexError), chunks named the configured model, and the usage
/// lost the cache. Calls count from 0; every chunk names the model that answered; the
/// final usage is the whole prompt with its cached part.
#[tokio::test]
async fn an_anthropic_stream_reaches_an_openai_client_with_calls_from_0_and_the_answering_model() {
    let ant = sse_upstream("/v1/messages", ANTHROPIC_TOOL_STREAM).await;
    let (_dir, gw) = serve(&[route_of("ant", "anthropic", &ant)], &["ant/claude-x"]).await;
    let body = json!({"model": "high", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]});
    let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(r.status(), 200);
    let chunks = data_lines(&r.text().await.unwrap());
    assert!(!chunks.is_empty());
    for c in &chunks {
        assert_eq!(c["model"], "claude-x-20250101", "every chunk: {c}");
    }
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array())
        .flatten()
        .collect();
    assert!(!calls.is_empty());
    assert!(calls.iter().all(|c| c["index"] == 0), "{calls:?}");
    assert_eq!(calls[0]["id"], "toolu_1");
    let finish: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, [&json!("tool_calls")]);
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage["prompt_tokens"], 15, "input + cache reads: {usage}");
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 3);
    assert_eq!(usage["completion_tokens"], 9);
}

/// OpenAI → an Anthropic client: `input_tokens` is the prompt less the cached part,
/// which is `cache_read_input_tokens`; `stop` is `end_turn`; the answering model.
#[tokio::test]
async fn an_openai_answer_reaches_an_anthropic_client_with_its_cache_and_reasoning_counts() {
    const ANSWER: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-x-2025",
      "choices":[{"index":0,"message":{"role":"assistant","content":"Hi.","reasoning_content":"thought"},"finish_reason":"stop"}],
      "usage":{"prompt_tokens":20,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":8},"completion_tokens_details":{"reasoning_tokens":4}}}"#;
    let oai = upstream("/v1/chat/completions", ANSWER).await;
    let (_dir, gw) = serve(&[route_of("oai", "openai", &oai)], &["oai/gpt-x"]).await;
    let body =
        json!({"model": "high", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]});
    let r = post(&gw, "/v1/messages", &body, &[]).await;
    assert_eq!(r.status(), 200);
    // A DeepSeek-style reasoning text cannot become a signed thinking block.
    assert_eq!(header(&r, "x-poolctl-dropped-params"), "reasoning_content");
    let m: Value = r.json().await.unwrap();
    assert_eq!(m["model"], "gpt-x-2025");
    assert_eq!(m["stop_reason"], "end_turn");
    assert_eq!(m["content"], json!([{"type": "text", "text": "Hi."}]));
    assert_eq!(
        m["usage"],
        json!({"input_tokens": 12, "cache_read_input_tokens": 8, "output_tokens": 10})
    );
}

/// Anthropic → an OpenAI client: `thinking` text is `message.reasoning_content`, and the
/// prompt tokens are input + cache writes + cache reads (fidelity.md §2).
#[tokio::test]
async fn anthropic_thinking_reaches_an_openai_client_as_reasoning_content() {
    const ANSWER: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x-20250101",
      "content":[{"type":"thinking","thinking":"Paris is in France.","signature":"sig"},{"type":"text","text":"France."}],
      "stop_reason":"stop_sequence","stop_sequence":"END",
      "usage":{"input_tokens":5,"cache_creation_input_tokens":2,"cache_read_input_tokens":3,"output_tokens":7}}"#;
    let ant = upstream("/v1/messages", ANSWER).await;
    let (_dir, gw) = serve(&[route_of("ant", "anthropic", &ant)], &["ant/claude-x"]).await;
    let body =
        json!({"model": "high", "messages": [{"role": "user", "content": "Where is Paris?"}]});
    let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(r.status(), 200);
    let c: Value = r.json().await.unwrap();
    let message = &c["choices"][0]["message"];
    assert_eq!(message["content"], "France.");
    assert_eq!(message["reasoning_content"], "Paris is in France.");
    assert_eq!(c["choices"][0]["finish_reason"], "stop");
    assert_eq!(c["model"], "claude-x-20250101");
    assert_eq!(c["usage"]["prompt_tokens"], 10);
    assert_eq!(c["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
    assert_eq!(c["usage"]["completion_tokens"], 7);
}

const OPENAI_STREAM: &str = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-x-2025\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-x-2025\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-x-2025\",\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\n\
data: [DONE]\n\n";

/// Guards a load-balanced group's streams: `x-poolctl-served-by` named the group's
/// first member whichever member the router drew, since a stream's headers leave
/// before its attempt's record exists. Each stream's header now names the member whose
/// upstream was called (the weights put the second member first almost always).
#[tokio::test]
async fn a_streamed_answer_from_a_group_names_the_member_that_served_it() {
    let (one, two) = (
        sse_upstream("/v1/chat/completions", OPENAI_STREAM).await,
        sse_upstream("/v1/chat/completions", OPENAI_STREAM).await,
    );
    let (_dir, gw) = serve(
        &[
            route_of("one", "openai", &one),
            route_of("two", "openai", &two),
        ],
        &["{ group: [one/m, two/m], weights: [1, 99] }"],
    )
    .await;
    let body = json!({"model": "high", "stream": true,
        "messages": [{"role": "user", "content": "Hi"}]});
    let mut by_two = 0;
    for i in 0..6 {
        let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
        assert_eq!(r.status(), 200);
        let named = header(&r, "x-poolctl-served-by");
        let _ = r.text().await.unwrap();
        let (a, b) = (received(&one).await.len(), received(&two).await.len());
        assert_eq!(a + b, i + 1, "one upstream call a stream");
        let called = if b > by_two { "two/m" } else { "one/m" };
        by_two = b;
        assert_eq!(
            named, called,
            "stream {i}: the header names the member called"
        );
    }
    assert!(
        by_two > 0,
        "the draw put the second member first at least once"
    );
}

/// Guards issue 20: an Anthropic stream served from an OpenAI-wire route reported
/// `input_tokens: 0`. The last `message_delta` carries the whole usage, and
/// `message_start` names the model that answered.
#[tokio::test]
async fn an_openai_stream_reaches_an_anthropic_client_with_the_whole_usage_at_the_end() {
    let oai = sse_upstream("/v1/chat/completions", OPENAI_STREAM).await;
    let (_dir, gw) = serve(&[route_of("oai", "openai", &oai)], &["oai/gpt-x"]).await;
    let body = json!({"model": "high", "max_tokens": 50, "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    let r = post(&gw, "/v1/messages", &body, &[]).await;
    assert_eq!(r.status(), 200);
    let events = data_lines(&r.text().await.unwrap());
    let start = events
        .iter()
        .find(|e| e["type"] == "message_start")
        .unwrap();
    assert_eq!(start["message"]["model"], "gpt-x-2025");
    let delta = events
        .iter()
        .rev()
        .find(|e| e["type"] == "message_delta")
        .unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(
        delta["usage"],
        json!({"input_tokens": 12, "cache_read_input_tokens": 8, "output_tokens": 2})
    );
    let text: String = events
        .iter()
        .filter_map(|e| e["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "Hello");
}

const GEMINI_THINKING_ANSWER: &str = r#"{"candidates":[{"content":{"role":"model","parts":[
    {"text":"Weighing it.","thought":true},{"text":"Calling."},{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}}]},
    "finishReason":"STOP"}],
  "usageMetadata":{"promptTokenCount":30,"cachedContentTokenCount":10,"candidatesTokenCount":5,"thoughtsTokenCount":7},
  "modelVersion":"gemini-x-001"}"#;

/// A Gemini answer to both clients (fidelity.md §2): a thought part is reasoning, never
/// text; a functionCall is a tool call and the finish `tool_calls` / `tool_use`; usage:
/// prompt with its cached part, output = candidates + thoughts, reasoning = thoughts.
#[tokio::test]
async fn a_gemini_answer_reaches_both_clients_with_calls_reasoning_and_usage() {
    let gem = upstream(
        "/v1beta/models/gemini-x:generateContent",
        GEMINI_THINKING_ANSWER,
    )
    .await;
    let (_dir, gw) = serve(&[route_of("gem", "gemini", &gem)], &["gem/gemini-x"]).await;
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
    let body = json!({"model": "high", "messages": [{"role": "user", "content": "Paris?"}],
        "tools": tools, "reasoning_effort": "medium"});
    let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(r.status(), 200);
    let c: Value = r.json().await.unwrap();
    let m = &c["choices"][0]["message"];
    assert_eq!(m["content"], "Calling.");
    assert_eq!(m["reasoning_content"], "Weighing it.");
    assert_eq!(m["tool_calls"][0]["function"]["name"], "get_weather");
    assert_eq!(c["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(c["model"], "gemini-x-001");
    assert_eq!(c["usage"]["prompt_tokens"], 30);
    assert_eq!(c["usage"]["prompt_tokens_details"]["cached_tokens"], 10);
    assert_eq!(c["usage"]["completion_tokens"], 12);
    assert_eq!(
        c["usage"]["completion_tokens_details"]["reasoning_tokens"],
        7
    );
    let sent = &bodies(&gem).await[0];
    assert_eq!(
        sent["generationConfig"]["thinkingConfig"],
        json!({"thinkingBudget": 2048})
    );

    let body = json!({"model": "high", "max_tokens": 100,
        "messages": [{"role": "user", "content": "Paris?"}],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]});
    let r = post(&gw, "/v1/messages", &body, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-dropped-params"), "reasoning_content");
    let m: Value = r.json().await.unwrap();
    assert_eq!(m["stop_reason"], "tool_use");
    assert_eq!(m["content"][0], json!({"type": "text", "text": "Calling."}));
    assert_eq!(m["content"][1]["type"], "tool_use");
    assert_eq!(m["content"][1]["input"], json!({"city": "Paris"}));
    assert_eq!(
        m["usage"],
        json!({"input_tokens": 20, "cache_read_input_tokens": 10, "output_tokens": 12})
    );
    let sent = &bodies(&gem).await[1];
    assert_eq!(sent["generationConfig"]["maxOutputTokens"], 100);
}

/// Embeddings across wires (fidelity.md §6): `dimensions` is Gemini's
/// `outputDimensionality`, and `encoding_format: base64` is rendered by the gateway.
#[tokio::test]
async fn embeddings_dimensions_reach_gemini_and_base64_is_rendered_by_the_gateway() {
    const EMBEDDED: &str = r#"{"embeddings":[{"values":[0.5,-1.0]},{"values":[0.25,2.0]}]}"#;
    let gem = upstream("/v1beta/models/emb-x:batchEmbedContents", EMBEDDED).await;
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "providers:\n  gem:\n    wire: gemini\n    base_url: {}\n    api_key_env: {KEY_VAR}\ntiers:\n  emb:\n    - {{ route: gem/emb-x, path: embed }}\n",
        gem.uri()
    );
    let cfg = dir.path().join("pool.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let gw = gateway::start(&cfg, &[], &[(KEY_VAR, UPSTREAM_KEY)]).await;
    let body =
        json!({"model": "emb", "input": ["a", "b"], "dimensions": 2, "encoding_format": "base64"});
    let r = post(&gw, "/v1/embeddings", &body, &[]).await;
    assert_eq!(r.status(), 200);
    let e: Value = r.json().await.unwrap();
    // 0.5 and -1.0 as little-endian f32s.
    assert_eq!(e["data"][0]["embedding"], "AAAAPwAAgL8=");
    let sent = &bodies(&gem).await[0];
    assert_eq!(sent["requests"][0]["outputDimensionality"], 2);
    assert_eq!(sent["requests"][1]["outputDimensionality"], 2);
}

/// `n` on Gemini is `candidateCount`, and every candidate is a choice (streamed, each
/// candidate is read apart: fidelity_streams.rs).
#[tokio::test]
async fn n_on_gemini_is_candidate_count_and_each_candidate_a_choice() {
    const TWO: &str = r#"{"candidates":[
        {"content":{"role":"model","parts":[{"text":"One."}]},"finishReason":"STOP","index":0},
        {"content":{"role":"model","parts":[{"text":"Two."}]},"finishReason":"MAX_TOKENS","index":1}],
      "usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":6},"modelVersion":"gemini-x-001"}"#;
    let gem = upstream("/v1beta/models/gemini-x:generateContent", TWO).await;
    let oai = sse_upstream("/v1/chat/completions", OPENAI_STREAM).await;
    let (_dir, gw) = serve(
        &[
            route_of("gem", "gemini", &gem),
            route_of("oai", "openai", &oai),
        ],
        &["gem/gemini-x", "oai/gpt-x"],
    )
    .await;
    let body =
        json!({"model": "high", "n": 2, "messages": [{"role": "user", "content": "Count."}]});
    let r = post(&gw, "/v1/chat/completions", &body, &[]).await;
    assert_eq!(header(&r, "x-poolctl-served-by"), "gem/gemini-x");
    let c: Value = r.json().await.unwrap();
    let choices = c["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2);
    assert_eq!(choices[0]["message"]["content"], "One.");
    assert_eq!(choices[1]["index"], 1);
    assert_eq!(choices[1]["message"]["content"], "Two.");
    assert_eq!(choices[1]["finish_reason"], "length");
    assert_eq!(
        bodies(&gem).await[0]["generationConfig"]["candidateCount"],
        2
    );
}

/// Guards review finding 4: an Anthropic client's own stray top-level fields
/// (`max_completion_tokens`, `user`, `stream_options`) are advisory on another wire,
/// named, and never remove the fields the translation itself wrote under those names.
#[tokio::test]
async fn an_anthropic_clients_stray_fields_never_remove_what_the_translation_wrote() {
    let oai = openai().await;
    let (_dir, gw) = serve(&[route_of("oai", "openai", &oai)], &["oai/gpt-x"]).await;
    let body = json!({"model": "high", "max_tokens": 100, "max_completion_tokens": 100,
        "metadata": {"user_id": "u1"}, "user": "x",
        "messages": [{"role": "user", "content": "hi"}]});
    let r = post(&gw, "/v1/messages", &body, &[]).await;
    assert_eq!(r.status(), 200);
    let named = dropped_sorted(&r);
    assert_eq!(named, ["max_completion_tokens", "user"]);
    let sent = &bodies(&oai).await[0];
    assert_eq!(sent["max_completion_tokens"], 100);
    assert_eq!(
        sent["user"], "u1",
        "metadata.user_id, as the translation wrote it"
    );
}

/// Guards review findings 5 and 10: `thinking` other than a budget is semantic (a
/// route of another wire is skipped), a malformed budget is the client's 400, and
/// `reasoning_effort: none` asks for nothing another wire lacks.
#[tokio::test]
async fn thinking_and_reasoning_effort_none_are_judged_not_dropped_silently() {
    let (ant, oai) = (anthropic().await, openai().await);
    let (_dir, gw) = serve(
        &[
            route_of("ant", "anthropic", &ant),
            route_of("oai", "openai", &oai),
        ],
        &["oai/gpt-x"],
    )
    .await;
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let adaptive = json!({"model": "high", "max_tokens": 10, "thinking": {"type": "adaptive"}, "messages": msgs});
    let r = post(&gw, "/v1/messages", &adaptive, &[]).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot carry: thinking"),
        "{e}"
    );
    let no_budget = json!({"model": "high", "max_tokens": 10, "thinking": {"type": "enabled"}, "messages": msgs});
    let r = post(&gw, "/v1/messages", &no_budget, &[]).await;
    assert_eq!(r.status(), 400);
    assert!(bodies(&oai).await.is_empty());
    let none = json!({"model": "high", "reasoning_effort": "none", "messages": msgs});
    let r = post(&gw, "/v1/chat/completions", &none, &[]).await;
    assert_eq!(r.status(), 200, "same wire");
    let zero = json!({"model": "high", "n": 0, "messages": msgs});
    let r = post(&gw, "/v1/chat/completions", &zero, &[]).await;
    assert_eq!(r.status(), 400);
}

/// Guards a Responses client's `reasoning.effort` on a chat route: `minimal` went as
/// `low`, `none` went unsent, and `xhigh` was refused as untranslatable. The chat API
/// takes each word, so each goes as sent; a wire that budgets thinking has no budget
/// for `xhigh` and is skipped for it, and the route after it serves.
#[tokio::test]
async fn an_effort_word_goes_as_sent_where_the_wire_takes_the_word() {
    let (ant, oai) = (anthropic().await, openai().await);
    let (_dir, gw) = serve(
        &[
            route_of("ant", "anthropic", &ant),
            route_of("oai", "openai", &oai),
        ],
        &["ant/claude-x", "oai/gpt-x"],
    )
    .await;
    for word in ["minimal", "none", "xhigh"] {
        let body = json!({"model": "high", "input": "hi", "reasoning": {"effort": word}});
        let r = post(&gw, "/v1/responses", &body, &[]).await;
        assert_eq!(r.status(), 200, "{word}");
    }
    let sent: Vec<Value> = bodies(&oai).await;
    let words: Vec<&Value> = sent.iter().map(|b| &b["reasoning_effort"]).collect();
    assert_eq!(
        words,
        [&json!("xhigh")],
        "only xhigh skips the Anthropic route"
    );
    let to_ant = bodies(&ant).await;
    assert_eq!(to_ant.len(), 2, "{to_ant:?}");
    // `minimal` is the least budget Anthropic has; `none` is no thinking at all.
    assert_eq!(
        to_ant[0]["thinking"]["budget_tokens"], 1024,
        "{}",
        to_ant[0]
    );
    assert!(to_ant[1].get("thinking").is_none(), "{}", to_ant[1]);
    drop(gw);

    let (_dir, gw) = serve(&[route_of("oai", "openai", &oai)], &["oai/gpt-x"]).await;
    for word in ["minimal", "none"] {
        let body = json!({"model": "high", "input": "hi", "reasoning": {"effort": word}});
        assert_eq!(post(&gw, "/v1/responses", &body, &[]).await.status(), 200);
    }
    let sent = bodies(&oai).await;
    let words: Vec<&Value> = sent[1..].iter().map(|b| &b["reasoning_effort"]).collect();
    assert_eq!(words, [&json!("minimal"), &json!("none")]);
}

/// Guards review findings 6, 8, 9 and 14: `logprobs: false` is advisory on Groq;
/// `parallel_tool_calls: false` without tools asks nothing of Gemini; an OpenAI
/// client's `top_k` reaches Anthropic; a field name a header cannot hold is `other`
/// there, and the other names stay.
#[tokio::test]
async fn advisory_judgements_follow_the_value_and_names_survive_a_bad_one() {
    let (groq, gem, ant) = (
        openai().await,
        upstream("/v1beta/models/gemini-x:generateContent", GEMINI_ANSWER).await,
        anthropic().await,
    );
    let (_dir, gw) = serve(
        &[
            Provider {
                extra: "    dialect: groq\n",
                ..route_of("groq", "openai", &groq)
            },
            route_of("gem", "gemini", &gem),
            route_of("ant", "anthropic", &ant),
        ],
        &["groq/llama-x", "gem/gemini-x", "ant/claude-x"],
    )
    .await;
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let r = post(
        &gw,
        "/v1/chat/completions",
        &json!({"model": "groq/llama-x", "logprobs": false, "messages": msgs}),
        &[],
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-dropped-params"), "logprobs");
    assert!(bodies(&groq).await[0].get("logprobs").is_none());
    let r = post(
        &gw,
        "/v1/chat/completions",
        &json!({"model": "gem/gemini-x", "parallel_tool_calls": false, "messages": msgs}),
        &[],
    )
    .await;
    assert_eq!(r.status(), 200);
    let r = post(
        &gw,
        "/v1/chat/completions",
        &json!({"model": "ant/claude-x", "top_k": 5, "seed": 1, "a\nb": 1, "messages": msgs}),
        &[],
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(bodies(&ant).await[0]["top_k"], 5);
    let named = dropped_sorted(&r);
    assert_eq!(named, ["other", "seed"]);
}

/// An OpenAI stream chunk of `gpt-x`: choice `index` carrying `delta`.
fn openai_chunk(index: u32, delta: Value, finish: Value) -> String {
    let c = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-x",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}]});
    format!("data: {c}\n\n")
}

/// A chunk of choice 0 carrying one piece of a tool call.
fn tool_call_chunk(call: Value) -> String {
    openai_chunk(0, json!({"tool_calls": [call]}), Value::Null)
}

/// The events an Anthropic client streaming a message (offering `tools`, unless null)
/// receives from an OpenAI route whose upstream streams `sse`, then a finish of
/// `finish` and `[DONE]`.
async fn anthropic_client_events(mut sse: String, finish: &str, tools: Value) -> Vec<Value> {
    sse.push_str(&openai_chunk(0, json!({}), json!(finish)));
    sse.push_str("data: [DONE]\n\n");
    let oai = sse_upstream("/v1/chat/completions", sse.leak()).await;
    let (_dir, gw) = serve(&[route_of("oai", "openai", &oai)], &["oai/gpt-x"]).await;
    let mut body = json!({"model": "high", "max_tokens": 50, "stream": true,
        "messages": [{"role": "user", "content": "go"}]});
    if !tools.is_null() {
        body["tools"] = tools;
    }
    let r = post(&gw, "/v1/messages", &body, &[]).await;
    assert_eq!(r.status(), 200);
    data_lines(&r.text().await.unwrap())
}

/// Guards review finding 3: an OpenAI-compatible stream that interleaves two tool
/// calls reached an Anthropic client as four blocks, two with no id or name and the
/// arguments cut apart. Each piece goes to its own call's block. And the events stay a
/// valid Anthropic stream: a block's deltas come between its start and its stop, and
/// one block is open at a time (the interleaved pieces of the first call once came
/// after its stop).
#[tokio::test]
async fn interleaved_openai_tool_calls_reach_an_anthropic_client_as_two_whole_calls() {
    let sse = [
        tool_call_chunk(json!({"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": ""}})),
        tool_call_chunk(json!({"index": 1, "id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{\"x\""}})),
        openai_chunk(0, json!({"content": "Calling."}), Value::Null),
        tool_call_chunk(json!({"index": 0, "function": {"arguments": "{\"y\":2}"}})),
        tool_call_chunk(json!({"index": 1, "function": {"arguments": ":1}"}})),
    ]
    .concat();
    let tools = json!([{"name": "f", "input_schema": {"type": "object"}}, {"name": "g", "input_schema": {"type": "object"}}]);
    let events = anthropic_client_events(sse, "tool_calls", tools).await;
    let starts: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "content_block_start")
        .collect();
    assert_eq!(
        starts.len(),
        3,
        "one block per call, and the text's: {starts:?}"
    );
    let mut open: Option<u64> = None;
    for e in &events {
        let i = e["index"].as_u64();
        match e["type"].as_str() {
            Some("content_block_start") => {
                assert_eq!(open, None, "a block opened inside another: {events:?}");
                open = i;
            }
            Some("content_block_delta") => {
                assert_eq!(open, i, "a delta outside its block: {events:?}")
            }
            Some("content_block_stop") => {
                assert_eq!(open, i, "{events:?}");
                open = None;
            }
            _ => {}
        }
    }
    let mut args = ["".to_string(), "".to_string(), "".to_string()];
    for e in events.iter().filter(|e| e["type"] == "content_block_delta") {
        let i = e["index"].as_u64().unwrap() as usize;
        args[i].push_str(e["delta"]["partial_json"].as_str().unwrap_or(""));
        args[i].push_str(e["delta"]["text"].as_str().unwrap_or(""));
    }
    // The text that came while the first call was open follows the calls, whole.
    assert_eq!(starts[2]["content_block"]["type"], "text");
    assert_eq!(args[2], "Calling.");
    assert_eq!(starts[0]["content_block"]["id"], "call_a");
    assert_eq!(starts[1]["content_block"]["id"], "call_b");
    assert_eq!(
        serde_json::from_str::<Value>(&args[0]).unwrap(),
        json!({"y": 2})
    );
    assert_eq!(
        serde_json::from_str::<Value>(&args[1]).unwrap(),
        json!({"x": 1})
    );
}

/// fidelity.md §2 ("one `content_block` per call"): an OpenAI-compatible upstream that
/// repeats a call's id and name on each chunk of its arguments gave an Anthropic client
/// one `tool_use` block per chunk, each holding half the arguments.
#[tokio::test]
async fn a_call_whose_chunks_repeat_its_id_reaches_an_anthropic_client_as_one_block() {
    let sse = [
        tool_call_chunk(json!({"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{\"a\""}})),
        tool_call_chunk(json!({"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": ":1"}})),
        tool_call_chunk(json!({"index": 0, "id": "", "function": {"arguments": "}"}})),
    ]
    .concat();
    let tools = json!([{"name": "f", "input_schema": {"type": "object"}}]);
    let events = anthropic_client_events(sse, "tool_calls", tools).await;
    let starts: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "content_block_start")
        .collect();
    assert_eq!(starts.len(), 1, "one block for the one call: {events:?}");
    assert_eq!(starts[0]["content_block"]["id"], "call_a");
    assert_eq!(starts[0]["content_block"]["name"], "f");
    let args: String = events
        .iter()
        .filter(|e| e["type"] == "content_block_delta")
        .filter_map(|e| e["delta"]["partial_json"].as_str())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        json!({"a": 1})
    );
}

/// Guards parallel calls an OpenAI-compatible server (Ollama, SGLang) streams all at
/// `index: 0`, told apart by their ids: they must reach an Anthropic client as two
/// whole `tool_use` blocks, not one with both names and both argument texts glued.
#[tokio::test]
async fn parallel_calls_streamed_at_one_index_reach_an_anthropic_client_apart() {
    let sse = [
        tool_call_chunk(json!({"index": 0, "id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":3}"}})),
        tool_call_chunk(json!({"index": 0, "id": "call_2", "type": "function", "function": {"name": "multiply", "arguments": "{\"b\":4}"}})),
    ]
    .concat();
    let tools = json!([{"name": "add", "input_schema": {"type": "object"}}, {"name": "multiply", "input_schema": {"type": "object"}}]);
    let events = anthropic_client_events(sse, "tool_calls", tools).await;
    let starts: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "content_block_start")
        .collect();
    let names: Vec<&str> = starts
        .iter()
        .map(|e| e["content_block"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["add", "multiply"], "{events:?}");
    let args = |block: u64| -> Value {
        let text: String = events
            .iter()
            .filter(|e| e["type"] == "content_block_delta" && e["index"] == block)
            .filter_map(|e| e["delta"]["partial_json"].as_str())
            .collect();
        serde_json::from_str(&text).unwrap()
    };
    let (first, second) = (
        starts[0]["index"].as_u64().unwrap(),
        starts[1]["index"].as_u64().unwrap(),
    );
    assert_eq!(args(first), json!({"a": 3}));
    assert_eq!(args(second), json!({"b": 4}));
}

/// Guards two defects at once: an upstream that interleaves a second choice (asked or
/// not) with the first had its chunks read as choice 0's, spliced into an Anthropic
/// client's text; and once kept apart, each switch of choice let the key guard go, so
/// a key sent four characters a chunk between the other choice's chunks reached the
/// client whole, piece by piece. An Anthropic client is shown choice 0 alone, masked.
#[tokio::test]
async fn another_choice_interleaved_never_reaches_an_anthropic_client_nor_unmasks_a_key() {
    let chunk = |index: u32, text: &str| openai_chunk(index, json!({"content": text}), Value::Null);
    let mut sse = chunk(0, "key: ");
    for piece in UPSTREAM_KEY.as_bytes().chunks(4) {
        sse.push_str(&chunk(0, std::str::from_utf8(piece).unwrap()));
        sse.push_str(&chunk(1, "zz"));
    }
    let text: String = anthropic_client_events(sse, "stop", Value::Null)
        .await
        .iter()
        .filter(|e| e["type"] == "content_block_delta")
        .filter_map(|e| e["delta"]["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(text, "key: ***");
}

/// fidelity.md §2, "several text parts: one text block each": an OpenAI client's
/// system message of two text parts was joined into one Anthropic system block.
#[tokio::test]
async fn an_openai_system_message_of_text_parts_stays_apart_on_anthropic() {
    let ant = anthropic().await;
    let (_dir, gw) = serve(&[route_of("ant", "anthropic", &ant)], &["ant/claude-x"]).await;
    let body = json!({"model": "high", "messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Answer in French."}]},
        {"role": "user", "content": "Hi"}
    ]});
    assert_eq!(
        post(&gw, "/v1/chat/completions", &body, &[]).await.status(),
        200
    );
    assert_eq!(
        bodies(&ant).await[0]["system"],
        json!([{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Answer in French."}])
    );
}

/// fidelity.md §2: an Anthropic client's system blocks are "joined in order only when
/// the target needs one string". OpenAI's own API takes a system message's content as
/// text parts, so each block is one part there; Gemini's `system_instruction` takes one
/// part each; another OpenAI-compatible API (here DeepSeek) gets the one string.
#[tokio::test]
async fn anthropic_system_blocks_stay_apart_where_the_target_takes_parts() {
    let body = json!({
        "model": "high", "max_tokens": 50,
        "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Answer in French."}],
        "messages": [{"role": "user", "content": "Hi"}]
    });
    let version = [("anthropic-version", "2023-06-01")];
    let system_of = |sent: &Value| sent["messages"][0].clone();

    let oai = openai().await;
    let (_d1, gw) = serve(
        &[Provider {
            extra: "    dialect: openai\n",
            ..route_of("oai", "openai", &oai)
        }],
        &["oai/gpt-x"],
    )
    .await;
    assert_eq!(
        post(&gw, "/v1/messages", &body, &version).await.status(),
        200
    );
    assert_eq!(
        system_of(&bodies(&oai).await[0]),
        json!({"role": "system", "content": [
            {"type": "text", "text": "Be brief."},
            {"type": "text", "text": "Answer in French."}
        ]})
    );

    let deepseek = openai().await;
    let (_d2, gw) = serve(
        &[Provider {
            extra: "    dialect: deepseek\n",
            ..route_of("ds", "openai", &deepseek)
        }],
        &["ds/deepseek-x"],
    )
    .await;
    assert_eq!(
        post(&gw, "/v1/messages", &body, &version).await.status(),
        200
    );
    assert_eq!(
        system_of(&bodies(&deepseek).await[0]),
        json!({"role": "system", "content": "Be brief.\n\nAnswer in French."})
    );

    let gem = upstream("/v1beta/models/gemini-x:generateContent", GEMINI_ANSWER).await;
    let (_d3, gw) = serve(&[route_of("gem", "gemini", &gem)], &["gem/gemini-x"]).await;
    assert_eq!(
        post(&gw, "/v1/messages", &body, &version).await.status(),
        200
    );
    assert_eq!(
        bodies(&gem).await[0]["system_instruction"],
        json!({"parts": [{"text": "Be brief."}, {"text": "Answer in French."}]})
    );
}
