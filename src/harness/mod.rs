//! The chaos harness: scenario files, loopback mock providers, and a runner that points
//! the production `Router` at the mocks on a virtual clock and compares what happened
//! with what the scenario expects. No second router, no test-only branches.

pub mod compare;
pub mod mock;
pub mod mock_call;
pub mod redis_server;
pub mod runner;
pub mod scenario;
pub mod stream_server;
pub mod suite;
pub mod suite_mock;
pub mod target;
pub mod target_config;
pub mod wire_bodies;
