//! Wires: how to talk to a provider. Each wire module builds correct requests and
//! parses successes; failures of every wire become one `UpstreamFailure`. Wires never
//! decide anything, and never retry: the router is the only retry layer.

pub mod anthropic;
pub mod gemini;
pub mod openai;
pub mod rerank;
pub mod sse;
pub mod stream;
pub mod stream_limits;

use crate::classify::dialect::Dialect;
use crate::classify::failure::{excerpt, ErrorFields, Headers, Transport, UpstreamFailure};
use crate::core::answer::FinishReason;
use crate::core::request::{ChatRequest, EmbedRequest, RerankRequest, Usage};
use crate::core::secret::Secret;
use crate::core::vocab::Wire;
use serde_json::Value;
use std::time::Duration;

/// Bodies past this are not read further: an error needs only its first bytes to be
/// classified, and an endless body must never exhaust memory.
pub const ERROR_BODY_CAP: usize = 64 * 1024;
/// The largest success body accepted.
pub const SUCCESS_BODY_CAP: usize = 8 * 1024 * 1024;

/// One provider as the wire calls it: where, how, with which key and deadlines. What the
/// router does with its failures is in [`crate::config::route::RoutePolicy`].
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub provider: String,
    pub wire: Wire,
    pub dialect: Dialect,
    pub base_url: String,
    pub api_key: Secret,
    /// Whole non-streaming call.
    pub timeout_ms: u64,
    /// Streams: headers to first visible token.
    pub first_token_timeout_ms: u64,
    /// Streams: longest silence between chunks.
    pub stream_idle_ms: u64,
    /// Streams: the whole stream, headers to end.
    pub stream_max_ms: u64,
    /// Streams: text and tool-call arguments delivered.
    pub max_stream_bytes: u64,
    /// Streams: one SSE event.
    pub max_event_bytes: u64,
}

pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
pub const DEFAULT_FIRST_TOKEN_TIMEOUT_MS: u64 = 15_000;
pub const DEFAULT_STREAM_IDLE_MS: u64 = 20_000;

impl Endpoint {
    /// `base_url` without a trailing slash and without its query, ready for a path to
    /// be appended. Build whole URLs with `url`, which keeps the query.
    pub fn base(&self) -> &str {
        let no_query = self.base_url.split('?').next().unwrap_or("");
        no_query.trim_end_matches('/')
    }

    /// This endpoint with every deadline cut to `left_ms` (what is left of the request's
    /// `max_elapsed_ms`), so no attempt outlives the budget. Borrowed when none is cut.
    pub fn within(&self, left_ms: u64) -> std::borrow::Cow<'_, Endpoint> {
        let left = left_ms.max(1);
        if self.timeout_ms <= left
            && self.first_token_timeout_ms <= left
            && self.stream_max_ms <= left
        {
            return std::borrow::Cow::Borrowed(self);
        }
        std::borrow::Cow::Owned(Endpoint {
            timeout_ms: self.timeout_ms.min(left),
            first_token_timeout_ms: self.first_token_timeout_ms.min(left),
            stream_max_ms: self.stream_max_ms.min(left),
            ..self.clone()
        })
    }

    /// The URL of `path` (which may carry its own query, `?alt=sse`) on this endpoint:
    /// the path joins the base's path, and a query in `base_url` (a gateway's `?key=`)
    /// is kept after it, never left in the middle of the path.
    pub fn url(&self, path: &str) -> String {
        join_url(&self.base_url, path)
    }
}

/// `base` + `path`, with the query of each kept and merged after the path.
pub fn join_url(base: &str, path: &str) -> String {
    let (base_path, base_query) = split_query(base);
    let (path, path_query) = split_query(path);
    let mut url = format!(
        "{}/{}",
        base_path.trim_end_matches('/'),
        path.trim_start_matches('/')
    );
    let queries: Vec<&str> = [base_query, path_query]
        .into_iter()
        .flatten()
        .filter(|q| !q.is_empty())
        .collect();
    if !queries.is_empty() {
        url.push('?');
        url.push_str(&queries.join("&"));
    }
    url
}

fn split_query(s: &str) -> (&str, Option<&str>) {
    match s.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (s, None),
    }
}

/// A request ready to send: the wire's URL, headers and JSON body.
#[derive(Debug)]
pub struct HttpCall {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Value,
}

/// A chat success body, read by its wire.
#[derive(Debug, Clone, Default)]
pub struct ChatParsed {
    pub text: String,
    pub tool_calls: Vec<crate::core::conversation::ToolCall>,
    pub finish_reason: Option<FinishReason>,
    /// The model the body says answered.
    pub model: Option<String>,
    pub usage: Usage,
    /// The body's own id (a fallback request id).
    pub id: Option<String>,
}

/// How a wire spells the sampling fields: `None` where it has no such field.
pub struct SamplingNames {
    pub temperature: &'static str,
    pub top_p: &'static str,
    pub stop: &'static str,
    pub seed: Option<&'static str>,
}

/// Writes the sampling fields the caller set into `target` (a body, or Gemini's
/// `generationConfig`), under the wire's names.
pub fn put_sampling(
    target: &mut serde_json::Map<String, Value>,
    s: &crate::core::request::Sampling,
    names: &SamplingNames,
) {
    if let Some(t) = s.temperature {
        target.insert(names.temperature.into(), t.into());
    }
    if let Some(p) = s.top_p {
        target.insert(names.top_p.into(), p.into());
    }
    if !s.stop.is_empty() {
        target.insert(names.stop.into(), s.stop.clone().into());
    }
    if let (Some(seed), Some(name)) = (s.seed, names.seed) {
        target.insert(name.into(), seed.into());
    }
}

/// The request fields `wire` cannot express, by their caller-facing names. Each wire's
/// `chat_call` maps every other field; the router records these on the attempt so that
/// nothing is lost silently.
pub fn dropped(wire: Wire, req: &ChatRequest) -> Vec<String> {
    match wire {
        Wire::OpenAi => Vec::new(),
        Wire::Anthropic => anthropic::dropped(req),
        Wire::Gemini => gemini::dropped(req),
    }
}

/// A usable chat answer.
#[derive(Debug, Clone)]
pub struct ChatSuccess {
    pub text: String,
    /// Tools the model asked to call, in canonical form.
    pub tool_calls: Vec<crate::core::conversation::ToolCall>,
    pub finish_reason: Option<FinishReason>,
    pub model: Option<String>,
    pub usage: Usage,
    pub request_id: Option<String>,
    pub headers: Headers,
}

/// A 200 whose body could not be used, or that carried a refusal instead of an answer.
#[derive(Debug)]
pub enum BadSuccess {
    /// Not the wire's success shape: broken JSON, no choices, ...
    Malformed(String),
    /// The provider returned no answer because a safety filter stopped it.
    Refused(String),
    /// An error object inside the answer (OpenRouter `choices[].error`).
    Failed(Box<ErrorFields>),
}

/// The HTTP client every wire shares. reqwest 0.12 has no retry layer of its own, and
/// redirects are refused so a POST is never silently replayed elsewhere.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(16)
        .build()
        .expect("a reqwest client with static settings always builds")
}

/// Sends one non-streaming chat call through `endpoint`'s wire.
pub async fn chat(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    model: &str,
    req: &ChatRequest,
) -> Result<ChatSuccess, UpstreamFailure> {
    let call = match endpoint.wire {
        Wire::OpenAi => openai::chat_call(endpoint, model, req),
        Wire::Anthropic => anthropic::chat_call(endpoint, model, req),
        Wire::Gemini => gemini::chat_call(endpoint, model, req),
    };
    let reply = send(client, call, endpoint.timeout_ms).await?;
    // An error some dialects report inside a 2xx (MiniMax `base_resp`) is never an answer.
    if let Some(fields) = crate::classify::in_band::error_in_success(endpoint.dialect, &reply.json)
    {
        let bad = BadSuccess::Failed(Box::new(fields));
        return Err(bad_success(reply.status, reply.headers, &reply.raw, bad));
    }
    let parsed = match endpoint.wire {
        Wire::OpenAi => openai::parse_chat(&reply.json),
        Wire::Anthropic => anthropic::parse_chat(&reply.json),
        Wire::Gemini => gemini::parse_chat(&reply.json),
    };
    match parsed {
        Ok(p) => Ok(ChatSuccess {
            text: p.text,
            tool_calls: p.tool_calls,
            finish_reason: p.finish_reason,
            model: p.model,
            usage: p.usage,
            request_id: reply.headers.request_id().map(str::to_string).or(p.id),
            headers: reply.headers,
        }),
        Err(bad) => Err(bad_success(reply.status, reply.headers, &reply.raw, bad)),
    }
}

/// A usable embedding batch: one vector per input, in input order.
#[derive(Debug, Clone)]
pub struct EmbedSuccess {
    pub vectors: Vec<Vec<f32>>,
    pub usage: Usage,
    pub request_id: Option<String>,
    pub headers: Headers,
}

/// A usable rerank: document indices, best first.
#[derive(Debug, Clone)]
pub struct RerankSuccess {
    pub ranking: Vec<usize>,
    pub usage: Usage,
    pub request_id: Option<String>,
    pub headers: Headers,
}

/// A wire that has no endpoint for a path (Anthropic has no embeddings): this route can
/// never serve the call, which the classifier reads as `model_unavailable`.
fn unsupported(endpoint: &Endpoint, what: &str) -> UpstreamFailure {
    UpstreamFailure::transport(
        Transport::Unsupported,
        format!(
            "the {} wire of provider `{}` has no {what} endpoint",
            endpoint.wire, endpoint.provider
        ),
    )
}

/// Sends one embedding batch.
pub async fn embed(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    model: &str,
    req: &EmbedRequest,
) -> Result<EmbedSuccess, UpstreamFailure> {
    let call = match endpoint.wire {
        Wire::OpenAi => openai::embed_call(endpoint, model, &req.inputs),
        Wire::Gemini => gemini::embed_call(endpoint, model, &req.inputs),
        Wire::Anthropic => return Err(unsupported(endpoint, "embeddings")),
    };
    let reply = send(client, call, endpoint.timeout_ms).await?;
    let parsed = match endpoint.wire {
        Wire::Gemini => gemini::parse_embed(&reply.json, req.inputs.len()),
        _ => openai::parse_embed(&reply.json, req.inputs.len()),
    };
    match parsed {
        Ok((vectors, usage)) => Ok(EmbedSuccess {
            vectors,
            usage,
            request_id: reply.headers.request_id().map(str::to_string),
            headers: reply.headers,
        }),
        Err(bad) => Err(bad_success(reply.status, reply.headers, &reply.raw, bad)),
    }
}

/// Sends one rerank call (Cohere / Jina shape, on OpenAI-compatible endpoints).
pub async fn rerank(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    model: &str,
    req: &RerankRequest,
) -> Result<RerankSuccess, UpstreamFailure> {
    if endpoint.wire != Wire::OpenAi {
        return Err(unsupported(endpoint, "rerank"));
    }
    let call = rerank::rerank_call(endpoint, model, &req.query, &req.documents, req.top_n);
    let reply = send(client, call, endpoint.timeout_ms).await?;
    match rerank::parse_rerank(&reply.json, req.documents.len()) {
        Ok((ranking, usage)) => Ok(RerankSuccess {
            ranking,
            usage,
            request_id: reply.headers.request_id().map(str::to_string),
            headers: reply.headers,
        }),
        Err(bad) => Err(bad_success(reply.status, reply.headers, &reply.raw, bad)),
    }
}

/// A 2xx that parsed as JSON, ready for the wire's success parser.
pub struct JsonReply {
    pub status: u16,
    pub headers: Headers,
    pub json: Value,
    pub raw: Vec<u8>,
}

/// Sends a call and returns a 2xx JSON body, or the failure: a non-2xx response (body
/// read up to `ERROR_BODY_CAP`), a transport error, a timeout, or a 2xx that is not
/// JSON or is larger than `SUCCESS_BODY_CAP`.
pub async fn send(
    client: &reqwest::Client,
    call: HttpCall,
    timeout_ms: u64,
) -> Result<JsonReply, UpstreamFailure> {
    let deadline = Duration::from_millis(timeout_ms);
    let work = async {
        let mut builder = client.post(&call.url).json(&call.body);
        for (name, value) in &call.headers {
            builder = builder.header(*name, value);
        }
        let resp = builder.send().await.map_err(transport_failure)?;
        let status = resp.status().as_u16();
        let headers = Headers::from_reqwest(resp.headers());
        let ok = (200..300).contains(&status);
        let cap = if ok { SUCCESS_BODY_CAP } else { ERROR_BODY_CAP };
        let (raw, over_cap) = read_capped(resp, cap)
            .await
            .map_err(|cut| body_cut_off(status, headers.clone(), cut))?;
        if !ok {
            return Err(UpstreamFailure::from_response(status, headers, &raw));
        }
        if over_cap {
            return Err(bad_success(
                status,
                headers,
                &raw,
                BadSuccess::Malformed(format!("success body over {} MiB", cap >> 20)),
            ));
        }
        match serde_json::from_slice::<Value>(&raw) {
            Ok(json) => Ok(JsonReply {
                status,
                headers,
                json,
                raw,
            }),
            Err(e) => Err(bad_success(
                status,
                headers,
                &raw,
                BadSuccess::Malformed(format!("success body is not JSON: {e}")),
            )),
        }
    };
    match tokio::time::timeout(deadline, work).await {
        Ok(result) => result,
        Err(_) => Err(UpstreamFailure::transport(
            Transport::Timeout,
            format!("no complete response within {timeout_ms} ms"),
        )),
    }
}

/// Reads a body chunk by chunk, stopping at `cap` bytes. Returns the bytes and whether
/// the body went past the cap.
pub async fn read_capped(
    mut resp: reqwest::Response,
    cap: usize,
) -> Result<(Vec<u8>, bool), UpstreamFailure> {
    let mut buf = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let room = cap.saturating_sub(buf.len());
                if chunk.len() > room {
                    buf.extend_from_slice(&chunk[..room]);
                    return Ok((buf, true));
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok((buf, false)),
            Err(e) => return Err(transport_failure(e)),
        }
    }
}

/// Turns a reqwest error into a transport failure, without the URL (a gateway URL can
/// carry credentials in its query).
pub fn transport_failure(e: reqwest::Error) -> UpstreamFailure {
    let kind = if e.is_timeout() {
        Transport::Timeout
    } else {
        Transport::Network
    };
    let e = e.without_url();
    let mut detail = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        detail.push_str(": ");
        detail.push_str(&s.to_string());
        source = s.source();
    }
    UpstreamFailure::transport(kind, detail)
}

/// A response whose body broke while being read. The status did come back, so it is
/// recorded (spec/decisions.md: `network` is "before any response"): a 2xx is a broken
/// success (`server_error`), any other status is judged by its status and headers.
pub fn body_cut_off(status: u16, headers: Headers, cut: UpstreamFailure) -> UpstreamFailure {
    let why = format!("the body was cut off: {}", cut.excerpt);
    if (200..300).contains(&status) {
        return bad_success(status, headers, &[], BadSuccess::Malformed(why));
    }
    UpstreamFailure {
        malformed: Some(why),
        ..UpstreamFailure::from_response(status, headers, &[])
    }
}

/// A 2xx that the wire could not use, as a failure the classifier can judge.
pub fn bad_success(status: u16, headers: Headers, raw: &[u8], bad: BadSuccess) -> UpstreamFailure {
    let (error, malformed) = match bad {
        BadSuccess::Malformed(why) => (ErrorFields::parse(raw), Some(why)),
        BadSuccess::Failed(fields) => (Some(*fields), None),
        BadSuccess::Refused(why) => (
            Some(ErrorFields {
                code: Some("content_filter".into()),
                message: Some(why),
                ..Default::default()
            }),
            None,
        ),
    };
    UpstreamFailure {
        status: Some(status),
        headers,
        error,
        excerpt: excerpt(raw),
        transport: None,
        malformed,
    }
}

/// Reads a JSON number as a token count; absent or odd values count as 0.
pub fn tokens(v: Option<&Value>) -> u64 {
    v.and_then(Value::as_u64).unwrap_or(0)
}
