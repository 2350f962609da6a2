//! A Responses API turn, for whoever drives the router with one (the gateway, chaos):
//! the client's body read, the conversation it continues fetched from the store and
//! put before its input, and the request the router is given — the canonical
//! conversation for a route of any wire, and for a route of the Responses wire the
//! whole input, never an id (seed 003: a conversation is never left behind on the
//! provider that answered before). After the answer, [`stored`] is what the store keeps.

use crate::core::clock::UnixMs;
use crate::core::request::ChatRequest;
use crate::core::vocab::Route;
use crate::store::conversations::{Conversations, Stored};
use crate::store::StoreError;
use crate::wire::responses::request::{self, ResponsesBody};
use serde_json::Value;

/// A Responses request, joined to the conversation it continues.
#[derive(Debug, Clone)]
pub struct Begun {
    pub body: ResponsesBody,
    /// The router's request: the whole conversation, and the body a route of the
    /// Responses wire is sent.
    pub request: ChatRequest,
    /// Why the conversation cannot leave the Responses wire, if it cannot.
    pub untranslatable: Option<String>,
    /// The items before the answer: the previous response's, then this input.
    pub history: Vec<Value>,
    /// Items of `history` only their provider may be sent as they were.
    pub origins: Vec<(usize, String)>,
    /// The stored size of the conversation continued (0 for none): what continuing it
    /// holds in memory, several times over.
    pub history_bytes: usize,
}

/// Why a turn cannot begin.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BeginError {
    /// The body is not a usable Responses request (a client error, with the field).
    #[error("{0}")]
    Bad(String),
    /// `previous_response_id` names nothing stored (never, expired or deleted).
    #[error("Previous response with id '{0}' not found.")]
    NotFound(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Reads `body` and joins it to the conversation it continues.
pub async fn begin(
    conversations: &Conversations,
    body: bytes::Bytes,
    now: UnixMs,
) -> Result<Begun, BeginError> {
    if let Some(field) = crate::wire::passthrough::duplicated(&body) {
        return Err(BeginError::Bad(
            crate::wire::passthrough::duplicated_message(field),
        ));
    }
    let b = request::parse(&body).map_err(BeginError::Bad)?;
    let (prior, origins, history_bytes) = match &b.previous_response_id {
        None => (Vec::new(), Vec::new(), 0),
        Some(id) => match conversations.get(id, now).await? {
            Some(s) => (s.items, s.origins, s.size),
            None => return Err(BeginError::NotFound(id.clone())),
        },
    };
    let (mut chat, untranslatable) = request::chat_request(&b, &prior).map_err(BeginError::Bad)?;
    chat.original =
        request::original_with_history(body, &b, &prior, &origins, untranslatable.as_deref());
    let mut history = prior;
    history.extend(b.input.iter().cloned());
    Ok(Begun {
        body: b,
        request: chat,
        untranslatable,
        history,
        origins,
        history_bytes,
    })
}

/// The conversation as kept after `id`'s answer: the history, then the answer's
/// `output` items, which only `served`'s provider may be sent again as they are.
pub fn stored(
    id: &str,
    history: &[Value],
    origins: &[(usize, String)],
    served: &Route,
    output: Vec<Value>,
    response: Value,
) -> Stored {
    let start = history.len();
    let mut origins = origins.to_vec();
    origins.extend((0..output.len()).map(|i| (start + i, served.provider().to_string())));
    let output_len = output.len();
    let mut items = history.to_vec();
    items.extend(output);
    Stored {
        id: id.to_string(),
        route: served.as_str().to_string(),
        items,
        output_len,
        origins,
        response,
        size: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_turn_continues_what_the_store_kept_and_only_that() {
        let store = Conversations::memory(Default::default());
        let first = begin(&store, r#"{"model":"m","input":"One?"}"#.into(), 0)
            .await
            .unwrap();
        assert_eq!(first.history.len(), 1);
        let served = Route::parse("openai/gpt-4o").unwrap();
        let answer = vec![
            json!({"id": "msg_1", "type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": "One."}]}),
        ];
        let kept = stored(
            "resp_1",
            &first.history,
            &first.origins,
            &served,
            answer,
            json!({}),
        );
        assert_eq!(kept.origins, vec![(1, "openai".to_string())]);
        store.put(&kept, 0).await.unwrap();
        let body = r#"{"model":"m","input":"Two?","previous_response_id":"resp_1"}"#;
        let second = begin(&store, body.into(), 1).await.unwrap();
        assert_eq!(second.history.len(), 3);
        assert_eq!(second.request.conversation.turns.len(), 3);
        let o = second.request.original.as_deref().unwrap();
        // The same provider gets its item with its id; another gets it without.
        let sent: Value = serde_json::from_slice(&o.for_provider("openai").bytes).unwrap();
        assert_eq!(sent["input"][1]["id"], "msg_1");
        let sent: Value = serde_json::from_slice(&o.for_provider("anthropic").bytes).unwrap();
        assert!(sent["input"][1].get("id").is_none());
        let body = r#"{"model":"m","input":"x","previous_response_id":"resp_none"}"#;
        assert!(
            matches!(begin(&store, body.into(), 1).await, Err(BeginError::NotFound(id)) if id == "resp_none")
        );
        assert!(matches!(
            begin(&store, "{}".into(), 1).await,
            Err(BeginError::Bad(_))
        ));
    }
}
