//! The gateway's view of the shared health store: the SQLite store behind a cache of
//! what it last read, dropped the moment the file changes. Every request reads a
//! route's health before its call and settles it after; against SQLite each of those
//! was a read transaction (two `fcntl` locks, an `fstat`, a statement) for an answer
//! that almost never changes. Here both are a look-up and one `read(2)` of an inotify
//! descriptor that says "nothing changed".
//!
//! Why it is never stale: any commit, by this process or another (`poolctl retire`),
//! writes its frames to the `-wal` file before it is visible to any reader, and the
//! kernel queues the inotify event inside that `write(2)`. So once a commit can be read,
//! its event is already waiting, and the next look-up sees it and drops the cache. A
//! read that races a commit is tagged with the generation it started in and not kept
//! when the generation moved on. Anything the watch cannot vouch for (an event queue
//! overflow, a read error) drops the cache too; a store on a system without inotify is
//! used uncached.
//!
//! A transition that changes nothing on the current (just validated) health is
//! answered here, ordered at that look-up, exactly as the SQLite store answers it at
//! its own read; any other goes to the store, and drops the cache.
//!
//! One cache per thread that uses it (`Slot`s, each with a watch of its own), not one
//! for all: `serve` runs a lane per core, every request looks health up twice, and one
//! shared lock held across the watch's `read(2)` was contended on every other request,
//! each time a futex wait on one lane and a wake from the other (a cross-thread
//! hand-off that cost more than the look-up itself). Every watch sees every change to
//! the file, so each slot is validated exactly as the single cache was.

use crate::core::clock::UnixMs;
use crate::core::vocab::Route;
use crate::policy::breaker::{self, BreakerConfig};
use crate::policy::health::{apply, Health, Transition};
use crate::store::{HealthStore, StoreError, StoreFuture};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// `store` (the SQLite file at `path`) behind the cache, or `store` itself when the
/// file cannot be watched here.
pub fn over(store: Arc<dyn HealthStore>, path: &Path) -> Arc<dyn HealthStore> {
    // The first slot's watch is made now: a file that cannot be watched is used uncached.
    let Some(watch) = Watch::new(path) else {
        return store;
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Twice the cores: the lanes (one a core by default) and the few other threads that
    // read health (the main runtime's, for /readyz and /metrics) each find a slot of
    // their own. More threads than slots share them, as correctly, only contended.
    let slots: Vec<Mutex<Slot>> = (0..(2 * threads).clamp(2, 32))
        .map(|_| Mutex::new(Slot::Unwatched))
        .collect();
    *lock(&slots[0]) = Slot::Watched(State::new(watch));
    Arc::new(HealthCache {
        inner: store,
        path: path.to_path_buf(),
        slots: slots.into_boxed_slice(),
    })
}

pub struct HealthCache {
    inner: Arc<dyn HealthStore>,
    /// The store's file, for the watches of slots made later.
    path: PathBuf,
    slots: Box<[Mutex<Slot>]>,
}

/// One thread's cache (or a few threads', when there are more threads than slots).
enum Slot {
    /// No thread has used it yet: its watch is made at the first look-up.
    Unwatched,
    Watched(State),
    /// Its watch could not be made (out of inotify instances): every read and
    /// transition goes to the store.
    Uncached,
}

/// This thread's slot number, given out in turn at its first look-up in any cache.
fn thread_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SLOT.with(|s| *s)
}

fn lock(m: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    // Each critical section is a look-up or a small update: a panic cannot leave
    // the cache half-changed in a way a later validation does not repair.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct State {
    watch: Watch,
    /// Moves on whenever the cache is dropped; a read is kept only in its own generation.
    generation: u64,
    /// Routes read since the last change; few, so a list beats a hash map.
    known: Vec<(Route, Health)>,
}

impl State {
    fn new(watch: Watch) -> State {
        State {
            watch,
            generation: 0,
            known: Vec::new(),
        }
    }

    /// Drops what is known when the file changed since the last look-up.
    fn validate(&mut self) {
        if self.watch.changed() {
            self.drop_all();
        }
    }

    fn drop_all(&mut self) {
        self.generation += 1;
        self.known.clear();
    }

    fn get(&self, route: &Route) -> Option<&Health> {
        self.known.iter().find(|(r, _)| r == route).map(|(_, h)| h)
    }

    fn keep(&mut self, generation: u64, route: &Route, health: &Health) {
        if generation != self.generation {
            return; // the file changed while this was read: it may be older than the change
        }
        match self.known.iter_mut().find(|(r, _)| r == route) {
            Some((_, h)) => *h = health.clone(),
            None => self.known.push((route.clone(), health.clone())),
        }
    }
}

impl HealthCache {
    /// This thread's slot, its watch made at its first use. Held only for a look-up or
    /// an update, never across a store call.
    fn slot(&self) -> (usize, MutexGuard<'_, Slot>) {
        let i = thread_slot() % self.slots.len();
        let mut slot = lock(&self.slots[i]);
        if matches!(*slot, Slot::Unwatched) {
            *slot = match Watch::new(&self.path) {
                Some(watch) => Slot::Watched(State::new(watch)),
                None => Slot::Uncached,
            };
        }
        (i, slot)
    }

    /// Slot `i`'s state, when it has one. A slot stays the one a look-up began in
    /// (what a miss read keeps goes there), whichever thread the read finishes on.
    fn state(&self, i: usize) -> Option<MutexGuard<'_, Slot>> {
        let slot = lock(&self.slots[i]);
        matches!(*slot, Slot::Watched(_)).then_some(slot)
    }

    /// The validated cached health of `route` in this thread's slot, the slot, and the
    /// generation a miss reads in; `None` when the slot is uncached.
    fn look(&self, route: &Route) -> Option<(usize, u64, Option<Health>)> {
        let (i, mut slot) = self.slot();
        let Slot::Watched(s) = &mut *slot else {
            return None;
        };
        s.validate();
        Some((i, s.generation, s.get(route).cloned()))
    }

    fn keep(&self, i: usize, generation: u64, route: &Route, health: &Health) {
        if let Some(mut slot) = self.state(i) {
            if let Slot::Watched(s) = &mut *slot {
                s.keep(generation, route, health);
            }
        }
    }

    fn drop_all(&self, i: usize) {
        if let Some(mut slot) = self.state(i) {
            if let Slot::Watched(s) = &mut *slot {
                s.drop_all();
            }
        }
    }
}

impl HealthStore for HealthCache {
    fn get<'a>(&'a self, route: &'a Route) -> StoreFuture<'a, Health> {
        let Some((i, generation, hit)) = self.look(route) else {
            return self.inner.get(route);
        };
        if let Some(h) = hit {
            return StoreFuture::Ready(Some(Ok(h)));
        }
        match self.inner.get(route) {
            StoreFuture::Ready(Some(Ok(h))) => {
                self.keep(i, generation, route, &h);
                StoreFuture::Ready(Some(Ok(h)))
            }
            StoreFuture::Ready(other) => StoreFuture::Ready(other),
            StoreFuture::Waiting(work) => StoreFuture::waiting(async move {
                let h = work.await?;
                self.keep(i, generation, route, &h);
                Ok(h)
            }),
        }
    }

    fn get_many<'a>(
        &'a self,
        routes: &'a [&'a Route],
        out: &'a mut Vec<Health>,
    ) -> StoreFuture<'a, ()> {
        let (i, generation) = {
            let (i, mut slot) = self.slot();
            let Slot::Watched(s) = &mut *slot else {
                drop(slot);
                return self.inner.get_many(routes, out);
            };
            s.validate();
            let hits: Option<Vec<Health>> = routes.iter().map(|r| s.get(r).cloned()).collect();
            if let Some(hits) = hits {
                out.extend(hits);
                return StoreFuture::Ready(Some(Ok(())));
            }
            (i, s.generation)
        };
        StoreFuture::waiting(async move {
            let start = out.len();
            self.inner.get_many(routes, out).await?;
            for (r, h) in routes.iter().zip(&out[start..]) {
                self.keep(i, generation, r, h);
            }
            Ok(())
        })
    }

    fn list(&self) -> StoreFuture<'_, Vec<(Route, Health)>> {
        self.inner.list()
    }

    fn apply<'a>(&'a self, route: &'a Route, t: Transition) -> StoreFuture<'a, (Health, Health)> {
        let Some((i, _, seen)) = self.look(route) else {
            return self.inner.apply(route, t);
        };
        if let Some(seen) = seen {
            if apply(&seen, t.clone()) == seen {
                return StoreFuture::Ready(Some(Ok((seen.clone(), seen))));
            }
        }
        let done = move |r: Result<(Health, Health), StoreError>| {
            if !r.as_ref().is_ok_and(|(old, new)| old == new) {
                // This slot's watch sees the write too (and every other slot's does);
                // dropping now does not wait for it.
                self.drop_all(i);
            }
            r
        };
        match self.inner.apply(route, t) {
            StoreFuture::Ready(Some(r)) => StoreFuture::Ready(Some(done(r))),
            StoreFuture::Ready(None) => StoreFuture::Ready(None),
            StoreFuture::Waiting(work) => StoreFuture::waiting(async move { done(work.await) }),
        }
    }

    // Breakers are not cached: the store's own record, beside health. A breaker write
    // changes the file, which the watch sees like any other commit.
    fn breaker<'a>(
        &'a self,
        route: &'a Route,
        cfg: BreakerConfig,
        op: breaker::Step,
    ) -> StoreFuture<'a, breaker::Answer> {
        self.inner.breaker(route, cfg, op)
    }

    fn breaker_open<'a>(&'a self, route: &'a Route, now: UnixMs) -> StoreFuture<'a, bool> {
        self.inner.breaker_open(route, now)
    }
}

/// Changes to the store's file and its `-wal`/`-shm`/`-journal` side files, from an
/// inotify watch on their directory (so a file replaced or moved away is seen too).
struct Watch {
    #[cfg(target_os = "linux")]
    fd: rustix::fd::OwnedFd,
    #[cfg(target_os = "linux")]
    name: Vec<u8>,
    #[cfg(target_os = "linux")]
    buf: Vec<std::mem::MaybeUninit<u8>>,
}

#[cfg(target_os = "linux")]
impl Watch {
    fn new(path: &Path) -> Option<Watch> {
        use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
        let name = path.file_name()?.as_encoded_bytes().to_vec();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC).ok()?;
        inotify::add_watch(
            &fd,
            dir,
            WatchFlags::MODIFY
                | WatchFlags::CREATE
                | WatchFlags::DELETE
                | WatchFlags::MOVED_FROM
                | WatchFlags::MOVED_TO
                | WatchFlags::DELETE_SELF
                | WatchFlags::MOVE_SELF,
        )
        .ok()?;
        Some(Watch {
            fd,
            name,
            buf: vec![std::mem::MaybeUninit::uninit(); 4096],
        })
    }

    /// Whether the store's files changed since the last call; drains every event.
    fn changed(&mut self) -> bool {
        use rustix::io::Errno;
        let mut reader = rustix::fs::inotify::Reader::new(&self.fd, &mut self.buf);
        let mut changed = false;
        loop {
            match reader.next() {
                Ok(event) => {
                    changed |= match event.file_name() {
                        // Ours: the file, or a side file named after it.
                        Some(n) => n.to_bytes().starts_with(&self.name),
                        // The directory itself, or the queue overflowed: cannot tell.
                        None => true,
                    };
                }
                Err(Errno::AGAIN) => return changed,
                Err(Errno::INTR) => continue,
                // Nothing can be vouched for; the cache is dropped each time.
                Err(_) => return true,
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
impl Watch {
    fn new(_: &Path) -> Option<Watch> {
        None
    }

    fn changed(&mut self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SqliteStore;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_change_by_another_store_on_the_file_is_seen_at_the_next_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let route = Route::parse("a/x").unwrap();
        let cached = over(Arc::new(SqliteStore::open(&path).unwrap()), &path);
        // Another process, as `poolctl retire` is: its own store on the same file.
        let other = SqliteStore::open(&path).unwrap();
        assert_eq!(block_on(cached.get(&route)).unwrap(), Health::Ready);
        assert_eq!(block_on(cached.get(&route)).unwrap(), Health::Ready);
        let retire = Transition::Retire {
            reason: "operator".into(),
        };
        block_on(other.apply(&route, retire)).unwrap();
        assert!(matches!(
            block_on(cached.get(&route)).unwrap(),
            Health::Retired { .. }
        ));
        // A success settled through the cache leaves the other's retirement standing.
        let (_, after) = block_on(cached.apply(&route, Transition::Succeeded)).unwrap();
        assert!(matches!(after, Health::Retired { .. }));
        block_on(other.apply(&route, Transition::Restore)).unwrap();
        let mut all = Vec::new();
        block_on(cached.get_many(&[&route], &mut all)).unwrap();
        assert_eq!(all, vec![Health::Ready]);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn its_own_transitions_reach_the_file_and_its_next_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let route = Route::parse("a/x").unwrap();
        let cached = over(Arc::new(SqliteStore::open(&path).unwrap()), &path);
        assert_eq!(block_on(cached.get(&route)).unwrap(), Health::Ready);
        let cool = Transition::Cool {
            until: 42,
            reason: "rate_limited".into(),
        };
        let (old, new) = block_on(cached.apply(&route, cool.clone())).unwrap();
        assert_eq!(old, Health::Ready);
        assert!(matches!(new, Health::Cooling { until: 42, .. }));
        assert_eq!(block_on(cached.get(&route)).unwrap(), new);
        // The same cooling again changes nothing, and says so.
        let (old, again) = block_on(cached.apply(&route, cool)).unwrap();
        assert_eq!((old, again), (new.clone(), new.clone()));
        let reopened = SqliteStore::open(&path).unwrap();
        assert_eq!(block_on(reopened.get(&route)).unwrap(), new);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_change_through_another_threads_slot_is_seen_at_the_next_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let route = Route::parse("a/x").unwrap();
        let cached = over(Arc::new(SqliteStore::open(&path).unwrap()), &path);
        // This thread's slot knows the route as ready.
        assert_eq!(block_on(cached.get(&route)).unwrap(), Health::Ready);
        // Another thread (another lane) cools it through its own slot of the same cache.
        let cool = Transition::Cool {
            until: 42,
            reason: "rate_limited".into(),
        };
        let other = std::thread::spawn({
            let (cached, route) = (cached.clone(), route.clone());
            move || {
                assert_eq!(block_on(cached.get(&route)).unwrap(), Health::Ready);
                block_on(cached.apply(&route, cool)).unwrap().1
            }
        });
        let cooled = other.join().unwrap();
        assert!(matches!(cooled, Health::Cooling { until: 42, .. }));
        assert_eq!(block_on(cached.get(&route)).unwrap(), cooled);
        // And a success settled here goes to the store against the cooling, not against
        // the ready this slot had read before.
        let (old, _) = block_on(cached.apply(&route, Transition::Succeeded)).unwrap();
        assert_eq!(old, cooled);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn writes_to_other_files_in_the_directory_keep_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut watch = Watch::new(&path).unwrap();
        assert!(!watch.changed());
        std::fs::write(dir.path().join("serve.log"), b"a log line\n").unwrap();
        assert!(!watch.changed(), "an unrelated file is not the store");
        std::fs::write(dir.path().join("state.db-wal"), b"x").unwrap();
        assert!(watch.changed());
        assert!(!watch.changed(), "every event was drained");
    }
}
