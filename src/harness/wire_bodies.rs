//! The success bodies a mock serves for `ok: TEXT`: what each real wire returns for a
//! chat completion, an embedding batch or a rerank, with realistic `usage`, so that
//! the production parsers (and the official SDKs) read them unchanged.

use super::mock_call::{CallKind, ReplyCtx};
use super::scenario::{StreamItem, UsageSpec};
use crate::core::vocab::Wire;
use serde_json::{json, Value};

/// A rough token count (4 characters a token), enough for realistic `usage`.
pub fn tokens_of(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4).max(1)
}

/// Prompt tokens of a request body: every string in it, counted roughly.
pub fn prompt_tokens(request: &Value) -> u64 {
    fn walk(v: &Value, acc: &mut u64) {
        match v {
            Value::String(s) => *acc += tokens_of(s),
            Value::Array(a) => a.iter().for_each(|x| walk(x, acc)),
            Value::Object(o) => o.values().for_each(|x| walk(x, acc)),
            _ => {}
        }
    }
    let mut n = 0;
    walk(request, &mut n);
    n.max(1)
}

/// Splits a text into about three chunks for a stream.
pub fn chunk_text(text: &str) -> Vec<StreamItem> {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= 1 {
        return vec![StreamItem::Text(text.to_string())];
    }
    let size = chars.len().div_ceil(3).max(1);
    chars
        .chunks(size)
        .map(|c| StreamItem::Text(c.iter().collect()))
        .collect()
}

pub fn success(ctx: &ReplyCtx<'_>, text: &str, usage: Option<UsageSpec>) -> Value {
    let (p, c) = match usage {
        Some(u) => (u.input, u.output),
        None => (prompt_tokens(ctx.request), tokens_of(text)),
    };
    let model = ctx.model;
    let seq = ctx.seq;
    match (ctx.wire, ctx.call) {
        (Wire::OpenAi | Wire::Responses, CallKind::Embed) => {
            let n = inputs(ctx.request.get("input"));
            // As OpenAI does: `encoding_format: base64` answers little-endian f32s in
            // base64, each vector one string.
            let base64 =
                ctx.request.get("encoding_format").and_then(Value::as_str) == Some("base64");
            let data: Vec<Value> = (0..n)
                .map(|i| {
                    let v = vector(text, i);
                    let embedding = if base64 {
                        json!(base64_f32s(&v))
                    } else {
                        json!(v)
                    };
                    json!({"object": "embedding", "index": i, "embedding": embedding})
                })
                .collect();
            json!({"object": "list", "data": data, "model": model,
                   "usage": {"prompt_tokens": p, "total_tokens": p}})
        }
        (Wire::Gemini, CallKind::Embed) => {
            let n = inputs(ctx.request.get("requests"));
            let embeddings: Vec<Value> =
                (0..n).map(|i| json!({"values": vector(text, i)})).collect();
            json!({"embeddings": embeddings})
        }
        (_, CallKind::Rerank) => {
            let docs = ctx
                .request
                .get("documents")
                .and_then(Value::as_array)
                .map(Vec::len)
                .unwrap_or(0);
            let top_n = ctx
                .request
                .get("top_n")
                .and_then(Value::as_u64)
                .map(|n| n as usize)
                .unwrap_or(docs)
                .min(docs);
            // Reverse recall order, so a reranked answer is told apart from a degraded one.
            let results: Vec<Value> = (0..docs)
                .rev()
                .take(top_n)
                .enumerate()
                .map(|(rank, index)| json!({"index": index, "relevance_score": 0.99 - rank as f64 * 0.01}))
                .collect();
            json!({"id": format!("rerank-mock-{seq}"), "model": model, "results": results,
                   "usage": {"total_tokens": p}, "meta": {"billed_units": {"search_units": 1}}})
        }
        (Wire::OpenAi, _) => json!({
            "id": format!("chatcmpl-mock-{seq}"),
            "object": "chat.completion",
            "created": 1_767_225_600,
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c},
        }),
        (Wire::Anthropic, _) => json!({
            "id": format!("msg_mock_{seq:04}"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": null,
            "usage": {"input_tokens": p, "output_tokens": c},
        }),
        (Wire::Responses, _) => responses_object(model, seq, "completed", text, (p, c)),
        (Wire::Gemini, _) => json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": p, "candidatesTokenCount": c, "totalTokenCount": p + c},
            "modelVersion": model,
            "responseId": format!("mock-{seq}"),
        }),
    }
}

/// A Responses API `response` object of one assistant message (empty `output` while
/// `in_progress`), as OpenAI answers it.
pub fn responses_object(
    model: &str,
    seq: usize,
    status: &str,
    text: &str,
    (p, c): (u64, u64),
) -> Value {
    let done = status != "in_progress";
    let output = if done {
        json!([{"id": format!("msg_mock_{seq:04}"), "type": "message", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}])
    } else {
        json!([])
    };
    let usage = if done {
        json!({"input_tokens": p, "input_tokens_details": {"cached_tokens": 0},
               "output_tokens": c, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": p + c})
    } else {
        Value::Null
    };
    json!({
        "id": format!("resp_mock_{seq:04}"), "object": "response", "created_at": 1_767_225_600,
        "status": status, "error": null, "incomplete_details": null, "model": model,
        "output": output, "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
        "usage": usage,
    })
}

fn inputs(v: Option<&Value>) -> usize {
    match v {
        Some(Value::Array(a)) => a.len(),
        Some(_) => 1,
        None => 0,
    }
}

/// A small deterministic unit-ish vector, different per input.
fn vector(text: &str, i: usize) -> Vec<f64> {
    let seed = text.bytes().fold(i as u64 + 1, |a, b| {
        a.wrapping_mul(31).wrapping_add(b as u64)
    });
    (0..8)
        .map(|k| (((seed >> (k * 3)) % 1000) as f64 / 1000.0 * 2.0 - 1.0) / 2.0)
        .collect()
}

/// Standard base64 (RFC 4648, padded) of `v` as little-endian f32s.
fn base64_f32s(v: &[f64]) -> String {
    use base64::Engine;
    let bytes: Vec<u8> = v.iter().flat_map(|f| (*f as f32).to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
