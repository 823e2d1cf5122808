//! Layering: file → environment variables → `--set` flags, on one YAML tree, before the typed
//! read in [`super::Config::from_value`].

use super::origin::Origins;
use super::value::Problems;
use super::{Config, Needs};
use serde_yaml_ng::{Mapping, Value};
use std::ffi::OsString;
use std::path::Path;

/// Prefix of configuration environment variables: `OBS_PUBLISHER__SECTION__KEY`.
pub const ENV_PREFIX: &str = "OBS_PUBLISHER__";

/// A configuration as `run` and `check-config` load it.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The layered tree the configuration was read from.
    pub value: Value,
    /// The configuration.
    pub config: Config,
    /// Warnings (unknown keys in Merlin's sections), each saying where it was set.
    pub warnings: Vec<String>,
    origins: Origins,
    secrets: crate::redact::Scrubber,
}

impl Loaded {
    /// The files the configuration and the environment (`env`: a variable's value by name)
    /// name, checked the way `run` uses them ([`super::preflight::preflight`]): every one it
    /// could not use is a problem saying where its setting was made.
    pub fn preflight(&self, env: &dyn Fn(&str) -> Option<OsString>) -> Result<(), Problems> {
        let mut p = super::preflight::preflight(&self.config, env);
        if p.is_empty() {
            return Ok(());
        }
        p.annotate(|key| self.origins.of(&self.value, key));
        scrub(&mut p, &self.secrets);
        Err(p)
    }
}

/// Loads the file at `path` with `env` and `sets` over it ([`load_layers`]) and reads it for
/// `needs`. Every problem and warning says where its value came from ([`Origins::of`]) and
/// shows the value, except secrets ([`redact_collect`]): those are hidden wherever they appear.
pub fn load(
    path: &Path,
    env: Vec<(String, String)>,
    sets: &[String],
    needs: Needs,
) -> Result<Loaded, Problems> {
    // What the layering refuses names an override's key, never its value: the value of a key
    // not yet read may be a secret.
    let scrubber = override_scrubber(env.clone(), sets);
    let (value, origins) = load_layers(Some(path), env, sets).map_err(|mut p| {
        scrub(&mut p, &scrubber);
        p
    })?;
    let mut hidden = Vec::new();
    redact_collect(&mut value.clone(), &mut hidden);
    let secrets = crate::redact::Scrubber::new(hidden);
    let finish = |mut p: Problems| {
        p.annotate(|key| origins.of(&value, key));
        scrub(&mut p, &secrets);
        p
    };
    match Config::read(&value, needs) {
        Ok((config, warnings)) => {
            let warnings = finish(warnings).0;
            Ok(Loaded {
                config,
                warnings,
                value,
                origins,
                secrets,
            })
        }
        Err(p) => Err(finish(p)),
    }
}

fn scrub(p: &mut Problems, s: &crate::redact::Scrubber) {
    for m in &mut p.0 {
        *m = s.scrub(m).into_owned();
    }
}

/// Reads the YAML file (or starts from an empty tree), unwraps Hydra's `environment:` level,
/// then applies `env` (pairs of name and value; only `OBS_PUBLISHER__…` are used) and `sets`
/// (`path.to.key=value`).
pub fn load_value(
    path: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
    sets: &[String],
) -> Result<Value, Problems> {
    load_layers(path, env, sets).map(|(v, _)| v)
}

/// Like [`load_value`], also returning where each layer came from.
pub fn load_layers(
    path: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
    sets: &[String],
) -> Result<(Value, Origins), Problems> {
    let mut problems = Problems::default();
    let mut origins = Origins::default();
    let mut text = None;
    let mut root = match path {
        None => Value::Mapping(Mapping::new()),
        Some(p) => {
            let t = std::fs::read_to_string(p).map_err(|e| {
                let mut pr = Problems::default();
                pr.push("", format_args!("cannot read {}: {e}", p.display()));
                pr
            })?;
            let v = match serde_yaml_ng::from_str::<Value>(&t) {
                Ok(Value::Null) => Value::Mapping(Mapping::new()),
                Ok(v) => v,
                Err(e) => {
                    let mut pr = Problems::default();
                    pr.push("", format_args!("{} is not valid YAML: {e}", p.display()));
                    return Err(pr);
                }
            };
            text = Some((p.display().to_string(), t));
            v
        }
    };
    let mut wrapped = false;
    if let Value::Mapping(m) = &root {
        if let Some(env @ Value::Mapping(_)) = m.get("environment") {
            root = env.clone();
            wrapped = true;
        }
    }
    if let Some((name, t)) = text {
        origins.file(name, t, wrapped);
    }
    if !root.is_mapping() {
        problems.push("", "the configuration must be a YAML mapping");
        return Err(problems);
    }
    env_over(&mut root, env, &mut problems, &mut origins);
    sets_over(&mut root, sets, &mut problems, &mut origins);
    if problems.is_empty() {
        Ok((root, origins))
    } else {
        Err(problems)
    }
}

/// Applies `OBS_PUBLISHER__A__B=value` variables to the tree.
pub fn apply_env(
    root: &mut Value,
    env: impl IntoIterator<Item = (String, String)>,
    problems: &mut Problems,
) {
    env_over(root, env, problems, &mut Origins::default());
}

/// Applies `path.to.key=value` overrides (`--set`) to the tree.
pub fn apply_sets(root: &mut Value, sets: &[String], problems: &mut Problems) {
    sets_over(root, sets, problems, &mut Origins::default());
}

fn env_over(
    root: &mut Value,
    env: impl IntoIterator<Item = (String, String)>,
    problems: &mut Problems,
    origins: &mut Origins,
) {
    let mut vars: Vec<(String, String)> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    vars.sort(); // deterministic order
    for (k, v) in vars {
        let path: Vec<String> = k[ENV_PREFIX.len()..]
            .split("__")
            .map(|s| s.to_ascii_lowercase())
            .collect();
        if path.iter().any(String::is_empty) {
            problems.push(
                "",
                format_args!("environment variable {k}: empty path segment"),
            );
            continue;
        }
        // A secret, and any librdkafka value, is text: a password `007` or `1e3` read as a
        // YAML number would reach the service as `7` or `1000`.
        let text = path.last().is_some_and(|key| is_secret_key(key))
            || path.iter().rev().nth(1).map(String::as_str) == Some("additional_consumer_config");
        let value = if text { Value::String(v) } else { scalar(&v) };
        match set_path(root, &path, value) {
            Ok(()) => origins.overridden(&path, k),
            Err(e) => problems.push("", format_args!("environment variable {k}: {e}")),
        }
    }
}

fn sets_over(root: &mut Value, sets: &[String], problems: &mut Problems, origins: &mut Origins) {
    for s in sets {
        let Some((k, v)) = s.split_once('=') else {
            // No `=`: the whole argument may be a value given without its key.
            problems.push(
                "",
                "--set: expected key.path=value (the argument is not shown)",
            );
            continue;
        };
        let k = k.strip_prefix("environment.").unwrap_or(k);
        let path: Vec<String> = k.split('.').map(str::to_string).collect();
        if path.iter().any(String::is_empty) {
            problems.push("", format_args!("--set {k:?}: empty path segment"));
            continue;
        }
        match set_path(root, &path, scalar(v)) {
            Ok(()) => origins.overridden(&path, "--set".into()),
            Err(e) => problems.push("", format_args!("--set {k:?}: {e}")),
        }
    }
}

/// A scrubber for the values of overrides (`--set` and `OBS_PUBLISHER__…` variables), for what
/// the layering itself refuses (a path that cannot be set): before the tree is read, any of
/// them may be a secret. Values shorter than [`crate::redact::MIN_SECRET_LEN`] are not searched
/// for.
pub fn override_scrubber(
    env: impl IntoIterator<Item = (String, String)>,
    sets: &[String],
) -> crate::redact::Scrubber {
    let mut values: Vec<String> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .map(|(_, v)| v)
        .collect();
    values.extend(
        sets.iter()
            .filter_map(|s| s.split_once('='))
            .map(|(_, v)| v.to_string()),
    );
    // The tree holds the parsed scalar (`'abc'` → `abc`): hide that form too.
    let parsed: Vec<String> = values
        .iter()
        .filter_map(|v| match scalar(v) {
            Value::String(s) if s != *v => Some(s),
            _ => None,
        })
        .collect();
    values.extend(parsed);
    crate::redact::Scrubber::new(values)
}

/// Parses an override as a YAML scalar (`1000` → number, `true` → bool, `null` → null), or
/// keeps it as text.
fn scalar(v: &str) -> Value {
    match serde_yaml_ng::from_str::<Value>(v) {
        Ok(val @ (Value::Number(_) | Value::Bool(_) | Value::Null | Value::String(_))) => val,
        _ => Value::String(v.to_string()),
    }
}

fn set_path(node: &mut Value, path: &[String], v: Value) -> Result<(), String> {
    let (head, rest) = path.split_first().expect("non-empty path");
    match node {
        Value::Sequence(items) => {
            let i: usize = head
                .parse()
                .map_err(|_| format!("{head:?} indexes a list; use a number"))?;
            let item = items
                .get_mut(i)
                .ok_or_else(|| format!("list index {i} is out of range"))?;
            if rest.is_empty() {
                *item = v;
                Ok(())
            } else {
                set_path(item, rest, v)
            }
        }
        Value::Null => {
            *node = Value::Mapping(Mapping::new());
            set_path(node, path, v)
        }
        Value::Mapping(m) => {
            let key = Value::String(head.clone());
            if rest.is_empty() {
                m.insert(key, v);
                Ok(())
            } else {
                let child = m.entry(key).or_insert(Value::Null);
                set_path(child, rest, v)
            }
        }
        _ => Err(format!("{head:?} is below a scalar value")),
    }
}

/// Whether a key names a secret whose value must never be printed or logged.
fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "password",
        "secret",
        "api_key",
        "space_key",
        "token",
        "access_key_id",
        "private_key",
        "credentials",
    ]
    .iter()
    .any(|s| k.contains(s))
        || k.ends_with(".pem")
        || k.ends_with(".key")
        || k == "sasl.username"
}

/// Replaces every secret value in the tree with `"<redacted>"`: every
/// `additional_consumer_config` value whose key is not a known non-secret librdkafka key
/// ([`crate::redact::NON_SECRET_CONSUMER_KEYS`]), values of keys that name a secret elsewhere,
/// and the credentials inside URLs and server lists (`user:password@`).
pub fn redact(v: &mut Value) {
    redact_collect(v, &mut Vec::new());
}

/// Like [`redact`], and collects every value it hides (to scrub them from free text).
pub fn redact_collect(v: &mut Value, hidden: &mut Vec<String>) {
    match v {
        Value::Mapping(m) => {
            for (k, val) in m.iter_mut() {
                let key = k.as_str().unwrap_or("");
                if key == "additional_consumer_config" {
                    if let Value::Mapping(entries) = val {
                        for (ck, cv) in entries.iter_mut() {
                            let ck = ck.as_str().unwrap_or("");
                            if crate::redact::is_non_secret_consumer_key(ck) {
                                redact_collect(cv, hidden);
                            } else {
                                hide(cv, hidden);
                            }
                        }
                        continue;
                    }
                }
                if is_secret_key(key) {
                    hide(val, hidden);
                } else {
                    redact_collect(val, hidden);
                }
            }
        }
        Value::Sequence(items) => items.iter_mut().for_each(|i| redact_collect(i, hidden)),
        Value::String(s) => {
            let parts = crate::redact::userinfo_parts(s);
            if !parts.is_empty() {
                *s = crate::redact::strip_userinfo(s).into_owned();
                hidden.extend(parts);
            }
        }
        _ => {}
    }
}

/// Replaces a secret value (kept if null) and records its text.
fn hide(v: &mut Value, hidden: &mut Vec<String>) {
    fn texts(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Number(n) => out.push(n.to_string()),
            Value::Mapping(m) => m.iter().for_each(|(_, x)| texts(x, out)),
            Value::Sequence(items) => items.iter().for_each(|x| texts(x, out)),
            _ => {}
        }
    }
    if !v.is_null() {
        texts(v, hidden);
        *v = Value::String(crate::redact::REDACTED.into());
    }
}
