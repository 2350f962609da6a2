//! The fleet's store over TLS (`state: rediss://…`), on a real `redis-server` of the
//! test's own that speaks only TLS, its certificate signed by a throwaway CA the test
//! makes (`openssl`): trusted through `state_tls.ca_file`, with a client certificate
//! for a node that asks for one, through the insecure test form, and a TLS cluster. A
//! wrong CA fails clearly, and an unreachable TLS node within the deadline.

mod fleet_flow;

use poolctl::core::clock::Stopwatch;
use poolctl::harness::redis_server::{RedisCluster, RedisServer, TestCa};
use poolctl::store::redis::StateTls;
use poolctl::store::{HealthStore, RedisStore};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_millis(1_000);

fn ca_only(ca: &TestCa) -> StateTls {
    StateTls {
        ca_file: Some(ca.ca_file()),
        ..StateTls::default()
    }
}

fn with_client_cert(ca: &TestCa) -> StateTls {
    StateTls {
        ca_file: Some(ca.ca_file()),
        cert_file: Some(ca.client_cert()),
        key_file: Some(ca.client_key()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn processes_over_tls_share_retirements_status_restore_and_capacity() {
    let ca = TestCa::generate().unwrap();
    let server = RedisServer::start_tls(&ca, false).unwrap();
    let state = format!(
        "state: {}\nstate_tls: {{ ca_file: {} }}",
        server.url(),
        ca.ca_file().display()
    );
    fleet_flow::processes_share_health_and_counters(&state, None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn processes_with_a_client_certificate_share_health_and_counters() {
    let ca = TestCa::generate().unwrap();
    let server = RedisServer::start_tls(&ca, true).unwrap();
    let state = format!(
        "state: {}\nstate_tls: {{ ca_file: {}, cert_file: {}, key_file: {} }}",
        server.url(),
        ca.ca_file().display(),
        ca.client_cert().display(),
        ca.client_key().display()
    );
    fleet_flow::processes_share_health_and_counters(&state, None).await;
    // With the certificate a handle connects; without it, the node refuses, in time.
    let s = RedisStore::open_with(&server.url(), Some(&with_client_cert(&ca)), DEADLINE).unwrap();
    s.ping().await.unwrap();
    let s = RedisStore::open_with(&server.url(), Some(&ca_only(&ca)), DEADLINE).unwrap();
    assert!(s.ping().await.is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn handles_over_tls_share_breakers_and_buckets_and_the_insecure_form_connects() {
    let ca = TestCa::generate().unwrap();
    let server = RedisServer::start_tls(&ca, false).unwrap();
    let url = server.url();
    let tls = ca_only(&ca);
    let open = || RedisStore::open_with(&url, Some(&tls), DEADLINE).unwrap();
    fleet_flow::handles_share_breakers(open).await;
    fleet_flow::handles_share_buckets(open).await;
    // The redis crate's documented test form: certificates unchecked.
    let s = RedisStore::open(&server.insecure_url(), DEADLINE).unwrap();
    s.ping().await.unwrap();
    // The system roots do not know the throwaway CA: refused, clearly.
    let s = RedisStore::open(&url, DEADLINE).unwrap();
    let err = s.ping().await.unwrap_err().to_string();
    assert!(
        err.contains("rediss://127.0.0.1:"),
        "names the store: {err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tls_cluster_shares_health_breakers_and_buckets() {
    let ca = TestCa::generate().unwrap();
    let cluster = RedisCluster::must_start(Some(&ca));
    let url = cluster.url();
    assert!(url.starts_with("rediss+cluster://"), "{url}");
    let state = format!(
        "state: \"{url}\"\nstate_tls: {{ ca_file: {} }}",
        ca.ca_file().display()
    );
    fleet_flow::processes_share_health_and_counters(&state, None).await;
    let tls = ca_only(&ca);
    let open = || RedisStore::open_with(&url, Some(&tls), DEADLINE).unwrap();
    fleet_flow::handles_share_breakers(open).await;
    fleet_flow::handles_share_buckets(open).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_tls_node_answers_a_clear_error_within_the_deadline() {
    let ca = TestCa::generate().unwrap();
    let mut server = RedisServer::start_tls(&ca, false).unwrap();
    let url = server.url();
    let s = RedisStore::open_with(&url, Some(&ca_only(&ca)), Duration::from_millis(300)).unwrap();
    // The first call makes the TLS connection; on a loaded machine (CI builds beside
    // it) the handshake can outlast the 300 ms deadline, which is not what this test
    // is about: it is asked again until the server answers once.
    let mut answered = false;
    for _ in 0..20 {
        if s.ping().await.is_ok() {
            answered = true;
            break;
        }
    }
    assert!(answered, "the TLS server never answered a ping");
    server.signal("STOP").unwrap();
    let watch = Stopwatch::start();
    let err = s.list().await.unwrap_err().to_string();
    assert!(
        watch.elapsed_ms() < 1_000,
        "frozen: took {} ms",
        watch.elapsed_ms()
    );
    assert!(err.contains("rediss://127.0.0.1:"), "{err}");
    server.kill();
    let watch = Stopwatch::start();
    assert!(s.list().await.is_err());
    assert!(
        watch.elapsed_ms() < 1_000,
        "gone: took {} ms",
        watch.elapsed_ms()
    );
}

#[test]
fn a_missing_client_key_or_ca_file_is_named() {
    let tls = StateTls {
        ca_file: Some("/nonexistent/ca.pem".into()),
        ..StateTls::default()
    };
    let err = tls.certificates().unwrap_err();
    assert!(
        err.contains("state_tls.ca_file") && err.contains("/nonexistent/ca.pem"),
        "{err}"
    );
}
