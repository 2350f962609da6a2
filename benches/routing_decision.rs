//! Routing decisions without the network: one request down a 10-route tier under a
//! policy card, through the production selection, classification, decision, health and
//! breaker code (`Router::dry_run` feeds canned upstream results instead of HTTP).
//! Target: median <= 5 µs per request. The group cases make the tier's first four
//! routes one group step (weighted, then least_busy): each request draws its members'
//! order from the router's seeded RNG.
//!
//! `cargo bench --bench routing_decision`

// Canned results mirror what a wire returns: `Result<_, UpstreamFailure>`, large by nature.
#![allow(clippy::result_large_err)]

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use poolctl::admission::bucket::Limits;
use poolctl::admission::buckets::{AdmissionConfig, Buckets};
use poolctl::classify::failure::{Headers, UpstreamFailure};
use poolctl::config::route::RoutePolicy;
use poolctl::config::route::{Group, GroupStrategy, RouteSpec, Tier};
use poolctl::core::clock::ManualClock;
use poolctl::core::secret::Secret;
use poolctl::core::vocab::{CallPath, Outcome, Route, Wire};
use poolctl::policy::breaker::BreakerConfig;
use poolctl::policy::capability::ModelFacts;
use poolctl::policy::card::Policy;
use poolctl::router::{CallOptions, Router};
use poolctl::store::MemoryStore;
use poolctl::wire::Endpoint;
use std::sync::Arc;

fn tier() -> Tier {
    let routes = (0..10)
        .map(|i| {
            let route = Route::parse(&format!("p{i}/model-{i}")).unwrap();
            let endpoint = Endpoint {
                provider: route.provider().to_string(),
                wire: Wire::OpenAi,
                dialect: poolctl::classify::dialect::Dialect::Dashscope,
                base_url: "http://127.0.0.1:9/v1".into(),
                api_key: Secret::new("sk-bench"),
                timeout_ms: 30_000,
                first_token_timeout_ms: 15_000,
                stream_idle_ms: 20_000,
                stream_max_ms: poolctl::core::limits::DEFAULT_STREAM_MAX_MS,
                max_stream_bytes: poolctl::core::limits::DEFAULT_MAX_STREAM_BYTES,
                max_event_bytes: poolctl::core::limits::DEFAULT_MAX_EVENT_BYTES,
                drop_params: false,
            };
            let facts = ModelFacts {
                context_window: Some(128_000),
                input_usd_per_mtok: Some(0.5),
                output_usd_per_mtok: Some(1.5),
                ..Default::default()
            };
            RouteSpec {
                route,
                endpoint: Arc::new(endpoint),
                facts,
                policy: RoutePolicy {
                    breaker: Some(BreakerConfig::default()),
                    ..Default::default()
                },
            }
        })
        .collect();
    Tier {
        groups: Vec::new(),
        name: "bench".into(),
        path: CallPath::Chat,
        routes,
    }
}

/// The seed 002 walk: a mis-worded 429, quota 403s, "Model not exist." 400s, then an answer.
fn canned() -> Vec<Result<(), UpstreamFailure>> {
    let fail = |status: u16, headers: &[(&str, &str)], body: &str| {
        Err(UpstreamFailure::from_response(
            status,
            Headers::from_pairs(headers.iter().map(|(k, v)| (k.to_string(), v.to_string()))),
            body.as_bytes(),
        ))
    };
    let mut out = vec![fail(
        429,
        &[("retry-after", "20")],
        r#"{"error":{"message":"请登录platform进行实名认证以获取更高rpm","type":"requests"}}"#,
    )];
    for i in 0..8 {
        out.push(if i % 3 == 2 {
            fail(400, &[], r#"{"code":"InvalidParameter","message":"Model not exist.","request_id":"x"}"#)
        } else {
            fail(403, &[], r#"{"error":{"code":"AllocationQuota.FreeTierOnly","message":"The free tier of the model has been exhausted."}}"#)
        });
    }
    out.push(Ok(()));
    out
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = poolctl::wire::http_client();
    let tier = tier();
    let results = canned();
    let policy = Policy {
        max_total_attempts: Some(12),
        max_elapsed_ms: 9_000,
        max_extra_cost_usd: Some(1.0),
        fallback_routes: Some(tier.routes.iter().map(|r| r.route.clone()).collect()),
        ..Policy::default()
    };
    // Admission on every route: a route entry and a provider entry each, contracts far
    // above what the bench spends, so every acquire is admitted and settled.
    let limited = {
        let mut limits = std::collections::BTreeMap::new();
        for spec in &tier.routes {
            let big = Limits {
                rpm: Some(1_000_000_000),
                tpm: Some(1_000_000_000_000),
                ..Default::default()
            };
            limits.insert(spec.route.as_str().to_string(), big);
            limits.insert(spec.route.provider().to_string(), big);
        }
        // One set for the whole run, as in a long-lived gateway: the per-route lookup of
        // covering buckets is cached after a route's first request.
        Arc::new(Buckets::new(
            &AdmissionConfig {
                limits,
                ..Default::default()
            },
            0,
        ))
    };
    // The first four routes as one group step of four equal members.
    let grouped = |strategy| Tier {
        groups: vec![Group {
            start: 0,
            weights: vec![4.0, 3.0, 2.0, 1.0],
            strategy,
        }],
        ..tier.clone()
    };
    let weighted = grouped(GroupStrategy::Weighted);
    let least_busy = grouped(GroupStrategy::LeastBusy);
    let mut group = c.benchmark_group("routing decisions, 10-route tier, policy card");
    type Case<'t> = (
        &'static str,
        Vec<Result<(), UpstreamFailure>>,
        bool,
        &'t Tier,
    );
    let cases: [Case; 7] = [
        ("primary answers", vec![Ok(())], false, &tier),
        (
            "walk to the 10th route (9 failures)",
            results.clone(),
            false,
            &tier,
        ),
        (
            "primary answers, limits on every route",
            vec![Ok(())],
            true,
            &tier,
        ),
        (
            "walk to the 10th route, limits on every route",
            results.clone(),
            true,
            &tier,
        ),
        (
            "group of 4 (weighted): a member answers",
            vec![Ok(())],
            false,
            &weighted,
        ),
        (
            "group of 4 (least_busy): a member answers",
            vec![Ok(())],
            false,
            &least_busy,
        ),
        (
            "group of 4 (weighted): walk to the 10th route",
            results,
            false,
            &weighted,
        ),
    ];
    for (name, canned, with_limits, tier) in cases {
        let limited = &limited;
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_batched(
                || {
                    let router = Router::with_seed(
                        client.clone(),
                        Arc::new(ManualClock::new(0)),
                        Arc::new(MemoryStore::new()),
                        7,
                    );
                    let router = if with_limits {
                        router.with_buckets(limited.clone())
                    } else {
                        router
                    };
                    (router, canned.clone())
                },
                |(router, canned)| {
                    let policy = &policy;
                    async move {
                        let report = router.dry_run(tier, CallOptions::new(policy), canned).await;
                        assert_eq!(report.outcome, Outcome::Success);
                        report
                    }
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
