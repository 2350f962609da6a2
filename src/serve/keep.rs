//! What the gateway keeps of a Responses API answer: the conversation up to it, under
//! the response's id, when the client asked it kept (`store`, default true). Shared by
//! whole answers (`responses`) and streams (`stream`).

use super::ask::Ask;
use super::ingress::Turn;
use crate::core::clock::wall_now_ms;
use crate::core::vocab::Route;
use crate::router::conversation;
use crate::store::conversations::PutError;
use serde_json::Value;

/// Stores the conversation up to this answer when the client asked it kept: the history,
/// then `output` (marked as the serving provider's own). Whether it was kept: a
/// conversation over `responses_max_bytes`, or a store that failed, is not, and the
/// answer says `store: false`. `response` is the response object as the client sees it.
pub(super) async fn keep(
    ask: &Ask,
    turn: &Turn,
    served: Option<&Route>,
    output: Vec<Value>,
    response: Value,
) -> bool {
    if !turn.store {
        return false;
    }
    let Some(served) = served else {
        return false;
    };
    let stored = conversation::stored(
        &turn.id,
        &turn.history,
        &turn.origins,
        served,
        output,
        response,
    );
    // What an upstream echoed of its key reached the client masked: so must it reach
    // the store, or the next turn would hand one provider's key to another. Keys never
    // hold a character JSON escapes, so the text is masked whole.
    let Ok(text) = serde_json::to_string(&stored) else {
        return false;
    };
    let clean = ask.gw.mask(&text);
    match ask
        .gw
        .conversations
        .put_text(&turn.id, clean, wall_now_ms())
        .await
    {
        Ok(()) => true,
        Err(e @ PutError::TooLarge { .. }) => {
            tracing::warn!(target: "poolctl::serve", id = %turn.id, "response not kept: {e}");
            false
        }
        Err(PutError::Store(e)) => {
            let e = ask.gw.mask(&e.to_string());
            tracing::warn!(target: "poolctl::serve", id = %turn.id, "response not kept: {e}");
            false
        }
    }
}
