//! The `poolctl` binary: parse, run, map the result to an exit code. Everything else
//! lives in the library.

use clap::Parser;
use poolctl::cli::{self, exit::Exit, out, Cli};
use std::process::ExitCode;

/// See Cargo.toml: small allocations on every gateway request.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A closed stdout pipe ends the process quietly, with the status a shell shows for a
/// tool killed by SIGPIPE (128 + 13), as `head` users expect.
const CLOSED_PIPE: u8 = 141;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut builder = match &cli.command {
        // The gateway's requests run on lanes with runtimes of their own
        // (`serve::listener`); this one only accepts connections, waits for signals and
        // runs background work.
        cli::Command::Serve(_) => {
            cli::serve::no_huge_pages();
            tokio::runtime::Builder::new_current_thread()
        }
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            out::warn(&format!("error: cannot start the async runtime: {e}"));
            return ExitCode::from(Exit::Usage.code());
        }
    };
    match runtime.block_on(cli::run(cli)) {
        Ok(exit) => ExitCode::from(exit.code()),
        // Every failure is one line on stderr and exit 2; a write to stderr never
        // panics (see `cli::out`), and a reader that went away gets silence.
        Err(e) => match e.downcast_ref::<out::OutputError>() {
            Some(o) if o.is_closed_pipe() => ExitCode::from(CLOSED_PIPE),
            _ => {
                out::warn(&format!("error: {e:#}"));
                ExitCode::from(Exit::Usage.code())
            }
        },
    }
}
