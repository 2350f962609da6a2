//! A private `redis-server` for tests and benchmarks: started on a free loopback port,
//! with no persistence and its files in a temporary directory, and stopped (killed) when
//! dropped. Never the shared 6379, never anyone else's data: nothing needs a FLUSHALL.
//! Without `redis-server` installed, starting fails with a message that names the Debian
//! package; a test that needs Redis then fails, it never skips.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a starting server may take to say it accepts connections.
const READY_WITHIN: Duration = Duration::from_secs(10);

pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    /// Holds the server's working directory until it stops.
    _dir: tempdir::Dir,
}

/// What `redis-server` is called, `$POOLCTL_REDIS_SERVER` overriding.
fn program() -> PathBuf {
    std::env::var_os("POOLCTL_REDIS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("redis-server"))
}

impl RedisServer {
    /// Starts a server on a free loopback port; `Err` says why it could not.
    pub fn start() -> Result<RedisServer, String> {
        let mut last = String::new();
        // The free port is found by binding port 0 and letting it go; another process may
        // take it in between, so a start that fails to bind is tried again on a new one.
        for _ in 0..5 {
            match Self::try_start() {
                Ok(s) => return Ok(s),
                Err(e) if e.starts_with("redis-server is not installed") => return Err(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// [`RedisServer::start`], panicking with its message: for tests.
    pub fn must_start() -> RedisServer {
        Self::start().unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_start() -> Result<RedisServer, String> {
        let port = TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("cannot find a free loopback port: {e}"))?
            .port();
        let dir = tempdir::Dir::new().map_err(|e| format!("cannot make a directory: {e}"))?;
        let mut child = Command::new(program())
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "yes", "--daemonize", "no", "--logfile", ""])
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => "redis-server is not installed: install the Debian package `redis-server` (apt-get install -y redis-server), or run scripts/test, which does".to_string(),
                _ => format!("cannot start redis-server: {e}"),
            })?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.contains("Ready to accept connections") {
                    let _ = tx.send(Ok(()));
                } else if line.contains("Address already in use")
                    || line.contains("# Failed")
                    || line.contains("Fatal")
                {
                    let _ = tx.send(Err(line));
                }
            }
            // The server's output is drained until it exits, so it never blocks on a full pipe.
        });
        let mut server = RedisServer {
            child: Some(child),
            port,
            _dir: dir,
        };
        match rx.recv_timeout(READY_WITHIN) {
            Ok(Ok(())) => Ok(server),
            Ok(Err(line)) => {
                server.kill();
                Err(format!("redis-server on port {port} failed: {line}"))
            }
            Err(_) => {
                server.kill();
                Err(format!(
                    "redis-server on port {port} did not accept connections within {} s",
                    READY_WITHIN.as_secs()
                ))
            }
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL a pool config names it by.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// The server's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server at once (SIGKILL) and reaps it: a store that vanishes mid-request.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` (e.g. `STOP`, `CONT`) to the server: `STOP` makes a store that
    /// accepts connections and never answers.
    pub fn signal(&self, signal: &str) -> Result<(), String> {
        let pid = self.pid().ok_or("the server is not running")?;
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .map_err(|e| format!("cannot run kill: {e}"))?;
        status
            .success()
            .then_some(())
            .ok_or_else(|| format!("kill -{signal} {pid} failed"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A temporary directory without a dev-dependency: the harness is library code.
mod tempdir {
    use std::path::{Path, PathBuf};

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new() -> std::io::Result<Dir> {
            static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!(
                "poolctl-redis-{}-{n}-{}",
                std::process::id(),
                fastrand::u64(..)
            ));
            std::fs::create_dir_all(&path)?;
            Ok(Dir(path))
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
