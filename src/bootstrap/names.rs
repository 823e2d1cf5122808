//! Kubernetes names and label values derived from project, model and version.
//!
//! Object names must be DNS-1123 labels: at most 63 characters of `[a-z0-9-]`, starting and
//! ending with an alphanumeric character. Label values allow `[A-Za-z0-9._-]`, at most 63
//! characters, alphanumeric at both ends.
//!
//! `{project}-{model}-{version}` is not injective: (`fraud-team`, `model`, 2) and (`fraud`,
//! `team-model`, 2) read the same. So **every** generated name carries a short hash of the
//! NUL-separated (project, model, version): `<readable part>-<hash>-<suffix>`, the readable part
//! rewritten to `[a-z0-9-]` and cut so the name fits in 63 characters. Two identities never
//! share a name (short of a 32-bit hash collision, which the identity labels still catch before
//! any write or delete), and the same identity always gets the same names.
//!
//! [`Names::legacy`] gives the names of the previous scheme (a hash only when a name had to be
//! rewritten), so `bootstrap` can find and adopt objects it created before.

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

/// The identity text every name's hash is computed from: project, model and version separated
/// by NUL (which none of them can contain).
pub fn identity(project: &str, model: &str, version: &str) -> String {
    format!("{project}\u{0}{model}\u{0}{version}")
}

/// First 8 hex digits of the SHA-256 of the version's [`identity`].
pub fn identity_hash(project: &str, model: &str, version: &str) -> String {
    short_hash(&identity(project, model, version))
}

impl Names {
    /// Derives every name for one model version (injective: each carries the identity hash).
    pub fn new(project: &str, model: &str, version: &str) -> Self {
        let hash = identity_hash(project, model, version);
        let base = format!("{project}-{model}-{version}");
        Names {
            workload: hashed_name(&base, &hash, "publisher"),
            config_secret: hashed_name(&base, &hash, "publisher-config"),
            marker: hashed_name(&base, &hash, "publisher-revision"),
        }
    }

    /// The names the previous scheme gave (a hash only when a name had to be rewritten):
    /// objects created with them are found by these names and adopted when their identity
    /// labels are this version's.
    pub fn legacy(project: &str, model: &str, version: &str) -> Self {
        let identity = identity(project, model, version);
        let base = format!("{project}-{model}-{version}");
        Names {
            workload: object_name(&base, "publisher", &identity),
            config_secret: object_name(&base, "publisher-config", &identity),
            marker: object_name(&base, "publisher-revision", &identity),
        }
    }
}

/// `<readable base>-<hash>-<suffix>` as a DNS-1123 label of at most 63 characters.
fn hashed_name(base: &str, hash: &str, suffix: &str) -> String {
    let room = MAX_NAME - suffix.len() - hash.len() - 2;
    let mut cut: String = sanitize_dns(base).chars().take(room).collect();
    while cut.ends_with('-') {
        cut.pop();
    }
    if cut.is_empty() {
        format!("{hash}-{suffix}")
    } else {
        format!("{cut}-{hash}-{suffix}")
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

/// The previous scheme: `<base>-<suffix>` as a DNS-1123 label. When `base` had to be rewritten
/// or the result would exceed 63 characters, the base is cut and `-<hash of identity>` inserted
/// before the suffix.
pub(crate) fn object_name(base: &str, suffix: &str, identity: &str) -> String {
    let clean = sanitize_dns(base);
    let plain = format!("{clean}-{suffix}");
    if clean == base && plain.len() <= MAX_NAME {
        return plain;
    }
    hashed_name(&clean, &short_hash(identity), suffix)
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

/// Whether `q` looks like a Kubernetes quantity: a decimal number with an optional SI, binary or
/// exponent suffix.
pub fn is_quantity(q: &str) -> bool {
    let num_end = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(num_end);
    let num = num.strip_prefix('+').unwrap_or(num);
    let digits_ok = !num.is_empty()
        && !num.starts_with('-')
        && num.chars().filter(|c| *c == '.').count() <= 1
        && num.chars().any(|c| c.is_ascii_digit())
        && num.chars().all(|c| c.is_ascii_digit() || c == '.');
    let suffix_ok = [
        "", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ]
    .contains(&suffix)
        || suffix.strip_prefix(['e', 'E']).is_some_and(|e| {
            !e.is_empty()
                && e.trim_start_matches(['+', '-'])
                    .chars()
                    .all(|c| c.is_ascii_digit())
        });
    digits_ok && suffix_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_readable_and_carry_the_identity_hash() {
        let n = Names::new("sample", "credit-model", "3");
        let h = identity_hash("sample", "credit-model", "3");
        assert_eq!(h.len(), HASH_LEN);
        assert_eq!(n.workload, format!("sample-credit-model-3-{h}-publisher"));
        assert_eq!(
            n.config_secret,
            format!("sample-credit-model-3-{h}-publisher-config")
        );
        assert_eq!(
            n.marker,
            format!("sample-credit-model-3-{h}-publisher-revision")
        );
    }

    #[test]
    fn colliding_identities_get_disjoint_names() {
        let a = Names::new("fraud-team", "model", "2");
        let b = Names::new("fraud", "team-model", "2");
        for (x, y) in [
            (&a.workload, &b.workload),
            (&a.config_secret, &b.config_secret),
            (&a.marker, &b.marker),
        ] {
            assert_ne!(x, y);
        }
        // The previous scheme gave both the same names.
        assert_eq!(
            Names::legacy("fraud-team", "model", "2"),
            Names::legacy("fraud", "team-model", "2")
        );
        assert_eq!(
            Names::legacy("sample", "credit-model", "3").workload,
            "sample-credit-model-3-publisher"
        );
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
    }

    #[test]
    fn names_of_only_invalid_characters_are_still_valid() {
        let n = Names::new("___", "...", "__");
        assert!(is_dns_label(&n.workload), "{}", n.workload);
        let n = Names::legacy("___", "...", "__");
        assert!(is_dns_label(&n.workload), "{}", n.workload);
    }

    proptest::proptest! {
        #[test]
        fn names_are_valid_and_injective(
            a in ("[a-zA-Z0-9._-]{0,40}", "[a-zA-Z0-9._ -]{0,40}", "[0-9]{1,4}"),
            b in ("[a-zA-Z0-9._-]{0,40}", "[a-zA-Z0-9._ -]{0,40}", "[0-9]{1,4}"),
        ) {
            let na = Names::new(&a.0, &a.1, &a.2);
            let nb = Names::new(&b.0, &b.1, &b.2);
            for n in [&na.workload, &na.config_secret, &na.marker] {
                proptest::prop_assert!(is_dns_label(n) && n.len() <= MAX_NAME, "{}", n);
            }
            if a != b {
                proptest::prop_assert_ne!(&na.workload, &nb.workload);
                proptest::prop_assert_ne!(&na.config_secret, &nb.config_secret);
                proptest::prop_assert_ne!(&na.marker, &nb.marker);
            }
        }
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
