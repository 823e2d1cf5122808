//! The Tunnel's record stream, as pyodps's `BaseRecordWriter` writes it and its
//! `TunnelRecordReader` (C and pure Python) reads it (pure; no I/O).
//!
//! Each record is its non-null fields, then the record-end tag with a checksum; a block ends
//! with the record count and a checksum of the records' checksums:
//!
//! | item | tag (field, wire type) | value | CRC32C input |
//! | --- | --- | --- | --- |
//! | BIGINT in column i | (i+1, varint) | zigzag sint64 | `i32 LE (i+1)`, `i64 LE` |
//! | DOUBLE | (i+1, fixed64) | `f64 LE` | index, `f64 LE` |
//! | BOOLEAN | (i+1, varint) | 0 / 1 | index, one byte 0 / 1 |
//! | STRING | (i+1, length-delimited) | varint length + UTF-8 bytes | index, the bytes |
//! | TIMESTAMP | (i+1, length-delimited) | zigzag sint64 seconds, zigzag sint32 nanos, **no length** | index, `i64 LE`, `i32 LE` |
//! | record end | (33553408, varint) | record CRC as an unsigned varint (≤ 5 bytes) | — |
//! | block end | (33554430, varint) then (33554431, varint) | zigzag sint64 record count, then CRC32C over every record CRC as `u32 LE`, unsigned varint | — |
//!
//! NULLs are omitted (no tag). The record CRC restarts at every record. pyodps's C writer
//! emits a CRC ≥ 2^31 as a 10-byte sign-extended varint that its own pure-Python reader refuses;
//! the unsigned 5-byte form written here is read by both.
//!
//! TIMESTAMP seconds are floored (`div_euclid`) so that nanos are always in `0..1e9`, which is
//! how both readers rebuild the value (`seconds * 1000 ms + nanos`).

/// Record-end field number.
pub const END_RECORD: u32 = 33_553_408;
/// Block-end record count field number.
pub const META_COUNT: u32 = 33_554_430;
/// Block-end checksum field number.
pub const META_CHECKSUM: u32 = 33_554_431;

const WIRE_VARINT: u32 = 0;
const WIRE_FIXED64: u32 = 1;
const WIRE_LENGTH_DELIMITED: u32 = 2;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_tag(out: &mut Vec<u8>, field: u32, wire: u32) {
    put_varint(out, u64::from((field << 3) | wire));
}

fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn zigzag32(v: i32) -> u64 {
    u64::from(((v << 1) ^ (v >> 31)) as u32)
}

/// One value of a column, borrowed from the batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// BIGINT.
    Bigint(i64),
    /// DOUBLE.
    Double(f64),
    /// BOOLEAN.
    Boolean(bool),
    /// STRING (UTF-8).
    String(&'a str),
    /// TIMESTAMP as microseconds since the Unix epoch (UTC).
    TimestampMicros(i64),
}

/// Writes records into one block (the body of one Tunnel block `PUT`).
#[derive(Debug, Default)]
pub struct BlockWriter {
    out: Vec<u8>,
    record_crc: u32,
    block_crc: u32,
    records: u64,
}

impl BlockWriter {
    /// An empty block.
    pub fn new() -> Self {
        Self::default()
    }

    fn crc(&mut self, bytes: &[u8]) {
        self.record_crc = crc32c::crc32c_append(self.record_crc, bytes);
    }

    /// Appends one field of the current record: `column` is the 0-based index of the column in
    /// the upload session's schema (the tag is `column + 1`).
    ///
    /// # Panics
    /// When `column` ≥ 2^28 - 1 (no table has that many columns; the tag would not fit).
    pub fn field(&mut self, column: usize, value: Value<'_>) {
        let index = u32::try_from(column + 1)
            .ok()
            .filter(|i| *i < END_RECORD)
            .expect("column index fits a tag");
        self.crc(&(index as i32).to_le_bytes());
        match value {
            Value::Bigint(v) => {
                put_tag(&mut self.out, index, WIRE_VARINT);
                put_varint(&mut self.out, zigzag64(v));
                self.crc(&v.to_le_bytes());
            }
            Value::Double(v) => {
                put_tag(&mut self.out, index, WIRE_FIXED64);
                self.out.extend_from_slice(&v.to_le_bytes());
                self.crc(&v.to_le_bytes());
            }
            Value::Boolean(v) => {
                put_tag(&mut self.out, index, WIRE_VARINT);
                put_varint(&mut self.out, u64::from(v));
                self.crc(&[u8::from(v)]);
            }
            Value::String(v) => {
                put_tag(&mut self.out, index, WIRE_LENGTH_DELIMITED);
                put_varint(&mut self.out, v.len() as u64);
                self.out.extend_from_slice(v.as_bytes());
                self.crc(v.as_bytes());
            }
            Value::TimestampMicros(us) => {
                let seconds = us.div_euclid(1_000_000);
                let nanos = (us.rem_euclid(1_000_000) * 1_000) as i32;
                put_tag(&mut self.out, index, WIRE_LENGTH_DELIMITED);
                put_varint(&mut self.out, zigzag64(seconds));
                put_varint(&mut self.out, zigzag32(nanos));
                self.crc(&seconds.to_le_bytes());
                self.crc(&nanos.to_le_bytes());
            }
        }
    }

    /// Ends the current record (its fields are those given to [`BlockWriter::field`] since the
    /// last call; none for an all-NULL record).
    pub fn end_record(&mut self) {
        put_tag(&mut self.out, END_RECORD, WIRE_VARINT);
        put_varint(&mut self.out, u64::from(self.record_crc));
        self.block_crc = crc32c::crc32c_append(self.block_crc, &self.record_crc.to_le_bytes());
        self.record_crc = 0;
        self.records += 1;
    }

    /// Records ended so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Bytes written so far (without the block end).
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// The block: the records, then the count and the checksum of checksums.
    pub fn finish(mut self) -> Vec<u8> {
        put_tag(&mut self.out, META_COUNT, WIRE_VARINT);
        put_varint(&mut self.out, zigzag64(self.records as i64));
        put_tag(&mut self.out, META_CHECKSUM, WIRE_VARINT);
        put_varint(&mut self.out, u64::from(self.block_crc));
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_zigzag() {
        let mut v = Vec::new();
        put_varint(&mut v, 300);
        assert_eq!(v, [0xac, 0x02]);
        assert_eq!(zigzag64(-1), 1);
        assert_eq!(zigzag64(1), 2);
        assert_eq!(zigzag64(i64::MIN), u64::MAX);
        assert_eq!(zigzag32(500_000_000), 1_000_000_000);
    }

    #[test]
    fn checksums_are_unsigned_varints_of_at_most_five_bytes() {
        // Find a record whose CRC is ≥ 2^31 and check its encoding length.
        for i in 0..64 {
            let mut w = BlockWriter::new();
            w.field(0, Value::Bigint(i));
            let crc = crc32c::crc32c_append(
                crc32c::crc32c_append(0, &1i32.to_le_bytes()),
                &i.to_le_bytes(),
            );
            w.end_record();
            if crc >= 1 << 31 {
                let block = w.finish();
                let mut expected = vec![0x08];
                put_varint(&mut expected, zigzag64(i));
                put_tag(&mut expected, END_RECORD, WIRE_VARINT);
                let crc_at = expected.len();
                put_varint(&mut expected, u64::from(crc));
                assert_eq!(expected.len() - crc_at, 5);
                assert_eq!(&block[..expected.len()], &expected[..]);
                return;
            }
        }
        panic!("no CRC ≥ 2^31 among 64 records");
    }

    #[test]
    fn timestamps_before_1970_floor_the_seconds() {
        let mut w = BlockWriter::new();
        w.field(2, Value::TimestampMicros(-1_500_000));
        let block = w.out.clone();
        // tag (3, 2) = 0x1a; seconds -2 → zigzag 3; nanos 5e8 → zigzag 1e9.
        let mut expected = vec![0x1a, 3];
        put_varint(&mut expected, 1_000_000_000);
        assert_eq!(block, expected);
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        /// Reads one varint at `*at`.
        fn varint(bytes: &[u8], at: &mut usize) -> u64 {
            let mut v = 0u64;
            let mut shift = 0;
            loop {
                let b = bytes[*at];
                *at += 1;
                v |= u64::from(b & 0x7f) << shift;
                if b < 0x80 {
                    return v;
                }
                shift += 7;
            }
        }

        fn unzigzag(v: u64) -> i64 {
            ((v >> 1) as i64) ^ -((v & 1) as i64)
        }

        proptest! {
            #[test]
            fn timestamps_split_into_floored_seconds_and_nanos(us in any::<i64>()) {
                let mut w = BlockWriter::new();
                w.field(0, Value::TimestampMicros(us));
                let mut at = 0;
                prop_assert_eq!(varint(&w.out, &mut at), (1 << 3) | 2);
                let seconds = unzigzag(varint(&w.out, &mut at));
                let nanos = unzigzag(varint(&w.out, &mut at));
                prop_assert_eq!(at, w.out.len());
                prop_assert!((0..1_000_000_000).contains(&nanos) && nanos % 1_000 == 0);
                prop_assert_eq!(i128::from(seconds) * 1_000_000 + i128::from(nanos / 1_000), i128::from(us));
            }

            #[test]
            fn records_checksum_what_pyodps_checksums(
                int in any::<i64>(),
                double in any::<f64>(),
                flag in any::<bool>(),
                text in ".{0,40}",
                null_mask in 0u8..16,
            ) {
                let mut w = BlockWriter::new();
                let mut crc_input = Vec::new();
                let mut expected = Vec::new();
                if null_mask & 1 == 0 {
                    w.field(0, Value::Bigint(int));
                    crc_input.extend_from_slice(&1i32.to_le_bytes());
                    crc_input.extend_from_slice(&int.to_le_bytes());
                    expected.push(0x08);
                    put_varint(&mut expected, zigzag64(int));
                }
                if null_mask & 2 == 0 {
                    w.field(1, Value::Double(double));
                    crc_input.extend_from_slice(&2i32.to_le_bytes());
                    crc_input.extend_from_slice(&double.to_le_bytes());
                    expected.push(0x11);
                    expected.extend_from_slice(&double.to_le_bytes());
                }
                if null_mask & 4 == 0 {
                    w.field(2, Value::Boolean(flag));
                    crc_input.extend_from_slice(&3i32.to_le_bytes());
                    crc_input.push(u8::from(flag));
                    expected.extend_from_slice(&[0x18, u8::from(flag)]);
                }
                if null_mask & 8 == 0 {
                    w.field(3, Value::String(&text));
                    crc_input.extend_from_slice(&4i32.to_le_bytes());
                    crc_input.extend_from_slice(text.as_bytes());
                    expected.push(0x22);
                    put_varint(&mut expected, text.len() as u64);
                    expected.extend_from_slice(text.as_bytes());
                }
                w.end_record();
                let crc = crc32c::crc32c(&crc_input);
                put_tag(&mut expected, END_RECORD, WIRE_VARINT);
                put_varint(&mut expected, u64::from(crc));
                put_tag(&mut expected, META_COUNT, WIRE_VARINT);
                put_varint(&mut expected, 2);
                put_tag(&mut expected, META_CHECKSUM, WIRE_VARINT);
                put_varint(&mut expected, u64::from(crc32c::crc32c(&crc.to_le_bytes())));
                prop_assert_eq!(w.finish(), expected);
            }
        }
    }
}
