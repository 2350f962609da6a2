//! "Did you mean": the valid name nearest to a typo. Config, scenario and dialect
//! errors all suggest with the one measure, so a typo reads the same everywhere.

/// The candidate nearest to `got`, if any is near enough to be a typo.
pub fn nearest<'a>(got: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    candidates
        .into_iter()
        .map(|c| (typo_score(got, c), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c.to_string())
}

/// A Jaro-Winkler score past which a name is taken for a typo of the one it is near,
/// whatever its kind (`oa/gpt-4` against `oa/gpt-4o` scores 0.98; `gtp` against
/// `oai/gpt-4o` 0.66).
const NEAR_CERTAIN: f64 = 0.9;

/// How alike two names are, 0 to 1: Jaro-Winkler, except that one edit (a swap, a
/// letter more, less or wrong) scores at least 0.9. Jaro-Winkler alone misses short
/// names, whose letters have no room to match out of place: `rmp` scores 0.56 against
/// `rpm` but 0.72 against `itpm`.
fn typo_score(got: &str, name: &str) -> f64 {
    // Case is a typo like any other: `HIGH` is `high` (Jaro-Winkler alone scores them 0).
    let (got, name) = (&got.to_lowercase(), &name.to_lowercase());
    let jw = strsim::jaro_winkler(got, name);
    if got.len() >= 3 && strsim::osa_distance(got, name) <= 1 {
        jw.max(0.9)
    } else {
        jw
    }
}

/// One kind of name a lookup tries (`tier`, `workflow`, `route`), with its names.
pub struct NameKind<'a> {
    pub kind: &'a str,
    pub names: Vec<&'a str>,
    /// Listed after every kind that is not: a route is one provider's model, while a
    /// tier or a workflow is what a client is meant to name, and has a fallback.
    pub last: bool,
}

/// For a name that is none of several kinds: the nearest name of each kind, whatever
/// its score (a client that typed a vendor's model name still learns what is served).
/// One nearest over every kind at once is not enough: a long name of one kind can
/// outscore the short one meant (`gtp` came out nearer `oai/gpt-4o` than the tier
/// `gpt`). Kinds not `last` come first, nearer first, unless a `last` kind holds a
/// near-certain typo nearer than all of them (`oa/gpt-4` for the route `oa/gpt-4o`,
/// which no tier `ant` should shadow); a kind without names is left out.
pub fn nearest_of_each<'a>(got: &str, kinds: &[NameKind<'a>]) -> Vec<(&'a str, &'a str)> {
    let mut found: Vec<(bool, f64, &'a str, &'a str)> = kinds
        .iter()
        .filter_map(|k| {
            k.names
                .iter()
                .map(|&n| (alike(got, n), n))
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(score, n)| (k.last, score, k.kind, n))
        })
        .collect();
    let best_first = found
        .iter()
        .filter(|f| !f.0)
        .map(|f| f.1)
        .fold(f64::MIN, f64::max);
    for f in &mut found {
        if f.0 && f.1 >= NEAR_CERTAIN && f.1 > best_first {
            f.0 = false;
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
    found.into_iter().map(|(_, _, kind, n)| (kind, n)).collect()
}

/// Jaro-Winkler, blind to case (`HIGH` is `high`, not some name with more capitals).
fn alike(got: &str, name: &str) -> f64 {
    strsim::jaro_winkler(&got.to_lowercase(), &name.to_lowercase())
}

/// `; the nearest is `gpt` (tier), then route `oai/gpt-4o`` from what
/// [`nearest_of_each`] found, to end a "no such name" message; empty when it found none.
pub fn nearest_phrase(found: &[(&str, &str)]) -> String {
    let Some(((kind, name), rest)) = found.split_first() else {
        return String::new();
    };
    let mut out = format!("; the nearest is `{name}` ({kind})");
    if !rest.is_empty() {
        let listed: Vec<String> = rest.iter().map(|(k, n)| format!("{k} `{n}`")).collect();
        out.push_str(&format!(", then {}", listed.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds<'a>(
        workflows: Vec<&'a str>,
        tiers: Vec<&'a str>,
        routes: Vec<&'a str>,
    ) -> Vec<NameKind<'a>> {
        vec![
            NameKind {
                kind: "workflow",
                names: workflows,
                last: false,
            },
            NameKind {
                kind: "tier",
                names: tiers,
                last: false,
            },
            NameKind {
                kind: "route",
                names: routes,
                last: true,
            },
        ]
    }

    #[test]
    fn a_typo_of_a_tier_names_the_tier_before_any_route() {
        let k = kinds(
            vec![],
            vec!["gpt", "claude"],
            vec!["oai/gpt-4o", "oai/gpt-4o-mini"],
        );
        let found = nearest_of_each("gtp", &k);
        assert_eq!(found[0], ("tier", "gpt"));
        assert_eq!(found[1].0, "route");
        assert_eq!(
            found.len(),
            2,
            "a kind with no names is left out: {found:?}"
        );
        assert_eq!(nearest_phrase(&found[..1]), "; the nearest is `gpt` (tier)");
        assert_eq!(
            nearest_phrase(&[("tier", "gpt"), ("route", "oai/gpt-4o")]),
            "; the nearest is `gpt` (tier), then route `oai/gpt-4o`"
        );
    }

    #[test]
    fn tiers_and_workflows_come_nearer_first_and_routes_last() {
        let k = kinds(
            vec!["support-answer"],
            vec!["high"],
            vec!["a/support-answer-x"],
        );
        let found = nearest_of_each("support-answr", &k);
        let order: Vec<&str> = found.iter().map(|(kind, _)| *kind).collect();
        assert_eq!(order, ["workflow", "tier", "route"]);
        assert!(nearest_of_each("x", &kinds(vec![], vec![], vec![])).is_empty());
    }

    #[test]
    fn a_name_in_other_capitals_is_the_name_it_spells() {
        let k = kinds(vec![], vec!["high", "slowstream", "slow"], vec!["m/ok"]);
        assert_eq!(nearest_of_each("HIGH", &k)[0], ("tier", "high"));
        assert_eq!(nearest_of_each("M/OK", &k)[0], ("route", "m/ok"));
        assert_eq!(
            nearest("HIGH", ["high", "slowstream"]).as_deref(),
            Some("high")
        );
    }

    #[test]
    fn a_short_name_one_swap_away_is_suggested() {
        let dims = ["rpm", "tpm", "itpm", "otpm"];
        assert_eq!(nearest("rmp", dims).as_deref(), Some("rpm"));
        assert_eq!(nearest("tmp", dims).as_deref(), Some("tpm"));
        assert_eq!(nearest("otmp", dims).as_deref(), Some("otpm"));
        assert_eq!(nearest("xyz", dims), None);
    }

    #[test]
    fn a_near_certain_typo_of_a_route_names_the_route_before_a_distant_tier() {
        let k = kinds(
            vec![],
            vec!["main", "ant"],
            vec!["oa/gpt-4o", "an/claude-x"],
        );
        assert_eq!(nearest_of_each("oa/gpt-4", &k)[0], ("route", "oa/gpt-4o"));
        assert_eq!(
            nearest_of_each("an/claude-y", &k)[0],
            ("route", "an/claude-x")
        );
        assert_eq!(nearest_of_each("mian", &k)[0], ("tier", "main"));
        assert_eq!(nearest_phrase(&[]), "");
    }
}
