//! A client's Responses API body (`POST /v1/responses`) read into what the router needs:
//! the canonical request of the whole conversation (a `previous_response_id`'s items
//! first, which the gateway keeps), the fields it maps, and the ones it does not
//! (spec/fidelity.md §3). Pure: the gateway and the chaos harness read a body alike.

use super::items;
use crate::core::conversation::{Conversation, ToolSpec};
use crate::core::request::{
    ChatRequest, Effort, Original, Reasoning, Sampling, ToolChoice, Unmapped,
};
use crate::core::vocab::Wire;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A Responses body as the client sent it, read but not yet joined to its history.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponsesBody {
    pub model: String,
    pub stream: bool,
    /// `store` (OpenAI's default: true): the gateway keeps the conversation.
    pub store: bool,
    pub previous_response_id: Option<String>,
    pub instructions: Option<String>,
    /// The new input, as items (a string is one user message).
    pub input: Vec<Value>,
    /// Every top-level field, as sent: what the answer echoes, and what a rebuilt body
    /// keeps.
    pub fields: Map<String, Value>,
}

/// The top-level fields the canonical request maps itself (or the gateway consumes:
/// `store`, `previous_response_id`); every other one is unmapped.
const MAPPED: &[&str] = &[
    "model",
    "input",
    "instructions",
    "stream",
    "store",
    "previous_response_id",
    "tools",
    "tool_choice",
    "max_output_tokens",
    "temperature",
    "top_p",
    "reasoning",
    "text",
    "parallel_tool_calls",
    "metadata",
    "user",
];

/// Fields whose meaning no other wire can hold (spec/fidelity.md §3): log
/// probabilities, a run in the background, a conversation or prompt template the
/// provider keeps.
const SEMANTIC: &[&str] = &["top_logprobs", "background", "conversation", "prompt"];

/// Reads a body; every error names the field that is wrong.
pub fn parse(body: &[u8]) -> Result<ResponsesBody, String> {
    let fields = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(o)) => o,
        Ok(_) => return Err("the request body must be a JSON object".into()),
        Err(e) => return Err(format!("the request body is not valid JSON: {e}")),
    };
    let model = match fields.get("model") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(_) => return Err("`model` must be a non-empty string".into()),
        None => return Err("`model` is required: a workflow, a tier or a route".into()),
    };
    let input = match fields.get("input") {
        Some(v @ (Value::String(_) | Value::Array(_))) => {
            items::input_items(v).map_err(|e| format!("`input`: {e}"))?
        }
        None | Some(Value::Null) => {
            return Err("`input` is required: a string or an array of items".into())
        }
        Some(_) => return Err("`input` must be a string or an array of items".into()),
    };
    let flag = |name: &str, default: bool| match fields.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(format!("`{name}` must be a boolean")),
    };
    let text = |name: &str| match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("`{name}` must be a string")),
    };
    let previous_response_id = text("previous_response_id")?;
    if previous_response_id.as_deref() == Some("") {
        // Never a fresh conversation the client did not ask for.
        return Err("`previous_response_id` must be a response id, not empty".into());
    }
    if previous_response_id.is_some() && fields.get("conversation").is_some_and(|c| !c.is_null()) {
        return Err("`previous_response_id` and `conversation` cannot be used together".into());
    }
    Ok(ResponsesBody {
        model,
        stream: flag("stream", false)?,
        store: flag("store", true)?,
        previous_response_id,
        instructions: text("instructions")?,
        input,
        fields,
    })
}

/// The canonical request for the whole conversation: the `prior` items (a previous
/// response's), then this body's input. `Err`: a mapped field is wrong (a bad
/// `temperature`), the client's 400. `Ok((request, Some(why)))`: the conversation cannot
/// leave the Responses wire (a file by id, a built-in tool's call, ...); the request then
/// carries an empty conversation, and only a route of that wire, which gets the client's
/// items as they are, can serve it.
pub fn chat_request(
    b: &ResponsesBody,
    prior: &[Value],
) -> Result<(ChatRequest, Option<String>), String> {
    let o = &b.fields;
    let mut untranslatable: Option<String> = None;
    let mut all: Vec<Value> = Vec::with_capacity(prior.len() + b.input.len());
    all.extend_from_slice(prior);
    all.extend_from_slice(&b.input);
    let mut unmapped = Vec::new();
    let conversation = match items::from_items(b.instructions.as_deref(), &all) {
        Ok(read) => {
            if read.reasoning {
                // Reasoning items are the provider's own: another wire cannot take them.
                unmapped.push(Unmapped {
                    name: "reasoning_items".into(),
                    semantic: false,
                });
            }
            read.conversation
        }
        Err(e) => {
            untranslatable = Some(e.0);
            Conversation::default()
        }
    };
    let mut tools = Vec::new();
    match o.get("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(ts)) => {
            for (i, t) in ts.iter().enumerate() {
                match t.get("type").and_then(Value::as_str) {
                    Some("function") => tools.push(function_tool(t, i)?),
                    // A built-in tool runs at the provider: only its own wire has it.
                    Some(kind) => {
                        if !unmapped.iter().any(|u: &Unmapped| u.name == kind) {
                            unmapped.push(Unmapped {
                                name: kind.to_string(),
                                semantic: true,
                            });
                        }
                    }
                    None => return Err(format!("`tools[{i}].type` is required")),
                }
            }
        }
        Some(_) => return Err("`tools` must be an array".into()),
    }
    let tool_choice = match o.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => match ToolChoice::from_word(s) {
            Some(c) => Some(c),
            None => return Err(format!("`tool_choice` `{s}` is not auto, none or required")),
        },
        Some(v) => match (
            v.get("type").and_then(Value::as_str),
            v.get("name").and_then(Value::as_str),
        ) {
            (Some("function"), Some(name)) => Some(ToolChoice::Tool(name.to_string())),
            _ => {
                // `allowed_tools`, a built-in tool, ...: the client's own wire carries it.
                untranslatable.get_or_insert_with(|| {
                    "`tool_choice` is not auto, none, required or {type: function, name}".into()
                });
                None
            }
        },
    };
    let number = |name: &str| match o.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("`{name}` must be a number")),
    };
    let max_tokens = match o.get("max_output_tokens") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            crate::wire::codec::request_count(v)
                .ok_or("`max_output_tokens` must be a non-negative integer")?,
        ),
    };
    let effort_word = match o.get("reasoning") {
        None | Some(Value::Null) => None,
        Some(Value::Object(r)) => {
            if r.get("summary").is_some_and(|s| !s.is_null()) {
                unmapped.push(Unmapped {
                    name: "reasoning.summary".into(),
                    semantic: false,
                });
            }
            match r.get("effort") {
                None | Some(Value::Null) => None,
                Some(Value::String(w)) => Some(w.clone()),
                Some(_) => return Err("`reasoning.effort` must be a string".into()),
            }
        }
        Some(_) => return Err("`reasoning` must be an object".into()),
    };
    // `none` is no reasoning; a word with no thinking budget (`xhigh`, words to come)
    // goes only where the word itself is sent (`wire::carry`).
    let reasoning = effort_word
        .as_deref()
        .and_then(Effort::parse)
        .map(Reasoning::Effort);
    let format = o.get("text").and_then(|t| t.get("format"));
    let schema_name = format
        .filter(|f| f.get("type").and_then(Value::as_str) == Some("json_schema"))
        .and_then(|f| f.get("name"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let schema_strict = format
        .filter(|f| f.get("type").and_then(Value::as_str) == Some("json_schema"))
        .and_then(|f| f.get("strict"))
        .and_then(Value::as_bool);
    let json_schema = match o.get("text") {
        None | Some(Value::Null) => None,
        Some(Value::Object(t)) => {
            if t.get("verbosity").is_some_and(|v| !v.is_null()) {
                unmapped.push(Unmapped {
                    name: "text.verbosity".into(),
                    semantic: false,
                });
            }
            match t.get("format") {
                None | Some(Value::Null) => None,
                Some(f) => match f.get("type").and_then(Value::as_str) {
                    Some("json_schema") => match f.get("schema") {
                        Some(s @ Value::Object(_)) => Some(s.clone()),
                        _ => return Err("`text.format.schema` must be a JSON Schema object".into()),
                    },
                    Some("json_object") => Some(serde_json::json!({"type": "object"})),
                    Some("text") => None,
                    _ => {
                        return Err(
                            "`text.format.type` must be text, json_object or json_schema".into(),
                        )
                    }
                },
            }
        }
        Some(_) => return Err("`text` must be an object".into()),
    };
    let parallel_tool_calls = match o.get("parallel_tool_calls") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err("`parallel_tool_calls` must be a boolean".into()),
    };
    let metadata = match o.get("metadata") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(format!("`metadata.{k}` must be a string")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("`metadata` must be an object of strings".into()),
    };
    let user = match o.get("user") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err("`user` must be a string".into()),
    };
    for (k, v) in o {
        if MAPPED.contains(&k.as_str()) || is_empty(v) {
            continue;
        }
        unmapped.push(Unmapped {
            name: k.clone(),
            semantic: SEMANTIC.contains(&k.as_str()),
        });
    }
    let request = ChatRequest {
        conversation,
        tools,
        tool_choice,
        max_tokens,
        max_tokens_name: None,
        sampling: Sampling {
            temperature: number("temperature")?,
            top_p: number("top_p")?,
            ..Sampling::default()
        },
        json_schema,
        schema_name,
        schema_strict,
        n: None,
        parallel_tool_calls,
        reasoning,
        effort_word,
        unmapped,
        user,
        metadata,
        token_estimate: None,
        original: None,
    };
    Ok((request, untranslatable))
}

/// A null, an empty array or an empty object asks nothing (the Agents SDK always sends
/// `include: []`): no field to carry or to name.
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

fn function_tool(t: &Value, i: usize) -> Result<ToolSpec, String> {
    let name = t
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("`tools[{i}].name` is required"))?;
    let parameters = match t.get("parameters") {
        None | Some(Value::Null) => serde_json::json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err(format!(
                "`tools[{i}].parameters` must be a JSON Schema object"
            ))
        }
    };
    Ok(ToolSpec {
        name: name.to_string(),
        description: t
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        parameters,
        strict: t.get("strict").and_then(Value::as_bool).unwrap_or(false),
    })
}

/// The body a route of the Responses wire is sent for a conversation the gateway
/// re-materialised: the client's fields, its `previous_response_id` gone, and `input`
/// the whole conversation.
pub fn rebuilt(fields: &Map<String, Value>, input: Vec<Value>) -> Vec<u8> {
    let mut out = fields.clone();
    out.remove("previous_response_id");
    out.insert("input".into(), Value::Array(input));
    serde_json::to_vec(&out).unwrap_or_default()
}

/// A Responses body kept for a route of this wire (`None` without a top-level `model`
/// string to replace). No client header is forwarded on this wire.
pub fn original(body: bytes::Bytes, untranslatable: Option<&str>) -> Option<Arc<Original>> {
    let spans = crate::wire::passthrough::spans(&body)?;
    let model = spans.model?;
    if body.get(model.start) != Some(&b'"') {
        return None;
    }
    Some(Arc::new(Original {
        wire: Wire::Responses,
        bytes: body,
        model,
        stream_options: spans.stream_options,
        headers: Vec::new(),
        untranslatable: untranslatable.map(str::to_string),
        per_provider: Vec::new(),
        left_out: Vec::new(),
    }))
}

/// `items` as a route of `provider` may be sent them: items that came from another
/// provider (`origins`) lose their ids, and that provider's reasoning items are left
/// out (they mean nothing elsewhere). `None`: a provider none came from. Also says
/// whether reasoning was left out.
pub fn history_for(
    items: &[Value],
    origins: &[(usize, String)],
    provider: Option<&str>,
) -> (Vec<Value>, bool) {
    let mut out = Vec::with_capacity(items.len());
    let mut left_reasoning = false;
    for (i, item) in items.iter().enumerate() {
        let foreign = origins
            .iter()
            .any(|(at, p)| *at == i && Some(p.as_str()) != provider);
        if !foreign {
            out.push(item.clone());
            continue;
        }
        if item.get("type").and_then(Value::as_str) == Some("reasoning") {
            left_reasoning = true;
            continue;
        }
        let mut item = item.clone();
        if let Some(o) = item.as_object_mut() {
            o.remove("id");
        }
        out.push(item);
    }
    (out, left_reasoning)
}

/// The body a route of this wire is sent: the client's bytes when the request
/// continues nothing; else, rebuilt with the whole conversation, one body for each
/// provider the history came from (its own items as they were) and one for any other.
pub fn original_with_history(
    body: bytes::Bytes,
    b: &ResponsesBody,
    prior: &[Value],
    origins: &[(usize, String)],
    untranslatable: Option<&str>,
) -> Option<Arc<Original>> {
    if prior.is_empty() {
        return original(body, untranslatable);
    }
    let build = |provider: Option<&str>| {
        let (mut input, left) = history_for(prior, origins, provider);
        input.extend(b.input.iter().cloned());
        let bytes = bytes::Bytes::from(rebuilt(&b.fields, input));
        Some((original(bytes, untranslatable)?, left))
    };
    let (neutral, left) = build(None)?;
    let mut providers: Vec<&str> = origins.iter().map(|(_, p)| p.as_str()).collect();
    providers.sort_unstable();
    providers.dedup();
    let per_provider = providers
        .into_iter()
        .filter_map(|p| build(Some(p)).map(|(o, _)| (p.to_string(), o)))
        .collect();
    let mut o = Arc::try_unwrap(neutral).unwrap_or_else(|a| (*a).clone());
    o.per_provider = per_provider;
    if left {
        o.left_out = vec!["reasoning_items".into()];
    }
    Some(Arc::new(o))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::conversation::Turn;
    use serde_json::json;

    fn body(v: Value) -> ResponsesBody {
        parse(&serde_json::to_vec(&v).unwrap()).unwrap()
    }

    #[test]
    fn every_mapped_field_is_read() {
        let b = body(json!({
            "model": "high", "input": "Hi", "instructions": "Be brief.", "stream": true, "store": false,
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": true}],
            "tool_choice": {"type": "function", "name": "f"}, "max_output_tokens": 64,
            "temperature": 0.2, "top_p": 0.9, "reasoning": {"effort": "low"},
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object", "required": ["a"]}, "strict": true}},
            "parallel_tool_calls": false, "metadata": {"team": "a"}, "user": "u1", "include": []
        }));
        assert!(b.stream && !b.store);
        let (r, untranslatable) = chat_request(&b, &[]).unwrap();
        assert_eq!(untranslatable, None);
        assert_eq!(r.conversation.system.as_deref(), Some("Be brief."));
        assert_eq!(r.conversation.turns, vec![Turn::user("Hi")]);
        assert!(r.tools[0].strict);
        assert_eq!(r.tool_choice, Some(ToolChoice::Tool("f".into())));
        assert_eq!(r.max_tokens, Some(64));
        assert_eq!(
            (r.sampling.temperature, r.sampling.top_p),
            (Some(0.2), Some(0.9))
        );
        assert_eq!(r.reasoning, Some(Reasoning::Effort(Effort::Low)));
        assert_eq!(
            r.json_schema,
            Some(json!({"type": "object", "required": ["a"]}))
        );
        assert_eq!(r.parallel_tool_calls, Some(false));
        assert_eq!(r.user.as_deref(), Some("u1"));
        assert!(r.unmapped.is_empty(), "{:?}", r.unmapped);
    }

    #[test]
    fn the_history_comes_first_and_instructions_are_this_requests_own() {
        let prior = vec![
            json!({"role": "user", "content": "First?"}),
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "One."}]}),
        ];
        let b = body(json!({"model": "m", "input": "Second?", "previous_response_id": "resp_1"}));
        assert_eq!(b.previous_response_id.as_deref(), Some("resp_1"));
        let (r, _) = chat_request(&b, &prior).unwrap();
        assert_eq!(r.conversation.system, None);
        assert_eq!(r.conversation.turns.len(), 3);
        assert_eq!(r.conversation.turns[2], Turn::user("Second?"));
    }

    #[test]
    fn built_in_tools_are_semantic_and_unknown_fields_advisory() {
        let b = body(
            json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}],
            "truncation": "auto", "top_logprobs": 2, "text": {"verbosity": "low"}}),
        );
        let (r, _) = chat_request(&b, &[]).unwrap();
        let named: Vec<(&str, bool)> = r
            .unmapped
            .iter()
            .map(|u| (u.name.as_str(), u.semantic))
            .collect();
        assert!(named.contains(&("web_search", true)), "{named:?}");
        assert!(named.contains(&("top_logprobs", true)), "{named:?}");
        assert!(named.contains(&("truncation", false)), "{named:?}");
        assert!(named.contains(&("text.verbosity", false)), "{named:?}");
    }

    #[test]
    fn bad_bodies_name_the_field() {
        for (b, needle) in [
            (json!({"input": "x"}), "`model`"),
            (json!({"model": "m"}), "`input`"),
            (json!({"model": "m", "input": 3}), "`input`"),
            (
                json!({"model": "m", "input": "x", "stream": "yes"}),
                "`stream`",
            ),
            (
                json!({"model": "m", "input": "x", "previous_response_id": "r", "conversation": "c"}),
                "together",
            ),
        ] {
            let e = parse(&serde_json::to_vec(&b).unwrap()).unwrap_err();
            assert!(e.contains(needle), "{needle}: {e}");
        }
        let b = body(json!({"model": "m", "input": "x", "temperature": "hot"}));
        assert!(chat_request(&b, &[]).unwrap_err().contains("`temperature`"));
        // What only the Responses wire carries leaves the request untranslatable.
        let b = body(json!({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}));
        assert!(chat_request(&b, &[]).unwrap().1.is_some());
    }

    #[test]
    fn another_providers_items_lose_their_ids_and_its_reasoning() {
        let items = vec![
            json!({"role": "user", "content": "hi"}),
            json!({"id": "rs_1", "type": "reasoning", "summary": []}),
            json!({"id": "msg_1", "type": "message", "role": "assistant", "content": []}),
        ];
        let origins = vec![(1, "openai".to_string()), (2, "openai".to_string())];
        let (own, left) = history_for(&items, &origins, Some("openai"));
        assert_eq!((own, left), (items.clone(), false));
        let (other, left) = history_for(&items, &origins, Some("xai"));
        assert!(left);
        assert_eq!(other.len(), 2);
        assert!(other[1].get("id").is_none());
        assert_eq!(other[1]["type"], "message");
        // The request carries a body per provider; another is told what it lacks.
        let b = body(json!({"model": "m", "input": "next", "previous_response_id": "resp_1"}));
        let raw = bytes::Bytes::from(serde_json::to_vec(&b.fields).unwrap());
        let o = original_with_history(raw, &b, &items, &origins, None).unwrap();
        assert_eq!(o.left_out_for("openai"), &[] as &[String]);
        assert_eq!(o.left_out_for("xai"), &["reasoning_items".to_string()]);
        let sent: Value = serde_json::from_slice(&o.for_provider("openai").bytes).unwrap();
        assert_eq!(sent["input"].as_array().unwrap().len(), 4);
        let sent: Value = serde_json::from_slice(&o.for_provider("xai").bytes).unwrap();
        assert_eq!(sent["input"].as_array().unwrap().len(), 3);
        assert!(sent.get("previous_response_id").is_none());
    }

    #[test]
    fn a_rebuilt_body_carries_the_whole_input_and_no_id() {
        let b = body(
            json!({"model": "m", "input": "two", "previous_response_id": "resp_1", "store": true}),
        );
        let out: Value =
            serde_json::from_slice(&rebuilt(&b.fields, vec![json!("a"), json!("b")])).unwrap();
        assert_eq!(out["input"], json!(["a", "b"]));
        assert!(out.get("previous_response_id").is_none());
        assert_eq!(out["store"], true);
    }
}
