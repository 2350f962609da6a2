//! One rich chat request (tools, tool_choice, temperature, top_p, stop, seed,
//! response_format, user, metadata) through the production router to each wire's
//! independent HTTP mock (wiremock): every field the wire can express arrives mapped to
//! its own format, the rest is absent from the body and listed in the attempt record's
//! `dropped`. Answers, plain and streamed, carry tool calls, finish reason, the
//! answering model and usage.

use poolctl::classify::dialect::Dialect;
use poolctl::config::route::{RouteSpec, Tier};
use poolctl::core::answer::{FinishReason, StreamEvent};
use poolctl::core::clock::ManualClock;
use poolctl::core::conversation::ToolSpec;
use poolctl::core::request::{ChatRequest, Request, Sampling, ToolChoice};
use poolctl::core::secret::Secret;
use poolctl::core::vocab::{Outcome, Route, Wire};
use poolctl::policy::card::Policy;
use poolctl::router::{CallOptions, Called, Router};
use poolctl::store::MemoryStore;
use poolctl::wire::Endpoint;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Match, Mock, MockServer, ResponseTemplate};

/// Matches a JSON body in which none of these JSON pointers resolve.
struct Lacks(&'static [&'static str]);

impl Match for Lacks {
    fn matches(&self, request: &wiremock::Request) -> bool {
        let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
            return false;
        };
        self.0.iter().all(|p| body.pointer(p).is_none())
    }
}

fn tier(server: &MockServer, route: &str, wire: Wire) -> Tier {
    let route = Route::parse(route).unwrap();
    Tier {
        groups: Vec::new(),
        name: "t".into(),
        path: poolctl::core::vocab::CallPath::Chat,
        routes: vec![RouteSpec {
            endpoint: Arc::new(Endpoint {
                provider: route.provider().to_string(),
                wire,
                dialect: Dialect::of_wire(wire),
                base_url: server.uri(),
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
        }],
    }
}

fn rich_request() -> ChatRequest {
    let mut req = ChatRequest::user("Weather in Paris, as JSON?", 99);
    req.tools = vec![ToolSpec {
        name: "weather".into(),
        description: "Current weather".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        strict: false,
    }];
    req.tool_choice = Some(ToolChoice::Tool("weather".into()));
    req.sampling = Sampling {
        temperature: Some(0.25),
        top_p: Some(0.5),
        stop: vec!["END".into()],
        seed: Some(7),
        top_k: None,
    };
    req.json_schema = Some(json!({"type": "object"}));
    req.user = Some("u-42".into());
    req.metadata = [("team".to_string(), "search".to_string())].into();
    req
}

async fn call(server: &MockServer, wire: Wire, req: Request) -> (Called, Vec<String>) {
    let router = Router::new(
        poolctl::wire::http_client(),
        Arc::new(ManualClock::new(0)),
        Arc::new(MemoryStore::new()),
    );
    let policy = Policy {
        max_retries_per_route: 0,
        ..Policy::default()
    };
    let events = Mutex::new(Vec::new());
    let sink = |ev: StreamEvent<'_>| events.lock().unwrap().push(format!("{ev:?}"));
    let opts = CallOptions {
        on_event: Some(&sink),
        ..CallOptions::new(&policy)
    };
    let called = router.call(&tier(server, "p/m", wire), &req, opts).await;
    (called, events.into_inner().unwrap())
}

fn weather_call(answer: &poolctl::core::answer::Answer) -> (&str, &Value) {
    assert_eq!(answer.tool_calls.len(), 1, "{answer:?}");
    (
        answer.tool_calls[0].name.as_str(),
        &answer.tool_calls[0].arguments,
    )
}

#[tokio::test]
async fn openai_maps_every_field_and_drops_none() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .and(body_partial_json(json!({
            "max_completion_tokens": 99, "temperature": 0.25, "top_p": 0.5, "stop": ["END"], "seed": 7,
            "tools": [{"type": "function", "function": {"name": "weather"}}],
            "tool_choice": {"type": "function", "function": {"name": "weather"}},
            "response_format": {"type": "json_object"},
            "user": "u-42", "metadata": {"team": "search"}
        })))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "c1", "model": "gpt-x-2026-01",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "{}",
                "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 16}}
        })))
        .expect(1)
        .mount(&server)
        .await;
    let (called, _) = call(&server, Wire::OpenAi, Request::Chat(rich_request())).await;
    assert_eq!(
        called.report.outcome,
        Outcome::Success,
        "{:?}",
        called.report
    );
    assert!(called.report.attempts[0].dropped.is_empty());
    let answer = called.answer.unwrap();
    assert_eq!(
        weather_call(&answer),
        ("weather", &json!({"city": "Paris"}))
    );
    assert_eq!(answer.tool_calls[0].id, "call_9");
    assert_eq!(answer.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(answer.model.as_deref(), Some("gpt-x-2026-01"));
    let usage = answer.usage.unwrap();
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.cached_tokens),
        (20, 5, Some(16))
    );
}

#[tokio::test]
async fn anthropic_maps_tool_choice_and_stop_sequences_drops_seed_and_metadata_and_validates_the_schema(
) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(body_partial_json(json!({
            "max_tokens": 99, "temperature": 0.25, "top_p": 0.5, "stop_sequences": ["END"],
            "tools": [{"name": "weather", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "weather"},
            "metadata": {"user_id": "u-42"}
        })))
        .and(Lacks(&["/seed", "/response_format", "/metadata/team", "/stop"]))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "m1", "type": "message", "role": "assistant", "model": "claude-x-20260101",
            "content": [{"type": "text", "text": "{}"},
                        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 30, "output_tokens": 4, "cache_read_input_tokens": 24}
        })))
        .expect(1)
        .mount(&server)
        .await;
    let (called, _) = call(&server, Wire::Anthropic, Request::Chat(rich_request())).await;
    assert_eq!(
        called.report.outcome,
        Outcome::Success,
        "{:?}",
        called.report
    );
    assert_eq!(
        called.report.attempts[0].dropped,
        // The schema is not sent: the answer is validated against it (fidelity.md §3).
        vec!["seed", "metadata"]
    );
    let answer = called.answer.unwrap();
    assert_eq!(
        weather_call(&answer),
        ("weather", &json!({"city": "Paris"}))
    );
    assert_eq!(answer.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(answer.model.as_deref(), Some("claude-x-20260101"));
    assert_eq!(answer.usage.unwrap().cached_tokens, Some(24));
}

#[tokio::test]
async fn gemini_maps_generation_config_and_function_calling_and_drops_user_metadata() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1beta/models/m:generateContent"))
        .and(body_partial_json(json!({
            "generationConfig": {"maxOutputTokens": 99, "temperature": 0.25, "topP": 0.5,
                "stopSequences": ["END"], "seed": 7, "responseMimeType": "application/json"},
            "tools": [{"functionDeclarations": [{"name": "weather"}]}],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["weather"]}}
        })))
        // `{"type": "object"}` (json_object) is the MIME type alone: Gemini refuses an
        // OBJECT schema without properties.
        .and(Lacks(&["/user", "/metadata", "/labels", "/generationConfig/responseSchema",
            "/generationConfig/responseJsonSchema"]))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "candidates": [{"content": {"role": "model", "parts": [
                {"text": "{}"}, {"functionCall": {"name": "weather", "args": {"city": "Paris"}}}]},
                "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 3, "cachedContentTokenCount": 8},
            "modelVersion": "gemini-x-001", "responseId": "r1"
        })))
        .expect(1)
        .mount(&server)
        .await;
    let (called, _) = call(&server, Wire::Gemini, Request::Chat(rich_request())).await;
    assert_eq!(
        called.report.outcome,
        Outcome::Success,
        "{:?}",
        called.report
    );
    assert_eq!(called.report.attempts[0].dropped, vec!["user", "metadata"]);
    let answer = called.answer.unwrap();
    assert_eq!(
        weather_call(&answer),
        ("weather", &json!({"city": "Paris"}))
    );
    assert_eq!(answer.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(answer.model.as_deref(), Some("gemini-x-001"));
    let usage = answer.usage.unwrap();
    assert_eq!((usage.input_tokens, usage.cached_tokens), (12, Some(8)));
}

fn sse(events: &[&str]) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_string(events.concat())
}

/// A plain (no schema) request for the streaming tests.
fn tool_stream_request() -> Request {
    let mut req = rich_request();
    req.json_schema = None;
    Request::Stream(req)
}

#[tokio::test]
async fn openai_stream_delivers_tool_call_deltas_and_assembles_the_call() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/chat/completions"))
        .and(body_partial_json(json!({"stream": true, "tool_choice": {"type": "function"}})))
        .respond_with(sse(&[
            "data: {\"id\":\"c\",\"model\":\"gpt-x-1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"weather\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"city\\\":\"}}]},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"Paris\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":6,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n",
            "data: [DONE]\n\n",
        ]))
        .expect(1)
        .mount(&server)
        .await;
    let (called, events) = call(&server, Wire::OpenAi, tool_stream_request()).await;
    assert_eq!(
        called.report.outcome,
        Outcome::Success,
        "{:?}",
        called.report
    );
    let answer = called.answer.unwrap();
    assert_eq!(
        weather_call(&answer),
        ("weather", &json!({"city": "Paris"}))
    );
    assert_eq!(answer.tool_calls[0].id, "call_1");
    assert_eq!(answer.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(answer.model.as_deref(), Some("gpt-x-1"));
    assert_eq!(answer.usage.unwrap().output_tokens, 6);
    assert_eq!(
        events.iter().filter(|e| e.starts_with("ToolCall")).count(),
        3,
        "{events:?}"
    );
    assert!(
        events[events.len() - 2].starts_with("Finish(ToolCalls)"),
        "{events:?}"
    );
    assert!(events[events.len() - 1].starts_with("Usage"), "{events:?}");
}

#[tokio::test]
async fn anthropic_stream_assembles_tool_use_blocks() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(body_partial_json(json!({"stream": true, "tool_choice": {"type": "tool"}})))
        .respond_with(sse(&[
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"claude-x-1\",\"usage\":{\"input_tokens\":11,\"output_tokens\":1,\"cache_read_input_tokens\":5}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"weather\",\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\": \\\"Pa\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"ris\\\"}\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":7}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        ]))
        .expect(1)
        .mount(&server)
        .await;
    let (called, _) = call(&server, Wire::Anthropic, tool_stream_request()).await;
    assert_eq!(
        called.report.outcome,
        Outcome::Success,
        "{:?}",
        called.report
    );
    assert_eq!(called.report.attempts[0].dropped, vec!["seed", "metadata"]);
    let answer = called.answer.unwrap();
    assert_eq!(
        weather_call(&answer),
        ("weather", &json!({"city": "Paris"}))
    );
    assert_eq!(answer.tool_calls[0].id, "toolu_1");
    assert_eq!(answer.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(answer.model.as_deref(), Some("claude-x-1"));
    let usage = answer.usage.unwrap();
    // Input from message_start (11 uncached + 5 cache reads), output from message_delta.
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.cached_tokens),
        (16, 7, Some(5))
    );
}

#[tokio::test]
async fn gemini_stream_carries_whole_function_calls() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1beta/models/m:streamGenerateContent"))
        .and(body_partial_json(json!({"toolConfig": {"functionCallingConfig": {"mode": "ANY"}}})))
        .respond_with(sse(&[
            "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"weather\",\"args\":{\"city\":\"Paris\"}}}]}}],\"modelVersion\":\"gemini-x-001\"}\n\n",
            "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":4,\"candidatesTokenCount\":2,\"cachedContentTokenCount\":1}}\n\n",
        ]))
        .expect(1)
        .mount(&server)
        .await;
    let (called, _) = call(&server, Wire::Gemini, tool_stream_request()).await;
    assert_eq!(
        called.report.outcome,
        Outcome::Success,
        "{:?}",
        called.report
    );
    let answer = called.answer.unwrap();
    assert_eq!(
        weather_call(&answer),
        ("weather", &json!({"city": "Paris"}))
    );
    assert_eq!(answer.tool_calls[0].id, "call_0");
    assert_eq!(answer.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(answer.model.as_deref(), Some("gemini-x-001"));
    assert_eq!(answer.usage.unwrap().cached_tokens, Some(1));
}
