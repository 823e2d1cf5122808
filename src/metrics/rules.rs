//! Tests of the alert rules in `deploy/alerts/` against the conventions docs/alerts.md states
//! (labels are the alert's identity: only `severity` besides what the expression yields; every
//! alert has a summary, a description with its values and a runbook URL whose section exists),
//! and of the dashboard's publisher picker.

use std::collections::BTreeSet;
use std::path::Path;

/// GitHub's anchor of a Markdown heading: lower case, punctuation other than `-` and `_`
/// dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of every heading of a Markdown text (fenced code skipped).
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in markdown.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// Every alerting rule of `deploy/alerts/*.rules.yaml`, with its file.
fn alerts(root: &Path) -> Vec<(String, serde_yaml_ng::Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root.join("deploy/alerts")).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with(".rules.yaml") {
            continue;
        }
        let doc: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for group in doc["groups"].as_sequence().unwrap() {
            for rule in group["rules"].as_sequence().unwrap() {
                if rule.get("alert").is_some() {
                    out.push((path.display().to_string(), rule.clone()));
                }
            }
        }
    }
    out
}

#[test]
fn github_anchors_are_computed_as_github_does() {
    assert_eq!(
        anchor(" ObservationPublisherStuck"),
        "observationpublisherstuck"
    );
    assert_eq!(
        anchor("Which publisher: the labels the rules group by"),
        "which-publisher-the-labels-the-rules-group-by"
    );
    assert_eq!(anchor("1.4 The memory formula"), "14-the-memory-formula");
}

#[test]
fn every_alert_has_annotations_a_severity_only_and_a_runbook_section_that_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let guide = std::fs::read_to_string(root.join("docs/alerts.md")).unwrap();
    let base = regex::Regex::new(r"\*\*Runbook URLs\*\* start with `(https://[^`]+/)`")
        .unwrap()
        .captures(&guide)
        .expect("docs/alerts.md states the runbook URL base")[1]
        .to_string();
    let alerts = alerts(root);
    assert!(alerts.len() >= 15, "alerts read: {}", alerts.len());
    let mut problems = Vec::new();
    for (file, rule) in &alerts {
        let name = rule["alert"].as_str().unwrap();
        let labels: BTreeSet<&str> = rule["labels"]
            .as_mapping()
            .map(|m| m.keys().filter_map(|k| k.as_str()).collect())
            .unwrap_or_default();
        if labels != BTreeSet::from(["severity"]) {
            problems.push(format!(
                "{file}: {name}: labels {labels:?}, not only severity"
            ));
        }
        if !matches!(
            rule["labels"]["severity"].as_str(),
            Some("critical" | "warning")
        ) {
            problems.push(format!(
                "{file}: {name}: severity neither critical nor warning"
            ));
        }
        let text = |key: &str| rule["annotations"][key].as_str().unwrap_or("").to_string();
        if text("summary").is_empty() {
            problems.push(format!("{file}: {name}: no summary"));
        }
        let description = text("description");
        // `group by (…) (…)` always yields 1: such an alert's value says nothing, its labels do.
        let constant = rule["expr"]
            .as_str()
            .is_some_and(|e| e.trim_start().starts_with("group by"));
        if !(constant || description.contains("$value")) || !description.contains("{{ $labels.") {
            problems.push(format!(
                "{file}: {name}: the description names no value or label: {description:?}"
            ));
        }
        let url = text("runbook_url");
        let Some((path, fragment)) = url.strip_prefix(&base).and_then(|r| r.split_once('#')) else {
            problems.push(format!(
                "{file}: {name}: runbook_url {url:?} is not {base}<path>#<section>"
            ));
            continue;
        };
        if fragment != name.to_lowercase() {
            problems.push(format!(
                "{file}: {name}: runbook_url points at #{fragment}, not its own section"
            ));
        }
        match std::fs::read_to_string(root.join(path)) {
            Ok(doc) if anchors(&doc).contains(fragment) => {}
            Ok(_) => problems.push(format!("{file}: {name}: {path} has no section #{fragment}")),
            Err(e) => problems.push(format!("{file}: {name}: runbook {path}: {e}")),
        }
    }
    // The guide's own links to sections.
    let own = anchors(&guide);
    for link in regex::Regex::new(r"\]\(#([^)]+)\)")
        .unwrap()
        .captures_iter(&guide)
    {
        if !own.contains(&link[1]) {
            problems.push(format!(
                "docs/alerts.md links to #{}, which is no section",
                &link[1]
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The dashboard's pickers read a series every publisher serves from start-up (build info), so
/// a publisher stuck before its first flush can be picked; a panel charts the sink errors.
#[test]
fn dashboard_picks_publishers_from_build_info_and_charts_sink_errors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("deploy/grafana-dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let pickers: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["type"] == "query")
        .map(|v| v["query"].as_str().unwrap())
        .collect();
    assert!(pickers.len() >= 2, "{pickers:?}");
    for q in &pickers {
        assert!(
            q.starts_with(&format!("label_values({}", super::names::BUILD_INFO)),
            "picker reads a series absent until later: {q}"
        );
    }
    let exprs: Vec<&str> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str())
        .collect();
    for name in [
        super::names::SINK_ERRORS,
        super::names::DEAD_LETTER_WRITE_ERRORS,
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(&format!("{name}{{"))),
            "no panel charts {name}"
        );
    }
}
