//! Where each value of the layered configuration came from: the file and line, the
//! `OBS_PUBLISHER__…` variable, or `--set`, so that every problem says where to fix it.
//!
//! The YAML tree ([`serde_yaml_ng::Value`]) keeps no positions, and the parser only gives a
//! position with an error. So the line of a key is found by reading the file once more with a
//! reader that follows the key's path and raises an error on reaching it: the parser stamps
//! that error with the position of the key (or of the list item). One read per problem, on a
//! file of a few kilobytes, only when there are problems to report.

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_yaml_ng::Value;
use std::fmt;

/// The error [`Seek`] raises on reaching the key it looks for.
const FOUND: &str = "<the key looked for is here>";

/// The file a configuration was read from, and the overrides applied over it.
#[derive(Debug, Clone, Default)]
pub struct Origins {
    file: Option<File>,
    /// The overrides in the order applied (a later one wins): the key path they set and how
    /// they were given (the variable's name, or `--set`).
    overrides: Vec<(Vec<String>, String)>,
}

#[derive(Debug, Clone)]
struct File {
    /// The path as given.
    name: String,
    text: String,
    /// Hydra's `environment:` level was unwrapped: every key path is under it in the file.
    wrapped: bool,
}

impl Origins {
    /// Records the file the tree was read from (`wrapped`: under `environment:`).
    pub(crate) fn file(&mut self, name: String, text: String, wrapped: bool) {
        self.file = Some(File {
            name,
            text,
            wrapped,
        });
    }

    /// Records an override of `path`, given as `how`.
    pub(crate) fn overridden(&mut self, path: &[String], how: String) {
        self.overrides.push((path.to_vec(), how));
    }

    /// Where the value at the dotted `path` (as problems name it: `a.b[0].c`) in the layered
    /// `root` came from: `at FILE:LINE`, `from OBS_PUBLISHER__…`, `from --set`; `None` for a
    /// key that is not there (a default, or a required key left out).
    pub fn of(&self, root: &Value, path: &str) -> Option<String> {
        if path.is_empty() {
            return None;
        }
        let segs = resolve(root, path)?;
        // An override of the key or of a mapping above it set this value.
        if let Some((_, how)) = self
            .overrides
            .iter()
            .rev()
            .find(|(o, _)| segs.starts_with(o))
        {
            return Some(format!("from {how}"));
        }
        let file = self.file.as_ref()?;
        let mut full = Vec::with_capacity(segs.len() + 1);
        if file.wrapped {
            full.push("environment".to_string());
        }
        full.extend(segs);
        line_of(&file.text, &full).map(|l| format!("at {}:{l}", file.name))
    }
}

/// The segments of a dotted problem path in `root`: keys as written (a key may hold dots, as
/// librdkafka's do: the longest key that fits is taken), list indexes as numbers. `None` when
/// the path is not all in the tree.
fn resolve(root: &Value, path: &str) -> Option<Vec<String>> {
    let mut segs = Vec::new();
    let mut node = root;
    let mut rest = path;
    while !rest.is_empty() {
        match node {
            Value::Sequence(items) => {
                let inner = rest.strip_prefix('[')?;
                let end = inner.find(']')?;
                let i: usize = inner[..end].parse().ok()?;
                node = items.get(i)?;
                segs.push(i.to_string());
                rest = &inner[end + 1..];
            }
            Value::Mapping(m) => {
                let (k, v) = m
                    .iter()
                    .map(|(k, v)| (super::key_text(k), v))
                    .filter(|(k, _)| {
                        rest.strip_prefix(k.as_str())
                            .is_some_and(|r| r.is_empty() || r.starts_with(['.', '[']))
                    })
                    .max_by_key(|(k, _)| k.len())?;
                rest = &rest[k.len()..];
                segs.push(k);
                node = v;
            }
            _ => return None,
        }
        rest = rest.strip_prefix('.').unwrap_or(rest);
    }
    Some(segs)
}

/// The line (from 1) of the key at `path` in the YAML `text` (of the item, for a list index).
pub(crate) fn line_of(text: &str, path: &[String]) -> Option<usize> {
    match Seek(path).deserialize(serde_yaml_ng::Deserializer::from_str(text)) {
        Err(e) if e.to_string().contains(FOUND) => e.location().map(|l| l.line()),
        _ => None,
    }
}

/// Follows the rest of a key path through the document; raises [`FOUND`] at its end.
struct Seek<'p>(&'p [String]);

impl Seek<'_> {
    fn end<E: de::Error>(&self) -> Result<(), E> {
        Err(E::custom(if self.0.is_empty() { FOUND } else { "absent" }))
    }
}

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
        let Some((head, rest)) = self.0.split_first() else {
            return self.end();
        };
        while let Some(hit) = m.next_key_seed(Key {
            want: head,
            last: rest.is_empty(),
        })? {
            if hit {
                m.next_value_seed(Seek(rest))?;
                return Err(de::Error::custom("absent"));
            }
            m.next_value::<IgnoredAny>()?;
        }
        Err(de::Error::custom("absent"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<(), A::Error> {
        let Some((head, rest)) = self.0.split_first() else {
            return self.end();
        };
        let want: usize = head.parse().map_err(|_| de::Error::custom("absent"))?;
        for _ in 0..want {
            if s.next_element::<IgnoredAny>()?.is_none() {
                return Err(de::Error::custom("absent"));
            }
        }
        s.next_element_seed(Seek(rest))?;
        Err(de::Error::custom("absent"))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.end()
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.end()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.end()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.end()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.end()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.end()
    }
}

/// A mapping key: whether it is the one looked for; raises [`FOUND`] when it is the path's
/// last.
struct Key<'p> {
    want: &'p str,
    last: bool,
}

impl Key<'_> {
    fn is<E: de::Error>(&self, k: &str) -> Result<bool, E> {
        match (k == self.want, self.last) {
            (true, true) => Err(E::custom(FOUND)),
            (hit, _) => Ok(hit),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = bool;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping key")
    }
    fn visit_str<E: de::Error>(self, k: &str) -> Result<bool, E> {
        self.is(k)
    }
    fn visit_bool<E: de::Error>(self, k: bool) -> Result<bool, E> {
        self.is(&k.to_string())
    }
    fn visit_i64<E: de::Error>(self, k: i64) -> Result<bool, E> {
        self.is(&k.to_string())
    }
    fn visit_u64<E: de::Error>(self, k: u64) -> Result<bool, E> {
        self.is(&k.to_string())
    }
    fn visit_f64<E: de::Error>(self, k: f64) -> Result<bool, E> {
        self.is(&k.to_string())
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<bool, A::Error> {
        while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(false)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<bool, A::Error> {
        while s.next_element::<IgnoredAny>()?.is_some() {}
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
project: p
batching:
  linger: forever   # line 3
  'max_rows': 5
observation_sinks:
  - type: BIGQUERY
  - {type: ARIZE, config: {api_key: k}}
additional:
  auto.offset.reset: latest
";

    fn segs(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn keys_are_found_on_their_line_in_block_and_flow_style() {
        let line = |p: &[&str]| line_of(TEXT, &segs(p));
        assert_eq!(line(&["project"]), Some(1));
        assert_eq!(line(&["batching", "linger"]), Some(3));
        assert_eq!(line(&["batching", "max_rows"]), Some(4), "a quoted key");
        assert_eq!(line(&["observation_sinks", "1"]), Some(7), "a list item");
        assert_eq!(
            line(&["observation_sinks", "1", "config", "api_key"]),
            Some(7)
        );
        assert_eq!(line(&["observation_sinks", "0", "type"]), Some(6));
        assert_eq!(line(&["additional", "auto.offset.reset"]), Some(9));
        assert_eq!(line(&["batching", "nope"]), None);
        assert_eq!(line(&["observation_sinks", "2"]), None);
        assert_eq!(line(&["project", "x"]), None, "below a scalar");
    }

    #[test]
    fn a_problem_names_the_override_or_the_file_line_of_its_value() {
        let mut root: Value = serde_yaml_ng::from_str(TEXT).unwrap();
        root["batching"]["max_rows"] = Value::from("lots");
        let mut o = Origins::default();
        o.file("c.yaml".into(), TEXT.into(), false);
        o.overridden(
            &segs(&["batching", "max_rows"]),
            "OBS_PUBLISHER__BATCHING__MAX_ROWS".into(),
        );
        o.overridden(&segs(&["observation_sinks", "1"]), "--set".into());
        assert_eq!(
            o.of(&root, "batching.linger").as_deref(),
            Some("at c.yaml:3")
        );
        assert_eq!(
            o.of(&root, "batching.max_rows").as_deref(),
            Some("from OBS_PUBLISHER__BATCHING__MAX_ROWS")
        );
        assert_eq!(
            o.of(&root, "observation_sinks[1].config.api_key")
                .as_deref(),
            Some("from --set"),
            "an override of a mapping above the key"
        );
        assert_eq!(
            o.of(&root, "observation_sinks[0].type").as_deref(),
            Some("at c.yaml:6")
        );
        assert_eq!(
            o.of(&root, "additional.auto.offset.reset").as_deref(),
            Some("at c.yaml:9"),
            "a key with dots"
        );
        assert_eq!(o.of(&root, "batching.max_bytes"), None, "not written");
        assert_eq!(o.of(&root, ""), None, "the whole configuration");
        let wrapped = format!(
            "environment:\n{}",
            TEXT.lines().map(|l| format!("  {l}\n")).collect::<String>()
        );
        o.file("w.yaml".into(), wrapped, true);
        assert_eq!(
            o.of(&root, "batching.linger").as_deref(),
            Some("at w.yaml:4")
        );
    }
}
