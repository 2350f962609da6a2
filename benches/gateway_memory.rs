//! The gateway's memory under clients that would grow it (issue 21): the resident set
//! of a real `poolctl serve` (this build's binary) before and after 100,000 requests,
//! each with a distinct `x-poolctl-session` of the longest accepted length (256
//! bytes), against a loopback mock provider. Sessions are bounded (`sessions:`
//! `max` 100,000 by default, LRU past it, idle expiry): the figure is what that bound
//! costs, and a second run with `max: 10000` shows the bound holding.
//!
//! Then hostile upstreams: each streams a 16 MiB answer (just under `max_stream_bytes`)
//! as fast as loopback allows, to one client, then to 60 clients at once; the figure is
//! the gateway's peak RSS (VmHWM) per case, a fresh process each, with the default cap
//! on held answer bytes (256 MiB).
//!
//! `cargo bench --bench gateway_memory` (about two minutes; bounded in count and time).

use poolctl::core::vocab::{CallPath, Route, Wire};
use poolctl::harness::mock::{MockRoute, MockServer};
use poolctl::harness::scenario::Reply;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

const REQUESTS: usize = 100_000;
const CLIENTS: usize = 32;
/// No run may take longer than this, whatever the machine.
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// VmRSS and VmHWM of `pid`, in MiB.
fn rss_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// A release `poolctl serve` (this build's) in front of `base_url` as tier `high`,
/// with `extra` YAML: the process, its pid and its base URL. The temporary directory
/// holding its config lives as long as the returned guard.
async fn serve(
    base_url: &str,
    extra: &str,
) -> (tokio::process::Child, u32, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "providers:\n  prim:\n    wire: openai\n    base_url: {base_url}\n    api_key_env: BENCH_KEY\n\
         tiers:\n  high:\n    - prim/model-a\n{extra}"
    );
    let config = dir.path().join("pool.yaml");
    std::fs::write(&config, yaml).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .env("BENCH_KEY", "sk-bench")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("poolctl serve starts");
    let pid = child.id().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().unwrap();
    let base = line.rsplit(' ').next().unwrap().to_string();
    (child, pid, base, dir)
}

async fn run(mock: &MockServer, extra: &str) -> (f64, f64, f64, usize) {
    let (mut child, pid, base, _dir) = serve(&mock.base_url("prim", Wire::OpenAi), extra).await;
    let url = format!("{base}/v1/chat/completions");
    let client = reqwest::Client::new();
    let body = r#"{"model":"high","messages":[{"role":"user","content":"hi"}]}"#;
    // Warm: connections, allocator arenas.
    for _ in 0..200 {
        let _ = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await;
    }
    let (before, _) = rss_mib(pid);
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let ok = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (client, url, next, ok) = (client.clone(), url.clone(), next.clone(), ok.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= REQUESTS {
                    break;
                }
                // 256 bytes: the longest id accepted by default, each one distinct.
                let id = format!("{i:0>256}");
                let r = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("x-poolctl-session", id)
                    .body(body)
                    .send()
                    .await;
                if r.is_ok_and(|r| r.status() == 200) {
                    ok.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }));
    }
    let all = async {
        for t in tasks {
            let _ = t.await;
        }
    };
    if tokio::time::timeout(RUN_LIMIT, all).await.is_err() {
        eprintln!("the run passed its {} s limit", RUN_LIMIT.as_secs());
    }
    let (after, peak) = rss_mib(pid);
    let _ = child.kill().await;
    (
        before,
        after,
        peak,
        ok.load(std::sync::atomic::Ordering::Relaxed),
    )
}

/// A hostile upstream: every request is answered with a 16 MiB SSE stream of text
/// deltas, 16 KiB each, then a finish and `[DONE]`.
async fn flood_upstream() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 8192];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let text = "x".repeat(16 * 1024);
                let chunk = format!(
                    "data: {{\"id\":\"f\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":null}}]}}\n\n"
                );
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                if tcp.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                // 1,023 chunks: 16 MiB less one chunk, under max_stream_bytes.
                for _ in 0..1023 {
                    if tcp.write_all(chunk.as_bytes()).await.is_err() {
                        return;
                    }
                }
                let end = "data: {\"id\":\"f\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
                let _ = tcp.write_all(end.as_bytes()).await;
            });
        }
    });
    url
}

/// Peak RSS of a fresh gateway while `clients` stream one flood answer each.
async fn flood(url: &str, clients: usize) -> (f64, usize) {
    let (mut child, pid, base, _dir) = serve(url, "").await;
    let client = reqwest::Client::new();
    let body = r#"{"model":"high","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (client, url) = (client.clone(), format!("{base}/v1/chat/completions"));
        tasks.push(tokio::spawn(async move {
            let Ok(mut r) = client
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
            else {
                return 0usize;
            };
            let mut n = 0;
            while let Ok(Some(c)) = r.chunk().await {
                n += c.len();
            }
            n
        }));
    }
    let mut delivered = 0;
    let all = async {
        for t in tasks {
            delivered += t.await.unwrap_or(0);
        }
    };
    if tokio::time::timeout(RUN_LIMIT, all).await.is_err() {
        eprintln!("the flood passed its {} s limit", RUN_LIMIT.as_secs());
    }
    let (_, peak) = rss_mib(pid);
    let _ = child.kill().await;
    (peak, delivered)
}

#[tokio::main]
async fn main() {
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        vec![MockRoute {
            route: Route::parse("prim/model-a").unwrap(),
            wire: Wire::OpenAi,
            path: CallPath::Chat,
            replies: vec![Reply::Ok {
                text: "hi".into(),
                headers: vec![],
                usage: None,
            }],
            outage: None,
            record: false,
        }],
    )
    .await
    .unwrap();
    println!("gateway_memory: {REQUESTS} requests, each a distinct 256-byte session id");
    println!(
        "{:<28} {:>10} {:>10} {:>10} {:>8}",
        "sessions:", "RSS before", "RSS after", "peak", "200s"
    );
    for (label, extra) in [
        ("default (max 100000)", ""),
        ("max: 10000", "sessions: { max: 10000 }\n"),
    ] {
        let (before, after, peak, ok) = run(&mock, extra).await;
        println!("{label:<28} {before:>7.1} MiB {after:>6.1} MiB {peak:>6.1} MiB {ok:>8}");
    }
    let url = flood_upstream().await;
    println!("\nhostile upstreams: a 16 MiB stream each, as fast as loopback allows");
    println!(
        "{:<28} {:>10} {:>14}",
        "clients", "peak RSS", "bytes to them"
    );
    for clients in [1, 60] {
        let (peak, delivered) = flood(&url, clients).await;
        println!(
            "{clients:<28} {peak:>6.1} MiB {:>10.1} MiB",
            delivered as f64 / 1048576.0
        );
    }
}
