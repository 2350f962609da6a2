//! Probing: one minimal request to every route, through the same wires and classifier
//! the router uses, to learn each route's real status before a deploy — a chain is
//! worth exactly as much as its last live route (seed 002). Probes run concurrently
//! under a global cap and a per-provider cap, so a probe never trips the rate limits it
//! is measuring.

use crate::classify::classifier::classify;
use crate::classify::failure::Headers;
use crate::config::route::RoutePolicy;
use crate::core::clock::{Stopwatch, UnixMs};
use crate::core::request::{ChatRequest, EmbedRequest, RerankRequest};
use crate::core::vocab::{Action, CallPath, Class, HealthState, Route};
use crate::policy::health::{transition, Health, Transition};
use crate::store::{HealthStore, StoreError};
use crate::wire::{self, Endpoint};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Default caps (spec/cli.md, issue 4).
pub const DEFAULT_CONCURRENCY: usize = 16;
pub const PER_PROVIDER: usize = 4;
/// The most probes ever in flight at once: past this a machine runs out of sockets
/// long before a provider notices, and a semaphore cannot count that high anyway.
pub const MAX_CONCURRENCY: usize = 4096;

/// One route to probe.
#[derive(Debug, Clone)]
pub struct Target {
    pub route: Route,
    pub path: CallPath,
    pub endpoint: Arc<Endpoint>,
    /// The route's cooldowns, for the transition `probe --apply` writes.
    pub policy: RoutePolicy,
}

/// Rate-limit room a provider reported in its headers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Headroom {
    pub requests_remaining: Option<u64>,
    pub requests_limit: Option<u64>,
    pub tokens_remaining: Option<u64>,
    pub tokens_limit: Option<u64>,
    /// Anthropic meters input and output tokens apart
    /// (`anthropic-ratelimit-{input,output}-tokens-*`): the `itpm` / `otpm` contracts.
    /// Kept out of `--json`, whose `headroom` object cli.md fixes; they reach the
    /// recorded provider limits and the buckets' true-up.
    #[serde(skip)]
    pub input_tokens_remaining: Option<u64>,
    #[serde(skip)]
    pub input_tokens_limit: Option<u64>,
    #[serde(skip)]
    pub output_tokens_remaining: Option<u64>,
    #[serde(skip)]
    pub output_tokens_limit: Option<u64>,
}

impl Headroom {
    /// The provider's limit on each dimension it reported one for.
    pub fn limits(&self) -> Vec<(crate::admission::bucket::Dimension, u64)> {
        use crate::admission::bucket::Dimension;
        [
            (Dimension::Rpm, self.requests_limit),
            (Dimension::Tpm, self.tokens_limit),
            (Dimension::Itpm, self.input_tokens_limit),
            (Dimension::Otpm, self.output_tokens_limit),
        ]
        .into_iter()
        .filter_map(|(d, n)| Some((d, n?)))
        .collect()
    }

    /// What remains on each dimension it reported a count for.
    pub fn remaining(&self) -> Vec<(crate::admission::bucket::Dimension, u64)> {
        use crate::admission::bucket::Dimension;
        [
            (Dimension::Rpm, self.requests_remaining),
            (Dimension::Tpm, self.tokens_remaining),
            (Dimension::Itpm, self.input_tokens_remaining),
            (Dimension::Otpm, self.output_tokens_remaining),
        ]
        .into_iter()
        .filter_map(|(d, n)| Some((d, n?)))
        .collect()
    }
}

/// Reads `x-ratelimit-*` (OpenAI style) or `anthropic-ratelimit-*` headers.
pub fn headroom(h: &Headers) -> Option<Headroom> {
    let num = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| h.get(n))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let room = Headroom {
        requests_remaining: num(&[
            "x-ratelimit-remaining-requests",
            "anthropic-ratelimit-requests-remaining",
        ]),
        requests_limit: num(&[
            "x-ratelimit-limit-requests",
            "anthropic-ratelimit-requests-limit",
        ]),
        tokens_remaining: num(&[
            "x-ratelimit-remaining-tokens",
            "anthropic-ratelimit-tokens-remaining",
        ]),
        tokens_limit: num(&[
            "x-ratelimit-limit-tokens",
            "anthropic-ratelimit-tokens-limit",
        ]),
        input_tokens_remaining: num(&["anthropic-ratelimit-input-tokens-remaining"]),
        input_tokens_limit: num(&["anthropic-ratelimit-input-tokens-limit"]),
        output_tokens_remaining: num(&["anthropic-ratelimit-output-tokens-remaining"]),
        output_tokens_limit: num(&["anthropic-ratelimit-output-tokens-limit"]),
    };
    let any = [
        room.requests_remaining,
        room.requests_limit,
        room.tokens_remaining,
        room.tokens_limit,
        room.input_tokens_remaining,
        room.input_tokens_limit,
        room.output_tokens_remaining,
        room.output_tokens_limit,
    ]
    .iter()
    .any(Option::is_some);
    any.then_some(room)
}

/// What one probe found (spec/cli.md `probe --json`).
#[derive(Debug, Clone, Serialize)]
pub struct ProbeResult {
    pub route: Route,
    pub status: Option<u16>,
    /// `null` when the probe was not sent (`skipped`).
    pub class: Option<Class>,
    /// Why the probe was not sent: `admission` when the route's buckets could not
    /// admit it (a probe spends the provider's quota too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<crate::core::trace::SkipWhy>,
    pub latency_ms: u64,
    pub retry_after_ms: Option<u64>,
    pub request_id: Option<String>,
    pub headroom: Option<Headroom>,
    pub detail: Option<String>,
    /// The health the router's own transition gives the route for what came back
    /// (`None`: unchanged, the request's fault). Not printed: `probe --apply` writes it.
    #[serde(skip)]
    pub transition: Option<Health>,
}

impl ProbeResult {
    pub fn is_live(&self) -> bool {
        self.class == Some(Class::Ok)
    }

    /// The result of a probe its route's admission buckets refused: not sent, not live.
    pub fn refused(target: &Target) -> ProbeResult {
        ProbeResult {
            route: target.route.clone(),
            status: None,
            class: None,
            skipped: Some(crate::core::trace::SkipWhy::Admission),
            latency_ms: 0,
            retry_after_ms: None,
            request_id: None,
            headroom: None,
            detail: Some(
                "not sent: the route's admission buckets cannot hold it (--force sends it)".into(),
            ),
            transition: None,
        }
    }

    /// What `probe --apply` writes: the router's transition for what the probe saw —
    /// so `quota_exhausted` with a stated reset instant cools until it rather than
    /// retiring — and, for a retired route the probe proved live, an explicit restore
    /// (a success alone never un-retires; spec/decisions.md).
    pub fn apply_transition(&self, current: &Health, now: UnixMs) -> Option<Transition> {
        if self.is_live() && current.state_at(now) == HealthState::Retired {
            return Some(Transition::Restore);
        }
        self.transition.clone().map(Transition::toward)
    }
}

/// One tier's probe (spec/cli.md).
#[derive(Debug, Clone, Serialize)]
pub struct TierProbe {
    pub tier: String,
    pub live: usize,
    pub first_live: Option<Route>,
    pub routes: Vec<ProbeResult>,
}

impl TierProbe {
    /// A tier's results, in chain order.
    pub fn of(tier: &str, routes: Vec<ProbeResult>) -> Self {
        TierProbe {
            tier: tier.to_string(),
            live: routes.iter().filter(|r| r.is_live()).count(),
            first_live: routes.iter().find(|r| r.is_live()).map(|r| r.route.clone()),
            routes,
        }
    }

    /// The tier's last route is not live: the chain has no real fallback at its end.
    pub fn dead_tail(&self) -> bool {
        self.routes.last().is_some_and(|r| !r.is_live())
    }
}

/// Writes what the probe proved, through the same atomic transition as the router.
/// Returns one line per route it changed.
pub async fn apply(
    store: &dyn HealthStore,
    results: &[ProbeResult],
    now: UnixMs,
) -> Result<Vec<String>, StoreError> {
    let mut seen: BTreeMap<&Route, ()> = BTreeMap::new();
    let mut lines = Vec::new();
    for r in results {
        if seen.insert(&r.route, ()).is_some() {
            continue;
        }
        let current = store.get(&r.route).await?;
        let Some(t) = r.apply_transition(&current, now) else {
            continue;
        };
        let (old, new) = store.apply(&r.route, t).await?;
        if old == new {
            continue;
        }
        lines.push(match &new {
            Health::Retired { reason } => format!("{} retired ({reason})", r.route),
            Health::Cooling { until, reason } => format!(
                "{} cooling for {} s ({reason})",
                r.route,
                ((until - now).max(0) as u64).div_ceil(1000)
            ),
            Health::Ready if old.state_at(now) == HealthState::Retired => {
                format!("{} restored (answered)", r.route)
            }
            Health::Ready => format!("{} ready (answered)", r.route),
        });
    }
    Ok(lines)
}

/// Sends one minimal request of `target`'s path and classifies the answer.
pub async fn probe_one(
    client: &crate::wire::http::Client,
    target: &Target,
    timeout_ms: Option<u64>,
    now: UnixMs,
) -> ProbeResult {
    let mut endpoint = (*target.endpoint).clone();
    if let Some(t) = timeout_ms {
        endpoint.timeout_ms = t;
    }
    let model = target.route.model();
    let sw = Stopwatch::start();
    let outcome = match target.path {
        CallPath::Chat | CallPath::Stream => {
            wire::chat(client, &endpoint, model, &ChatRequest::user("ping", 1))
                .await
                .map(|ok| (ok.headers, ok.request_id))
        }
        CallPath::Embed => wire::embed(
            client,
            &endpoint,
            model,
            &EmbedRequest {
                inputs: vec!["ping".into()],
                dimensions: None,
                original: None,
                ..Default::default()
            },
        )
        .await
        .map(|ok| (ok.headers, ok.request_id)),
        CallPath::Rerank => {
            let req = RerankRequest {
                query: "ping".into(),
                documents: vec!["a".into(), "b".into()],
                top_n: 2,
                ..Default::default()
            };
            wire::rerank(client, &endpoint, model, &req)
                .await
                .map(|ok| (ok.headers, ok.request_id))
        }
    };
    let latency_ms = sw.elapsed_ms();
    match outcome {
        Ok((headers, request_id)) => ProbeResult {
            route: target.route.clone(),
            status: Some(200),
            class: Some(Class::Ok),
            skipped: None,
            latency_ms,
            retry_after_ms: None,
            request_id,
            headroom: headroom(&headers),
            detail: None,
            transition: Some(Health::Ready),
        },
        Err(f) => {
            let verdict = classify(endpoint.dialect, &f, now);
            let detail = f
                .error
                .as_ref()
                .and_then(|e| e.message.clone())
                .or(f.malformed.clone())
                .unwrap_or_else(|| f.excerpt.clone());
            ProbeResult {
                route: target.route.clone(),
                status: f.status,
                class: Some(verdict.class),
                skipped: None,
                latency_ms,
                retry_after_ms: verdict.hint.map(|h| h.ms),
                request_id: f.headers.request_id().map(str::to_string),
                headroom: headroom(&f.headers),
                detail: Some(
                    crate::core::secret::mask_key_shaped(&detail)
                        .chars()
                        .take(160)
                        .collect(),
                )
                .filter(|d: &String| !d.is_empty()),
                // As if the router left the route after this attempt (no retry).
                transition: transition(
                    verdict.class,
                    Action::Fallback,
                    verdict.hint,
                    None,
                    target.policy.cooldowns,
                    now,
                ),
            }
        }
    }
}

/// How probes spend admission: a probe uses the provider's quota like any call, so it
/// takes from the same buckets as `walk` and `serve`, at `background` priority (it must
/// never eat the interactive floor). `force` sends a probe the buckets refuse anyway.
pub struct ProbeAdmission<'a> {
    pub buckets: ProbeBuckets<'a>,
    pub force: bool,
}

/// The buckets probes spend: this process's own, or the fleet's (`state: redis://`).
pub enum ProbeBuckets<'a> {
    Local(&'a crate::admission::buckets::Buckets),
    Shared(&'a crate::store::shared_buckets::SharedBuckets),
}

/// What an admitted probe holds until it settles.
enum Held {
    Local(crate::admission::buckets::Reservation),
    Shared(crate::store::shared_buckets::Hold),
}

impl ProbeAdmission<'_> {
    /// `None` when no bucket covers the route.
    async fn acquire(
        &self,
        route: &crate::core::vocab::Route,
        now: UnixMs,
    ) -> Result<Option<Held>, crate::admission::buckets::Refused> {
        let priority = crate::core::vocab::Priority::Background;
        match self.buckets {
            ProbeBuckets::Local(b) => match b.cover(route) {
                Some(cover) => b
                    .acquire(&cover, PROBE_COST, priority, now)
                    .map(|r| Some(Held::Local(r))),
                None => Ok(None),
            },
            ProbeBuckets::Shared(s) => s
                .acquire(route, PROBE_COST, priority, now)
                .await
                .map(|h| Some(Held::Shared(h))),
        }
    }

    async fn settle(
        &self,
        held: Held,
        spent: crate::admission::bucket::Spent,
        remaining: &[(crate::admission::bucket::Dimension, u64)],
        now: UnixMs,
    ) {
        match (&self.buckets, held) {
            (ProbeBuckets::Local(b), Held::Local(r)) => b.settle(r, spent, remaining, now),
            (ProbeBuckets::Shared(s), Held::Shared(h)) => s.settle(h, spent, remaining, now).await,
            // A hold comes from the buckets it is settled on.
            _ => {}
        }
    }
}

/// What a probe costs: one request, a few input tokens, one output token.
const PROBE_COST: crate::admission::bucket::Cost = crate::admission::bucket::Cost {
    input_tokens: 8,
    output_tokens: 1,
};

/// Probes every target, at most `concurrency` at once and `per_provider` at once per
/// provider. Results come back in target order; `on_done` sees each as it finishes.
#[allow(clippy::too_many_arguments)]
pub async fn probe_all(
    client: &crate::wire::http::Client,
    targets: &[Target],
    concurrency: usize,
    per_provider: usize,
    timeout_ms: Option<u64>,
    now: UnixMs,
    admission: Option<&ProbeAdmission<'_>>,
    on_done: &(dyn Fn(&ProbeResult) + Send + Sync),
) -> Vec<ProbeResult> {
    let global = Arc::new(Semaphore::new(concurrency.clamp(1, MAX_CONCURRENCY)));
    let mut providers: HashMap<&str, Arc<Semaphore>> = HashMap::new();
    let futures = targets.iter().map(|t| {
        let provider = providers
            .entry(t.route.provider())
            .or_insert_with(|| Arc::new(Semaphore::new(per_provider.clamp(1, MAX_CONCURRENCY))))
            .clone();
        let global = global.clone();
        async move {
            // The provider's permit first: a provider at its cap must not hold global slots.
            let _p = provider.acquire_owned().await.expect("never closed");
            let _g = global.acquire_owned().await.expect("never closed");
            let held = match admission {
                Some(a) => match a.acquire(&t.route, now).await {
                    Ok(held) => held,
                    Err(_) if a.force => None,
                    Err(_) => {
                        let r = ProbeResult::refused(t);
                        on_done(&r);
                        return r;
                    }
                },
                None => None,
            };
            let r = probe_one(client, t, timeout_ms, now).await;
            if let (Some(a), Some(reservation)) = (admission, held) {
                let remaining = r.headroom.map(|h| h.remaining()).unwrap_or_default();
                let spent = if r.status.is_some() {
                    crate::admission::bucket::Spent::Unreported
                } else {
                    crate::admission::bucket::Spent::Nothing
                };
                a.settle(reservation, spent, &remaining, now).await;
            }
            on_done(&r);
            r
        }
    });
    futures_util::future::join_all(futures).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headroom_from_either_header_family() {
        let h = Headers::from_pairs([
            (
                "x-ratelimit-remaining-requests".to_string(),
                "59".to_string(),
            ),
            ("x-ratelimit-limit-requests".to_string(), "60".to_string()),
        ]);
        let room = headroom(&h).unwrap();
        assert_eq!(
            (
                room.requests_remaining,
                room.requests_limit,
                room.tokens_limit
            ),
            (Some(59), Some(60), None)
        );
        let a = Headers::from_pairs([(
            "anthropic-ratelimit-tokens-remaining".to_string(),
            "99000".to_string(),
        )]);
        assert_eq!(headroom(&a).unwrap().tokens_remaining, Some(99000));
        assert_eq!(headroom(&Headers::default()), None);
    }

    #[test]
    fn anthropics_separate_input_and_output_limits_are_read_as_itpm_and_otpm() {
        use crate::admission::bucket::Dimension;
        let h = Headers::from_pairs(
            [
                ("anthropic-ratelimit-requests-limit", "50"),
                ("anthropic-ratelimit-requests-remaining", "49"),
                ("anthropic-ratelimit-input-tokens-limit", "30000"),
                ("anthropic-ratelimit-input-tokens-remaining", "29990"),
                ("anthropic-ratelimit-output-tokens-limit", "8000"),
                ("anthropic-ratelimit-output-tokens-remaining", "7999"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let room = headroom(&h).unwrap();
        assert_eq!(
            room.limits(),
            vec![
                (Dimension::Rpm, 50),
                (Dimension::Itpm, 30000),
                (Dimension::Otpm, 8000)
            ]
        );
        assert_eq!(
            room.remaining(),
            vec![
                (Dimension::Rpm, 49),
                (Dimension::Itpm, 29990),
                (Dimension::Otpm, 7999)
            ]
        );
        // Only input/output headers still make a headroom.
        let only = Headers::from_pairs([(
            "anthropic-ratelimit-output-tokens-limit".to_string(),
            "8000".to_string(),
        )]);
        assert_eq!(headroom(&only).unwrap().output_tokens_limit, Some(8000));
    }
}
