//! The Anthropic Messages rendering of the canonical conversation history and its parser (see
//! [`crate::core::conversation`] for what survives a round trip).

use crate::core::conversation::{
    object, push_merged, str_field, text_part, AssistantTurns, CodecError, Conversation, Part,
    Source, ToolCall, ToolSpec, Turn,
};
use serde_json::{json, Value};
use std::collections::HashMap;

/// `system` and `messages` for the Messages API. Roles must alternate there, so a run
/// of same-role turns becomes one message: tool results (user role) and any user text
/// after them share a user message, tool results first as Anthropic requires.
pub fn anthropic_request_parts(c: &Conversation) -> (Option<Value>, Vec<Value>) {
    let mut messages = Vec::with_capacity(c.turns.len());
    for turn in &c.turns {
        let (role, blocks) = match turn {
            Turn::User { parts } => ("user", parts.iter().filter_map(anthropic_block).collect()),
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
                parts,
                ..
            } => {
                // Several text parts are one text block each (fidelity.md §2).
                let content = if parts.len() > 1 {
                    parts
                        .iter()
                        .map(|p| json!({"type": "text", "text": p}))
                        .collect()
                } else {
                    json!(content)
                };
                (
                    "user",
                    vec![json!({
                        "type": "tool_result",
                        "tool_use_id": call_id,
                        "content": content,
                        "is_error": is_error,
                    })],
                )
            }
        };
        push_merged(&mut messages, role, "content", blocks);
    }
    // Several system messages are one text block each, in order (Anthropic's
    // `system` takes blocks); one is the plain string.
    let system = match c.system_pieces() {
        Some(pieces) => Some(Value::Array(
            pieces
                .iter()
                .map(|p| json!({"type": "text", "text": p}))
                .collect(),
        )),
        None => c.system.clone().map(Value::String),
    };
    (system, messages)
}

/// One content block: a text block each text part (never joined), an `image` or a
/// `document` with a `url` or `base64` source. OpenAI's image `detail` has no place here.
fn anthropic_block(p: &Part) -> Option<Value> {
    let source = |s: &Source| match s {
        Source::Url { url } => json!({"type": "url", "url": url}),
        Source::Base64 { media_type, data } => {
            json!({"type": "base64", "media_type": media_type, "data": data})
        }
    };
    Some(match p {
        Part::Text { text } => json!({"type": "text", "text": text}),
        Part::Image { source: s, .. } => json!({"type": "image", "source": source(s)}),
        Part::Document {
            source: s,
            filename,
        } => {
            let mut block = json!({"type": "document", "source": source(s)});
            if let Some(f) = filename {
                block["title"] = json!(f);
            }
            block
        }
        // Never sent: `wire::carry` skips the route or names the field dropped.
        Part::Omitted { .. } => return None,
    })
}

/// A `source` of an `image` or `document` block.
fn anthropic_source(block: &Value, path: &str) -> Result<Source, CodecError> {
    let spath = format!("{path}.source");
    let source = block
        .get("source")
        .ok_or_else(|| CodecError(format!("{spath} is missing")))?;
    match str_field(source, "type", &spath)? {
        "url" => Ok(Source::Url {
            url: str_field(source, "url", &spath)?.to_string(),
        }),
        "base64" => Ok(Source::Base64 {
            media_type: str_field(source, "media_type", &spath)?.to_string(),
            data: str_field(source, "data", &spath)?.to_string(),
        }),
        other => Err(CodecError(format!(
            "{spath}.type '{other}' is carried only by the Anthropic wire"
        ))),
    }
}

/// `tools` for the Messages API.
pub fn anthropic_tools(tools: &[ToolSpec]) -> Value {
    tools
        .iter()
        .map(|t| {
            let mut v = json!({"name": t.name, "input_schema": t.parameters});
            t.describe(&mut v);
            v
        })
        .collect()
}

/// Reads a Messages API history back. In a user message each tool result is a turn of
/// its own and each run of other blocks (text, image, document) one user turn with
/// those parts; in an assistant message a text block after the first block starts a
/// new assistant turn, and tool uses belong to the turn before them.
pub fn from_anthropic(
    system: Option<&str>,
    messages: &[Value],
) -> Result<Conversation, CodecError> {
    let mut conv = Conversation {
        system: system.map(str::to_string),
        ..Default::default()
    };
    let mut names: HashMap<String, String> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        let path = format!("messages[{i}]");
        let role = str_field(m, "role", &path)?;
        let blocks = match m.get("content") {
            Some(Value::String(s)) => vec![json!({"type": "text", "text": s})],
            Some(Value::Array(blocks)) => blocks.clone(),
            _ => {
                return Err(CodecError(format!(
                    "{path}.content is neither a string nor an array"
                )))
            }
        };
        match role {
            "user" => {
                let mut parts: Vec<Part> = Vec::new();
                for (j, b) in blocks.iter().enumerate() {
                    let bpath = format!("{path}.content[{j}]");
                    let part = match block_type(b, &bpath)? {
                        "text" => Part::text(str_field(b, "text", &bpath)?),
                        "image" => Part::Image {
                            source: anthropic_source(b, &bpath)?,
                            detail: None,
                        },
                        "document" => Part::Document {
                            source: anthropic_source(b, &bpath)?,
                            filename: b.get("title").and_then(Value::as_str).map(str::to_string),
                        },
                        "tool_result" => {
                            if !parts.is_empty() {
                                conv.turns.push(Turn::User {
                                    parts: std::mem::take(&mut parts),
                                });
                            }
                            conv.turns.push(anthropic_result(b, &bpath, &names)?);
                            continue;
                        }
                        // A block the canonical form has no part for (`search_result`,
                        // `container_upload`, ...): named, so a route of another wire is
                        // skipped for it or, under drop_params, called without it.
                        other => Part::Omitted {
                            field: other.to_string(),
                        },
                    };
                    parts.push(part);
                }
                if !parts.is_empty() {
                    conv.turns.push(Turn::User { parts });
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
            other => {
                return Err(CodecError(format!(
                    "{path}.role '{other}' is not supported"
                )))
            }
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
    let parts = match block.get("content") {
        None => vec![String::new()],
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(parts)) if parts.is_empty() => vec![String::new()],
        // Each block its own part, never glued to the next (fidelity.md §2).
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(k, p)| text_part(p, &format!("{cpath}[{k}]")))
            .collect::<Result<Vec<String>, CodecError>>()?,
        Some(_) => {
            return Err(CodecError(format!(
                "{cpath} is neither a string nor an array"
            )))
        }
    };
    let is_error = match block.get("is_error") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(CodecError(format!("{path}.is_error is not a boolean"))),
    };
    Ok(Turn::tool_result(
        call_id.to_string(),
        name.clone(),
        parts,
        is_error,
    ))
}

fn block_type<'a>(block: &'a Value, path: &str) -> Result<&'a str, CodecError> {
    str_field(block, "type", path)
}

fn unsupported_block(path: &str, kind: &str) -> CodecError {
    CodecError(format!(
        "{path} has type '{kind}', which only the Anthropic wire carries"
    ))
}
