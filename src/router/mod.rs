//! The router: the only loop, and the only retry layer. `Router::call` takes a request
//! of any path and walks a tier: [`selection`] passes over routes that are cooling,
//! retired, unapproved, incapable or behind an open breaker; the wire makes the call;
//! [`settlement`] asks `classify`, `decide` and `transition` — pure functions — and
//! records the attempt; [`group`] orders the members of a group step for one request.
//! The async loop here only calls the wire and sleeps between
//! attempts. `Router` is `Send + Sync` and cheap to clone: every request through one
//! router shares its store (health and breakers) and session affinities.
//!
//! Imports: every room below it (core, classify, wire, admission, policy, store,
//! config).

mod admit;
mod call;
mod selection;
mod settlement;
mod snapshot;
mod state;

pub mod conversation;
pub mod embed_queue;
pub mod group;
pub mod probe;

pub use admit::NEVER_ADMITTED;
pub use settlement::Observed;
pub use state::{CallOptions, Called, Router};
