//! The hot path: `caraml.upi.v1.PredictionLog` bytes → rows appended straight into Arrow
//! builders. Pure: no I/O, no clocks, no globals; it can be unit-, property- and fuzz-tested
//! and benchmarked directly.
//!
//! [`Decoder::decode`] walks the protobuf encoding itself (no prost `Struct`/`BTreeMap`, no
//! per-cell allocation) and appends one row per prediction to the column builders of the
//! [`TableLayout`]; [`Decoder::finish`] turns the builders into a [`RecordBatch`] without
//! copying. A log is either appended whole or rejected whole with a [`DecodeError`] naming the
//! field and the reason; a rejected log leaves no rows behind.
//!
//! # Where the data is (reference: merlin-publisher.md §1.5, §3.2)
//! - session id: `PredictionLog.prediction_id`; timestamp: `request_timestamp`;
//! - features: `input.features_table` (a `google.protobuf.Struct` in the "split" layout:
//!   `columns`, `data`); names from the schema's `feature_orders` when it is non-empty, else
//!   from the table's `columns`;
//! - predictions: `output.prediction_results_table` (`columns` optional, default = the schema's
//!   score column(s); `data`; `row_ids`, required — the feature table's `row_ids` are ignored);
//! - `model_version` is the configured one; `PredictionLog.model_version` is ignored.
//!
//! # Row rules
//! Kept like Merlin:
//! - values pair with the column list by position; columns not declared in `feature_types` are
//!   dropped; a bare scalar in `data` is a one-element row;
//! - a non-integral number in an int64 column truncates toward zero (4.7 → 4, -4.7 → -4);
//! - a boolean in a numeric column is 1 / 1.0 (false: 0 / 0.0);
//! - timestamps keep microseconds; nanoseconds are truncated.
//!
//! Better than Merlin:
//! - a null (or an unset `Value`) is NULL in every column type;
//! - a declared feature absent from the column list is NULL; likewise a score column absent
//!   from the prediction table;
//! - a NULL (or NaN) score gives a NULL `_prediction_label` and a NULL `_rank`, and ranked rows
//!   skip it;
//! - `_rank` is computed **within each log** (one request), 1-based, by descending score, ties
//!   in order of appearance, so it never depends on how logs are batched (Merlin ranks per
//!   session id across its whole buffer);
//! - multiclass: `_prediction_label` is the label of the highest non-null score (ties: the
//!   first), NULL when every score is NULL.
//!
//! Rejected (the whole log, with kind and reason):
//! - undecodable bytes ([`ErrorKind::InvalidProtobuf`]) and an empty message;
//! - missing `input.features_table`, `output.prediction_results_table`, either `data`, the
//!   prediction table's `row_ids`, the feature column names (no `columns` and no
//!   `feature_orders`), or `request_timestamp` ([`ErrorKind::MissingField`]);
//! - feature rows, prediction rows and row ids whose counts disagree, or a row whose value
//!   count differs from its column count ([`ErrorKind::ShapeMismatch`]; Merlin silently
//!   truncated);
//! - a number or bool in a string feature, a number or string in a boolean feature, a string in
//!   a numeric column, a non-string row id ([`ErrorKind::TypeMismatch`]);
//! - ±Inf/NaN or values beyond ±2^63 in an int64 column, a timestamp outside BigQuery's range
//!   (years 1–9999), invalid UTF-8 ([`ErrorKind::InvalidValue`]);
//! - a list or struct as a cell value or a struct as a row ([`ErrorKind::NestedValue`]);
//! - a declared column named twice in one table's column list ([`ErrorKind::DuplicateColumn`]);
//! - a log whose decoded size could exceed the per-log limit (`batching.max_log_bytes`,
//!   [`Decoder::with_max_log_bytes`]) ([`ErrorKind::TooLarge`]). The bound is checked from the
//!   wire bytes **before** any row is appended; the row counts too, for every log that could
//!   decode to more than 1 MiB, so a log with disagreeing counts costs at most that before it is
//!   rejected.
//!
//! # Wire-format notes
//! Fields the publisher reads are validated fully (wire types, lengths, UTF-8). Fields it does
//! not read (entities, raw features, headers, context) are skipped by length without looking
//! inside, so such a sub-message may hold bytes prost would refuse. A sub-message the publisher
//! reads (`input`, `output`, the two tables, `request_timestamp`) appearing twice at the same
//! level is rejected rather than merged (no producer writes that). Every length is checked
//! against the remaining input before use: arbitrary bytes produce an error, never a panic or
//! an allocation larger than the input.

mod columns;
mod error;
pub mod reference;
mod wire;

pub use error::{DecodeError, ErrorKind};

use crate::table::{Derived, TableLayout, FIRST_FEATURE};
use arrow_array::RecordBatch;
use columns::Col;
use std::collections::HashMap;
use std::sync::Arc;
use wire::{Reader, WireType};

/// Position that maps to no output column.
const DROP: u32 = u32::MAX;
/// Initial row capacity of the builders.
const INITIAL_ROWS: usize = 1024;
/// Logs with at least this many rows reserve their room in the builders up front.
const RESERVE_ROWS: usize = 256;
/// Logs whose size bound from their byte lengths alone is at most this are not counted before
/// decoding (see `Decoder::check_size`).
const COUNT_ABOVE_BYTES: usize = 1 << 20;

/// The shape of one `Value` as the walker sees it.
#[derive(Clone, Copy)]
enum V<'a> {
    Null,
    Number(f64),
    Str(&'a [u8]),
    Bool(bool),
    Struct,
    List(&'a [u8]),
}

impl V<'_> {
    fn name(&self) -> &'static str {
        match self {
            V::Null => "null",
            V::Number(_) => "a number",
            V::Str(_) => "a string",
            V::Bool(_) => "a boolean",
            V::Struct => "a struct",
            V::List(_) => "a list",
        }
    }
}

/// Why a single cell could not be appended (formatted with its context only on the error path).
enum CellError {
    Type(&'static str),
    Nested(&'static str),
    NonFinite,
    Range(f64),
    Utf8,
}

/// A column list (`columns` of one table) resolved to output columns.
struct ColumnMap {
    /// The encoded `columns` list this map was built from (cache key).
    key: Vec<u8>,
    /// Whether `key` is a valid cache entry.
    valid: bool,
    /// Position in the table → index among the targets, or [`DROP`].
    pos: Vec<u32>,
    /// Targets that no position feeds (NULL in every row).
    missing: Vec<u32>,
}

impl ColumnMap {
    fn empty() -> Self {
        ColumnMap {
            key: Vec::new(),
            valid: false,
            pos: Vec::new(),
            missing: Vec::new(),
        }
    }

    /// Rebuilds the map from names; `n_targets` output columns, `index` name → target.
    fn build<'a>(
        &mut self,
        names: impl Iterator<Item = Result<&'a str, DecodeError>>,
        index: &HashMap<String, u32>,
        n_targets: usize,
        table: &str,
    ) -> Result<(), DecodeError> {
        self.valid = false;
        self.pos.clear();
        self.missing.clear();
        let mut seen = vec![false; n_targets];
        for name in names {
            let name = name?;
            match index.get(name) {
                Some(&t) => {
                    if std::mem::replace(&mut seen[t as usize], true) {
                        return Err(DecodeError::new(
                            ErrorKind::DuplicateColumn,
                            format!("{table}.columns names {name:?} more than once"),
                        ));
                    }
                    self.pos.push(t);
                }
                None => self.pos.push(DROP),
            }
        }
        self.missing
            .extend((0..n_targets as u32).filter(|t| !seen[*t as usize]));
        Ok(())
    }
}

/// The parts of a PredictionLog the publisher reads.
struct LogParts<'a> {
    prediction_id: &'a [u8],
    features: Option<&'a [u8]>,
    predictions: Option<&'a [u8]>,
    timestamp: Option<(i64, i32)>,
}

/// The parts of a split-layout table Struct.
#[derive(Default)]
struct TableParts<'a> {
    columns: Option<&'a [u8]>,
    data: Option<&'a [u8]>,
    row_ids: Option<&'a [u8]>,
}

/// BigQuery TIMESTAMP range: 0001-01-01T00:00:00Z ..= 9999-12-31T23:59:59.999999Z.
const MIN_SECONDS: i64 = -62_135_596_800;
const MAX_SECONDS: i64 = 253_402_300_799;

/// Decodes PredictionLogs into the rows of one table layout. Reuse one decoder per stream of
/// logs: it keeps its builders and caches the resolution of column lists between logs.
pub struct Decoder {
    layout: Arc<TableLayout>,
    cols: Vec<Col>,
    rows: usize,
    fixed_row_bytes: usize,
    /// Upper bound of the bytes one row costs apart from its session id, row id and feature
    /// strings: every column's fixed width and validity byte, the model version, the longest
    /// derived label, ranking scratch.
    row_bound_bytes: usize,
    feature_index: HashMap<String, u32>,
    score_index: HashMap<String, u32>,
    /// Map for `feature_orders`, when the schema has it (fixed for the decoder's life).
    ordered_features: Option<ColumnMap>,
    /// Cached map of the last feature table's `columns`.
    feature_map: ColumnMap,
    /// Cached map of the last prediction table's `columns`.
    score_map: ColumnMap,
    /// Map for prediction tables without `columns`.
    default_score_map: ColumnMap,
    /// Per-row scratch: the row's scores.
    scores: Vec<Option<f64>>,
    /// Per-log scratch for ranking: (score, row in log).
    rank_scratch: Vec<(f64, u32)>,
    rank_out: Vec<Option<i64>>,
    /// Largest decoded size of one log ([`Decoder::with_max_log_bytes`]).
    max_log_bytes: usize,
}

impl Decoder {
    /// A decoder for `layout`.
    pub fn new(layout: Arc<TableLayout>) -> Self {
        let cols = layout
            .columns
            .iter()
            .map(|c| Col::new(c.ty, INITIAL_ROWS))
            .collect();
        let fixed_row_bytes = layout
            .columns
            .iter()
            .map(|c| match c.ty {
                crate::table::ColumnType::String => 4,
                crate::table::ColumnType::Boolean => 1,
                _ => 8,
            })
            .sum();
        let label_bytes = match &layout.derived {
            Derived::BinaryLabel {
                positive, negative, ..
            } => positive.len().max(negative.len()),
            Derived::ArgmaxLabel { labels } => labels.iter().map(String::len).max().unwrap_or(0),
            Derived::Rank => 32,
            Derived::None => 0,
        };
        let row_bound_bytes =
            fixed_row_bytes + layout.columns.len() + layout.model_version.len() + label_bytes;
        let feature_index: HashMap<String, u32> = layout.columns
            [FIRST_FEATURE..FIRST_FEATURE + layout.n_features]
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), i as u32))
            .collect();
        let first_score = layout.first_score();
        let score_index: HashMap<String, u32> = layout.columns
            [first_score..first_score + layout.n_scores]
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), i as u32))
            .collect();
        let ordered_features = (!layout.feature_orders.is_empty()).then(|| {
            let mut m = ColumnMap::empty();
            m.build(
                layout.feature_orders.iter().map(|s| Ok(s.as_str())),
                &feature_index,
                layout.n_features,
                "feature_orders",
            )
            .unwrap_or_else(|_| {
                // A feature named twice in feature_orders: keep the first occurrence.
                let mut seen = vec![false; layout.n_features];
                m.pos = layout
                    .feature_orders
                    .iter()
                    .map(|n| match feature_index.get(n) {
                        Some(&t) if !std::mem::replace(&mut seen[t as usize], true) => t,
                        _ => DROP,
                    })
                    .collect();
                m.missing = (0..layout.n_features as u32)
                    .filter(|t| !seen[*t as usize])
                    .collect();
            });
            m
        });
        let mut default_score_map = ColumnMap::empty();
        default_score_map.pos = (0..layout.n_scores as u32).collect();
        Decoder {
            scores: vec![None; layout.n_scores],
            layout,
            cols,
            rows: 0,
            fixed_row_bytes,
            row_bound_bytes,
            feature_index,
            score_index,
            ordered_features,
            feature_map: ColumnMap::empty(),
            score_map: ColumnMap::empty(),
            default_score_map,
            rank_scratch: Vec::new(),
            rank_out: Vec::new(),
            max_log_bytes: crate::config::DEFAULT_MAX_LOG_BYTES,
        }
    }

    /// Sets the largest decoded size of one log (`batching.max_log_bytes`; default
    /// [`crate::config::DEFAULT_MAX_LOG_BYTES`]). A log whose size bound is over it is rejected
    /// with [`ErrorKind::TooLarge`] before any of its rows is appended.
    pub fn with_max_log_bytes(mut self, max: usize) -> Self {
        self.max_log_bytes = max;
        self
    }

    /// Bytes the builders have allocated (capacity, not length): what decoding costs in memory.
    pub fn allocated_bytes(&self) -> usize {
        self.cols.iter().map(Col::allocated_bytes).sum::<usize>()
            + self.rank_scratch.capacity() * std::mem::size_of::<(f64, u32)>()
            + self.rank_out.capacity() * std::mem::size_of::<Option<i64>>()
    }

    /// The table layout rows are decoded into.
    pub fn layout(&self) -> &Arc<TableLayout> {
        &self.layout
    }

    /// Rows appended since the last [`Decoder::finish`].
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Approximate bytes held by the builders (what the batch will weigh in Arrow).
    pub fn approx_bytes(&self) -> usize {
        self.rows * self.fixed_row_bytes + self.cols.iter().map(Col::var_bytes).sum::<usize>()
    }

    /// Decodes one serialized PredictionLog and appends its rows. Returns the number of rows
    /// appended; on error nothing is appended.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<usize, DecodeError> {
        if bytes.is_empty() {
            return Err(DecodeError::new(
                ErrorKind::EmptyMessage,
                "zero-length message",
            ));
        }
        let start = self.rows;
        match self.decode_log(bytes) {
            Ok(n) => {
                self.rows += n;
                Ok(n)
            }
            Err(e) => {
                for c in &mut self.cols {
                    c.truncate(start);
                }
                Err(e)
            }
        }
    }

    /// Drops every row after the first `rows` (no-op if there are not more). The batcher uses it
    /// to take back a log that would push a batch over its limits.
    pub fn truncate(&mut self, rows: usize) {
        if rows < self.rows {
            for c in &mut self.cols {
                c.truncate(rows);
            }
            self.rows = rows;
        }
    }

    /// Moves the decoded rows into a record batch and starts a new one.
    pub fn finish(&mut self) -> RecordBatch {
        let arrays = self.cols.iter_mut().map(Col::finish).collect();
        self.rows = 0;
        RecordBatch::try_new(Arc::clone(&self.layout.arrow), arrays)
            .expect("columns match the layout")
    }

    fn decode_log(&mut self, bytes: &[u8]) -> Result<usize, DecodeError> {
        let parts = walk_log(bytes)?;
        let (secs, nanos) = parts.timestamp.ok_or_else(|| {
            DecodeError::new(ErrorKind::MissingField, "request_timestamp is not set")
        })?;
        let micros = timestamp_micros(secs, nanos)?;
        let features = parts.features.ok_or_else(|| {
            DecodeError::new(ErrorKind::MissingField, "input.features_table is missing")
        })?;
        let predictions = parts.predictions.ok_or_else(|| {
            DecodeError::new(
                ErrorKind::MissingField,
                "output.prediction_results_table is missing",
            )
        })?;
        let ft = walk_table(features, "input.features_table")?;
        let pt = walk_table(predictions, "output.prediction_results_table")?;
        let f_data = ft.data.ok_or_else(|| {
            DecodeError::new(
                ErrorKind::MissingField,
                "input.features_table.data is missing",
            )
        })?;
        let p_data = pt.data.ok_or_else(|| {
            DecodeError::new(
                ErrorKind::MissingField,
                "output.prediction_results_table.data is missing",
            )
        })?;
        let row_ids = pt.row_ids.ok_or_else(|| {
            DecodeError::new(
                ErrorKind::MissingField,
                "output.prediction_results_table.row_ids is missing",
            )
        })?;
        let session = std::str::from_utf8(parts.prediction_id).map_err(|_| {
            DecodeError::new(ErrorKind::InvalidValue, "prediction_id is not valid UTF-8")
        })?;
        let rows = self.check_size(f_data, row_ids, p_data, session.len())?;
        // A large log grows every builder once to what it needs (session id and model version
        // exactly; other strings as they come) instead of doubling past it. Small logs skip
        // this: the usual amortized growth costs them nothing extra.
        if rows >= RESERVE_ROWS {
            for (i, c) in self.cols.iter_mut().enumerate() {
                let bytes = match i {
                    0 => rows * session.len(),
                    3 => rows * self.layout.model_version.len(),
                    _ => 0,
                };
                c.reserve(rows, bytes);
            }
        }

        // Resolve column lists (cached by their encoded bytes: logs of one model repeat them).
        let n_features = self.layout.n_features;
        let n_scores = self.layout.n_scores;
        if self.ordered_features.is_none() {
            let cols = ft.columns.ok_or_else(|| {
                DecodeError::new(
                    ErrorKind::MissingField,
                    "input.features_table has no columns and the schema has no feature_orders",
                )
            })?;
            refresh(
                &mut self.feature_map,
                cols,
                &self.feature_index,
                n_features,
                "input.features_table",
            )?;
        }
        if let Some(cols) = pt.columns {
            refresh(
                &mut self.score_map,
                cols,
                &self.score_index,
                n_scores,
                "output.prediction_results_table",
            )?;
        }

        let Decoder {
            layout,
            cols,
            ordered_features,
            feature_map,
            score_map,
            default_score_map,
            scores,
            rank_scratch,
            rank_out,
            ..
        } = self;
        let fmap: &ColumnMap = ordered_features.as_ref().unwrap_or(feature_map);
        let smap: &ColumnMap = if pt.columns.is_some() {
            score_map
        } else {
            default_score_map
        };
        let first_score = layout.first_score();
        let (fixed, rest) = cols.split_at_mut(FIRST_FEATURE);
        let (feat_cols, rest) = rest.split_at_mut(n_features);
        let (score_cols, derived_cols) = rest.split_at_mut(n_scores);

        rank_scratch.clear(); // a previous log may have been rejected half-way
        let mut f_rows = ListIter::new(f_data);
        let mut p_rows = ListIter::new(p_data);
        let mut ids = ListIter::new(row_ids);
        let mut n: usize = 0;
        loop {
            let f = f_rows.next("input.features_table.data")?;
            let p = p_rows.next("output.prediction_results_table.data")?;
            let id = ids.next("output.prediction_results_table.row_ids")?;
            let (f, p, id) = match (f, p, id) {
                (None, None, None) => break,
                (Some(f), Some(p), Some(id)) => (f, p, id),
                _ => {
                    return Err(shape_error(
                        count_items(f_data).0,
                        count_items(p_data).0,
                        count_items(row_ids).0,
                    ))
                }
            };
            // Fixed columns.
            match parse_value(id, "row_ids")? {
                V::Str(s) => {
                    if !valid_utf8(s) {
                        return Err(DecodeError::new(
                            ErrorKind::InvalidValue,
                            format!(
                                "output.prediction_results_table.row_ids[{n}] is not valid UTF-8"
                            ),
                        ));
                    }
                    push_str(&mut fixed[1], s)?;
                }
                other => {
                    return Err(DecodeError::new(
                        ErrorKind::TypeMismatch,
                        format!(
                        "output.prediction_results_table.row_ids[{n}]: expected a string, found {}",
                        other.name()
                    ),
                    ))
                }
            }
            push_str(&mut fixed[0], session.as_bytes())?;
            if let Col::Ts(c) = &mut fixed[2] {
                c.push(micros);
            }
            push_str(&mut fixed[3], layout.model_version.as_bytes())?;

            // Features.
            walk_row(f, fmap, feat_cols, None, n, "input.features_table", |t| {
                &layout.columns[FIRST_FEATURE + t as usize]
            })?;
            // Scores.
            scores.iter_mut().for_each(|s| *s = None);
            walk_row(
                p,
                smap,
                score_cols,
                Some(scores),
                n,
                "output.prediction_results_table",
                |t| &layout.columns[first_score + t as usize],
            )?;
            // Derived label (per row); ranks are appended per log below.
            match (&layout.derived, derived_cols.first_mut()) {
                (
                    Derived::BinaryLabel {
                        positive,
                        negative,
                        threshold,
                    },
                    Some(col),
                ) => match scores[0] {
                    Some(s) if !s.is_nan() => push_str(
                        col,
                        if s >= *threshold { positive } else { negative }.as_bytes(),
                    )?,
                    _ => col.push_null(),
                },
                (Derived::ArgmaxLabel { labels }, Some(col)) => {
                    let mut best: Option<(usize, f64)> = None;
                    for (k, s) in scores.iter().enumerate() {
                        if let Some(s) = *s {
                            if !s.is_nan() && best.is_none_or(|(_, b)| s > b) {
                                best = Some((k, s));
                            }
                        }
                    }
                    match best {
                        Some((k, _)) => push_str(col, labels[k].as_bytes())?,
                        None => col.push_null(),
                    }
                }
                (Derived::Rank, _) => {
                    if let Some(s) = scores[0] {
                        if !s.is_nan() {
                            rank_scratch.push((s, n as u32));
                        }
                    }
                }
                _ => {}
            }
            n += 1;
        }
        if matches!(layout.derived, Derived::Rank) {
            let col = derived_cols.first_mut().expect("ranking layout has _rank");
            // Stable: equal scores keep their order of appearance.
            rank_scratch.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal));
            rank_out.clear();
            rank_out.resize(n, None);
            for (rank, (_, row)) in rank_scratch.iter().enumerate() {
                rank_out[*row as usize] = Some(rank as i64 + 1);
            }
            rank_scratch.clear();
            if let Col::I64(c) = col {
                for r in rank_out.iter() {
                    match r {
                        Some(v) => c.push(*v),
                        None => c.push_null(),
                    }
                }
            }
        }
        Ok(n)
    }
}

impl Decoder {
    /// Rejects a log before any of its rows is appended when the upper bound of its decoded size
    /// is over `max_log_bytes`, or when its row counts disagree. The bound is
    /// `rows × (row_bound_bytes + session id length) + row-id bytes + feature-data bytes` (every
    /// string cell is a slice of the feature data, every row id of the row-id list).
    ///
    /// Every list element takes at least two bytes (key and length), which bounds the rows
    /// without reading the lists; a log whose bound is at most [`COUNT_ABOVE_BYTES`] even so
    /// (the usual log) is not counted, and `Ok(0)` is returned: a shape mismatch is then found
    /// by the row loop, after appending at most that much. Otherwise the rows are counted (one
    /// key and one length per element) and returned. A list that is itself malformed makes the
    /// row loop stop at its first bad element, so the rows counted before it still bound what
    /// would be appended; the loop then reports the malformation.
    #[inline]
    fn check_size(
        &self,
        f_data: &[u8],
        row_ids: &[u8],
        p_data: &[u8],
        session_len: usize,
    ) -> Result<usize, DecodeError> {
        let bound = |rows: usize| {
            rows.saturating_mul(self.row_bound_bytes.saturating_add(session_len))
                .saturating_add(row_ids.len())
                .saturating_add(f_data.len())
        };
        let most_rows = f_data.len().min(p_data.len()).min(row_ids.len()) / 2;
        if bound(most_rows) <= COUNT_ABOVE_BYTES.min(self.max_log_bytes) {
            return Ok(0);
        }
        self.count_and_check(f_data, row_ids, p_data, bound)
    }

    #[inline(never)]
    fn count_and_check(
        &self,
        f_data: &[u8],
        row_ids: &[u8],
        p_data: &[u8],
        bound: impl Fn(usize) -> usize,
    ) -> Result<usize, DecodeError> {
        let (nf, f_whole) = count_items(f_data);
        let (np, p_whole) = count_items(p_data);
        let (ni, i_whole) = count_items(row_ids);
        if f_whole && p_whole && i_whole && !(nf == np && np == ni) {
            return Err(shape_error(nf, np, ni));
        }
        let rows = nf.min(np).min(ni);
        let bound = bound(rows);
        if bound > self.max_log_bytes {
            return Err(too_large(bound, rows, self.max_log_bytes));
        }
        Ok(rows)
    }
}

#[cold]
#[inline(never)]
fn too_large(bound: usize, rows: usize, max: usize) -> DecodeError {
    DecodeError::new(
        ErrorKind::TooLarge,
        format!(
            "the log would take up to {bound} bytes decoded ({rows} rows), over the per-log limit of {max} bytes (batching.max_log_bytes)"
        ),
    )
}

/// Elements of an encoded `ListValue` up to the first malformed one, and whether the list was
/// read to its end.
fn count_items(list: &[u8]) -> (usize, bool) {
    let mut it = ListIter::new(list);
    let mut n = 0usize;
    loop {
        match it.next("") {
            Ok(Some(_)) => n += 1,
            Ok(None) => return (n, true),
            Err(_) => return (n, false),
        }
    }
}

#[inline]
fn utf8(b: &[u8]) -> Result<&str, std::str::Utf8Error> {
    std::str::from_utf8(b)
}

/// UTF-8 check with a fast path for the short ASCII strings logs are mostly made of.
#[inline(always)]
fn valid_utf8(b: &[u8]) -> bool {
    (b.len() <= 64 && b.iter().all(|c| *c < 0x80)) || std::str::from_utf8(b).is_ok()
}

#[inline(always)]
fn push_str(col: &mut Col, s: &[u8]) -> Result<(), DecodeError> {
    match col {
        Col::Str(c) => c.push(s),
        _ => unreachable!("fixed string column"),
    }
}

/// Refreshes a cached column map unless `cols` is the same encoded list as last time.
fn refresh(
    map: &mut ColumnMap,
    cols: &[u8],
    index: &HashMap<String, u32>,
    n_targets: usize,
    table: &str,
) -> Result<(), DecodeError> {
    if map.valid && map.key == cols {
        return Ok(());
    }
    let mut it = ListIter::new(cols);
    let mut i = 0usize;
    let names = std::iter::from_fn(|| {
        let item = match it.next("columns") {
            Ok(Some(b)) => b,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        let idx = i;
        i += 1;
        Some(match parse_value(item, "columns") {
            Ok(V::Str(s)) => utf8(s).map_err(|_| {
                DecodeError::new(
                    ErrorKind::InvalidValue,
                    format!("{table}.columns[{idx}] is not valid UTF-8"),
                )
            }),
            Ok(other) => Err(DecodeError::new(
                ErrorKind::TypeMismatch,
                format!(
                    "{table}.columns[{idx}]: expected a string, found {}",
                    other.name()
                ),
            )),
            Err(e) => Err(e),
        })
    });
    map.build(names, index, n_targets, table)?;
    map.key.clear();
    map.key.extend_from_slice(cols);
    map.valid = true;
    Ok(())
}

/// Walks one row (`Value`: a list, or a bare scalar meaning a one-element row), appending each
/// mapped cell to its target column and NULL to targets the map does not feed. When `scores`
/// is given, the appended float values are recorded there.
#[inline(always)]
fn walk_row<'c>(
    row: &[u8],
    map: &ColumnMap,
    cols: &mut [Col],
    mut scores: Option<&mut Vec<Option<f64>>>,
    row_no: usize,
    table: &str,
    column: impl Fn(u32) -> &'c crate::table::Column,
) -> Result<(), DecodeError> {
    const WHAT: &str = "data";
    let n_cols = map.pos.len();
    let count = match parse_value(row, WHAT)? {
        V::List(items) => {
            let mut it = ListIter::new(items);
            let mut pos = 0usize;
            while let Some(cell) = it.next(WHAT)? {
                if pos < n_cols {
                    let t = map.pos[pos];
                    if t != DROP {
                        let v = parse_value(cell, WHAT)?;
                        match push_cell(&mut cols[t as usize], v) {
                            Ok(Some(f)) => {
                                if let Some(s) = scores.as_deref_mut() {
                                    s[t as usize] = Some(f);
                                }
                            }
                            Ok(None) => {}
                            Err(e) => return Err(cell_error(e, table, row_no, pos, column(t))),
                        }
                    }
                }
                pos += 1;
            }
            pos
        }
        V::Struct => {
            return Err(DecodeError::new(
                ErrorKind::NestedValue,
                format!("{table}.data[{row_no}] is a struct; a row must be a list of values"),
            ))
        }
        scalar => {
            if let Some(&t) = map.pos.first() {
                if t != DROP {
                    match push_cell(&mut cols[t as usize], scalar) {
                        Ok(Some(f)) => {
                            if let Some(s) = scores {
                                s[t as usize] = Some(f);
                            }
                        }
                        Ok(None) => {}
                        Err(e) => return Err(cell_error(e, table, row_no, 0, column(t))),
                    }
                }
            }
            1
        }
    };
    if count != n_cols {
        return Err(shape_row_error(table, row_no, count, n_cols));
    }
    for &t in &map.missing {
        cols[t as usize].push_null();
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn shape_row_error(table: &str, row_no: usize, count: usize, n_cols: usize) -> DecodeError {
    DecodeError::new(
        ErrorKind::ShapeMismatch,
        format!("{table}.data[{row_no}] has {count} values but there are {n_cols} columns"),
    )
}

#[cold]
#[inline(never)]
fn cell_error(
    e: CellError,
    table: &str,
    row: usize,
    pos: usize,
    col: &crate::table::Column,
) -> DecodeError {
    let at = format!(
        "{table}.data[{row}][{pos}] (column {:?}, {})",
        col.name,
        col.ty.bigquery_name()
    );
    match e {
        CellError::Type(found) => {
            DecodeError::new(ErrorKind::TypeMismatch, format!("{at}: found {found}"))
        }
        CellError::Nested(found) => DecodeError::new(
            ErrorKind::NestedValue,
            format!("{at}: found {found}; cells must be scalars"),
        ),
        CellError::NonFinite => DecodeError::new(
            ErrorKind::InvalidValue,
            format!("{at}: NaN or infinity is not an integer"),
        ),
        CellError::Range(v) => DecodeError::new(
            ErrorKind::InvalidValue,
            format!("{at}: {v} is out of range for int64"),
        ),
        CellError::Utf8 => {
            DecodeError::new(ErrorKind::InvalidValue, format!("{at}: not valid UTF-8"))
        }
    }
}

/// Appends one value to a column with the coercion rules of the module docs. Returns the float
/// value appended to a float column (for derived columns).
#[inline(always)]
fn push_cell(col: &mut Col, v: V<'_>) -> Result<Option<f64>, CellError> {
    match (col, v) {
        (c, V::Null) => {
            c.push_null();
            Ok(None)
        }
        (_, V::List(_)) => Err(CellError::Nested("a list")),
        (_, V::Struct) => Err(CellError::Nested("a struct")),
        (Col::F64(c), V::Number(f)) => {
            c.push(f);
            Ok(Some(f))
        }
        (Col::F64(c), V::Bool(b)) => {
            let f = if b { 1.0 } else { 0.0 };
            c.push(f);
            Ok(Some(f))
        }
        (Col::I64(c), V::Number(f)) => {
            // -2^63 is exactly representable and in range; 2^63 is the first value out. No
            // double lies strictly between -2^63 - 1 and -2^63, so checking `f` itself is the
            // same as checking its truncation. `as` truncates toward zero.
            if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f) {
                c.push(f as i64);
                Ok(None)
            } else if f.is_finite() {
                Err(CellError::Range(f))
            } else {
                Err(CellError::NonFinite)
            }
        }
        (Col::I64(c), V::Bool(b)) => {
            c.push(i64::from(b));
            Ok(None)
        }
        (Col::Bool(c), V::Bool(b)) => {
            c.push(b);
            Ok(None)
        }
        (Col::Str(c), V::Str(s)) => {
            if !valid_utf8(s) {
                return Err(CellError::Utf8);
            }
            c.push(s).map_err(|_| CellError::Utf8)?;
            Ok(None)
        }
        (_, v) => Err(CellError::Type(v.name())),
    }
}

fn timestamp_micros(secs: i64, nanos: i32) -> Result<i64, DecodeError> {
    if !(0..=999_999_999).contains(&nanos) {
        return Err(DecodeError::new(
            ErrorKind::InvalidValue,
            format!("request_timestamp.nanos = {nanos} is outside 0..=999999999"),
        ));
    }
    if !(MIN_SECONDS..=MAX_SECONDS).contains(&secs) {
        return Err(DecodeError::new(
            ErrorKind::InvalidValue,
            format!(
                "request_timestamp.seconds = {secs} is outside BigQuery's range (years 1 to 9999)"
            ),
        ));
    }
    Ok(secs * 1_000_000 + i64::from(nanos / 1_000))
}

#[cold]
#[inline(never)]
fn shape_error(f: usize, p: usize, ids: usize) -> DecodeError {
    DecodeError::new(
        ErrorKind::ShapeMismatch,
        format!("{f} feature rows, {p} prediction rows and {ids} row ids; they must be equal"),
    )
}

/// Iterates the elements (encoded `Value`s) of an encoded `ListValue`.
struct ListIter<'a> {
    r: Reader<'a>,
}

impl<'a> ListIter<'a> {
    #[inline]
    fn new(list: &'a [u8]) -> Self {
        ListIter {
            r: Reader::new(list),
        }
    }

    #[inline(always)]
    fn next(&mut self, what: &str) -> Result<Option<&'a [u8]>, DecodeError> {
        while !self.r.at_end() {
            let (field, wt) = self.r.key(what)?;
            if field == 1 {
                self.r.expect(wt, WireType::Len, what)?;
                return Ok(Some(self.r.bytes(what)?));
            }
            self.r.skip(field, wt, what)?;
        }
        Ok(None)
    }
}

/// Parses one encoded `google.protobuf.Value` (oneof: the last kind present wins; no kind = null).
#[inline(always)]
fn parse_value<'a>(b: &'a [u8], what: &str) -> Result<V<'a>, DecodeError> {
    // Fast paths for the usual single-field encodings; anything else takes the general loop.
    match b.first() {
        Some(0x11) if b.len() == 9 => {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[1..9]);
            return Ok(V::Number(f64::from_bits(u64::from_le_bytes(x))));
        }
        Some(0x1a) if b.len() >= 2 && b[1] < 0x80 && b.len() == 2 + b[1] as usize => {
            return Ok(V::Str(&b[2..]))
        }
        Some(0x20) if b.len() == 2 && b[1] < 0x80 => return Ok(V::Bool(b[1] != 0)),
        Some(0x08) if b.len() == 2 && b[1] < 0x80 => return Ok(V::Null),
        Some(0x32) => {
            // list_value: one length-delimited field covering the rest.
            let mut r = Reader::new(&b[1..]);
            if let Ok(l) = r.bytes(what) {
                if r.at_end() {
                    return Ok(V::List(l));
                }
            }
        }
        None => return Ok(V::Null),
        _ => {}
    }
    parse_value_slow(b, what)
}

#[inline(never)]
fn parse_value_slow<'a>(b: &'a [u8], what: &str) -> Result<V<'a>, DecodeError> {
    let mut r = Reader::new(b);
    let mut v = V::Null;
    while !r.at_end() {
        let (field, wt) = r.key(what)?;
        match field {
            1 => {
                r.expect(wt, WireType::Varint, what)?;
                r.varint(what)?;
                v = V::Null;
            }
            2 => {
                r.expect(wt, WireType::Fixed64, what)?;
                v = V::Number(f64::from_bits(r.fixed64(what)?));
            }
            3 => {
                r.expect(wt, WireType::Len, what)?;
                v = V::Str(r.bytes(what)?);
            }
            4 => {
                r.expect(wt, WireType::Varint, what)?;
                v = V::Bool(r.varint(what)? != 0);
            }
            5 => {
                r.expect(wt, WireType::Len, what)?;
                r.bytes(what)?;
                v = V::Struct;
            }
            6 => {
                r.expect(wt, WireType::Len, what)?;
                v = V::List(r.bytes(what)?);
            }
            _ => r.skip(field, wt, what)?,
        }
    }
    Ok(v)
}

/// Reads a Struct in the split layout, keeping the encoded lists under `columns`, `data` and
/// `row_ids` (map semantics: a repeated key's last entry wins; a null value counts as absent).
fn walk_table<'a>(b: &'a [u8], table: &str) -> Result<TableParts<'a>, DecodeError> {
    let mut r = Reader::new(b);
    let mut parts = TableParts::default();
    while !r.at_end() {
        let (field, wt) = r.key(table)?;
        if field != 1 {
            r.skip(field, wt, table)?;
            continue;
        }
        r.expect(wt, WireType::Len, table)?;
        let entry = r.bytes(table)?;
        let mut e = Reader::new(entry);
        let mut key: &[u8] = b"";
        let mut value: &[u8] = b"";
        while !e.at_end() {
            let (f, w) = e.key(table)?;
            match f {
                1 => {
                    e.expect(w, WireType::Len, table)?;
                    key = e.bytes(table)?;
                }
                2 => {
                    e.expect(w, WireType::Len, table)?;
                    value = e.bytes(table)?;
                }
                _ => e.skip(f, w, table)?,
            }
        }
        let slot = match key {
            b"columns" => &mut parts.columns,
            b"data" => &mut parts.data,
            b"row_ids" => &mut parts.row_ids,
            _ => continue,
        };
        *slot = match parse_value(value, table)? {
            V::List(l) => Some(l),
            V::Null => None,
            other => {
                return Err(DecodeError::new(
                    ErrorKind::TypeMismatch,
                    format!(
                        "{table}.{}: expected a list, found {}",
                        String::from_utf8_lossy(key),
                        other.name()
                    ),
                ))
            }
        };
    }
    Ok(parts)
}

/// Reads the top level of a PredictionLog.
fn walk_log(b: &[u8]) -> Result<LogParts<'_>, DecodeError> {
    const W: &str = "PredictionLog";
    let mut r = Reader::new(b);
    let mut parts = LogParts {
        prediction_id: b"",
        features: None,
        predictions: None,
        timestamp: None,
    };
    let mut seen_input = false;
    let mut seen_output = false;
    while !r.at_end() {
        let (field, wt) = r.key(W)?;
        match field {
            1 => {
                r.expect(wt, WireType::Len, "prediction_id")?;
                parts.prediction_id = r.bytes("prediction_id")?;
            }
            2..=5 => {
                r.expect(wt, WireType::Len, W)?;
                let s = r.bytes(W)?;
                if utf8(s).is_err() {
                    return Err(DecodeError::new(
                        ErrorKind::InvalidProtobuf,
                        format!("PredictionLog field {field} is not valid UTF-8"),
                    ));
                }
            }
            10 => {
                r.expect(wt, WireType::Len, "input")?;
                once(&mut seen_input, "input")?;
                parts.features = walk_sub(r.bytes("input")?, "input", &[2, 3, 4, 10])?;
            }
            11 => {
                r.expect(wt, WireType::Len, "output")?;
                once(&mut seen_output, "output")?;
                parts.predictions = walk_sub(r.bytes("output")?, "output", &[2, 10, 12])?;
            }
            20 => {
                r.expect(wt, WireType::Len, "request_timestamp")?;
                if parts.timestamp.is_some() {
                    return Err(dup("request_timestamp"));
                }
                parts.timestamp = Some(walk_timestamp(r.bytes("request_timestamp")?)?);
            }
            100 => {
                r.expect(wt, WireType::Varint, "table_schema_version")?;
                r.varint("table_schema_version")?;
            }
            _ => r.skip(field, wt, W)?,
        }
    }
    Ok(parts)
}

fn once(seen: &mut bool, what: &str) -> Result<(), DecodeError> {
    if std::mem::replace(seen, true) {
        Err(dup(what))
    } else {
        Ok(())
    }
}

fn dup(what: &str) -> DecodeError {
    DecodeError::new(
        ErrorKind::InvalidProtobuf,
        format!("{what} appears more than once; merging repeated sub-messages is not supported"),
    )
}

/// Reads ModelInput / ModelOutput: field 1 is the table Struct; `len_fields` are the other
/// length-delimited fields (skipped after a wire-type check); anything else is a varint or
/// unknown field.
fn walk_sub<'a>(
    b: &'a [u8],
    what: &str,
    len_fields: &[u32],
) -> Result<Option<&'a [u8]>, DecodeError> {
    let mut r = Reader::new(b);
    let mut table = None;
    while !r.at_end() {
        let (field, wt) = r.key(what)?;
        if field == 1 {
            r.expect(wt, WireType::Len, what)?;
            if table.is_some() {
                return Err(dup(&format!("{what} table")));
            }
            table = Some(r.bytes(what)?);
        } else if len_fields.contains(&field) {
            r.expect(wt, WireType::Len, what)?;
            r.bytes(what)?;
        } else {
            r.skip(field, wt, what)?;
        }
    }
    Ok(table)
}

fn walk_timestamp(b: &[u8]) -> Result<(i64, i32), DecodeError> {
    const W: &str = "request_timestamp";
    let mut r = Reader::new(b);
    let (mut secs, mut nanos) = (0i64, 0i32);
    while !r.at_end() {
        let (field, wt) = r.key(W)?;
        match field {
            1 => {
                r.expect(wt, WireType::Varint, W)?;
                secs = r.varint(W)? as i64;
            }
            2 => {
                r.expect(wt, WireType::Varint, W)?;
                nanos = r.varint(W)? as i32;
            }
            _ => r.skip(field, wt, W)?,
        }
    }
    Ok((secs, nanos))
}

#[cfg(test)]
mod tests;
