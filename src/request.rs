//! What a caller asks the router for, independent of any wire.

use crate::conversation::{Conversation, ToolSpec, Turn};
use serde::{Deserialize, Serialize};

/// A chat request in canonical form: the whole conversation (system prompt, user and
/// assistant turns, tool calls and results) and the tools offered. Each wire renders it
/// in its own format, so a session can move between providers and be re-sent whole.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub conversation: Conversation,
    pub tools: Vec<ToolSpec>,
    pub max_tokens: u32,
    /// The prompt size to plan with, when the caller knows better than a character count.
    pub token_estimate: Option<u64>,
    /// A JSON Schema the answer must satisfy (`generateObject`-style requests).
    pub json_schema: Option<serde_json::Value>,
}

impl ChatRequest {
    /// One short user message.
    pub fn user(text: impl Into<String>, max_tokens: u32) -> Self {
        ChatRequest {
            conversation: Conversation {
                system: None,
                turns: vec![Turn::User { text: text.into() }],
            },
            tools: Vec::new(),
            max_tokens,
            token_estimate: None,
            json_schema: None,
        }
    }

    /// What this request needs from a route.
    pub fn needs(&self, streaming: bool) -> crate::capability::Needs {
        use crate::capability::estimate_tokens;
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
        crate::capability::Needs {
            prompt_tokens: self.token_estimate.unwrap_or(text),
            max_output_tokens: self.max_tokens as u64,
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
    pub fn needs(&self) -> crate::capability::Needs {
        crate::capability::Needs {
            prompt_tokens: self
                .inputs
                .iter()
                .map(|t| crate::capability::estimate_tokens(t))
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
    pub fn needs(&self) -> crate::capability::Needs {
        let texts = self.documents.iter().chain([&self.query]);
        crate::capability::Needs {
            prompt_tokens: texts.map(|t| crate::capability::estimate_tokens(t)).sum(),
            ..Default::default()
        }
    }
}

/// Token counts of one call, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}
