//! A small extractor over a parsed YAML tree that records **every** problem it meets.
//!
//! serde's derive stops at the first error; operators want the whole list at once, with the path
//! of each key. [`Obj`] reads typed keys out of one mapping, remembers which keys it consumed (so
//! the caller can warn about, or reject, the rest) and pushes problems into a shared [`Problems`].
//!
//! Two wordings share it. The run config's readers ([`Obj::new`], [`Obj::string`], …) say what
//! they expected and what they found ("expected a string, found a list") and report unread keys
//! after reading. The bootstrap spec's readers ([`Obj::closed`], [`Obj::text`],
//! [`Obj::req_text`], [`Obj::int_in`]) check the keys of a mapping against a fixed list up front
//! ("unknown key; expected one of …") and say what a value must be ("must be a string").

use serde_yaml_ng::{Mapping, Value};
use std::fmt;
use std::time::Duration;

/// Every problem found while reading and validating a configuration: the messages as printed
/// (`path: what is wrong`) and, beside them, the key path each one is about (empty for none),
/// so that [`Problems::annotate`] can say where each value came from.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Problems(pub Vec<String>, Vec<String>);

impl Problems {
    /// Records a problem at `path` (dotted key path, or empty for the root).
    pub fn push(&mut self, path: &str, msg: impl fmt::Display) {
        if path.is_empty() {
            self.0.push(msg.to_string());
        } else {
            self.0.push(format!("{path}: {msg}"));
        }
        self.1.push(path.to_string());
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each problem's key path (empty for none) and message, in order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.1
            .iter()
            .map(String::as_str)
            .zip(self.0.iter().map(String::as_str))
    }

    /// Appends `other`'s problems to these.
    pub(crate) fn append(&mut self, other: Problems) {
        self.0.extend(other.0);
        self.1.extend(other.1);
    }

    /// Appends ` (note)` to each problem whose key path `note` gives a note for (where the
    /// value came from).
    pub fn annotate(&mut self, note: impl Fn(&str) -> Option<String>) {
        for (msg, path) in self.0.iter_mut().zip(&self.1) {
            if let Some(n) = note(path) {
                msg.push_str(&format!(" ({n})"));
            }
        }
    }

    /// Replaces the message of problem `i`, keeping its path.
    pub(crate) fn reword(&mut self, i: usize, msg: String) {
        self.0[i] = msg;
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

/// What was found, for messages: a string quoted, a number as written, else its type's name.
pub(crate) fn found(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Number(n) => n.to_string(),
        other => kind(other).to_string(),
    }
}

/// The text of a scalar (string, number or boolean), or None.
pub(crate) fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A mapping key as written (a non-string key as its YAML text), for paths in messages.
pub(crate) fn key_text(k: &Value) -> String {
    match k {
        Value::String(s) => s.clone(),
        other => serde_yaml_ng::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_string(),
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
                problems.push(
                    path,
                    format_args!("expected a mapping, found {}", found(other)),
                );
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
                problems.push(
                    &path,
                    format_args!("expected a string, found {}", kind(other)),
                );
                None
            }
        }
    }

    /// A required string: absence is a problem.
    pub(crate) fn req_string(&mut self, key: &'static str, problems: &mut Problems) -> String {
        let present = self
            .map
            .and_then(|m| m.get(key))
            .is_some_and(|v| !v.is_null());
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
                    problems.push(
                        &path,
                        format_args!("expected a non-negative integer, found {n}"),
                    );
                    None
                }
            },
            Value::String(s) => match s.trim().parse::<u64>() {
                Ok(v) => Some(v),
                Err(_) => {
                    problems.push(
                        &path,
                        format_args!("expected a non-negative integer, found {s:?}"),
                    );
                    None
                }
            },
            other => {
                problems.push(
                    &path,
                    format_args!("expected an integer, found {}", kind(other)),
                );
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
                problems.push(
                    &path,
                    format_args!("expected a number, found {}", kind(other)),
                );
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
                problems.push(
                    &path,
                    format_args!("expected true or false, found {}", found(other)),
                );
                None
            }
        }
    }

    /// A duration: a number of seconds, or text such as `500ms`, `30s`, `10m`.
    pub(crate) fn duration(
        &mut self,
        key: &'static str,
        problems: &mut Problems,
    ) -> Option<Duration> {
        let path = self.path_of(key);
        match self.raw(key)? {
            Value::Number(n) => match n.as_f64() {
                Some(s) if s.is_finite() && s >= 0.0 => Some(Duration::from_secs_f64(s)),
                _ => {
                    problems.push(
                        &path,
                        format_args!("expected a non-negative duration, found {n}"),
                    );
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
                problems.push(
                    &path,
                    format_args!("expected a duration such as 30s, found {}", kind(other)),
                );
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
                    problems.push(
                        &path,
                        format_args!("expected a byte size such as 8MiB, found {s:?}"),
                    );
                    None
                }
            },
            other => {
                problems.push(
                    &path,
                    format_args!("expected a byte size, found {}", kind(other)),
                );
                None
            }
        }
    }

    /// A list of strings.
    pub(crate) fn string_list(
        &mut self,
        key: &'static str,
        problems: &mut Problems,
    ) -> Option<Vec<String>> {
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
                problems.push(
                    &path,
                    format_args!("expected a list, found {}", found(other)),
                );
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
                            problems.push(
                                &path,
                                format_args!("keys must be strings, found {}", kind(other)),
                            );
                            continue;
                        }
                    };
                    let v = match v {
                        Value::String(s) => s.clone(),
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => b.to_string(),
                        other => {
                            problems.push(
                                &join(&path, &k),
                                format_args!("expected a scalar, found {}", kind(other)),
                            );
                            continue;
                        }
                    };
                    out.push((k, v));
                }
                Some(out)
            }
            other => {
                problems.push(
                    &path,
                    format_args!("expected a mapping, found {}", found(other)),
                );
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

    /// Keys present in the mapping that were never read, each with its dotted path and, when
    /// one is close, the known key it was probably meant to be (`; did you mean a.b?`).
    pub(crate) fn unknown_keys(&self) -> Vec<(String, String)> {
        let Some(map) = self.map else {
            return Vec::new();
        };
        map.keys()
            .map(key_text)
            .filter(|k| !self.known.iter().any(|known| known == k))
            .map(|k| {
                let hint = super::suggest::closest(&k, self.known.iter().copied())
                    .map(|c| format!("; did you mean {}?", self.path_of(c)))
                    .unwrap_or_default();
                (self.path_of(&k), hint)
            })
            .collect()
    }

    /// For our own (strict) sections: every unread key is a problem.
    pub(crate) fn deny_unknown(&self, problems: &mut Problems) {
        for (k, hint) in self.unknown_keys() {
            problems.push(&k, format_args!("unknown key{hint}"));
        }
    }

    /// Wraps `v` found at `path` as a closed mapping: every key not in `allowed` is reported at
    /// once as `unknown key; expected one of …`, a non-mapping as `must be a mapping`; absent or
    /// null reads as empty.
    pub(crate) fn closed(
        v: Option<&'a Value>,
        path: &str,
        allowed: &[&'static str],
        problems: &mut Problems,
    ) -> Self {
        let map = match v {
            None | Some(Value::Null) => None,
            Some(Value::Mapping(m)) => {
                for k in m.keys() {
                    if !k.as_str().is_some_and(|k| allowed.contains(&k)) {
                        problems.push(
                            &join(path, &key_text(k)),
                            format_args!("unknown key; expected one of {}", allowed.join(", ")),
                        );
                    }
                }
                Some(m)
            }
            Some(_) => {
                problems.push(path, "must be a mapping");
                None
            }
        };
        Obj {
            map,
            path: path.to_string(),
            known: allowed.to_vec(),
        }
    }

    /// A nested closed mapping (see [`Obj::closed`]).
    pub(crate) fn closed_obj(
        &mut self,
        key: &'static str,
        allowed: &[&'static str],
        problems: &mut Problems,
    ) -> Obj<'a> {
        let path = self.path_of(key);
        Obj::closed(self.get(key), &path, allowed, problems)
    }

    /// Whether `key` is written in the mapping, null included.
    pub(crate) fn has(&self, key: &str) -> bool {
        self.map.is_some_and(|m| m.contains_key(key))
    }

    /// The value of `key` as written, null included, marking it known.
    pub(crate) fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        self.known.push(key);
        self.map?.get(key)
    }

    /// The entries in file order, keys as written.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (String, &'a Value)> {
        self.map
            .into_iter()
            .flat_map(|m| m.iter().map(|(k, v)| (key_text(k), v)))
    }

    /// A scalar kept as its text (string, number or boolean); anything else is `must be a
    /// string`. Null counts as absent.
    pub(crate) fn text(&mut self, key: &'static str, problems: &mut Problems) -> Option<String> {
        let path = self.path_of(key);
        let v = self.raw(key)?;
        let text = scalar_text(v);
        if text.is_none() {
            problems.push(&path, "must be a string");
        }
        text
    }

    /// A required, non-blank [`Obj::text`]: absent (or null) is `required`, blank is `must not
    /// be empty`; both read as the empty string.
    pub(crate) fn req_text(&mut self, key: &'static str, problems: &mut Problems) -> String {
        let path = self.path_of(key);
        let present = self
            .map
            .and_then(|m| m.get(key))
            .is_some_and(|v| !v.is_null());
        match self.text(key, problems) {
            Some(s) if !s.trim().is_empty() => s,
            Some(_) => {
                problems.push(&path, "must not be empty");
                String::new()
            }
            None => {
                if !present {
                    problems.push(&path, "required");
                }
                String::new()
            }
        }
    }

    /// An integer from `min` to `max`. Anything else written there, null included, is `must be
    /// an integer from {min} to {max}`.
    pub(crate) fn int_in(
        &mut self,
        key: &'static str,
        min: u64,
        max: u64,
        problems: &mut Problems,
    ) -> Option<u64> {
        let path = self.path_of(key);
        match self.get(key)?.as_u64() {
            Some(n) if (min..=max).contains(&n) => Some(n),
            _ => {
                problems.push(
                    &path,
                    format_args!("must be an integer from {min} to {max}"),
                );
                None
            }
        }
    }

    /// For Merlin's (tolerant) sections: every unread key becomes a warning (a problem beside
    /// others when the configuration has any: [`super::Config::from_value`]).
    pub(crate) fn warn_unknown(&self, warnings: &mut Problems) {
        for (k, hint) in self.unknown_keys() {
            warnings.push(
                &k,
                format_args!("{}{hint}", super::suggest::UNKNOWN_IGNORED),
            );
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
    humantime::parse_duration(t)
        .map_err(|e| format!("invalid duration {s:?} ({e}); use e.g. 30s, 500ms, 10m"))
}

/// Parses a byte size: `1024`, `512KiB`, `8MiB`, `1GiB`, `10MB`, `64KB`.
pub fn parse_bytes(s: &str) -> Option<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
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

    fn yaml(text: &str) -> Value {
        serde_yaml_ng::from_str(text).unwrap()
    }

    #[test]
    fn closed_mappings_name_the_keys_they_allow() {
        let v = yaml("{a: x, b: [1], 3: y, n: null, e: \" \"}");
        let mut p = Problems::default();
        let mut o = Obj::closed(Some(&v), "s", &["a", "b", "n", "e", "z"], &mut p);
        assert_eq!(o.text("a", &mut p).as_deref(), Some("x"));
        assert_eq!(o.text("b", &mut p), None);
        assert_eq!(o.req_text("z", &mut p), "");
        assert_eq!(o.req_text("n", &mut p), "");
        assert_eq!(o.req_text("e", &mut p), "");
        assert!(o.has("n") && !o.has("z"));
        assert_eq!(o.int_in("n", 1, 5, &mut p), None, "null is not an integer");
        assert_eq!(
            p.0,
            [
                "s.3: unknown key; expected one of a, b, n, e, z",
                "s.b: must be a string",
                "s.z: required",
                "s.n: required",
                "s.e: must not be empty",
                "s.n: must be an integer from 1 to 5",
            ]
        );
        let mut p = Problems::default();
        let list = yaml("[1]");
        let o = Obj::closed(Some(&list), "s", &["a"], &mut p);
        assert!(o.is_absent());
        assert_eq!(o.entries().count(), 0);
        assert_eq!(p.0, ["s: must be a mapping"]);
    }

    #[test]
    fn closed_entries_keep_file_order() {
        let v = yaml("{b: {c: 7}, a: 2}");
        let mut p = Problems::default();
        let mut o = Obj::closed(Some(&v), "", &["a", "b"], &mut p);
        let keys: Vec<String> = o.entries().map(|(k, _)| k).collect();
        assert_eq!(keys, ["b", "a"]);
        let mut inner = o.closed_obj("b", &["c"], &mut p);
        assert_eq!(inner.path(), "b");
        assert_eq!(inner.int_in("c", 1, 5, &mut p), None);
        assert_eq!(o.int_in("a", 1, 5, &mut p), Some(2));
        assert_eq!(p.0, ["b.c: must be an integer from 1 to 5"]);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert!(parse_duration("soon").is_err());
    }
}
