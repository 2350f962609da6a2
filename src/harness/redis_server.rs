//! A private `redis-server` for tests and benchmarks: started on a free loopback port,
//! with no persistence and its files in a temporary directory, and stopped (killed) when
//! dropped. Never the shared 6379, never anyone else's data: nothing needs a FLUSHALL.
//! Without `redis-server` installed, starting fails with a message that names the Debian
//! package; a test that needs Redis then fails, it never skips.
//!
//! Also: a node that speaks only TLS ([`RedisServer::start_tls`], with a throwaway CA
//! made by the `openssl` CLI, [`TestCa`]) and a 3-master Redis Cluster
//! ([`RedisCluster::start`], created with `redis-cli --cluster create`, Debian package
//! `redis-tools`), plain or over TLS.

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
    /// `rediss` when the node speaks only TLS.
    tls: bool,
    /// Holds the server's working directory until it stops.
    _dir: tempdir::Dir,
}

/// How a node is started, beyond a private loopback port and no persistence.
#[derive(Clone, Default)]
struct Mode<'a> {
    /// TLS only (the plain port off), with this CA's server certificate.
    tls: Option<&'a TestCa>,
    /// Whether the node asks clients for a certificate signed by the CA (mutual TLS).
    client_auth: bool,
    cluster: bool,
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
        Self::start_mode(Mode::default())
    }

    /// Starts a server that speaks only TLS, its certificate signed by `ca`; with
    /// `client_auth` it refuses a client without a certificate of `ca`'s.
    pub fn start_tls(ca: &TestCa, client_auth: bool) -> Result<RedisServer, String> {
        Self::start_mode(Mode {
            tls: Some(ca),
            client_auth,
            cluster: false,
        })
    }

    fn start_mode(mode: Mode<'_>) -> Result<RedisServer, String> {
        let mut last = String::new();
        // The free port is found by binding port 0 and letting it go; another process may
        // take it in between, so a start that fails to bind is tried again on a new one.
        for _ in 0..5 {
            match Self::try_start(&mode) {
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

    fn try_start(mode: &Mode<'_>) -> Result<RedisServer, String> {
        let port = free_port(mode.cluster)?;
        let dir = tempdir::Dir::new().map_err(|e| format!("cannot make a directory: {e}"))?;
        let mut cmd = Command::new(program());
        match mode.tls {
            None => {
                cmd.args(["--port", &port.to_string()]);
            }
            Some(ca) => {
                cmd.args(["--port", "0", "--tls-port", &port.to_string()])
                    .arg("--tls-cert-file")
                    .arg(ca.server_cert())
                    .arg("--tls-key-file")
                    .arg(ca.server_key())
                    .arg("--tls-ca-cert-file")
                    .arg(ca.ca_file())
                    .args([
                        "--tls-auth-clients",
                        if mode.client_auth { "yes" } else { "no" },
                    ]);
                if mode.cluster {
                    cmd.args(["--tls-cluster", "yes"]);
                }
            }
        }
        if mode.cluster {
            cmd.args(["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"])
                .arg("--cluster-config-file")
                .arg(dir.path().join("nodes.conf"));
        }
        let mut child = cmd
            .args(["--bind", "127.0.0.1"])
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
            tls: mode.tls.is_some(),
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

    /// The URL a pool config names it by (`rediss://` for a TLS node: with the CA file
    /// as `state_tls.ca_file`, or [`RedisServer::insecure_url`]).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}/0", self.port)
    }

    /// The redis crate's documented test form for a TLS node: certificates unchecked.
    pub fn insecure_url(&self) -> String {
        format!("{}#insecure", self.url())
    }

    /// Starts the server again on the same port after [`RedisServer::kill`], empty (it has
    /// no persistence): a Redis restarted after a crash, its data lost. Plain nodes only.
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        let again = Self::try_start_on(self.port)?;
        *self = again;
        Ok(())
    }

    fn try_start_on(port: u16) -> Result<RedisServer, String> {
        // The port was just freed; bind it through the same path as a fresh start.
        FIXED_PORT.with(|p| p.set(Some(port)));
        let r = Self::try_start(&Mode::default());
        FIXED_PORT.with(|p| p.set(None));
        r
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

std::thread_local! {
    /// A port [`RedisServer::restart`] asks for instead of a free one.
    static FIXED_PORT: std::cell::Cell<Option<u16>> = const { std::cell::Cell::new(None) };
}

/// A free loopback port. A cluster node also needs port + 10000 (its cluster bus), so it
/// gets one whose bus port is free too.
fn free_port(cluster: bool) -> Result<u16, String> {
    if let Some(p) = FIXED_PORT.with(|p| p.get()) {
        return Ok(p);
    }
    for _ in 0..50 {
        let port = TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("cannot find a free loopback port: {e}"))?
            .port();
        if !cluster {
            return Ok(port);
        }
        if port <= 55_535 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return Ok(port);
        }
    }
    Err("cannot find a free loopback port whose cluster bus port (+10000) is free".into())
}

/// A throwaway certificate authority, made by the `openssl` CLI in a temporary
/// directory: a CA, a server certificate for 127.0.0.1 and localhost, and a client
/// certificate, all signed by it. The CLI, not a crate: it is on every Debian machine
/// that has Redis's TLS (which links OpenSSL), and the harness stays free of a
/// certificate-making dependency.
pub struct TestCa {
    dir: tempdir::Dir,
}

impl TestCa {
    pub fn generate() -> Result<TestCa, String> {
        let dir = tempdir::Dir::new().map_err(|e| format!("cannot make a directory: {e}"))?;
        let d = dir.path();
        let ext = d.join("san.cnf");
        std::fs::write(&ext, "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
            .map_err(|e| e.to_string())?;
        let run = |args: &[&str]| -> Result<(), String> {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(d)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => {
                        "openssl is not installed: install the Debian package `openssl`".to_string()
                    }
                    _ => format!("cannot run openssl: {e}"),
                })?;
            out.status.success().then_some(()).ok_or_else(|| {
                format!(
                    "openssl {} failed: {}",
                    args.first().unwrap_or(&""),
                    String::from_utf8_lossy(&out.stderr)
                )
            })
        };
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=poolctl test CA",
        ])?;
        for name in ["server", "client"] {
            let (key, csr, pem) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.pem"),
            );
            run(&[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={name}"),
            ])?;
            run(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                "san.cnf",
            ])?;
        }
        Ok(TestCa { dir })
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }
    pub fn server_cert(&self) -> PathBuf {
        self.dir.path().join("server.pem")
    }
    pub fn server_key(&self) -> PathBuf {
        self.dir.path().join("server.key")
    }
    pub fn client_cert(&self) -> PathBuf {
        self.dir.path().join("client.pem")
    }
    pub fn client_key(&self) -> PathBuf {
        self.dir.path().join("client.key")
    }
}

/// A 3-master Redis Cluster on loopback (no replicas), plain or over TLS, stopped when
/// dropped.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// The CA `redis-cli` trusts, for a TLS cluster.
    ca_file: Option<PathBuf>,
}

/// How long `redis-cli --cluster create` and the cluster agreeing may take.
const CLUSTER_WITHIN: Duration = Duration::from_secs(30);

impl RedisCluster {
    /// Three masters, their slots assigned by `redis-cli --cluster create`; answers once
    /// every node says `cluster_state:ok`.
    pub fn start(tls: Option<&TestCa>) -> Result<RedisCluster, String> {
        let nodes = (0..3)
            .map(|_| {
                RedisServer::start_mode(Mode {
                    tls,
                    client_auth: false,
                    cluster: true,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let cluster = RedisCluster {
            nodes,
            ca_file: tls.map(TestCa::ca_file),
        };
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(addrs);
        args.extend([
            "--cluster-replicas".into(),
            "0".into(),
            "--cluster-yes".into(),
        ]);
        let out = cluster.cli(&args)?;
        if !out.contains("All 16384 slots covered") {
            return Err(format!(
                "redis-cli --cluster create did not cover the slots: {out}"
            ));
        }
        let start = crate::core::clock::Stopwatch::start();
        for n in &cluster.nodes {
            loop {
                let info = cluster.cli(&[
                    "-p".into(),
                    n.port().to_string(),
                    "cluster".into(),
                    "info".into(),
                ])?;
                if info.contains("cluster_state:ok") {
                    break;
                }
                if start.elapsed() > CLUSTER_WITHIN {
                    return Err(format!(
                        "the cluster did not agree within {} s: {info}",
                        CLUSTER_WITHIN.as_secs()
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(cluster)
    }

    /// [`RedisCluster::start`], panicking with its message: for tests.
    pub fn must_start(tls: Option<&TestCa>) -> RedisCluster {
        Self::start(tls).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs `redis-cli` against the cluster's first node (TLS flags added), bounded.
    fn cli(&self, args: &[String]) -> Result<String, String> {
        let first = &self.nodes[0];
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", "127.0.0.1", "-p", &first.port().to_string()]);
        if first.tls {
            let ca = self.ca_file.clone().ok_or("a TLS cluster without its CA")?;
            cmd.arg("--tls").arg("--cacert").arg(ca);
        }
        let child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => "redis-cli is not installed: install the Debian package `redis-tools` (apt-get install -y redis-tools), or run scripts/test, which does".to_string(),
                _ => format!("cannot run redis-cli: {e}"),
            })?;
        wait_output(child, CLUSTER_WITHIN)
    }

    /// The URL a pool config names it by: every node, `redis+cluster://` or
    /// `rediss+cluster://`.
    pub fn url(&self) -> String {
        let scheme = if self.nodes[0].tls {
            "rediss+cluster"
        } else {
            "redis+cluster"
        };
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("{scheme}://{}", hosts.join(","))
    }

    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }
}

/// A child's stdout and stderr once it exits, or an error if it runs past `within` (it
/// is killed then): a stuck `redis-cli` never hangs a test.
fn wait_output(mut child: Child, within: Duration) -> Result<String, String> {
    let start = crate::core::clock::Stopwatch::start();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() > within => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "redis-cli did not finish within {} s",
                    within.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(e.to_string()),
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("redis-cli failed: {text}"))
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
