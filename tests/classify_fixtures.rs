//! Table tests of the classifier, driven by real provider bodies kept under `fixtures/`
//! (sources in fixtures/README.md). Every case states its dialect, status, headers,
//! raw body, the class it must get, and the retry hint where it carries one.

use poolctl::classify::classifier::classify;
use poolctl::classify::dialect::Dialect;
use poolctl::classify::failure::{Headers, UpstreamFailure};
use poolctl::core::vocab::{Class, Wire};
use poolctl::wire::{bad_success, BadSuccess};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FixtureFile {
    dialect: Dialect,
    wire: Wire,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    status: u16,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: String,
    class: Class,
    #[serde(default)]
    hint_ms: Option<u64>,
    #[allow(dead_code)]
    source: String,
}

/// What the wire hands the classifier for this response: a 2xx the wire can parse, with
/// no error the dialect reports inside it, is an answer; anything else is a failure
/// with its fields.
fn failure_of(dialect: Dialect, wire: Wire, case: &Case) -> Option<UpstreamFailure> {
    let headers = Headers::from_pairs(case.headers.clone());
    let raw = case.body.as_bytes();
    if !(200..300).contains(&case.status) {
        return Some(UpstreamFailure::from_response(case.status, headers, raw));
    }
    let parsed = match serde_json::from_slice::<serde_json::Value>(raw) {
        Err(e) => Err(BadSuccess::Malformed(e.to_string())),
        Ok(v) if poolctl::classify::in_band::error_in_success(dialect, &v).is_some() => {
            Err(BadSuccess::Failed(Box::new(
                poolctl::classify::in_band::error_in_success(dialect, &v).unwrap(),
            )))
        }
        Ok(v) => match wire {
            Wire::OpenAi => poolctl::wire::openai::parse_chat(&v).map(|_| ()),
            Wire::Anthropic => poolctl::wire::anthropic::parse_chat(&v).map(|_| ()),
            Wire::Gemini => poolctl::wire::gemini::parse_chat(&v).map(|_| ()),
            Wire::Responses => poolctl::wire::responses::parse_chat(&v).map(|_| ()),
        },
    };
    match parsed {
        Ok(()) => None,
        Err(bad) => Some(bad_success(case.status, headers, raw, bad)),
    }
}

#[test]
fn every_fixture_gets_its_class_and_hint() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut failures = Vec::new();
    let mut count = 0;
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "yaml"))
    {
        let text = std::fs::read_to_string(file).unwrap();
        let fx: FixtureFile =
            serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for case in &fx.cases {
            count += 1;
            let (class, hint) = match failure_of(fx.dialect, fx.wire, case) {
                None => (Class::Ok, None),
                Some(f) => {
                    let v = classify(fx.dialect, &f, 0);
                    (v.class, v.hint.map(|h| h.ms))
                }
            };
            if class != case.class || (case.hint_ms.is_some() && hint != case.hint_ms) {
                failures.push(format!(
                    "{}/{}: expected {} (hint {:?}), got {} (hint {:?})",
                    fx.dialect, case.name, case.class, case.hint_ms, class, hint
                ));
            }
        }
    }
    assert!(count >= 150, "only {count} fixture cases found");
    assert!(
        failures.is_empty(),
        "{} of {count} cases wrong:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Each dialect of issue 14 earns its table: in its own fixtures there are bodies the
/// generic (`openai`) rules classify wrongly, and the dialect classifies rightly. Prints
/// how many, per dialect.
#[test]
fn the_generic_rules_misread_every_newer_dialect() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let newer = [
        Dialect::Volcengine,
        Dialect::Minimax,
        Dialect::Qianfan,
        Dialect::Siliconflow,
        Dialect::Hunyuan,
        Dialect::Xai,
        Dialect::Together,
        Dialect::Fireworks,
    ];
    let mut report = Vec::new();
    for d in newer {
        let file = dir.join(format!("{d}.yaml"));
        let text = std::fs::read_to_string(&file).unwrap();
        let fx: FixtureFile = serde_yaml::from_str(&text).unwrap();
        assert_eq!(fx.dialect, d, "{}", file.display());
        let class_under = |dialect: Dialect, case: &Case| match failure_of(dialect, fx.wire, case) {
            None => Class::Ok,
            Some(f) => classify(dialect, &f, 0).class,
        };
        let misread: Vec<&str> = fx
            .cases
            .iter()
            .filter(|c| class_under(Dialect::Openai, c) != c.class)
            .map(|c| c.name.as_str())
            .collect();
        assert!(
            !misread.is_empty(),
            "{d}: the generic rules get every fixture right; the dialect adds nothing"
        );
        report.push(format!(
            "{d}: {} of {} fixtures misread by the generic rules",
            misread.len(),
            fx.cases.len()
        ));
    }
    println!("{}", report.join("\n"));
}
