//! One HTTP request through the gateway: authenticate, read a capped body, parse it,
//! choose the chain, call the router through the adapter, render the answer or the
//! error, count it and log one line. Streams continue in `stream`.

use super::adapter::{self, Called, Priority, Reply};
use super::ask::{last_user_text, Ask};
use super::body_budget::BodyPermit;
use super::choose::Wants;
use super::egress;
use super::errors::{ApiError, Flavor};
use super::guard;
use super::http::{
    dropped_header, error_response, full, json_response, refusal, trace_headers, Body,
};
use super::ingress;
use super::Gateway;
use crate::core::clock::Stopwatch;
use crate::core::trace::Report;
use crate::core::vocab::{Outcome, Wire};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{
    HeaderValue, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_HEADERS,
    CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, HOST, ORIGIN, VARY,
};
use hyper::{HeaderMap, Method, Request, Response};
use std::sync::Arc;

/// Constant-time comparison, so the token cannot be guessed byte by byte from timing.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The credentials a client sent: each `Authorization: Bearer …`, and each `x-api-key`
/// (Anthropic's). All are read: with only the first `Authorization` read, a token
/// beside a stray header passed or failed by the order of the lines, and an Anthropic
/// client's right `x-api-key` failed beside any `Bearer` one.
fn credentials(headers: &HeaderMap) -> impl Iterator<Item = &[u8]> {
    let bearer = headers.get_all("authorization").iter().filter_map(|v| {
        let v = v.as_bytes();
        (v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ")).then(|| &v[7..])
    });
    bearer.chain(
        headers
            .get_all("x-api-key")
            .iter()
            .map(HeaderValue::as_bytes),
    )
}

/// The answer to a listed origin's CORS preflight: what its `fetch` may send.
fn preflight(headers: &HeaderMap) -> Response<Body> {
    let mut r = Response::new(full(Bytes::new()));
    *r.status_mut() = hyper::StatusCode::NO_CONTENT;
    let h = r.headers_mut();
    h.insert(
        ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, DELETE, OPTIONS"),
    );
    if let Some(asked) = headers.get(ACCESS_CONTROL_REQUEST_HEADERS) {
        h.insert(ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
    }
    h.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    r
}

fn flavor_of(path: &str) -> Flavor {
    if path == "/v1/messages" {
        Flavor::Anthropic
    } else if path == "/v1/responses" || path.starts_with("/v1/responses/") {
        Flavor::Responses
    } else {
        Flavor::OpenAi
    }
}

/// Decisions made without the shared state store (`state: redis://`): health on this
/// process's own view, admission by `on_store_error`. Zero with a local store.
fn degraded_metrics(gw: &Gateway) -> String {
    let health = gw.shared_health.as_ref();
    let admission = gw.router.shared_buckets();
    format!(
        "# HELP poolctl_store_degraded_total Decisions made without the shared state store, by what was decided.\n\
         # TYPE poolctl_store_degraded_total counter\n\
         poolctl_store_degraded_total{{decision=\"health\"}} {}\n\
         poolctl_store_degraded_total{{decision=\"admission\"}} {}\n\
         # HELP poolctl_store_degraded_episodes_total Times the shared state store stopped answering.\n\
         # TYPE poolctl_store_degraded_episodes_total counter\n\
         poolctl_store_degraded_episodes_total{{decision=\"health\"}} {}\n\
         poolctl_store_degraded_episodes_total{{decision=\"admission\"}} {}\n",
        health.map_or(0, |h| h.degraded()),
        admission.map_or(0, |a| a.degraded()),
        health.map_or(0, |h| h.episodes()),
        admission.map_or(0, |a| a.episodes()),
    )
}

/// Serves one request. Never panics outward: the listener catches what escapes.
///
/// The request's Ask (its log line and count) is made here, before the future is first
/// polled: hyper may drop the future unpolled (a client that sent its request and
/// closed at once), and that request is still `cancelled`, not unseen.
pub fn handle(
    gw: Arc<Gateway>,
    req: Request<Incoming>,
) -> impl std::future::Future<Output = Response<Body>> + Send {
    let flavor = flavor_of(req.uri().path());
    let ask = Ask::new(
        gw.clone(),
        req.method().clone(),
        req.uri().path().to_string(),
        flavor,
    );
    respond_to(gw, req, ask)
}

async fn respond_to(gw: Arc<Gateway>, req: Request<Incoming>, ask: Ask) -> Response<Body> {
    let origin = req
        .headers()
        .get(ORIGIN)
        .filter(|o| guard::origin_allowed(&gw.settings.allow_origins, o.as_bytes()))
        .cloned();
    let mut r = answer(gw, req, ask).await;
    if let Some(origin) = origin {
        // A listed origin's page may read the answer; any other gets no such header.
        let h = r.headers_mut();
        h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.insert(VARY, HeaderValue::from_static("origin"));
    }
    r
}

/// The Prometheus scrape: routes, workflows, classes, bucket levels and health.
pub async fn metrics(gw: &Gateway) -> Response<Body> {
    let state = gw.scrape_state().await;
    let (health, levels) = (&state.0, &state.1);
    let buckets = gw.router.buckets();
    let mut body = gw.metrics.render(health, &buckets.sheds(), levels);
    body.push_str(&format!(
        "# HELP poolctl_buffered_body_bytes Request-body bytes buffered now, over all requests.\n\
         # TYPE poolctl_buffered_body_bytes gauge\npoolctl_buffered_body_bytes {}\n\
         # HELP poolctl_body_waits_total Request bodies that waited for the buffered-body budget.\n\
         # TYPE poolctl_body_waits_total counter\npoolctl_body_waits_total {}\n\
         # HELP poolctl_held_answer_bytes Upstream answer bytes held now, over every call.\n\
         # TYPE poolctl_held_answer_bytes gauge\npoolctl_held_answer_bytes {}\n\
         # HELP poolctl_held_answer_waits_total Upstream reads that waited for the held-answer cap.\n\
         # TYPE poolctl_held_answer_waits_total counter\npoolctl_held_answer_waits_total {}\n",
        gw.buffered_body_bytes(),
        gw.metrics.body_waits(),
        crate::wire::held::HELD.total(),
        crate::wire::held::HELD.waits(),
    ));
    body.push_str(&degraded_metrics(gw));
    let mut r = Response::new(full(body));
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

/// Whether the client sent the gateway's token (always, when none is set).
fn authorized(gw: &Gateway, headers: &HeaderMap) -> bool {
    match &gw.settings.token {
        Some(token) => credentials(headers).any(|c| same(c, token.expose().as_bytes())),
        None => true,
    }
}

/// The 401, naming the variable the token was read from: the one an operator set
/// (`serve_token_env:`, a LiteLLM `master_key`), not always `POOLCTL_SERVE_TOKEN`.
fn unauthorized(token_var: &str) -> ApiError {
    ApiError::new(
        401,
        "authentication_error",
        "invalid_api_key",
        format!(
            "this gateway requires the token in ${token_var} as `Authorization: Bearer` (or `x-api-key`)"
        ),
    )
}

/// The answer to an HTTP/1.1 request without `Host` (RFC 9112 §3.2: a 400).
pub(super) fn host_error(fault: guard::HostFault) -> ApiError {
    let message = match fault {
        guard::HostFault::Missing => {
            "an HTTP/1.1 request must carry a `Host` header (RFC 9112 §3.2); this one has none"
        }
        guard::HostFault::Several => {
            "a request must carry one `Host` header (RFC 9112 §3.2); this one has several"
        }
    };
    ApiError::new(400, "invalid_request_error", fault.code(), message)
}

async fn answer(gw: Arc<Gateway>, req: Request<Incoming>, mut ask: Ask) -> Response<Body> {
    // From here every request ends in one log line and one count: an answer, a refusal,
    // or, when the client goes away or the drain deadline cuts it, `cancelled`.
    let method = ask.method.clone();
    let path = ask.path.clone();
    let flavor = ask.flavor;
    // The browser guards come first, on every path: a rebound page must not read even
    // `/metrics` or `/readyz`.
    let host = req.headers().get(HOST).map(HeaderValue::as_bytes);
    if let Some(fault) = guard::host_fault(req.version(), req.headers()) {
        return ask.refuse(fault.code(), host_error(fault), "");
    }
    // An absolute-form target (`POST http://name/v1/...`) names the host itself, and
    // RFC 9112 §3.2.2 has it win over `Host`: both must name loopback, or a rebound
    // page passes with a loopback `Host` beside a foreign target.
    let target = req.uri().authority().map(|a| a.as_str().as_bytes());
    let named = |h: Option<&[u8]>| guard::host_allowed(gw.settings.listen, h);
    if !named(host) || target.is_some_and(|t| !named(Some(t))) {
        return ask.refuse("misdirected_host", ApiError::new(421, "invalid_request_error", "misdirected_request",
            "this gateway listens on a loopback address and answers only `Host: localhost`, `127.0.0.1` or `[::1]` (with the port), and a request target naming one of them"), "");
    }
    if let Some(origin) = req.headers().get(ORIGIN) {
        if !guard::origin_allowed(&gw.settings.allow_origins, origin.as_bytes()) {
            return ask.refuse("origin_not_allowed", ApiError::new(403, "permission_error", "origin_not_allowed",
                format!("requests from a web page (`Origin: {}`) are refused unless `poolctl serve --allow-origin` lists the origin",
                    String::from_utf8_lossy(origin.as_bytes()))), "");
        }
        if method == Method::OPTIONS {
            ask.quiet();
            return preflight(req.headers());
        }
    }
    match (&method, path.as_str()) {
        // HEAD answers as GET does; hyper sends the head without the body. Probes and
        // scrapes are not requests worth a log line each: an orchestrator sends one a
        // second.
        (&Method::GET | &Method::HEAD, "/healthz") => {
            ask.quiet();
            return json_response(200, br#"{"status":"ok"}"#.to_vec());
        }
        (&Method::GET | &Method::HEAD, "/readyz") => {
            ask.quiet();
            return readyz(&gw).await;
        }
        (&Method::GET | &Method::HEAD, "/metrics") => {
            // The scrape names routes, workflows and health, as `/v1/models` does: the
            // same token guards both (Prometheus sends it with `authorization:`).
            if !authorized(&gw, req.headers()) {
                return ask.refuse("unauthorized", unauthorized(&gw.settings.token_var), "");
            }
            ask.quiet();
            return metrics(&gw).await;
        }
        _ => {}
    }
    if !authorized(&gw, req.headers()) {
        return ask.refuse("unauthorized", unauthorized(&gw.settings.token_var), "");
    }
    let wants = match (&method, path.as_str()) {
        (&Method::GET, "/v1/models") => {
            ask.quiet();
            return json_response(200, gw.lineup.models_json());
        }
        // A route's id holds a `/`: everything after the prefix is the id.
        (&Method::GET, p) if p.starts_with("/v1/models/") => {
            let id = p["/v1/models/".len()..]
                .replace("%2F", "/")
                .replace("%2f", "/");
            return match gw.lineup.model_json(&id) {
                Ok(body) => {
                    ask.quiet();
                    json_response(200, body)
                }
                Err(e) => ask.refuse("unknown_model", e, &id),
            };
        }
        // The conversations the gateway keeps for the Responses API.
        (&Method::GET | &Method::DELETE, p) if p.starts_with("/v1/responses/") => {
            let rest = p["/v1/responses/".len()..].to_string();
            let query = req.uri().query().map(str::to_string);
            return super::responses::stored(ask, &method, &rest, query.as_deref()).await;
        }
        (&Method::POST, "/v1/chat/completions" | "/v1/messages" | "/v1/responses") => Wants::Chat,
        (&Method::POST, "/v1/embeddings") => Wants::Embed,
        (&Method::POST, "/v1/rerank") => Wants::Rerank,
        (
            _,
            "/v1/models"
            | "/v1/chat/completions"
            | "/v1/messages"
            | "/v1/responses"
            | "/v1/embeddings"
            | "/v1/rerank",
        ) => {
            let e = ApiError::new(
                405,
                "invalid_request_error",
                "method_not_allowed",
                format!("{method} is not allowed on {path}"),
            );
            return ask.refuse("bad_method", e, "");
        }
        _ => {
            return ask.refuse("unknown_path", ApiError::new(404, "invalid_request_error", "unknown_url",
                format!("no such endpoint: {method} {path} (this gateway serves /v1/chat/completions, /v1/messages, /v1/responses, /v1/embeddings, /v1/rerank, /v1/models)")), "");
        }
    };
    if gw.draining() {
        let e = ApiError::new(
            503,
            "unavailable",
            "draining",
            "the gateway is shutting down",
        );
        return ask.refuse("draining", e, "");
    }
    if !guard::is_json(req.headers().get(CONTENT_TYPE).map(HeaderValue::as_bytes)) {
        let e = ApiError::new(
            415,
            "invalid_request_error",
            "unsupported_media_type",
            format!("{path} takes a JSON body: send `Content-Type: application/json`"),
        );
        return ask.refuse("unsupported_media_type", e, "");
    }
    if let Some(coding) = guard::encoded(req.headers().get_all(CONTENT_ENCODING)) {
        // Read as it stands, a compressed body would only be "not valid JSON"; and
        // inflating one would let a few kilobytes claim the body budget's megabytes.
        let e = ApiError::new(
            415,
            "invalid_request_error",
            "unsupported_media_type",
            format!(
                "{path} takes an uncompressed body: `Content-Encoding: {coding}` is not accepted"
            ),
        );
        return ask.refuse("unsupported_media_type", e, "");
    }
    let (parts, body) = req.into_parts();
    let (body, _body_permit) = match read_body(&gw, &parts.headers, body).await {
        Ok(b) => b,
        // No one reads the answer: the Ask's line says `cancelled`.
        Err(("client_gone", e)) => return refusal(&e, flavor),
        Err((why, e)) => return ask.refuse(why, e, ""),
    };
    ask.priority = match parts
        .headers
        .get("x-poolctl-priority")
        .map(|v| v.to_str().ok().and_then(adapter::parse_priority))
    {
        None => Priority::default(),
        Some(Some(p)) => p,
        Some(None) => {
            let e = ApiError::bad_request(
                "`x-poolctl-priority` must be interactive, retry, background or speculative",
            );
            return ask.refuse("bad_request", e, "");
        }
    };
    ask.session = match parts.headers.get("x-poolctl-session").map(|v| v.to_str()) {
        None => None,
        Some(Ok(id)) => Some(id.to_string()),
        Some(Err(_)) => {
            let e = ApiError::bad_request("`x-poolctl-session` must be visible ASCII");
            return ask.refuse("bad_request", e, "");
        }
    };
    // Every id is a pin the router keeps: a bound on its length bounds the memory a
    // client can take with them (the count and idle expiry bound the rest).
    let max_id = gw.router.sessions().limits().max_id_bytes;
    if ask.session.as_ref().is_some_and(|s| s.len() > max_id) {
        let e = ApiError::bad_request(format!(
            "`x-poolctl-session` is longer than {max_id} bytes (`sessions.max_id_bytes`)"
        ));
        return ask.refuse("bad_request", e, "");
    }
    // The drain deadline ends what is still routing: the client gets a 503 now, not a
    // connection closed under it, and the log line says `cancelled`.
    let ending = ask.ending();
    let work = async {
        match wants {
            Wants::Chat if flavor == Flavor::Responses => super::responses::create(ask, body).await,
            Wants::Chat => chat(ask, body, &parts.headers).await,
            Wants::Embed => embed(ask, body).await,
            Wants::Rerank => rerank(ask, body).await,
        }
    };
    // The cut is marked before `work` (and the Ask in it) is dropped, so that the
    // request's line says why it ended.
    let cut = async {
        gw.until_cut().await;
        ending.cut(503);
    };
    tokio::select! {
        r = work => r,
        _ = cut => {
            let mut r = refusal(
                &ApiError::new(503, "unavailable", "draining",
                    "the gateway is shutting down: its drain deadline cut this request"),
                flavor,
            );
            let calls = ending.calls().load(std::sync::atomic::Ordering::Relaxed);
            trace_headers(r.headers_mut(), None, "cancelled", calls as usize);
            r
        }
    }
}

async fn readyz(gw: &Gateway) -> Response<Body> {
    let mut not_ready = Vec::new();
    for tier in gw.lineup.tiers() {
        match adapter::tier_ready(&gw.router, tier).await {
            Ok(true) => {}
            Ok(false) => not_ready.push(format!("tier `{}` has no ready route", tier.name)),
            Err(e) => not_ready.push(format!("health store unreachable: {}", gw.mask(&e))),
        }
    }
    if gw.draining() {
        not_ready.push("draining".into());
    }
    let mut body = serde_json::Map::new();
    if let Some(r) = &gw.readiness {
        if let Err(reason) = store_answers(r).await {
            let reason = gw.mask(&reason);
            // A shared store's outage is one `local_share` is built to survive: every
            // process of a fleet going out of rotation at once would turn a Redis
            // outage into a full one. A SQLite file that cannot be read, or a fleet
            // that sheds without its store (`fail_closed`), cannot serve as it should.
            let survivable = r.shared && r.on_store_error == crate::store::OnStoreError::LocalShare;
            body.insert(
                "store".into(),
                if survivable {
                    "degraded"
                } else {
                    "unreachable"
                }
                .into(),
            );
            body.insert("reason".into(), reason.clone().into());
            if !survivable {
                not_ready.push(format!("state store unreachable: {reason}"));
            }
        }
    }
    let ready = not_ready.is_empty();
    body.insert("ready".into(), ready.into());
    if !ready {
        body.insert("why".into(), not_ready.into());
    }
    let status = if ready { 200 } else { 503 };
    json_response(status, serde_json::to_vec(&body).unwrap_or_default())
}

/// Whether the state store answers a read now: one key's read, bounded by the store's
/// own deadline and, whatever the store, by `READY_DEADLINE`.
async fn store_answers(r: &super::Readiness) -> Result<(), String> {
    const READY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);
    let Ok(probe) = crate::core::vocab::Route::parse("poolctl/readyz") else {
        return Ok(());
    };
    match tokio::time::timeout(READY_DEADLINE, r.store.get(&probe)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "no answer within {} ms",
            READY_DEADLINE.as_millis()
        )),
    }
}

/// Reads the whole body, at most `max_body_bytes` of it and within `body_read_timeout`.
/// Its bytes are first taken from the gateway's budget of buffered body bytes (frame by
/// frame, or all at once for a declared length), and the permit lives as long as the
/// request: many clients sending large bodies at once wait their turn instead of taking
/// the process's memory (issue 9, item 7).
async fn read_body(
    gw: &Gateway,
    headers: &HeaderMap,
    mut body: Incoming,
) -> Result<(Bytes, BodyPermit), (&'static str, ApiError)> {
    let cap = gw.settings.max_body_bytes;
    let too_large = || {
        let e = ApiError::new(
            413,
            "invalid_request_error",
            "request_too_large",
            format!("the request body is larger than the gateway's cap of {cap} bytes"),
        );
        ("body_too_large", e)
    };
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > cap as u64) {
        return Err(too_large());
    }
    let budget = gw.body_budget.clone();
    let read = async {
        // Taken as bytes arrive, not for the declared length: a client that declares
        // 10 MiB and sends nothing holds nothing.
        let mut permit = BodyPermit::none();
        let mut buf = bytes::BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                // A body cut short is a client that went away, not a bad request.
                let why = if e.is_incomplete_message() {
                    "client_gone"
                } else {
                    "bad_body"
                };
                let e = ApiError::bad_request(format!("the request body could not be read: {e}"));
                (why, e)
            })?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers carry nothing a request needs
            };
            if buf.len() + data.len() > cap {
                return Err(too_large());
            }
            let need = buf.len() + data.len();
            if need > permit.held {
                if budget.available_permits() >= need - permit.held {
                    permit.grow(&budget, need, &gw.metrics).await;
                } else {
                    // No room now. Waiting for more while holding a part would let two
                    // large bodies each hold half the budget and wait on the other until
                    // both time out: the part is given back, and the whole body (as
                    // declared, else the cap) is waited for at once, in turn.
                    let whole = declared
                        .map_or(cap, |n| n as usize)
                        .max(need)
                        .min(gw.body_budget_total());
                    if whole > permit.held {
                        permit = BodyPermit::none();
                        permit.grow(&budget, whole, &gw.metrics).await;
                    }
                }
            }
            if buf.is_empty() && declared.is_some_and(|n| n as usize == data.len()) {
                return Ok((data, permit)); // the whole body in one frame: no copy
            }
            buf.extend_from_slice(&data);
        }
        Ok((buf.freeze(), permit))
    };
    match tokio::time::timeout(gw.settings.body_read_timeout, read).await {
        Ok(r) => r,
        Err(_) => {
            let e = ApiError::new(
                408,
                "invalid_request_error",
                "request_timeout",
                format!(
                    "the request body did not arrive within {} ms",
                    gw.settings.body_read_timeout.as_millis()
                ),
            );
            Err(("body_timeout", e))
        }
    }
}

fn model_of(report: &Report, fallback: &str) -> String {
    report
        .served_by
        .as_ref()
        .map(|r| r.model().to_string())
        .unwrap_or_else(|| fallback.to_string())
}

/// The wire of the API a client spoke.
fn wire_of(flavor: Flavor) -> Wire {
    match flavor {
        Flavor::OpenAi => Wire::OpenAi,
        Flavor::Anthropic => Wire::Anthropic,
        Flavor::Responses => Wire::Responses,
    }
}

async fn chat(ask: Ask, body: Bytes, headers: &HeaderMap) -> Response<Body> {
    if let Some(field) = crate::wire::passthrough::duplicated(&body) {
        let e = ApiError::bad_request(crate::wire::passthrough::duplicated_message(field));
        return ask.refuse("bad_request", e, "");
    }
    let parsed = match ask.flavor {
        // A Responses body is read by `responses::create`, never here.
        Flavor::OpenAi | Flavor::Responses => ingress::openai_chat(&body),
        Flavor::Anthropic => ingress::anthropic_messages(&body),
    };
    let mut c = match parsed {
        Ok(c) => c,
        Err(e) => return ask.refuse("bad_request", e, ""),
    };
    let wire = wire_of(ask.flavor);
    c.request.original = ingress::original(body, wire, headers, c.untranslatable.as_ref());
    if headers.contains_key("anthropic-beta") {
        // An Anthropic client's is forwarded on its own wire. Translated (to another
        // wire, or from an OpenAI client's request) its features may need fields the
        // translation does not carry: named as dropped wherever the body is not the
        // client's own.
        c.request.unmapped.push(crate::core::request::Unmapped {
            name: "anthropic-beta".into(),
            semantic: false,
        });
    }
    let gw = ask.gw.clone();
    let choice = match gw.lineup.choose(&c.model, Wants::Chat) {
        Ok(ch) => ch,
        Err(e) => return ask.refuse("unknown_model", e, &c.model),
    };
    ask.chose(&c.model, choice.workflow);
    if let Some(e) = &c.untranslatable {
        // Without the client's body (no top-level `model` string to replace) no route
        // can carry what the canonical form could not read.
        if c.request.original.is_none() {
            return ask.refuse("bad_request", e.clone(), &c.model);
        }
    }
    if c.stream {
        return super::stream::stream(ask, c).await;
    }
    let prompt = gw
        .settings
        .log_prompts
        .then(|| last_user_text(&c))
        .flatten();
    let rt = Stopwatch::start();
    let untranslatable = c.untranslatable.is_some();
    let Called { mut report, reply } =
        adapter::chat(&gw.router, ask.target(&choice), c.request, untranslatable).await;
    let in_router = rt.elapsed();
    // Reasoning another wire showed cannot become a signed Anthropic `thinking`
    // block: it is dropped, and named (fidelity.md §2).
    let unsigned = ask.flavor == Flavor::Anthropic
        && reply.as_ref().is_some_and(|r| {
            r.reasoning.is_some() && r.raw.as_ref().is_none_or(|w| w.wire != wire)
        });
    if unsigned {
        // Named like any dropped field: the header, the log line and the metric.
        super::ask::name_dropped(&mut report, "reasoning_content");
    }
    let response = match reply {
        // Same wire: the answer as the upstream sent it (keys masked by `full`).
        Some(Reply { raw: Some(raw), .. }) if raw.wire == wire => json_response(200, raw.bytes),
        Some(reply) => {
            let n = gw.next_id();
            let body = match ask.flavor {
                Flavor::OpenAi | Flavor::Responses => egress::openai_completion(
                    &format!("chatcmpl-poolctl-{n}"),
                    crate::core::clock::wall_now_ms() / 1000,
                    &reply,
                ),
                Flavor::Anthropic => egress::anthropic_message(&format!("msg_poolctl_{n}"), &reply),
            };
            json_response(200, body)
        }
        None => error_response(&ask.failure(&choice, &report).await, ask.flavor),
    };
    ask.answered(&choice, &c.model, &report, response, in_router, prompt)
}

async fn embed(ask: Ask, body: Bytes) -> Response<Body> {
    if let Some(field) = crate::wire::passthrough::duplicated(&body) {
        let e = ApiError::bad_request(crate::wire::passthrough::duplicated_message(field));
        return ask.refuse("bad_request", e, "");
    }
    let mut e = match ingress::embeddings(&body) {
        Ok(e) => e,
        Err(err) => return ask.refuse("bad_request", err, ""),
    };
    e.original = ingress::original(body, Wire::OpenAi, &HeaderMap::new(), None);
    let gw = ask.gw.clone();
    let choice = match gw.lineup.choose(&e.model, Wants::Embed) {
        Ok(ch) => ch,
        Err(err) => return ask.refuse("unknown_model", err, &e.model),
    };
    ask.chose(&e.model, choice.workflow);
    let rt = Stopwatch::start();
    let out = adapter::embed(&gw.router, ask.target(&choice), &e).await;
    let in_router = rt.elapsed();
    let report = &out.report;
    let mut response = match (&out.vectors, report.outcome) {
        // Same wire: the answer as the upstream sent it (keys masked by `full`).
        (Some(_), Outcome::Success | Outcome::Degraded) if out.raw.is_some() => {
            let bytes = out
                .raw
                .as_ref()
                .map(|r| r.bytes.clone())
                .unwrap_or_default();
            json_response(200, bytes)
        }
        (Some(v), Outcome::Success | Outcome::Degraded) => json_response(
            200,
            egress::embeddings(&model_of(report, &e.model), v, e.base64, out.usage.as_ref()),
        ),
        _ => error_response(&ask.failure(&choice, report).await, ask.flavor),
    };
    trace_headers(
        response.headers_mut(),
        report.served_by.as_ref(),
        report.outcome.as_str(),
        report.attempts.len(),
    );
    // What a route of another wire was called without (`user`, unknown fields): the
    // header, and by `finish` the log line and the metric (fidelity.md §3, §6).
    dropped_header(response.headers_mut(), super::ask::served_dropped(report));
    ask.finish(
        &choice,
        &e.model,
        report,
        response.status().as_u16(),
        in_router,
        None,
    );
    response
}

async fn rerank(ask: Ask, body: Bytes) -> Response<Body> {
    if let Some(field) = crate::wire::passthrough::duplicated(&body) {
        let e = ApiError::bad_request(crate::wire::passthrough::duplicated_message(field));
        return ask.refuse("bad_request", e, "");
    }
    let mut r = match ingress::rerank(&body) {
        Ok(r) => r,
        Err(err) => return ask.refuse("bad_request", err, ""),
    };
    // Every rerank route speaks the shape `/v1/rerank` takes (Cohere / Jina, on an
    // OpenAI-compatible endpoint): it gets the client's body with only `model` replaced.
    r.original = ingress::original(body, Wire::OpenAi, &HeaderMap::new(), None);
    let gw = ask.gw.clone();
    let choice = match gw.lineup.choose(&r.model, Wants::Rerank) {
        Ok(ch) => ch,
        Err(err) => return ask.refuse("unknown_model", err, &r.model),
    };
    ask.chose(&r.model, choice.workflow);
    let rt = Stopwatch::start();
    let out = adapter::rerank(&gw.router, ask.target(&choice), &r).await;
    let in_router = rt.elapsed();
    let report = &out.report;
    let mut response = match (&out.ranking, report.outcome) {
        // Same wire: the answer as the upstream sent it (keys masked by `full`).
        (Some(_), Outcome::Success | Outcome::Degraded) if out.raw.is_some() => {
            let bytes = out
                .raw
                .as_ref()
                .map(|r| r.bytes.clone())
                .unwrap_or_default();
            json_response(200, bytes)
        }
        // The gateway's own answer: `degrade`'s recall order, or a library-built call.
        (Some(ranking), Outcome::Success | Outcome::Degraded) => {
            let id = format!("rerank-poolctl-{}", gw.next_id());
            json_response(
                200,
                egress::rerank(
                    &id,
                    &model_of(report, &r.model),
                    ranking,
                    &r.documents,
                    r.return_documents,
                ),
            )
        }
        _ => error_response(&ask.failure(&choice, report).await, ask.flavor),
    };
    trace_headers(
        response.headers_mut(),
        report.served_by.as_ref(),
        report.outcome.as_str(),
        report.attempts.len(),
    );
    ask.finish(
        &choice,
        &r.model,
        report,
        response.status().as_u16(),
        in_router,
        None,
    );
    response
}
