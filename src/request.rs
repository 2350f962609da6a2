//! What a caller asks the router for, independent of any wire.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

/// A chat request in canonical form; each wire renders it in its own format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRequest {
    pub system: Option<String>,
    pub messages: Vec<Message>,
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
            system: None,
            messages: vec![Message {
                role: Role::User,
                content: text.into(),
            }],
            max_tokens,
            token_estimate: None,
            json_schema: None,
        }
    }

    /// What this request needs from a route.
    pub fn needs(&self, streaming: bool) -> crate::capability::Needs {
        let text: u64 = self
            .system
            .iter()
            .map(|s| crate::capability::estimate_tokens(s))
            .chain(
                self.messages
                    .iter()
                    .map(|m| crate::capability::estimate_tokens(&m.content)),
            )
            .sum();
        crate::capability::Needs {
            prompt_tokens: self.token_estimate.unwrap_or(text),
            max_output_tokens: self.max_tokens as u64,
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

/// Candidates from a recall step, to be put in order of relevance to `query`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RerankRequest {
    pub query: String,
    pub documents: Vec<String>,
    pub top_n: usize,
}

/// Token counts of one call, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}
