//! A running `poolctl serve` for the gateway tests: the built binary on a free loopback
//! port, its address read from its first stdout line, stopped with SIGTERM.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

/// How long any one wait on the gateway may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// A running `poolctl serve`; killed when dropped.
pub struct Gateway {
    pub child: tokio::process::Child,
    pub base: String,
    pub addr: std::net::SocketAddr,
    stderr: tokio::task::JoinHandle<String>,
}

/// `poolctl serve --config CONFIG --listen 127.0.0.1:0 EXTRA…`, with `env` set (and no
/// inherited `POOLCTL_SERVE_TOKEN`), once it prints its address.
pub async fn start(config: &Path, extra: &[&str], env: &[(&str, &str)]) -> Gateway {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"));
    cmd.arg("serve")
        .arg("--config")
        .arg(config)
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .env_remove("POOLCTL_SERVE_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("poolctl starts");
    let stdout = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let stderr = tokio::spawn(async move {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s).await;
        s
    });
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(DEADLINE, lines.next_line())
        .await
        .expect("serve prints its address in time")
        .unwrap()
        .expect("serve prints its address");
    let base = line.rsplit(' ').next().unwrap().to_string();
    let addr = base.trim_start_matches("http://").parse().unwrap();
    Gateway {
        child,
        base,
        addr,
        stderr,
    }
}

impl Gateway {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn metrics(&self) -> String {
        tokio::time::timeout(DEADLINE, async {
            reqwest::get(self.url("/metrics"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        })
        .await
        .expect("/metrics answers in time")
    }

    /// The value of the one series `name_and_labels` (e.g. `name{label="x"}`).
    pub async fn metric(&self, name_and_labels: &str) -> f64 {
        let text = self.metrics().await;
        text.lines()
            .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name_and_labels} in /metrics:\n{text}"))
    }

    /// Stops the gateway with SIGTERM and returns its exit code and stderr.
    pub async fn stop(mut self) -> (Option<i32>, String) {
        let pid = self.child.id().unwrap().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
        let status = tokio::time::timeout(DEADLINE, self.child.wait())
            .await
            .expect("serve stops in time")
            .unwrap();
        let stderr = self.stderr.await.unwrap();
        (status.code(), stderr)
    }
}

/// POSTs `body` (JSON bytes, sent as they are) to the gateway's `at` with `headers`,
/// within [`DEADLINE`].
pub async fn send(
    gw: &Gateway,
    at: &str,
    body: impl AsRef<[u8]>,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(gw.url(at))
        .header("content-type", "application/json")
        .body(body.as_ref().to_vec());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    tokio::time::timeout(DEADLINE, req.send())
        .await
        .expect("the gateway answers in time")
        .unwrap()
}

/// The value of the answer's header `name`, empty when it has none.
pub fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

/// The JSON of every `data:` line of an SSE body but `[DONE]`.
pub fn data_lines(body: &str) -> Vec<serde_json::Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).expect("each data line is JSON"))
        .collect()
}
