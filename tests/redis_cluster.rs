//! The fleet's store on a real 3-master Redis Cluster of the test's own (free loopback
//! ports, `redis-cli --cluster create`), through `state: redis+cluster://…`: the fleet
//! checks of tests/fleet_flow pass with providers on all three masters, and an
//! unreachable cluster answers a clear error within the store's deadline.

mod fleet_flow;

use poolctl::core::clock::Stopwatch;
use poolctl::harness::redis_server::RedisCluster;
use poolctl::store::{HealthStore, RedisStore};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_millis(1_000);

#[test]
fn the_three_providers_fall_on_three_masters() {
    let slots = fleet_flow::providers().map(|p| fleet_flow::slot(&p));
    // CRC16/XMODEM's check value (Redis's cluster spec: "123456789" hashes to 0x31C3).
    assert_eq!(fleet_flow::slot("123456789"), 0x31C3);
    assert!(slots[0] <= 5460 && (5461..=10922).contains(&slots[1]) && slots[2] >= 10923);
}

#[tokio::test(flavor = "multi_thread")]
async fn processes_on_a_cluster_share_retirements_status_restore_and_capacity() {
    let cluster = RedisCluster::must_start(None);
    fleet_flow::processes_share_health_and_counters(&format!("state: \"{}\"", cluster.url()), None)
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn handles_on_a_cluster_share_breakers_and_buckets() {
    let cluster = RedisCluster::must_start(None);
    let url = cluster.url();
    fleet_flow::handles_share_breakers(|| RedisStore::open(&url, DEADLINE).unwrap()).await;
    fleet_flow::handles_share_buckets(|| RedisStore::open(&url, DEADLINE).unwrap()).await;
    // And `list` scans every master: one retired route per provider, all three found.
    let s = RedisStore::open(&url, DEADLINE).unwrap();
    for p in fleet_flow::providers() {
        let r = poolctl::core::vocab::Route::parse(&format!("{p}/x")).unwrap();
        s.apply(
            &r,
            poolctl::policy::health::Transition::Retire { reason: "t".into() },
        )
        .await
        .unwrap();
    }
    let listed = s.list().await.unwrap();
    for p in fleet_flow::providers() {
        assert!(
            listed.iter().any(|(r, _)| r.as_str() == format!("{p}/x")),
            "{p}: {listed:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_cluster_answers_a_clear_error_within_the_deadline() {
    let cluster = RedisCluster::must_start(None);
    let url = cluster.url();
    drop(cluster);
    let s = RedisStore::open(&url, Duration::from_millis(300)).unwrap();
    let watch = Stopwatch::start();
    let err = s.list().await.unwrap_err().to_string();
    assert!(watch.elapsed_ms() < 1_000, "took {} ms", watch.elapsed_ms());
    assert!(
        err.contains("redis+cluster://127.0.0.1:"),
        "names the store: {err}"
    );
    let watch = Stopwatch::start();
    let r = poolctl::core::vocab::Route::parse("a/x").unwrap();
    assert!(s.get(&r).await.is_err());
    assert!(watch.elapsed_ms() < 1_000, "took {} ms", watch.elapsed_ms());
}

#[path = "support/gateway.rs"]
mod gateway;

/// `poolctl serve` on a cluster: its routes on three masters, every decision made on the
/// shared store (none degraded), its admission spent there.
#[tokio::test(flavor = "multi_thread")]
async fn serve_on_a_cluster_decides_on_the_shared_store_not_degraded() {
    use poolctl::core::vocab::{CallPath, Route, Wire};
    use poolctl::harness::mock::{MockRoute, MockServer};
    use poolctl::harness::scenario::Reply;
    let cluster = RedisCluster::must_start(None);
    let [a, b, c] = fleet_flow::providers();
    let routes = [format!("{a}/m"), format!("{b}/m"), format!("{c}/m")];
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        routes
            .iter()
            .map(|r| MockRoute {
                route: Route::parse(r).unwrap(),
                wire: Wire::OpenAi,
                path: CallPath::Chat,
                replies: vec![Reply::Ok {
                    text: "fine".into(),
                    headers: vec![],
                    usage: None,
                }],
                outage: None,
                record: false,
            })
            .collect(),
    )
    .await
    .unwrap();
    let mut yaml = String::from("providers:\n");
    for p in [&a, &b, &c] {
        yaml.push_str(&format!(
            "  {p}:\n    wire: openai\n    base_url: {}\n    api_key_env: K_CLUSTER\n",
            mock.base_url(p, Wire::OpenAi)
        ));
    }
    // One tier per route, so each request lands on a provider of its own master.
    yaml.push_str("tiers:\n");
    for (i, r) in routes.iter().enumerate() {
        yaml.push_str(&format!("  t{i}: [{r}]\n"));
    }
    yaml.push_str("limits:\n");
    for r in &routes {
        yaml.push_str(&format!("  {r}: {{ rpm: 1000 }}\n"));
    }
    yaml.push_str(&format!(
        "state: \"{}\"\nstate_timeout_ms: 2000\n",
        cluster.url()
    ));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pool.yaml");
    std::fs::write(&config, yaml).unwrap();
    let gw = gateway::start(&config, &["--workers", "1"], &[("K_CLUSTER", "sk-cluster")]).await;
    let client = reqwest::Client::builder()
        .timeout(gateway::DEADLINE)
        .build()
        .unwrap();
    for i in 0..3 {
        for _ in 0..3 {
            let r = client
                .post(gw.url("/v1/chat/completions"))
                .json(&serde_json::json!({"model": format!("t{i}"), "messages": [{"role": "user", "content": "hi"}]}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        }
    }
    assert_eq!(
        gw.metric("poolctl_store_degraded_total{decision=\"health\"}")
            .await,
        0.0
    );
    assert_eq!(
        gw.metric("poolctl_store_degraded_total{decision=\"admission\"}")
            .await,
        0.0
    );
    let (code, stderr) = gw.stop().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("Moved"), "{stderr}");
    // Each provider's usage counter, on its own master, counted its three requests.
    let s = RedisStore::open(&cluster.url(), DEADLINE).unwrap();
    let cfg = poolctl::config::pool::PoolConfig::load(&config)
        .unwrap()
        .admission();
    let buckets = poolctl::store::redis_buckets::RedisBuckets::new(s, &cfg);
    let minute = poolctl::core::clock::wall_now_ms().div_euclid(60_000);
    for p in [&a, &b, &c] {
        let used: f64 = buckets
            .usage(p, minute - 2, minute)
            .await
            .unwrap()
            .iter()
            .filter(|(_, f, _)| f.ends_with("|rpm"))
            .map(|(_, _, x)| x)
            .sum();
        assert_eq!(used, 3.0, "{p}");
    }
}
