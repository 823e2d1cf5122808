//! Every alert rule in deploy/alerts/*.rules.yaml names only metrics and labels the publisher
//! exports: a rule on a misspelled name never fires, and promtool cannot tell.

use super::*;
use std::collections::BTreeSet;

const LIMIT: Duration = Duration::from_secs(90);
/// Labels Prometheus adds from the scrape target, not the publisher.
const TARGET_LABELS: [&str; 4] = ["namespace", "pod", "job", "instance"];

/// The prefix of the MaxCompute sink's own series.
pub(crate) const MAXCOMPUTE_SERIES: &str = "observation_publisher_maxcompute_";

/// (metric name, label keys) of every exported series.
fn exported(text: &str) -> Vec<(String, BTreeSet<String>)> {
    let key = regex::Regex::new(r#"([a-z_]+)=""#).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let name = l.split(['{', ' ']).next().unwrap().to_string();
            let labels = key.captures_iter(l).map(|c| c[1].to_string()).collect();
            (name, labels)
        })
        .collect()
}

#[test]
fn alert_rules_name_only_exported_metrics_and_labels() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-alerts");
    create_topic(&topic, 1);
    let first = logs(300, 31, 0.02);
    produce(&topic, &first[..200]);
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), "");
    let child = s.start();
    assert!(wait_for(LIMIT, || s.dead_letters() > 0 && !s.rows().is_empty()));
    // The readiness gauge says what /readyz says: ready now, unready once the sink fails.
    let ready = |code: u16, gauge: &str| {
        wait_for(LIMIT, || {
            s.get("/readyz").is_some_and(|(c, _)| c == code)
                && s.get("/metrics").is_some_and(|(_, m)| {
                    m.lines().any(|l| {
                        l == format!("{} {gauge}", observation_publisher::metrics::names::READY)
                    })
                })
        })
    };
    assert!(ready(200, "1"), "{:?}", s.get("/metrics"));
    // A failing sink, so the sink-error series exists too.
    std::fs::rename(s.dir.join("rows"), s.dir.join("rows-parked")).unwrap();
    std::fs::write(s.dir.join("rows"), b"not a directory").unwrap();
    produce(&topic, &first[200..]);
    assert!(wait_for(LIMIT, || s.get("/metrics").is_some_and(
        |(_, m)| super::counted(&m, "observation_publisher_sink_errors_total{")
            // librdkafka's statistics, every 5 s, carry the lag.
            && m.contains("observation_publisher_consumer_lag_messages{")
    )));
    assert!(ready(503, "0"), "{:?}", s.get("/readyz"));
    let (_, text) = s.get("/metrics").expect("http");
    stop(child);
    let series = exported(&text);
    let metric = regex::Regex::new(r"observation_publisher_[a-z_]+").unwrap();
    let by = regex::Regex::new(r"(?:by|on|group_left|group_right)\s*\(([^)]*)\)").unwrap();
    // A label a rule makes itself (`label_replace(v, "dst", …)`) is not the publisher's.
    let made = regex::Regex::new(r#"label_replace\([^"]*"([a-z_]+)""#).unwrap();
    let matcher = regex::Regex::new(r#"([a-z_]+)\s*(?:=|!=|=~|!~)\s*""#).unwrap();
    let mut rules = 0;
    for entry in std::fs::read_dir("deploy/alerts").unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with(".rules.yaml") {
            continue;
        }
        let doc: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for group in doc["groups"].as_sequence().unwrap() {
            for rule in group["rules"].as_sequence().unwrap() {
                rules += 1;
                let expr = rule["expr"].as_str().unwrap();
                // A MaxCompute sink's own series exist only where one runs: the MaxCompute
                // test that drives a move past its timeout checks those names against its
                // publisher's /metrics (`it maxcompute::moves::a_move_past_move_timeout_…`).
                let names: BTreeSet<&str> = (metric.find_iter(expr).map(|m| m.as_str()))
                    .filter(|n| !n.starts_with(MAXCOMPUTE_SERIES))
                    .collect();
                for n in &names {
                    assert!(
                        series.iter().any(|(s, _)| s == n),
                        "{}: {n} is not exported:\n{text}",
                        path.display()
                    );
                }
                let labels = by
                    .captures_iter(expr)
                    .flat_map(|c| {
                        c[1].split(',')
                            .map(|l| l.trim().to_string())
                            .collect::<Vec<_>>()
                    })
                    .chain(matcher.captures_iter(expr).map(|c| c[1].to_string()))
                    .filter(|l| !l.is_empty() && !TARGET_LABELS.contains(&l.as_str()))
                    .filter(|l| !made.captures_iter(expr).any(|c| &c[1] == l));
                for l in labels {
                    assert!(
                        series
                            .iter()
                            .any(|(s, ls)| names.contains(s.as_str()) && ls.contains(&l)),
                        "{}: label {l} is on none of {names:?}:\n{text}",
                        path.display()
                    );
                }
            }
        }
    }
    assert!(rules >= 15, "rules read: {rules}");
}
