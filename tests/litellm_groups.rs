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
