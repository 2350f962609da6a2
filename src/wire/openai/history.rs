//! The OpenAI Chat Completions rendering of the canonical conversation history and its parser (see
//! [`crate::core::conversation`] for what survives a round trip).

use crate::core::conversation::{
    object, str_field, text_part, CodecError, Conversation, Part, Source, ToolCall, ToolSpec, Turn,
};
use serde_json::{json, Value};
use std::collections::HashMap;

/// Marks an error result in an OpenAI tool message, which has no error field. The model
/// reads it as part of the result, which is what the flag is for.
pub const OPENAI_TOOL_ERROR_PREFIX: &str = "[tool error] ";

/// `messages` for Chat Completions: the system prompt first (or each system and
/// developer message where it stood, when the conversation kept that), then one message
/// per turn.
/// An error result's content is [`OPENAI_TOOL_ERROR_PREFIX`] + content (several parts
/// stay parts, the mark on the first: the model reads the mark either way, though only
/// the string form reads back as an error); a successful result whose content happens
/// to start with that prefix is sent as a one-part text array instead, so that it
/// cannot be read back as an error.
pub fn openai_messages(c: &Conversation) -> Vec<Value> {
    openai_messages_of(c, false)
}

/// [`openai_messages`] for a conversation read from a wire where consecutive assistant
/// turns are one message (Anthropic's blocks, Gemini's parts, Responses' output items):
/// each such run goes as one assistant message, its texts as parts in order and its
/// calls together (fidelity.md §2: several text parts "kept as parts, in order"), not
/// as several messages. A conversation read from OpenAI messages keeps its messages.
pub fn openai_messages_merged(c: &Conversation) -> Vec<Value> {
    openai_messages_of(c, true)
}

fn openai_messages_of(c: &Conversation, merge: bool) -> Vec<Value> {
    let mut out = Vec::with_capacity(c.turns.len() + 1);
    // Each system and developer message where the client put it, with its role and
    // parts (fidelity.md §2: kept in place); else the one system prompt first.
    let in_place = c.system_in_place().unwrap_or_default();
    let system_before = |out: &mut Vec<Value>, turn: usize| {
        for m in in_place.iter().filter(|m| m.before_turn == turn) {
            let role = if m.developer { "developer" } else { "system" };
            let content = match m.parts.as_slice() {
                [one] => json!(one),
                parts => Value::Array(
                    parts
                        .iter()
                        .map(|p| json!({"type": "text", "text": p}))
                        .collect(),
                ),
            };
            out.push(json!({"role": role, "content": content}));
        }
    };
    if in_place.is_empty() {
        if let Some(system) = &c.system {
            out.push(json!({"role": "system", "content": system}));
        }
    }
    // Tool results follow the assistant message that made the calls, nothing between
    // (OpenAI refuses it): a message placed among them waits until they are done.
    let mut waiting: Vec<usize> = Vec::new();
    for (i, turn) in c.turns.iter().enumerate() {
        if matches!(turn, Turn::ToolResult { .. }) {
            waiting.push(i);
        } else {
            for w in waiting.drain(..) {
                system_before(&mut out, w);
            }
            system_before(&mut out, i);
        }
        if let Turn::Assistant { text, tool_calls } = turn {
            let message = openai_assistant(text, tool_calls);
            match out.last_mut() {
                Some(last) if merge && last["role"] == "assistant" => {
                    merge_assistant(last, message)
                }
                _ => out.push(message),
            }
            continue;
        }
        out.push(match turn {
            Turn::User { parts } => json!({"role": "user", "content": openai_user_content(parts)}),
            Turn::Assistant { .. } => unreachable!("rendered above"),
            Turn::ToolResult {
                call_id,
                content,
                is_error,
                parts,
                ..
            } => json!({
                "role": "tool",
                "tool_call_id": call_id,
                "content": openai_tool_content(content, parts, *is_error),
            }),
        });
    }
    for w in waiting {
        system_before(&mut out, w);
    }
    system_before(&mut out, c.turns.len());
    out
}

/// A user message's content: a plain string when it is one text part, else the parts
/// in order (several text parts stay several: spec/fidelity.md §2).
fn openai_user_content(parts: &[Part]) -> Value {
    if let [Part::Text { text }] = parts {
        return json!(text);
    }
    parts
        .iter()
        .filter_map(|p| match p {
            Part::Text { text } => Some(json!({"type": "text", "text": text})),
            Part::Image { source, detail } => {
                let mut image = json!({"url": source.to_url()});
                if let Some(d) = detail {
                    image["detail"] = json!(d);
                }
                Some(json!({"type": "image_url", "image_url": image}))
            }
            Part::Document { source, filename } => {
                let mut file = json!({"file_data": source.to_url()});
                if let Some(f) = filename {
                    file["filename"] = json!(f);
                }
                Some(json!({"type": "file", "file": file}))
            }
            // Never sent: `wire::carry` skips the route or names the field dropped.
            Part::Omitted { .. } => None,
        })
        .collect()
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

/// Folds the assistant message `next` into `last`: the text of both as parts, in order
/// (one part stays a string, none is null beside calls), and the calls of both.
fn merge_assistant(last: &mut Value, next: Value) {
    let texts = |content: &Value| -> Vec<Value> {
        match content {
            Value::String(s) if s.is_empty() => Vec::new(),
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(parts) => parts.clone(),
            _ => Vec::new(),
        }
    };
    let mut parts = texts(&last["content"]);
    parts.extend(texts(&next["content"]));
    let mut calls: Vec<Value> = last
        .get("tool_calls")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    calls.extend(
        next.get("tool_calls")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
    );
    let content = match parts.as_slice() {
        [] if !calls.is_empty() => Value::Null,
        [] => json!(""),
        [one] => one["text"].clone(),
        _ => Value::Array(parts),
    };
    last["content"] = content;
    if !calls.is_empty() {
        last["tool_calls"] = Value::Array(calls);
    }
}

fn openai_tool_content(content: &str, parts: &[String], is_error: bool) -> Value {
    if is_error && parts.len() > 1 {
        // Each part its own, the mark on the first (fidelity.md §2: parts kept apart).
        parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let text = if i == 0 {
                    format!("{OPENAI_TOOL_ERROR_PREFIX}{p}")
                } else {
                    p.clone()
                };
                json!({"type": "text", "text": text})
            })
            .collect()
    } else if is_error {
        json!(format!("{OPENAI_TOOL_ERROR_PREFIX}{content}"))
    } else if parts.len() > 1 {
        // Several parts, each its own (an array is never read back as an error).
        parts
            .iter()
            .map(|p| json!({"type": "text", "text": p}))
            .collect()
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
            let mut function = json!({"name": t.name, "parameters": t.parameters});
            t.describe(&mut function);
            if t.strict {
                function["strict"] = json!(true);
            }
            json!({"type": "function", "function": function})
        })
        .collect()
}

/// Reads Chat Completions `messages` back. Every `system` and `developer` message, in
/// order, forms the system prompt (joined by a blank line): that is where Anthropic
/// and Gemini put a later one (spec/fidelity.md §2); each is also kept where it stood,
/// with its role (`Conversation::system_at`), for the OpenAI wire.
pub fn from_openai_messages(messages: &[Value]) -> Result<Conversation, CodecError> {
    let mut conv = Conversation::default();
    // Tool messages name only the call id; the name comes from the call.
    let mut names: HashMap<String, String> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        // The paths name a field in an error only: built when one is reported, not for
        // every message (two `format!`s a message were a tenth of reading a long one).
        let path = || format!("messages[{i}]");
        let content_path = || format!("messages[{i}].content");
        let role = match m.get("role").and_then(Value::as_str) {
            Some(role) => role,
            None => str_field(m, "role", &path())?,
        };
        let content = m.get("content");
        match role {
            // Several text parts are several pieces: a wire with room for blocks gets
            // one block each (fidelity.md §2), as it does for several messages.
            "system" | "developer" => {
                let parts = match content {
                    Some(Value::Array(parts)) if parts.len() > 1 => parts
                        .iter()
                        .enumerate()
                        .map(|(k, p)| text_part(p, &format!("{}[{k}]", content_path())))
                        .collect::<Result<Vec<_>, _>>()?,
                    _ => vec![openai_text_at(content, content_path)?],
                };
                conv.add_system_at(role == "developer", parts);
            }
            "user" => conv.turns.push(Turn::User {
                parts: match content {
                    Some(Value::String(s)) => vec![Part::text(s.clone())],
                    _ => openai_user_parts(content, &content_path())?,
                },
            }),
            "assistant" => {
                let tool_calls = match m.get("tool_calls") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(_) => openai_tool_calls(m, &path())?,
                };
                for call in &tool_calls {
                    names.insert(call.id.clone(), call.name.clone());
                }
                match content {
                    // Several text parts stay several (fidelity.md §2): a turn each, which
                    // a wire of blocks or parts merges back into one message, a block
                    // each; the calls go with the last.
                    Some(Value::Array(parts)) if parts.len() > 1 => {
                        let mut turns = crate::core::conversation::AssistantTurns::default();
                        for (k, p) in parts.iter().enumerate() {
                            turns.text(&text_part(p, &format!("{}[{k}]", content_path()))?);
                        }
                        for call in tool_calls {
                            turns.call(call);
                        }
                        turns.finish(&mut conv.turns);
                    }
                    _ => conv.turns.push(Turn::Assistant {
                        text: openai_text_at(content, content_path)?,
                        tool_calls,
                    }),
                }
            }
            "tool" => {
                let path = path();
                let call_id = str_field(m, "tool_call_id", &path)?;
                let name = names.get(call_id).ok_or_else(|| {
                    format!(
                        "{path}.tool_call_id '{call_id}' matches no earlier assistant tool call"
                    )
                })?;
                let (parts, is_error) = match content {
                    Some(Value::String(s)) => match s.strip_prefix(OPENAI_TOOL_ERROR_PREFIX) {
                        Some(rest) => (vec![rest.to_string()], true),
                        None => (vec![s.clone()], false),
                    },
                    // Several text parts stay several (fidelity.md §2).
                    Some(Value::Array(ps)) if ps.len() > 1 => (
                        ps.iter()
                            .enumerate()
                            .map(|(k, p)| text_part(p, &format!("{path}.content[{k}]")))
                            .collect::<Result<Vec<_>, _>>()?,
                        false,
                    ),
                    other => (vec![openai_text(other, &format!("{path}.content"))?], false),
                };
                conv.turns.push(Turn::tool_result(
                    call_id.to_string(),
                    name.clone(),
                    parts,
                    is_error,
                ));
            }
            other => {
                return Err(CodecError(format!(
                    "{}.role '{other}' is not supported",
                    path()
                )))
            }
        }
    }
    conv.forget_plain_system_at();
    Ok(conv)
}

/// `openai_text`, its path built only when the content is not plain text.
fn openai_text_at(
    content: Option<&Value>,
    path: impl FnOnce() -> String,
) -> Result<String, CodecError> {
    match content {
        Some(Value::String(s)) => Ok(s.clone()),
        None | Some(Value::Null) => Ok(String::new()),
        other => openai_text(other, &path()),
    }
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

/// A user message's content as parts: text, `image_url` (a data URL is inline bytes),
/// and `file` with inline `file_data`. Audio, files by id and part types this router
/// does not know have no canonical part: each is kept as `Part::Omitted`, named.
fn openai_user_parts(content: Option<&Value>, path: &str) -> Result<Vec<Part>, CodecError> {
    let parts = match content {
        None | Some(Value::Null) => return Ok(vec![Part::text("")]),
        Some(Value::String(s)) => return Ok(vec![Part::text(s.clone())]),
        Some(Value::Array(parts)) => parts,
        Some(_) => {
            return Err(CodecError(format!(
                "{path} is neither a string nor an array of parts"
            )))
        }
    };
    parts
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let ppath = format!("{path}[{k}]");
            match p.get("type").and_then(Value::as_str) {
                Some("text") => Ok(Part::text(str_field(p, "text", &ppath)?)),
                Some("image_url") => {
                    let ipath = format!("{ppath}.image_url");
                    let image = p
                        .get("image_url")
                        .ok_or_else(|| CodecError(format!("{ipath} is missing")))?;
                    // The older SDK shape: `image_url` as the URL string itself.
                    let (url, detail) = match image {
                        Value::String(u) => (u.as_str(), None),
                        _ => (
                            str_field(image, "url", &ipath)?,
                            image.get("detail").and_then(Value::as_str),
                        ),
                    };
                    Ok(Part::Image {
                        source: Source::from_url(url, &format!("{ipath}.url"))?,
                        detail: detail.map(str::to_string),
                    })
                }
                Some("file") => {
                    let fpath = format!("{ppath}.file");
                    let file = p
                        .get("file")
                        .ok_or_else(|| CodecError(format!("{fpath} is missing")))?;
                    let Some(data) = file.get("file_data").and_then(Value::as_str) else {
                        // A file by id exists only at OpenAI.
                        return Ok(Part::Omitted {
                            field: "file_id".into(),
                        });
                    };
                    // A data URL, or (as some clients send) the bare base64 of a PDF.
                    let source = if data.starts_with("data:") {
                        Source::from_url(data, &format!("{fpath}.file_data"))?
                    } else {
                        Source::Base64 {
                            media_type: "application/pdf".into(),
                            data: data.to_string(),
                        }
                    };
                    Ok(Part::Document {
                        source,
                        filename: file
                            .get("filename")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                    })
                }
                Some(other) => Ok(Part::Omitted {
                    field: other.to_string(),
                }),
                None => Err(CodecError(format!(
                    "{ppath}.type is missing or not a string"
                ))),
            }
        })
        .collect()
}

/// OpenAI content: a string, null (none), or an array of text parts read as one text,
/// a blank line between parts (as Anthropic's system blocks are joined), so that two
/// parts never run their words together.
fn openai_text(content: Option<&Value>, path: &str) -> Result<String, CodecError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => Ok(parts
            .iter()
            .enumerate()
            .map(|(k, p)| text_part(p, &format!("{path}[{k}]")))
            .collect::<Result<Vec<String>, CodecError>>()?
            .join("\n\n")),
        Some(_) => Err(CodecError(format!(
            "{path} is neither a string nor an array of parts"
        ))),
    }
}
