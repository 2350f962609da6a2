//! Session affinity and history materialisation (seed 003): a session stays on the route
//! that last served it while that route is ready, and when it must move, the whole
//! canonical history — tool calls and results included — is re-sent in the new
//! provider's own format. Checked against an independent HTTP mock (wiremock).

use poolctl::classify::dialect::Dialect;
use poolctl::config::route::{RouteSpec, Tier};
use poolctl::core::clock::ManualClock;
use poolctl::core::conversation::{Conversation, ToolCall, ToolSpec, Turn};
use poolctl::core::request::ChatRequest;
use poolctl::core::request::Request;
use poolctl::core::secret::Secret;
use poolctl::core::trace::Chosen;
use poolctl::core::vocab::{Outcome, Route, Wire};
use poolctl::policy::card::Policy;
use poolctl::router::{CallOptions, Router};
use poolctl::store::MemoryStore;
use poolctl::wire::Endpoint;
use serde_json::json;
use std::sync::Arc;
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn spec(server: &MockServer, route: &str, wire: Wire, base: &str) -> RouteSpec {
    let route = Route::parse(route).unwrap();
    RouteSpec {
        endpoint: Arc::new(Endpoint {
            provider: route.provider().to_string(),
            wire,
            dialect: Dialect::of_wire(wire),
            base_url: format!("{}{base}", server.uri()),
            api_key: Secret::new("k"),
            timeout_ms: 5_000,
            first_token_timeout_ms: 5_000,
            stream_idle_ms: 5_000,
            stream_max_ms: poolctl::core::limits::DEFAULT_STREAM_MAX_MS,
            max_stream_bytes: poolctl::core::limits::DEFAULT_MAX_STREAM_BYTES,
            max_event_bytes: poolctl::core::limits::DEFAULT_MAX_EVENT_BYTES,
            drop_params: false,
        }),
        route,
        facts: Default::default(),
        policy: Default::default(),
    }
}

fn history() -> ChatRequest {
    let mut req = ChatRequest::user("What is the weather in Paris?", 64);
    req.conversation = Conversation {
        system_parts: Vec::new(),
        system_at: Vec::new(),
        system: Some("You are terse.".into()),
        turns: vec![
            Turn::user("What is the weather in Paris?"),
            Turn::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "weather".into(),
                    arguments: json!({"city": "Paris"}),
                }],
            },
            Turn::ToolResult {
                call_id: "call_1".into(),
                name: "weather".into(),
                content: "18C, clear".into(),
                is_error: false,
                parts: Vec::new(),
            },
            Turn::user("And should I take a coat?"),
        ],
    };
    req.tools = vec![ToolSpec {
        name: "weather".into(),
        description: "Current weather".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        strict: false,
    }];
    req
}

#[tokio::test]
async fn a_session_sticks_and_moves_with_its_whole_history() {
    let server = MockServer::start().await;
    // The OpenAI-wire primary answers once, then is overloaded.
    Mock::given(method("POST"))
        .and(path("/a/v1/chat/completions"))
        .and(body_partial_json(json!({"messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18C, clear"},
            {"role": "user", "content": "And should I take a coat?"}
        ], "tools": [{"type": "function", "function": {"name": "weather"}}]})))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "c1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "No coat."}, "finish_reason": "stop"}]
        })))
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/a/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(503)
                .set_body_json(json!({"error": {"message": "overloaded", "type": "server_error"}})),
        )
        .mount(&server)
        .await;
    // The Anthropic-wire backup must get the same history as tool_use / tool_result blocks.
    Mock::given(method("POST"))
        .and(path("/b/v1/messages"))
        .and(body_partial_json(json!({
            "system": "You are terse.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "What is the weather in Paris?"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "18C, clear"},
                    {"type": "text", "text": "And should I take a coat?"}
                ]}
            ],
            "tools": [{"name": "weather", "input_schema": {"type": "object"}}]
        })))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "m1", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "Take a light one."}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 30, "output_tokens": 4}
        })))
        .expect(2)
        .mount(&server)
        .await;

    let tier = Tier {
        groups: Vec::new(),
        name: "t".into(),
        path: poolctl::core::vocab::CallPath::Chat,
        routes: vec![
            spec(&server, "a/gpt", Wire::OpenAi, "/a/v1"),
            spec(&server, "b/claude", Wire::Anthropic, "/b"),
        ],
    };
    let clock = Arc::new(ManualClock::new(0));
    let router = Router::new(
        poolctl::wire::http_client(),
        clock.clone(),
        Arc::new(MemoryStore::new()),
    );
    let policy = Policy {
        max_retries_per_route: 0,
        ..Policy::default()
    };
    let opts = CallOptions {
        session: Some("s1"),
        ..CallOptions::new(&policy)
    };
    let req = Request::Chat(history());

    let first = router.call(&tier, &req, opts).await.report;
    assert_eq!(
        (first.outcome, first.served_by.as_ref().map(Route::as_str)),
        (Outcome::Success, Some("a/gpt"))
    );

    // The primary is overloaded: the session moves, its history re-sent in Anthropic's format.
    let second = router.call(&tier, &req, opts).await.report;
    assert_eq!(
        second.served_by.as_ref().map(Route::as_str),
        Some("b/claude"),
        "{:?}",
        second.attempts
    );
    assert_eq!(
        router
            .session_route("s1")
            .await
            .map(|r| r.to_string())
            .as_deref(),
        Some("b/claude")
    );

    // The primary's cooling ends; the session stays where it is while that route is ready.
    clock.advance(60_000);
    let third = router.call(&tier, &req, opts).await.report;
    assert_eq!(
        third.served_by.as_ref().map(Route::as_str),
        Some("b/claude")
    );
    assert_eq!(third.attempts.len(), 1);
    assert_eq!(third.attempts[0].chosen, Chosen::SessionAffinity);
    assert_eq!(third.attempts[0].requested_route.as_str(), "a/gpt");
}
