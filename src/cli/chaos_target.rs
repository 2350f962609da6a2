//! `poolctl chaos PATH... --target URL | --target-exec CMD`: the scenarios against a
//! gateway outside this process. With `--target`, the gateway already points at a
//! running `poolctl mock PATH... --write-config` (named by `--mock`). With
//! `--target-exec`, poolctl starts the mocks itself, writes the gateway's config,
//! starts the gateway, waits for it to answer, runs the suite and stops it.

use super::exit::Exit;
use super::look::{Look, Tone};
use super::out;
use crate::core::secret::Secret;
use crate::harness::mock::MockServer;
use crate::harness::scenario::Scenario;
use crate::harness::suite_mock::{suite_routes, Naming};
use crate::harness::target::{
    missing_on_mock, reachable, run_suite, Tally, Target, TargetRun, Verdict, Wrong,
};
use crate::harness::target_config::{config_text, ConfigFormat, LITELLM_MASTER_KEY, MOCK_KEY_ENV};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What `chaos` needs to run against a target.
pub struct TargetArgs {
    pub url: Option<String>,
    pub exec: Option<String>,
    pub token: Option<String>,
    pub format: ConfigFormat,
    pub mock: Option<SocketAddr>,
    pub max_wait_ms: u64,
    pub start_timeout_ms: u64,
    pub json: bool,
    pub junit: Option<PathBuf>,
}

/// How long the target may take to answer its first probe (`--target`).
const REACH_TIMEOUT: Duration = Duration::from_secs(5);
/// After SIGTERM, how long a started gateway may take to stop before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

pub async fn run(
    args: TargetArgs,
    all: &[Scenario],
    selected: Vec<Scenario>,
    naming: Naming,
    look: &Look,
) -> anyhow::Result<Exit> {
    if let Some(why) = crate::harness::suite_mock::tag_collision(all) {
        out::warn(&format!("error: {why}"));
        return Ok(Exit::Usage);
    }
    if let Some(cmd) = &args.exec {
        if !cmd.contains("{port}") {
            out::warn("error: --target-exec needs `{port}` in its command: the gateway must listen on the port poolctl chooses");
            return Ok(Exit::Usage);
        }
    }
    if let Some(t) = &args.token {
        if reqwest::header::HeaderValue::from_str(&format!("Bearer {t}")).is_err() {
            out::warn("error: --target-token holds characters an HTTP header cannot carry");
            return Ok(Exit::Usage);
        }
    }
    let client = crate::wire::http_client();
    // A LiteLLM config this run writes asks for its own master key.
    let token = match (&args.token, &args.exec, args.format) {
        (Some(t), _, _) => Some(t.clone()),
        (None, Some(_), ConfigFormat::Litellm) => Some(LITELLM_MASTER_KEY.to_string()),
        _ => None,
    }
    .map(Secret::new);
    // `--target-exec`: our own mocks, config and gateway, stopped when this ends.
    let mut started: Option<Started> = None;
    let (url, mock) = match (&args.url, &args.exec) {
        (Some(url), None) => {
            let Some(mock) = args.mock else {
                out::warn("error: --target needs --mock ADDR: the `poolctl mock` the target's config points at (or use --target-exec)");
                return Ok(Exit::Usage);
            };
            match reachable(&client, url, token.as_ref(), REACH_TIMEOUT).await {
                Err(why) => {
                    out::warn(&format!("error: cannot reach the target at {url}: {why}"));
                    return Ok(Exit::Usage);
                }
                // Every scenario would fail the same way: say it once.
                Ok(status @ (401 | 403)) => {
                    out::warn(&format!(
                        "error: the target at {url} refused GET /v1/models with {status}: give its client token with --target-token (or $POOLCTL_TARGET_TOKEN)"
                    ));
                    return Ok(Exit::Usage);
                }
                Ok(_) => {}
            }
            if let Err(why) = reachable_mock(&client, mock).await {
                out::warn(&format!("error: {why}"));
                return Ok(Exit::Usage);
            }
            match missing_on_mock(&client, mock, &selected, naming).await {
                Ok(missing) if !missing.is_empty() => {
                    out::warn(&format!(
                        "error: the mock at {mock} does not serve {} of these scenarios' routes (first: {}); start `poolctl mock` on the same PATHs as chaos",
                        missing.len(),
                        missing[0]
                    ));
                    return Ok(Exit::Usage);
                }
                Ok(_) => {}
                Err(why) => {
                    out::warn(&format!("error: {why}"));
                    return Ok(Exit::Usage);
                }
            }
            (url.clone(), mock)
        }
        (None, Some(cmd)) => match start(cmd, &args, all, naming, &client, token.as_ref()).await {
            Ok(s) => {
                let url = s.url.clone();
                let mock = s.mock.addr();
                started = Some(s);
                (url, mock)
            }
            Err(e) => {
                out::warn(&format!("error: {e}"));
                return Ok(Exit::Usage);
            }
        },
        _ => unreachable!("clap requires exactly one of --target and --target-exec"),
    };
    let target = Target {
        url: url.clone(),
        token,
        format: args.format,
        mock,
        naming,
        max_wait_ms: args.max_wait_ms,
    };
    let progress = super::out::progress_bar(selected.len(), "{pos}/{len} scenarios", args.json);
    // Each scenario's verdict is printed as it ends: a suite against a slow gateway
    // takes minutes, and a CI log should show where it is.
    let json = args.json;
    let bump = |r: &TargetRun| {
        let text = if json {
            json_line(r)
        } else {
            render(std::slice::from_ref(r), look).trim_end().to_string()
        };
        match &progress {
            Some(bar) => {
                bar.suspend(|| out::line_live(&text));
                bar.inc(1);
                bar.set_message(r.name.clone());
            }
            None => out::line_live(&text),
        }
    };
    // Ctrl-C or SIGTERM stops the gateway this run started (it runs in its own process
    // group, so a terminal's Ctrl-C does not reach it) before the run ends.
    let runs = tokio::select! {
        runs = run_suite(&selected, &target, &bump) => runs,
        _ = super::mock::wait_for_stop() => {
            if let Some(bar) = &progress {
                bar.finish_and_clear();
            }
            if let Some(s) = started.take() {
                let log = s.stop().await;
                out::warn(&format!("interrupted: the gateway was stopped; its output: {}", log.display()));
            } else {
                out::warn("interrupted");
            }
            return Ok(Exit::Failed);
        }
    };
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let log = match started {
        Some(s) => Some(s.stop().await),
        None => None,
    };
    let tally = Tally::of(&runs);
    if args.json {
        out::line(&serde_json::json!({ "target": url, "tally": tally }).to_string())?;
    } else {
        out::line(&summary(&url, &tally, look))?;
    }
    if let Some(log) = &log {
        out::warn(&format!("the gateway's output: {}", log.display()));
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, junit(&runs))
            .map_err(|e| anyhow::anyhow!("cannot write JUnit report {}: {e}", path.display()))?;
    }
    Ok(if tally.failed == 0 {
        Exit::Ok
    } else {
        Exit::Failed
    })
}

async fn reachable_mock(client: &reqwest::Client, mock: SocketAddr) -> Result<(), String> {
    let url = format!("http://{mock}/calls");
    match client.get(&url).timeout(REACH_TIMEOUT).send().await {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(format!(
            "{mock} is not a `poolctl mock` (GET /calls answered {})",
            r.status()
        )),
        Err(e) => Err(format!("cannot reach the mock at {mock}: {e}")),
    }
}

/// A gateway this run started, with the mocks it points at.
struct Started {
    url: String,
    mock: MockServer,
    child: tokio::process::Child,
    log: PathBuf,
    /// Holds the config, the state and the log; kept (not deleted) so the log can be
    /// read after the run.
    _dir: PathBuf,
}

impl Started {
    /// Stops the gateway's whole process group, then the mocks.
    async fn stop(mut self) -> PathBuf {
        stop_group(&mut self.child).await;
        drop(self.mock);
        // The config and the state were only for this run; the log is named at the end.
        for name in ["state.db", "state.db-wal", "state.db-shm"] {
            let _ = std::fs::remove_file(self._dir.join(name));
        }
        self.log
    }
}

/// SIGTERM to the process group `child` leads (the shell and whatever it started),
/// then SIGKILL to the group if any of it is still there after `STOP_GRACE`: a gateway
/// that ignores SIGTERM, or a shell that did not `exec`, must not outlive the run.
async fn stop_group(child: &mut tokio::process::Child) {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{kill_process_group, test_kill_process_group, Pid, Signal};
        if let Some(pid) = child.id().and_then(|p| Pid::from_raw(p as i32)) {
            let _ = kill_process_group(pid, Signal::TERM);
            let sw = crate::core::clock::Stopwatch::start();
            while test_kill_process_group(pid).is_ok() && sw.elapsed() < STOP_GRACE {
                // Reap the shell as soon as it ends, or the group stays "alive" as a zombie.
                let _ = child.try_wait();
                crate::core::clock::real_sleep(Duration::from_millis(50)).await;
            }
            if test_kill_process_group(pid).is_ok() {
                let _ = kill_process_group(pid, Signal::KILL);
            }
        }
    }
    let _ = child.kill().await;
    let _ = child.wait().await;
}

/// Starts the mocks, writes the config, starts `cmd` and waits until it answers.
async fn start(
    cmd: &str,
    args: &TargetArgs,
    all: &[Scenario],
    naming: Naming,
    client: &reqwest::Client,
    token: Option<&Secret>,
) -> anyhow::Result<Started> {
    let dir = std::env::temp_dir().join(format!(
        "poolctl-target-{}-{}",
        std::process::id(),
        crate::core::clock::wall_now_ms()
    ));
    std::fs::create_dir_all(&dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    let clock: std::sync::Arc<dyn crate::core::clock::Clock> =
        std::sync::Arc::new(crate::core::clock::SystemClock);
    let routes = suite_routes(all, naming, &clock, crate::core::clock::wall_now_ms());
    let mock = MockServer::start(([127, 0, 0, 1], 0).into(), routes)
        .await
        .map_err(|e| anyhow::anyhow!("cannot start the mock providers: {e}"))?;
    let ext = match args.format {
        ConfigFormat::Portkey => "json",
        _ => "yaml",
    };
    let config = dir.join(format!("config.{ext}"));
    let state = dir.join("state.db");
    let text = config_text(args.format, all, mock.addr(), naming, Some(&state));
    std::fs::write(&config, text)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", config.display()))?;
    let port = free_port()?;
    let line = cmd
        .replace("{config}", &shell_quote(&config))
        .replace("{port}", &port.to_string());
    let log = dir.join("gateway.log");
    let out = std::fs::File::create(&log)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", log.display()))?;
    let err = out.try_clone()?;
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(&line)
        .env(MOCK_KEY_ENV, crate::harness::runner::MOCK_KEY)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    let mut child = command
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start `{line}`: {e}"))?;
    let url = format!("http://127.0.0.1:{port}");
    let sw = crate::core::clock::Stopwatch::start();
    let limit = Duration::from_millis(args.start_timeout_ms);
    out::warn(&format!("poolctl chaos: waiting for {url}, started as:"));
    for part in wrap_text(&line, 76) {
        out::warn(&format!("  {part}"));
    }
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            // The shell ended; anything it started in the group goes too.
            stop_group(&mut child).await;
            anyhow::bail!(
                "the gateway exited ({status}) before it answered; its output is in {}:\n{}",
                log.display(),
                tail(&log, 12)
            );
        }
        if reachable(client, &url, token, Duration::from_secs(1))
            .await
            .is_ok()
        {
            break;
        }
        if sw.elapsed() > limit {
            stop_group(&mut child).await;
            anyhow::bail!(
                "the gateway did not answer at {url} within {} (--start-timeout); its output is in {}:\n{}",
                crate::harness::target::secs(limit.as_millis() as u64),
                log.display(),
                tail(&log, 12)
            );
        }
        tokio::select! {
            _ = crate::core::clock::real_sleep(Duration::from_millis(200)) => {}
            _ = super::mock::wait_for_stop() => {
                stop_group(&mut child).await;
                anyhow::bail!("interrupted while the gateway started; it was stopped");
            }
        }
    }
    Ok(Started {
        url,
        mock,
        child,
        log,
        _dir: dir,
    })
}

/// One scenario's `--json` object: what the target run found (`verdict`, `checks`,
/// `skip`, `note`, `wall_ms`) and the keys of a local run's object that a target can
/// fill (spec/scenario-format.md: `passed`, `outcome` and `served_by` as the target
/// reported them for the last request, as a local run reports its last, `mismatches`
/// as `{field, expected, got}`), so a script reads either run the same way.
fn json_line(r: &TargetRun) -> String {
    let Ok(mut v) = serde_json::to_value(r) else {
        return String::new();
    };
    let last = r.checks.iter().map(|c| c.request).max().unwrap_or(0);
    let got = |field: &str| {
        r.checks
            .iter()
            .find(|c| c.request == last && c.field == field)
            .map(|c| c.got.clone())
            .filter(|g| !g.is_empty())
    };
    let mismatches: Vec<serde_json::Value> = r
        .failed()
        .map(|c| {
            serde_json::json!({
                "request": c.request,
                "field": c.field,
                "expected": c.expected,
                "got": c.got,
            })
        })
        .collect();
    if let Some(o) = v.as_object_mut() {
        o.insert("passed".into(), (r.verdict == Verdict::Pass).into());
        // A target that does not say its outcome is seen by its HTTP status alone,
        // which is no outcome word: null then, the status in `checks`.
        const OUTCOMES: &[&str] = &[
            "success",
            "degraded",
            "interrupted",
            "queued",
            "shed",
            "failed",
        ];
        let outcome = got("outcome").filter(|o| OUTCOMES.contains(&o.as_str()));
        o.insert("outcome".into(), outcome.into());
        o.insert("served_by".into(), got("served_by").into());
        o.insert("mismatches".into(), mismatches.into());
    }
    v.to_string()
}

/// A port free now on loopback (the gateway binds it a moment later).
fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| anyhow::anyhow!("cannot find a free port: {e}"))?;
    Ok(l.local_addr()?.port())
}

/// `path` as one word for `sh`.
/// Quoted only where it must be, so a command that quotes `"{config}"` itself still
/// gets the path.
fn shell_quote(path: &Path) -> String {
    let p = path.display().to_string();
    if p.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
    {
        p
    } else {
        format!("'{}'", p.replace('\'', "'\\''"))
    }
}

/// The last `n` lines of a file, for an error message (at most 64 KiB read).
fn tail(path: &Path, n: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| format!("  | {}", crate::core::clip::clip(l, 200)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One line per scenario; under a failure, each failed check, wrapped to the width.
pub fn render(runs: &[TargetRun], look: &Look) -> String {
    let mut s = String::new();
    let room = look.width.saturating_sub(6).max(20);
    for r in runs {
        let (word, tone) = match r.verdict {
            Verdict::Pass => ("PASS", Tone::Good),
            Verdict::Fail => ("FAIL", Tone::Fail),
            Verdict::Skip => ("SKIP", Tone::Warn),
        };
        s.push_str(&format!("{}  {}\n", look.paint(tone, word), r.name));
        let mut lines: Vec<String> = r.note.iter().cloned().collect();
        lines.extend(r.failed().map(failed_line));
        for line in lines {
            for part in wrap_text(&line, room) {
                s.push_str(&format!("      {part}\n"));
            }
        }
    }
    s
}

/// One failed check, as the text output and JUnit show it.
fn failed_line(c: &crate::harness::target::Check) -> String {
    format!(
        "#{} {}: expected {}, got {}",
        c.request + 1,
        c.field,
        c.expected,
        c.got
    )
}

/// `text` in lines of at most `room` characters, broken at spaces where it can be.
fn wrap_text(text: &str, room: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let mut word = word.to_string();
        while word.chars().count() > room {
            if !line.is_empty() {
                out.push(std::mem::take(&mut line));
            }
            let head: String = word.chars().take(room).collect();
            word = word.chars().skip(room).collect();
            out.push(head);
        }
        let extra = if line.is_empty() { 0 } else { 1 };
        if line.chars().count() + extra + word.chars().count() > room && !line.is_empty() {
            out.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() {
        out.push(line);
    }
    out
}

/// The closing tally, wrapped to the width.
pub fn summary(url: &str, t: &Tally, look: &Look) -> String {
    let wrong: Vec<String> = Wrong::ALL
        .iter()
        .filter_map(|w| {
            t.wrong
                .get(w.as_str())
                .map(|n| format!("{} {n}", w.as_str()))
        })
        .collect();
    let skipped: Vec<String> = t
        .skipped_by
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let mut first = format!(
        "target {url}: {} tried, {} passed, {} failed",
        t.tried, t.passed, t.failed
    );
    if !wrong.is_empty() {
        first.push_str(&format!(" ({})", wrong.join(", ")));
    }
    let mut second = format!("{} skipped", t.skipped);
    if !skipped.is_empty() {
        second.push_str(&format!(" ({})", skipped.join(", ")));
    }
    let third = format!(
        "{} checks not observable from outside, {} not comparable",
        t.not_observable_checks, t.not_comparable_checks
    );
    let room = look.width.max(40);
    let mut lines: Vec<String> = Vec::new();
    for l in [first, second, third] {
        lines.extend(wrap_text(&l, room));
    }
    let tone = if t.failed > 0 { Tone::Fail } else { Tone::Good };
    lines[0] = look.paint(tone, &lines[0]);
    lines.join("\n")
}

fn junit(runs: &[TargetRun]) -> String {
    // XML 1.0 has no form for most control characters: they are dropped, newlines kept.
    let esc = |s: &str| {
        s.chars()
            .filter(|c| !c.is_control() || *c == '\n')
            .collect::<String>()
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let failures = runs.iter().filter(|r| r.verdict == Verdict::Fail).count();
    let skipped = runs.iter().filter(|r| r.verdict == Verdict::Skip).count();
    let mut s = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"poolctl chaos --target\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\">\n",
        runs.len()
    );
    for r in runs {
        s.push_str(&format!(
            "  <testcase name=\"{}\" classname=\"{}\" time=\"{:.3}\">",
            esc(&r.name),
            esc(&r.file.display().to_string()),
            r.wall_ms / 1000.0
        ));
        match r.verdict {
            Verdict::Pass => {}
            Verdict::Skip => s.push_str(&format!(
                "<skipped message=\"{}\"/>",
                esc(r.note.as_deref().unwrap_or(""))
            )),
            Verdict::Fail => {
                let lines: Vec<String> = r
                    .note
                    .iter()
                    .cloned()
                    .chain(r.failed().map(failed_line))
                    .collect();
                s.push_str(&format!(
                    "<failure message=\"{}\">{}</failure>",
                    esc(lines.first().map(String::as_str).unwrap_or("failed")),
                    esc(&lines.join("\n"))
                ));
            }
        }
        s.push_str("</testcase>\n");
    }
    s.push_str("</testsuite>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_lines_fit_the_room_and_keep_every_word() {
        let text = "#1 served_by: expected azure-eu/gpt-4o, got none (the answer names model gpt-4o~azure-eu~a-very-long-scenario-name-that-goes-on)";
        let lines = wrap_text(text, 40);
        assert!(lines.iter().all(|l| l.chars().count() <= 40), "{lines:?}");
        assert_eq!(lines.join(" ").replace(' ', ""), text.replace(' ', ""));
    }

    #[test]
    fn the_summary_fits_80_columns() {
        let mut t = Tally {
            tried: 254,
            passed: 200,
            failed: 54,
            skipped: 66,
            ..Tally::default()
        };
        for (k, n) in [
            ("upstream calls", 30),
            ("outcome", 20),
            ("splice", 3),
            ("hang", 1),
        ] {
            t.wrong.insert(k, n);
        }
        for (k, n) in [
            ("concurrent copies", 9),
            ("not comparable", 10),
            ("over --max-wait", 22),
            ("own clock", 14),
            ("preset health", 11),
        ] {
            t.skipped_by.insert(k, n);
        }
        let text = summary("http://127.0.0.1:43627", &t, &Look::plain(80));
        assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
        assert!(text.contains("54 failed"));
    }
}
