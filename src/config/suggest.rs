//! The known key a misspelt one was probably meant to be (pure: the reader in `value.rs` and
//! the feedback in `feedback.rs` both use it).

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
}
