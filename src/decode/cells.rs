//! One cell and one row: `google.protobuf.Value` parsing and the type rules that append a value
//! to a column builder (see the row rules in the module docs of [`super`]).

use super::*;

/// The shape of one `Value` as the walker sees it.
#[derive(Clone, Copy)]
pub(super) enum V<'a> {
    Null,
    Number(f64),
    Str(&'a [u8]),
    Bool(bool),
    Struct,
    List(&'a [u8]),
}

impl V<'_> {
    pub(super) fn name(&self) -> &'static str {
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
pub(super) enum CellError {
    Type(&'static str),
    Nested(&'static str),
    NonFinite,
    Range(f64),
    Utf8,
    /// The column refused the value (a string column whose batch would pass Arrow's 2 GiB
    /// offsets: the config's limits keep a batch below it): its own error, placed.
    Column(DecodeError),
}

/// BigQuery TIMESTAMP range: 0001-01-01T00:00:00Z ..= 9999-12-31T23:59:59.999999Z.
pub(super) const MIN_SECONDS: i64 = -62_135_596_800;

pub(super) const MAX_SECONDS: i64 = 253_402_300_799;

#[inline]
pub(super) fn utf8(b: &[u8]) -> Result<&str, std::str::Utf8Error> {
    std::str::from_utf8(b)
}

/// UTF-8 check with a fast path for the short ASCII strings logs are mostly made of.
#[inline(always)]
pub(super) fn valid_utf8(b: &[u8]) -> bool {
    ascii_short(b) || std::str::from_utf8(b).is_ok()
}

/// Whether `b` is ASCII, for `b` of at most 16 bytes; `false` for anything longer (the callers
/// then take their general path: `from_utf8`, which has its own word-wise ASCII loop). Reads at
/// most two overlapping words, where `is_ascii` loops over the bytes of a slice shorter than a
/// word (most ids, labels and categorical cells): 135 instructions per log fewer in `convert`
/// (callgrind); falling back to `is_ascii` here for longer slices cost 57 of them
/// back.
#[inline(always)]
pub(super) fn ascii_short(b: &[u8]) -> bool {
    const HI4: u32 = 0x8080_8080;
    const HI8: u64 = 0x8080_8080_8080_8080;
    let n = b.len();
    match (b.first_chunk::<8>(), b.last_chunk::<8>()) {
        (Some(x), Some(y)) if n <= 16 => {
            (u64::from_le_bytes(*x) | u64::from_le_bytes(*y)) & HI8 == 0
        }
        (Some(_), _) => false,
        _ => match (b.first_chunk::<4>(), b.last_chunk::<4>()) {
            (Some(x), Some(y)) => (u32::from_le_bytes(*x) | u32::from_le_bytes(*y)) & HI4 == 0,
            _ => b.iter().fold(0, |a, &c| a | c) < 0x80,
        },
    }
}

/// Appends already-validated UTF-8 to a string column and adds its length to `added` (the
/// decoder's running total of string bytes, [`Decoder::approx_bytes`]).
#[inline(always)]
pub(super) fn push_str(col: &mut Col, s: &[u8], added: &mut usize) -> Result<(), DecodeError> {
    match col {
        Col::Str(c) => {
            c.push(s)?;
            *added += s.len();
            Ok(())
        }
        _ => unreachable!("fixed string column"),
    }
}

/// Where a row is, for error messages: its table and its number in the log.
#[derive(Clone, Copy)]
pub(super) struct RowAt<'t> {
    pub(super) table: &'t str,
    pub(super) row: usize,
}

/// Walks one row (`Value`: a list, or a bare scalar meaning a one-element row), appending each
/// mapped cell to its target column and NULL to targets the map does not feed. When `scores`
/// is given, the appended float values are recorded there; when `mismatches` is given, cells
/// of another kind than their column's are counted there per target (off the fast path: such a
/// cell never takes it). String bytes appended are added to `added`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn walk_row<'c>(
    row: &[u8],
    map: &ColumnMap,
    cols: &mut [Col],
    mut scores: Option<&mut Vec<Option<f64>>>,
    mut mismatches: Option<&mut [u64]>,
    added: &mut usize,
    at: RowAt<'_>,
    column: impl Fn(u32) -> &'c crate::table::Column,
) -> Result<(), DecodeError> {
    const WHAT: &str = "data";
    let RowAt { table, row: row_no } = at;
    let n_cols = map.pos.len();
    let count = match parse_value(row, WHAT)? {
        V::List(items) => {
            let mut it = ListIter::new(items);
            let mut pos = 0usize;
            while let Some(cell) = it.next(WHAT)? {
                if let Some(&t) = map.pos.get(pos) {
                    if t != DROP {
                        let col = &mut cols[t as usize];
                        let pushed = match push_common(col, cell, added) {
                            Some(pushed) => pushed,
                            None => {
                                let v = parse_value(cell, WHAT)?;
                                if let Some(m) = mismatches.as_deref_mut() {
                                    m[t as usize] += u64::from(other_kind(col, &v));
                                }
                                match push_cell(col, v, added) {
                                    Ok(pushed) => pushed,
                                    Err(e) => {
                                        return Err(cell_error(e, table, row_no, pos, column(t)))
                                    }
                                }
                            }
                        };
                        if let (Some(f), Some(s)) = (pushed, scores.as_deref_mut()) {
                            s[t as usize] = Some(f);
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
                    if let Some(m) = mismatches {
                        m[t as usize] += u64::from(other_kind(&cols[t as usize], &scalar));
                    }
                    match push_cell(&mut cols[t as usize], scalar, added) {
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
pub(super) fn shape_row_error(
    table: &str,
    row_no: usize,
    count: usize,
    n_cols: usize,
) -> DecodeError {
    DecodeError::new(
        ErrorKind::ShapeMismatch,
        format!("{table}.data[{row_no}] has {count} values but there are {n_cols} columns"),
    )
}

#[cold]
#[inline(never)]
pub(super) fn cell_error(
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
        CellError::Column(e) => DecodeError::new(e.kind, format!("{at}: {}", e.reason)),
    }
}

/// The usual cells appended straight from their encoding, with one dispatch on the column's
/// type: a number into a float or integer column (in range), a short ASCII string into a string
/// column, a bool into a boolean column. `None` for anything else, and nothing is appended:
/// [`parse_value`] and [`push_cell`] take it (and find any error). `Some` as [`push_cell`]'s
/// `Ok`.
#[inline(always)]
pub(super) fn push_common(col: &mut Col, cell: &[u8], added: &mut usize) -> Option<Option<f64>> {
    match col {
        Col::F64(c) => {
            let f = number(cell)?;
            c.push(f);
            Some(Some(f))
        }
        Col::I64(c) => {
            let f = number(cell)?;
            if !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f) {
                return None;
            }
            c.push(f as i64);
            Some(None)
        }
        Col::Str(c) => match cell {
            [0x1a, n, s @ ..] if *n < 0x80 && usize::from(*n) == s.len() && ascii_short(s) => {
                c.push(s).ok()?;
                *added += s.len();
                Some(None)
            }
            _ => None,
        },
        Col::Bool(c) => match cell {
            [0x20, b] if *b < 0x80 => {
                c.push(*b != 0);
                Some(None)
            }
            _ => None,
        },
        Col::Ts(_) => None,
    }
}

/// A `Value` that is exactly one `number_value`.
#[inline(always)]
fn number(cell: &[u8]) -> Option<f64> {
    match cell {
        [0x11, x @ ..] => Some(f64::from_le_bytes(x.try_into().ok()?)),
        _ => None,
    }
}

/// Appends one value to a column with the coercion rules of the module docs. Returns the float
/// value appended to a float column (for derived columns). String bytes appended are added to
/// `added`.
#[inline(always)]
pub(super) fn push_cell(
    col: &mut Col,
    v: V<'_>,
    added: &mut usize,
) -> Result<Option<f64>, CellError> {
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
            c.push(s).map_err(CellError::Column)?;
            *added += s.len();
            Ok(None)
        }
        (_, v) => Err(CellError::Type(v.name())),
    }
}

pub(super) fn timestamp_micros(secs: i64, nanos: i32) -> Result<i64, DecodeError> {
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

/// Iterates the elements (encoded `Value`s) of an encoded `ListValue`.
pub(super) struct ListIter<'a> {
    pub(super) r: Reader<'a>,
}

impl<'a> ListIter<'a> {
    #[inline]
    pub(super) fn new(list: &'a [u8]) -> Self {
        ListIter {
            r: Reader::new(list),
        }
    }

    #[inline(always)]
    pub(super) fn next(&mut self, what: &str) -> Result<Option<&'a [u8]>, DecodeError> {
        // Field 1, length-delimited, length < 16 KiB: every element of the usual list.
        if let Some(item) = self.r.short_len_field(0x0a) {
            return Ok(Some(item));
        }
        if self.r.at_end() {
            return Ok(None);
        }
        self.next_general(what)
    }

    /// [`ListIter::next`] for any encoding: long elements, other fields (skipped), the end.
    #[inline]
    pub(super) fn next_general(&mut self, what: &str) -> Result<Option<&'a [u8]>, DecodeError> {
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
pub(super) fn parse_value<'a>(b: &'a [u8], what: &str) -> Result<V<'a>, DecodeError> {
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
pub(super) fn parse_value_slow<'a>(b: &'a [u8], what: &str) -> Result<V<'a>, DecodeError> {
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

/// Whether `v` is of another kind than `col`'s type. NULL is no kind: never a mismatch.
#[inline]
pub(super) fn other_kind(col: &Col, v: &V<'_>) -> bool {
    !matches!(
        (col, v),
        (_, V::Null)
            | (Col::F64(_) | Col::I64(_), V::Number(_))
            | (Col::Str(_), V::Str(_))
            | (Col::Bool(_), V::Bool(_))
    )
}
