//! Which chain a request's `model` names: a workflow (policy card), a tier, or one
//! route (`provider/model`), looked up in that order (spec/cli.md, "serve"). Resolved
//! once at startup from the pool config, keys included, so a request only looks up.

use super::errors::ApiError;
use crate::config::pool::{ConfigError, PoolConfig};
use crate::config::route::Tier;
use crate::core::vocab::{CallPath, Route};
use crate::policy::card::Policy;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// What kind of name `model` was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Workflow,
    Tier,
    Route,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Workflow => "workflow",
            Kind::Tier => "tier",
            Kind::Route => "route",
        }
    }
}

/// The kind of endpoint a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wants {
    Chat,
    Embed,
    Rerank,
}

struct Chain {
    tier: Tier,
    /// The path of the tier's first entry: `chat` (and `stream`), `embed` or `rerank`.
    path: CallPath,
}

/// Every name a request may use, resolved.
pub struct Lineup {
    tiers: BTreeMap<String, Chain>,
    /// Card name → (card, its tier).
    workflows: BTreeMap<String, (Policy, Option<String>)>,
    routes: BTreeMap<String, Chain>,
    default_policy: Policy,
}

/// Where one request goes.
pub struct Choice<'a> {
    pub kind: Kind,
    pub name: &'a str,
    pub tier: &'a Tier,
    pub path: CallPath,
    pub policy: &'a Policy,
    /// The workflow recorded on attempts and in metrics: the card's name, else the
    /// tier's or route's.
    pub workflow: &'a str,
}

fn serves(path: CallPath, wants: Wants) -> bool {
    matches!(
        (path, wants),
        (CallPath::Chat | CallPath::Stream, Wants::Chat)
            | (CallPath::Embed, Wants::Embed)
            | (CallPath::Rerank, Wants::Rerank)
    )
}

impl Lineup {
    /// Resolves every tier and route of `config`; keys are read through `env` once.
    pub fn build(
        config: &PoolConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Lineup, ConfigError> {
        let mut tiers = BTreeMap::new();
        let mut routes = BTreeMap::new();
        for name in config.tiers.keys() {
            let tier = config.tier(name, env)?;
            let entries = config.tier_entries(name)?;
            let path = entries.first().map(|e| e.path).unwrap_or_default();
            for (spec, entry) in tier.routes.iter().zip(entries) {
                routes
                    .entry(spec.route.to_string())
                    .or_insert_with(|| Chain {
                        tier: Tier {
                            groups: Vec::new(),
                            name: spec.route.to_string(),
                            path: entry.path,
                            routes: vec![spec.clone()],
                        },
                        path: entry.path,
                    });
            }
            tiers.insert(name.clone(), Chain { tier, path });
        }
        let workflows = config
            .policies
            .iter()
            .map(|(name, p)| (name.clone(), (p.clone(), p.tier.clone())))
            .collect();
        Ok(Lineup {
            tiers,
            workflows,
            routes,
            default_policy: Policy::default(),
        })
    }

    /// The chain `model` names, for a request of kind `wants`. An unknown name is a 404
    /// naming the nearest valid one.
    pub fn choose<'a>(&'a self, model: &'a str, wants: Wants) -> Result<Choice<'a>, ApiError> {
        let choice = if let Some((name, (policy, tier))) = self.workflows.get_key_value(model) {
            let tier_name = tier.as_deref().ok_or_else(|| {
                ApiError::new(400, "invalid_request_error", "model_not_found",
                    format!("workflow `{model}` names no tier in the pool config; name a tier or a route instead"))
            })?;
            let chain = self.tiers.get(tier_name).ok_or_else(|| {
                ApiError::new(
                    500,
                    "error",
                    "config",
                    format!("workflow `{model}` names tier `{tier_name}`, which is not configured"),
                )
            })?;
            Choice {
                kind: Kind::Workflow,
                name,
                tier: &chain.tier,
                path: chain.path,
                policy,
                workflow: name,
            }
        } else if let Some((name, chain)) = self.tiers.get_key_value(model) {
            Choice {
                kind: Kind::Tier,
                name,
                tier: &chain.tier,
                path: chain.path,
                policy: &self.default_policy,
                workflow: name,
            }
        } else if let Some((name, chain)) = self.routes.get_key_value(model) {
            Choice {
                kind: Kind::Route,
                name,
                tier: &chain.tier,
                path: chain.path,
                policy: &self.default_policy,
                workflow: name,
            }
        } else {
            let hint = self.nearest_hint(model);
            return Err(unknown_model(model, &hint));
        };
        if !serves(choice.path, wants) {
            let want = match wants {
                Wants::Chat => "chat",
                Wants::Embed => "embed",
                Wants::Rerank => "rerank",
            };
            return Err(ApiError::new(
                400,
                "invalid_request_error",
                "model_not_supported",
                format!(
                    "{} `{model}` serves {} requests, not {want}",
                    choice.kind.as_str(),
                    choice.path
                ),
            ));
        }
        Ok(choice)
    }

    /// Every route of every tier, once, sorted.
    pub fn routes(&self) -> Vec<Route> {
        self.routes
            .values()
            .map(|c| c.tier.routes[0].route.clone())
            .collect()
    }

    /// The tier named `name`, when the config has one (a card's `degrade_tier`).
    pub fn tier_named(&self, name: &str) -> Option<&Tier> {
        self.tiers.get(name).map(|c| &c.tier)
    }

    pub fn tiers(&self) -> impl Iterator<Item = &Tier> {
        self.tiers.values().map(|c| &c.tier)
    }

    /// `GET /v1/models`: workflows, tiers and routes, in lookup order.
    pub fn models_json(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({"object": "list", "data": self.model_entries()}))
            .unwrap_or_default()
    }

    /// `GET /v1/models/{id}` (the SDKs' `models.retrieve`): the entry `GET /v1/models`
    /// lists for `id`, or a 404 naming the nearest, as an unknown `model` gets.
    pub fn model_json(&self, id: &str) -> Result<Vec<u8>, ApiError> {
        self.model_entries()
            .into_iter()
            .find(|e| e["id"] == id)
            .map(|e| serde_json::to_vec(&e).unwrap_or_default())
            .ok_or_else(|| unknown_model(id, &self.nearest_hint(id)))
    }

    /// `; the nearest is …`: the nearest of each kind, tier or workflow first. Over
    /// every name at once a route's long name outscored the short tier meant (`gtp`).
    fn nearest_hint(&self, model: &str) -> String {
        use crate::core::suggest::{nearest_of_each, nearest_phrase, NameKind};
        // The similarity costs the product of the lengths, per name: a client's 1 MB
        // `model` held a lane for seconds. A typo of a configured name is short; past
        // the bound only the start can resemble one.
        let model = crate::core::clip::clip_bytes(model, NAME_SEARCH_BYTES);
        nearest_phrase(&nearest_of_each(
            model,
            &[
                NameKind {
                    kind: "tier",
                    names: self.tiers.keys().map(String::as_str).collect(),
                    last: false,
                },
                NameKind {
                    kind: "workflow",
                    names: self.workflows.keys().map(String::as_str).collect(),
                    last: false,
                },
                NameKind {
                    kind: "route",
                    names: self.routes.keys().map(String::as_str).collect(),
                    last: true,
                },
            ],
        ))
    }

    fn model_entries(&self) -> Vec<Value> {
        let entry = |id: &str, kind: Kind, tier: &str, path: CallPath| {
            json!({"id": id, "object": "model", "created": 0, "owned_by": "poolctl",
                   "poolctl": {"kind": kind.as_str(), "tier": tier, "path": path.as_str()}})
        };
        let mut data: Vec<Value> = Vec::new();
        for (name, (_, tier)) in &self.workflows {
            if let Some(chain) = tier.as_deref().and_then(|t| self.tiers.get(t)) {
                data.push(entry(name, Kind::Workflow, &chain.tier.name, chain.path));
            }
        }
        for (name, chain) in &self.tiers {
            data.push(entry(name, Kind::Tier, name, chain.path));
        }
        for (name, chain) in &self.routes {
            data.push(entry(name, Kind::Route, name, chain.path));
        }
        data
    }
}

/// How much of an unknown `model` is compared with the configured names.
const NAME_SEARCH_BYTES: usize = 256;

/// The most similar name (Jaro-Winkler), whatever the score: a client that typed a
/// vendor's model name still learns what this gateway serves.
pub fn nearest<'a>(got: &str, names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    names
        .map(|n| (strsim::jaro_winkler(got, n), n))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, n)| n)
}

/// The 404 for a name that is no workflow, tier or route. The name is the client's: cut
/// to a bound, so a 1 MB `model` is not a 1 MB answer and the hint still shows.
fn unknown_model(model: &str, hint: &str) -> ApiError {
    let model = crate::core::clip::clip(model, crate::core::clip::LOG_FIELD_BYTES);
    ApiError::new(404, "invalid_request_error", "model_not_found",
        format!("model `{model}` is no workflow, tier or route of this gateway{hint} (GET /v1/models lists them)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_always_names_one() {
        let names = ["high", "embed", "dashscope/qwen-flash"];
        assert_eq!(nearest("hihg", names.iter().copied()), Some("high"));
        assert_eq!(
            nearest("dashscope/qwen-flsh", names.iter().copied()),
            Some("dashscope/qwen-flash")
        );
        assert!(nearest("gpt-4o", names.iter().copied()).is_some());
        assert_eq!(nearest("x", std::iter::empty()), None);
    }
}
