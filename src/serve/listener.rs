//! The gateway's sockets: accept, cap the number of connections, bound how long a
//! client may take to send its request head, contain panics, and drain on shutdown.
//! Every refusal is an OpenAI-shaped error the client can read, never a bare reset.

use super::errors::{ApiError, Flavor};
use super::handler;
use super::http::Body;
use super::Gateway;
use crate::core::clock::real_sleep;
use futures_util::FutureExt;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// How long a refusal may take to write, and to read what the client already sent
/// (closing with unread bytes would reset the connection before the client reads).
const REFUSAL_DEADLINE: Duration = Duration::from_millis(500);

/// A connection on its way from the accept loop to the lane that serves it.
struct Handoff {
    tcp: std::net::TcpStream,
    /// Held until the connection closes: the cap on connections served at once.
    permit: OwnedSemaphorePermit,
    /// Lets the drain wait for this connection, whichever lane serves it.
    watcher: Watcher,
}

/// Serves until `shutdown` resolves, then stops accepting and lets in-flight requests
/// and streams finish for up to `settings.drain`.
///
/// Connections are accepted here and each is handed, whole, to one of `lanes`
/// (round robin): a thread with a single-threaded runtime that serves it from its first
/// request to its close, and sends its upstream calls through the lane's own HTTP client.
/// A request is then read, routed, sent upstream, answered and written back on one
/// thread. On a multi-threaded runtime the same request was handed between threads
/// (the connection on one, an upstream connection's task on another), and each
/// hand-off woke a sleeping thread: on 2 cores, a context switch per request and a
/// third of the gateway's CPU spent in the kernel switching (scripts/bench-serve).
/// Nginx's workers are built the same way. Without lanes (none given), connections are
/// served on the caller's runtime.
pub async fn serve(
    listener: TcpListener,
    gw: Arc<Gateway>,
    lanes: Vec<Gateway>,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(gw.settings.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let http = http_builder(&gw);
    let mut senders = Vec::new();
    let mut lanes_done = Vec::new();
    for (i, lane) in lanes.into_iter().enumerate() {
        match start_lane(i, Arc::new(lane), http.clone()) {
            Ok((tx, thread)) => {
                senders.push(tx);
                lanes_done.push(thread);
            }
            Err(e) => {
                tracing::warn!(target: "poolctl::serve", lane = i, error = %e, "cannot start a lane; serving with fewer");
            }
        }
    }
    let mut next = 0usize;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut shutdown => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(target: "poolctl::serve", error = %e, "accept failed");
                real_sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            gw.metrics.rejected("too_many_connections");
            let e = ApiError::new(
                429,
                "invalid_request_error",
                "too_many_connections",
                format!(
                    "the gateway serves at most {} connections at once; this one is closed",
                    gw.settings.max_connections
                ),
            );
            tokio::spawn(refuse(tcp, e));
            continue;
        };
        let watcher = graceful.watcher();
        if senders.is_empty() {
            tokio::spawn(connection(gw.clone(), http.clone(), tcp, permit, watcher));
            continue;
        }
        let tcp = match tcp.into_std() {
            Ok(tcp) => tcp,
            Err(e) => {
                tracing::warn!(target: "poolctl::serve", error = %e, "cannot set up a connection");
                continue;
            }
        };
        next = (next + 1) % senders.len();
        if let Err(mpsc::error::SendError(h)) = senders[next].send(Handoff {
            tcp,
            permit,
            watcher,
        }) {
            // A lane whose thread is gone (it should not be: each connection is a task of
            // its own). It gets no more connections, and this one is served here.
            senders.remove(next);
            tracing::error!(target: "poolctl::serve", lanes_left = senders.len(), "a lane has stopped");
            if let Ok(tcp) = TcpStream::from_std(h.tcp) {
                tokio::spawn(connection(
                    gw.clone(),
                    http.clone(),
                    tcp,
                    h.permit,
                    h.watcher,
                ));
            }
        }
    }
    gw.start_draining();
    drop(listener);
    tracing::info!(target: "poolctl::serve", drain_ms = gw.settings.drain.as_millis() as u64, "draining in-flight requests");
    let drained = graceful.shutdown();
    tokio::pin!(drained);
    tokio::select! {
        _ = &mut drained => tracing::info!(target: "poolctl::serve", "drained"),
        _ = real_sleep(gw.settings.drain) => {
            tracing::warn!(target: "poolctl::serve", "drain deadline reached; ending what is left");
            // Every request still routing is answered 503 and every open stream ends
            // with its in-band error and outcome, each logged `cancelled`; then the
            // connections close on their own, within a short grace.
            gw.cut_everything();
            if tokio::time::timeout(CUT_GRACE, &mut drained).await.is_err() {
                tracing::warn!(target: "poolctl::serve", "connections still open after the cut; closing them");
            }
        }
    }
    // Each lane ends once its queue is closed; what it still holds is dropped with it.
    drop(senders);
    // Its connections' tasks are dropped with its runtime: each request still open
    // writes its line then, before the log is flushed.
    // Bounded: a lane stuck in a blocking call must not keep the process from exiting.
    let joined = async {
        for lane in lanes_done {
            let _ = tokio::task::spawn_blocking(move || lane.join()).await;
        }
    };
    if tokio::time::timeout(CUT_GRACE, joined).await.is_err() {
        tracing::warn!(target: "poolctl::serve", "a lane did not stop in time; exiting without it");
    }
}

/// How long connections may take to write the end a drain cut gave them.
const CUT_GRACE: Duration = Duration::from_secs(1);

fn http_builder(gw: &Gateway) -> hyper::server::conn::http1::Builder {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(gw.settings.header_read_timeout)
        .keep_alive(true);
    http
}

/// A lane: a thread of its own running a single-threaded runtime, serving every
/// connection handed to it until the sender is dropped.
fn start_lane(
    i: usize,
    gw: Arc<Gateway>,
    http: hyper::server::conn::http1::Builder,
) -> std::io::Result<(mpsc::UnboundedSender<Handoff>, std::thread::JoinHandle<()>)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (tx, mut rx) = mpsc::unbounded_channel::<Handoff>();
    let thread = std::thread::Builder::new()
        .name(format!("poolctl-lane-{i}"))
        .spawn(move || {
            runtime.block_on(async move {
                while let Some(h) = rx.recv().await {
                    match TcpStream::from_std(h.tcp) {
                        Ok(tcp) => {
                            tokio::spawn(connection(
                                gw.clone(),
                                http.clone(),
                                tcp,
                                h.permit,
                                h.watcher,
                            ));
                        }
                        Err(e) => {
                            tracing::warn!(target: "poolctl::serve", error = %e, "cannot set up a connection");
                        }
                    }
                }
            })
        })?;
    Ok((tx, thread))
}

/// Serves one connection to its close, then gives its permit back.
async fn connection(
    gw: Arc<Gateway>,
    http: hyper::server::conn::http1::Builder,
    tcp: TcpStream,
    permit: OwnedSemaphorePermit,
    watcher: Watcher,
) {
    // A second handle on the socket, to answer 408 after hyper gives up on a request
    // head that never finished (hyper itself only closes the connection).
    let (tcp, spare) = match split_handle(tcp) {
        Ok(pair) => pair,
        Err(e) => {
            tracing::warn!(target: "poolctl::serve", error = %e, "cannot set up a connection");
            return;
        }
    };
    let served = Arc::new(AtomicUsize::new(0));
    let svc = {
        let (gw, served) = (gw.clone(), served.clone());
        hyper::service::service_fn(move |req: Request<Incoming>| {
            served.fetch_add(1, Ordering::Relaxed);
            // Called now, not in the future: the request is accounted for even if
            // hyper drops the future unpolled. Boxed: the handler's future holds every
            // state of a request (ingress, router, upstream call) and is several KiB,
            // which hyper's dispatcher and the wrappers below moved by value five
            // times a request (callgrind: a third of its instructions in memcpy).
            let handling = Box::pin(handler::handle(gw.clone(), req));
            async move { Ok::<_, Infallible>(contained(handling).await) }
        })
    };
    // hyper's own answers to what it cannot parse get the documented shape, and the
    // request its log line and count.
    let refused_gw = gw.clone();
    let tcp = super::send_deadline::SendDeadline::new(tcp, gw.settings.send_timeout);
    let io = TokioIo::new(super::bare_errors::Answering::new(tcp).on_answer(Box::new(
        move |status, code| super::ask::unparsed(&refused_gw, status, code),
    )));
    let conn = watcher.watch(http.serve_connection(io, svc));
    if let Err(e) = conn.await {
        if e.is_timeout() && served.load(Ordering::Relaxed) == 0 {
            super::ask::unparsed(&gw, 408, "header_timeout");
            let e = ApiError::new(
                408,
                "invalid_request_error",
                "request_timeout",
                format!(
                    "the request head did not arrive within {} ms",
                    gw.settings.header_read_timeout.as_millis()
                ),
            );
            if let Some(spare) = spare {
                refuse(spare, e).await;
            }
        }
    }
    drop(permit);
}

fn split_handle(tcp: TcpStream) -> std::io::Result<(TcpStream, Option<TcpStream>)> {
    let std = tcp.into_std()?;
    let spare = std
        .try_clone()
        .ok()
        .and_then(|s| TcpStream::from_std(s).ok());
    Ok((TcpStream::from_std(std)?, spare))
}

/// Runs the handler; a panic in it becomes a 500 for this request, not a lost process.
async fn contained(handling: impl Future<Output = Response<Body>> + Send) -> Response<Body> {
    match AssertUnwindSafe(handling).catch_unwind().await {
        Ok(r) => r,
        Err(_) => {
            tracing::error!(target: "poolctl::serve", "a request handler panicked");
            let mut r = super::http::error_response(
                &ApiError::new(
                    500,
                    "error",
                    "internal",
                    "the gateway failed on this request",
                ),
                Flavor::OpenAi,
            );
            // What the router did is lost with the handler: nothing is claimed.
            super::http::trace_headers(r.headers_mut(), None, "failed", 0);
            r
        }
    }
}

/// Writes `e` as a whole HTTP/1.1 response and closes the connection.
async fn refuse(mut tcp: TcpStream, e: ApiError) {
    let body = e.body(Flavor::OpenAi);
    let reason = match e.status {
        408 => "Request Timeout",
        429 => "Too Many Requests",
        _ => "Error",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: application/json\r\nx-should-retry: false\r\n\
         x-poolctl-served-by: \r\nx-poolctl-outcome: failed\r\nx-poolctl-attempts: 0\r\n\
         connection: close\r\ncontent-length: {}\r\n",
        e.status,
        body.len()
    );
    if e.status == 429 {
        head.push_str("retry-after: 1\r\n");
    }
    head.push_str("\r\n");
    let write = async {
        tcp.write_all(head.as_bytes()).await?;
        tcp.write_all(&body).await?;
        tcp.shutdown().await
    };
    if tokio::time::timeout(REFUSAL_DEADLINE, write).await.is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    let drain = async {
        let mut total = 0usize;
        while total < 64 * 1024 {
            match tcp.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(REFUSAL_DEADLINE, drain).await;
}

/// Serves `/metrics` alone on `listener` (`--metrics-listen`), without the token: an
/// address of their own, on a scrape network the clients cannot reach. Ends when
/// `shutdown` resolves; a scrape has no drain worth waiting for.
pub async fn serve_metrics(
    listener: TcpListener,
    gw: Arc<Gateway>,
    shutdown: impl Future<Output = ()>,
) {
    let http = http_builder(&gw);
    let addr = listener.local_addr().ok();
    // A handful at once is plenty for scrapers; more wait in the kernel's backlog.
    let permits = Arc::new(Semaphore::new(16));
    tokio::pin!(shutdown);
    loop {
        let (tcp, _) = tokio::select! {
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(_) => {
                    real_sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = &mut shutdown => return,
        };
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (gw, http) = (gw.clone(), http.clone());
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let gw = gw.clone();
                async move { Ok::<_, Infallible>(scrape(&gw, addr, req).await) }
            });
            let _ = http.serve_connection(TokioIo::new(tcp), svc).await;
            drop(permit);
        });
    }
}

async fn scrape(
    gw: &Gateway,
    addr: Option<std::net::SocketAddr>,
    req: Request<Incoming>,
) -> Response<Body> {
    use hyper::Method;
    let host = req.headers().get(hyper::header::HOST).map(|v| v.as_bytes());
    let refused = |status: u16, code: &str, message: &str| {
        super::http::error_response(
            &ApiError::new(status, "invalid_request_error", code, message),
            Flavor::OpenAi,
        )
    };
    if let Some(fault) = super::guard::host_fault(req.version(), req.headers()) {
        return super::http::error_response(&handler::host_error(fault), Flavor::OpenAi);
    }
    // An absolute-form target's host wins over `Host` (RFC 9112 §3.2.2): both must
    // name loopback.
    let target = req.uri().authority().map(|a| a.as_str().as_bytes());
    let named = |a: std::net::SocketAddr| {
        super::guard::host_allowed(a, host)
            && target.is_none_or(|t| super::guard::host_allowed(a, Some(t)))
    };
    if addr.is_some_and(|a| !named(a)) {
        return refused(
            421,
            "misdirected_request",
            "this address is loopback: `Host` must name loopback",
        );
    }
    if req.headers().contains_key(hyper::header::ORIGIN) {
        return refused(
            403,
            "origin_not_allowed",
            "the metrics address answers no web page",
        );
    }
    match (req.method(), req.uri().path()) {
        (&Method::GET | &Method::HEAD, "/metrics") => handler::metrics(gw).await,
        _ => refused(404, "unknown_url", "this address serves GET /metrics only"),
    }
}
