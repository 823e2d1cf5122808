//! The source tree's layering, read from the code's own paths (`crate::…`, `super::…`,
//! `self::…`; tests excluded): no circle between the crate's top-level modules, configuration
//! imports no sink and nothing that runs the pipeline, no sink imports another, and no source
//! file is over 800 lines. `cargo test --test it layering -- --nocapture` prints the graph's
//! numbers that docs/architecture.md quotes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A source file: its module path (`["sink", "bigquery", "writer", "driver"]`) and its code
/// without its test module.
struct File {
    path: PathBuf,
    module: Vec<String>,
    code: String,
    lines: usize,
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_test(rel: &Path) -> bool {
    let name = rel.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    name == "tests"
        || name.ends_with("_tests")
        || rel.components().any(|c| c.as_os_str() == "tests")
}

/// The code before the file's `#[cfg(test)] mod … {` block (kept at the end of a file here).
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut lines = code.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod ") && n.trim_end().ends_with('{'))
        {
            break;
        }
        out.push_str(without_comment(line));
        out.push('\n');
    }
    out
}

/// `line` without its `//` comment (doc comments name paths they do not use).
fn without_comment(line: &str) -> &str {
    let mut quotes = 0;
    let b = line.as_bytes();
    for i in 0..b.len() {
        match b[i] {
            b'"' if i == 0 || b[i - 1] != b'\\' => quotes += 1,
            b'/' if quotes % 2 == 0 && b.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
    }
    line
}

fn load() -> Vec<File> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    files(&src, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&src).unwrap().to_path_buf();
            let raw = std::fs::read_to_string(&path).expect("read");
            let mut module: Vec<String> = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if module
                .last()
                .is_some_and(|m| m == "mod" || m == "lib" || m == "main")
            {
                module.pop();
            }
            let code = if is_test(&rel) {
                String::new()
            } else {
                without_tests(&raw)
            };
            File {
                lines: raw.lines().count(),
                path: rel,
                module,
                code,
            }
        })
        .collect()
}

/// Every module path the code names, absolute (`crate::a::b`, `super::b`, `use crate::{a, b::c}`).
fn named(file: &File) -> Vec<Vec<String>> {
    let code = &file.code;
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let ident = |i: usize| -> usize {
        let mut j = i;
        while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_') {
            j += 1;
        }
        j
    };
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b':');
        let end = ident(i);
        if !starts_word || end == i {
            i += 1;
            continue;
        }
        let word = &code[i..end];
        if !matches!(word, "crate" | "super" | "self") || !code[end..].starts_with("::") {
            i = end;
            continue;
        }
        // The base: the crate root, or this file's module walked up.
        let mut base: Vec<String> = match word {
            "crate" => Vec::new(),
            "super" => file.module[..file.module.len().saturating_sub(1)].to_vec(),
            _ => file.module.clone(),
        };
        let mut j = end + 2;
        while code[j..].starts_with("super::") {
            base.pop();
            j += "super::".len();
        }
        paths_at(code, j, &base, &mut out);
        i = j;
    }
    out
}

/// The paths starting at `at` below `base`: `a::b`, or a group `{a, b::{c, d}}`.
fn paths_at(code: &str, at: usize, base: &[String], out: &mut Vec<Vec<String>>) {
    let rest = &code[at..];
    if let Some(group) = rest.strip_prefix('{') {
        let mut depth = 0;
        let mut item_start = 0;
        for (k, ch) in group.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    paths_at(code, at + 1 + item_start, base, out);
                    return;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    paths_at(code, at + 1 + item_start, base, out);
                    item_start = k + 1;
                }
                _ => {}
            }
        }
        return;
    }
    let trimmed = rest.trim_start();
    let at = at + (rest.len() - trimmed.len());
    let mut path = base.to_vec();
    let mut k = at;
    loop {
        let s = &code[k..];
        let n = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        if n == 0 {
            if s.starts_with('{') {
                paths_at(code, k, &path, out);
                return;
            }
            break;
        }
        path.push(s[..n].to_string());
        k += n;
        if !code[k..].starts_with("::") {
            break;
        }
        k += 2;
    }
    out.push(path);
}

/// Edges between modules at `depth` (1: the crate's top-level modules).
fn graph(files: &[File], within: &[&str], depth: usize) -> BTreeMap<String, BTreeSet<String>> {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let key = |m: &[String]| -> Option<String> {
        (m.len() >= within.len() + depth && m.iter().zip(within).all(|(a, b)| a == b))
            .then(|| m[within.len()..within.len() + depth].join("::"))
    };
    for f in files.iter().filter(|f| !f.code.is_empty()) {
        let Some(from) = key(&f.module) else { continue };
        g.entry(from.clone()).or_default();
        for p in named(f) {
            if let Some(to) = key(&p).filter(|to| *to != from) {
                g.get_mut(&from).unwrap().insert(to);
            }
        }
    }
    // Only modules that exist (a path's last part may be an item, not a module).
    let known: BTreeSet<String> = g.keys().cloned().collect();
    for to in g.values_mut() {
        to.retain(|t| known.contains(t));
    }
    g
}

/// A circle of the graph, if any.
fn circle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|s| s == m).unwrap();
                    let mut c = stack[at..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(m, g, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, g, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn the_modules_are_layered_and_no_file_is_over_800_lines() {
    let files = load();
    let top = graph(&files, &[], 1);
    let arrows: usize = top.values().map(BTreeSet::len).sum();
    let largest = files
        .iter()
        .filter(|f| !is_test(&f.path))
        .max_by_key(|f| f.lines)
        .unwrap();
    println!(
        "top-level modules: {}, arrows: {arrows}, largest source file: src/{} ({} lines)",
        top.len(),
        largest.path.display(),
        largest.lines
    );
    for (from, to) in &top {
        println!(
            "  {from} -> {}",
            to.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    assert!(
        top.len() > 20 && arrows > 40,
        "the reader found the modules and their paths"
    );
    assert_eq!(circle(&top), None, "a circle between top-level modules");

    let config = &top["config"];
    for runs in [
        "sink",
        "pipeline",
        "bootstrap",
        "commands",
        "source",
        "batch",
        "decode",
    ] {
        assert!(!config.contains(runs), "config imports {runs}");
    }

    let sinks = graph(&files, &["sink"], 1);
    let names: Vec<&String> = sinks
        .keys()
        .filter(|k| {
            files
                .iter()
                .any(|f| f.module.len() > 2 && f.module[1] == **k)
        })
        .collect();
    assert!(names.len() >= 4, "sink folders: {names:?}");
    for s in &names {
        for other in &names {
            assert!(
                s == other || !sinks[*s].contains(*other),
                "sink {s} imports sink {other}"
            );
        }
    }

    let over: Vec<String> = (files.iter())
        .filter(|f| f.lines > 800)
        .map(|f| format!("src/{} ({} lines)", f.path.display(), f.lines))
        .collect();
    assert!(over.is_empty(), "files over 800 lines: {over:?}");
}

/// The reader itself: groups, `super` chains, comments and a test module left out.
#[test]
fn the_path_reader_resolves_groups_and_super() {
    let f = File {
        path: "sink/bigquery/sink.rs".into(),
        module: ["sink", "bigquery", "sink"].map(String::from).to_vec(),
        code: without_tests(
            "use crate::{config::{A, B}, batch::Batch};\nuse super::super::arize::x;\n/// see crate::pipeline\nfn f() { self::g(); } // crate::decode\nlet u = \"http://h\"; crate::table::T;\n#[cfg(test)]\nmod tests {\n use crate::pipeline::X;\n}\n",
        ),
        lines: 0,
    };
    let got: BTreeSet<String> = named(&f).iter().map(|p| p.join("::")).collect();
    let want: BTreeSet<String> = [
        "config::A",
        "config::B",
        "batch::Batch",
        "sink::arize::x",
        "sink::bigquery::sink::g",
        "table::T",
    ]
    .map(String::from)
    .into();
    assert_eq!(got, want);
}
