//! The canonical conversation history, rendered to and parsed from each wire's message
//! format. A session that must move to another provider re-sends this history whole
//! ("history materialisation"); server-side state such as OpenAI's `previous_response_id`
//! means nothing to any other provider, so it is never relied on.
//!
//! What survives a round trip `from_X(render_X(c))`:
//! - OpenAI: `c` exactly. OpenAI tool messages carry neither a name nor an error flag:
//!   the name comes back from the assistant tool call with the same id, and an error is
//!   marked in-band by [`OPENAI_TOOL_ERROR_PREFIX`] (see [`openai_messages`]). Arguments
//!   travel as a JSON string: a float can come back off by its last bit, because
//!   serde_json parses without its `float_roundtrip` feature.
//! - Anthropic: `c.normalize()` exactly. Consecutive same-role turns share one message
//!   there; each text block parses back as its own turn, so only empty-text assistant
//!   turns next to other assistant turns lose their boundary (see [`Conversation::normalize`]).
//! - Gemini: `c.normalize()` modulo call ids. Gemini has no call ids: the parser numbers
//!   calls `call_0`, `call_1`, ... in conversation order and pairs each function response
//!   with the earliest unanswered call of the same name. Pairing therefore survives unless
//!   two calls to the same function are answered out of call order.
//!
//! Reasoning blocks (Anthropic `thinking`, Gemini `thought` parts) and Gemini's optional
//! call `id` fields are provider-specific and are dropped; images and other non-text
//! content are refused with an error rather than silently lost.

use serde::{Deserialize, Serialize};

/// A history, or an answer's tool calls, that a wire's format cannot be read as: the
/// message names the JSON path and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CodecError(pub String);

impl From<String> for CodecError {
    fn from(s: String) -> Self {
        CodecError(s)
    }
}
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};

/// One system prompt and the turns after it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    pub system: Option<String>,
    pub turns: Vec<Turn>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Turn {
    User {
        text: String,
    },
    /// `text` is empty when the assistant only calls tools.
    Assistant {
        text: String,
        tool_calls: Vec<ToolCall>,
    },
    /// The result of executing the call `call_id`; `name` repeats that call's name
    /// because Gemini pairs results with calls by name.
    ToolResult {
        call_id: String,
        name: String,
        content: String,
        is_error: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// A JSON object.
    pub arguments: Value,
}

/// A tool the model may call; `parameters` is a JSON Schema object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

impl Conversation {
    /// The form Anthropic and Gemini preserve, where an assistant turn shares one message
    /// with the assistant turn before it. Two changes, both idempotent:
    /// an assistant turn with empty text right after an assistant turn is folded into it
    /// (its tool calls appended), and an assistant turn with neither text nor tool calls
    /// right before an assistant turn is dropped. User and tool-result turns are never
    /// changed: every text block parses back as its own user turn, so nothing is joined.
    pub fn normalize(&self) -> Conversation {
        let mut turns: Vec<Turn> = Vec::with_capacity(self.turns.len());
        for turn in &self.turns {
            if let (
                Some(Turn::Assistant {
                    text: last_text,
                    tool_calls: last_calls,
                }),
                Turn::Assistant { text, tool_calls },
            ) = (turns.last_mut(), turn)
            {
                if text.is_empty() {
                    last_calls.extend(tool_calls.iter().cloned());
                    continue;
                }
                if last_text.is_empty() && last_calls.is_empty() {
                    turns.pop();
                }
            }
            turns.push(turn.clone());
        }
        Conversation {
            system: self.system.clone(),
            turns,
        }
    }

    /// Whether every wire can carry this history and give it back: call ids non-empty
    /// and unique, arguments JSON objects, and every tool result answering a call of
    /// the assistant turn just before its run of results, with that call's name. A call
    /// may be left unanswered only while nothing but results follows it (tools still
    /// running); providers reject a request that skips a call's result.
    pub fn validate(&self) -> Result<(), CodecError> {
        let mut seen: HashSet<&str> = HashSet::new();
        // Calls of the latest assistant turn not yet answered, in call order.
        let mut pending: Vec<&ToolCall> = Vec::new();
        for (i, turn) in self.turns.iter().enumerate() {
            if !matches!(turn, Turn::ToolResult { .. }) {
                if let Some(call) = pending.first() {
                    return Err(CodecError(format!(
                        "turns[{i}] comes before the result of tool call '{}'",
                        call.id
                    )));
                }
            }
            match turn {
                Turn::User { .. } => {}
                Turn::Assistant { tool_calls, .. } => {
                    for (j, call) in tool_calls.iter().enumerate() {
                        let path = format!("turns[{i}].tool_calls[{j}]");
                        if call.id.is_empty() || call.name.is_empty() {
                            return Err(CodecError(format!("{path} has an empty id or name")));
                        }
                        if !seen.insert(&call.id) {
                            return Err(CodecError(format!("{path}.id '{}' is used twice", call.id)));
                        }
                        if !call.arguments.is_object() {
                            return Err(CodecError(format!("{path}.arguments is not a JSON object")));
                        }
                    }
                    pending = tool_calls.iter().collect();
                }
                Turn::ToolResult { call_id, name, .. } => {
                    let at = pending
                        .iter()
                        .position(|c| &c.id == call_id)
                        .ok_or_else(|| {
                            format!(
                                "turns[{i}] answers '{call_id}', which is not an unanswered call \
                             of the assistant turn before it"
                            )
                        })?;
                    if &pending[at].name != name {
                        return Err(CodecError(format!(
                            "turns[{i}].name '{name}' differs from the call's name '{}'",
                            pending[at].name
                        )));
                    }
                    pending.remove(at);
                }
            }
        }
        Ok(())
    }

    /// How many tool calls the history holds.
    pub fn tool_call_count(&self) -> usize {
        self.turns
            .iter()
            .map(|t| match t {
                Turn::Assistant { tool_calls, .. } => tool_calls.len(),
                _ => 0,
            })
            .sum()
    }
}

// ---------------------------------------------------------------------------------------
// OpenAI Chat Completions

/// Marks an error result in an OpenAI tool message, which has no error field. The model
/// reads it as part of the result, which is what the flag is for.
pub const OPENAI_TOOL_ERROR_PREFIX: &str = "[tool error] ";

/// `messages` for Chat Completions: the system prompt first, then one message per turn.
/// An error result's content is [`OPENAI_TOOL_ERROR_PREFIX`] + content; a successful
/// result whose content happens to start with that prefix is sent as a one-part text
/// array instead, so that it cannot be read back as an error.
pub fn openai_messages(c: &Conversation) -> Vec<Value> {
    let mut out = Vec::with_capacity(c.turns.len() + 1);
    if let Some(system) = &c.system {
        out.push(json!({"role": "system", "content": system}));
    }
    for turn in &c.turns {
        out.push(match turn {
            Turn::User { text } => json!({"role": "user", "content": text}),
            Turn::Assistant { text, tool_calls } => openai_assistant(text, tool_calls),
            Turn::ToolResult {
                call_id,
                content,
                is_error,
                ..
            } => json!({
                "role": "tool",
                "tool_call_id": call_id,
                "content": openai_tool_content(content, *is_error),
            }),
        });
    }
    out
}

fn openai_assistant(text: &str, tool_calls: &[ToolCall]) -> Value {
    // OpenAI needs `content` unless tool calls are present; then null stands for "none".
    if tool_calls.is_empty() {
        return json!({"role": "assistant", "content": text});
    }
    let calls: Vec<Value> = tool_calls
        .iter()
        .map(|c| {
            json!({
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments.to_string()},
            })
        })
        .collect();
    let content = if text.is_empty() {
        Value::Null
    } else {
        json!(text)
    };
    json!({"role": "assistant", "content": content, "tool_calls": calls})
}

fn openai_tool_content(content: &str, is_error: bool) -> Value {
    if is_error {
        json!(format!("{OPENAI_TOOL_ERROR_PREFIX}{content}"))
    } else if content.starts_with(OPENAI_TOOL_ERROR_PREFIX) {
        json!([{"type": "text", "text": content}])
    } else {
        json!(content)
    }
}

/// `tools` for Chat Completions.
pub fn openai_tools(tools: &[ToolSpec]) -> Value {
    tools
        .iter()
        .map(|t| {
            json!({
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            })
        })
        .collect()
}

/// Reads Chat Completions `messages` back. Leading `system`/`developer` messages form
/// the system prompt (joined by a blank line); one after the first turn is an error,
/// since the canonical form has a single system prompt.
pub fn from_openai_messages(messages: &[Value]) -> Result<Conversation, CodecError> {
    let mut conv = Conversation::default();
    // Tool messages name only the call id; the name comes from the call.
    let mut names: HashMap<String, String> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        let path = format!("messages[{i}]");
        let role = str_field(m, "role", &path)?;
        let content = m.get("content");
        match role {
            "system" | "developer" if conv.turns.is_empty() => {
                let text = openai_text(content, &format!("{path}.content"))?;
                conv.system = Some(match conv.system.take() {
                    Some(before) => format!("{before}\n\n{text}"),
                    None => text,
                });
            }
            "system" | "developer" => {
                return Err(CodecError(format!(
                    "{path} is a {role} message after the first turn; only leading ones count"
                )))
            }
            "user" => conv.turns.push(Turn::User {
                text: openai_text(content, &format!("{path}.content"))?,
            }),
            "assistant" => {
                let tool_calls = openai_tool_calls(m, &path)?;
                for call in &tool_calls {
                    names.insert(call.id.clone(), call.name.clone());
                }
                conv.turns.push(Turn::Assistant {
                    text: openai_text(content, &format!("{path}.content"))?,
                    tool_calls,
                });
            }
            "tool" => {
                let call_id = str_field(m, "tool_call_id", &path)?;
                let name = names.get(call_id).ok_or_else(|| {
                    format!(
                        "{path}.tool_call_id '{call_id}' matches no earlier assistant tool call"
                    )
                })?;
                let (content, is_error) = match content {
                    Some(Value::String(s)) => match s.strip_prefix(OPENAI_TOOL_ERROR_PREFIX) {
                        Some(rest) => (rest.to_string(), true),
                        None => (s.clone(), false),
                    },
                    other => (openai_text(other, &format!("{path}.content"))?, false),
                };
                conv.turns.push(Turn::ToolResult {
                    call_id: call_id.to_string(),
                    name: name.clone(),
                    content,
                    is_error,
                });
            }
            other => return Err(CodecError(format!("{path}.role '{other}' is not supported"))),
        }
    }
    Ok(conv)
}

/// The tool calls of an answer's `choices[0].message`. A malformed call is an error: a
/// dropped call would be an action the model asked for and nobody saw.
pub fn openai_answer_tool_calls(message: &Value) -> Result<Vec<ToolCall>, CodecError> {
    openai_tool_calls(message, "message")
}

fn openai_tool_calls(message: &Value, path: &str) -> Result<Vec<ToolCall>, CodecError> {
    let calls = match message.get("tool_calls") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(calls)) => calls,
        Some(_) => return Err(CodecError(format!("{path}.tool_calls is not an array"))),
    };
    calls
        .iter()
        .enumerate()
        .map(|(j, call)| {
            let path = format!("{path}.tool_calls[{j}]");
            if let Some(kind) = call.get("type").and_then(Value::as_str) {
                if kind != "function" {
                    return Err(CodecError(format!("{path}.type '{kind}' is not supported")));
                }
            }
            let id = str_field(call, "id", &path)?;
            let function = call
                .get("function")
                .ok_or_else(|| CodecError(format!("{path}.function is missing")))?;
            let fpath = format!("{path}.function");
            let name = str_field(function, "name", &fpath)?;
            let apath = format!("{fpath}.arguments");
            let arguments = match function.get("arguments") {
                // Some compatible servers send "" for a call without arguments.
                Some(Value::String(s)) if s.trim().is_empty() => json!({}),
                Some(Value::String(s)) => serde_json::from_str(s)
                    .map_err(|e| CodecError(format!("{apath} is not valid JSON: {e}")))?,
                // Some compatible servers send the object itself rather than a string.
                Some(v @ Value::Object(_)) => v.clone(),
                _ => return Err(CodecError(format!("{apath} is missing or not a string"))),
            };
            Ok(ToolCall {
                id: id.to_string(),
                name: name.to_string(),
                arguments: object(arguments, &apath)?,
            })
        })
        .collect()
}

/// OpenAI content: a string, null (none), or an array of text parts read as one text.
fn openai_text(content: Option<&Value>, path: &str) -> Result<String, CodecError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(k, p)| text_part(p, &format!("{path}[{k}]")))
            .collect(),
        Some(_) => Err(CodecError(format!("{path} is neither a string nor an array of parts"))),
    }
}

// ---------------------------------------------------------------------------------------
// Anthropic Messages

/// `system` and `messages` for the Messages API. Roles must alternate there, so a run
/// of same-role turns becomes one message: tool results (user role) and any user text
/// after them share a user message, tool results first as Anthropic requires.
pub fn anthropic_request_parts(c: &Conversation) -> (Option<String>, Vec<Value>) {
    let mut messages = Vec::with_capacity(c.turns.len());
    for turn in &c.turns {
        let (role, blocks) = match turn {
            Turn::User { text } => ("user", vec![json!({"type": "text", "text": text})]),
            Turn::Assistant { text, tool_calls } => {
                // Anthropic rejects empty text blocks; a calls-only turn has none.
                let text = (!text.is_empty()).then(|| json!({"type": "text", "text": text}));
                let uses = tool_calls.iter().map(|c| {
                    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments})
                });
                ("assistant", text.into_iter().chain(uses).collect())
            }
            Turn::ToolResult {
                call_id,
                content,
                is_error,
                ..
            } => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": content,
                    "is_error": is_error,
                })],
            ),
        };
        push_merged(&mut messages, role, "content", blocks);
    }
    (c.system.clone(), messages)
}

/// `tools` for the Messages API.
pub fn anthropic_tools(tools: &[ToolSpec]) -> Value {
    tools
        .iter()
        .map(
            |t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}),
        )
        .collect()
}

/// Reads a Messages API history back. Each user text block and each tool result is a
/// turn of its own; in an assistant message a text block after the first block starts
/// a new assistant turn, and tool uses belong to the turn before them.
pub fn from_anthropic(system: Option<&str>, messages: &[Value]) -> Result<Conversation, CodecError> {
    let mut conv = Conversation {
        system: system.map(str::to_string),
        turns: Vec::new(),
    };
    let mut names: HashMap<String, String> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        let path = format!("messages[{i}]");
        let role = str_field(m, "role", &path)?;
        let blocks = match m.get("content") {
            Some(Value::String(s)) => vec![json!({"type": "text", "text": s})],
            Some(Value::Array(blocks)) => blocks.clone(),
            _ => return Err(CodecError(format!("{path}.content is neither a string nor an array"))),
        };
        match role {
            "user" => {
                for (j, b) in blocks.iter().enumerate() {
                    let bpath = format!("{path}.content[{j}]");
                    conv.turns.push(match block_type(b, &bpath)? {
                        "text" => Turn::User {
                            text: str_field(b, "text", &bpath)?.to_string(),
                        },
                        "tool_result" => anthropic_result(b, &bpath, &names)?,
                        other => return Err(unsupported_block(&bpath, other)),
                    });
                }
            }
            "assistant" => {
                let mut turn = AssistantTurns::default();
                for (j, b) in blocks.iter().enumerate() {
                    let bpath = format!("{path}.content[{j}]");
                    match block_type(b, &bpath)? {
                        "text" => turn.text(str_field(b, "text", &bpath)?),
                        "tool_use" => {
                            let call = anthropic_call(b, &bpath)?;
                            names.insert(call.id.clone(), call.name.clone());
                            turn.call(call);
                        }
                        // Reasoning is the provider's own and cannot be replayed elsewhere.
                        "thinking" | "redacted_thinking" => {}
                        other => return Err(unsupported_block(&bpath, other)),
                    }
                }
                turn.finish(&mut conv.turns);
            }
            other => return Err(CodecError(format!("{path}.role '{other}' is not supported"))),
        }
    }
    Ok(conv)
}

/// The `tool_use` blocks of an answer's `content`; other blocks are ignored.
pub fn anthropic_answer_tool_calls(content: &Value) -> Result<Vec<ToolCall>, CodecError> {
    let blocks = content
        .as_array()
        .ok_or_else(|| CodecError::from("content is not an array".to_string()))?;
    blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        .map(|(j, b)| anthropic_call(b, &format!("content[{j}]")))
        .collect()
}

fn anthropic_call(block: &Value, path: &str) -> Result<ToolCall, CodecError> {
    let input = block.get("input").cloned().unwrap_or(Value::Null);
    Ok(ToolCall {
        id: str_field(block, "id", path)?.to_string(),
        name: str_field(block, "name", path)?.to_string(),
        arguments: object(input, &format!("{path}.input"))?,
    })
}

fn anthropic_result(
    block: &Value,
    path: &str,
    names: &HashMap<String, String>,
) -> Result<Turn, CodecError> {
    let call_id = str_field(block, "tool_use_id", path)?;
    let name = names.get(call_id).ok_or_else(|| {
        format!("{path}.tool_use_id '{call_id}' matches no earlier tool_use block")
    })?;
    let cpath = format!("{path}.content");
    let content = match block.get("content") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(k, p)| text_part(p, &format!("{cpath}[{k}]")))
            .collect::<Result<String, CodecError>>()?,
        Some(_) => return Err(CodecError(format!("{cpath} is neither a string nor an array"))),
    };
    let is_error = match block.get("is_error") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(CodecError(format!("{path}.is_error is not a boolean"))),
    };
    Ok(Turn::ToolResult {
        call_id: call_id.to_string(),
        name: name.clone(),
        content,
        is_error,
    })
}

fn block_type<'a>(block: &'a Value, path: &str) -> Result<&'a str, CodecError> {
    str_field(block, "type", path)
}

fn unsupported_block(path: &str, kind: &str) -> CodecError {
    CodecError(format!(
        "{path} has type '{kind}'; only text, tool_use and tool_result are supported"
    ))
}

// ---------------------------------------------------------------------------------------
// Gemini generateContent

/// `systemInstruction` and `contents` for generateContent. Roles are `user` and `model`;
/// function responses travel in `user` contents (accepted by v1beta), and a run of
/// same-role turns becomes one content, so parallel results share one content as the
/// Gemini docs show. Call ids are not sent: Gemini pairs a response with its call by name.
pub fn gemini_request_parts(c: &Conversation) -> (Option<Value>, Vec<Value>) {
    let system = c.system.as_ref().map(|s| json!({"parts": [{"text": s}]}));
    let mut contents = Vec::with_capacity(c.turns.len());
    for turn in &c.turns {
        let (role, parts) = match turn {
            Turn::User { text } => ("user", vec![json!({"text": text})]),
            Turn::Assistant { text, tool_calls } => {
                let text = (!text.is_empty()).then(|| json!({"text": text}));
                let calls = tool_calls
                    .iter()
                    .map(|c| json!({"functionCall": {"name": c.name, "args": c.arguments}}));
                ("model", text.into_iter().chain(calls).collect())
            }
            Turn::ToolResult {
                name,
                content,
                is_error,
                ..
            } => {
                // Gemini reads an `error` key as a failed call and anything else as output.
                let key = if *is_error { "error" } else { "content" };
                let response = json!({ key: content });
                (
                    "user",
                    vec![json!({"functionResponse": {"name": name, "response": response}})],
                )
            }
        };
        push_merged(&mut contents, role, "parts", parts);
    }
    (system, contents)
}

/// `tools` for generateContent.
pub fn gemini_tools(tools: &[ToolSpec]) -> Value {
    let declarations: Vec<Value> = tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "parameters": t.parameters}))
        .collect();
    json!([{ "functionDeclarations": declarations }])
}

/// Reads a generateContent history back. Calls get ids `call_{k}`, k counting calls
/// from the start of the conversation; a function response answers the earliest
/// unanswered call of its name. Text parts split turns as in [`from_anthropic`];
/// `thought` parts are dropped; a content without a role is a user content.
pub fn from_gemini(system: Option<&Value>, contents: &[Value]) -> Result<Conversation, CodecError> {
    let system = system
        .map(|s| gemini_system(s, "systemInstruction"))
        .transpose()?;
    let mut conv = Conversation {
        system,
        turns: Vec::new(),
    };
    // (id, name) of every call not yet answered, oldest first.
    let mut pending: Vec<(String, String)> = Vec::new();
    let mut next_id = 0usize;
    for (i, content) in contents.iter().enumerate() {
        let path = format!("contents[{i}]");
        let parts = gemini_parts(content, &path)?;
        match content
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("user")
        {
            // `function` is the role older docs gave to function responses.
            "user" | "function" => {
                for (j, p) in parts.iter().enumerate() {
                    let ppath = format!("{path}.parts[{j}]");
                    if let Some(text) = p.get("text") {
                        let text = text
                            .as_str()
                            .ok_or_else(|| CodecError(format!("{ppath}.text is not a string")))?;
                        conv.turns.push(Turn::User {
                            text: text.to_string(),
                        });
                    } else if let Some(r) = p.get("functionResponse") {
                        conv.turns.push(gemini_result(
                            r,
                            &format!("{ppath}.functionResponse"),
                            &mut pending,
                        )?);
                    } else {
                        return Err(unsupported_part(&ppath));
                    }
                }
            }
            "model" => {
                let mut turn = AssistantTurns::default();
                for (j, p) in parts.iter().enumerate() {
                    let ppath = format!("{path}.parts[{j}]");
                    match gemini_model_part(p, &ppath, next_id)? {
                        ModelPart::Thought => {}
                        ModelPart::Text(text) => turn.text(text),
                        ModelPart::Call(call) => {
                            next_id += 1;
                            pending.push((call.id.clone(), call.name.clone()));
                            turn.call(call);
                        }
                    }
                }
                turn.finish(&mut conv.turns);
            }
            other => return Err(CodecError(format!("{path}.role '{other}' is not supported"))),
        }
    }
    Ok(conv)
}

/// The function calls of an answer's `candidates[0].content.parts`, with ids `call_0`,
/// `call_1`, ... in answer order. Those ids are unique only within the answer: to append
/// the calls to a history use [`gemini_answer_tool_calls_after`].
pub fn gemini_answer_tool_calls(parts: &Value) -> Result<Vec<ToolCall>, CodecError> {
    gemini_calls(parts, 0, &HashSet::new())
}

/// As [`gemini_answer_tool_calls`], numbering on from the calls already in `conv` so the
/// ids stay unique in the history (Anthropic rejects a history with a repeated tool_use
/// id). For a history of Gemini calls these are the ids [`from_gemini`] would give.
pub fn gemini_answer_tool_calls_after(
    conv: &Conversation,
    parts: &Value,
) -> Result<Vec<ToolCall>, CodecError> {
    let used: HashSet<String> = conv
        .turns
        .iter()
        .flat_map(|t| match t {
            Turn::Assistant { tool_calls, .. } => tool_calls.iter().map(|c| c.id.clone()).collect(),
            _ => Vec::new(),
        })
        .collect();
    gemini_calls(parts, conv.tool_call_count(), &used)
}

fn gemini_calls(
    parts: &Value,
    mut next_id: usize,
    used: &HashSet<String>,
) -> Result<Vec<ToolCall>, CodecError> {
    let parts = parts
        .as_array()
        .ok_or_else(|| CodecError::from("parts is not an array".to_string()))?;
    let mut calls = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        if p.get("functionCall").is_none() {
            continue;
        }
        // Skip ids another provider's call already holds in the history.
        while used.contains(&format!("call_{next_id}")) {
            next_id += 1;
        }
        if let ModelPart::Call(call) = gemini_model_part(p, &format!("parts[{j}]"), next_id)? {
            next_id += 1;
            calls.push(call);
        }
    }
    Ok(calls)
}

enum ModelPart<'a> {
    Thought,
    Text(&'a str),
    Call(ToolCall),
}

fn gemini_model_part<'a>(p: &'a Value, path: &str, id: usize) -> Result<ModelPart<'a>, CodecError> {
    if p.get("thought").and_then(Value::as_bool) == Some(true) {
        return Ok(ModelPart::Thought);
    }
    if let Some(text) = p.get("text") {
        let text = text
            .as_str()
            .ok_or_else(|| CodecError(format!("{path}.text is not a string")))?;
        return Ok(ModelPart::Text(text));
    }
    let Some(call) = p.get("functionCall") else {
        return Err(unsupported_part(path));
    };
    let cpath = format!("{path}.functionCall");
    // Gemini omits `args` for a function without parameters.
    let args = call.get("args").cloned().unwrap_or_else(|| json!({}));
    Ok(ModelPart::Call(ToolCall {
        id: format!("call_{id}"),
        name: str_field(call, "name", &cpath)?.to_string(),
        arguments: object(args, &format!("{cpath}.args"))?,
    }))
}

fn gemini_result(
    r: &Value,
    path: &str,
    pending: &mut Vec<(String, String)>,
) -> Result<Turn, CodecError> {
    let name = str_field(r, "name", path)?;
    let at = pending.iter().position(|(_, n)| n == name).ok_or_else(|| {
        format!("{path}.name '{name}' answers no earlier unanswered functionCall")
    })?;
    let (call_id, _) = pending.remove(at);
    let response = match r.get("response") {
        Some(Value::Object(o)) => o,
        _ => return Err(CodecError(format!("{path}.response is not a JSON object"))),
    };
    let (value, is_error) = match (response.get("error"), response.get("content")) {
        (Some(e), _) => (e.clone(), true),
        (None, Some(c)) => (c.clone(), false),
        // `output` is the key the Gemini docs suggest; otherwise the whole object is output.
        (None, None) => match response.get("output") {
            Some(o) => (o.clone(), false),
            None => (Value::Object(response.clone()), false),
        },
    };
    let content = match value {
        Value::String(s) => s,
        other => other.to_string(),
    };
    Ok(Turn::ToolResult {
        call_id,
        name: name.to_string(),
        content,
        is_error,
    })
}

fn gemini_parts<'a>(content: &'a Value, path: &str) -> Result<&'a [Value], CodecError> {
    match content.get("parts") {
        Some(Value::Array(parts)) => Ok(parts),
        // A content may omit `parts` when it has none.
        None => Ok(&[]),
        Some(_) => Err(CodecError(format!("{path}.parts is not an array"))),
    }
}

fn gemini_system(system: &Value, path: &str) -> Result<String, CodecError> {
    if let Some(s) = system.as_str() {
        return Ok(s.to_string());
    }
    let texts = gemini_parts(system, path)?
        .iter()
        .enumerate()
        .map(|(j, p)| match p.get("text").and_then(Value::as_str) {
            Some(t) => Ok(t),
            None => Err(CodecError(format!("{path}.parts[{j}] is not a text part"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(texts.join("\n\n"))
}

fn unsupported_part(path: &str) -> CodecError {
    CodecError(format!(
        "{path} is not a text, functionCall or functionResponse part; only those are supported"
    ))
}

// ---------------------------------------------------------------------------------------
// Shared

/// Splits the blocks of one assistant message into turns: a text after the first block
/// starts a new turn, calls join the current turn. This is the inverse of merging
/// consecutive assistant turns into one message, up to [`Conversation::normalize`].
#[derive(Default)]
struct AssistantTurns {
    current: Option<(String, Vec<ToolCall>)>,
    done: Vec<Turn>,
}

impl AssistantTurns {
    fn text(&mut self, text: &str) {
        self.flush();
        self.current = Some((text.to_string(), Vec::new()));
    }

    fn call(&mut self, call: ToolCall) {
        self.current
            .get_or_insert_with(|| (String::new(), Vec::new()))
            .1
            .push(call);
    }

    fn flush(&mut self) {
        if let Some((text, tool_calls)) = self.current.take() {
            self.done.push(Turn::Assistant { text, tool_calls });
        }
    }

    /// An empty message is still a turn, so an empty assistant turn survives.
    fn finish(mut self, turns: &mut Vec<Turn>) {
        self.flush();
        if self.done.is_empty() {
            self.done.push(Turn::Assistant {
                text: String::new(),
                tool_calls: Vec::new(),
            });
        }
        turns.append(&mut self.done);
    }
}

/// Appends `items` to the last message if it has the same role, else starts a message.
fn push_merged(out: &mut Vec<Value>, role: &str, key: &str, items: Vec<Value>) {
    if let Some(last) = out.last_mut() {
        if last.get("role").and_then(Value::as_str) == Some(role) {
            if let Some(existing) = last.get_mut(key).and_then(Value::as_array_mut) {
                existing.extend(items);
                return;
            }
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), json!(role));
    message.insert(key.into(), Value::Array(items));
    out.push(Value::Object(message));
}

fn str_field<'a>(v: &'a Value, key: &str, path: &str) -> Result<&'a str, CodecError> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| CodecError(format!("{path}.{key} is missing or not a string")))
}

fn object(v: Value, path: &str) -> Result<Value, CodecError> {
    if v.is_object() {
        Ok(v)
    } else {
        Err(CodecError(format!("{path} is not a JSON object")))
    }
}

/// A `{"type":"text","text":...}` part (OpenAI content parts, Anthropic result blocks).
fn text_part(p: &Value, path: &str) -> Result<String, CodecError> {
    match p.get("type").and_then(Value::as_str) {
        Some("text") => Ok(str_field(p, "text", path)?.to_string()),
        Some(other) => Err(CodecError(format!("{path} has type '{other}'; only text is supported"))),
        None => Err(CodecError(format!("{path}.type is missing or not a string"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: json!({}),
        }
    }

    fn assistant(text: &str, calls: Vec<ToolCall>) -> Turn {
        Turn::Assistant {
            text: text.into(),
            tool_calls: calls,
        }
    }

    fn conv(turns: Vec<Turn>) -> Conversation {
        Conversation {
            system: None,
            turns,
        }
    }

    #[test]
    fn normalize_folds_only_what_a_shared_message_loses() {
        let empty = assistant("", vec![]);
        let c = conv(vec![
            empty.clone(),
            empty.clone(),
            assistant("a", vec![call("1", "f")]),
            assistant("", vec![call("2", "g")]),
            empty.clone(),
            assistant("b", vec![]),
            Turn::User { text: "u".into() },
            Turn::User { text: "v".into() },
        ]);
        let n = c.normalize();
        assert_eq!(
            n.turns,
            vec![
                assistant("a", vec![call("1", "f"), call("2", "g")]),
                assistant("b", vec![]),
                Turn::User { text: "u".into() },
                Turn::User { text: "v".into() },
            ]
        );
        assert_eq!(n.normalize(), n);
        // An empty assistant turn on its own is kept.
        assert_eq!(conv(vec![empty.clone()]).normalize().turns, vec![empty]);
    }

    #[test]
    fn openai_error_prefix_cannot_be_forged_by_a_successful_result() {
        let c = conv(vec![
            assistant("", vec![call("1", "f"), call("2", "f")]),
            Turn::ToolResult {
                call_id: "1".into(),
                name: "f".into(),
                content: "[tool error] looks like one".into(),
                is_error: false,
            },
            Turn::ToolResult {
                call_id: "2".into(),
                name: "f".into(),
                content: "[tool error] nested".into(),
                is_error: true,
            },
        ]);
        let m = openai_messages(&c);
        assert!(m[1]["content"].is_array());
        assert_eq!(m[2]["content"], json!("[tool error] [tool error] nested"));
        assert_eq!(from_openai_messages(&m), Ok(c));
    }

    #[test]
    fn validate_names_the_broken_rule() {
        let ok = conv(vec![
            assistant("", vec![call("1", "f")]),
            Turn::ToolResult {
                call_id: "1".into(),
                name: "f".into(),
                content: String::new(),
                is_error: false,
            },
        ]);
        assert_eq!(ok.validate(), Ok(()));
        // Calls still running at the end are fine; a turn before their results is not.
        let pending = conv(vec![assistant("", vec![call("1", "f")])]);
        assert_eq!(pending.validate(), Ok(()));
        let mut skipped = pending.clone();
        skipped.turns.push(Turn::User { text: "x".into() });
        assert!(skipped.validate().unwrap_err().0.contains("turns[1]"));
        let mut renamed = ok.clone();
        if let Turn::ToolResult { name, .. } = &mut renamed.turns[1] {
            *name = "g".into();
        }
        assert!(renamed.validate().unwrap_err().0.contains("differs"));
        let twice = conv(vec![assistant("", vec![call("1", "f"), call("1", "f")])]);
        assert!(twice.validate().unwrap_err().0.contains("used twice"));
    }
}
