//! Recording upstreams for the fidelity tests: wiremock servers that answer exact bytes
//! and keep every request they got, so a test can read what the gateway forwarded.
#![allow(dead_code)]

use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// An upstream answering `answer` (exact JSON bytes) to a POST on `at`.
pub async fn upstream(at: &str, answer: &'static str) -> MockServer {
    answering(at, answer, "application/json").await
}

/// An upstream streaming `sse` (exact bytes) in answer to a POST on `at`.
pub async fn sse_upstream(at: &str, sse: &'static str) -> MockServer {
    answering(at, sse, "text/event-stream").await
}

async fn answering(at: &str, body: &'static str, content_type: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(at))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, content_type))
        .mount(&server)
        .await;
    server
}

/// Every request the upstream received, in order.
pub async fn received(server: &MockServer) -> Vec<wiremock::Request> {
    server.received_requests().await.unwrap_or_default()
}
