//! The mutation fuzzer's engine, on stable Rust: seeds → mutated bytes (bit flips, interesting
//! bytes, inserted / deleted / duplicated ranges, varints and length prefixes rewritten, splices
//! from other seeds, ranges wrapped in a length-delimited field) → [`Decoder::decode`] → record
//! batches, each checked for validity, and a sample of them through the three writers (JSON
//! lines, Arrow IPC, Parquet).
//!
//! What is checked for every input: no panic (decode, finish, validation, writers); a rejection
//! always has a code and a non-empty reason; a rejected log leaves the decoder's rows as they
//! were; an accepted log adds the rows it reports. Shared by `examples/fuzz/main.rs` and the
//! integration tests' smoke run (included there with `#[path]`).

use arrow_array::RecordBatch;
use observation_publisher::decode::Decoder;
use observation_publisher::output::{
    ArrowStreamWriter, BatchWriter, JsonlWriter, ParquetFileWriter,
};
use observation_publisher::table::TableLayout;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// Largest mutated input (bytes); mutations that grow past it are cut.
const MAX_INPUT: usize = 1 << 20;
/// A batch is finished at this many rows (or `BATCH_BYTES`), as `convert` does.
const BATCH_ROWS: usize = 8192;
const BATCH_BYTES: usize = 8 << 20;

/// What a run found.
#[derive(Debug, Default, Clone)]
pub(crate) struct Stats {
    /// Inputs decoded.
    pub(crate) inputs: u64,
    /// Inputs accepted.
    pub(crate) accepted: u64,
    /// Rows appended by accepted inputs.
    pub(crate) rows: u64,
    /// Rejections by error code.
    pub(crate) rejected: BTreeMap<&'static str, u64>,
    /// Rejections whose reason was empty (a failure).
    pub(crate) without_reason: u64,
    /// Rejections that left rows behind, or acceptances whose row count was wrong (a failure).
    pub(crate) row_count_errors: u64,
    /// Panics caught (a failure).
    pub(crate) panics: u64,
    /// Record batches finished and validated.
    pub(crate) batches: u64,
    /// Batches invalid by Arrow's full validation (a failure).
    pub(crate) invalid_batches: u64,
    /// Batches written through all three writers.
    pub(crate) written: u64,
    /// Writer errors (a failure).
    pub(crate) writer_errors: u64,
}

impl Stats {
    /// Whether nothing failed.
    pub(crate) fn ok(&self) -> bool {
        self.without_reason == 0
            && self.row_count_errors == 0
            && self.panics == 0
            && self.invalid_batches == 0
            && self.writer_errors == 0
    }
}

/// The fuzzing loop's state.
pub(crate) struct Harness {
    layout: Arc<TableLayout>,
    max_log_bytes: usize,
    decoder: Decoder,
    seeds: Vec<Vec<u8>>,
    rng: fastrand::Rng,
    /// Every how many batches one goes through the writers.
    write_every: u64,
    input: Vec<u8>,
    /// The first inputs that failed a check (kept for reproduction).
    pub(crate) failures: Vec<Vec<u8>>,
    /// Totals so far.
    pub(crate) stats: Stats,
}

impl Harness {
    /// A harness over `seeds` for `layout`, with the per-log limit `max_log_bytes`.
    pub(crate) fn new(
        layout: Arc<TableLayout>,
        max_log_bytes: usize,
        seeds: Vec<Vec<u8>>,
        seed: u64,
        write_every: u64,
    ) -> Self {
        assert!(!seeds.is_empty(), "at least one seed");
        Harness {
            decoder: Decoder::new(Arc::clone(&layout)).with_max_log_bytes(max_log_bytes),
            layout,
            max_log_bytes,
            seeds,
            rng: fastrand::Rng::with_seed(seed),
            write_every: write_every.max(1),
            input: Vec::new(),
            failures: Vec::new(),
            stats: Stats::default(),
        }
    }

    /// Runs `n` mutated inputs.
    pub(crate) fn run(&mut self, n: u64) {
        for _ in 0..n {
            let i = self.rng.usize(..self.seeds.len());
            self.input.clear();
            self.input.extend_from_slice(&self.seeds[i]);
            // One input in 16 is a seed unchanged; the rest get 1 to 4 mutations.
            if self.rng.u8(..16) != 0 {
                for _ in 0..1 + self.rng.usize(..4) {
                    mutate(&mut self.rng, &self.seeds, &mut self.input);
                }
            }
            let input = std::mem::take(&mut self.input);
            self.one(&input);
            self.input = input;
        }
        self.finish_batch();
    }

    fn fail(&mut self, input: &[u8]) {
        if self.failures.len() < 16 {
            self.failures.push(input.to_vec());
        }
    }

    fn one(&mut self, input: &[u8]) {
        self.stats.inputs += 1;
        let before = self.decoder.rows();
        let decoder = &mut self.decoder;
        match catch_unwind(AssertUnwindSafe(|| decoder.decode(input))) {
            Err(_) => {
                self.stats.panics += 1;
                self.fail(input);
                // The builders may be half-written: start over.
                self.decoder =
                    Decoder::new(Arc::clone(&self.layout)).with_max_log_bytes(self.max_log_bytes);
                return;
            }
            Ok(Ok(n)) => {
                self.stats.accepted += 1;
                self.stats.rows += n as u64;
                if self.decoder.rows() != before + n {
                    self.stats.row_count_errors += 1;
                    self.fail(input);
                }
            }
            Ok(Err(e)) => {
                *self.stats.rejected.entry(e.kind.code()).or_default() += 1;
                if e.reason.trim().is_empty() {
                    self.stats.without_reason += 1;
                    self.fail(input);
                }
                if self.decoder.rows() != before {
                    self.stats.row_count_errors += 1;
                    self.fail(input);
                }
            }
        }
        if self.decoder.rows() >= BATCH_ROWS || self.decoder.approx_bytes() >= BATCH_BYTES {
            self.finish_batch();
        }
    }

    fn finish_batch(&mut self) {
        if self.decoder.rows() == 0 {
            return;
        }
        let decoder = &mut self.decoder;
        let batch = match catch_unwind(AssertUnwindSafe(|| decoder.finish())) {
            Ok(b) => b,
            Err(_) => {
                self.stats.panics += 1;
                self.decoder =
                    Decoder::new(Arc::clone(&self.layout)).with_max_log_bytes(self.max_log_bytes);
                return;
            }
        };
        self.stats.batches += 1;
        if batch
            .columns()
            .iter()
            .any(|c| c.to_data().validate_full().is_err())
        {
            self.stats.invalid_batches += 1;
            return;
        }
        if self.stats.batches.is_multiple_of(self.write_every) {
            match catch_unwind(AssertUnwindSafe(|| write_all(&self.layout, &batch))) {
                Ok(Ok(())) => self.stats.written += 1,
                Ok(Err(_)) => self.stats.writer_errors += 1,
                Err(_) => self.stats.panics += 1,
            }
        }
    }
}

/// Writes `batch` through the three writers into nothing.
fn write_all(layout: &TableLayout, batch: &RecordBatch) -> std::io::Result<()> {
    let writers: [Box<dyn BatchWriter>; 3] = [
        Box::new(JsonlWriter::new(std::io::sink(), &layout.arrow)),
        Box::new(ArrowStreamWriter::new(std::io::sink(), &layout.arrow)?),
        Box::new(ParquetFileWriter::new(std::io::sink(), &layout.arrow)?),
    ];
    for mut w in writers {
        w.write(batch)?;
        w.finish()?;
    }
    Ok(())
}

/// Bytes that often change how a protobuf parser reads what follows: zero, varint edges, and
/// the keys of the length-delimited fields the decoder reads.
const INTERESTING: [u8; 12] = [
    0x00, 0x01, 0x7f, 0x80, 0xff, 0x08, 0x0a, 0x12, 0x1a, 0x32, 0x52, 0x5a,
];
/// Varint values at the edges: lengths past the input, 32- and 64-bit limits.
const VARINTS: [u64; 10] = [
    0,
    1,
    127,
    128,
    16_384,
    1 << 21,
    (1 << 31) - 1,
    1 << 32,
    1 << 63,
    u64::MAX,
];

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Length of the varint at `pos` (at most 10 bytes, or to the end).
fn varint_len(b: &[u8], pos: usize) -> usize {
    b[pos..]
        .iter()
        .take(10)
        .position(|x| *x < 0x80)
        .map_or((b.len() - pos).min(10), |i| i + 1)
}

/// Applies one random mutation to `input`.
pub(crate) fn mutate(rng: &mut fastrand::Rng, seeds: &[Vec<u8>], input: &mut Vec<u8>) {
    if input.is_empty() {
        input.push(rng.u8(..));
        return;
    }
    let len = input.len();
    let pos = rng.usize(..len);
    match rng.u8(..11) {
        0 => input[pos] ^= 1 << rng.u8(..8),
        1 => input[pos] = INTERESTING[rng.usize(..INTERESTING.len())],
        2 => {
            let n = 1 + rng.usize(..8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.u8(..)).collect();
            input.splice(pos..pos, bytes);
        }
        3 => {
            let end = (pos + 1 + rng.usize(..32)).min(len);
            input.drain(pos..end);
        }
        4 => {
            // Duplicate a range somewhere else (repeats fields and rows, nests sub-messages).
            let end = (pos + 1 + rng.usize(..256)).min(len);
            let chunk = input[pos..end].to_vec();
            let at = rng.usize(..=len);
            input.splice(at..at, chunk);
        }
        5 => input.truncate(pos),
        6 => {
            // Rewrite the varint at `pos` (a key, a length or a value).
            let old = varint_len(input, pos);
            let v = if rng.bool() {
                VARINTS[rng.usize(..VARINTS.len())]
            } else {
                let bits = rng.u32(1..64);
                rng.u64(..1 << bits)
            };
            let mut enc = Vec::new();
            put_varint(&mut enc, v);
            input.splice(pos..pos + old, enc);
        }
        7 => {
            // Nudge a length prefix: find a length-delimited key and move its length by ±1..4.
            if let Some(i) = (pos..len.saturating_sub(1)).find(|&i| input[i] & 7 == 2) {
                let at = i + 1;
                let old = varint_len(input, at);
                let mut v = 0u64;
                for (k, b) in input[at..at + old].iter().enumerate().take(9) {
                    v |= u64::from(b & 0x7f) << (7 * k);
                }
                let d = 1 + rng.u64(..4);
                let v = if rng.bool() {
                    v.saturating_add(d)
                } else {
                    v.saturating_sub(d)
                };
                let mut enc = Vec::new();
                put_varint(&mut enc, v);
                input.splice(at..at + old, enc);
            }
        }
        8 => {
            // Splice a range of another seed in.
            let other = &seeds[rng.usize(..seeds.len())];
            if !other.is_empty() {
                let a = rng.usize(..other.len());
                let b = (a + 1 + rng.usize(..512)).min(other.len());
                input.splice(pos..pos, other[a..b].iter().copied());
            }
        }
        9 => {
            // Wrap a range in a length-delimited field (deeper nesting).
            let end = (pos + 1 + rng.usize(..len - pos)).min(len);
            let mut head = vec![INTERESTING[6 + rng.usize(..6)]];
            put_varint(&mut head, (end - pos) as u64);
            input.splice(pos..pos, head);
        }
        _ => {
            // Repeat a short range many times (many rows, many list elements).
            let end = (pos + 1 + rng.usize(..16)).min(len);
            let chunk = input[pos..end].to_vec();
            let times = 1 + rng.usize(..64);
            let at = end;
            input.splice(
                at..at,
                chunk.iter().copied().cycle().take(chunk.len() * times),
            );
        }
    }
    input.truncate(MAX_INPUT);
}
