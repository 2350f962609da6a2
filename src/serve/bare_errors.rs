//! hyper answers a request it cannot parse itself, before any handler runs: a
//! malformed request line or version (400), a request line too long (414), too many or
//! too large headers (431), a bad or duplicate `Content-Length` or an unknown
//! `Transfer-Encoding` (400). It writes a bare head (`connection: close`,
//! `content-length: 0`) and no body, and has no hook to change that. A client then
//! gets no JSON error and no `x-should-retry`, and its SDK retries into the same wall.
//!
//! This wrapper around the connection's socket sees that head go out and writes the
//! documented answer in its place: the same status, an OpenAI-shaped body,
//! `x-should-retry: false` and the `x-poolctl-*` headers. It recognises hyper's head
//! by what the gateway's own error responses always carry and hyper's never do
//! (`x-should-retry`). One exception by status: a `Content-Length` too large for hyper
//! to hold is a 431 to hyper, but the body is what is too large, so it becomes 413.

use super::errors::{ApiError, Flavor};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What is told of each rewritten answer: its status and code (the request's log line
/// and count, since no handler saw the request).
pub type OnAnswer = Box<dyn Fn(u16, &'static str) + Send + Sync>;

/// A socket whose bare hyper error heads are rewritten.
pub struct Answering<T> {
    inner: T,
    /// The rewritten answer still to write, and how much of it is out.
    pending: Option<(Vec<u8>, usize)>,
    /// Since the last response went out, a read declared a `Content-Length` hyper
    /// cannot hold (a head may come in several reads).
    huge_length: bool,
    on_answer: Option<OnAnswer>,
}

impl<T> Answering<T> {
    pub fn new(inner: T) -> Self {
        Answering {
            inner,
            pending: None,
            huge_length: false,
            on_answer: None,
        }
    }

    /// Tells `f` of each answer rewritten.
    pub fn on_answer(mut self, f: OnAnswer) -> Self {
        self.on_answer = Some(f);
        self
    }
}

/// A `Content-Length` of 16 digits or more (≥ 10^15 bytes): hyper refuses it as 431.
/// Every read passes through here, so the search is memchr's: `ength:` finds both
/// spellings clients send (`Content-Length`, `content-length`) at SIMD speed.
fn declares_huge_length(read: &[u8]) -> bool {
    const NAME: &[u8] = b"content-length:";
    // Built once: building the searcher cost more than searching a small read.
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"ength:"));
    FINDER.find_iter(read).any(|at| {
        let start = (at + 6).saturating_sub(NAME.len());
        read[start..].len() >= NAME.len()
            && read[start..start + NAME.len()].eq_ignore_ascii_case(NAME)
            && read[at + 6..]
                .iter()
                .skip_while(|b| **b == b' ' || **b == b'\t')
                .take_while(|b| b.is_ascii_digit())
                .count()
                >= 16
    })
}

/// The status of `buf` when it is a whole bare error head hyper wrote.
pub fn bare_error_status(buf: &[u8]) -> Option<u16> {
    let rest = buf.strip_prefix(b"HTTP/1.1 ")?;
    let status: u16 = std::str::from_utf8(rest.get(..3)?).ok()?.parse().ok()?;
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = &buf[..end];
    let has = |name: &[u8]| {
        head.windows(name.len())
            .any(|w| w.eq_ignore_ascii_case(name))
    };
    let bare = status >= 400
        && end + 4 == buf.len()
        && has(b"\r\ncontent-length: 0")
        && has(b"\r\nconnection: close")
        && !has(b"\r\nx-should-retry:");
    bare.then_some(status)
}

/// The status and code of the documented answer for hyper's `status`.
pub fn status_and_code(status: u16, huge_length: bool) -> (u16, &'static str) {
    match (status, huge_length) {
        (431, true) => (413, "request_too_large"),
        (414, _) => (414, "uri_too_long"),
        (431, _) => (431, "headers_too_large"),
        (s, _) => (s, "malformed_request"),
    }
}

/// The documented answer for hyper's `status`.
pub fn answer(status: u16, huge_length: bool) -> Vec<u8> {
    let (status, code) = status_and_code(status, huge_length);
    let message = match code {
        "request_too_large" => "the request declares a Content-Length larger than the gateway accepts",
        "uri_too_long" => "the request line is longer than the gateway accepts",
        "headers_too_large" => "the request has more headers, or larger ones, than the gateway accepts",
        _ => "the request is not valid HTTP/1.1: its request line, version, Content-Length or Transfer-Encoding cannot be read",
    };
    let body = ApiError::new(status, "invalid_request_error", code, message).body(Flavor::OpenAi);
    let reason = match status {
        400 => "Bad Request",
        413 => "Payload Too Large",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\nx-should-retry: false\r\n\
         x-poolctl-served-by: \r\nx-poolctl-outcome: failed\r\nx-poolctl-attempts: 0\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

impl<T: AsyncRead + Unpin> AsyncRead for Answering<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if r.is_ready() {
            let read = &buf.filled()[before..];
            // A head may span reads: any of them since the last response counts.
            let huge = declares_huge_length(read);
            self.huge_length |= huge;
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> Answering<T> {
    /// Writes what is left of the rewritten answer; `Ready` once it is all out.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, sent)) = &mut self.pending {
            if *sent == bytes.len() {
                self.pending = None;
                break;
            }
            let n = std::task::ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *sent += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Answering<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.poll_pending(cx))?;
        if let Some(status) = bare_error_status(buf) {
            // Accepted whole at once: hyper's head is replaced, not sent, and the answer
            // goes out on this and the next polls (flush, shutdown), never twice.
            let huge = std::mem::take(&mut self.huge_length);
            if let Some(f) = &self.on_answer {
                let (status, code) = status_and_code(status, huge);
                f(status, code);
            }
            self.pending = Some((answer(status, huge), 0));
            if let Poll::Ready(Err(e)) = self.poll_pending(cx) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        if buf.starts_with(b"HTTP/1.") {
            // A response of the gateway's own: the next head starts afresh.
            self.huge_length = false;
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // hyper writes a bare error head alone, as one slice.
        if let [only] = bufs {
            return self.poll_write(cx, only);
        }
        std::task::ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYPER_431: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: Wed, 02 Dec 2026 03:00:08 GMT\r\n\r\n";

    #[test]
    fn hypers_bare_error_head_is_recognised() {
        assert_eq!(bare_error_status(HYPER_431), Some(431));
        let b400 = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(bare_error_status(b400), Some(400));
    }

    #[test]
    fn the_gateways_own_answers_are_left_alone() {
        // Every error of the gateway carries x-should-retry; a 2xx is never touched.
        let own = answer(400, false);
        assert_eq!(bare_error_status(&own), None);
        let ok = b"HTTP/1.1 204 No Content\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(bare_error_status(ok), None);
        // A head with a body after it in the same write is not hyper's bare head.
        let mut with_body = HYPER_431.to_vec();
        with_body.extend_from_slice(b"data");
        assert_eq!(bare_error_status(&with_body), None);
    }

    #[test]
    fn a_content_length_too_large_to_hold_is_a_413() {
        assert!(declares_huge_length(
            b"POST / HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\n"
        ));
        assert!(!declares_huge_length(
            b"POST / HTTP/1.1\r\ncontent-length: 1024\r\n\r\n"
        ));
        let a = String::from_utf8(answer(431, true)).unwrap();
        assert!(a.starts_with("HTTP/1.1 413 "), "{a}");
        assert!(a.contains("\"code\":\"request_too_large\""), "{a}");
        let b = String::from_utf8(answer(431, false)).unwrap();
        assert!(
            b.starts_with("HTTP/1.1 431 ") && b.contains("x-should-retry: false"),
            "{b}"
        );
    }
}
