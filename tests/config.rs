//! The pool config as users write it: real files, the errors they get for mistakes, and
//! the resolution the CLI and router rely on.

use poolctl::classify::dialect::Dialect;
use poolctl::config::pool::{locate, locate_with, ConfigError, DialectSource, PoolConfig};
use poolctl::config::route::GroupStrategy;
use poolctl::core::vocab::{CallPath, Route, Wire};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tempfile::TempDir;

/// The example of spec/cli.md, verbatim.
const CLI_MD_EXAMPLE: &str = r#"providers:
  openai:
    wire: openai                     # openai (any OpenAI-compatible API) | anthropic | gemini
    base_url: https://api.openai.com/v1
    api_key_env: OPENAI_API_KEY      # the variable holding the key; keys never live in this file
    timeout_ms: 30000                # optional: whole non-streaming call
    first_token_timeout_ms: 15000    # optional: streams, headers to first visible token
    stream_idle_ms: 20000            # optional: streams, longest silence between chunks
    cooldown_ms: 60000               # optional, see decisions.md
  dashscope:
    wire: openai
    dialect: dashscope               # optional: whose error conventions apply; inferred from the host when absent
    base_url: https://dashscope.aliyuncs.com/compatible-mode/v1
    api_key_env: DASHSCOPE_API_KEY
tiers:
  high:
    - dashscope/qwen3.8-max
    - dashscope/qwen-flash-2025-07-28
  embed:
    - { route: openai/text-embedding-3-small, path: embed }
policies:                            # optional policy cards, one per workflow (seed 001)
  customer-support-answer:
    tier: high
    max_total_attempts: 3
    max_elapsed_ms: 9000
state: .poolctl/state.db             # optional: where health survives restarts; default embedded file store
"#;

/// A key value that must never show up in any output.
const SENTINEL: &str = "sk-SENTINEL-never-print-me";

fn write(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn load(text: &str) -> Result<PoolConfig, ConfigError> {
    let dir = TempDir::new().unwrap();
    PoolConfig::load(&write(&dir, "pool.yaml", text))
}

/// The error as a user sees it, checking it is a located `YamlError`.
fn yaml_err(text: &str) -> (String, Option<usize>, String) {
    match load(text).unwrap_err() {
        ConfigError::Yaml(e) => (e.to_string(), e.line, e.field),
        other => panic!("expected a YAML error, got {other:?}"),
    }
}

fn keys(var: &str) -> Option<String> {
    Some(format!("{SENTINEL}-{var}"))
}

fn route(s: &str) -> Route {
    Route::parse(s).unwrap()
}

#[test]
fn the_cli_md_example_parses() {
    let c = load(CLI_MD_EXAMPLE).unwrap();
    assert_eq!(c.providers.len(), 2);
    assert_eq!(c.providers["openai"].timeout_ms, Some(30_000));
    assert_eq!(c.providers["dashscope"].dialect, Some(Dialect::Dashscope));
    let high = c.tier_entries("high").unwrap();
    assert_eq!(high[0].route, route("dashscope/qwen3.8-max"));
    assert_eq!(high[0].path, CallPath::Chat);
    let embed = c.tier_entries("embed").unwrap();
    assert_eq!(embed[0].route, route("openai/text-embedding-3-small"));
    assert_eq!(embed[0].path, CallPath::Embed);
    let card = &c.policies["customer-support-answer"];
    assert_eq!(card.tier.as_deref(), Some("high"));
    assert_eq!(card.max_total_attempts, Some(3));
    assert_eq!(card.max_elapsed_ms, 9_000);
    assert_eq!(c.state.as_deref(), Some(Path::new(".poolctl/state.db")));
    // Config order, which within a tier is chain order: never alphabetical.
    assert_eq!(
        c.route_names(),
        vec![
            route("dashscope/qwen3.8-max"),
            route("dashscope/qwen-flash-2025-07-28"),
            route("openai/text-embedding-3-small"),
        ]
    );
}

#[test]
fn a_typo_in_a_field_names_file_line_and_the_nearest_field() {
    let text = "providers:\n  openai:\n    base_url: https://api.openai.com/v1\n    api_key_envv: OPENAI_API_KEY\ntiers:\n  high: [openai/gpt-4o]\n";
    let (shown, line, field) = yaml_err(text);
    assert_eq!(line, Some(4), "{shown}");
    assert!(field.starts_with("providers.openai"), "{field}");
    assert!(shown.contains("pool.yaml:4"), "{shown}");
    assert!(shown.contains("did you mean `api_key_env`"), "{shown}");
}

#[test]
fn a_typo_in_a_wire_or_dialect_suggests_the_word() {
    let base = "providers:\n  p:\n    base_url: https://x.example/v1\n    api_key_env: K\n";
    let (shown, line, _) = yaml_err(&format!("{base}    wire: antrhopic\ntiers:\n  t: [p/m]\n"));
    assert_eq!(line, Some(5), "{shown}");
    assert!(shown.contains("did you mean `anthropic`"), "{shown}");
    let (shown, _, _) = yaml_err(&format!(
        "{base}    dialect: dashcsope\ntiers:\n  t: [p/m]\n"
    ));
    assert!(shown.contains("did you mean `dashscope`"), "{shown}");
}

#[test]
fn a_tier_naming_an_unknown_provider_names_tier_index_and_suggests() {
    let text = CLI_MD_EXAMPLE.replace(
        "    - dashscope/qwen-flash-2025-07-28",
        "    - dashscoep/qwen-flash-2025-07-28",
    );
    let (shown, line, field) = yaml_err(&text);
    assert_eq!(field, "tiers.high[1]");
    assert_eq!(line, Some(18), "{shown}");
    assert!(
        shown.contains("pool.yaml:18: field `tiers.high[1]`"),
        "{shown}"
    );
    assert!(shown.contains("`dashscoep`"), "{shown}");
    assert!(shown.contains("did you mean `dashscope`"), "{shown}");
}

#[test]
fn a_route_twice_in_one_tier_is_an_error_at_the_second() {
    let text = CLI_MD_EXAMPLE.replace(
        "    - dashscope/qwen-flash-2025-07-28",
        "    - dashscope/qwen-flash-2025-07-28\n    - dashscope/qwen3.8-max",
    );
    let (shown, line, field) = yaml_err(&text);
    assert_eq!(field, "tiers.high[2]", "{shown}");
    assert_eq!(line, Some(19), "{shown}");
    assert!(shown.contains("twice"), "{shown}");
}

#[test]
fn the_same_route_in_two_tiers_is_fine() {
    let text = "providers:\n  p:\n    base_url: http://127.0.0.1:9/v1\n    api_key_env: K\ntiers:\n  a: [p/m, p/n]\n  b: [p/n, p/m]\n";
    let c = load(text).unwrap();
    assert_eq!(c.route_names(), vec![route("p/m"), route("p/n")]);
}

#[test]
fn empty_tiers_and_bad_entries_are_errors() {
    let head = "providers:\n  p:\n    base_url: http://127.0.0.1:9/v1\n    api_key_env: K\n";
    let (shown, line, field) = yaml_err(&format!("{head}tiers:\n  a: [p/m]\n  b: []\n"));
    assert_eq!((field.as_str(), line), ("tiers.b", Some(7)), "{shown}");

    let (shown, _, _) = yaml_err(&format!("{head}tiers: {{}}\n"));
    assert!(shown.contains("at least one tier"), "{shown}");

    let (shown, line, _) = yaml_err(&format!("{head}tiers:\n  a:\n    - no-slash\n"));
    assert_eq!(line, Some(7), "{shown}");
    assert!(shown.contains("provider/model"), "{shown}");

    let (shown, line, field) = yaml_err(&format!(
        "{head}tiers:\n  a:\n    - {{ route: p/m, paht: embed }}\n"
    ));
    assert_eq!(line, Some(7), "{shown}");
    assert!(field.starts_with("tiers.a[0]"), "{field}");
    assert!(shown.contains("did you mean `path`"), "{shown}");

    let (shown, _, _) = yaml_err(&format!(
        "{head}tiers:\n  a:\n    - {{ route: p/m, path: embedd }}\n"
    ));
    assert!(shown.contains("did you mean `embed`"), "{shown}");

    let (shown, _, _) = yaml_err(&format!("{head}tiers:\n  a:\n    - 42\n"));
    assert!(
        shown.contains("expected a route `provider/model`, `{ route, path }` or `{ group: [..] }`"),
        "{shown}"
    );
}

#[test]
fn base_url_must_be_http() {
    for url in ["ftp://x.example/v1", "api.openai.com/v1", "https://"] {
        let text = format!(
            "providers:\n  p:\n    api_key_env: K\n    base_url: {url}\ntiers:\n  t: [p/m]\n"
        );
        let (shown, line, field) = yaml_err(&text);
        assert_eq!(field, "providers.p.base_url", "{shown}");
        assert_eq!(line, Some(4), "{shown}");
    }
}

#[test]
fn a_zero_deadline_is_an_error() {
    let text = "providers:\n  p:\n    api_key_env: K\n    base_url: http://127.0.0.1:9\n    stream_idle_ms: 0\ntiers:\n  t: [p/m]\n";
    let (shown, line, field) = yaml_err(text);
    assert_eq!(
        (field.as_str(), line),
        ("providers.p.stream_idle_ms", Some(5)),
        "{shown}"
    );
}

#[test]
fn a_policy_naming_an_unknown_tier_is_an_error() {
    let text = CLI_MD_EXAMPLE.replace("    tier: high", "    tier: hgih");
    let (shown, line, field) = yaml_err(&text);
    assert_eq!(field, "policies.customer-support-answer.tier");
    assert_eq!(line, Some(23), "{shown}");
    assert!(shown.contains("did you mean `high`"), "{shown}");
}

#[test]
fn policy_fallback_routes_must_be_routes_of_its_tier() {
    let ok = CLI_MD_EXAMPLE.replace(
        "    max_total_attempts: 3",
        "    max_total_attempts: 3\n    fallback_routes: [dashscope/qwen-flash-2025-07-28]",
    );
    load(&ok).unwrap();

    // Of another tier: the card's router walks `high` alone, so it could never be used.
    let other = ok.replace(
        "[dashscope/qwen-flash-2025-07-28]",
        "[openai/text-embedding-3-small]",
    );
    let (shown, _, field) = yaml_err(&other);
    assert_eq!(field, "policies.customer-support-answer.fallback_routes[0]");
    assert!(shown.contains("not in tier `high`"), "{shown}");

    let typo = ok.replace(
        "[dashscope/qwen-flash-2025-07-28]",
        "[dashscope/qwen-flash-2025-07-29]",
    );
    let (shown, line, _) = yaml_err(&typo);
    assert_eq!(line, Some(25), "{shown}");
    assert!(
        shown.contains("did you mean `dashscope/qwen-flash-2025-07-28`"),
        "{shown}"
    );
}

#[test]
fn a_missing_key_variable_names_the_file_line_and_field_like_any_config_error() {
    let dir = TempDir::new().unwrap();
    let file = write(&dir, "pool.yaml", CLI_MD_EXAMPLE);
    let c = PoolConfig::load(&file).unwrap();
    let err = c.endpoint("dashscope", &|_| None).unwrap_err();
    assert!(
        matches!(&err, ConfigError::MissingKey { line: Some(14), .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "{}:14: field `providers.dashscope.api_key_env`: environment variable `DASHSCOPE_API_KEY` is not set or is empty (provider `dashscope`)",
            file.display()
        )
    );
}

#[test]
fn malformed_yaml_is_reported_as_not_yaml_with_its_line_not_as_a_field_error() {
    // A flow map left open: typed parsing alone reports "unknown variant `openai q`".
    let text = "providers:\n  p: {wire: openai\n  q: \"unterminated\ntiers: x\n";
    let (shown, line, field) = yaml_err(text);
    assert!(shown.contains("not valid YAML"), "{shown}");
    assert!(line.is_some(), "{shown}");
    assert_eq!(field, "", "{shown}");
}

/// Guards a key with a line break (a mounted secret file): it was accepted, and every
/// call then failed as a network error ("failed to parse header value") that named
/// neither the variable nor the cause.
#[test]
fn a_key_with_a_line_break_is_a_config_error_naming_the_variable() {
    let c = load(CLI_MD_EXAMPLE).unwrap();
    let with_newline = |_: &str| Some("sk-NEWLINE-secret-0042\n".to_string());
    let err = c.endpoint("openai", &with_newline).unwrap_err();
    assert!(matches!(&err, ConfigError::UnsendableKey { var, .. } if var == "OPENAI_API_KEY"));
    let shown = err.to_string();
    assert!(
        shown.contains("environment variable `OPENAI_API_KEY` holds a line break"),
        "{shown}"
    );
    assert!(!shown.contains("NEWLINE-secret"), "{shown}");
}

#[test]
fn missing_key_names_the_variable_and_no_key_is_ever_shown() {
    let c = load(CLI_MD_EXAMPLE).unwrap();
    let only_openai = |var: &str| (var == "OPENAI_API_KEY").then(|| keys(var).unwrap());

    let err = c.endpoint("dashscope", &only_openai).unwrap_err();
    assert!(matches!(&err, ConfigError::MissingKey { var, .. } if var == "DASHSCOPE_API_KEY"));
    let shown = err.to_string();
    assert!(
        shown.ends_with(": field `providers.dashscope.api_key_env`: environment variable `DASHSCOPE_API_KEY` is not set or is empty (provider `dashscope`)"),
        "{shown}"
    );
    let empty = |_: &str| Some(String::new());
    assert!(matches!(
        c.endpoint("openai", &empty),
        Err(ConfigError::MissingKey { .. })
    ));

    let mut shown = vec![format!("{c:?}")];
    for err in [
        c.tier("high", &only_openai).unwrap_err(),
        c.tier("hihg", &only_openai).unwrap_err(),
        c.endpoint("nope", &only_openai).unwrap_err(),
        c.find_route("openai/nope").unwrap_err(),
    ] {
        shown.push(err.to_string());
        shown.push(format!("{err:?}"));
    }
    let endpoint = c.endpoint("openai", &only_openai).unwrap();
    assert!(endpoint.api_key.expose().starts_with(SENTINEL));
    shown.push(format!("{endpoint:?}"));
    shown.push(format!("{:?}", c.tier("embed", &only_openai).unwrap()));
    for s in shown {
        assert!(!s.contains(SENTINEL), "a key leaked: {s}");
    }
}

#[test]
fn endpoint_applies_the_file_and_the_defaults() {
    let text = "providers:\n  a:\n    wire: anthropic\n    base_url: https://api.anthropic.com\n    api_key_env: A\n    cooldown_ms: 7000\n    transient_cooldown_ms: 900\n  b:\n    base_url: http://127.0.0.1:8080/v1\n    api_key_env: B\ntiers:\n  t: [a/claude, b/m]\n";
    let c = load(text).unwrap();
    let a = c.endpoint("a", &keys).unwrap();
    assert_eq!((a.wire, a.dialect), (Wire::Anthropic, Dialect::Anthropic));
    assert_eq!(a.base_url, "https://api.anthropic.com");
    // Cooldowns are routing policy: they sit on the tier's routes, not the endpoint.
    let tier = c.tier("t", &keys).unwrap();
    assert_eq!(tier.routes[0].policy.cooldowns.cooldown_ms, Some(7_000));
    assert_eq!(tier.routes[0].policy.cooldowns.transient_cooldown_ms, 900);
    let b = c.endpoint("b", &keys).unwrap();
    assert_eq!(b.wire, Wire::OpenAi);
    assert_eq!(b.timeout_ms, poolctl::wire::DEFAULT_TIMEOUT_MS);
    assert_eq!(
        b.first_token_timeout_ms,
        poolctl::wire::DEFAULT_FIRST_TOKEN_TIMEOUT_MS
    );
    assert_eq!(b.stream_idle_ms, poolctl::wire::DEFAULT_STREAM_IDLE_MS);
    assert_eq!(
        tier.routes[1].policy.cooldowns,
        poolctl::policy::health::Cooldowns::default()
    );
}

#[test]
fn dialect_is_explicit_else_inferred_from_the_host_else_the_wires() {
    let text = "providers:\n  ds:\n    base_url: https://dashscope.aliyuncs.com/compatible-mode/v1\n    api_key_env: K\n  mock:\n    base_url: http://127.0.0.1:8080/v1\n    api_key_env: K\n  mock_ant:\n    wire: anthropic\n    base_url: http://localhost:9000\n    api_key_env: K\n  gw:\n    dialect: deepseek\n    base_url: http://127.0.0.1:8081/v1\n    api_key_env: K\ntiers:\n  t: [ds/m, mock/m, mock_ant/m, gw/m]\n";
    let c = load(text).unwrap();
    let of = |p: &str| c.dialect_of(p).unwrap();
    assert_eq!(of("ds"), (Dialect::Dashscope, DialectSource::Inferred));
    assert_eq!(of("mock"), (Dialect::Openai, DialectSource::WireDefault));
    assert_eq!(
        of("mock_ant"),
        (Dialect::Anthropic, DialectSource::WireDefault)
    );
    assert_eq!(of("gw"), (Dialect::Deepseek, DialectSource::Explicit));
    assert_eq!(c.endpoint("gw", &keys).unwrap().dialect, Dialect::Deepseek);
    assert!(matches!(
        c.dialect_of("dss"),
        Err(ConfigError::UnknownProvider { nearest: Some(n), .. }) if n == "ds"
    ));
}

#[test]
fn a_tier_shares_one_endpoint_per_provider() {
    let text = "providers:\n  a:\n    base_url: http://127.0.0.1:1/v1\n    api_key_env: A\n  b:\n    base_url: http://127.0.0.1:2/v1\n    api_key_env: B\ntiers:\n  t: [a/x, b/y, a/z]\n";
    let c = load(text).unwrap();
    let tier = c.tier("t", &keys).unwrap();
    assert_eq!(tier.name, "t");
    let routes: Vec<&str> = tier.routes.iter().map(|r| r.route.as_str()).collect();
    assert_eq!(routes, ["a/x", "b/y", "a/z"]);
    assert!(Arc::ptr_eq(
        &tier.routes[0].endpoint,
        &tier.routes[2].endpoint
    ));
    assert!(!Arc::ptr_eq(
        &tier.routes[0].endpoint,
        &tier.routes[1].endpoint
    ));
    assert_eq!(tier.routes[1].endpoint.provider, "b");
}

#[test]
fn unknown_tiers_and_routes_suggest_the_nearest() {
    let c = load(CLI_MD_EXAMPLE).unwrap();
    let err = c.tier("hihg", &keys).unwrap_err();
    assert_eq!(err.to_string(), "unknown tier `hihg`; did you mean `high`?");
    assert!(matches!(
        c.tier_entries("zzz"),
        Err(ConfigError::UnknownTier { nearest: None, .. })
    ));

    assert_eq!(
        c.find_route("dashscope/qwen3.8-max").unwrap(),
        route("dashscope/qwen3.8-max")
    );
    let err = c.find_route("dashscope/qwen3.8-mx").unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown route `dashscope/qwen3.8-mx`; did you mean `dashscope/qwen3.8-max`?"
    );
    assert!(matches!(
        c.find_route("not a route"),
        Err(ConfigError::UnknownRoute { .. })
    ));
}

#[test]
fn locate_prefers_the_flag_then_the_variable_then_pool_yaml() {
    let flag = Path::new("/etc/poolctl/pool.yaml");
    assert_eq!(locate(Some(flag)), flag);
    assert_eq!(locate_with(Some(flag), Some(OsStr::new("env.yaml"))), flag);
    assert_eq!(
        locate_with(None, Some(OsStr::new("env.yaml"))),
        Path::new("env.yaml")
    );
    assert_eq!(locate_with(None, None), Path::new("pool.yaml"));
}

#[test]
fn state_path_is_relative_to_the_config_file() {
    let dir = TempDir::new().unwrap();
    let minimal = "providers:\n  p:\n    base_url: http://127.0.0.1:9\n    api_key_env: K\ntiers:\n  t: [p/m]\n";
    let file = write(&dir, "pool.yaml", minimal);
    let c = PoolConfig::load(&file).unwrap();
    assert_eq!(c.state_path(), dir.path().join(".poolctl/state.db"));

    let file = write(
        &dir,
        "rel.yaml",
        &format!("{minimal}state: data/health.db\n"),
    );
    let c = PoolConfig::load(&file).unwrap();
    assert_eq!(c.state_path(), dir.path().join("data/health.db"));

    let abs = dir.path().join("elsewhere.db");
    let file = write(
        &dir,
        "abs.yaml",
        &format!("{minimal}state: {}\n", abs.display()),
    );
    assert_eq!(PoolConfig::load(&file).unwrap().state_path(), abs);

    let bare = PoolConfig::parse(Path::new("pool.yaml"), minimal).unwrap();
    assert_eq!(bare.state_path(), Path::new(".poolctl/state.db"));
}

#[test]
fn broken_files_are_errors_not_panics() {
    let cases = [
        "",
        "   \n",
        "# only a comment\n",
        "providers: [unclosed\n",
        "providers:\n  p:\n\tbase_url: x\n",
        "~\n",
        "- a\n- b\n",
        "providers: {}\n",
        "tiers:\n  t: [p/m]\n",
        "providers:\ntiers:\n",
        "providers: {}\ntiers: {}\nextra: 1\n",
    ];
    for text in cases {
        let err = load(text).unwrap_err();
        assert!(err.to_string().contains("pool.yaml"), "{text:?}: {err}");
    }
    let err = PoolConfig::load(Path::new("/nonexistent/pool.yaml")).unwrap_err();
    assert!(err.to_string().contains("cannot read"), "{err}");
}

#[test]
fn an_empty_policies_section_loads() {
    let text = "providers:\n  p:\n    base_url: http://127.0.0.1:9\n    api_key_env: K\ntiers:\n  t: [p/m]\npolicies:\n  # none yet\n";
    assert!(load(text).unwrap().policies.is_empty());
}

/// `check` knows every dialect: each name loads explicitly, each real host infers its
/// dialect (no "cannot be inferred" warning), and a typo names the nearest dialect and
/// the line it is on.
#[test]
fn check_knows_every_dialect_by_name_and_by_host() {
    let hosts = [
        ("volcengine", "https://ark.cn-beijing.volces.com/api/v3"),
        ("minimax", "https://api.minimaxi.com/v1"),
        ("qianfan", "https://qianfan.baidubce.com/v2"),
        ("siliconflow", "https://api.siliconflow.cn/v1"),
        ("hunyuan", "https://api.hunyuan.cloud.tencent.com/v1"),
        ("xai", "https://api.x.ai/v1"),
        ("together", "https://api.together.xyz/v1"),
        ("fireworks", "https://api.fireworks.ai/inference/v1"),
    ];
    let mut text = String::from("providers:\n");
    let mut routes = Vec::new();
    for d in Dialect::ALL {
        text.push_str(&format!(
            "  named_{d}:\n    dialect: {d}\n    base_url: http://127.0.0.1:9/v1\n    api_key_env: K\n"
        ));
        routes.push(format!("named_{d}/m"));
    }
    for (name, url) in hosts {
        text.push_str(&format!(
            "  host_{name}:\n    base_url: {url}\n    api_key_env: K\n"
        ));
        routes.push(format!("host_{name}/m"));
    }
    text.push_str(&format!("tiers:\n  t: [{}]\n", routes.join(", ")));
    let c = load(&text).unwrap();
    for d in Dialect::ALL {
        assert_eq!(
            c.dialect_of(&format!("named_{d}")).unwrap(),
            (*d, DialectSource::Explicit)
        );
    }
    for (name, _) in hosts {
        let want = Dialect::parse(name).unwrap();
        assert_eq!(
            c.dialect_of(&format!("host_{name}")).unwrap(),
            (want, DialectSource::Inferred)
        );
    }
    let f = poolctl::cli::check::findings(&c, &|_| Some("set".to_string()));
    assert!(f.errors.is_empty(), "{:?}", f.errors);
    assert!(
        !f.warnings
            .iter()
            .any(|w| w.message.contains("cannot be inferred")),
        "{:?}",
        f.warnings
    );

    let typo = "providers:\n  p:\n    base_url: https://x.example/v1\n    api_key_env: K\n    dialect: volcengin\ntiers:\n  t: [p/m]\n";
    let (shown, line, field) = yaml_err(typo);
    assert_eq!(line, Some(5), "{shown}");
    assert!(field.ends_with("dialect"), "{field}");
    assert!(shown.contains("did you mean `volcengine`?"), "{shown}");
    assert!(
        shown.contains("fireworks"),
        "the known names are listed: {shown}"
    );
}

/// The v2 config additions of spec/cli.md: limits per route or provider, headroom and
/// the interactive floor, a card's admission fields.
const V2_ADMISSION: &str = r#"providers:
  openai: { base_url: "https://api.openai.com/v1", api_key_env: OPENAI_API_KEY }
  anthropic: { wire: anthropic, base_url: "https://api.anthropic.com", api_key_env: ANTHROPIC_API_KEY }
tiers:
  high: [openai/gpt-4o, anthropic/claude-sonnet-4-20250514]
  small: [openai/gpt-4o-mini]
limits:
  openai/gpt-4o: { rpm: 500, tpm: 300000 }
  anthropic: { rpm: 50, itpm: 30000, otpm: 8000 }
headroom: 0.9
interactive_floor: 0.2
policies:
  support-answer:
    tier: high
    max_queue_ms: 2000
    degrade_tier: small
"#;

#[test]
fn the_cli_md_v2_admission_example_parses() {
    let c = load(V2_ADMISSION).expect("v2 example loads");
    let a = c.admission();
    assert_eq!(a.limits.len(), 2);
    assert_eq!(a.limits["anthropic"].itpm, Some(30_000));
    assert_eq!(a.headroom, 0.9);
    let card = &c.policies["support-answer"];
    assert_eq!(card.max_queue_ms, 2_000);
    assert_eq!(card.degrade_tier.as_deref(), Some("small"));
}

#[test]
fn admission_typos_name_the_field_and_the_nearest_name() {
    let bad = V2_ADMISSION.replace("  anthropic: { rpm", "  antropic: { rpm");
    let err = load(&bad).unwrap_err().to_string();
    assert!(
        err.contains("limits.antropic") && err.contains("anthropic"),
        "{err}"
    );
    let bad = V2_ADMISSION.replace("degrade_tier: small", "degrade_tier: smal");
    let err = load(&bad).unwrap_err().to_string();
    assert!(
        err.contains("degrade_tier") && err.contains("small"),
        "{err}"
    );
    let bad = V2_ADMISSION.replace("headroom: 0.9", "headroom: 1.5");
    let err = load(&bad).unwrap_err().to_string();
    assert!(err.contains("headroom") && err.contains("(0, 1]"), "{err}");
    let bad = V2_ADMISSION.replace("rpm: 500, tpm: 300000", "rpn: 500");
    assert!(load(&bad).unwrap_err().to_string().contains("rpn"));
}

#[test]
fn models_of_routes_listed_out_of_alphabetical_order_are_found() {
    // Regression: config order is not sorted order, and a binary search over it missed
    // `a/y` and reported it "in no tier".
    let text = r#"providers:
  a: { base_url: "http://127.0.0.1:9/v1", api_key_env: K }
  b: { base_url: "http://127.0.0.1:9/v1", api_key_env: K }
  c: { base_url: "http://127.0.0.1:9/v1", api_key_env: K }
tiers:
  t: [b/x, c/z, a/y]
models:
  a/y: { context_window: 1000 }
  b/x: { context_window: 1000 }
  c/z: { context_window: 1000 }
"#;
    load(text).expect("every model names a route of the tier");
}

#[test]
fn a_wrong_type_says_what_was_expected_in_plain_words_not_rust_type_names() {
    for (from, to, want) in [
        ("timeout_ms: 30000", "timeout_ms: fast", "expected a whole number, 0 or more"),
        ("max_total_attempts: 3", "max_total_attempts: -1", "expected a whole number from 0 to 4294967295"),
        ("  dashscope:\n    wire: openai\n    dialect: dashscope               # optional: whose error conventions apply; inferred from the host when absent\n    base_url: https://dashscope.aliyuncs.com/compatible-mode/v1\n    api_key_env: DASHSCOPE_API_KEY\n", "  dashscope: [1, 2]\n", "expected a provider: a map with `wire`, `base_url` and `api_key_env`"),
    ] {
        let text = CLI_MD_EXAMPLE.replace(from, to);
        assert_ne!(text, CLI_MD_EXAMPLE, "{from}");
        let (shown, line, _) = yaml_err(&text);
        assert!(shown.contains(want), "{shown}");
        assert!(line.is_some(), "{shown}");
        for rust in ["u64", "u32", "struct"] {
            assert!(!shown.contains(&format!("expected {rust}")), "{shown}");
        }
    }
}

#[test]
fn a_duplicate_provider_or_tier_is_an_error_never_a_silent_shadow() {
    for (what, text) in [
        (
            "provider",
            CLI_MD_EXAMPLE.replace(
                "  dashscope:\n    wire: openai\n",
                "  openai:\n    wire: openai\n",
            ),
        ),
        ("tier", CLI_MD_EXAMPLE.replace("  embed:\n", "  high:\n")),
    ] {
        let (shown, line, _) = yaml_err(&text);
        assert!(shown.contains("not valid YAML"), "{what}: {shown}");
        assert!(shown.contains("duplicate"), "{what}: {shown}");
        assert!(line.is_some(), "{what}: {shown}");
    }
}

const GROUPS: &str = r#"providers:
  azure-eu:
    base_url: http://127.0.0.1:9/v1
    api_key_env: K
    dialect: azure
  azure-us:
    base_url: http://127.0.0.1:9/v1
    api_key_env: K
    dialect: azure
  backup:
    base_url: http://127.0.0.1:9/v1
    api_key_env: K
limits:
  azure-eu/gpt-4o: { rpm: 300 }
  azure-us: { rpm: 100 }
tiers:
  high:
    - group: [azure-eu/gpt-4o, azure-us/gpt-4o]
    - backup/mini
    - group: [azure-eu/gpt-4o-mini, azure-us/gpt-4o-mini]
      weights: [1, 3]
      strategy: least_busy
  embed:
    - { group: [azure-eu/emb, azure-us/emb, backup/emb], path: embed }
"#;

#[test]
fn a_group_step_is_its_members_in_turn_with_weights_as_written_else_by_rpm_else_equal() {
    let c = load(GROUPS).unwrap();
    let high = c.tier_entries("high").unwrap();
    let shown: Vec<(&str, usize, Option<usize>)> = high
        .iter()
        .map(|e| (e.route.as_str(), e.step, e.group))
        .collect();
    assert_eq!(
        shown,
        vec![
            ("azure-eu/gpt-4o", 0, Some(0)),
            ("azure-us/gpt-4o", 0, Some(0)),
            ("backup/mini", 1, None),
            ("azure-eu/gpt-4o-mini", 2, Some(1)),
            ("azure-us/gpt-4o-mini", 2, Some(1)),
        ]
    );
    let tier = c.tier("high", &keys).unwrap();
    assert_eq!(tier.routes.len(), 5);
    let groups: Vec<(usize, Vec<f64>, GroupStrategy)> = tier
        .groups
        .iter()
        .map(|g| (g.start, g.weights.clone(), g.strategy))
        .collect();
    // The first group's weights are the rpm limits: the route's own, else its provider's.
    assert_eq!(
        groups,
        vec![
            (0, vec![300.0, 100.0], GroupStrategy::Weighted),
            (3, vec![1.0, 3.0], GroupStrategy::LeastBusy),
        ]
    );
    assert!(tier.in_first_step(1) && !tier.in_first_step(2) && !tier.in_first_step(3));
    assert_eq!(tier.group_of(4).map(|g| g.start), Some(3));
    assert!(tier.group_of(2).is_none());
    // A member without an rpm limit: equal weights. A group's `path` is its members'.
    let embed = c.tier("embed", &keys).unwrap();
    assert_eq!(embed.groups[0].weights, vec![1.0, 1.0, 1.0]);
    assert_eq!(embed.path, CallPath::Embed);
    assert!(c
        .tier_entries("embed")
        .unwrap()
        .iter()
        .all(|e| e.path == CallPath::Embed));
}

#[test]
fn a_bad_group_is_a_located_error_naming_the_member_or_the_weight() {
    for (from, to, field, says) in [
        (
            "[azure-eu/gpt-4o, azure-us/gpt-4o]",
            "[]",
            "tiers.high[0].group",
            "at least one route",
        ),
        (
            "[azure-eu/gpt-4o, azure-us/gpt-4o]",
            "[azure-eu/gpt-4o, azure-eu/gpt-4o]",
            "tiers.high[0].group[1]",
            "twice in this group",
        ),
        (
            "[azure-eu/gpt-4o, azure-us/gpt-4o]",
            "[azure-eu/gpt-4o, azure-uk/gpt-4o]",
            "tiers.high[0].group[1]",
            "not under `providers`",
        ),
        (
            "weights: [1, 3]",
            "weights: [1]",
            "tiers.high[2].weights",
            "1 weight(s) for 2",
        ),
        (
            "weights: [1, 3]",
            "weights: [1, -3]",
            "tiers.high[2].weights[1]",
            "not above zero",
        ),
        (
            "weights: [1, 3]",
            "weights: [0, 3]",
            "tiers.high[2].weights[0]",
            "not above zero",
        ),
        (
            "- backup/mini",
            "- { route: backup/mini, strategy: least_busy }",
            "tiers.high[1]",
            "belong to a `group:`",
        ),
        (
            "strategy: least_busy",
            "strategy: busiest",
            "tiers.high[2].strategy",
            "least_busy",
        ),
        // A route in a group and again as a step of the same tier.
        (
            "- backup/mini",
            "- azure-us/gpt-4o",
            "tiers.high[1]",
            "twice in this tier (first at [0].group[1])",
        ),
    ] {
        assert!(GROUPS.contains(from), "{from}");
        let (shown, line, got) = yaml_err(&GROUPS.replacen(from, to, 1));
        assert_eq!(got, field, "{shown}");
        assert!(line.is_some(), "{shown}");
        assert!(shown.contains(says), "{says}: {shown}");
    }
}
