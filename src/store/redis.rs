//! The fleet's store: health and breaker state in Redis, shared by every process that
//! names the same `state: redis://…` (one node), `rediss://…` (one node over TLS) or
//! `redis+cluster://h:p,h:p…` / `rediss+cluster://…` (a Redis Cluster, through the redis
//! crate's cluster client, which keeps the slot map and follows MOVED/ASK). Each route's
//! record is one hash, `poolctl:{PROVIDER}:r:MODEL`, under its provider's hash tag, so that every script
//! touches the keys of one provider only and runs unchanged on Redis Cluster. Every
//! change is ONE Lua script (`redis/health.lua`, `redis/breaker.lua`: the pure rules of
//! `health::apply` and `breaker::step`, transcribed), so it sees exactly the state it
//! replaces whatever other processes do. Every call is bounded by a deadline: an
//! unreachable or slow Redis answers an error in time, never a hang. What a caller does
//! then is its own choice (see [`super::FallbackStore`] for the router's).

use super::{HealthStore, Known, StoreError, StoreFuture};
use crate::core::clock::UnixMs;
use crate::core::vocab::Route;
use crate::policy::breaker::{self, Admit, BreakerConfig};
use crate::policy::health::{Health, Transition};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Every key this store writes starts with it: `FLUSHALL` is never needed to clean up,
/// and a Redis shared with other software keeps its own keys.
pub const PREFIX: &str = "poolctl:";

/// How long one store call may take by default: well under any request deadline, well
/// over a loopback or same-zone round trip.
pub const DEFAULT_DEADLINE_MS: u64 = 200;

static HEALTH: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("redis/health.lua")));
static BREAKER: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("redis/breaker.lua")));
static EPOCH: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("redis/epoch.lua")));
static RESTORE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("redis/restore.lua")));

#[derive(Clone)]
pub struct RedisStore {
    /// The URL without credentials, for messages.
    target: Arc<str>,
    conn: Conn,
    deadline: Duration,
    /// The epoch of each provider's keys as this handle last saw it: one that changed
    /// means the store lost that provider's data ([`HealthStore::write_back_if_lost`]).
    epochs: Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
}

/// One node (reconnecting manager) or a cluster (slot map, redirects). Both are cheap
/// clones of one multiplexed connection, so every call takes its own.
#[derive(Clone)]
pub(crate) enum Conn {
    One(ConnectionManager),
    Cluster(ClusterConnection),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::One(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::One(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::One(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// `state_tls:` in the config: where a TLS store's trust and identity come from. Paths
/// as written (the config resolves them against its own directory). Without `ca_file`
/// the system's roots are trusted, as for any managed Redis with a public CA.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "TLS settings for the state store: a map with `ca_file`, `cert_file`, `key_file`"
)]
pub struct StateTls {
    /// PEM: the CA(s) that signed the server's certificate, instead of the system's.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// PEM: a client certificate chain, for a Redis that asks for one (mutual TLS).
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// PEM: the client certificate's private key.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
}

impl StateTls {
    /// Reads the files. Each error names the field and the file, never their content.
    pub fn certificates(&self) -> Result<redis::TlsCertificates, String> {
        let read = |field: &str, p: &PathBuf| {
            std::fs::read(p)
                .map_err(|e| format!("`state_tls.{field}`: cannot read {}: {e}", p.display()))
        };
        let client_tls = match (&self.cert_file, &self.key_file) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read("cert_file", cert)?,
                client_key: read("key_file", key)?,
            }),
            (Some(_), None) => return Err("`state_tls.cert_file` needs `state_tls.key_file`, its private key".into()),
            (None, Some(_)) => return Err("`state_tls.key_file` needs `state_tls.cert_file`, the certificate it is the key of".into()),
        };
        let root_cert = match &self.ca_file {
            Some(p) => Some(read("ca_file", p)?),
            None => None,
        };
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert,
        })
    }
}

/// A `state:` URL, parsed: the scheme poolctl names and the node URLs the redis crate takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateUrl {
    pub tls: bool,
    pub cluster: bool,
    /// One URL per node, each a plain `redis://` or `rediss://` URL the redis crate parses.
    pub nodes: Vec<String>,
}

/// Parses `state:` as a Redis URL: `redis://`, `rediss://`, `redis+cluster://h:p,h:p…`,
/// `rediss+cluster://…`. The redis crate takes a cluster as a list of node URLs, so the
/// one-line form is split here: credentials and the `#insecure` fragment apply to every
/// node. Errors never echo the URL (it may hold a password).
pub fn parse_state_url(url: &str) -> Result<StateUrl, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or("not a URL: expected redis://, rediss://, redis+cluster:// or rediss+cluster://")?;
    let (tls, cluster) = match scheme {
        "redis" => (false, false),
        "rediss" => (true, false),
        "redis+cluster" => (false, true),
        "rediss+cluster" => (true, true),
        _ => {
            return Err(format!(
                "`{scheme}://` is not a Redis scheme: expected redis://, rediss://, redis+cluster:// or rediss+cluster://"
            ))
        }
    };
    let node_scheme = if tls { "rediss" } else { "redis" };
    let nodes = if !cluster {
        vec![url.to_string()]
    } else {
        let (rest, fragment) = match rest.split_once('#') {
            Some((r, f)) => (r, format!("#{f}")),
            None => (rest, String::new()),
        };
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((u, r)) => (format!("{u}@"), r),
            None => (String::new(), rest),
        };
        let (hosts, path) = match rest.split_once('/') {
            Some((h, p)) => (h, p),
            None => (rest, ""),
        };
        // A cluster has one database, 0 (Redis refuses SELECT there).
        if !(path.is_empty() || path == "0") {
            return Err(
                "a Redis Cluster has database 0 only: end the URL with the node list or /0".into(),
            );
        }
        let hosts: Vec<&str> = hosts.split(',').map(str::trim).collect();
        if hosts.iter().any(|h| h.is_empty()) {
            return Err("expected a node list: redis+cluster://host:port[,host:port…]".into());
        }
        hosts
            .into_iter()
            .map(|h| format!("{node_scheme}://{userinfo}{h}/0{fragment}"))
            .collect()
    };
    for node in &nodes {
        // Parses only: never connects.
        redis::Client::open(node.as_str()).map_err(|e| {
            format!(
                "not a usable Redis URL ({}): expected {scheme}://[[user]:password@]host[:port]{}",
                e.detail().unwrap_or("cannot be parsed"),
                if cluster { "[,host:port…]" } else { "[/db]" }
            )
        })?;
    }
    Ok(StateUrl {
        tls,
        cluster,
        nodes,
    })
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.target)
            .finish()
    }
}

/// A Redis URL (`redis://`, `rediss://`, `redis+cluster://`, `rediss+cluster://`) names
/// a Redis; anything else (a path) names SQLite.
pub fn is_redis_url(state: &str) -> bool {
    [
        "redis://",
        "rediss://",
        "redis+cluster://",
        "rediss+cluster://",
    ]
    .iter()
    .any(|s| state.starts_with(s))
}

/// The record of a route.
pub fn key(route: &Route) -> String {
    format!("{PREFIX}{{{}}}:r:{}", route.provider(), route.model())
}

/// The route a record's key names, if it is one.
fn route_of_key(key: &str) -> Option<Route> {
    let rest = key.strip_prefix(PREFIX)?.strip_prefix('{')?;
    let (provider, model) = rest.split_once("}:r:")?;
    Route::parse(&format!("{provider}/{model}")).ok()
}

impl RedisStore {
    /// A store on the Redis at `url` (any form [`parse_state_url`] takes), with no
    /// `state_tls` (system roots for TLS). See [`RedisStore::open_with`].
    pub fn open(url: &str, deadline: Duration) -> Result<Self, StoreError> {
        Self::open_with(url, None, deadline)
    }

    /// A store on the Redis at `url`, TLS trust and identity from `tls`. Connects
    /// lazily: opening never waits on the network, and a Redis that is down now may be
    /// up by the first call. Call it inside a tokio runtime (the connection's task
    /// lives there).
    pub fn open_with(
        url: &str,
        tls: Option<&StateTls>,
        deadline: Duration,
    ) -> Result<Self, StoreError> {
        let bad = |message: String| StoreError::Backend {
            path: "redis".into(),
            message,
        };
        // The URL may hold a password: every message names only what is wrong.
        let parsed = parse_state_url(url).map_err(|e| bad(format!("`state`: {e}")))?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(bad("opened outside a tokio runtime".into()));
        }
        let certs = match tls {
            Some(t) if parsed.tls => Some(t.certificates().map_err(bad)?),
            Some(_) => return Err(bad(
                "`state_tls` is set but `state` is not a TLS URL (rediss:// or rediss+cluster://)"
                    .into(),
            )),
            None => None,
        };
        let client_of = |node: &str| match &certs {
            Some(c) => redis::Client::build_with_tls(node, c.clone()),
            None => redis::Client::open(node),
        };
        let clients = parsed
            .nodes
            .iter()
            .map(|n| client_of(n))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                bad(format!(
                    "`state` is not a usable Redis URL ({:?})",
                    e.kind()
                ))
            })?;
        let scheme = match (parsed.tls, parsed.cluster) {
            (false, false) => "redis",
            (true, false) => "rediss",
            (false, true) => "redis+cluster",
            (true, true) => "rediss+cluster",
        };
        let addrs: Vec<String> = clients
            .iter()
            .map(|c| c.get_connection_info().addr().to_string())
            .collect();
        let target: Arc<str> = if parsed.cluster {
            format!("{scheme}://{}", addrs.join(","))
        } else {
            let db = clients[0].get_connection_info().redis_settings().db();
            format!("{scheme}://{}/{db}", addrs[0])
        }
        .into();
        let backend = |e: redis::RedisError| StoreError::Backend {
            path: target.to_string(),
            message: e.to_string(),
        };
        let conn = if parsed.cluster {
            let mut b =
                redis::cluster::ClusterClientBuilder::new(parsed.nodes.iter().map(String::as_str))
                    .connection_timeout(deadline)
                    .response_timeout(deadline)
                    // A MOVED or ASK is one retry: a few, each short, so a resharding cluster
                    // answers within the deadline (which bounds the whole call anyway).
                    .retries(3)
                    .min_retry_wait(5)
                    .max_retry_wait((deadline.as_millis() as u64 / 4).max(5));
            if let Some(c) = certs {
                b = b.certs(c);
            }
            let client = b.build().map_err(backend)?;
            // Pending: the slot map is fetched in the background, and a cluster down now
            // answers each call with an error in time, like the one-node manager.
            let config = redis::cluster::ClusterConfig::new()
                .set_connection_timeout(deadline)
                .set_response_timeout(deadline);
            Conn::Cluster(client.get_pending_async_connection_with_config(config))
        } else {
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(deadline))
                .set_response_timeout(Some(deadline))
                // Reconnection is retried on the next call, not in a loop that outlives it.
                .set_number_of_retries(1)
                .set_min_delay(Duration::from_millis(10))
                .set_max_delay(deadline);
            let client = clients.into_iter().next().expect("one node");
            Conn::One(ConnectionManager::new_lazy_with_config(client, config).map_err(backend)?)
        };
        Ok(RedisStore {
            target,
            conn,
            deadline,
            epochs: Arc::default(),
        })
    }

    /// Whether it is a Redis Cluster: a pipeline there may not span slots.
    pub fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// The deadline of one call.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Where it is, without credentials.
    pub fn target(&self) -> &str {
        &self.target
    }

    pub(crate) fn err(&self, message: String) -> StoreError {
        StoreError::Backend {
            path: self.target.to_string(),
            message,
        }
    }

    /// Runs `work` on a connection, within the deadline.
    pub(crate) async fn within<T, F, Fut>(&self, work: F) -> Result<T, StoreError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        match tokio::time::timeout(self.deadline, work(self.conn.clone())).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.err(e.to_string())),
            Err(_) => Err(self.err(format!("no answer within {} ms", self.deadline.as_millis()))),
        }
    }

    /// Runs `cmds` (each on one key) and answers each one's reply, within the deadline:
    /// one pipeline, one round trip, on one node; on a cluster, where a pipeline may not
    /// span slots, every command on its own, all at once on the multiplexed connection.
    pub(crate) async fn each<T>(&self, cmds: Vec<redis::Cmd>) -> Result<Vec<T>, StoreError>
    where
        T: redis::FromRedisValue + Send,
    {
        match &self.conn {
            Conn::One(_) => {
                let mut pipe = redis::pipe();
                for c in cmds {
                    pipe.add_command(c);
                }
                self.within(|mut c| async move { pipe.query_async(&mut c).await })
                    .await
            }
            Conn::Cluster(_) => {
                self.within(|c| async move {
                    futures_util::future::join_all(cmds.into_iter().map(|cmd| {
                        let mut c = c.clone();
                        async move { cmd.query_async::<T>(&mut c).await }
                    }))
                    .await
                    .into_iter()
                    .collect::<redis::RedisResult<Vec<T>>>()
                })
                .await
            }
        }
    }

    /// Runs `groups` (each one pipeline on the keys of one slot), replies ignored, within
    /// the deadline: all in one pipeline on one node, or each group as its own pipeline
    /// on a cluster.
    pub(crate) async fn groups(&self, groups: Vec<Vec<redis::Cmd>>) -> Result<(), StoreError> {
        match &self.conn {
            Conn::One(_) => {
                let mut pipe = redis::pipe();
                for c in groups.into_iter().flatten() {
                    pipe.add_command(c).ignore();
                }
                self.within(|mut c| async move { pipe.query_async::<()>(&mut c).await })
                    .await
            }
            Conn::Cluster(_) => {
                self.within(|c| async move {
                    futures_util::future::join_all(groups.into_iter().map(|g| {
                        let mut c = c.clone();
                        let mut pipe = redis::pipe();
                        for cmd in g {
                            pipe.add_command(cmd).ignore();
                        }
                        async move { pipe.query_async::<()>(&mut c).await }
                    }))
                    .await
                    .into_iter()
                    .collect::<redis::RedisResult<Vec<()>>>()
                    .map(|_| ())
                })
                .await
            }
        }
    }

    /// The keys matching `pattern` on every node that holds data: SCAN on one node; on a
    /// cluster, SCAN on each master (from CLUSTER SLOTS), since SCAN has no slot.
    async fn scan(&self, pattern: String) -> Result<Vec<String>, StoreError> {
        let nodes: Vec<Option<(String, u16)>> = match &self.conn {
            Conn::One(_) => vec![None],
            Conn::Cluster(_) => {
                let slots: redis::Value = self
                    .within(|mut c| async move {
                        redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut c).await
                    })
                    .await?;
                let masters = masters_of(&slots);
                if masters.is_empty() {
                    return Err(
                        self.err("the cluster reports no master (CLUSTER SLOTS is empty)".into())
                    );
                }
                masters.into_iter().map(Some).collect()
            }
        };
        let mut keys = Vec::new();
        for node in nodes {
            let mut cursor: u64 = 0;
            loop {
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000);
                let node = node.clone();
                let (next, batch): (u64, Vec<String>) = self
                    .within(|c| async move {
                        match (c, node) {
                            (Conn::Cluster(mut c), Some((host, port))) => {
                                let routing = redis::cluster_routing::RoutingInfo::SingleNode(
                                    redis::cluster_routing::SingleNodeRoutingInfo::ByAddress {
                                        host,
                                        port,
                                    },
                                );
                                let v = c.route_command(cmd, routing).await?;
                                Ok(redis::from_redis_value(v)?)
                            }
                            (mut c, _) => cmd.query_async(&mut c).await,
                        }
                    })
                    .await?;
                keys.extend(batch);
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(keys)
    }

    /// One round trip: `Ok` when Redis answers in time.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.within(|mut c| async move { redis::cmd("PING").query_async::<String>(&mut c).await })
            .await
            .map(|_| ())
    }

    async fn read(&self, route: &Route) -> Result<Health, StoreError> {
        let key = key(route);
        let fields: Vec<Option<String>> = self
            .within(|mut c| async move {
                redis::cmd("HMGET")
                    .arg(&key)
                    .arg("s")
                    .arg("u")
                    .arg("r")
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(health_of(
            fields.first().cloned().flatten(),
            fields.get(1).cloned().flatten(),
            fields.get(2).cloned().flatten(),
        ))
    }
}

/// The masters (host, port) of a CLUSTER SLOTS reply: each slot range is
/// `[start, end, [host, port, id, …], replicas…]`; a master serving several ranges is
/// named once.
fn masters_of(slots: &redis::Value) -> Vec<(String, u16)> {
    use redis::Value;
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let mut out: Vec<(String, u16)> = Vec::new();
    let Value::Array(ranges) = slots else {
        return out;
    };
    for range in ranges {
        let Value::Array(r) = range else { continue };
        let Some(Value::Array(master)) = r.get(2) else {
            continue;
        };
        let (Some(host), Some(Value::Int(port))) = (master.first().and_then(text), master.get(1))
        else {
            continue;
        };
        let Ok(port) = u16::try_from(*port) else {
            continue;
        };
        if !out.iter().any(|(h, p)| *h == host && *p == port) {
            out.push((host, port));
        }
    }
    out
}

/// A record's fields as health; absent state is ready.
fn health_of(state: Option<String>, until: Option<String>, reason: Option<String>) -> Health {
    let reason = reason.unwrap_or_default();
    match state.as_deref() {
        None | Some("") => Health::Ready,
        Some("cooling") => match until.and_then(|u| u.parse().ok()) {
            Some(until) => Health::Cooling { until, reason },
            // A cooling with no readable end: the safe reading of a damaged record.
            None => Health::Retired { reason },
        },
        Some(_) => Health::Retired { reason },
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

impl HealthStore for RedisStore {
    fn get<'a>(&'a self, route: &'a Route) -> StoreFuture<'a, Health> {
        StoreFuture::waiting(self.read(route))
    }

    fn get_many<'a>(
        &'a self,
        routes: &'a [&'a Route],
        out: &'a mut Vec<Health>,
    ) -> StoreFuture<'a, ()> {
        StoreFuture::waiting(async move {
            // One round trip (one pipeline, or all at once on a cluster); each command
            // touches one key.
            let cmds = routes
                .iter()
                .map(|r| {
                    let mut c = redis::cmd("HMGET");
                    c.arg(key(r)).arg("s").arg("u").arg("r");
                    c
                })
                .collect();
            let rows: Vec<Vec<Option<String>>> = self.each(cmds).await?;
            for row in rows {
                let mut f = row.into_iter();
                out.push(health_of(
                    f.next().flatten(),
                    f.next().flatten(),
                    f.next().flatten(),
                ));
            }
            Ok(())
        })
    }

    fn list(&self) -> StoreFuture<'_, Vec<(Route, Health)>> {
        StoreFuture::waiting(async move {
            let keys = self.scan(format!("{PREFIX}{{*}}:r:*")).await?;
            let mut out = Vec::new();
            for key in keys {
                let Some(route) = route_of_key(&key) else {
                    continue;
                };
                let health = self.read(&route).await?;
                if health != Health::Ready {
                    out.push((route, health));
                }
            }
            out.sort_by(|a, b| a.0.cmp(&b.0));
            out.dedup_by(|a, b| a.0 == b.0);
            Ok(out)
        })
    }

    fn apply<'a>(&'a self, route: &'a Route, t: Transition) -> StoreFuture<'a, (Health, Health)> {
        StoreFuture::waiting(async move {
            let (kind, until, reason) = match t {
                Transition::Succeeded => ("succeeded", String::new(), String::new()),
                Transition::Cool { until, reason } => ("cool", until.to_string(), reason),
                Transition::Retire { reason } => ("retire", String::new(), reason),
                Transition::Restore => ("restore", String::new(), String::new()),
            };
            let key = key(route);
            let v: Vec<String> = self
                .within(|mut c| async move {
                    HEALTH
                        .key(&key)
                        .arg(kind)
                        .arg(until)
                        .arg(reason)
                        .invoke_async(&mut c)
                        .await
                })
                .await?;
            if v.len() != 6 {
                return Err(self.err(format!("health script answered {} fields, not 6", v.len())));
            }
            let h =
                |i: usize| health_of(non_empty(&v[i]), non_empty(&v[i + 1]), non_empty(&v[i + 2]));
            Ok((h(0), h(3)))
        })
    }

    fn breaker<'a>(
        &'a self,
        route: &'a Route,
        cfg: BreakerConfig,
        op: breaker::Step,
    ) -> StoreFuture<'a, breaker::Answer> {
        StoreFuture::waiting(async move {
            let (name, now, trial, ok) = match op {
                breaker::Step::Admit { now } => ("admit", now, false, false),
                breaker::Step::Record { trial, ok, now } => ("record", now, trial, ok),
            };
            let key = key(route);
            let v: Vec<String> = self
                .within(|mut c| async move {
                    BREAKER
                        .key(&key)
                        .arg(name)
                        .arg(now)
                        .arg(u8::from(trial))
                        .arg(u8::from(ok))
                        .arg(cfg.consecutive_failures)
                        .arg(cfg.failure_rate.map(|r| r.to_string()).unwrap_or_default())
                        .arg(cfg.window)
                        .arg(cfg.open_ms)
                        .arg(cfg.max_open_ms)
                        .arg(cfg.half_open_trials)
                        .invoke_async(&mut c)
                        .await
                })
                .await?;
            let instant = || v.get(1).and_then(|s| s.parse::<UnixMs>().ok());
            let bad = || self.err(format!("breaker script answered {v:?}"));
            Ok(match v.first().map(String::as_str) {
                Some("yes") => breaker::Answer::Admit(Admit::Yes),
                Some("trial") => breaker::Answer::Admit(Admit::Trial),
                Some("busy") => breaker::Answer::Admit(Admit::Busy),
                Some("open") => breaker::Answer::Admit(Admit::Open(instant().ok_or_else(bad)?)),
                Some("opened") => breaker::Answer::Recorded(Some(instant().ok_or_else(bad)?)),
                Some("none") => breaker::Answer::Recorded(None),
                _ => return Err(bad()),
            })
        })
    }

    fn write_back_if_lost<'a>(&'a self, known: &'a [Known]) -> StoreFuture<'a, Vec<Route>> {
        StoreFuture::waiting(async move {
            let mut providers: Vec<&str> = known.iter().map(|k| k.route.provider()).collect();
            providers.sort_unstable();
            providers.dedup();
            let mut lost: Vec<&str> = Vec::new();
            for p in providers {
                let key = format!("{PREFIX}{{{p}}}:epoch");
                let fresh = format!(
                    "{}-{}",
                    crate::core::clock::wall_now_ms(),
                    fastrand::u64(..)
                );
                let epoch: String =
                    self.within(|mut c| async move {
                        EPOCH.key(&key).arg(fresh).invoke_async(&mut c).await
                    })
                    .await?;
                let mut epochs = self.epochs.lock().unwrap_or_else(|e| e.into_inner());
                if epochs
                    .insert(p.to_string(), epoch.clone())
                    .is_some_and(|was| was != epoch)
                {
                    lost.push(p);
                }
            }
            let mut written = Vec::new();
            for k in known.iter().filter(|k| lost.contains(&k.route.provider())) {
                let key = key(&k.route);
                let reason = k.retired.clone().unwrap_or_default();
                let breaker = k.open_breaker.clone().unwrap_or_default();
                let n: i64 = self
                    .within(|mut c| async move {
                        RESTORE
                            .key(&key)
                            .arg(reason)
                            .arg(breaker)
                            .invoke_async(&mut c)
                            .await
                    })
                    .await?;
                if n > 0 {
                    written.push(k.route.clone());
                }
            }
            Ok(written)
        })
    }

    fn breaker_open<'a>(&'a self, route: &'a Route, now: UnixMs) -> StoreFuture<'a, bool> {
        StoreFuture::waiting(async move {
            let key = key(route);
            let text: Option<String> = self
                .within(|mut c| async move {
                    redis::cmd("HGET")
                        .arg(&key)
                        .arg("b")
                        .query_async(&mut c)
                        .await
                })
                .await?;
            Ok(text
                .as_deref()
                .and_then(breaker::State::decode)
                .is_some_and(|s| s.is_open(now)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_the_provider_hash_tag_and_round_trip() {
        let r = Route::parse("openrouter/anthropic/claude-x").unwrap();
        assert_eq!(key(&r), "poolctl:{openrouter}:r:anthropic/claude-x");
        assert_eq!(route_of_key(&key(&r)), Some(r));
        assert_eq!(route_of_key("poolctl:{a}:x:m"), None);
        assert_eq!(route_of_key("other:{a}:r:m"), None);
    }

    #[test]
    fn a_damaged_record_reads_as_retired_never_ready() {
        assert_eq!(health_of(None, None, None), Health::Ready);
        assert_eq!(
            health_of(Some("cooling".into()), Some("x".into()), Some("r".into())),
            Health::Retired { reason: "r".into() }
        );
        assert_eq!(
            health_of(Some("cooling".into()), Some("5".into()), None),
            Health::Cooling {
                until: 5,
                reason: String::new()
            }
        );
    }

    #[test]
    fn a_cluster_url_is_one_node_url_per_node_with_the_credentials_and_fragment_of_all() {
        let u =
            parse_state_url("rediss+cluster://u:pw@10.0.0.1:7000,10.0.0.2:7001#insecure").unwrap();
        assert!(u.tls && u.cluster);
        assert_eq!(
            u.nodes,
            vec![
                "rediss://u:pw@10.0.0.1:7000/0#insecure".to_string(),
                "rediss://u:pw@10.0.0.2:7001/0#insecure".to_string()
            ]
        );
        let u = parse_state_url("redis://h:1/3").unwrap();
        assert!(!u.tls && !u.cluster);
        assert_eq!(u.nodes, vec!["redis://h:1/3".to_string()]);
        for bad in [
            "redis+cluster://:hunter2@h:1/2",
            "redis+cluster://:hunter2@h:1,,h:2",
            "memcache://:hunter2@h:1",
            "redis+cluster://:hunter2@h:notaport",
        ] {
            let e = parse_state_url(bad).unwrap_err();
            assert!(!e.contains("hunter2"), "{bad}: {e}");
        }
        assert!(is_redis_url("rediss+cluster://h:1") && !is_redis_url("state.db"));
    }

    #[test]
    fn state_tls_needs_a_key_with_a_certificate_and_names_missing_files() {
        let t = StateTls {
            cert_file: Some("/x.pem".into()),
            ..StateTls::default()
        };
        assert!(t.certificates().unwrap_err().contains("key_file"));
        let t = StateTls {
            cert_file: Some("/nonexistent/c.pem".into()),
            key_file: Some("/nonexistent/k.pem".into()),
            ca_file: None,
        };
        let e = t.certificates().unwrap_err();
        assert!(
            e.contains("state_tls.cert_file") && e.contains("/nonexistent/c.pem"),
            "{e}"
        );
    }

    #[test]
    fn the_masters_of_cluster_slots_are_named_once_each() {
        use redis::Value;
        let node = |h: &str, p: i64| {
            Value::Array(vec![
                Value::BulkString(h.as_bytes().to_vec()),
                Value::Int(p),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range = |a: i64, b: i64, m: Value| Value::Array(vec![Value::Int(a), Value::Int(b), m]);
        let slots = Value::Array(vec![
            range(0, 10, node("127.0.0.1", 7000)),
            range(11, 20, node("127.0.0.1", 7001)),
            range(21, 30, node("127.0.0.1", 7000)),
        ]);
        assert_eq!(
            masters_of(&slots),
            vec![
                ("127.0.0.1".to_string(), 7000),
                ("127.0.0.1".to_string(), 7001)
            ]
        );
    }

    #[test]
    fn a_bad_url_names_the_field_never_the_password() {
        let err = RedisStore::open("redis://:hunter2@[bad", Duration::from_millis(10))
            .unwrap_err()
            .to_string();
        assert!(err.contains("state"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}
