//! The Responses API's conversation items (`input`, `output`) read into the canonical
//! conversation and rendered from it: the history codec of the `openai_responses` wire.
//!
//! What an item list becomes (spec/fidelity.md §2, with OpenAI's Responses shapes):
//! - `instructions`, then every `system` and `developer` message in order, form the
//!   system prompt (joined by a blank line), as on the chat wire;
//! - a `user` message is a user turn of parts: `input_text`, `input_image` (an https or
//!   `data:` URL, with its `detail`), `input_file` (`file_data` inline, or `file_url`);
//! - an `assistant` message is an assistant turn (its `output_text` parts joined; a
//!   `refusal` part is its text), and the `function_call` items after it join it;
//! - a `function_call_output` is a tool result, named after its call;
//! - a `reasoning` item cannot be carried by another wire: it is left out and named
//!   ([`Read::reasoning`]).
//!
//! What no canonical part holds (a file or image by id, an `item_reference`, built-in
//! tool calls, audio) is refused with the path and the reason, so that only a route of
//! the Responses wire itself, which gets the client's items as they are, serves it.

use crate::core::conversation::{CodecError, Conversation, Part, Source, ToolCall, ToolSpec, Turn};
use crate::wire::openai::OPENAI_TOOL_ERROR_PREFIX;
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// A conversation read from Responses items.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Read {
    pub conversation: Conversation,
    /// `reasoning` items were left out (another wire cannot carry them).
    pub reasoning: bool,
}

/// `input` as items: a string is one user message.
pub fn input_items(input: &Value) -> Result<Vec<Value>, CodecError> {
    match input {
        Value::String(s) => Ok(vec![json!({"role": "user", "content": s})]),
        Value::Array(items) => Ok(items.clone()),
        _ => Err(CodecError(
            "input must be a string or an array of items".into(),
        )),
    }
}

/// Reads `instructions` and `items` (the whole conversation, oldest first).
pub fn from_items(instructions: Option<&str>, items: &[Value]) -> Result<Read, CodecError> {
    let mut read = Read::default();
    let conv = &mut read.conversation;
    if let Some(text) = instructions.filter(|t| !t.is_empty()) {
        conv.add_system_at(false, vec![text.to_string()]);
    }
    // Tool results name only the call id; the name comes from the call.
    let mut names: HashMap<String, String> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        let path = || format!("input[{i}]");
        if !item.is_object() {
            return Err(CodecError(format!("{} is not an object", path())));
        }
        let kind = match item.get("type") {
            None | Some(Value::Null) => "message",
            Some(Value::String(t)) => t.as_str(),
            Some(_) => return Err(CodecError(format!("{}.type is not a string", path()))),
        };
        match kind {
            "message" => message(item, &path, conv)?,
            "function_call" => {
                let call = function_call(item, &path)?;
                names.insert(call.id.clone(), call.name.clone());
                // Calls join the assistant turn they follow (one message on the chat
                // wire); after anything else they start one.
                match conv.turns.last_mut() {
                    Some(Turn::Assistant { tool_calls, .. }) => tool_calls.push(call),
                    _ => conv.turns.push(Turn::Assistant {
                        text: String::new(),
                        tool_calls: vec![call],
                    }),
                }
            }
            "function_call_output" => {
                let call_id = text_field(item, "call_id", &path)?;
                let name = names.get(call_id).ok_or_else(|| {
                    CodecError(format!(
                        "{}.call_id '{call_id}' matches no earlier function_call",
                        path()
                    ))
                })?;
                let parts = match item.get("output") {
                    // Several text parts stay several (fidelity.md §2): each read alone.
                    Some(Value::Array(ps)) if ps.len() > 1 => ps
                        .iter()
                        .enumerate()
                        .map(|(j, p)| part_text(p, j, &path, "output").map(str::to_string))
                        .collect::<Result<Vec<_>, _>>()?,
                    Some(o @ (Value::String(_) | Value::Array(_))) => {
                        vec![plain_text(Some(o), &path, "output")?]
                    }
                    _ => {
                        return Err(CodecError(format!(
                            "{}.output must be a string or text parts",
                            path()
                        )))
                    }
                };
                conv.turns.push(Turn::tool_result(
                    call_id.to_string(),
                    name.clone(),
                    parts,
                    false,
                ));
            }
            "reasoning" => read.reasoning = true,
            other => {
                return Err(CodecError(format!(
                    "{} is a `{other}` item, which only the Responses wire carries",
                    path()
                )))
            }
        }
    }
    read.conversation.forget_plain_system_at();
    Ok(read)
}

fn text_field<'a>(
    v: &'a Value,
    key: &str,
    path: &dyn Fn() -> String,
) -> Result<&'a str, CodecError> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| CodecError(format!("{}.{key} is missing or not a string", path())))
}

fn message(
    item: &Value,
    path: &dyn Fn() -> String,
    conv: &mut Conversation,
) -> Result<(), CodecError> {
    let role = text_field(item, "role", path)?;
    let content = item.get("content");
    match role {
        "system" | "developer" => {
            let text = plain_text(content, path, "content")?;
            conv.add_system_at(role == "developer", vec![text]);
        }
        "user" => {
            let parts = user_parts(content, path)?;
            conv.turns.push(Turn::User { parts });
        }
        "assistant" => {
            let text = plain_text(content, path, "content")?;
            conv.turns.push(Turn::Assistant {
                text,
                tool_calls: Vec::new(),
            });
        }
        other => {
            return Err(CodecError(format!(
                "{}.role '{other}' is not supported",
                path()
            )))
        }
    }
    Ok(())
}

/// The text of a content (`field`: a message's `content`, a result's `output`) that
/// holds only text parts (`input_text`, `output_text`, a `refusal`), joined in order.
fn plain_text(
    content: Option<&Value>,
    path: &dyn Fn() -> String,
    field: &str,
) -> Result<String, CodecError> {
    match content {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, p) in parts.iter().enumerate() {
                text.push_str(part_text(p, j, path, field)?);
            }
            Ok(text)
        }
        None | Some(Value::Null) => Ok(String::new()),
        Some(_) => Err(CodecError(format!(
            "{}.{field} must be a string or parts",
            path()
        ))),
    }
}

/// The text of part `j` of `field`: an `input_text`, `output_text` or `refusal` part.
fn part_text<'v>(
    p: &'v Value,
    j: usize,
    path: &dyn Fn() -> String,
    field: &str,
) -> Result<&'v str, CodecError> {
    let key = match p.get("type").and_then(Value::as_str) {
        Some("input_text" | "output_text" | "text") => "text",
        Some("refusal") => "refusal",
        other => {
            return Err(CodecError(format!(
                "{}.{field}[{j}] is a `{}` part where only text can leave the Responses wire",
                path(),
                other.unwrap_or("?")
            )))
        }
    };
    Ok(p.get(key).and_then(Value::as_str).unwrap_or(""))
}

fn user_parts(content: Option<&Value>, path: &dyn Fn() -> String) -> Result<Vec<Part>, CodecError> {
    let parts = match content {
        Some(Value::String(s)) => return Ok(vec![Part::text(s.clone())]),
        Some(Value::Array(parts)) => parts,
        _ => {
            return Err(CodecError(format!(
                "{}.content must be a string or parts",
                path()
            )))
        }
    };
    let mut out = Vec::with_capacity(parts.len());
    for (j, p) in parts.iter().enumerate() {
        let at = || format!("{}.content[{j}]", path());
        match p.get("type").and_then(Value::as_str) {
            Some("input_text" | "text") => {
                out.push(Part::text(text_field(p, "text", &at)?.to_string()))
            }
            Some("input_image") => {
                let Some(url) = p.get("image_url").and_then(Value::as_str) else {
                    return Err(CodecError(format!(
                        "{} names an image by file id, which only the Responses wire carries",
                        at()
                    )));
                };
                let detail = p
                    .get("detail")
                    .and_then(Value::as_str)
                    // `auto` is every wire's default: asking it is asking nothing.
                    .filter(|d| *d != "auto")
                    .map(str::to_string);
                out.push(Part::Image {
                    source: Source::from_url(url, &at())?,
                    detail,
                });
            }
            Some("input_file") => {
                let filename = p
                    .get("filename")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let source = match (
                    p.get("file_data").and_then(Value::as_str),
                    p.get("file_url").and_then(Value::as_str),
                ) {
                    (Some(data), _) if data.starts_with("data:") => Source::from_url(data, &at())?,
                    // Bare base64 is a PDF: the only file kind every wire reads.
                    (Some(data), _) => Source::Base64 {
                        media_type: "application/pdf".into(),
                        data: data.to_string(),
                    },
                    (None, Some(url)) => Source::Url {
                        url: url.to_string(),
                    },
                    (None, None) => {
                        return Err(CodecError(format!(
                            "{} names a file by id, which only the Responses wire carries",
                            at()
                        )))
                    }
                };
                out.push(Part::Document { source, filename });
            }
            other => {
                return Err(CodecError(format!(
                    "{} is a `{}` part, which only the Responses wire carries",
                    at(),
                    other.unwrap_or("?")
                )))
            }
        }
    }
    Ok(out)
}

/// One `function_call` item as a tool call (its `call_id` is the id).
pub fn function_call(item: &Value, path: &dyn Fn() -> String) -> Result<ToolCall, CodecError> {
    let call_id = text_field(item, "call_id", path)?;
    let name = text_field(item, "name", path)?;
    let arguments = match item.get("arguments") {
        Some(Value::String(s)) if s.trim().is_empty() => Value::Object(Map::new()),
        Some(Value::String(s)) => serde_json::from_str::<Value>(s)
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| CodecError(format!("{}.arguments is not a JSON object", path())))?,
        _ => {
            return Err(CodecError(format!(
                "{}.arguments is missing or not a string",
                path()
            )))
        }
    };
    Ok(ToolCall {
        id: call_id.to_string(),
        name: name.to_string(),
        arguments,
    })
}

/// The canonical conversation as Responses `instructions` and `input` items, for a
/// route of the Responses wire that did not get the client's own body.
pub fn to_items(c: &Conversation) -> (Option<String>, Vec<Value>) {
    let mut items = Vec::with_capacity(c.turns.len());
    for turn in &c.turns {
        match turn {
            Turn::User { parts } => {
                let content = match parts.as_slice() {
                    [Part::Text { text }] => json!(text),
                    _ => Value::Array(parts.iter().filter_map(input_part).collect()),
                };
                items.push(json!({"role": "user", "content": content}));
            }
            Turn::Assistant { text, tool_calls } => {
                if !text.is_empty() || tool_calls.is_empty() {
                    items.push(json!({"role": "assistant", "content": text}));
                }
                for call in tool_calls {
                    items.push(json!({
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": call.arguments.to_string(),
                    }));
                }
            }
            Turn::ToolResult {
                call_id,
                content,
                is_error,
                parts,
                ..
            } => {
                // No error flag on this wire either: marked in-band, as on the chat wire.
                // Several parts go as `input_text` parts, one each (fidelity.md §2).
                let output = if *is_error {
                    json!(format!("{OPENAI_TOOL_ERROR_PREFIX}{content}"))
                } else if parts.len() > 1 {
                    parts
                        .iter()
                        .map(|p| json!({"type": "input_text", "text": p}))
                        .collect()
                } else {
                    json!(content)
                };
                items.push(json!({
                    "type": "function_call_output",
                    "call_id": call_id,
                    "output": output,
                }));
            }
        }
    }
    (c.system.clone(), items)
}

fn input_part(p: &Part) -> Option<Value> {
    Some(match p {
        Part::Text { text } => json!({"type": "input_text", "text": text}),
        Part::Image { source, detail } => json!({
            "type": "input_image",
            "image_url": source.to_url(),
            "detail": detail.as_deref().unwrap_or("auto"),
        }),
        Part::Document { source, filename } => {
            let mut v = match source {
                Source::Url { url } => json!({"type": "input_file", "file_url": url}),
                Source::Base64 { .. } => {
                    json!({"type": "input_file", "file_data": source.to_url()})
                }
            };
            if let Some(f) = filename {
                v["filename"] = json!(f);
            } else if matches!(source, Source::Base64 { .. }) {
                // OpenAI asks a name of inline file data.
                v["filename"] = json!("document.pdf");
            }
            v
        }
        // Never sent: `wire::carry` skips the route or names the field dropped.
        Part::Omitted { .. } => return None,
    })
}

/// Function tools in the Responses shape: flat, `{type, name, description,
/// parameters, strict}`.
pub fn tools(tools: &[ToolSpec]) -> Value {
    tools
        .iter()
        .map(|t| {
            let mut v = json!({
                "type": "function",
                "name": t.name,
                "parameters": t.parameters,
            });
            t.describe(&mut v);
            if t.strict {
                v["strict"] = json!(true);
            }
            v
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(system: Option<&str>, turns: Vec<Turn>) -> Conversation {
        Conversation {
            system: system.map(str::to_string),
            turns,
            ..Default::default()
        }
    }

    /// Guards the placement of a developer message the client put between an
    /// assistant message and the function calls that join it: rendered in place, it
    /// came between the calls and their results, which OpenAI refuses. It waits until
    /// the results are done.
    #[test]
    fn a_developer_message_among_calls_and_results_comes_after_the_results_on_chat() {
        let items = [
            json!({"type": "message", "role": "user", "content": "Weather?"}),
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]}),
            json!({"type": "message", "role": "developer", "content": "Use Celsius."}),
            json!({"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"}),
            json!({"type": "function_call_output", "call_id": "c1", "output": "20"}),
        ];
        let read = from_items(None, &items).unwrap();
        let roles: Vec<String> = crate::wire::openai::history::openai_messages(&read.conversation)
            .iter()
            .map(|m| m["role"].as_str().unwrap_or("").to_string())
            .collect();
        assert_eq!(roles, ["user", "assistant", "tool", "developer"]);
    }

    #[test]
    fn a_result_of_several_parts_keeps_them_and_names_the_part_that_is_not_text() {
        let call =
            json!({"type": "function_call", "call_id": "c1", "name": "rows", "arguments": "{}"});
        let result = |output: Value| {
            [
                json!({"type": "message", "role": "user", "content": "Rows?"}),
                call.clone(),
                json!({"type": "function_call_output", "call_id": "c1", "output": output}),
            ]
        };
        let ok = result(
            json!([{"type": "input_text", "text": "r1"}, {"type": "input_text", "text": "r2"}]),
        );
        let read = from_items(None, &ok).unwrap();
        match &read.conversation.turns[2] {
            Turn::ToolResult { parts, .. } => assert_eq!(parts, &["r1", "r2"]),
            t => panic!("a result: {t:?}"),
        }
        let bad = result(
            json!([{"type": "input_text", "text": "r1"}, {"type": "input_image", "image_url": "x"}]),
        );
        let err = from_items(None, &bad).unwrap_err();
        assert!(
            err.0.contains("output[1] is a `input_image` part"),
            "{}",
            err.0
        );
    }

    #[test]
    fn a_conversation_survives_items_both_ways() {
        let c = conv(
            Some("Be brief."),
            vec![
                Turn::User {
                    parts: vec![
                        Part::text("What is this?"),
                        Part::Image {
                            source: Source::Base64 {
                                media_type: "image/png".into(),
                                data: "iVBORw0KGgo=".into(),
                            },
                            detail: Some("high".into()),
                        },
                    ],
                },
                Turn::Assistant {
                    text: "Let me look.".into(),
                    tool_calls: vec![ToolCall {
                        id: "call_1".into(),
                        name: "zoom".into(),
                        arguments: json!({"x": 1.5}),
                    }],
                },
                Turn::ToolResult {
                    call_id: "call_1".into(),
                    name: "zoom".into(),
                    content: "a cat".into(),
                    is_error: false,
                    parts: Vec::new(),
                },
                Turn::Assistant {
                    text: "A cat.".into(),
                    tool_calls: vec![],
                },
            ],
        );
        let (instructions, items) = to_items(&c);
        let back = from_items(instructions.as_deref(), &items).unwrap();
        assert_eq!(back.conversation, c);
        assert!(!back.reasoning);
    }

    #[test]
    fn the_shapes_clients_send_are_read() {
        // What the Agents SDK sends on its second turn, and a typed assistant message.
        let items = json!([
            {"content": "Weather in Paris?", "role": "user"},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Use tools."}]},
            {"arguments": "{\"city\": \"Paris\"}", "call_id": "call_b1", "name": "get_weather",
             "type": "function_call", "id": "fc_2e", "status": "completed"},
            {"call_id": "call_b1", "output": "Sunny", "type": "function_call_output"},
            {"id": "rs_1", "type": "reasoning", "summary": []},
            {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Sunny in ", "annotations": []},
                         {"type": "output_text", "text": "Paris.", "annotations": [], "logprobs": []}]},
            {"role": "user", "content": [{"type": "input_file", "file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"}]}
        ]);
        let r = from_items(Some("Be kind."), items.as_array().unwrap()).unwrap();
        assert!(r.reasoning);
        let c = r.conversation;
        assert_eq!(c.system.as_deref(), Some("Be kind.\n\nUse tools."));
        assert_eq!(c.turns.len(), 5);
        assert_eq!(
            c.turns[1],
            Turn::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall {
                    id: "call_b1".into(),
                    name: "get_weather".into(),
                    arguments: json!({"city": "Paris"})
                }]
            }
        );
        assert_eq!(
            c.turns[3],
            Turn::Assistant {
                text: "Sunny in Paris.".into(),
                tool_calls: vec![]
            }
        );
        assert!(
            matches!(&c.turns[4], Turn::User { parts } if matches!(&parts[0], Part::Document { filename: Some(f), .. } if f == "a.pdf"))
        );
    }

    #[test]
    fn what_no_other_wire_carries_is_refused_with_its_path() {
        let cases = [
            (
                json!([{"type": "item_reference", "id": "msg_1"}]),
                "input[0]",
            ),
            (
                json!([{"role": "user", "content": [{"type": "input_image", "file_id": "file-1", "detail": "auto"}]}]),
                "input[0].content[0]",
            ),
            (
                json!([{"type": "web_search_call", "id": "ws_1"}]),
                "web_search_call",
            ),
            (
                json!([{"type": "function_call_output", "call_id": "nope", "output": "x"}]),
                "matches no earlier",
            ),
            (json!([{"role": "wizard", "content": "x"}]), "wizard"),
            (
                json!([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}]),
                "not a JSON object",
            ),
        ];
        for (items, needle) in cases {
            let e = from_items(None, items.as_array().unwrap()).unwrap_err();
            assert!(e.0.contains(needle), "{needle}: {e}");
        }
        assert!(input_items(&json!(3)).is_err());
        assert_eq!(
            input_items(&json!("hi")).unwrap(),
            vec![json!({"role": "user", "content": "hi"})]
        );
    }
}
