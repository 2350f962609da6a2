//! The command line: clap parsing and dispatch, one file per command. Commands turn
//! their arguments into library calls and hand data to `render`; exit codes live in
//! `exit`.

pub mod app;
pub mod args;
pub mod capacity;
pub mod chaos;
pub mod chaos_target;
pub mod check;
pub mod context;
pub mod exit;
pub mod health_cmds;
pub mod import;
pub mod look;
pub mod mock;
pub mod models;
pub mod out;
pub mod probe;
pub mod render;
pub mod render_chaos;
pub mod serve;
pub mod table;
pub mod walk;

pub use app::{run, Cli, Command};
