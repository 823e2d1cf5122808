//! Column builders over Arrow's buffer builders, with `truncate` so that a rejected log can be
//! rolled back after some of its rows were appended. `finish` hands the buffers to Arrow arrays
//! without copying.

use super::error::{DecodeError, ErrorKind};
use crate::table::ColumnType;
use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray, TimestampMicrosecondArray,
};
use arrow_buffer::{
    BooleanBuffer, BooleanBufferBuilder, BufferBuilder, NullBuffer, OffsetBuffer, ScalarBuffer,
};
use std::sync::Arc;

/// Capacity a builder may hold beyond twice its length before [`Col::release_excess`] gives it
/// back (amortized growth stays within twice the length; only a reservation does not).
const EXCESS_BYTES: usize = 64 << 10;

/// Rows of validity a decoder keeps allocated between batches (the default `max_rows` fits);
/// more is given back when the batch that needed it is finished.
const RETAIN_VALIDITY_ROWS: usize = 64 << 10;

/// Whether a buffer of `len` bytes holding `cap` bytes holds more than it should.
fn excessive(len: usize, cap: usize) -> bool {
    cap > len.saturating_mul(2).saturating_add(EXCESS_BYTES)
}

/// Gives back the capacity of `b` beyond its length when it is excessive (a copy of what it
/// holds: done only after a rollback, for the open batch's rows).
fn release<T: arrow_buffer::ArrowNativeType>(b: &mut BufferBuilder<T>) {
    let size = std::mem::size_of::<T>();
    if excessive(b.len() * size, b.capacity() * size) {
        let mut fresh = BufferBuilder::new(b.len());
        fresh.append_slice(b.as_slice());
        *b = fresh;
    }
}

/// Validity, one byte per row while building (an append is a byte push, a rollback a
/// truncate), packed into Arrow's bitmap once per batch in [`Validity::finish`].
pub(crate) struct Validity {
    valid: Vec<u8>,
    nulls: usize,
}

impl Validity {
    fn new(cap: usize) -> Self {
        Validity {
            valid: Vec::with_capacity(cap),
            nulls: 0,
        }
    }

    #[inline(always)]
    fn append_non_null(&mut self) {
        self.valid.push(1);
    }

    #[inline(always)]
    fn append_null(&mut self) {
        self.valid.push(0);
        self.nulls += 1;
    }

    fn truncate(&mut self, len: usize) {
        if len < self.valid.len() {
            self.nulls -= self.valid[len..].iter().filter(|v| **v == 0).count();
            self.valid.truncate(len);
        }
    }

    fn allocated_bytes(&self) -> usize {
        self.valid.capacity()
    }

    fn reserve(&mut self, rows: usize) {
        self.valid.reserve(rows);
    }

    fn release_excess(&mut self) {
        if excessive(self.valid.len(), self.valid.capacity()) {
            self.valid.shrink_to_fit();
        }
    }

    fn finish(&mut self) -> Option<NullBuffer> {
        let out = (self.nulls > 0).then(|| {
            let v = &self.valid;
            NullBuffer::new(BooleanBuffer::collect_bool(v.len(), |i| v[i] != 0))
        });
        self.valid.clear();
        self.nulls = 0;
        // A log of many rows does not leave its validity allocated for every later batch.
        if self.valid.capacity() > RETAIN_VALIDITY_ROWS {
            self.valid.shrink_to(RETAIN_VALIDITY_ROWS);
        }
        out
    }
}

/// A nullable fixed-width column.
pub(crate) struct Prim<T: arrow_buffer::ArrowNativeType> {
    pub(crate) values: BufferBuilder<T>,
    pub(crate) nulls: Validity,
}

impl<T: arrow_buffer::ArrowNativeType> Prim<T> {
    fn new(cap: usize) -> Self {
        Prim {
            values: BufferBuilder::new(cap),
            nulls: Validity::new(cap),
        }
    }

    #[inline(always)]
    pub(crate) fn push(&mut self, v: T) {
        self.values.append(v);
        self.nulls.append_non_null();
    }

    #[inline]
    pub(crate) fn push_null(&mut self) {
        self.values.append(T::default());
        self.nulls.append_null();
    }

    fn truncate(&mut self, len: usize) {
        self.values.truncate(len);
        self.nulls.truncate(len);
    }
}

/// A nullable UTF-8 column.
pub(crate) struct Str {
    offsets: BufferBuilder<i32>,
    values: BufferBuilder<u8>,
    nulls: Validity,
}

impl Str {
    fn new(cap: usize) -> Self {
        let mut offsets = BufferBuilder::new(cap + 1);
        offsets.append(0);
        Str {
            offsets,
            values: BufferBuilder::new(cap * 8),
            nulls: Validity::new(cap),
        }
    }

    /// Appends already-validated UTF-8.
    #[inline(always)]
    pub(crate) fn push(&mut self, s: &[u8]) -> Result<(), DecodeError> {
        self.values.append_slice(s);
        let end = i32::try_from(self.values.len()).map_err(|_| {
            DecodeError::new(
                ErrorKind::TooLarge,
                "string data of one batch exceeds 2 GiB",
            )
        })?;
        self.offsets.append(end);
        self.nulls.append_non_null();
        Ok(())
    }

    #[inline]
    pub(crate) fn push_null(&mut self) {
        let end = *self
            .offsets
            .as_slice()
            .last()
            .expect("offsets start with 0");
        self.offsets.append(end);
        self.nulls.append_null();
    }

    fn truncate(&mut self, len: usize) {
        let end = self.offsets.as_slice()[len];
        self.values.truncate(end as usize);
        self.offsets.truncate(len + 1);
        self.nulls.truncate(len);
    }

    fn data_len(&self) -> usize {
        self.values.len()
    }
}

/// A nullable boolean column.
pub(crate) struct Bool {
    values: BooleanBufferBuilder,
    nulls: Validity,
}

impl Bool {
    #[inline]
    pub(crate) fn push(&mut self, v: bool) {
        self.values.append(v);
        self.nulls.append_non_null();
    }

    #[inline]
    pub(crate) fn push_null(&mut self) {
        self.values.append(false);
        self.nulls.append_null();
    }
}

/// One column under construction.
pub(crate) enum Col {
    Str(Str),
    I64(Prim<i64>),
    F64(Prim<f64>),
    Bool(Bool),
    /// Microseconds since the epoch, UTC.
    Ts(Prim<i64>),
}

impl Col {
    pub(crate) fn new(ty: ColumnType, cap: usize) -> Self {
        match ty {
            ColumnType::String => Col::Str(Str::new(cap)),
            ColumnType::Int64 => Col::I64(Prim::new(cap)),
            ColumnType::Float64 => Col::F64(Prim::new(cap)),
            ColumnType::Boolean => Col::Bool(Bool {
                values: BooleanBufferBuilder::new(cap),
                nulls: Validity::new(cap),
            }),
            ColumnType::Timestamp => Col::Ts(Prim::new(cap)),
        }
    }

    #[inline]
    pub(crate) fn push_null(&mut self) {
        match self {
            Col::Str(c) => c.push_null(),
            Col::I64(c) | Col::Ts(c) => c.push_null(),
            Col::F64(c) => c.push_null(),
            Col::Bool(c) => c.push_null(),
        }
    }

    pub(crate) fn truncate(&mut self, len: usize) {
        match self {
            Col::Str(c) => c.truncate(len),
            Col::I64(c) | Col::Ts(c) => c.truncate(len),
            Col::F64(c) => c.truncate(len),
            Col::Bool(c) => {
                c.values.truncate(len);
                c.nulls.truncate(len);
            }
        }
    }

    /// Gives back capacity beyond twice the length plus [`EXCESS_BYTES`] (after a rollback: a
    /// rejected log's reservation must not stay with the open batch, unseen by the budget).
    pub(crate) fn release_excess(&mut self) {
        match self {
            Col::Str(c) => {
                release(&mut c.offsets);
                release(&mut c.values);
                c.nulls.release_excess();
            }
            Col::I64(c) | Col::Ts(c) => {
                release(&mut c.values);
                c.nulls.release_excess();
            }
            Col::F64(c) => {
                release(&mut c.values);
                c.nulls.release_excess();
            }
            // Bits: an eighth of a byte per row, never reserved beyond the rows of a log.
            Col::Bool(c) => c.nulls.release_excess(),
        }
    }

    /// Variable-length bytes held (string data); fixed-width bytes are counted by the caller.
    pub(crate) fn var_bytes(&self) -> usize {
        match self {
            Col::Str(c) => c.data_len(),
            _ => 0,
        }
    }

    /// Makes room for `rows` more rows and, in a string column, `bytes` more string bytes. Done
    /// once per log with the log's counts, so a large log grows each buffer once to what it
    /// needs instead of doubling past it.
    pub(crate) fn reserve(&mut self, rows: usize, bytes: usize) {
        match self {
            Col::Str(c) => {
                c.offsets.reserve(rows);
                c.values.reserve(bytes);
                c.nulls.reserve(rows);
            }
            Col::I64(c) | Col::Ts(c) => {
                c.values.reserve(rows);
                c.nulls.reserve(rows);
            }
            Col::F64(c) => {
                c.values.reserve(rows);
                c.nulls.reserve(rows);
            }
            Col::Bool(c) => {
                c.values.reserve(rows);
                c.nulls.reserve(rows);
            }
        }
    }

    /// Bytes allocated by the builder (capacities).
    pub(crate) fn allocated_bytes(&self) -> usize {
        match self {
            Col::Str(c) => {
                c.offsets.capacity() * 4 + c.values.capacity() + c.nulls.allocated_bytes()
            }
            Col::I64(c) | Col::Ts(c) => c.values.capacity() * 8 + c.nulls.allocated_bytes(),
            Col::F64(c) => c.values.capacity() * 8 + c.nulls.allocated_bytes(),
            Col::Bool(c) => c.values.capacity() / 8 + c.nulls.allocated_bytes(),
        }
    }

    /// Moves the buffers into an Arrow array and leaves the builder empty.
    pub(crate) fn finish(&mut self) -> ArrayRef {
        match self {
            Col::Str(c) => {
                let offsets = OffsetBuffer::new(ScalarBuffer::from(c.offsets.finish()));
                c.offsets.append(0);
                // Every appended value was validated as UTF-8 when it was decoded; StringArray::new
                // checks it again in bulk.
                Arc::new(StringArray::new(
                    offsets,
                    c.values.finish(),
                    c.nulls.finish(),
                ))
            }
            Col::I64(c) => Arc::new(Int64Array::new(
                ScalarBuffer::from(c.values.finish()),
                c.nulls.finish(),
            )),
            Col::F64(c) => Arc::new(Float64Array::new(
                ScalarBuffer::from(c.values.finish()),
                c.nulls.finish(),
            )),
            Col::Bool(c) => Arc::new(BooleanArray::new(c.values.finish(), c.nulls.finish())),
            Col::Ts(c) => Arc::new(
                TimestampMicrosecondArray::new(
                    ScalarBuffer::from(c.values.finish()),
                    c.nulls.finish(),
                )
                .with_timezone("UTC"),
            ),
        }
    }
}
