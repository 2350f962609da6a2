//! The calls the router makes, by path (chat, embed, rerank): each picks its route's
//! wire codec, sends through `http`, and answers a parsed success or an
//! `UpstreamFailure`.

use super::carry::Cannot;
use super::codec::{bad_success, BadSuccess};
use super::endpoint::Endpoint;
use super::http::send;
use super::rerank as rerank_wire;
use super::{anthropic, gemini, openai, responses};
use crate::classify::failure::{Headers, Transport, UpstreamFailure};
use crate::core::answer::FinishReason;
use crate::core::request::{ChatRequest, EmbedRequest, RerankRequest, Usage};
use crate::core::vocab::Wire;

/// A usable chat answer.
#[derive(Debug, Clone)]
pub struct ChatSuccess {
    pub text: String,
    /// Tools the model asked to call, in canonical form.
    pub tool_calls: Vec<crate::core::conversation::ToolCall>,
    pub finish_reason: Option<FinishReason>,
    pub model: Option<String>,
    pub usage: Usage,
    pub request_id: Option<String>,
    pub headers: Headers,
    /// The body as the upstream sent it, on a same-wire call: the gateway returns it
    /// unchanged (spec/fidelity.md §1).
    pub raw: Option<bytes::Bytes>,
    /// A refusal (class `refusal`): see `ChatParsed::refusal`.
    pub refusal: Option<String>,
    /// See `ChatParsed::reasoning`.
    pub reasoning: Option<String>,
    /// See `ChatParsed::more_choices`.
    pub more_choices: Vec<crate::core::answer::Choice>,
}

/// Sends one non-streaming chat call through `endpoint`'s wire.
pub async fn chat(
    client: &super::http::Client,
    endpoint: &Endpoint,
    model: &str,
    req: &ChatRequest,
) -> Result<ChatSuccess, UpstreamFailure> {
    let same_wire = req.same_wire(endpoint.wire);
    let call = match (same_wire, endpoint.wire) {
        (Some(orig), _) => super::passthrough::chat_call(
            endpoint,
            model,
            orig.for_provider(&endpoint.provider),
            false,
        ),
        (None, Wire::OpenAi) => openai::chat_call(endpoint, model, req),
        (None, Wire::Anthropic) => anthropic::chat_call(endpoint, model, req),
        (None, Wire::Gemini) => gemini::chat_call(endpoint, model, req),
        (None, Wire::Responses) => responses::chat_call(endpoint, model, req),
    };
    let raw = call.body.is_raw();
    let mut call = call;
    call.body = super::carry::fit(call.body, req, endpoint);
    let reply = super::http::send_bytes(client, call, endpoint.timeout_ms).await?;
    // The common OpenAI answer is read from its bytes; the rest, a `Value` first.
    let plain = match endpoint.wire {
        Wire::OpenAi => openai::reply::plain_chat(&reply.raw),
        _ => None,
    };
    let (status, headers, body, parsed) = match plain {
        Some(p) => (reply.status, reply.headers, reply.raw.into(), Ok(p)),
        None => {
            let reply = reply.json().map_err(|e| *e)?;
            // An error some dialects report inside a 2xx (MiniMax `base_resp`) is never
            // an answer.
            if let Some(fields) =
                crate::classify::in_band::error_in_success(endpoint.dialect, &reply.json)
            {
                let bad = BadSuccess::Failed(Box::new(fields));
                return Err(bad_success(reply.status, reply.headers, &reply.raw, bad));
            }
            let parsed = match endpoint.wire {
                Wire::OpenAi => openai::parse_chat(&reply.json),
                Wire::Anthropic => anthropic::parse_chat(&reply.json),
                Wire::Gemini => gemini::parse_chat(&reply.json),
                Wire::Responses => responses::parse_chat(&reply.json),
            };
            (reply.status, reply.headers, reply.raw, parsed)
        }
    };
    let parsed = parsed.map(|mut p| {
        if endpoint.wire == Wire::Gemini {
            let ids = gemini::history::AnswerCallIds::of(&req.conversation);
            ids.number(&mut p.tool_calls);
            for choice in &mut p.more_choices {
                ids.number(&mut choice.tool_calls);
            }
        }
        p
    });
    match parsed {
        Ok(p) => Ok(ChatSuccess {
            text: p.text,
            tool_calls: p.tool_calls,
            finish_reason: p.finish_reason,
            model: p.model,
            usage: p.usage,
            request_id: headers.request_id().map(str::to_string).or(p.id),
            headers,
            raw: raw.then_some(body),
            refusal: p.refusal,
            reasoning: p.reasoning,
            more_choices: p.more_choices,
        }),
        Err(bad) => Err(bad_success(status, headers, &body, bad)),
    }
}

/// A usable embedding batch: one vector per input, in input order.
#[derive(Debug, Clone)]
pub struct EmbedSuccess {
    pub vectors: Vec<Vec<f32>>,
    pub usage: Usage,
    pub request_id: Option<String>,
    pub headers: Headers,
    /// The body as the upstream sent it, on a same-wire call.
    pub raw: Option<bytes::Bytes>,
}

/// A usable rerank: document indices, best first.
#[derive(Debug, Clone)]
pub struct RerankSuccess {
    pub ranking: Vec<usize>,
    pub usage: Usage,
    pub request_id: Option<String>,
    pub headers: Headers,
    /// The body as the upstream sent it, on a same-wire call.
    pub raw: Option<bytes::Bytes>,
}

/// A wire that has no endpoint for a path (Anthropic has no embeddings): this route can
/// never serve the call, which the classifier reads as `model_unavailable`.
fn unsupported(endpoint: &Endpoint, what: &str) -> UpstreamFailure {
    UpstreamFailure::transport(
        Transport::Unsupported,
        format!(
            "the {} wire of provider `{}` has no {what} endpoint",
            endpoint.wire, endpoint.provider
        ),
    )
}

/// The API an embedding call is sent on: a provider that speaks the Responses API
/// serves OpenAI's `/embeddings` beside it.
fn embed_wire(endpoint: &Endpoint) -> Wire {
    match endpoint.wire {
        Wire::Responses => Wire::OpenAi,
        w => w,
    }
}

/// What `endpoint` cannot carry of an embedding request (spec/fidelity.md §3, §6), as
/// `wire::carry` judges a chat: `Err` when the route must be skipped (token arrays on
/// a wire that takes only text: Gemini `batchEmbedContents`), else the advisory fields
/// it is called without (`user`, unknown fields), each named once. The client's own
/// wire gets its body as it is: nothing is dropped.
pub fn carry_embed(req: &EmbedRequest, endpoint: &Endpoint) -> Result<Vec<String>, Cannot> {
    let wire = embed_wire(endpoint);
    if wire == Wire::Anthropic || req.same_wire(wire).is_some() {
        // Anthropic has no embeddings endpoint: its call fails as `unsupported`.
        return Ok(Vec::new());
    }
    if !req.token_arrays.is_empty() {
        return Err(Cannot {
            field: "input token arrays".into(),
        });
    }
    let mut dropped: Vec<String> = Vec::new();
    for u in &req.unmapped {
        if !dropped.contains(&u.name) {
            dropped.push(u.name.clone());
        }
    }
    Ok(dropped)
}

/// Sends one embedding batch.
pub async fn embed(
    client: &super::http::Client,
    endpoint: &Endpoint,
    model: &str,
    req: &EmbedRequest,
) -> Result<EmbedSuccess, UpstreamFailure> {
    let wire = embed_wire(endpoint);
    let call = match (req.same_wire(wire), wire) {
        (_, Wire::Anthropic) => return Err(unsupported(endpoint, "embeddings")),
        (Some(orig), _) => super::passthrough::embed_call(endpoint, model, orig),
        // Never reached through the router, which skips the route (`carry_embed`).
        (None, _) if !req.token_arrays.is_empty() => {
            return Err(unsupported(endpoint, "token-array embeddings"))
        }
        (None, Wire::Gemini) => gemini::embed_call(endpoint, model, &req.inputs, req.dimensions),
        (None, Wire::OpenAi | Wire::Responses) => {
            openai::embed_call(endpoint, model, &req.inputs, req.dimensions)
        }
    };
    let raw = call.body.is_raw();
    let reply = send(client, call, endpoint.timeout_ms).await?;
    let parsed = match wire {
        Wire::Gemini => gemini::parse_embed(&reply.json, req.count()),
        _ => openai::parse_embed(&reply.json, req.count()),
    };
    match parsed {
        Ok((vectors, usage)) => Ok(EmbedSuccess {
            vectors,
            usage,
            request_id: reply.headers.request_id().map(str::to_string),
            headers: reply.headers,
            raw: raw.then_some(reply.raw),
        }),
        Err(bad) => Err(bad_success(reply.status, reply.headers, &reply.raw, bad)),
    }
}

/// Sends one rerank call (Cohere / Jina shape, on OpenAI-compatible endpoints, the
/// one rerank API there is here). The client's own body, when there is one, travels
/// as it is with only `model` replaced (same wire: every rerank route speaks the shape
/// the gateway's `/v1/rerank` takes); a library request is built from its fields.
pub async fn rerank(
    client: &super::http::Client,
    endpoint: &Endpoint,
    model: &str,
    req: &RerankRequest,
) -> Result<RerankSuccess, UpstreamFailure> {
    if !matches!(endpoint.wire, Wire::OpenAi | Wire::Responses) {
        return Err(unsupported(endpoint, "rerank"));
    }
    let call = match req.same_wire(Wire::OpenAi) {
        Some(orig) => super::passthrough::rerank_call(endpoint, model, orig),
        None => rerank_wire::rerank_call(endpoint, model, &req.query, &req.documents, req.top_n),
    };
    let raw = call.body.is_raw();
    let reply = send(client, call, endpoint.timeout_ms).await?;
    match rerank_wire::parse_rerank(&reply.json, req.documents.len()) {
        Ok((ranking, usage)) => Ok(RerankSuccess {
            ranking,
            usage,
            request_id: reply.headers.request_id().map(str::to_string),
            headers: reply.headers,
            raw: raw.then_some(reply.raw),
        }),
        Err(bad) => Err(bad_success(reply.status, reply.headers, &reply.raw, bad)),
    }
}
