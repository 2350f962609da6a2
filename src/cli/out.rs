//! Everything the CLI writes goes through here, for two reasons:
//! - a last `secret::mask` on the rendered text, so a key that reached a string by a
//!   path nobody foresaw is still never printed;
//! - write errors are values, not panics: `println!` panics on a full disk or a closed
//!   pipe (exit 101). Here a failed stdout write becomes `OutputError`, which `main`
//!   turns into a quiet exit (closed pipe) or one clear line and exit 2 (anything else).

use crate::core::secret::mask;
use std::io::{self, Write};
use std::sync::Mutex;

/// Stdout could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write to stdout: {0}")]
pub struct OutputError(pub io::Error);

impl OutputError {
    /// The reader went away (`| head -1`): a well-behaved tool just stops.
    pub fn is_closed_pipe(&self) -> bool {
        self.0.kind() == io::ErrorKind::BrokenPipe
    }
}

/// Set once a live write (one whose caller cannot return an error) has failed, so the
/// next checked write reports it instead of the command going on as if heard.
static LIVE_FAILURE: Mutex<Option<io::ErrorKind>> = Mutex::new(None);

fn live_failure() -> Option<io::ErrorKind> {
    *LIVE_FAILURE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes `text` to stdout, masked, and flushes it (so a full disk is found now, not
/// silently at exit).
pub fn print(text: &str) -> Result<(), OutputError> {
    let mut out = io::stdout().lock();
    out.write_all(mask(text).as_bytes())
        .and_then(|()| out.flush())
        .map_err(OutputError)
}

/// `print` with a newline.
pub fn line(text: &str) -> Result<(), OutputError> {
    let mut s = String::with_capacity(text.len() + 1);
    s.push_str(text);
    s.push('\n');
    print(&s)
}

/// A line from a callback that cannot return an error (`walk`'s live steps): a failure
/// is remembered, later live lines are dropped, and `line_checked` reports it.
pub fn line_live(text: &str) {
    if live_failure().is_some() {
        return;
    }
    if let Err(OutputError(e)) = line(text) {
        *LIVE_FAILURE.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.kind());
    }
}

/// `line`, failing as well when an earlier live write failed.
pub fn line_checked(text: &str) -> Result<(), OutputError> {
    match live_failure() {
        Some(kind) => Err(OutputError(io::Error::from(kind))),
        None => line(text),
    }
}

/// A line to stderr, masked. Errors are ignored: there is nowhere left to report them.
pub fn warn(text: &str) {
    let mut err = io::stderr().lock();
    let _ = err.write_all(mask(text).as_bytes());
    let _ = err.write_all(b"\n");
}

/// Progress on a terminal's stderr for long work (`chaos`, `probe`): `counter` is
/// indicatif's template for the count, e.g. `"{pos}/{len} scenarios"`. None for
/// `--json` or when stderr is a log, where a bar would only be noise.
pub fn progress_bar(len: usize, counter: &str, json: bool) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    (!json && io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(len as u64);
        let template = format!("{{spinner}} {counter} {{wide_msg}}");
        bar.set_style(indicatif::ProgressStyle::with_template(&template).expect("static template"));
        bar
    })
}
