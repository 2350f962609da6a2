//! The embedded health store: one SQLite file in WAL mode. Several processes (a running
//! gateway, an operator's `poolctl restore`) share it: every transition is one
//! `BEGIN IMMEDIATE` transaction that reads the row, applies the rule and writes it, so
//! no update is lost and a writer killed mid-way leaves the file valid. The connection
//! lives on its own thread: SQLite calls block (on disk, on another process's lock), and
//! must never stall the async workers that carry requests. Reads, which in WAL mode never
//! wait for a writer, go first to a second connection on the caller's thread with no busy
//! wait at all, so a request does not pay two thread hops for its health; a read that
//! would have to wait goes to the thread instead. The file is created 0600; it holds route
//! states and reasons, never keys. Breaker states sit beside the health rows, in their own
//! table (a route may have a breaker history while it is ready), changed by the same kind
//! of transaction.

use super::{HealthStore, StoreError, StoreFuture};
use crate::admission::bucket::Dimension;
use crate::admission::buckets::UsageDelta;
use crate::core::clock::UnixMs;
use crate::core::vocab::{Priority, Route};
use crate::policy::breaker::{self, BreakerConfig};
use crate::policy::health::{apply, Health, Transition};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

/// How long a writer waits for another process's lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// One piece of work for the store's thread.
type Job = Box<dyn FnOnce(&mut Connection) + Send>;

pub struct SqliteStore {
    path: PathBuf,
    /// To the thread that owns the connection; it stops when this is dropped.
    jobs: mpsc::Sender<Job>,
    /// Reads on the caller's thread; never waits on a lock (busy timeout 0).
    reader: Mutex<Connection>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish()
    }
}

impl SqliteStore {
    /// Opens (creating if needed, with its directory) the store at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let err = |message: String| StoreError::Backend {
            path: path.display().to_string(),
            message,
        };
        // A symlink would be followed (a dangling one even creates its target, wherever
        // it points): refuse it, and SQLite's own side files too.
        for p in [
            path.to_path_buf(),
            side_file(path, "-wal"),
            side_file(path, "-shm"),
        ] {
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(err(format!(
                    "{} is a symbolic link; point `state:` at a regular file",
                    p.display()
                )));
            }
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| err(format!("cannot create its directory: {e}")))?;
        }
        create_private(path).map_err(|e| err(format!("cannot create the file: {e}")))?;
        let conn = Connection::open(path).map_err(|e| err(e.to_string()))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| err(e.to_string()))?;
        // Processes that open a new file together can deadlock on its first locks, and
        // SQLite then answers one of them "database is locked" at once instead of waiting
        // out its busy timeout: the set-up is tried again, a few ms apart, until it is
        // done or that timeout has passed.
        let started = crate::core::clock::Stopwatch::start();
        let mut pause_ms = 2;
        let mode = loop {
            match set_up(&conn) {
                Ok(mode) => break mode,
                Err(e) if is_busy(&e) && started.elapsed() < BUSY_TIMEOUT => {
                    // A set-up cut short may have left its transaction open.
                    let _ = conn.execute_batch("ROLLBACK");
                    std::thread::sleep(Duration::from_millis(
                        pause_ms + fastrand::u64(0..=pause_ms),
                    ));
                    pause_ms = (pause_ms * 2).min(50);
                }
                Err(e) => return Err(err(e.to_string())),
            }
        };
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(err(format!("cannot switch to WAL mode (got `{mode}`)")));
        }
        let reader = Connection::open(path).map_err(|e| err(e.to_string()))?;
        reader
            .busy_timeout(Duration::ZERO)
            .map_err(|e| err(e.to_string()))?;
        let (jobs, queue) = mpsc::channel::<Job>();
        let mut conn = conn;
        std::thread::Builder::new()
            .name("poolctl-sqlite".into())
            .spawn(move || {
                while let Ok(job) = queue.recv() {
                    job(&mut conn);
                }
            })
            .map_err(|e| err(format!("cannot start its thread: {e}")))?;
        Ok(SqliteStore {
            path: path.to_path_buf(),
            jobs,
            reader: Mutex::new(reader),
        })
    }

    /// `f` on the reader connection, here and now; `None` when it would have to wait
    /// (another process holds a lock a WAL reader needs, rarely) or failed, so that the
    /// caller asks the store's thread instead.
    fn read_now<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Option<T> {
        // A panic mid-read cannot leave the connection half-changed: it only reads.
        let conn = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        f(&conn).ok()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the store's thread; the future resolves with its result.
    fn run<T, F>(&self, f: F) -> StoreFuture<'_, T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sent = self.jobs.send(Box::new(move |conn| {
            // The caller may have gone away; nothing to tell it then.
            let _ = tx.send(f(conn));
        }));
        let path = self.path.display().to_string();
        StoreFuture::waiting(async move {
            let backend = |message: String| StoreError::Backend {
                path: path.clone(),
                message,
            };
            if sent.is_err() {
                return Err(backend("its thread has stopped".into()));
            }
            match rx.await {
                Ok(result) => result.map_err(|e| backend(e.to_string())),
                Err(_) => Err(backend("its thread has stopped".into())),
            }
        })
    }

    /// Adds a process's usage since its last flush to the per-minute counters (sheds
    /// counted in the minute of `now`), and drops minutes older than
    /// [`USAGE_KEEP_MINUTES`]: one transaction. Several processes share the file, so
    /// every counter is an increment (`n = n + excluded.n`), never an overwrite.
    pub fn add_usage(&self, delta: UsageDelta, now: UnixMs) -> StoreFuture<'_, ()> {
        let minute = now.div_euclid(60_000);
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            {
                let mut add = tx.prepare_cached(
                    "INSERT INTO usage (minute, bucket, dimension, spent) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT(minute, bucket, dimension) DO UPDATE SET spent = spent + excluded.spent",
                )?;
                for (m, bucket, dim, x) in &delta.spent {
                    add.execute(params![m, bucket, dim.as_str(), x])?;
                }
                let mut shed = tx.prepare_cached(
                    "INSERT INTO shed (minute, priority, route, n) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT(minute, priority, route) DO UPDATE SET n = n + excluded.n",
                )?;
                for (p, route, n) in &delta.sheds {
                    shed.execute(params![minute, p.as_str(), route.as_str(), *n as i64])?;
                }
                let oldest = minute - USAGE_KEEP_MINUTES;
                tx.execute("DELETE FROM usage WHERE minute < ?1", params![oldest])?;
                tx.execute("DELETE FROM shed WHERE minute < ?1", params![oldest])?;
            }
            tx.commit()
        })
    }

    /// What was spent per minute from minute `from` to `to` (inclusive):
    /// `(minute, bucket, dimension, amount)`.
    pub fn usage(&self, from: i64, to: i64) -> StoreFuture<'_, Vec<(i64, String, Dimension, f64)>> {
        self.run(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT minute, bucket, dimension, spent FROM usage
                 WHERE minute BETWEEN ?1 AND ?2 ORDER BY minute",
            )?;
            let rows = stmt.query_map(params![from, to], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, f64>(3)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (m, bucket, dim, x) = row?;
                // A dimension this build does not know is skipped, not fatal.
                if let Some(dim) = dimension(&dim) {
                    out.push((m, bucket, dim, x));
                }
            }
            Ok(out)
        })
    }

    /// Sheds from minute `from` to `to` (inclusive): `(priority, route, count)`.
    pub fn sheds(&self, from: i64, to: i64) -> StoreFuture<'_, Vec<(Priority, String, u64)>> {
        self.run(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT priority, route, SUM(n) FROM shed WHERE minute BETWEEN ?1 AND ?2
                 GROUP BY priority, route",
            )?;
            let rows = stmt.query_map(params![from, to], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (p, route, n) = row?;
                if let Some(p) = Priority::parse(&p) {
                    out.push((p, route, n.max(0) as u64));
                }
            }
            Ok(out)
        })
    }

    /// Records the limits providers stated for routes (`probe`), replacing older ones.
    pub fn record_provider_limits(
        &self,
        limits: Vec<(Route, Dimension, u64)>,
        now: UnixMs,
    ) -> StoreFuture<'_, ()> {
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            for (route, dim, limit) in &limits {
                tx.execute(
                    "INSERT INTO provider_limit (route, dimension, lim, seen_ms) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT(route, dimension) DO UPDATE SET lim = ?3, seen_ms = ?4",
                    params![
                        route.as_str(),
                        dim.as_str(),
                        i64::try_from(*limit).unwrap_or(i64::MAX),
                        now
                    ],
                )?;
            }
            tx.commit()
        })
    }

    /// The limits `probe` recorded: `(route, dimension, limit)`.
    pub fn provider_limits(&self) -> StoreFuture<'_, Vec<(String, Dimension, u64)>> {
        self.run(|conn| {
            let mut stmt = conn.prepare("SELECT route, dimension, lim FROM provider_limit")?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (route, dim, limit) = row?;
                if let Some(dim) = dimension(&dim) {
                    out.push((route, dim, limit.max(0) as u64));
                }
            }
            Ok(out)
        })
    }

    /// Stores a conversation (`store::conversations`) under `id` until `expires_ms`,
    /// and drops the oldest past the newest `max`: one transaction, in time logarithmic
    /// in the table (rows are numbered as stored, so the oldest are a rowid range: a
    /// `COUNT(*)` and an ordered scan per write were 1.2 ms of CPU a request at 10 000
    /// rows). With `sweep`, what has expired by `now` goes too (by its index), and the
    /// oldest while all bodies together are over `max_total` bytes.
    #[allow(clippy::too_many_arguments)] // one row's values and the table's bounds
    pub fn put_response(
        &self,
        id: String,
        body: Vec<u8>,
        now: UnixMs,
        expires_ms: UnixMs,
        max: usize,
        max_total: usize,
        sweep: bool,
    ) -> StoreFuture<'_, ()> {
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute(
                "INSERT OR REPLACE INTO responses (id, body, stored_ms, expires_ms) VALUES (?1, ?2, ?3, ?4)",
                params![id, body, now, expires_ms],
            )?;
            // A replaced or deleted row leaves a gap: the range then holds fewer than
            // `max`, never more.
            tx.execute(
                "DELETE FROM responses WHERE rowid <= (SELECT max(rowid) FROM responses) - ?1",
                params![i64::try_from(max).unwrap_or(i64::MAX)],
            )?;
            if sweep {
                tx.execute("DELETE FROM responses WHERE expires_ms <= ?1", params![now])?;
                let total: f64 =
                    tx.query_row("SELECT total(length(body)) FROM responses", [], |r| r.get(0))?;
                let mut over = total as i64 - i64::try_from(max_total).unwrap_or(i64::MAX);
                if over > 0 {
                    // The newest row that must go for the rest to fit, oldest first.
                    let mut last = None;
                    {
                        let mut rows =
                            tx.prepare("SELECT rowid, length(body) FROM responses ORDER BY rowid")?;
                        let mut rows = rows.query([])?;
                        while let Some(row) = rows.next()? {
                            last = Some(row.get::<_, i64>(0)?);
                            over -= row.get::<_, i64>(1)?;
                            if over <= 0 {
                                break;
                            }
                        }
                    }
                    if let Some(rowid) = last {
                        tx.execute("DELETE FROM responses WHERE rowid <= ?1", params![rowid])?;
                    }
                }
            }
            tx.commit()
        })
    }

    /// The conversation stored under `id`, unless it expired by `now`.
    pub fn get_response(&self, id: String, now: UnixMs) -> StoreFuture<'_, Option<Vec<u8>>> {
        self.run(move |conn| {
            conn.query_row(
                "SELECT body FROM responses WHERE id = ?1 AND expires_ms > ?2",
                params![id, now],
                |r| r.get(0),
            )
            .optional()
        })
    }

    /// Forgets the conversation under `id`; whether one was stored.
    pub fn delete_response(&self, id: String) -> StoreFuture<'_, bool> {
        self.run(move |conn| {
            Ok(conn.execute("DELETE FROM responses WHERE id = ?1", params![id])? > 0)
        })
    }

    /// Runs SQLite's own consistency check; `Ok("ok")` for a sound file.
    pub fn integrity_check(&self) -> StoreFuture<'_, String> {
        self.run(|conn| conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)))
    }
}

/// Usage minutes older than this are dropped at each flush: `capacity --window` reads
/// at most 8 days, as the Redis counters' TTL keeps.
pub const USAGE_KEEP_MINUTES: i64 = 8 * 24 * 60;

fn dimension(s: &str) -> Option<Dimension> {
    Dimension::ALL.into_iter().find(|d| d.as_str() == s)
}

/// `state.db-wal` beside `state.db`.
fn side_file(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// Creates the file with owner-only permissions if it does not exist yet.
/// WAL mode and the schema. WAL lets readers and one writer work at once across
/// processes; NORMAL sync is durable against a killed process (the WAL is replayed),
/// which is the threat here. The schema is one IMMEDIATE transaction: its write lock is
/// taken up front, where the busy timeout waits for it (as deferred statements, each
/// began as a read and then upgraded, and in WAL mode an upgrade after another
/// process's commit fails at once, whatever the timeout).
/// Answers the journal mode it got: anything but WAL is left without a schema.
fn set_up(conn: &Connection) -> rusqlite::Result<String> {
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Ok(mode);
    }
    conn.execute_batch(
        "PRAGMA synchronous=NORMAL;
             BEGIN IMMEDIATE;
             CREATE TABLE IF NOT EXISTS health (
                 route      TEXT PRIMARY KEY,
                 state      TEXT NOT NULL CHECK (state IN ('cooling', 'retired')),
                 until_ms   INTEGER,
                 reason     TEXT NOT NULL
             );
             CREATE TABLE IF NOT EXISTS breaker (
                 route      TEXT PRIMARY KEY,
                 state      TEXT NOT NULL
             );
             CREATE TABLE IF NOT EXISTS usage (
                 minute     INTEGER NOT NULL,
                 bucket     TEXT NOT NULL,
                 dimension  TEXT NOT NULL,
                 spent      REAL NOT NULL,
                 PRIMARY KEY (minute, bucket, dimension)
             ) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS shed (
                 minute     INTEGER NOT NULL,
                 priority   TEXT NOT NULL,
                 route      TEXT NOT NULL,
                 n          INTEGER NOT NULL,
                 PRIMARY KEY (minute, priority, route)
             ) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS provider_limit (
                 route      TEXT NOT NULL,
                 dimension  TEXT NOT NULL,
                 lim        INTEGER NOT NULL,
                 seen_ms    INTEGER NOT NULL,
                 PRIMARY KEY (route, dimension)
             ) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS responses (
                 id         TEXT PRIMARY KEY,
                 body       BLOB NOT NULL,
                 stored_ms  INTEGER NOT NULL,
                 expires_ms INTEGER NOT NULL
             );
             CREATE INDEX IF NOT EXISTS responses_by_expiry ON responses (expires_ms);
             COMMIT;",
    )?;
    Ok(mode)
}

/// Another connection's lock was in the way (`SQLITE_BUSY`, `SQLITE_LOCKED`).
fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Creates the file 0600 when it does not exist yet, and never opens one that does.
/// Closing any descriptor of a file drops every POSIX lock this process holds on it,
/// SQLite's included: opening and closing an existing state file here, while another
/// store in this process had it open (`walk` opens a second one for its usage counters),
/// let another process check the WAL into the file and remove it under this one, and a
/// committed increment was lost without an error.
fn create_private(path: &Path) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    match opts.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

fn row_to_health(state: String, until: Option<i64>, reason: String) -> Health {
    match (state.as_str(), until) {
        ("cooling", Some(until)) => Health::Cooling { until, reason },
        // Anything else stored is treated as retired: the safe reading of a permanent state.
        _ => Health::Retired { reason },
    }
}

fn read(conn: &Connection, route: &str) -> rusqlite::Result<Health> {
    // Cached: every request reads health, and parsing the statement each time cost more
    // than running it (`poolctl serve` at thousands of requests a second).
    let row = conn
        .prepare_cached("SELECT state, until_ms, reason FROM health WHERE route = ?1")?
        .query_row(params![route], |r| {
            Ok(row_to_health(r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()?;
    Ok(row.unwrap_or(Health::Ready))
}

fn write(conn: &Connection, route: &str, health: &Health) -> rusqlite::Result<()> {
    match health {
        Health::Ready => conn.execute("DELETE FROM health WHERE route = ?1", params![route]),
        Health::Cooling { until, reason } => conn.execute(
            "INSERT INTO health (route, state, until_ms, reason) VALUES (?1, 'cooling', ?2, ?3)
             ON CONFLICT(route) DO UPDATE SET state = 'cooling', until_ms = ?2, reason = ?3",
            params![route, until, reason],
        ),
        Health::Retired { reason } => conn.execute(
            "INSERT INTO health (route, state, until_ms, reason) VALUES (?1, 'retired', NULL, ?2)
             ON CONFLICT(route) DO UPDATE SET state = 'retired', until_ms = NULL, reason = ?2",
            params![route, reason],
        ),
    }
    .map(|_| ())
}

impl HealthStore for SqliteStore {
    fn get<'a>(&'a self, route: &'a Route) -> StoreFuture<'a, Health> {
        if let Some(h) = self.read_now(|conn| read(conn, route.as_str())) {
            return StoreFuture::Ready(Some(Ok(h)));
        }
        let route = route.as_str().to_string();
        self.run(move |conn| read(conn, &route))
    }

    fn get_many<'a>(
        &'a self,
        routes: &'a [&'a Route],
        out: &'a mut Vec<Health>,
    ) -> StoreFuture<'a, ()> {
        let now = self.read_now(|conn| {
            routes
                .iter()
                .map(|r| read(conn, r.as_str()))
                .collect::<rusqlite::Result<Vec<_>>>()
        });
        if let Some(all) = now {
            out.extend(all);
            return StoreFuture::Ready(Some(Ok(())));
        }
        let routes: Vec<String> = routes.iter().map(|r| r.as_str().to_string()).collect();
        let read_all = self.run(move |conn| {
            routes
                .iter()
                .map(|r| read(conn, r))
                .collect::<rusqlite::Result<Vec<_>>>()
        });
        StoreFuture::waiting(async move {
            out.extend(read_all.await?);
            Ok(())
        })
    }

    fn list(&self) -> StoreFuture<'_, Vec<(Route, Health)>> {
        self.run(|conn| {
            let mut stmt =
                conn.prepare("SELECT route, state, until_ms, reason FROM health ORDER BY route")?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    row_to_health(r.get(1)?, r.get(2)?, r.get(3)?),
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (route, health) = row?;
                // A row whose route no longer parses is skipped, not fatal: `status` still works.
                if let Ok(route) = Route::parse(&route) {
                    out.push((route, health));
                }
            }
            Ok(out)
        })
    }

    fn apply<'a>(&'a self, route: &'a Route, t: Transition) -> StoreFuture<'a, (Health, Health)> {
        // Most transitions change nothing (a success on a ready route, on every request a
        // gateway serves): one plain read shows it, and the no-op is ordered at that read,
        // without the write lock every process shares or a trip to the store's thread.
        if let Some(seen) = self.read_now(|conn| read(conn, route.as_str())) {
            if apply(&seen, t.clone()) == seen {
                return StoreFuture::Ready(Some(Ok((seen.clone(), seen))));
            }
        }
        let route = route.as_str().to_string();
        self.run(move |conn| {
            // IMMEDIATE takes the write lock before the read: no other process can change
            // the row between what the rule saw and what it writes.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let old = read(&tx, &route)?;
            let new = apply(&old, t);
            if new != old {
                write(&tx, &route, &new)?;
            }
            tx.commit()?;
            Ok((old, new))
        })
    }

    fn breaker<'a>(
        &'a self,
        route: &'a Route,
        cfg: BreakerConfig,
        op: breaker::Step,
    ) -> StoreFuture<'a, breaker::Answer> {
        let route = route.as_str().to_string();
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let old = read_breaker(&tx, &route)?;
            let mut state = old.clone();
            let answer = breaker::step(&mut state, &cfg, op);
            if state != old {
                if state.is_fresh() {
                    tx.execute("DELETE FROM breaker WHERE route = ?1", params![route])?;
                } else {
                    tx.execute(
                        "INSERT INTO breaker (route, state) VALUES (?1, ?2)
                         ON CONFLICT(route) DO UPDATE SET state = ?2",
                        params![route, state.encode()],
                    )?;
                }
            }
            tx.commit()?;
            Ok(answer)
        })
    }

    fn breaker_open<'a>(&'a self, route: &'a Route, now: UnixMs) -> StoreFuture<'a, bool> {
        let route = route.as_str().to_string();
        self.run(move |conn| Ok(read_breaker(conn, &route)?.is_open(now)))
    }
}

fn read_breaker(conn: &Connection, route: &str) -> rusqlite::Result<breaker::State> {
    let text: Option<String> = conn
        .query_row(
            "SELECT state FROM breaker WHERE route = ?1",
            params![route],
            |r| r.get(0),
        )
        .optional()?;
    // An unreadable state is a fresh breaker: the breaker is an optimisation, and health
    // still guards the route.
    Ok(text
        .as_deref()
        .and_then(breaker::State::decode)
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn round_trips_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/state.db");
        let r = Route::parse("a/x").unwrap();
        {
            let s = SqliteStore::open(&path).unwrap();
            assert_eq!(block_on(s.get(&r)).unwrap(), Health::Ready);
            let cool = Transition::Cool {
                until: 42,
                reason: "rate_limited".into(),
            };
            block_on(s.apply(&r, cool)).unwrap();
            let retire = Transition::Retire {
                reason: "quota".into(),
            };
            block_on(s.apply(&r, retire)).unwrap();
            // A success in flight while it was retired leaves it retired.
            let (_, after) = block_on(s.apply(&r, Transition::Succeeded)).unwrap();
            assert!(matches!(after, Health::Retired { .. }));
        }
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(
            block_on(s.get(&r)).unwrap(),
            Health::Retired {
                reason: "quota".into()
            }
        );
        assert_eq!(block_on(s.list()).unwrap().len(), 1);
        block_on(s.apply(&r, Transition::Restore)).unwrap();
        assert!(block_on(s.list()).unwrap().is_empty());
        assert_eq!(block_on(s.integrity_check()).unwrap(), "ok");
    }

    #[test]
    fn breaker_state_is_shared_through_the_file() {
        use crate::policy::breaker::{Admit, Answer, Step};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let r = Route::parse("a/x").unwrap();
        let cfg = BreakerConfig {
            consecutive_failures: 2,
            open_ms: 1_000,
            ..BreakerConfig::default()
        };
        let fail = Step::Record {
            trial: false,
            ok: false,
            now: 0,
        };
        // Two processes' failures add up: each opens the file on its own.
        block_on(SqliteStore::open(&path).unwrap().breaker(&r, cfg, fail)).unwrap();
        let other = SqliteStore::open(&path).unwrap();
        assert_eq!(
            block_on(other.breaker(&r, cfg, fail)).unwrap(),
            Answer::Recorded(Some(1_000))
        );
        assert!(block_on(other.breaker_open(&r, 500)).unwrap());
        let third = SqliteStore::open(&path).unwrap();
        assert_eq!(
            block_on(third.breaker(&r, cfg, Step::Admit { now: 1_000 })).unwrap(),
            Answer::Admit(Admit::Trial)
        );
        assert_eq!(
            block_on(other.breaker(&r, cfg, Step::Admit { now: 1_000 })).unwrap(),
            Answer::Admit(Admit::Busy),
            "the trial slot taken through another handle is taken"
        );
    }

    #[test]
    fn two_handles_usage_adds_up_and_old_minutes_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let (a, b) = (
            SqliteStore::open(&path).unwrap(),
            SqliteStore::open(&path).unwrap(),
        );
        let r = Route::parse("a/x").unwrap();
        let now = 10 * 24 * 60 * 60_000;
        let minute = now / 60_000;
        let delta = |x: f64| UsageDelta {
            spent: vec![
                (minute, "a".into(), Dimension::Rpm, x),
                (
                    minute - USAGE_KEEP_MINUTES - 1,
                    "a".into(),
                    Dimension::Rpm,
                    7.0,
                ),
            ],
            sheds: vec![(Priority::Background, r.clone(), 2)],
        };
        block_on(a.add_usage(delta(3.0), now)).unwrap();
        block_on(b.add_usage(delta(4.0), now)).unwrap();
        let used = block_on(a.usage(0, minute)).unwrap();
        assert_eq!(used, vec![(minute, "a".to_string(), Dimension::Rpm, 7.0)]);
        assert_eq!(
            block_on(b.sheds(minute, minute)).unwrap(),
            vec![(Priority::Background, "a/x".to_string(), 4)]
        );
        assert!(block_on(b.sheds(0, minute - 1)).unwrap().is_empty());
        block_on(a.record_provider_limits(vec![(r.clone(), Dimension::Rpm, 60)], now)).unwrap();
        block_on(b.record_provider_limits(vec![(r, Dimension::Rpm, 50)], now)).unwrap();
        assert_eq!(
            block_on(a.provider_limits()).unwrap(),
            vec![("a/x".to_string(), Dimension::Rpm, 50)],
            "the latest limit a provider stated wins"
        );
    }

    #[cfg(unix)]
    #[test]
    fn the_file_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        SqliteStore::open(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
