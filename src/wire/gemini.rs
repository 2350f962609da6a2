//! The Gemini API wire: `POST {base}/v1beta/models/{model}:generateContent` with
//! `x-goog-api-key`.

pub mod history;
pub mod schema;
pub use history::*;
use schema::is_bare_object;
pub use schema::response_schema;

use super::codec::{tokens, BadSuccess, ChatParsed};
use super::endpoint::Endpoint;
use super::http::HttpCall;
use crate::core::answer::FinishReason;
use crate::core::conversation::{Conversation, Part, Source, Turn};
use crate::core::request::{ChatRequest, ToolChoice, Usage};
use serde_json::{json, Value};

/// Gemini's sampling lives in `generationConfig`.
const SAMPLING: super::codec::SamplingNames = super::codec::SamplingNames {
    temperature: "temperature",
    top_p: "topP",
    stop: "stopSequences",
    seed: Some("seed"),
    top_k: Some("topK"),
};

pub fn chat_call(ep: &Endpoint, model: &str, req: &ChatRequest) -> HttpCall {
    let (system, contents) = history::gemini_request_parts(&without_url_parts(&req.conversation));
    let mut body = json!({ "contents": contents });
    let mut config = serde_json::Map::new();
    if let Some(max) = req.max_tokens {
        config.insert("maxOutputTokens".into(), json!(max));
    }
    super::codec::put_sampling(&mut config, &req.sampling, &SAMPLING);
    if let Some(n) = req.n.filter(|n| *n > 1) {
        config.insert("candidateCount".into(), json!(n));
    }
    if let Some(r) = req.reasoning {
        config.insert(
            "thinkingConfig".into(),
            json!({"thinkingBudget": r.budget_tokens()}),
        );
    }
    if let Some(schema) = &req.json_schema {
        config.insert("responseMimeType".into(), json!("application/json"));
        // fidelity.md §2 names `responseSchema`: Gemini's OpenAPI subset. A schema that
        // needs references (`$ref`, `$defs`: Pydantic's nested models) has no form
        // there and goes as JSON Schema (`responseJsonSchema`, Gemini 2.5 and later).
        // Either way the router validates the answer against the whole schema.
        // `json_object` (the schema `{"type": "object"}`) is the MIME type alone:
        // Gemini refuses an OBJECT schema without properties.
        if !is_bare_object(schema) {
            match response_schema(schema) {
                Some(subset) => config.insert("responseSchema".into(), subset),
                None => config.insert("responseJsonSchema".into(), schema.clone()),
            };
        }
    }
    if !config.is_empty() {
        body["generationConfig"] = Value::Object(config);
    }
    if let Some(system) = system {
        // The name fidelity.md §2 writes; Gemini reads either case of its field names.
        body["system_instruction"] = system;
    }
    if !req.tools.is_empty() {
        body["tools"] = history::gemini_tools(&req.tools);
    }
    if let Some(choice) = &req.tool_choice {
        let calling = match choice {
            ToolChoice::Auto => json!({"mode": "AUTO"}),
            ToolChoice::None => json!({"mode": "NONE"}),
            ToolChoice::Required => json!({"mode": "ANY"}),
            ToolChoice::Tool(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
        };
        body["toolConfig"] = json!({ "functionCallingConfig": calling });
    }
    HttpCall {
        url: ep.url(&format!("/v1beta/models/{model}:generateContent")),
        headers: vec![("x-goog-api-key", ep.api_key.expose().to_string())],
        body: body.into(),
    }
}

/// The conversation without its images and documents by URL. A route is called with
/// one only under `drop_params`, which names it dropped (`wire::carry` skips the route
/// otherwise): it is left out, as named. Gemini's `file_data` would take the URL, but
/// only for its own uploaded files.
fn without_url_parts(c: &Conversation) -> std::borrow::Cow<'_, Conversation> {
    let by_url = |p: &Part| {
        matches!(
            p,
            Part::Image {
                source: Source::Url { .. },
                ..
            } | Part::Document {
                source: Source::Url { .. },
                ..
            }
        )
    };
    let any = c.turns.iter().any(|t| match t {
        Turn::User { parts } => parts.iter().any(by_url),
        _ => false,
    });
    if !any {
        return std::borrow::Cow::Borrowed(c);
    }
    let mut kept = c.clone();
    for turn in &mut kept.turns {
        if let Turn::User { parts } = turn {
            parts.retain(|p| !by_url(p));
        }
    }
    std::borrow::Cow::Owned(kept)
}

/// Gemini's `finishReason` in the shared vocabulary. Gemini says `STOP` even when the
/// answer calls functions; `has_calls` corrects that.
pub fn finish_reason(s: &str, has_calls: bool) -> FinishReason {
    match s {
        "STOP" if has_calls => FinishReason::ToolCalls,
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        s if REFUSALS.contains(&s) || BLOCKED.contains(&s) => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_string()),
    }
}

/// A `usageMetadata` object; `cachedContentTokenCount` is the cached prompt, and the
/// output is the candidates' tokens and the thoughts' together (fidelity.md §2).
pub fn usage(u: Option<&Value>) -> Usage {
    let thoughts = super::codec::count(u.and_then(|u| u.get("thoughtsTokenCount")));
    Usage {
        input_tokens: tokens(u.and_then(|u| u.get("promptTokenCount"))),
        output_tokens: tokens(u.and_then(|u| u.get("candidatesTokenCount")))
            + thoughts.unwrap_or(0),
        cached_tokens: super::codec::count(u.and_then(|u| u.get("cachedContentTokenCount"))),
        cache_creation_tokens: None,
        reasoning_tokens: thoughts,
    }
}

/// The text parts of a candidate, joined (function-call parts carry none). A thought
/// part's text is the model's reasoning, never its answer.
pub fn candidate_text(candidate: &Value) -> String {
    candidate
        .pointer("/content/parts")
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

/// Safety stops of a candidate that are the model's refusal (fidelity.md §4): an
/// answer, class `refusal`, with or without text.
pub const REFUSALS: &[&str] = &[
    "SAFETY",
    "PROHIBITED_CONTENT",
    "BLOCKLIST",
    "SPII",
    "IMAGE_SAFETY",
];

/// Other stops that leave a candidate without an answer when no text came: a
/// recitation, a prohibited image, Model Armor. §4 does not list them as refusals, so
/// with no text they stay `content_policy` (the request cannot be answered as asked).
const BLOCKED: &[&str] = &["RECITATION", "IMAGE_PROHIBITED_CONTENT", "MODEL_ARMOR"];

/// Finish reasons of a generation that failed on the provider's side
/// (ai.google.dev `FinishReason`): a function call the model could not form, a tool
/// call it was not given, or an unstated reason. With no text and no call they leave no
/// answer, and another attempt may well produce one.
pub fn is_failed_finish(reason: &str) -> bool {
    matches!(
        reason,
        "MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL" | "OTHER" | "FINISH_REASON_UNSPECIFIED"
    )
}

/// The text and function-call parts of the first candidate, `finishReason`,
/// `modelVersion`, `usageMetadata`, and `responseId`.
pub fn parse_chat(v: &Value) -> Result<ChatParsed, BadSuccess> {
    if let Some(reason) = v
        .get("promptFeedback")
        .and_then(|p| p.get("blockReason"))
        .and_then(Value::as_str)
    {
        return Err(BadSuccess::Refused(format!("prompt blocked: {reason}")));
    }
    let candidate = v
        .get("candidates")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| BadSuccess::Malformed("no candidates in the response".into()))?;
    let text = candidate_text(candidate);
    let finish = candidate.get("finishReason").and_then(Value::as_str);
    if text.is_empty() && finish.is_some_and(|f| BLOCKED.contains(&f)) {
        return Err(BadSuccess::Refused(format!(
            "finishReason {}",
            finish.unwrap_or_default()
        )));
    }
    let tool_calls = match candidate.pointer("/content/parts") {
        Some(parts) => history::gemini_answer_tool_calls(parts).map_err(|e| {
            BadSuccess::Malformed(format!("a tool call in the answer is unusable: {e}"))
        })?,
        None => Vec::new(),
    };
    let refusal = finish
        .filter(|f| REFUSALS.contains(f))
        .map(|_| String::new());
    // `candidateCount` > 1: each further candidate is one more answer.
    let more_choices = v
        .get("candidates")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .skip(1)
                .map(|c| {
                    let calls = c
                        .pointer("/content/parts")
                        .map(history::gemini_answer_tool_calls)
                        .transpose()
                        .ok()
                        .flatten()
                        .unwrap_or_default();
                    let finish = c.get("finishReason").and_then(Value::as_str);
                    crate::core::answer::Choice {
                        text: candidate_text(c),
                        finish_reason: finish.map(|f| finish_reason(f, !calls.is_empty())),
                        tool_calls: calls,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    if let Some(f) = finish.filter(|f| is_failed_finish(f)) {
        if text.is_empty() && tool_calls.is_empty() {
            return Err(BadSuccess::Malformed(format!(
                "finishReason {f} with no answer"
            )));
        }
    }
    Ok(ChatParsed {
        finish_reason: finish.map(|f| finish_reason(f, !tool_calls.is_empty())),
        text,
        tool_calls,
        model: v
            .get("modelVersion")
            .and_then(Value::as_str)
            .map(str::to_string),
        usage: usage(v.get("usageMetadata")),
        id: v
            .get("responseId")
            .and_then(Value::as_str)
            .map(str::to_string),
        refusal,
        reasoning: super::anthropic::joined(
            candidate
                .pointer("/content/parts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|p| p.get("thought").and_then(Value::as_bool) == Some(true))
                .filter_map(|p| p.get("text").and_then(Value::as_str)),
        ),
        more_choices,
    })
}

/// `POST {base}/v1beta/models/{model}:batchEmbedContents`.
pub fn embed_call(
    ep: &Endpoint,
    model: &str,
    inputs: &[String],
    dimensions: Option<u32>,
) -> HttpCall {
    let requests: Vec<Value> = inputs
        .iter()
        .map(|t| {
            let mut r =
                json!({"model": format!("models/{model}"), "content": {"parts": [{"text": t}]}});
            if let Some(d) = dimensions {
                r["outputDimensionality"] = json!(d);
            }
            r
        })
        .collect();
    HttpCall {
        url: ep.url(&format!("/v1beta/models/{model}:batchEmbedContents")),
        headers: vec![("x-goog-api-key", ep.api_key.expose().to_string())],
        body: json!({ "requests": requests }).into(),
    }
}

/// `embeddings[].values`; the count must match the inputs.
pub fn parse_embed(v: &Value, expected: usize) -> Result<(Vec<Vec<f32>>, Usage), BadSuccess> {
    let items = v
        .get("embeddings")
        .and_then(Value::as_array)
        .ok_or_else(|| BadSuccess::Malformed("no `embeddings` in the response".into()))?;
    let vectors = items
        .iter()
        .map(|e| super::openai::floats(e.get("values")))
        .collect::<Result<Vec<_>, _>>()?;
    if vectors.len() != expected {
        return Err(BadSuccess::Malformed(format!(
            "{} embeddings for {expected} inputs",
            vectors.len()
        )));
    }
    Ok((vectors, Usage::default()))
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_json_schema_becomes_geminis_response_schema_subset() {
        let schema = json!({"type": "object", "additionalProperties": false,
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "properties": {
                "city": {"type": "string", "description": "where"},
                "temp": {"type": ["number", "null"]},
                "unit": {"const": "C"},
                "tags": {"type": "array", "items": {"type": "string", "additionalProperties": false}},
                "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]}},
            "required": ["city"]});
        assert_eq!(
            response_schema(&schema).unwrap(),
            json!({"type": "object", "properties": {
                "city": {"type": "string", "description": "where"},
                "temp": {"type": "number", "nullable": true},
                "unit": {"enum": ["C"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
                "required": ["city"]})
        );
    }

    #[test]
    fn a_schema_with_references_has_no_response_schema_form() {
        let schema = json!({"$defs": {"P": {"type": "string"}},
            "type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}});
        assert_eq!(response_schema(&schema), None);
        let nested = json!({"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}});
        assert_eq!(response_schema(&nested), None);
        let free_map = json!({"type": "object", "properties": {"m": {"type": "object"}}});
        assert_eq!(response_schema(&free_map), None);
    }

    use super::*;

    #[test]
    fn parses_a_response() {
        let v = json!({"candidates":[{"content":{"role":"model","parts":[{"text":"OK"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":1,"cachedContentTokenCount":3},"responseId":"r1","modelVersion":"gemini-x-001"});
        let p = parse_chat(&v).ok().unwrap();
        assert_eq!(
            (p.text.as_str(), p.usage.input_tokens, p.id.as_deref()),
            ("OK", 4, Some("r1"))
        );
        assert_eq!(p.usage.cached_tokens, Some(3));
        assert_eq!(p.model.as_deref(), Some("gemini-x-001"));
        assert_eq!(p.finish_reason, Some(FinishReason::Stop));
        // A safety stop of fidelity.md §4 is the model's refusal: an answer.
        let refused = json!({"candidates":[{"finishReason":"SAFETY"}]});
        assert_eq!(
            parse_chat(&refused).ok().and_then(|p| p.refusal),
            Some(String::new())
        );
        // A recitation stop with nothing said is still no answer.
        let recited = json!({"candidates":[{"finishReason":"RECITATION"}]});
        assert!(matches!(parse_chat(&recited), Err(BadSuccess::Refused(_))));
        let prompt = json!({"promptFeedback":{"blockReason":"SAFETY"}});
        assert!(matches!(parse_chat(&prompt), Err(BadSuccess::Refused(_))));
    }

    /// Guards Gemini's MALFORMED_FUNCTION_CALL with no parts: it was served as an empty
    /// success, where another attempt may answer.
    #[test]
    fn a_failed_finish_with_no_answer_is_malformed() {
        let bad = json!({"candidates":[{"content":{"role":"model"},"finishReason":"MALFORMED_FUNCTION_CALL","index":0}]});
        assert!(matches!(parse_chat(&bad), Err(BadSuccess::Malformed(_))));
        let other_with_text =
            json!({"candidates":[{"content":{"parts":[{"text":"fine"}]},"finishReason":"OTHER"}]});
        assert_eq!(
            parse_chat(&other_with_text).ok().map(|p| p.text),
            Some("fine".into())
        );
    }
}
