//! The one async trait every store implements (`HealthStore`), the future its calls
//! return, its error, and what admission does while a shared store cannot answer
//! (`OnStoreError`).

use crate::core::clock::UnixMs;
use crate::core::vocab::Route;
use crate::policy::breaker::{self, BreakerConfig};
use crate::policy::health::{Health, Transition};
use std::future::Future;
use std::pin::Pin;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("health store {path}: {message}")]
    Backend { path: String, message: String },
}

/// What every store call returns. A store that answers at once (memory) hands back the
/// answer itself, with no allocation — the routing hot path calls the store twice per
/// attempt; one that must wait (SQLite, a network store) a boxed future. Either way the
/// trait stays object-safe (`Arc<dyn HealthStore>`) without an extra crate.
pub enum StoreFuture<'a, T> {
    Ready(Option<Result<T, StoreError>>),
    Waiting(Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>),
}

impl<'a, T> StoreFuture<'a, T> {
    /// A future of `work`.
    pub fn waiting(work: impl Future<Output = Result<T, StoreError>> + Send + 'a) -> Self {
        StoreFuture::Waiting(Box::pin(work))
    }

    /// The answer, when the store had it at once; else the future, to await. The hot
    /// path takes a memory store's answer this way, without polling a future for it.
    pub fn now(self) -> Result<Result<T, StoreError>, Self> {
        match self {
            StoreFuture::Ready(Some(answer)) => Ok(answer),
            later => Err(later),
        }
    }
}

impl<T: Unpin> Future for StoreFuture<'_, T> {
    type Output = Result<T, StoreError>;

    fn poll(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match self.get_mut() {
            StoreFuture::Ready(answer) => std::task::Poll::Ready(
                answer
                    .take()
                    .expect("a store future polled after it answered"),
            ),
            StoreFuture::Waiting(work) => work.as_mut().poll(cx),
        }
    }
}

pub trait HealthStore: Send + Sync {
    /// The stored health of a route; `Ready` when nothing is stored.
    fn get<'a>(&'a self, route: &'a Route) -> StoreFuture<'a, Health>;
    /// Appends the health of each of `routes` to `out`, in order: one read for a whole
    /// selection, into a buffer the caller reuses.
    fn get_many<'a>(
        &'a self,
        routes: &'a [&'a Route],
        out: &'a mut Vec<Health>,
    ) -> StoreFuture<'a, ()>;
    /// Every route with a stored state, sorted by route.
    fn list(&self) -> StoreFuture<'_, Vec<(Route, Health)>>;
    /// Applies `t` atomically to the route's current health; returns (old, new).
    fn apply<'a>(&'a self, route: &'a Route, t: Transition) -> StoreFuture<'a, (Health, Health)>;
    /// Applies `op` atomically to the route's breaker state; returns what it answered.
    fn breaker<'a>(
        &'a self,
        route: &'a Route,
        cfg: BreakerConfig,
        op: breaker::Step,
    ) -> StoreFuture<'a, breaker::Answer>;
    /// Whether the route's breaker is open at `now`: a read, no trial slot taken.
    fn breaker_open<'a>(&'a self, route: &'a Route, now: UnixMs) -> StoreFuture<'a, bool>;
    /// For a shared store that can lose its data (a Redis restarted without persistence,
    /// failed over to a replica that lagged, flushed): checks whether the data of
    /// `known`'s providers was lost since this handle last looked, and if so writes
    /// `known` back (retired records, open breakers) where it is missing. Answers the
    /// routes written back. A store that keeps its data answers none.
    fn write_back_if_lost<'a>(&'a self, known: &'a [Known]) -> StoreFuture<'a, Vec<Route>> {
        let _ = known;
        ready(Ok(Vec::new()))
    }
}

/// What a process knows of a route that must outlive a store's loss of its data:
/// a retirement (decisions.md: retired records outlive processes) and an open breaker.
#[derive(Debug, Clone, PartialEq)]
pub struct Known {
    pub route: Route,
    /// The retirement's reason, when the route is retired.
    pub retired: Option<String>,
    /// The breaker's encoded state (`breaker::State::encode`), when it is open.
    pub open_breaker: Option<String>,
}

/// What a process does with admission while the shared store cannot be reached
/// (`on_store_error`, spec/cli.md v2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnStoreError {
    /// Each process keeps `1 / workers` of each bucket locally, counted as degraded.
    #[default]
    LocalShare,
    /// Shed, with reason `admission`.
    FailClosed,
}

/// A store answer that is ready at once (the in-memory stores).
pub(super) fn ready<'a, T>(v: Result<T, StoreError>) -> StoreFuture<'a, T> {
    StoreFuture::Ready(Some(v))
}
