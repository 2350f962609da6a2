//! Which API a scenario's client speaks (`ingress:`). With the Responses API, each
//! request is the scenario's `request:` written as a `POST /v1/responses` body
//! (`RequestShape::responses_body`), read back by the code the gateway reads a client's
//! with, so that chaos drives the same conversation handling (`previous_response_id`
//! re-sent whole) as `serve`.

use serde::Deserialize;

/// The API a scenario's requests enter on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ingress {
    /// Chat completions (the router's canonical request), as ever.
    #[default]
    Chat,
    /// OpenAI's Responses API: each request is a Responses body; `continue: true` sends
    /// the previous request's response id.
    Responses,
}

/// The prompt a Responses scenario sends when its `request:` gives no `input`.
pub const DEFAULT_INPUT: &str = "Reply with the single word OK.";
