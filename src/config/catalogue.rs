//! The models the router already knows: facts (window, output limit, images, tools,
//! JSON schema, prices) for the models teams use, so a plain config routes on them
//! without a `models:` entry. The rows are `data/catalogue.csv`, embedded at build time
//! and parsed once; each names its source and the date it was read.
//!
//! A row is keyed by provider family (the provider's dialect) and model, because one
//! model name costs and serves differently on two providers (`deepseek-v4-pro` on
//! DeepSeek and on DashScope). Only `resolve` merges it, under a config's `models:`
//! (field by field); chaos scenarios never read it, so a catalogue update cannot change
//! what a scenario means.

use crate::classify::dialect::Dialect;
use crate::policy::capability::ModelFacts;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::LazyLock;

/// Where the rows live in the repository; errors name it.
pub const FILE: &str = "data/catalogue.csv";
const TEXT: &str = include_str!("../../data/catalogue.csv");

/// The header line, exactly: a column moved or renamed is caught at parse time.
const HEADER: &str = "family,model,context_window,max_output_tokens,images,tools,json_schema,\
input_usd_per_mtok,output_usd_per_mtok,cached_input_usd_per_mtok,date,source";

/// Where one row's facts came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Source {
    /// LiteLLM's public model map (`model_prices_and_context_window.json`, MIT), as
    /// shipped in that release of the `litellm` package; written `litellm@VERSION`.
    Litellm(String),
    /// A provider's documentation page.
    Url(String),
}

impl Source {
    fn parse(s: &str) -> Result<Source, String> {
        if let Some(version) = s.strip_prefix("litellm@") {
            if !version.is_empty() && version.chars().all(|c| c.is_ascii_digit() || c == '.') {
                return Ok(Source::Litellm(version.to_string()));
            }
        } else if s.starts_with("https://") && s.len() > "https://".len() {
            return Ok(Source::Url(s.to_string()));
        }
        Err(format!(
            "source `{s}` is neither `litellm@VERSION` nor an https:// URL"
        ))
    }

    /// The short form, as written in the file.
    pub fn as_written(&self) -> String {
        match self {
            Source::Litellm(v) => format!("litellm@{v}"),
            Source::Url(u) => u.clone(),
        }
    }

    /// The citation in full.
    pub fn cite(&self) -> String {
        match self {
            Source::Litellm(v) => {
                format!("LiteLLM model_prices_and_context_window.json (MIT, Berri AI), litellm {v}")
            }
            Source::Url(u) => u.clone(),
        }
    }
}

/// One row: a model on a provider family, its facts, and their source.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub family: Dialect,
    pub model: String,
    pub facts: ModelFacts,
    /// The day the source was read, `YYYY-MM-DD`.
    pub date: String,
    pub source: Source,
}

impl Entry {
    /// `family/model`, as `poolctl models` names a row.
    pub fn key(&self) -> String {
        format!("{}/{}", self.family, self.model)
    }
}

/// Every row, in file order, and an index by family and model.
#[derive(Debug)]
pub struct Catalogue {
    entries: Vec<Entry>,
    index: HashMap<(Dialect, String), usize>,
}

impl Catalogue {
    /// Parses the catalogue's text; every error names `file:line` and the column.
    pub fn parse(file: &str, text: &str) -> Result<Catalogue, String> {
        let mut entries = Vec::new();
        let mut index = HashMap::new();
        let mut header = false;
        for (n, line) in text.lines().enumerate() {
            let at = |e: String| format!("{file}:{}: {e}", n + 1);
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            if !header {
                if line != HEADER {
                    return Err(at(format!("the header must be `{HEADER}`")));
                }
                header = true;
                continue;
            }
            let entry = row(line).map_err(at)?;
            let key = (entry.family, entry.model.clone());
            if let Some(&first) = index.get(&key) {
                let first: &Entry = &entries[first];
                return Err(at(format!("`{}` is a second time", first.key())));
            }
            index.insert(key, entries.len());
            entries.push(entry);
        }
        if !header {
            return Err(format!("{file}: no header line"));
        }
        Ok(Catalogue { entries, index })
    }

    /// The row of `model` on `family`, if the catalogue has one (exact names: a
    /// provider's model names are case-sensitive).
    pub fn get(&self, family: Dialect, model: &str) -> Option<&Entry> {
        self.index
            .get(&(family, model.to_string()))
            .map(|&i| &self.entries[i])
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The rows whose `family/model` matches `pattern`, case-insensitively: a glob
    /// when it holds `*` or `?`, else a substring.
    pub fn matching(&self, pattern: &str) -> Vec<&Entry> {
        let pattern = pattern.to_lowercase();
        self.entries
            .iter()
            .filter(|e| {
                let key = e.key().to_lowercase();
                if pattern.contains(['*', '?']) {
                    glob(pattern.as_bytes(), key.as_bytes())
                } else {
                    key.contains(&pattern)
                }
            })
            .collect()
    }
}

/// The embedded catalogue, parsed on first use. An error here is a bad build (the
/// `catalogue_parses` test guards it); callers then know no model rather than panic.
static CATALOGUE: LazyLock<Result<Catalogue, String>> =
    LazyLock::new(|| Catalogue::parse(FILE, TEXT));

/// The embedded catalogue, or why it could not be read.
pub fn catalogue() -> Result<&'static Catalogue, &'static str> {
    CATALOGUE.as_ref().map_err(String::as_str)
}

/// The embedded row of `model` on `family`.
pub fn lookup(family: Dialect, model: &str) -> Option<&'static Entry> {
    catalogue().ok()?.get(family, model)
}

fn row(line: &str) -> Result<Entry, String> {
    let cells: Vec<&str> = line.split(',').map(str::trim).collect();
    let [family, model, window, max_out, images, tools, schema, input, output, cached, date, source] =
        cells[..]
    else {
        return Err(format!(
            "{} columns where the header has 12 (a value may not hold a comma)",
            cells.len()
        ));
    };
    let family = Dialect::parse(family).ok_or_else(|| Dialect::unknown(family))?;
    if model.is_empty() {
        return Err("model is empty".into());
    }
    Ok(Entry {
        family,
        model: model.to_string(),
        facts: ModelFacts {
            context_window: tokens("context_window", window)?,
            max_output_tokens: tokens("max_output_tokens", max_out)?,
            images: flag("images", images)?,
            tools: flag("tools", tools)?,
            json_schema: flag("json_schema", schema)?,
            input_usd_per_mtok: price("input_usd_per_mtok", input)?,
            output_usd_per_mtok: price("output_usd_per_mtok", output)?,
            cached_input_usd_per_mtok: price("cached_input_usd_per_mtok", cached)?,
            ..Default::default()
        },
        date: day(date)?,
        source: Source::parse(source)?,
    })
}

fn tokens(column: &str, s: &str) -> Result<Option<u64>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    match s.parse::<u64>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(format!("{column} `{s}` is not a positive whole number")),
    }
}

fn flag(column: &str, s: &str) -> Result<Option<bool>, String> {
    match s {
        "" => Ok(None),
        "yes" => Ok(Some(true)),
        "no" => Ok(Some(false)),
        _ => Err(format!("{column} `{s}` is not `yes`, `no` or empty")),
    }
}

fn price(column: &str, s: &str) -> Result<Option<f64>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    match s.parse::<f64>() {
        Ok(p) if p.is_finite() && p >= 0.0 => Ok(Some(p)),
        _ => Err(format!(
            "{column} `{s}` is not a price (US dollars per million tokens, 0 or more)"
        )),
    }
}

fn day(s: &str) -> Result<String, String> {
    chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .filter(|_| s.len() == 10)
        .map(|_| s.to_string())
        .ok_or_else(|| format!("date `{s}` is not YYYY-MM-DD"))
}

/// `*` any run of characters, `?` one character; everything else itself.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where the last `*` was, and the text position it has matched up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "family,model,context_window,max_output_tokens,images,tools,json_schema,input_usd_per_mtok,output_usd_per_mtok,cached_input_usd_per_mtok,date,source\n";

    fn one(row: &str) -> Result<Catalogue, String> {
        Catalogue::parse("t.csv", &format!("# a comment\n{HEAD}{row}\n"))
    }

    #[test]
    fn catalogue_parses_every_row_with_numeric_prices_and_no_duplicate_key() {
        let c = catalogue().expect("data/catalogue.csv parses");
        assert!(
            c.entries().len() >= 150,
            "{} rows; issue 23 asks for at least 150",
            c.entries().len()
        );
        for e in c.entries() {
            for p in [
                e.facts.input_usd_per_mtok,
                e.facts.output_usd_per_mtok,
                e.facts.cached_input_usd_per_mtok,
            ]
            .into_iter()
            .flatten()
            {
                assert!(p.is_finite() && p >= 0.0, "{}: {p}", e.key());
            }
            assert!(
                e.facts.context_window.is_some() || e.facts.input_usd_per_mtok.is_some(),
                "{}: a row that knows neither window nor price says nothing",
                e.key()
            );
        }
        // parse() refuses a second row of one key, so the index holds every row.
        assert_eq!(c.index.len(), c.entries().len());
    }

    #[test]
    fn one_model_on_two_families_is_two_rows() {
        let deepseek = lookup(Dialect::Deepseek, "deepseek-v4-pro").expect("row");
        let dashscope = lookup(Dialect::Dashscope, "deepseek-v4-pro").expect("row");
        assert_ne!(
            deepseek.facts.input_usd_per_mtok,
            dashscope.facts.input_usd_per_mtok
        );
        assert!(lookup(Dialect::Groq, "deepseek-v4-pro").is_none());
        assert!(
            lookup(Dialect::Openai, "GPT-4O").is_none(),
            "names are exact"
        );
    }

    #[test]
    fn a_row_reads_into_facts_and_its_source() {
        let c =
            one("openai,m,128000,16384,yes,,no,2.5,10,1.25,2026-12-02,litellm@1.110.2").unwrap();
        let e = c.get(Dialect::Openai, "m").unwrap();
        assert_eq!(e.facts.context_window, Some(128_000));
        assert_eq!(e.facts.images, Some(true));
        assert_eq!(e.facts.tools, None, "empty is unknown, never `no`");
        assert_eq!(e.facts.json_schema, Some(false));
        assert_eq!(e.facts.cached_input_usd_per_mtok, Some(1.25));
        assert_eq!(e.source, Source::Litellm("1.110.2".into()));
        let url = one("anthropic,m,,,,,,3,,,2026-12-02,https://docs.anthropic.com/x").unwrap();
        assert_eq!(
            url.get(Dialect::Anthropic, "m").unwrap().source.cite(),
            "https://docs.anthropic.com/x"
        );
    }

    #[test]
    fn bad_rows_are_named_by_line_and_column() {
        let cases = [
            (
                "openai,m,big,,,,,,,,2026-12-02,litellm@1",
                "t.csv:3: context_window `big`",
            ),
            (
                "openai,m,,,maybe,,,,,,2026-12-02,litellm@1",
                "images `maybe`",
            ),
            (
                "openai,m,,,,,,1.5$,,,2026-12-02,litellm@1",
                "input_usd_per_mtok `1.5$`",
            ),
            (
                "openai,m,,,,,,-1,,,2026-12-02,litellm@1",
                "input_usd_per_mtok `-1`",
            ),
            (
                "openai,m,,,,,,NaN,,,2026-12-02,litellm@1",
                "`NaN` is not a price",
            ),
            ("openai,m,,,,,,,,,2026-13-02,litellm@1", "date `2026-13-02`"),
            (
                "openai,m,,,,,,,,,2026-12-02,somewhere",
                "source `somewhere`",
            ),
            (
                "opanai,m,,,,,,,,,2026-12-02,litellm@1",
                "did you mean `openai`",
            ),
            ("openai,m,,,,,,,,2026-12-02,litellm@1", "11 columns"),
        ];
        for (row, want) in cases {
            let e = one(row).unwrap_err();
            assert!(e.contains(want), "{row}: {e}");
        }
        let dup = "openai,m,1,,,,,,,,2026-12-02,litellm@1";
        let e = Catalogue::parse("t.csv", &format!("{HEAD}{dup}\n{dup}\n")).unwrap_err();
        assert!(e.contains("t.csv:3: `openai/m` is a second time"), "{e}");
        let e = Catalogue::parse("t.csv", "family,model\n").unwrap_err();
        assert!(e.contains("t.csv:1: the header must be"), "{e}");
    }

    #[test]
    fn patterns_are_case_insensitive_substrings_or_globs() {
        let c = catalogue().unwrap();
        let claude = c.matching("CLAUDE");
        assert!(!claude.is_empty());
        assert!(claude.iter().all(|e| e.family == Dialect::Anthropic));
        let glob_rows = c.matching("openai/gpt-4o*");
        assert!(glob_rows.iter().any(|e| e.model == "gpt-4o-mini"));
        assert!(glob_rows.iter().all(|e| e.family == Dialect::Openai));
        assert!(c
            .matching("azure/gpt-4o")
            .iter()
            .all(|e| e.family == Dialect::Azure));
        assert!(c.matching("no-such-model-anywhere").is_empty());
        assert!(glob(b"a*c?e", b"abbbcde"));
        assert!(!glob(b"a*c?e", b"abbbce"));
        assert!(glob(b"*", b""));
    }
}
