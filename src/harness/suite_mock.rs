//! One mock server for a whole suite (`poolctl mock scenarios/`, `chaos --target`):
//! every scenario's chain at once, each route renamed so that no two scenarios share a
//! provider or a model. The mock then knows which script a request is for from its
//! path and model alone, and a gateway in front of it keeps each scenario's health,
//! breakers and buckets apart.

use super::mock::MockRoute;
use super::runner::mock_routes;
use super::scenario::Scenario;
use crate::core::clock::{Clock, UnixMs};
use crate::core::vocab::Route;
use std::sync::Arc;

/// How a suite's routes are named on the mock and in the target's config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// As the scenario writes them: one scenario served alone (`poolctl mock FILE`).
    AsWritten,
    /// `provider~scenario/model~provider~scenario`: unique per scenario, and each
    /// route's model name unique too.
    Tagged,
}

impl Naming {
    /// The name `route` of `scenario` is served under.
    pub fn route(self, route: &Route, scenario: &str) -> Route {
        match self {
            Naming::AsWritten => route.clone(),
            Naming::Tagged => {
                let tag = tag(scenario);
                // The model carries the provider too: two members of a group share a
                // model name, and an answer's `model` must still name its route.
                Route::parse(&format!(
                    "{p}~{tag}/{m}~{p}~{tag}",
                    p = route.provider(),
                    m = route.model()
                ))
                .expect("a provider and a model, both non-empty")
            }
        }
    }

    /// The name a provider of `scenario` is served under.
    pub fn provider(self, provider: &str, scenario: &str) -> String {
        match self {
            Naming::AsWritten => provider.to_string(),
            Naming::Tagged => format!("{provider}~{}", tag(scenario)),
        }
    }

    /// The name of one of `scenario`'s extra tiers (`tiers:`).
    pub fn tier(self, tier: &str, scenario: &str) -> String {
        match self {
            Naming::AsWritten => tier.to_string(),
            Naming::Tagged => format!("{}~{tier}", tag(scenario)),
        }
    }

    /// A name in a scenario's `limits:`: a route or a provider.
    pub fn limit_key(self, key: &str, scenario: &str) -> String {
        match Route::parse(key) {
            Ok(route) if key.contains('/') => self.route(&route, scenario).to_string(),
            _ => self.provider(key, scenario),
        }
    }
}

/// A scenario's name as it may appear in a URL path, a model name and a YAML key:
/// letters, digits, `.`, `_` and `-`; anything else becomes `_`.
pub fn tag(scenario: &str) -> String {
    scenario
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Two scenarios whose names come out as one tag would share routes, tiers and
/// scripts on the mock: the first such pair, named with both files.
pub fn tag_collision(scenarios: &[Scenario]) -> Option<String> {
    let mut seen: std::collections::BTreeMap<String, &Scenario> = Default::default();
    for s in scenarios {
        if let Some(first) = seen.insert(tag(&s.name), s) {
            return Some(format!(
                "scenarios `{}` ({}) and `{}` ({}) have names that serve as the same `{}` on a mock; rename one",
                first.name,
                first.file.display(),
                s.name,
                s.file.display(),
                tag(&s.name)
            ));
        }
    }
    None
}

/// Every route of every scenario, renamed by `naming`, for one mock server.
/// Outages run on `clock` from `start` (and again from each `POST /reset`).
pub fn suite_routes(
    scenarios: &[Scenario],
    naming: Naming,
    clock: &Arc<dyn Clock>,
    start: UnixMs,
) -> Vec<MockRoute> {
    scenarios
        .iter()
        .flat_map(|s| {
            mock_routes(s, clock, start).into_iter().map(|mut r| {
                r.route = naming.route(&r.route, &s.name);
                r
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_routes_are_unique_per_scenario_and_keep_both_names() {
        let r = Route::parse("openrouter/anthropic/claude-3.5").unwrap();
        let a = Naming::Tagged.route(&r, "a-b");
        assert_eq!(a.provider(), "openrouter~a-b");
        assert_eq!(a.model(), "anthropic/claude-3.5~openrouter~a-b");
        assert_ne!(a, Naming::Tagged.route(&r, "a-c"));
        assert_eq!(Naming::AsWritten.route(&r, "a-b"), r);
    }

    #[test]
    fn tag_keeps_names_safe_for_urls_and_yaml() {
        assert_eq!(tag("x y/z:1"), "x_y_z_1");
        assert_eq!(tag("kebab-case.v2_ok"), "kebab-case.v2_ok");
    }

    #[test]
    fn limit_keys_rename_routes_and_providers() {
        assert_eq!(
            Naming::Tagged.limit_key("openai/gpt-4o", "s"),
            "openai~s/gpt-4o~openai~s"
        );
        assert_eq!(Naming::Tagged.limit_key("anthropic", "s"), "anthropic~s");
    }
}
