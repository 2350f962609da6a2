//! Wires: how to talk to a provider. Each wire module builds correct requests and
//! parses successes; failures of every wire become one `UpstreamFailure`. Wires never
//! decide anything, and never retry: the router is the only retry layer.
//!
//! Imports: `core`, `classify`. This module only declares the files and names the
//! face the router and the gateway call; the code is in the files below.

pub mod anthropic;
pub mod call;
pub mod carry;
pub mod codec;
pub mod endpoint;
pub mod gemini;
pub mod held;
pub mod http;
pub mod openai;
pub mod passthrough;
pub mod rerank;
pub mod responses;
pub mod sse;
pub mod stream;
pub mod stream_event;
pub mod stream_limits;

pub use call::{carry_embed, chat, embed, rerank, ChatSuccess, EmbedSuccess, RerankSuccess};
pub use carry::{carry, Cannot};
pub use codec::{bad_success, BadSuccess};
pub use endpoint::{
    Endpoint, DEFAULT_FIRST_TOKEN_TIMEOUT_MS, DEFAULT_STREAM_IDLE_MS, DEFAULT_TIMEOUT_MS,
};
pub use http::http_client;
