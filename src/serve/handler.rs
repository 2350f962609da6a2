//! One HTTP request through the gateway: authenticate, read a capped body, parse it,
//! choose the chain, call the router through the adapter, render the answer or the
//! error, count it and log one line. Streams continue in `stream`.

use super::adapter::{self, Called, Priority, Reply};
use super::ask::{last_user_text, served_dropped, Ask};
use super::choose::Wants;
use super::egress;
use super::errors::{ApiError, Flavor};
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
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{HeaderMap, Method, Request, Response};
use std::sync::Arc;

/// Constant-time comparison, so the token cannot be guessed byte by byte from timing.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The client's credential: `Authorization: Bearer …`, or `x-api-key` (Anthropic).
fn credential(headers: &HeaderMap) -> Option<&[u8]> {
    if let Some(v) = headers.get("authorization") {
        let v = v.as_bytes();
        if v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ") {
            return Some(&v[7..]);
        }
    }
    headers.get("x-api-key").map(HeaderValue::as_bytes)
}

fn flavor_of(path: &str) -> Flavor {
    if path == "/v1/messages" {
        Flavor::Anthropic
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
pub async fn handle(gw: Arc<Gateway>, req: Request<Incoming>) -> Response<Body> {
    let sw = Stopwatch::start();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let flavor = flavor_of(&path);
    match (&method, path.as_str()) {
        (&Method::GET, "/healthz") => return json_response(200, br#"{"status":"ok"}"#.to_vec()),
        (&Method::GET, "/readyz") => return readyz(&gw).await,
        (&Method::GET, "/metrics") => {
            let health = adapter::route_states(&gw.router, &gw.lineup.routes()).await;
            let buckets = gw.router.buckets();
            let now = crate::core::clock::wall_now_ms();
            // Levels as admission sees them: the fleet's when the buckets are shared.
            let levels = match gw.router.shared_buckets() {
                Some(shared) => shared.snapshot(now).await,
                None => buckets.snapshot(now),
            };
            let mut body = gw.metrics.render(&health, &buckets.sheds(), &levels);
            body.push_str(&format!(
                "# HELP poolctl_buffered_body_bytes Request-body bytes buffered now, over all requests.\n\
                 # TYPE poolctl_buffered_body_bytes gauge\npoolctl_buffered_body_bytes {}\n\
                 # HELP poolctl_body_waits_total Request bodies that waited for the buffered-body budget.\n\
                 # TYPE poolctl_body_waits_total counter\npoolctl_body_waits_total {}\n",
                gw.buffered_body_bytes(),
                gw.metrics.body_waits()
            ));
            body.push_str(&degraded_metrics(&gw));
            let mut r = Response::new(full(body));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            return r;
        }
        _ => {}
    }
    if let Some(token) = &gw.settings.token {
        if !credential(req.headers()).is_some_and(|c| same(c, token.expose().as_bytes())) {
            gw.metrics.rejected("unauthorized");
            let e = ApiError::new(401, "authentication_error", "invalid_api_key",
                format!("this gateway requires the token in ${} as `Authorization: Bearer` (or `x-api-key`)", super::TOKEN_ENV));
            return refusal(&e, flavor);
        }
    }
    let wants = match (&method, path.as_str()) {
        (&Method::GET, "/v1/models") => return json_response(200, gw.lineup.models_json()),
        // A route's id holds a `/`: everything after the prefix is the id.
        (&Method::GET, p) if p.starts_with("/v1/models/") => {
            let id = p["/v1/models/".len()..]
                .replace("%2F", "/")
                .replace("%2f", "/");
            return match gw.lineup.model_json(&id) {
                Ok(body) => json_response(200, body),
                Err(e) => refusal(&e, flavor),
            };
        }
        (&Method::POST, "/v1/chat/completions" | "/v1/messages") => Wants::Chat,
        (&Method::POST, "/v1/embeddings") => Wants::Embed,
        (&Method::POST, "/v1/rerank") => Wants::Rerank,
        (
            _,
            "/v1/models"
            | "/v1/chat/completions"
            | "/v1/messages"
            | "/v1/embeddings"
            | "/v1/rerank",
        ) => {
            gw.metrics.rejected("bad_method");
            return refusal(
                &ApiError::new(
                    405,
                    "invalid_request_error",
                    "method_not_allowed",
                    format!("{method} is not allowed on {path}"),
                ),
                flavor,
            );
        }
        _ => {
            gw.metrics.rejected("unknown_path");
            return refusal(&ApiError::new(404, "invalid_request_error", "unknown_url",
                format!("no such endpoint: {method} {path} (this gateway serves /v1/chat/completions, /v1/messages, /v1/embeddings, /v1/rerank, /v1/models)")), flavor);
        }
    };
    if gw.draining() {
        return refusal(
            &ApiError::new(
                503,
                "unavailable",
                "draining",
                "the gateway is shutting down",
            ),
            flavor,
        );
    }
    let (parts, body) = req.into_parts();
    let (body, _body_permit) = match read_body(&gw, &parts.headers, body).await {
        Ok(b) => b,
        Err(e) => return refusal(&e, flavor),
    };
    let priority = match parts
        .headers
        .get("x-poolctl-priority")
        .map(|v| v.to_str().ok().and_then(adapter::parse_priority))
    {
        None => Priority::default(),
        Some(Some(p)) => p,
        Some(None) => {
            gw.metrics.rejected("bad_request");
            return refusal(
                &ApiError::bad_request(
                    "`x-poolctl-priority` must be interactive, retry, background or speculative",
                ),
                flavor,
            );
        }
    };
    let session = parts
        .headers
        .get("x-poolctl-session")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let ask = Ask {
        gw: gw.clone(),
        method,
        path,
        flavor,
        priority,
        session,
        sw,
    };
    match wants {
        Wants::Chat => chat(ask, body, &parts.headers).await,
        Wants::Embed => embed(ask, body).await,
        Wants::Rerank => rerank(ask, body).await,
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
    if not_ready.is_empty() {
        json_response(200, br#"{"ready":true}"#.to_vec())
    } else {
        json_response(
            503,
            serde_json::to_vec(&serde_json::json!({"ready": false, "why": not_ready}))
                .unwrap_or_default(),
        )
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
) -> Result<(Bytes, BodyPermit), ApiError> {
    let cap = gw.settings.max_body_bytes;
    let too_large = || {
        gw.metrics.rejected("body_too_large");
        ApiError::new(
            413,
            "invalid_request_error",
            "request_too_large",
            format!("the request body is larger than the gateway's cap of {cap} bytes"),
        )
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
                gw.metrics.rejected("bad_body");
                ApiError::bad_request(format!("the request body could not be read: {e}"))
            })?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers carry nothing a request needs
            };
            if buf.len() + data.len() > cap {
                return Err(too_large());
            }
            if buf.len() + data.len() > permit.held {
                permit
                    .grow(&budget, buf.len() + data.len(), &gw.metrics)
                    .await;
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
            gw.metrics.rejected("body_timeout");
            Err(ApiError::new(
                408,
                "invalid_request_error",
                "request_timeout",
                format!(
                    "the request body did not arrive within {} ms",
                    gw.settings.body_read_timeout.as_millis()
                ),
            ))
        }
    }
}

/// A request body's share of the gateway's buffered-body budget, one permit a byte.
struct BodyPermit {
    permits: Option<tokio::sync::OwnedSemaphorePermit>,
    held: usize,
}

impl BodyPermit {
    fn none() -> Self {
        BodyPermit {
            permits: None,
            held: 0,
        }
    }

    /// Holds `total` bytes of the budget in all (waiting for them to be free).
    async fn grow(
        &mut self,
        budget: &Arc<tokio::sync::Semaphore>,
        total: usize,
        metrics: &super::metrics::Metrics,
    ) {
        let more = total.saturating_sub(self.held);
        if more == 0 {
            return;
        }
        let n = u32::try_from(more).unwrap_or(u32::MAX);
        if budget.available_permits() < n as usize {
            metrics.body_waited();
        }
        // The semaphore is never closed, so acquiring only waits.
        if let Ok(p) = budget.clone().acquire_many_owned(n).await {
            match &mut self.permits {
                Some(held) => held.merge(p),
                None => self.permits = Some(p),
            }
            self.held += n as usize;
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
    }
}

async fn chat(ask: Ask, body: Bytes, headers: &HeaderMap) -> Response<Body> {
    let parsed = match ask.flavor {
        Flavor::OpenAi => ingress::openai_chat(&body),
        Flavor::Anthropic => ingress::anthropic_messages(&body),
    };
    let mut c = match parsed {
        Ok(c) => c,
        Err(e) => return ask.refuse("bad_request", e, ""),
    };
    let wire = wire_of(ask.flavor);
    c.request.original = ingress::original(body, wire, headers, c.untranslatable.as_ref());
    if wire == Wire::Anthropic && headers.contains_key("anthropic-beta") {
        // Forwarded on the Anthropic wire; another wire has no place for it.
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
                Flavor::OpenAi => egress::openai_completion(
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
    let mut response = response;
    trace_headers(
        response.headers_mut(),
        report.served_by.as_ref(),
        report.outcome.as_str(),
        report.attempts.len(),
    );
    dropped_header(response.headers_mut(), served_dropped(&report));
    ask.finish(
        &choice,
        &c.model,
        &report,
        response.status().as_u16(),
        in_router,
        prompt,
    );
    response
}

async fn embed(ask: Ask, body: Bytes) -> Response<Body> {
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
    let r = match ingress::rerank(&body) {
        Ok(r) => r,
        Err(err) => return ask.refuse("bad_request", err, ""),
    };
    let gw = ask.gw.clone();
    let choice = match gw.lineup.choose(&r.model, Wants::Rerank) {
        Ok(ch) => ch,
        Err(err) => return ask.refuse("unknown_model", err, &r.model),
    };
    let rt = Stopwatch::start();
    let out = adapter::rerank(&gw.router, ask.target(&choice), &r).await;
    let in_router = rt.elapsed();
    let report = &out.report;
    let mut response = match (&out.ranking, report.outcome) {
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
