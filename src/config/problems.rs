//! Every problem in a YAML file in one pass, not just the first. serde stops at the
//! first bad field, so this parses the file's YAML tree again and again, each time
//! without the field that failed (or with a stand-in for a missing one), until the rest
//! parses. `poolctl check` then validates what is left, and reports it all at once.

use crate::config::yaml::{render_path, strip_location, suggestion, YamlError};
use serde::de::DeserializeOwned;
use serde_path_to_error::Segment;
use serde_yaml::{Mapping, Value};
use std::path::Path;

/// A file past this many problems is not a file with typos; stop there.
const MAX_PROBLEMS: usize = 100;
/// The most text all passes together parse (a few KiB config gets every pass it needs).
const PARSE_BUDGET_BYTES: usize = 64 * 1024 * 1024;

/// What parsing found: the value parsed from what was left (None when nothing usable
/// was), every problem, and the fields that only parsed with a stand-in value, so a
/// later check does not report them a second time.
#[derive(Debug)]
pub struct Parsed<T> {
    pub value: Option<T>,
    pub problems: Vec<YamlError>,
    pub stand_ins: Vec<String>,
}

/// Parses `text` (the contents of `file`) into `T`, collecting every field error.
/// `Err` only when the text is not YAML at all.
pub fn parse_all<T: DeserializeOwned>(file: &Path, text: &str) -> Result<Parsed<T>, YamlError> {
    // The limits every load holds, checked before the parser sees the text.
    if let Some(line) = crate::config::yaml::too_deep(text, crate::config::yaml::MAX_DEPTH) {
        return Err(YamlError {
            line: Some(line),
            ..YamlError::new(
                file,
                format!(
                    "nesting deeper than {} levels (the limit)",
                    crate::config::yaml::MAX_DEPTH
                ),
            )
        });
    }
    // Each pass parses the whole tree again: bound the bytes parsed in all, so a huge
    // file full of errors costs a few passes, not hundreds.
    let passes = (PARSE_BUDGET_BYTES / text.len().max(1)).clamp(4, MAX_PROBLEMS * 4);
    let (mut tree, huge) = crate::config::yaml::tree(text).map_err(|e| {
        let loc = e.location();
        YamlError {
            file: file.to_path_buf(),
            line: loc.as_ref().map(|l| l.line()),
            column: loc.as_ref().map(|l| l.column()),
            field: String::new(),
            message: format!("not valid YAML: {}", strip_location(&e.to_string())),
        }
    })?;
    let mut problems: Vec<YamlError> = Vec::new();
    let mut stand_ins: Vec<String> = Vec::new();
    // Sequence elements removed so far, so a later error's index maps back to the file.
    let mut removed: Vec<(Vec<Segment>, usize)> = Vec::new();
    // The fields that typos were nearest to (`statsu` → `items[1].status`).
    let mut typos: Vec<String> = Vec::new();
    if tree.is_null() {
        problems.push(YamlError::new(file, "the file is empty"));
        return Ok(Parsed {
            value: None,
            problems,
            stand_ins,
        });
    }
    for _ in 0..passes {
        let err = match serde_path_to_error::deserialize::<_, T>(tree.clone()) {
            Ok(value) => {
                return Ok(Parsed {
                    value: Some(value),
                    problems,
                    stand_ins,
                })
            }
            Err(e) => e,
        };
        let segments: Vec<Segment> = err.path().iter().cloned().collect();
        let message = strip_location(&err.into_inner().to_string());
        let in_file = original_path(&segments, &removed);
        let field = render_path(&in_file);
        let missing = message
            .strip_prefix("missing field `")
            .and_then(|r| r.split_once('`'))
            .map(|(f, _)| f.to_string());
        let unknown = message
            .strip_prefix("unknown field `")
            .and_then(|r| r.split_once('`'))
            .map(|(f, _)| f.to_string());

        // Where the bad field sits: an unknown field names the map it is in, and serde
        // may or may not have pushed the field onto the path.
        let (target, report_path) = match &unknown {
            Some(f) => {
                let mut map = segments.clone();
                if matches!(map.last(), Some(Segment::Map { key }) if key == f) {
                    map.pop();
                }
                let mut at = original_path(&map, &removed);
                at.push(Segment::Map { key: f.clone() });
                (Fix::RemoveKey(map, f.clone()), at)
            }
            None => match &missing {
                Some(f) => {
                    let mut at = in_file.clone();
                    at.push(Segment::Map { key: f.clone() });
                    (Fix::StandIn(segments.clone(), f.clone()), at)
                }
                None => match segments.split_last() {
                    // A stand-in of the wrong type: try the next kind.
                    Some((Segment::Map { key }, map)) if stand_ins.contains(&field) => {
                        (Fix::StandIn(map.to_vec(), key.clone()), in_file.clone())
                    }
                    _ => (Fix::Remove(segments.clone()), in_file.clone()),
                },
            },
        };
        let report_field = render_path(&report_path);
        // A field missing because its typo was taken away is the typo's problem.
        let explained = missing.is_some() && typos.contains(&report_field);
        let already = explained
            || problems.iter().any(|p| p.field == report_field)
            || stand_ins.contains(&report_field);
        if !already {
            let mut message = message.clone();
            if let Some(hint) = suggestion(&message) {
                message.push_str(&format!("; did you mean `{hint}`?"));
                if unknown.is_some() {
                    let mut meant = report_path.clone();
                    meant.pop();
                    meant.push(Segment::Map { key: hint });
                    typos.push(render_path(&meant));
                }
            }
            let line = locate(text, &report_path);
            // A float only because the integer written there was too large for the tree:
            // said as what it is.
            let widened = message.starts_with("invalid type: floating point");
            if let Some(h) = huge.iter().find(|h| widened && Some(h.line) == line) {
                message = h.message();
            }
            problems.push(YamlError {
                file: file.to_path_buf(),
                line,
                column: None,
                field: if report_field.is_empty() {
                    field.clone()
                } else {
                    report_field.clone()
                },
                message,
            });
        }
        if problems.len() >= MAX_PROBLEMS {
            break;
        }
        let progressed = match target {
            Fix::RemoveKey(map, key) => remove_key(&mut tree, &map, &key),
            Fix::Remove(at) => match at.last() {
                Some(Segment::Seq { index }) => {
                    let parent = at[..at.len() - 1].to_vec();
                    let done = remove_at(&mut tree, &at);
                    if done {
                        let parent = original_path(&parent, &removed);
                        let original = original_index_in(&parent, *index, &removed);
                        removed.push((parent, original));
                    }
                    done
                }
                Some(_) => remove_at(&mut tree, &at),
                None => false,
            },
            Fix::StandIn(map, key) => {
                let done = stand_in(&mut tree, &map, &key, &stand_ins, &report_field);
                if done {
                    stand_ins.push(report_field.clone());
                }
                done
            }
        };
        if !progressed {
            // Nothing left to take away here: what remains cannot be parsed.
            break;
        }
    }
    Ok(Parsed {
        value: None,
        problems,
        stand_ins,
    })
}

enum Fix {
    /// Drop an unknown key from the map at this path.
    RemoveKey(Vec<Segment>, String),
    /// Drop the node at this path.
    Remove(Vec<Segment>),
    /// Give the map at this path a stand-in for its missing field.
    StandIn(Vec<Segment>, String),
}

/// Stand-ins for a missing field, tried in turn until one has the right type.
fn stand_ins() -> [Value; 5] {
    [
        Value::String("missing".into()),
        Value::Number(1.into()),
        Value::Bool(false),
        Value::Sequence(Vec::new()),
        Value::Mapping(Mapping::new()),
    ]
}

fn stand_in(tree: &mut Value, map: &[Segment], key: &str, used: &[String], field: &str) -> bool {
    let Some(Value::Mapping(m)) = node_mut(tree, map) else {
        return false;
    };
    let k = Value::String(key.to_string());
    // A stand-in already placed that still fails: try the next kind of value.
    let next = match m.get(&k) {
        None => 0,
        Some(current) if used.iter().any(|u| u == field) => {
            match stand_ins().iter().position(|s| s == current) {
                Some(i) => i + 1,
                None => return false,
            }
        }
        Some(_) => return false,
    };
    match stand_ins().get(next) {
        Some(v) => {
            m.insert(k, v.clone());
            true
        }
        None => {
            m.remove(&k);
            false
        }
    }
}

fn node_mut<'a>(tree: &'a mut Value, path: &[Segment]) -> Option<&'a mut Value> {
    let mut cur = tree;
    for seg in path {
        cur = match (seg, cur) {
            (Segment::Map { key }, Value::Mapping(m)) => m.get_mut(Value::String(key.clone()))?,
            (Segment::Seq { index }, Value::Sequence(s)) => s.get_mut(*index)?,
            (Segment::Enum { .. }, v) => v,
            (Segment::Map { key }, Value::Tagged(t)) => match &mut t.value {
                Value::Mapping(m) => m.get_mut(Value::String(key.clone()))?,
                _ => return None,
            },
            _ => return None,
        };
    }
    Some(cur)
}

fn remove_key(tree: &mut Value, map: &[Segment], key: &str) -> bool {
    match node_mut(tree, map) {
        Some(Value::Mapping(m)) => m.remove(Value::String(key.to_string())).is_some(),
        _ => false,
    }
}

fn remove_at(tree: &mut Value, at: &[Segment]) -> bool {
    let Some((last, parent)) = at.split_last() else {
        return false;
    };
    match (last, node_mut(tree, parent)) {
        (Segment::Map { key }, Some(Value::Mapping(m))) => {
            m.remove(Value::String(key.clone())).is_some()
        }
        (Segment::Seq { index }, Some(Value::Sequence(s))) if *index < s.len() => {
            s.remove(*index);
            true
        }
        // An enum variant or unknown segment: drop whatever holds it.
        (Segment::Enum { .. } | Segment::Unknown, _) => remove_at(tree, parent),
        _ => false,
    }
}

fn original_path(path: &[Segment], removed: &[(Vec<Segment>, usize)]) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::with_capacity(path.len());
    for seg in path {
        let seg = match seg {
            Segment::Seq { index } => Segment::Seq {
                index: original_index_in(&out, *index, removed),
            },
            other => other.clone(),
        };
        out.push(seg);
    }
    out
}

/// `index` in the tree as it is now, as an index in the file, given the elements of the
/// same sequence (`parent`, already in file terms) removed before.
fn original_index_in(parent: &[Segment], index: usize, removed: &[(Vec<Segment>, usize)]) -> usize {
    let mut gone: Vec<usize> = removed
        .iter()
        .filter(|(p, _)| same(p, parent))
        .map(|(_, i)| *i)
        .collect();
    gone.sort_unstable();
    let mut i = index;
    for g in gone {
        if g <= i {
            i += 1;
        }
    }
    i
}

fn same(a: &[Segment], b: &[Segment]) -> bool {
    render_path(a) == render_path(b)
}

/// The 1-based line of `path` in `text`, following block indentation: each key among
/// the direct children of the previous one, a sequence index among its `- ` items. A
/// path that cannot be followed to its end (flow style, `{ route: x }`) gives the line
/// of the last part found.
pub fn locate(text: &str, path: &[Segment]) -> Option<usize> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let content = |l: &str| !l.trim().is_empty() && !l.trim_start().starts_with('#');
    // The end of the block that starts after line `i` and is indented deeper than `at`.
    let block_end = |lines: &[String], i: usize, at: usize, hi: usize| {
        (i + 1..hi)
            .find(|&j| content(&lines[j]) && indent(&lines[j]) <= at)
            .unwrap_or(hi)
    };
    let (mut lo, mut hi) = (0, lines.len());
    let mut found: Option<usize> = None;
    for seg in path {
        let Some(first) = (lo..hi).find(|&i| content(&lines[i])) else {
            break;
        };
        let ci = indent(&lines[first]);
        let hit = match seg {
            Segment::Map { key } => (lo..hi).find(|&i| {
                let l = &lines[i];
                let t = l.trim_start();
                content(l)
                    && indent(l) == ci
                    && [
                        format!("{key}:"),
                        format!("\"{key}\":"),
                        format!("'{key}':"),
                    ]
                    .iter()
                    .any(|k| {
                        t.starts_with(k.as_str())
                            && t[k.len()..].chars().next().is_none_or(char::is_whitespace)
                    })
            }),
            Segment::Seq { index } => (lo..hi)
                .filter(|&i| {
                    let l = &lines[i];
                    content(l) && indent(l) == ci && l.trim_start().starts_with("- ")
                })
                .nth(*index),
            Segment::Enum { .. } | Segment::Unknown => continue,
        };
        let Some(i) = hit else { break };
        found = Some(i);
        match seg {
            Segment::Seq { .. } => {
                // Inside the item its first key sits where the dash was, plus two.
                let l = &mut lines[i];
                l.replace_range(ci..ci + 2, "  ");
                hi = block_end(&lines, i, ci, hi);
                lo = i;
            }
            _ => {
                hi = block_end(&lines, i, ci, hi);
                lo = i + 1;
            }
        }
    }
    found.map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Doc {
        name: String,
        items: Vec<Item>,
        #[serde(default)]
        limit: Option<u32>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Item {
        status: u16,
        #[serde(default)]
        note: Option<String>,
    }

    fn all(text: &str) -> Parsed<Doc> {
        parse_all(Path::new("d.yaml"), text).unwrap()
    }

    fn fields(p: &Parsed<Doc>) -> Vec<(String, Option<usize>)> {
        p.problems
            .iter()
            .map(|e| (e.field.clone(), e.line))
            .collect()
    }

    #[test]
    fn three_typos_are_three_problems_each_on_its_line() {
        let text = "name: x\nlimt: 3\nitems:\n  - status: 200\n    nte: hi\n  - statsu: 429\n";
        let p = all(text);
        assert_eq!(
            fields(&p),
            vec![
                ("limt".to_string(), Some(2)),
                ("items[0].nte".to_string(), Some(5)),
                ("items[1].statsu".to_string(), Some(6)),
            ],
            "{:#?}",
            p.problems
        );
        assert!(p.problems[0].message.contains("did you mean `limit`"));
        assert!(p.problems[2].message.contains("did you mean `status`"));
    }

    #[test]
    fn a_bad_value_in_a_list_keeps_later_indices_true_to_the_file() {
        let text = "name: x\nitems:\n  - status: nope\n  - status: 200\n  - status: -1\n";
        let p = all(text);
        assert_eq!(
            fields(&p),
            vec![
                ("items[0].status".to_string(), Some(3)),
                ("items[2].status".to_string(), Some(5)),
            ],
            "{:#?}",
            p.problems
        );
    }

    #[test]
    fn a_missing_field_is_reported_once_and_parsing_goes_on() {
        let text = "items:\n  - status: 200\n    bogus: 1\n";
        let p = all(text);
        let f: Vec<String> = p.problems.iter().map(|e| e.field.clone()).collect();
        assert_eq!(f, vec!["items[0].bogus", "name"], "{:#?}", p.problems);
        assert_eq!(p.stand_ins, vec!["name"]);
        assert!(p.value.is_some());
    }

    #[test]
    fn not_yaml_is_an_error_and_empty_is_a_problem() {
        let err = parse_all::<Doc>(Path::new("b.yaml"), "name: [unclosed\n").unwrap_err();
        assert!(err.message.starts_with("not valid YAML"), "{err}");
        assert!(err.line.is_some());
        let p = all("# nothing here\n");
        assert!(p.problems[0].message.contains("empty"));
        assert!(p.value.is_none());
    }

    #[test]
    fn an_integer_too_large_for_any_field_names_its_field_not_the_yaml() {
        let text = "name: x\nitems:\n  - status: 200\n  - status: 18446744073709551616\n";
        let p = all(text);
        assert_eq!(p.problems.len(), 1, "{:#?}", p.problems);
        let e = &p.problems[0];
        assert_eq!(e.field, "items[1].status");
        assert_eq!(e.line, Some(4));
        assert!(
            e.message.contains("`18446744073709551616` is out of range"),
            "{e}"
        );
        // Beside a key holding the same digits, the value is the one read as a float.
        let (tree, huge) =
            crate::config::yaml::tree("a18446744073709551616: -18446744073709551616\n").unwrap();
        assert_eq!(huge.len(), 1);
        assert!(tree["a18446744073709551616"].is_f64(), "{tree:?}");
    }

    #[test]
    fn a_wrong_top_level_shape_is_one_problem() {
        let p = all("just text\n");
        assert_eq!(p.problems.len(), 1, "{:#?}", p.problems);
        assert!(p.value.is_none());
    }

    #[test]
    fn locate_follows_keys_and_items() {
        let text = "a:\n  b:\n    - x: 1\n    - x: 2\n      y: 3\n  c: 4\nc: 5\n";
        let seg = |k: &str| Segment::Map { key: k.into() };
        assert_eq!(locate(text, &[seg("a"), seg("c")]), Some(6));
        assert_eq!(locate(text, &[seg("c")]), Some(7));
        assert_eq!(
            locate(
                text,
                &[seg("a"), seg("b"), Segment::Seq { index: 1 }, seg("y")]
            ),
            Some(5)
        );
        assert_eq!(locate(text, &[seg("a"), seg("zz")]), Some(1));
    }
}
