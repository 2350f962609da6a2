//! The vocabulary the whole crate shares: classes, actions, health and outcome words
//! (`vocab`), the request and its answer, the canonical conversation, the trace of
//! attempts, the clock, secrets, and the ranges a configured value may take.
//!
//! Imports: nothing of this crate outside `core`. Every other folder may import it.

pub mod answer;
pub mod clip;
pub mod clock;
pub mod conversation;
pub mod key_guard;
pub mod limits;
pub mod outcome;
pub mod request;
pub mod secret;
pub mod suggest;
pub mod trace;
pub mod vocab;
