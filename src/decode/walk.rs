//! The log's structure: which (sub-)messages hold the features, the predictions, the ids and the
//! timestamp. Each walker validates wire types and lengths and returns slices into the input.

use super::*;

/// The parts of a PredictionLog the publisher reads.
#[derive(Debug, Default, PartialEq)]
pub(super) struct LogParts<'a> {
    pub(super) prediction_id: &'a [u8],
    pub(super) features: Option<&'a [u8]>,
    pub(super) predictions: Option<&'a [u8]>,
    pub(super) timestamp: Option<(i64, i32)>,
}

/// The parts of a split-layout table Struct.
#[derive(Default)]
pub(super) struct TableParts<'a> {
    pub(super) columns: Option<&'a [u8]>,
    pub(super) data: Option<&'a [u8]>,
    pub(super) row_ids: Option<&'a [u8]>,
}

impl<'a> TableParts<'a> {
    /// Where the list under `key` goes; `None` for a key the publisher does not read.
    #[inline(always)]
    fn slot(&mut self, key: &[u8]) -> Option<&mut Option<&'a [u8]>> {
        match key {
            b"columns" => Some(&mut self.columns),
            b"data" => Some(&mut self.data),
            b"row_ids" => Some(&mut self.row_ids),
            _ => None,
        }
    }
}

/// Reads a Struct in the split layout, keeping the encoded lists under `columns`, `data` and
/// `row_ids` (map semantics: a repeated key's last entry wins; a null value counts as absent).
#[inline(always)]
pub(super) fn walk_table<'a>(b: &'a [u8], table: &str) -> Result<TableParts<'a>, DecodeError> {
    let mut r = Reader::new(b);
    let mut parts = TableParts::default();
    while !r.at_end() {
        let entry = match r.short_len_field(0x0a) {
            Some(entry) => entry,
            None => {
                let (field, wt) = r.key(table)?;
                if field != 1 {
                    r.skip(field, wt, table)?;
                    continue;
                }
                r.expect(wt, WireType::Len, table)?;
                r.bytes(table)?
            }
        };
        // The usual entry's list is read straight from its bytes.
        if let Some((key, list)) = list_entry(entry) {
            if let Some(slot) = parts.slot(key) {
                *slot = Some(list);
            }
            continue;
        }
        let (key, value) = entry_parts(entry, table)?;
        let Some(slot) = parts.slot(key) else {
            continue;
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

/// The usual entry of a table Struct, read straight from its bytes: the key with a one-byte
/// length, then a `Value` that is exactly one `list_value`, each with a one- or two-byte length,
/// ending exactly: (key, the encoded list). `None` for anything else (nothing is read; the
/// general path decides, and finds any error).
#[inline(always)]
pub(super) fn list_entry(entry: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&[0x0a, key_len], rest) = entry.split_first_chunk::<2>()? else {
        return None;
    };
    if key_len >= 0x80 {
        return None;
    }
    let (key, rest) = rest.split_at_checked(usize::from(key_len))?;
    let value = exact_len_field(rest, 0x12)?;
    let list = exact_len_field(value, 0x32)?;
    Some((key, list))
}

/// The payload of `b` when `b` is exactly one length-delimited field with the one-byte key `tag`
/// and a one- or two-byte length.
#[inline(always)]
fn exact_len_field(b: &[u8], tag: u8) -> Option<&[u8]> {
    match b {
        [t, l, body @ ..] if *t == tag && *l < 0x80 && body.len() == usize::from(*l) => Some(body),
        [t, l0, l1, body @ ..]
            if *t == tag
                && *l0 >= 0x80
                && *l1 < 0x80
                && body.len() == (usize::from(*l0 & 0x7f) | usize::from(*l1) << 7) =>
        {
            Some(body)
        }
        _ => None,
    }
}

/// The key and value of one map entry of a Struct (absent: empty; repeated: the last).
#[inline(always)]
pub(super) fn entry_parts<'a>(
    entry: &'a [u8],
    table: &str,
) -> Result<(&'a [u8], &'a [u8]), DecodeError> {
    // The usual entry: the key then the value, once each (what every encoder writes).
    let mut e = Reader::new(entry);
    if let Some(key) = e.short_len_field(0x0a) {
        if let Some(value) = e.short_len_field(0x12) {
            if e.at_end() {
                return Ok((key, value));
            }
        }
    }
    entry_parts_general(entry, table)
}

/// [`entry_parts`] for any encoding.
pub(super) fn entry_parts_general<'a>(
    entry: &'a [u8],
    table: &str,
) -> Result<(&'a [u8], &'a [u8]), DecodeError> {
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
    Ok((key, value))
}

/// The payload of a length-delimited field whose key was read: `body` when the shortcut
/// already read it, else checked and read now.
#[inline(always)]
fn len_body<'a>(
    r: &mut Reader<'a>,
    wt: WireType,
    body: Option<&'a [u8]>,
    what: &str,
) -> Result<&'a [u8], DecodeError> {
    match body {
        Some(b) => Ok(b),
        None => {
            r.expect(wt, WireType::Len, what)?;
            r.bytes(what)
        }
    }
}

/// ModelInput's length-delimited fields besides the table ([`walk_sub`]).
const INPUT_LEN_FIELDS: &[u32] = &[2, 3, 4, 10];

/// ModelOutput's length-delimited fields besides the table ([`walk_sub`]).
const OUTPUT_LEN_FIELDS: &[u32] = &[2, 10, 12];

/// Reads the top level of a PredictionLog.
#[inline(always)]
pub(super) fn walk_log(b: &[u8]) -> Result<LogParts<'_>, DecodeError> {
    match log_usual(b) {
        Some(parts) => Ok(parts),
        None => walk_log_general(b),
    }
}

/// The usual PredictionLog, read in one pass without a dispatch per field: its fields in
/// field-number order (as every encoder writes them), each at most once, the length-delimited
/// ones with a one- or two-byte length, every sub-message read as [`walk_log_general`] reads it.
/// `None` for anything else, including any error: nothing is decided here, and
/// [`walk_log_general`] reads the log again and finds the error if there is one.
#[inline(always)]
pub(super) fn log_usual(b: &[u8]) -> Option<LogParts<'_>> {
    let mut r = Reader::new(b);
    let mut parts = LogParts::default();
    if let Some(id) = r.short_len_field(0x0a) {
        parts.prediction_id = id;
    }
    // target_name, project_name, model_name, model_version: checked, not kept.
    for tag in [0x12, 0x1a, 0x22, 0x2a] {
        if let Some(s) = r.short_len_field(tag) {
            if !valid_utf8(s) {
                return None;
            }
        }
    }
    if let Some(input) = r.short_len_field(0x52) {
        parts.features = walk_sub(input, "input", INPUT_LEN_FIELDS).ok()?;
    }
    if let Some(output) = r.short_len_field(0x5a) {
        parts.predictions = walk_sub(output, "output", OUTPUT_LEN_FIELDS).ok()?;
    }
    // request_timestamp: field 20, length-delimited.
    if r.eat(&[0xa2, 0x01]) {
        let t = r.short_len_body()?;
        parts.timestamp = Some(walk_timestamp(t).ok()?);
    }
    // table_schema_version: field 100, a varint.
    if r.eat(&[0xa0, 0x06]) {
        r.varint("table_schema_version").ok()?;
    }
    r.at_end().then_some(parts)
}

/// [`walk_log`] for any encoding.
#[inline(never)]
pub(super) fn walk_log_general(b: &[u8]) -> Result<LogParts<'_>, DecodeError> {
    const W: &str = "PredictionLog";
    let mut r = Reader::new(b);
    let mut parts = LogParts::default();
    let mut seen_input = false;
    let mut seen_output = false;
    while !r.at_end() {
        // Length-delimited fields 1–15 with a short length (all the usual fields but the
        // timestamp) skip the general key path; `body` is then already read.
        let (field, wt, body) = match r.short_len_any() {
            Some((field, body)) => (field, WireType::Len, Some(body)),
            None => {
                let (field, wt) = r.key(W)?;
                (field, wt, None)
            }
        };
        match field {
            1 => {
                parts.prediction_id = len_body(&mut r, wt, body, "prediction_id")?;
            }
            2..=5 => {
                let s = len_body(&mut r, wt, body, W)?;
                if !valid_utf8(s) {
                    return Err(DecodeError::new(
                        ErrorKind::InvalidProtobuf,
                        format!("PredictionLog field {field} is not valid UTF-8"),
                    ));
                }
            }
            10 => {
                r.expect(wt, WireType::Len, "input")?;
                once(&mut seen_input, "input")?;
                let b = len_body(&mut r, wt, body, "input")?;
                parts.features = walk_sub(b, "input", INPUT_LEN_FIELDS)?;
            }
            11 => {
                r.expect(wt, WireType::Len, "output")?;
                once(&mut seen_output, "output")?;
                let b = len_body(&mut r, wt, body, "output")?;
                parts.predictions = walk_sub(b, "output", OUTPUT_LEN_FIELDS)?;
            }
            20 => {
                r.expect(wt, WireType::Len, "request_timestamp")?;
                if parts.timestamp.is_some() {
                    return Err(dup("request_timestamp"));
                }
                let b = len_body(&mut r, wt, body, "request_timestamp")?;
                parts.timestamp = Some(walk_timestamp(b)?);
            }
            100 => {
                r.expect(wt, WireType::Varint, "table_schema_version")?;
                r.varint("table_schema_version")?;
            }
            // Unknown: skipped (by the shortcut already when it read it).
            _ if body.is_some() => {}
            _ => r.skip(field, wt, W)?,
        }
    }
    Ok(parts)
}

pub(super) fn once(seen: &mut bool, what: &str) -> Result<(), DecodeError> {
    if std::mem::replace(seen, true) {
        Err(dup(what))
    } else {
        Ok(())
    }
}

pub(super) fn dup(what: &str) -> DecodeError {
    DecodeError::new(
        ErrorKind::InvalidProtobuf,
        format!("{what} appears more than once; merging repeated sub-messages is not supported"),
    )
}

/// Reads ModelInput / ModelOutput: field 1 is the table Struct; `len_fields` are the other
/// length-delimited fields (skipped after a wire-type check); anything else is a varint or
/// unknown field.
#[inline(always)]
pub(super) fn walk_sub<'a>(
    b: &'a [u8],
    what: &str,
    len_fields: &[u32],
) -> Result<Option<&'a [u8]>, DecodeError> {
    let mut r = Reader::new(b);
    let mut table = None;
    while !r.at_end() {
        if let Some(t) = r.short_len_field(0x0a) {
            if table.is_some() {
                return Err(dup(&format!("{what} table")));
            }
            table = Some(t);
            continue;
        }
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

#[inline(always)]
pub(super) fn walk_timestamp(b: &[u8]) -> Result<(i64, i32), DecodeError> {
    if let Some(t) = timestamp_usual(b) {
        return Ok(t);
    }
    walk_timestamp_general(b)
}

/// The usual `Timestamp` encoding (`seconds` then `nanos`, each at most once, each a varint of
/// at most 8 bytes), both varints read by [`Reader::varint_word`]. `None` for anything else: the
/// general loop decides.
#[inline(always)]
pub(super) fn timestamp_usual(b: &[u8]) -> Option<(i64, i32)> {
    let mut r = Reader::new(b);
    let (mut secs, mut nanos) = (0i64, 0i32);
    if r.eat(&[0x08]) {
        secs = r.varint_word()? as i64;
    }
    if r.eat(&[0x10]) {
        nanos = r.varint_word()? as i32;
    }
    r.at_end().then_some((secs, nanos))
}

/// [`walk_timestamp`] for any encoding.
#[inline(never)]
pub(super) fn walk_timestamp_general(b: &[u8]) -> Result<(i64, i32), DecodeError> {
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
