//! poolctl: one router for chains of fallback LLM routes, and the tools to prove it
//! works. Data flows one way (see `../shared/design/architecture.md`):
//! config → router → wire → `UpstreamFailure` → `classify` → `decide` / `transition`
//! → health store and attempt records → outcome.

pub mod admission;
pub mod admission_queue;
pub mod answer;
pub mod breaker;
pub mod buckets;
pub mod budget;
pub mod capability;
pub mod capacity;
pub mod classify;
pub mod cli;
pub mod clock;
pub mod config;
pub mod conversation;
pub mod decide;
pub mod dialect;
pub mod embed_queue;
pub mod failure;
pub mod harness;
pub mod health;
pub mod hint;
pub mod in_band;
pub mod limits;
pub mod outcome;
pub mod policy;
pub mod probe;
pub mod problems;
pub mod request;
pub mod route;
pub mod router;
pub mod secret;
pub mod serve;
pub mod store;
pub mod trace;
pub mod validate;
pub mod vocab;
pub mod wire;
pub mod yaml;
