//! Refusals through `poolctl serve` (fidelity.md §4): a model that refuses has answered.
//! The built binary in front of real loopback mock providers, each refusal shape sent by
//! the mock as its wire sends it; the client sees the refusal, one upstream call was made,
//! and the refusing route stays ready (`/status` is not needed: a second request reaches
//! the same route first).

use poolctl::core::vocab::{CallPath, Route, Wire};
use poolctl::harness::mock::{MockRoute, MockServer};
use poolctl::harness::scenario::{Body, Reply, StreamEnd, StreamItem, StreamReply};
use serde_json::{json, Value};
use std::path::Path;

#[path = "support/gateway.rs"]
mod gateway;

const KEY_VAR: &str = "POOLCTL_REFUSAL_TEST_KEY";

fn route(s: &str) -> Route {
    Route::parse(s).unwrap()
}

fn mock_route(r: &str, wire: Wire, path: CallPath, replies: Vec<Reply>) -> MockRoute {
    MockRoute {
        route: route(r),
        wire,
        path,
        replies,
        outage: None,
        record: false,
    }
}

fn json_200(body: Value) -> Reply {
    Reply::Status {
        status: 200,
        headers: vec![],
        body: Body::Json(body),
    }
}

fn ok(text: &str) -> Reply {
    Reply::Ok {
        text: text.into(),
        headers: vec![],
        usage: None,
    }
}

fn raw_stream(events: &[&str]) -> Reply {
    Reply::Stream(StreamReply {
        items: events
            .iter()
            .map(|e| StreamItem::Raw { raw: e.to_string() })
            .collect(),
        end: StreamEnd::Eof,
        first_token_ms: 0,
        gap_ms: 0,
        headers: vec![],
        usage: None,
    })
}

const OPENAI_REFUSAL: &str = "I'm sorry, I can't help with that.";

fn openai_refusal() -> Reply {
    json_200(json!({
        "id": "chatcmpl-R1", "object": "chat.completion", "created": 1764504000,
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": null, "refusal": OPENAI_REFUSAL}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 9, "total_tokens": 20}
    }))
}

/// A tier `high` of `routes` (provider, wire), then a backup on the OpenAI wire.
fn config(dir: &Path, mock: &MockServer, routes: &[(&str, Wire)]) -> std::path::PathBuf {
    let mut yaml = String::from("providers:\n");
    for (r, wire) in routes {
        let p = r.split('/').next().unwrap();
        let url = mock.base_url(p, *wire);
        yaml.push_str(&format!(
            "  {p}:\n    wire: {wire}\n    base_url: {url}\n    api_key_env: {KEY_VAR}\n"
        ));
    }
    yaml.push_str("tiers:\n  high:\n");
    for (r, _) in routes {
        yaml.push_str(&format!("    - {r}\n"));
    }
    let path = dir.join("pool.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

async fn start(config: &Path) -> gateway::Gateway {
    gateway::start(config, &[], &[(KEY_VAR, "sk-refusal-test")]).await
}

/// Mock providers for `routes`, and `poolctl serve` in front of them with the tier
/// `high` = `chain`. The temporary directory holds the config while the gateway runs.
async fn serving(
    routes: Vec<MockRoute>,
    chain: &[(&str, Wire)],
) -> (MockServer, tempfile::TempDir, gateway::Gateway) {
    let mock = MockServer::start(([127, 0, 0, 1], 0).into(), routes)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &mock, chain);
    let gw = start(&cfg).await;
    (mock, dir, gw)
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> &'a str {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

fn user(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "max_tokens": 64,
        "messages": [{"role": "user", "content": "Do the forbidden thing."}]})
}

/// Guards the OpenAI refusal that was read as a completion without content: retried,
/// answered with a 502, and the one-route tier cooled for 5 s.
#[tokio::test]
async fn an_openai_refusal_reaches_an_openai_client_as_a_refusal_after_one_call() {
    let (mock, _dir, gw) = serving(
        vec![
            mock_route(
                "oa/gpt-4o",
                Wire::OpenAi,
                CallPath::Chat,
                vec![openai_refusal()],
            ),
            mock_route(
                "zz/backup",
                Wire::OpenAi,
                CallPath::Chat,
                vec![ok("backup")],
            ),
        ],
        &[("oa/gpt-4o", Wire::OpenAi), ("zz/backup", Wire::OpenAi)],
    )
    .await;
    let client = reqwest::Client::new();
    for round in 0..2 {
        let r = client
            .post(gw.url("/v1/chat/completions"))
            .json(&user("high", false))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "round {round}");
        assert_eq!(header(&r, "x-poolctl-served-by"), "oa/gpt-4o");
        assert_eq!(header(&r, "x-poolctl-attempts"), "1");
        let body: Value = r.json().await.unwrap();
        let message = &body["choices"][0]["message"];
        assert_eq!(message["refusal"], OPENAI_REFUSAL, "{body}");
        assert_eq!(message["content"], Value::Null, "{body}");
        // Same wire (fidelity.md §1, §4): the refusal as the upstream sent it, its
        // `finish_reason: stop` included, and the upstream's own id.
        assert_eq!(body["choices"][0]["finish_reason"], "stop", "{body}");
        assert_eq!(body["id"], "chatcmpl-R1", "{body}");
    }
    // Two requests, two calls to the refusing route: it stayed ready (no cooling), and
    // nothing was retried or moved to the backup.
    assert_eq!(mock.calls(&route("oa/gpt-4o")), 2);
    assert_eq!(mock.calls(&route("zz/backup")), 0);
    let attempts = gw
        .metric(r#"poolctl_attempts_total{route="oa/gpt-4o",class="refusal",action="done"}"#)
        .await;
    assert_eq!(attempts, 2.0);
}

/// Guards Anthropic's `stop_reason: refusal`, which became a 400 content_policy.
#[tokio::test]
async fn an_anthropic_refusal_reaches_both_clients_as_the_models_answer() {
    let refusal = json_200(json!({
        "id": "msg_R1", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-20250514",
        "content": [{"type": "text", "text": "I can't help with that request."}],
        "stop_reason": "refusal", "stop_sequence": null,
        "usage": {"input_tokens": 14, "output_tokens": 8}
    }));
    let (mock, _dir, gw) = serving(
        vec![mock_route(
            "an/claude",
            Wire::Anthropic,
            CallPath::Chat,
            vec![refusal],
        )],
        &[("an/claude", Wire::Anthropic)],
    )
    .await;
    let client = reqwest::Client::new();

    let r = client
        .post(gw.url("/v1/messages"))
        .header("anthropic-version", "2023-06-01")
        .json(&user("high", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["stop_reason"], "refusal", "{body}");
    assert_eq!(
        body["content"][0]["text"],
        "I can't help with that request."
    );

    // Cross wire: the finish mapping of §2, the refusal text as content.
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .json(&user("high", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["finish_reason"], "content_filter",
        "{body}"
    );
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "I can't help with that request."
    );
    assert_eq!(mock.calls(&route("an/claude")), 2);
}

/// An OpenAI-wire refusal to an Anthropic client: its text is the message's text and the
/// stop reason says `refusal`.
#[tokio::test]
async fn an_openai_refusal_reaches_an_anthropic_client_with_stop_reason_refusal() {
    let (_mock, _dir, gw) = serving(
        vec![mock_route(
            "oa/gpt-4o",
            Wire::OpenAi,
            CallPath::Chat,
            vec![openai_refusal()],
        )],
        &[("oa/gpt-4o", Wire::OpenAi)],
    )
    .await;
    let r = reqwest::Client::new()
        .post(gw.url("/v1/messages"))
        .header("anthropic-version", "2023-06-01")
        .json(&user("high", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["stop_reason"], "refusal", "{body}");
    assert_eq!(body["content"][0]["text"], OPENAI_REFUSAL);
}

/// Guards the streamed refusal that came back as an empty 200: `delta.refusal` chunks
/// reach the OpenAI client as `delta.refusal`, and the stream ends normally.
#[tokio::test]
async fn a_streamed_openai_refusal_reaches_the_client_as_refusal_deltas() {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}",
            json!({"id": "chatcmpl-R2", "object": "chat.completion.chunk",
                "created": 1764504000, "model": "gpt-4o-2024-08-06",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let events = [
        chunk(
            json!({"role": "assistant", "content": null, "refusal": ""}),
            Value::Null,
        ),
        chunk(json!({"refusal": "I can't "}), Value::Null),
        chunk(json!({"refusal": "help with that."}), Value::Null),
        chunk(json!({}), json!("stop")),
        "data: [DONE]".to_string(),
    ];
    let events: Vec<&str> = events.iter().map(String::as_str).collect();
    let (mock, _dir, gw) = serving(
        vec![
            mock_route(
                "oa/gpt-4o",
                Wire::OpenAi,
                CallPath::Stream,
                vec![raw_stream(&events)],
            ),
            mock_route(
                "zz/backup",
                Wire::OpenAi,
                CallPath::Stream,
                vec![ok("backup")],
            ),
        ],
        &[("oa/gpt-4o", Wire::OpenAi), ("zz/backup", Wire::OpenAi)],
    )
    .await;
    let r = reqwest::Client::new()
        .post(gw.url("/v1/chat/completions"))
        .json(&user("high", true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-served-by"), "oa/gpt-4o");
    let text = r.text().await.unwrap();
    let refusal: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v.pointer("/choices/0/delta/refusal")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect();
    assert_eq!(refusal, "I can't help with that.", "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    assert_eq!(mock.calls(&route("zz/backup")), 0);
}

/// Guards a refusal with nothing to show, streamed to an Anthropic client: the whole
/// answer is in before the stream is written, so `message_start` states the input the
/// upstream reported (it said `input_tokens: 0`), as the last `message_delta` does.
#[tokio::test]
async fn an_empty_streamed_refusal_starts_its_anthropic_message_with_the_reported_input() {
    let chunk = json!({
        "candidates": [{"index": 0, "finishReason": "SAFETY",
            "content": {"role": "model", "parts": []}}],
        "usageMetadata": {"promptTokenCount": 20, "cachedContentTokenCount": 8,
            "candidatesTokenCount": 0, "totalTokenCount": 20},
        "modelVersion": "gemini-x-001"
    });
    let event = format!("data: {chunk}");
    let (_mock, _dir, gw) = serving(
        vec![mock_route(
            "gm/gemini-x",
            Wire::Gemini,
            CallPath::Stream,
            vec![raw_stream(&[&event])],
        )],
        &[("gm/gemini-x", Wire::Gemini)],
    )
    .await;
    let r = reqwest::Client::new()
        .post(gw.url("/v1/messages"))
        .header("anthropic-version", "2023-06-01")
        .json(&user("high", true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let start = events
        .iter()
        .find(|e| e["type"] == "message_start")
        .unwrap();
    assert_eq!(start["message"]["usage"]["input_tokens"], 12, "{text}");
    assert_eq!(
        start["message"]["usage"]["cache_read_input_tokens"], 8,
        "{text}"
    );
    let last = events
        .iter()
        .rfind(|e| e["type"] == "message_delta")
        .unwrap();
    assert_eq!(last["delta"]["stop_reason"], "refusal", "{text}");
    assert_eq!(last["usage"]["input_tokens"], 12, "{text}");
}
