//! Mock providers: real HTTP/1.1 over loopback, written on raw sockets so a reply can
//! also be a connection reset, a stall, or a stream cut mid-body — things a
//! whole-body mock cannot do. One server serves a scenario's whole chain, each
//! provider under its own path prefix (`http://127.0.0.1:PORT/{provider}`).
//! Every request is checked against its wire first: a malformed request gets
//! `400 {"error":"mock: bad request: ..."}`, so a wrong wire fails the scenario loudly.

use super::mock_call::{request_id_header, reset, CallKind, ReplyCtx};
use super::scenario::{Body, Reply, StreamEnd, StreamReply};
use crate::core::clock::real_sleep;
use crate::core::vocab::{CallPath, Route, Wire};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 8 * 1024 * 1024;
/// A client that sends nothing for this long is dropped (a leak guard for `poolctl mock`).
const READ_DEADLINE: Duration = Duration::from_secs(30);
/// Connections served at once. Past this the server stops accepting until one ends, so
/// a flood of idle clients can neither exhaust descriptors nor memory.
pub const MAX_CONNECTIONS: usize = 256;
/// Request-body bytes buffered at once over all connections: 150 clients each sending
/// 7 MiB wait their turn instead of taking the process past a gigabyte.
pub const MAX_BUFFERED_BODY_BYTES: usize = 64 * 1024 * 1024;
/// After a failed accept (EMFILE at the descriptor limit, ...), wait before the next
/// one, doubling up to the cap: an accept loop that retries at once spins at 100 % CPU.
const ACCEPT_BACKOFF_START: Duration = Duration::from_millis(5);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// One route the mock serves.
#[derive(Debug, Clone)]
pub struct MockRoute {
    pub route: Route,
    pub wire: Wire,
    pub path: CallPath,
    pub replies: Vec<Reply>,
    pub outage: Option<Outage>,
    /// Keep each request body (a scenario's `received:` reads them).
    pub record: bool,
}

/// Until `until` on `clock` (the scenario's virtual clock), every call gets `reply`.
#[derive(Debug, Clone)]
pub struct Outage {
    pub until: crate::core::clock::UnixMs,
    pub reply: Reply,
    pub clock: Arc<dyn crate::core::clock::Clock>,
}

struct RouteState {
    spec: MockRoute,
    next: AtomicUsize,
    calls: AtomicU64,
    /// 2xx answers sent (an answer a gateway may or may not have passed on).
    answered: AtomicU64,
    /// When the outage ends, on the outage's clock; `POST /reset` moves it to
    /// `outage_span_ms` from the reset.
    outage_until: std::sync::atomic::AtomicI64,
    outage_span_ms: i64,
    /// The request bodies, when the route records them: at most `MAX_RECORDED`.
    bodies: std::sync::Mutex<Vec<Value>>,
}

/// Bodies kept per recording route: a scenario checks a few requests, and a burst of
/// `repeat` copies must not grow memory without bound.
const MAX_RECORDED: usize = 1_000;

struct Shared {
    /// Keyed by (provider, model).
    routes: HashMap<(String, String), RouteState>,
    /// Per provider: requests being answered now, and the most ever at once.
    in_flight: HashMap<String, (AtomicU64, AtomicU64)>,
    /// One permit per buffered request-body byte (`MAX_BUFFERED_BODY_BYTES` in all).
    body_bytes: Arc<Semaphore>,
    /// Connections open now, and the most ever at once.
    connections: (AtomicU64, AtomicU64),
}

/// Counts a request in flight to a provider for as long as it lives.
struct InFlight<'a>(&'a (AtomicU64, AtomicU64));

impl<'a> InFlight<'a> {
    fn enter(gauge: &'a (AtomicU64, AtomicU64)) -> Self {
        let now = gauge.0.fetch_add(1, Ordering::SeqCst) + 1;
        gauge.1.fetch_max(now, Ordering::SeqCst);
        InFlight(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A running mock server. Dropping it stops the server and every open connection.
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockServer {
    /// Binds `listen` (port 0 for any) and serves `routes` until dropped.
    pub async fn start(listen: SocketAddr, routes: Vec<MockRoute>) -> std::io::Result<MockServer> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let in_flight = routes
            .iter()
            .map(|r| {
                (
                    r.route.provider().to_string(),
                    (AtomicU64::new(0), AtomicU64::new(0)),
                )
            })
            .collect();
        let shared = Arc::new(Shared {
            in_flight,
            body_bytes: Arc::new(Semaphore::new(MAX_BUFFERED_BODY_BYTES)),
            connections: (AtomicU64::new(0), AtomicU64::new(0)),
            routes: routes
                .into_iter()
                .map(|spec| {
                    let key = (
                        spec.route.provider().to_string(),
                        spec.route.model().to_string(),
                    );
                    // An outage lasts as long from a reset as it did from the start.
                    let (until, span) = match &spec.outage {
                        Some(o) => (o.until, o.until.saturating_sub(o.clock.now_ms()).max(0)),
                        None => (0, 0),
                    };
                    (
                        key,
                        RouteState {
                            spec,
                            next: AtomicUsize::new(0),
                            calls: AtomicU64::new(0),
                            answered: AtomicU64::new(0),
                            outage_until: std::sync::atomic::AtomicI64::new(until),
                            outage_span_ms: span,
                            bodies: std::sync::Mutex::new(Vec::new()),
                        },
                    )
                })
                .collect(),
        });
        let accept_shared = shared.clone();
        let task = tokio::spawn(async move {
            // Connections live in this set, so aborting the accept task aborts them all.
            let mut conns = tokio::task::JoinSet::new();
            let mut backoff = ACCEPT_BACKOFF_START;
            loop {
                tokio::select! {
                    accepted = listener.accept(), if conns.len() < MAX_CONNECTIONS => {
                        match accepted {
                            Ok((stream, _)) => {
                                backoff = ACCEPT_BACKOFF_START;
                                let _ = stream.set_nodelay(true);
                                conns.spawn(serve_connection(stream, accept_shared.clone()));
                            }
                            Err(_) => {
                                real_sleep(backoff).await;
                                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                            }
                        }
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        });
        Ok(MockServer { addr, shared, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The `base_url` a provider's routes are served under, in the wire's convention:
    /// OpenAI-compatible bases end in `/v1`; Anthropic and Gemini bases are the host.
    pub fn base_url(&self, provider: &str, wire: Wire) -> String {
        match wire {
            Wire::OpenAi | Wire::Responses => format!("http://{}/{provider}/v1", self.addr),
            Wire::Anthropic | Wire::Gemini => format!("http://{}/{provider}", self.addr),
        }
    }

    /// The most connections ever open at once (at most `MAX_CONNECTIONS`).
    pub fn max_connections(&self) -> u64 {
        self.shared.connections.1.load(Ordering::SeqCst)
    }

    /// Connections open now.
    pub fn open_connections(&self) -> u64 {
        self.shared.connections.0.load(Ordering::SeqCst)
    }

    /// The most requests ever answered at once for one provider.
    pub fn max_in_flight(&self, provider: &str) -> u64 {
        self.shared
            .in_flight
            .get(provider)
            .map(|g| g.1.load(Ordering::SeqCst))
            .unwrap_or(0)
    }

    /// Calls received by a route since the server started.
    /// The request bodies `route` received, when it records them.
    pub fn received(&self, route: &Route) -> Vec<Value> {
        self.shared
            .routes
            .get(&(route.provider().to_string(), route.model().to_string()))
            .map(|r| r.bodies.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .unwrap_or_default()
    }

    pub fn calls(&self, route: &Route) -> u64 {
        self.shared
            .routes
            .get(&(route.provider().to_string(), route.model().to_string()))
            .map(|r| r.calls.load(Ordering::SeqCst))
            .unwrap_or(0)
    }

    /// Rewinds every script: call counts, replies, recorded bodies and outages start
    /// again as if the server had just started (`POST /reset`).
    pub fn reset(&self) {
        self.shared.reset();
    }
}

impl Shared {
    fn reset(&self) {
        for state in self.routes.values() {
            state.next.store(0, Ordering::SeqCst);
            state.calls.store(0, Ordering::SeqCst);
            state.answered.store(0, Ordering::SeqCst);
            state
                .bodies
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clear();
            if let Some(o) = &state.spec.outage {
                let until = o.clock.now_ms().saturating_add(state.outage_span_ms);
                state.outage_until.store(until, Ordering::SeqCst);
            }
        }
    }

    /// `GET /calls`: every route's upstream calls and 2xx answers since the last reset,
    /// by route name: `{"routes": {"p/m": {"calls": 2, "answered": 1}}}`.
    fn calls_json(&self) -> Value {
        let mut routes: Vec<(&str, Value)> = self
            .routes
            .values()
            .map(|r| {
                (
                    r.spec.route.as_str(),
                    json!({
                        "calls": r.calls.load(Ordering::SeqCst),
                        "answered": r.answered.load(Ordering::SeqCst),
                    }),
                )
            })
            .collect();
        routes.sort_by(|a, b| a.0.cmp(b.0));
        let map: serde_json::Map<String, Value> = routes
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        json!({ "routes": map })
    }
}

/// What the mock understood of a request.
struct Parsed {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// This body's share of `MAX_BUFFERED_BODY_BYTES`, released with the request.
    _body_permit: tokio::sync::OwnedSemaphorePermit,
}

impl Parsed {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

async fn serve_connection(mut stream: TcpStream, shared: Arc<Shared>) {
    let _open = InFlight::enter(&shared.connections);
    let budget = shared.body_bytes.clone();
    let parsed = match tokio::time::timeout(READ_DEADLINE, read_request(&mut stream, &budget)).await
    {
        Ok(Ok(Some(p))) => p,
        Ok(Err(msg)) => {
            reject(&mut stream, &msg).await;
            return;
        }
        _ => return,
    };
    // The control endpoints a runner outside this process uses (`chaos --target`).
    let path = parsed.target.split('?').next().unwrap_or("");
    match (parsed.method.as_str(), path) {
        ("GET", "/calls") => {
            let body = shared.calls_json().to_string();
            let _ =
                write_response(&mut stream, 200, &[], "application/json", body.as_bytes()).await;
            return;
        }
        ("POST", "/reset") => {
            shared.reset();
            let _ = write_response(
                &mut stream,
                200,
                &[],
                "application/json",
                b"{\"reset\":true}",
            )
            .await;
            return;
        }
        _ => {}
    }
    match route_request(&parsed, &shared) {
        Err(msg) => {
            reject(&mut stream, &msg).await;
        }
        Ok((state, call, request)) => {
            let _gauge = shared
                .in_flight
                .get(state.spec.route.provider())
                .map(InFlight::enter);
            state.calls.fetch_add(1, Ordering::SeqCst);
            if state.spec.record {
                let mut bodies = state.bodies.lock().unwrap_or_else(|p| p.into_inner());
                if bodies.len() < MAX_RECORDED {
                    bodies.push(request.clone());
                }
            }
            let until = state.outage_until.load(Ordering::SeqCst);
            let down = state
                .spec
                .outage
                .as_ref()
                .filter(|o| o.clock.now_ms() < until);
            let (reply, n) = match down {
                Some(o) => (&o.reply, state.calls.load(Ordering::SeqCst) as usize - 1),
                None => {
                    let n = state.next.fetch_add(1, Ordering::SeqCst);
                    (&state.spec.replies[n.min(state.spec.replies.len() - 1)], n)
                }
            };
            let ctx = ReplyCtx {
                wire: state.spec.wire,
                call,
                model: state.spec.route.model(),
                seq: n + 1,
                request: &request,
            };
            // Counted once written: a delayed answer the gateway gave up on (it closed
            // the connection) never reached it.
            if serve_reply(&mut stream, reply, &ctx).await && answers(reply) {
                state.answered.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

/// Whether `reply` (after any delay) is an answer a client could be given: a success,
/// a stream with text, or a scripted 2xx whose body carries choices, content blocks,
/// candidates, data or output items, or is a finished Responses object (a 2xx carrying
/// an error is not one).
fn answers(reply: &Reply) -> bool {
    match reply {
        Reply::Delay { then, .. } => answers(then),
        Reply::Ok { .. } => true,
        // A stream that ends as a stream should is an answer, even an empty one (a
        // content filter's); one that breaks is one only if text or scripted chunks
        // went out first.
        Reply::Stream(s) => {
            matches!(s.end, StreamEnd::Done | StreamEnd::NoDone)
                || s.items.iter().any(|i| match i {
                    super::scenario::StreamItem::Text(t) => !t.is_empty(),
                    // Scripted chunks are the scenario's own answer, whole or not.
                    super::scenario::StreamItem::Raw { .. } => true,
                })
        }
        Reply::Status {
            status,
            body: Body::Json(v),
            ..
        } if (200..300).contains(status) => {
            ["choices", "content", "candidates", "data", "results", "output"]
                .iter()
                .any(|f| {
                    v.get(*f)
                        .and_then(Value::as_array)
                        .is_some_and(|a| !a.is_empty())
                })
                // A Responses object the filter cut holds no item, and is still one.
                || (v.get("object").and_then(Value::as_str) == Some("response")
                    && matches!(
                        v.get("status").and_then(Value::as_str),
                        Some("completed" | "incomplete")
                    ))
        }
        Reply::Status { .. } | Reply::Reset => false,
    }
}

/// Answers a request that is not valid for its wire: `400 {"error":"mock: bad request: ..."}`.
async fn reject(stream: &mut TcpStream, msg: &str) {
    let body = json!({ "error": format!("mock: bad request: {msg}") }).to_string();
    let _ = write_response(stream, 400, &[], "application/json", body.as_bytes()).await;
}

/// Reads one request: head, then a `Content-Length` body. `Ok(None)` when the client
/// closed before sending a request.
/// The body's bytes are taken from `budget` before they are read, and given back when
/// the request has been answered (the permit travels in `Parsed`).
async fn read_request(
    stream: &mut TcpStream,
    budget: &Arc<Semaphore>,
) -> Result<Option<Parsed>, String> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    let (head_len, method, target, headers) = loop {
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut hs = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut hs);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let headers = req
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_ascii_lowercase(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect::<Vec<_>>();
                break (
                    len,
                    req.method.unwrap_or("").to_string(),
                    req.path.unwrap_or("").to_string(),
                    headers,
                );
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => continue,
            Ok(httparse::Status::Partial) => return Err("request head over 64 KiB".into()),
            Err(e) => return Err(format!("unparseable request head: {e}")),
        }
    };
    let parsed_len = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map(|(_, v)| v.trim().parse::<usize>());
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        return Err("chunked request bodies are not accepted; send Content-Length".into());
    }
    let len = match parsed_len {
        Some(Ok(n)) if n <= MAX_BODY => n,
        Some(Ok(_)) => return Err("request body over 8 MiB".into()),
        Some(Err(_)) => return Err("Content-Length is not a number".into()),
        None => 0,
    };
    let permit = budget
        .clone()
        .acquire_many_owned(len as u32)
        .await
        .map_err(|_| "the server is stopping".to_string())?;
    let mut body = buf[head_len..].to_vec();
    body.reserve(len.saturating_sub(body.len()));
    while body.len() < len {
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the request body ended early".into());
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(len);
    Ok(Some(Parsed {
        method,
        target,
        headers,
        body,
        _body_permit: permit,
    }))
}

/// Finds the route a request is for and checks the request against its wire.
fn route_request<'a>(
    req: &Parsed,
    shared: &'a Shared,
) -> Result<(&'a RouteState, CallKind, Value), String> {
    if req.method != "POST" {
        return Err(format!(
            "{} {}: only POST is served",
            req.method, req.target
        ));
    }
    let path = req.target.split('?').next().unwrap_or("");
    let trimmed = path.trim_start_matches('/');
    let (provider, rest) = trimmed
        .split_once('/')
        .ok_or_else(|| format!("no provider prefix in `{path}`"))?;
    let rest = format!("/{rest}");
    let body: Value =
        serde_json::from_slice(&req.body).map_err(|e| format!("body is not JSON: {e}"))?;
    if !body.is_object() {
        return Err("body is not a JSON object".into());
    }
    let (wire, kind, model) = if let Some(model_call) = rest.strip_prefix("/v1beta/models/") {
        let (model, method) = model_call
            .rsplit_once(':')
            .ok_or_else(|| format!("`{rest}` has no `:method`"))?;
        let kind = match method {
            "generateContent" => CallKind::Chat,
            "streamGenerateContent" => CallKind::Stream,
            "batchEmbedContents" => CallKind::Embed,
            other => return Err(format!("unknown Gemini method `{other}`")),
        };
        (Wire::Gemini, kind, model.to_string())
    } else if rest == "/v1/messages" || rest == "/v1/chat/completions" {
        // Both wires ask for a stream with `"stream": true` in the body.
        let wire = if rest == "/v1/messages" {
            Wire::Anthropic
        } else {
            Wire::OpenAi
        };
        let kind = match body.get("stream").and_then(Value::as_bool) {
            Some(true) => CallKind::Stream,
            _ => CallKind::Chat,
        };
        (wire, kind, model_of(&body)?)
    } else if rest == "/v1/responses" {
        let kind = match body.get("stream").and_then(Value::as_bool) {
            Some(true) => CallKind::Stream,
            _ => CallKind::Chat,
        };
        (Wire::Responses, kind, model_of(&body)?)
    } else if rest == "/v1/embeddings" {
        (Wire::OpenAi, CallKind::Embed, model_of(&body)?)
    } else if rest == "/v1/rerank" {
        (Wire::OpenAi, CallKind::Rerank, model_of(&body)?)
    } else {
        return Err(format!("no wire serves `{rest}`"));
    };
    let state = shared
        .routes
        .get(&(provider.to_string(), model.clone()))
        .ok_or_else(|| format!("no route `{provider}/{model}` in this scenario"))?;
    // A provider of the Responses API serves OpenAI's embeddings and rerank beside it.
    let wire = match (state.spec.wire, wire, kind) {
        (Wire::Responses, Wire::OpenAi, CallKind::Embed | CallKind::Rerank) => Wire::Responses,
        _ => wire,
    };
    if state.spec.wire != wire {
        return Err(format!(
            "route `{provider}/{model}` speaks the {} wire, but this request is {wire}",
            state.spec.wire
        ));
    }
    check_wire(req, wire, kind, &body)?;
    Ok((state, kind, body))
}

fn model_of(body: &Value) -> Result<String, String> {
    match body.get("model").and_then(Value::as_str) {
        Some(m) if !m.is_empty() => Ok(m.to_string()),
        _ => Err("`model` is missing or not a string".into()),
    }
}

/// The wire's auth header and required body fields.
fn check_wire(req: &Parsed, wire: Wire, kind: CallKind, body: &Value) -> Result<(), String> {
    let nonempty = |name: &str| req.header(name).is_some_and(|v| !v.trim().is_empty());
    match wire {
        Wire::OpenAi | Wire::Responses => {
            let auth = req.header("authorization").unwrap_or("");
            if !auth.starts_with("Bearer ") || auth.len() <= "Bearer ".len() {
                return Err("missing `Authorization: Bearer <key>`".into());
            }
        }
        Wire::Anthropic => {
            // anthropic-sdk 2.x sends the key as a Bearer token instead of `x-api-key`.
            let bearer = req
                .header("authorization")
                .is_some_and(|v| v.starts_with("Bearer ") && v.len() > "Bearer ".len());
            if !nonempty("x-api-key") && !bearer {
                return Err("missing `x-api-key` (or `Authorization: Bearer`)".into());
            }
            if !nonempty("anthropic-version") {
                return Err("missing `anthropic-version`".into());
            }
        }
        Wire::Gemini => {
            if !nonempty("x-goog-api-key") && !req.target.contains("key=") {
                return Err("missing `x-goog-api-key`".into());
            }
        }
    }
    let array = |field: &str| -> Result<&Vec<Value>, String> {
        match body.get(field).and_then(Value::as_array) {
            Some(a) if !a.is_empty() => Ok(a),
            _ => Err(format!("`{field}` must be a non-empty array")),
        }
    };
    match (wire, kind) {
        (Wire::OpenAi, CallKind::Chat | CallKind::Stream) => {
            for (i, m) in array("messages")?.iter().enumerate() {
                if m.get("role").and_then(Value::as_str).is_none() {
                    return Err(format!("`messages[{i}].role` is missing"));
                }
            }
            positive_int(body, "max_tokens", false)?;
        }
        (Wire::Anthropic, _) => {
            for (i, m) in array("messages")?.iter().enumerate() {
                match m.get("role").and_then(Value::as_str) {
                    Some("user" | "assistant") => {}
                    _ => return Err(format!("`messages[{i}].role` must be user or assistant")),
                }
            }
            positive_int(body, "max_tokens", true)?;
        }
        (Wire::Gemini, CallKind::Chat | CallKind::Stream) => {
            for (i, c) in array("contents")?.iter().enumerate() {
                if c.get("parts").and_then(Value::as_array).is_none() {
                    return Err(format!("`contents[{i}].parts` is missing"));
                }
            }
        }
        (Wire::Gemini, _) => {
            array("requests")?;
        }
        (Wire::Responses, _) => {
            match body.get("input") {
                Some(Value::String(s)) if !s.is_empty() => {}
                Some(Value::Array(items)) if !items.is_empty() => {
                    for (i, item) in items.iter().enumerate() {
                        if !item.is_object() {
                            return Err(format!("`input[{i}]` is not an object"));
                        }
                    }
                }
                _ => return Err("`input` must be a string or a non-empty array of items".into()),
            }
            // The gateway sends the whole conversation: never an id of the provider's.
            if body
                .get("previous_response_id")
                .is_some_and(|p| !p.is_null())
            {
                return Err("`previous_response_id` was sent; this mock keeps no responses".into());
            }
            positive_int(body, "max_output_tokens", false)?;
        }
        (Wire::OpenAi, CallKind::Embed) => match body.get("input") {
            Some(Value::String(s)) if !s.is_empty() => {}
            Some(Value::Array(a)) if !a.is_empty() => {}
            _ => return Err("`input` must be a string or a non-empty array".into()),
        },
        (Wire::OpenAi, CallKind::Rerank) => {
            if body.get("query").and_then(Value::as_str).is_none() {
                return Err("`query` must be a string".into());
            }
            array("documents")?;
        }
    }
    Ok(())
}

fn positive_int(body: &Value, field: &str, required: bool) -> Result<(), String> {
    match body.get(field) {
        None if !required => Ok(()),
        Some(v) if v.as_u64().is_some_and(|n| n >= 1) => Ok(()),
        _ => Err(format!("`{field}` must be a positive integer")),
    }
}

/// Plays `reply`; whether it was written whole (a stream: begun).
async fn serve_reply(stream: &mut TcpStream, reply: &Reply, ctx: &ReplyCtx<'_>) -> bool {
    let mut reply = reply;
    while let Reply::Delay { ms, then } = reply {
        real_sleep(Duration::from_millis(*ms)).await;
        reply = then;
    }
    match reply {
        Reply::Delay { .. } => unreachable!("unwrapped above"),
        Reply::Reset => {
            reset(stream);
            false
        }
        Reply::Status {
            status,
            headers,
            body,
        } => {
            let (ctype, bytes) = match body {
                Body::Json(v) => ("application/json", v.to_string().into_bytes()),
                Body::Raw(s) if s.trim_start().starts_with('<') => {
                    ("text/html; charset=utf-8", s.clone().into_bytes())
                }
                Body::Raw(s) => ("text/plain; charset=utf-8", s.clone().into_bytes()),
                Body::Empty => ("application/json", Vec::new()),
            };
            write_response(stream, *status, headers, ctype, &bytes)
                .await
                .is_ok()
        }
        Reply::Ok {
            text,
            headers,
            usage,
        } => {
            if ctx.call == CallKind::Stream {
                let items = super::wire_bodies::chunk_text(text);
                let sr = StreamReply {
                    items,
                    usage: *usage,
                    end: StreamEnd::Done,
                    first_token_ms: 0,
                    gap_ms: 0,
                    headers: headers.clone(),
                };
                super::stream_server::serve_stream(stream, &sr, ctx).await;
                return true;
            }
            let body = super::wire_bodies::success(ctx, text, *usage);
            let mut hs = headers.clone();
            hs.push(request_id_header(ctx.wire, ctx.seq));
            write_response(
                stream,
                200,
                &hs,
                "application/json",
                body.to_string().as_bytes(),
            )
            .await
            .is_ok()
        }
        Reply::Stream(sr) => {
            super::stream_server::serve_stream(stream, sr, ctx).await;
            true
        }
    }
}

pub async fn write_response(
    stream: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let reason = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Status");
    let mut head = format!("HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.flush().await?;
    let _ = stream.shutdown().await;
    Ok(())
}
