//! Data-quality metrics: what the rows say about the model's traffic, not about the pipeline.
//!
//! - NULL cells per declared feature ([`names::FEATURE_NULLS`]): Arrow's `null_count` of each
//!   feature column, once per flushed batch.
//! - Feature cells of another kind than their column ([`names::FEATURE_TYPE_MISMATCHES`]) and
//!   cells of undeclared features ([`names::UNDECLARED_FEATURES`]): counted by the decoder off
//!   its common path ([`crate::decode::Counts`]), emitted once per batch. Undeclared names are
//!   bounded by [`BoundedNames`]: the first [`MAX_NAMES`] seen keep their name, the rest are
//!   counted as [`OTHER`].
//! - The score per row ([`names::PREDICTION_SCORE`], per class) and the derived label
//!   ([`names::PREDICTION_LABELS`], configured labels only), once per batch.
//! - Optionally, per numeric feature `metrics.feature_histograms` names, its values
//!   ([`names::FEATURE_VALUE`], with the configured buckets), once per batch.
//! - Freshness per row and sink ([`names::ROW_FRESHNESS`]): the batch's `request_timestamp`s
//!   as runs ([`Stamps`], taken when the sink task takes the batch) against the time the sink
//!   reported the batch durable.
//!
//! The two per-row histograms are kept here, bucketed as they are observed ([`Histogram`]),
//! and rendered as Prometheus text after the recorder's ([`render`]): the recorder keeps every
//! sample of a histogram until its upkeep, which at millions of rows a second is tens of MB.
//! Bucket counts, `_sum` and `_count` are exact; the text is the same a recorder histogram
//! would give.

use super::names;
use crate::decode::Counts;
use crate::table::{Derived, TableLayout, FIRST_FEATURE};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, RecordBatch};
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

/// Distinct undeclared feature names a process keeps as labels.
pub const MAX_NAMES: usize = 100;
/// The label value every further undeclared name is counted under.
pub const OTHER: &str = "_other";

/// Buckets of [`names::ROW_FRESHNESS`] (seconds: 100 ms … 6 h).
pub const FRESHNESS_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 21600.0,
];

/// Buckets of [`names::PREDICTION_SCORE`]: twentieths of [0, 1] for probabilities, then decades
/// for regression scores.
pub const SCORE_BUCKETS: &[f64] = &[
    0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8,
    0.85, 0.9, 0.95, 1.0, 10.0, 100.0, 1000.0, 10000.0,
];

/// A set of label values that admits the first `max` distinct names and maps every later one
/// to [`OTHER`], so a label fed from data has at most `max + 1` values.
#[derive(Debug, Default)]
pub struct BoundedNames {
    kept: HashSet<String>,
    max: usize,
}

impl BoundedNames {
    /// Keeps at most `max` names.
    pub fn new(max: usize) -> Self {
        BoundedNames {
            kept: HashSet::new(),
            max,
        }
    }

    /// The label value for `name`: itself if it is kept or there is room, else [`OTHER`].
    pub fn label<'a>(&mut self, name: &'a str) -> &'a str {
        if self.kept.contains(name) {
            return name;
        }
        if self.kept.len() < self.max && name != OTHER {
            self.kept.insert(name.to_string());
            return name;
        }
        OTHER
    }
}

/// A Prometheus histogram bucketed as it is observed: per bucket (the last is `+Inf`) its
/// count; the sum and count of every value.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram with upper bounds `bounds` (ascending).
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Observes `v` `n` times. NaN is not observed.
    #[inline]
    pub fn observe_n(&mut self, v: f64, n: u64) {
        if v.is_nan() || n == 0 {
            return;
        }
        // Prometheus buckets are `le`: the first bound not below `v`.
        let i = self.bounds.partition_point(|b| *b < v);
        self.counts[i] += n;
        self.sum += v * n as f64;
        self.count += n;
    }

    /// Adds `other`'s observations (same bounds).
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.sum += other.sum;
        self.count += other.count;
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Cumulative count of the bucket `le = bounds[i]` (`i == bounds.len()`: `+Inf`).
    pub fn cumulative(&self, i: usize) -> u64 {
        self.counts[..=i].iter().sum()
    }

    /// Appends the histogram's sample lines (`_bucket`, `_sum`, `_count`) labelled `key="value"`.
    fn render(&self, out: &mut String, name: &str, key: &str, value: &str) {
        let value = escape(value);
        let mut acc = 0;
        for (i, c) in self.counts.iter().enumerate() {
            acc += c;
            let le = self
                .bounds
                .get(i)
                .map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{{key}=\"{value}\",le=\"{le}\"}} {acc}");
        }
        let _ = writeln!(out, "{name}_sum{{{key}=\"{value}\"}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{key}=\"{value}\"}} {}", self.count);
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The process's quality histograms (by metric name, then label value) and its bounded
/// undeclared names. One per process, like the recorder; the pipeline thread and the sink task
/// touch it once per batch.
struct Registry {
    histograms: BTreeMap<(&'static str, String), Histogram>,
    undeclared: BoundedNames,
    /// The features with a value histogram: index among the features, name, buckets.
    feature_histograms: Vec<(usize, String, &'static [f64])>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn with_registry<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut g = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
    let r = g.get_or_insert_with(|| Registry {
        histograms: BTreeMap::new(),
        undeclared: BoundedNames::new(MAX_NAMES),
        feature_histograms: Vec::new(),
    });
    f(r)
}

fn label_key_of(name: &str) -> &'static str {
    match name {
        names::ROW_FRESHNESS => names::SINK,
        names::FEATURE_VALUE => names::COLUMN,
        _ => names::CLASS,
    }
}

fn merge_into(name: &'static str, value: &str, h: &Histogram) {
    with_registry(|r| {
        r.histograms
            .entry((name, value.to_string()))
            .or_insert_with(|| Histogram::new(h.bounds))
            .merge(h)
    });
}

/// The quality histograms as Prometheus text (`# HELP`, `# TYPE` and samples), to be served
/// after the recorder's.
pub fn render() -> String {
    let mut out = String::new();
    with_registry(|r| {
        let mut last: Option<&str> = None;
        for ((name, value), h) in &r.histograms {
            if last != Some(*name) {
                let help = names::ALL
                    .iter()
                    .find(|(n, _, _)| n == name)
                    .map_or("", |(_, _, h)| *h);
                let _ = writeln!(out, "# HELP {name} {help}");
                let _ = writeln!(out, "# TYPE {name} histogram");
                last = Some(*name);
            }
            h.render(&mut out, name, label_key_of(name), value);
        }
    });
    out
}

/// The class label of each score column: the class label for multiclass, else the column name.
fn classes(layout: &TableLayout) -> Vec<String> {
    let first = layout.first_score();
    (0..layout.n_scores)
        .map(|k| match &layout.derived {
            Derived::ArgmaxLabel { labels } => labels[k].clone(),
            _ => layout.columns[first + k].name.clone(),
        })
        .collect()
}

/// The derived labels the configuration names (empty for regression and ranking).
fn labels(layout: &TableLayout) -> Vec<String> {
    match &layout.derived {
        Derived::BinaryLabel {
            positive, negative, ..
        } => vec![positive.clone(), negative.clone()],
        Derived::ArgmaxLabel { labels } => labels.clone(),
        _ => Vec::new(),
    }
}

/// Registers every quality series whose labels are known at start-up at zero: per declared
/// feature its NULL and mismatch counters, per score class its histogram, per configured label
/// its counter, per sink its freshness histogram, per feature of `feature_histograms` (its
/// name and buckets, from `metrics.feature_histograms`) its value histogram. A dashboard sees
/// a column as 0, not absent. Call once per process.
pub fn register(
    layout: &TableLayout,
    sinks: &[&'static str],
    feature_histograms: &[crate::config::FeatureHistogram],
) {
    let features = &layout.columns[FIRST_FEATURE..FIRST_FEATURE + layout.n_features];
    let mut chosen = Vec::new();
    for f in feature_histograms {
        if let Some(i) = features.iter().position(|c| c.name == f.column) {
            // Once per process and configured feature: the buckets live as long as it.
            let bounds: &'static [f64] = Box::leak(f.buckets.clone().into_boxed_slice());
            merge_into(names::FEATURE_VALUE, &f.column, &Histogram::new(bounds));
            chosen.push((i, f.column.clone(), bounds));
        }
    }
    with_registry(|r| r.feature_histograms = chosen);
    for c in &layout.columns[FIRST_FEATURE..FIRST_FEATURE + layout.n_features] {
        ::metrics::counter!(names::FEATURE_NULLS, names::COLUMN => c.name.clone()).increment(0);
        ::metrics::counter!(names::FEATURE_TYPE_MISMATCHES, names::COLUMN => c.name.clone())
            .increment(0);
    }
    for l in labels(layout) {
        ::metrics::counter!(names::PREDICTION_LABELS, names::LABEL => l).increment(0);
    }
    let empty = Histogram::new(SCORE_BUCKETS);
    for class in classes(layout) {
        merge_into(names::PREDICTION_SCORE, &class, &empty);
    }
    let empty = Histogram::new(FRESHNESS_BUCKETS);
    for s in sinks {
        merge_into(names::ROW_FRESHNESS, s, &empty);
    }
}

/// Emits the quality of one flushed batch: its NULLs, scores and labels from the rows, and
/// what the decoder counted since the last call (mismatches, undeclared features; these
/// include logs it rejected).
pub fn emit_batch(layout: &TableLayout, records: &RecordBatch, counts: Counts) {
    let features = &layout.columns[FIRST_FEATURE..FIRST_FEATURE + layout.n_features];
    if records.num_columns() == layout.columns.len() {
        for (i, c) in features.iter().enumerate() {
            let nulls = records.column(FIRST_FEATURE + i).null_count();
            if nulls > 0 {
                ::metrics::counter!(names::FEATURE_NULLS, names::COLUMN => c.name.clone())
                    .increment(nulls as u64);
            }
        }
        let first = layout.first_score();
        for (k, class) in classes(layout).iter().enumerate() {
            if let Some(col) = records.column(first + k).as_primitive_opt::<Float64Type>() {
                let mut h = Histogram::new(SCORE_BUCKETS);
                if col.null_count() == 0 {
                    for v in col.values() {
                        h.observe_n(*v, 1);
                    }
                } else {
                    for v in col.iter().flatten() {
                        h.observe_n(v, 1);
                    }
                }
                if h.count() > 0 {
                    merge_into(names::PREDICTION_SCORE, class, &h);
                }
            }
        }
        let chosen = with_registry(|r| r.feature_histograms.clone());
        for (i, name, bounds) in chosen {
            let col = records.column(FIRST_FEATURE + i);
            let mut h = Histogram::new(bounds);
            if let Some(a) = col.as_primitive_opt::<Float64Type>() {
                a.iter().flatten().for_each(|v| h.observe_n(v, 1));
            } else if let Some(a) = col.as_primitive_opt::<Int64Type>() {
                a.iter().flatten().for_each(|v| h.observe_n(v as f64, 1));
            }
            if h.count() > 0 {
                merge_into(names::FEATURE_VALUE, &name, &h);
            }
        }
        let known = labels(layout);
        if let (Some(i), false) = (layout.derived_index(), known.is_empty()) {
            if let Some(col) = records.column(i).as_string_opt::<i32>() {
                let mut per = vec![0u64; known.len()];
                for v in col.iter().flatten() {
                    if let Some(k) = known.iter().position(|l| l == v) {
                        per[k] += 1;
                    }
                }
                for (l, n) in known.into_iter().zip(per) {
                    if n > 0 {
                        ::metrics::counter!(names::PREDICTION_LABELS, names::LABEL => l)
                            .increment(n);
                    }
                }
            }
        }
    }
    emit_counts(layout, counts);
}

/// Emits what the decoder counted (mismatches per declared feature, undeclared cells by name).
pub fn emit_counts(layout: &TableLayout, counts: Counts) {
    let features = &layout.columns[FIRST_FEATURE..FIRST_FEATURE + layout.n_features];
    for (c, n) in features.iter().zip(&counts.mismatches) {
        if *n > 0 {
            ::metrics::counter!(names::FEATURE_TYPE_MISMATCHES, names::COLUMN => c.name.clone())
                .increment(*n);
        }
    }
    if counts.undeclared.is_empty() {
        return;
    }
    let mut per: BTreeMap<String, u64> = BTreeMap::new();
    with_registry(|r| {
        for (name, n) in &counts.undeclared {
            *per.entry(r.undeclared.label(name).to_string()).or_default() += n;
        }
    });
    for (name, n) in per {
        ::metrics::counter!(names::UNDECLARED_FEATURES, names::COLUMN => name).increment(n);
    }
}

/// A batch's `request_timestamp`s as runs of equal values (rows of one log share theirs), kept
/// until each sink reports the batch durable: a few bytes per log, not the batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stamps(Vec<(i64, u64)>);

impl Stamps {
    /// The runs of the batch's `request_timestamp` column (the third); NULLs are skipped.
    pub fn of(records: &RecordBatch) -> Stamps {
        let mut runs: Vec<(i64, u64)> = Vec::new();
        let Some(col) = (records.num_columns() > 2)
            .then(|| {
                records
                    .column(2)
                    .as_primitive_opt::<TimestampMicrosecondType>()
            })
            .flatten()
        else {
            return Stamps(runs);
        };
        for v in col.iter().flatten() {
            match runs.last_mut() {
                Some((t, n)) if *t == v => *n += 1,
                _ => runs.push((v, 1)),
            }
        }
        // Kept until every sink has written the batch, for a staging sink until its move, and
        // counted against the in-flight budget as allocated: no growth slack.
        runs.shrink_to_fit();
        Stamps(runs)
    }

    /// Bytes the runs hold, as allocated.
    pub fn allocated_bytes(&self) -> usize {
        self.0.capacity() * std::mem::size_of::<(i64, u64)>()
    }

    /// These stamps less the rows `refused` (their row indices in `records`, the batch the
    /// stamps were taken of): a row a sink refused is dead-lettered, never durable there, so it
    /// has no freshness in that sink.
    pub fn without(&self, records: &RecordBatch, refused: &[usize]) -> Stamps {
        let Some(col) = (records.num_columns() > 2)
            .then(|| {
                records
                    .column(2)
                    .as_primitive_opt::<TimestampMicrosecondType>()
            })
            .flatten()
        else {
            return self.clone();
        };
        let mut runs = self.0.clone();
        for &row in refused {
            if row >= col.len() || col.is_null(row) {
                continue;
            }
            let t = col.value(row);
            if let Some(run) = runs.iter_mut().find(|(v, n)| *v == t && *n > 0) {
                run.1 -= 1;
            }
        }
        runs.retain(|&(_, n)| n > 0);
        Stamps(runs)
    }

    /// Freshness of every row acknowledged at `acked_micros` (unix µs): seconds, at least 0 (a
    /// producer clock ahead of ours is not negative age).
    pub fn freshness(&self, acked_micros: i64) -> Histogram {
        let mut h = Histogram::new(FRESHNESS_BUCKETS);
        for &(t, n) in &self.0 {
            let age = acked_micros.saturating_sub(t).max(0) as f64 / 1e6;
            h.observe_n(age, n);
        }
        h
    }

    /// Records the freshness of the batch's rows for `sink`, acknowledged now.
    pub fn acked(&self, sink: &'static str, now: SystemTime) {
        let micros = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        let h = self.freshness(micros);
        if h.count() > 0 {
            merge_into(names::ROW_FRESHNESS, sink, &h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn bounded_names_admit_at_most_max_and_keep_the_first(
            names in proptest::collection::vec("[a-z]{1,3}", 0..400), max in 0usize..50,
        ) {
            let mut b = BoundedNames::new(max);
            let mut distinct: Vec<String> = Vec::new();
            let mut labels = HashSet::new();
            for n in &names {
                let l = b.label(n).to_string();
                if !distinct.contains(n) {
                    distinct.push(n.clone());
                }
                let rank = distinct.iter().position(|d| d == n).unwrap();
                prop_assert_eq!(&l, if rank < max { n } else { OTHER });
                labels.insert(l);
            }
            prop_assert!(labels.len() <= max + 1);
        }

        #[test]
        fn histogram_counts_every_value_in_its_le_bucket(
            values in proptest::collection::vec(-5.0f64..2.0e4, 0..200),
        ) {
            let mut h = Histogram::new(SCORE_BUCKETS);
            for v in &values {
                h.observe_n(*v, 1);
            }
            prop_assert_eq!(h.count(), values.len() as u64);
            for (i, b) in SCORE_BUCKETS.iter().enumerate() {
                let want = values.iter().filter(|v| **v <= *b).count() as u64;
                prop_assert_eq!(h.cumulative(i), want);
            }
            prop_assert_eq!(h.cumulative(SCORE_BUCKETS.len()), values.len() as u64);
            let sum: f64 = values.iter().sum();
            prop_assert!((h.sum - sum).abs() <= 1e-6 * (1.0 + sum.abs()));
        }

        #[test]
        fn refused_rows_leave_the_stamps_of_the_rows_kept(
            stamps in proptest::collection::vec(proptest::option::weighted(0.9, 0i64..5), 0..60),
            refused in proptest::collection::btree_set(0usize..70, 0..30),
        ) {
            use arrow_array::{ArrayRef, StringArray, TimestampMicrosecondArray};
            use std::sync::Arc;
            let batch = |ts: Vec<Option<i64>>| {
                let n = ts.len();
                let ids: ArrayRef = Arc::new(StringArray::from(vec!["s"; n]));
                let t: ArrayRef = Arc::new(TimestampMicrosecondArray::from(ts));
                RecordBatch::try_from_iter([("a", Arc::clone(&ids)), ("b", ids), ("t", t)]).unwrap()
            };
            let totals = |s: &Stamps| {
                let mut m = BTreeMap::new();
                for &(t, n) in &s.0 {
                    *m.entry(t).or_insert(0u64) += n;
                }
                m
            };
            let all = batch(stamps.clone());
            let refused: Vec<usize> = refused.into_iter().collect();
            let kept: Vec<Option<i64>> = stamps
                .iter()
                .enumerate()
                .filter(|(i, _)| !refused.contains(i))
                .map(|(_, t)| *t)
                .collect();
            let less = Stamps::of(&all).without(&all, &refused);
            prop_assert_eq!(totals(&less), totals(&Stamps::of(&batch(kept))));
        }

        #[test]
        fn freshness_is_one_observation_per_row(
            runs in proptest::collection::vec((0i64..10_000_000, 1u64..50), 0..40),
            ack in 0i64..20_000_000,
        ) {
            let s = Stamps(runs.clone());
            let h = s.freshness(ack);
            prop_assert_eq!(h.count(), runs.iter().map(|r| r.1).sum::<u64>());
            let within_1s: u64 = runs
                .iter()
                .filter(|(t, _)| (ack - t).max(0) <= 1_000_000)
                .map(|r| r.1)
                .sum();
            prop_assert_eq!(h.cumulative(3), within_1s);
        }
    }

    #[test]
    fn nan_is_not_observed_and_render_is_prometheus_text() {
        let mut h = Histogram::new(&[0.5, 1.0]);
        h.observe_n(f64::NAN, 3);
        h.observe_n(0.25, 2);
        h.observe_n(1.0, 1);
        h.observe_n(7.0, 1);
        let mut out = String::new();
        h.render(&mut out, "m", "class", "a\"b");
        assert_eq!(
            out,
            "m_bucket{class=\"a\\\"b\",le=\"0.5\"} 2\n\
             m_bucket{class=\"a\\\"b\",le=\"1\"} 3\n\
             m_bucket{class=\"a\\\"b\",le=\"+Inf\"} 4\n\
             m_sum{class=\"a\\\"b\"} 8.5\n\
             m_count{class=\"a\\\"b\"} 4\n"
        );
    }
}
