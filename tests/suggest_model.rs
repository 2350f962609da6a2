//! Issue 21: an unknown `model` sent to `poolctl serve` is answered with the nearest
//! name of each kind, tier or workflow first. One nearest over every name at once
//! answered `gtp` with the route `oai/gpt-4o` when the tier `gpt` was the name meant.
//! The built binary in front of a loopback mock provider, driven by a real HTTP client.

use poolctl::core::vocab::{CallPath, Route, Wire};
use poolctl::harness::mock::{MockRoute, MockServer};
use poolctl::harness::scenario::Reply;
use serde_json::{json, Value};

#[path = "support/gateway.rs"]
mod gateway;

const KEY_VAR: &str = "POOLCTL_SUGGEST_TEST_KEY";

fn mock_route(r: &str) -> MockRoute {
    MockRoute {
        route: Route::parse(r).unwrap(),
        wire: Wire::OpenAi,
        path: CallPath::Chat,
        replies: vec![Reply::Ok {
            text: "hi".into(),
            headers: vec![],
            usage: None,
        }],
        outage: None,
        record: false,
    }
}

#[tokio::test]
async fn an_unknown_model_names_the_nearest_tier_before_the_nearest_route() {
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        vec![mock_route("oai/gpt-4o"), mock_route("oai/gpt-4o-mini")],
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pool.yaml");
    std::fs::write(
        &config,
        format!(
            "providers:\n  oai:\n    wire: openai\n    base_url: {}\n    api_key_env: {KEY_VAR}\n\
             tiers:\n  gpt:\n    - oai/gpt-4o\n    - oai/gpt-4o-mini\n  cheap:\n    - oai/gpt-4o-mini\n",
            mock.base_url("oai", Wire::OpenAi)
        ),
    )
    .unwrap();
    let gw = gateway::start(&config, &[], &[(KEY_VAR, "sk-test")]).await;
    let r = reqwest::Client::new()
        .post(gw.url("/v1/chat/completions"))
        .json(&json!({"model": "gtp", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "model_not_found", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the nearest is `gpt` (tier), then route `oai/gpt-4o"),
        "{message}"
    );
    // Short: one name of each kind, never the list.
    assert!(
        message.len() < 200,
        "{} characters: {message}",
        message.len()
    );
    assert!(!message.contains("`cheap`"), "{message}");
    let (code, stderr) = gw.stop().await;
    assert_eq!(code, Some(0), "{stderr}");
}
