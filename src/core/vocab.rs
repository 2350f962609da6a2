//! The project's public vocabulary (spec/decisions.md): classes, actions, health
//! states, outcomes, reasons and paths. These words appear in traces, `--json`
//! output and chaos scenarios, so each is spelled exactly once, here.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! vocab_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident => $word:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vm])* #[serde(rename = $word)] $variant),+
        }

        impl $name {
            /// Every word of this vocabulary, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The word as the specs spell it.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $word),+ }
            }

            /// Parses the spec word; `None` for anything else.
            pub fn parse(word: &str) -> Option<Self> {
                match word { $($word => Some($name::$variant),)+ _ => None }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

vocab_enum!(
    /// What one upstream attempt turned out to be.
    Class {
        Ok => "ok",
        RateLimited => "rate_limited",
        QuotaExhausted => "quota_exhausted",
        ModelUnavailable => "model_unavailable",
        Overloaded => "overloaded",
        ServerError => "server_error",
        Timeout => "timeout",
        Network => "network",
        Auth => "auth",
        InvalidRequest => "invalid_request",
        ContextOverflow => "context_overflow",
        ContentPolicy => "content_policy",
        /// The model answered by refusing: an answer, delivered as it stands
        /// (fidelity.md §4), not a failure of the route.
        Refusal => "refusal",
        StreamInterrupted => "stream_interrupted",
        /// An answer that failed the request's output contract (a JSON schema).
        InvalidOutput => "invalid_output",
        Unknown => "unknown",
    }
);

vocab_enum!(
    /// The router's one answer to a classified attempt.
    Action {
        Done => "done",
        Retry => "retry",
        Fallback => "fallback",
        Interrupt => "interrupt",
        Degrade => "degrade",
        Queue => "queue",
        Shed => "shed",
        FailClosed => "fail_closed",
    }
);

vocab_enum!(
    /// A route's health state.
    HealthState {
        Ready => "ready",
        Cooling => "cooling",
        Retired => "retired",
    }
);

vocab_enum!(
    /// How a whole request ended.
    Outcome {
        Success => "success",
        Degraded => "degraded",
        Interrupted => "interrupted",
        Queued => "queued",
        Shed => "shed",
        /// No answer can reach the client: it went away, or the drain deadline cut the
        /// request (gateway only).
        Cancelled => "cancelled",
        Failed => "failed",
    }
);

vocab_enum!(
    /// Why a request failed, in words a user-facing message can be built from.
    Reason {
        Capacity => "capacity",
        Auth => "auth",
        Request => "request",
        /// No route of the chain can carry a field of the request (fidelity.md §3).
        Unsupported => "unsupported",
        /// No route's buckets can ever hold the request's reservation.
        TooLarge => "too_large",
        Budget => "budget",
        Error => "error",
        /// Shed: admission control refused it locally, before any upstream call.
        Admission => "admission",
    }
);

vocab_enum!(
    /// The kind of call.
    #[derive(Default)]
    CallPath {
        #[default]
        Chat => "chat",
        Stream => "stream",
        Embed => "embed",
        Rerank => "rerank",
    }
);

vocab_enum!(
    /// The wire format a provider speaks (and the mock serves).
    #[derive(Default)]
    Wire {
        #[default]
        OpenAi => "openai",
        Anthropic => "anthropic",
        Gemini => "gemini",
        /// OpenAI's Responses API (`POST {base}/responses`): OpenAI, Azure's v1 API,
        /// xAI, Groq, OpenRouter and others serve it beside chat completions.
        Responses => "openai_responses",
    }
);

impl Wire {
    /// Whether the wire carries `response_format` and `tools[].strict` in a form of its
    /// own, enforced by the provider; elsewhere the router checks the answer instead
    /// (fidelity.md §2 and §3: Anthropic has no equivalent, Gemini's `responseSchema` is a
    /// subset and gets the same check).
    pub fn has_native_output_contract(self) -> bool {
        matches!(self, Wire::OpenAi | Wire::Responses)
    }
}

impl Class {
    /// Classes that a capacity problem produces; a request whose every failure is one of
    /// these fails with reason `capacity` ("out of capacity"), and only then.
    pub fn is_capacity(self) -> bool {
        matches!(
            self,
            Class::RateLimited | Class::QuotaExhausted | Class::Overloaded
        )
    }
}

/// A route: one `provider/model` pair, split on the first `/`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Route {
    // Shared, because routes are cloned into every attempt record, skip and map key.
    full: std::sync::Arc<str>,
    split: usize,
    /// The first 8 bytes of `full`, big-endian, zero-padded: routes are map keys looked
    /// up several times per attempt, and most comparisons are decided here without a
    /// string compare. Ordering by it first keeps the plain string order.
    head: u64,
}

fn head_of(s: &str) -> u64 {
    let mut b = [0u8; 8];
    let n = s.len().min(8);
    b[..n].copy_from_slice(&s.as_bytes()[..n]);
    u64::from_be_bytes(b)
}

impl PartialEq for Route {
    fn eq(&self, other: &Self) -> bool {
        self.head == other.head && self.full == other.full
    }
}

impl Eq for Route {}

impl std::hash::Hash for Route {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // `head` and `split` follow from the string: equal routes hash alike.
        self.full.hash(state);
    }
}

impl PartialOrd for Route {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Route {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Zero-padded big-endian heads order as the strings do; equal heads need the rest.
        self.head
            .cmp(&other.head)
            .then_with(|| self.full.cmp(&other.full))
    }
}

impl Route {
    pub fn parse(s: &str) -> Result<Route, String> {
        match s.find('/') {
            Some(i) if i > 0 && i + 1 < s.len() => Ok(Route {
                full: s.into(),
                split: i,
                head: head_of(s),
            }),
            _ => Err(format!(
                "route `{s}` is not `provider/model` (expected a provider, a `/`, and a model)"
            )),
        }
    }
    pub fn provider(&self) -> &str {
        &self.full[..self.split]
    }
    pub fn model(&self) -> &str {
        &self.full[self.split + 1..]
    }
    pub fn as_str(&self) -> &str {
        &self.full
    }
}

impl TryFrom<String> for Route {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Route::parse(&s)
    }
}

impl From<Route> for String {
    fn from(r: Route) -> String {
        r.full.to_string()
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.full)
    }
}

/// A request's priority class: from its source, never inferred. Waiting requests are
/// served in this order (the derive's order is the queue's).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// A person is waiting: the only class that may use the interactive floor.
    #[default]
    Interactive,
    /// A request a caller sends again (not the router's own same-route retry).
    Retry,
    Background,
    /// Never waits: admitted now or shed.
    Speculative,
}

impl Priority {
    pub const ALL: [Priority; 4] = [
        Priority::Interactive,
        Priority::Retry,
        Priority::Background,
        Priority::Speculative,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Interactive => "interactive",
            Priority::Retry => "retry",
            Priority::Background => "background",
            Priority::Speculative => "speculative",
        }
    }

    pub fn parse(s: &str) -> Option<Priority> {
        Priority::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s.trim()))
    }

    /// Whether this class may wait in the local queue at all.
    pub fn may_wait(self) -> bool {
        self != Priority::Speculative
    }
}

/// Which row of the table decided, and why: traces print it, reasons derive from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    Answered,
    AfterVisibleToken,
    StopOn,
    Retryable,
    Fallback,
    /// Row 2a: the model refused, and the refusal is the answer.
    Refused,
    /// Row 6 because the budget, not the chain, ran out.
    BudgetSpent,
    /// Row 6 because no approved live route was left, or the class allows no move.
    NothingLeft,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_order_as_their_strings() {
        let words = [
            "a/b",
            "a/b\u{0}",
            "a/bc",
            "ab/c",
            "p1/model-1",
            "p1/model-10",
            "p10/m",
            "p2/m",
            "prov/x",
            "provider/a",
            "provider/b",
            "providerz/a",
            "é/x",
            "z/z",
        ];
        for x in words {
            for y in words {
                let (rx, ry) = (Route::parse(x).unwrap(), Route::parse(y).unwrap());
                assert_eq!(rx.cmp(&ry), x.cmp(y), "{x} vs {y}");
                assert_eq!(rx == ry, x == y, "{x} vs {y}");
            }
        }
    }

    #[test]
    fn route_splits_on_first_slash() {
        let r = Route::parse("openrouter/anthropic/claude-x").unwrap();
        assert_eq!(r.provider(), "openrouter");
        assert_eq!(r.model(), "anthropic/claude-x");
        assert!(Route::parse("noslash").is_err());
        assert!(Route::parse("/model").is_err());
        assert!(Route::parse("prov/").is_err());
    }

    #[test]
    fn words_round_trip() {
        for c in Class::ALL {
            assert_eq!(Class::parse(c.as_str()), Some(*c));
            let json = serde_json::to_string(c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
        }
        assert_eq!(Action::parse("fail_closed"), Some(Action::FailClosed));
        assert_eq!(Action::parse("failclosed"), None);
    }
}
