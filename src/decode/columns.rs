//! Column builders over plain `Vec`s (a push is a capacity check and a store; Arrow's
//! `BufferBuilder` checked capacity twice per value through its fallible `reserve`), with
//! `truncate` so that a rejected log can be rolled back after some of its rows were appended.
//! `finish` hands each `Vec`'s allocation to an Arrow buffer without copying (capacity
//! included, so what a batch holds is what the builders had allocated).

use super::error::{DecodeError, ErrorKind};
use crate::table::ColumnType;
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{
    ArrayRef, ArrowPrimitiveType, BooleanArray, Float64Array, Int64Array, StringArray,
    TimestampMicrosecondArray,
};
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use std::sync::Arc;

/// Capacity a builder may hold beyond twice its length before [`Col::release_excess`] gives it
/// back (amortized growth stays within twice the length; only a reservation does not).
const EXCESS_BYTES: usize = 64 << 10;

/// Rows of boolean values (a byte each) a decoder keeps allocated between batches (the default
/// `max_rows` fits); more is given back when the batch that needed it is finished.
const RETAIN_BOOL_ROWS: usize = 64 << 10;

/// Whether a buffer of `len` bytes holding `cap` bytes holds more than it should.
fn excessive(len: usize, cap: usize) -> bool {
    cap > len.saturating_mul(2).saturating_add(EXCESS_BYTES)
}

/// Gives back the capacity of `b` beyond its length when it is excessive (a copy of what it
/// holds: done only after a rollback, for the open batch's rows).
fn release<T>(b: &mut Vec<T>) {
    let size = std::mem::size_of::<T>();
    if excessive(b.len() * size, b.capacity() * size) {
        b.shrink_to_fit();
    }
}

/// Validity as the rows that are NULL (ascending row numbers within the batch): a non-null
/// value costs nothing, a NULL one `u32`, a rollback a binary search and a truncate; Arrow's
/// bitmap is built once per batch in [`Validity::finish`]. (Before: one byte pushed per value,
/// NULL or not, and packed per batch.) Row numbers fit in `u32`: the decoder refuses a log
/// that could take a batch past [`MAX_BATCH_ROWS`].
pub(crate) struct Validity {
    nulls: Vec<u32>,
}

/// Most rows one batch of a decoder holds.
pub(crate) const MAX_BATCH_ROWS: usize = u32::MAX as usize;

/// NULL row numbers a decoder keeps allocated between batches (64 KiB per column).
const RETAIN_NULLS: usize = 16 << 10;

/// Rows every buffer of a column has room for after the decoder counted what it holds
/// ([`Col::room`]; counted as held, and less than a first batch's initial capacity).
pub(crate) const ROOM_ROWS: usize = 64;

/// String bytes a string column has room for after the decoder counted what it holds (as
/// [`ROOM_ROWS`]).
pub(crate) const ROOM_BYTES: usize = 1024;

/// NULL row numbers every column has room for after the decoder counted what it holds (as
/// [`ROOM_ROWS`]). A column without NULLs keeps an empty list, and its room bounds how many
/// rows may pass before the next full count: the decoder counts every 65 rows of a batch
/// whatever room its values have. 1,024 was measured: 14 instructions per log fewer
/// on the pipeline thread (`sizes` 192 → 179 per log; its own pass over the string columns is
/// the rest), not worth 4 KiB more held per column.
pub(crate) const ROOM_NULLS: usize = 64;

impl Validity {
    fn new() -> Self {
        Validity { nulls: Vec::new() }
    }

    #[inline(always)]
    fn append_non_null(&mut self) {}

    /// Marks row `row` (the row being appended) NULL.
    #[inline(always)]
    fn append_null(&mut self, row: usize) {
        self.nulls.push(row as u32);
    }

    fn truncate(&mut self, len: usize) {
        let keep = self.nulls.partition_point(|&r| (r as usize) < len);
        self.nulls.truncate(keep);
    }

    fn allocated_bytes(&self) -> usize {
        self.nulls.capacity() * 4
    }

    fn release_excess(&mut self) {
        release(&mut self.nulls);
    }

    /// The bitmap of a batch of `len` rows (`None` when none is NULL); starts the next batch.
    fn finish(&mut self, len: usize) -> Option<NullBuffer> {
        if self.nulls.is_empty() {
            return None;
        }
        let mut bits = vec![0xffu8; len.div_ceil(8)];
        for &r in &self.nulls {
            let r = r as usize;
            bits[r / 8] &= !(1u8 << (r % 8));
        }
        if !len.is_multiple_of(8) {
            if let Some(last) = bits.last_mut() {
                *last &= (1u8 << (len % 8)) - 1;
            }
        }
        self.nulls.clear();
        // A batch of many NULLs does not leave its row numbers allocated for every later one.
        self.nulls.shrink_to(RETAIN_NULLS);
        Some(NullBuffer::new(BooleanBuffer::new(
            Buffer::from_vec(bits),
            0,
            len,
        )))
    }
}

/// Packs one byte per row (each 0 or 1) into Arrow's bitmap, least significant bit first,
/// eight rows per multiplication: with every byte of `x` 0 or 1, `x * 0x0102040810204080`
/// gathers byte `i` into bit `56 + i` without carries.
pub(crate) fn pack_bits(v: &[u8]) -> BooleanBuffer {
    const GATHER: u64 = 0x0102_0408_1020_4080;
    let mut bits = Vec::with_capacity(v.len().div_ceil(8));
    let chunks = v.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        let x = u64::from_le_bytes(c.try_into().expect("chunks of 8"));
        bits.push((x.wrapping_mul(GATHER) >> 56) as u8);
    }
    if !rest.is_empty() {
        bits.push(rest.iter().enumerate().fold(0u8, |b, (i, x)| b | (x << i)));
    }
    BooleanBuffer::new(Buffer::from_vec(bits), 0, v.len())
}

/// A nullable fixed-width column.
pub(crate) struct Prim<T: arrow_buffer::ArrowNativeType> {
    pub(crate) values: Vec<T>,
    pub(crate) nulls: Validity,
}

impl<T: arrow_buffer::ArrowNativeType> Prim<T> {
    fn new(cap: usize) -> Self {
        Prim {
            values: Vec::with_capacity(cap),
            nulls: Validity::new(),
        }
    }

    #[inline(always)]
    pub(crate) fn push(&mut self, v: T) {
        self.values.push(v);
        self.nulls.append_non_null();
    }

    #[inline]
    pub(crate) fn push_null(&mut self) {
        self.nulls.append_null(self.values.len());
        self.values.push(T::default());
    }

    /// Moves the values out (the allocation, without copying), leaving the builder empty.
    fn take(&mut self) -> ScalarBuffer<T> {
        ScalarBuffer::from(std::mem::take(&mut self.values))
    }

    fn truncate(&mut self, len: usize) {
        self.values.truncate(len);
        self.nulls.truncate(len);
    }
}

/// A nullable UTF-8 column.
pub(crate) struct Str {
    offsets: Vec<i32>,
    values: Vec<u8>,
    nulls: Validity,
}

impl Str {
    fn new(cap: usize) -> Self {
        let mut offsets = Vec::with_capacity(cap + 1);
        offsets.push(0);
        Str {
            offsets,
            values: Vec::with_capacity(cap * 8),
            nulls: Validity::new(),
        }
    }

    /// Appends already-validated UTF-8.
    #[inline(always)]
    pub(crate) fn push(&mut self, s: &[u8]) -> Result<(), DecodeError> {
        self.values.extend_from_slice(s);
        let Ok(end) = i32::try_from(self.values.len()) else {
            return Err(too_much_string());
        };
        self.offsets.push(end);
        self.nulls.append_non_null();
        Ok(())
    }

    #[inline]
    pub(crate) fn push_null(&mut self) {
        let end = *self.offsets.last().expect("offsets start with 0");
        self.nulls.append_null(self.offsets.len() - 1);
        self.offsets.push(end);
    }

    fn truncate(&mut self, len: usize) {
        let end = self.offsets[len];
        self.values.truncate(end as usize);
        self.offsets.truncate(len + 1);
        self.nulls.truncate(len);
    }

    fn data_len(&self) -> usize {
        self.values.len()
    }
}

/// A string column's batch would pass Arrow's 2 GiB offsets.
#[cold]
#[inline(never)]
pub(super) fn too_much_string() -> DecodeError {
    DecodeError::new(
        ErrorKind::TooLarge,
        "string data of one batch exceeds 2 GiB",
    )
}

/// A nullable boolean column: one byte per value while building (a push is a byte store),
/// packed into bits once per batch like the validity.
pub(crate) struct Bool {
    values: Vec<u8>,
    nulls: Validity,
}

impl Bool {
    #[inline]
    pub(crate) fn push(&mut self, v: bool) {
        self.values.push(u8::from(v));
        self.nulls.append_non_null();
    }

    #[inline]
    pub(crate) fn push_null(&mut self) {
        self.nulls.append_null(self.values.len());
        self.values.push(0);
    }
}

/// One column under construction. `repr(u8)`: the variant is a plain tag byte, so the per-cell
/// dispatch on it is a load and a jump (as a niche in a `Vec`'s capacity it took six more
/// instructions to compute at every `match`).
#[repr(u8)]
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
                values: Vec::with_capacity(cap),
                nulls: Validity::new(),
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
            Col::Bool(c) => {
                release(&mut c.values);
                c.nulls.release_excess();
            }
        }
    }

    /// Rows appended.
    pub(crate) fn len(&self) -> usize {
        match self {
            Col::Str(c) => c.offsets.len() - 1,
            Col::I64(c) | Col::Ts(c) => c.values.len(),
            Col::F64(c) => c.values.len(),
            Col::Bool(c) => c.values.len(),
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
            }
            Col::I64(c) | Col::Ts(c) => {
                c.values.reserve(rows);
            }
            Col::F64(c) => {
                c.values.reserve(rows);
            }
            Col::Bool(c) => {
                c.values.reserve(rows);
            }
        }
    }

    /// Makes room for the rows, string bytes and NULLs of a batch like the last one, where a
    /// buffer lacks it: room for an eighth more, since a batch flushes at the log that crosses
    /// its size and so often ends a little past the last; a buffer with the room already (one
    /// handed back by [`Decoder::recycle`](super::Decoder::recycle)) is left as it is.
    pub(crate) fn reserve_like(&mut self, rows: usize, bytes: usize, nulls: usize) {
        match self {
            Col::Str(c) => {
                room(&mut c.offsets, rows);
                room(&mut c.values, bytes);
            }
            Col::I64(c) | Col::Ts(c) => room(&mut c.values, rows),
            Col::F64(c) => room(&mut c.values, rows),
            Col::Bool(c) => room(&mut c.values, rows),
        }
        room(&mut self.nulls_mut().nulls, nulls);
    }

    /// NULLs appended.
    pub(crate) fn null_count(&self) -> usize {
        match self {
            Col::Str(c) => c.nulls.nulls.len(),
            Col::I64(c) | Col::Ts(c) => c.nulls.nulls.len(),
            Col::F64(c) => c.nulls.nulls.len(),
            Col::Bool(c) => c.nulls.nulls.len(),
        }
    }

    fn nulls_mut(&mut self) -> &mut Validity {
        match self {
            Col::Str(c) => &mut c.nulls,
            Col::I64(c) | Col::Ts(c) => &mut c.nulls,
            Col::F64(c) => &mut c.nulls,
            Col::Bool(c) => &mut c.nulls,
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
            Col::Bool(c) => c.values.capacity() + c.nulls.allocated_bytes(),
        }
    }

    /// How far this builder can grow before any of its buffers reallocates: (rows, string
    /// bytes). A row adds at most one element to each per-row buffer (values, offsets, NULL row
    /// numbers); string bytes go to the string buffer only (`usize::MAX` in other columns).
    ///
    /// First gives room where a full buffer would otherwise leave none for long: the NULL row
    /// numbers get room for [`ROOM_NULLS`] more (as the next NULL would: amortized, so at most
    /// twice what they hold plus that; a column may go many rows without a NULL), and buffers
    /// of at most [`ROOM_ROWS`] rows or [`ROOM_BYTES`] string bytes (empty at a batch's
    /// start) get room for that many more. A larger full buffer is left as it is (its next row grows it).
    pub(crate) fn room(&mut self) -> (usize, usize) {
        fn room<T>(v: &mut Vec<T>, n: usize) -> usize {
            if v.capacity() <= n {
                v.reserve_exact(n);
            }
            v.capacity() - v.len()
        }
        let nulls = &mut self.nulls_mut().nulls;
        nulls.reserve(ROOM_NULLS);
        let null_room = nulls.capacity() - nulls.len();
        match self {
            Col::Str(c) => (
                null_room.min(room(&mut c.offsets, ROOM_ROWS)),
                room(&mut c.values, ROOM_BYTES),
            ),
            Col::I64(c) | Col::Ts(c) => (null_room.min(room(&mut c.values, ROOM_ROWS)), usize::MAX),
            Col::F64(c) => (null_room.min(room(&mut c.values, ROOM_ROWS)), usize::MAX),
            Col::Bool(c) => (null_room.min(room(&mut c.values, ROOM_ROWS)), usize::MAX),
        }
    }

    /// Takes back the buffers of `array` (made by this column's [`Col::finish`]) where nothing
    /// else holds them and the builder holds no rows and less capacity: the next batch then
    /// fills memory that is already mapped instead of fresh pages. Anything else is dropped
    /// (freed as before). Boolean columns keep their byte buffer across batches already (the
    /// packed bits are built anew), and so do the NULL row numbers.
    pub(crate) fn recycle(&mut self, array: ArrayRef) {
        fn reuse<T: arrow_buffer::ArrowNativeType>(into: &mut Vec<T>, from: Buffer) {
            if let Ok(mut v) = from.into_vec::<T>() {
                if into.is_empty() && v.capacity() > into.capacity() {
                    v.clear();
                    *into = v;
                }
            }
        }
        /// The values buffer of a primitive array (the array is dropped on return, so the
        /// buffer is then the last reference if the batch was).
        fn values<T: ArrowPrimitiveType>(array: ArrayRef) -> Option<Buffer> {
            Some(array.as_primitive_opt::<T>()?.values().clone().into_inner())
        }
        match self {
            Col::Str(c) => {
                let Some(a) = array.as_string_opt::<i32>().cloned() else {
                    return;
                };
                drop(array);
                let (offsets, values, _) = a.into_parts();
                if c.offsets.len() == 1 {
                    c.offsets.clear();
                    reuse(&mut c.offsets, offsets.into_inner().into_inner());
                    c.offsets.push(0);
                }
                reuse(&mut c.values, values);
            }
            Col::I64(c) => {
                if let Some(b) = values::<Int64Type>(array) {
                    reuse(&mut c.values, b);
                }
            }
            Col::Ts(c) => {
                if let Some(b) = values::<TimestampMicrosecondType>(array) {
                    reuse(&mut c.values, b);
                }
            }
            Col::F64(c) => {
                if let Some(b) = values::<Float64Type>(array) {
                    reuse(&mut c.values, b);
                }
            }
            Col::Bool(_) => {}
        }
    }

    /// Moves the buffers into an Arrow array and leaves the builder empty.
    pub(crate) fn finish(&mut self) -> ArrayRef {
        let len = self.len();
        match self {
            Col::Str(c) => {
                let offsets = OffsetBuffer::new(ScalarBuffer::from(std::mem::take(&mut c.offsets)));
                c.offsets.push(0);
                // Every appended value was validated as UTF-8 when it was decoded; StringArray::new
                // checks it again in bulk (skipping that needs `unsafe`, which the crate allows
                // only for mapping `convert`'s input: src/mapped.rs).
                Arc::new(StringArray::new(
                    offsets,
                    Buffer::from_vec(std::mem::take(&mut c.values)),
                    c.nulls.finish(len),
                ))
            }
            Col::I64(c) => Arc::new(Int64Array::new(c.take(), c.nulls.finish(len))),
            Col::F64(c) => Arc::new(Float64Array::new(c.take(), c.nulls.finish(len))),
            Col::Bool(c) => {
                let values = pack_bits(&c.values);
                // Kept for the next batch (at most 64 Ki rows).
                c.values.clear();
                c.values.shrink_to(RETAIN_BOOL_ROWS);
                Arc::new(BooleanArray::new(values, c.nulls.finish(len)))
            }
            Col::Ts(c) => Arc::new(
                TimestampMicrosecondArray::new(c.take(), c.nulls.finish(len)).with_timezone("UTC"),
            ),
        }
    }
}

/// Room for `n` more elements in `v`; when it has to grow, for an eighth more than that.
fn room<T>(v: &mut Vec<T>, n: usize) {
    if v.capacity() - v.len() < n {
        v.reserve(n + n / 8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The room a string column reports is room indeed: strings filling it exactly never
        /// reallocate a buffer (what the decoder's size count relies on, `Decoder::sizes`).
        #[test]
        fn strings_filling_a_columns_room_never_reallocate_it(
            before in prop::collection::vec("[a-z]{0,40}", 0..200),
            last in "[a-z]{1,3}",
        ) {
            let mut col = Col::new(ColumnType::String, 0);
            let Col::Str(c) = &mut col else { unreachable!("a string column") };
            for s in &before {
                c.push(s.as_bytes()).expect("small");
            }
            let (rows, bytes) = col.room();
            prop_assume!(rows >= 2 && bytes >= last.len());
            let held = col.allocated_bytes();
            let Col::Str(c) = &mut col else { unreachable!("a string column") };
            c.push(&vec![b'x'; bytes - last.len()]).expect("small");
            c.push(last.as_bytes()).expect("small");
            prop_assert_eq!(col.allocated_bytes(), held, "room of {} bytes", bytes);
        }
    }
}
