//! The `gen:` section: strict, checked against the declared features and their types.

use super::*;
use crate::config::Dist;

fn with_gen(gen: &str) -> Result<(Config, Vec<String>), Problems> {
    let y = format!(
        r#"
project: p
model_id: m
model_version: "1"
inference_schema:
  feature_types: {{country: string, amount: float64, n: int64, flag: boolean}}
  model_prediction_output: {{output_class: RegressionOutput, prediction_score_column: y}}
gen:
{gen}
"#
    );
    parse(&y, Needs::CONVERT)
}

#[test]
fn distributions_are_read_per_feature() {
    let (cfg, _) = with_gen(
        "  country: {dist: categorical, values: {ID: 3, SG: 1}, nulls: 0.2}\n  \
         amount: {dist: lognormal, mu: 4, sigma: 0.5}\n  \
         n: {dist: uniform_int, min: 0, max: 23}\n  \
         flag: {dist: bernoulli, p: 0.05}",
    )
    .unwrap();
    assert_eq!(cfg.gen.len(), 4);
    assert_eq!(
        cfg.gen[0],
        GenColumn {
            column: "country".into(),
            dist: Dist::Categorical(vec![("ID".into(), 3.0), ("SG".into(), 1.0)]),
            nulls: 0.2,
        }
    );
    assert_eq!(cfg.gen[3].dist, Dist::Bool { p: 0.05 });
    assert_eq!(cfg.gen[3].nulls, DEFAULT_NULLS);
}

#[test]
fn every_problem_of_the_section_is_reported() {
    let err = with_gen(
        "  nope: {dist: normal, mean: 0, std: 1}\n  \
         country: {dist: normal, mean: 0, std: 1}\n  \
         amount: {dist: lognormal, mu: 4}\n  \
         n: {dist: uniform_int, min: 5, max: 1, extra: 1}\n  \
         flag: {dist: zipf}",
    )
    .unwrap_err()
    .to_string();
    for want in [
        "gen.nope: not a declared feature",
        "gen.country.dist: normal does not fit a string feature",
        "gen.amount.sigma: required",
        "gen.n.max: must be at least min",
        "gen.n.extra: unknown key",
        "gen.flag.dist: unknown distribution \"zipf\"",
    ] {
        assert!(err.contains(want), "{want}\n{err}");
    }
}

#[test]
fn gen_uses_the_sections_distributions() {
    let (cfg, _) = with_gen("  country: {dist: categorical, values: {XX: 1}, nulls: 0}").unwrap();
    let mut g = crate::gen::Generator::new(&cfg.inference_schema, Default::default())
        .with_columns(&cfg.gen);
    for i in 0..50 {
        let log = g.valid_log(i);
        let f = &log.input.unwrap().features_table.unwrap().fields["data"];
        let text = format!("{f:?}");
        assert!(text.contains("StringValue(\"XX\")"), "{text}");
    }
}

#[test]
fn feature_histograms_are_off_by_default_and_checked() {
    let (cfg, _) = with_gen("  amount: {dist: normal, mean: 1, std: 1}").unwrap();
    assert!(cfg.metrics.feature_histograms.is_empty());
    let y = |m: &str| {
        format!(
            r#"
project: p
model_id: m
model_version: "1"
inference_schema:
  feature_types: {{country: string, amount: float64, n: int64}}
  model_prediction_output: {{output_class: RegressionOutput, prediction_score_column: y}}
metrics:
{m}
"#
        )
    };
    let (cfg, _) = parse(
        &y("  feature_histograms: {amount: [1, 10, 100], n: [0.5]}"),
        Needs::CONVERT,
    )
    .unwrap();
    assert_eq!(
        cfg.metrics.feature_histograms,
        vec![
            crate::config::FeatureHistogram {
                column: "amount".into(),
                buckets: vec![1.0, 10.0, 100.0]
            },
            crate::config::FeatureHistogram {
                column: "n".into(),
                buckets: vec![0.5]
            },
        ]
    );
    let err = parse(
        &y("  feature_histograms: {country: [1], nope: [1], amount: [10, 1]}\n  other: 1"),
        Needs::CONVERT,
    )
    .unwrap_err()
    .to_string();
    for want in [
        "metrics.feature_histograms.country: not a numeric",
        "metrics.feature_histograms.nope: not a declared feature",
        "metrics.feature_histograms.amount: must be a list of 1 to 50 finite numbers, strictly ascending",
        "metrics.other: unknown key",
    ] {
        assert!(err.contains(want), "{want}\n{err}");
    }
}
