//! Rerank in the Cohere / Jina shape, which most rerank services copy:
//! `POST {base}/rerank {model, query, documents, top_n}` → `results[{index,
//! relevance_score}]`, with Bearer auth.

use super::codec::{tokens, BadSuccess};
use super::endpoint::Endpoint;
use super::http::HttpCall;
use crate::core::request::Usage;
use serde_json::{json, Value};

pub fn rerank_call(
    ep: &Endpoint,
    model: &str,
    query: &str,
    documents: &[String],
    top_n: usize,
) -> HttpCall {
    HttpCall {
        url: ep.url("/rerank"),
        headers: vec![("authorization", format!("Bearer {}", ep.api_key.expose()))],
        body: json!({ "model": model, "query": query, "documents": documents, "top_n": top_n })
            .into(),
    }
}

/// Document indices, best first. Every index must name a document, once.
pub fn parse_rerank(v: &Value, documents: usize) -> Result<(Vec<usize>, Usage), BadSuccess> {
    let results = v
        .get("results")
        .and_then(Value::as_array)
        .ok_or_else(|| BadSuccess::Malformed("no `results` in the rerank response".into()))?;
    let mut scored: Vec<(usize, f64)> = Vec::with_capacity(results.len());
    for r in results {
        let index = r
            .get("index")
            .and_then(Value::as_u64)
            .map(|i| i as usize)
            .filter(|i| *i < documents)
            .ok_or_else(|| BadSuccess::Malformed("a rerank result has no valid `index`".into()))?;
        if scored.iter().any(|(i, _)| *i == index) {
            return Err(BadSuccess::Malformed(format!(
                "document {index} ranked twice"
            )));
        }
        let score = r
            .get("relevance_score")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        scored.push((index, score));
    }
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    let usage = Usage {
        input_tokens: tokens(v.pointer("/usage/total_tokens")),
        ..Usage::default()
    };
    Ok((scored.into_iter().map(|(i, _)| i).collect(), usage))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_best_first_and_rejects_bad_indices() {
        let v = json!({"results":[{"index":0,"relevance_score":0.2},{"index":2,"relevance_score":0.9}]});
        assert_eq!(parse_rerank(&v, 3).ok().unwrap().0, vec![2, 0]);
        assert!(parse_rerank(&json!({"results":[{"index":7,"relevance_score":1.0}]}), 3).is_err());
        assert!(parse_rerank(&json!({"results":[{"index":1},{"index":1}]}), 3).is_err());
        assert!(parse_rerank(&json!({}), 3).is_err());
    }
}
