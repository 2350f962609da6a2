//! LiteLLM configs whose model groups hold several deployments: each such group is a
//! tier's group step (`- group: [...]`, `weights:` from `weight` or every member's
//! rpm). These tests wait on group steps in the pool config (the `groups` branch):
//! without them the translated text does not parse.

use poolctl::cli::check::check_file;
use poolctl::config::litellm;
use poolctl::core::vocab::{CallPath, Route, Wire};
use poolctl::harness::mock::{MockRoute, MockServer};
use poolctl::harness::scenario::{Body, Reply};
use serde_json::json;
use std::path::Path;
use std::process::Output;

const DIR: &str = "tests/litellm-configs";

fn env_with_keys(var: &str) -> Option<String> {
    match var {
        "AZURE_API_BASE" => Some("https://example-resource.openai.azure.com".into()),
        v if v.contains("KEY") || v.contains("TOKEN") => Some(format!("dummy-{v}")),
        _ => None,
    }
}

/// `check` on each multi-deployment config as published: clean, or exactly the
/// problems of its placeholders, at their LiteLLM lines.
#[test]
fn check_runs_on_every_load_balanced_config_as_published() {
    for (name, expected) in [
        ("docs-anthropic-with-openai.yaml", &[][..]),
        ("docs-azure-load-balancing.yaml", &[][..]),
        (
            "docs-load-balancing.yaml",
            &["8:providers.azure.base_url", "29:state"][..],
        ),
        (
            "docs-redis-multi-instance.yaml",
            &["8:providers.azure.base_url", "18:state"][..],
        ),
    ] {
        let report = check_file(&Path::new(DIR).join(name), &env_with_keys);
        let errors: Vec<String> = report
            .findings
            .errors
            .iter()
            .map(|e| format!("{}:{}", e.line.unwrap_or(0), e.field))
            .collect();
        assert_eq!(errors, expected, "{name}: {}", report.text());
    }
}

#[test]
fn a_model_group_of_several_deployments_is_one_group_step_weighted_by_rpm() {
    let file = Path::new(DIR).join("docs-azure-load-balancing.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let (config, _) = litellm::load(&file, &text, &env_with_keys).unwrap();
    // The group's members, in turn (one step of the tier).
    let routes: Vec<String> = config
        .tier_entries("gpt-4o")
        .unwrap()
        .iter()
        .map(|e| e.route.to_string())
        .collect();
    assert_eq!(routes, ["azure/gpt-4o-eu", "azure-2/gpt-4o-ca"]);
    let report = check_file(&file, &env_with_keys);
    assert!(
        report
            .findings
            .warnings
            .iter()
            .all(|w| !w.field.starts_with("tiers.gpt-4o")),
        "{}",
        report.text()
    );
    assert_eq!(config.limits["azure/gpt-4o-eu"].rpm, Some(6));
    assert_eq!(config.limits["azure-2/gpt-4o-ca"].rpm, Some(6));
}

fn mock_route(r: &str, replies: Vec<Reply>) -> MockRoute {
    MockRoute {
        route: Route::parse(r).unwrap(),
        wire: Wire::OpenAi,
        path: CallPath::Chat,
        replies,
        outage: None,
        record: false,
    }
}

fn poolctl(config: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env("EU_KEY", "k-eu")
        .env("CA_KEY", "k-ca")
        .output()
        .unwrap()
}

/// LiteLLM's load-balancing example (two regions of one model group, per-deployment
/// rpm) with its `api_base`s on loopback: a quota-exhausted member is passed over for
/// the other one, over real HTTP.
#[tokio::test(flavor = "multi_thread")]
async fn walk_and_probe_use_both_members_of_a_load_balanced_group() {
    let quota = Reply::Status {
        status: 429,
        headers: vec![],
        body: Body::Json(
            json!({"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}}),
        ),
    };
    let ok = Reply::Ok {
        text: "from ca".into(),
        headers: vec![],
        usage: None,
    };
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        vec![
            mock_route("eu/gpt-4o", vec![quota]),
            mock_route("ca/gpt-4o", vec![ok]),
        ],
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        format!(
            "model_list:\n  - model_name: gpt-4o\n    litellm_params:\n      model: openai/gpt-4o\n      api_base: {}\n      api_key: os.environ/EU_KEY\n      rpm: 6\n  - model_name: gpt-4o\n    litellm_params:\n      model: openai/gpt-4o\n      api_base: {}\n      api_key: os.environ/CA_KEY\n      rpm: 6\n",
            mock.base_url("eu", Wire::OpenAi),
            mock.base_url("ca", Wire::OpenAi)
        ),
    )
    .unwrap();
    let o = poolctl(&file, &["walk", "gpt-4o", "--json"]);
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{text}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["served_by"], "openai-2/gpt-4o", "{v}");
    assert_eq!(mock.calls(&Route::parse("ca/gpt-4o").unwrap()), 1);
    let o = poolctl(&file, &["probe", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tiers"][0]["routes"].as_array().unwrap().len(), 2, "{v}");
}

fn overflow() -> Reply {
    Reply::Status {
        status: 400,
        headers: vec![],
        body: Body::Json(json!({"error": {
            "message": "This model's maximum context length is 128000 tokens.",
            "type": "invalid_request_error", "param": "messages",
            "code": "context_length_exceeded"}})),
    }
}

fn ok(text: &str) -> Reply {
    Reply::Ok {
        text: text.into(),
        headers: vec![],
        usage: None,
    }
}

/// The audit's r2: `fallbacks` names `cheap` (window unknown), `context_window_fallbacks`
/// names `big-context` (`model_info` 1 000 000, or nothing known when `big_info` is
/// empty). Walks `gpt-4o`, whose reply is a context overflow, under the group's card when
/// `card`; the report and the mocks.
async fn walk_an_overflow(big_info: &str, card: bool) -> (serde_json::Value, MockServer) {
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        vec![
            mock_route("p/gpt-4o", vec![overflow()]),
            mock_route("c/cheap-model", vec![ok("from cheap")]),
            mock_route("b/big-model", vec![ok("from big")]),
        ],
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    let entry = |name: &str, model: &str, base: &str, info: &str| {
        format!("  - model_name: {name}\n    litellm_params:\n      model: openai/{model}\n      api_base: {}\n      api_key: os.environ/EU_KEY\n{info}", mock.base_url(base, Wire::OpenAi))
    };
    let text = [
        entry(
            "gpt-4o",
            "gpt-4o",
            "p",
            "    model_info:\n      max_input_tokens: 128000\n",
        ),
        entry("cheap", "cheap-model", "c", ""),
        entry("big-context", "big-model", "b", big_info),
    ]
    .concat();
    std::fs::write(
        &file,
        format!("model_list:\n{text}router_settings:\n  fallbacks: [{{\"gpt-4o\": [\"cheap\"]}}]\n  context_window_fallbacks: [{{\"gpt-4o\": [\"big-context\"]}}]\n"),
    )
    .unwrap();
    // Under the group's card, as `serve` runs a request for the model group, or under
    // the defaults.
    let mut args = vec!["walk", "gpt-4o", "--json"];
    if card {
        args.extend(["--workflow", "gpt-4o"]);
    }
    let o = poolctl(&file, &args);
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect(&text);
    (v, mock)
}

/// LiteLLM sends a context-window error to `context_window_fallbacks` and to no plain
/// fallback: `cheap` is passed over unasked, under the group's card and under the
/// defaults too (its window is unknown, so nothing says it is larger).
#[tokio::test(flavor = "multi_thread")]
async fn a_context_overflow_goes_to_the_context_window_fallback_not_the_plain_one() {
    for card in [false, true] {
        let (v, mock) =
            walk_an_overflow("    model_info:\n      max_input_tokens: 1000000\n", card).await;
        assert_eq!(v["served_by"], "openai-3/big-model", "{v}");
        assert_eq!(v["attempts"][0]["class"], "context_overflow", "{v}");
        assert_eq!(mock.calls(&Route::parse("c/cheap-model").unwrap()), 0);
    }
}

/// LiteLLM tries a `context_window_fallbacks` group whatever it knows of its window: one
/// with no `model_info` (and no catalogue row) still takes the overflow.
#[tokio::test(flavor = "multi_thread")]
async fn a_context_window_fallback_of_unknown_window_takes_the_overflow() {
    let (v, mock) = walk_an_overflow("", true).await;
    assert_eq!(v["served_by"], "openai-3/big-model", "{v}");
    assert_eq!(mock.calls(&Route::parse("c/cheap-model").unwrap()), 0);
}

/// A `context_window_fallbacks` route whose facts give a window no larger than the one
/// that overflowed is passed over: it would only overflow again.
#[tokio::test(flavor = "multi_thread")]
async fn a_context_window_fallback_known_no_larger_is_passed_over() {
    let (v, mock) =
        walk_an_overflow("    model_info:\n      max_input_tokens: 128000\n", true).await;
    assert_eq!(v["outcome"], "failed", "{v}");
    assert_eq!(mock.calls(&Route::parse("b/big-model").unwrap()), 0);
    assert_eq!(mock.calls(&Route::parse("c/cheap-model").unwrap()), 0);
}
