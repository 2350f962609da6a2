//! Egress: the router's answers rendered in the shape the client speaks, whatever the
//! wire of the route that served. Pure functions and small stream encoders that turn
//! wire-neutral events into OpenAI chunks or Anthropic events; the handler only writes
//! the bytes they return.

use super::adapter::{Finish, Reply};
use crate::core::request::Usage;
use serde_json::{json, Value};

// A reason the shared vocabulary has no word for (Gemini `OTHER`, `LANGUAGE`,
// `MALFORMED_FUNCTION_CALL`; Anthropic `pause_turn`; OpenAI's legacy `function_call`)
// reaches a client of another wire as one of its own wire's words, the nearest: a
// client's SDK and code know only those (fidelity.md §2).

pub(super) fn openai_finish(f: &Finish) -> &str {
    match f {
        Finish::Stop => "stop",
        Finish::Length => "length",
        Finish::ToolCalls => "tool_calls",
        Finish::ContentFilter => "content_filter",
        Finish::Other(s) => match s.as_str() {
            "function_call" => "function_call",
            "model_context_window_exceeded" => "length",
            _ => "stop",
        },
    }
}

pub(super) fn anthropic_stop(f: &Finish) -> &str {
    match f {
        Finish::Stop => "end_turn",
        Finish::Length => "max_tokens",
        Finish::ToolCalls => "tool_use",
        Finish::ContentFilter => "refusal",
        Finish::Other(s) => match s.as_str() {
            "stop_sequence" => "stop_sequence",
            "pause_turn" => "pause_turn",
            "model_context_window_exceeded" => "model_context_window_exceeded",
            "function_call" => "tool_use",
            _ => "end_turn",
        },
    }
}

pub(super) fn openai_usage(u: &Usage) -> Value {
    serde_json::to_value(WireUsage::of(u)).unwrap_or_default()
}

/// A `usage` object in Anthropic's terms: `input_tokens` without the cache's reads and
/// writes, which have counts of their own (fidelity.md §2).
pub(super) fn anthropic_usage(u: &Usage) -> Value {
    let mut v = json!({"input_tokens": u.uncached_input(), "output_tokens": u.output_tokens});
    if let Some(c) = u.cached_tokens {
        v["cache_read_input_tokens"] = json!(c);
    }
    if let Some(c) = u.cache_creation_tokens {
        v["cache_creation_input_tokens"] = json!(c);
    }
    v
}

pub(super) fn to_bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

fn wire_calls(calls: &[crate::core::conversation::ToolCall]) -> Vec<WireToolCall<'_>> {
    calls
        .iter()
        .map(|c| WireToolCall {
            function: WireFunction {
                arguments: c.arguments.to_string(),
                name: &c.name,
            },
            id: &c.id,
            kind: "function",
        })
        .collect()
}

/// A `chat.completion` body, serialized straight from typed fields: no `Value` tree
/// (maps, strings copied in, all freed again) on every answer. Field order is the
/// alphabetical one `json!` gives, so the bytes are the same as they always were.
pub fn openai_completion(id: &str, created: i64, r: &Reply) -> Vec<u8> {
    let tool_calls = wire_calls(&r.tool_calls);
    // A refusal with text of its own (OpenAI `message.refusal`) goes in `refusal`, with
    // `content: null` when the model said nothing else, as OpenAI answers it; a refusal
    // another wire signalled by its finish keeps its text as content (fidelity.md §4).
    let refusal = r.refusal.as_deref().filter(|t| !t.is_empty());
    let content = if r.text.is_empty() && refusal.is_some() {
        None
    } else {
        (r.tool_calls.is_empty() || !r.text.is_empty()).then_some(r.text.as_str())
    };
    let first = CompletionChoice {
        finish_reason: openai_finish(&r.finish),
        index: 0,
        logprobs: (),
        message: Message {
            content,
            reasoning_content: r.reasoning.as_deref(),
            refusal,
            role: "assistant",
            tool_calls,
        },
    };
    // `n > 1` on a wire that answers the others apart (Gemini's candidates).
    let more = r
        .more_choices
        .iter()
        .enumerate()
        .map(|(i, (text, calls, finish))| CompletionChoice {
            finish_reason: openai_finish(finish),
            index: i as u32 + 1,
            logprobs: (),
            message: Message {
                content: (calls.is_empty() || !text.is_empty()).then_some(text.as_str()),
                reasoning_content: None,
                refusal: None,
                role: "assistant",
                tool_calls: wire_calls(calls),
            },
        });
    let body = Completion {
        choices: std::iter::once(first).chain(more).collect(),
        created,
        id,
        model: &r.model,
        object: "chat.completion",
        usage: r.usage.as_ref().map(WireUsage::of),
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

// Field names in alphabetical order throughout: the order `serde_json::Value` writes.
#[derive(serde::Serialize)]
struct Completion<'a> {
    choices: Vec<CompletionChoice<'a>>,
    created: i64,
    id: &'a str,
    model: &'a str,
    object: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<WireUsage>,
}

#[derive(serde::Serialize)]
struct CompletionChoice<'a> {
    finish_reason: &'a str,
    index: u32,
    logprobs: (),
    message: Message<'a>,
}

#[derive(serde::Serialize)]
struct Message<'a> {
    content: Option<&'a str>,
    /// The reasoning, where the other wire showed it (Anthropic `thinking` text).
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<&'a str>,
    role: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
}

#[derive(serde::Serialize)]
struct WireToolCall<'a> {
    function: WireFunction<'a>,
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(serde::Serialize)]
struct WireFunction<'a> {
    arguments: String,
    name: &'a str,
}

#[derive(serde::Serialize)]
struct WireUsage {
    completion_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    completion_tokens_details: Option<Reasoning>,
    prompt_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_tokens_details: Option<Cached>,
    total_tokens: u64,
}

#[derive(serde::Serialize)]
struct Cached {
    cached_tokens: u64,
}

#[derive(serde::Serialize)]
struct Reasoning {
    reasoning_tokens: u64,
}

impl WireUsage {
    fn of(u: &Usage) -> WireUsage {
        WireUsage {
            completion_tokens: u.output_tokens,
            completion_tokens_details: u.reasoning_tokens.map(|r| Reasoning {
                reasoning_tokens: r,
            }),
            prompt_tokens: u.input_tokens,
            prompt_tokens_details: u.cached_tokens.map(|c| Cached { cached_tokens: c }),
            total_tokens: u.input_tokens.saturating_add(u.output_tokens),
        }
    }
}

/// An Anthropic `message` body.
pub fn anthropic_message(id: &str, r: &Reply) -> Vec<u8> {
    let mut content: Vec<Value> = Vec::new();
    // Anthropic has no refusal field: an OpenAI-wire refusal's text is the message's
    // text, and `stop_reason` says `refusal` (fidelity.md §4).
    let text = crate::core::answer::shown_text(&r.text, r.refusal.as_deref());
    if !text.is_empty() || r.tool_calls.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    for c in &r.tool_calls {
        content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}));
    }
    let u = r.usage.unwrap_or_default();
    to_bytes(&json!({
        "id": id, "type": "message", "role": "assistant", "model": r.model,
        "content": content, "stop_reason": anthropic_stop(&r.finish), "stop_sequence": null,
        "usage": anthropic_usage(&u),
    }))
}

/// `embeddings` as a JSON list, floats or base64 (little-endian f32s).
pub fn embeddings(
    model: &str,
    vectors: &[Vec<f32>],
    base64: bool,
    usage: Option<&Usage>,
) -> Vec<u8> {
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
                json!(base64_encode(&bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let prompt = usage.map(|u| u.input_tokens).unwrap_or(0);
    to_bytes(&json!({"object": "list", "data": data, "model": model,
                     "usage": {"prompt_tokens": prompt, "total_tokens": prompt}}))
}

/// A rerank answer in the Cohere / Jina shape: results best first. The router returns
/// an order, not scores, so no `relevance_score` is invented.
pub fn rerank(
    id: &str,
    model: &str,
    ranking: &[usize],
    documents: &[String],
    return_documents: bool,
) -> Vec<u8> {
    let results: Vec<Value> = ranking
        .iter()
        .filter(|&&i| i < documents.len())
        .map(|&i| {
            let mut r = json!({"index": i});
            if return_documents {
                r["document"] = json!({"text": documents[i]});
            }
            r
        })
        .collect();
    to_bytes(&json!({"id": id, "model": model, "results": results}))
}

/// Standard base64 with padding (RFC 4648).
pub fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards Gemini's finishes outside the mapped set (`MALFORMED_FUNCTION_CALL`,
    /// `OTHER`, `LANGUAGE`): they reached OpenAI and Anthropic clients verbatim, words
    /// neither wire has.
    #[test]
    fn a_finish_without_a_word_reaches_each_client_as_one_of_its_own_wires() {
        for gemini in ["MALFORMED_FUNCTION_CALL", "OTHER", "LANGUAGE", "NO_IMAGE"] {
            let f = Finish::Other(gemini.into());
            assert_eq!(openai_finish(&f), "stop", "{gemini}");
            assert_eq!(anthropic_stop(&f), "end_turn", "{gemini}");
        }
        let pause = Finish::Other("pause_turn".into());
        assert_eq!(anthropic_stop(&pause), "pause_turn");
        assert_eq!(openai_finish(&pause), "stop");
        let legacy = Finish::Other("function_call".into());
        assert_eq!(openai_finish(&legacy), "function_call");
        assert_eq!(anthropic_stop(&legacy), "tool_use");
        let full = Finish::Other("model_context_window_exceeded".into());
        assert_eq!(openai_finish(&full), "length");
    }
    use crate::core::conversation::ToolCall;
    use crate::serve::adapter::Event;
    use crate::serve::egress_stream::*;

    fn reply(text: &str, calls: Vec<ToolCall>, finish: Finish) -> Reply {
        Reply {
            raw: None,
            text: text.into(),
            tool_calls: calls,
            finish,
            model: "qwen-flash".into(),
            usage: Some(Usage {
                input_tokens: 5,
                output_tokens: 2,
                cached_tokens: None,
                ..Default::default()
            }),
            refusal: None,
            reasoning: None,
            more_choices: Vec::new(),
        }
    }

    /// The `Value`-built body the typed one replaced: the reference for its bytes.
    fn value_completion(id: &str, created: i64, r: &Reply) -> Vec<u8> {
        let mut message = json!({"role": "assistant", "content": r.text});
        if !r.tool_calls.is_empty() {
            if r.text.is_empty() {
                message["content"] = Value::Null;
            }
            message["tool_calls"] = r
                .tool_calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments.to_string()}})
                })
                .collect();
        }
        let mut body = json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": r.model,
            "choices": [{"index": 0, "message": message, "logprobs": null,
                         "finish_reason": openai_finish(&r.finish)}],
        });
        if let Some(u) = &r.usage {
            body["usage"] = openai_usage(u);
        }
        to_bytes(&body)
    }

    #[test]
    fn typed_completion_bodies_are_byte_for_byte_the_value_built_ones() {
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "lookup".into(),
            arguments: json!({"q": "a \"quoted\" ünï", "n": [1, 2.5]}),
        };
        let mut no_usage = reply("plain", vec![], Finish::Stop);
        no_usage.usage = None;
        for r in [
            reply("OK", vec![], Finish::Stop),
            reply("", vec![], Finish::Length),
            reply("", vec![call("c1"), call("c2")], Finish::ToolCalls),
            reply(
                "text and a call",
                vec![call("c3")],
                Finish::Other("weird".into()),
            ),
            reply("esc \n \u{1b} </script>", vec![], Finish::ContentFilter),
            no_usage,
        ] {
            assert_eq!(
                String::from_utf8(openai_completion("chatcmpl-poolctl-9", 1_700_000_000, &r))
                    .unwrap(),
                String::from_utf8(value_completion("chatcmpl-poolctl-9", 1_700_000_000, &r))
                    .unwrap()
            );
        }
    }

    #[test]
    fn typed_text_chunks_are_byte_for_byte_the_value_built_ones() {
        for include_usage in [false, true] {
            let mut typed = OpenAiStream::new("c-1".into(), 5, "m".into(), include_usage);
            let mut reference = OpenAiStream::new("c-1".into(), 5, "m".into(), include_usage);
            for text in ["first", "second \"q\"", ""] {
                assert_eq!(
                    String::from_utf8(typed.event(&Event::Text(text.into()))).unwrap(),
                    String::from_utf8(reference.chunk(json!({"content": text}), None)).unwrap()
                );
            }
        }
    }

    #[test]
    fn completion_carries_tool_calls_finish_model_and_usage() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "f".into(),
            arguments: json!({"a": 1.5}),
        };
        let b: Value = serde_json::from_slice(&openai_completion(
            "id1",
            7,
            &reply("", vec![call], Finish::ToolCalls),
        ))
        .unwrap();
        assert_eq!(b["model"], "qwen-flash");
        assert_eq!(b["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(b["choices"][0]["message"]["content"], Value::Null);
        assert_eq!(
            b["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"a\":1.5}"
        );
        assert_eq!(b["usage"]["total_tokens"], 7);
        let a: Value = serde_json::from_slice(&anthropic_message(
            "m1",
            &reply("hi", vec![], Finish::Length),
        ))
        .unwrap();
        assert_eq!(a["stop_reason"], "max_tokens");
        assert_eq!(a["content"][0]["text"], "hi");
        assert_eq!(a["usage"]["output_tokens"], 2);
    }

    #[test]
    fn openai_chunks_name_the_model_and_end_with_usage() {
        let mut s = OpenAiStream::new("c1".into(), 1, "m".into(), true);
        let first = String::from_utf8(s.event(&Event::Text("He".into()))).unwrap();
        assert!(
            first.starts_with("data: {") && first.ends_with("\n\n"),
            "{first}"
        );
        let v: Value = serde_json::from_str(first.trim_start_matches("data: ").trim()).unwrap();
        assert_eq!(v["model"], "m");
        assert_eq!(v["choices"][0]["delta"]["role"], "assistant");
        let usage = String::from_utf8(s.event(&Event::Usage(Usage {
            input_tokens: 3,
            output_tokens: 4,
            cached_tokens: None,
            ..Default::default()
        })))
        .unwrap();
        let u: Value = serde_json::from_str(usage.trim_start_matches("data: ").trim()).unwrap();
        assert_eq!(u["choices"], json!([]));
        assert_eq!(u["usage"]["completion_tokens"], 4);
        let mut quiet = OpenAiStream::new("c1".into(), 1, "m".into(), false);
        assert!(quiet.event(&Event::Usage(Usage::default())).is_empty());
        assert_eq!(
            outcome_comment("success", 2),
            b": poolctl outcome=success attempts=2\n\n"
        );
    }

    #[test]
    fn anthropic_events_open_and_close_blocks() {
        let mut s = AnthropicStream::new("m1".into(), "claude".into());
        let mut all = s.event(&Event::Text("Hi".into()));
        all.extend(s.event(&Event::ToolCall {
            index: 0,
            id: Some("t1".into()),
            name: Some("f".into()),
            arguments: "{\"a\"".into(),
        }));
        all.extend(s.event(&Event::ToolCall {
            index: 0,
            id: None,
            name: None,
            arguments: ":1}".into(),
        }));
        all.extend(s.finish(
            &Finish::ToolCalls,
            Some(&Usage {
                input_tokens: 1,
                output_tokens: 9,
                cached_tokens: None,
                ..Default::default()
            }),
        ));
        let text = String::from_utf8(all).unwrap();
        let events: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(
            events,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert!(text.contains("\"stop_reason\":\"tool_use\""));
        assert!(text.contains("\"output_tokens\":9"));
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        assert_eq!(base64_encode(b""), "");
        assert_eq!(base64_encode(b"f"), "Zg==");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_encode(b"foo"), "Zm9v");
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
    }
}
