//! The plain OpenAI chat body read straight from its bytes into the `ChatIn` that
//! `openai_chat_tree` reads from a `serde_json::Value`, without building the tree.
//! Building it (a `String` for every key and value, a map per object) and then the
//! canonical conversation from it was most of reading a request: 67k of the 239k
//! instructions of a same-wire request with a 20-message, 8 KB body.
//!
//! Only the plainest body is taken here; anything else is left to the tree path, which
//! stays the one authority on every body, its errors included: `openai_chat` answers
//! `None` for a body it does not take, and the caller reads the same bytes the old
//! way. It takes a body only when every one of these holds, so that the tree path
//! would answer `Ok` with exactly this `ChatIn`:
//! - a JSON object whose keys are among `model`, `messages`, `stream`, `max_tokens`,
//!   `max_completion_tokens`, `temperature` and `top_p`, none of them twice (a `Value`
//!   keeps the last one); every one of them is mapped, so nothing is unmapped;
//! - `model` a non-empty string; `messages` a non-empty array of objects with exactly
//!   `role` (`system`, `developer`, `user` or `assistant`) and `content`, a string;
//! - `stream` a boolean or null, the token counts integers that fit `u32` or null, the
//!   sampling numbers numbers or null.

use crate::core::conversation::{Conversation, Part, Turn};
use crate::core::request::{ChatRequest, Sampling};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

/// `body` read as a plain chat body (its model, request and whether it streams), or
/// `None` when the tree path must judge it.
pub(super) fn openai_chat(body: &[u8]) -> Option<(String, ChatRequest, bool)> {
    let b: Body = serde_json::from_slice(body).ok()?;
    let model = b.model.filter(|m| !m.is_empty())?;
    let conversation = b
        .messages
        .filter(|c| !c.turns.is_empty() || c.system.is_some())?;
    let max_tokens = match b.max_completion_tokens.flatten() {
        Some(n) => Some(n),
        None => b.max_tokens.flatten(),
    };
    let request = ChatRequest {
        conversation,
        tools: Vec::new(),
        tool_choice: None,
        max_tokens,
        max_tokens_name: None,
        sampling: Sampling {
            temperature: b.temperature.flatten(),
            top_p: b.top_p.flatten(),
            ..Sampling::default()
        },
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
    };
    Some((model, request, b.stream.flatten().unwrap_or(false)))
}

/// The error that sends a body to the tree path; its text is never shown.
fn not_plain<E: de::Error>() -> E {
    E::custom("not a plain chat body")
}

/// Sets a field read once; a second time is a body for the tree path.
fn once<T, E: de::Error>(slot: &mut Option<T>, v: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(not_plain());
    }
    *slot = Some(v);
    Ok(())
}

/// A key or a string: borrowed from the body where it has no escapes.
struct Text<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A non-negative integer that fits `u32` (`Value::as_u64`, then `u32::try_from`), or null.
struct Count(Option<u32>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a count")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Count, E> {
                u32::try_from(n)
                    .map(|n| Count(Some(n)))
                    .map_err(|_| not_plain())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Count, E> {
                Ok(Count(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A number as `Value::as_f64` reads it, or null.
struct Number(Option<f64>);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Number, E> {
                Ok(Number(Some(n as f64)))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Number, E> {
                Ok(Number(Some(n as f64)))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Number, E> {
                Ok(Number(Some(n)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Number, E> {
                Ok(Number(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A boolean, or null.
struct Flag(Option<bool>);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Flag;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a boolean")
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Flag, E> {
                Ok(Flag(Some(b)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Flag, E> {
                Ok(Flag(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// The top level.
struct Body {
    model: Option<String>,
    messages: Option<Conversation>,
    stream: Option<Option<bool>>,
    max_tokens: Option<Option<u32>>,
    max_completion_tokens: Option<Option<u32>>,
    temperature: Option<Option<f64>>,
    top_p: Option<Option<f64>>,
}

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Body;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a chat body")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body, A::Error> {
                let mut b = Body {
                    model: None,
                    messages: None,
                    stream: None,
                    max_tokens: None,
                    max_completion_tokens: None,
                    temperature: None,
                    top_p: None,
                };
                while let Some(Text(k)) = map.next_key()? {
                    match &*k {
                        "model" => once(&mut b.model, map.next_value::<Text>()?.0.into_owned())?,
                        "messages" => once(&mut b.messages, map.next_value::<Messages>()?.0)?,
                        "stream" => once(&mut b.stream, map.next_value::<Flag>()?.0)?,
                        "max_tokens" => once(&mut b.max_tokens, map.next_value::<Count>()?.0)?,
                        "max_completion_tokens" => {
                            once(&mut b.max_completion_tokens, map.next_value::<Count>()?.0)?
                        }
                        "temperature" => once(&mut b.temperature, map.next_value::<Number>()?.0)?,
                        "top_p" => once(&mut b.top_p, map.next_value::<Number>()?.0)?,
                        _ => return Err(not_plain()),
                    }
                }
                Ok(b)
            }
        }
        d.deserialize_map(V)
    }
}

/// `messages`, read into the conversation `from_openai_messages` builds of them.
struct Messages(Conversation);

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Messages;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("messages")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Messages, A::Error> {
                let mut conv = Conversation::default();
                conv.turns.reserve(seq.size_hint().unwrap_or(0));
                while let Some(Message { role, content }) = seq.next_element()? {
                    match role {
                        Role::System { developer } => conv.add_system_at(developer, vec![content]),
                        Role::User => conv.turns.push(Turn::User {
                            parts: vec![Part::text(content)],
                        }),
                        Role::Assistant => conv.turns.push(Turn::Assistant {
                            text: content,
                            tool_calls: Vec::new(),
                        }),
                    }
                }
                conv.forget_plain_system_at();
                Ok(Messages(conv))
            }
        }
        d.deserialize_seq(V)
    }
}

enum Role {
    /// `system`, or `developer`.
    System {
        developer: bool,
    },
    User,
    Assistant,
}

struct Message {
    role: Role,
    content: String,
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
                let (mut role, mut content) = (None, None);
                while let Some(Text(k)) = map.next_key()? {
                    match &*k {
                        "role" => {
                            let r = match &*map.next_value::<Text>()?.0 {
                                "system" => Role::System { developer: false },
                                "developer" => Role::System { developer: true },
                                "user" => Role::User,
                                "assistant" => Role::Assistant,
                                _ => return Err(not_plain()),
                            };
                            once(&mut role, r)?
                        }
                        "content" => once(&mut content, map.next_value::<Text>()?.0.into_owned())?,
                        _ => return Err(not_plain()),
                    }
                }
                Ok(Message {
                    role: role.ok_or_else(not_plain)?,
                    content: content.ok_or_else(not_plain)?,
                })
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bodies this path takes, and bodies it leaves to the tree path.
    const BODIES: &[&str] = &[
        r#"{"model":"bench","messages":[{"role":"user","content":"Reply with OK."}]}"#,
        r#"{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"developer","content":"and kind"},{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"content":"again \"quoted\" \u00e9\n","role":"user"}],"stream":true,"max_tokens":64,"temperature":0.2,"top_p":1}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":null,"max_tokens":null,"max_completion_tokens":7,"temperature":null,"top_p":-1}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"max_completion_tokens":null}"#,
        r#" { "messages" : [ { "role" : "user" , "content" : "" } ] , "model" : "m" } "#,
        r#"{"model":"m","messages":[{"role":"system","content":"only a system prompt"}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":0.30000000000000004}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":2}"#,
        // Left to the tree path: each differs from the plain shape in one way.
        r#"{"model":"","messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","messages":[]}"#,
        r#"{"model":"m"}"#,
        r#"{"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","model":"n","messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x","name":"bob"}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}"#,
        r#"{"model":"m","messages":[{"role":"tool","content":"x","tool_call_id":"c"}]}"#,
        r#"{"model":"m","messages":[{"role":"wizard","content":"x"}]}"#,
        r#"{"model":"m","messages":[{"role":"assistant","content":null}]}"#,
        r#"{"model":"m","messages":[{"role":"user","role":"user","content":"x"}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"seed":7}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-1}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1.0}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":4294967296}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":"hot"}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}]} trailing"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":1e400}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"\ud800"}]}"#,
        r#"[1]"#,
        r#"nope"#,
    ];

    #[test]
    fn what_it_takes_is_what_the_tree_path_reads() {
        let mut taken = 0;
        for body in BODIES {
            taken += usize::from(openai_chat(body.as_bytes()).is_some());
            // Taken or not, errors included, `openai_chat` answers what the tree does.
            assert_eq!(
                super::super::openai_chat(body.as_bytes()),
                super::super::openai_chat_tree(body.as_bytes()),
                "{body}"
            );
        }
        assert_eq!(taken, 8, "the first eight bodies are plain");
    }

    #[test]
    fn an_8_kb_conversation_is_taken() {
        let words = "the quick brown fox jumps over the lazy dog while the gateway forwards it ";
        let msgs: Vec<serde_json::Value> = (0..20)
            .map(|i| {
                let role = ["user", "assistant"][i % 2];
                serde_json::json!({"role": role, "content": words.repeat(5)})
            })
            .collect();
        let body =
            serde_json::to_vec(&serde_json::json!({"model": "bench", "messages": msgs})).unwrap();
        assert!(openai_chat(&body).is_some());
        assert_eq!(
            super::super::openai_chat(&body),
            super::super::openai_chat_tree(&body)
        );
    }
}
