//! The gateway's budget of bytes held for requests at once (`--max-buffered-body-bytes`):
//! a request body's bytes, and the history a Responses request continues, are taken
//! from it while the request lives, so many large requests wait their turn instead of
//! taking the process's memory (issue 9, item 7).

use std::sync::Arc;

/// A request body's share of the gateway's buffered-body budget, one permit a byte.
pub(super) struct BodyPermit {
    permits: Option<tokio::sync::OwnedSemaphorePermit>,
    pub(super) held: usize,
}

impl BodyPermit {
    pub(super) fn none() -> Self {
        BodyPermit {
            permits: None,
            held: 0,
        }
    }

    /// Holds `total` bytes of the budget in all (waiting for them to be free).
    pub(super) async fn grow(
        &mut self,
        budget: &Arc<tokio::sync::Semaphore>,
        total: usize,
        metrics: &super::metrics::Metrics,
    ) {
        let more = total.saturating_sub(self.held);
        if more == 0 {
            return;
        }
        let n = u32::try_from(more).unwrap_or(u32::MAX);
        if budget.available_permits() < n as usize {
            metrics.body_waited();
        }
        // The semaphore is never closed, so acquiring only waits.
        if let Ok(p) = budget.clone().acquire_many_owned(n).await {
            match &mut self.permits {
                Some(held) => held.merge(p),
                None => self.permits = Some(p),
            }
            self.held += n as usize;
        }
    }
}

/// A permit for about `bytes` held by a request beside its body (a Responses history:
/// parsed, as the canonical conversation, and as the body a route is sent), from
/// `budget` of `total` permits. Never more than the whole budget, which one request
/// must always be able to hold.
pub(super) async fn hold(
    budget: &Arc<tokio::sync::Semaphore>,
    total: usize,
    metrics: &super::metrics::Metrics,
    bytes: usize,
) -> BodyPermit {
    let mut permit = BodyPermit::none();
    permit.grow(budget, bytes.min(total), metrics).await;
    permit
}
