//! `poolctl models [--json] [PATTERN]`: the models the router already knows (the
//! catalogue, `config::catalogue`), their facts and where each came from. PATTERN is
//! matched case-insensitively against `family/model`: a substring, or a glob with `*`
//! and `?`. Exit 1 when nothing matches (as `grep` does), so a script can test for a
//! model.

use super::exit::Exit;
use super::look::Look;
use super::out;
use super::table::width;
use crate::config::catalogue::{self, Entry, Source};
use clap::Args;
use serde_json::{json, Value};

#[derive(Debug, Args)]
pub struct ModelsArgs {
    /// Only models whose `family/model` holds this text (case-insensitive), or matches
    /// it as a glob (`*`, `?`): `gpt-4o`, `claude`, `deepseek/*`.
    #[arg(value_name = "PATTERN")]
    pub pattern: Option<String>,
    /// Print JSON: every row with its facts, source and date.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ModelsArgs, look: &Look) -> anyhow::Result<Exit> {
    let catalogue = catalogue::catalogue().map_err(|e| anyhow::anyhow!("{e}"))?;
    let rows = match &args.pattern {
        Some(p) => catalogue.matching(p),
        None => catalogue.entries().iter().collect(),
    };
    if args.json {
        out::line(
            &json!({ "models": rows.iter().map(|e| entry_json(e)).collect::<Vec<_>>() })
                .to_string(),
        )?;
    }
    if rows.is_empty() {
        out::warn(&format!(
            "no known model matches `{}` ({} are known: `poolctl models` lists them; a \
             config's `models:` describes any other)",
            args.pattern.as_deref().unwrap_or_default(),
            catalogue.entries().len()
        ));
        return Ok(Exit::Failed);
    }
    if !args.json {
        // 80 columns at most, as `capacity` prints: a wide terminal gains nothing here.
        out::print(&render(&rows, look.width.min(80)))?;
    }
    Ok(Exit::Ok)
}

/// One row for `--json`: every fact (null where the source states none) and its source.
pub fn entry_json(e: &Entry) -> Value {
    let f = &e.facts;
    json!({
        "family": e.family.as_str(),
        "model": e.model,
        "context_window": f.context_window,
        "max_output_tokens": f.max_output_tokens,
        "images": f.images,
        "tools": f.tools,
        "json_schema": f.json_schema,
        "input_usd_per_mtok": f.input_usd_per_mtok,
        "output_usd_per_mtok": f.output_usd_per_mtok,
        "cached_input_usd_per_mtok": f.cached_input_usd_per_mtok,
        "source": e.source.as_written(),
        "source_cite": e.source.cite(),
        "date": e.date,
    })
}

/// The fact columns, right-aligned: header and value of each.
const HEADERS: [&str; 6] = ["WINDOW", "MAX OUT", "CAN", "IN $", "OUT $", "CACHED $"];
const GAP: usize = 2;
const INDENT: &str = "  ";
const NAME_HEADER: &str = "FAMILY / MODEL";

/// The rows by family (a heading each), one line a model; a model name too long for its
/// column takes a line of its own, its facts on the next. Below: the legend and the
/// sources, numbered when the rows shown have more than one. Never wider than `total`
/// unless one model name alone is.
pub fn render(rows: &[&Entry], total: usize) -> String {
    // (source, date) pairs, in first-seen order: the footnotes.
    let mut sources: Vec<(&Source, &str)> = Vec::new();
    for e in rows {
        if !sources.contains(&(&e.source, e.date.as_str())) {
            sources.push((&e.source, &e.date));
        }
    }
    let numbered = sources.len() > 1;
    let cells = |e: &Entry| -> Vec<String> {
        let f = &e.facts;
        let n = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "?".into());
        let p = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_else(|| "?".into());
        let can = |v: Option<bool>, c: char| match v {
            Some(true) => c,
            Some(false) => '-',
            None => '?',
        };
        let mut v = vec![
            n(f.context_window),
            n(f.max_output_tokens),
            [
                can(f.images, 'i'),
                can(f.tools, 't'),
                can(f.json_schema, 'j'),
            ]
            .iter()
            .collect(),
            p(f.input_usd_per_mtok),
            p(f.output_usd_per_mtok),
            p(f.cached_input_usd_per_mtok),
        ];
        if numbered {
            let i = sources
                .iter()
                .position(|s| *s == (&e.source, e.date.as_str()))
                .unwrap_or(0);
            v.push(format!("[{}]", i + 1));
        }
        v
    };
    let table: Vec<(&Entry, Vec<String>)> = rows.iter().map(|e| (*e, cells(e))).collect();
    let mut headers: Vec<&str> = HEADERS.to_vec();
    if numbered {
        headers.push("SRC");
    }
    let widths: Vec<usize> = (0..headers.len())
        .map(|i| {
            table
                .iter()
                .map(|(_, c)| width(&c[i]))
                .chain([width(headers[i])])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let facts_width: usize = widths.iter().sum::<usize>() + GAP * (widths.len() - 1);
    let longest = table
        .iter()
        .map(|(e, _)| width(&e.model))
        .max()
        .unwrap_or(0);
    // The name column: as wide as the longest name, within what the facts leave.
    let name_width = longest
        .min(total.saturating_sub(facts_width + GAP + INDENT.len()))
        .max(width(NAME_HEADER) - INDENT.len());
    let facts_line = |values: &[String]| -> String {
        values
            .iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v:>w$}"))
            .collect::<Vec<_>>()
            .join(&" ".repeat(GAP))
    };
    let mut out = String::new();
    let head: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    let head_width = name_width + INDENT.len();
    out.push_str(&format!(
        "{:<head_width$}{}{}\n",
        NAME_HEADER,
        " ".repeat(GAP),
        facts_line(&head)
    ));
    let mut family = None;
    for (e, values) in &table {
        if family != Some(e.family) {
            family = Some(e.family);
            let count = table.iter().filter(|(x, _)| x.family == e.family).count();
            out.push_str(&format!("{} ({count})\n", e.family));
        }
        let facts = facts_line(values);
        if width(&e.model) <= name_width {
            let pad = name_width - width(&e.model) + GAP;
            out.push_str(&format!("{INDENT}{}{}{facts}\n", e.model, " ".repeat(pad)));
        } else {
            out.push_str(&format!("{INDENT}{}\n", e.model));
            out.push_str(&format!(
                "{}{facts}\n",
                " ".repeat(INDENT.len() + name_width + GAP)
            ));
        }
    }
    out.push_str("\nCAN: i images, t tools, j JSON schema (- no, ? not stated).\n");
    out.push_str("Prices: US dollars per million tokens. A config's `models:` wins, fact\n");
    out.push_str("by fact.\n");
    for (i, (source, date)) in sources.iter().enumerate() {
        let mark = if numbered {
            format!("[{}] ", i + 1)
        } else {
            "Source of every row: ".to_string()
        };
        out.push_str(&super::render::hang(
            "",
            &format!("{mark}{}, read {date}.", source.cite()),
            total,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::dialect::Dialect;
    use crate::policy::capability::ModelFacts;

    fn entry(family: Dialect, model: &str, source: Source) -> Entry {
        Entry {
            family,
            model: model.into(),
            facts: ModelFacts {
                context_window: Some(1_047_576),
                max_output_tokens: Some(32_768),
                images: Some(true),
                tools: Some(false),
                input_usd_per_mtok: Some(0.388126),
                output_usd_per_mtok: Some(10.0),
                ..Default::default()
            },
            date: "2026-12-02".into(),
            source,
        }
    }

    #[test]
    fn every_line_fits_80_columns_and_a_long_name_takes_its_own_line() {
        let lite = Source::Litellm("1.110.2".into());
        let short = entry(Dialect::Openai, "gpt-4o", lite.clone());
        let long = entry(
            Dialect::Fireworks,
            "accounts/fireworks/models/llama4-maverick-instruct-basic",
            lite,
        );
        let text = render(&[&short, &long], 80);
        for line in text.lines() {
            assert!(width(line) <= 80, "{} columns: {line}", width(line));
        }
        assert!(text.contains("\nopenai (1)\n"), "{text}");
        let row = text.lines().find(|l| l.contains("gpt-4o")).unwrap();
        assert!(row.contains("1047576") && row.contains("i-?"), "{row}");
        assert!(row.contains("0.388126") && row.ends_with('?'), "{row}");
        let at = text
            .lines()
            .position(|l| l.ends_with("llama4-maverick-instruct-basic"))
            .expect("the long name alone on its line");
        assert!(text.lines().nth(at + 1).unwrap().contains("1047576"));
        assert!(text.contains("Source of every row: LiteLLM"), "{text}");
        assert!(text.contains("read 2026-12-02"), "{text}");
        assert!(!text.contains("SRC"), "one source: no footnote column");
    }

    #[test]
    fn two_sources_are_footnoted_per_row() {
        let a = entry(
            Dialect::Anthropic,
            "claude-x",
            Source::Litellm("1.110.2".into()),
        );
        let b = entry(
            Dialect::Anthropic,
            "claude-y",
            Source::Url("https://docs.anthropic.com/en/docs/about-claude/models".into()),
        );
        let text = render(&[&a, &b], 80);
        assert!(text.contains("SRC"), "{text}");
        assert!(text
            .lines()
            .any(|l| l.contains("claude-y") && l.ends_with("[2]")));
        assert!(text.contains("[2] https://docs.anthropic.com/"), "{text}");
        for line in text.lines() {
            assert!(width(line) <= 80, "{line}");
        }
    }

    #[test]
    fn json_carries_every_fact_and_the_source() {
        let e = entry(Dialect::Openai, "gpt-4o", Source::Litellm("1.110.2".into()));
        let v = entry_json(&e);
        assert_eq!(v["family"], "openai");
        assert_eq!(v["context_window"], 1_047_576);
        assert_eq!(v["json_schema"], Value::Null, "not stated is null");
        assert_eq!(v["source"], "litellm@1.110.2");
        assert_eq!(v["date"], "2026-12-02");
    }
}
