//! What a caller asks the router for, independent of any wire.

use crate::core::conversation::{Conversation, Part, ToolSpec, Turn};
use crate::core::vocab::{CallPath, Wire};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

/// The client's own request body, kept beside the parsed view so that a route whose wire
/// is the API the client spoke receives the client's JSON, not a re-serialisation of a
/// parsed copy (spec/fidelity.md §1): every field, known or unknown, with only `model`
/// replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Original {
    /// The API the body was sent on (`openai` chat completions or embeddings,
    /// `anthropic` messages).
    pub wire: Wire,
    /// The body exactly as the client sent it.
    pub bytes: bytes::Bytes,
    /// The byte span of the top-level `model` value (the JSON string, quotes included).
    pub model: Range<usize>,
    /// The byte span of the top-level `stream_options` value, when there is one.
    pub stream_options: Option<Range<usize>>,
    /// Client headers forwarded on the same wire (`anthropic-version`,
    /// `anthropic-beta`); never a credential.
    pub headers: Vec<(&'static str, String)>,
    /// Why the request cannot be translated to another wire (the canonical decode
    /// refused it: audio, a file by id, a custom tool, ...); `None` when it can. A
    /// route of another wire is then passed over with this reason.
    pub untranslatable: Option<String>,
    /// Bodies for the routes of one provider, in place of this one. A conversation the
    /// gateway re-sends (Responses `previous_response_id`) keeps a provider's own
    /// reasoning items and item ids only for that provider; this body leaves them out.
    /// Empty for a body sent as the client sent it.
    pub per_provider: Vec<(String, Arc<Original>)>,
    /// What this body left out that a `per_provider` body keeps (`reasoning_items`):
    /// named as dropped for a route of any other provider.
    pub left_out: Vec<String>,
}

impl Original {
    /// The body a route of `provider` is sent.
    pub fn for_provider(&self, provider: &str) -> &Original {
        self.per_provider
            .iter()
            .find(|(p, _)| p == provider)
            .map_or(self, |(_, o)| o)
    }

    /// What a route of `provider` is sent without (see `left_out`).
    pub fn left_out_for(&self, provider: &str) -> &[String] {
        if self.per_provider.iter().any(|(p, _)| p == provider) {
            &[]
        } else {
            &self.left_out
        }
    }
}

/// How much the model should reason before it answers: OpenAI's `reasoning_effort`,
/// or Anthropic's `thinking.budget_tokens` (spec/fidelity.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reasoning {
    Effort(Effort),
    /// A budget of thinking tokens.
    Budget(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    Low,
    Medium,
    High,
}

impl Effort {
    /// OpenAI's word; `minimal` reads as low, the least a thinking budget can be.
    pub fn parse(word: &str) -> Option<Effort> {
        match word {
            "minimal" | "low" => Some(Effort::Low),
            "medium" => Some(Effort::Medium),
            "high" => Some(Effort::High),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
        }
    }
}

impl Reasoning {
    /// The thinking budget in tokens: 1024 / 2048 / 4096 for low / medium / high.
    pub fn budget_tokens(self) -> u32 {
        match self {
            Reasoning::Budget(b) => b,
            Reasoning::Effort(Effort::Low) => 1024,
            Reasoning::Effort(Effort::Medium) => 2048,
            Reasoning::Effort(Effort::High) => 4096,
        }
    }

    /// The effort word: a budget up to 1024 is low, up to 2048 medium, above high.
    pub fn effort(self) -> Effort {
        match self {
            Reasoning::Effort(e) => e,
            Reasoning::Budget(b) if b <= 1024 => Effort::Low,
            Reasoning::Budget(b) if b <= 2048 => Effort::Medium,
            Reasoning::Budget(_) => Effort::High,
        }
    }
}

impl Unmapped {
    /// The top-level fields of an OpenAI chat body the canonical request maps itself;
    /// every other one is unmapped (the gateway's ingress, a scenario's `fields:`).
    pub const OPENAI_MAPPED: &'static [&'static str] = &[
        "model",
        "messages",
        "stream",
        "stream_options",
        "tools",
        "tool_choice",
        "response_format",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "n",
        "user",
        "metadata",
        "parallel_tool_calls",
        "reasoning_effort",
        "top_k",
    ];

    /// A top-level field of an OpenAI chat body, with its value: semantic for
    /// `logprobs: true`, `top_logprobs`, `audio` and `modalities` other than text
    /// (spec/fidelity.md §3), advisory otherwise.
    pub fn openai(name: &str, value: &serde_json::Value) -> Unmapped {
        let semantic = match name {
            "logprobs" => value.as_bool() == Some(true),
            "top_logprobs" | "audio" => true,
            "modalities" => value
                .as_array()
                .is_some_and(|m| m.iter().any(|x| x.as_str() != Some("text"))),
            _ => false,
        };
        Unmapped {
            name: name.to_string(),
            semantic,
        }
    }
}

/// A field of the client's request that the canonical form does not hold, by its
/// client-facing name (`logprobs`, `presence_penalty`, `messages[].name`, an unknown
/// field ...). A route of the client's own wire receives it in the body as it is; any
/// other route cannot carry it: a semantic one skips the route, an advisory one is
/// dropped and named (spec/fidelity.md §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmapped {
    pub name: String,
    /// Dropping it would change what the answer means.
    pub semantic: bool,
}

/// Sampling controls a caller may set; `None` / empty leaves the provider's default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sampling {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub stop: Vec<String>,
    pub seed: Option<i64>,
    /// Anthropic's and Gemini's `top_k`; OpenAI has none.
    pub top_k: Option<u32>,
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

impl ToolChoice {
    /// OpenAI's words for a choice without a name (chat and Responses alike).
    pub fn from_word(word: &str) -> Option<ToolChoice> {
        match word {
            "auto" => Some(ToolChoice::Auto),
            "none" => Some(ToolChoice::None),
            "required" => Some(ToolChoice::Required),
            _ => None,
        }
    }
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
    /// The name the client gave the cap (`max_tokens` or `max_completion_tokens`), kept
    /// on a wire that has both: one is never renamed to the other (fidelity.md §2).
    /// `None`: the dialect's own name.
    pub max_tokens_name: Option<&'static str>,
    pub sampling: Sampling,
    /// A JSON Schema the answer must satisfy (`response_format: json_schema`;
    /// `json_object` is the schema `{"type": "object"}`).
    pub json_schema: Option<serde_json::Value>,
    /// The schema's own `name` and `strict` (chat `response_format.json_schema`,
    /// Responses `text.format`): kept on every wire that has them (fidelity.md §2).
    pub schema_name: Option<String>,
    pub schema_strict: Option<bool>,
    /// How many answers (`n`); `None` is one.
    pub n: Option<u32>,
    /// `parallel_tool_calls`; `None` leaves the provider's default (parallel).
    pub parallel_tool_calls: Option<bool>,
    /// A reasoning request (`reasoning_effort`, `thinking`).
    pub reasoning: Option<Reasoning>,
    /// The client's own effort word (chat `reasoning_effort`, Responses
    /// `reasoning.effort`), sent as written where the wire takes the word (OpenAI chat,
    /// Responses: fidelity.md §2 "as sent"): `minimal`, `none`, `xhigh` and words to
    /// come are the provider's to judge. `reasoning` is what it means where thinking
    /// is a budget; a word with no budget there (`xhigh`) cannot be carried there.
    pub effort_word: Option<String>,
    /// Fields of the client's body the canonical form does not hold.
    pub unmapped: Vec<Unmapped>,
    /// The end user, for the provider's abuse monitoring.
    pub user: Option<String>,
    /// Caller tags passed through where the wire has a place for them.
    pub metadata: BTreeMap<String, String>,
    /// The prompt size to plan with, when the caller knows better than a character count.
    pub token_estimate: Option<u64>,
    /// The client's own body (the gateway), forwarded as it is to a route of its wire.
    pub original: Option<Arc<Original>>,
}

/// Anthropic requires `max_tokens`; this is sent when the caller set none.
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u32 = 4096;

impl ChatRequest {
    /// One short user message.
    pub fn user(text: impl Into<String>, max_tokens: u32) -> Self {
        ChatRequest {
            conversation: Conversation {
                turns: vec![Turn::user(text)],
                ..Default::default()
            },
            tools: Vec::new(),
            tool_choice: None,
            max_tokens: Some(max_tokens),
            max_tokens_name: None,
            sampling: Sampling::default(),
            json_schema: None,
            schema_name: None,
            schema_strict: None,
            n: None,
            parallel_tool_calls: None,
            reasoning: None,
            effort_word: None,
            unmapped: Vec::new(),
            user: None,
            metadata: BTreeMap::new(),
            token_estimate: None,
            original: None,
        }
    }

    /// The client's body when a route of `wire` is to receive it as it is (same wire).
    pub fn same_wire(&self, wire: Wire) -> Option<&Original> {
        self.original.as_deref().filter(|o| o.wire == wire)
    }

    /// Whether the request forces a tool call (`tool_choice` required or a named tool).
    pub fn forces_tool(&self) -> bool {
        matches!(
            self.tool_choice,
            Some(ToolChoice::Required | ToolChoice::Tool(_))
        )
    }

    /// Every part of every user turn, in order.
    pub fn parts(&self) -> impl Iterator<Item = &Part> {
        self.conversation.turns.iter().flat_map(|t| match t {
            Turn::User { parts } => parts.as_slice(),
            _ => &[],
        })
    }

    /// What this request needs from a route.
    pub fn needs(&self, streaming: bool) -> crate::core::request::Needs {
        use crate::core::request::estimate_tokens;
        let c = &self.conversation;
        let turns: u64 = c
            .turns
            .iter()
            .map(|t| match t {
                Turn::User { parts } => parts.iter().map(part_tokens).sum(),
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
            // `json_object` (the schema `{"type": "object"}`) asks no schema support of
            // the model: a route whose facts say `json_schema: false` can still serve it.
            json_schema: self
                .json_schema
                .as_ref()
                .is_some_and(|s| *s != serde_json::json!({"type": "object"})),
            images: self.parts().any(|p| matches!(p, Part::Image { .. })),
            documents: self.parts().any(|p| matches!(p, Part::Document { .. })),
            choices: self.n.is_some_and(|n| n > 1),
            streaming,
            ..Default::default()
        }
    }
}

/// A part's share of the prompt estimate. An image costs about what OpenAI charges
/// for one high-detail tile set (~1,000 tokens); a document is guessed at 2,000 (a
/// page or two): the bytes of either say little about its tokens.
fn part_tokens(p: &Part) -> u64 {
    match p {
        Part::Text { text } => estimate_tokens(text),
        Part::Image { .. } => 1_000,
        Part::Document { .. } => 2_000,
        Part::Omitted { .. } => 0,
    }
}

/// A batch of texts to embed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmbedRequest {
    pub inputs: Vec<String>,
    /// The vectors' length (`dimensions`; Gemini's `outputDimensionality`), when asked.
    pub dimensions: Option<u32>,
    /// The client's own body (the gateway), forwarded as it is to a route of its wire.
    pub original: Option<Arc<Original>>,
    /// Inputs the client sent as token arrays (OpenAI's `input: [1, 2]` or
    /// `[[1, 2], [3]]`): the number of tokens in each, one entry an input, and
    /// `inputs` is empty. Only the client's own wire carries them (its body travels as
    /// it is); a route of another wire is skipped (`cannot carry: input token arrays`).
    pub token_arrays: Vec<u64>,
    /// Fields of the client's body the canonical form does not hold (`user`, unknown
    /// fields): a route of the client's wire gets them in its body; any other is
    /// called without them, and they are named (spec/fidelity.md §3, §6).
    pub unmapped: Vec<Unmapped>,
}

impl EmbedRequest {
    /// The client's body when a route of `wire` is to receive it as it is (same wire).
    pub fn same_wire(&self, wire: Wire) -> Option<&Original> {
        self.original.as_deref().filter(|o| o.wire == wire)
    }

    /// How many vectors the answer holds: one an input, text or token array.
    pub fn count(&self) -> usize {
        if self.token_arrays.is_empty() {
            self.inputs.len()
        } else {
            self.token_arrays.len()
        }
    }

    pub fn needs(&self) -> crate::core::request::Needs {
        let text: u64 = self
            .inputs
            .iter()
            .map(|t| crate::core::request::estimate_tokens(t))
            .sum();
        crate::core::request::Needs {
            // A token array is its own count: no estimate.
            prompt_tokens: text + self.token_arrays.iter().sum::<u64>(),
            ..Default::default()
        }
    }
}

/// Candidates from a recall step, to be put in order of relevance to `query`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RerankRequest {
    pub query: String,
    pub documents: Vec<String>,
    pub top_n: usize,
    /// The client's own body (the gateway), forwarded as it is to a route whose rerank
    /// API is the shape the client spoke (Cohere / Jina `/rerank`).
    pub original: Option<Arc<Original>>,
}

impl RerankRequest {
    /// The client's body when a route of `wire` is to receive it as it is (same wire).
    pub fn same_wire(&self, wire: Wire) -> Option<&Original> {
        self.original.as_deref().filter(|o| o.wire == wire)
    }

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

/// Token counts of one call, as the provider reported them, in one meaning for every
/// wire: `input_tokens` is the whole prompt (OpenAI's `prompt_tokens`; Anthropic's
/// input, cache writes and cache reads together; Gemini's `promptTokenCount`), and
/// `output_tokens` the whole output, reasoning included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's cache, where the wire reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    /// Prompt tokens written to the cache (Anthropic), where the wire reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_tokens: Option<u64>,
    /// Output tokens spent reasoning, where the wire reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    /// Anthropic's `input_tokens`: the prompt less what was read from or written to
    /// the cache.
    pub fn uncached_input(&self) -> u64 {
        self.input_tokens
            .saturating_sub(self.cached_tokens.unwrap_or(0))
            .saturating_sub(self.cache_creation_tokens.unwrap_or(0))
    }
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
    /// A PDF or other document part.
    pub documents: bool,
    /// More than one answer (`n > 1`).
    pub choices: bool,
    pub streaming: bool,
    /// A route already answered `context_overflow` with this window: only a larger one
    /// may serve.
    pub min_window: u64,
    /// A route already answered `context_overflow` (its window known or not): only a
    /// route the card's `Policy::takes_overflow` accepts may serve now.
    pub overflowed: bool,
    /// A route already answered `content_policy`: only a route the card's
    /// `content_policy_routes` names (when it names any) may serve now.
    pub blocked: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `response_format: json_object` reads as the schema `{"type": "object"}`, which
    /// asks no JSON-schema support of a route; a real schema does.
    #[test]
    fn json_object_needs_no_schema_support_and_a_schema_does() {
        let mut r = ChatRequest::user("hi", 8);
        r.json_schema = Some(serde_json::json!({"type": "object"}));
        assert!(!r.needs(false).json_schema);
        r.json_schema = Some(serde_json::json!({"type": "object", "required": ["a"]}));
        assert!(r.needs(false).json_schema);
    }

    #[test]
    fn a_budget_and_an_effort_map_both_ways() {
        assert_eq!(Reasoning::Budget(1024).effort(), Effort::Low);
        assert_eq!(Reasoning::Budget(1500).effort(), Effort::Medium);
        assert_eq!(Reasoning::Budget(3000).effort(), Effort::High);
        assert_eq!(Reasoning::Effort(Effort::Medium).budget_tokens(), 2048);
        assert_eq!(Effort::parse("minimal"), Some(Effort::Low));
        assert_eq!(Effort::parse("none"), None);
    }
}
