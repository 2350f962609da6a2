//! Probing: one minimal request to every route, through the same wires and classifier
//! the router uses, to learn each route's real status before a deploy — a chain is
//! worth exactly as much as its last live route (seed 002). Probes run concurrently
//! under a global cap and a per-provider cap, so a probe never trips the rate limits it
//! is measuring.

use crate::classify::classify;
use crate::clock::{Stopwatch, UnixMs};
use crate::failure::Headers;
use crate::request::{ChatRequest, EmbedRequest, RerankRequest};
use crate::vocab::{CallPath, Class, Route};
use crate::wire::{self, Endpoint};
use serde::Serialize;
use std::collections::HashMap;
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
}

/// Rate-limit room a provider reported in its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Headroom {
    pub requests_remaining: Option<u64>,
    pub requests_limit: Option<u64>,
    pub tokens_remaining: Option<u64>,
    pub tokens_limit: Option<u64>,
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
    };
    let any = [
        room.requests_remaining,
        room.requests_limit,
        room.tokens_remaining,
        room.tokens_limit,
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
    pub class: Class,
    pub latency_ms: u64,
    pub retry_after_ms: Option<u64>,
    pub request_id: Option<String>,
    pub headroom: Option<Headroom>,
    pub detail: Option<String>,
}

impl ProbeResult {
    pub fn is_live(&self) -> bool {
        self.class == Class::Ok
    }
}

/// Sends one minimal request of `target`'s path and classifies the answer.
pub async fn probe_one(
    client: &reqwest::Client,
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
            },
        )
        .await
        .map(|ok| (ok.headers, ok.request_id)),
        CallPath::Rerank => {
            let req = RerankRequest {
                query: "ping".into(),
                documents: vec!["a".into(), "b".into()],
                top_n: 2,
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
            class: Class::Ok,
            latency_ms,
            retry_after_ms: None,
            request_id,
            headroom: headroom(&headers),
            detail: None,
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
                class: verdict.class,
                latency_ms,
                retry_after_ms: verdict.hint.map(|h| h.ms),
                request_id: f.headers.request_id().map(str::to_string),
                headroom: headroom(&f.headers),
                detail: Some(detail.chars().take(160).collect()).filter(|d: &String| !d.is_empty()),
            }
        }
    }
}

/// Probes every target, at most `concurrency` at once and `per_provider` at once per
/// provider. Results come back in target order; `on_done` sees each as it finishes.
pub async fn probe_all(
    client: &reqwest::Client,
    targets: &[Target],
    concurrency: usize,
    per_provider: usize,
    timeout_ms: Option<u64>,
    now: UnixMs,
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
            let r = probe_one(client, t, timeout_ms, now).await;
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
}
