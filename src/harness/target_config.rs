//! The config that points a gateway at a suite's mocks (`poolctl mock --write-config`,
//! `chaos --target-exec`), in the gateway's own format:
//!
//! - `pool`: poolctl's pool config; each scenario a tier, its policy card a workflow
//!   of the same name, its `limits:` and `models:` renamed with its routes;
//! - `litellm`: a LiteLLM proxy config; each chain step a model group, the chain's
//!   order given by `router_settings.fallbacks`;
//! - `portkey`: one Portkey config object per scenario (a `fallback` strategy over the
//!   chain's targets), sent as the `x-portkey-config` header, since Portkey's gateway
//!   reads no config file.
//!
//! Pure text from the scenarios and the mock's address: the runner computes the same
//! names the file holds.

use super::scenario::{ChainEntry, Scenario};
use super::suite_mock::Naming;
use crate::core::vocab::{CallPath, Route, Wire};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;

/// The variable the written configs name for the mocks' key; the mocks accept any
/// non-empty key.
pub const MOCK_KEY_ENV: &str = "POOLCTL_MOCK_KEY";

/// The client token a written LiteLLM config asks for (LiteLLM's proxy refuses to
/// start without a master key); `chaos --target-exec` sends it when no
/// `--target-token` is given. It guards a throwaway loopback gateway, not a secret.
pub const LITELLM_MASTER_KEY: &str = "sk-poolctl-chaos-0f1e2d3c4b5a69788796a5b4c3d2e1f0";

/// A gateway's config format (`--config-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConfigFormat {
    #[default]
    Pool,
    Litellm,
    Portkey,
}

impl ConfigFormat {
    pub const WORDS: [&'static str; 3] = ["pool", "litellm", "portkey"];

    pub fn parse(word: &str) -> Option<ConfigFormat> {
        match word {
            "pool" => Some(ConfigFormat::Pool),
            "litellm" => Some(ConfigFormat::Litellm),
            "portkey" => Some(ConfigFormat::Portkey),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        Self::WORDS[self as usize]
    }
}

/// The `base_url` a provider is served under on the mock at `addr`, in the wire's
/// convention: OpenAI-compatible bases end in `/v1`; Anthropic and Gemini bases are
/// the host.
pub fn base_url(addr: SocketAddr, provider: &str, wire: Wire) -> String {
    match wire {
        Wire::OpenAi | Wire::Responses => format!("http://{addr}/{provider}/v1"),
        Wire::Anthropic | Wire::Gemini => format!("http://{addr}/{provider}"),
    }
}

/// The `model` a client sends to reach `scenario` on a target: its workflow and its
/// tier share one name.
pub fn target_model(scenario: &Scenario, naming: Naming) -> String {
    match naming {
        Naming::AsWritten => scenario.name.clone(),
        Naming::Tagged => super::suite_mock::tag(&scenario.name),
    }
}

/// A name as a YAML key or value: bare when it is plain, else a JSON string (which
/// YAML reads as a quoted scalar), so a scenario named `x: y #z` stays one key.
fn key(name: &str) -> String {
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '~' | '/'));
    if plain {
        name.to_string()
    } else {
        Value::from(name).to_string()
    }
}

/// `text` on one comment line.
fn comment(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// `headroom` and `interactive_floor` are one per pool config: the value most of the
/// suite's admission scenarios use (ties: the smaller). A scenario that wants another
/// cannot be compared on a pool target (`globals_differ`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Globals {
    pub headroom: Option<f64>,
    pub interactive_floor: Option<f64>,
}

impl Globals {
    pub fn of(scenarios: &[Scenario]) -> Globals {
        fn most(values: impl Iterator<Item = f64>) -> Option<f64> {
            let mut counts: Vec<(f64, usize)> = Vec::new();
            for v in values {
                match counts.iter_mut().find(|(x, _)| *x == v) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((v, 1)),
                }
            }
            counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.total_cmp(&b.0)));
            counts.first().map(|(v, _)| *v)
        }
        use crate::admission::bucket::{DEFAULT_HEADROOM, DEFAULT_INTERACTIVE_FLOOR};
        let admission = || scenarios.iter().filter(|s| !s.limits.is_empty());
        Globals {
            headroom: most(admission().map(|s| s.headroom.unwrap_or(DEFAULT_HEADROOM))),
            interactive_floor: most(
                admission().map(|s| s.interactive_floor.unwrap_or(DEFAULT_INTERACTIVE_FLOOR)),
            ),
        }
    }

    /// Why `scenario` cannot run under these globals, if it cannot.
    pub fn differ(&self, scenario: &Scenario) -> Option<String> {
        if scenario.limits.is_empty() {
            return None;
        }
        use crate::admission::bucket::{DEFAULT_HEADROOM, DEFAULT_INTERACTIVE_FLOOR};
        let pair = |mine: Option<f64>, suite: Option<f64>, default: f64| {
            (mine.unwrap_or(default), suite.unwrap_or(default))
        };
        let (h, sh) = pair(scenario.headroom, self.headroom, DEFAULT_HEADROOM);
        if h != sh {
            return Some(format!("its headroom {h} is not the suite's {sh}"));
        }
        let (f, sf) = pair(
            scenario.interactive_floor,
            self.interactive_floor,
            DEFAULT_INTERACTIVE_FLOOR,
        );
        if f != sf {
            return Some(format!("its interactive_floor {f} is not the suite's {sf}"));
        }
        None
    }
}

/// The chain entries of a scenario's tier (`None`: its chain) by step.
fn steps<'a>(scenario: &'a Scenario, tier: Option<&str>) -> &'a [ChainEntry] {
    match tier {
        None => &scenario.chain,
        Some(t) => scenario.tiers.get(t).map(Vec::as_slice).unwrap_or(&[]),
    }
}

/// A pool config serving `scenarios` from the mock at `addr`.
pub fn pool_yaml(
    scenarios: &[Scenario],
    addr: SocketAddr,
    naming: Naming,
    state: Option<&Path>,
) -> String {
    let mut s = String::new();
    match scenarios {
        [one] => {
            let _ = writeln!(
                s,
                "# poolctl mock: scenario `{}` ({})",
                comment(&one.name),
                comment(&one.file.display().to_string())
            );
        }
        many => {
            let _ = writeln!(s, "# poolctl mock: {} scenarios, one tier each", many.len());
        }
    }
    let _ = writeln!(
        s,
        "# the mocks accept any key: export {MOCK_KEY_ENV}=anything"
    );
    // A scenario means only what its own facts say (as in `poolctl chaos`).
    s.push_str("catalogue: false\n");
    s.push_str("providers:\n");
    for sc in scenarios {
        let mut seen: Vec<&str> = Vec::new();
        for (_, entry) in sc.entries() {
            let provider = entry.route.provider();
            if seen.contains(&provider) {
                continue;
            }
            seen.push(provider);
            provider_block(&mut s, entry, &naming.provider(provider, &sc.name), addr);
        }
    }
    let globals = Globals::of(scenarios);
    if let Some(h) = globals.headroom {
        let _ = writeln!(s, "headroom: {h}");
    }
    if let Some(f) = globals.interactive_floor {
        let _ = writeln!(s, "interactive_floor: {f}");
    }
    if let Some(state) = state {
        // Quoted: a path may hold characters YAML would read otherwise.
        let _ = writeln!(s, "state: {:?}", state.display().to_string());
    }
    s.push_str("tiers:\n");
    for sc in scenarios {
        let _ = writeln!(s, "  {}:", key(&target_model(sc, naming)));
        tier_lines(&mut s, sc, None, naming);
        for t in sc.tiers.keys() {
            let _ = writeln!(s, "  {}:", key(&naming.tier(t, &sc.name)));
            tier_lines(&mut s, sc, Some(t), naming);
        }
    }
    let cards: Vec<&Scenario> = scenarios.iter().filter(|s| s.policy.is_some()).collect();
    if !cards.is_empty() {
        s.push_str("policies:\n");
        for sc in cards {
            let card = card_json(sc, naming);
            let _ = writeln!(s, "  {}: {card}", key(&target_model(sc, naming)));
        }
    }
    let models: Vec<(Route, Value)> = scenarios
        .iter()
        .flat_map(|sc| {
            sc.entries().filter_map(move |(_, e)| {
                let facts = e.model.as_ref()?;
                let v = serde_json::to_value(facts).ok()?;
                Some((naming.route(&e.route, &sc.name), drop_nulls(v)))
            })
        })
        .collect();
    if !models.is_empty() {
        s.push_str("models:\n");
        for (route, facts) in models {
            let _ = writeln!(s, "  {}: {facts}", key(route.as_str()));
        }
    }
    let limits: Vec<(String, Value)> = scenarios
        .iter()
        .flat_map(|sc| {
            sc.limits.iter().map(move |(k, l)| {
                let v = serde_json::to_value(l).unwrap_or(Value::Null);
                (naming.limit_key(k, &sc.name), drop_nulls(v))
            })
        })
        .collect();
    if !limits.is_empty() {
        s.push_str("limits:\n");
        for (name, l) in limits {
            let _ = writeln!(s, "  {}: {l}", key(&name));
        }
    }
    s
}

fn provider_block(s: &mut String, entry: &ChainEntry, name: &str, addr: SocketAddr) {
    let _ = writeln!(s, "  {}:", key(name));
    let _ = writeln!(s, "    wire: {}", entry.wire);
    let _ = writeln!(s, "    base_url: {}", base_url(addr, name, entry.wire));
    let _ = writeln!(s, "    api_key_env: {MOCK_KEY_ENV}");
    // As the in-process runner resolves it: the explicit dialect, else the wire's (a
    // loopback URL implies none).
    let (dialect, _) = entry.settings().dialect(None);
    let _ = writeln!(s, "    dialect: {dialect}");
    for (field, v) in [
        ("timeout_ms", entry.timeout_ms),
        ("first_token_timeout_ms", entry.first_token_timeout_ms),
        ("stream_idle_ms", entry.stream_idle_ms),
        ("stream_max_ms", entry.stream_max_ms),
        ("max_stream_bytes", entry.max_stream_bytes),
        ("max_event_bytes", entry.max_event_bytes),
        ("cooldown_ms", entry.cooldown_ms),
        ("transient_cooldown_ms", entry.transient_cooldown_ms),
    ] {
        if let Some(v) = v {
            let _ = writeln!(s, "    {field}: {v}");
        }
    }
    if let Some(b) = &entry.breaker {
        if let Ok(v) = serde_json::to_value(b) {
            let _ = writeln!(s, "    breaker: {}", drop_nulls(v));
        }
    }
    if entry.drop_params {
        let _ = writeln!(s, "    drop_params: true");
    }
}

/// A chain's steps: one route each, except consecutive entries naming the same
/// `group:`, which are one group step.
pub fn chain_steps(entries: &[ChainEntry]) -> Vec<&[ChainEntry]> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < entries.len() {
        let len = match entries[i].group.as_deref() {
            Some(name) => entries[i..]
                .iter()
                .take_while(|e| e.group.as_deref() == Some(name))
                .count(),
            None => 1,
        };
        out.push(&entries[i..i + len]);
        i += len;
    }
    out
}

/// The members' weights, when every member gives one.
fn weights(step: &[ChainEntry]) -> Option<Vec<f64>> {
    step.iter().map(|e| e.weight).collect()
}

fn tier_lines(s: &mut String, sc: &Scenario, tier: Option<&str>, naming: Naming) {
    for step in chain_steps(steps(sc, tier)) {
        let path = match sc.path {
            CallPath::Chat => String::new(),
            p => format!(", path: {p}"),
        };
        match step {
            [one] if one.group.is_none() => {
                let route = naming.route(&one.route, &sc.name);
                if path.is_empty() {
                    let _ = writeln!(s, "    - {}", key(route.as_str()));
                } else {
                    let _ = writeln!(s, "    - {{ route: {}{path} }}", key(route.as_str()));
                }
            }
            members => {
                let names: Vec<String> = members
                    .iter()
                    .map(|e| key(naming.route(&e.route, &sc.name).as_str()))
                    .collect();
                let mut line = format!("    - {{ group: [{}]", names.join(", "));
                if let Some(w) = weights(members) {
                    let w: Vec<String> = w.iter().map(f64::to_string).collect();
                    let _ = write!(line, ", weights: [{}]", w.join(", "));
                }
                if let Some(strategy) = members.iter().find_map(|e| e.strategy) {
                    let _ = write!(line, ", strategy: {strategy}");
                }
                let _ = writeln!(s, "{line}{path} }}");
            }
        }
    }
}

/// The scenario's policy card as a pool config's workflow: its tier, and the routes
/// and tiers it names, renamed.
fn card_json(sc: &Scenario, naming: Naming) -> Value {
    let mut card = sc.policy.clone().unwrap_or_default();
    card.tier = Some(target_model(sc, naming));
    card.fallback_routes = card
        .fallback_routes
        .map(|rs| rs.iter().map(|r| naming.route(r, &sc.name)).collect());
    card.overflow_routes = card
        .overflow_routes
        .map(|rs| rs.iter().map(|r| naming.route(r, &sc.name)).collect());
    card.content_policy_routes = card
        .content_policy_routes
        .map(|rs| rs.iter().map(|r| naming.route(r, &sc.name)).collect());
    card.degrade_tier = card.degrade_tier.map(|t| naming.tier(&t, &sc.name));
    drop_nulls(serde_json::to_value(&card).unwrap_or(Value::Null))
}

/// JSON (which YAML reads as flow style) without its `null` fields, which a config
/// reads as absent anyway.
fn drop_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, drop_nulls(v)))
                .collect(),
        ),
        other => other,
    }
}

/// LiteLLM's provider prefix for a route: the one of its dialect (`dashscope/`,
/// `fireworks_ai/`, …), which poolctl reads back as that dialect, else `openai/`. A
/// route whose dialect LiteLLM has no prefix for makes the scenario not comparable
/// (`target::Comparable`), as does a Responses route (`target::skip_reason`).
fn litellm_prefix(entry: &ChainEntry) -> &'static str {
    let (dialect, _) = entry.settings().dialect(None);
    crate::config::litellm::prefix_for(entry.wire, dialect).unwrap_or("openai")
}

/// The model group of step `i` (0-based) of a scenario's chain: the first step is
/// the name a client asks for.
fn litellm_group(sc: &Scenario, i: usize, naming: Naming) -> String {
    let base = target_model(sc, naming);
    // `~` is in no tag, so a step's group never meets another scenario's name.
    if i == 0 {
        base
    } else {
        format!("{base}~{}", i + 1)
    }
}

/// A LiteLLM proxy config serving `scenarios` from the mock at `addr`. Each chain
/// step is a model group of one deployment; `router_settings.fallbacks` orders them.
/// Router settings are global in LiteLLM, so a scenario's policy card cannot be
/// written here (the runner marks those checks "not comparable").
pub fn litellm_yaml(scenarios: &[Scenario], addr: SocketAddr, naming: Naming) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# poolctl mock: {} scenarios as LiteLLM model groups",
        scenarios.len()
    );
    let _ = writeln!(
        s,
        "# the mocks accept any key: export {MOCK_KEY_ENV}=anything"
    );
    s.push_str("model_list:\n");
    let mut fallbacks: Vec<Value> = Vec::new();
    for sc in scenarios {
        let chain = chain_steps(&sc.chain);
        for (i, step) in chain.iter().enumerate() {
            // A group step is one model group of several deployments, as LiteLLM
            // load-balances them.
            for entry in step.iter() {
                let route = naming.route(&entry.route, &sc.name);
                let mut params = serde_json::Map::new();
                params.insert(
                    "model".into(),
                    json!(format!("{}/{}", litellm_prefix(entry), route.model())),
                );
                // LiteLLM's Gemini provider appends `/models/{model}:{method}` to its base.
                let base = base_url(addr, route.provider(), entry.wire);
                let base = match entry.wire {
                    Wire::Gemini => format!("{base}/v1beta"),
                    _ => base,
                };
                params.insert("api_base".into(), json!(base));
                params.insert(
                    "api_key".into(),
                    json!(format!("os.environ/{MOCK_KEY_ENV}")),
                );
                if let Some(ms) = entry.timeout_ms {
                    params.insert("timeout".into(), json!(ms as f64 / 1000.0));
                }
                if let Some(ms) = entry.first_token_timeout_ms {
                    params.insert("stream_timeout".into(), json!(ms as f64 / 1000.0));
                }
                if let Some(w) = entry.weight {
                    params.insert("weight".into(), json!(w));
                }
                let _ = writeln!(s, "  - model_name: {}", key(&litellm_group(sc, i, naming)));
                let _ = writeln!(s, "    litellm_params: {}", Value::Object(params));
                if sc.path == CallPath::Embed {
                    let _ = writeln!(s, "    model_info: {{\"mode\": \"embedding\"}}");
                }
            }
        }
        if chain.len() > 1 {
            let rest: Vec<String> = (1..chain.len())
                .map(|i| litellm_group(sc, i, naming))
                .collect();
            fallbacks.push(json!({ litellm_group(sc, 0, naming): rest }));
        }
    }
    // poolctl's default card: one retry on the same route, as LiteLLM's `num_retries`.
    s.push_str("router_settings:\n");
    let _ = writeln!(s, "  num_retries: 1");
    let _ = writeln!(s, "  fallbacks: {}", Value::Array(fallbacks));
    s.push_str("general_settings:\n");
    let _ = writeln!(s, "  master_key: {LITELLM_MASTER_KEY}");
    s
}

/// One Portkey config object per scenario, by the model name the runner sends: a
/// `fallback` strategy over the chain's targets, each with its `custom_host`.
pub fn portkey_configs(
    scenarios: &[Scenario],
    addr: SocketAddr,
    naming: Naming,
) -> BTreeMap<String, Value> {
    scenarios
        .iter()
        .map(|sc| (target_model(sc, naming), portkey_config(sc, addr, naming)))
        .collect()
}

fn portkey_config(sc: &Scenario, addr: SocketAddr, naming: Naming) -> Value {
    let target = |entry: &ChainEntry| {
        let route = naming.route(&entry.route, &sc.name);
        let base = base_url(addr, route.provider(), entry.wire);
        // Portkey's hosts carry the API's version path; the mock's OpenAI bases
        // already end in `/v1`.
        let (provider, host) = match entry.wire {
            // A Responses route is not comparable on Portkey (`target::skip_reason`).
            Wire::OpenAi | Wire::Responses => ("openai", base),
            Wire::Anthropic => ("anthropic", format!("{base}/v1")),
            // Portkey's Google provider adds `/v1beta/models/...` itself.
            Wire::Gemini => ("google", base),
        };
        let mut t = json!({
            "provider": provider,
            "api_key": super::runner::MOCK_KEY,
            "custom_host": host,
            "override_params": { "model": route.model() },
        });
        if let Some(w) = entry.weight {
            t["weight"] = json!(w);
        }
        t
    };
    // A group step is a `loadbalance` target inside the chain's `fallback`.
    let targets: Vec<Value> = chain_steps(&sc.chain)
        .into_iter()
        .map(|step| match step {
            [one] if one.group.is_none() => target(one),
            members => json!({
                "strategy": { "mode": "loadbalance" },
                "targets": members.iter().map(target).collect::<Vec<_>>(),
            }),
        })
        .collect();
    json!({ "strategy": { "mode": "fallback" }, "targets": targets })
}

/// The Portkey configs as one JSON file: `{ "<model>": <config>, ... }`.
pub fn portkey_json(scenarios: &[Scenario], addr: SocketAddr, naming: Naming) -> String {
    let map: serde_json::Map<String, Value> = portkey_configs(scenarios, addr, naming)
        .into_iter()
        .collect();
    let mut text = serde_json::to_string_pretty(&Value::Object(map)).unwrap_or_default();
    text.push('\n');
    text
}

/// The config for `format`.
pub fn config_text(
    format: ConfigFormat,
    scenarios: &[Scenario],
    addr: SocketAddr,
    naming: Naming,
    state: Option<&Path>,
) -> String {
    match format {
        ConfigFormat::Pool => pool_yaml(scenarios, addr, naming, state),
        ConfigFormat::Litellm => litellm_yaml(scenarios, addr, naming),
        ConfigFormat::Portkey => portkey_json(scenarios, addr, naming),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::pool::PoolConfig;

    const GROUPED: &str = r#"
name: g
policy: { max_retries_per_route: 0 }
chain:
  - route: azure-eu/gpt-4o
    group: gpt-4o
    weight: 3
    replies: [ { ok: "EU" } ]
  - route: azure-us/gpt-4o
    group: gpt-4o
    weight: 1
    replies: [ { ok: "US" } ]
  - route: openai/gpt-4o-mini
    replies: [ { ok: "backup" } ]
expect: { outcome: success }
"#;

    fn scenarios() -> Vec<Scenario> {
        let one = Scenario::parse(Path::new("g.yaml"), GROUPED).unwrap();
        let mut two = one.clone();
        two.name = "h".into();
        vec![one, two]
    }

    fn addr() -> SocketAddr {
        "127.0.0.1:9".parse().unwrap()
    }

    #[test]
    fn a_suite_pool_config_loads_with_one_tier_and_workflow_per_scenario_and_keeps_groups() {
        let text = pool_yaml(&scenarios(), addr(), Naming::Tagged, None);
        let config = PoolConfig::parse(Path::new("pool.yaml"), &text)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert!(config.tiers.contains_key("g") && config.tiers.contains_key("h"));
        assert_eq!(config.policies["g"].tier.as_deref(), Some("g"));
        assert_eq!(config.policies["g"].max_retries_per_route, 0);
        assert!(
            !config.catalogue,
            "a replayed scenario uses only its own facts"
        );
        assert!(text.contains(
            "    - { group: [azure-eu~g/gpt-4o~azure-eu~g, azure-us~g/gpt-4o~azure-us~g], weights: [3, 1] }\n"
        ));
    }

    #[test]
    fn a_litellm_config_makes_a_group_step_one_model_group_of_two_deployments() {
        let text = litellm_yaml(&scenarios(), addr(), Naming::Tagged);
        let v: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        let list = v["model_list"].as_sequence().unwrap();
        let in_g = |name: &str| {
            list.iter()
                .filter(|m| m["model_name"].as_str() == Some(name))
                .count()
        };
        assert_eq!(in_g("g"), 2, "{text}");
        assert_eq!(in_g("g~2"), 1, "{text}");
        let fallbacks = &v["router_settings"]["fallbacks"][0]["g"];
        assert_eq!(fallbacks[0].as_str(), Some("g~2"));
        assert_eq!(
            v["general_settings"]["master_key"].as_str(),
            Some(LITELLM_MASTER_KEY)
        );
    }

    #[test]
    fn a_portkey_config_falls_back_over_a_loadbalanced_group() {
        let configs = portkey_configs(&scenarios(), addr(), Naming::Tagged);
        let g = &configs["g"];
        assert_eq!(g["strategy"]["mode"], "fallback");
        assert_eq!(g["targets"][0]["strategy"]["mode"], "loadbalance");
        assert_eq!(g["targets"][0]["targets"][1]["weight"], 1.0);
        assert_eq!(
            g["targets"][1]["custom_host"],
            "http://127.0.0.1:9/openai~g/v1"
        );
    }

    #[test]
    fn the_suite_globals_are_the_admission_scenarios_most_common_values() {
        let mut a = Scenario::parse(Path::new("a.yaml"), GROUPED).unwrap();
        a.limits.insert("openai".into(), Default::default());
        let mut b = a.clone();
        b.name = "b".into();
        b.headroom = Some(1.0);
        let mut c = b.clone();
        c.name = "c".into();
        let g = Globals::of(&[a.clone(), b.clone(), c]);
        assert_eq!(g.headroom, Some(1.0));
        assert!(g.differ(&b).is_none());
        // `a` leaves headroom at its default, 0.9: not the suite's 1.0.
        assert!(g.differ(&a).unwrap().contains("headroom 0.9"));
    }
}
