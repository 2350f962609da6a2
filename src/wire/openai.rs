//! The OpenAI-compatible wire: `POST {base}/chat/completions` with Bearer auth. Most
//! providers (DeepSeek, DashScope compatible mode, GLM, Kimi, Groq, OpenRouter, ...)
//! speak it; their dialects differ only in what their errors mean.

use super::{tokens, BadSuccess, Endpoint, HttpCall};
use crate::conversation;
use crate::request::{ChatRequest, Usage};
use serde_json::{json, Value};

pub fn chat_call(ep: &Endpoint, model: &str, req: &ChatRequest) -> HttpCall {
    let mut body = json!({
        "model": model,
        "messages": conversation::openai_messages(&req.conversation),
        "max_tokens": req.max_tokens,
        "stream": false,
    });
    if !req.tools.is_empty() {
        body["tools"] = conversation::openai_tools(&req.tools);
    }
    HttpCall {
        url: ep.url("/chat/completions"),
        headers: vec![("authorization", format!("Bearer {}", ep.api_key.expose()))],
        body,
    }
}

/// `choices[0].message.content`, `usage`, and the body's `id`.
pub fn parse_chat(v: &Value) -> Result<(String, Usage, Option<String>), BadSuccess> {
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| BadSuccess::Malformed("no choices in the completion".into()))?;
    // Some gateways (OpenRouter) report a failure mid-generation inside the choice.
    if let Some(err) = choice.get("error").filter(|e| e.is_object()) {
        let fields = crate::failure::ErrorFields::from_value(&serde_json::json!({ "error": err }))
            .unwrap_or_default();
        return Err(BadSuccess::Failed(Box::new(fields)));
    }
    let message = choice.get("message");
    let content = message.and_then(|m| m.get("content"));
    let text = match content {
        Some(Value::String(s)) => s.clone(),
        // Tool-call-only answers carry `content: null`; they are still answers.
        Some(Value::Null) | None
            if message
                .and_then(|m| m.get("tool_calls"))
                .is_some_and(|t| t.is_array()) =>
        {
            String::new()
        }
        _ => {
            if choice.get("finish_reason").and_then(Value::as_str) == Some("content_filter") {
                return Err(BadSuccess::Refused("finish_reason content_filter".into()));
            }
            return Err(BadSuccess::Malformed(
                "no message content in the completion".into(),
            ));
        }
    };
    let usage = v.get("usage");
    let usage = Usage {
        input_tokens: tokens(usage.and_then(|u| u.get("prompt_tokens"))),
        output_tokens: tokens(usage.and_then(|u| u.get("completion_tokens"))),
    };
    let id = v.get("id").and_then(Value::as_str).map(str::to_string);
    Ok((text, usage, id))
}

/// `POST {base}/embeddings` with a batch `input`.
pub fn embed_call(ep: &Endpoint, model: &str, inputs: &[String]) -> HttpCall {
    HttpCall {
        url: ep.url("/embeddings"),
        headers: vec![("authorization", format!("Bearer {}", ep.api_key.expose()))],
        body: json!({ "model": model, "input": inputs }),
    }
}

/// `data[].embedding` in `index` order; the count must match the inputs.
pub fn parse_embed(v: &Value, expected: usize) -> Result<(Vec<Vec<f32>>, Usage), BadSuccess> {
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| BadSuccess::Malformed("no `data` in the embedding response".into()))?;
    let mut indexed: Vec<(u64, Vec<f32>)> = Vec::with_capacity(data.len());
    for (i, item) in data.iter().enumerate() {
        let index = item
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(i as u64);
        indexed.push((index, floats(item.get("embedding"))?));
    }
    indexed.sort_by_key(|(i, _)| *i);
    if indexed.len() != expected {
        return Err(BadSuccess::Malformed(format!(
            "{} embeddings for {expected} inputs",
            indexed.len()
        )));
    }
    let usage = Usage {
        input_tokens: tokens(v.pointer("/usage/prompt_tokens")),
        output_tokens: 0,
    };
    Ok((indexed.into_iter().map(|(_, e)| e).collect(), usage))
}

/// A JSON array of numbers as a vector.
pub fn floats(v: Option<&Value>) -> Result<Vec<f32>, BadSuccess> {
    v.and_then(Value::as_array)
        .filter(|a| !a.is_empty())
        .and_then(|a| a.iter().map(|x| x.as_f64().map(|f| f as f32)).collect())
        .ok_or_else(|| BadSuccess::Malformed("an embedding is not an array of numbers".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_completion() {
        let v = json!({"id":"chatcmpl-1","choices":[{"index":0,"message":{"role":"assistant","content":"OK"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1}});
        let (text, usage, id) = parse_chat(&v).ok().unwrap();
        assert_eq!(
            (text.as_str(), usage.output_tokens, id.as_deref()),
            ("OK", 1, Some("chatcmpl-1"))
        );
        assert!(matches!(
            parse_chat(&json!({"choices":[]})),
            Err(BadSuccess::Malformed(_))
        ));
        let filtered =
            json!({"choices":[{"message":{"content":null},"finish_reason":"content_filter"}]});
        assert!(matches!(parse_chat(&filtered), Err(BadSuccess::Refused(_))));
    }
}
