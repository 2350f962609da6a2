//! One HTTP exchange with a provider, bounded in bytes and time: the call a codec
//! builds (`HttpCall`), the shared client, sending it and reading a capped answer, and
//! turning what went wrong on the way into an `UpstreamFailure`.

use super::codec::{bad_success, BadSuccess};
use crate::classify::failure::{Headers, Transport, UpstreamFailure};
use serde_json::Value;
use std::time::Duration;

/// Bodies past this are not read further: an error needs only its first bytes to be
/// classified, and an endless body must never exhaust memory.
pub const ERROR_BODY_CAP: usize = 64 * 1024;

/// The largest success body accepted.
pub const SUCCESS_BODY_CAP: usize = 8 * 1024 * 1024;

/// A request ready to send: the wire's URL, headers and JSON body.
#[derive(Debug)]
pub struct HttpCall {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: CallBody,
}

/// The body of a call: one the codec built, or the client's own bytes (same wire,
/// `passthrough`), sent as they are.
#[derive(Debug)]
pub enum CallBody {
    Json(Value),
    Raw(bytes::Bytes),
}

impl From<Value> for CallBody {
    fn from(v: Value) -> Self {
        CallBody::Json(v)
    }
}

impl CallBody {
    /// The built body, to add a field to; `None` for the client's own bytes.
    pub fn json_mut(&mut self) -> Option<&mut Value> {
        match self {
            CallBody::Json(v) => Some(v),
            CallBody::Raw(_) => None,
        }
    }

    /// Whether this is the client's own body.
    pub fn is_raw(&self) -> bool {
        matches!(self, CallBody::Raw(_))
    }
}

/// A POST of `call` (its URL, headers and body) on `client`.
pub fn post(client: &reqwest::Client, call: &HttpCall) -> reqwest::RequestBuilder {
    let builder = match parsed_url(&call.url) {
        Some(url) => client.post(url),
        // Not a URL: reqwest parses it again and reports the error it finds.
        None => client.post(&call.url),
    };
    let mut builder = match &call.body {
        CallBody::Json(v) => builder.json(v),
        // Refcounted: the client's bytes are not copied.
        CallBody::Raw(b) => builder
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(b.clone()),
    };
    for (name, value) in &call.headers {
        builder = builder.header(*name, value);
    }
    builder
}

/// URLs parsed on this thread, most recently used first. A route's URLs are the same
/// on every request, and parsing one (the url crate's full WHATWG parse, IDNA mapping of
/// the host, the serialisation of an IP address) was a few percent of the gateway's
/// CPU per request; a hit costs a string comparison and a clone. Per thread, so no
/// lock: each of `serve`'s lanes keeps its own. Few entries: a gateway has a handful
/// of routes, and a miss is only the parse it replaces.
const PARSED_URLS: usize = 16;

thread_local! {
    static URLS: std::cell::RefCell<Vec<(Box<str>, reqwest::Url)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// `url` parsed, from this thread's cache when it was parsed before; `None` when it
/// does not parse.
fn parsed_url(url: &str) -> Option<reqwest::Url> {
    URLS.with(|cell| {
        let mut urls = cell.borrow_mut();
        if let Some(i) = urls.iter().position(|(s, _)| &**s == url) {
            if i > 0 {
                let hit = urls.remove(i);
                urls.insert(0, hit);
            }
            return Some(urls[0].1.clone());
        }
        let parsed = reqwest::Url::parse(url).ok()?;
        urls.truncate(PARSED_URLS - 1);
        urls.insert(0, (url.into(), parsed.clone()));
        Some(parsed)
    })
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

/// A 2xx that parsed as JSON, ready for the wire's success parser.
pub struct JsonReply {
    pub status: u16,
    pub headers: Headers,
    pub json: Value,
    /// The body as the upstream sent it.
    pub raw: bytes::Bytes,
}

/// A 2xx body within `SUCCESS_BODY_CAP`, not parsed yet.
pub struct BytesReply {
    pub status: u16,
    pub headers: Headers,
    pub raw: Vec<u8>,
    /// `raw`'s share of the process's answer bytes (`held`), given back with it.
    pub held: super::held::Holding,
}

impl BytesReply {
    /// The body parsed as JSON, or the bad success a body that is not JSON is (boxed:
    /// an `UpstreamFailure` is large; the async callers unbox it into their own error).
    pub fn json(self) -> Result<JsonReply, Box<UpstreamFailure>> {
        let BytesReply {
            held: _held,
            status,
            headers,
            raw,
        } = self;
        match serde_json::from_slice::<Value>(&raw) {
            Ok(json) => Ok(JsonReply {
                status,
                headers,
                json,
                raw: raw.into(),
            }),
            Err(e) => Err(Box::new(bad_success(
                status,
                headers,
                &raw,
                BadSuccess::Malformed(format!("success body is not JSON: {e}")),
            ))),
        }
    }
}

/// Sends a call and returns a 2xx JSON body, or the failure: a non-2xx response (body
/// read up to `ERROR_BODY_CAP`), a transport error, a timeout, or a 2xx that is not
/// JSON or is larger than `SUCCESS_BODY_CAP`.
pub async fn send(
    client: &reqwest::Client,
    call: HttpCall,
    timeout_ms: u64,
) -> Result<JsonReply, UpstreamFailure> {
    send_bytes(client, call, timeout_ms)
        .await?
        .json()
        .map_err(|e| *e)
}

/// `send` short of parsing the 2xx body: for a caller that reads common bodies without
/// a `Value` (`openai::reply`) and calls `BytesReply::json` for the rest.
pub async fn send_bytes(
    client: &reqwest::Client,
    call: HttpCall,
    timeout_ms: u64,
) -> Result<BytesReply, UpstreamFailure> {
    let deadline = Duration::from_millis(timeout_ms);
    let work = async {
        let resp = post(client, &call)
            .send()
            .await
            .map_err(transport_failure)?;
        let status = resp.status().as_u16();
        let headers = Headers::from_reqwest(resp.headers());
        let ok = (200..300).contains(&status);
        let cap = if ok { SUCCESS_BODY_CAP } else { ERROR_BODY_CAP };
        let mut held = super::held::Holding::new();
        let (raw, over_cap) = read_capped(resp, cap, &mut held)
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
        Ok(BytesReply {
            status,
            headers,
            raw,
            held,
        })
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
    held: &mut super::held::Holding,
) -> Result<(Vec<u8>, bool), UpstreamFailure> {
    let mut buf = Vec::new();
    loop {
        // Past the process's cap on held answer bytes, the largest holders wait here.
        held.room().await;
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                held.charge(chunk.len().min(cap.saturating_sub(buf.len())));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_url_is_the_url_parsed_anew() {
        let urls: Vec<String> = (0..PARSED_URLS + 4)
            .map(|i| format!("http://127.0.0.1:{}/v1/chat/completions?key=k{i}", 8000 + i))
            .collect();
        // Twice round more URLs than the cache holds: hits, misses and evictions alike
        // answer what a fresh parse does.
        for _ in 0..2 {
            for u in &urls {
                assert_eq!(parsed_url(u), Some(reqwest::Url::parse(u).unwrap()));
                assert_eq!(parsed_url(u), Some(reqwest::Url::parse(u).unwrap()));
            }
        }
        URLS.with(|c| assert_eq!(c.borrow().len(), PARSED_URLS));
        assert_eq!(parsed_url("not a url"), None);
        assert_eq!(
            parsed_url("http://BÜCHER.example/x").map(String::from),
            Some("http://xn--bcher-kva.example/x".to_string())
        );
    }
}
