//! What a parsed pool config must also satisfy: every name it uses is defined, every
//! value in range, every URL usable. `problems` lists them all, for `poolctl check`;
//! loading stops at the first.

use super::pool::{did_you_mean, line_of, suggest, GroupConfig, PoolConfig};
use crate::config::yaml::YamlError;
use crate::core::limits;
use crate::core::vocab::Route;
use std::collections::BTreeSet;

impl PoolConfig {
    /// Loading stops at the first problem; `check` wants them all.
    pub(super) fn validate(&self, text: &str) -> Result<(), YamlError> {
        match self.problems(text).into_iter().next() {
            Some(first) => Err(first),
            None => Ok(()),
        }
    }

    /// Every semantic problem of a parsed config, in file order of sections.
    pub(super) fn problems(&self, text: &str) -> Vec<YamlError> {
        let mut out = Vec::new();
        let invalid = |field: String, needles: &[&str], message: String| YamlError {
            file: self.file.clone(),
            line: line_of(text, needles),
            column: None,
            field,
            message,
        };

        for (name, p) in &self.providers {
            let key = format!("{name}:");
            let bad = |f: &str, message: String| {
                let needle = format!("{f}:");
                invalid(
                    format!("providers.{name}.{f}"),
                    &["providers:", &key, &needle],
                    message,
                )
            };
            if let Err(why) = check_url(&p.base_url) {
                out.push(bad("base_url", why));
            }
            // A gateway key in `?key=` is a credential: masked wherever it is echoed.
            crate::core::secret::register_url_query(&p.base_url);
            if p.api_key_env.trim().is_empty() {
                out.push(bad(
                    "api_key_env",
                    "name the variable that holds the key".into(),
                ));
            }
            // Out of range is refused, never wrapped: a cooldown of 2^64 - 1 ms would set
            // `until` in the past, a zero deadline fails every call before it starts.
            if let Err((f, why)) = limits::check_fields(&p.settings().limit_fields()) {
                out.push(bad(f, why));
            }
        }

        if self.tiers.is_empty() {
            let msg = "define at least one tier".to_string();
            out.push(invalid("tiers".into(), &["tiers:"], msg));
        }
        for (tier, entries) in &self.tiers {
            let key = format!("{tier}:");
            let groups = self.groups.get(tier).map(Vec::as_slice).unwrap_or_default();
            out.extend(self.group_problems(text, tier, groups));
            if entries.is_empty() {
                // A tier of one empty group is that group's problem, reported above.
                if groups.is_empty() {
                    let msg = "a tier needs at least one route".to_string();
                    out.push(invalid(format!("tiers.{tier}"), &["tiers:", &key], msg));
                }
                continue;
            }
            // The field of an entry as written: a group's member by its place in it.
            let field_of = |e: &super::pool::TierEntry, i: usize| match e.group {
                Some(g) => format!("tiers.{tier}[{}].group[{}]", e.step, i - groups[g].first),
                None => format!("tiers.{tier}[{}]", e.step),
            };
            // Where each route was first seen: one pass, so a tier of 100,000 routes is
            // checked in milliseconds, not minutes.
            let mut first_at: std::collections::HashMap<&Route, usize> =
                std::collections::HashMap::with_capacity(entries.len());
            for (i, entry) in entries.iter().enumerate() {
                let route = entry.route.as_str();
                let field = field_of(entry, i);
                let provider = entry.route.provider();
                if !self.providers.contains_key(provider) {
                    let msg = format!(
                        "route `{route}` names provider `{provider}`, which is not under `providers`{}",
                        suggest(
                            &self.nearest_provider(provider),
                            "providers",
                            &self.providers.keys().cloned().collect::<Vec<_>>()
                        )
                    );
                    out.push(invalid(field.clone(), &["tiers:", &key, route], msg));
                }
                if let Some(&first) = first_at.get(&entry.route) {
                    let earlier = &entries[first];
                    let msg = if entry.group.is_some() && earlier.group == entry.group {
                        format!(
                            "route `{route}` appears twice in this group: a member is listed once"
                        )
                    } else {
                        let at = field_of(earlier, first);
                        let at = at.strip_prefix(&format!("tiers.{tier}")).unwrap_or(&at);
                        format!("route `{route}` appears twice in this tier (first at {at})")
                    };
                    out.push(invalid(field, &["tiers:", &key, route, route], msg));
                }
                first_at.insert(&entry.route, i);
            }
        }

        for (name, policy) in &self.policies {
            let key = format!("{name}:");
            if let Err((f, why)) = limits::check_fields(&crate::policy::card::policy_fields(policy))
            {
                let needle = format!("{f}:");
                out.push(invalid(
                    format!("policies.{name}.{f}"),
                    &["policies:", &key, &needle],
                    why,
                ));
            }
            // A fallback outside the card's own tier can never be used: the router walks
            // that tier alone.
            let (within, allowed): (String, Vec<Route>) = match &policy.tier {
                None => ("any tier".into(), self.route_names()),
                Some(tier) => match self.tiers.get(tier) {
                    Some(entries) => (
                        format!("tier `{tier}`"),
                        entries.iter().map(|e| e.route.clone()).collect(),
                    ),
                    None => {
                        let msg = format!(
                            "unknown tier `{tier}`{}",
                            did_you_mean(&self.nearest_tier(tier))
                        );
                        let field = format!("policies.{name}.tier");
                        out.push(invalid(field, &["policies:", &key, "tier:"], msg));
                        continue;
                    }
                },
            };
            for (list_name, list) in [
                ("fallback_routes", &policy.fallback_routes),
                ("overflow_routes", &policy.overflow_routes),
                ("content_policy_routes", &policy.content_policy_routes),
            ] {
                for (i, route) in list.iter().flatten().enumerate() {
                    if !allowed.contains(route) {
                        let msg = format!(
                            "route `{route}` is not in {within}{}",
                            did_you_mean(&nearest_route(route.as_str(), &allowed))
                        );
                        let field = format!("policies.{name}.{list_name}[{i}]");
                        out.push(invalid(field, &["policies:", &key, route.as_str()], msg));
                    }
                }
            }
        }
        if self.workers == 0 {
            let msg = "must be at least 1: the number of processes that share the buckets".into();
            out.push(invalid("workers".into(), &["workers:"], msg));
        }
        let s = &self.sessions;
        for (field, value, what) in [
            (
                "max_id_bytes",
                s.max_id_bytes as u64,
                "the longest session id accepted",
            ),
            ("max", s.max as u64, "the sessions kept at once"),
            ("idle_ms", s.idle_ms, "how long an unused session is kept"),
        ] {
            if value == 0 {
                let msg = format!("must be at least 1: {what}");
                out.push(invalid(
                    format!("sessions.{field}"),
                    &["sessions:", field],
                    msg,
                ));
            }
        }
        // OpenAI keeps a response 30 days; a longer promise is one no store should make.
        const MAX_TTL_MS: u64 = 30 * 86_400_000;
        let r = &self.responses;
        for (field, bad, msg) in [
            (
                "responses_ttl",
                r.ttl_ms == 0 || r.ttl_ms > MAX_TTL_MS,
                "must be from 1 ms to 30 days (`24h`): how long a response can be continued",
            ),
            (
                "responses_max_bytes",
                r.max_bytes == 0 || r.max_bytes > crate::store::conversations::MAX_MAX_BYTES,
                "must be from 1 to 67108864 (64 MiB): the largest conversation kept, read whole on each of its turns",
            ),
            (
                "responses_store_max_bytes",
                r.max_total_bytes < r.max_bytes,
                "must be at least `responses_max_bytes`: the bytes of every conversation kept",
            ),
            (
                "responses_max",
                r.max == 0,
                "must be at least 1: the conversations kept at once",
            ),
        ] {
            if bad {
                let key = format!("{field}:");
                out.push(invalid(field.into(), &[key.as_str()], msg.into()));
            }
        }
        if self.state_timeout_ms == 0 {
            let msg = "must be at least 1 ms: a store call with no time cannot succeed".into();
            out.push(invalid(
                "state_timeout_ms".into(),
                &["state_timeout_ms:"],
                msg,
            ));
        }
        // Parsed here, not first at the store's opening, so `check` finds it and the error
        // has its line. Parsing never connects, and no message echoes the URL: it may
        // hold a password.
        let parsed = self
            .state
            .as_ref()
            .and_then(|s| s.to_str())
            .filter(|s| s.contains("://"))
            .map(crate::store::redis::parse_state_url);
        if let Some(Err(e)) = &parsed {
            let msg = format!("is neither a file path nor a usable Redis URL: {e}");
            out.push(invalid("state".into(), &["state:"], msg));
        }
        if let Some(tls) = self.state_tls() {
            match &parsed {
                // The files are read now, so a missing one is named by `check`, not first
                // when the fleet's store is opened.
                Some(Ok(u)) if u.tls => {
                    if let Err(msg) = tls.certificates() {
                        out.push(invalid("state_tls".into(), &["state_tls:"], msg));
                    }
                }
                Some(Err(_)) => {}
                _ => {
                    let msg = "is set, but `state` is not a TLS Redis URL (rediss:// or rediss+cluster://)".into();
                    out.push(invalid("state_tls".into(), &["state_tls:"], msg));
                }
            }
        }
        // Admission: a contract names a route of some tier or a provider; shares are
        // shares; a degrade tier exists.
        let all = self.route_names();
        // Config order is not sorted order: membership by set, never by binary search.
        let known: BTreeSet<&Route> = all.iter().collect();
        for (name, limits) in &self.limits {
            let field = format!("limits.{name}");
            let named = match Route::parse(name) {
                Ok(r) => known.contains(&r),
                Err(_) => self.providers.contains_key(name),
            };
            if !named {
                let names = all
                    .iter()
                    .map(|r| r.as_str())
                    .chain(self.providers.keys().map(String::as_str));
                let msg = format!(
                    "`{name}` is neither a route of a tier nor a provider{}",
                    did_you_mean(&crate::core::suggest::nearest(name, names))
                );
                out.push(invalid(field, &["limits:", name], msg));
            } else if limits.contracts().next().is_none() {
                let msg = "name at least one of rpm, tpm, itpm, otpm".to_string();
                out.push(invalid(field, &["limits:", name], msg));
            }
        }
        if let Some(h) = self.headroom.filter(|h| !(*h > 0.0 && *h <= 1.0)) {
            let msg = format!("headroom {h} is outside (0, 1]");
            out.push(invalid("headroom".into(), &["headroom:"], msg));
        }
        // 1 is a real choice: every bucket for interactive traffic alone.
        if let Some(f) = self.interactive_floor.filter(|f| !(0.0..=1.0).contains(f)) {
            let msg = format!("interactive_floor {f} is outside [0, 1]");
            out.push(invalid(
                "interactive_floor".into(),
                &["interactive_floor:"],
                msg,
            ));
        }
        for (name, policy) in &self.policies {
            if let Some(t) = &policy.degrade_tier {
                if !self.tiers.contains_key(t) {
                    let key = format!("{name}:");
                    let msg = format!("unknown tier `{t}`{}", did_you_mean(&self.nearest_tier(t)));
                    let field = format!("policies.{name}.degrade_tier");
                    out.push(invalid(field, &["policies:", &key, "degrade_tier:"], msg));
                }
            }
        }
        // Facts for a route no tier uses are a typo, not a harmless extra.
        for route in self.models.keys() {
            if !known.contains(route) {
                let msg = format!(
                    "route `{route}` is in no tier{}",
                    did_you_mean(&nearest_route(route.as_str(), &all))
                );
                out.push(invalid(
                    format!("models.{route}"),
                    &["models:", route.as_str()],
                    msg,
                ));
            }
        }
        out
    }
}

impl PoolConfig {
    /// What a tier's group steps must satisfy: at least one member, and weights (when
    /// given) one per member, each above zero. Members are checked as routes with the
    /// rest of the tier (declared provider, listed once).
    fn group_problems(&self, text: &str, tier: &str, groups: &[GroupConfig]) -> Vec<YamlError> {
        let key = format!("{tier}:");
        let mut out = Vec::new();
        for g in groups {
            let at = format!("tiers.{tier}[{}]", g.step);
            // The group's own line: found after its first member, when it has one.
            let first = g.members.first().map(Route::as_str);
            let problem = |field: String, needle: &str, message: String| {
                let mut needles = vec!["tiers:", key.as_str()];
                needles.extend(first);
                needles.push(needle);
                YamlError {
                    file: self.file.clone(),
                    line: line_of(text, &needles),
                    column: None,
                    field,
                    message,
                }
            };
            if g.members.is_empty() {
                let msg = "a group needs at least one route (two or more to share the load)";
                out.push(problem(format!("{at}.group"), "group:", msg.into()));
            }
            let Some(weights) = &g.weights else { continue };
            if weights.len() != g.members.len() {
                let msg = format!(
                    "{} weight(s) for {} member(s): give one weight per member, in the same order",
                    weights.len(),
                    g.members.len()
                );
                out.push(problem(format!("{at}.weights"), "weights:", msg));
            }
            for (j, w) in weights.iter().enumerate() {
                if !(w.is_finite() && *w > 0.0) {
                    let msg = format!(
                        "weight {w} is not above zero: a member that should take no traffic is left out of the group"
                    );
                    out.push(problem(format!("{at}.weights[{j}]"), "weights:", msg));
                }
            }
        }
        out
    }
}

/// Checked here rather than at the first call, so a typo in a URL fails `check`, not a
/// request in production. The URL is only ever shown through `secret::display_url`: its
/// query may carry a key.
pub(super) fn check_url(url: &str) -> Result<(), String> {
    let shown = crate::core::secret::display_url(url);
    let parsed =
        reqwest::Url::parse(url).map_err(|e| format!("`{shown}` is not a valid URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(format!("`{shown}` is not an http(s) URL with a host"));
    }
    // A `user:password@` would be sent as a second `Authorization` header beside the
    // key, and printed wherever the URL is: keys belong in `api_key_env`.
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!(
            "`{shown}` carries credentials (`user:password@`); put the key in the variable `api_key_env` names"
        ));
    }
    if parsed.fragment().is_some() {
        return Err(format!(
            "`{shown}` has a `#fragment`, which no request can use"
        ));
    }
    Ok(())
}

pub(super) fn nearest_route(s: &str, routes: &[Route]) -> Option<String> {
    crate::core::suggest::nearest(s, routes.iter().map(Route::as_str))
}
