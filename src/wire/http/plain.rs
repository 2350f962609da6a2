//! HTTP/1.1 to a plain `http://` upstream (a local model server, an internal gateway,
//! a loopback mock) on connections of the client's own, without reqwest's layers.
//!
//! reqwest (through hyper-util's pool and hyper's dispatcher) spent about a third of
//! a same-wire gateway request: the URL parsed and re-parsed by its redirect layer,
//! `http` header maps built and converted, and each exchange handed between the
//! caller's task and the connection's own task (scripts/bench-serve). Here the caller's
//! task writes the request and reads the answer itself: one `writev`, reads into one
//! buffer, the head parsed by `httparse` (hyper's own parser), the body framed by its
//! length, its chunks, or the connection's close.
//!
//! What stays as reqwest does it: no redirect is followed, nothing is retried once
//! written, `accept: */*`, `host` and `content-length` are sent, header names go out in
//! lowercase; answers are read with hyper's client limits (100 headers, a head of at
//! most 8 KiB + 100 × 4 KiB), 1xx heads skipped, a `Content-Length` that disagrees with
//! itself refused, `Transfer-Encoding` ending in `chunked` decoded, any other read to
//! the close. A connection is kept for the next call only when its answer was HTTP/1.1
//! without `connection: close`, read to its end with nothing after it, and it is
//! handed out again only while the reactor has seen nothing arrive on it (a close by
//! the upstream is seen there, as hyper's pool sees it) and for at most 90 s of idling
//! (reqwest's pool idle timeout).
//!
//! Anything this client does not take goes to reqwest, which then sends it exactly as
//! before: `https`, a URL the url crate would rewrite (upper case, an IP address not in
//! dotted-quad form, IPv6, userinfo, dot segments, characters it would escape), a
//! header a value cannot carry, or a process with a proxy in its environment.

use crate::classify::failure::Headers;
use crate::core::clock::Stopwatch;
use crate::core::secret::mask_owned;
use bytes::{Buf, Bytes, BytesMut};
use futures_util::FutureExt;
use std::io::IoSlice;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// hyper's client defaults: at most 100 headers, and a head of at most this many bytes.
const MAX_HEADERS: usize = 100;
const MAX_HEAD_BYTES: usize = 8192 + 4096 * 100;
/// A chunk-size line (with its extensions) or a trailer section longer than this is
/// not HTTP a provider sends.
const MAX_CHUNK_LINE: usize = 4096;
const MAX_TRAILERS: usize = 64 * 1024;
/// reqwest's `pool_idle_timeout`.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Bytes asked of each read.
const READ_SIZE: usize = 16 * 1024;

/// Where a call goes: the `host[:port]` it names (its `Host` header and pool key), the
/// address to connect to, and the request target.
#[derive(Debug, PartialEq)]
pub(super) struct Target<'a> {
    pub authority: &'a str,
    pub host: &'a str,
    pub port: u16,
    pub path: &'a str,
}

/// `url` as this client sends it, or `None` for a URL it leaves to reqwest: only
/// `http://host[:port]/path?query` whose serialisation by the url crate is the text
/// itself, so what reaches the upstream is what reqwest would send.
pub(super) fn target(url: &str) -> Option<Target<'_>> {
    // A route's URL is the same on every call: what was found of it is kept per thread
    // (as `http::parsed_url` keeps reqwest's parse), as the lengths of its pieces.
    /// A URL, and the lengths of its authority and host and its port when it is taken.
    type Seen = Vec<(Box<str>, Option<(usize, usize, u16)>)>;
    thread_local! {
        static SEEN: std::cell::RefCell<Seen> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let found = SEEN.with(|cell| {
        let mut seen = cell.borrow_mut();
        if let Some((_, found)) = seen.iter().find(|(u, _)| &**u == url) {
            return *found;
        }
        let found = target_uncached(url).map(|t| (t.authority.len(), t.host.len(), t.port));
        if seen.len() == 16 {
            seen.remove(0);
        }
        seen.push((url.into(), found));
        found
    });
    let (authority, host, port) = found?;
    let rest = &url["http://".len()..];
    Some(Target {
        authority: &rest[..authority],
        host: &rest[..host],
        port,
        path: &rest[authority..],
    })
}

fn target_uncached(url: &str) -> Option<Target<'_>> {
    let rest = url.strip_prefix("http://")?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    // `http://h?q` is `http://h/?q` to the url crate; an empty path is `/`.
    if !path.starts_with('/') {
        return None;
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => {
            let port = p.parse::<u16>().ok().filter(|&n| n != 0)?;
            // The url crate drops a default port and writes the number without zeros.
            if port == 80 || p.starts_with('0') {
                return None;
            }
            (h, port)
        }
        None => (authority, 80),
    };
    if !plain_host(host) || !plain_path(path) {
        return None;
    }
    Some(Target {
        authority,
        host,
        port,
        path,
    })
}

/// A lowercase DNS name whose last label starts with a letter, or a dotted-quad IPv4
/// address with no leading zeros: the hosts the url crate leaves as written.
fn plain_host(host: &str) -> bool {
    if host.is_empty() || host.len() > 253 {
        return false;
    }
    let labels_ok = host.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with("xn--")
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    });
    if !labels_ok {
        return false;
    }
    let last = host.rsplit('.').next().unwrap_or("");
    // A last label that is a number makes the whole host an IPv4 address to the url
    // crate (`127.1`, `0x7f.1`): only the canonical dotted quad is taken.
    last.starts_with(|c: char| c.is_ascii_lowercase())
        || (host.split('.').count() == 4
            && host.split('.').all(|p| {
                p.len() <= 3
                    && p.bytes().all(|b| b.is_ascii_digit())
                    && (p.len() == 1 || !p.starts_with('0'))
                    && p.parse::<u16>().is_ok_and(|n| n <= 255)
            }))
}

/// A path and query of characters the url crate neither escapes nor rewrites, with no
/// dot segment and every `%` the start of an escape.
fn plain_path(path: &str) -> bool {
    let b = path.as_bytes();
    let chars_ok = b.iter().enumerate().all(|(i, &c)| match c {
        b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' => true,
        b'-' | b'.' | b'_' | b'~' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+'
        | b',' | b';' | b'=' | b':' | b'@' | b'/' | b'?' => true,
        b'%' => {
            b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
        }
        _ => false,
    });
    if !chars_ok {
        return false;
    }
    let only_path = path.split('?').next().unwrap_or("");
    !only_path.split('/').any(|seg| {
        [".", "..", "%2e", "%2e%2e", ".%2e", "%2e."]
            .iter()
            .any(|dot| seg.eq_ignore_ascii_case(dot))
    })
}

/// Whether `value` is one reqwest would send as a header value (`HeaderValue::from_str`).
pub(super) fn header_value_ok(value: &str) -> bool {
    value.bytes().all(|b| (b >= 32 && b != 127) || b == b'\t')
}

/// Whether the environment names a proxy reqwest would send a plain `http://` call
/// through (its system proxy: `ALL_PROXY`, `HTTP_PROXY`, either case): then every call
/// goes to reqwest, which honours it.
pub(super) fn proxy_in_env() -> bool {
    ["ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy"]
        .iter()
        .any(|k| std::env::var_os(k).is_some_and(|v| !v.is_empty()))
}

/// Idle connections, by `host:port`; the most recently used is handed out first.
pub(super) struct Pool {
    idle: Mutex<Vec<(Box<str>, Vec<Idle>)>>,
    max_idle_per_host: usize,
}

struct Idle {
    conn: Conn,
    since: Stopwatch,
}

struct Conn {
    io: TcpStream,
    /// Bytes read and not yet used.
    buf: BytesMut,
}

impl Pool {
    pub(super) fn new(max_idle_per_host: usize) -> Pool {
        Pool {
            idle: Mutex::new(Vec::new()),
            max_idle_per_host,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Box<str>, Vec<Idle>)>> {
        // Each critical section is a push or a pop: a panic leaves nothing half-done.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle connection to `authority` that is still open, as far as can be known
    /// without a system call.
    fn take(&self, authority: &str) -> Option<Conn> {
        let mut idle = self.lock();
        let list = &mut idle.iter_mut().find(|(k, _)| &**k == authority)?.1;
        while let Some(Idle { conn, since }) = list.pop() {
            if since.elapsed() > IDLE_TIMEOUT {
                // The rest idled longer still.
                list.clear();
                return None;
            }
            if conn.open() {
                return Some(conn);
            }
        }
        None
    }

    fn put(&self, authority: &str, conn: Conn) {
        let mut idle = self.lock();
        let i = match idle.iter().position(|(k, _)| &**k == authority) {
            Some(i) => i,
            None => {
                idle.push((authority.into(), Vec::new()));
                idle.len() - 1
            }
        };
        let list = &mut idle[i].1;
        if list.len() < self.max_idle_per_host {
            list.push(Idle {
                conn,
                since: Stopwatch::start(),
            });
        }
    }
}

impl Conn {
    /// Whether nothing (an answer nobody asked for, or the upstream's close) has
    /// arrived since the last answer was read. Readiness is the reactor's: a close
    /// seen by its last poll shows here without a read; the read is made only when
    /// something did arrive, to tell data from the close.
    fn open(&self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        match self.io.readable().now_or_never() {
            None => true,
            Some(Err(_)) => false,
            Some(Ok(())) => {
                let mut probe = [0u8; 1];
                matches!(self.io.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            }
        }
    }

    /// Reads more into `buf`; `Ok(0)` at the upstream's close.
    async fn fill(&mut self) -> std::io::Result<usize> {
        self.buf.reserve(READ_SIZE);
        self.io.read_buf(&mut self.buf).await
    }
}

/// What went wrong on a plain call, worded as reqwest words its errors.
#[derive(Debug)]
pub struct Error {
    detail: String,
}

impl Error {
    fn sending(what: impl std::fmt::Display) -> Error {
        Error {
            detail: format!("error sending request: {what}"),
        }
    }

    fn head(what: impl std::fmt::Display) -> Error {
        Error {
            detail: format!("error sending request: invalid HTTP response: {what}"),
        }
    }

    fn body(what: impl std::fmt::Display) -> Error {
        Error {
            detail: format!("error reading a body from connection: {what}"),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

impl std::error::Error for Error {}

/// How the answer's body ends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
    /// This many bytes are left.
    Length(u64),
    Chunked(Chunk),
    /// At the upstream's close.
    Close,
    /// Read to its end (or none at all).
    Done,
}

/// Where a chunked body's decoder stands.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Chunk {
    /// Before a chunk-size line.
    Size,
    /// Inside a chunk's data: this many bytes left.
    Data(u64),
    /// After a chunk's data, before its CRLF.
    DataEnd,
    /// After the last chunk, in the trailer section (bytes of it seen so far).
    Trailers(usize),
}

/// An answer whose head has been read; its body is read by `chunk`.
pub struct Response {
    pub status: u16,
    pub headers: Headers,
    conn: Option<Conn>,
    framing: Framing,
    /// The connection may serve another call once this body has been read to its end.
    reusable: bool,
    pool: Arc<Pool>,
    authority: Box<str>,
}

/// Sends `POST target` with `headers` and `body` (`content-type: application/json`
/// first, as reqwest's builder puts it), on an idle connection when one is open, and
/// reads the answer's head.
pub(super) async fn post(
    pool: &Arc<Pool>,
    target: &Target<'_>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Response, Error> {
    let head = request_head(target, headers, body.len());
    if let Some(mut conn) = pool.take(target.authority) {
        // Closed while idle, before the request could be written: nothing of it
        // reached the upstream, so a new connection is asked, as hyper's pool retries
        // a request its connection never sent.
        if write_request(&mut conn.io, &head, body).await.is_ok() {
            return read_head(conn, pool, target).await;
        }
    }
    let mut conn = connect(target).await?;
    if let Err(e) = write_request(&mut conn.io, &head, body).await {
        // An upstream that answered before reading the whole request (a 413) and
        // closed: its answer may already be here.
        return match read_head(conn, pool, target).await {
            Ok(mut r) => {
                r.reusable = false;
                Ok(r)
            }
            Err(_) => Err(Error::sending(e)),
        };
    }
    read_head(conn, pool, target).await
}

fn request_head(target: &Target<'_>, headers: &[(&str, &str)], len: usize) -> Vec<u8> {
    let mut head = Vec::with_capacity(
        160 + headers
            .iter()
            .map(|(n, v)| n.len() + v.len() + 4)
            .sum::<usize>(),
    );
    head.extend_from_slice(b"POST ");
    head.extend_from_slice(target.path.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\ncontent-type: application/json\r\n");
    let mut accept = false;
    for (name, value) in headers {
        accept |= name.eq_ignore_ascii_case("accept");
        head.extend(name.bytes().map(|b| b.to_ascii_lowercase()));
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if !accept {
        head.extend_from_slice(b"accept: */*\r\n");
    }
    head.extend_from_slice(b"host: ");
    head.extend_from_slice(target.authority.as_bytes());
    head.extend_from_slice(b"\r\ncontent-length: ");
    head.extend_from_slice(len.to_string().as_bytes());
    head.extend_from_slice(b"\r\n\r\n");
    head
}

async fn connect(target: &Target<'_>) -> Result<Conn, Error> {
    let io = TcpStream::connect((target.host, target.port))
        .await
        .map_err(|e| Error::sending(format!("client error (Connect): tcp connect error: {e}")))?;
    let _ = io.set_nodelay(true);
    Ok(Conn {
        io,
        buf: BytesMut::new(),
    })
}

/// Writes the head and the body, with as few system calls as the socket allows (one,
/// for every request that fits its send buffer).
async fn write_request(io: &mut TcpStream, head: &[u8], body: &[u8]) -> std::io::Result<()> {
    let (mut head, mut body) = (head, body);
    while !head.is_empty() {
        let n = io
            .write_vectored(&[IoSlice::new(head), IoSlice::new(body)])
            .await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let from_head = n.min(head.len());
        head = &head[from_head..];
        body = &body[n - from_head..];
    }
    if !body.is_empty() {
        io.write_all(body).await?;
    }
    Ok(())
}

/// Reads the answer's head (skipping informational ones) and sets up its body.
async fn read_head(
    mut conn: Conn,
    pool: &Arc<Pool>,
    target: &Target<'_>,
) -> Result<Response, Error> {
    loop {
        let parsed = loop {
            match parse_head(&conn.buf)? {
                Some(p) => break p,
                None if conn.buf.len() >= MAX_HEAD_BYTES => {
                    return Err(Error::head("message head is too large"))
                }
                None => {}
            }
            match conn.fill().await {
                Ok(0) if conn.buf.is_empty() => {
                    return Err(Error::sending("connection closed before message completed"))
                }
                Ok(0) => return Err(Error::head("connection closed before the head ended")),
                Ok(_) => {}
                Err(e) => return Err(Error::sending(e)),
            }
        };
        conn.buf.advance(parsed.len);
        // 1xx: informational, another head follows (101 is an upgrade no one asked for).
        if (100..200).contains(&parsed.status) {
            if parsed.status == 101 {
                return Err(Error::head("an upgrade no request asked for"));
            }
            continue;
        }
        let framing = match parsed.body {
            _ if parsed.status == 204 || parsed.status == 304 => Framing::Done,
            BodyLen::Chunked => Framing::Chunked(Chunk::Size),
            BodyLen::Length(n) => Framing::Length(n),
            BodyLen::Close => Framing::Close,
        };
        let reusable = parsed.keep_alive && framing != Framing::Close;
        let mut r = Response {
            status: parsed.status,
            headers: parsed.headers,
            conn: Some(conn),
            framing,
            reusable,
            pool: pool.clone(),
            authority: target.authority.into(),
        };
        if r.framing == Framing::Length(0) || r.framing == Framing::Done {
            r.framing = Framing::Done;
            r.release();
        }
        return Ok(r);
    }
}

enum BodyLen {
    Length(u64),
    Chunked,
    Close,
}

struct Head {
    len: usize,
    status: u16,
    headers: Headers,
    body: BodyLen,
    keep_alive: bool,
}

/// The head at the start of `buf`, `None` while it is incomplete.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, Error> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut slots);
    let len = match res.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(Error::head("too many headers")),
        Err(e) => return Err(Error::head(e)),
    };
    let status = res.code.unwrap_or(0);
    if !(100..=999).contains(&status) {
        return Err(Error::head("invalid status code"));
    }
    let mut keep_alive = res.version == Some(1);
    let mut chunked = None;
    let mut length: Option<u64> = None;
    let mut pairs = Vec::with_capacity(res.headers.len());
    for h in res.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        match name.as_str() {
            "connection" if comma_list(h.value).any(|t| t.eq_ignore_ascii_case(b"close")) => {
                keep_alive = false;
            }
            "transfer-encoding" => {
                // The last coding of the last header decides.
                chunked = Some(
                    comma_list(h.value)
                        .last()
                        .is_some_and(|t| t.eq_ignore_ascii_case(b"chunked")),
                );
            }
            "content-length" => {
                for v in comma_list(h.value) {
                    let n = std::str::from_utf8(v)
                        .ok()
                        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                        .and_then(|s| s.parse::<u64>().ok())
                        .ok_or_else(|| Error::head("invalid content-length"))?;
                    if length.is_some_and(|l| l != n) {
                        return Err(Error::head("content-length values disagree"));
                    }
                    length = Some(n);
                }
            }
            _ => {}
        }
        let value = mask_owned(String::from_utf8_lossy(h.value).into_owned());
        pairs.push((name, value));
    }
    let body = match (chunked, length) {
        (Some(true), _) => BodyLen::Chunked,
        (Some(false), _) => {
            keep_alive = false;
            BodyLen::Close
        }
        (None, Some(n)) => BodyLen::Length(n),
        (None, None) => BodyLen::Close,
    };
    Ok(Some(Head {
        len,
        status,
        headers: Headers::from_pairs(as_header_map_orders(pairs)),
        body,
        keep_alive,
    }))
}

/// The items of a comma-separated header value, trimmed, empty ones skipped.
fn comma_list(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

/// Headers in the order reqwest's `HeaderMap` gives them: grouped by name, each name
/// where it first appeared, its values in arrival order.
fn as_header_map_orders(pairs: Vec<(String, String)>) -> Vec<(String, String)> {
    let grouped = pairs
        .iter()
        .enumerate()
        .all(|(i, (k, _))| !pairs[..i].iter().any(|(j, _)| j == k) || pairs[i - 1].0 == *k);
    if grouped {
        return pairs;
    }
    let mut out: Vec<(String, String)> = Vec::with_capacity(pairs.len());
    for (i, (k, _)) in pairs.iter().enumerate() {
        if pairs[..i].iter().any(|(j, _)| j == k) {
            continue;
        }
        out.extend(pairs.iter().filter(|(j, _)| j == k).cloned());
    }
    out
}

impl Response {
    /// The next piece of the body as it arrives; `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, Error> {
        loop {
            let Some(conn) = self.conn.as_mut() else {
                return Ok(None);
            };
            match self.framing {
                Framing::Done => {
                    self.release();
                    return Ok(None);
                }
                Framing::Length(0) => {
                    self.framing = Framing::Done;
                    continue;
                }
                Framing::Length(left) => {
                    if conn.buf.is_empty() {
                        match conn.fill().await {
                            Ok(0) => {
                                self.conn = None;
                                return Err(Error::body(
                                    "end of file before message length reached",
                                ));
                            }
                            Ok(_) => {}
                            Err(e) => {
                                self.conn = None;
                                return Err(Error::body(e));
                            }
                        }
                    }
                    let take = conn
                        .buf
                        .len()
                        .min(usize::try_from(left).unwrap_or(usize::MAX));
                    let data = conn.buf.split_to(take).freeze();
                    self.framing = Framing::Length(left - take as u64);
                    if self.framing == Framing::Length(0) {
                        self.framing = Framing::Done;
                        self.release();
                    }
                    return Ok(Some(data));
                }
                Framing::Close => {
                    if conn.buf.is_empty() {
                        match conn.fill().await {
                            Ok(0) => {
                                self.framing = Framing::Done;
                                self.conn = None;
                                return Ok(None);
                            }
                            Ok(_) => {}
                            Err(e) => {
                                self.conn = None;
                                return Err(Error::body(e));
                            }
                        }
                    }
                    return Ok(Some(conn.buf.split().freeze()));
                }
                Framing::Chunked(state) => match step_chunked(&mut conn.buf, state) {
                    Err(e) => {
                        self.conn = None;
                        return Err(e);
                    }
                    Ok(Step::Data(data, next)) => {
                        self.framing = Framing::Chunked(next);
                        return Ok(Some(data));
                    }
                    Ok(Step::Moved(next)) => self.framing = Framing::Chunked(next),
                    Ok(Step::End) => self.framing = Framing::Done,
                    Ok(Step::More(next)) => {
                        self.framing = Framing::Chunked(next);
                        match conn.fill().await {
                            Ok(0) => {
                                self.conn = None;
                                return Err(Error::body("end of file before the last chunk"));
                            }
                            Ok(_) => {}
                            Err(e) => {
                                self.conn = None;
                                return Err(Error::body(e));
                            }
                        }
                    }
                },
            }
        }
    }

    /// The body is read to its end: the connection goes back to the pool when it may
    /// serve another call.
    fn release(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.reusable && conn.buf.is_empty() {
                self.pool.put(&self.authority, conn);
            }
        }
    }
}

enum Step {
    /// Body data, and where the decoder stands after it.
    Data(Bytes, Chunk),
    /// Framing consumed; go on from here.
    Moved(Chunk),
    /// More bytes are needed to go on from here.
    More(Chunk),
    /// The body and its trailers are complete.
    End,
}

/// One step of the chunked decoder on what `buf` holds.
fn step_chunked(buf: &mut BytesMut, state: Chunk) -> Result<Step, Error> {
    match state {
        Chunk::Size => {
            let Some(nl) = memchr::memchr(b'\n', buf) else {
                if buf.len() > MAX_CHUNK_LINE {
                    return Err(Error::body("chunk size line too long"));
                }
                return Ok(Step::More(state));
            };
            let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
            let digits = line
                .split(|&b| b == b';')
                .next()
                .unwrap_or(b"")
                .trim_ascii();
            if digits.is_empty() || digits.len() > 16 || !digits.iter().all(u8::is_ascii_hexdigit) {
                return Err(Error::body("invalid chunk size line"));
            }
            let size = digits
                .iter()
                .try_fold(0u64, |acc, &d| {
                    let v = (d as char).to_digit(16)? as u64;
                    acc.checked_mul(16)?.checked_add(v)
                })
                .ok_or_else(|| Error::body("chunk size overflow"))?;
            buf.advance(nl + 1);
            Ok(Step::Moved(if size == 0 {
                Chunk::Trailers(0)
            } else {
                Chunk::Data(size)
            }))
        }
        Chunk::Data(left) => {
            if buf.is_empty() {
                return Ok(Step::More(state));
            }
            let take = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let data = buf.split_to(take).freeze();
            let left = left - take as u64;
            Ok(Step::Data(
                data,
                if left == 0 {
                    Chunk::DataEnd
                } else {
                    Chunk::Data(left)
                },
            ))
        }
        Chunk::DataEnd => match buf.first() {
            None => Ok(Step::More(state)),
            Some(b'\n') => {
                buf.advance(1);
                Ok(Step::Moved(Chunk::Size))
            }
            Some(b'\r') => match buf.get(1) {
                None => Ok(Step::More(state)),
                Some(b'\n') => {
                    buf.advance(2);
                    Ok(Step::Moved(Chunk::Size))
                }
                Some(_) => Err(Error::body("invalid chunk end")),
            },
            Some(_) => Err(Error::body("invalid chunk end")),
        },
        Chunk::Trailers(seen) => {
            let Some(nl) = memchr::memchr(b'\n', buf) else {
                if seen + buf.len() > MAX_TRAILERS {
                    return Err(Error::body("chunk trailers too large"));
                }
                return Ok(Step::More(state));
            };
            let empty = nl == 0 || (nl == 1 && buf[0] == b'\r');
            buf.advance(nl + 1);
            if empty {
                Ok(Step::End)
            } else if seen + nl + 1 > MAX_TRAILERS {
                Err(Error::body("chunk trailers too large"))
            } else {
                Ok(Step::Moved(Chunk::Trailers(seen + nl + 1)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_urls_the_url_crate_leaves_as_written_are_taken() {
        let t = target("http://127.0.0.1:8080/v1/chat/completions?key=a%20b").unwrap();
        assert_eq!(
            t,
            Target {
                authority: "127.0.0.1:8080",
                host: "127.0.0.1",
                port: 8080,
                path: "/v1/chat/completions?key=a%20b"
            }
        );
        assert_eq!(target("http://localhost/v1").unwrap().port, 80);
        assert_eq!(
            target("http://vllm.internal:8000/v1/x").unwrap().host,
            "vllm.internal"
        );
        for url in [
            "https://api.openai.com/v1/chat/completions",
            "http://127.0.0.1:80/v1",
            "http://127.0.0.1:080/v1",
            "http://127.1:8080/v1",
            "http://127.000.0.1:8080/v1",
            "http://0x7f.0.0.1:8080/v1",
            "http://Host:8080/v1",
            "http://[::1]:8080/v1",
            "http://user:pw@host:8080/v1",
            "http://host:8080",
            "http://host:8080?x",
            "http://host:8080/a/../b",
            "http://host:8080/a/%2e%2E/b",
            "http://host:8080/a b",
            "http://host:8080/a%zz",
            "http://host:8080/a#frag",
            "http://host:8080/\u{e9}",
            "http://xn--bcher-kva.example/x",
            "http://host.123/x",
            "http://host:0/x",
            "http://host:99999/x",
        ] {
            assert_eq!(target(url), None, "{url}");
            assert_eq!(target(url), None, "{url}, cached");
        }
    }

    #[test]
    fn every_url_taken_is_what_the_url_crate_serialises() {
        for url in [
            "http://127.0.0.1:8080/v1/chat/completions",
            "http://localhost:11434/v1/chat/completions?api-version=2024-10-21",
            "http://a-b.c-d.example/v1beta/models/m:generateContent?key=k&alt=sse",
            "http://10.0.0.255:1/x/y/z%2F",
        ] {
            assert_eq!(target(url), target_uncached(url), "cached");
            let t = target(url).unwrap();
            let parsed = reqwest::Url::parse(url).unwrap();
            assert_eq!(parsed.as_str(), url);
            assert_eq!(parsed.host_str(), Some(t.host));
            assert_eq!(parsed.port_or_known_default(), Some(t.port));
            let path = match parsed.query() {
                Some(q) => format!("{}?{q}", parsed.path()),
                None => parsed.path().to_string(),
            };
            assert_eq!(path, t.path);
        }
    }

    fn decode(wire: &[u8]) -> Result<Vec<u8>, Error> {
        let mut buf = BytesMut::from(wire);
        let mut state = Chunk::Size;
        let mut out = Vec::new();
        loop {
            match step_chunked(&mut buf, state)? {
                Step::Data(d, next) => {
                    out.extend_from_slice(&d);
                    state = next;
                }
                Step::Moved(next) => state = next,
                Step::More(_) => return Err(Error::body("incomplete")),
                Step::End => return Ok(out),
            }
        }
    }

    #[test]
    fn chunked_bodies_decode_with_extensions_trailers_and_bare_newlines() {
        assert_eq!(
            decode(b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nx-trailer: 1\r\n\r\n").unwrap(),
            b"hello, world"
        );
        assert_eq!(decode(b"3\nabc\n0\n\n").unwrap(), b"abc");
        assert!(decode(b"zz\r\n").is_err());
        assert!(decode(b"3\r\nabcX\r\n").is_err());
        assert!(decode(b"ffffffffffffffffff\r\n").is_err());
        assert!(decode(b"3\r\nab").is_err());
    }

    #[test]
    fn heads_are_framed_as_hyper_frames_them() {
        let head = |s: &str| {
            parse_head(s.as_bytes()).map(|h| {
                h.map(|h| {
                    (
                        h.status,
                        h.keep_alive,
                        match h.body {
                            BodyLen::Length(n) => Some(n),
                            BodyLen::Chunked => Some(u64::MAX),
                            BodyLen::Close => None,
                        },
                    )
                })
            })
        };
        assert_eq!(
            head("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n").unwrap(),
            Some((200, true, Some(5)))
        );
        assert_eq!(
            head("HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\n\r\n").unwrap(),
            Some((200, true, Some(5)))
        );
        assert!(head("HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n").is_err());
        assert!(head("HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n").is_err());
        assert_eq!(
            head("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n")
                .unwrap(),
            Some((200, true, Some(u64::MAX)))
        );
        assert_eq!(
            head("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n").unwrap(),
            Some((200, false, None))
        );
        assert_eq!(
            head("HTTP/1.1 200 OK\r\nConnection: Close\r\ncontent-length: 1\r\n\r\n").unwrap(),
            Some((200, false, Some(1)))
        );
        assert_eq!(
            head("HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\n").unwrap(),
            Some((200, false, Some(1)))
        );
        assert_eq!(
            head("HTTP/1.1 200 OK\r\n\r\n").unwrap(),
            Some((200, true, None))
        );
        assert_eq!(head("HTTP/1.1 200 OK\r\ncontent-len").unwrap(), None);
        assert!(head("HTTP/1.1 099 Odd\r\n\r\n").is_err());
        let many: String = (0..101).map(|i| format!("x-{i}: v\r\n")).collect();
        assert!(head(&format!("HTTP/1.1 200 OK\r\n{many}\r\n")).is_err());
    }

    #[test]
    fn headers_keep_the_order_a_header_map_gives() {
        let p = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            as_header_map_orders(p(&[("a", "1"), ("b", "2"), ("a", "3"), ("c", "4")])),
            p(&[("a", "1"), ("a", "3"), ("b", "2"), ("c", "4")])
        );
        assert_eq!(
            as_header_map_orders(p(&[("a", "1"), ("a", "2"), ("b", "3")])),
            p(&[("a", "1"), ("a", "2"), ("b", "3")])
        );
    }
}
