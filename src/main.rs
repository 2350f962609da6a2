//! The `poolctl` binary: parse, run, map the result to an exit code. Everything else
//! lives in the library.

use clap::Parser;
use poolctl::cli::{self, exit::Exit, Cli};
use std::process::ExitCode;

/// See Cargo.toml: small allocations on every gateway request.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(Exit::Usage.code());
        }
    };
    match runtime.block_on(cli::run(cli)) {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(Exit::Usage.code())
        }
    }
}
