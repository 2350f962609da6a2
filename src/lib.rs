//! poolctl: one router for chains of fallback LLM routes, and the tools to prove it
//! works. Data flows one way (see `ARCHITECTURE.md`):
//! config → router → wire → `UpstreamFailure` → `classify` → `decide` / `transition`
//! → health store and attempt records → outcome.
//!
//! Each folder is one concern, ranked: a folder imports only folders of a lower rank
//! (`tests/architecture.rs` holds the ranks and checks them).

pub mod admission;
pub mod classify;
pub mod cli;
pub mod config;
pub mod core;
pub mod harness;
pub mod policy;
pub mod router;
pub mod serve;
pub mod store;
pub mod wire;
