//! Each wire builds the request its provider documents — URL, auth headers, body
//! fields — checked by an independent HTTP mock (wiremock), not by poolctl's own mocks.

use poolctl::classify::dialect::Dialect;
use poolctl::core::request::{ChatRequest, EmbedRequest, RerankRequest};
use poolctl::core::secret::Secret;
use poolctl::core::vocab::Wire;
use poolctl::wire::{self, Endpoint};
use serde_json::json;
use wiremock::matchers::{body_partial_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn endpoint(server: &MockServer, wire: Wire, base_suffix: &str) -> Endpoint {
    Endpoint {
        provider: "p".into(),
        wire,
        dialect: Dialect::of_wire(wire),
        base_url: format!("{}{base_suffix}", server.uri()),
        api_key: Secret::new("k-123"),
        timeout_ms: 5_000,
        first_token_timeout_ms: 5_000,
        stream_idle_ms: 5_000,
        stream_max_ms: poolctl::core::limits::DEFAULT_STREAM_MAX_MS,
        max_stream_bytes: poolctl::core::limits::DEFAULT_MAX_STREAM_BYTES,
        max_event_bytes: poolctl::core::limits::DEFAULT_MAX_EVENT_BYTES,
        drop_params: false,
    }
}

fn chat_req() -> ChatRequest {
    let mut req = ChatRequest::user("hi", 7);
    req.conversation.system = Some("be brief".into());
    req
}

#[tokio::test]
async fn openai_chat_request_shape() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", "Bearer k-123"))
        .and(body_partial_json(json!({
            "model": "gpt-x", "max_completion_tokens": 7, "stream": false,
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
        })))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "c1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "yo"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1}
        })).insert_header("x-request-id", "req_abc"))
        .expect(1)
        .mount(&server)
        .await;
    let ok = wire::chat(
        &wire::http_client(),
        &endpoint(&server, Wire::OpenAi, "/v1"),
        "gpt-x",
        &chat_req(),
    )
    .await
    .unwrap();
    assert_eq!(
        (
            ok.text.as_str(),
            ok.request_id.as_deref(),
            ok.usage.input_tokens
        ),
        ("yo", Some("req_abc"), 3)
    );
}

#[tokio::test]
async fn anthropic_chat_request_shape() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", "k-123"))
        .and(header("anthropic-version", "2023-06-01"))
        .and(body_partial_json(json!({
            "model": "claude-x", "max_tokens": 7, "system": "be brief",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
        })))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "yo"}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 3, "output_tokens": 1}
        })))
        .expect(1)
        .mount(&server)
        .await;
    let ok = wire::chat(
        &wire::http_client(),
        &endpoint(&server, Wire::Anthropic, ""),
        "claude-x",
        &chat_req(),
    )
    .await
    .unwrap();
    assert_eq!(ok.text, "yo");
}

#[tokio::test]
async fn gemini_chat_and_stream_request_shapes() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1beta/models/gemini-x:generateContent"))
        .and(header("x-goog-api-key", "k-123"))
        .and(body_partial_json(json!({
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "system_instruction": {"parts": [{"text": "be brief"}]},
            "generationConfig": {"maxOutputTokens": 7}
        })))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": "yo"}]}, "finishReason": "STOP"}]
        })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1beta/models/gemini-x:streamGenerateContent"))
        .and(query_param("alt", "sse"))
        .respond_with(ResponseTemplate::new(200).insert_header("content-type", "text/event-stream").set_body_string(
            "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"y\"}]}}]}\n\n\
             data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"o\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":2,\"candidatesTokenCount\":1}}\n\n",
        ))
        .expect(1)
        .mount(&server)
        .await;
    let ep = endpoint(&server, Wire::Gemini, "");
    let client = wire::http_client();
    assert_eq!(
        wire::chat(&client, &ep, "gemini-x", &chat_req())
            .await
            .unwrap()
            .text,
        "yo"
    );
    let a = wire::stream::stream_chat(&client, &ep, "gemini-x", &chat_req(), &|_| {}).await;
    assert!(a.result.is_ok(), "{:?}", a.result);
    assert_eq!(a.delivered, "yo");
}

#[tokio::test]
async fn openai_stream_asks_for_usage() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(json!({"stream": true, "stream_options": {"include_usage": true}})))
        .respond_with(ResponseTemplate::new(200).insert_header("content-type", "text/event-stream").set_body_string(
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"yo\"},\"finish_reason\":null}]}\n\n\
             data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
             data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":1}}\n\n\
             data: [DONE]\n\n",
        ))
        .expect(1)
        .mount(&server)
        .await;
    let a = wire::stream::stream_chat(
        &wire::http_client(),
        &endpoint(&server, Wire::OpenAi, "/v1"),
        "gpt-x",
        &chat_req(),
        &|_| {},
    )
    .await;
    let ok = a.result.unwrap();
    assert_eq!(a.delivered, "yo");
    assert_eq!(ok.usage.unwrap().output_tokens, 1);
}

#[tokio::test]
async fn embeddings_and_rerank_request_shapes() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .and(header("authorization", "Bearer k-123"))
        .and(body_partial_json(
            json!({"model": "emb-x", "input": ["a", "b"]}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "data": [{"index": 1, "embedding": [0.5, 0.5]}, {"index": 0, "embedding": [1.0, 0.0]}],
            "usage": {"prompt_tokens": 2}
        })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1beta/models/gemini-emb:batchEmbedContents"))
        .and(body_partial_json(json!({"requests": [
            {"model": "models/gemini-emb", "content": {"parts": [{"text": "a"}]}},
            {"model": "models/gemini-emb", "content": {"parts": [{"text": "b"}]}}
        ]})))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"embeddings": [{"values": [1.0]}, {"values": [2.0]}]})),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/rerank"))
        .and(header("authorization", "Bearer k-123"))
        .and(body_partial_json(
            json!({"model": "rr-x", "query": "q", "documents": ["d0", "d1"], "top_n": 2}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "results": [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}]
        })))
        .expect(1)
        .mount(&server)
        .await;
    let client = wire::http_client();
    let req = EmbedRequest {
        inputs: vec!["a".into(), "b".into()],
        dimensions: None,
        original: None,
        ..Default::default()
    };
    let ok = wire::embed(
        &client,
        &endpoint(&server, Wire::OpenAi, "/v1"),
        "emb-x",
        &req,
    )
    .await
    .unwrap();
    assert_eq!(
        ok.vectors,
        vec![vec![1.0, 0.0], vec![0.5, 0.5]],
        "vectors are put back in input order"
    );
    let ok = wire::embed(
        &client,
        &endpoint(&server, Wire::Gemini, ""),
        "gemini-emb",
        &req,
    )
    .await
    .unwrap();
    assert_eq!(ok.vectors.len(), 2);
    let rr = RerankRequest {
        query: "q".into(),
        documents: vec!["d0".into(), "d1".into()],
        top_n: 2,
        ..Default::default()
    };
    let ok = wire::rerank(
        &client,
        &endpoint(&server, Wire::OpenAi, "/v1"),
        "rr-x",
        &rr,
    )
    .await
    .unwrap();
    assert_eq!(ok.ranking, vec![1, 0]);
}

/// A huge error body is read only up to the cap; the failure is still classified.
#[tokio::test]
async fn huge_error_bodies_are_capped() {
    let server = MockServer::start().await;
    let huge = format!(
        "{{\"error\":{{\"message\":\"{}\"}}}}",
        "x".repeat(4 * 1024 * 1024)
    );
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503).set_body_string(huge))
        .mount(&server)
        .await;
    let f = wire::chat(
        &wire::http_client(),
        &endpoint(&server, Wire::OpenAi, "/v1"),
        "gpt-x",
        &chat_req(),
    )
    .await
    .unwrap_err();
    assert_eq!(f.status, Some(503));
    assert!(f.error.is_none(), "a truncated body is not parsed");
    assert!(f.excerpt.len() < 1024);
}

/// Guards a `json_object` request (Responses `text.format`, a scenario's
/// `response_format`) on an OpenAI chat route: it went as a `json_schema` named
/// `answer`; it goes as asked. A schema keeps its name and `strict`.
#[tokio::test]
async fn openai_response_format_is_json_object_or_the_named_schema() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1}
        })))
        .mount(&server)
        .await;
    let ep = endpoint(&server, Wire::OpenAi, "/v1");
    let mut req = chat_req();
    req.json_schema = Some(json!({"type": "object"}));
    wire::chat(&wire::http_client(), &ep, "gpt-x", &req)
        .await
        .unwrap();
    req.schema_name = Some("row".into());
    req.schema_strict = Some(true);
    wire::chat(&wire::http_client(), &ep, "gpt-x", &req)
        .await
        .unwrap();
    let sent: Vec<serde_json::Value> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(sent[0]["response_format"], json!({"type": "json_object"}));
    assert_eq!(
        sent[1]["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "row", "strict": true,
            "schema": {"type": "object"}}})
    );
}

/// Guards a tool loop from another wire on Gemini 3: it refuses function calls sent
/// back without their `thoughtSignature` (400 "Function call is missing a
/// thought_signature"), which a conversation from another wire never holds. Each call
/// goes with the value Google gives for calls the model did not make; an earlier
/// Gemini is sent none.
#[tokio::test]
async fn gemini_3_gets_each_earlier_call_with_a_signature_it_will_not_check() {
    use poolctl::core::conversation::{ToolCall, Turn};
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": "Sunny."}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 2}
        })))
        .mount(&server)
        .await;
    let ep = endpoint(&server, Wire::Gemini, "/v1beta");
    let mut req = ChatRequest::user("Weather in Paris?", 50);
    req.conversation.turns.push(Turn::Assistant {
        text: String::new(),
        tool_calls: vec![ToolCall {
            id: "call_1".into(),
            name: "weather".into(),
            arguments: json!({"city": "Paris"}),
        }],
    });
    req.conversation.turns.push(Turn::ToolResult {
        call_id: "call_1".into(),
        name: "weather".into(),
        content: "sunny".into(),
        is_error: false,
        parts: vec![],
    });
    for model in ["gemini-3-pro-preview", "gemini-2.5-flash"] {
        wire::chat(&wire::http_client(), &ep, model, &req)
            .await
            .unwrap();
    }
    let sent: Vec<serde_json::Value> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    let call_part = |b: &serde_json::Value| b["contents"][1]["parts"][0].clone();
    assert_eq!(call_part(&sent[0])["functionCall"]["name"], "weather");
    assert_eq!(
        call_part(&sent[0])["thoughtSignature"],
        "skip_thought_signature_validator"
    );
    assert!(call_part(&sent[1]).get("thoughtSignature").is_none());
}
