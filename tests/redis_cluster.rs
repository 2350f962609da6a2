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
