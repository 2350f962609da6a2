//! The gateway's log output: `tracing` events as one line each on stderr, in the
//! format of `tracing_subscriber`'s default (`2026-12-01T12:43:53.140257Z  INFO request
//! method=POST path="/v1/chat/completions" … elapsed_us=165`), with every registered
//! key masked, written by a thread of its own.
//!
//! Why not the stock pieces: at thousands of requests a second the default field
//! visitor (ANSI styling of every field name even with colour off, `Debug` escaping one
//! character at a time) and the timestamp formatting were a tenth of the gateway's
//! instructions, and one `write(2)` per line on the request's own thread was a syscall
//! a request. The formatter here writes the same bytes with fast paths; the writer
//! hands each line to a buffer that a log thread empties in batches.
//!
//! The writer never drops a line: when its buffer is full (stderr stalled: a pipe no
//! one reads), a logging thread waits for room, as a blocking `write(2)` would have.
//! `flush` writes what is left; `poolctl serve` calls it before it exits.

use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::FormatFields;

/// How long the log thread gathers lines after the first of a batch: the longest a line
/// waits before it is written, and what bounds the writes to ~100 a second under load.
const GATHER: Duration = Duration::from_millis(10);
/// Past this many buffered bytes the log thread writes at once, without gathering.
const WRITE_AT: usize = 64 * 1024;
/// Past this many buffered bytes, a logging thread waits for the log thread to take them.
const CAP: usize = 4 * 1024 * 1024;

/// Installs the gateway's subscriber (info and above); a no-op when one is installed.
pub fn init() {
    if subscriber(|| SinkWriter).try_init().is_ok() {
        OURS.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The subscriber `init` installs, writing through `writer`.
fn subscriber<W>(
    writer: W,
) -> tracing_subscriber::fmt::SubscriberBuilder<
    Fields,
    tracing_subscriber::fmt::format::Format<tracing_subscriber::fmt::format::Full, Timestamp>,
    tracing_subscriber::filter::LevelFilter,
    W,
>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_writer(writer)
        .with_ansi(false)
        .with_target(false)
        .with_timer(Timestamp)
        .fmt_fields(Fields)
        .with_max_level(tracing::Level::INFO)
}

/// `init`'s subscriber is the process's: a request's line may be written here, without
/// going through `tracing`.
static OURS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// One request's log line: what `serve::ask` records of it.
pub(super) struct RequestLine<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub model: &'a str,
    pub workflow: &'a str,
    pub status: u16,
    pub outcome: &'a str,
    pub reason: &'a str,
    pub served_by: &'a str,
    pub attempts: &'a str,
    pub skipped: Option<&'a str>,
    pub dropped: Option<&'a str>,
    /// What the serving attempt's trace notes of an answer that is whole but not
    /// clean (stream events that could not be read).
    pub note: Option<&'a str>,
    pub prompt: Option<&'a str>,
    pub elapsed_us: u64,
}

/// Writes a request's line. With `init`'s subscriber installed, the line is formatted
/// here into the bytes that subscriber writes for the `tracing` event below (same
/// timestamp, level, field order, quoting and escaping: `direct_lines_are_the_tracing_
/// lines` checks it) and handed to the log thread, masked: dispatching the event and
/// visiting its fields one dynamic call at a time was a twelfth of a request's
/// instructions. Under any other subscriber, it is that event.
pub(super) fn request(l: &RequestLine<'_>) {
    if !OURS.load(std::sync::atomic::Ordering::Relaxed) {
        return request_event(l);
    }
    let mut line = String::with_capacity(256);
    #[allow(clippy::disallowed_methods)] // the log's wall clock, as `Timestamp` reads it
    let now = std::time::SystemTime::now();
    let since = now
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let _ = write_timestamp(&mut line, since.as_secs() as i64, since.subsec_micros());
    line.push_str("  INFO ");
    let _ = write_request_fields(&mut line, l);
    line.push('\n');
    sink().append(crate::core::secret::mask(&line).as_bytes());
}

fn request_event(l: &RequestLine<'_>) {
    tracing::info!(
        target: "poolctl::serve",
        method = %l.method,
        path = l.path,
        model = l.model,
        workflow = %l.workflow,
        status = l.status,
        outcome = l.outcome,
        reason = l.reason,
        served_by = %l.served_by,
        attempts = %l.attempts,
        skipped = l.skipped,
        dropped = l.dropped,
        note = l.note,
        prompt = l.prompt,
        elapsed_us = l.elapsed_us,
        "request"
    );
}

/// The fields of `request_event` as `Fields` writes them.
fn write_request_fields(w: &mut String, l: &RequestLine<'_>) -> fmt::Result {
    w.push_str("request method=");
    w.push_str(l.method);
    w.push_str(" path=");
    write_quoted(w, l.path)?;
    w.push_str(" model=");
    write_quoted(w, l.model)?;
    w.push_str(" workflow=");
    w.push_str(l.workflow);
    write!(w, " status={}", l.status)?;
    w.push_str(" outcome=");
    write_quoted(w, l.outcome)?;
    w.push_str(" reason=");
    write_quoted(w, l.reason)?;
    w.push_str(" served_by=");
    w.push_str(l.served_by);
    w.push_str(" attempts=");
    w.push_str(l.attempts);
    for (name, value) in [
        (" skipped=", l.skipped),
        (" dropped=", l.dropped),
        (" note=", l.note),
        (" prompt=", l.prompt),
    ] {
        if let Some(v) = value {
            w.push_str(name);
            write_quoted(w, v)?;
        }
    }
    write!(w, " elapsed_us={}", l.elapsed_us)
}

/// Writes every line logged so far to stderr, on this thread, before returning.
pub fn flush() {
    if let Some(sink) = SINK.get() {
        sink.flush_now();
    }
}

// --- the formatter -------------------------------------------------------------------

/// Field formatting identical to `tracing_subscriber`'s `DefaultFields` with colour off:
/// `message` bare (ANSI control characters escaped), `name="str"` quoted and escaped as
/// `Debug` does, `name=value` for numbers and `%`-recorded values.
#[derive(Default)]
pub struct Fields;

impl<'w> FormatFields<'w> for Fields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut v = Visitor {
            w: writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut v);
        v.result
    }
}

struct Visitor<'w> {
    w: Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl Visitor<'_> {
    /// The separator before this field, and its name; `false` when nothing is written.
    fn start(&mut self, field: &Field) -> bool {
        if self.result.is_err() {
            return false;
        }
        if !std::mem::take(&mut self.first) {
            self.result = self.w.write_char(' ');
        }
        let name = field.name();
        if name != "message" {
            let name = name.strip_prefix("r#").unwrap_or(name);
            self.result = self
                .result
                .and_then(|_| self.w.write_str(name))
                .and_then(|_| self.w.write_char('='));
        }
        self.result.is_ok()
    }
}

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if !self.start(field) {
            return;
        }
        self.result = if field.name() == "message" {
            write_escaping_ansi(&mut self.w, value)
        } else {
            write_quoted(&mut self.w, value)
        };
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.start(field) {
            self.result = write!(self.w, "{value}");
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.start(field) {
            self.result = write!(self.w, "{value}");
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if self.start(field) {
            self.result = self.w.write_str(if value { "true" } else { "false" });
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if !self.start(field) {
            return;
        }
        self.result = if field.name() == "message" {
            // A message is `format_args!`, whose Debug is its text.
            let mut esc = EscapingAnsi(&mut self.w);
            write!(esc, "{value:?}")
        } else {
            write!(self.w, "{value:?}")
        };
    }
}

/// `"value"` exactly as `{:?}` writes it, without its per-character work for the common
/// case of printable ASCII with nothing to escape.
fn write_quoted(w: &mut impl fmt::Write, s: &str) -> fmt::Result {
    if s.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        w.write_char('"')?;
        w.write_str(s)?;
        w.write_char('"')
    } else {
        write!(w, "{s:?}")
    }
}

fn write_escaping_ansi(w: &mut impl fmt::Write, s: &str) -> fmt::Result {
    if s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        w.write_str(s)
    } else {
        EscapingAnsi(w).write_str(s)
    }
}

/// Escapes what `tracing_subscriber` escapes in a message: the C0 controls a terminal
/// escape sequence is made of, DEL, and the C1 controls.
struct EscapingAnsi<'a, W: fmt::Write>(&'a mut W);

impl<W: fmt::Write> fmt::Write for EscapingAnsi<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for ch in s.chars() {
            match ch {
                '\x1b' => self.0.write_str("\\x1b")?,
                '\x07' => self.0.write_str("\\x07")?,
                '\x08' => self.0.write_str("\\x08")?,
                '\x0c' => self.0.write_str("\\x0c")?,
                '\x7f' => self.0.write_str("\\x7f")?,
                ch if (0x80..=0x9f).contains(&(ch as u32)) => {
                    write!(self.0, "\\u{{{:x}}}", ch as u32)?
                }
                _ => self.0.write_char(ch)?,
            }
        }
        Ok(())
    }
}

/// RFC 3339 UTC with microseconds, as `tracing_subscriber`'s `SystemTime` writes it; the
/// date and time of day are formatted once a second per thread.
pub struct Timestamp;

impl FormatTime for Timestamp {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        // A log timestamp is the wall clock by definition, never a routing input, so
        // this is the one read outside `clock.rs` (whose clock has milliseconds only).
        #[allow(clippy::disallowed_methods)]
        let now = std::time::SystemTime::now();
        let since = now
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        write_timestamp(w, since.as_secs() as i64, since.subsec_micros())
    }
}

thread_local! {
    static SECOND: std::cell::RefCell<(i64, String)> = const { std::cell::RefCell::new((i64::MIN, String::new())) };
}

fn write_timestamp(w: &mut impl fmt::Write, secs: i64, micros: u32) -> fmt::Result {
    SECOND.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != secs {
            cached.1.clear();
            match chrono::DateTime::from_timestamp(secs, 0) {
                Some(t) => write!(cached.1, "{}", t.format("%Y-%m-%dT%H:%M:%S"))?,
                None => write!(cached.1, "{secs}")?,
            }
            cached.0 = secs;
        }
        w.write_str(&cached.1)?;
        write!(w, ".{micros:06}Z")
    })
}

// --- the writer ----------------------------------------------------------------------

/// What `tracing_subscriber` writes each event through: it hands over the whole
/// formatted line in one `write_all`, so each call is masked as a whole.
struct SinkWriter;

impl std::io::Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // Always UTF-8 (tracing formats into a String); checked, since it is cheap.
        let text = match std::str::from_utf8(buf) {
            Ok(s) => std::borrow::Cow::Borrowed(s),
            Err(_) => String::from_utf8_lossy(buf),
        };
        sink().append(crate::core::secret::mask(&text).as_bytes());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

static SINK: OnceLock<Sink> = OnceLock::new();
static START: std::sync::Once = std::sync::Once::new();

fn sink() -> &'static Sink {
    let sink = SINK.get_or_init(Sink::default);
    START.call_once(|| {
        let started = std::thread::Builder::new()
            .name("poolctl-log".into())
            .spawn(move || sink.run());
        if started.is_err() {
            // No thread: every line is written by the thread that logs it.
            sink.inline
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    sink
}

#[derive(Default)]
struct Sink {
    state: Mutex<State>,
    /// The log thread waits on it for lines (and for `WRITE_AT` while gathering).
    work: Condvar,
    /// Logging threads wait on it for room under `CAP`.
    room: Condvar,
    /// Set when the log thread could not start.
    inline: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct State {
    buf: Vec<u8>,
    /// The log thread is waiting for a first line (and must be woken for it).
    idle: bool,
    /// The log thread is writing a batch it took out of `buf`.
    writing: bool,
}

impl Sink {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Each critical section only moves bytes: a panic cannot leave it half-done.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn append(&self, line: &[u8]) {
        if self.inline.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = std::io::stderr().lock().write_all(line);
            return;
        }
        let mut s = self.lock();
        while s.buf.len() >= CAP {
            s = self.room.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        let wake = (s.idle && s.buf.is_empty())
            || (s.buf.len() < WRITE_AT && s.buf.len() + line.len() >= WRITE_AT);
        s.buf.extend_from_slice(line);
        drop(s);
        if wake {
            self.work.notify_one();
        }
    }

    /// The log thread: wait for a first line, gather for `GATHER` (or until `WRITE_AT`),
    /// write the batch, again.
    fn run(&self) {
        let mut spare = Vec::new();
        loop {
            let mut s = self.lock();
            s.idle = true;
            while s.buf.is_empty() {
                s = self.work.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            s.idle = false;
            if s.buf.len() < WRITE_AT {
                s = self
                    .work
                    .wait_timeout(s, GATHER)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|p| p.into_inner().0);
            }
            std::mem::swap(&mut s.buf, &mut spare);
            s.writing = true;
            drop(s);
            self.room.notify_all();
            // Nowhere left to report a failed log write.
            let _ = std::io::stderr().lock().write_all(&spare);
            spare.clear();
            if spare.capacity() > CAP {
                spare = Vec::new();
            }
            let mut s = self.lock();
            s.writing = false;
            drop(s);
            self.room.notify_all();
        }
    }

    /// Writes what is buffered, after any batch the log thread is writing now.
    fn flush_now(&self) {
        let mut s = self.lock();
        while s.writing {
            s = self.room.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        let batch = std::mem::take(&mut s.buf);
        // Held while writing, so the log thread cannot write a later batch first.
        let _ = std::io::stderr().lock().write_all(&batch);
        drop(s);
        self.room.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_strings_match_debug_formatting() {
        for s in [
            "plain",
            "",
            "with \"quotes\"",
            "back\\slash",
            "tab\there",
            "new\nline",
            "ünïcödé",
            "\u{1b}[31mred",
            "'single'",
        ] {
            let mut out = String::new();
            write_quoted(&mut out, s).unwrap();
            assert_eq!(out, format!("{s:?}"), "for {s:?}");
        }
    }

    #[test]
    fn messages_escape_terminal_controls() {
        let mut out = String::new();
        write_escaping_ansi(&mut out, "a\u{1b}[2Jb\u{7f}\u{85}ok").unwrap();
        assert_eq!(out, "a\\x1b[2Jb\\x7f\\u{85}ok");
        let mut plain = String::new();
        write_escaping_ansi(&mut plain, "request").unwrap();
        assert_eq!(plain, "request");
    }

    /// A writer into a shared buffer, for a subscriber of the test's own.
    #[derive(Clone, Default)]
    struct Buffer(std::sync::Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn direct_lines_are_the_tracing_lines() {
        let line = |path, model, skipped, prompt| RequestLine {
            method: "POST",
            path,
            model,
            workflow: "support-answer",
            status: 200,
            outcome: "success",
            reason: "",
            served_by: "openai/gpt-4o-mini",
            attempts: "openai/gpt-4o-mini:ok:return,b/x:rate_limited:fallback",
            skipped,
            dropped: Some("seed,logit_bias"),
            note: None,
            prompt,
            elapsed_us: 1234,
        };
        let cases = [
            line("/v1/chat/completions", "bench", None, None),
            line(
                "/v1/x\"y\\z\n",
                "m\u{1b}[31m\t\u{85}é",
                Some("a/b:cooling"),
                Some("hi \"there\"\r\n"),
            ),
            RequestLine {
                method: "-",
                status: 499,
                served_by: "",
                attempts: "",
                dropped: None,
                ..line("-", "", None, None)
            },
            RequestLine {
                note: Some("2 stream event(s) could not be read and were skipped"),
                ..line("/v1/chat/completions", "bench", None, None)
            },
        ];
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let sub = subscriber(move || writer.clone()).finish();
        tracing::subscriber::with_default(sub, || cases.iter().for_each(request_event));
        let written = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = written.lines().collect();
        assert_eq!(lines.len(), cases.len());
        for (got, case) in lines.iter().zip(&cases) {
            let mut direct = String::from("  INFO ");
            write_request_fields(&mut direct, case).unwrap();
            // `2025-12-01T12:43:53.140257Z`, then the rest.
            assert_eq!(&got[27..], direct);
        }
    }

    #[test]
    fn timestamps_are_rfc3339_with_microseconds() {
        let mut a = String::new();
        write_timestamp(&mut a, 1_764_593_033, 140_257).unwrap();
        assert_eq!(a, "2025-12-01T12:43:53.140257Z");
        // Same second again: the cached prefix, a new fraction.
        let mut b = String::new();
        write_timestamp(&mut b, 1_764_593_033, 7).unwrap();
        assert_eq!(b, "2025-12-01T12:43:53.000007Z");
        let mut c = String::new();
        write_timestamp(&mut c, 1_764_593_034, 0).unwrap();
        assert_eq!(c, "2025-12-01T12:43:54.000000Z");
    }
}
