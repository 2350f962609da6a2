//! What the router decides after reading an attempt, as pure functions: policy cards
//! (`card`) and the one recovery budget they bound (`budget`), the decision table
//! (`decide`), a route's next health (`health`) and its breaker (`breaker`), what a
//! model can serve (`capability`) and whether a structured answer is valid
//! (`validate`).
//!
//! Imports: `core`, `classify`, `admission`.

pub mod breaker;
pub mod budget;
pub mod capability;
pub mod card;
pub mod decide;
pub mod health;
pub mod validate;
