//! Where a field path (`requests[1].expect.served_by`) sits in a scenario's YAML text, so
//! that an error found after parsing (a route that is not in the chain, a `degrade_tier`
//! that names no tier) still says "file, line and what is wrong" (scenario-format.md,
//! "Output"), as the parser's own errors do.
//!
//! serde_yaml keeps no spans in its values, but it stamps an error raised inside a
//! visitor with the position of the node being visited. So the locator walks the
//! document along the path and raises a marker error at the node the path ends on; the
//! error's location is the answer.

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

const FOUND: &str = "poolctl-locate: found";

/// The 1-based line and column of the node at `field` in `text`, or of the deepest
/// part of the path that exists (at worst the document itself, where serde_yaml too
/// reports a missing field). Only asked of text that parsed.
pub fn locate(text: &str, field: &str) -> Option<(usize, usize)> {
    let steps = steps(field)?;
    // A path that is not in the text (a default, say) falls back to its parent.
    for n in (0..=steps.len()).rev() {
        let seek = Seek { steps: &steps[..n] };
        let de = serde_yaml::Deserializer::from_str(text);
        if let Err(e) = seek.deserialize(de) {
            if e.to_string().contains(FOUND) {
                if let Some(at) = e.location() {
                    return Some((at.line(), at.column()));
                }
            }
        }
    }
    None
}

/// `a.b[2].c` as steps. A key may itself hold dots (`limits.gemini/gemini-2.5-flash`):
/// the split is undone while matching, in [`Seek`].
fn steps(field: &str) -> Option<Vec<Step>> {
    let mut out = Vec::new();
    for part in field.split('.') {
        let (key, mut rest) = match part.find('[') {
            Some(i) => part.split_at(i),
            None => (part, ""),
        };
        if !key.is_empty() {
            out.push(Step::Key(key.to_string()));
        }
        while let Some(body) = rest.strip_prefix('[') {
            let (n, after) = body.split_once(']')?;
            out.push(Step::Index(n.parse().ok()?));
            rest = after;
        }
    }
    Some(out)
}

/// Walks toward `steps`; errors with [`FOUND`] at the node they end on, or returns `Ok`
/// when the path is not in the document.
struct Seek<'a> {
    steps: &'a [Step],
}

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        if self.steps.is_empty() {
            return Err(de::Error::custom(FOUND));
        }
        while let Some(key) = map.next_key::<KeyText>()? {
            match key.0.as_deref().and_then(|k| self.matched(k)) {
                Some(used) => {
                    return map.next_value_seed(Seek {
                        steps: &self.steps[used..],
                    })
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let want = match self.steps.first() {
            None => return Err(de::Error::custom(FOUND)),
            Some(Step::Index(i)) => *i,
            Some(Step::Key(_)) => return Ok(()),
        };
        let mut i = 0;
        loop {
            if i == want {
                return seq
                    .next_element_seed(Seek {
                        steps: &self.steps[1..],
                    })
                    .map(|_| ());
            }
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.leaf()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.leaf()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.leaf()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.leaf()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.leaf()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.leaf()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.leaf()
    }
}

impl Seek<'_> {
    /// A scalar: the path ends here, or goes nowhere.
    fn leaf<E: de::Error>(&self) -> Result<(), E> {
        if self.steps.is_empty() {
            Err(E::custom(FOUND))
        } else {
            Ok(())
        }
    }

    /// How many leading key steps `key` stands for (`a/gemini-2` + `5` for the key
    /// `a/gemini-2.5`), if it matches.
    fn matched(&self, key: &str) -> Option<usize> {
        let mut joined = String::new();
        for (n, step) in self.steps.iter().enumerate() {
            let Step::Key(k) = step else { return None };
            if n > 0 {
                joined.push('.');
            }
            joined.push_str(k);
            if joined == key {
                return Some(n + 1);
            }
            if !key.starts_with(joined.as_str()) {
                return None;
            }
        }
        None
    }
}

/// A mapping key as text; a key that is not a scalar matches no step.
struct KeyText(Option<String>);

impl<'de> de::Deserialize<'de> for KeyText {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyText;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyText, E> {
                Ok(KeyText(Some(v.to_string())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<KeyText, E> {
                Ok(KeyText(Some(v.to_string())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<KeyText, E> {
                Ok(KeyText(Some(v.to_string())))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<KeyText, E> {
                Ok(KeyText(Some(v.to_string())))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<KeyText, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(KeyText(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<KeyText, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(KeyText(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<KeyText, E> {
                Ok(KeyText(None))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<KeyText, E> {
                Ok(KeyText(Some(v.to_string())))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
name: x
chain:
  - route: a/one
    replies: [ { ok: \"OK\" } ]
  - route: g/gemini-2.5-flash
    replies:
      - ok: \"G\"
limits:
  g/gemini-2.5-flash: { rpm: 1 }
requests:
  - expect: { outcome: success }
  - after_ms: 5
    expect:
      outcome: success
      served_by: b/two
";

    #[test]
    fn a_validation_error_in_a_later_request_names_its_line() {
        assert_eq!(locate(TEXT, "requests[1].expect.served_by"), Some((15, 18)));
        assert_eq!(
            locate(TEXT, "requests[0].expect.outcome").map(|l| l.0),
            Some(11)
        );
    }

    #[test]
    fn keys_with_dots_are_matched_whole() {
        assert_eq!(
            locate(TEXT, "limits.g/gemini-2.5-flash").map(|l| l.0),
            Some(9)
        );
        assert_eq!(locate(TEXT, "chain[1].replies[0]").map(|l| l.0), Some(7));
        assert_eq!(locate(TEXT, "chain[1]").map(|l| l.0), Some(5));
    }

    #[test]
    fn a_path_that_is_absent_falls_back_to_its_parent() {
        // `chain[0].timeout_ms` is not written: the route entry it belongs to is.
        assert_eq!(locate(TEXT, "chain[0].timeout_ms").map(|l| l.0), Some(3));
        assert_eq!(locate(TEXT, "nowhere.at.all"), Some((1, 1)));
        assert_eq!(locate(TEXT, "requests[9]").map(|l| l.0), Some(11));
    }
}
