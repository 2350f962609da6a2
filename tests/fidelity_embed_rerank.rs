//! Embeddings and rerank through `poolctl serve` (spec/fidelity.md §1, §3 and §6): on
//! the client's own API the body reaches the upstream as the client sent it, with only
//! `model` replaced, and the answer reaches the client as the upstream sent it; a route
//! of another wire is skipped for what it cannot carry, and called without what is
//! advisory, which is named. The built binary runs in front of recording wiremock
//! upstreams; the client sends exact bytes. No test sleeps.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/recording.rs"]
mod recording;
use gateway::Gateway;
use gateway::{header, send};
use recording::{received, upstream};

const KEY_VAR: &str = "POOLCTL_EMBED_RERANK_TEST_KEY";
/// The gateway's upstream key: it must reach the upstream and nothing else.
const UPSTREAM_KEY: &str = "sk-upstream-EMBRR-4f2a";

/// A pool config: `providers` (name, wire, base URL) and `tiers` (name, path, routes).
fn config(
    dir: &Path,
    providers: &[(&str, &str, String)],
    tiers: &[(&str, &str, &[&str])],
) -> PathBuf {
    let mut yaml = String::from("providers:\n");
    for (name, wire, url) in providers {
        yaml.push_str(&format!(
            "  {name}:\n    wire: {wire}\n    base_url: {url}\n    api_key_env: {KEY_VAR}\n"
        ));
    }
    yaml.push_str("tiers:\n");
    for (name, call_path, routes) in tiers {
        yaml.push_str(&format!("  {name}:\n"));
        for r in *routes {
            yaml.push_str(&format!("    - {{ route: {r}, path: {call_path} }}\n"));
        }
    }
    let p = dir.join("pool.yaml");
    std::fs::write(&p, yaml).unwrap();
    p
}

async fn start(config: &Path) -> Gateway {
    gateway::start(config, &[], &[(KEY_VAR, UPSTREAM_KEY)]).await
}

/// The request's log line of `path` in the gateway's stderr.
fn log_line<'a>(stderr: &'a str, at: &str) -> &'a str {
    stderr
        .lines()
        .rfind(|l| l.contains(&format!("path=\"{at}\"")))
        .unwrap_or_else(|| panic!("no log line for {at}:\n{stderr}"))
}

const RERANK_REQUEST: &str = r#"{"model":"rr", "query":"q","documents":["a","b",{"text":"c"}],"top_n":2,"return_documents":true,"max_chunks_per_doc":4,"x_future":{"keep":[1,2.50]}}"#;
const RERANK_ANSWER: &str = r#"{"id":"rr-1","results":[{"index":2,"relevance_score":0.9,"document":{"text":"c"}},{"index":0,"relevance_score":0.5,"document":{"text":"a"}}],"meta":{"api_version":{"version":"2"},"billed_units":{"search_units":1}},"usage":{"total_tokens":7}}"#;

/// Guards the audit's rerank finding: the body was rebuilt as `{documents, model,
/// query, top_n}` (`return_documents`, `max_chunks_per_doc` and unknown fields lost,
/// unnamed), and the answer was rebuilt without `relevance_score`, `meta` and `usage`,
/// with the gateway's id in place of the upstream's.
#[tokio::test]
async fn same_wire_rerank_forwards_the_client_body_with_only_model_replaced_and_returns_the_answer_unchanged(
) {
    let server = upstream("/v1/rerank", RERANK_ANSWER).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &[("rr", "openai", format!("{}/v1", server.uri()))],
        &[("rr", "rerank", &["rr/rerank-x"])],
    );
    let gw = start(&cfg).await;
    let r = send(&gw, "/v1/rerank", RERANK_REQUEST, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-served-by"), "rr/rerank-x");
    assert_eq!(header(&r, "x-poolctl-outcome"), "success");
    assert_eq!(header(&r, "x-poolctl-dropped-params"), "");
    assert_eq!(r.text().await.unwrap(), RERANK_ANSWER);
    let got = received(&server).await;
    assert_eq!(got.len(), 1);
    let want = RERANK_REQUEST.replacen(r#""model":"rr""#, r#""model":"rerank-x""#, 1);
    assert_eq!(std::str::from_utf8(&got[0].body).unwrap(), want);
    let body: Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(body["return_documents"], true);
    assert_eq!(body["max_chunks_per_doc"], 4);
    assert_eq!(body["documents"][2], json!({"text": "c"}));
    assert_eq!(
        got[0]
            .headers
            .get("authorization")
            .unwrap()
            .to_str()
            .unwrap(),
        format!("Bearer {UPSTREAM_KEY}")
    );
}

/// Reading is not rewriting: a rerank answer passed through unchanged is still
/// validated. One that ranks a document the request did not hold is no answer, and
/// rerank, which never fails retrieval, degrades to the recall order (the gateway's
/// own answer) instead of passing the bad one on.
#[tokio::test]
async fn a_rerank_answer_naming_a_missing_document_is_not_passed_through_and_degrades_to_recall_order(
) {
    const BAD: &str = r#"{"id":"rr-bad","results":[{"index":7,"relevance_score":0.9}]}"#;
    let server = upstream("/v1/rerank", BAD).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &[("rr", "openai", format!("{}/v1", server.uri()))],
        &[("rr", "rerank", &["rr/rerank-x"])],
    );
    let gw = start(&cfg).await;
    let r = send(&gw, "/v1/rerank", RERANK_REQUEST, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-outcome"), "degraded");
    let v: Value = r.json().await.unwrap();
    assert_ne!(v["id"], "rr-bad", "{v}");
    let order: Vec<u64> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["index"].as_u64().unwrap())
        .collect();
    assert_eq!(order, vec![0, 1], "{v}");
    assert!(!received(&server).await.is_empty());
}

/// Guards the audit's token-array finding: `input` as token ids (`[1, 2, 3]`, one
/// input) or token-id arrays (`[[1, 2, 3], [4, 5]]`), which OpenAI accepts and
/// LangChain sends by default, was refused with a 400 "token arrays are not
/// supported". On the client's own wire it travels unchanged.
#[tokio::test]
async fn same_wire_embeddings_forward_token_arrays_unchanged() {
    const ONE: &str = r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,-0.25]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":3,"total_tokens":3}}"#;
    const TWO: &str = r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,-0.25]},{"object":"embedding","index":1,"embedding":[0.125,1.0]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":5,"total_tokens":5}}"#;
    let server = MockServer::start().await;
    for answer in [ONE, TWO] {
        Mock::given(method("POST"))
            .and(path("/v1/embeddings"))
            .respond_with(ResponseTemplate::new(200).set_body_raw(answer, "application/json"))
            .up_to_n_times(1)
            .mount(&server)
            .await;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &[("oai", "openai", format!("{}/v1", server.uri()))],
        &[("emb", "embed", &["oai/text-embedding-3-small"])],
    );
    let gw = start(&cfg).await;
    let requests = [
        (r#"{"model":"emb","input":[1,2,3],"x_future":1}"#, ONE),
        (r#"{"model":"emb","input":[[1,2,3],[4,5]]}"#, TWO),
    ];
    for (i, (body, answer)) in requests.iter().enumerate() {
        let r = send(&gw, "/v1/embeddings", body, &[]).await;
        assert_eq!(r.status(), 200, "{body}");
        assert_eq!(r.text().await.unwrap(), *answer);
        let got = received(&server).await;
        assert_eq!(got.len(), i + 1);
        assert_eq!(
            std::str::from_utf8(&got[i].body).unwrap(),
            body.replacen(r#""model":"emb""#, r#""model":"text-embedding-3-small""#, 1)
        );
    }
}

/// A route whose wire cannot carry token arrays (Gemini `batchEmbedContents` takes
/// text) is skipped as semantic `cannot carry: input token arrays`, never called; the
/// route of the client's wire serves. With no route that can, the client hears why:
/// 400 `unsupported_by_chain`.
#[tokio::test]
async fn token_array_embeddings_skip_a_gemini_route_as_cannot_carry() {
    const OAI: &str = r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5]}],"model":"m","usage":{"prompt_tokens":3,"total_tokens":3}}"#;
    const GEM: &str = r#"{"embeddings":[{"values":[0.5]}]}"#;
    let gem = upstream("/v1beta/models/emb-g:batchEmbedContents", GEM).await;
    let oai = upstream("/v1/embeddings", OAI).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &[
            ("gem", "gemini", gem.uri()),
            ("oai", "openai", format!("{}/v1", oai.uri())),
        ],
        &[
            ("emb", "embed", &["gem/emb-g", "oai/emb-o"]),
            ("gonly", "embed", &["gem/emb-g"]),
        ],
    );
    let gw = start(&cfg).await;
    let r = send(
        &gw,
        "/v1/embeddings",
        r#"{"model":"emb","input":[1,2,3]}"#,
        &[],
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-served-by"), "oai/emb-o");
    assert_eq!(r.text().await.unwrap(), OAI);
    assert!(received(&gem).await.is_empty(), "gemini never called");

    let r = send(
        &gw,
        "/v1/embeddings",
        r#"{"model":"gonly","input":[[1,2],[3]]}"#,
        &[],
    )
    .await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "unsupported_by_chain", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("gem/emb-g: cannot carry: input token arrays"),
        "{e}"
    );
    // Text still goes to Gemini.
    let r = send(
        &gw,
        "/v1/embeddings",
        r#"{"model":"gonly","input":"a"}"#,
        &[],
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(received(&gem).await.len(), 1);
    let (_, stderr) = gw.stop().await;
    assert!(
        stderr.contains(r#"skipped="gem/emb-g:cannot_carry:input token arrays""#),
        "{stderr}"
    );
}

/// Guards the audit's finding on embeddings to Gemini: `user` and an unknown field
/// were left out of the `batchEmbedContents` call (right: it has no place for them)
/// but named nowhere. They are named in `x-poolctl-dropped-params`, the request's log
/// line and `poolctl_dropped_params_total` (an unknown name as `other`).
#[tokio::test]
async fn embeddings_to_gemini_name_user_and_unknown_fields_as_dropped() {
    const GEM: &str = r#"{"embeddings":[{"values":[0.5,-1.0]}]}"#;
    let gem = upstream("/v1beta/models/emb-g:batchEmbedContents", GEM).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &[("gem", "gemini", gem.uri())],
        &[("gemb", "embed", &["gem/emb-g"])],
    );
    let gw = start(&cfg).await;
    let r = send(
        &gw,
        "/v1/embeddings",
        r#"{"model":"gemb","input":"a","user":"u","x_unknown":1,"dimensions":2}"#,
        &[],
    )
    .await;
    assert_eq!(r.status(), 200);
    let mut named: Vec<String> = header(&r, "x-poolctl-dropped-params")
        .split(',')
        .map(str::to_string)
        .collect();
    named.sort();
    assert_eq!(named, vec!["user", "x_unknown"]);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["data"][0]["embedding"], json!([0.5, -1.0]));
    let got = received(&gem).await;
    let sent: Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(
        sent,
        json!({"requests": [{"model": "models/emb-g", "content": {"parts": [{"text": "a"}]},
            "outputDimensionality": 2}]})
    );
    assert_eq!(
        gw.metric(r#"poolctl_dropped_params_total{param="user",wire="gemini"}"#)
            .await,
        1.0
    );
    assert_eq!(
        gw.metric(r#"poolctl_dropped_params_total{param="other",wire="gemini"}"#)
            .await,
        1.0
    );
    let (_, stderr) = gw.stop().await;
    let line = log_line(&stderr, "/v1/embeddings");
    assert!(
        line.contains(r#"dropped="user,x_unknown""#)
            || line.contains(r#"dropped="x_unknown,user""#),
        "{line}"
    );
}
