//! The README's "Try it" block, run as the script a newcomer pastes, 20 times in a row
//! in one clean temporary directory: it must work every time, with no race between the
//! mock writing its config and the first command reading it, and no health carried over
//! from one paste to the next.

use std::path::Path;
use std::process::Command;

const RUNS: usize = 20;

/// The ```sh block that follows the `<!-- try-it` marker in README.md.
fn try_it_block() -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let after = readme
        .split_once("<!-- try-it")
        .expect("README has a try-it marker")
        .1;
    let body = after
        .split_once("```sh\n")
        .expect("a sh block after the marker")
        .1;
    body.split_once("\n```")
        .expect("the block ends")
        .0
        .to_string()
}

#[test]
fn the_readme_try_it_block_works_every_time_it_is_pasted() {
    let block = try_it_block();
    assert!(block.contains("cargo run -q --release --"), "{block}");
    // The block as pasted, with the binary this test suite built instead of `cargo run`
    // (which would rebuild in release mode). A failing run still stops its mock.
    let script = format!(
        "set -euo pipefail\ntrap '[ -n \"${{MOCK:-}}\" ] && kill \"$MOCK\" 2>/dev/null || true' EXIT\n{}\n",
        block.replace(
            "cargo run -q --release --",
            &format!("'{}'", env!("CARGO_BIN_EXE_poolctl"))
        )
    );
    let tmp = tempfile::tempdir().unwrap();
    for run in 1..=RUNS {
        let out = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("TMPDIR", tmp.path())
            .env_remove("POOLCTL_CONFIG")
            .env_remove("COLUMNS")
            .output()
            .expect("bash runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "run {run} failed:\n{stdout}\n{stderr}"
        );
        assert!(
            stdout.contains("2 of 11 routes live"),
            "run {run}: probe\n{stdout}"
        );
        assert!(
            stdout.contains("outcome: success — served by dashscope/qwen-flash-2025-07-28"),
            "run {run}: walk\n{stdout}"
        );
        // Nine routes retired by this paste's walk, none skipped for an earlier paste.
        assert_eq!(
            stdout.matches("→ retired").count(),
            9,
            "run {run}: every dead route was called and retired\n{stdout}"
        );
        assert!(!stdout.contains("skip  dashscope"), "run {run}:\n{stdout}");
        // Each paste made its own directory holding its config and its store.
        let dirs: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        assert_eq!(dirs.len(), run, "run {run}: {dirs:?}");
        assert!(dirs
            .iter()
            .all(|d| d.join("pool.yaml").is_file() && d.join("state.db").is_file()));
    }
}
