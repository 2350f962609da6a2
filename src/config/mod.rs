//! The pool config (`pool.yaml`, spec/cli.md): YAML loading with located errors
//! (`yaml`), every problem in a file at once (`problems`), one route's resolved spec
//! and the tier (`route`), and the config itself, parsed and validated once (`pool`);
//! the models the router already knows (`catalogue`), which `resolve` merges under a
//! config's `models:`.
//!
//! Imports: `core`, `classify`, `admission`, `policy`, `wire` (a route's endpoint).

pub mod catalogue;
pub mod litellm;
pub mod pool;
pub mod problems;
pub mod resolve;
pub mod route;
pub mod validate;
pub mod yaml;
