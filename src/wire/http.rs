//! One HTTP exchange with a provider, bounded in bytes and time: the call a codec
//! builds (`HttpCall`), the shared client, sending it and reading a capped answer, and
//! turning what went wrong on the way into an `UpstreamFailure`.

use super::codec::{bad_success, BadSuccess};
use crate::classify::failure::{Headers, Transport, UpstreamFailure};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

mod plain;

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

/// A POST of `call` (its URL, headers and body) on `client`'s reqwest.
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

/// The HTTP client every wire sends through: reqwest, and, when made with `new`, a
/// pool of plain HTTP/1.1 connections of its own (`plain`) for `http://` upstreams
/// whose URL and headers reqwest would send as written. Cloning shares the pools.
/// Derefs to the reqwest client, for code that sends through it directly.
#[derive(Clone)]
pub struct Client {
    reqwest: reqwest::Client,
    plain: Option<Arc<plain::Pool>>,
}

impl Client {
    /// `reqwest` beside a plain pool keeping at most `max_idle_per_host` idle
    /// connections a host (none when the environment names a proxy: reqwest honours it).
    pub fn new(reqwest: reqwest::Client, max_idle_per_host: usize) -> Client {
        let plain = (!plain::proxy_in_env()).then(|| Arc::new(plain::Pool::new(max_idle_per_host)));
        Client { reqwest, plain }
    }

    /// Every call through `reqwest`, whatever its URL.
    pub fn reqwest_only(reqwest: reqwest::Client) -> Client {
        Client {
            reqwest,
            plain: None,
        }
    }

    pub fn reqwest(&self) -> &reqwest::Client {
        &self.reqwest
    }
}

impl From<reqwest::Client> for Client {
    fn from(reqwest: reqwest::Client) -> Client {
        Client::reqwest_only(reqwest)
    }
}

impl std::ops::Deref for Client {
    type Target = reqwest::Client;

    fn deref(&self) -> &reqwest::Client {
        &self.reqwest
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("plain", &self.plain.is_some())
            .finish_non_exhaustive()
    }
}

/// An answer whose head has arrived, from either client.
pub enum Response {
    Reqwest(reqwest::Response),
    Plain(plain::Response),
}

impl Response {
    pub fn status(&self) -> u16 {
        match self {
            Response::Reqwest(r) => r.status().as_u16(),
            Response::Plain(r) => r.status,
        }
    }

    /// The answer's headers (values masked).
    pub fn headers(&self) -> Headers {
        match self {
            Response::Reqwest(r) => Headers::from_reqwest(r.headers()),
            Response::Plain(r) => r.headers.clone(),
        }
    }

    /// The answer's headers (values masked), taken: for a caller that reads the body
    /// next and needs them no more here (`headers` clones them, ten strings a call).
    pub fn take_headers(&mut self) -> Headers {
        match self {
            Response::Reqwest(r) => Headers::from_reqwest(r.headers()),
            Response::Plain(r) => std::mem::take(&mut r.headers),
        }
    }

    /// The next piece of the body as it arrives; `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<bytes::Bytes>, Error> {
        match self {
            Response::Reqwest(r) => r.chunk().await.map_err(Error::Reqwest),
            Response::Plain(r) => r.chunk().await.map_err(Error::Plain),
        }
    }
}

/// What went wrong below HTTP, from either client.
#[derive(Debug)]
pub enum Error {
    Reqwest(reqwest::Error),
    Plain(plain::Error),
}

impl Error {
    /// The error without its URL (a gateway URL can carry credentials in its query);
    /// a plain error never names it.
    pub fn without_url(self) -> Error {
        match self {
            Error::Reqwest(e) => Error::Reqwest(e.without_url()),
            plain => plain,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Reqwest(e) => write!(f, "{e}"),
            Error::Plain(e) => write!(f, "{e}"),
        }
    }
}

/// Sends `call` on `client`: through its plain pool when it has one and the call is
/// one it takes, else through reqwest. Returns once the answer's head has arrived.
pub async fn exchange(client: &Client, call: &HttpCall) -> Result<Response, Error> {
    if let Some(pool) = &client.plain {
        if let Some(target) = plain::target(&call.url) {
            let headers_ok = call.headers.iter().all(|(n, v)| {
                plain::header_value_ok(v)
                    && ![
                        "host",
                        "content-length",
                        "transfer-encoding",
                        "connection",
                        "content-type",
                    ]
                    .iter()
                    .any(|h| n.eq_ignore_ascii_case(h))
            });
            if headers_ok {
                let headers: Vec<(&str, &str)> =
                    call.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
                let json;
                let body: &[u8] = match &call.body {
                    CallBody::Raw(b) => b,
                    CallBody::Json(v) => {
                        json = serde_json::to_vec(v).unwrap_or_default();
                        &json
                    }
                };
                return plain::post(pool, &target, &headers, body)
                    .await
                    .map(Response::Plain)
                    .map_err(Error::Plain);
            }
        }
    }
    post(&client.reqwest, call)
        .send()
        .await
        .map(Response::Reqwest)
        .map_err(Error::Reqwest)
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
/// redirects are refused so a POST is never silently replayed elsewhere (the plain
/// client follows none either).
pub fn http_client() -> Client {
    Client::new(
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(16)
            .build()
            .expect("a reqwest client with static settings always builds"),
        16,
    )
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
            Err(e) => {
                let why = match unlike(&headers, "json") {
                    Some(said) => format!("success body is not JSON ({said}): {e}"),
                    None => format!("success body is not JSON: {e}"),
                };
                Err(Box::new(bad_success(
                    status,
                    headers,
                    &raw,
                    BadSuccess::Malformed(why),
                )))
            }
        }
    }
}

/// What an answer's headers say it is when that is not what was asked for: a
/// `content-encoding` the gateway never asks for (`gzip`: bytes no parser reads), or a
/// `content-type` without `wanted` in it (an HTML error page, JSON where a stream was
/// asked). `None` when they say nothing against it: the reason a body could not be
/// read, named, instead of only the parser's complaint.
pub fn unlike(headers: &Headers, wanted: &str) -> Option<String> {
    if let Some(coding) = headers
        .get("content-encoding")
        .filter(|c| !c.trim().eq_ignore_ascii_case("identity"))
    {
        return Some(format!(
            "content-encoding `{}`",
            crate::core::clip::clip(coding, 40)
        ));
    }
    let kind = headers.get("content-type")?;
    (!kind.to_ascii_lowercase().contains(wanted))
        .then(|| format!("content-type `{}`", crate::core::clip::clip(kind, 60)))
}

/// Sends a call and returns a 2xx JSON body, or the failure: a non-2xx response (body
/// read up to `ERROR_BODY_CAP`), a transport error, a timeout, or a 2xx that is not
/// JSON or is larger than `SUCCESS_BODY_CAP`.
pub async fn send(
    client: &Client,
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
    client: &Client,
    call: HttpCall,
    timeout_ms: u64,
) -> Result<BytesReply, UpstreamFailure> {
    let deadline = Duration::from_millis(timeout_ms);
    let work = async {
        let mut resp = exchange(client, &call).await.map_err(transport_failure)?;
        let status = resp.status();
        let headers = resp.take_headers();
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
    mut resp: Response,
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

/// Turns a client error into a transport failure, without the URL (a gateway URL can
/// carry credentials in its query).
pub fn transport_failure(e: Error) -> UpstreamFailure {
    let e = match e {
        Error::Reqwest(e) => e,
        Error::Plain(e) => return UpstreamFailure::transport(Transport::Network, e.to_string()),
    };
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

    /// Guards errors that named only the parser's complaint: an HTML page answering a
    /// stream was "the stream closed before its finish", a gzip body "not JSON".
    #[test]
    fn an_answer_that_is_not_what_was_asked_says_what_it_is() {
        let h = |pairs: &[(&str, &str)]| {
            Headers::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        };
        let html = h(&[("content-type", "text/html; charset=utf-8")]);
        assert_eq!(
            unlike(&html, "event-stream").as_deref(),
            Some("content-type `text/html; charset=utf-8`")
        );
        let gzip = h(&[
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
        ]);
        assert_eq!(
            unlike(&gzip, "json").as_deref(),
            Some("content-encoding `gzip`")
        );
        let fine = h(&[("content-type", "text/event-stream")]);
        assert_eq!(unlike(&fine, "event-stream"), None);
        assert_eq!(unlike(&h(&[]), "json"), None);
    }

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

    /// A loopback upstream that answers every request on a connection with the next of
    /// `answers` (raw bytes), closing after the last; it records each request head and
    /// body it read, and counts connections.
    async fn upstream(
        answers: Vec<Vec<u8>>,
    ) -> (
        String,
        Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
        Arc<std::sync::atomic::AtomicUsize>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/v1/chat/completions?k=1",
            listener.local_addr().unwrap()
        );
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let conns = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (seen2, conns2) = (seen.clone(), conns.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                conns2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (answers, seen) = (answers.clone(), seen2.clone());
                tokio::spawn(async move {
                    for answer in answers {
                        let mut buf = Vec::new();
                        let mut chunk = [0u8; 4096];
                        // One request: its head, then its content-length body.
                        let request = loop {
                            let Ok(n) = s.read(&mut chunk).await else {
                                return;
                            };
                            if n == 0 {
                                return;
                            }
                            buf.extend_from_slice(&chunk[..n]);
                            let mut hs = [httparse::EMPTY_HEADER; 32];
                            let mut req = httparse::Request::new(&mut hs);
                            if let Ok(httparse::Status::Complete(len)) = req.parse(&buf) {
                                let body_len: usize = req
                                    .headers
                                    .iter()
                                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                                    .and_then(|h| std::str::from_utf8(h.value).ok()?.parse().ok())
                                    .unwrap_or(0);
                                while buf.len() < len + body_len {
                                    let Ok(n) = s.read(&mut chunk).await else {
                                        return;
                                    };
                                    if n == 0 {
                                        return;
                                    }
                                    buf.extend_from_slice(&chunk[..n]);
                                }
                                break buf;
                            }
                        };
                        seen.lock().unwrap().push(request);
                        if s.write_all(&answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, seen, conns)
    }

    fn call(url: &str) -> HttpCall {
        HttpCall {
            url: url.to_string(),
            headers: vec![("authorization", "Bearer k".to_string())],
            body: CallBody::Raw(bytes::Bytes::from_static(br#"{"model":"m"}"#)),
        }
    }

    /// What a caller sees of an exchange: the status, the headers, the whole body, or
    /// that it failed (before or while the body was read).
    async fn seen_through(client: &Client, url: &str) -> Result<(u16, Headers, Vec<u8>), String> {
        let mut r = exchange(client, &call(url))
            .await
            .map_err(|e| e.to_string())?;
        let (status, headers) = (r.status(), r.headers());
        let mut body = Vec::new();
        while let Some(c) = r.chunk().await.map_err(|e| format!("body: {e}"))? {
            body.extend_from_slice(&c);
        }
        Ok((status, headers, body))
    }

    #[tokio::test]
    async fn the_plain_client_reads_every_answer_as_reqwest_does() {
        let answers: Vec<&[u8]> = vec![
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-a: 1\r\nx-b: 2\r\nX-A: 3\r\n\r\n5;e=1\r\nhello\r\n6\r\n world\r\n0\r\nx-t: 1\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 429 Too Many Requests\r\nretry-after: 7\r\ncontent-length: 2\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the close",
            b"HTTP/1.0 503 Service Unavailable\r\ncontent-length: 4\r\n\r\nbusy",
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\ncut",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel",
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\nbroken header line\r\n\r\n",
            b"nonsense\r\n\r\n",
            b"",
        ];
        for answer in answers {
            let (url, seen, _) = upstream(vec![answer.to_vec()]).await;
            let plain = seen_through(&http_client(), &url).await;
            let reqwest =
                seen_through(&Client::reqwest_only(http_client().reqwest().clone()), &url).await;
            let shown = String::from_utf8_lossy(answer);
            match (&plain, &reqwest) {
                (Ok(p), Ok(r)) => assert_eq!(p, r, "{shown}"),
                // Both failed: where (before the body, or in it) is the same.
                (Err(p), Err(r)) => assert_eq!(
                    p.starts_with("body"),
                    r.starts_with("body"),
                    "{shown}: {p} / {r}"
                ),
                _ => panic!("{shown}: plain {plain:?}, reqwest {reqwest:?}"),
            }
            // The same request reached the upstream both times, bar the header order.
            let mut requests: Vec<Vec<String>> = seen
                .lock()
                .unwrap()
                .iter()
                .map(|r| {
                    let text = String::from_utf8_lossy(r).to_string();
                    let mut lines: Vec<String> = text.split("\r\n").map(str::to_string).collect();
                    lines.sort();
                    lines
                })
                .collect();
            assert_eq!(requests.len(), 2, "{shown}");
            let second = requests.pop().unwrap();
            assert_eq!(requests[0], second, "{shown}");
        }
    }

    #[tokio::test]
    async fn a_kept_alive_connection_serves_the_next_call() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_vec();
        let (url, _, conns) = upstream(vec![ok.clone(), ok.clone(), ok]).await;
        let client = http_client();
        for _ in 0..3 {
            assert_eq!(seen_through(&client, &url).await.unwrap().0, 200);
        }
        assert_eq!(conns.load(std::sync::atomic::Ordering::SeqCst), 1);
        // The upstream closed after its third answer; once the reactor has seen it
        // (the runtime parks in between), the next call opens another connection.
        crate::core::clock::real_sleep(Duration::from_millis(50)).await;
        assert_eq!(seen_through(&client, &url).await.unwrap().0, 200);
        assert_eq!(conns.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
