//! A small extractor over a parsed YAML tree that records **every** problem it meets.
//!
//! serde's derive stops at the first error; operators want the whole list at once, with the path
//! of each key. [`Obj`] reads typed keys out of one mapping, remembers which keys it consumed (so
//! the caller can warn about, or reject, the rest) and pushes problems into a shared [`Problems`].

use serde_yaml_ng::{Mapping, Value};
use std::fmt;
use std::time::Duration;

/// Every problem found while reading and validating a configuration.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Problems(pub Vec<String>);

impl Problems {
    /// Records a problem at `path` (dotted key path, or empty for the root).
    pub fn push(&mut self, path: &str, msg: impl fmt::Display) {
        if path.is_empty() {
            self.0.push(msg.to_string());
        } else {
            self.0.push(format!("{path}: {msg}"));
        }
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        writeln!(
            f,
            "invalid configuration ({n} problem{}):",
            if n == 1 { "" } else { "s" }
        )?;
        for p in &self.0 {
            writeln!(f, "  - {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Problems {}

/// Joins a parent path and a key.
pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Human name of a YAML value's type, for messages.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// One mapping being read. Keys that are read are marked as known; [`Obj::unknown_keys`] lists
/// the others.
pub(crate) struct Obj<'a> {
    map: Option<&'a Mapping>,
    path: String,
    known: Vec<&'static str>,
}

impl<'a> Obj<'a> {
    /// Wraps `v` found at `path`. A non-mapping is a problem (reported once) and reads as empty.
    pub(crate) fn new(v: Option<&'a Value>, path: &str, problems: &mut Problems) -> Self {
        let map = match v {
            None | Some(Value::Null) => None,
            Some(Value::Mapping(m)) => Some(m),
            Some(other) => {
                problems.push(path, format_args!("expected a mapping, found {}", kind(other)));
                None
            }
        };
        Obj {
            map,
            path: path.to_string(),
            known: Vec::new(),
        }
    }

    /// The dotted path of this mapping.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// True when the mapping was absent (or null).
    pub(crate) fn is_absent(&self) -> bool {
        self.map.is_none()
    }

    /// The dotted path of `key` in this mapping.
    pub(crate) fn path_of(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// The raw value of `key` (null counts as absent), marking it known.
    pub(crate) fn raw(&mut self, key: &'static str) -> Option<&'a Value> {
        self.known.push(key);
        match self.map?.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    /// A required or optional string. Numbers and booleans are kept as their text (YAML writes
    /// `model_version: 3` for the string "3").
    pub(crate) fn string(&mut self, key: &'static str, problems: &mut Problems) -> Option<String> {
        let path = self.path_of(key);
        match self.raw(key)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            other => {
                problems.push(&path, format_args!("expected a string, found {}", kind(other)));
                None
            }
        }
    }

    /// A required string: absence is a problem.
    pub(crate) fn req_string(&mut self, key: &'static str, problems: &mut Problems) -> String {
        let present = self.map.and_then(|m| m.get(key)).is_some_and(|v| !v.is_null());
        let v = self.string(key, problems);
        if !present {
            problems.push(&self.path_of(key), "required");
        }
        v.unwrap_or_default()
    }

    /// An unsigned integer (strings holding digits are accepted, as environment overrides are).
    pub(crate) fn u64(&mut self, key: &'static str, problems: &mut Problems) -> Option<u64> {
        let path = self.path_of(key);
        match self.raw(key)? {
            Value::Number(n) => match n.as_u64() {
                Some(v) => Some(v),
                None => {
                    problems.push(&path, format_args!("expected a non-negative integer, found {n}"));
                    None
                }
            },
            Value::String(s) => match s.trim().parse::<u64>() {
                Ok(v) => Some(v),
                Err(_) => {
                    problems.push(&path, format_args!("expected a non-negative integer, found {s:?}"));
                    None
                }
            },
            other => {
                problems.push(&path, format_args!("expected an integer, found {}", kind(other)));
                None
            }
        }
    }

    /// A floating-point number.
    pub(crate) fn f64(&mut self, key: &'static str, problems: &mut Problems) -> Option<f64> {
        let path = self.path_of(key);
        match self.raw(key)? {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => match s.trim().parse::<f64>() {
                Ok(v) => Some(v),
                Err(_) => {
                    problems.push(&path, format_args!("expected a number, found {s:?}"));
                    None
                }
            },
            other => {
                problems.push(&path, format_args!("expected a number, found {}", kind(other)));
                None
            }
        }
    }

    /// A boolean (`true`/`false`, also as strings).
    pub(crate) fn bool(&mut self, key: &'static str, problems: &mut Problems) -> Option<bool> {
        let path = self.path_of(key);
        match self.raw(key)? {
            Value::Bool(b) => Some(*b),
            Value::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
            Value::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
            other => {
                problems.push(&path, format_args!("expected true or false, found {}", kind(other)));
                None
            }
        }
    }

    /// A duration: a number of seconds, or text such as `500ms`, `30s`, `10m`.
    pub(crate) fn duration(&mut self, key: &'static str, problems: &mut Problems) -> Option<Duration> {
        let path = self.path_of(key);
        match self.raw(key)? {
            Value::Number(n) => match n.as_f64() {
                Some(s) if s.is_finite() && s >= 0.0 => Some(Duration::from_secs_f64(s)),
                _ => {
                    problems.push(&path, format_args!("expected a non-negative duration, found {n}"));
                    None
                }
            },
            Value::String(s) => match parse_duration(s) {
                Ok(d) => Some(d),
                Err(e) => {
                    problems.push(&path, e);
                    None
                }
            },
            other => {
                problems.push(&path, format_args!("expected a duration such as 30s, found {}", kind(other)));
                None
            }
        }
    }

    /// A byte size: a number of bytes, or text such as `8MiB`, `512KiB`, `10MB`.
    pub(crate) fn bytes(&mut self, key: &'static str, problems: &mut Problems) -> Option<u64> {
        let path = self.path_of(key);
        match self.raw(key)? {
            Value::Number(n) => match n.as_u64() {
                Some(v) => Some(v),
                None => {
                    problems.push(&path, format_args!("expected a byte size, found {n}"));
                    None
                }
            },
            Value::String(s) => match parse_bytes(s) {
                Some(v) => Some(v),
                None => {
                    problems.push(&path, format_args!("expected a byte size such as 8MiB, found {s:?}"));
                    None
                }
            },
            other => {
                problems.push(&path, format_args!("expected a byte size, found {}", kind(other)));
                None
            }
        }
    }

    /// A list of strings.
    pub(crate) fn string_list(&mut self, key: &'static str, problems: &mut Problems) -> Option<Vec<String>> {
        let path = self.path_of(key);
        match self.raw(key)? {
            Value::Sequence(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::String(s) => out.push(s.clone()),
                        Value::Number(n) => out.push(n.to_string()),
                        other => problems.push(
                            &format!("{path}[{i}]"),
                            format_args!("expected a string, found {}", kind(other)),
                        ),
                    }
                }
                Some(out)
            }
            other => {
                problems.push(&path, format_args!("expected a list, found {}", kind(other)));
                None
            }
        }
    }

    /// A mapping of string keys to scalar values, kept as text in file order.
    pub(crate) fn string_map(
        &mut self,
        key: &'static str,
        problems: &mut Problems,
    ) -> Option<Vec<(String, String)>> {
        let path = self.path_of(key);
        match self.raw(key)? {
            Value::Mapping(m) => {
                let mut out = Vec::with_capacity(m.len());
                for (k, v) in m {
                    let k = match k {
                        Value::String(s) => s.clone(),
                        Value::Number(n) => n.to_string(),
                        other => {
                            problems.push(&path, format_args!("keys must be strings, found {}", kind(other)));
                            continue;
                        }
                    };
                    let v = match v {
                        Value::String(s) => s.clone(),
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => b.to_string(),
                        other => {
                            problems.push(&join(&path, &k), format_args!("expected a scalar, found {}", kind(other)));
                            continue;
                        }
                    };
                    out.push((k, v));
                }
                Some(out)
            }
            other => {
                problems.push(&path, format_args!("expected a mapping, found {}", kind(other)));
                None
            }
        }
    }

    /// A nested mapping, as its own [`Obj`].
    pub(crate) fn obj(&mut self, key: &'static str, problems: &mut Problems) -> Obj<'a> {
        let path = self.path_of(key);
        let v = self.raw(key);
        Obj::new(v, &path, problems)
    }

    /// Keys present in the mapping that were never read.
    pub(crate) fn unknown_keys(&self) -> Vec<String> {
        let Some(map) = self.map else { return Vec::new() };
        map.keys()
            .map(|k| match k {
                Value::String(s) => s.clone(),
                other => format!("{other:?}"),
            })
            .filter(|k| !self.known.iter().any(|known| known == k))
            .map(|k| self.path_of(&k))
            .collect()
    }

    /// For our own (strict) sections: every unread key is a problem.
    pub(crate) fn deny_unknown(&self, problems: &mut Problems) {
        for k in self.unknown_keys() {
            problems.push(&k, "unknown key");
        }
    }

    /// For Merlin's (tolerant) sections: every unread key becomes a warning.
    pub(crate) fn warn_unknown(&self, warnings: &mut Vec<String>) {
        for k in self.unknown_keys() {
            warnings.push(format!("{k}: unknown key ignored"));
        }
    }
}

/// Parses `30s`, `500ms`, `10m`, `1h`, `1m30s` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if let Ok(secs) = t.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_duration(t).map_err(|e| format!("invalid duration {s:?} ({e}); use e.g. 30s, 500ms, 10m"))
}

/// Parses a byte size: `1024`, `512KiB`, `8MiB`, `1GiB`, `10MB`, `64KB`.
pub fn parse_bytes(s: &str) -> Option<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num.parse().ok()?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1_000,
        "kib" => 1 << 10,
        "mb" | "m" => 1_000_000,
        "mib" => 1 << 20,
        "gb" | "g" => 1_000_000_000,
        "gib" => 1 << 30,
        _ => return None,
    };
    let v = num * mult as f64;
    (v.is_finite() && v >= 0.0).then_some(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("8MiB"), Some(8 << 20));
        assert_eq!(parse_bytes("10 MB"), Some(10_000_000));
        assert_eq!(parse_bytes("1024"), Some(1024));
        assert_eq!(parse_bytes("1.5KiB"), Some(1536));
        assert_eq!(parse_bytes("lots"), None);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert!(parse_duration("soon").is_err());
    }
}

/// Serializes ordered `(key, value)` pairs as a mapping (for `check-config` output).
pub(crate) fn ser_pairs<S, V>(v: &[(String, V)], s: S) -> Result<S::Ok, S::Error>
where
    S: serde::Serializer,
    V: serde::Serialize,
{
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(v.len()))?;
    for (k, t) in v {
        m.serialize_entry(k, t)?;
    }
    m.end()
}
