//! The embedded health store: one SQLite file in WAL mode. Several processes (a running
//! gateway, an operator's `poolctl restore`) share it: every change is one statement in
//! its own transaction, so no update is lost and a writer killed mid-way leaves the
//! file valid. The file is created 0600; it holds route states and reasons, never keys.

use super::{HealthStore, StoreError};
use crate::health::Health;
use crate::vocab::Route;
use rusqlite::{params, Connection, OptionalExtension};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// How long a writer waits for another process's lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub struct SqliteStore {
    path: PathBuf,
    conn: Mutex<Connection>,
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
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| err(format!("cannot create its directory: {e}")))?;
        }
        create_private(path).map_err(|e| err(format!("cannot create the file: {e}")))?;
        let conn = Connection::open(path).map_err(|e| err(e.to_string()))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| err(e.to_string()))?;
        // WAL lets readers and one writer work at once across processes; NORMAL sync is
        // durable against a killed process (the WAL is replayed), which is the threat here.
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(|e| err(e.to_string()))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(err(format!("cannot switch to WAL mode (got `{mode}`)")));
        }
        conn.execute_batch(
            "PRAGMA synchronous=NORMAL;
             CREATE TABLE IF NOT EXISTS health (
                 route      TEXT PRIMARY KEY,
                 state      TEXT NOT NULL CHECK (state IN ('cooling', 'retired')),
                 until_ms   INTEGER,
                 reason     TEXT NOT NULL
             );",
        )
        .map_err(|e| err(e.to_string()))?;
        Ok(SqliteStore {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: rusqlite::Error) -> StoreError {
        StoreError::Backend {
            path: self.path.display().to_string(),
            message: e.to_string(),
        }
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a statement half-applied: SQLite
        // rolls it back. The connection is still sound.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs SQLite's own consistency check; `Ok("ok")` for a sound file.
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        self.conn()
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }
}

/// Creates the file with owner-only permissions if it does not exist yet.
fn create_private(path: &Path) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(path).map(|_| ())
}

fn row_to_health(state: String, until: Option<i64>, reason: String) -> Health {
    match (state.as_str(), until) {
        ("cooling", Some(until)) => Health::Cooling { until, reason },
        // Anything else stored is treated as retired: the safe reading of a permanent state.
        _ => Health::Retired { reason },
    }
}

impl HealthStore for SqliteStore {
    fn get(&self, route: &Route) -> Result<Health, StoreError> {
        // Cached: every request reads health, and parsing the statement each time cost
        // more than running it (`poolctl serve` at thousands of requests a second).
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached("SELECT state, until_ms, reason FROM health WHERE route = ?1")
            .map_err(|e| self.err(e))?;
        let row = stmt
            .query_row(params![route.as_str()], |r| {
                Ok(row_to_health(r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()
            .map_err(|e| self.err(e))?;
        Ok(row.unwrap_or(Health::Ready))
    }

    fn set(&self, route: &Route, health: Health) -> Result<(), StoreError> {
        let conn = self.conn();
        let result = match &health {
            Health::Ready => conn.execute("DELETE FROM health WHERE route = ?1", params![route.as_str()]),
            Health::Cooling { until, reason } => conn.execute(
                "INSERT INTO health (route, state, until_ms, reason) VALUES (?1, 'cooling', ?2, ?3)
                 ON CONFLICT(route) DO UPDATE SET state = 'cooling', until_ms = ?2, reason = ?3",
                params![route.as_str(), until, reason],
            ),
            Health::Retired { reason } => conn.execute(
                "INSERT INTO health (route, state, until_ms, reason) VALUES (?1, 'retired', NULL, ?2)
                 ON CONFLICT(route) DO UPDATE SET state = 'retired', until_ms = NULL, reason = ?2",
                params![route.as_str(), reason],
            ),
        };
        result.map(|_| ()).map_err(|e| self.err(e))
    }

    fn list(&self) -> Result<Vec<(Route, Health)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT route, state, until_ms, reason FROM health ORDER BY route")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    row_to_health(r.get(1)?, r.get(2)?, r.get(3)?),
                ))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (route, health) = row.map_err(|e| self.err(e))?;
            // A row whose route no longer parses is skipped, not fatal: `status` still works.
            if let Ok(route) = Route::parse(&route) {
                out.push((route, health));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/state.db");
        let r = Route::parse("a/x").unwrap();
        {
            let s = SqliteStore::open(&path).unwrap();
            assert_eq!(s.get(&r).unwrap(), Health::Ready);
            s.set(
                &r,
                Health::Cooling {
                    until: 42,
                    reason: "rate_limited".into(),
                },
            )
            .unwrap();
            s.set(
                &r,
                Health::Retired {
                    reason: "quota".into(),
                },
            )
            .unwrap();
        }
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(
            s.get(&r).unwrap(),
            Health::Retired {
                reason: "quota".into()
            }
        );
        assert_eq!(s.list().unwrap().len(), 1);
        s.set(&r, Health::Ready).unwrap();
        assert!(s.list().unwrap().is_empty());
        assert_eq!(s.integrity_check().unwrap(), "ok");
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
