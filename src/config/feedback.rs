//! Turning what the reader found into feedback a person can act on: a required key's absence
//! tied to the misspelling beside it (the misspelling found by [`super::suggest`]).

use super::suggest::closest;
use super::value::Problems;

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
    use crate::config::suggest::UNKNOWN_IGNORED;

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
