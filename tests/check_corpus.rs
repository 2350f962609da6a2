//! `poolctl check --json` on every config of the bad-config corpus (`tests/bad-configs/`):
//! always one JSON document on stdout, every problem listed (file, line, field, message,
//! suggestion) — exactly the ones each file's header names — and exit 1 for problems in
//! valid YAML, 2 only when the file is not YAML or cannot be read.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad-configs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "the corpus is there: {files:?}");
    files
}

/// The header's `# exit: N` and `# problem: FIELD` lines.
fn expected(file: &Path) -> (i32, BTreeSet<String>) {
    let text = std::fs::read_to_string(file).unwrap();
    let mut exit = None;
    let mut fields = BTreeSet::new();
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("# exit:") {
            exit = Some(n.trim().parse().unwrap());
        } else if let Some(f) = line.strip_prefix("# problem:") {
            fields.insert(f.trim().to_string());
        }
    }
    (exit.expect("an exit line"), fields)
}

fn check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .arg("check")
        .args(args)
        .env("POOLCTL_BAD_KEY", "sk-corpus")
        .env_remove("POOLCTL_BAD_UNSET")
        .output()
        .unwrap()
}

fn one_document(o: &Output, what: &str) -> Value {
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.lines().count(), 1, "{what}: one line of JSON:\n{out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{what}: not JSON ({e}):\n{out}"))
}

#[test]
fn check_json_reports_every_problem_of_every_bad_config() {
    for file in corpus() {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let (exit, want) = expected(&file);
        let o = check(&["--json", "--config", file.to_str().unwrap()]);
        assert_eq!(
            o.status.code(),
            Some(exit),
            "{name}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        let v = one_document(&o, &name);
        assert_eq!(v["ok"], false, "{name}");
        assert_eq!(v["file"], file.to_str().unwrap(), "{name}");
        let errors = v["errors"].as_array().expect("errors");
        let got: BTreeSet<String> = errors
            .iter()
            .map(|e| e["field"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(got, want, "{name}: {errors:#?}");
        assert_eq!(got.len(), errors.len(), "{name}: one entry per problem");
        for e in errors {
            for key in ["file", "line", "field", "message", "suggestion"] {
                assert!(e.get(key).is_some(), "{name}: `{key}` in {e}");
            }
            assert!(!e["message"].as_str().unwrap().is_empty(), "{name}: {e}");
            // Every problem in a readable file points at a line of it, but a field that
            // is not there at all.
            let missing = e["message"].as_str().unwrap().starts_with("missing field");
            if exit == 1 && !e["field"].as_str().unwrap().is_empty() && !missing {
                assert!(e["line"].as_u64().is_some(), "{name}: a line for {e}");
            }
        }
        assert!(v["warnings"].is_array(), "{name}");
        // The same problems as text, one per line, each with its line number.
        let o = check(&["--config", file.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(exit), "{name}");
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            text.lines().filter(|l| l.starts_with("error: ")).count(),
            want.len().max(1),
            "{name}:\n{text}"
        );
    }
}

#[test]
fn problems_name_their_line_and_the_nearest_name() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad-configs/three-typos.yaml");
    let v = one_document(
        &check(&["--json", "--config", file.to_str().unwrap()]),
        "typos",
    );
    let by_field = |f: &str| {
        v["errors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["field"] == f)
            .cloned()
            .unwrap_or_else(|| panic!("{f} in {v}"))
    };
    let text = std::fs::read_to_string(&file).unwrap();
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let e = by_field("providers.openai.timout_ms");
    assert_eq!(e["line"], line_of("timout_ms:"));
    assert_eq!(e["suggestion"], "timeout_ms");
    let e = by_field("providers.openai.bas_url");
    assert_eq!(e["line"], line_of("bas_url:"));
    assert_eq!(e["suggestion"], "base_url");
    let e = by_field("policies.support.max_total_atempts");
    assert_eq!(e["line"], line_of("max_total_atempts:"));
    assert_eq!(e["suggestion"], "max_total_attempts");
}

#[test]
fn a_config_that_cannot_be_read_is_still_one_json_document_and_exit_2() {
    let o = check(&["--json", "--config", "/nonexistent-poolctl/pool.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    let v = one_document(&o, "missing");
    assert_eq!(v["ok"], false);
    assert_eq!(v["errors"].as_array().unwrap().len(), 1, "{v}");
}

#[test]
fn a_valid_config_is_ok_with_its_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pool.yaml");
    std::fs::write(
        &file,
        "providers:\n  a:\n    base_url: https://a.example.com/v1\n    api_key_env: POOLCTL_BAD_KEY\n  unused:\n    base_url: https://api.openai.com/v1\n    api_key_env: POOLCTL_BAD_KEY\ntiers:\n  t: [a/m]\n",
    )
    .unwrap();
    let o = check(&["--json", "--config", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let v = one_document(&o, "valid");
    assert_eq!(v["ok"], true);
    assert_eq!(v["errors"], serde_json::json!([]));
    let warnings: Vec<String> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["message"].as_str().unwrap().to_string())
        .collect();
    assert!(
        warnings.iter().any(|w| w.contains("cannot be inferred")),
        "{warnings:?}"
    );
    assert!(
        warnings.iter().any(|w| w.contains("used by no tier")),
        "{warnings:?}"
    );
}
