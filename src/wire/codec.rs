//! What every wire's codec shares: the parsed chat answer (`ChatParsed`), a 2xx that is
//! no answer (`BadSuccess`) and the failure it becomes, sampling field names, and token
//! counts read from usage.

use crate::classify::failure::{excerpt, ErrorFields, Headers, UpstreamFailure};
use crate::core::answer::FinishReason;
use crate::core::request::Usage;
use serde_json::Value;

/// A chat success body, read by its wire.
#[derive(Debug, Clone, Default)]
pub struct ChatParsed {
    pub text: String,
    pub tool_calls: Vec<crate::core::conversation::ToolCall>,
    pub finish_reason: Option<FinishReason>,
    /// The model the body says answered.
    pub model: Option<String>,
    pub usage: Usage,
    /// The body's own id (a fallback request id).
    pub id: Option<String>,
    /// The answer is a refusal (fidelity.md §4): the refusal's own text where the wire
    /// has a field for it (OpenAI `message.refusal`), else empty (a finish reason said
    /// so; the text, if any, is in `text`).
    pub refusal: Option<String>,
    /// The model's reasoning text, where the answer shows it (Anthropic `thinking`
    /// blocks, Gemini thought parts, an OpenAI-compatible `reasoning_content`).
    pub reasoning: Option<String>,
    /// The answers after the first (`n > 1`, Gemini's candidates).
    pub more_choices: Vec<crate::core::answer::Choice>,
}

/// How a wire spells the sampling fields: `None` where it has no such field.
pub struct SamplingNames {
    pub temperature: &'static str,
    pub top_p: &'static str,
    pub stop: &'static str,
    pub seed: Option<&'static str>,
    pub top_k: Option<&'static str>,
}

/// Writes the sampling fields the caller set into `target` (a body, or Gemini's
/// `generationConfig`), under the wire's names.
pub fn put_sampling(
    target: &mut serde_json::Map<String, Value>,
    s: &crate::core::request::Sampling,
    names: &SamplingNames,
) {
    if let Some(t) = s.temperature {
        target.insert(names.temperature.into(), t.into());
    }
    if let Some(p) = s.top_p {
        target.insert(names.top_p.into(), p.into());
    }
    if !s.stop.is_empty() {
        target.insert(names.stop.into(), s.stop.clone().into());
    }
    if let (Some(seed), Some(name)) = (s.seed, names.seed) {
        target.insert(name.into(), seed.into());
    }
    if let (Some(k), Some(name)) = (s.top_k, names.top_k) {
        target.insert(name.into(), k.into());
    }
}

/// A 200 whose body could not be used, or that carried a refusal instead of an answer.
#[derive(Debug)]
pub enum BadSuccess {
    /// Not the wire's success shape: broken JSON, no choices, ...
    Malformed(String),
    /// The provider returned no answer because a safety filter stopped it.
    Refused(String),
    /// An error object inside the answer (OpenRouter `choices[].error`).
    Failed(Box<ErrorFields>),
}

/// A 2xx that the wire could not use, as a failure the classifier can judge.
pub fn bad_success(status: u16, headers: Headers, raw: &[u8], bad: BadSuccess) -> UpstreamFailure {
    let (error, malformed) = match bad {
        BadSuccess::Malformed(why) => (ErrorFields::parse(raw), Some(why)),
        BadSuccess::Failed(fields) => (Some(*fields), None),
        BadSuccess::Refused(why) => (
            Some(ErrorFields {
                code: Some("content_filter".into()),
                message: Some(why),
                ..Default::default()
            }),
            None,
        ),
    };
    UpstreamFailure {
        status: Some(status),
        headers,
        error,
        excerpt: excerpt(raw),
        transport: None,
        malformed,
    }
}

/// Reads a JSON number as a token count; absent or odd values count as 0.
pub fn tokens(v: Option<&Value>) -> u64 {
    count(v).unwrap_or(0)
}

/// No real count comes near this (a trillion tokens); a hostile or broken upstream's
/// `2^64 - 1` is cut to it, so the sums made of counts (input + cache reads + cache
/// writes, candidates + thoughts, a bucket's spend) can never overflow.
pub const MAX_TOKEN_COUNT: u64 = 1 << 40;

/// A request's count field (`max_tokens`, `n`, a thinking budget) as a non-negative
/// integer: `100`, and `1e2` or `100.0`, which a JSON parser reads as floats and the
/// providers' own (Python) APIs accept; the client's body must not be refused here
/// that its provider would serve. `None` for anything else, or past `u32::MAX`.
pub fn request_count(v: &Value) -> Option<u32> {
    let n = v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(f))
            .map(|f| f as u64)
    })?;
    u32::try_from(n).ok()
}

/// A token count when the field is a non-negative integer, capped at
/// [`MAX_TOKEN_COUNT`].
pub fn count(v: Option<&Value>) -> Option<u64> {
    v.and_then(Value::as_u64).map(|n| n.min(MAX_TOKEN_COUNT))
}
