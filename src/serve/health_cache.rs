//! The gateway's view of the shared health store: the SQLite store behind a cache of
//! what it last read, dropped when the file changes. Every request reads a route's
//! health before its call and settles it after; against SQLite each of those was a read
//! transaction (two `fcntl` locks, an `fstat`, a statement) for an answer that almost
//! never changes. Here both are a look-up and an atomic load.
//!
//! How it learns of a change: a thread of its own blocks on an inotify watch of the
//! file's directory and moves a generation counter on at every event for the file (or
//! its `-wal`/`-shm`/`-journal` side files); a look-up compares the counter with the one
//! its cache was read in. Any commit, by this process or another (`poolctl retire`),
//! writes its frames to the `-wal` file before it is visible to any reader, and the
//! kernel queues the event and wakes the watcher inside that `write(2)`. So a change by
//! another process is seen by every request that starts once the watcher has run after
//! the write: the time the scheduler takes to run a thread it just woke (microseconds;
//! milliseconds on a saturated machine: the bound is the scheduler's, not the cache's).
//! Events for other files in the directory (a log written beside the store) wake the
//! watcher and move nothing. The requests' threads never touch the watch: before, each
//! look-up read the inotify descriptor itself (two `read(2)`s a request, each
//! `EAGAIN`), which made the bound zero but cost two system calls a request. This
//! process's own changes do not wait for the watcher: a transition that changed the
//! file moves the counter itself once the store answers.
//!
//! A read that races a change is tagged with the generation it started in and not kept
//! when the generation moved on. Anything the watch cannot vouch for (its queue
//! overflowed) drops the cache too; a watch that is lost (the directory removed, a read
//! error) turns the cache off for good, and a store on a system without inotify is used
//! uncached.
//!
//! A transition that changes nothing on the current (just validated) health is
//! answered here, ordered at that look-up, exactly as the SQLite store answers it at
//! its own read; any other goes to the store, and drops the cache.
//!
//! One cache per thread that uses it (`Slot`s), not one for all: `serve` runs a lane
//! per core and every request looks health up twice; one lock for all was contended on
//! every other request, a futex wait on one lane and a wake from the other. The
//! watcher only writes the counter, so it hands nothing to the lanes on the way.

use crate::core::clock::UnixMs;
use crate::core::vocab::Route;
use crate::policy::breaker::{self, BreakerConfig};
use crate::policy::health::{apply, Health, Transition};
use crate::store::{HealthStore, StoreError, StoreFuture};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// `store` (the SQLite file at `path`) behind the cache, or `store` itself when the
/// file cannot be watched here.
pub fn over(store: Arc<dyn HealthStore>, path: &Path) -> Arc<dyn HealthStore> {
    match HealthCache::new(store.clone(), path) {
        Some(cache) => Arc::new(cache),
        None => store,
    }
}

pub struct HealthCache {
    inner: Arc<dyn HealthStore>,
    changes: Arc<Changes>,
    /// Removed when the cache is dropped, which ends its watcher.
    watch: Arc<Watch>,
    slots: Box<[Mutex<Slot>]>,
}

/// What the watcher tells the requests' threads.
struct Changes {
    /// Moves on at every change to the store's files.
    generation: AtomicU64,
    /// False once the watch is gone: nothing is cached from then on.
    watched: AtomicBool,
}

impl Changes {
    fn now(&self) -> u64 {
        // Acquire: pairs with the watcher's release, though what a slot then reads is
        // the store's, which has its own ordering; this only orders the counter.
        self.generation.load(Ordering::Acquire)
    }

    fn moved(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    fn lost(&self) {
        self.watched.store(false, Ordering::Release);
        self.moved();
    }
}

/// One thread's cache (or a few threads', when there are more threads than slots).
#[derive(Default)]
struct Slot {
    /// The generation `known` was read in.
    seen: u64,
    /// Routes read since the last change; few, so a list beats a hash map.
    known: Vec<(Route, Health)>,
}

impl Slot {
    /// Drops what is known when the file changed since it was read.
    fn validate(&mut self, generation: u64) {
        if self.seen != generation {
            self.known.clear();
            self.seen = generation;
        }
    }

    fn get(&self, route: &Route) -> Option<&Health> {
        self.known.iter().find(|(r, _)| r == route).map(|(_, h)| h)
    }

    fn keep(&mut self, generation: u64, route: &Route, health: &Health) {
        self.validate(generation);
        match self.known.iter_mut().find(|(r, _)| r == route) {
            Some((_, h)) => *h = health.clone(),
            None => self.known.push((route.clone(), health.clone())),
        }
    }
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

impl HealthCache {
    /// The cache over `store`, its watcher started; `None` when the file cannot be
    /// watched here (no inotify, out of instances, no thread).
    fn new(store: Arc<dyn HealthStore>, path: &Path) -> Option<HealthCache> {
        let watch = Arc::new(Watch::new(path)?);
        let changes = Arc::new(Changes {
            generation: AtomicU64::new(0),
            watched: AtomicBool::new(true),
        });
        {
            let (watch, changes) = (watch.clone(), changes.clone());
            std::thread::Builder::new()
                .name("poolctl-health-watch".into())
                .spawn(move || watch.run(&changes))
                .ok()?;
        }
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Twice the cores: the lanes (one a core by default) and the few other threads that
        // read health (the main runtime's, for /readyz and /metrics) each find a slot of
        // their own. More threads than slots share them, as correctly, only contended.
        let slots: Vec<Mutex<Slot>> = (0..(2 * threads).clamp(2, 32))
            .map(|_| Mutex::new(Slot::default()))
            .collect();
        Some(HealthCache {
            inner: store,
            changes,
            watch,
            slots: slots.into_boxed_slice(),
        })
    }

    /// This thread's slot. Held only for a look-up or an update, never across a store
    /// call.
    fn slot(&self) -> (usize, MutexGuard<'_, Slot>) {
        let i = thread_slot() % self.slots.len();
        (i, lock(&self.slots[i]))
    }

    /// The current generation, or `None` when the watch is lost.
    fn generation(&self) -> Option<u64> {
        let g = self.changes.now();
        self.changes.watched.load(Ordering::Acquire).then_some(g)
    }

    /// The validated cached health of `route` in this thread's slot, the slot, and the
    /// generation a miss reads in; `None` when nothing is cached.
    fn look(&self, route: &Route) -> Option<(usize, u64, Option<Health>)> {
        // The generation is read under the slot's lock: threads that share a slot
        // validate it in the order they read, never back to an older generation.
        let (i, mut slot) = self.slot();
        let generation = self.generation()?;
        slot.validate(generation);
        Some((i, generation, slot.get(route).cloned()))
    }

    /// Keeps what a read in `generation` found, unless the file changed since. A slot
    /// stays the one a look-up began in, whichever thread the read finishes on.
    fn keep(&self, i: usize, generation: u64, route: &Route, health: &Health) {
        let mut slot = lock(&self.slots[i]);
        if self.generation() != Some(generation) {
            return; // the file changed while this was read: it may be older than the change
        }
        slot.keep(generation, route, health);
    }
}

impl Drop for HealthCache {
    fn drop(&mut self) {
        self.watch.stop();
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
            let Some(generation) = self.generation() else {
                drop(slot);
                return self.inner.get_many(routes, out);
            };
            slot.validate(generation);
            let hits: Option<Vec<Health>> = routes.iter().map(|r| slot.get(r).cloned()).collect();
            if let Some(hits) = hits {
                out.extend(hits);
                return StoreFuture::Ready(Some(Ok(())));
            }
            (i, generation)
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
        let Some((_, _, seen)) = self.look(route) else {
            return self.inner.apply(route, t);
        };
        if let Some(seen) = seen {
            if apply(&seen, t.clone()) == seen {
                return StoreFuture::Ready(Some(Ok((seen.clone(), seen))));
            }
        }
        let done = move |r: Result<(Health, Health), StoreError>| {
            if !r.as_ref().is_ok_and(|(old, new)| old == new) {
                // Every slot's cache is dropped now, not when the watcher sees the write:
                // this process's own changes reach its next look-up on any thread.
                self.changes.moved();
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

/// An inotify watch on the store's directory (so a file replaced or moved away is seen
/// too), read by the cache's watcher thread.
struct Watch {
    #[cfg(target_os = "linux")]
    fd: rustix::fd::OwnedFd,
    #[cfg(target_os = "linux")]
    wd: i32,
    /// The store's file name: its side files are named after it.
    #[cfg(target_os = "linux")]
    name: Vec<u8>,
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
        // Blocking: the watcher thread sleeps in `read(2)` until there is an event.
        let fd = inotify::init(CreateFlags::CLOEXEC).ok()?;
        let wd = inotify::add_watch(
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
        Some(Watch { fd, wd, name })
    }

    /// The watcher: moves `changes` on at every event for the store's files, until the
    /// watch is removed (the cache dropped, or the directory gone) or cannot be read.
    fn run(&self, changes: &Changes) {
        use rustix::fs::inotify::{ReadFlags, Reader};
        use rustix::io::Errno;
        let mut buf = vec![std::mem::MaybeUninit::uninit(); 4096];
        let mut reader = Reader::new(&self.fd, &mut buf);
        loop {
            match reader.next() {
                Ok(event) => {
                    if event.events().contains(ReadFlags::IGNORED) {
                        // The watch is gone: nothing can be vouched for from now on.
                        changes.lost();
                        return;
                    }
                    if self.ours(event.file_name().map(|n| n.to_bytes())) {
                        changes.moved();
                    }
                }
                Err(Errno::INTR) => continue,
                Err(_) => {
                    changes.lost();
                    return;
                }
            }
        }
    }

    /// Whether an event about `name` (none: the directory itself, or the queue
    /// overflowed) may be a change to the store.
    fn ours(&self, name: Option<&[u8]>) -> bool {
        match name {
            // The file, or a side file named after it.
            Some(n) => n.starts_with(&self.name),
            // Cannot tell.
            None => true,
        }
    }

    /// Ends the watcher: removing the watch queues the `IN_IGNORED` it stops at.
    fn stop(&self) {
        let _ = rustix::fs::inotify::remove_watch(&self.fd, self.wd);
    }
}

#[cfg(not(target_os = "linux"))]
impl Watch {
    fn new(_: &Path) -> Option<Watch> {
        None
    }

    fn run(&self, _: &Changes) {}

    fn stop(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::clock::Stopwatch;
    use crate::store::SqliteStore;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// Waits (yielding, not sleeping) until the watcher has moved the generation on
    /// from `from`: what a change by another process waits for before it is seen.
    fn watcher_saw(cache: &HealthCache, from: u64) -> u64 {
        let sw = Stopwatch::start();
        loop {
            let now = cache.changes.now();
            if now != from {
                return now;
            }
            assert!(sw.elapsed_ms() < 10_000, "the watcher never saw the change");
            std::thread::yield_now();
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_change_by_another_store_on_the_file_is_seen_once_the_watcher_ran() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let route = Route::parse("a/x").unwrap();
        let cached =
            Arc::new(HealthCache::new(Arc::new(SqliteStore::open(&path).unwrap()), &path).unwrap());
        // Another process, as `poolctl retire` is: its own store on the same file.
        let other = SqliteStore::open(&path).unwrap();
        assert_eq!(block_on(cached.get(&route)).unwrap(), Health::Ready);
        assert_eq!(block_on(cached.get(&route)).unwrap(), Health::Ready);
        let retire = Transition::Retire {
            reason: "operator".into(),
        };
        let before = cached.changes.now();
        block_on(other.apply(&route, retire)).unwrap();
        watcher_saw(&cached, before);
        assert!(matches!(
            block_on(cached.get(&route)).unwrap(),
            Health::Retired { .. }
        ));
        // A success settled through the cache leaves the other's retirement standing.
        let (_, after) = block_on(cached.apply(&route, Transition::Succeeded)).unwrap();
        assert!(matches!(after, Health::Retired { .. }));
        let before = cached.changes.now();
        block_on(other.apply(&route, Transition::Restore)).unwrap();
        watcher_saw(&cached, before);
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
        // Seen at once, not when the watcher gets to the write: no wait here.
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
        // The store behind it is elsewhere: only the watch of `dir` is under test.
        let elsewhere = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&elsewhere.path().join("state.db")).unwrap();
        let cache = HealthCache::new(Arc::new(store), &path).unwrap();
        let before = cache.changes.now();
        std::fs::write(dir.path().join("serve.log"), b"a log line\n").unwrap();
        std::fs::write(dir.path().join("state.db-wal"), b"x").unwrap();
        // Events arrive in order: the log's moved nothing, the side file's one step
        // (its create and its write may come as one or two).
        let now = watcher_saw(&cache, before);
        assert!(now - before <= 2, "{before} -> {now}");
        assert!(cache.watch.ours(Some(b"state.db-shm")));
        assert!(!cache.watch.ours(Some(b"serve.log")));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_lost_watch_turns_the_cache_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("state.db");
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let route = Route::parse("a/x").unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("state.db")).unwrap());
        let cache = HealthCache::new(store, &path).unwrap();
        assert!(cache.look(&route).is_some());
        let before = cache.changes.now();
        std::fs::remove_dir(dir.path().join("sub")).unwrap();
        let sw = Stopwatch::start();
        while cache.changes.watched.load(Ordering::Acquire) {
            assert!(
                sw.elapsed_ms() < 10_000,
                "the watcher never saw the watch go"
            );
            std::thread::yield_now();
        }
        assert_ne!(cache.changes.now(), before);
        assert!(
            cache.look(&route).is_none(),
            "read from the store from now on"
        );
    }
}
