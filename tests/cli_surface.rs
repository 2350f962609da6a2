//! The command line as a newcomer meets it (issue 13): usage errors exit 2 before any
//! work, typos get the nearest name or the list, every printing command has `--json`
//! with one document on one line, and the wording of common mistakes says what to do.
//! Routes point at a closed loopback port, so nothing leaves the machine.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const KEY_VAR: &str = "POOLCTL_SURFACE_KEY";

fn poolctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(args)
        .env(KEY_VAR, "sk-test")
        .env_remove("POOLCTL_CONFIG")
        .output()
        .expect("the poolctl binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A closed port: every call fails at once with a network error.
const CLOSED: &str = "http://127.0.0.1:9/v1";

fn config(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("pool.yaml");
    std::fs::write(&p, body).unwrap();
    p
}

fn two_tiers(dir: &Path) -> PathBuf {
    config(
        dir,
        &format!(
            "providers:\n  a:\n    wire: openai\n    dialect: openai\n    base_url: {CLOSED}\n    api_key_env: {KEY_VAR}\n\
             tiers:\n  fast:\n    - a/small\n  high:\n    - a/big\n    - a/small\n\
             policies:\n  support-answer:\n    tier: high\n"
        ),
    )
}

fn scenario_file() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/misworded-429-cools-not-retires.yaml")
        .display()
        .to_string()
}

#[test]
fn zero_counts_and_deadlines_are_usage_errors() {
    for (args, flag) in [
        (&["probe", "--concurrency", "0"][..], "--concurrency"),
        (&["probe", "--concurrency", "100000"][..], "--concurrency"),
        (&["probe", "--timeout-ms", "0"][..], "--timeout-ms"),
        (&["chaos", "scenarios/", "--jobs", "0"][..], "--jobs"),
    ] {
        let o = poolctl(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(flag), "{args:?}: {}", stderr(&o));
        assert!(stdout(&o).is_empty(), "{args:?} ran: {}", stdout(&o));
    }
}

#[test]
fn a_junit_path_in_a_missing_directory_fails_before_any_scenario_runs() {
    let o = poolctl(&[
        "chaos",
        &scenario_file(),
        "--junit",
        "/nonexistent-poolctl-dir/report.xml",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("/nonexistent-poolctl-dir does not exist"),
        "{}",
        stderr(&o)
    );
    assert!(stdout(&o).is_empty(), "scenarios ran: {}", stdout(&o));
}

#[test]
fn an_empty_scenario_directory_says_no_files_were_found() {
    let dir = tempfile::tempdir().unwrap();
    let o = poolctl(&["chaos", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("no scenario files"), "{err}");
    assert!(err.contains("found in"), "{err}");
    assert!(!err.contains("could not be loaded"), "{err}");
}

#[test]
fn a_text_file_given_to_chaos_is_told_what_a_scenario_contains() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("notes.yaml");
    std::fs::write(&f, "just some notes\n").unwrap();
    let o = poolctl(&["chaos", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(!err.contains("struct Scenario"), "{err}");
    assert!(err.contains("`name`, `chain`"), "{err}");
}

#[test]
fn filter_ignores_case() {
    let o = poolctl(&["chaos", &scenario_file(), "--filter", "MISWORDED"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("1 passed"), "{}", stdout(&o));
}

#[test]
fn a_missing_config_named_by_the_variable_does_not_suggest_setting_it() {
    let o = Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(["status"])
        .env("POOLCTL_CONFIG", "/nonexistent-poolctl/pool.yaml")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("from $POOLCTL_CONFIG"), "{err}");
    assert!(!err.contains("or set $POOLCTL_CONFIG"), "{err}");
}

#[test]
fn a_corrupt_state_file_is_named_once() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = two_tiers(dir.path());
    std::fs::create_dir_all(dir.path().join(".poolctl")).unwrap();
    std::fs::write(
        dir.path().join(".poolctl/state.db"),
        "not a database at all",
    )
    .unwrap();
    let o = poolctl(&["status", "--config", cfg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.matches("health store").count(), 1, "{err}");
}

#[test]
fn status_is_read_only_and_creates_no_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = two_tiers(dir.path());
    let o = poolctl(&["status", "--config", cfg.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["routes"].as_array().unwrap().len(), 2);
    assert!(!dir.path().join(".poolctl").exists());
}

#[test]
fn check_reports_one_unset_variable_once_and_trusts_an_anthropic_wire() {
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = String::from("providers:\n");
    for p in ["p1", "p2", "p3"] {
        yaml.push_str(&format!(
            "  {p}:\n    wire: openai\n    dialect: openai\n    base_url: {CLOSED}\n    api_key_env: POOLCTL_SURFACE_UNSET\n"
        ));
    }
    yaml.push_str(&format!(
        "  claude:\n    wire: anthropic\n    base_url: http://127.0.0.1:9\n    api_key_env: {KEY_VAR}\n"
    ));
    yaml.push_str("tiers:\n  t:\n    - p1/m\n    - p2/m\n    - p3/m\n    - claude/c\n");
    let cfg = config(dir.path(), &yaml);
    let o = poolctl(&["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let out = stdout(&o);
    assert_eq!(out.matches("POOLCTL_SURFACE_UNSET").count(), 1, "{out}");
    assert!(out.contains("`p1`, `p2`, `p3`"), "{out}");
    assert!(!out.contains("cannot be inferred"), "{out}");
}

#[test]
fn walk_names_the_nearest_workflow_and_lists_the_tiers() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = two_tiers(dir.path());
    let cfg = cfg.to_str().unwrap();
    let o = poolctl(&[
        "walk",
        "high",
        "--config",
        cfg,
        "--workflow",
        "support-anwser",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("did you mean `support-answer`?"),
        "{}",
        stderr(&o)
    );
    let o = poolctl(&["walk", "zzzzzz", "--config", cfg]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("the tiers are `fast`, `high`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn walk_warns_when_a_retired_route_is_not_in_the_tier() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = two_tiers(dir.path());
    let o = poolctl(&[
        "walk",
        "fast",
        "--config",
        cfg.to_str().unwrap(),
        "--retire",
        "a/big",
    ]);
    let err = stderr(&o);
    assert!(
        err.contains("warning: --retire a/big: the route is not in tier `fast`"),
        "{err}"
    );
}

#[test]
fn policy_is_a_listed_alias_of_workflow() {
    let o = poolctl(&["walk", "--help"]);
    let help = stdout(&o);
    assert!(help.contains("--workflow <NAME>"), "{help}");
    assert!(help.contains("[alias: --policy]"), "{help}");
}

#[test]
fn every_printing_command_has_json_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = two_tiers(dir.path());
    let cfg = cfg.to_str().unwrap();
    let runs: Vec<Vec<&str>> = vec![
        vec!["retire", "a/big", "--reason", "incident 7", "--json"],
        vec!["status", "--json"],
        vec!["restore", "a/big", "--json"],
        vec!["probe", "--json", "--timeout-ms", "2000"],
        vec!["walk", "fast", "--json"],
        vec!["check", "--json"],
    ];
    for args in runs {
        let mut all = args.clone();
        all.extend(["--config", cfg]);
        let o = poolctl(&all);
        let out = stdout(&o);
        assert_eq!(out.lines().count(), 1, "{args:?}: {out}{}", stderr(&o));
        let v: Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"));
        if args[0] == "retire" {
            assert_eq!(v["route"], "a/big");
            assert_eq!(v["state"], "retired");
            assert_eq!(v["reason"], "incident 7");
            assert_eq!(v["was"]["state"], "ready");
        }
        if args[0] == "restore" {
            assert_eq!(v["state"], "ready");
            assert_eq!(v["was"]["state"], "retired");
            assert_eq!(v["was"]["reason"], "incident 7");
        }
    }
}

#[test]
fn tiers_and_routes_are_listed_in_config_order_which_is_chain_order() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &format!(
            "providers:\n  zed:\n    dialect: openai\n    base_url: {CLOSED}\n    api_key_env: {KEY_VAR}\n  acme:\n    dialect: openai\n    base_url: {CLOSED}\n    api_key_env: {KEY_VAR}\n\
             tiers:\n  zulu:\n    - zed/primary\n    - acme/backup\n  alpha:\n    - acme/only\n"
        ),
    );
    let cfg = cfg.to_str().unwrap();
    let o = poolctl(&["status", "--json", "--config", cfg]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let routes: Vec<&str> = v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["route"].as_str().unwrap())
        .collect();
    assert_eq!(routes, ["zed/primary", "acme/backup", "acme/only"]);
    let o = poolctl(&["probe", "--json", "--timeout-ms", "2000", "--config", cfg]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let tiers: Vec<&str> = v["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tier"].as_str().unwrap())
        .collect();
    assert_eq!(tiers, ["zulu", "alpha"]);
    let first: Vec<&str> = v["tiers"][0]["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["route"].as_str().unwrap())
        .collect();
    assert_eq!(first, ["zed/primary", "acme/backup"]);
    let o = poolctl(&["walk", "nope", "--config", cfg]);
    assert!(
        stderr(&o).contains("the tiers are `zulu`, `alpha`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn colour_only_when_asked_for_when_piped() {
    let file = scenario_file();
    let piped = poolctl(&["chaos", &file]);
    assert!(!stdout(&piped).contains('\x1b'), "{}", stdout(&piped));
    let forced = poolctl(&["chaos", &file, "--color", "always"]);
    assert!(
        stdout(&forced).contains("\x1b[32mPASS\x1b[0m"),
        "{:?}",
        stdout(&forced)
    );
    let never = poolctl(&["chaos", &file, "--color", "never"]);
    assert!(!stdout(&never).contains('\x1b'));
    assert_eq!(
        poolctl(&["chaos", &file, "--color", "sometimes"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn piped_output_uses_columns_or_the_default_width_never_the_widest_cell() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    // A few lines a scenario (its row, each request's attempts): the bound grows with
    // the suite, so adding scenarios never trips it, but a layout that wraps every
    // cell onto lines of its own does.
    let scenarios = std::fs::read_dir(&dir).unwrap().count();
    for (columns, width) in [(None, 100), (Some("80"), 80), (Some("0"), 100)] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_poolctl"));
        cmd.args(["chaos", dir.to_str().unwrap()]);
        match columns {
            Some(c) => cmd.env("COLUMNS", c),
            None => cmd.env_remove("COLUMNS"),
        };
        let o = cmd.output().unwrap();
        let out = stdout(&o);
        let widest = out.lines().map(|l| l.chars().count()).max().unwrap();
        assert!(widest <= width, "COLUMNS={columns:?}: {widest} > {width}");
        assert!(
            out.lines().count() < 4 * scenarios,
            "COLUMNS={columns:?}: {} lines for {scenarios} scenarios",
            out.lines().count()
        );
    }
}

#[test]
fn help_of_every_command_fits_80_columns_even_when_columns_is_wider() {
    let commands = [
        "", "chaos", "probe", "walk", "retire", "restore", "status", "mock", "check", "capacity",
        "serve",
    ];
    for columns in [None, Some("200")] {
        for command in commands {
            for flag in ["-h", "--help"] {
                let mut cmd = Command::new(env!("CARGO_BIN_EXE_poolctl"));
                cmd.args([command, flag].iter().filter(|a| !a.is_empty()));
                match columns {
                    Some(c) => cmd.env("COLUMNS", c),
                    None => cmd.env_remove("COLUMNS"),
                };
                let o = cmd.output().unwrap();
                assert_eq!(o.status.code(), Some(0), "{command} {flag}");
                let out = stdout(&o);
                assert!(out.contains("Usage:"), "{command} {flag}: {out}");
                for line in out.lines() {
                    assert!(
                        line.chars().count() <= 80,
                        "`poolctl {command} {flag}` (COLUMNS={columns:?}) has a line of {}: {line}",
                        line.chars().count()
                    );
                }
            }
        }
    }
}

#[test]
fn probe_lists_a_tier_named_twice_once_in_the_order_first_named() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = two_tiers(dir.path());
    let cfg = cfg.to_str().unwrap();
    let o = poolctl(&[
        "probe",
        "--json",
        "--timeout-ms",
        "2000",
        "--config",
        cfg,
        "--tier",
        "high",
        "--tier",
        "fast",
        "--tier",
        "high",
    ]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let tiers: Vec<&str> = v["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tier"].as_str().unwrap())
        .collect();
    assert_eq!(tiers, ["high", "fast"], "{v}");
}

#[test]
fn serve_listens_on_a_host_name_and_port_and_refuses_an_address_without_a_port() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let cfg = two_tiers(dir.path());
    let cfg = cfg.to_str().unwrap();
    let o = poolctl(&["serve", "--config", cfg, "--listen", "localhost"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("HOST:PORT"), "{}", stderr(&o));
    let mut child = Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(["serve", "--config", cfg, "--listen", "localhost:0"])
        .env(KEY_VAR, "sk-test")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        first.starts_with("poolctl serve: listening on http://127.0.0.1:"),
        "{first}"
    );
}

/// Issue 21: at 80 columns `status` printed its note on admission buckets as one line of
/// 108 characters, which the terminal broke mid-word ("running g" / "ateway's"). Every
/// line now fits, and every word of the output is whole on one line.
#[test]
fn status_at_80_columns_fits_and_never_breaks_a_word() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &format!(
            "providers:\n  a:\n    wire: openai\n    dialect: openai\n    base_url: {CLOSED}\n    api_key_env: {KEY_VAR}\n\
             tiers:\n  high:\n    - a/gpt-4o-2024-08-06\n    - a/small\n\
             limits:\n  a: {{ rpm: 5000, tpm: 2000000 }}\n  a/gpt-4o-2024-08-06: {{ rpm: 1000, tpm: 1000000 }}\n"
        ),
    );
    let cfg = cfg.to_str().unwrap();
    let reason = "incident 42: the provider's free tier ran out during the launch; restore once billing is fixed";
    let o = poolctl(&[
        "retire",
        "a/gpt-4o-2024-08-06",
        "--reason",
        reason,
        "--config",
        cfg,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = Command::new(env!("CARGO_BIN_EXE_poolctl"))
        .args(["status", "--config", cfg])
        .env(KEY_VAR, "sk-test")
        .env("COLUMNS", "80")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for line in out.lines() {
        assert!(
            line.chars().count() <= 80,
            "{} columns: {line}\n{out}",
            line.chars().count()
        );
    }
    // Every word of the note is whole on some line: none was split across two.
    let words: Vec<&str> = out.split_whitespace().collect();
    for word in "admission buckets are per process: these are a new process's (full); a running gateway's are on its /metrics".split(' ') {
        assert!(words.contains(&word), "`{word}` is broken:\n{out}");
    }
    // A bucket's level is one item: wrapped between buckets, never inside one.
    assert!(
        out.lines().any(|l| l.contains("a tpm 1800000/1800000")),
        "{out}"
    );
}
