//! What a caller asks the router for, independent of any wire.

use crate::core::conversation::{Conversation, ToolSpec, Turn};
use crate::core::vocab::CallPath;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Sampling controls a caller may set; `None` / empty leaves the provider's default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sampling {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub stop: Vec<String>,
    pub seed: Option<i64>,
}

/// Which tool the model must (or must not) call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    None,
    /// Some tool, the model picks which.
    Required,
    /// This tool, by name.
    Tool(String),
}

/// A chat request in canonical form: the whole conversation (system prompt, user and
/// assistant turns, tool calls and results) and the tools offered. Each wire renders it
/// in its own format, so a session can move between providers and be re-sent whole.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub conversation: Conversation,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: Option<ToolChoice>,
    /// The answer's length cap; `None` leaves the provider's default (Anthropic, which
    /// requires one, gets [`ANTHROPIC_DEFAULT_MAX_TOKENS`]).
    pub max_tokens: Option<u32>,
    pub sampling: Sampling,
    /// A JSON Schema the answer must satisfy (`response_format: json_schema`).
    pub json_schema: Option<serde_json::Value>,
    /// The end user, for the provider's abuse monitoring.
    pub user: Option<String>,
    /// Caller tags passed through where the wire has a place for them.
    pub metadata: BTreeMap<String, String>,
    /// The prompt size to plan with, when the caller knows better than a character count.
    pub token_estimate: Option<u64>,
}

/// Anthropic requires `max_tokens`; this is sent when the caller set none.
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u32 = 4096;

impl ChatRequest {
    /// One short user message.
    pub fn user(text: impl Into<String>, max_tokens: u32) -> Self {
        ChatRequest {
            conversation: Conversation {
                system: None,
                turns: vec![Turn::User { text: text.into() }],
            },
            tools: Vec::new(),
            tool_choice: None,
            max_tokens: Some(max_tokens),
            sampling: Sampling::default(),
            json_schema: None,
            user: None,
            metadata: BTreeMap::new(),
            token_estimate: None,
        }
    }

    /// What this request needs from a route.
    pub fn needs(&self, streaming: bool) -> crate::core::request::Needs {
        use crate::core::request::estimate_tokens;
        let c = &self.conversation;
        let turns: u64 = c
            .turns
            .iter()
            .map(|t| match t {
                Turn::User { text } => estimate_tokens(text),
                Turn::Assistant { text, tool_calls } => {
                    estimate_tokens(text)
                        + tool_calls
                            .iter()
                            .map(|tc| estimate_tokens(&tc.arguments.to_string()))
                            .sum::<u64>()
                }
                Turn::ToolResult { content, .. } => estimate_tokens(content),
            })
            .sum();
        let text = turns + c.system.as_deref().map(estimate_tokens).unwrap_or(0);
        crate::core::request::Needs {
            prompt_tokens: self.token_estimate.unwrap_or(text),
            max_output_tokens: self.max_tokens.unwrap_or(0) as u64,
            tools: !self.tools.is_empty(),
            json_schema: self.json_schema.is_some(),
            streaming,
            ..Default::default()
        }
    }
}

/// A batch of texts to embed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedRequest {
    pub inputs: Vec<String>,
}

impl EmbedRequest {
    pub fn needs(&self) -> crate::core::request::Needs {
        crate::core::request::Needs {
            prompt_tokens: self
                .inputs
                .iter()
                .map(|t| crate::core::request::estimate_tokens(t))
                .sum(),
            ..Default::default()
        }
    }
}

/// Candidates from a recall step, to be put in order of relevance to `query`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RerankRequest {
    pub query: String,
    pub documents: Vec<String>,
    pub top_n: usize,
}

impl RerankRequest {
    pub fn needs(&self) -> crate::core::request::Needs {
        let texts = self.documents.iter().chain([&self.query]);
        crate::core::request::Needs {
            prompt_tokens: texts
                .map(|t| crate::core::request::estimate_tokens(t))
                .sum(),
            ..Default::default()
        }
    }
}

/// One request of any path: what [`crate::router::Router::call`] takes.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Chat(ChatRequest),
    /// A chat answered as a stream: deltas reach `CallOptions::on_event` as they arrive.
    Stream(ChatRequest),
    Embed(EmbedRequest),
    Rerank(RerankRequest),
}

impl Request {
    pub fn path(&self) -> CallPath {
        match self {
            Request::Chat(_) => CallPath::Chat,
            Request::Stream(_) => CallPath::Stream,
            Request::Embed(_) => CallPath::Embed,
            Request::Rerank(_) => CallPath::Rerank,
        }
    }

    /// What this request needs from a route.
    pub fn needs(&self) -> crate::core::request::Needs {
        match self {
            Request::Chat(c) => c.needs(false),
            Request::Stream(c) => c.needs(true),
            Request::Embed(e) => e.needs(),
            Request::Rerank(r) => r.needs(),
        }
    }
}

/// Token counts of one call, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's cache, where the wire reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
}

/// A rough token estimate for text: about four characters a token.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// What one request needs from a route.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// Estimated prompt tokens.
    pub prompt_tokens: u64,
    pub max_output_tokens: u64,
    pub tools: bool,
    pub json_schema: bool,
    pub images: bool,
    pub streaming: bool,
    /// A route already answered `context_overflow` with this window: only a larger one
    /// may serve.
    pub min_window: u64,
}
