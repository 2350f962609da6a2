//! OpenAI's Responses API through the gateway: `POST /v1/responses` (streamed or not)
//! on the same model lookup and the same router as chat, and the conversations it keeps
//! (`GET` / `DELETE /v1/responses/{id}`, `GET …/input_items`).
//!
//! The gateway owns each conversation. A request with `previous_response_id` has the
//! stored items re-materialised and sent whole to whichever route serves, whatever
//! provider answered before; a route of the Responses wire is sent the whole input,
//! never an id. The id a client sees is the gateway's own.

use super::adapter::{self, Called, Reply};
use super::ask::Ask;
use super::choose::Wants;
use super::egress_responses;
use super::errors::ApiError;
use super::http::{error_response, json_response, Body};
use super::ingress::{ChatIn, Turn};
use crate::core::clock::{wall_now_ms, Stopwatch};
use crate::core::vocab::{Route, Wire};
use crate::router::conversation::{self, BeginError};
use crate::store::conversations::Stored;
use crate::wire::responses::{output, relabel_object};
use bytes::Bytes;
use hyper::Response;
use serde_json::{json, Value};
use std::sync::Arc;

/// A previous response the store does not hold (or no longer does).
fn previous_not_found(id: &str) -> ApiError {
    let mut e = ApiError::new(
        404,
        "invalid_request_error",
        "previous_response_not_found",
        format!("Previous response with id '{id}' not found: never kept (`store: false`, or over `responses_max_bytes`), expired (`responses_ttl`), deleted, or dropped past `responses_max`."),
    );
    e.param = Some("previous_response_id".into());
    e
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        404,
        "invalid_request_error",
        "not_found",
        format!("Response with id '{id}' not found."),
    )
}

fn store_unreachable(why: &str) -> ApiError {
    ApiError::new(
        503,
        "unavailable",
        "store_unreachable",
        format!("the conversation store did not answer: {why}"),
    )
}

/// `POST /v1/responses`.
pub(super) async fn create(ask: Ask, body: Bytes) -> Response<Body> {
    let gw = ask.gw.clone();
    let begun = match conversation::begin(&gw.conversations, body, wall_now_ms()).await {
        Ok(b) => b,
        Err(BeginError::Bad(m)) => return ask.refuse("bad_request", ApiError::bad_request(m), ""),
        Err(BeginError::NotFound(id)) => {
            return ask.refuse("previous_response_not_found", previous_not_found(&id), "")
        }
        Err(BeginError::Store(e)) => {
            let e = store_unreachable(&gw.mask(&e.to_string()));
            return ask.refuse("store_unreachable", e, "");
        }
    };
    let b = &begun.body;
    // The history is held parsed, as the canonical conversation, and as each body a
    // Responses route may be sent: counted against the budget request bodies share.
    let providers = begun
        .request
        .original
        .as_ref()
        .map_or(0, |o| o.per_provider.len());
    let held = match begun.history_bytes {
        0 => None,
        n => {
            let bytes = n.saturating_mul(2 + providers);
            let total = gw.body_budget_total();
            Some(super::body_budget::hold(&gw.body_budget, total, &gw.metrics, bytes).await)
        }
    };
    let turn = Arc::new(Turn {
        id: output::new_id("resp"),
        created_at: wall_now_ms() / 1000,
        previous_response_id: b.previous_response_id.clone(),
        store: b.store,
        fields: Arc::new(b.fields.clone()),
        history: begun.history,
        origins: begun.origins,
        held: super::ingress::Held::new(held),
    });
    let c = ChatIn {
        model: b.model.clone(),
        request: begun.request,
        stream: b.stream,
        // Every wire's stream reports its usage by the end, which the response carries.
        include_usage: true,
        untranslatable: begun.untranslatable.map(ApiError::bad_request),
        responses: Some(turn.clone()),
    };
    let choice = match gw.lineup.choose(&c.model, Wants::Chat) {
        Ok(ch) => ch,
        Err(e) => return ask.refuse("unknown_model", e, &c.model),
    };
    ask.chose(&c.model, choice.workflow);
    if let Some(e) = &c.untranslatable {
        if c.request.original.is_none() {
            return ask.refuse("bad_request", e.clone(), &c.model);
        }
    }
    if c.stream {
        return super::stream::stream(ask, c).await;
    }
    let rt = Stopwatch::start();
    let untranslatable = c.untranslatable.is_some();
    let Called { report, reply } =
        adapter::chat(&gw.router, ask.target(&choice), c.request, untranslatable).await;
    let in_router = rt.elapsed();
    let response = match reply {
        Some(reply) => {
            let served = report.served_by.clone();
            answer(&ask, &turn, reply, served.as_ref()).await
        }
        None => error_response(&ask.failure(&choice, &report).await, ask.flavor),
    };
    ask.answered(&choice, &c.model, &report, response, in_router, None)
}

/// The answer as a `response` object, its conversation stored first (a client may send
/// the next turn the moment it reads this one). A same-wire answer is the upstream's
/// bytes relabelled once, and kept as the client reads it.
async fn answer(ask: &Ask, turn: &Turn, reply: Reply, served: Option<&Route>) -> Response<Body> {
    let output = |object: &Value| {
        object
            .get("output")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    match reply.raw.as_ref().filter(|r| r.wire == Wire::Responses) {
        Some(raw) => {
            let relabelled = relabel_object(&raw.bytes, turn.relabel(true));
            let bytes = relabelled.unwrap_or_else(|| raw.bytes.to_vec());
            let object: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            if super::keep::keep(ask, turn, served, output(&object), object).await {
                return json_response(200, bytes);
            }
            let unkept = relabel_object(&raw.bytes, turn.relabel(false));
            json_response(200, unkept.unwrap_or(bytes))
        }
        None => {
            let (mut object, items) = egress_responses::response(turn, &reply);
            if !super::keep::keep(ask, turn, served, items, object.clone()).await {
                object["store"] = json!(false);
            }
            json_response(200, serde_json::to_vec(&object).unwrap_or_default())
        }
    }
}

/// `GET /v1/responses/{id}`, `GET /v1/responses/{id}/input_items` and
/// `DELETE /v1/responses/{id}`, on the stored copy.
pub(super) async fn stored(
    ask: Ask,
    method: &hyper::Method,
    rest: &str,
    query: Option<&str>,
) -> Response<Body> {
    let gw = ask.gw.clone();
    let (id, input_items) = match rest.strip_suffix("/input_items") {
        Some(id) => (id, true),
        None => (rest, false),
    };
    if id.is_empty() || id.contains('/') {
        return ask.refuse("unknown_path", not_found(id), "");
    }
    if method == hyper::Method::DELETE {
        return match gw.conversations.delete(id).await {
            Ok(true) => {
                ask.quiet();
                json_response(
                    200,
                    serde_json::to_vec(&json!({"id": id, "object": "response", "deleted": true}))
                        .unwrap_or_default(),
                )
            }
            Ok(false) => ask.refuse("not_found", not_found(id), ""),
            Err(e) => ask.refuse(
                "store_unreachable",
                store_unreachable(&gw.mask(&e.to_string())),
                "",
            ),
        };
    }
    let s = match gw.conversations.get(id, wall_now_ms()).await {
        Ok(Some(s)) => s,
        Ok(None) => return ask.refuse("not_found", not_found(id), ""),
        Err(e) => {
            return ask.refuse(
                "store_unreachable",
                store_unreachable(&gw.mask(&e.to_string())),
                "",
            )
        }
    };
    if !input_items {
        ask.quiet();
        return json_response(200, serde_json::to_vec(&s.response).unwrap_or_default());
    }
    match input_page(&s, query) {
        Ok(page) => {
            ask.quiet();
            json_response(200, serde_json::to_vec(&page).unwrap_or_default())
        }
        Err(e) => ask.refuse("bad_request", e, ""),
    }
}

/// One page of a stored response's input items, as OpenAI lists them: newest first by
/// default (`order=asc` for oldest first), `limit` (1–100, default 20) after the item
/// `after`. Items without an id are given their position (`item_N`) so paging works;
/// what is not an item (a client's stray number) is not listed. A query it cannot
/// honour is a 400 that says why.
fn input_page(s: &Stored, query: Option<&str>) -> Result<Value, ApiError> {
    let mut limit = 20usize;
    let mut asc = false;
    let mut after: Option<String> = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("limit", v)) => {
                limit = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=100).contains(n))
                    .ok_or_else(|| {
                        ApiError::bad_request(format!("`limit` must be from 1 to 100, not `{v}`"))
                    })?
            }
            Some(("order", "asc")) => asc = true,
            Some(("order", "desc")) => asc = false,
            Some(("order", v)) => {
                return Err(ApiError::bad_request(format!(
                    "`order` must be asc or desc, not `{v}`"
                )))
            }
            Some(("after", v)) => after = Some(v.to_string()),
            // Other parameters (`include[]`) change nothing a stored copy holds.
            _ => {}
        }
    }
    let mut items: Vec<Value> = s
        .input_items()
        .iter()
        .enumerate()
        .filter(|(_, item)| item.is_object())
        .map(|(i, item)| listed(i, item))
        .collect();
    if !asc {
        items.reverse();
    }
    let start = match after {
        None => 0,
        Some(a) => match items.iter().position(|i| i["id"] == json!(a)) {
            Some(p) => p + 1,
            None => {
                return Err(ApiError::bad_request(format!(
                    "`after`: no item `{a}` in this response's input"
                )))
            }
        },
    };
    let page: Vec<Value> = items.iter().skip(start).take(limit).cloned().collect();
    let has_more = start + page.len() < items.len();
    Ok(json!({
        "object": "list",
        "data": page,
        "first_id": page.first().map(|i| i["id"].clone()),
        "last_id": page.last().map(|i| i["id"].clone()),
        "has_more": has_more,
    }))
}

/// An input item as OpenAI lists it: with an id (its position, when it had none), and
/// a message in the typed form typed clients read: `type`, `status`, and `content` as
/// parts (`input_text`, or `output_text` for the assistant's), never a bare string.
fn listed(i: usize, item: &Value) -> Value {
    let mut item = item.clone();
    if item.get("id").and_then(Value::as_str).is_none() {
        item["id"] = json!(format!("item_{i}"));
    }
    let message = matches!(
        item.get("type").and_then(Value::as_str),
        None | Some("message")
    );
    if message {
        item["type"] = json!("message");
        if item.get("status").is_none() {
            item["status"] = json!("completed");
        }
        if let Some(text) = item
            .get("content")
            .and_then(Value::as_str)
            .map(str::to_string)
        {
            let kind = if item["role"] == "assistant" {
                "output_text"
            } else {
                "input_text"
            };
            item["content"] = json!([{ "type": kind, "text": text }]);
        }
    }
    item
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_items_page_newest_first_with_ids() {
        let s = Stored {
            id: "resp_1".into(),
            route: "a/b".into(),
            items: vec![
                json!({"role": "user", "content": "1"}),
                // Guards GET input_items on a stored stray number: it panicked.
                json!(5),
                json!({"role": "user", "content": "2"}),
                json!({"type": "message", "role": "assistant", "content": []}),
            ],
            output_len: 1,
            origins: vec![],
            response: json!({}),
            size: 0,
        };
        let page = input_page(&s, Some("limit=1")).unwrap();
        assert_eq!(
            page["data"][0]["content"],
            json!([{"type": "input_text", "text": "2"}])
        );
        assert_eq!(page["data"][0]["status"], "completed");
        assert_eq!(page["data"][0]["id"], "item_2");
        assert_eq!(page["has_more"], true);
        let next = input_page(&s, Some("limit=1&after=item_2")).unwrap();
        assert_eq!(next["data"][0]["content"][0]["text"], "1");
        assert_eq!(next["has_more"], false);
        assert_eq!(
            input_page(&s, Some("order=asc")).unwrap()["data"][0]["content"][0]["text"],
            "1"
        );
        for bad in [
            "limit=0",
            "limit=-1",
            "limit=99999999999999999999",
            "order=ASC",
            "after=nope",
        ] {
            assert_eq!(input_page(&s, Some(bad)).unwrap_err().status, 400, "{bad}");
        }
    }
}
