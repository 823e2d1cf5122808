//! Turning what the reader found into feedback a person can act on: the known key a misspelt
//! one was probably meant to be, and a required key's absence tied to the misspelling beside
//! it.

use super::value::Problems;

/// The message of an unknown key in Merlin's (tolerant) sections.
pub(crate) const UNKNOWN_IGNORED: &str = "unknown key ignored";

/// The candidate closest to `key`, if it is close enough to be a misspelling: at most one edit
/// (insertion, deletion, substitution or swap of neighbours) per three characters, at most
/// three, ignoring case and `-` for `_`. Ties go to the first candidate.
pub(crate) fn closest<'a>(key: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let norm = |s: &str| -> Vec<char> {
        s.chars()
            .map(|c| {
                if c == '-' {
                    '_'
                } else {
                    c.to_ascii_lowercase()
                }
            })
            .collect()
    };
    let k = norm(key);
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let cn = norm(c);
        let allowed = (cn.len() / 3).clamp(1, 3);
        let d = distance(&k, &cn);
        if d <= allowed && d < cn.len() && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// Optimal string alignment distance: Levenshtein plus the swap of two neighbours (`lngier`).
fn distance(a: &[char], b: &[char]) -> usize {
    let w = b.len() + 1;
    let mut d: Vec<usize> = vec![0; (a.len() + 1) * w];
    for i in 0..=a.len() {
        for j in 0..=b.len() {
            d[i * w + j] = if i == 0 || j == 0 {
                i + j
            } else {
                let cost = usize::from(a[i - 1] != b[j - 1]);
                let mut v = (d[(i - 1) * w + j] + 1)
                    .min(d[i * w + j - 1] + 1)
                    .min(d[(i - 1) * w + j - 1] + cost);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    v = v.min(d[(i - 2) * w + j - 2] + 1);
                }
                v
            };
        }
    }
    d[a.len() * w + b.len()]
}

/// The parent path and the last key of a dotted path (`a.b[0].c` → `a.b[0]`, `c`).
fn split_last(path: &str) -> (&str, &str) {
    match path.rfind('.') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

/// Rewords each `required` problem whose key has a close unknown key beside it (in the same
/// mapping), reported in `problems` or `unknown`: `inference_schema: required (inference_shema
/// is set: a misspelling?)`.
pub(crate) fn hint_required(problems: &mut Problems, unknown: &Problems) {
    let unknown_keys: Vec<&str> = problems
        .entries()
        .chain(unknown.entries())
        .filter(|(path, msg)| {
            let rest = msg.strip_prefix(*path).unwrap_or(msg);
            rest.starts_with(": unknown key")
        })
        .map(|(path, _)| path)
        .collect();
    let mut rewords = Vec::new();
    for (i, (path, msg)) in problems.entries().enumerate() {
        if msg != format!("{path}: required") {
            continue;
        }
        let (parent, key) = split_last(path);
        let near = unknown_keys.iter().find_map(|u| {
            let (up, uk) = split_last(u);
            (up == parent && closest(uk, std::iter::once(key)).is_some()).then_some(uk)
        });
        if let Some(near) = near {
            rewords.push((i, format!("{msg} ({near} is set: a misspelling?)")));
        }
    }
    for (i, m) in rewords {
        problems.reword(i, m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_keys_are_suggested_and_far_ones_are_not() {
        let known = ["linger", "max_rows", "max_bytes", "max_inflight_bytes"];
        let s = |k: &str| closest(k, known.iter().copied());
        assert_eq!(s("lingr"), Some("linger"));
        assert_eq!(
            s("lngier"),
            Some("linger"),
            "a swap of neighbours is one edit"
        );
        assert_eq!(s("Max-Rows"), Some("max_rows"), "case and - for _");
        assert_eq!(s("max_byte"), Some("max_bytes"));
        assert_eq!(s("max_inflight"), None, "six edits away");
        assert_eq!(s("colour"), None);
        assert_eq!(
            closest("ab", ["a"].into_iter()),
            None,
            "not a whole rewrite"
        );
        assert_eq!(
            closest(
                "inference_shema",
                ["project", "inference_schema"].into_iter()
            ),
            Some("inference_schema")
        );
    }

    #[test]
    fn a_missing_required_key_names_the_misspelling_beside_it() {
        let mut p = Problems::default();
        p.push("inference_schema", "required");
        p.push("model_id", "required");
        p.push(
            "batching.lingr",
            "unknown key; did you mean batching.linger?",
        );
        let mut unknown = Problems::default();
        unknown.push("inference_shema", UNKNOWN_IGNORED);
        unknown.push("x.model_idd", UNKNOWN_IGNORED);
        hint_required(&mut p, &unknown);
        assert_eq!(
            p.0[0],
            "inference_schema: required (inference_shema is set: a misspelling?)"
        );
        assert_eq!(
            p.0[1], "model_id: required",
            "model_idd is in another mapping"
        );
        assert_eq!(p.entries().next().unwrap().0, "inference_schema");
    }
}
