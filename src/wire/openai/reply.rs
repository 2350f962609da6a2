//! The common OpenAI chat completion read straight from its bytes: the answer `parse_chat`
//! reads from a `serde_json::Value`, without building the tree. Building it (a `String`
//! for every key, a map per object, every ignored field kept) was the largest part of
//! reading an answer on the same wire, where the gateway needs only the first choice's
//! content, the finish reason, model, id and usage, and returns the upstream's bytes.
//!
//! Only the plain success shape is read here; anything else is left to the `Value` path,
//! which stays the one authority on it: `plain_chat` answers `None` for a body it does
//! not take, and the caller parses the same bytes the old way. It takes a body only
//! when that path would find no in-band error and answer `Ok` with exactly this
//! `ChatParsed`:
//! - no top-level `error`, `base_resp` or `Response` (what `classify::in_band` reads,
//!   on any dialect), and no `error` in the first choice;
//! - no `tool_calls` in the message (their checks stay in one place);
//! - `choices` a non-empty array whose first entry is an object, `message` an object,
//!   `usage` an object or null, and the strings read here strings or null;
//! - no key read here twice (a `Value` keeps the last one);
//! - no failure finish reason, and content, or a refusal beside null content.
//!
//! Every value it skips is still read through `deserialize_any`, as a `Value` would
//! read it: a body that is not JSON (a bad escape, invalid UTF-8, a number out of
//! range, too deep) fails here too and goes to the `Value` path for its error.

use super::{finish_reason, is_failure_finish};
use crate::core::answer::FinishReason;
use crate::core::request::Usage;
use crate::wire::codec::ChatParsed;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// `raw` read as a plain chat completion, or `None` when the `Value` path must judge it.
pub fn plain_chat(raw: &[u8]) -> Option<ChatParsed> {
    let body: Body = serde_json::from_slice(raw).ok()?;
    let choice = body.choice;
    let reason = choice.finish_reason;
    if reason.as_deref().is_some_and(is_failure_finish) {
        return None;
    }
    let filtered = reason
        .as_deref()
        .is_some_and(|r| finish_reason(r) == FinishReason::ContentFilter);
    let message = choice.message.unwrap_or_default();
    let refusal = match message.refusal.filter(|r| !r.is_empty()) {
        Some(r) => Some(r),
        None => filtered.then(String::new),
    };
    let text = match message.content {
        Some(s) => s,
        // `content: null` or none beside a refusal: the refusal is the answer.
        None if refusal.is_some() => String::new(),
        // No content and no tool calls: the `Value` path reports it.
        None => return None,
    };
    Some(ChatParsed {
        text,
        tool_calls: Vec::new(),
        finish_reason: reason.as_deref().map(finish_reason),
        model: body.model,
        usage: body.usage,
        id: body.id,
        refusal,
        reasoning: message.reasoning.filter(|r| !r.is_empty()),
        more_choices: Vec::new(),
    })
}

/// The error that sends a body to the `Value` path; its text is never shown.
fn not_plain<E: de::Error>() -> E {
    E::custom("not a plain chat completion")
}

/// Sets a field read once; a second time is a body for the `Value` path.
fn once<T, E: de::Error>(slot: &mut Option<T>, v: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(not_plain());
    }
    *slot = Some(v);
    Ok(())
}

/// A map key: its text borrowed where it has no escapes.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(s.into()))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(s.to_owned().into()))
            }
        }
        d.deserialize_str(V)
    }
}

/// Any JSON value, read through as `Value` reads it (so checked alike) and dropped.
struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Scalar).map(|_| Skip)
    }
}

/// A value read through like `Skip`, answering what `Value::as_u64` would.
struct Scalar;

impl<'de> Visitor<'de> for Scalar {
    type Value = Option<u64>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, v: i64) -> Result<Option<u64>, E> {
        Ok(u64::try_from(v).ok())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Option<u64>, E> {
        Ok(Some(v))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_none<E>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<u64>, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<u64>, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<u64>, A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(None)
    }
}

/// `Value::as_u64` of a value.
struct U64(Option<u64>);

impl<'de> Deserialize<'de> for U64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Scalar).map(U64)
    }
}

/// The top level.
struct Body {
    choice: Choice,
    model: Option<String>,
    id: Option<String>,
    usage: Usage,
}

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Body;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a chat completion")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body, A::Error> {
                let (mut choice, mut model, mut id, mut usage) = (None, None, None, None);
                while let Some(Key(k)) = map.next_key()? {
                    match &*k {
                        "choices" => once(&mut choice, map.next_value::<Choices>()?.0)?,
                        "model" => once(&mut model, map.next_value::<Option<String>>()?)?,
                        "id" => once(&mut id, map.next_value::<Option<String>>()?)?,
                        "usage" => once(&mut usage, map.next_value::<Option<UsageIn>>()?)?,
                        // What `classify::in_band` reads: the `Value` path judges it.
                        "error" | "base_resp" | "Response" => return Err(not_plain()),
                        _ => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                Ok(Body {
                    choice: choice.ok_or_else(not_plain)?,
                    model: model.flatten(),
                    id: id.flatten(),
                    usage: usage.flatten().map(|u| u.0).unwrap_or_default(),
                })
            }
        }
        d.deserialize_map(V)
    }
}

/// `choices`: its first entry read, the rest read through.
struct Choices(Choice);

impl<'de> Deserialize<'de> for Choices {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Choices;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a non-empty array of choices")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Choices, A::Error> {
                let first = seq.next_element::<Choice>()?.ok_or_else(not_plain)?;
                while seq.next_element::<Skip>()?.is_some() {}
                Ok(Choices(first))
            }
        }
        d.deserialize_seq(V)
    }
}

struct Choice {
    finish_reason: Option<String>,
    message: Option<Message>,
}

impl<'de> Deserialize<'de> for Choice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Choice;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a choice")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Choice, A::Error> {
                let (mut finish_reason, mut message) = (None, None);
                while let Some(Key(k)) = map.next_key()? {
                    match &*k {
                        "finish_reason" => {
                            once(&mut finish_reason, map.next_value::<Option<String>>()?)?
                        }
                        "message" => once(&mut message, map.next_value::<Message>()?)?,
                        // A failure inside the choice (OpenRouter): the `Value` path.
                        "error" => return Err(not_plain()),
                        _ => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                Ok(Choice {
                    finish_reason: finish_reason.flatten(),
                    message,
                })
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Default)]
struct Message {
    content: Option<String>,
    refusal: Option<String>,
    reasoning: Option<String>,
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Message;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a message")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
                let (mut content, mut refusal, mut reasoning) = (None, None, None);
                while let Some(Key(k)) = map.next_key()? {
                    match &*k {
                        "content" => once(&mut content, map.next_value::<Option<String>>()?)?,
                        "refusal" => once(&mut refusal, map.next_value::<Option<String>>()?)?,
                        "reasoning_content" => {
                            once(&mut reasoning, map.next_value::<Option<String>>()?)?
                        }
                        // Tool calls are checked in one place, on the `Value` path.
                        "tool_calls" => return Err(not_plain()),
                        _ => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                Ok(Message {
                    content: content.flatten(),
                    refusal: refusal.flatten(),
                    reasoning: reasoning.flatten(),
                })
            }
        }
        d.deserialize_map(V)
    }
}

fn cap(n: Option<u64>) -> Option<u64> {
    n.map(|n| n.min(crate::wire::codec::MAX_TOKEN_COUNT))
}

/// A `usage` object, read as `openai::usage` reads it.
struct UsageIn(Usage);

impl<'de> Deserialize<'de> for UsageIn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = UsageIn;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a usage object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<UsageIn, A::Error> {
                let (mut input, mut output, mut cached, mut reasoning) = (None, None, None, None);
                while let Some(Key(k)) = map.next_key()? {
                    match &*k {
                        "prompt_tokens" => once(&mut input, map.next_value::<U64>()?.0)?,
                        "completion_tokens" => once(&mut output, map.next_value::<U64>()?.0)?,
                        "prompt_tokens_details" => {
                            once(&mut cached, map.next_value::<Details>()?.0[0])?
                        }
                        "completion_tokens_details" => {
                            once(&mut reasoning, map.next_value::<Details>()?.0[1])?
                        }
                        _ => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                Ok(UsageIn(Usage {
                    // Capped as `codec::count` caps them, so no later sum overflows.
                    input_tokens: cap(input.flatten()).unwrap_or(0),
                    output_tokens: cap(output.flatten()).unwrap_or(0),
                    cached_tokens: cap(cached.flatten()),
                    cache_creation_tokens: None,
                    reasoning_tokens: cap(reasoning.flatten()),
                }))
            }
        }
        d.deserialize_map(V)
    }
}

/// A `*_tokens_details` value: its `cached_tokens` and `reasoning_tokens`, each as
/// `Value::as_u64` reads it; both `None` for null. Anything but an object or null goes
/// to the `Value` path (`pointer` reads an array's indices).
struct Details([Option<u64>; 2]);

impl<'de> Deserialize<'de> for Details {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Details;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a details object")
            }
            fn visit_unit<E>(self) -> Result<Details, E> {
                Ok(Details([None, None]))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Details, A::Error> {
                let (mut cached, mut reasoning) = (None, None);
                while let Some(Key(k)) = map.next_key()? {
                    match &*k {
                        "cached_tokens" => once(&mut cached, map.next_value::<U64>()?.0)?,
                        "reasoning_tokens" => once(&mut reasoning, map.next_value::<U64>()?.0)?,
                        _ => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                Ok(Details([cached.flatten(), reasoning.flatten()]))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::dialect::Dialect;
    use crate::classify::in_band::error_in_success;

    /// What the `Value` path answers for `raw`: the parsed answer when it would serve
    /// it, `None` when it would not (not JSON, an in-band error, a bad success).
    fn by_value(raw: &[u8]) -> Option<String> {
        let v: serde_json::Value = serde_json::from_slice(raw).ok()?;
        if Dialect::ALL
            .iter()
            .any(|d| error_in_success(*d, &v).is_some())
        {
            return None;
        }
        super::super::parse_chat(&v).ok().map(|p| format!("{p:?}"))
    }

    #[test]
    fn a_plain_body_reads_as_the_value_path_reads_it_and_anything_else_is_left_to_it() {
        let plain = [
            r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"static-model","choices":[{"index":0,"message":{"role":"assistant","content":"OK"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}"#,
            r#"{"id":"x","model":"m","choices":[{"message":{"content":"a\"b\u00e9\ud83d\ude00 \n"},"finish_reason":"length"},{"bad":[1,{"x":null}]}],"usage":{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":7}}}"#,
            r#"{"choices":[{"message":{"content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"message":{"content":"OK","refusal":null},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"message":{"content":""},"finish_reason":"content_filter"}]}"#,
            r#"{"choices":[{"finish_reason":"sensitive","message":{"content":""}}]}"#,
            r#"{"choices":[{"finish_reason":"content_filter"}]}"#,
            r#"{"choices":[{"message":{"content":"x","reasoning_content":"think"},"finish_reason":"weird"}],"usage":null,"model":null,"id":null}"#,
            r#"{"choices":[{"message":{"content":"x","reasoning_content":""},"finish_reason":null}],"usage":{"prompt_tokens":-1,"completion_tokens":2.0,"prompt_tokens_details":null,"completion_tokens_details":{"reasoning_tokens":"3"}}}"#,
            r#" {"choices":[{"message":{"content":"x"}}],"object":{"a":[true,false,null,-0.5e3]}} "#,
            r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":18446744073709551615,"x":[[[]]]}}"#,
            r#"{"\u0063hoices":[{"message":{"content":"x"}}]}"#,
        ];
        for body in plain {
            let fast = plain_chat(body.as_bytes()).map(|p| format!("{p:?}"));
            assert!(fast.is_some(), "not read: {body}");
            assert_eq!(fast, by_value(body.as_bytes()), "{body}");
        }
        let others: [&[u8]; 23] = [
            br#"{"choices":[{"message":{"content":"x"}}],"error":null}"#,
            br#"{"choices":[]}"#,
            br#"{"choices":null}"#,
            br#"{"choices":["x"]}"#,
            br#"[1,2]"#,
            br#"{"choices":[{"message":{"content":"x"}}],"error":{"code":"server_error","message":"m"}}"#,
            br#"{"choices":[{"message":{"content":"x"}}],"base_resp":{"status_code":1008}}"#,
            br#"{"choices":[{"message":{"content":"x"}}],"Response":{"Error":{"Code":"E"}}}"#,
            br#"{"choices":[{"message":{"content":""},"finish_reason":"error","error":{"code":502}}]}"#,
            br#"{"choices":[{"message":{"content":"half"},"finish_reason":"error"}]}"#,
            br#"{"choices":[{"message":{"content":""},"finish_reason":"network_error"}]}"#,
            br#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
            br#"{"choices":[{"message":{"content":[{"type":"text","text":"x"}]}}]}"#,
            br#"{"choices":[{"message":{"content":null}}]}"#,
            br#"{"choices":[{"message":null,"finish_reason":"stop"}]}"#,
            br#"{"choices":[{"message":{"content":"a","content":"b"}}]}"#,
            br#"{"choices":[{"message":{"content":"x"}}],"model":7}"#,
            br#"{"choices":[{"message":{"content":"x"}}],"usage":[1]}"#,
            br#"{"choices":[{"message":{"content":"x"}}],"created":1e400}"#,
            br#"{"choices":[{"message":{"content":"x"}}],"object":"\ud800"}"#,
            b"{\"choices\":[{\"message\":{\"content\":\"x\"}}],\"object\":\"\xff\"}",
            br#"{"choices":[{"message":{"content":"x"}}]} x"#,
            br#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens_details":[4]}}"#,
        ];
        for body in others {
            assert!(
                plain_chat(body).is_none(),
                "read: {}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
