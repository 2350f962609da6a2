//! A raw-socket upstream for hostile-peer tests: it reads one HTTP/1.1 request (head and
//! `Content-Length` body) and hands it, with the socket, to a handler that may answer
//! anything at all: echo the key, never finish a line, talk forever, or stay silent.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Head {
    pub method: String,
    pub target: String,
    /// Lowercase names, in arrival order (repeated headers stay repeated).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The key the client sent, whichever wire's header carries it.
    pub fn key(&self) -> String {
        self.header("authorization")
            .map(|v| v.trim_start_matches("Bearer ").to_string())
            .or_else(|| self.header("x-api-key").map(str::to_string))
            .or_else(|| self.header("x-goog-api-key").map(str::to_string))
            .unwrap_or_default()
    }
}

type Handler =
    Arc<dyn Fn(Head, TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

pub struct Upstream {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Head>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    pub fn url(&self, prefix: &str) -> String {
        format!("http://{}{prefix}", self.addr)
    }

    pub fn requests(&self) -> Vec<Head> {
        self.seen.lock().unwrap().clone()
    }
}

pub async fn start<F, Fut>(handler: F) -> Upstream
where
    F: Fn(Head, TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let handler: Handler = Arc::new(move |h, s| Box::pin(handler(h, s)));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((mut stream, _)) = accepted else { continue };
                    let handler = handler.clone();
                    let seen = seen2.clone();
                    conns.spawn(async move {
                        if let Some(head) = read_head(&mut stream).await {
                            seen.lock().unwrap().push(head.clone());
                            handler(head, stream).await;
                        }
                    });
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
    });
    Upstream { addr, seen, task }
}

async fn read_head(stream: &mut TcpStream) -> Option<Head> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let text = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let target = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Head {
        method,
        target,
        headers,
        body,
    })
}

/// A whole response with `Content-Length`.
pub async fn respond(
    stream: &mut TcpStream,
    status: u16,
    headers: &[(&str, &str)],
    content_type: &str,
    body: &[u8],
) {
    let mut head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body).await;
    let _ = stream.flush().await;
}

/// The head of a chunked 200 SSE response; follow with `chunk` calls.
pub async fn sse_head(stream: &mut TcpStream) -> std::io::Result<()> {
    stream
        .write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
        )
        .await?;
    stream.flush().await
}

/// One HTTP chunk.
pub async fn chunk(stream: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    stream
        .write_all(format!("{:x}\r\n", bytes.len()).as_bytes())
        .await?;
    stream.write_all(bytes).await?;
    stream.write_all(b"\r\n").await?;
    stream.flush().await
}

/// A pool config with one provider per `(name, wire, base_url)` and one tier `t` of
/// `routes` (path `path`), key in `$POOLCTL_HOSTILE_KEY`.
pub fn pool_yaml(
    providers: &[(&str, &str, &str)],
    routes: &[&str],
    path: &str,
    extra: &str,
) -> String {
    let mut y = String::from("providers:\n");
    for (name, wire, url) in providers {
        y.push_str(&format!(
            "  {name}:\n    wire: {wire}\n    base_url: \"{url}\"\n    api_key_env: POOLCTL_HOSTILE_KEY\n{extra}"
        ));
    }
    y.push_str("tiers:\n  t:\n");
    for r in routes {
        y.push_str(&format!("    - {{ route: {r}, path: {path} }}\n"));
    }
    y
}
