//! The Gemini API wire: `POST {base}/v1beta/models/{model}:generateContent` with
//! `x-goog-api-key`.

use super::{tokens, BadSuccess, Endpoint, HttpCall};
use crate::conversation;
use crate::request::{ChatRequest, Usage};
use serde_json::{json, Value};

pub fn chat_call(ep: &Endpoint, model: &str, req: &ChatRequest) -> HttpCall {
    let (system, contents) = conversation::gemini_request_parts(&req.conversation);
    let mut body = json!({
        "contents": contents,
        "generationConfig": {"maxOutputTokens": req.max_tokens},
    });
    if let Some(system) = system {
        body["systemInstruction"] = system;
    }
    if !req.tools.is_empty() {
        body["tools"] = conversation::gemini_tools(&req.tools);
    }
    HttpCall {
        url: ep.url(&format!("/v1beta/models/{model}:generateContent")),
        headers: vec![("x-goog-api-key", ep.api_key.expose().to_string())],
        body,
    }
}

/// The text parts of a candidate, joined (function-call parts carry none).
pub fn candidate_text(candidate: &Value) -> String {
    candidate
        .pointer("/content/parts")
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

/// Safety stops that leave a candidate without an answer.
const BLOCKED: &[&str] = &[
    "SAFETY",
    "PROHIBITED_CONTENT",
    "BLOCKLIST",
    "SPII",
    "RECITATION",
];

/// The text parts of the first candidate, `usageMetadata`, and `responseId`.
pub fn parse_chat(v: &Value) -> Result<(String, Usage, Option<String>), BadSuccess> {
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
    let finish = candidate
        .get("finishReason")
        .and_then(Value::as_str)
        .unwrap_or("");
    if text.is_empty() && BLOCKED.contains(&finish) {
        return Err(BadSuccess::Refused(format!("finishReason {finish}")));
    }
    let usage = v.get("usageMetadata");
    let usage = Usage {
        input_tokens: tokens(usage.and_then(|u| u.get("promptTokenCount"))),
        output_tokens: tokens(usage.and_then(|u| u.get("candidatesTokenCount"))),
    };
    let id = v
        .get("responseId")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok((text, usage, id))
}

/// `POST {base}/v1beta/models/{model}:batchEmbedContents`.
pub fn embed_call(ep: &Endpoint, model: &str, inputs: &[String]) -> HttpCall {
    let requests: Vec<Value> = inputs
        .iter()
        .map(|t| json!({"model": format!("models/{model}"), "content": {"parts": [{"text": t}]}}))
        .collect();
    HttpCall {
        url: ep.url(&format!("/v1beta/models/{model}:batchEmbedContents")),
        headers: vec![("x-goog-api-key", ep.api_key.expose().to_string())],
        body: json!({ "requests": requests }),
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
    use super::*;

    #[test]
    fn parses_a_response() {
        let v = json!({"candidates":[{"content":{"role":"model","parts":[{"text":"OK"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":1},"responseId":"r1"});
        let (text, usage, id) = parse_chat(&v).ok().unwrap();
        assert_eq!(
            (text.as_str(), usage.input_tokens, id.as_deref()),
            ("OK", 4, Some("r1"))
        );
        let blocked = json!({"candidates":[{"finishReason":"SAFETY"}]});
        assert!(matches!(parse_chat(&blocked), Err(BadSuccess::Refused(_))));
        let prompt = json!({"promptFeedback":{"blockReason":"SAFETY"}});
        assert!(matches!(parse_chat(&prompt), Err(BadSuccess::Refused(_))));
    }
}
