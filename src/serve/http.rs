//! The HTTP pieces every gateway answer shares, whole or streamed: the body type, a
//! masked whole body, error and refusal responses in the client's API shape, and the
//! `x-poolctl-*` trace headers every answer carries (spec/cli.md).

use super::errors::{ApiError, Flavor};
use crate::core::vocab::{Outcome, Route};
use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::{HeaderMap, Response, StatusCode};
use std::convert::Infallible;
use std::sync::Mutex;

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// A whole response body, with every registered key masked: whatever an upstream echoed
/// (a key quoted in an answer, an error, a tool call) never leaves the gateway.
pub(super) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(super::errors::mask_body(bytes.into())).boxed_unsync()
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each critical section is one encoder call: a panic cannot leave it half-done.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// Names built at compile time: `from_static` checks its argument, which at run time
// cost a table look-up per header per response.
const SERVED_BY: HeaderName = HeaderName::from_static("x-poolctl-served-by");
const OUTCOME: HeaderName = HeaderName::from_static("x-poolctl-outcome");
const ATTEMPTS: HeaderName = HeaderName::from_static("x-poolctl-attempts");
const SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");
const DROPPED: HeaderName = HeaderName::from_static("x-poolctl-dropped-params");

/// `x-poolctl-dropped-params: seed,logit_bias`: the request fields the serving route
/// was called without (spec/fidelity.md §3); absent when none was.
pub(super) fn dropped_header(h: &mut HeaderMap, dropped: &[String]) {
    if dropped.is_empty() {
        return;
    }
    // Clients choose field names: one a header cannot hold (a control character, a
    // comma) is `other` here, as in the metric, and never costs the others their place.
    let names: Vec<&str> = dropped
        .iter()
        .map(|n| {
            let fits = n.bytes().all(|b| b.is_ascii_graphic() && b != b',');
            if fits {
                n.as_str()
            } else {
                "other"
            }
        })
        .collect();
    set(h, DROPPED, &names.join(","));
}

fn set(headers: &mut HeaderMap, name: HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(name, v);
    }
}

pub(super) fn json_response(status: u16, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(full(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// An error response: the shape of `flavor`, `x-should-retry: false`, `Retry-After`.
pub fn error_response(e: &ApiError, flavor: Flavor) -> Response<Body> {
    let mut r = json_response(e.status, e.body(flavor));
    let h = r.headers_mut();
    h.insert(SHOULD_RETRY, HeaderValue::from_static("false"));
    if let Some(secs) = e.retry_after_secs {
        h.insert(hyper::header::RETRY_AFTER, HeaderValue::from(secs));
    }
    r
}

pub(super) fn trace_headers(
    h: &mut HeaderMap,
    served_by: Option<&Route>,
    outcome: &'static str,
    attempts: usize,
) {
    // Every answer carries all three (spec/cli.md): empty when no route served it, so a
    // client can read the header without first asking whether it is there.
    match served_by {
        Some(route) => set(h, SERVED_BY, route.as_str()),
        None => {
            h.insert(SERVED_BY, HeaderValue::from_static(""));
        }
    }
    // An outcome is one of the vocabulary's words: referenced as it is, not checked
    // and copied into a new buffer on every answer.
    h.insert(OUTCOME, HeaderValue::from_static(outcome));
    h.insert(ATTEMPTS, HeaderValue::from(attempts));
}

/// An error response for a request the gateway refused before any route was called:
/// outcome `failed`, no route, no attempt.
pub(super) fn refusal(e: &ApiError, flavor: Flavor) -> Response<Body> {
    let mut r = error_response(e, flavor);
    trace_headers(r.headers_mut(), None, Outcome::Failed.as_str(), 0);
    r
}
