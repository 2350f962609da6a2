//! A client's socket that must keep taking what is written to it (nginx's
//! `send_timeout`). The response body of a stream is polled only while the socket
//! takes bytes, and that polling drives the upstream call and its deadlines
//! (`stream_max_ms`): a client that stops reading and keeps its connection open would
//! pin the connection, the stream and a paid upstream call for as long as it likes.
//! A write that makes no progress for `limit` fails the connection instead; hyper
//! then drops the response, and the upstream call with it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The stall clock: `clock::real_sleep`, socket-level pacing on real time.
type Stall = Pin<Box<dyn Future<Output = ()> + Send>>;

pub struct SendDeadline<T> {
    inner: T,
    limit: Duration,
    /// Set while a write waits for the client: when it runs out, the write fails.
    stalled: Option<Stall>,
}

impl<T> SendDeadline<T> {
    pub fn new(inner: T, limit: Duration) -> Self {
        SendDeadline {
            inner,
            limit,
            stalled: None,
        }
    }

    /// `poll`'s result, with the stall clock run: started by a write that waits,
    /// stopped by one that makes progress, an error once it runs out.
    fn watched<R>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        match poll {
            Poll::Pending => {
                let limit = self.limit;
                let timer = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(crate::core::clock::real_sleep(limit)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "the client took nothing of the response for {} ms",
                            limit.as_millis()
                        ),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for SendDeadline<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for SendDeadline<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watched(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watched(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.watched(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watched(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A client that reads nothing: the writes fill its socket, then wait, then fail
    /// once the limit passes (virtual time: no real wait).
    #[tokio::test(start_paused = true)]
    async fn a_write_the_client_never_takes_fails_after_the_limit() {
        let (mine, _theirs) = tokio::io::duplex(64);
        let mut s = SendDeadline::new(mine, Duration::from_secs(60));
        s.write_all(&[0u8; 64]).await.unwrap();
        let stuck = s.write_all(&[0u8; 1]).await.unwrap_err();
        assert_eq!(stuck.kind(), io::ErrorKind::TimedOut);
        assert!(stuck.to_string().contains("60000 ms"), "{stuck}");
    }

    /// A write that waits and then makes progress starts the clock afresh.
    #[tokio::test(start_paused = true)]
    async fn progress_resets_the_clock() {
        use tokio::io::AsyncReadExt;
        let (mine, mut theirs) = tokio::io::duplex(8);
        let mut s = SendDeadline::new(mine, Duration::from_secs(10));
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 8];
            let mut got = 0;
            while got < 64 {
                crate::core::clock::real_sleep(Duration::from_secs(6)).await;
                got += theirs.read(&mut buf).await.unwrap();
            }
            got
        });
        // 64 bytes through an 8-byte pipe read every 6 s: 48 s in all, never 10 s stuck.
        s.write_all(&[1u8; 64]).await.unwrap();
        assert_eq!(reader.await.unwrap(), 64);
    }
}
