//! Same wire through `poolctl serve` (spec/fidelity.md §1 and §6): a request that
//! enters on the API its serving route speaks reaches the upstream as the client sent it,
//! with only `model` replaced, and the answer reaches the client as the upstream sent it,
//! keys masked. The built binary runs in front of a recording wiremock upstream; the
//! client is a plain HTTP client sending exact bytes. No test sleeps.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/recording.rs"]
mod recording;
use gateway::send;
use gateway::Gateway;
use recording::{received, sse_upstream, upstream};

const KEY_VAR: &str = "POOLCTL_FIDELITY_TEST_KEY";
/// The gateway's upstream key: it must reach the upstream and nothing else.
const UPSTREAM_KEY: &str = "sk-upstream-FIDELITY-7c3e";
/// The client's credential for the gateway: it must never reach an upstream.
const CLIENT_TOKEN: &str = "client-token-FIDELITY-91ab";

/// A pool config with `providers` (name, wire, base_url) and `tiers` (name, routes).
fn config(dir: &Path, providers: &[(&str, &str, String)], tiers: &[(&str, &[&str])]) -> PathBuf {
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
    let p = dir.join("pool.yaml");
    std::fs::write(&p, yaml).unwrap();
    p
}

async fn start(config: &Path) -> Gateway {
    gateway::start(
        config,
        &[],
        &[
            (KEY_VAR, UPSTREAM_KEY),
            ("POOLCTL_SERVE_TOKEN", CLIENT_TOKEN),
        ],
    )
    .await
}

/// `poolctl serve` with one provider (name, wire, base URL) and the tier `high` of
/// `route` alone. The directory holds the config while the gateway runs.
async fn one_route(provider: (&str, &str, String), route: &str) -> (tempfile::TempDir, Gateway) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[provider], &[("high", &[route])]);
    let gw = start(&cfg).await;
    (dir, gw)
}

fn header<'a>(r: &'a wiremock::Request, name: &str) -> Option<&'a str> {
    r.headers.get(name).and_then(|v| v.to_str().ok())
}

const OPENAI_REQUEST: &str = r#"{"model":"high","messages":[{"role":"developer","content":"Answer in JSON."},{"role":"user","name":"ada","content":[{"type":"text","text":"Describe"},{"type":"text","text":"this image."},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo=","detail":"low"}}]}],
  "logprobs":true,"top_logprobs":2,"presence_penalty":0.5,"frequency_penalty":0.25,"logit_bias":{"50256":-100},
  "response_format":{"type":"json_object"},"reasoning_effort":"low","parallel_tool_calls":false,
  "tools":[{"type":"function","function":{"name":"get_weather","strict":true,"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}}}],
  "max_completion_tokens":300,"store":true,"service_tier":"flex","n":2,"seed":7,"prediction":{"type":"content","content":"{}"},
  "x_future_field":{"keep":[1,2.50,"three"]}}"#;

const OPENAI_ANSWER: &str = r#"{"id":"chatcmpl-abc123","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","service_tier":"flex",
  "choices":[{"index":0,"message":{"role":"assistant","content":"{\"a\":1}","refusal":null,"annotations":[]},"logprobs":{"content":[{"token":"{","logprob":-0.0001,"bytes":[123],"top_logprobs":[{"token":"{","logprob":-0.0001,"bytes":[123]}]}],"refusal":null},"finish_reason":"stop"},
             {"index":1,"message":{"role":"assistant","content":"{\"a\":2}","refusal":null},"logprobs":null,"finish_reason":"stop"}],
  "usage":{"prompt_tokens":20,"completion_tokens":10,"total_tokens":30,"prompt_tokens_details":{"cached_tokens":8,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":4,"accepted_prediction_tokens":0}}}"#;

/// Guards issue 20: on an OpenAI-wire route the gateway re-serialised a parsed copy, so
/// `logprobs`, `logit_bias`, `reasoning_effort`, `tools[].strict`, `store`, a message's
/// `name`, ... were dropped, `max_completion_tokens` became `max_tokens`, two text parts
/// were glued, `developer` was merged, and an image or `n: 2` was refused with a 400;
/// and the answer lost `system_fingerprint`, `logprobs`, the usage details and choice 1.
#[tokio::test]
async fn same_wire_openai_chat_forwards_the_client_body_with_only_model_replaced() {
    let server = upstream("/v1/chat/completions", OPENAI_ANSWER).await;
    let (_dir, gw) = one_route(
        ("oai", "openai", format!("{}/v1", server.uri())),
        "oai/gpt-4o-mini",
    )
    .await;
    let auth = format!("Bearer {CLIENT_TOKEN}");
    let r = send(
        &gw,
        "/v1/chat/completions",
        OPENAI_REQUEST,
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["x-poolctl-served-by"].to_str().unwrap(),
        "oai/gpt-4o-mini"
    );
    let answer = r.bytes().await.unwrap();
    // The answer, byte for byte as the upstream sent it.
    assert_eq!(std::str::from_utf8(&answer).unwrap(), OPENAI_ANSWER);
    let a: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(a["system_fingerprint"], "fp_44709d6fcb");
    assert_eq!(a["model"], "gpt-4o-mini-2024-07-18");
    assert_eq!(a["choices"].as_array().unwrap().len(), 2);
    assert_eq!(a["choices"][0]["logprobs"]["content"][0]["token"], "{");
    assert_eq!(a["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
    assert_eq!(
        a["usage"]["completion_tokens_details"]["reasoning_tokens"],
        4
    );

    let got = received(&server).await;
    assert_eq!(got.len(), 1);
    let up = &got[0];
    // The client's bytes, with only the model's value replaced.
    let want = OPENAI_REQUEST.replacen(r#""model":"high""#, r#""model":"gpt-4o-mini""#, 1);
    assert_eq!(std::str::from_utf8(&up.body).unwrap(), want);
    // Field by field, so a failure names what changed.
    let sent: Value = serde_json::from_str(OPENAI_REQUEST).unwrap();
    let body: Value = serde_json::from_slice(&up.body).unwrap();
    assert_eq!(body["model"], "gpt-4o-mini");
    for field in [
        "messages",
        "logprobs",
        "top_logprobs",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "response_format",
        "reasoning_effort",
        "parallel_tool_calls",
        "tools",
        "max_completion_tokens",
        "store",
        "service_tier",
        "n",
        "seed",
        "prediction",
        "x_future_field",
    ] {
        assert_eq!(body[field], sent[field], "{field}");
    }
    assert_eq!(body["tools"][0]["function"]["strict"], true);
    assert_eq!(body["messages"][0]["role"], "developer");
    assert_eq!(body["messages"][1]["name"], "ada");
    assert_eq!(body["messages"][1]["content"][1]["text"], "this image.");
    assert_eq!(body["messages"][1]["content"][2]["type"], "image_url");
    assert!(body.get("max_tokens").is_none(), "not renamed: {body}");
    assert!(body.get("stream").is_none(), "nothing added: {body}");
    // The route's key, never the client's credential.
    assert_eq!(
        header(up, "authorization"),
        Some(format!("Bearer {UPSTREAM_KEY}").as_str())
    );
    assert!(!format!("{:?}", up.headers).contains(CLIENT_TOKEN));
    assert_eq!(header(up, "content-type"), Some("application/json"));
}

const ANTHROPIC_REQUEST: &str = r#"{"model":"high","max_tokens":2048,
  "system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}],
  "messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},{"type":"text","text":"What is this?","cache_control":{"type":"ephemeral"}}]}],
  "thinking":{"type":"enabled","budget_tokens":1024},"top_k":5,"metadata":{"user_id":"u-1"},"x_future":[true]}"#;

const ANTHROPIC_ANSWER: &str = r#"{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929",
  "content":[{"type":"thinking","thinking":"A one-pixel PNG header.","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"},{"type":"text","text":"A tiny PNG. END"}],
  "stop_reason":"stop_sequence","stop_sequence":"END",
  "usage":{"input_tokens":12,"cache_creation_input_tokens":100,"cache_read_input_tokens":50,"output_tokens":9,"service_tier":"standard"}}"#;

/// Guards issue 20 on the Anthropic wire: `thinking`, `top_k`, `cache_control` and the
/// `anthropic-beta` header were dropped, an image block was refused with a 400, and the
/// answer lost its thinking block and signature, `stop_sequence` (which became
/// `end_turn`) and the cache counts.
#[tokio::test]
async fn same_wire_anthropic_messages_forwards_body_and_beta_header_and_returns_the_answer_unchanged(
) {
    let server = upstream("/v1/messages", ANTHROPIC_ANSWER).await;
    let (_dir, gw) = one_route(
        ("anth", "anthropic", server.uri()),
        "anth/claude-sonnet-4-5",
    )
    .await;
    let beta = "interleaved-thinking-2025-05-14,prompt-caching-2024-07-31";
    let r = send(
        &gw,
        "/v1/messages",
        ANTHROPIC_REQUEST,
        &[
            ("x-api-key", CLIENT_TOKEN),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", beta),
        ],
    )
    .await;
    assert_eq!(r.status(), 200);
    let answer = r.bytes().await.unwrap();
    assert_eq!(std::str::from_utf8(&answer).unwrap(), ANTHROPIC_ANSWER);
    let a: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(a["content"][0]["type"], "thinking");
    assert_eq!(
        a["content"][0]["signature"],
        "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
    );
    assert_eq!(a["stop_reason"], "stop_sequence");
    assert_eq!(a["stop_sequence"], "END");
    assert_eq!(a["usage"]["cache_read_input_tokens"], 50);
    assert_eq!(a["usage"]["cache_creation_input_tokens"], 100);

    let got = received(&server).await;
    assert_eq!(got.len(), 1);
    let up = &got[0];
    let want = ANTHROPIC_REQUEST.replacen(r#""model":"high""#, r#""model":"claude-sonnet-4-5""#, 1);
    assert_eq!(std::str::from_utf8(&up.body).unwrap(), want);
    let sent: Value = serde_json::from_str(ANTHROPIC_REQUEST).unwrap();
    let body: Value = serde_json::from_slice(&up.body).unwrap();
    for field in [
        "max_tokens",
        "system",
        "messages",
        "thinking",
        "top_k",
        "metadata",
        "x_future",
    ] {
        assert_eq!(body[field], sent[field], "{field}");
    }
    assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
    assert_eq!(body["messages"][0]["content"][0]["type"], "image");
    assert_eq!(header(up, "anthropic-beta"), Some(beta));
    assert_eq!(header(up, "anthropic-version"), Some("2023-06-01"));
    assert_eq!(header(up, "x-api-key"), Some(UPSTREAM_KEY));
    assert!(!format!("{:?}", up.headers).contains(CLIENT_TOKEN));
}

/// Guards the masking of the returned bytes: an upstream that echoes the route's key in
/// its answer must not hand it to the client, although the answer is otherwise returned
/// as it was sent.
#[tokio::test]
async fn a_same_wire_answer_that_echoes_the_upstream_key_reaches_the_client_masked() {
    const ECHO: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m-1","system_fingerprint":"fp_1","choices":[{"index":0,"message":{"role":"assistant","content":"your key is sk-upstream-FIDELITY-7c3e"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}"#;
    assert!(ECHO.contains(UPSTREAM_KEY));
    let (status, text) = asked_for_the_key(ECHO).await;
    assert_eq!(status, 200);
    assert!(!text.contains(UPSTREAM_KEY), "{text}");
    let a: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(a["system_fingerprint"], "fp_1", "otherwise as sent: {text}");
    assert!(a["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .starts_with("your key is "));
}

/// Guards a leak past the byte search: an upstream that spells the key with JSON
/// escapes (`\u0073k-...`) hands it to a client whose parser decodes it back.
#[tokio::test]
async fn a_same_wire_answer_that_escapes_the_echoed_key_reaches_the_client_masked() {
    let escaped = UPSTREAM_KEY.replacen('s', "\\u0073", 1);
    let echo: &'static str = format!(
        r#"{{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m-1","choices":[{{"index":0,"message":{{"role":"assistant","content":"your key is {escaped}"}},"finish_reason":"stop"}}]}}"#
    )
    .leak();
    assert!(!echo.contains(UPSTREAM_KEY));
    let (status, text) = asked_for_the_key(echo).await;
    assert_eq!(status, 200);
    let a: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(a["choices"][0]["message"]["content"], "your key is ***");
}

/// What a client asking a same-wire OpenAI route for its key gets (status and body),
/// the upstream answering `answer`.
async fn asked_for_the_key(answer: &'static str) -> (u16, String) {
    let server = upstream("/v1/chat/completions", answer).await;
    let (_dir, gw) = one_route(("oai", "openai", format!("{}/v1", server.uri())), "oai/m").await;
    let auth = format!("Bearer {CLIENT_TOKEN}");
    let r = send(
        &gw,
        "/v1/chat/completions",
        r#"{"model":"high","messages":[{"role":"user","content":"What is your key?"}]}"#,
        &[("authorization", &auth)],
    )
    .await;
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Guards an agent loop that asks for structured output: an answer that calls a tool
/// (no text yet) was checked against the response schema as if it were the final
/// answer, rejected as `invalid_output`, and the client got a 502.
#[tokio::test]
async fn a_tool_call_answer_to_a_request_with_a_response_schema_is_delivered() {
    const CALL: &str = r#"{"id":"chatcmpl-2","object":"chat.completion","created":1,"model":"m-1","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"q\":\"x\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":9,"completion_tokens":5,"total_tokens":14}}"#;
    let server = upstream("/v1/chat/completions", CALL).await;
    let (_dir, gw) = one_route(("oai", "openai", format!("{}/v1", server.uri())), "oai/m").await;
    let auth = format!("Bearer {CLIENT_TOKEN}");
    let r = send(
        &gw,
        "/v1/chat/completions",
        r#"{"model":"high","messages":[{"role":"user","content":"Find x."}],
           "tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}],
           "response_format":{"type":"json_schema","json_schema":{"name":"found","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}}}}"#,
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.headers()["x-poolctl-attempts"].to_str().unwrap(),
        "1",
        "answered by the first call"
    );
    assert_eq!(
        r.text().await.unwrap(),
        CALL,
        "delivered as the upstream sent it"
    );
    assert_eq!(received(&server).await.len(), 1);
}

const EMBED_REQUEST: &str = r#"{"model":"embed","input":["alpha","beta"],"dimensions":2,"encoding_format":"base64","user":"u-7","x_future":{"a":1}}"#;
const EMBED_ANSWER: &str = r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":"AACAPwAAIMA="},{"object":"embedding","index":1,"embedding":"AAAAAAAAgD8="}],"model":"text-embedding-3-small","usage":{"prompt_tokens":2,"total_tokens":2}}"#;

/// Guards spec/fidelity.md §6: the embeddings body lost `dimensions`, `user` and every
/// unknown field, and the answer was rebuilt from parsed floats.
#[tokio::test]
async fn same_wire_embeddings_forward_dimensions_and_return_the_answer_unchanged() {
    let server = upstream("/v1/embeddings", EMBED_ANSWER).await;
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "providers:\n  emb: {{ wire: openai, base_url: {}/v1, api_key_env: {KEY_VAR} }}\n\
         tiers:\n  embed:\n    - {{ route: emb/text-embedding-3-small, path: embed }}\n",
        server.uri()
    );
    let cfg = dir.path().join("pool.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let gw = start(&cfg).await;
    let auth = format!("Bearer {CLIENT_TOKEN}");
    let r = send(
        &gw,
        "/v1/embeddings",
        EMBED_REQUEST,
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), EMBED_ANSWER);
    let got = received(&server).await;
    assert_eq!(got.len(), 1);
    let want = EMBED_REQUEST.replacen(
        r#""model":"embed""#,
        r#""model":"text-embedding-3-small""#,
        1,
    );
    assert_eq!(std::str::from_utf8(&got[0].body).unwrap(), want);
    let body: Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(body["dimensions"], 2);
    assert_eq!(body["encoding_format"], "base64");
    assert_eq!(body["user"], "u-7");
    assert_eq!(body["x_future"], json!({"a": 1}));
    assert_eq!(
        header(&got[0], "authorization"),
        Some(format!("Bearer {UPSTREAM_KEY}").as_str())
    );
}

/// A request another wire cannot carry (`n: 2` on Anthropic) goes only to routes that
/// can: a route of another wire is passed over as `cannot_carry`, never called, and
/// named in the log line; with no route in the chain that can carry it, the client
/// hears why with a 400 `unsupported_by_chain`.
#[tokio::test]
async fn an_untranslatable_request_skips_the_cross_wire_route_and_is_served_on_its_own_wire() {
    const BODY: &str = r#"{"model":"high","n":2,"messages":[{"role":"user","content":[{"type":"text","text":"What is it?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}]}"#;
    let anth = upstream("/v1/messages", ANTHROPIC_ANSWER).await;
    let oai = upstream("/v1/chat/completions", OPENAI_ANSWER).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &[
            ("anth", "anthropic", anth.uri()),
            ("oai", "openai", format!("{}/v1", oai.uri())),
        ],
        &[
            ("high", &["anth/claude-x", "oai/gpt-x"]),
            ("claude-only", &["anth/claude-x"]),
        ],
    );
    let gw = start(&cfg).await;
    let auth = format!("Bearer {CLIENT_TOKEN}");
    let r = send(
        &gw,
        "/v1/chat/completions",
        BODY,
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["x-poolctl-served-by"].to_str().unwrap(),
        "oai/gpt-x"
    );
    assert_eq!(r.text().await.unwrap(), OPENAI_ANSWER);
    assert!(received(&anth).await.is_empty(), "never called");
    let got = received(&oai).await;
    assert_eq!(
        std::str::from_utf8(&got[0].body).unwrap(),
        BODY.replacen(r#""model":"high""#, r#""model":"gpt-x""#, 1)
    );

    let body = BODY.replacen(r#""model":"high""#, r#""model":"claude-only""#, 1);
    let r = reqwest::Client::new()
        .post(gw.url("/v1/chat/completions"))
        .header("authorization", &auth)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "unsupported_by_chain");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("anth/claude-x: cannot carry: n"),
        "{e}"
    );
    assert!(received(&anth).await.is_empty());
    let (_, stderr) = gw.stop().await;
    assert!(
        stderr.contains(r#"skipped="anth/claude-x:cannot_carry:n""#),
        "{stderr}"
    );
}

const OPENAI_CHUNKS: [&str; 5] = [
    r#"{"id":"chatcmpl-s1","object":"chat.completion.chunk","created":1700000001,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_s1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}"#,
    r#"{"id":"chatcmpl-s1","object":"chat.completion.chunk","created":1700000001,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_s1","choices":[{"index":0,"delta":{"content":"Hel"},"logprobs":{"content":[{"token":"Hel","logprob":-0.5,"bytes":[72,101,108],"top_logprobs":[]}],"refusal":null},"finish_reason":null}],"usage":null}"#,
    r#"{"id":"chatcmpl-s1","object":"chat.completion.chunk","created":1700000001,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_s1","choices":[{"index":1,"delta":{"role":"assistant","content":"Yo"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
    r#"{"id":"chatcmpl-s1","object":"chat.completion.chunk","created":1700000001,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_s1","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}"#,
    r#"{"id":"chatcmpl-s1","object":"chat.completion.chunk","created":1700000001,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_s1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}"#,
];

const OPENAI_SSE: &str = concat!(
    "data: {\"id\":\"chatcmpl-s1\",\"object\":\"chat.completion.chunk\",\"created\":1700000001,\"model\":\"gpt-4o-mini-2024-07-18\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_s1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"chatcmpl-s1\",\"object\":\"chat.completion.chunk\",\"created\":1700000001,\"model\":\"gpt-4o-mini-2024-07-18\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_s1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"logprobs\":{\"content\":[{\"token\":\"Hel\",\"logprob\":-0.5,\"bytes\":[72,101,108],\"top_logprobs\":[]}],\"refusal\":null},\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"chatcmpl-s1\",\"object\":\"chat.completion.chunk\",\"created\":1700000001,\"model\":\"gpt-4o-mini-2024-07-18\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_s1\",\"choices\":[{\"index\":1,\"delta\":{\"role\":\"assistant\",\"content\":\"Yo\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"chatcmpl-s1\",\"object\":\"chat.completion.chunk\",\"created\":1700000001,\"model\":\"gpt-4o-mini-2024-07-18\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_s1\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\n",
    "data: {\"id\":\"chatcmpl-s1\",\"object\":\"chat.completion.chunk\",\"created\":1700000001,\"model\":\"gpt-4o-mini-2024-07-18\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_s1\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7,\"prompt_tokens_details\":{\"cached_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0}}}\n\n",
    "data: [DONE]\n\n",
);

/// The `data:` payloads of an SSE text, in order, and its comment lines.
fn frames(sse: &str) -> (Vec<String>, Vec<String>) {
    let mut data = Vec::new();
    let mut comments = Vec::new();
    for line in sse.lines() {
        if let Some(d) = line.strip_prefix("data: ") {
            data.push(d.to_string());
        } else if line.starts_with(':') {
            comments.push(line.to_string());
        }
    }
    (data, comments)
}

/// Guards issue 20 on streams: every chunk was re-rendered, naming the configured
/// model, and dropping `system_fingerprint`, `service_tier`, `logprobs` and choice 1.
/// With no token bucket to settle, the router asks for no usage (the body goes as the
/// client wrote it), so every chunk the upstream sent is the client's, a usage chunk
/// too (where the router asks, tests/fidelity_streams.rs).
#[tokio::test]
async fn same_wire_openai_stream_forwards_each_chunk_as_the_upstream_sent_it() {
    assert_eq!(frames(OPENAI_SSE).0[..5], OPENAI_CHUNKS);
    let server = sse_upstream("/v1/chat/completions", OPENAI_SSE).await;
    let (_dir, gw) = one_route(
        ("oai", "openai", format!("{}/v1", server.uri())),
        "oai/gpt-4o-mini",
    )
    .await;
    let auth = format!("Bearer {CLIENT_TOKEN}");
    const REQ: &str = r#"{"model":"high","stream":true,"n":2,"logprobs":true,"messages":[{"role":"user","content":"Hi"}]}"#;
    let r = send(
        &gw,
        "/v1/chat/completions",
        REQ,
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let (data, comments) = frames(&text);
    // Each chunk as it came.
    assert_eq!(data[..5], OPENAI_CHUNKS, "{text}");
    assert_eq!(data[5..], ["[DONE]"], "{text}");
    assert_eq!(comments, [": poolctl outcome=success attempts=1"], "{text}");
    assert!(text.ends_with(": poolctl outcome=success attempts=1\n\ndata: [DONE]\n\n"));

    let got = received(&server).await;
    assert_eq!(
        std::str::from_utf8(&got[0].body).unwrap(),
        REQ.replacen(r#""model":"high""#, r#""model":"gpt-4o-mini""#, 1)
    );
    let body: Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(body["n"], 2);
    assert_eq!(body["logprobs"], true);
    assert_eq!(body["model"], "gpt-4o-mini");
}

/// When the client asked for the usage itself, its chunk is the upstream's, forwarded.
#[tokio::test]
async fn same_wire_openai_stream_keeps_the_usage_chunk_the_client_asked_for() {
    let server = sse_upstream("/v1/chat/completions", OPENAI_SSE).await;
    let (_dir, gw) = one_route(
        ("oai", "openai", format!("{}/v1", server.uri())),
        "oai/gpt-4o-mini",
    )
    .await;
    let auth = format!("Bearer {CLIENT_TOKEN}");
    const REQ: &str = r#"{"model":"high","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Hi"}]}"#;
    let r = send(
        &gw,
        "/v1/chat/completions",
        REQ,
        &[("authorization", &auth)],
    )
    .await;
    let text = r.text().await.unwrap();
    let (data, _) = frames(&text);
    assert_eq!(data[..5], OPENAI_CHUNKS, "{text}");
    let got = received(&server).await;
    assert_eq!(
        std::str::from_utf8(&got[0].body).unwrap(),
        REQ.replacen(r#""model":"high""#, r#""model":"gpt-4o-mini""#, 1)
    );
}

const ANTHROPIC_SSE: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_s1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5-20250929\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":42,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":30,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Short.\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCgIYAhIMsig\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi END\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END\"},\"usage\":{\"output_tokens\":7}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
);

/// Guards issue 20 on Anthropic streams: `message_start` was synthesised with
/// `input_tokens: 0` and the configured model, thinking blocks and their signatures were
/// dropped, blocks were re-indexed, and `stop_sequence` became `end_turn`.
#[tokio::test]
async fn same_wire_anthropic_stream_forwards_each_event_as_the_upstream_sent_it() {
    let server = sse_upstream("/v1/messages", ANTHROPIC_SSE).await;
    let (_dir, gw) = one_route(
        ("anth", "anthropic", server.uri()),
        "anth/claude-sonnet-4-5",
    )
    .await;
    const REQ: &str = r#"{"model":"high","max_tokens":2048,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"Hi"}]}"#;
    let r = send(
        &gw,
        "/v1/messages",
        REQ,
        &[
            ("x-api-key", CLIENT_TOKEN),
            ("anthropic-beta", "interleaved-thinking-2025-05-14"),
        ],
    )
    .await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    // Every event as it came, in order, then the outcome comment.
    assert_eq!(
        text,
        format!("{ANTHROPIC_SSE}: poolctl outcome=success attempts=1\n\n")
    );
    let got = received(&server).await;
    assert_eq!(
        std::str::from_utf8(&got[0].body).unwrap(),
        REQ.replacen(r#""model":"high""#, r#""model":"claude-sonnet-4-5""#, 1)
    );
    assert_eq!(
        header(&got[0], "anthropic-beta"),
        Some("interleaved-thinking-2025-05-14")
    );
    assert_eq!(header(&got[0], "anthropic-version"), Some("2023-06-01"));
}

/// Frames an attempt sent before it failed (its role chunk) are never forwarded: only
/// the serving attempt's stream reaches the client.
#[tokio::test]
async fn a_same_wire_stream_that_fails_before_its_first_token_leaks_none_of_its_frames() {
    const BROKEN: &str = concat!(
        "data: {\"id\":\"chatcmpl-FAILED\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"a-1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
        "data: {\"error\":{\"message\":\"The server had an error while processing your request.\",\"type\":\"server_error\",\"code\":\"server_error\"}}\n\n",
    );
    let a = sse_upstream("/v1/chat/completions", BROKEN).await;
    let b = sse_upstream("/v1/chat/completions", OPENAI_SSE).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &[
            ("pa", "openai", format!("{}/v1", a.uri())),
            ("pb", "openai", format!("{}/v1", b.uri())),
        ],
        &[("high", &["pa/a", "pb/b"])],
    );
    let gw = start(&cfg).await;
    let auth = format!("Bearer {CLIENT_TOKEN}");
    const REQ: &str =
        r#"{"model":"high","stream":true,"messages":[{"role":"user","content":"Hi"}]}"#;
    let r = send(
        &gw,
        "/v1/chat/completions",
        REQ,
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-poolctl-served-by"].to_str().unwrap(), "pb/b");
    let text = r.text().await.unwrap();
    assert!(!text.contains("chatcmpl-FAILED"), "{text}");
    let (data, _) = frames(&text);
    assert_eq!(data[..4], OPENAI_CHUNKS[..4], "{text}");
    assert!(!received(&a).await.is_empty());
}

/// Guards a same-wire stream that answers with no visible token (a refusal's finish
/// alone, an empty answer): it was rebuilt by the gateway, with its own id and
/// `created`, without `system_fingerprint` or unknown fields, and a Zhipu `sensitive`
/// finish renamed `content_filter`; on Anthropic, `message_start` lost its usage and an
/// empty text block was invented. It is the upstream's answer, forwarded as it came.
#[tokio::test]
async fn a_same_wire_stream_with_no_visible_token_reaches_the_client_as_the_upstream_sent_it() {
    let auth = format!("Bearer {CLIENT_TOKEN}");
    for (dialect, finish) in [("openai", "content_filter"), ("zhipu", "sensitive")] {
        let sse = format!(
            concat!(
                "data: {{\"id\":\"chatcmpl-up\",\"object\":\"chat.completion.chunk\",\"created\":1700000009,\"model\":\"m-up\",\"system_fingerprint\":\"fp_up\",\"x_extra\":1,\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"finish_reason\":null}}]}}\n\n",
                "data: {{\"id\":\"chatcmpl-up\",\"object\":\"chat.completion.chunk\",\"created\":1700000009,\"model\":\"m-up\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{}\"}}]}}\n\n",
                "data: [DONE]\n\n",
            ),
            finish
        );
        let server = sse_upstream("/v1/chat/completions", sse.clone().leak()).await;
        let dir = tempfile::tempdir().unwrap();
        let yaml = format!(
            "providers:\n  p:\n    wire: openai\n    dialect: {dialect}\n    base_url: {}/v1\n    api_key_env: {KEY_VAR}\ntiers:\n  high:\n    - p/m\n",
            server.uri()
        );
        let cfg = dir.path().join("pool.yaml");
        std::fs::write(&cfg, yaml).unwrap();
        let gw = start(&cfg).await;
        const REQ: &str =
            r#"{"model":"high","stream":true,"messages":[{"role":"user","content":"Hi"}]}"#;
        let r = send(
            &gw,
            "/v1/chat/completions",
            REQ,
            &[("authorization", &auth)],
        )
        .await;
        assert_eq!(r.status(), 200, "{dialect}");
        let text = r.text().await.unwrap();
        let upstream = sse.strip_suffix("data: [DONE]\n\n").unwrap();
        assert_eq!(
            text,
            format!("{upstream}: poolctl outcome=success attempts=1\n\ndata: [DONE]\n\n"),
            "{dialect}"
        );
        assert_eq!(received(&server).await.len(), 1, "{dialect}: no retry");
    }

    const REFUSAL: &str = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_up\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-up\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"refusal\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":1}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    let server = sse_upstream("/v1/messages", REFUSAL).await;
    let (_dir, gw) = one_route(("anth", "anthropic", server.uri()), "anth/claude").await;
    const REQ: &str = r#"{"model":"high","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hi"}]}"#;
    let r = send(&gw, "/v1/messages", REQ, &[("x-api-key", CLIENT_TOKEN)]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["x-poolctl-served-by"].to_str().unwrap(),
        "anth/claude"
    );
    let text = r.text().await.unwrap();
    assert_eq!(
        text,
        format!("{REFUSAL}: poolctl outcome=success attempts=1\n\n")
    );
    assert_eq!(received(&server).await.len(), 1, "no retry");
}

/// Guards the same-wire stream against a malformed event: it was forwarded, and the
/// official SDKs raised mid-stream. It is skipped, as on a translated stream.
#[tokio::test]
async fn a_same_wire_stream_skips_malformed_events_and_forwards_the_rest() {
    const GOOD: [&str; 3] = [
        "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there\"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    ];
    let sse: &'static str = format!(
        "data: {{not json\n\n{}data: <html><body>502</body></html>\n\n{}{}data: [DONE]\n\n",
        GOOD[0], GOOD[1], GOOD[2]
    )
    .leak();
    let server = sse_upstream("/v1/chat/completions", sse).await;
    let (_dir, gw) = one_route(
        ("oai", "openai", format!("{}/v1", server.uri())),
        "oai/gpt-x",
    )
    .await;
    let auth = format!("Bearer {CLIENT_TOKEN}");
    const REQ: &str =
        r#"{"model":"high","stream":true,"messages":[{"role":"user","content":"Hi"}]}"#;
    let r = send(
        &gw,
        "/v1/chat/completions",
        REQ,
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert_eq!(
        text,
        format!(
            "{}: poolctl outcome=success attempts=1\n\ndata: [DONE]\n\n",
            GOOD.concat()
        )
    );
    // Skipped, but never silently: the request's log line says how many.
    let (_, stderr) = gw.stop().await;
    let line = stderr
        .lines()
        .find(|l| l.contains(" request "))
        .unwrap_or_default();
    assert!(
        line.contains("note=\"2 stream event(s) could not be read and were skipped\""),
        "{stderr}"
    );
}

/// A tool kind or tool choice the canonical form has no word for (`custom` tools,
/// `allowed_tools`) is carried as sent on the client's own wire, not refused.
#[tokio::test]
async fn same_wire_openai_chat_carries_tool_kinds_the_router_does_not_know() {
    const REQ: &str = r#"{"model":"high","messages":[{"role":"user","content":"Hi"}],"tools":[{"type":"custom","custom":{"name":"grep","description":"search"}},{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"f"}}]}}}"#;
    let server = upstream("/v1/chat/completions", OPENAI_ANSWER).await;
    let (_dir, gw) = one_route(
        ("oai", "openai", format!("{}/v1", server.uri())),
        "oai/gpt-x",
    )
    .await;
    let auth = format!("Bearer {CLIENT_TOKEN}");
    let r = send(
        &gw,
        "/v1/chat/completions",
        REQ,
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(r.status(), 200);
    let got = received(&server).await;
    assert_eq!(
        std::str::from_utf8(&got[0].body).unwrap(),
        REQ.replacen(r#""model":"high""#, r#""model":"gpt-x""#, 1)
    );
}

/// An OpenAI stream chunk of `m-1` whose choice 0 carries `delta`.
fn chunk(delta: Value, finish: Value) -> String {
    let c = json!({"id": "chatcmpl-k", "object": "chat.completion.chunk", "created": 1,
        "model": "m-1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {c}\n\n")
}

/// An OpenAI stream that echoes the key split in two, in `delta.<field>` (`content`,
/// `refusal`, `reasoning_content`) or a tool call's arguments (`field` = `arguments`).
fn split_key_stream(field: &str) -> &'static str {
    let (head, rest) = UPSTREAM_KEY.split_at(9);
    let delta = |piece: &str| match field {
        "arguments" => json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
        f => json!({ f: piece }),
    };
    let mut first = delta(&format!("{{\"k\":\"{head}"));
    if field == "arguments" {
        first["tool_calls"][0]["id"] = json!("call_1");
        first["tool_calls"][0]["type"] = json!("function");
        first["tool_calls"][0]["function"]["name"] = json!("echo");
    }
    let finish = if field == "arguments" {
        "tool_calls"
    } else {
        "stop"
    };
    let mut sse = chunk(first, Value::Null);
    sse.push_str(&chunk(delta(&format!("{rest}\"}}")), Value::Null));
    sse.push_str(&chunk(json!({}), json!(finish)));
    sse.push_str("data: [DONE]\n\n");
    sse.leak()
}

/// A same-wire OpenAI route whose upstream streams `sse`, and what a client asking it
/// for a streamed chat receives. The upstream, the config's directory and the gateway
/// are handed back alive, for more requests.
async fn stream_through_one_route(
    sse: &'static str,
) -> (wiremock::MockServer, tempfile::TempDir, Gateway, String) {
    let server = sse_upstream("/v1/chat/completions", sse).await;
    let (dir, gw) = one_route(("oai", "openai", format!("{}/v1", server.uri())), "oai/m").await;
    let auth = format!("Bearer {CLIENT_TOKEN}");
    let chat = r#"{"model":"high","stream":true,"messages":[{"role":"user","content":"key?"}]}"#;
    let r = send(
        &gw,
        "/v1/chat/completions",
        chat,
        &[("authorization", &auth)],
    )
    .await;
    let text = r.text().await.unwrap();
    (server, dir, gw, text)
}

/// Every string a client would join from an SSE answer, in order, whatever its field:
/// the key must not come back from any of them.
fn joined_strings(sse: &str) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => out.push_str(s),
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(o) => o.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = String::new();
    for d in sse.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if let Ok(v) = serde_json::from_str::<Value>(d) {
            walk(&v, &mut out);
        }
    }
    out
}

/// Guards a key's start cut off by a failure: held as a possible key, the upstream's
/// `sk-upstream-FIDE` then an error event, it went out in clear before the in-band
/// error. A long run of the key is masked when nothing more can complete it.
#[tokio::test]
async fn a_key_start_held_when_the_stream_fails_reaches_the_client_masked() {
    let start = &UPSTREAM_KEY[..16];
    let mut sse = chunk(json!({"content": "hello "}), Value::Null);
    sse.push_str(&chunk(json!({"content": start}), Value::Null));
    sse.push_str("data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n");
    let (_server, _dir, _gw, text) = stream_through_one_route(sse.leak()).await;
    assert!(!joined_strings(&text).contains(start), "{text}");
    let content: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(content, "hello ***", "{text}");
    assert!(text.contains("stream_interrupted"), "{text}");
}

/// Guards the key guard's reach: a key split across two deltas was masked in answer
/// text only, and came back whole from tool-call arguments, refusal and reasoning
/// deltas, on the same wire and to an Anthropic client alike.
#[tokio::test]
async fn a_key_split_across_tool_argument_refusal_or_reasoning_deltas_reaches_the_client_masked() {
    let (_, rest) = UPSTREAM_KEY.split_at(9);
    for field in ["arguments", "refusal", "reasoning_content", "content"] {
        let (_server, _dir, gw, sse) = stream_through_one_route(split_key_stream(field)).await;
        let joined = joined_strings(&sse);
        assert!(!joined.contains(rest), "{field} (same wire): {sse}");
        assert!(
            joined.contains("{\"k\":\"***\"}"),
            "{field} (same wire): {sse}"
        );
        let messages = r#"{"model":"high","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"key?"}]}"#;
        let r = send(
            &gw,
            "/v1/messages",
            messages,
            &[("x-api-key", CLIENT_TOKEN)],
        )
        .await;
        let sse = r.text().await.unwrap();
        let joined = joined_strings(&sse);
        assert!(!joined.contains(rest), "{field} (anthropic): {sse}");
        // Reasoning from another wire is not shown to an Anthropic client at all.
        if field != "reasoning_content" {
            assert!(
                joined.contains("{\"k\":\"***\"}"),
                "{field} (anthropic): {sse}"
            );
        }
    }
}

/// Guards two ways a split key in tool-call arguments still reached the client: a
/// chunk that ends one call's arguments as it starts the next was filed under the new
/// call (its empty arguments), and a call sent without `index` could not have its
/// arguments rewritten, so its frames were lost. Same wire, one call each.
#[tokio::test]
async fn a_key_split_across_tool_calls_without_index_or_beside_a_new_call_is_masked() {
    let (head, rest) = UPSTREAM_KEY.split_at(9);
    let calls_chunk = |calls: Value| chunk(json!({ "tool_calls": calls }), Value::Null);
    let last = "data: {\"id\":\"chatcmpl-k\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m-1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";
    let start = |index: Option<u32>, id: &str, args: &str| {
        let mut c =
            json!({"id": id, "type": "function", "function": {"name": "echo", "arguments": args}});
        if let Some(i) = index {
            c["index"] = json!(i);
        }
        c
    };
    let piece = |index: Option<u32>, args: &str| {
        let mut c = json!({"function": {"arguments": args}});
        if let Some(i) = index {
            c["index"] = json!(i);
        }
        c
    };
    let beside_a_new_call = [
        calls_chunk(json!([start(
            Some(0),
            "call_a",
            &format!("{{\"k\":\"{head}")
        )])),
        calls_chunk(json!([
            piece(Some(0), &format!("{rest}\"}}")),
            start(Some(1), "call_b", "")
        ])),
        calls_chunk(json!([piece(Some(1), "{}")])),
        last.to_string(),
    ]
    .concat();
    let without_index = [
        calls_chunk(json!([start(None, "call_a", &format!("{{\"k\":\"{head}"))])),
        calls_chunk(json!([piece(None, &format!("{rest}\"}}"))])),
        last.to_string(),
    ]
    .concat();
    for (case, sse) in [
        ("beside a new call", beside_a_new_call),
        ("without index", without_index),
    ] {
        let (_server, _dir, _gw, sse) = stream_through_one_route(sse.leak()).await;
        let joined = joined_strings(&sse);
        assert!(!joined.contains(rest), "{case}: {sse}");
        assert!(joined.contains("{\"k\":\"***\"}"), "{case}: {sse}");
        assert!(
            sse.contains("call_a"),
            "{case}: the call's start is kept: {sse}"
        );
    }
}

/// `UPSTREAM_KEY` with every character written as `%XX`.
fn percent_key() -> String {
    UPSTREAM_KEY.bytes().map(|b| format!("%{b:02X}")).collect()
}

/// `UPSTREAM_KEY` with every character written as a JSON `\uXXXX` escape.
fn escaped_key() -> String {
    UPSTREAM_KEY
        .bytes()
        .map(|b| format!("\\u{b:04x}"))
        .collect()
}

/// Guards a leak: tool-call `arguments` are JSON inside a JSON string, so an upstream
/// could spell the key in `\uXXXX` escapes that survive the body's decoding and that the
/// client's `json.loads(arguments)` decodes back. Same wire, answer whole and streamed,
/// and to an Anthropic client (`partial_json`).
#[tokio::test]
async fn a_key_escaped_inside_tool_call_arguments_reaches_the_client_masked() {
    let args = format!("{{\"q\":\"{}\"}}", escaped_key());
    let answer = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
        "model": "m-1", "choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
        "type": "function", "function": {"name": "f", "arguments": args}}]}}]})
    .to_string();
    assert!(answer.contains("\\\\u0073\\\\u006b"), "{answer}");
    let (status, text) = asked_for_the_key(answer.leak()).await;
    assert_eq!(status, 200, "{text}");
    let a: Value = serde_json::from_str(&text).unwrap();
    let call = &a["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["arguments"], "{\"q\":\"***\"}", "{text}");
    assert_eq!(call["id"], "call_1", "otherwise as sent: {text}");

    let sse = [
        chunk(
            json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1",
                "type": "function", "function": {"name": "f", "arguments": ""}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}),
            Value::Null,
        ),
        chunk(json!({}), json!("tool_calls")),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let (_server, _dir, gw, sse) = stream_through_one_route(sse.leak()).await;
    assert!(
        joined_strings(&sse).contains("{\"q\":\"***\"}"),
        "same wire: {sse}"
    );
    assert!(!sse.contains("\\\\u0073\\\\u006b"), "same wire: {sse}");
    let messages = r#"{"model":"high","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"key?"}]}"#;
    let r = send(
        &gw,
        "/v1/messages",
        messages,
        &[("x-api-key", CLIENT_TOKEN)],
    )
    .await;
    let sse = r.text().await.unwrap();
    assert!(
        joined_strings(&sse).contains("{\"q\":\"***\"}"),
        "anthropic: {sse}"
    );
    assert!(!sse.contains("\\\\u0073\\\\u006b"), "anthropic: {sse}");
}

/// Guards a leak: a key percent-encoded (`%73%6B…`) or `\u`-escaped and split across
/// two deltas of one text passed the key guard, which held only a delta ending with the
/// key's raw start. Cut between two characters' spellings and inside one, same wire and
/// to an Anthropic client.
#[tokio::test]
async fn a_key_percent_encoded_or_escaped_and_split_across_deltas_reaches_the_client_masked() {
    for spelled in [percent_key(), escaped_key()] {
        for cut in [spelled.len() / 2 / 6 * 6, 13] {
            let (a, b) = spelled.split_at(cut);
            let sse = [
                chunk(
                    json!({"role": "assistant", "content": format!("url: {a}")}),
                    Value::Null,
                ),
                chunk(json!({"content": format!("{b} end")}), Value::Null),
                chunk(json!({}), json!("stop")),
                "data: [DONE]\n\n".to_string(),
            ]
            .concat();
            let (_server, _dir, gw, sse) = stream_through_one_route(sse.leak()).await;
            let joined = joined_strings(&sse);
            assert!(joined.contains("url: *** end"), "{spelled} at {cut}: {sse}");
            assert!(
                !joined.contains(&spelled[cut..]),
                "{spelled} at {cut}: {sse}"
            );
            let messages = r#"{"model":"high","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"key?"}]}"#;
            let r = send(
                &gw,
                "/v1/messages",
                messages,
                &[("x-api-key", CLIENT_TOKEN)],
            )
            .await;
            let sse = r.text().await.unwrap();
            assert!(
                joined_strings(&sse).contains("url: *** end"),
                "anthropic, {spelled} at {cut}: {sse}"
            );
            assert!(!sse.contains(&spelled[cut..]), "anthropic: {sse}");
        }
    }
}
