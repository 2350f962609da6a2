//! The Gemini generateContent rendering of the canonical conversation history and its parser (see
//! [`crate::core::conversation`] for what survives a round trip).

use crate::core::conversation::{
    object, push_merged, str_field, AssistantTurns, CodecError, Conversation, Part, Source,
    ToolCall, ToolSpec, Turn,
};
use serde_json::{json, Value};
use std::collections::HashSet;

/// `system_instruction` and `contents` for generateContent. Roles are `user` and `model`;
/// function responses travel in `user` contents (accepted by v1beta), and a run of
/// same-role turns becomes one content, so parallel results share one content as the
/// Gemini docs show. Call ids are not sent: Gemini pairs a response with its call by name.
pub fn gemini_request_parts(c: &Conversation) -> (Option<Value>, Vec<Value>) {
    // Several system messages are one part each, in order.
    let system = match c.system_pieces() {
        Some(pieces) => {
            let parts: Vec<Value> = pieces.iter().map(|p| json!({"text": p})).collect();
            Some(json!({ "parts": parts }))
        }
        None => c.system.as_ref().map(|s| json!({"parts": [{"text": s}]})),
    };
    let mut contents = Vec::with_capacity(c.turns.len());
    for turn in &c.turns {
        let (role, parts) = match turn {
            Turn::User { parts } => ("user", parts.iter().filter_map(gemini_part).collect()),
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

/// One part: text, or inline bytes (`inline_data`) for an image or a PDF. Gemini has no
/// part for an arbitrary URL: a route is never given one (`wire::carry` skips it, and
/// `gemini::chat_call` leaves out one that `drop_params` named dropped), and
/// `file_data` is what Gemini takes for an uploaded file's URI.
fn gemini_part(p: &Part) -> Option<Value> {
    let source = match p {
        Part::Text { text } => return Some(json!({ "text": text })),
        Part::Image { source, .. } | Part::Document { source, .. } => source,
        // Never sent: `wire::carry` skips the route or names the field dropped.
        Part::Omitted { .. } => return None,
    };
    Some(match source {
        Source::Base64 { media_type, data } => {
            json!({"inline_data": {"mime_type": media_type, "data": data}})
        }
        Source::Url { url } => match p {
            Part::Document { .. } => {
                json!({"file_data": {"file_uri": url, "mime_type": "application/pdf"}})
            }
            _ => json!({"file_data": {"file_uri": url}}),
        },
    })
}

/// `inline_data` (or `inlineData`) as a part, and `file_data` as one by URL: a PDF is
/// a document, anything else an image.
fn gemini_inline(p: &Value, path: &str) -> Result<Option<Part>, CodecError> {
    if let Some(file) = p.get("file_data").or_else(|| p.get("fileData")) {
        let uri = file
            .get("file_uri")
            .or_else(|| file.get("fileUri"))
            .and_then(Value::as_str)
            .ok_or_else(|| CodecError(format!("{path}.file_data.file_uri is missing")))?;
        let source = Source::Url {
            url: uri.to_string(),
        };
        let mime = file
            .get("mime_type")
            .or_else(|| file.get("mimeType"))
            .and_then(Value::as_str);
        return Ok(Some(part_of(source, mime)));
    }
    let Some(inline) = p.get("inline_data").or_else(|| p.get("inlineData")) else {
        return Ok(None);
    };
    let mime = inline
        .get("mime_type")
        .or_else(|| inline.get("mimeType"))
        .and_then(Value::as_str)
        .ok_or_else(|| CodecError(format!("{path}.inline_data.mime_type is missing")))?;
    let source = Source::Base64 {
        media_type: mime.to_string(),
        data: str_field(inline, "data", &format!("{path}.inline_data"))?.to_string(),
    };
    Ok(Some(part_of(source, Some(mime))))
}

/// A PDF is a document part, anything else an image.
fn part_of(source: Source, mime: Option<&str>) -> Part {
    if mime == Some("application/pdf") {
        Part::Document {
            source,
            filename: None,
        }
    } else {
        Part::Image {
            source,
            detail: None,
        }
    }
}

/// `tools` for generateContent. `parameters` is Gemini's OpenAPI subset, as a
/// `responseSchema` is (`super::response_schema`): JSON Schema keywords it lacks
/// (`additionalProperties`, which every strict OpenAI tool carries) are refused there
/// with a 400. A schema with references goes whole as `parametersJsonSchema`; a tool
/// without arguments declares none (an OBJECT without properties is refused too).
pub fn gemini_tools(tools: &[ToolSpec]) -> Value {
    let declarations: Vec<Value> = tools
        .iter()
        .map(|t| {
            let mut d = json!({"name": t.name});
            t.describe(&mut d);
            if !super::schema::is_bare_object(&t.parameters) {
                match super::schema::response_schema(&t.parameters) {
                    Some(subset) => d["parameters"] = subset,
                    None => d["parametersJsonSchema"] = t.parameters.clone(),
                }
            }
            d
        })
        .collect();
    json!([{ "functionDeclarations": declarations }])
}

/// Reads a generateContent history back. Calls get ids `call_{k}`, k counting calls
/// from the start of the conversation; a function response answers the earliest
/// unanswered call of its name. Text parts split turns as in [`from_anthropic`];
/// `thought` parts are dropped; a content without a role is a user content.
pub fn from_gemini(system: Option<&Value>, contents: &[Value]) -> Result<Conversation, CodecError> {
    let system = system
        .map(|s| gemini_system(s, "system_instruction"))
        .transpose()?;
    let mut conv = Conversation {
        system,
        ..Default::default()
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
                // A run of text and inline parts is one user turn; a function response
                // is a turn of its own.
                let mut user: Vec<Part> = Vec::new();
                for (j, p) in parts.iter().enumerate() {
                    let ppath = format!("{path}.parts[{j}]");
                    if let Some(text) = p.get("text") {
                        let text = text
                            .as_str()
                            .ok_or_else(|| CodecError(format!("{ppath}.text is not a string")))?;
                        user.push(Part::text(text));
                    } else if let Some(part) = gemini_inline(p, &ppath)? {
                        user.push(part);
                    } else if let Some(r) = p.get("functionResponse") {
                        if !user.is_empty() {
                            conv.turns.push(Turn::User {
                                parts: std::mem::take(&mut user),
                            });
                        }
                        conv.turns.push(gemini_result(
                            r,
                            &format!("{ppath}.functionResponse"),
                            &mut pending,
                        )?);
                    } else {
                        return Err(unsupported_part(&ppath));
                    }
                }
                if !user.is_empty() {
                    conv.turns.push(Turn::User { parts: user });
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
            other => {
                return Err(CodecError(format!(
                    "{path}.role '{other}' is not supported"
                )))
            }
        }
    }
    Ok(conv)
}

/// The function calls of an answer's `candidates[0].content.parts`, with ids `call_0`,
/// `call_1`, ... in answer order. Those ids are unique only within the answer: to append
/// the calls to a history use [`gemini_answer_tool_calls_after`].
pub fn gemini_answer_tool_calls(parts: &Value) -> Result<Vec<ToolCall>, CodecError> {
    let parts = parts
        .as_array()
        .ok_or_else(|| CodecError::from("parts is not an array".to_string()))?;
    let mut calls = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        if p.get("functionCall").is_none() {
            continue;
        }
        if let ModelPart::Call(call) = gemini_model_part(p, &format!("parts[{j}]"), calls.len())? {
            calls.push(call);
        }
    }
    Ok(calls)
}

/// As [`gemini_answer_tool_calls`], numbering on from the calls already in `conv` so the
/// ids stay unique in the history (Anthropic rejects a history with a repeated tool_use
/// id). For a history of Gemini calls these are the ids [`from_gemini`] would give.
pub fn gemini_answer_tool_calls_after(
    conv: &Conversation,
    parts: &Value,
) -> Result<Vec<ToolCall>, CodecError> {
    let mut calls = gemini_answer_tool_calls(parts)?;
    AnswerCallIds::of(conv).number(&mut calls);
    Ok(calls)
}

/// The ids an answer's calls take in the conversation it answers: Gemini gives calls
/// none, and numbering each answer's own from `call_0` would repeat an earlier turn's
/// id. Numbered on from the calls the conversation holds, passing over any id one of
/// them already has (another provider's `call_1`).
pub struct AnswerCallIds {
    start: usize,
    used: HashSet<String>,
}

impl AnswerCallIds {
    pub fn of(conv: &Conversation) -> AnswerCallIds {
        let used = conv
            .turns
            .iter()
            .flat_map(|t| match t {
                Turn::Assistant { tool_calls, .. } => {
                    tool_calls.iter().map(|c| c.id.clone()).collect()
                }
                _ => Vec::new(),
            })
            .collect();
        AnswerCallIds {
            start: conv.tool_call_count(),
            used,
        }
    }

    /// The id of the answer's call `k` (from 0).
    pub fn id(&self, k: usize) -> String {
        (self.start..)
            .map(|n| format!("call_{n}"))
            .filter(|id| !self.used.contains(id))
            .nth(k)
            .unwrap_or_default()
    }

    /// `calls` (one answer's, in order) given their ids.
    pub fn number(&self, calls: &mut [ToolCall]) {
        for (k, c) in calls.iter_mut().enumerate() {
            c.id = self.id(k);
        }
    }
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
        parts: Vec::new(),
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
        "{path} is not a text, inline_data, functionCall or functionResponse part; only those are supported"
    ))
}
