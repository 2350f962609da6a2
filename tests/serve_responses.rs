//! The Responses API's conversations through `poolctl serve`, end to end: the built
//! binary in front of loopback mock providers that record what they received. A
//! conversation kept by one gateway is continued after it restarts (SQLite) or by
//! another process of its fleet (Redis), on another provider, which receives the whole
//! history; the bounds (`responses_ttl`, `responses_max_bytes`, `responses_max`) hold.
//! No test sleeps.

use poolctl::core::vocab::{CallPath, Route, Wire};
use poolctl::harness::mock::{MockRoute, MockServer};
use poolctl::harness::redis_server::RedisServer;
use poolctl::harness::scenario::{Reply, StreamEnd, StreamItem, StreamReply};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

#[path = "support/gateway.rs"]
mod gateway;
use gateway::{Gateway, DEADLINE};

const KEY_VAR: &str = "POOLCTL_RESPONSES_TEST_KEY";

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

const UPSTREAM_KEY: &str = "sk-upstream-responses-77";

/// A Responses-wire route `rsp/gpt-4o` and an Anthropic route `ant/claude`, each
/// recording what it received.
async fn mocks() -> MockServer {
    mocks_with(ok("Paris.")).await
}

/// The same, the Responses route answering `first`.
async fn mocks_with(first: Reply) -> MockServer {
    let routes = vec![
        MockRoute {
            route: route("rsp/gpt-4o"),
            wire: Wire::Responses,
            path: CallPath::Chat,
            replies: vec![first],
            outage: None,
            record: true,
        },
        MockRoute {
            route: route("ant/claude"),
            wire: Wire::Anthropic,
            path: CallPath::Chat,
            replies: vec![ok("About 2.1 million.")],
            outage: None,
            record: true,
        },
    ];
    MockServer::start(([127, 0, 0, 1], 0).into(), routes)
        .await
        .unwrap()
}

/// Both routes as tiers of their own (a client names the route), `extra` at the end.
fn config(dir: &Path, mock: &MockServer, extra: &str) -> PathBuf {
    let yaml = format!(
        "providers:\n  rsp:\n    wire: openai_responses\n    base_url: {}\n    api_key_env: {KEY_VAR}\n  \
         ant:\n    wire: anthropic\n    base_url: {}\n    api_key_env: {KEY_VAR}\n\
         tiers:\n  first:\n    - rsp/gpt-4o\n  second:\n    - ant/claude\n{extra}",
        mock.base_url("rsp", Wire::Responses),
        mock.base_url("ant", Wire::Anthropic),
    );
    let path = dir.join("pool.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

async fn start(config: &Path) -> Gateway {
    gateway::start(config, &[], &[(KEY_VAR, UPSTREAM_KEY)]).await
}

/// `POST /v1/responses`: the status and the body.
async fn respond(gw: &Gateway, body: Value) -> (u16, Value) {
    tokio::time::timeout(DEADLINE, async {
        let r = reqwest::Client::new()
            .post(gw.url("/v1/responses"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json::<Value>().await.unwrap_or(Value::Null))
    })
    .await
    .expect("the gateway answers in time")
}

/// A streamed `/v1/responses` answer to `body`: its text, and each event's JSON.
async fn stream_events(gw: &Gateway, body: Value) -> (String, Vec<Value>) {
    let text = tokio::time::timeout(DEADLINE, async {
        reqwest::Client::new()
            .post(gw.url("/v1/responses"))
            .json(&body)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    })
    .await
    .expect("the gateway answers in time");
    let events = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    (text, events)
}

/// The first turn on the Responses route; its response id.
async fn first_turn(gw: &Gateway) -> String {
    let (status, v) = respond(
        gw,
        json!({"model": "first", "input": "What is the capital of France?"}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["output"][0]["content"][0]["text"], "Paris.");
    let id = v["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("resp_") && id != "resp_mock_0001", "{id}");
    id
}

/// The second turn on the Anthropic route, continuing `id`: it must carry the first
/// turn whole.
async fn second_turn(gw: &Gateway, mock: &MockServer, id: &str) {
    let (status, v) = respond(
        gw,
        json!({"model": "second", "input": "And its population?", "previous_response_id": id}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["previous_response_id"], id);
    assert_eq!(v["output"][0]["content"][0]["text"], "About 2.1 million.");
    let got = mock.received(&route("ant/claude"));
    let last = got.last().expect("the Anthropic route was called");
    let texts: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"][0]["text"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        texts,
        [
            "What is the capital of France?",
            "Paris.",
            "And its population?"
        ],
        "{last}"
    );
}

#[tokio::test]
async fn a_conversation_kept_in_sqlite_is_continued_on_another_provider_after_serve_restarts() {
    let mock = mocks().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &mock, "");
    let gw = start(&config).await;
    let id = first_turn(&gw).await;
    let (code, _) = gw.stop().await;
    assert_eq!(code, Some(0));
    // Beside the health file, in a file of its own.
    assert!(dir.path().join(".poolctl/state.responses.db").exists());
    let gw = start(&config).await;
    second_turn(&gw, &mock, &id).await;
    // The Responses route was never sent an id of its own.
    for body in mock.received(&route("rsp/gpt-4o")) {
        assert!(body.get("previous_response_id").is_none(), "{body}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_fleet_on_redis_continues_a_conversation_another_process_began() {
    let redis = RedisServer::must_start();
    let mock = mocks().await;
    let dir = tempfile::tempdir().unwrap();
    let state = format!("state: {}\nstate_timeout_ms: 2000\n", redis.url());
    let config = config(dir.path(), &mock, &state);
    let (one, two) = (start(&config).await, start(&config).await);
    let id = first_turn(&one).await;
    second_turn(&two, &mock, &id).await;
    // Deleted through either process, gone for both.
    let r = reqwest::Client::new()
        .delete(one.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (status, v) = respond(
        &two,
        json!({"model": "second", "input": "x", "previous_response_id": id}),
    )
    .await;
    assert_eq!(status, 404, "{v}");
    assert_eq!(v["error"]["code"], "previous_response_not_found");
    one.stop().await;
    two.stop().await;
}

#[tokio::test]
async fn a_conversation_over_responses_max_bytes_is_answered_but_not_kept() {
    let mock = mocks().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &mock, "responses_max_bytes: 200\n");
    let gw = start(&config).await;
    let (status, v) = respond(&gw, json!({"model": "first", "input": "Hello?"})).await;
    assert_eq!(status, 200, "{v}");
    // The answer says so.
    assert_eq!(v["store"], false, "{v}");
    let id = v["id"].as_str().unwrap();
    let (status, v) = respond(
        &gw,
        json!({"model": "second", "input": "x", "previous_response_id": id}),
    )
    .await;
    assert_eq!(
        (status, v["error"]["param"].as_str()),
        (404, Some("previous_response_id"))
    );
    let (_, stderr) = gw.stop().await;
    assert!(stderr.contains("over `responses_max_bytes`"), "{stderr}");
}

#[tokio::test]
async fn past_responses_max_the_oldest_conversation_goes_and_an_expired_one_is_gone() {
    let mock = mocks().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &mock, "responses_max: 2\n");
    let gw = start(&config).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (_, v) = respond(&gw, json!({"model": "first", "input": "Hi"})).await;
        ids.push(v["id"].as_str().unwrap().to_string());
    }
    let get = |id: &str| {
        let url = gw.url(&format!("/v1/responses/{id}"));
        async move { reqwest::get(url).await.unwrap().status().as_u16() }
    };
    assert_eq!(get(&ids[0]).await, 404);
    assert_eq!(get(&ids[1]).await, 200);
    assert_eq!(get(&ids[2]).await, 200);
    gw.stop().await;
    // A TTL of 1 ms: by the next request it has passed.
    let config = self::config(dir.path(), &mock, "responses_ttl: 1ms\n");
    let gw = start(&config).await;
    let (_, v) = respond(&gw, json!({"model": "first", "input": "Hi"})).await;
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(get_on(&gw, &id).await, 404);
    gw.stop().await;
}

async fn get_on(gw: &Gateway, id: &str) -> u16 {
    reqwest::get(gw.url(&format!("/v1/responses/{id}")))
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn check_names_a_bad_responses_bound_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let mock = mocks().await;
    for (extra, field) in [
        ("responses_ttl: 0\n", "responses_ttl"),
        ("responses_ttl: 31d\n", "responses_ttl"),
        ("responses_ttl: soon\n", "responses_ttl"),
        ("responses_max_bytes: 0\n", "responses_max_bytes"),
        ("responses_max: 0\n", "responses_max"),
    ] {
        let config = config(dir.path(), &mock, extra);
        let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
            .args(["check", "--json", "--config"])
            .arg(&config)
            .env(KEY_VAR, "x")
            .output()
            .await
            .unwrap();
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(o.status.code(), Some(1), "{extra}: {v}");
        let e = &v["errors"][0];
        assert_eq!(e["field"], field, "{extra}: {v}");
        // The line the bound is on, after the 14 lines of providers and tiers.
        assert_eq!(e["line"], 15, "{extra}: {v}");
    }
}

/// Guards the review's key leak: an upstream that echoes its own key had it masked for
/// the client but kept in the store as it came, and sent to the next provider when the
/// conversation went on there.
#[tokio::test]
async fn an_echoed_upstream_key_is_never_kept_nor_sent_to_the_next_provider() {
    let mock = mocks_with(ok(&format!("Paris. (your key is {UPSTREAM_KEY})"))).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &mock, "");
    let gw = start(&config).await;
    let (status, v) = respond(&gw, json!({"model": "first", "input": "Capital?"})).await;
    assert_eq!(status, 200, "{v}");
    assert!(!v.to_string().contains(UPSTREAM_KEY), "{v}");
    let id = v["id"].as_str().unwrap();
    let (status, _) = respond(
        &gw,
        json!({"model": "second", "input": "More?", "previous_response_id": id}),
    )
    .await;
    assert_eq!(status, 200);
    let sent = mock.received(&route("ant/claude"));
    assert!(!sent.is_empty());
    for body in sent {
        assert!(!body.to_string().contains(UPSTREAM_KEY), "{body}");
        assert!(
            body.to_string().contains("Paris. (your key is ***)"),
            "{body}"
        );
    }
    gw.stop().await;
    let kept = std::fs::read(dir.path().join(".poolctl/state.responses.db")).unwrap();
    let wal = std::fs::read(dir.path().join(".poolctl/state.responses.db-wal")).unwrap_or_default();
    for bytes in [kept, wal] {
        assert!(!String::from_utf8_lossy(&bytes).contains(UPSTREAM_KEY));
    }
}

/// Guards a body naming `previous_response_id` (or `model`) twice: the gateway read
/// one value, the upstream, given the bytes, could read the other.
#[tokio::test]
async fn a_body_naming_a_field_twice_is_refused_before_any_upstream_call() {
    let mock = mocks().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(&config(dir.path(), &mock, "")).await;
    let client = reqwest::Client::new();
    for (path, body) in [
        (
            "/v1/responses",
            r#"{"model":"first","input":"hi","previous_response_id":"resp_theirs","previous_response_id":null}"#,
        ),
        (
            "/v1/chat/completions",
            r#"{"model":"rsp/gpt-4o","messages":[{"role":"user","content":"hi"}],"model":"first"}"#,
        ),
    ] {
        let r = client
            .post(gw.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{path}");
        let v: Value = r.json().await.unwrap();
        assert!(
            v["error"]["message"].as_str().unwrap().contains("twice"),
            "{v}"
        );
    }
    assert_eq!(mock.calls(&route("rsp/gpt-4o")), 0);
    gw.stop().await;
}

/// Guards a same-wire stream whose last event said `output: []` after streaming
/// "Paris.": the conversation kept the empty output, and the next turn lost the answer.
#[tokio::test]
async fn a_streamed_turn_is_kept_as_it_was_streamed() {
    let ev = |kind: &str, body: Value| {
        let mut v = body;
        v["type"] = json!(kind);
        StreamItem::Raw {
            raw: format!("event: {kind}\ndata: {v}"),
        }
    };
    let r0 = json!({"id": "resp_up", "object": "response", "status": "in_progress", "model": "gpt-4o", "output": []});
    let done = json!({"id": "resp_up", "object": "response", "status": "completed", "model": "gpt-4o", "output": [],
        "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}});
    let stream = Reply::Stream(StreamReply {
        items: vec![
            ev("response.created", json!({"response": r0})),
            ev(
                "response.output_item.added",
                json!({"output_index": 0, "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": []}}),
            ),
            ev(
                "response.content_part.added",
                json!({"item_id": "msg_1", "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": ""}}),
            ),
            ev(
                "response.output_text.delta",
                json!({"item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "Paris."}),
            ),
            ev("response.completed", json!({"response": done})),
        ],
        end: StreamEnd::Eof,
        first_token_ms: 0,
        gap_ms: 0,
        headers: vec![],
        usage: None,
    });
    let mock = mocks_with(stream).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(&config(dir.path(), &mock, "")).await;
    let r = reqwest::Client::new()
        .post(gw.url("/v1/responses"))
        .json(&json!({"model": "first", "input": "What is the capital of France?", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.unwrap();
    let id = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find_map(|v| v["response"]["id"].as_str().map(str::to_string))
        .expect("a lifecycle event names the response");
    assert!(text.contains("Paris."), "{text}");
    second_turn(&gw, &mock, &id).await;
    gw.stop().await;
}

/// Guards a truncated answer presented as complete (cli.md): a Responses stream from a
/// route of another wire, cut after its first text, closed the message item it had open
/// with `"status":"completed"`, in `response.output_item.done` and in the item that
/// `response.failed` repeats, though its text was cut off.
#[tokio::test]
async fn a_stream_cut_after_its_first_text_leaves_its_message_item_incomplete() {
    let cut = Reply::Stream(StreamReply {
        items: vec![StreamItem::Text("Par".into())],
        end: StreamEnd::Eof,
        first_token_ms: 0,
        gap_ms: 0,
        headers: vec![],
        usage: None,
    });
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        vec![MockRoute {
            route: route("oai/gpt-4o"),
            wire: Wire::OpenAi,
            path: CallPath::Chat,
            replies: vec![cut],
            outage: None,
            record: false,
        }],
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "providers:\n  oai:\n    wire: openai\n    base_url: {}\n    api_key_env: {KEY_VAR}\n\
         tiers:\n  cut:\n    - oai/gpt-4o\n",
        mock.base_url("oai", Wire::OpenAi),
    );
    let path = dir.path().join("pool.yaml");
    std::fs::write(&path, yaml).unwrap();
    let gw = start(&path).await;
    let (text, events) = stream_events(
        &gw,
        json!({"model": "cut", "input": "What is the capital of France?", "stream": true}),
    )
    .await;
    let of = |kind: &str| {
        events
            .iter()
            .find(|e| e["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in:\n{text}"))
    };
    let done = &of("response.output_item.done")["item"];
    assert_eq!(done["content"][0]["text"], "Par", "{text}");
    assert_eq!(done["status"], "incomplete", "{text}");
    let failed = &of("response.failed")["response"];
    assert_eq!(failed["status"], "failed", "{text}");
    assert_eq!(failed["output"][0]["status"], "incomplete", "{text}");
    gw.stop().await;
}

/// Guards the events a same-wire Responses stream is ended with: after the upstream's
/// events (numbered from 0), the gateway's `error` and `response.failed` restarted at
/// `sequence_number` 0. They now go on from the last the upstream sent.
#[tokio::test]
async fn a_same_wire_stream_cut_ends_with_sequence_numbers_that_go_on() {
    let cut = Reply::Stream(StreamReply {
        items: vec![StreamItem::Text("Par".into())],
        end: StreamEnd::Eof,
        first_token_ms: 0,
        gap_ms: 0,
        headers: vec![],
        usage: None,
    });
    let mock = mocks_with(cut).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = start(&config(dir.path(), &mock, "")).await;
    let (text, events) = stream_events(
        &gw,
        json!({"model": "first", "input": "Capital of France?", "stream": true}),
    )
    .await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["error", "response.failed"],
        "{text}"
    );
    // OpenAI's `ResponseErrorEvent`: `code` and `message` beside `type`, not nested.
    let error = &events[events.len() - 2];
    assert_eq!(error["code"], "stream_interrupted", "{text}");
    assert!(
        error["message"].is_string() && error.get("error").is_none(),
        "{text}"
    );
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect();
    assert!(seqs.len() > 2, "{text}");
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "sequence numbers count on: {seqs:?}\n{text}"
    );
    gw.stop().await;
}
