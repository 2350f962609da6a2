//! "Did you mean": the valid name nearest to a typo. Config, scenario and dialect
//! errors all suggest with the one measure, so a typo reads the same everywhere.

/// The candidate nearest to `got`, if any is near enough to be a typo.
pub fn nearest<'a>(got: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(got, c), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c.to_string())
}
