//! The defaults and ranges the README and the sink documents state, checked against the
//! configuration reader's: a default or a range changed on one side only fails here.
//!
//! The README writes a key as `` `key` (DEFAULT; LOW – HIGH: prose) ``: DEFAULT runs to the first
//! `;`, `: ` or `, ` outside backticks; the range, when there is one, opens the next `;`-part.
//! DEFAULT is compared with what the reader resolves when the key is absent (the configuration
//! `check-config` prints), the range with the one the reader names for a value far above it.
//! `N × `section.key`` is N times that key's documented default; a default with a `<…>`
//! placeholder is one derived at run time (unset in the configuration), except
//! `<prometheus_port>`, which is that key's documented default; `unset` / `none` are an unset
//! key, `required` a key without default.

use observation_publisher::config::{
    apply_sets, parse_bytes, parse_duration, Config, Needs, Problems,
};
use serde_json::Value as Json;
use serde_yaml_ng::Value as Yaml;
use std::collections::BTreeMap;

fn doc(name: &str) -> String {
    let p = format!("{}/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// One documented key: its default text and its range, if stated.
#[derive(Debug)]
struct Item {
    key: String,
    default: String,
    range: Option<(String, String)>,
}

/// Splits `text` at `sep` where it stands outside backticks and parentheses.
fn split_top<'a>(text: &'a str, seps: &[&str]) -> Vec<&'a str> {
    let (mut out, mut start, mut depth, mut tick) = (Vec::new(), 0, 0i32, false);
    let mut i = 0;
    while i < text.len() {
        let c = text[i..].chars().next().expect("char");
        match c {
            '`' => tick = !tick,
            '(' if !tick => depth += 1,
            ')' if !tick => depth -= 1,
            _ => {}
        }
        if !tick && depth == 0 {
            if let Some(s) = seps.iter().find(|s| text[i..].starts_with(**s)) {
                out.push(&text[start..i]);
                i += s.len();
                start = i;
                continue;
            }
        }
        i += c.len_utf8();
    }
    out.push(&text[start..]);
    out
}

/// The `` `key` (…) `` items of `text` (with `bare`, also `key (…)`), outside parentheses.
fn items(text: &str, bare: bool) -> Vec<Item> {
    let (mut out, mut depth, mut tick, mut open) = (Vec::new(), 0i32, false, None);
    let mut key = String::new();
    for (i, c) in text.char_indices() {
        match c {
            '`' => tick = !tick,
            '(' if !tick => {
                if depth == 0 {
                    let before = text[..i].strip_suffix(' ').unwrap_or("");
                    key = match before.strip_suffix('`') {
                        Some(b) => b.rsplit('`').next().unwrap_or("").to_string(),
                        None if bare => before
                            .rsplit(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                            .next()
                            .unwrap_or("")
                            .to_string(),
                        None => String::new(),
                    };
                    open = Some(i + 1);
                }
                depth += 1;
            }
            ')' if !tick => {
                depth -= 1;
                if depth == 0 {
                    let inner = &text[open.take().expect("open")..i];
                    let valid =
                        !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_');
                    if valid {
                        out.push(item(&key, inner));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn item(key: &str, inner: &str) -> Item {
    let parts = split_top(inner, &["; "]);
    let default = split_top(parts[0], &[": ", ", "])[0].trim().to_string();
    let range = parts.get(1).and_then(|p| {
        let (lo, rest) = p.split_once(" – ")?;
        let hi = rest.split([' ', ',', ':', ';', ')']).next()?;
        (!lo.contains(' ')).then(|| (lo.to_string(), hi.to_string()))
    });
    Item {
        key: key.to_string(),
        default,
        range,
    }
}

/// Cell `cell` (0 is the first) of the README table row whose first cell is `first`.
fn row<'a>(readme: &'a str, first: &str, cell: usize) -> &'a str {
    let line = readme
        .lines()
        .find(|l| l.starts_with(&format!("| {first} |")))
        .unwrap_or_else(|| panic!("README has no table row {first}"));
    // Cells split at `|` but not at an escaped `\|` inside one.
    let mut cells = Vec::new();
    let mut start = 0;
    for (i, c) in line.char_indices() {
        if c == '|' && !line[..i].ends_with('\\') {
            cells.push(line[start..i].trim());
            start = i + 1;
        }
    }
    cells.get(cell + 1).copied().expect("cell")
}

/// A configuration with one sink of each type and a local sink, every optional key absent.
fn base() -> Yaml {
    let mut v: Yaml = serde_yaml_ng::from_str(&doc("config/merlin-binary.yaml")).expect("yaml");
    let extra: Yaml = serde_yaml_ng::from_str(
        "- {type: ARIZE, config: {api_key: a, space_key: s}}\n\
         - {type: MAXCOMPUTE, config: {project: p, dataset: d, ttl_days: 1, access_key_id: i, \
            access_key_secret: k, access_url: 'https://mc.example/api'}}",
    )
    .expect("yaml");
    let sinks = v["observation_sinks"].as_sequence_mut().expect("sinks");
    sinks.extend(extra.as_sequence().expect("list").iter().cloned());
    v["local_sink"] = serde_yaml_ng::from_str("{path: /tmp/x}").expect("yaml");
    v
}

fn resolve(v: &Yaml) -> Result<Json, Problems> {
    let (cfg, _) = Config::from_value(v, Needs::RUN)?;
    Ok(serde_json::to_value(&cfg).expect("json"))
}

/// Where a documented key lives: its `--set` path and its path in the resolved configuration.
struct Place {
    set: String,
    json: Vec<String>,
}

fn place(prefix: &str, key: &str) -> Place {
    let set = format!("{prefix}.{key}");
    let json = set.split('.').map(str::to_string).collect();
    Place { set, json }
}

fn lookup<'a>(j: &'a Json, path: &[String]) -> Option<&'a Json> {
    path.iter().try_fold(j, |j, k| match j {
        Json::Array(a) => a.get(k.parse::<usize>().ok()?),
        _ => j.get(k.as_str()),
    })
}

fn unquote(s: &str) -> &str {
    s.trim().trim_matches('`')
}

/// Whether the documented default `d` is the resolved `value`; `known` holds the documented
/// defaults read so far (by `section.key`).
fn same(d: &str, value: Option<&Json>, known: &BTreeMap<String, String>) -> bool {
    let d = unquote(d);
    if let Some((n, other)) = d.split_once(" × ") {
        let other = known
            .get(unquote(other))
            .and_then(|o| parse_bytes(unquote(o)));
        let n: u64 = n.parse().expect("factor");
        return other.map(|o| o * n) == value.and_then(Json::as_u64);
    }
    let d = d.replace("<prometheus_port>", unquote(&known["prometheus_port"]));
    match value {
        None | Some(Json::Null) => d == "unset" || d == "none" || d.contains('<'),
        Some(Json::Array(a)) => a.is_empty() && (d == "[]" || d == "none"),
        Some(Json::Bool(b)) => d == b.to_string(),
        Some(Json::Number(n)) => parse_bytes(&d).is_some() && parse_bytes(&d) == n.as_u64(),
        Some(Json::String(s)) => {
            *s == d || matches!((parse_duration(s), parse_duration(&d)), (Ok(a), Ok(b)) if a == b)
        }
        Some(Json::Object(_)) => false,
    }
}

/// The range the reader states for `key` when given a value far above any range.
fn code_range(place: &Place, resolved: &Json) -> (String, String) {
    let huge = match lookup(resolved, &place.json) {
        Some(Json::Number(_)) => "1000000000000000",
        Some(Json::String(_)) => "100000h",
        other => panic!("{}: no range for {other:?}", place.set),
    };
    let mut v = base();
    let mut p = Problems::default();
    apply_sets(&mut v, &[format!("{}={huge}", place.set)], &mut p);
    assert!(p.is_empty(), "{p:?}");
    let problems = resolve(&v)
        .expect_err("a value far above the range is refused")
        .0;
    let key = place.json.last().expect("key");
    let msg = problems
        .iter()
        .find_map(|m| m.split_once(&format!("{key}: must be from ")).map(|x| x.1))
        .unwrap_or_else(|| panic!("{}: no range problem in {problems:?}", place.set));
    let (lo, rest) = msg.split_once(" to ").expect("to");
    let hi = rest.split(", found").next().expect("found");
    (lo.to_string(), hi.to_string())
}

fn same_bound(doc: &str, code: &str, numeric: bool) -> bool {
    if numeric {
        parse_bytes(doc).is_some() && parse_bytes(doc) == parse_bytes(code)
    } else {
        matches!((parse_duration(doc), parse_duration(code)), (Ok(a), Ok(b)) if a == b)
    }
}

/// Checks `items` found under `prefix` (a `--set` path) against the resolved configuration,
/// recording each default in `known` and each mismatch in `wrong`.
fn check(
    what: &str,
    prefix: &str,
    items: &[Item],
    resolved: &Json,
    known: &mut BTreeMap<String, String>,
    wrong: &mut Vec<String>,
) {
    assert!(!items.is_empty(), "{what}: no documented keys found");
    for it in items {
        if it.default == "required" {
            continue;
        }
        let pl = place(prefix, &it.key);
        let value = lookup(resolved, &pl.json);
        if !same(&it.default, value, known) {
            wrong.push(format!(
                "{what}: `{}` documented default {:?}, the code's {}",
                it.key,
                it.default,
                value.map_or("(no such key)".into(), Json::to_string)
            ));
        }
        known.insert(format!("{prefix}.{}", it.key), it.default.clone());
        if let Some((lo, hi)) = &it.range {
            let numeric = matches!(value, Some(Json::Number(_)));
            let (clo, chi) = code_range(&pl, resolved);
            if !same_bound(lo, &clo, numeric) || !same_bound(hi, &chi, numeric) {
                wrong.push(format!(
                    "{what}: `{}` documented range {lo} – {hi}, the code's {clo} – {chi}",
                    it.key
                ));
            }
        }
    }
}

/// The `key: value` lines of a YAML example whose comment (or section) says they are ours.
fn yaml_example(text: &str, from: &str, to: &str) -> Vec<Item> {
    let start = text.find(from).expect("example start") + from.len();
    let end = start + text[start..].find(to).expect("example end");
    text[start..end]
        .lines()
        .filter_map(|l| {
            let (kv, _) = l.split_once(" #").unwrap_or((l, ""));
            let (k, v) = kv.trim().split_once(": ")?;
            Some(Item {
                key: k.to_string(),
                default: v.trim().to_string(),
                range: None,
            })
        })
        .collect()
}

#[test]
fn documented_defaults_and_ranges_are_the_codes() {
    let readme = doc("README.md");
    let resolved = resolve(&base()).expect("the base configuration is valid");
    let mut known = BTreeMap::new();
    known.insert(
        "prometheus_port".to_string(),
        row(&readme, "`prometheus_port`", 1).to_string(),
    );
    let mut wrong = Vec::new();

    // The publisher's own sections, in an order where `max_log_bytes`'s factor is known.
    for section in [
        "consumer",
        "batching",
        "dead_letter",
        "local_sink",
        "server",
        "logging",
        "metrics",
    ] {
        let cell = row(&readme, &format!("`{section}`"), 1);
        let found = items(cell, false);
        check(section, section, &found, &resolved, &mut known, &mut wrong);
        // Every key the reader resolves is documented in its row, in the notation.
        if let Some(Json::Object(m)) = resolved.get(section) {
            for k in m.keys() {
                if !found.iter().any(|i| i.key == *k) {
                    wrong.push(format!("{section}: `{k}` is not documented"));
                }
            }
        }
    }

    let arize = row(
        &readme,
        "`observation_sinks[].config` of an `ARIZE` sink (ours)",
        1,
    );
    let found = items(arize, false);
    check(
        "README ARIZE",
        "observation_sinks.1.config",
        &found,
        &resolved,
        &mut known,
        &mut wrong,
    );
    let mc = row(
        &readme,
        "`observation_sinks[].config` of a `MAXCOMPUTE` sink",
        2,
    );
    // Our keys: from `ours: ` to the end of that sentence.
    let ours = split_top(
        mc.split_once("ours: ").expect("MAXCOMPUTE: ours").1,
        &[". "],
    )[0];
    let found = items(ours, false);
    check(
        "README MAXCOMPUTE",
        "observation_sinks.2.config",
        &found,
        &resolved,
        &mut known,
        &mut wrong,
    );

    // README's BigQuery example names our keys in a YAML comment.
    let comment: String = readme
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("# optional, ours:"))
        .take_while(|l| l.trim_start().starts_with('#'))
        .map(|l| l.trim_start().trim_start_matches('#').trim())
        .collect::<Vec<_>>()
        .join(" ");
    let found = items(&comment, true);
    check(
        "README BIGQUERY",
        "observation_sinks.0.config",
        &found,
        &resolved,
        &mut known,
        &mut wrong,
    );

    // docs/bigquery.md and docs/arize.md show our keys at their defaults.
    let bq = yaml_example(
        &doc("docs/bigquery.md"),
        "# ours, at their defaults\n",
        "delivery:",
    );
    check(
        "docs/bigquery.md",
        "observation_sinks.0.config",
        &bq,
        &resolved,
        &mut known,
        &mut wrong,
    );
    let bq_keys = [
        "storage_endpoint",
        "rest_base_url",
        "auth",
        "max_request_bytes",
        "max_inflight_bytes",
        "connections",
        "clustering",
        "emulator_compat",
        "kafka_columns",
    ];
    for k in bq_keys {
        if !bq.iter().any(|i| i.key == k) {
            wrong.push(format!("docs/bigquery.md: `{k}` is not in the example"));
        }
    }
    let arize_md = doc("docs/arize.md");
    let ar: Vec<Item> = yaml_example(&arize_md, "- type: ARIZE\n", "```")
        .into_iter()
        .filter(|i| !i.key.ends_with("_key"))
        .collect();
    check(
        "docs/arize.md",
        "observation_sinks.1.config",
        &ar,
        &resolved,
        &mut known,
        &mut wrong,
    );

    assert!(
        wrong.is_empty(),
        "documentation and code disagree:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_notation_reader_reads_defaults_ranges_and_nesting() {
    let got = items(
        "`a` (8MiB; 1KiB – 1GiB: x (y; z)), `b` (`0.0.0.0:<p>`), `c` (16 × `d.e`, 1,2 bytes; 1 – 2, more), f (9)",
        false,
    );
    let got: Vec<_> = got
        .iter()
        .map(|i| (i.key.as_str(), i.default.as_str(), i.range.clone()))
        .collect();
    let r = |a: &str, b: &str| Some((a.to_string(), b.to_string()));
    assert_eq!(
        got,
        vec![
            ("a", "8MiB", r("1KiB", "1GiB")),
            ("b", "`0.0.0.0:<p>`", None),
            ("c", "16 × `d.e`", r("1", "2")),
        ]
    );
    assert_eq!(items("x, f (9; 1s – 1day)", true)[0].range, r("1s", "1day"));
}
