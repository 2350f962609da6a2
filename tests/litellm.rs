//! A LiteLLM proxy config.yaml, read as it is: the real configs of
//! `tests/litellm-configs/` (LiteLLM's documentation and public repositories) imported
//! to their snapshots, every field either mapped or named as not used, `check` on each
//! as published, and `walk`, `probe`, `serve` and `capacity` on copies pointed at
//! loopback mocks. Configs whose model groups hold several deployments need the group
//! steps of tiers to parse: their checks are in `tests/litellm_groups.rs`.

use poolctl::cli::check::check_file;
use poolctl::config::litellm::{self, Import};
use poolctl::core::vocab::{CallPath, Route, Wire};
use poolctl::harness::mock::{MockRoute, MockServer};
use poolctl::harness::scenario::{Body, Reply};
use serde_json::json;
use serde_yaml::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

#[path = "support/gateway.rs"]
mod gateway;

const DIR: &str = "tests/litellm-configs";

/// The configs whose model groups each hold one deployment (or none poolctl calls).
const SINGLE: &[&str] = &[
    "docs-content-policy-fallbacks.yaml",
    "docs-context-window-fallbacks.yaml",
    "docs-fallbacks.yaml",
    "docs-load-balancing-redis.yaml",
    "repo-ai-gateway.yaml",
    "repo-cirisproxy.yaml",
    "repo-free-llm-gateway.yaml",
];

/// What a provider holds, cited at the first deployment that names the provider.
const SHARED_PARAMS: &[&str] = &[
    "model",
    "api_base",
    "api_key",
    "api_version",
    "timeout",
    "stream_timeout",
];

/// The values the configs' `os.environ/` fields other than keys resolve to.
fn env(var: &str) -> Option<String> {
    match var {
        "AZURE_API_BASE" => Some("https://example-resource.openai.azure.com".into()),
        "MLX_VLM_API_BASE" => Some("http://127.0.0.1:9/v1".into()),
        _ => None,
    }
}

/// `env`, with every key variable set to a dummy value (as a team's environment is).
fn env_with_keys(var: &str) -> Option<String> {
    env(var).or_else(|| {
        ["KEY", "TOKEN"]
            .iter()
            .any(|w| var.contains(w))
            .then(|| format!("dummy-{var}"))
    })
}

fn configs() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(DIR)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn import(file: &Path) -> Import {
    let text = std::fs::read_to_string(file).unwrap();
    litellm::translate(file, &text, &env).unwrap()
}

#[test]
fn at_least_eight_real_configs_each_with_its_source() {
    let files = configs();
    assert!(files.len() >= 8, "{files:?}");
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        assert!(text.starts_with("# Source: "), "{}", f.display());
        assert!(text.contains("commit "), "{}", f.display());
        assert!(litellm::is_litellm(&text), "{}", f.display());
    }
}

#[test]
fn every_real_config_imports_to_its_snapshot() {
    for f in configs() {
        let name = f.file_stem().unwrap().to_string_lossy().into_owned();
        insta::assert_snapshot!(name, import(&f).text);
    }
}

/// Every field of each file is mapped (a `# from` comment names it) or named once as not
/// used, or belongs to a deployment named as not used: nothing is silently ignored.
#[test]
fn every_field_is_mapped_or_named_as_not_used() {
    for f in configs() {
        let imp = import(&f);
        let text = std::fs::read_to_string(&f).unwrap();
        let root: Value = serde_yaml::from_str(&text).unwrap();
        let named: Vec<&str> = imp
            .unused
            .iter()
            .chain(&imp.warnings)
            .chain(&imp.errors)
            .map(|e| e.field.as_str())
            .collect();
        let mapped = |field: &str| {
            imp.text
                .lines()
                .filter_map(|l| l.split_once("# from ").map(|(_, c)| c))
                .any(|c| {
                    c.match_indices(field).any(|(at, _)| {
                        let before = c[..at].chars().next_back();
                        let after = c[at + field.len()..].chars().next();
                        before.is_some_and(|b| b == ' ' || b == ',')
                            && after.is_none_or(|a| " ,).[".contains(a))
                    })
                })
        };
        let mut fields: Vec<String> = Vec::new();
        for (k, v) in root.as_mapping().unwrap() {
            let k = k.as_str().unwrap();
            match (k, v) {
                ("model_list", Value::Sequence(items)) => {
                    for (i, item) in items.iter().enumerate() {
                        for (ik, iv) in item.as_mapping().unwrap() {
                            let ik = ik.as_str().unwrap();
                            match iv.as_mapping() {
                                Some(m) if ik != "model_name" => {
                                    for (pk, _) in m {
                                        fields.push(format!(
                                            "model_list[{i}].{ik}.{}",
                                            pk.as_str().unwrap()
                                        ));
                                    }
                                }
                                _ => fields.push(format!("model_list[{i}].{ik}")),
                            }
                        }
                    }
                }
                (_, Value::Mapping(m)) => {
                    for (sk, _) in m {
                        fields.push(format!("{k}.{}", sk.as_str().unwrap()));
                    }
                }
                _ => fields.push(k.to_string()),
            }
        }
        for field in fields {
            // A deployment poolctl cannot call is named once, at its `model` (or mode).
            let deployment = field.split('.').next().unwrap();
            let whole = named.iter().any(|n| {
                n.starts_with(deployment)
                    && (n.ends_with(".litellm_params.model")
                        || n.ends_with(".model_info.mode")
                        || n.ends_with(".model_name"))
            }) && field.starts_with("model_list[");
            // A deployment's provider settings equal to those of an earlier deployment
            // of the same provider are cited there, once.
            let shared = field.starts_with("model_list[")
                && mapped(&format!("{deployment}.model_name"))
                && SHARED_PARAMS
                    .iter()
                    .any(|p| field.ends_with(&format!(".litellm_params.{p}")));
            assert!(
                mapped(&field)
                    || named.iter().any(|n| *n == field
                        || n.starts_with(&format!("{field}["))
                        || n.starts_with(&format!("{field}.")))
                    || whole
                    || shared,
                "{}: `{field}` is neither mapped nor named:\n{}",
                f.display(),
                imp.text
            );
        }
        // Named once each.
        let mut seen = std::collections::BTreeSet::new();
        for u in &imp.unused {
            assert!(
                seen.insert(&u.field),
                "{}: `{}` named twice",
                f.display(),
                u.field
            );
            assert!(u.message.starts_with("not used by poolctl"), "{u}");
            assert!(u.line.is_some(), "{u}");
        }
    }
}

#[test]
fn the_fields_poolctl_does_not_use_are_named_with_their_lines() {
    let unused = |name: &str| -> Vec<(String, usize)> {
        import(&Path::new(DIR).join(name))
            .unused
            .iter()
            .map(|u| (u.field.clone(), u.line.unwrap()))
            .collect()
    };
    let ciris = unused("repo-cirisproxy.yaml");
    for (field, line) in [
        ("litellm_settings.callbacks", 111),
        ("litellm_settings.success_callback", 113),
        ("litellm_settings.failure_callback", 115),
        ("litellm_settings.drop_params", 119),
        ("litellm_settings.set_verbose", 125),
        ("router_settings.retry_after", 133),
        ("general_settings.custom_auth", 152),
        ("general_settings.database_url", 155),
        ("general_settings.allowed_ips", 158),
        ("model_list[4].litellm_params.max_tokens", 37),
    ] {
        assert!(
            ciris.contains(&(field.to_string(), line)),
            "{field}:{line} not in {ciris:?}"
        );
    }
    let gw = unused("repo-ai-gateway.yaml");
    for field in [
        "general_settings.database_url",
        "litellm_settings.custom_provider_map",
        "model_list[3].litellm_params.reasoning_effort",
        "model_list[9].litellm_params.model",
        "model_list[24].model_info.mode",
    ] {
        assert!(gw.iter().any(|(f, _)| f == field), "{field} not in {gw:?}");
    }
    let azure = unused("docs-azure-load-balancing.yaml");
    for field in [
        "model_list[1].litellm_params.model",
        "model_list[3].litellm_params.model",
        "model_list[5].model_name",
        "litellm_settings.success_callback",
        "general_settings.alerting",
    ] {
        assert!(
            azure.iter().any(|(f, _)| f == field),
            "{field} not in {azure:?}"
        );
    }
}

/// `check` on each file as published, with its key variables set: clean, or exactly
/// the problems of its placeholders, each at the LiteLLM line it is on.
#[test]
fn check_runs_on_every_single_deployment_config_as_published() {
    for name in SINGLE {
        let file = Path::new(DIR).join(name);
        let report = check_file(&file, &env_with_keys);
        let errors: Vec<String> = report
            .findings
            .errors
            .iter()
            .map(|e| format!("{}:{}", e.line.unwrap_or(0), e.field))
            .collect();
        let expected: &[&str] = match *name {
            // `api_base: <your-azure-endpoint>` is a placeholder, not a URL.
            "docs-fallbacks.yaml" => &["7:providers.azure.base_url"],
            // `redis_host: <your redis host>`.
            "docs-load-balancing-redis.yaml" => &["44:state"],
            _ => &[],
        };
        assert_eq!(errors, expected, "{name}: {}", report.text());
        assert!(report.config.is_some(), "{name}");
        for w in &report.findings.warnings {
            assert_eq!(w.file, file, "{name}: {w:?}");
        }
    }
}

#[test]
fn an_unset_key_variable_is_an_error_at_the_litellm_line() {
    let file = Path::new(DIR).join("docs-content-policy-fallbacks.yaml");
    let report = check_file(&file, &env);
    let lines: Vec<(usize, &str)> = report
        .findings
        .errors
        .iter()
        .map(|e| (e.line.unwrap(), e.message.as_str()))
        .collect();
    assert_eq!(lines.len(), 2, "{}", report.text());
    assert_eq!(lines[0].0, 10, "{}", report.text());
    assert!(lines[0].1.contains("AZURE_API_KEY"), "{}", report.text());
    assert_eq!(lines[1].0, 16, "{}", report.text());
    assert!(
        lines[1].1.contains("ANTHROPIC_API_KEY"),
        "{}",
        report.text()
    );
}

#[test]
fn the_mapping_of_fallbacks_windows_content_policy_retries_and_aliases() {
    let imp = import(&Path::new(DIR).join("docs-load-balancing-redis.yaml"));
    let (config, _) = litellm::load(
        Path::new("lb.yaml"),
        &std::fs::read_to_string(Path::new(DIR).join("docs-load-balancing-redis.yaml"))
            .unwrap()
            .replace("<your redis host>", "redis.internal"),
        &env_with_keys,
    )
    .unwrap();
    assert!(imp.errors.is_empty(), "{:?}", imp.errors);
    // context_window_fallbacks: the larger window joins the chain.
    let routes: Vec<String> = config.tiers["gpt-4o"]
        .iter()
        .map(|e| e.route.to_string())
        .collect();
    assert_eq!(routes, ["openai/gpt-4o", "openai/gpt-3.5-turbo-16k"]);
    // num_retries (router_settings wins) on each group's workflow; the alias too.
    assert_eq!(config.policies["gpt-4o"].max_retries_per_route, 2);
    assert_eq!(config.policies["gpt-4"].tier.as_deref(), Some("gpt-4o"));
    // timeout (s) becomes the deadline; allowed_fails the breaker.
    let p = &config.providers["openai"];
    assert_eq!(p.timeout_ms, Some(30_000));
    assert_eq!(p.breaker.unwrap().consecutive_failures, 4);
    // rpm becomes limits:.
    assert_eq!(config.limits["openai/gpt-4o"].rpm, Some(200));
    // The Redis password is in the state the config uses, never in the text.
    match config.state_location() {
        poolctl::config::pool::StateLocation::Redis(url) => {
            assert!(
                url.contains("%3Cyour%20redis%20password%3E@redis.internal:1992"),
                "{url}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(!imp.text.contains("your redis password"), "{}", imp.text);

    // content_policy_fallbacks: a card that moves on content_policy.
    let text =
        std::fs::read_to_string(Path::new(DIR).join("docs-content-policy-fallbacks.yaml")).unwrap();
    let (config, _) = litellm::load(Path::new("cp.yaml"), &text, &env_with_keys).unwrap();
    let card = &config.policies["gpt-3.5-turbo-small"];
    assert!(card.moves_on_content_policy());
    assert_eq!(card.tier.as_deref(), Some("gpt-3.5-turbo-small"));
    assert_eq!(config.tiers["gpt-3.5-turbo-small"].len(), 2);
    // Azure: its v1 API, the deployment as the model.
    assert_eq!(
        config.providers["azure"].base_url,
        "https://example-resource.openai.azure.com/openai/v1"
    );
    assert_eq!(
        config.tiers["gpt-3.5-turbo-small"][0].route.as_str(),
        "azure/chatgpt-v-2"
    );
}

#[test]
fn model_info_becomes_the_models_facts_and_prices_per_million_tokens() {
    let text = "model_list:\n  - model_name: big\n    litellm_params:\n      model: deepseek/deepseek-chat\n      api_key: os.environ/K\n      tpm: 100000\n      timeout: 2.5\n      stream_timeout: 1\n    model_info:\n      max_input_tokens: 65536\n      max_output_tokens: 8192\n      supports_vision: false\n      supports_function_calling: true\n      input_cost_per_token: 0.00000027\n      output_cost_per_token: 0.0000011\n      base_model: x\n";
    let (config, imp) = litellm::load(Path::new("m.yaml"), text, &|_| Some("k".into())).unwrap();
    let facts = config.models[&Route::parse("deepseek/deepseek-chat").unwrap()];
    assert_eq!(facts.context_window, Some(65536));
    assert_eq!(facts.max_output_tokens, Some(8192));
    assert_eq!(facts.images, Some(false));
    assert_eq!(facts.tools, Some(true));
    assert_eq!(facts.input_usd_per_mtok, Some(0.27));
    assert_eq!(facts.output_usd_per_mtok, Some(1.1));
    assert_eq!(config.limits["deepseek/deepseek-chat"].tpm, Some(100_000));
    let p = &config.providers["deepseek"];
    assert_eq!(
        (p.timeout_ms, p.first_token_timeout_ms),
        (Some(2500), Some(1000))
    );
    assert_eq!(p.base_url, "https://api.deepseek.com/v1");
    assert_eq!(imp.unused.len(), 1);
    assert_eq!(imp.unused[0].field, "model_list[0].model_info.base_model");
    assert_eq!(imp.unused[0].line, Some(16));
}

#[test]
fn an_unknown_fallback_group_is_an_error_at_its_line_naming_the_nearest() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "model_list:\n  - model_name: gpt-4o\n    litellm_params: {model: openai/gpt-4o, api_key: os.environ/K}\n  - model_name: claude\n    litellm_params: {model: anthropic/claude-sonnet-4-5, api_key: os.environ/K}\nrouter_settings:\n  fallbacks:\n    - gpt-4o: [claud]\n",
    )
    .unwrap();
    let report = check_file(&file, &|_| Some("k".into()));
    assert_eq!(report.findings.errors.len(), 1, "{}", report.text());
    let e = &report.findings.errors[0];
    assert_eq!(e.line, Some(8), "{e:?}");
    assert!(e.message.contains("unknown model group `claud`"), "{e:?}");
    assert_eq!(e.suggestion.as_deref(), Some("claude"), "{e:?}");
    let o = poolctl(&file, &["walk", "gpt-4o"], &[("K", "k")]);
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    assert!(out(&o).contains("config.yaml:8"), "{}", out(&o));
}

/// LiteLLM's `include:` (docs: proxy/config_management): the included file's model
/// groups are the config's, its lists extending the config's own. A file that cannot
/// be read is an error naming it, not a warning with groups missing.
#[test]
fn included_files_bring_their_model_groups_and_a_missing_one_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("models.yaml"),
        "model_list:\n  - model_name: claude\n    litellm_params: {model: anthropic/claude-sonnet-4-5, api_key: os.environ/K}\n",
    )
    .unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "include:\n  - models.yaml\nmodel_list:\n  - model_name: gpt-4o\n    litellm_params: {model: openai/gpt-4o, api_key: os.environ/K}\nrouter_settings:\n  fallbacks: [{gpt-4o: [claude]}]\n",
    )
    .unwrap();
    let report = check_file(&file, &|_| Some("k".into()));
    assert!(report.findings.errors.is_empty(), "{}", report.text());
    let text = litellm::translate(&file, &std::fs::read_to_string(&file).unwrap(), &|_| {
        Some("k".into())
    })
    .unwrap()
    .text;
    assert!(text.contains("  claude:"), "{text}");
    assert!(text.contains("anthropic/claude-sonnet-4-5"), "{text}");
    // A parent holding only `include:` is a LiteLLM config too.
    let parent = dir.path().join("parent.yaml");
    std::fs::write(&parent, "include: [models.yaml]\n").unwrap();
    assert!(litellm::is_litellm(
        &std::fs::read_to_string(&parent).unwrap()
    ));
    let report = check_file(&parent, &|_| Some("k".into()));
    assert!(report.findings.errors.is_empty(), "{}", report.text());
    std::fs::write(&parent, "include: [gone.yaml]\nmodel_list: []\n").unwrap();
    let report = check_file(&parent, &|_| Some("k".into()));
    assert!(
        report.text().contains("gone.yaml") && report.text().contains("cannot read"),
        "{}",
        report.text()
    );
}

/// Guards cli.md's "a config error names the file, line and field" for `include:`:
/// a problem in an included file was reported in the main file, at the line its merged
/// path fell on there (`model_list:`), under an index no file had.
#[test]
fn a_problem_in_an_included_file_names_that_file_its_line_and_its_field() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("more.yaml"),
        "# models kept apart\ninclude: [deeper.yaml]\nmodel_list:\n  - model_name: extra\n    litellm_params:\n      model: openai/gpt-4o-mini\n      api_key: os.environ/INCLUDED_UNSET\n      rpm: lots\n",
    )
    .unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "include:\n  - more.yaml\nmodel_list:\n  - model_name: main\n    litellm_params: {model: openai/gpt-4o, api_key: os.environ/K}\n",
    )
    .unwrap();
    let env = |v: &str| (v == "K").then(|| "k".to_string());
    let report = check_file(&file, &env);
    let found: Vec<(String, Option<usize>, String)> = report
        .findings
        .errors
        .iter()
        .map(|e| {
            let name = e.file.file_name().unwrap().to_string_lossy().to_string();
            (name, e.line, e.field.clone())
        })
        .collect();
    let at = |line: usize, field: &str| ("more.yaml".to_string(), Some(line), field.to_string());
    assert!(
        found.contains(&at(7, "model_list[0].litellm_params.api_key")),
        "{found:?}"
    );
    assert!(
        found.contains(&at(8, "model_list[0].litellm_params.rpm")),
        "{found:?}"
    );
    assert_eq!(found.len(), 2, "{found:?}");
    // The translation cites each line where it was written; an `include:` inside an
    // included file is not read, and is named unused there, never silent.
    let import = litellm::translate(&file, &std::fs::read_to_string(&file).unwrap(), &env).unwrap();
    assert!(
        import
            .unused
            .iter()
            .any(|u| u.field == "include" && u.file.ends_with("more.yaml")),
        "{:?}",
        import.unused
    );
    let text = import.text;
    assert!(
        text.contains("# from more.yaml:4 model_list[0].model_name"),
        "{text}"
    );
    assert!(
        text.contains("# from config.yaml:4 model_list[0].model_name"),
        "{text}"
    );
}

fn poolctl(config: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_poolctl"));
    cmd.args(args).arg("--config").arg(config);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn out(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_config_format_flag_forces_litellm_and_refuses_portkey() {
    let dir = tempfile::tempdir().unwrap();
    // No `model_list`: read as a pool config unless forced.
    let file = dir.path().join("c.yaml");
    std::fs::write(&file, "general_settings: {master_key: sk-x}\n").unwrap();
    let o = poolctl(&file, &["check"], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(out(&o).contains("providers"), "{}", out(&o));
    let o = poolctl(&file, &["check", "--config-format", "litellm"], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(
        out(&o).contains("no deployment poolctl can call"),
        "{}",
        out(&o)
    );
    let o = poolctl(&file, &["check", "--config-format", "portkey"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    assert!(out(&o).contains("pool or litellm"), "{}", out(&o));
}

/// A copy of repo-cirisproxy.yaml with every `api_base` on the loopback mock (one mock
/// provider per LiteLLM provider prefix) and its keys from one variable.
fn ciris_copy(dir: &Path, mock: &MockServer) -> PathBuf {
    ciris_copy_with(dir, mock, None)
}

fn ciris_copy_with(dir: &Path, mock: &MockServer, rpm: Option<u64>) -> PathBuf {
    let text = std::fs::read_to_string(Path::new(DIR).join("repo-cirisproxy.yaml")).unwrap();
    let mut root: Value = serde_yaml::from_str(&text).unwrap();
    for item in root["model_list"].as_sequence_mut().unwrap() {
        let params = item["litellm_params"].as_mapping_mut().unwrap();
        let model = params["model"].as_str().unwrap().to_string();
        let prefix = match model.split_once('/') {
            Some((p, _)) if ["together_ai", "groq", "openrouter"].contains(&p) => p.to_string(),
            _ => "openai".to_string(),
        };
        params.insert(
            "api_base".into(),
            mock.base_url(&prefix, Wire::OpenAi).into(),
        );
        params.insert("api_key".into(), "os.environ/CIRIS_KEY".into());
        if let Some(rpm) = rpm {
            params.insert("rpm".into(), rpm.into());
        }
    }
    let file = dir.join("config.yaml");
    std::fs::write(&file, serde_yaml::to_string(&root).unwrap()).unwrap();
    file
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

fn ok(text: &str) -> Reply {
    Reply::Ok {
        text: text.into(),
        headers: vec![],
        usage: None,
    }
}

fn quota_429() -> Reply {
    Reply::Status {
        status: 429,
        headers: vec![],
        body: Body::Json(
            json!({"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}}),
        ),
    }
}

const MAVERICK_OR: &str = "openrouter/meta-llama/llama-4-maverick";
const MAVERICK_GROQ: &str = "groq/meta-llama/llama-4-maverick-17b-128e-instruct";
const MAVERICK_TOGETHER: &str = "together_ai/meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8";
const MASTER: &str = "sk-ciris-master-SENTINEL-51e0";
const UPSTREAM: &str = "sk-ciris-upstream-SENTINEL-77aa";

async fn ciris_mock() -> MockServer {
    MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        vec![
            mock_route(MAVERICK_OR, vec![quota_429()]),
            mock_route(MAVERICK_GROQ, vec![ok("from groq")]),
            mock_route(MAVERICK_TOGETHER, vec![ok("from together")]),
        ],
    )
    .await
    .unwrap()
}

/// `walk` down the `default` model group of a real config: its fallbacks are the chain,
/// over real HTTP.
#[tokio::test(flavor = "multi_thread")]
async fn walk_follows_a_real_configs_fallbacks_over_loopback() {
    let mock = ciris_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let file = ciris_copy(dir.path(), &mock);
    let o = poolctl(
        &file,
        &["walk", "default", "--json"],
        &[("CIRIS_KEY", UPSTREAM), ("LITELLM_MASTER_KEY", MASTER)],
    );
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["served_by"], "groq/meta-llama/llama-4-maverick-17b-128e-instruct",
        "{v}"
    );
    assert_eq!(mock.calls(&Route::parse(MAVERICK_OR).unwrap()), 1);
    assert_eq!(mock.calls(&Route::parse(MAVERICK_GROQ).unwrap()), 1);
    assert_eq!(mock.calls(&Route::parse(MAVERICK_TOGETHER).unwrap()), 0);
    // Not used fields are counted once on stderr; keys never printed.
    assert!(out(&o).contains("not used by poolctl"), "{}", out(&o));
    assert!(!out(&o).contains(UPSTREAM) && !out(&o).contains(MASTER));
}

#[tokio::test(flavor = "multi_thread")]
async fn probe_sends_one_request_to_each_route_of_a_real_configs_group() {
    let mock = ciris_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let file = ciris_copy(dir.path(), &mock);
    let o = poolctl(
        &file,
        &["probe", "--tier", "default", "--json"],
        &[("CIRIS_KEY", UPSTREAM), ("LITELLM_MASTER_KEY", MASTER)],
    );
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let routes: Vec<&str> = v["tiers"][0]["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["route"].as_str().unwrap())
        .collect();
    assert_eq!(
        routes,
        [
            "openrouter/meta-llama/llama-4-maverick",
            "groq/meta-llama/llama-4-maverick-17b-128e-instruct",
            "together-ai/meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8"
        ],
        "{v}"
    );
    assert_eq!(
        v["tiers"][0]["routes"][0]["class"], "quota_exhausted",
        "{v}"
    );
    for r in [MAVERICK_OR, MAVERICK_GROQ, MAVERICK_TOGETHER] {
        assert_eq!(mock.calls(&Route::parse(r).unwrap()), 1, "{r}");
    }
}

/// `serve` on a real config: the model group is the model a client names, and
/// `general_settings.master_key` (`os.environ/LITELLM_MASTER_KEY`) is the token.
#[tokio::test(flavor = "multi_thread")]
async fn serve_answers_a_model_group_behind_the_master_key() {
    let mock = ciris_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let file = ciris_copy(dir.path(), &mock);
    let gw = gateway::start(
        &file,
        &[],
        &[("CIRIS_KEY", UPSTREAM), ("LITELLM_MASTER_KEY", MASTER)],
    )
    .await;
    let client = reqwest::Client::new();
    let body = json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]});
    let refused = client
        .post(gw.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    // The 401 names the variable the token is read from here, which is the config's.
    let e: serde_json::Value = refused.json().await.unwrap();
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.contains("$LITELLM_MASTER_KEY"), "{message}");
    let r = client
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(MASTER)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "from groq", "{v}");
    let (_, stderr) = gw.stop().await;
    assert!(stderr.contains("serve_token_env"), "{stderr}");
    assert!(
        !stderr.contains(MASTER) && !stderr.contains(UPSTREAM),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_refuses_to_start_when_the_master_key_variable_is_unset() {
    let mock = ciris_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let file = ciris_copy(dir.path(), &mock);
    let o = poolctl(
        &file,
        &["serve", "--listen", "127.0.0.1:0"],
        &[("CIRIS_KEY", UPSTREAM)],
    );
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    assert!(out(&o).contains("LITELLM_MASTER_KEY"), "{}", out(&o));
}

#[tokio::test(flavor = "multi_thread")]
async fn capacity_runs_on_a_litellm_config() {
    let mock = ciris_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let file = ciris_copy_with(dir.path(), &mock, Some(60));
    let o = poolctl(&file, &["capacity"], &[("CIRIS_KEY", UPSTREAM)]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", out(&o));
    assert!(out(&o).contains("default"), "{}", out(&o));
}

/// A literal `api_key` loads: it reaches the upstream in its auth header, and no output
/// ever holds it; each command names its line once.
#[tokio::test(flavor = "multi_thread")]
async fn a_literal_key_is_used_warned_by_line_and_never_printed() {
    use wiremock::matchers::{header, method, path};
    const LITERAL: &str = "sk-literal-in-the-file-SENTINEL-90c3";
    let upstream = wiremock::MockServer::start().await;
    wiremock::Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", format!("Bearer {LITERAL}").as_str()))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(json!({
            "id": "x", "object": "chat.completion", "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        })))
        .expect(1)
        .mount(&upstream)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        format!(
            "model_list:\n  - model_name: mini\n    litellm_params:\n      model: openai/gpt-4o-mini\n      api_base: {}/v1\n      api_key: {LITERAL}\n",
            upstream.uri()
        ),
    )
    .unwrap();
    let o = poolctl(&file, &["walk", "mini"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let text = out(&o);
    assert_eq!(
        text.matches("a literal API key in the file").count(),
        1,
        "{text}"
    );
    assert!(text.contains("config.yaml:6"), "{text}");
    let check = poolctl(&file, &["check"], &[]);
    let import = std::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(["import", "litellm"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", out(&check));
    assert!(
        out(&check).contains("os.environ/OPENAI_API_KEY"),
        "{}",
        out(&check)
    );
    assert!(
        out(&import).contains("api_key_env: LITELLM_KEY_OPENAI"),
        "{}",
        out(&import)
    );
    for o in [&o, &check, &import] {
        assert!(!out(o).contains(LITERAL), "the key leaked: {}", out(o));
    }
}

#[test]
fn import_prints_the_text_every_command_reads_and_exits_2_on_not_yaml() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "model_list: [\n").unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(["import", "litellm"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    let file = Path::new(DIR).join("repo-free-llm-gateway.yaml");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(["import", "litellm"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), import(&file).text);
    // The text is a pool config: it parses as one, once its keys are set.
    let keys: BTreeMap<&str, &str> = BTreeMap::new();
    let parsed =
        poolctl::config::pool::PoolConfig::parse(Path::new("pool.yaml"), &import(&file).text);
    assert!(parsed.is_ok(), "{parsed:?} {keys:?}");
}

/// Guards `import`'s exit code (README: "1 printed, with problems on stderr"): a file
/// none of whose deployments poolctl can call exited 0, and `check` blamed a `tiers`
/// key the file does not have. An unset key variable is said, and does not fail it.
#[test]
fn import_of_a_config_no_command_can_run_exits_1_and_an_unset_key_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let none = dir.path().join("none.yaml");
    std::fs::write(
        &none,
        "model_list:\n  - model_name: c\n    litellm_params:\n      model: bedrock/anthropic.claude\n",
    )
    .unwrap();
    let import = |file: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
            .args(["import", "litellm"])
            .arg(file)
            .env_remove("POOLCTL_IMPORT_UNSET_KEY")
            .output()
            .unwrap()
    };
    let o = import(&none);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        err.contains("none.yaml:1: field `model_list`: no deployment"),
        "{err}"
    );
    let check = poolctl(&none, &["check"], &[]);
    assert_eq!(check.status.code(), Some(1));
    assert!(!out(&check).contains("`tiers`"), "{}", out(&check));
    let unset = dir.path().join("unset.yaml");
    std::fs::write(
        &unset,
        "model_list:\n  - model_name: g\n    litellm_params:\n      model: openai/gpt-4o\n      api_key: os.environ/POOLCTL_IMPORT_UNSET_KEY\n",
    )
    .unwrap();
    let o = import(&unset);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        err.contains("warning: ") && err.contains("`POOLCTL_IMPORT_UNSET_KEY` is not set"),
        "{err}"
    );
}

/// A copy of `name` with every deployment poolctl calls on the loopback mock (its
/// prefix the mock provider; Azure's v1 API on the mock's `openai`), keys from one
/// variable, and no Redis (the copies run alone); the mock serves every route.
async fn loopback_copy(name: &str, dir: &Path) -> (MockServer, PathBuf, Vec<String>) {
    let text = std::fs::read_to_string(Path::new(DIR).join(name)).unwrap();
    let mut root: Value = serde_yaml::from_str(&text).unwrap();
    let mut routes: Vec<(String, Wire)> = Vec::new();
    let mut edits: Vec<(usize, String, String)> = Vec::new();
    let mut groups: Vec<String> = Vec::new();
    for (i, item) in root["model_list"].as_sequence().unwrap().iter().enumerate() {
        let model = item["litellm_params"]["model"]
            .as_str()
            .unwrap()
            .to_string();
        let mode = item["model_info"]["mode"].as_str().unwrap_or("chat");
        let (prefix, rest) = match model.split_once('/') {
            Some((p, r)) => (p.to_string(), r.to_string()),
            None if model.starts_with("claude") => ("anthropic".into(), model.clone()),
            None => ("openai".into(), model.clone()),
        };
        let known = [
            "openai",
            "azure",
            "anthropic",
            "gemini",
            "mistral",
            "groq",
            "cerebras",
            "openrouter",
            "zhipu",
            "together_ai",
            "xai",
        ];
        if !known.contains(&prefix.as_str()) || mode != "chat" {
            continue;
        }
        let (wire, mock_provider) = match prefix.as_str() {
            "anthropic" => (Wire::Anthropic, "anthropic".to_string()),
            "gemini" => (Wire::Gemini, "gemini".to_string()),
            "azure" => (Wire::OpenAi, "openai".to_string()),
            p => (Wire::OpenAi, p.to_string()),
        };
        routes.push((format!("{mock_provider}/{rest}"), wire));
        edits.push((i, prefix, mock_provider));
        let g = item["model_name"].as_str().unwrap().to_string();
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    routes.sort_by(|a, b| a.0.cmp(&b.0));
    routes.dedup_by(|a, b| a.0 == b.0);
    let mock = MockServer::start(
        ([127, 0, 0, 1], 0).into(),
        routes
            .iter()
            .map(|(r, wire)| MockRoute {
                route: Route::parse(r).unwrap(),
                wire: *wire,
                path: CallPath::Chat,
                replies: vec![ok("pong")],
                outage: None,
                record: false,
            })
            .collect(),
    )
    .await
    .unwrap();
    for (i, prefix, mock_provider) in edits {
        let base = match prefix.as_str() {
            "azure" => format!("http://{}", mock.addr()),
            "anthropic" => mock.base_url("anthropic", Wire::Anthropic),
            "gemini" => format!("{}/v1beta", mock.base_url("gemini", Wire::Gemini)),
            _ => mock.base_url(&mock_provider, Wire::OpenAi),
        };
        let params = root["model_list"][i]["litellm_params"]
            .as_mapping_mut()
            .unwrap();
        params.insert("api_base".into(), base.into());
        params.insert("api_key".into(), "os.environ/COPY_KEY".into());
    }
    if let Some(router) = root
        .get_mut("router_settings")
        .and_then(Value::as_mapping_mut)
    {
        router.retain(|k, _| !k.as_str().unwrap_or("").starts_with("redis_"));
    }
    let file = dir.join(name);
    std::fs::write(&file, serde_yaml::to_string(&root).unwrap()).unwrap();
    (mock, file, groups)
}

/// `check`, `probe`, `walk`, `serve` and `capacity` on a loopback copy of every real
/// config whose groups hold one deployment each, over real HTTP.
#[tokio::test(flavor = "multi_thread")]
async fn every_command_runs_on_a_loopback_copy_of_each_real_config() {
    let env = [
        ("COPY_KEY", UPSTREAM),
        ("LITELLM_MASTER_KEY", MASTER),
        ("AZURE_API_BASE", "http://127.0.0.1:9"),
        ("MLX_VLM_API_BASE", "http://127.0.0.1:9/v1"),
    ];
    for name in SINGLE {
        let dir = tempfile::tempdir().unwrap();
        let (_mock, file, groups) = loopback_copy(name, dir.path()).await;
        let run = |args: &[&str]| poolctl(&file, args, &env);
        let o = run(&["check"]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", out(&o));
        let o = run(&["probe"]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", out(&o));
        let o = run(&["walk", &groups[0]]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", out(&o));
        let o = run(&["capacity"]);
        assert_ne!(o.status.code(), Some(2), "{name}: {}", out(&o));
        let gw = gateway::start(&file, &[], &env).await;
        let r = reqwest::Client::new()
            .post(gw.url("/v1/chat/completions"))
            .bearer_auth(MASTER)
            .json(&json!({"model": groups[0], "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{name}");
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "pong", "{name}: {v}");
        let (_, stderr) = gw.stop().await;
        assert!(
            !stderr.contains(UPSTREAM) && !stderr.contains(MASTER),
            "{stderr}"
        );
    }
}

/// `serve` and `walk` report an unset key variable as `check` does: at the LiteLLM line
/// and field it came from (audit12 r5: no line, and the translation's
/// `providers.openai.api_key_env`).
#[test]
fn serve_and_walk_name_an_unset_key_variable_at_its_litellm_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "model_list:\n  - model_name: chat\n    litellm_params:\n      model: openai/m\n      api_base: http://127.0.0.1:9/v1\n      api_key: os.environ/POOLCTL_TEST_UNSET_KEY\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    for args in [
        vec!["serve", "--config", f, "--listen", "127.0.0.1:0"],
        vec!["walk", "chat", "--config", f],
        vec!["check", "--config", f],
    ] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_poolctl"))
            .args(&args)
            .env_remove("POOLCTL_TEST_UNSET_KEY")
            .output()
            .unwrap();
        // `check` prints its report on stdout; the others fail on stderr.
        let err =
            String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
        assert!(
            err.contains("config.yaml:6: field `model_list[0].litellm_params.api_key`")
                && err.contains("POOLCTL_TEST_UNSET_KEY"),
            "{args:?}: {err}"
        );
    }
}
