//! The canonical conversation history, rendered to and parsed from each wire's message
//! format. A session that must move to another provider re-sends this history whole
//! ("history materialisation"); server-side state such as OpenAI's `previous_response_id`
//! means nothing to any other provider, so it is never relied on.
//!
//! What survives a round trip `from_X(render_X(c))`:
//! - OpenAI: `c` exactly, but for an error result of several parts. OpenAI tool messages
//!   carry neither a name nor an error flag: the name comes back from the assistant tool
//!   call with the same id, and an error is marked in-band by [`OPENAI_TOOL_ERROR_PREFIX`]
//!   (see [`openai_messages`]); an error of several parts keeps its parts, the mark on
//!   the first, and reads back as a result whose first part holds the mark. Arguments
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
//! A user turn is a list of content parts (text, images, PDFs), kept in order on every
//! wire (spec/fidelity.md §2). Reasoning blocks (Anthropic `thinking`, Gemini `thought`
//! parts) and Gemini's optional call `id` fields are provider-specific and are dropped;
//! content the canonical form has no part for (audio, files by id) is kept as a named
//! `Part::Omitted`, so that no route is sent the conversation without it unless its
//! provider allows dropping it (`drop_params`), rather than silently lost.

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
use std::collections::HashSet;

/// One system prompt and the turns after it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// Every system and developer message, in order, as one text.
    pub system: Option<String>,
    /// The pieces `system` was joined from, when there were several (`add_system`): a
    /// wire with room for blocks gets one block each (fidelity.md §2 joins them only
    /// where the target needs one string). Empty for one piece.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system_parts: Vec<String>,
    /// Where each system or developer message stood among the turns
    /// (`add_system_at`), for a wire that keeps each in place (OpenAI chat, fidelity.md
    /// §2). Empty when there was one system message, first: `system` says it all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system_at: Vec<SystemAt>,
    pub turns: Vec<Turn>,
}

/// One system or developer message where the client put it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemAt {
    /// OpenAI's `developer` role, not `system`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub developer: bool,
    /// Its text parts, in order (one for a string).
    pub parts: Vec<String>,
    /// How many turns came before it.
    pub before_turn: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Turn {
    /// One user message: its parts in the order the client sent them.
    User { parts: Vec<Part> },
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
        /// The result's text parts when it came as several (`content` is them joined
        /// by a blank line): a wire with room for parts gets them apart, in order
        /// (fidelity.md §2), and one with a single string gets `content`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        parts: Vec<String>,
    },
}

impl ToolSpec {
    /// Puts the tool's `description` in a wire's declaration of it, where the client
    /// gave one: a tool declared without one goes without one, not with an empty text
    /// the client never wrote.
    pub fn describe(&self, declaration: &mut Value) {
        if !self.description.is_empty() {
            declaration["description"] = Value::String(self.description.clone());
        }
    }
}

impl Conversation {
    /// Whether the last assistant turn called tools: the conversation is in a tool loop,
    /// whose results follow that turn.
    pub fn in_tool_loop(&self) -> bool {
        self.turns
            .iter()
            .rev()
            .find_map(|t| match t {
                Turn::Assistant { tool_calls, .. } => Some(!tool_calls.is_empty()),
                _ => None,
            })
            .unwrap_or(false)
    }
}

impl Turn {
    /// A tool result of `parts` (one or more texts), kept apart where there are several.
    pub fn tool_result(call_id: String, name: String, parts: Vec<String>, is_error: bool) -> Turn {
        let (content, parts) = match <[String; 1]>::try_from(parts) {
            Ok([one]) => (one, Vec::new()),
            Err(parts) => (parts.join("\n\n"), parts),
        };
        Turn::ToolResult {
            call_id,
            name,
            content,
            is_error,
            parts,
        }
    }
}

/// One piece of a user message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    Text {
        text: String,
    },
    /// An image. `detail` is OpenAI's resolution hint, which only OpenAI can carry
    /// (advisory elsewhere: spec/fidelity.md §3).
    Image {
        source: Source,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// A document (a PDF), with the file name the client gave, if any.
    Document {
        source: Source,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
    },
    /// A part the canonical form cannot hold (OpenAI `input_audio`, a file by id), kept
    /// as its field name only. Only the client's own wire, which is sent the client's
    /// body, carries it: a route of another wire is skipped with `cannot carry: FIELD`,
    /// or, under `drop_params: true`, called without it and the field named
    /// (spec/fidelity.md §3). No codec renders it.
    Omitted {
        field: String,
    },
}

/// Where a part's bytes are: a URL the provider fetches, or the bytes inline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    Url { url: String },
    Base64 { media_type: String, data: String },
}

impl Source {
    /// A `data:MIME;base64,DATA` URL as inline bytes; any other URL as a URL. A data
    /// URL that is not base64 is an error: no wire takes it.
    pub fn from_url(url: &str, path: &str) -> Result<Source, CodecError> {
        let Some(rest) = url.strip_prefix("data:") else {
            return Ok(Source::Url {
                url: url.to_string(),
            });
        };
        match rest.split_once(',') {
            Some((meta, data)) if meta.ends_with(";base64") => Ok(Source::Base64 {
                media_type: meta.trim_end_matches(";base64").to_string(),
                data: data.to_string(),
            }),
            _ => Err(CodecError(format!(
                "{path} is a data URL that is not `data:MIME;base64,...`"
            ))),
        }
    }

    /// The source as one URL: a data URL for inline bytes.
    pub fn to_url(&self) -> String {
        match self {
            Source::Url { url } => url.clone(),
            Source::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
        }
    }
}

impl Part {
    pub fn text(text: impl Into<String>) -> Part {
        Part::Text { text: text.into() }
    }

    /// The part's text, when it is text.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Part::Text { text } => Some(text),
            _ => None,
        }
    }
}

impl Turn {
    /// A user turn of one text part.
    pub fn user(text: impl Into<String>) -> Turn {
        Turn::User {
            parts: vec![Part::text(text)],
        }
    }
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
    /// `strict`: a call's arguments must satisfy `parameters`. A wire without the mode
    /// is not sent it; the router checks the arguments instead (fidelity.md §3).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict: bool,
}

impl Conversation {
    /// Appends a system (or developer) message: joined to what came before with a
    /// blank line, each piece also kept for a wire that takes them apart.
    pub fn add_system(&mut self, text: String) {
        self.system = Some(match self.system.take() {
            Some(before) => {
                if self.system_parts.is_empty() {
                    self.system_parts.push(before.clone());
                }
                self.system_parts.push(text.clone());
                format!("{before}\n\n{text}")
            }
            None => text,
        });
    }

    /// Appends a system or developer message of `parts` where it stands (after the
    /// turns so far): each part joins `system` as `add_system` does, and the message is
    /// kept in place for a wire that has room for it.
    pub fn add_system_at(&mut self, developer: bool, parts: Vec<String>) {
        for p in &parts {
            self.add_system(p.clone());
        }
        self.system_at.push(SystemAt {
            developer,
            parts,
            before_turn: self.turns.len(),
        });
    }

    /// Drops the placement of a lone leading `system` message of one part: the plain
    /// `system` renders it the same.
    pub fn forget_plain_system_at(&mut self) {
        if let [one] = self.system_at.as_slice() {
            if !one.developer && one.before_turn == 0 && one.parts.len() == 1 {
                self.system_at.clear();
            }
        }
    }

    /// The system and developer messages in place, when they were recorded and still
    /// make up `system` (a caller that set `system` itself left them behind).
    pub fn system_in_place(&self) -> Option<&[SystemAt]> {
        let system = self.system.as_deref()?;
        let mut joined = String::with_capacity(system.len());
        for (i, p) in self.system_at.iter().flat_map(|m| &m.parts).enumerate() {
            if i > 0 {
                joined.push_str("\n\n");
            }
            joined.push_str(p);
        }
        let fits = self
            .system_at
            .iter()
            .all(|m| m.before_turn <= self.turns.len());
        (!self.system_at.is_empty() && fits && joined == system)
            .then_some(self.system_at.as_slice())
    }

    /// The system pieces apart, when there are several and they still make up `system`
    /// (a caller that set `system` itself left them behind): else `None`.
    pub fn system_pieces(&self) -> Option<&[String]> {
        let system = self.system.as_deref()?;
        (self.system_parts.len() > 1 && self.system_parts.join("\n\n") == system)
            .then_some(self.system_parts.as_slice())
    }

    /// The form Anthropic and Gemini preserve, where consecutive turns of one role
    /// share a message. Three changes, all idempotent: consecutive user turns become one
    /// (their parts in order, as the shared message reads back); an assistant turn with
    /// empty text right after an assistant turn is folded into it (its tool calls
    /// appended); and an assistant turn with neither text nor tool calls right before an
    /// assistant turn is dropped. Tool-result turns are never changed.
    pub fn normalize(&self) -> Conversation {
        let mut turns: Vec<Turn> = Vec::with_capacity(self.turns.len());
        for turn in &self.turns {
            if let (Some(Turn::User { parts: last }), Turn::User { parts }) =
                (turns.last_mut(), turn)
            {
                last.extend(parts.iter().cloned());
                continue;
            }
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
            system_parts: self.system_parts.clone(),
            // Turns merged here no longer count as they did: this form's wires take
            // the system prompt apart from the turns anyway.
            system_at: Vec::new(),
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
                            return Err(CodecError(format!(
                                "{path}.id '{}' is used twice",
                                call.id
                            )));
                        }
                        if !call.arguments.is_object() {
                            return Err(CodecError(format!(
                                "{path}.arguments is not a JSON object"
                            )));
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
// Shared

/// Splits the blocks of one assistant message into turns: a text after the first block
/// starts a new turn, calls join the current turn. This is the inverse of merging
/// consecutive assistant turns into one message, up to [`Conversation::normalize`].
#[derive(Default)]
pub(crate) struct AssistantTurns {
    current: Option<(String, Vec<ToolCall>)>,
    done: Vec<Turn>,
}

impl AssistantTurns {
    pub(crate) fn text(&mut self, text: &str) {
        self.flush();
        self.current = Some((text.to_string(), Vec::new()));
    }

    pub(crate) fn call(&mut self, call: ToolCall) {
        self.current
            .get_or_insert_with(|| (String::new(), Vec::new()))
            .1
            .push(call);
    }

    pub(crate) fn flush(&mut self) {
        if let Some((text, tool_calls)) = self.current.take() {
            self.done.push(Turn::Assistant { text, tool_calls });
        }
    }

    /// An empty message is still a turn, so an empty assistant turn survives.
    pub(crate) fn finish(mut self, turns: &mut Vec<Turn>) {
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
pub(crate) fn push_merged(out: &mut Vec<Value>, role: &str, key: &str, items: Vec<Value>) {
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

pub(crate) fn str_field<'a>(v: &'a Value, key: &str, path: &str) -> Result<&'a str, CodecError> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| CodecError(format!("{path}.{key} is missing or not a string")))
}

pub(crate) fn object(v: Value, path: &str) -> Result<Value, CodecError> {
    if v.is_object() {
        Ok(v)
    } else {
        Err(CodecError(format!("{path} is not a JSON object")))
    }
}

/// A `{"type":"text","text":...}` part (OpenAI content parts, Anthropic result blocks).
pub(crate) fn text_part(p: &Value, path: &str) -> Result<String, CodecError> {
    match p.get("type").and_then(Value::as_str) {
        Some("text") => Ok(str_field(p, "text", path)?.to_string()),
        Some(other) => Err(CodecError(format!(
            "{path} has type '{other}'; only text is supported"
        ))),
        None => Err(CodecError(format!(
            "{path}.type is missing or not a string"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::openai::history::{from_openai_messages, openai_messages};

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
            ..Default::default()
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
            Turn::user("u"),
            Turn::user("v"),
        ]);
        let n = c.normalize();
        assert_eq!(
            n.turns,
            vec![
                assistant("a", vec![call("1", "f"), call("2", "g")]),
                assistant("b", vec![]),
                Turn::User {
                    parts: vec![Part::text("u"), Part::text("v")]
                },
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
                parts: Vec::new(),
            },
            Turn::ToolResult {
                call_id: "2".into(),
                name: "f".into(),
                content: "[tool error] nested".into(),
                is_error: true,
                parts: Vec::new(),
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
                parts: Vec::new(),
            },
        ]);
        assert_eq!(ok.validate(), Ok(()));
        // Calls still running at the end are fine; a turn before their results is not.
        let pending = conv(vec![assistant("", vec![call("1", "f")])]);
        assert_eq!(pending.validate(), Ok(()));
        let mut skipped = pending.clone();
        skipped.turns.push(Turn::user("x"));
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
