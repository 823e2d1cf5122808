//! Name rules of the systems names flow into: BigQuery columns, tables and datasets, Kafka
//! topics and consumer groups. Pure; every rule returns the reason a name is refused, so the
//! configuration can say which rule a name breaks (exit 2).
//!
//! Sources (checked 2026-12):
//! - BigQuery column names, including **flexible column names**:
//!   <https://cloud.google.com/bigquery/docs/schemas#column_names> and
//!   <https://cloud.google.com/bigquery/docs/schemas#flexible-column-names>: letters (`\p{L}`),
//!   marks (`\p{M}`), numbers (`\p{N}`, also first), connectors (`\p{Pc}`), dashes (`\p{Pd}`),
//!   spaces and `& % = + : ' < > # |`; not `! " $ ( ) * , . / ; ? @ [ \ ] ^ ` { } ~`; at most 300
//!   characters; reserved prefixes (below); unique regardless of case.
//! - BigQuery table ids: `\p{L} \p{M} \p{N} \p{Pc} \p{Pd} \p{Zs}`, at most 1,024 characters
//!   (`TableReference.tableId` in the REST reference); dataset ids: letters, digits and
//!   underscores, at most 1,024 characters (`DatasetReference.datasetId`).
//! - Kafka topics: `[a-zA-Z0-9._-]`, 1 to 249 characters, not `.` or `..` (Kafka's
//!   `org.apache.kafka.common.internals.Topic.validate`). Consumer group ids have no character
//!   rules; only an empty one is refused here.

use regex::Regex;
use std::sync::LazyLock;

/// Longest BigQuery column name, in characters.
pub const MAX_COLUMN_CHARS: usize = 300;
/// Longest BigQuery table id, in characters.
pub const MAX_TABLE_CHARS: usize = 1024;
/// Longest BigQuery dataset id, in characters.
pub const MAX_DATASET_CHARS: usize = 1024;
/// Longest Kafka topic name.
pub const MAX_TOPIC_CHARS: usize = 249;

/// Column-name prefixes BigQuery reserves (compared without regard to case).
pub const RESERVED_COLUMN_PREFIXES: [&str; 9] = [
    "_TABLE_",
    "_FILE_",
    "_PARTITION",
    "_ROW_TIMESTAMP",
    "__ROOT__",
    "_COLIDENTIFIER",
    "_CHANGE_SEQUENCE_NUMBER",
    "_CHANGE_TYPE",
    "_CHANGE_TIMESTAMP",
];

/// Characters a flexible column name may hold besides letters, marks, numbers, connectors and
/// dashes.
const COLUMN_SPECIALS: &str = "&%=+:'<>#| ";

static COLUMN_CHAR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[\p{L}\p{M}\p{N}\p{Pc}\p{Pd}\p{Zs}&%=+:'<>#|]$").expect("valid")
});
static TABLE_CHAR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[\p{L}\p{M}\p{N}\p{Pc}\p{Pd}\p{Zs}]$").expect("valid"));

fn matches(re: &Regex, c: char) -> bool {
    let mut buf = [0u8; 4];
    re.is_match(c.encode_utf8(&mut buf))
}

/// The first character of `name` that `allowed` refuses, described for a message.
fn first_refused(name: &str, allowed: impl Fn(char) -> bool) -> Option<String> {
    name.chars()
        .find(|c| !allowed(*c))
        .map(|c| format!("{c:?} (U+{:04X})", u32::from(c)))
}

/// Why BigQuery would refuse `name` as a column name, or `None` when it accepts it.
pub fn column_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("a BigQuery column name must not be empty".into());
    }
    let n = name.chars().count();
    if n > MAX_COLUMN_CHARS {
        return Some(format!(
            "a BigQuery column name has at most {MAX_COLUMN_CHARS} characters; this one has {n}"
        ));
    }
    if let Some(c) = first_refused(name, |c| matches(&COLUMN_CHAR, c)) {
        return Some(format!(
            "{c} is not allowed in a BigQuery column name (allowed: letters, marks, numbers, connectors such as _, dashes, spaces and {})",
            COLUMN_SPECIALS.trim_end()
        ));
    }
    let upper = name.to_uppercase();
    if let Some(p) = RESERVED_COLUMN_PREFIXES
        .iter()
        .find(|p| upper.starts_with(**p))
    {
        return Some(format!(
            "BigQuery reserves column names starting with {p} (in any case)"
        ));
    }
    None
}

/// BigQuery compares column names without regard to case (`Città` is `città`).
pub fn same_column(a: &str, b: &str) -> bool {
    a == b || a.to_lowercase() == b.to_lowercase()
}

/// Why BigQuery would refuse `id` as a table id, or `None`.
pub fn table_id_problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("a BigQuery table id must not be empty".into());
    }
    let n = id.chars().count();
    if n > MAX_TABLE_CHARS {
        return Some(format!(
            "a BigQuery table id has at most {MAX_TABLE_CHARS} characters; this one has {n}"
        ));
    }
    first_refused(id, |c| matches(&TABLE_CHAR, c)).map(|c| {
        format!("{c} is not allowed in a BigQuery table id (allowed: letters, marks, numbers, connectors such as _, dashes and spaces)")
    })
}

/// Why BigQuery would refuse `id` as a dataset id, or `None`.
pub fn dataset_id_problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("a BigQuery dataset id must not be empty".into());
    }
    let n = id.chars().count();
    if n > MAX_DATASET_CHARS {
        return Some(format!(
            "a BigQuery dataset id has at most {MAX_DATASET_CHARS} characters; this one has {n}"
        ));
    }
    first_refused(id, |c| c.is_ascii_alphanumeric() || c == '_').map(|c| {
        format!(
            "{c} is not allowed in a BigQuery dataset id (allowed: letters A-Z a-z, digits and _)"
        )
    })
}

/// Why Kafka would refuse `topic`, or `None`.
pub fn topic_problem(topic: &str) -> Option<String> {
    if topic.is_empty() {
        return Some("a Kafka topic name must not be empty".into());
    }
    if topic == "." || topic == ".." {
        return Some(format!("Kafka does not allow the topic name {topic:?}"));
    }
    if topic.len() > MAX_TOPIC_CHARS {
        return Some(format!(
            "a Kafka topic name has at most {MAX_TOPIC_CHARS} characters; this one has {}",
            topic.chars().count()
        ));
    }
    first_refused(topic, |c| {
        c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
    })
    .map(|c| format!("{c} is not allowed in a Kafka topic name (allowed: A-Z a-z 0-9 . _ -)"))
}

/// Why Kafka would refuse `group` as a consumer group id, or `None`. Kafka has no character
/// rules for group ids; an empty one is refused by the clients.
pub fn group_problem(group: &str) -> Option<String> {
    group
        .is_empty()
        .then(|| "a Kafka consumer group id must not be empty".to_string())
}

/// `segment` percent-encoded for one path segment of a URL: everything except RFC 3986
/// unreserved characters (`A-Z a-z 0-9 - . _ ~`) is encoded, so `/`, `?`, `#`, `%`, spaces and
/// non-ASCII text can never change which resource a path addresses.
pub fn path_segment(segment: &str) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
    const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    let out = utf8_percent_encode(segment, SEGMENT).to_string();
    // "." and ".." are unreserved but mean "this/parent folder" in a path.
    match out.as_str() {
        "." => "%2E".into(),
        ".." => "%2E%2E".into(),
        _ => out,
    }
}

/// Merlin's table id: `prediction_log_<project>_<model>` with every `-` and `.` replaced by `_`.
pub fn table_id(project: &str, model: &str) -> String {
    format!("prediction_log_{project}_{model}").replace(['-', '.'], "_")
}

/// The identity label value of a model's table (see `table::IDENTITY_LABEL`).
pub fn table_identity(project: &str, model: &str) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(format!("{project}\u{0}{model}").as_bytes());
    d.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn flexible_column_names_are_accepted() {
        for name in [
            "città",
            "amount",
            "1st_feature",
            "naïve café",
            "größe-kg",
            "价格",
            "a&b",
            "x%=+:'<>#|y",
            "e\u{301}",
            "_prediction_label",
            "prediction_score",
        ] {
            assert_eq!(column_name_problem(name), None, "{name:?}");
        }
        assert_eq!(column_name_problem(&"é".repeat(300)), None);
    }

    #[test]
    fn what_bigquery_refuses_is_refused_with_the_rule() {
        for (name, rule) in [
            ("", "empty"),
            ("a.b", "'.'"),
            ("a/b", "'/'"),
            ("a!b", "'!'"),
            ("a\"b", "'\"'"),
            ("a$b", "'$'"),
            ("f(x)", "'('"),
            ("a*b", "'*'"),
            ("a,b", "','"),
            ("a;b", "';'"),
            ("a?b", "'?'"),
            ("a@b", "'@'"),
            ("a[b]", "'['"),
            ("a\\b", "'\\\\'"),
            ("a^b", "'^'"),
            ("a`b", "'`'"),
            ("a{b}", "'{'"),
            ("a~b", "'~'"),
            ("tab\there", "'\\t'"),
            ("_TABLE_x", "_TABLE_"),
            ("_file_name", "_FILE_"),
            ("_PARTITIONTIME", "_PARTITION"),
            ("_row_timestamp", "_ROW_TIMESTAMP"),
            ("__ROOT__", "__ROOT__"),
            ("_COLIDENTIFIER1", "_COLIDENTIFIER"),
            ("_CHANGE_TYPE", "_CHANGE_TYPE"),
        ] {
            let p = column_name_problem(name).unwrap_or_else(|| panic!("{name:?} accepted"));
            assert!(p.contains(rule), "{name:?}: {p}");
        }
        let p = column_name_problem(&"a".repeat(301)).unwrap();
        assert!(p.contains("300"), "{p}");
    }

    #[test]
    fn case_insensitive_comparison_covers_unicode() {
        assert!(same_column("Città", "città"));
        assert!(same_column("AMOUNT", "amount"));
        assert!(same_column("ÉTÉ", "été"));
        assert!(!same_column("città", "citta"));
    }

    #[test]
    fn table_and_dataset_ids() {
        assert_eq!(table_id_problem("prediction_log_sample_credit model"), None);
        assert_eq!(table_id_problem("prediction_log_città_modello"), None);
        let p = table_id_problem("prediction_log_sam/ple_credit").unwrap();
        assert!(p.contains("'/'"), "{p}");
        assert!(table_id_problem("a.b").is_some());
        assert!(table_id_problem(&"t".repeat(1025)).is_some());
        assert_eq!(dataset_id_problem("mlobs_1"), None);
        assert!(dataset_id_problem("ml-obs").unwrap().contains("'-'"));
        assert!(dataset_id_problem("").is_some());
    }

    #[test]
    fn kafka_names() {
        assert_eq!(
            topic_problem("caraml-sample-credit-model-3-prediction-log"),
            None
        );
        for bad in ["", ".", "..", "bad topic/..", "a/b", "ü"] {
            assert!(topic_problem(bad).is_some(), "{bad:?}");
        }
        assert!(topic_problem(&"t".repeat(250)).unwrap().contains("249"));
        assert_eq!(topic_problem(&"t".repeat(249)), None);
        assert_eq!(group_problem("any group/name ü"), None);
        assert!(group_problem("").is_some());
    }

    #[test]
    fn path_segments_cannot_escape() {
        assert_eq!(path_segment("prediction_log_a-b.c"), "prediction_log_a-b.c");
        assert_eq!(path_segment("sam/ple"), "sam%2Fple");
        assert_eq!(path_segment("credit model"), "credit%20model");
        assert_eq!(path_segment("città"), "citt%C3%A0");
        assert_eq!(path_segment(".."), "%2E%2E");
        assert_eq!(path_segment("a?b#c%d"), "a%3Fb%23c%25d");
    }

    proptest! {
        #[test]
        fn encoded_segments_hold_no_separator_and_decode_back(s in "\\PC{0,40}") {
            let e = path_segment(&s);
            prop_assert!(!e.contains(['/', '?', '#', ' ']));
            prop_assert!(e != "." && e != "..");
            let back = percent_encoding::percent_decode_str(&e).decode_utf8().unwrap();
            prop_assert_eq!(back, s);
        }

        #[test]
        fn accepted_column_names_hold_no_refused_character(s in "\\PC{1,40}") {
            if column_name_problem(&s).is_none() {
                const REFUSED: [char; 20] = ['!', '"', '$', '(', ')', '*', ',', '.', '/', ';', '?', '@', '[', '\\', ']', '^', '`', '{', '}', '~'];
                let refused = s.contains(REFUSED);
                prop_assert!(!refused, "{:?}", s);
            }
        }
    }
}
