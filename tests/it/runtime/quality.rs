//! The data-quality metrics against logs crafted with known NULLs, type mismatches, undeclared
//! features and scores: the scrape must hold exactly those counts, and a flood of undeclared
//! names must stay within its label bound.

use super::*;
use observation_publisher::proto::{ModelInput, ModelOutput, PredictionLog};
use prost::Message;
use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Timestamp, Value};
use std::collections::{BTreeMap, BTreeSet};

const LIMIT: Duration = Duration::from_secs(90);

/// The declared features of `config/local.yaml`, in order.
const DECLARED: [&str; 10] = [
    "amount",
    "merchant_id",
    "num_txn_24h",
    "is_foreign",
    "account_age_days",
    "avg_amount_7d",
    "country",
    "device_type",
    "hour_of_day",
    "risk_score",
];

fn v(k: Kind) -> Value {
    Value { kind: Some(k) }
}
fn num(f: f64) -> Value {
    v(Kind::NumberValue(f))
}
fn st(s: &str) -> Value {
    v(Kind::StringValue(s.into()))
}
fn null() -> Value {
    v(Kind::NullValue(0))
}
fn lst(values: Vec<Value>) -> Value {
    v(Kind::ListValue(ListValue { values }))
}

/// A valid cell for every declared feature.
fn good_row() -> Vec<Value> {
    vec![
        num(12.5),
        st("m-1"),
        num(3.0),
        v(Kind::BoolValue(false)),
        num(400.0),
        num(20.0),
        st("ID"),
        st("mobile"),
        num(14.0),
        num(0.1),
    ]
}

/// A log over the declared features plus `extra` (one `1.0` per row each), with the given
/// feature rows (declared cells) and scores, stamped 1000 s before now.
fn log(id: &str, extra: &[String], rows: Vec<Vec<Value>>, scores: &[f64]) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let mut names: Vec<Value> = DECLARED.iter().map(|n| st(n)).collect();
    names.extend(extra.iter().map(|n| st(n)));
    let data = rows
        .into_iter()
        .map(|mut r| {
            r.extend(extra.iter().map(|_| num(1.0)));
            lst(r)
        })
        .collect();
    let f = Struct {
        fields: BTreeMap::from([
            ("columns".to_string(), lst(names)),
            ("data".to_string(), lst(data)),
        ]),
    };
    let p = Struct {
        fields: BTreeMap::from([
            ("columns".to_string(), lst(vec![st("prediction_score")])),
            (
                "data".to_string(),
                lst(scores.iter().map(|s| lst(vec![num(*s)])).collect()),
            ),
            (
                "row_ids".to_string(),
                lst((0..scores.len())
                    .map(|i| st(&format!("{id}-{i}")))
                    .collect()),
            ),
        ]),
    };
    PredictionLog {
        prediction_id: id.into(),
        input: Some(ModelInput {
            features_table: Some(f),
            ..Default::default()
        }),
        output: Some(ModelOutput {
            prediction_results_table: Some(p),
            ..Default::default()
        }),
        request_timestamp: Some(Timestamp {
            seconds: now - 1000,
            nanos: 0,
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// The scrape's sample lines of the quality metrics, as `series value`.
fn quality_lines(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            [
                "observation_publisher_feature_nulls_total",
                "observation_publisher_feature_type_mismatches_total",
                "observation_publisher_undeclared_features_total",
                "observation_publisher_prediction_labels_total",
                "observation_publisher_prediction_score_",
                "observation_publisher_feature_value_",
            ]
            .iter()
            .any(|m| l.starts_with(m))
        })
        .map(str::to_string)
        .collect()
}

fn run_and_scrape(name: &str, logs: &[(Vec<u8>, bool)], extra: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique(name);
    create_topic(&topic, 1);
    produce(&topic, logs);
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), extra);
    let child = s.start();
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &s.group, 1)
            == logs.len() as i64),
        "every offset committed\n{}",
        s.log_tail()
    );
    let (_, scrape) = s.get("/metrics").expect("http");
    assert_eq!(stop(child), Some(0));
    scrape
}

#[test]
fn quality_metrics_count_exactly_what_the_logs_hold() {
    let extra_a = vec!["extra_a".to_string()];
    let both = vec!["extra_a".to_string(), "extra_b".to_string()];
    // Log 1: amount NULL in row 0, country NULL in both rows, a bool in num_txn_24h (coerced).
    let mut r0 = good_row();
    r0[0] = null();
    r0[6] = null();
    let mut r1 = good_row();
    r1[6] = null();
    r1[2] = v(Kind::BoolValue(true));
    let l1 = log("s1", &extra_a, vec![r0, r1], &[0.25, 0.75]);
    // Log 2: a string in hour_of_day: rejected, its mismatch counted.
    let mut bad = good_row();
    bad[8] = st("nine");
    let l2 = log("s2", &extra_a, vec![bad], &[0.5]);
    // Log 3: three rows with two undeclared features; is_foreign NULL in the last.
    let mut r2 = good_row();
    r2[3] = null();
    let l3 = log(
        "s3",
        &both,
        vec![good_row(), good_row(), r2],
        &[0.875, 0.875, 0.0625],
    );
    let scrape = run_and_scrape(
        "rt-quality",
        &[(l1, false), (l2, true), (l3, false)],
        "metrics:\n  feature_histograms:\n    amount: [10, 20]\n",
    );
    let mut want: BTreeSet<String> = BTreeSet::new();
    let nulls = BTreeMap::from([("amount", 1), ("country", 2), ("is_foreign", 1)]);
    let mismatches = BTreeMap::from([("num_txn_24h", 1), ("hour_of_day", 1)]);
    for c in DECLARED {
        want.insert(format!(
            "observation_publisher_feature_nulls_total{{column=\"{c}\"}} {}",
            nulls.get(c).unwrap_or(&0)
        ));
        want.insert(format!(
            "observation_publisher_feature_type_mismatches_total{{column=\"{c}\"}} {}",
            mismatches.get(c).unwrap_or(&0)
        ));
    }
    want.insert("observation_publisher_undeclared_features_total{column=\"extra_a\"} 5".into());
    want.insert("observation_publisher_undeclared_features_total{column=\"extra_b\"} 3".into());
    want.insert("observation_publisher_prediction_labels_total{label=\"fraud\"} 3".into());
    want.insert("observation_publisher_prediction_labels_total{label=\"legit\"} 2".into());
    // Scores 0.25, 0.75, 0.875, 0.875, 0.0625 (exact in binary, so the sum is too).
    let cumulative = |b: f64| {
        [0.25, 0.75, 0.875, 0.875, 0.0625]
            .iter()
            .filter(|s| **s <= b)
            .count()
    };
    for b in observation_publisher::metrics::quality::SCORE_BUCKETS {
        want.insert(format!(
            "observation_publisher_prediction_score_bucket{{class=\"prediction_score\",le=\"{b}\"}} {}",
            cumulative(*b)
        ));
    }
    want.insert(
        "observation_publisher_prediction_score_bucket{class=\"prediction_score\",le=\"+Inf\"} 5"
            .into(),
    );
    want.insert(
        "observation_publisher_prediction_score_sum{class=\"prediction_score\"} 2.8125".into(),
    );
    want.insert(
        "observation_publisher_prediction_score_count{class=\"prediction_score\"} 5".into(),
    );
    // amount: NULL once, 12.5 in the other four rows.
    for (le, n) in [("10", 0), ("20", 4), ("+Inf", 4)] {
        want.insert(format!(
            "observation_publisher_feature_value_bucket{{column=\"amount\",le=\"{le}\"}} {n}"
        ));
    }
    want.insert("observation_publisher_feature_value_sum{column=\"amount\"} 50".into());
    want.insert("observation_publisher_feature_value_count{column=\"amount\"} 4".into());
    assert_eq!(quality_lines(&scrape), want, "{scrape}");
    // Freshness: the five written rows, each 1000 s (and the run's few seconds) old.
    for (le, n) in [("600", 0), ("1800", 5), ("+Inf", 5)] {
        let line = format!(
            "observation_publisher_row_freshness_seconds_bucket{{sink=\"local_parquet\",le=\"{le}\"}} {n}"
        );
        assert!(scrape.lines().any(|l| l == line), "{line}\n{scrape}");
    }
    assert!(
        scrape
            .lines()
            .any(|l| l
                == "observation_publisher_row_freshness_seconds_count{sink=\"local_parquet\"} 5"),
        "{scrape}"
    );
}

#[test]
fn ten_thousand_undeclared_names_make_at_most_101_series() {
    let logs: Vec<(Vec<u8>, bool)> = (0..100)
        .map(|i| {
            let extra: Vec<String> = (0..100).map(|k| format!("u{}", i * 100 + k)).collect();
            (
                log(&format!("s{i}"), &extra, vec![good_row()], &[0.5]),
                false,
            )
        })
        .collect();
    let scrape = run_and_scrape("rt-undeclared", &logs, "");
    assert!(
        !scrape.contains("observation_publisher_feature_value"),
        "feature histograms are off by default\n{scrape}"
    );
    let series: Vec<(String, u64)> = scrape
        .lines()
        .filter_map(|l| l.strip_prefix("observation_publisher_undeclared_features_total{column=\""))
        .map(|l| {
            let (name, rest) = l.split_once("\"}").unwrap();
            (name.to_string(), rest.trim().parse().unwrap())
        })
        .collect();
    assert!(series.len() <= 101, "{} series", series.len());
    assert_eq!(series.len(), 101, "100 names and _other");
    assert_eq!(
        series.iter().map(|s| s.1).sum::<u64>(),
        10_000,
        "every cell counted"
    );
    assert!(
        series.contains(&("_other".to_string(), 9_900)),
        "{series:?}"
    );
}
