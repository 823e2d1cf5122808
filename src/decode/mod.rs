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
//! Counted for the quality metrics ([`Counts`], [`Decoder::take_counts`]): feature cells of
//! another kind than their column's (off the fast path) and cells of undeclared features.
//!
//! # Wire-format notes
//! Fields the publisher reads are validated fully (wire types, lengths, UTF-8). Fields it does
//! not read (entities, raw features, headers, context) are skipped by length without looking
//! inside, so such a sub-message may hold bytes prost would refuse. A sub-message the publisher
//! reads (`input`, `output`, the two tables, `request_timestamp`) appearing twice at the same
//! level is rejected rather than merged (no producer writes that). Every length is checked
//! against the remaining input before use: arbitrary bytes produce an error, never a panic or
//! an allocation larger than the input.

mod bound;
mod cells;
mod column_map;
mod columns;
mod counts;
mod error;
pub mod reference;
mod sizes;
mod walk;
mod wire;

pub use counts::Counts;
pub use error::{DecodeError, DecodeErrorParts, ErrorKind};

use crate::table::{Derived, TableLayout, FIRST_FEATURE};
use arrow_array::RecordBatch;
use bound::count_items;
use cells::{parse_value, push_str, timestamp_micros, valid_utf8, walk_row, ListIter, RowAt, V};
use column_map::{refresh, ColumnMap, DROP};
use columns::Col;
use std::collections::HashMap;
use std::sync::Arc;
use walk::{walk_log, walk_table};
use wire::{Reader, WireType};

/// Initial row capacity of the builders.
const INITIAL_ROWS: usize = 1024;

/// Logs with at least this many rows reserve their room in the builders up front.
const RESERVE_ROWS: usize = 256;

/// Logs whose size bound from their byte lengths alone is at most this are not counted before
/// decoding (see `Decoder::check_size`).
const COUNT_ABOVE_BYTES: usize = 1 << 20;

/// Rows of ranking scratch (a score and row number, and a rank, per row: 32 bytes) kept from
/// one log to the next; a larger log's is given back after it.
const RANK_SCRATCH_ROWS: usize = 1024;

/// A log whose structure was read and whose cheap checks passed ([`Decoder::prepare`]): what
/// the batcher needs to decide where the log goes before any row is appended.
pub struct Prepared<'a> {
    micros: i64,
    f_data: &'a [u8],
    p_data: &'a [u8],
    row_ids: &'a [u8],
    /// The prediction id (checked as UTF-8).
    session: &'a [u8],
    /// Whether the prediction table has its own `columns` (else the schema's score columns).
    score_columns: bool,
    /// The log's rows when they were counted (logs that may decode to more than 1 MiB), else 0.
    counted_rows: usize,
    /// Upper bound of the bytes the log adds to [`Decoder::approx_bytes`] if it is accepted.
    bound: usize,
}

impl Prepared<'_> {
    /// Upper bound of the bytes the log adds to [`Decoder::approx_bytes`] if it is accepted.
    pub fn bound(&self) -> usize {
        self.bound
    }

    /// The rows the log yields if it is accepted (its row ids; counted only when asked, for
    /// the logs near a batch's row limit).
    pub fn rows(&self) -> usize {
        if self.counted_rows > 0 {
            self.counted_rows
        } else {
            count_items(self.row_ids).0
        }
    }

    /// A cheap upper bound of [`Prepared::rows`] (from the lengths alone; exact once counted).
    pub fn most_rows(&self) -> usize {
        if self.counted_rows > 0 {
            self.counted_rows
        } else {
            self.f_data
                .len()
                .min(self.p_data.len())
                .min(self.row_ids.len())
                / 2
        }
    }
}

/// Decodes PredictionLogs into the rows of one table layout. Reuse one decoder per stream of
/// logs: it keeps its builders and caches the resolution of column lists between logs.
pub struct Decoder {
    layout: Arc<TableLayout>,
    cols: Vec<Col>,
    rows: usize,
    fixed_row_bytes: usize,
    /// String bytes in the builders: the only variable-length part of
    /// [`Decoder::approx_bytes`], kept as they are appended (a sum over the string columns after
    /// every log took 3% of the pipeline thread).
    str_bytes: usize,
    /// Upper bound of the bytes one row costs apart from its session id, row id and feature
    /// strings: every column's fixed width and a NULL's row number, the model version, the longest
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
    /// The last full count of [`Decoder::sizes`].
    counted: Option<sizes::Counted>,
    /// Each column's rows, string bytes and NULLs in the last finished batch: the next batch
    /// reserves them at its first log instead of growing from empty by doubling (empty: nothing
    /// to reserve).
    last_batch: Vec<(usize, usize, usize)>,
    /// A finished batch over these data bytes is not reserved again ([`Decoder::with_reserve_limit`]).
    reserve_limit: usize,
    /// Per declared feature: cells of another kind than its type ([`Counts::mismatches`]).
    mismatches: Vec<u64>,
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
        // A NULL costs its row number (4 bytes) in the column's validity.
        let row_bound_bytes =
            fixed_row_bytes + 4 * layout.columns.len() + layout.model_version.len() + label_bytes;
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
                m.dropped = layout
                    .feature_orders
                    .iter()
                    .filter(|n| !feature_index.contains_key(*n))
                    .map(|n| (n.clone(), 0))
                    .collect();
            });
            m
        });
        let mut default_score_map = ColumnMap::empty();
        default_score_map.pos = (0..layout.n_scores as u32).collect();
        Decoder {
            scores: vec![None; layout.n_scores],
            mismatches: vec![0; layout.n_features],
            layout,
            cols,
            rows: 0,
            fixed_row_bytes,
            str_bytes: 0,
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
            counted: None,
            last_batch: Vec::new(),
            reserve_limit: usize::MAX,
        }
    }

    /// Sets the largest decoded size of one log (`batching.max_log_bytes`; default
    /// [`crate::config::DEFAULT_MAX_LOG_BYTES`]). A log whose size bound is over it is rejected
    /// with [`ErrorKind::TooLarge`] before any of its rows is appended.
    pub fn with_max_log_bytes(mut self, max: usize) -> Self {
        self.max_log_bytes = max;
        self
    }

    /// The next batch reserves what the last one held only if its data was at most `bytes`
    /// (the batcher's `max_bytes`): a batch over it is one oversized log of its own, and the
    /// small logs after it must not reserve its size again (a 1-row batch
    /// after a 4 MB log weighed 4 MB).
    pub fn with_reserve_limit(mut self, bytes: usize) -> Self {
        self.reserve_limit = bytes;
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

    /// Approximate bytes of the decoded data (what the batch's data weighs in Arrow; what it
    /// holds is [`Decoder::allocated_bytes`]).
    pub fn approx_bytes(&self) -> usize {
        self.rows * self.fixed_row_bytes + self.str_bytes
    }

    /// The string bytes in the builders, summed over the columns (what `str_bytes` keeps).
    fn str_bytes_counted(&self) -> usize {
        self.cols.iter().map(Col::var_bytes).sum()
    }

    /// Decodes one serialized PredictionLog and appends its rows. Returns the number of rows
    /// appended; on error nothing is appended. ([`Decoder::prepare`] then [`Decoder::append`].)
    pub fn decode(&mut self, bytes: &[u8]) -> Result<usize, DecodeError> {
        let p = self.prepare(bytes)?;
        self.append(&p)
    }

    /// Reads a log's structure and runs every check that needs no row to be appended: the wire
    /// format of its outer messages, required fields, the per-log size bound and row counts
    /// (for logs that may decode to more than 1 MiB), the column lists. Nothing is appended and
    /// no builder grows.
    pub fn prepare<'a>(&mut self, bytes: &'a [u8]) -> Result<Prepared<'a>, DecodeError> {
        if bytes.is_empty() {
            return Err(DecodeError::new(
                ErrorKind::EmptyMessage,
                "zero-length message",
            ));
        }
        self.prepare_log(bytes)
    }

    /// Appends the rows of a prepared log (the one [`Decoder::prepare`] returned last). Returns
    /// the number of rows appended; on error nothing is appended, and capacity a rejected log
    /// made the builders take beyond what they hold is given back.
    pub fn append(&mut self, p: &Prepared<'_>) -> Result<usize, DecodeError> {
        let start = self.rows;
        if start.saturating_add(p.most_rows()) > columns::MAX_BATCH_ROWS {
            return Err(DecodeError::new(
                ErrorKind::TooLarge,
                format!(
                    "a batch holds at most {} rows; finish it first",
                    columns::MAX_BATCH_ROWS
                ),
            ));
        }
        if start == 0 && !self.last_batch.is_empty() {
            // The batch's first log: room for what the last batch held (and an eighth more:
            // without it, a batch ending a little past the last doubled every buffer at its last
            // log, and half the batches held twice their data), reserved once (counted by
            // `sizes` from now on; given back if this log is rejected, and kept for the next
            // first log then).
            for (c, &(rows, bytes, nulls)) in self.cols.iter_mut().zip(&self.last_batch) {
                c.reserve_like(rows, bytes, nulls);
            }
            self.recount();
        }
        let appended = self.append_rows(p);
        self.trim_rank_scratch();
        match appended {
            Ok(n) => {
                self.last_batch.clear();
                self.rows += n;
                self.ordered_features
                    .as_mut()
                    .unwrap_or(&mut self.feature_map)
                    .count_dropped(n);
                Ok(n)
            }
            Err(e) => {
                for c in &mut self.cols {
                    c.truncate(start);
                    c.release_excess();
                }
                self.recount();
                Err(e)
            }
        }
    }

    /// What was counted about the data since the last call ([`Counts`]), zeroed.
    pub fn take_counts(&mut self) -> Counts {
        let mut undeclared = Vec::new();
        if let Some(m) = &mut self.ordered_features {
            m.take_dropped(&mut undeclared);
        }
        self.feature_map.take_dropped(&mut undeclared);
        Counts {
            mismatches: self.mismatches.iter_mut().map(std::mem::take).collect(),
            undeclared,
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
            self.str_bytes = self.str_bytes_counted();
            self.recount();
        }
    }

    /// Moves the decoded rows into a record batch and starts a new one.
    pub fn finish(&mut self) -> RecordBatch {
        self.last_batch.clear();
        if self.approx_bytes() <= self.reserve_limit {
            self.last_batch.extend(
                self.cols
                    .iter()
                    .map(|c| (c.len(), c.var_bytes(), c.null_count())),
            );
        }
        let arrays = self.cols.iter_mut().map(Col::finish).collect();
        self.rows = 0;
        self.str_bytes = 0;
        self.recount();
        RecordBatch::try_new(Arc::clone(&self.layout.arrow), arrays)
            .expect("columns match the layout")
    }

    /// Takes back the buffers of a batch this decoder finished, once its consumer is done with
    /// it (`convert`, after writing it): the next batch fills memory already mapped instead of
    /// allocating afresh, which for batches of a few MB means fresh pages and a page fault per
    /// 4 KiB each time (glibc gives a freed batch back to the kernel). Only between batches
    /// (no row appended since [`Decoder::finish`]); buffers something else still shares are
    /// left to it. What is taken back is held by the decoder ([`Decoder::allocated_bytes`])
    /// until the next batch's `finish` hands it on again.
    pub fn recycle(&mut self, batch: RecordBatch) {
        if self.rows != 0 || !Arc::ptr_eq(batch.schema_ref(), &self.layout.arrow) {
            return;
        }
        let (_, arrays, _) = batch.into_parts();
        for (c, a) in self.cols.iter_mut().zip(arrays) {
            c.recycle(a);
        }
        self.recount();
    }

    /// Gives back the ranking scratch of a log over [`RANK_SCRATCH_ROWS`] rows, accepted or
    /// not. It is per log, but only ever grew: one large ranking log left it allocated for the
    /// rest of the process, counted in every later open batch's held bytes.
    fn trim_rank_scratch(&mut self) {
        if self.rank_scratch.capacity() > RANK_SCRATCH_ROWS {
            self.rank_scratch = Vec::new();
        }
        if self.rank_out.capacity() > RANK_SCRATCH_ROWS {
            self.rank_out = Vec::new();
        }
    }

    fn prepare_log<'a>(&mut self, bytes: &'a [u8]) -> Result<Prepared<'a>, DecodeError> {
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
        let session = parts.prediction_id;
        if !valid_utf8(session) {
            return Err(DecodeError::new(
                ErrorKind::InvalidValue,
                "prediction_id is not valid UTF-8",
            ));
        }
        let (counted_rows, bound) = self.check_size(f_data, row_ids, p_data, session.len())?;
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
        Ok(Prepared {
            micros,
            f_data,
            p_data,
            row_ids,
            session,
            score_columns: pt.columns.is_some(),
            counted_rows,
            bound,
        })
    }

    fn append_rows(&mut self, p: &Prepared<'_>) -> Result<usize, DecodeError> {
        let Prepared {
            micros,
            f_data,
            p_data,
            row_ids,
            session,
            ..
        } = *p;
        let rows = p.counted_rows;
        // A large log grows every builder once to what it needs (session id, model version and
        // row ids exactly or from above; other strings as they come) instead of doubling past
        // it. Small logs skip this: the usual amortized growth costs them nothing extra. Only
        // now, after every check that needs no row: a log those checks reject takes nothing.
        if rows >= RESERVE_ROWS {
            self.recount();
            for (i, c) in self.cols.iter_mut().enumerate() {
                let bytes = match i {
                    0 => rows * session.len(),
                    1 => row_ids.len(),
                    3 => rows * self.layout.model_version.len(),
                    _ => 0,
                };
                c.reserve(rows, bytes);
            }
        }
        let n_features = self.layout.n_features;
        let n_scores = self.layout.n_scores;

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
            str_bytes,
            mismatches,
            ..
        } = self;
        let fmap: &ColumnMap = ordered_features.as_ref().unwrap_or(feature_map);
        let smap: &ColumnMap = if p.score_columns {
            score_map
        } else {
            default_score_map
        };
        let first_score = layout.first_score();
        let (fixed, rest) = cols.split_at_mut(FIRST_FEATURE);
        let (feat_cols, rest) = rest.split_at_mut(n_features);
        let (score_cols, derived_cols) = rest.split_at_mut(n_scores);

        rank_scratch.clear(); // a previous log may have been rejected half-way
                              // String bytes this log appends; counted in `str_bytes` only once all of it is appended
                              // (a rejected log's rows are truncated away).
        let mut added = 0usize;
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
                    push_str(&mut fixed[1], s, &mut added)?;
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
            push_str(&mut fixed[0], session, &mut added)?;
            if let Col::Ts(c) = &mut fixed[2] {
                c.push(micros);
            }
            push_str(&mut fixed[3], layout.model_version.as_bytes(), &mut added)?;

            // Features.
            walk_row(
                f,
                fmap,
                feat_cols,
                None,
                Some(mismatches),
                &mut added,
                RowAt {
                    table: "input.features_table",
                    row: n,
                },
                |t| &layout.columns[FIRST_FEATURE + t as usize],
            )?;
            // Scores.
            scores.iter_mut().for_each(|s| *s = None);
            walk_row(
                p,
                smap,
                score_cols,
                Some(scores),
                None,
                &mut added,
                RowAt {
                    table: "output.prediction_results_table",
                    row: n,
                },
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
                        &mut added,
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
                        Some((k, _)) => push_str(col, labels[k].as_bytes(), &mut added)?,
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
        *str_bytes += added;
        Ok(n)
    }
}

#[cold]
#[inline(never)]
fn shape_error(f: usize, p: usize, ids: usize) -> DecodeError {
    DecodeError::new(
        ErrorKind::ShapeMismatch,
        format!("{f} feature rows, {p} prediction rows and {ids} row ids; they must be equal"),
    )
}

#[cfg(test)]
mod counts_tests;
#[cfg(test)]
mod fast_tests;
#[cfg(test)]
mod tests;
