//! Same wire (spec/fidelity.md §1): the client's own body, forwarded as it was sent,
//! with only `model` replaced by the route's (and, on an OpenAI stream, the
//! `stream_options.include_usage` the router needs to settle admission). The bytes
//! are spliced, never re-serialised from a parsed copy, so every field the client sent —
//! known, unknown or future — reaches the upstream unchanged and in its order.

use super::endpoint::Endpoint;
use super::http::{CallBody, HttpCall};
use crate::core::key_guard::Part;
use crate::core::request::Original;
use crate::core::vocab::Wire;
use bytes::Bytes;
use std::ops::Range;

/// The byte spans of top-level fields of a JSON object body, found in one pass without
/// building a tree. `None` when the body is not a JSON object.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Spans {
    pub model: Option<Range<usize>>,
    pub stream_options: Option<Range<usize>>,
    /// A Responses object's `id`, `previous_response_id` and `store`, and an event's
    /// `response` (the gateway answers with its own id: `wire::responses`).
    pub id: Option<Range<usize>>,
    pub previous_response_id: Option<Range<usize>>,
    pub store: Option<Range<usize>>,
    pub response: Option<Range<usize>>,
    /// A field of these that appears twice. A JSON parser keeps one of the two values
    /// (serde the last, others the first): forwarded as it is, such a body could mean
    /// one thing to the gateway and another upstream, so it is refused.
    pub duplicate: Option<&'static str>,
}

/// The spans of the top-level values of `body` that [`Spans`] names.
pub fn spans(body: &[u8]) -> Option<Spans> {
    let mut s = Scanner { b: body, i: 0 };
    s.ws();
    s.eat(b'{')?;
    let mut out = Spans::default();
    // Read only to find it twice.
    let mut stream = None;
    s.ws();
    if s.peek() == Some(b'}') {
        return Some(out);
    }
    loop {
        s.ws();
        let key = s.string()?;
        s.ws();
        s.eat(b':')?;
        s.ws();
        let start = s.i;
        s.value()?;
        let span = start..s.i;
        // A key may be spelled with escapes (`"mod\u0065l"`): every JSON parser reads
        // it as `model`, so it is found as `model` here too.
        let raw = &body[key.start + 1..key.end - 1];
        let decoded;
        let name: &[u8] = if raw.contains(&b'\\') {
            decoded = serde_json::from_slice::<String>(&body[key.clone()]).ok()?;
            decoded.as_bytes()
        } else {
            raw
        };
        let (slot, name) = match name {
            b"model" => (&mut out.model, "model"),
            b"stream_options" => (&mut out.stream_options, "stream_options"),
            b"id" => (&mut out.id, "id"),
            b"previous_response_id" => (&mut out.previous_response_id, "previous_response_id"),
            b"store" => (&mut out.store, "store"),
            b"response" => (&mut out.response, "response"),
            b"stream" => (&mut stream, "stream"),
            _ => {
                s.ws();
                match s.next()? {
                    b',' => continue,
                    b'}' => return Some(out),
                    _ => return None,
                }
            }
        };
        if slot.replace(span).is_some() {
            out.duplicate.get_or_insert(name);
        }
        s.ws();
        match s.next()? {
            b',' => continue,
            b'}' => return Some(out),
            _ => return None,
        }
    }
}

/// The field a body names twice at its top level, of those a gateway reads or replaces
/// (`model`, `stream`, `stream_options`, `previous_response_id`, `store`, ...).
pub fn duplicated(body: &[u8]) -> Option<&'static str> {
    spans(body)?.duplicate
}

/// What a client is told when its body names a field twice.
pub fn duplicated_message(field: &str) -> String {
    format!("the body names `{field}` twice at its top level: send each field once (a JSON parser keeps one of the two, and which one differs from parser to parser)")
}

/// A minimal JSON scanner: it skips values and reports where they are. It trusts the
/// body to be JSON (the ingress parse has checked it), and only keeps its place.
struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// A string, quotes included. The text up to the next quote or backslash is skipped
    /// at once (`memchr2`): byte by byte, skipping the strings was most of the cost of
    /// scanning a long conversation.
    fn string(&mut self) -> Option<Range<usize>> {
        let start = self.i;
        self.eat(b'"')?;
        loop {
            self.i += memchr::memchr2(b'"', b'\\', self.b.get(self.i..)?)?;
            match self.next()? {
                b'\\' => {
                    self.next()?;
                }
                _ => return Some(start..self.i),
            }
        }
    }

    fn value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' | b'[' => {
                // Nesting only: strings are skipped whole so a bracket inside one does
                // not count.
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            _ => {
                // A number, true, false or null: up to the next delimiter.
                let start = self.i;
                while let Some(c) = self.peek() {
                    if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.i += 1;
                }
                (self.i > start).then_some(())
            }
        }
    }
}

/// A forwarded stream frame (`event: …` and `data: {…}`) with the text it shows in
/// `part` replaced by `text`: in an OpenAI chunk, the delta's `content`, `refusal`,
/// `reasoning_content` (or `reasoning`) or that tool call's `function.arguments` (the
/// first choice that shows some gets `text`, any other none); in an Anthropic event,
/// the delta's `text`, `thinking` or `partial_json`; in a Responses event, its
/// `delta`. For the one change a forwarded frame may have, masking a key that the
/// upstream split across frames (`core::key_guard`). `None`: no such text found.
pub fn with_text(frame: &[u8], text: &str, part: Part) -> Option<Vec<u8>> {
    let frame = std::str::from_utf8(frame).ok()?;
    let mut event = None;
    let mut data = Vec::new();
    for line in frame.lines() {
        if let Some(e) = line.strip_prefix("event:") {
            event = Some(e.trim_start());
        } else if let Some(d) = line.strip_prefix("data:") {
            data.push(d.strip_prefix(' ').unwrap_or(d));
        }
    }
    let mut v: serde_json::Value = serde_json::from_str(&data.join("\n")).ok()?;
    let mut replaced = false;
    let is_text = |t: &&mut serde_json::Value| t.is_string();
    if let Some(choices) = v.get_mut("choices").and_then(|c| c.as_array_mut()) {
        for c in choices {
            let Some(delta) = c.get_mut("delta") else {
                continue;
            };
            let target = match part {
                Part::Text => delta.get_mut("content"),
                Part::Refusal => delta.get_mut("refusal"),
                Part::Reasoning => {
                    let key = if delta
                        .get("reasoning_content")
                        .is_some_and(|t| t.is_string())
                    {
                        "reasoning_content"
                    } else {
                        "reasoning"
                    };
                    delta.get_mut(key)
                }
                Part::Arguments(i) => delta
                    .get_mut("tool_calls")
                    .and_then(|t| t.as_array_mut())
                    .and_then(|calls| {
                        // A call without an `index` is the one at its position, as the
                        // decoder reads it.
                        let at = calls.iter().enumerate().position(|(j, c)| {
                            c.get("index").and_then(|x| x.as_u64()).unwrap_or(j as u64)
                                == u64::from(i)
                        })?;
                        calls.get_mut(at)
                    })
                    .and_then(|c| c.pointer_mut("/function/arguments")),
            };
            if let Some(t) = target.filter(is_text) {
                *t = serde_json::Value::from(if replaced { "" } else { text });
                replaced = true;
            }
        }
    } else if let Some(delta) = v.get_mut("delta").filter(|d| d.is_object()) {
        let key = match part {
            Part::Text | Part::Refusal => "text",
            Part::Reasoning => "thinking",
            Part::Arguments(_) => "partial_json",
        };
        if let Some(t) = delta.get_mut(key).filter(is_text) {
            *t = text.into();
            replaced = true;
        }
    } else if let Some(t) = v.get_mut("delta").filter(is_text) {
        *t = text.into();
        replaced = true;
    }
    if !replaced {
        return None;
    }
    let mut out = Vec::new();
    if let Some(e) = event {
        out.extend_from_slice(format!("event: {e}\n").as_bytes());
    }
    out.extend_from_slice(b"data: ");
    out.extend(serde_json::to_vec(&v).ok()?);
    out.extend_from_slice(b"\n\n");
    Some(out)
}

/// `body` with the value at each span replaced (spans in any order, none overlapping).
pub fn splice(body: &[u8], mut edits: Vec<(Range<usize>, Vec<u8>)>) -> Vec<u8> {
    edits.sort_by_key(|(r, _)| r.start);
    let extra: usize = edits.iter().map(|(_, v)| v.len()).sum();
    let mut out = Vec::with_capacity(body.len() + extra);
    let mut at = 0;
    for (span, with) in edits {
        out.extend_from_slice(&body[at..span.start]);
        out.extend_from_slice(&with);
        at = span.end;
    }
    out.extend_from_slice(&body[at..]);
    out
}

/// The client's body with its `model` value replaced by `model`, and, when
/// `include_usage`, `stream_options.include_usage: true` set (the rest of
/// `stream_options` kept).
pub fn body(orig: &Original, model: &str, include_usage: bool) -> Bytes {
    let b = &orig.bytes;
    let model_json = serde_json::to_string(model).unwrap_or_else(|_| "\"\"".into());
    // Each edit replaces one span; edits are applied in the order of their spans.
    let mut edits: Vec<(Range<usize>, Vec<u8>)> = vec![(orig.model.clone(), model_json.into())];
    if include_usage {
        match &orig.stream_options {
            Some(span) => {
                let mut v: serde_json::Value =
                    serde_json::from_slice(&b[span.clone()]).unwrap_or_default();
                if !v.is_object() {
                    v = serde_json::json!({});
                }
                if v.get("include_usage").and_then(serde_json::Value::as_bool) != Some(true) {
                    v["include_usage"] = true.into();
                    edits.push((span.clone(), serde_json::to_vec(&v).unwrap_or_default()));
                }
            }
            None => {
                // Just after the opening brace: `{"stream_options":{...},` + the rest.
                let open = b.iter().position(|c| *c == b'{').unwrap_or(0) + 1;
                edits.push((
                    open..open,
                    br#""stream_options":{"include_usage":true},"#.to_vec(),
                ));
            }
        }
    }
    Bytes::from(splice(b, edits))
}

/// The headers of a same-wire call: the route's credential, and on the Anthropic wire
/// the client's `anthropic-version` (else the default) and `anthropic-beta`. Nothing of
/// the client's credential is ever forwarded.
fn headers(ep: &Endpoint, orig: &Original) -> Vec<(&'static str, String)> {
    match ep.wire {
        Wire::Anthropic => {
            let mut h = vec![("x-api-key", ep.api_key.expose().to_string())];
            let version = orig
                .headers
                .iter()
                .find(|(n, _)| *n == "anthropic-version")
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| super::anthropic::API_VERSION.to_string());
            h.push(("anthropic-version", version));
            h.extend(
                orig.headers
                    .iter()
                    .filter(|(n, _)| *n == "anthropic-beta")
                    .cloned(),
            );
            h
        }
        _ => vec![("authorization", format!("Bearer {}", ep.api_key.expose()))],
    }
}

/// The same-wire chat call: the client's body to the wire's chat URL.
pub fn chat_call(ep: &Endpoint, model: &str, orig: &Original, include_usage: bool) -> HttpCall {
    let path = match ep.wire {
        Wire::Anthropic => "/v1/messages",
        Wire::Responses => super::endpoint::RESPONSES_PATH,
        _ => "/chat/completions",
    };
    HttpCall {
        url: ep.url(path),
        headers: headers(ep, orig),
        body: CallBody::Raw(body(orig, model, include_usage)),
    }
}

/// The same-wire embeddings call: the client's body (`dimensions`, `encoding_format`,
/// `user`, any other field) with only `model` replaced.
pub fn embed_call(ep: &Endpoint, model: &str, orig: &Original) -> HttpCall {
    HttpCall {
        url: ep.url("/embeddings"),
        headers: headers(ep, orig),
        body: CallBody::Raw(body(orig, model, false)),
    }
}

/// The same-wire rerank call (Cohere / Jina `/rerank`): the client's body
/// (`return_documents`, `max_chunks_per_doc`, any other field) with only `model`
/// replaced.
pub fn rerank_call(ep: &Endpoint, model: &str, orig: &Original) -> HttpCall {
    HttpCall {
        url: ep.url("/rerank"),
        headers: headers(ep, orig),
        body: CallBody::Raw(body(orig, model, false)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn original(body: &str) -> Original {
        let s = spans(body.as_bytes()).unwrap();
        Original {
            wire: Wire::OpenAi,
            bytes: Bytes::copy_from_slice(body.as_bytes()),
            model: s.model.unwrap(),
            stream_options: s.stream_options,
            headers: vec![],
            untranslatable: None,
            per_provider: vec![],
            left_out: vec![],
        }
    }

    #[test]
    fn only_the_top_level_model_is_replaced_byte_for_byte() {
        let raw = r#" { "messages" : [{"role":"user","content":"say \"model\": {x}","model":"inner"}],
            "model" : "high",  "logprobs":true, "future_field": {"a":[1,{"b":"]}"}]}, "n": 2 } "#;
        let out = body(&original(raw), "gpt-4o-2024", false);
        let want = raw.replacen(r#""model" : "high""#, r#""model" : "gpt-4o-2024""#, 1);
        assert_eq!(std::str::from_utf8(&out).unwrap(), want);
    }

    #[test]
    fn include_usage_is_added_and_the_clients_stream_options_kept() {
        let out = body(&original(r#"{"model":"m","stream":true}"#), "x", true);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["model"], "x");
        let out = body(
            &original(r#"{"stream_options":{"include_obfuscation":false},"model":"m"}"#),
            "x",
            true,
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["stream_options"],
            serde_json::json!({"include_obfuscation": false, "include_usage": true})
        );
        // Already asked: the body is left as it is.
        let raw = r#"{"model":"m","stream_options":{"include_usage":true}}"#;
        let out = body(&original(raw), "m", true);
        assert_eq!(&out[..], raw.as_bytes());
    }

    #[test]
    fn a_model_key_spelled_with_escapes_is_the_model_and_only_its_value_changes() {
        let raw = r#"{"messages":[],"mod\u0065l":"high","x_future":{"a":1}}"#;
        let out = body(&original(raw), "gpt-x", false);
        let want = raw.replacen(r#""high""#, r#""gpt-x""#, 1);
        assert_eq!(std::str::from_utf8(&out).unwrap(), want);
        // Spelled twice, once plainly: the two are one field named twice.
        let twice = spans(br#"{"model":"a","mod\u0065l":"b"}"#).unwrap();
        assert_eq!(twice.duplicate, Some("model"));
    }

    #[test]
    fn a_field_named_twice_is_found() {
        let twice = spans(br#"{"model":"a","messages":[],"model":"b"}"#).unwrap();
        assert_eq!(twice.duplicate, Some("model"));
        let prev =
            spans(br#"{"previous_response_id":"resp_x","input":"hi","previous_response_id":null}"#);
        assert_eq!(prev.unwrap().duplicate, Some("previous_response_id"));
        // Nested fields of the same name are not the top level's.
        let nested =
            spans(br#"{"model":"a","metadata":{"model":"b","stream":true},"stream":false}"#);
        assert_eq!(nested.unwrap().duplicate, None);
    }

    #[test]
    fn a_body_that_is_not_an_object_has_no_spans() {
        assert_eq!(spans(b"[1]"), None);
        assert_eq!(spans(b"{\"model\":"), None);
        assert_eq!(spans(b"{}"), Some(Spans::default()));
    }
}
