//! Admission inside the walk (decisions.md, "Admission"): a route whose buckets cannot
//! hold the request's cost is passed over (`admission`) and never called; an admitted
//! call's reservation is trued up after the attempt; when no route admits the request,
//! it waits in the local queue only while the refill alone can admit it in time. The
//! arithmetic is `admission`'s and `buckets`'; this file only carries it out.

use super::state::{Router, Walk};
use crate::admission::bucket::{Cost, Spent, DEFAULT_MAX_OUTPUT_TOKENS};
use crate::classify::failure::Headers;
use crate::config::route::RouteSpec;
use crate::core::trace::{Report, Skip, SkipWhy};
use crate::core::vocab::CallPath;
use crate::store::shared_buckets::Hold;

/// What one call to `spec` costs: one request, the input estimate, and the output it
/// may produce — the declared maximum, else the model's, else 4 096 (providers
/// reserve the declared maximum, so the router does too). Embeddings and rerank
/// produce no output tokens.
pub(super) fn cost_on(walk: &Walk<'_>, spec: &RouteSpec) -> Cost {
    let output = match walk.path {
        CallPath::Chat | CallPath::Stream if walk.needs.max_output_tokens == 0 => spec
            .facts
            .max_output_tokens
            .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
        _ => walk.needs.max_output_tokens,
    };
    Cost {
        input_tokens: walk.needs.prompt_tokens,
        output_tokens: output,
    }
}

/// How the cause of an `admission` skip that no refill would lift begins: such a
/// refusal gives no `Retry-After` (`serve::adapter::shed_retry_after_ms`).
pub const NEVER_ADMITTED: &str = "never admitted here: ";

impl Router {
    /// Admits the route at try-order position `pos`, holding its reservation in the
    /// walk; `false` (the skip recorded) when its buckets cannot hold the cost now, or
    /// when a request ahead in the queue waits for the same provider.
    pub(super) async fn admit(&self, walk: &mut Walk<'_>, report: &mut Report, pos: usize) -> bool {
        let buckets = &self.inner.buckets;
        if buckets.is_empty() {
            return true;
        }
        let spec = &walk.tier.routes[walk.order[pos]];
        // With shared buckets, `buckets` is their local share: the same covers, so the
        // same provider groups for the queue.
        let Some(cover) = buckets.cover(&spec.route) else {
            return true;
        };
        let cost = cost_on(walk, spec);
        let ceiling = &self.inner.ceiling;
        if let Some(over) = ceiling
            .cover(&spec.route)
            .and_then(|c| ceiling.exceeds(&c, cost))
        {
            // No refill would ever admit it: passed over like a route that cannot serve
            // the request, not queued, and never answered "retry in 1 s".
            let skip = Skip {
                route: spec.route.clone(),
                why: SkipWhy::ExceedsBucket,
                cause: Some(over.to_string()),
            };
            self.emit_skip(walk, report, skip);
            return false;
        }
        let now = self.inner.clock.now_ms();
        let priority = walk.opts.priority;
        let place = walk.ticket.as_ref().map(|t| t.place);
        let refused = if self.inner.queue.blocked(place, priority, cover.group()) {
            // Someone ahead waits for this provider: its turn first, then ours.
            let wait = match &self.inner.shared {
                Some(shared) => Box::pin(shared.wait_ms(&spec.route, cost, priority, now)).await,
                None => buckets.wait_ms(&cover, cost, priority, now),
            };
            Some(wait.map(|w| w.max(1)))
        } else {
            let got = match &self.inner.shared {
                // Boxed: the shared path's future stays out of every walk's state.
                Some(shared) => Box::pin(shared.acquire(&spec.route, cost, priority, now)).await,
                None => buckets
                    .acquire(&cover, cost, priority, now)
                    .map(Hold::Local),
            };
            match got {
                Ok(r) => {
                    walk.reservation = Some(r);
                    // Admitted: the request leaves the queue now, not when it ends, so
                    // the next waiter's turn does not wait on this one's upstream call.
                    walk.ticket = None;
                    None
                }
                Err(refused) => Some(refused.wait_ms),
            }
        };
        let Some(wait) = refused else {
            return true;
        };
        walk.refused.push((pos, wait, cover.group()));
        let cause = match wait {
            Some(ms) => format!("buckets refill in {ms} ms"),
            // The full bucket holds it (else `exceeds_bucket` above), yet no refill admits
            // it here: the interactive floor keeps this priority out, or this process's
            // share of a shared bucket (the store unreachable) is too small, or is none.
            None if priority != crate::core::vocab::Priority::Interactive => format!(
                "{NEVER_ADMITTED}a {} request may not use the interactive floor, or this process's share of the bucket",
                priority.as_str()
            ),
            None => format!("{NEVER_ADMITTED}this process's share of the bucket cannot hold it"),
        };
        let skip = Skip {
            route: spec.route.clone(),
            why: SkipWhy::Admission,
            cause: Some(cause),
        };
        self.emit_skip(walk, report, skip);
        false
    }

    /// Trues the current reservation up to what the attempt spent, then lowers the
    /// buckets to the provider's own remaining counts in `headers`.
    pub(super) async fn settle_admission(
        &self,
        walk: &mut Walk<'_>,
        spent: Spent,
        headers: &Headers,
    ) {
        let Some(held) = walk.reservation.take() else {
            return;
        };
        let remaining = crate::admission::bucket::remaining_counts(headers);
        let now = self.inner.clock.now_ms();
        match (held, &self.inner.shared) {
            (Hold::Unlimited, _) => {}
            (Hold::Local(r), None) => self.inner.buckets.settle(r, spent, &remaining, now),
            (held, Some(shared)) => Box::pin(shared.settle(held, spent, &remaining, now)).await,
            (Hold::Shared(_), None) => unreachable!("a shared reservation without shared buckets"),
        }
    }

    /// Gives back a reservation whose route was not called after all.
    pub(super) async fn release_admission(&self, walk: &mut Walk<'_>) {
        self.settle_admission(walk, Spent::Nothing, &Headers::default())
            .await;
    }

    /// How long until the current route's buckets hold one more call (row 4 needs it):
    /// `Some(0)` at once or without limits, `None` never.
    pub(super) async fn retry_admission_ms(&self, walk: &Walk<'_>) -> Option<u64> {
        let buckets = &self.inner.buckets;
        if buckets.is_empty() {
            return Some(0);
        }
        let spec = &walk.tier.routes[walk.current()];
        let Some(cover) = buckets.cover(&spec.route) else {
            return Some(0);
        };
        let (cost, priority) = (cost_on(walk, spec), walk.opts.priority);
        let now = self.inner.clock.now_ms();
        match &self.inner.shared {
            Some(shared) => Box::pin(shared.wait_ms(&spec.route, cost, priority, now)).await,
            None => buckets.wait_ms(&cover, cost, priority, now),
        }
    }

    /// How long until `route`'s buckets (the fleet's, when shared) would admit `cost` at
    /// `priority`: `Some(0)` now or without limits, `None` never. For a shed's
    /// Retry-After.
    pub async fn admission_wait_ms(
        &self,
        route: &crate::core::vocab::Route,
        cost: Cost,
        priority: crate::core::vocab::Priority,
    ) -> Option<u64> {
        let buckets = &self.inner.buckets;
        let Some(cover) = buckets.cover(route) else {
            return Some(0);
        };
        let now = self.inner.clock.now_ms();
        match &self.inner.shared {
            Some(shared) => shared.wait_ms(route, cost, priority, now).await,
            None => buckets.wait_ms(&cover, cost, priority, now),
        }
    }

    /// The chain ran out and some routes refused admission: waits in the local queue
    /// for the earliest of them, when the refill alone admits it within the card's
    /// `max_queue_ms` and before `max_elapsed_ms`, then points the walk back at them.
    /// `false` when the request must not wait (it is then shed, or degraded).
    /// `attempts`: the upstream calls this request already made.
    pub(super) async fn queue_for_admission(&self, walk: &mut Walk<'_>, attempts: u32) -> bool {
        let Some(earliest) = walk.refused.iter().filter_map(|(_, w, _)| *w).min() else {
            return false;
        };
        let policy = walk.opts.policy;
        let clock = &self.inner.clock;
        let now = clock.now_ms();
        let since = now - walk.queued_ms as i64;
        let queue_deadline = since.saturating_add(policy.max_queue_ms as i64);
        let at = now.saturating_add(earliest as i64);
        // Never past the card's max_elapsed_ms (real socket time included), and only
        // when the budget still holds the call the wait is for: the same strict rule as
        // every other attempt's, else a request would wait out its whole budget and then
        // fail for `budget` without a call, instead of being shed at once.
        let call_fits = self.spent(walk, attempts).allows(policy, earliest, 0.0);
        if !walk.opts.priority.may_wait() || at > queue_deadline || !call_fits {
            return false;
        }
        let groups: Vec<usize> = walk.refused.iter().map(|(_, _, g)| *g).collect();
        match &walk.ticket {
            Some(t) => self.inner.queue.wait_on(t, groups),
            None => {
                match self
                    .inner
                    .queue
                    .enter(walk.opts.priority, groups, policy.max_queue_len)
                {
                    Some(t) => walk.ticket = Some(t),
                    // The queue is full: shed at once.
                    None => return false,
                }
            }
        }
        clock.sleep_until(at).await;
        walk.queued_ms = (clock.now_ms() - since).max(0) as u64;
        // Try again from the first route that refused; the others it passes are
        // skipped again for the reasons they had (recorded once).
        walk.pos = walk.refused.iter().map(|(p, _, _)| *p).min().unwrap_or(0);
        walk.refused.clear();
        true
    }
}
