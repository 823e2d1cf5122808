//! Kubernetes names and label values derived from project, model and version.
//!
//! Object names must be DNS-1123 labels: at most 63 characters of `[a-z0-9-]`, starting and
//! ending with an alphanumeric character. Label values allow `[A-Za-z0-9._-]`, at most 63
//! characters, alphanumeric at both ends. Merlin's names are usually valid already; when one is
//! not (too long, upper case, dots or underscores), it is cut and a stable hash of the *original*
//! text is appended, so two different inputs never map to one name and the same input always
//! maps to the same name.

use sha2::{Digest, Sha256};

/// Maximum length of a DNS-1123 label and of a label value.
pub const MAX_NAME: usize = 63;

/// Length of the hex hash suffix appended to shortened or rewritten names.
const HASH_LEN: usize = 8;

/// The names of every object one model version owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// ServiceAccount, Deployment and ScaledObject.
    pub workload: String,
    /// The Secret holding `config.yaml`.
    pub config_secret: String,
    /// The ConfigMap recording the claimed revision (the revision marker).
    pub marker: String,
}

impl Names {
    /// Derives every name for one model version.
    pub fn new(project: &str, model: &str, version: &str) -> Self {
        let identity = format!("{project}\u{0}{model}\u{0}{version}");
        let base = format!("{project}-{model}-{version}");
        Names {
            workload: object_name(&base, "publisher", &identity),
            config_secret: object_name(&base, "publisher-config", &identity),
            marker: object_name(&base, "publisher-revision", &identity),
        }
    }
}

/// First `HASH_LEN` hex digits of the SHA-256 of `text`.
pub(crate) fn short_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let mut out = String::with_capacity(HASH_LEN);
    for b in digest.iter().take(HASH_LEN / 2) {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Lower-cases, maps every character outside `[a-z0-9]` to `-`, collapses runs of `-` and trims
/// them from both ends.
fn sanitize_dns(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if c == '-' && (out.is_empty() || out.ends_with('-')) {
            continue;
        }
        out.push(c);
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

/// `<base>-<suffix>` as a DNS-1123 label. When `base` had to be rewritten or the result would
/// exceed 63 characters, the base is cut and `-<hash of identity>` inserted before the suffix.
pub(crate) fn object_name(base: &str, suffix: &str, identity: &str) -> String {
    let clean = sanitize_dns(base);
    let plain = format!("{clean}-{suffix}");
    if clean == base && plain.len() <= MAX_NAME {
        return plain;
    }
    let hash = short_hash(identity);
    let room = MAX_NAME - suffix.len() - HASH_LEN - 2;
    let mut cut: String = clean.chars().take(room).collect();
    while cut.ends_with('-') {
        cut.pop();
    }
    if cut.is_empty() {
        format!("{hash}-{suffix}")
    } else {
        format!("{cut}-{hash}-{suffix}")
    }
}

/// `text` as a label value: unchanged when valid, otherwise rewritten (invalid characters to
/// `-`, cut) with `-<hash>` appended.
pub fn label_value(text: &str) -> String {
    if is_label_value(text) {
        return text.to_string();
    }
    let mut clean: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    clean = clean
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string();
    let room = MAX_NAME - HASH_LEN - 1;
    let mut cut: String = clean.chars().take(room).collect();
    while cut.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        cut.pop();
    }
    let hash = short_hash(text);
    if cut.is_empty() {
        hash
    } else {
        format!("{cut}-{hash}")
    }
}

/// Whether `text` is a valid (possibly empty) label value.
pub fn is_label_value(text: &str) -> bool {
    if text.is_empty() {
        return true;
    }
    text.len() <= MAX_NAME
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Whether `text` is a DNS-1123 label (object names, namespaces).
pub fn is_dns_label(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_NAME
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

/// Whether `text` is a DNS-1123 subdomain (Secret names, label-key prefixes).
pub fn is_dns_subdomain(text: &str) -> bool {
    !text.is_empty() && text.len() <= 253 && text.split('.').all(is_dns_label)
}

/// Whether `key` is a valid label or annotation key: `[prefix/]name`, the name at most 63
/// characters of `[A-Za-z0-9._-]`, alphanumeric at both ends.
pub fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    prefix.is_none_or(is_dns_subdomain) && !name.is_empty() && is_label_value(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_valid_names_are_kept() {
        let n = Names::new("sample", "credit-model", "3");
        assert_eq!(n.workload, "sample-credit-model-3-publisher");
        assert_eq!(n.config_secret, "sample-credit-model-3-publisher-config");
        assert_eq!(n.marker, "sample-credit-model-3-publisher-revision");
    }

    #[test]
    fn long_names_are_cut_with_a_stable_hash() {
        let model = "a-very-long-model-name-that-goes-on-and-on-and-on-for-ever";
        let a = Names::new("project", model, "1");
        let b = Names::new("project", model, "2");
        for n in [&a, &b] {
            for name in [&n.workload, &n.config_secret, &n.marker] {
                assert!(is_dns_label(name), "{name}");
                assert!(name.len() <= MAX_NAME, "{name}");
            }
        }
        assert_ne!(
            a.workload, b.workload,
            "versions must not collide after cutting"
        );
        assert_eq!(a, Names::new("project", model, "1"), "stable");
        assert!(a.config_secret.ends_with("-publisher-config"));
    }

    #[test]
    fn rewritten_names_get_a_hash_so_they_do_not_collide() {
        let a = Names::new("p", "Model_A", "1");
        let b = Names::new("p", "model-a", "1");
        assert!(is_dns_label(&a.workload), "{}", a.workload);
        assert_ne!(a.workload, b.workload);
        assert_eq!(b.workload, "p-model-a-1-publisher");
    }

    #[test]
    fn names_of_only_invalid_characters_are_still_valid() {
        let n = Names::new("___", "...", "__");
        assert!(is_dns_label(&n.workload), "{}", n.workload);
    }

    #[test]
    fn label_values() {
        assert_eq!(label_value("credit-model"), "credit-model");
        assert_eq!(label_value(""), "");
        let long = "x".repeat(80);
        let v = label_value(&long);
        assert!(is_label_value(&v) && v.len() <= MAX_NAME, "{v}");
        let v = label_value("-bad value!");
        assert!(is_label_value(&v), "{v}");
        assert_ne!(label_value("a b"), label_value("a/b"));
    }

    #[test]
    fn label_keys() {
        assert!(is_label_key("team"));
        assert!(is_label_key("gojek.com/team"));
        assert!(!is_label_key("Gojek.com/team"));
        assert!(!is_label_key("/team"));
        assert!(!is_label_key("team/"));
        assert!(!is_label_key("a b"));
    }
}
