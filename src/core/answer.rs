//! What the router hands back beside the trace: everything the upstream said that a
//! caller (a gateway above all) must pass on — text, tool calls, finish reason, the model
//! that actually answered, usage, embedding vectors, rerank order — and the wire-neutral
//! stream events that carry the same things as they arrive.

use crate::core::conversation::ToolCall;
use crate::core::request::Usage;
use crate::core::vocab::Wire;
use serde::Serialize;

/// Why the model stopped, in one vocabulary for every wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end or a stop sequence.
    Stop,
    /// The output cap (`max_tokens`).
    Length,
    /// The model asked to call tools.
    ToolCalls,
    /// A safety filter stopped it.
    ContentFilter,
    /// A reason this vocabulary has no word for, verbatim.
    Other(String),
}

impl FinishReason {
    /// The OpenAI spelling, which most callers expect.
    pub fn as_str(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Other(s) => s,
        }
    }
}

/// One request's answer. Fields a path does not produce stay empty / `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<FinishReason>,
    /// The model that actually answered, from the body when the wire says it.
    pub model: Option<String>,
    pub usage: Option<Usage>,
    pub embeddings: Option<Vec<Vec<f32>>>,
    /// Rerank: document indices, best first (the recall order when degraded).
    pub ranking: Option<Vec<usize>>,
    /// The answer's body as the upstream sent it, and the wire it was sent on, when the
    /// request went to the route as the client sent it (same wire): a gateway returns
    /// these bytes unchanged (spec/fidelity.md §1). The fields above are read from it.
    pub raw: Option<Box<RawAnswer>>,
    /// The answer is the model's refusal (class `refusal`, fidelity.md §4): the
    /// refusal's own text where the wire has a field for it, else empty.
    pub refusal: Option<String>,
    /// The model's reasoning text, where the wire shows it.
    pub reasoning: Option<String>,
    /// The answers after the first, when the request asked for several (`n`) on a wire
    /// that answers them apart from its own shape (Gemini's candidates).
    pub more_choices: Vec<Choice>,
}

/// One more answer of a request that asked for several.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Choice {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<FinishReason>,
}

/// An answer's body as the upstream sent it, and the wire it came on.
#[derive(Debug, Clone, PartialEq)]
pub struct RawAnswer {
    pub wire: Wire,
    pub bytes: bytes::Bytes,
}

/// What a reader of an answer sees as its text: the text, or a refusal's own text
/// (OpenAI `message.refusal`) when the model said nothing else.
pub fn shown_text<'a>(text: &'a str, refusal: Option<&'a str>) -> &'a str {
    match refusal {
        Some(r) if text.is_empty() && !r.is_empty() => r,
        _ => text,
    }
}

/// A stream delta, wire-neutral, handed to the caller as it arrives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StreamEvent<'a> {
    Text(&'a str),
    /// Refusal text (OpenAI `delta.refusal`): visible, delivered as the model sent it.
    Refusal(&'a str),
    /// Reasoning text (Anthropic thinking): visible (fidelity.md §5).
    Reasoning(&'a str),
    /// A piece of tool call `index`: its id and name when first seen, then argument text
    /// (JSON, possibly partial) to append.
    ToolCall {
        index: u32,
        id: Option<&'a str>,
        name: Option<&'a str>,
        arguments: &'a str,
    },
    Finish(&'a FinishReason),
    /// The final usage, once the stream completed; before the first visible token, the
    /// usage reported so far (Anthropic's `message_start` states its input).
    Usage(&'a Usage),
    /// The model the upstream says is answering, as soon as it says so: not visible,
    /// but every chunk the client sees names it (fidelity.md §2).
    Model(&'a str),
    /// The events that follow are choice `i`'s, until the next `Choice`: a stream of
    /// several choices (a client's `n` on a wire that streams them together, Gemini's
    /// candidates). A stream that never says is choice 0's.
    Choice(u32),
    /// One event of a same-wire stream, framed as the upstream sent its data, for a
    /// caller that forwards the stream as it came (spec/fidelity.md §1). It follows the
    /// parsed events of the same upstream event; `visible` says whether that event held
    /// a visible token.
    Raw {
        frame: &'a [u8],
        visible: bool,
    },
}
