//! The embedding batch queue (seed 000): embeddings are offline work, so a batch that
//! finds no live route goes back to the tail of the queue instead of failing, and is
//! offered again once a route of its tier is ready. The router decides `queue`; this
//! queue only keeps what it was handed, in order.

use crate::config::route::Tier;
use crate::core::answer::Answer;
use crate::core::request::{EmbedRequest, Request};
use crate::core::trace::Report;
use crate::core::vocab::Outcome;
use crate::policy::card::Policy;
use crate::router::{CallOptions, Called, Router};
use std::collections::VecDeque;
use std::sync::Mutex;

/// A batch waiting for a route, with the reports of its tries so far.
#[derive(Debug, Clone)]
pub struct QueuedBatch {
    pub id: u64,
    pub request: EmbedRequest,
    pub tries: Vec<Report>,
}

/// What became of a batch.
#[derive(Debug)]
pub enum Offered {
    /// Embedded (or failed for good); the report says which, the answer holds the vectors.
    Finished {
        id: u64,
        report: Report,
        /// Boxed: an answer is large beside the other variant.
        answer: Option<Box<Answer>>,
    },
    /// Back at the tail of the queue.
    Queued { id: u64, report: Report },
}

/// A FIFO of embedding batches that the router queued.
#[derive(Debug, Default)]
pub struct EmbedQueue {
    pending: Mutex<VecDeque<QueuedBatch>>,
    next_id: Mutex<u64>,
}

impl EmbedQueue {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<QueuedBatch>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends a new batch; if the router answers `queue`, it joins the tail.
    pub async fn submit(
        &self,
        router: &Router,
        tier: &Tier,
        policy: &Policy,
        request: EmbedRequest,
    ) -> Offered {
        let id = {
            let mut n = self.next_id.lock().unwrap_or_else(|p| p.into_inner());
            *n += 1;
            *n
        };
        self.offer(
            router,
            tier,
            policy,
            QueuedBatch {
                id,
                request,
                tries: Vec::new(),
            },
        )
        .await
    }

    /// Re-offers every queued batch once, in order, but only when a route of `tier` is
    /// ready: offering into a tier that is all cooling or retired would only burn the
    /// budget. Batches the router queues again go back to the tail.
    pub async fn drain(&self, router: &Router, tier: &Tier, policy: &Policy) -> Vec<Offered> {
        let mut out = Vec::new();
        let waiting = self.len();
        for _ in 0..waiting {
            if !router.any_ready(tier).await {
                break;
            }
            let Some(batch) = self.lock().pop_front() else {
                break;
            };
            out.push(self.offer(router, tier, policy, batch).await);
        }
        out
    }

    async fn offer(
        &self,
        router: &Router,
        tier: &Tier,
        policy: &Policy,
        mut batch: QueuedBatch,
    ) -> Offered {
        let req = Request::Embed(batch.request.clone());
        let Called { answer, report } = router.call(tier, &req, CallOptions::new(policy)).await;
        if report.outcome == Outcome::Queued {
            batch.tries.push(report.clone());
            let id = batch.id;
            self.lock().push_back(batch);
            Offered::Queued { id, report }
        } else {
            Offered::Finished {
                id: batch.id,
                report,
                answer: answer.map(Box::new),
            }
        }
    }
}
