//! The models the router already knows (issue 23, part 3): the catalogue under a plain
//! config, through the built binary and real loopback mocks; `models:` over it fact by
//! fact; `poolctl models`; and chaos scenarios, which never read it.

use poolctl::classify::dialect::Dialect;
use poolctl::config::catalogue;
use poolctl::config::pool::PoolConfig;
use poolctl::core::clock::{Clock, ManualClock};
use poolctl::core::vocab::{CallPath, Route, Wire};
use poolctl::harness::mock::{MockRoute, MockServer};
use poolctl::harness::runner::{mock_routes, tier_for};
use poolctl::harness::scenario::{Reply, Scenario};
use poolctl::policy::capability::ModelFacts;
use serde_json::Value;
use std::path::Path;
use std::process::Output;
use std::sync::Arc;

const KEY_VAR: &str = "POOLCTL_CATALOGUE_TEST_KEY";

fn route(s: &str) -> Route {
    Route::parse(s).unwrap()
}

async fn poolctl(args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(args)
        .env(KEY_VAR, "sk-test")
        .env_remove("COLUMNS")
        .output()
        .await
        .expect("poolctl runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn both(o: &Output) -> String {
    format!("{}{}", stdout(o), String::from_utf8_lossy(&o.stderr))
}

/// Two loopback providers, `a` and `b`, each answering every call on the chat path.
async fn two_mocks(routes: &[&str]) -> MockServer {
    MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        routes
            .iter()
            .map(|r| MockRoute {
                route: route(r),
                wire: Wire::OpenAi,
                path: CallPath::Chat,
                replies: vec![Reply::Ok {
                    text: "a red pixel".into(),
                    headers: vec![],
                    usage: None,
                }],
                outage: None,
                record: true,
            })
            .collect(),
    )
    .await
    .unwrap()
}

/// A pool config for providers `a` and `b` on `mock`, with `dialect` written on each
/// (none: the wire's default), and `extra` appended (a `models:` block).
fn config(mock: &MockServer, dialect: Option<&str>, tier: &str, extra: &str) -> String {
    let dialect = dialect
        .map(|d| format!("    dialect: {d}\n"))
        .unwrap_or_default();
    format!(
        "providers:\n  a:\n    wire: openai\n{dialect}    base_url: {}\n    api_key_env: {KEY_VAR}\n  b:\n    wire: openai\n{dialect}    base_url: {}\n    api_key_env: {KEY_VAR}\ntiers:\n  t: [{tier}]\n{extra}",
        mock.base_url("a", Wire::OpenAi),
        mock.base_url("b", Wire::OpenAi)
    )
}

async fn walk_image(dir: &Path, yaml: &str) -> (Output, Value) {
    let file = dir.join("pool.yaml");
    std::fs::write(&file, yaml).unwrap();
    let png = dir.join("pixel.png");
    std::fs::write(&png, b"\x89PNG\r\n\x1a\n").unwrap();
    let o = poolctl(&[
        "walk",
        "t",
        "--json",
        "--config",
        file.to_str().unwrap(),
        "--prompt",
        "What is it?",
        "--image",
        png.to_str().unwrap(),
    ])
    .await;
    let v = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (o, v)
}

/// A config with no `models:`: the catalogue knows `o3-mini` on OpenAI takes no image,
/// so an image request passes it over (never calling it) for `gpt-4o`, which the
/// catalogue also prices, so the attempt carries a cost estimate.
#[tokio::test(flavor = "multi_thread")]
async fn an_image_request_skips_a_backup_the_catalogue_knows_is_text_only() {
    let dir = tempfile::tempdir().unwrap();
    let mock = two_mocks(&["a/o3-mini", "b/gpt-4o"]).await;
    let yaml = config(&mock, Some("openai"), "a/o3-mini, b/gpt-4o", "");
    assert!(!yaml.contains("models:"));
    let (o, v) = walk_image(dir.path(), &yaml).await;
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert_eq!(v["served_by"], "b/gpt-4o", "{v}");
    assert_eq!(v["skipped"][0]["route"], "a/o3-mini", "{v}");
    assert!(v["skipped"][0]["cause"] == "no image input", "{v}");
    assert_eq!(mock.calls(&route("a/o3-mini")), 0);
    assert_eq!(mock.calls(&route("b/gpt-4o")), 1);
    let cost = v["attempts"][0]["cost_usd"].as_f64().unwrap();
    assert!(
        cost > 0.0,
        "gpt-4o's catalogue prices give an estimate: {v}"
    );
}

/// `models:` wins fact by fact: saying `o3-mini` takes images here sends it the request.
#[tokio::test(flavor = "multi_thread")]
async fn a_models_entry_overrides_the_catalogue_fact_it_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mock = two_mocks(&["a/o3-mini", "b/gpt-4o"]).await;
    let yaml = config(
        &mock,
        Some("openai"),
        "a/o3-mini, b/gpt-4o",
        "models:\n  a/o3-mini: { images: true }\n",
    );
    let (o, v) = walk_image(dir.path(), &yaml).await;
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert_eq!(v["served_by"], "a/o3-mini", "{v}");
    assert_eq!(mock.calls(&route("b/gpt-4o")), 0);
}

/// A dialect only defaulted from the wire (a loopback URL, no `dialect:`) is a guess: it
/// picks no catalogue row, so nothing is skipped and nothing is priced.
#[tokio::test(flavor = "multi_thread")]
async fn a_guessed_dialect_picks_no_catalogue_row() {
    let dir = tempfile::tempdir().unwrap();
    let mock = two_mocks(&["a/o3-mini", "b/gpt-4o"]).await;
    let yaml = config(&mock, None, "a/o3-mini, b/gpt-4o", "");
    let (o, v) = walk_image(dir.path(), &yaml).await;
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert_eq!(v["served_by"], "a/o3-mini", "{v}");
    assert_eq!(v["attempts"][0]["cost_usd"], 0.0, "{v}");
}

/// `catalogue: false` (what `poolctl mock` writes): only the config's own facts, so
/// the text-only model the catalogue knows is called with the image.
#[tokio::test(flavor = "multi_thread")]
async fn catalogue_false_keeps_only_the_configs_own_facts() {
    let dir = tempfile::tempdir().unwrap();
    let mock = two_mocks(&["a/o3-mini", "b/gpt-4o"]).await;
    let yaml = config(
        &mock,
        Some("openai"),
        "a/o3-mini, b/gpt-4o",
        "catalogue: false\n",
    );
    let (o, v) = walk_image(dir.path(), &yaml).await;
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert_eq!(v["served_by"], "a/o3-mini", "{v}");
    assert_eq!(mock.calls(&route("b/gpt-4o")), 0);
}

#[test]
fn resolve_merges_models_over_the_row_of_the_providers_family() {
    let yaml = format!(
        "providers:\n  ds:\n    wire: openai\n    base_url: https://api.deepseek.com/v1\n    api_key_env: {KEY_VAR}\n  qwen:\n    wire: openai\n    base_url: https://dashscope.aliyuncs.com/compatible-mode/v1\n    api_key_env: {KEY_VAR}\n  gw:\n    wire: openai\n    base_url: https://llm.internal.example/v1\n    api_key_env: {KEY_VAR}\ntiers:\n  t: [ds/deepseek-v4-pro, qwen/deepseek-v4-pro, gw/deepseek-v4-pro]\nmodels:\n  ds/deepseek-v4-pro: {{ context_window: 64000, documents: false }}\n"
    );
    let config = PoolConfig::parse(Path::new("pool.yaml"), &yaml).expect("valid config");
    let on_deepseek = catalogue::lookup(Dialect::Deepseek, "deepseek-v4-pro").unwrap();
    let on_dashscope = catalogue::lookup(Dialect::Dashscope, "deepseek-v4-pro").unwrap();
    // The family comes from the inferred dialect (api.deepseek.com, aliyuncs.com).
    let ds = config.facts_of(&route("ds/deepseek-v4-pro"));
    assert_eq!(ds.context_window, Some(64_000), "the written fact wins");
    assert_eq!(ds.documents, Some(false));
    assert_eq!(
        ds.max_output_tokens, on_deepseek.facts.max_output_tokens,
        "an unwritten fact is the catalogue's"
    );
    assert_eq!(ds.input_usd_per_mtok, on_deepseek.facts.input_usd_per_mtok);
    let qwen = config.facts_of(&route("qwen/deepseek-v4-pro"));
    assert_eq!(
        qwen, on_dashscope.facts,
        "the same model on DashScope is its own row"
    );
    assert_ne!(qwen.input_usd_per_mtok, ds.input_usd_per_mtok);
    // A private gateway's host implies no dialect: no row, no guess.
    assert_eq!(
        config.facts_of(&route("gw/deepseek-v4-pro")),
        ModelFacts::default()
    );
    // The tier the router gets carries the same facts.
    let tier = config
        .tier("t", &|v| (v == KEY_VAR).then(|| "sk-test".into()))
        .unwrap();
    assert_eq!(tier.routes[0].facts, ds);
    assert_eq!(tier.routes[1].facts, qwen);
}

/// A scenario means what its file says: a chain entry named like a catalogue model, with
/// the catalogue's own dialect, gets only its own `model:` facts (none here), so a
/// catalogue update cannot change a scenario's outcome.
#[tokio::test]
async fn a_scenario_route_named_like_a_catalogue_model_gets_no_catalogue_facts() {
    assert!(catalogue::lookup(Dialect::Openai, "gpt-4o").is_some());
    let yaml = r#"
name: t
chain:
  - route: openai/gpt-4o
    dialect: openai
    replies: [ { ok: "fine" } ]
  - route: anthropic/claude-sonnet-4-5
    dialect: anthropic
    model: { context_window: 1000 }
    replies: [ { ok: "fine" } ]
requests:
  - expect: { outcome: success }
"#;
    let scenario = Scenario::parse(Path::new("inline.yaml"), yaml).expect("valid scenario");
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(scenario.start_ms()));
    let routes = mock_routes(&scenario, &clock, scenario.start_ms());
    let mock = MockServer::start(([127, 0, 0, 1], 0).into(), routes)
        .await
        .unwrap();
    let tier = tier_for(&scenario, &mock);
    assert_eq!(tier.routes[0].facts, ModelFacts::default());
    assert_eq!(
        tier.routes[1].facts,
        ModelFacts {
            context_window: Some(1000),
            ..Default::default()
        }
    );
}

#[tokio::test]
async fn poolctl_models_prints_gpt_4o_and_claude_with_their_sources() {
    for (pattern, want) in [("gpt-4o", "gpt-4o-mini"), ("claude", "claude-sonnet-4-5")] {
        let o = poolctl(&["models", pattern]).await;
        assert_eq!(o.status.code(), Some(0), "{}", both(&o));
        let text = stdout(&o);
        assert!(text.contains(want), "{text}");
        assert!(
            text.contains("LiteLLM model_prices_and_context_window.json"),
            "{text}"
        );
        assert!(text.contains("read 2026-12-02"), "{text}");
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "wider than 80: {line}");
        }
    }
    // One row cites Anthropic's page (where LiteLLM's cache price differs): a footnote.
    let text = stdout(&poolctl(&["models", "claude-sonnet-5"]).await);
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("claude-sonnet-5-5") && l.ends_with("[2]")),
        "{text}"
    );
    assert!(
        text.contains("[2] https://platform.claude.com/docs/"),
        "{text}"
    );
    let text = stdout(&poolctl(&["models", "openai/gpt-4o"]).await);
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("gpt-4o "))
        .unwrap();
    let facts: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        facts,
        ["gpt-4o", "128000", "16384", "itj", "2.5", "10", "1.25"],
        "{text}"
    );
    assert!(!text.contains("azure"), "a family/model pattern: {text}");
}

#[tokio::test]
async fn poolctl_models_json_has_every_row_with_its_source_and_no_match_exits_1() {
    let o = poolctl(&["models", "--json"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["models"].as_array().unwrap();
    assert_eq!(rows.len(), catalogue::catalogue().unwrap().entries().len());
    assert!(rows.len() >= 150);
    for r in rows {
        assert!(r["source"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
        assert!(r["date"].as_str().is_some_and(|d| d.len() == 10), "{r}");
    }
    let glob: Value =
        serde_json::from_slice(&poolctl(&["models", "--json", "DeepSeek/*"]).await.stdout).unwrap();
    let rows = glob["models"].as_array().unwrap();
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r["family"] == "deepseek"), "{glob}");

    let o = poolctl(&["models", "--json", "no-such-model-anywhere"]).await;
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert_eq!(stdout(&o).trim(), r#"{"models":[]}"#);
    let o = poolctl(&["models", "no-such-model-anywhere"]).await;
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(o.stdout.is_empty(), "{}", stdout(&o));
    assert!(
        both(&o).contains("no known model matches `no-such-model-anywhere`"),
        "{}",
        both(&o)
    );
}

#[test]
fn models_help_and_a_long_listing_fit_80_columns_on_a_wide_terminal() {
    for args in [&["models", "--help"][..], &["models"][..]] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
            .args(args)
            .env("COLUMNS", "200")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", both(&o));
        let text = stdout(&o);
        assert!(text.lines().count() > 5, "{text}");
        for line in text.lines() {
            assert!(
                line.chars().count() <= 80,
                "`poolctl {}` has a line of {}: {line}",
                args.join(" "),
                line.chars().count()
            );
        }
    }
}

/// `check` warns about a backup the catalogue knows cannot serve its primary's requests,
/// on a config that says nothing about either model.
#[tokio::test]
async fn check_warns_about_a_backup_the_catalogue_knows_lacks_image_input() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pool.yaml");
    std::fs::write(
        &file,
        format!("providers:\n  oa:\n    wire: openai\n    base_url: https://api.openai.com/v1\n    api_key_env: {KEY_VAR}\ntiers:\n  t: [oa/gpt-4o, oa/o3-mini]\n"),
    )
    .unwrap();
    let o = poolctl(&["check", "--json", "--config", file.to_str().unwrap()]).await;
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let warnings: Vec<&str> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["message"].as_str())
        .collect();
    assert!(
        warnings.contains(
            &"tier `t`: backup `oa/o3-mini` cannot serve what primary `oa/gpt-4o` serves: no image input"
        ),
        "{warnings:?}"
    );
}

/// A plain config moves on `context_overflow` to a route the catalogue knows is larger:
/// `gpt-4o` overflows, `gpt-4o-mini` (the same 128 000 window) is passed over unasked,
/// `gpt-4.1` (1 047 576) serves.
#[tokio::test(flavor = "multi_thread")]
async fn a_context_overflow_moves_past_a_same_window_route_to_one_known_larger() {
    let dir = tempfile::tempdir().unwrap();
    let overflow = Reply::Status {
        status: 400,
        headers: vec![],
        body: poolctl::harness::scenario::Body::Json(serde_json::json!({"error": {
            "message": "This model's maximum context length is 128000 tokens.",
            "type": "invalid_request_error", "param": "messages",
            "code": "context_length_exceeded"}})),
    };
    let ok = Reply::Ok {
        text: "fits".into(),
        headers: vec![],
        usage: None,
    };
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        [
            ("a/gpt-4o", overflow),
            ("a/gpt-4o-mini", ok.clone()),
            ("b/gpt-4.1", ok),
        ]
        .into_iter()
        .map(|(r, reply)| MockRoute {
            route: route(r),
            wire: Wire::OpenAi,
            path: CallPath::Chat,
            replies: vec![reply],
            outage: None,
            record: false,
        })
        .collect(),
    )
    .await
    .unwrap();
    let yaml = config(
        &mock,
        Some("openai"),
        "a/gpt-4o, a/gpt-4o-mini, b/gpt-4.1",
        "",
    );
    let file = dir.path().join("pool.yaml");
    std::fs::write(&file, yaml).unwrap();
    let o = poolctl(&["walk", "t", "--json", "--config", file.to_str().unwrap()]).await;
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["served_by"], "b/gpt-4.1", "{v}");
    assert_eq!(v["attempts"][0]["class"], "context_overflow", "{v}");
    assert!(
        v["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["route"] == "a/gpt-4o-mini"
                && s["cause"]
                    .as_str()
                    .is_some_and(|c| c.contains("not larger than 128000"))),
        "{v}"
    );
    assert_eq!(mock.calls(&route("a/gpt-4o-mini")), 0);
}

/// After an overflow the walk itself, not only the candidate row 3a looked up, passes
/// over a route whose window nothing knows: it may be as small, so only a route known
/// larger takes the prompt.
#[tokio::test(flavor = "multi_thread")]
async fn a_context_overflow_passes_over_a_route_of_unknown_window() {
    let dir = tempfile::tempdir().unwrap();
    let overflow = Reply::Status {
        status: 400,
        headers: vec![],
        body: poolctl::harness::scenario::Body::Json(serde_json::json!({"error": {
            "message": "This model's maximum context length is 128000 tokens.",
            "type": "invalid_request_error", "param": "messages",
            "code": "context_length_exceeded"}})),
    };
    let ok = Reply::Ok {
        text: "fits".into(),
        headers: vec![],
        usage: None,
    };
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        [
            ("a/gpt-4o", overflow),
            ("a/house-model", ok.clone()),
            ("b/gpt-4.1", ok),
        ]
        .into_iter()
        .map(|(r, reply)| MockRoute {
            route: route(r),
            wire: Wire::OpenAi,
            path: CallPath::Chat,
            replies: vec![reply],
            outage: None,
            record: false,
        })
        .collect(),
    )
    .await
    .unwrap();
    let yaml = config(
        &mock,
        Some("openai"),
        "a/gpt-4o, a/house-model, b/gpt-4.1",
        "",
    );
    let file = dir.path().join("pool.yaml");
    std::fs::write(&file, yaml).unwrap();
    let o = poolctl(&["walk", "t", "--json", "--config", file.to_str().unwrap()]).await;
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["served_by"], "b/gpt-4.1", "{v}");
    assert!(
        v["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["route"] == "a/house-model"
                && s["cause"]
                    .as_str()
                    .is_some_and(|c| c.contains("window unknown"))),
        "{v}"
    );
    assert_eq!(mock.calls(&route("a/house-model")), 0);
}
