//! What a route can carry of a request (spec/fidelity.md §3), judged from the wire,
//! the dialect and the provider's `drop_params` alone — never from health. A pure
//! function, so the router can pass a route over before calling it; what it names is
//! never sent (a codec has no place for it, or [`fit`] removes it).
//!
//! Each field the route cannot carry is one of two kinds:
//! - semantic (an image by URL on Gemini, `n: 2` on Anthropic, `logprobs` on another
//!   wire, ...): the route is skipped with `cannot carry: FIELD`, unless its provider
//!   says `drop_params: true`, which makes the field advisory there;
//! - advisory (`seed` on Anthropic, `presence_penalty` on another wire, every field
//!   this router does not know): the route is called without it, and it is named.

use super::endpoint::Endpoint;
use super::http::CallBody;
use crate::classify::dialect::Dialect;
use crate::core::conversation::{Part, Source, Turn};
use crate::core::request::ChatRequest;
use crate::core::vocab::Wire;
use serde_json::Value;

/// A semantic field the route cannot carry: it must not be called for this request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cannot {
    /// The field, by its client-facing name (`image_url`, `n`, `logprobs`, ...), or the
    /// reason the request cannot leave its own wire.
    pub field: String,
}

/// The fields `endpoint` cannot carry of `req`, streamed or not (alike on every wire):
/// `Err` with the first semantic one when the route must be skipped, else the advisory
/// ones it is called without (each named once, in the order found).
pub fn carry(req: &ChatRequest, endpoint: &Endpoint) -> Result<Vec<String>, Cannot> {
    let mut lacks: Vec<(String, bool)> = Vec::new();
    if let Some(orig) = req.same_wire(endpoint.wire) {
        // A re-sent conversation's reasoning, kept only for the provider it came from.
        for field in orig.left_out_for(&endpoint.provider) {
            lacks.push((field.clone(), false));
        }
    } else {
        if let Some(why) = req
            .original
            .as_deref()
            .and_then(|o| o.untranslatable.as_deref())
        {
            // Nothing of this request can be translated: no drop_params helps.
            return Err(Cannot {
                field: why.to_string(),
            });
        }
        if let Some(cannot) = empty_turn(req, endpoint.wire) {
            return Err(cannot);
        }
        cross_wire(req, endpoint.wire, &mut lacks);
    }
    for (field, semantic) in rejected_by(endpoint.dialect, req) {
        lacks.push((field.to_string(), semantic));
    }
    let mut dropped: Vec<String> = Vec::new();
    for (field, semantic) in lacks {
        if semantic && !endpoint.drop_params {
            return Err(Cannot { field });
        }
        if !dropped.contains(&field) {
            dropped.push(field);
        }
    }
    Ok(dropped)
}

/// What a route of another wire than the client's (or any route, for a library
/// request) cannot express of the canonical request: `(field, semantic)`.
/// What `wire` lacks of one content part: `(field, semantic)`, or `None` when it
/// carries the part whole.
fn part_lack(wire: Wire, part: &Part) -> Option<(&str, bool)> {
    match (wire, part) {
        (
            Wire::Gemini,
            Part::Image {
                source: Source::Url { .. },
                ..
            },
        ) => Some(("image_url", true)),
        (
            Wire::Gemini | Wire::OpenAi,
            Part::Document {
                source: Source::Url { .. },
                ..
            },
        ) => Some(("document_url", true)),
        (
            Wire::Anthropic | Wire::Gemini,
            Part::Image {
                detail: Some(_), ..
            },
        ) => Some(("detail", false)),
        // Audio, a file by id: only the client's own body carries it.
        (_, Part::Omitted { field }) => Some((field, true)),
        _ => None,
    }
}

/// A user turn of which `wire` can carry no part: no `drop_params` helps, for the turn
/// would be sent empty (which every wire refuses) and the conversation changed.
fn empty_turn(req: &ChatRequest, wire: Wire) -> Option<Cannot> {
    req.conversation.turns.iter().find_map(|turn| match turn {
        Turn::User { parts } if !parts.is_empty() => {
            let lacks: Option<Vec<&str>> = parts
                .iter()
                .map(|p| {
                    part_lack(wire, p)
                        .filter(|(_, semantic)| *semantic)
                        .map(|(f, _)| f)
                })
                .collect();
            lacks.map(|fields| Cannot {
                field: fields[0].to_string(),
            })
        }
        _ => None,
    })
}

fn cross_wire(req: &ChatRequest, wire: Wire, out: &mut Vec<(String, bool)>) {
    let mut lack = |field: &str, semantic: bool| out.push((field.to_string(), semantic));
    for part in req.parts() {
        if let Some((field, semantic)) = part_lack(wire, part) {
            lack(field, semantic);
        }
    }
    // Gemini's inline data has no name: a document's file name (OpenAI `file.filename`,
    // Anthropic `title`) is left out, and named as the client spelled it.
    let named_document = req.parts().any(|p| {
        matches!(
            p,
            Part::Document {
                filename: Some(_),
                ..
            }
        )
    });
    if wire == Wire::Gemini && named_document {
        let client = req.original.as_deref().map(|o| o.wire);
        lack(
            match client {
                Some(Wire::Anthropic) => "messages[].content[].title",
                Some(Wire::Responses) => "input[].content[].filename",
                _ => "messages[].content[].file.filename",
            },
            false,
        );
    }
    let n = req.n.unwrap_or(1);
    // Anthropic has no `n`. Gemini's `candidateCount` carries it, whole or streamed
    // (each streamed candidate read apart by its `index`, `stream_event`).
    if n > 1 && wire == Wire::Anthropic {
        lack("n", true);
    }
    // With no tools offered there is nothing to run in parallel.
    if req.parallel_tool_calls == Some(false) && !req.tools.is_empty() && wire == Wire::Gemini {
        lack("parallel_tool_calls", true);
    }
    // An effort word with no thinking budget (`xhigh`, words to come): only a wire that
    // takes the word itself can carry it.
    let budgetless =
        req.reasoning.is_none() && req.effort_word.as_deref().is_some_and(|w| w != "none");
    if budgetless && matches!(wire, Wire::Anthropic | Wire::Gemini) {
        lack("reasoning_effort", true);
    }
    match wire {
        Wire::Anthropic => {
            if req.sampling.seed.is_some() {
                lack("seed", false);
            }
            if !req.metadata.is_empty() {
                lack("metadata", false);
            }
            if let Some(r) = req.reasoning {
                let plan = super::anthropic::thinking_plan(req, r);
                if !plan.enabled {
                    lack("reasoning_effort", false);
                }
                if plan.drops_temperature {
                    lack("temperature", false);
                }
            }
        }
        Wire::Gemini => {
            if req.user.is_some() {
                lack("user", false);
            }
            if !req.metadata.is_empty() {
                lack("metadata", false);
            }
        }
        Wire::OpenAi => {
            if req.sampling.top_k.is_some() {
                lack("top_k", false);
            }
        }
        // The Responses API has no stop sequences, seed, top_k or `n`.
        Wire::Responses => {
            if !req.sampling.stop.is_empty() {
                lack("stop", false);
            }
            if req.sampling.seed.is_some() {
                lack("seed", false);
            }
            if req.sampling.top_k.is_some() {
                lack("top_k", false);
            }
            if n > 1 {
                lack("n", true);
            }
        }
    }
    for u in &req.unmapped {
        lack(&u.name, u.semantic);
    }
}

/// The top-level fields of Mistral's chat API: it answers 422 `extra_forbidden` to
/// any other. From its generated SDK's request models (client-python,
/// `chatcompletionrequest.py` and `chatcompletionstreamrequest.py`).
const MISTRAL_ACCEPTS: &[&str] = &[
    "model",
    "messages",
    "temperature",
    "top_p",
    "max_tokens",
    "stream",
    "stop",
    "random_seed",
    "metadata",
    "response_format",
    "tools",
    "tool_choice",
    "presence_penalty",
    "frequency_penalty",
    "n",
    "prediction",
    "parallel_tool_calls",
    "prompt_mode",
    "safe_prompt",
];

/// The fields a Mistral message may hold, by the same models; a tool result also keeps
/// its `name` (`ToolMessage.name`).
const MISTRAL_MESSAGE_ACCEPTS: &[&str] =
    &["role", "content", "tool_calls", "tool_call_id", "prefix"];

/// Fields `dialect`'s provider rejects (HTTP 400 / 422) although its wire's owner
/// accepts them (spec/fidelity.md §1), present in `req`: `(field, semantic)`. The
/// README lists every OpenAI-compatible dialect, with what was found for each.
fn rejected_by(dialect: Dialect, req: &ChatRequest) -> Vec<(String, bool)> {
    let n = req.n.unwrap_or(1);
    let asks = |name: &str| req.unmapped.iter().any(|u| u.name == name);
    // Whether the client's field is semantic where it is asked (`logprobs: true` is,
    // `logprobs: false` is not; `modalities` only beyond text).
    let semantic = |name: &str| req.unmapped.iter().any(|u| u.name == name && u.semantic);
    let mut out = Vec::new();
    match dialect {
        // console.groq.com/docs/openai: "logprobs", "logit_bias", "top_logprobs",
        // "messages[].name" and "n" other than 1 "will result in a 400 error".
        Dialect::Groq => {
            for f in ["logprobs", "top_logprobs", "logit_bias", "messages[].name"] {
                if asks(f) {
                    out.push((f.to_string(), semantic(f)));
                }
            }
            if n != 1 {
                out.push(("n".to_string(), true));
            }
        }
        // Mistral forbids every field it does not know (422 `extra_forbidden`), so it
        // is described by what it accepts (`MISTRAL_ACCEPTS`). Two fields it has under
        // other names are renamed in `fit`, not dropped: `max_completion_tokens` (its
        // `max_tokens`) and `seed` (its `random_seed`). A `stream_options` the gateway
        // adds is never sent there (Mistral reports a stream's usage unasked).
        Dialect::Mistral => {
            if req.user.is_some() {
                out.push(("user".to_string(), false));
            }
            if req.sampling.top_k.is_some() {
                out.push(("top_k".to_string(), false));
            }
            // Any effort word; `none` asks nothing, and goes unsent.
            if req.reasoning.is_some() || req.effort_word.is_some() {
                let asks = req.effort_word.as_deref() != Some("none");
                out.push(("reasoning_effort".to_string(), asks));
            }
            if req
                .same_wire(Wire::OpenAi)
                .is_some_and(|o| o.stream_options.is_some())
            {
                out.push(("stream_options".to_string(), false));
            }
            // The client's fields the router does not map, at the top level or inside
            // messages and their parts (`messages[].reasoning_content`, `cache_control`).
            let accepted = |name: &str| match name.strip_prefix("messages[].") {
                Some(key) => MISTRAL_MESSAGE_ACCEPTS.contains(&key),
                None => MISTRAL_ACCEPTS.contains(&name),
            };
            for u in req.unmapped.iter().filter(|u| !accepted(&u.name)) {
                out.push((u.name.clone(), u.semantic));
            }
        }
        // platform.kimi.ai models overview: `n` at most 5.
        Dialect::Moonshot if n > 5 => out.push(("n".to_string(), true)),
        _ => {}
    }
    out
}

/// The body of a call to an OpenAI-compatible `endpoint` without the fields its
/// provider rejects ([`rejected_by`]: advisory ones, and with `drop_params` semantic
/// ones; a route that would need a semantic one removed is never called). Mistral's
/// body keeps only the fields Mistral knows, with the two it has under other names
/// renamed. Only those: any other field a body holds is one the codec wrote, or the
/// client's own on its own wire. A body with nothing to remove is not touched, so the
/// client's bytes stay the client's bytes.
pub fn fit(body: CallBody, req: &ChatRequest, endpoint: &Endpoint) -> CallBody {
    if endpoint.wire != Wire::OpenAi {
        return body;
    }
    let dropped: Vec<String> = rejected_by(endpoint.dialect, req)
        .into_iter()
        .map(|(f, _)| f)
        .collect();
    let mistral = endpoint.dialect == Dialect::Mistral;
    let needed = !dropped.is_empty() || (mistral && !mistral_fits(&body));
    if !needed {
        return body;
    }
    let (mut v, raw) = match body {
        CallBody::Json(v) => (v, false),
        CallBody::Raw(b) => match serde_json::from_slice::<Value>(&b) {
            Ok(v) => (v, true),
            Err(_) => return CallBody::Raw(b),
        },
    };
    if let Some(o) = v.as_object_mut() {
        if mistral {
            if let Some(max) = o.remove("max_completion_tokens") {
                o.entry("max_tokens").or_insert(max);
            }
            if let Some(seed) = o.remove("seed") {
                o.entry("random_seed").or_insert(seed);
            }
            o.retain(|k, _| MISTRAL_ACCEPTS.contains(&k.as_str()));
        }
        for field in &dropped {
            remove_field(o, field, mistral);
        }
    }
    if raw {
        CallBody::Raw(serde_json::to_vec(&v).unwrap_or_default().into())
    } else {
        CallBody::Json(v)
    }
}

/// Whether a body for a Mistral route holds only top-level fields Mistral knows.
fn mistral_fits(body: &CallBody) -> bool {
    match body {
        // The common body: the client's keys are read, not the whole body decoded.
        CallBody::Raw(b) => {
            serde_json::from_slice::<std::collections::BTreeMap<String, serde::de::IgnoredAny>>(b)
                .is_ok_and(|keys| keys.keys().all(|k| MISTRAL_ACCEPTS.contains(&k.as_str())))
        }
        CallBody::Json(v) => v
            .as_object()
            .is_some_and(|o| o.keys().all(|k| MISTRAL_ACCEPTS.contains(&k.as_str()))),
    }
}

/// Removes a named field from a body: at the top level, from every message
/// (`messages[].name`), from every content part (`messages[].content[].foo`), or, for
/// `cache_control`, from parts and tools alike. On Mistral a message keeps only the
/// fields Mistral knows.
fn remove_field(o: &mut serde_json::Map<String, Value>, field: &str, mistral: bool) {
    if let Some(key) = field.strip_prefix("messages[].content[].") {
        for part in parts_mut(o) {
            part.remove(key);
        }
    } else if let Some(key) = field.strip_prefix("messages[].") {
        if let Some(Value::Array(ms)) = o.get_mut("messages") {
            for m in ms.iter_mut().filter_map(Value::as_object_mut) {
                let tool = m.get("role").and_then(Value::as_str) == Some("tool");
                // Mistral's tool result has a `name`: a user's is what it refuses.
                if !(mistral && tool && key == "name") {
                    m.remove(key);
                }
                if mistral {
                    m.retain(|k, _| {
                        MISTRAL_MESSAGE_ACCEPTS.contains(&k.as_str()) || (tool && k == "name")
                    });
                }
            }
        }
    } else if let Some(key) = field.strip_prefix("tools[].function.") {
        for f in tools_mut(o).filter_map(|t| t.get_mut("function").and_then(Value::as_object_mut)) {
            f.remove(key);
        }
    } else if let Some(key) = field.strip_prefix("tools[].") {
        for t in tools_mut(o) {
            t.remove(key);
        }
    } else if field == "cache_control" {
        for part in parts_mut(o) {
            part.remove("cache_control");
        }
        if let Some(Value::Array(ts)) = o.get_mut("tools") {
            for t in ts.iter_mut().filter_map(Value::as_object_mut) {
                t.remove("cache_control");
            }
        }
    } else {
        o.remove(field);
    }
}

/// Every tool definition, as an object.
fn tools_mut(
    o: &mut serde_json::Map<String, Value>,
) -> impl Iterator<Item = &mut serde_json::Map<String, Value>> {
    o.get_mut("tools")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// Every content part of every message, as an object.
fn parts_mut(
    o: &mut serde_json::Map<String, Value>,
) -> impl Iterator<Item = &mut serde_json::Map<String, Value>> {
    o.get_mut("messages")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get_mut("content").and_then(Value::as_array_mut))
        .flatten()
        .filter_map(Value::as_object_mut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::conversation::ToolSpec;
    use crate::core::request::Unmapped;

    fn endpoint(wire: Wire, dialect: Dialect, drop_params: bool) -> Endpoint {
        Endpoint {
            provider: "p".into(),
            wire,
            dialect,
            base_url: "http://127.0.0.1:9".into(),
            api_key: crate::core::secret::Secret::new("sk-carry-test"),
            timeout_ms: 1,
            first_token_timeout_ms: 1,
            stream_idle_ms: 1,
            stream_max_ms: 1,
            max_stream_bytes: 1,
            max_event_bytes: 1,
            drop_params,
        }
    }

    #[test]
    fn semantic_fields_skip_unless_drop_params_and_advisory_ones_are_named() {
        let mut r = ChatRequest::user("hi", 8);
        r.n = Some(2);
        r.sampling.seed = Some(7);
        let ant = endpoint(Wire::Anthropic, Dialect::Anthropic, false);
        assert_eq!(carry(&r, &ant), Err(Cannot { field: "n".into() }));
        let lenient = endpoint(Wire::Anthropic, Dialect::Anthropic, true);
        assert_eq!(carry(&r, &lenient), Ok(vec!["n".into(), "seed".into()]));
        // Gemini carries n as candidateCount, whole or streamed.
        let gem = endpoint(Wire::Gemini, Dialect::Gemini, false);
        assert!(carry(&r, &gem).is_ok());
    }

    #[test]
    fn a_dialect_rejection_follows_the_value_and_only_it_is_removed() {
        let mut r = ChatRequest::user("hi", 8);
        r.unmapped = vec![Unmapped::openai("logprobs", &serde_json::json!(false))];
        let groq = endpoint(Wire::OpenAi, Dialect::Groq, false);
        assert_eq!(carry(&r, &groq), Ok(vec!["logprobs".into()]));
        r.unmapped = vec![Unmapped::openai("logprobs", &serde_json::json!(true))];
        assert!(carry(&r, &groq).is_err());
        let body = CallBody::Json(serde_json::json!({"model": "m", "logprobs": true, "user": "u"}));
        let lenient = endpoint(Wire::OpenAi, Dialect::Groq, true);
        match fit(body, &r, &lenient) {
            CallBody::Json(v) => {
                assert_eq!(v, serde_json::json!({"model": "m", "user": "u"}))
            }
            CallBody::Raw(_) => panic!("a built body stays built"),
        }
    }

    #[test]
    fn serial_tool_calls_matter_only_beside_tools() {
        let mut r = ChatRequest::user("hi", 8);
        r.parallel_tool_calls = Some(false);
        let gem = endpoint(Wire::Gemini, Dialect::Gemini, false);
        assert!(carry(&r, &gem).is_ok());
        r.tools = vec![ToolSpec {
            name: "f".into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
            strict: false,
        }];
        assert_eq!(
            carry(&r, &gem),
            Err(Cannot {
                field: "parallel_tool_calls".into()
            })
        );
    }
}
