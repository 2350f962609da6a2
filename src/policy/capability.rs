//! Equivalence contracts (seed 001): what a model can serve — context window, output
//! limit, tools, JSON-schema output, images, streaming — and what it costs. A backup is
//! used only for requests it can serve; a route that cannot is skipped with a reason
//! and never called. Unknown facts are not guessed: an absent fact never blocks.

use crate::core::request::Needs;
use serde::{Deserialize, Serialize};

/// Per-model facts from the pool config (`models:`, over the catalogue's) or a scenario
/// chain entry (`model:`, alone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFacts {
    /// Prompt plus output tokens the model accepts.
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u64>,
    pub tools: Option<bool>,
    pub json_schema: Option<bool>,
    pub images: Option<bool>,
    /// PDF (document) input.
    pub documents: Option<bool>,
    /// More than one answer a request (`n > 1`).
    pub n: Option<bool>,
    pub streaming: Option<bool>,
    /// Prices in US dollars per million tokens.
    pub input_usd_per_mtok: Option<f64>,
    pub output_usd_per_mtok: Option<f64>,
    /// Prompt tokens read from the provider's cache (a repeated prefix).
    pub cached_input_usd_per_mtok: Option<f64>,
}

impl ModelFacts {
    /// These facts, each absent one taken from `base`: a config's `models:` entry over
    /// the catalogue's row, field by field, so writing one fact keeps the others known.
    pub fn over(self, base: &ModelFacts) -> ModelFacts {
        ModelFacts {
            context_window: self.context_window.or(base.context_window),
            max_output_tokens: self.max_output_tokens.or(base.max_output_tokens),
            tools: self.tools.or(base.tools),
            json_schema: self.json_schema.or(base.json_schema),
            images: self.images.or(base.images),
            documents: self.documents.or(base.documents),
            n: self.n.or(base.n),
            streaming: self.streaming.or(base.streaming),
            input_usd_per_mtok: self.input_usd_per_mtok.or(base.input_usd_per_mtok),
            output_usd_per_mtok: self.output_usd_per_mtok.or(base.output_usd_per_mtok),
            cached_input_usd_per_mtok: self
                .cached_input_usd_per_mtok
                .or(base.cached_input_usd_per_mtok),
        }
    }
}

/// Why a route with `facts` cannot serve `needs`, if it cannot.
pub fn cannot_serve(facts: &ModelFacts, needs: &Needs) -> Option<String> {
    let lacks = |have: Option<bool>, need: bool, what: &str| {
        (need && have == Some(false)).then(|| format!("no {what}"))
    };
    if let Some(window) = facts.context_window {
        let wanted = needs.prompt_tokens + needs.max_output_tokens;
        if wanted > window {
            return Some(format!("context window {window} < ~{wanted} tokens"));
        }
        if needs.min_window > 0 && window <= needs.min_window {
            return Some(format!(
                "context window {window} not larger than {} (overflowed there)",
                needs.min_window
            ));
        }
    }
    if let Some(max) = facts.max_output_tokens {
        if needs.max_output_tokens > max {
            return Some(format!(
                "max output {max} < {} requested",
                needs.max_output_tokens
            ));
        }
    }
    lacks(facts.tools, needs.tools, "tools")
        .or_else(|| lacks(facts.json_schema, needs.json_schema, "JSON-schema output"))
        .or_else(|| lacks(facts.images, needs.images, "image input"))
        .or_else(|| lacks(facts.documents, needs.documents, "document input"))
        .or_else(|| lacks(facts.n, needs.choices, "n > 1"))
        .or_else(|| lacks(facts.streaming, needs.streaming, "streaming"))
}

/// Estimated cost of one call: the prompt, and the output budget at its maximum (what
/// providers reserve). Zero without a price.
pub fn estimate_cost_usd(facts: &ModelFacts, needs: &Needs) -> f64 {
    let input = facts.input_usd_per_mtok.unwrap_or(0.0) * needs.prompt_tokens as f64;
    let output = facts.output_usd_per_mtok.unwrap_or(0.0) * needs.max_output_tokens as f64;
    (input + output) / 1_000_000.0
}

/// What a backup lacks that its primary has, for `poolctl check`.
pub fn backup_gaps(primary: &ModelFacts, backup: &ModelFacts) -> Vec<String> {
    let mut gaps = Vec::new();
    let flag = |p: Option<bool>, b: Option<bool>, what: &str, gaps: &mut Vec<String>| {
        if p == Some(true) && b == Some(false) {
            gaps.push(format!("no {what}"));
        }
    };
    flag(primary.tools, backup.tools, "tools", &mut gaps);
    flag(
        primary.json_schema,
        backup.json_schema,
        "JSON-schema output",
        &mut gaps,
    );
    flag(primary.images, backup.images, "image input", &mut gaps);
    flag(
        primary.documents,
        backup.documents,
        "document input",
        &mut gaps,
    );
    flag(primary.n, backup.n, "n > 1", &mut gaps);
    flag(primary.streaming, backup.streaming, "streaming", &mut gaps);
    if let (Some(p), Some(b)) = (primary.context_window, backup.context_window) {
        if b < p {
            gaps.push(format!("context window {b} < {p}"));
        }
    }
    if let (Some(p), Some(b)) = (primary.max_output_tokens, backup.max_output_tokens) {
        if b < p {
            gaps.push(format!("max output {b} < {p}"));
        }
    }
    gaps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incapable_routes_are_named() {
        let small = ModelFacts {
            context_window: Some(8192),
            tools: Some(false),
            ..Default::default()
        };
        let big = Needs {
            prompt_tokens: 10_000,
            max_output_tokens: 100,
            ..Default::default()
        };
        assert!(cannot_serve(&small, &big)
            .unwrap()
            .contains("context window 8192"));
        let tools = Needs {
            tools: true,
            ..Default::default()
        };
        assert_eq!(cannot_serve(&small, &tools).as_deref(), Some("no tools"));
        assert_eq!(
            cannot_serve(&ModelFacts::default(), &big),
            None,
            "unknown facts never block"
        );
        let after = Needs {
            min_window: 8192,
            ..Default::default()
        };
        assert!(cannot_serve(&small, &after).is_some());
    }

    #[test]
    fn images_documents_and_n_are_facts_an_absent_one_never_blocks() {
        let none = ModelFacts {
            images: Some(false),
            documents: Some(false),
            n: Some(false),
            ..Default::default()
        };
        let need = |images, documents, choices| Needs {
            images,
            documents,
            choices,
            ..Default::default()
        };
        assert_eq!(
            cannot_serve(&none, &need(true, false, false)).as_deref(),
            Some("no image input")
        );
        assert_eq!(
            cannot_serve(&none, &need(false, true, false)).as_deref(),
            Some("no document input")
        );
        assert_eq!(
            cannot_serve(&none, &need(false, false, true)).as_deref(),
            Some("no n > 1")
        );
        assert_eq!(
            cannot_serve(&ModelFacts::default(), &need(true, true, true)),
            None
        );
    }

    #[test]
    fn written_facts_win_field_by_field_and_the_rest_come_from_the_base() {
        let base = ModelFacts {
            context_window: Some(128_000),
            images: Some(false),
            input_usd_per_mtok: Some(2.5),
            cached_input_usd_per_mtok: Some(1.25),
            ..Default::default()
        };
        let written = ModelFacts {
            images: Some(true),
            output_usd_per_mtok: Some(10.0),
            ..Default::default()
        };
        let got = written.over(&base);
        assert_eq!(got.images, Some(true), "the written fact wins");
        assert_eq!(
            got.context_window,
            Some(128_000),
            "an unwritten one is the base's"
        );
        assert_eq!(got.input_usd_per_mtok, Some(2.5));
        assert_eq!(got.output_usd_per_mtok, Some(10.0));
        assert_eq!(got.cached_input_usd_per_mtok, Some(1.25));
        assert_eq!(got.tools, None, "unknown in both stays unknown");
        assert_eq!(ModelFacts::default().over(&base), base);
    }

    #[test]
    fn cost_and_gaps() {
        let f = ModelFacts {
            input_usd_per_mtok: Some(3.0),
            output_usd_per_mtok: Some(15.0),
            ..Default::default()
        };
        let n = Needs {
            prompt_tokens: 1000,
            max_output_tokens: 1000,
            ..Default::default()
        };
        assert!((estimate_cost_usd(&f, &n) - 0.018).abs() < 1e-12);
        let p = ModelFacts {
            tools: Some(true),
            context_window: Some(200_000),
            ..Default::default()
        };
        let b = ModelFacts {
            tools: Some(false),
            context_window: Some(32_000),
            ..Default::default()
        };
        assert_eq!(backup_gaps(&p, &b).len(), 2);
    }
}
