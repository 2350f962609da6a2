//! Ingress: request bodies of the OpenAI and Anthropic APIs read into the gateway's
//! wire-neutral requests. Pure functions of the bytes; every error names the field that
//! is wrong, so a client sees a clear 400 instead of a routed failure.

use super::errors::ApiError;
use crate::core::conversation::{Conversation, ToolSpec};
use crate::core::request::{
    ChatRequest, Effort, Original, Reasoning, Sampling, ToolChoice, Unmapped,
};
use crate::core::vocab::Wire;
use crate::wire::anthropic::history::from_anthropic;
use crate::wire::openai::history::from_openai_messages;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

mod plain;

/// A chat request as a client sent it, on either API: the router's request (the
/// canonical conversation, the fields it maps, the ones it does not, and the client's
/// body), and what the gateway itself reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatIn {
    pub model: String,
    pub request: ChatRequest,
    pub stream: bool,
    /// OpenAI `stream_options.include_usage`: a final chunk carries the usage.
    pub include_usage: bool,
    /// Why the conversation cannot be read into the canonical form (audio, a file by
    /// id, a custom tool, ...): only a route of the client's own wire, which gets the
    /// client's body as it is, can serve it. The conversation is then empty.
    pub untranslatable: Option<ApiError>,
    /// A request of the Responses API: the conversation it continues and keeps.
    pub responses: Option<std::sync::Arc<Turn>>,
}

/// One turn of a Responses API conversation, as the gateway keeps it: the response's
/// own id, what it continues, and the items before its answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// The id the client sees (`resp_…`): the gateway's own.
    pub id: String,
    /// Unix seconds.
    pub created_at: i64,
    pub previous_response_id: Option<String>,
    /// `store` (default true): the conversation is kept after the answer.
    pub store: bool,
    /// The request's top-level fields, which the `response` object echoes.
    pub fields: Arc<Map<String, Value>>,
    /// The conversation's items before the answer: the previous response's, then this
    /// request's input.
    pub history: Vec<Value>,
    /// Items of `history` only their provider may be sent as they are.
    pub origins: Vec<(usize, String)>,
    /// The history's share of the gateway's buffered-bytes budget, held while the
    /// request lives.
    pub held: Held,
}

impl Turn {
    /// What a `response` object a Responses route answered is relabelled with: this
    /// turn's id and `previous_response_id`, and whether its conversation was kept.
    pub fn relabel(&self, stored: bool) -> crate::wire::responses::Relabel<'_> {
        crate::wire::responses::Relabel {
            id: &self.id,
            previous_response_id: self.previous_response_id.as_deref(),
            stored,
        }
    }
}

/// A request's share of the buffered-bytes budget (`serve::body_budget`), carried with
/// it; every two are equal (it is no part of what a request says).
#[derive(Clone, Default)]
pub struct Held {
    /// Given back when the last copy of the request's turn goes.
    _permit: Option<Arc<super::body_budget::BodyPermit>>,
}

impl Held {
    pub(super) fn new(permit: Option<super::body_budget::BodyPermit>) -> Held {
        Held {
            _permit: permit.map(Arc::new),
        }
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Held")
    }
}

impl PartialEq for Held {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct EmbedIn {
    pub model: String,
    pub inputs: Vec<String>,
    /// `encoding_format: base64` (the openai SDK's default): little-endian f32s.
    pub base64: bool,
    /// `dimensions`: Gemini's `outputDimensionality` on another wire (fidelity.md §6).
    pub dimensions: Option<u32>,
    /// The client's body, for a route of its wire (spec/fidelity.md §6).
    pub original: Option<Arc<Original>>,
    /// `input` as token arrays: each input's token count (`inputs` is then empty).
    pub token_arrays: Vec<u64>,
    /// Fields another wire has no place for (`user`, unknown fields).
    pub unmapped: Vec<Unmapped>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RerankIn {
    pub model: String,
    pub query: String,
    pub documents: Vec<String>,
    pub top_n: Option<usize>,
    pub return_documents: bool,
    /// The client's body, for a route of its rerank API (spec/fidelity.md §6).
    pub original: Option<Arc<Original>>,
}

type Obj = Map<String, Value>;

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::bad_request(msg)
}

fn object(body: &[u8]) -> Result<Obj, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(bad("the request body must be a JSON object")),
        Err(e) => Err(bad(format!("the request body is not valid JSON: {e}"))),
    }
}

fn model(o: &Obj) -> Result<String, ApiError> {
    match o.get("model") {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(_) => Err(bad("`model` must be a non-empty string")),
        None => Err(bad("`model` is required: a workflow, a tier or a route")),
    }
}

fn opt_bool(o: &Obj, field: &str) -> Result<bool, ApiError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(format!("`{field}` must be a boolean"))),
    }
}

fn opt_bool_or_none(o: &Obj, field: &str) -> Result<Option<bool>, ApiError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(bad(format!("`{field}` must be a boolean"))),
    }
}

fn opt_f64(o: &Obj, field: &str) -> Result<Option<f64>, ApiError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| bad(format!("`{field}` must be a number"))),
    }
}

fn opt_u32(o: &Obj, field: &str) -> Result<Option<u32>, ApiError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match crate::wire::codec::request_count(v) {
            Some(n) => Ok(Some(n)),
            None if v.as_u64().is_some() => Err(bad(format!(
                "`{field}` is {v}, more than the largest count accepted ({})",
                u32::MAX
            ))),
            None => Err(bad(format!("`{field}` must be a non-negative integer"))),
        },
    }
}

fn opt_str(o: &Obj, field: &str) -> Result<Option<String>, ApiError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(bad(format!("`{field}` must be a string"))),
    }
}

fn strings(v: Option<&Value>, field: &str) -> Result<Vec<String>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| bad(format!("`{field}` must be a string or strings")))
            })
            .collect(),
        Some(_) => Err(bad(format!("`{field}` must be a string or strings"))),
    }
}

fn metadata(v: Option<&Value>) -> Result<BTreeMap<String, String>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(bad(format!("`metadata.{k}` must be a string"))),
            })
            .collect(),
        Some(_) => Err(bad("`metadata` must be an object of strings")),
    }
}

fn tool_spec(
    name: Option<&Value>,
    desc: Option<&Value>,
    params: Option<&Value>,
    strict: Option<&Value>,
    path: &str,
) -> Result<ToolSpec, ApiError> {
    let name = name
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad(format!("`{path}.name` is required")))?;
    let parameters = match params {
        None | Some(Value::Null) => serde_json::json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err(bad(format!(
                "`{path}` parameters must be a JSON Schema object"
            )))
        }
    };
    Ok(ToolSpec {
        name: name.to_string(),
        description: desc.and_then(Value::as_str).unwrap_or_default().to_string(),
        parameters,
        strict: strict.and_then(Value::as_bool).unwrap_or(false),
    })
}

/// `POST /v1/chat/completions`.
pub fn openai_chat(body: &[u8]) -> Result<ChatIn, ApiError> {
    // The plainest bodies without a `Value` tree (ingress/plain.rs); the tree path
    // below stays the authority on every other body and on every error.
    if let Some((model, request, stream)) = plain::openai_chat(body) {
        return Ok(ChatIn {
            model,
            request,
            stream,
            include_usage: false,
            untranslatable: None,
            responses: None,
        });
    }
    openai_chat_tree(body)
}

/// `openai_chat` through a `serde_json::Value`.
fn openai_chat_tree(body: &[u8]) -> Result<ChatIn, ApiError> {
    let o = object(body)?;
    let model = model(&o)?;
    let messages = match o.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() => m,
        Some(Value::Array(_)) => return Err(bad("`messages` must not be empty")),
        _ => return Err(bad("`messages` is required: an array of messages")),
    };
    let (conversation, mut untranslatable) = match from_openai_messages(messages) {
        Ok(c) => (c, None),
        Err(e) => (Conversation::default(), Some(bad(e.to_string()))),
    };
    let n = opt_u32(&o, "n")?;
    if n == Some(0) {
        return Err(bad("`n` must be at least 1"));
    }
    let tools = match o.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ts)) => ts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let path = format!("tools[{i}].function");
                let f = t
                    .get("function")
                    .filter(|_| {
                        t.get("type").and_then(Value::as_str).unwrap_or("function") == "function"
                    })
                    .ok_or_else(|| {
                        bad(format!(
                            "`tools[{i}]` must be {{type: function, function: {{...}}}}"
                        ))
                    })?;
                tool_spec(
                    f.get("name"),
                    f.get("description"),
                    f.get("parameters"),
                    f.get("strict"),
                    &path,
                )
            })
            .collect::<Result<_, _>>()
            // A tool the canonical form has no kind for (`custom`, ...): only the
            // client's own wire carries it.
            .unwrap_or_else(|e| {
                untranslatable.get_or_insert(e);
                Vec::new()
            }),
        Some(_) => return Err(bad("`tools` must be an array")),
    };
    let tool_choice = match o.get("tool_choice") {
        None | Some(Value::Null) => None,
        // A word to come, `allowed_tools`, a custom tool, ...: the client's own wire
        // carries it.
        Some(v) => match crate::wire::openai::tool_choice(v) {
            Ok(c) => Some(c),
            Err(m) => {
                untranslatable.get_or_insert(bad(m));
                None
            }
        },
    };
    let (json_schema, schema_name, schema_strict) = match o.get("response_format") {
        None | Some(Value::Null) => (None, None, None),
        Some(rf) => {
            let f = crate::wire::openai::response_format(rf).map_err(bad)?;
            (f.schema, f.name, f.strict)
        }
    };
    let max_tokens = match opt_u32(&o, "max_completion_tokens")? {
        Some(n) => Some(n),
        None => opt_u32(&o, "max_tokens")?,
    };
    let seed = match o.get("seed") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_i64().ok_or_else(|| bad("`seed` must be an integer"))?),
    };
    let include_usage = o
        .get("stream_options")
        .and_then(|s| s.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let effort_word = opt_str(&o, "reasoning_effort")?;
    // `none` asks for no reasoning, which is every other wire's default; a word with no
    // thinking budget (`xhigh`, words to come) goes only where the word itself is sent
    // (`wire::carry`).
    let reasoning = effort_word
        .as_deref()
        .and_then(Effort::parse)
        .map(Reasoning::Effort);
    let request = ChatRequest {
        conversation,
        tools,
        tool_choice,
        max_tokens,
        // A route of the client's own wire gets its body, names and all.
        max_tokens_name: None,
        sampling: Sampling {
            temperature: opt_f64(&o, "temperature")?,
            top_p: opt_f64(&o, "top_p")?,
            stop: strings(o.get("stop"), "stop")?,
            seed,
            // Not OpenAI's, but clients of compatible APIs send it; Anthropic and Gemini
            // have it (fidelity.md §2).
            top_k: opt_u32(&o, "top_k")?,
        },
        json_schema,
        schema_name,
        schema_strict,
        n,
        parallel_tool_calls: opt_bool_or_none(&o, "parallel_tool_calls")?,
        reasoning,
        effort_word,
        unmapped: openai_unmapped(&o, messages),
        user: opt_str(&o, "user")?,
        metadata: metadata(o.get("metadata"))?,
        token_estimate: None,
        original: None,
    };
    Ok(ChatIn {
        model,
        request,
        stream: opt_bool(&o, "stream")?,
        include_usage,
        untranslatable,
        responses: None,
    })
}

/// The fields of an OpenAI chat body the canonical request does not hold
/// (spec/fidelity.md §3): each top-level field it does not map, and a message's
/// `name`. Semantic: `logprobs: true`, `top_logprobs`, `modalities` other than text,
/// `audio`; every other one is advisory. A null is no field at all.
fn openai_unmapped(o: &Obj, messages: &[Value]) -> Vec<Unmapped> {
    let mut out: Vec<Unmapped> = o
        .iter()
        .filter(|(k, v)| !v.is_null() && !Unmapped::OPENAI_MAPPED.contains(&k.as_str()))
        .map(|(k, v)| Unmapped::openai(k, v))
        .collect();
    if messages
        .iter()
        .any(|m| m.get("name").is_some_and(|n| !n.is_null()))
    {
        out.push(Unmapped {
            name: "messages[].name".into(),
            semantic: false,
        });
    }
    // Anthropic's prompt-caching mark, which clients of OpenAI-compatible gateways put
    // on content parts (and tools): no other wire's request has a place for it.
    let marked = |v: &Value| v.get("cache_control").is_some_and(|c| !c.is_null());
    let parts_marked = messages.iter().any(|m| {
        m.get("content")
            .and_then(Value::as_array)
            .is_some_and(|ps| ps.iter().any(marked))
    });
    let tools_marked = o
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|ts| ts.iter().any(marked));
    if parts_marked || tools_marked {
        out.push(Unmapped {
            name: "cache_control".into(),
            semantic: false,
        });
    }
    // `name` and `cache_control` are named above; an earlier turn's `reasoning_content`,
    // `refusal` or `audio`, and fields no wire knows, are named here.
    const MESSAGE: &[&str] = &["role", "content", "name", "tool_calls", "tool_call_id"];
    const PART: &[&str] = &[
        "type",
        "text",
        "image_url",
        "file",
        "input_audio",
        "refusal",
        "cache_control",
    ];
    nested_unmapped(messages, MESSAGE, PART, &mut out);
    // A function tool's own fields; another kind of tool is not translated at all.
    const TOOL: &[&str] = &["type", "function", "cache_control"];
    const FUNCTION: &[&str] = &["name", "description", "parameters", "strict"];
    tools_unmapped(o.get("tools"), TOOL, Some(FUNCTION), &mut out);
    out
}

/// The fields of the client's tool definitions the canonical `ToolSpec` does not hold
/// (`tools[].foo`, `tools[].function.foo`), each named once: a translation leaves them
/// out, and fidelity.md §3 names every field it leaves out.
fn tools_unmapped(
    tools: Option<&Value>,
    tool_keys: &[&str],
    function_keys: Option<&[&str]>,
    out: &mut Vec<Unmapped>,
) {
    let mut name = |name: String| {
        if !out.iter().any(|u| u.name == name) {
            out.push(Unmapped {
                name,
                semantic: false,
            });
        }
    };
    let tools = tools.and_then(Value::as_array).into_iter().flatten();
    for t in tools.filter_map(Value::as_object) {
        for (k, v) in t {
            if !v.is_null() && !tool_keys.contains(&k.as_str()) {
                name(format!("tools[].{k}"));
            }
        }
        let (Some(keys), Some(f)) = (function_keys, t.get("function").and_then(Value::as_object))
        else {
            continue;
        };
        for (k, v) in f {
            if !v.is_null() && !keys.contains(&k.as_str()) {
                name(format!("tools[].function.{k}"));
            }
        }
    }
}

/// The fields inside `messages` that the canonical conversation does not hold, each
/// named once (`messages[].reasoning_content`, `messages[].content[].foo`): advisory,
/// and every one named where it is dropped (fidelity.md §3: "every field not listed").
/// A null is no field at all.
fn nested_unmapped(
    messages: &[Value],
    message_keys: &[&str],
    part_keys: &[&str],
    out: &mut Vec<Unmapped>,
) {
    let mut name = |prefix: &str, key: &str| {
        let name = format!("{prefix}{key}");
        if !out.iter().any(|u| u.name == name) {
            out.push(Unmapped {
                name,
                semantic: false,
            });
        }
    };
    for m in messages.iter().filter_map(Value::as_object) {
        for (k, v) in m {
            if !v.is_null() && !message_keys.contains(&k.as_str()) {
                name("messages[].", k);
            }
        }
        let parts = m.get("content").and_then(Value::as_array);
        for p in parts.into_iter().flatten().filter_map(Value::as_object) {
            for (k, v) in p {
                if !v.is_null() && !part_keys.contains(&k.as_str()) {
                    name("messages[].content[].", k);
                }
            }
        }
    }
}

/// `POST /v1/messages` (Anthropic Messages API).
pub fn anthropic_messages(body: &[u8]) -> Result<ChatIn, ApiError> {
    let o = object(body)?;
    let model = model(&o)?;
    let messages = match o.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() => m,
        Some(Value::Array(_)) => return Err(bad("`messages` must not be empty")),
        _ => return Err(bad("`messages` is required: an array of messages")),
    };
    let mut cache_control = false;
    // The system blocks, each kept apart: a wire that takes several (Gemini's parts,
    // OpenAI's text parts) gets them so; one that needs one string, joined in order.
    let system: Vec<String> = match o.get("system") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(blocks)) => {
            cache_control |= blocks.iter().any(|b| b.get("cache_control").is_some());
            blocks
                .iter()
                .map(|b| b.get("text").and_then(Value::as_str).map(str::to_string))
                .collect::<Option<Vec<String>>>()
                .ok_or_else(|| bad("`system` blocks must be text blocks"))?
        }
        Some(_) => return Err(bad("`system` must be a string or text blocks")),
    };
    let joined = (!system.is_empty()).then(|| system.join("\n\n"));
    let (conversation, untranslatable) = match from_anthropic(joined.as_deref(), messages) {
        Ok(mut c) => {
            if system.len() > 1 {
                c.system_parts = system;
            }
            (c, None)
        }
        Err(e) => (Conversation::default(), Some(bad(e.to_string()))),
    };
    let mut untranslatable = untranslatable;
    let tools = match o.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ts)) => {
            cache_control |= ts.iter().any(|t| t.get("cache_control").is_some());
            // A server tool (`web_search_20250305`, ...) or a versioned client tool
            // (`bash_20250124`, `text_editor_...`) is defined by Anthropic, not by its
            // schema: as a function of that name on another wire, the model would call a
            // tool the client never runs. Only the client's own wire carries it.
            let kind = |t: &Value| t.get("type").and_then(Value::as_str).map(str::to_string);
            if let Some((i, k)) = ts
                .iter()
                .enumerate()
                .find_map(|(i, t)| kind(t).filter(|k| k != "custom").map(|k| (i, k)))
            {
                untranslatable.get_or_insert(bad(format!(
                    "`tools[{i}]` is Anthropic's `{k}` tool: only the Anthropic wire carries it"
                )));
            }
            ts.iter()
                .enumerate()
                .map(|(i, t)| {
                    tool_spec(
                        t.get("name"),
                        t.get("description"),
                        t.get("input_schema"),
                        t.get("strict"),
                        &format!("tools[{i}]"),
                    )
                })
                .collect::<Result<_, _>>()?
        }
        Some(_) => return Err(bad("`tools` must be an array")),
    };
    let mut parallel_tool_calls = None;
    let tool_choice = match o.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(tc) => {
            if tc.get("disable_parallel_tool_use").and_then(Value::as_bool) == Some(true) {
                parallel_tool_calls = Some(false);
            }
            Some(match tc.get("type").and_then(Value::as_str) {
                Some("auto") => ToolChoice::Auto,
                Some("any") => ToolChoice::Required,
                Some("none") => ToolChoice::None,
                Some("tool") => match tc.get("name").and_then(Value::as_str) {
                    Some(n) => ToolChoice::Tool(n.to_string()),
                    None => return Err(bad("`tool_choice.name` is required with type tool")),
                },
                _ => return Err(bad("`tool_choice.type` must be auto, any, tool or none")),
            })
        }
    };
    let user = o
        .get("metadata")
        .and_then(|m| m.get("user_id"))
        .and_then(Value::as_str)
        .map(str::to_string);
    // `thinking` is semantic (fidelity.md §3): a budget is translated; any other kind
    // (`adaptive`, and kinds to come) only the Anthropic wire carries.
    let mut thinking_unmapped = false;
    let reasoning =
        match o.get("thinking") {
            None | Some(Value::Null) => None,
            Some(t) => match t.get("type").and_then(Value::as_str) {
                Some("disabled") => None,
                Some("enabled") => match t.get("budget_tokens").and_then(|b| {
                    crate::wire::codec::request_count(b).or_else(|| b.as_u64().map(|_| u32::MAX))
                }) {
                    Some(b) => Some(Reasoning::Budget(b)),
                    None => return Err(bad(
                        "`thinking.budget_tokens` must be a non-negative integer with type enabled",
                    )),
                },
                _ => {
                    thinking_unmapped = true;
                    None
                }
            },
        };
    cache_control |= messages.iter().any(|m| {
        m.get("content")
            .and_then(Value::as_array)
            .is_some_and(|bs| bs.iter().any(|b| b.get("cache_control").is_some()))
    });
    let request = ChatRequest {
        conversation,
        tools,
        tool_choice,
        max_tokens: opt_u32(&o, "max_tokens")?,
        max_tokens_name: None,
        sampling: Sampling {
            temperature: opt_f64(&o, "temperature")?,
            top_p: opt_f64(&o, "top_p")?,
            stop: strings(o.get("stop_sequences"), "stop_sequences")?,
            seed: None,
            top_k: opt_u32(&o, "top_k")?,
        },
        json_schema: None,
        schema_name: None,
        schema_strict: None,
        n: None,
        parallel_tool_calls,
        reasoning,
        // A budget, not a word: each wire gets the word its budget reads as.
        effort_word: None,
        unmapped: {
            let mut u = anthropic_unmapped(&o, cache_control);
            anthropic_nested_unmapped(messages, &mut u);
            const TOOL: &[&str] = &[
                "type",
                "name",
                "description",
                "input_schema",
                "cache_control",
                "strict",
            ];
            tools_unmapped(o.get("tools"), TOOL, None, &mut u);
            if thinking_unmapped {
                u.push(Unmapped {
                    name: "thinking".into(),
                    semantic: true,
                });
            }
            // An earlier answer's thinking is signed by its provider and replayed only
            // to it: another wire's request goes without it, named (fidelity.md §3).
            if has_thinking_history(messages) {
                u.push(Unmapped {
                    name: "messages[].thinking".into(),
                    semantic: false,
                });
            }
            u
        },
        user,
        metadata: BTreeMap::new(),
        token_estimate: None,
        original: None,
    };
    Ok(ChatIn {
        model,
        request,
        stream: opt_bool(&o, "stream")?,
        // Anthropic streams always end with the usage in `message_delta`.
        include_usage: true,
        untranslatable,
        responses: None,
    })
}

/// Whether an assistant message of the history holds a `thinking` or
/// `redacted_thinking` block.
fn has_thinking_history(messages: &[Value]) -> bool {
    messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .filter_map(|m| m.get("content").and_then(Value::as_array))
        .flatten()
        .any(|b| {
            matches!(
                b.get("type").and_then(Value::as_str),
                Some("thinking" | "redacted_thinking")
            )
        })
}

/// The fields of an Anthropic Messages body the canonical request does not hold: each
/// top-level field it does not map, and `cache_control` anywhere. All advisory (an
/// answer stays valid without them); `metadata` beyond `user_id` included.
fn anthropic_unmapped(o: &Obj, cache_control: bool) -> Vec<Unmapped> {
    const MAPPED: &[&str] = &[
        "model",
        "messages",
        "system",
        "stream",
        "tools",
        "tool_choice",
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "thinking",
        "metadata",
    ];
    let mut out: Vec<Unmapped> = o
        .iter()
        .filter(|(k, v)| !v.is_null() && !MAPPED.contains(&k.as_str()))
        .map(|(k, _)| Unmapped {
            name: k.clone(),
            semantic: false,
        })
        .collect();
    if o.get("metadata")
        .and_then(Value::as_object)
        .is_some_and(|m| m.keys().any(|k| k != "user_id"))
    {
        out.push(Unmapped {
            name: "metadata".into(),
            semantic: false,
        });
    }
    if cache_control {
        out.push(Unmapped {
            name: "cache_control".into(),
            semantic: false,
        });
    }
    out
}

/// The fields inside an Anthropic `messages` array the canonical conversation does not
/// hold (a document's `context` and `citations`, a text block's `citations`, fields no
/// wire knows), named once each; `cache_control` and thinking are named apart.
fn anthropic_nested_unmapped(messages: &[Value], out: &mut Vec<Unmapped>) {
    const MESSAGE: &[&str] = &["role", "content"];
    const BLOCK: &[&str] = &[
        "type",
        "text",
        "source",
        "title",
        "cache_control",
        "id",
        "name",
        "input",
        "tool_use_id",
        "content",
        "is_error",
        "thinking",
        "signature",
        "data",
    ];
    nested_unmapped(messages, MESSAGE, BLOCK, out);
}

/// The client's body kept for a route of `wire`, with the headers forwarded on that
/// wire: `None` when the body has no top-level `model` string to replace.
pub fn original(
    body: bytes::Bytes,
    wire: Wire,
    headers: &hyper::HeaderMap,
    untranslatable: Option<&ApiError>,
) -> Option<Arc<Original>> {
    let spans = crate::wire::passthrough::spans(&body)?;
    let model = spans.model?;
    if body.get(model.start) != Some(&b'"') {
        return None;
    }
    let forwarded = match wire {
        Wire::Anthropic => ["anthropic-version", "anthropic-beta"]
            .into_iter()
            .flat_map(|name| {
                headers
                    .get_all(name)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .map(move |v| (name, v.to_string()))
            })
            .collect(),
        _ => Vec::new(),
    };
    Some(Arc::new(Original {
        wire,
        bytes: body,
        model,
        stream_options: spans.stream_options,
        headers: forwarded,
        untranslatable: untranslatable.map(|e| e.message.clone()),
        per_provider: Vec::new(),
        left_out: Vec::new(),
    }))
}

/// The top-level fields of an embeddings body the canonical request maps: every
/// other one (`user`, unknown fields) only the client's own wire carries.
const EMBED_MAPPED: &[&str] = &["model", "input", "encoding_format", "dimensions"];

/// A token id of a token-array input: a non-negative integer.
fn token(v: &Value) -> bool {
    v.as_u64().is_some()
}

/// `input` read as texts, or as token arrays (OpenAI's `[1, 2]`: one input, and
/// `[[1, 2], [3]]`: several), whose token counts are returned instead.
fn embed_inputs(input: Option<&Value>) -> Result<(Vec<String>, Vec<u64>), ApiError> {
    const SHAPE: &str = "`input` must be a string, an array of strings, an array of token ids or an array of token-id arrays";
    match input {
        Some(Value::String(s)) => Ok((vec![s.clone()], Vec::new())),
        Some(Value::Array(items)) if items.is_empty() => Err(bad("`input` must not be empty")),
        Some(Value::Array(items)) => match &items[0] {
            Value::String(_) => {
                let texts = items
                    .iter()
                    .map(|i| i.as_str().map(str::to_string).ok_or_else(|| bad(SHAPE)))
                    .collect::<Result<_, _>>()?;
                Ok((texts, Vec::new()))
            }
            Value::Number(_) if items.iter().all(token) => {
                Ok((Vec::new(), vec![items.len() as u64]))
            }
            Value::Array(_) => {
                let counts = items
                    .iter()
                    .map(|i| match i {
                        Value::Array(ids) if !ids.is_empty() && ids.iter().all(token) => {
                            Ok(ids.len() as u64)
                        }
                        _ => Err(bad(SHAPE)),
                    })
                    .collect::<Result<_, _>>()?;
                Ok((Vec::new(), counts))
            }
            _ => Err(bad(SHAPE)),
        },
        _ => Err(bad(
            "`input` is required: a string, an array of strings or token arrays",
        )),
    }
}

/// `POST /v1/embeddings`.
pub fn embeddings(body: &[u8]) -> Result<EmbedIn, ApiError> {
    let o = object(body)?;
    let model = model(&o)?;
    let (inputs, token_arrays) = embed_inputs(o.get("input"))?;
    let base64 = match opt_str(&o, "encoding_format")?.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(bad(format!(
                "`encoding_format` `{other}` is not float or base64"
            )))
        }
    };
    let unmapped = o
        .iter()
        .filter(|(k, v)| !v.is_null() && !EMBED_MAPPED.contains(&k.as_str()))
        .map(|(k, _)| Unmapped {
            name: k.clone(),
            semantic: false,
        })
        .collect();
    Ok(EmbedIn {
        model,
        inputs,
        base64,
        dimensions: opt_u32(&o, "dimensions")?,
        original: None,
        token_arrays,
        unmapped,
    })
}

/// `POST /v1/rerank` (the Cohere / Jina shape).
pub fn rerank(body: &[u8]) -> Result<RerankIn, ApiError> {
    let o = object(body)?;
    let model = model(&o)?;
    let query = opt_str(&o, "query")?.ok_or_else(|| bad("`query` is required"))?;
    let documents = match o.get("documents") {
        Some(Value::Array(ds)) if !ds.is_empty() => ds
            .iter()
            .enumerate()
            .map(|(i, d)| match d {
                Value::String(s) => Ok(s.clone()),
                Value::Object(m) => m
                    .get("text")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| bad(format!("`documents[{i}]` must be a string or {{text}}"))),
                _ => Err(bad(format!(
                    "`documents[{i}]` must be a string or {{text}}"
                ))),
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(bad("`documents` is required: a non-empty array")),
    };
    let top_n = opt_u32(&o, "top_n")?.map(|n| n as usize);
    Ok(RerankIn {
        model,
        query,
        documents,
        top_n,
        return_documents: opt_bool(&o, "return_documents")?,
        original: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::conversation::Turn;

    /// Guards a body the provider serves refused by the gateway: `1e2` is a count to a
    /// JSON parser that reads numbers as floats, as the providers' APIs do.
    #[test]
    fn a_count_written_as_an_integral_float_is_a_count() {
        let body = br#"{"model":"high","messages":[{"role":"user","content":"hi"}],"max_tokens":1e2,"n":1.0}"#;
        let c = openai_chat(body).unwrap().request;
        assert_eq!(c.max_tokens, Some(100));
        assert_eq!(c.n, Some(1));
        for bad in ["1.5", "-1", "1e12"] {
            let body = format!(
                r#"{{"model":"high","messages":[{{"role":"user","content":"hi"}}],"max_tokens":{bad}}}"#
            );
            assert!(openai_chat(body.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn openai_chat_reads_every_field_that_passes_through() {
        let body = br#"{"model":"high","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],
            "tools":[{"type":"function","function":{"name":"get_weather","description":"w","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
            "tool_choice":{"type":"function","function":{"name":"get_weather"}},
            "response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}},
            "temperature":0.2,"top_p":0.9,"stop":"END","seed":7,"max_completion_tokens":64,
            "user":"u1","metadata":{"team":"a"},"stream":true,"stream_options":{"include_usage":true}}"#;
        let c = openai_chat(body).unwrap();
        assert_eq!(c.model, "high");
        let (stream, include_usage) = (c.stream, c.include_usage);
        let c = c.request;
        assert_eq!(c.conversation.system.as_deref(), Some("be brief"));
        assert_eq!(c.conversation.turns, vec![Turn::user("hi")]);
        assert_eq!(c.tools.len(), 1);
        assert_eq!(c.tools[0].name, "get_weather");
        assert_eq!(c.tool_choice, Some(ToolChoice::Tool("get_weather".into())));
        assert_eq!(c.json_schema, Some(serde_json::json!({"type":"object"})));
        assert_eq!(c.sampling.temperature, Some(0.2));
        assert_eq!(c.sampling.top_p, Some(0.9));
        assert_eq!(c.sampling.stop, vec!["END".to_string()]);
        assert_eq!(c.sampling.seed, Some(7));
        assert_eq!(c.max_tokens, Some(64));
        assert_eq!(c.user.as_deref(), Some("u1"));
        assert_eq!(c.metadata.get("team").map(String::as_str), Some("a"));
        assert!(stream && include_usage);
    }

    #[test]
    fn malformed_bodies_name_what_is_wrong() {
        // What the canonical form cannot hold is named too, for a route of another wire.
        let msg = |b: &[u8]| match openai_chat(b) {
            Err(e) => e.message,
            Ok(c) => c.untranslatable.expect("an error").message,
        };
        assert!(msg(b"{\"model\": ").contains("not valid JSON"));
        assert!(msg(b"[1]").contains("JSON object"));
        assert!(msg(br#"{"messages":[{"role":"user","content":"x"}]}"#).contains("`model`"));
        assert!(msg(br#"{"model":"m"}"#).contains("`messages`"));
        assert!(msg(
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":"hot"}"#
        )
        .contains("`temperature`"));
        assert!(
            msg(br#"{"model":"m","messages":[{"role":"wizard","content":"x"}]}"#)
                .contains("wizard")
        );
        assert_eq!(openai_chat(b"nope").unwrap_err().status, 400);
    }

    #[test]
    fn a_count_too_large_is_named_as_too_large_not_as_negative() {
        let e = openai_chat(
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":99999999999}"#,
        )
        .unwrap_err();
        assert!(
            e.message.contains("`max_tokens` is 99999999999"),
            "{}",
            e.message
        );
        assert!(e.message.contains("4294967295"), "{}", e.message);
        let e = openai_chat(
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-1}"#,
        )
        .unwrap_err();
        assert!(e.message.contains("non-negative"), "{}", e.message);
    }

    #[test]
    fn anthropic_messages_reads_system_tools_and_choice() {
        let body = br#"{"model":"high","max_tokens":16,"system":[{"type":"text","text":"s"}],
            "messages":[{"role":"user","content":"hi"}],
            "tools":[{"name":"t","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"},
            "stop_sequences":["x"],"metadata":{"user_id":"u"},"stream":true}"#;
        let c = anthropic_messages(body).unwrap();
        let stream = c.stream;
        let c = c.request;
        assert_eq!(c.conversation.system.as_deref(), Some("s"));
        assert_eq!(c.tools[0].name, "t");
        assert_eq!(c.tool_choice, Some(ToolChoice::Required));
        assert_eq!(c.sampling.stop, vec!["x".to_string()]);
        assert_eq!(c.user.as_deref(), Some("u"));
        assert_eq!(c.max_tokens, Some(16));
        assert!(stream);
    }

    #[test]
    fn embeddings_and_rerank() {
        let e = embeddings(br#"{"model":"embed","input":["a","b"],"encoding_format":"base64"}"#)
            .unwrap();
        assert_eq!(e.inputs, vec!["a".to_string(), "b".to_string()]);
        assert!(e.base64);
        // Token arrays, as OpenAI takes them: one array is one input.
        let t = embeddings(br#"{"model":"embed","input":[[1,2],[3]],"user":"u"}"#).unwrap();
        assert_eq!((t.inputs.len(), t.token_arrays), (0, vec![2, 1]));
        assert_eq!(t.unmapped[0].name, "user");
        let t = embeddings(br#"{"model":"embed","input":[1,2,3]}"#).unwrap();
        assert_eq!(t.token_arrays, vec![3]);
        for mixed in [
            &br#"{"model":"e","input":["a",1]}"#[..],
            br#"{"model":"e","input":[1,"a"]}"#,
            br#"{"model":"e","input":[[1],"a"]}"#,
            br#"{"model":"e","input":[[]]}"#,
            br#"{"model":"e","input":[-1]}"#,
            br#"{"model":"e","input":[1.5]}"#,
        ] {
            assert!(
                embeddings(mixed).is_err(),
                "{}",
                String::from_utf8_lossy(mixed)
            );
        }
        let r = rerank(br#"{"model":"rr","query":"q","documents":["a",{"text":"b"}],"top_n":1}"#)
            .unwrap();
        assert_eq!(r.documents, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(r.top_n, Some(1));
    }
}
