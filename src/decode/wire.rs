//! Protobuf wire-format reading over a borrowed byte slice: varints, keys, length-delimited
//! fields and skipping. Never allocates; every length is checked against the bytes that remain,
//! so arbitrary input can only produce an error, never a panic or an unbounded allocation.

use super::error::{DecodeError, ErrorKind};

/// Wire type of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireType {
    Varint,
    Fixed64,
    Len,
    StartGroup,
    EndGroup,
    Fixed32,
}

impl WireType {
    fn name(self) -> &'static str {
        match self {
            WireType::Varint => "varint",
            WireType::Fixed64 => "64-bit",
            WireType::Len => "length-delimited",
            WireType::StartGroup => "start-group",
            WireType::EndGroup => "end-group",
            WireType::Fixed32 => "32-bit",
        }
    }
}

/// Nesting limit for (deprecated) groups in skipped fields, as prost's recursion limit.
const MAX_GROUP_DEPTH: u32 = 100;

/// A cursor over one message's bytes: the bytes not read yet (a slice, so that each step is a
/// length check and a split, without an index to add and check against the whole).
#[derive(Clone)]
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
    /// The message's length (the position in error messages is `len - rest.len()`).
    len: usize,
}

impl<'a> Reader<'a> {
    #[inline]
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader {
            rest: buf,
            len: buf.len(),
        }
    }

    #[inline]
    pub(crate) fn at_end(&self) -> bool {
        self.rest.is_empty()
    }

    /// Bytes read so far.
    #[inline]
    pub(crate) fn pos(&self) -> usize {
        self.len - self.rest.len()
    }

    #[cold]
    #[inline(never)]
    fn err(&self, what: &str, msg: &str) -> DecodeError {
        DecodeError::new(
            ErrorKind::InvalidProtobuf,
            format!("{what}: {msg} at byte {}", self.pos()),
        )
    }

    /// Varints of three bytes or more (timestamps' seconds and nanos, large lengths).
    #[inline(never)]
    fn varint_slow(&mut self, what: &str) -> Result<u64, DecodeError> {
        match self.varint_word() {
            Some(v) => Ok(v),
            None => self.varint_loop(what),
        }
    }

    /// A varint of at most 8 bytes, decoded from one little-endian word: the first byte without
    /// its high bit ends it; the 7-bit groups are packed by three mask-and-shift steps. With
    /// fewer than 8 bytes left, the word is those bytes and zeros; the zeros would end a varint
    /// that the input cuts short, so the varint must end within the bytes there are. `None`
    /// (nothing read) otherwise.
    #[inline(always)]
    pub(crate) fn varint_word(&mut self) -> Option<u64> {
        let x = match self.rest.first_chunk::<8>() {
            Some(w) => u64::from_le_bytes(*w),
            None => self
                .rest
                .iter()
                .enumerate()
                .fold(0, |x, (i, &b)| x | u64::from(b) << (8 * i)),
        };
        let stops = !x & 0x8080_8080_8080_8080;
        if stops == 0 {
            return None;
        }
        let n = (stops.trailing_zeros() / 8 + 1) as usize;
        let rest = self.rest.get(n..)?;
        let x = if n == 8 {
            x
        } else {
            x & ((1u64 << (8 * n)) - 1)
        };
        let x = x & 0x7f7f_7f7f_7f7f_7f7f;
        let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
        let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
        let x = (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4);
        self.rest = rest;
        Some(x)
    }

    /// Any varint, byte by byte (at most 10 bytes; the position is advanced once, at the end).
    pub(crate) fn varint_loop(&mut self, what: &str) -> Result<u64, DecodeError> {
        let rest = self.rest;
        let mut result: u64 = 0;
        for (i, &b) in rest.iter().take(10).enumerate() {
            if i == 9 && b > 1 {
                self.rest = &rest[i + 1..];
                return Err(self.err(what, "varint overflows 64 bits"));
            }
            result |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                self.rest = &rest[i + 1..];
                return Ok(result);
            }
        }
        self.rest = &rest[rest.len().min(10)..];
        Err(self.err(
            what,
            if rest.len() < 10 {
                "truncated varint"
            } else {
                "varint longer than 10 bytes"
            },
        ))
    }

    /// Consumes `key` (a field's encoded key, one or two bytes) if it comes next; nothing
    /// otherwise.
    #[inline(always)]
    pub(crate) fn eat(&mut self, key: &[u8]) -> bool {
        match self.rest.strip_prefix(key) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    /// Reads a base-128 varint (at most 10 bytes).
    #[inline(always)]
    pub(crate) fn varint(&mut self, what: &str) -> Result<u64, DecodeError> {
        // Fast paths: one and two bytes cover keys, lengths and small values.
        match self.rest {
            [b0, rest @ ..] if *b0 < 0x80 => {
                self.rest = rest;
                Ok(u64::from(*b0))
            }
            [b0, b1, rest @ ..] if *b1 < 0x80 => {
                self.rest = rest;
                Ok(u64::from(b0 & 0x7f) | (u64::from(*b1) << 7))
            }
            _ => self.varint_slow(what),
        }
    }

    /// The payload of a length-delimited field if what comes next is the one-byte key `tag`
    /// and a one- or two-byte length that fits in the rest; `None` (nothing read) otherwise.
    /// The fast path of list elements, map entries and table fields: the usual short ones skip
    /// the general key decoding, wire-type check and varint loop.
    #[inline(always)]
    pub(crate) fn short_len_field(&mut self, tag: u8) -> Option<&'a [u8]> {
        let (n, tail) = match self.rest {
            [t, l, tail @ ..] if *t == tag && *l < 0x80 => (usize::from(*l), tail),
            [t, l0, l1, tail @ ..] if *t == tag && *l1 < 0x80 => {
                (usize::from(*l0 & 0x7f) | usize::from(*l1) << 7, tail)
            }
            _ => return None,
        };
        let (body, rest) = tail.split_at_checked(n)?;
        self.rest = rest;
        Some(body)
    }

    /// The payload of a length-delimited field whose key was read, when its length takes one or
    /// two bytes and fits in the rest; `None` (nothing read) otherwise. The length is decoded as
    /// in [`Reader::short_len_field`]; one helper shared by both cost 33 instructions per log
    /// on that hottest path (callgrind, `convert`), so each keeps its own match.
    #[inline(always)]
    pub(crate) fn short_len_body(&mut self) -> Option<&'a [u8]> {
        let (n, tail) = match self.rest {
            [l, tail @ ..] if *l < 0x80 => (usize::from(*l), tail),
            [l0, l1, tail @ ..] if *l1 < 0x80 => {
                (usize::from(*l0 & 0x7f) | usize::from(*l1) << 7, tail)
            }
            _ => return None,
        };
        let (body, rest) = tail.split_at_checked(n)?;
        self.rest = rest;
        Some(body)
    }

    /// A length-delimited field with a one-byte key (fields 1–15) and a short length
    /// ([`Reader::short_len_field`]): (field number, payload). `None` (nothing read) otherwise.
    #[inline(always)]
    pub(crate) fn short_len_any(&mut self) -> Option<(u32, &'a [u8])> {
        let k = *self.rest.first()?;
        // High bit clear (one byte), wire type 2, field number not 0.
        if k & 0x87 != 0x02 || k < 0x08 {
            return None;
        }
        let body = self.short_len_field(k)?;
        Some((u32::from(k >> 3), body))
    }

    /// Reads a field key: (field number, wire type).
    #[inline(always)]
    pub(crate) fn key(&mut self, what: &str) -> Result<(u32, WireType), DecodeError> {
        let k = self.varint(what)?;
        let field = (k >> 3) as u32;
        let wt = match k & 7 {
            0 => WireType::Varint,
            1 => WireType::Fixed64,
            2 => WireType::Len,
            3 => WireType::StartGroup,
            4 => WireType::EndGroup,
            5 => WireType::Fixed32,
            _ => return Err(self.bad_key(what, k)),
        };
        if field == 0 || k > u64::from(u32::MAX) {
            return Err(self.bad_key(what, k));
        }
        Ok((field, wt))
    }

    #[cold]
    #[inline(never)]
    fn bad_key(&self, what: &str, k: u64) -> DecodeError {
        if k > u64::from(u32::MAX) {
            self.err(what, "field key out of range")
        } else if k & 7 > 5 {
            self.err(what, &format!("invalid wire type {}", k & 7))
        } else {
            self.err(what, "field number 0")
        }
    }

    /// Reads the payload of a length-delimited field.
    #[inline(always)]
    pub(crate) fn bytes(&mut self, what: &str) -> Result<&'a [u8], DecodeError> {
        let len = self.varint(what)?;
        let remaining = self.rest.len() as u64;
        if len > remaining {
            return Err(self.too_long(what, len, remaining));
        }
        let (body, rest) = self.rest.split_at(len as usize);
        self.rest = rest;
        Ok(body)
    }

    #[cold]
    #[inline(never)]
    fn too_long(&self, what: &str, len: u64, remaining: u64) -> DecodeError {
        self.err(
            what,
            &format!("length {len} exceeds the {remaining} bytes left"),
        )
    }

    /// Reads a little-endian 64-bit value.
    #[inline(always)]
    pub(crate) fn fixed64(&mut self, what: &str) -> Result<u64, DecodeError> {
        let Some((b, rest)) = self.rest.split_first_chunk::<8>() else {
            return Err(self.err(what, "truncated 64-bit value"));
        };
        self.rest = rest;
        Ok(u64::from_le_bytes(*b))
    }

    /// Skips a field's value of wire type `wt` (field number `field`, for group matching).
    pub(crate) fn skip(&mut self, field: u32, wt: WireType, what: &str) -> Result<(), DecodeError> {
        self.skip_depth(field, wt, what, 0)
    }

    fn skip_depth(
        &mut self,
        field: u32,
        wt: WireType,
        what: &str,
        depth: u32,
    ) -> Result<(), DecodeError> {
        match wt {
            WireType::Varint => {
                self.varint(what)?;
            }
            WireType::Fixed64 => {
                self.fixed64(what)?;
            }
            WireType::Fixed32 => {
                let Some(rest) = self.rest.get(4..) else {
                    return Err(self.err(what, "truncated 32-bit value"));
                };
                self.rest = rest;
            }
            WireType::Len => {
                self.bytes(what)?;
            }
            WireType::StartGroup => {
                if depth >= MAX_GROUP_DEPTH {
                    return Err(self.err(what, "groups nested too deeply"));
                }
                loop {
                    if self.at_end() {
                        return Err(self.err(what, "unterminated group"));
                    }
                    let (f, w) = self.key(what)?;
                    if w == WireType::EndGroup {
                        if f != field {
                            return Err(self.err(what, "mismatched end-group"));
                        }
                        break;
                    }
                    self.skip_depth(f, w, what, depth + 1)?;
                }
            }
            WireType::EndGroup => return Err(self.err(what, "unexpected end-group")),
        }
        Ok(())
    }

    /// Checks a known field's wire type.
    #[inline(always)]
    pub(crate) fn expect(
        &self,
        got: WireType,
        want: WireType,
        what: &str,
    ) -> Result<(), DecodeError> {
        if got == want {
            Ok(())
        } else {
            Err(self.wrong_type(got, want, what))
        }
    }

    #[cold]
    #[inline(never)]
    fn wrong_type(&self, got: WireType, want: WireType, what: &str) -> DecodeError {
        self.err(
            what,
            &format!(
                "wire type {} where {} was expected",
                got.name(),
                want.name()
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        let mut r = Reader::new(&[0x96, 0x01, 0x00]);
        assert_eq!(r.varint("v").unwrap(), 150);
        assert_eq!(r.varint("v").unwrap(), 0);
        assert!(r.varint("v").is_err(), "truncated");
        let mut r = Reader::new(&[0xff; 11]);
        assert!(r.varint("v").is_err(), "too long");
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert_eq!(r.varint("v").unwrap(), u64::MAX);
    }

    proptest::proptest! {
        /// The one-word decoding of longer varints reads what the byte loop reads, value and
        /// position, wherever it applies.
        #[test]
        fn varint_word_agrees_with_the_byte_loop(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..14), skew in 0u8..8) {
            // Bias towards continuation bytes so that long varints are common.
            let b: Vec<u8> = b.iter().enumerate().map(|(i, x)| if (i as u8) < skew { x | 0x80 } else { *x }).collect();
            let mut fast = Reader::new(&b);
            let mut slow = Reader::new(&b);
            if let Some(v) = fast.varint_word() {
                proptest::prop_assert_eq!(slow.varint_loop("v").ok(), Some(v));
                proptest::prop_assert_eq!(fast.pos(), slow.pos());
            }
            let mut any = Reader::new(&b);
            let mut slow = Reader::new(&b);
            proptest::prop_assert_eq!(any.varint("v").ok(), slow.varint_loop("v").ok());
        }

        /// A one-byte-key length-delimited field read by the shortcut is what `key` + `bytes`
        /// read.
        #[test]
        fn short_len_any_agrees_with_key_and_bytes(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..10)) {
            let mut fast = Reader::new(&b);
            if let Some((field, body)) = fast.short_len_any() {
                let mut r = Reader::new(&b);
                proptest::prop_assert_eq!(r.key("k").ok(), Some((field, WireType::Len)));
                proptest::prop_assert_eq!(r.bytes("k").ok(), Some(body));
                proptest::prop_assert_eq!(r.pos(), fast.pos());
            }
        }
    }

    #[test]
    fn lengths_are_checked_before_use() {
        // Claims 2^35 bytes with 3 present: an error, not an allocation.
        let mut r = Reader::new(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 1, 2, 3]);
        let e = r.bytes("f").unwrap_err();
        assert!(e.to_string().contains("exceeds"), "{e}");
    }

    #[test]
    fn groups_are_skipped_and_checked() {
        // field 5 start-group, field 1 varint 7, field 5 end-group
        let mut r = Reader::new(&[0x2b, 0x08, 0x07, 0x2c]);
        let (f, wt) = r.key("k").unwrap();
        r.skip(f, wt, "g").unwrap();
        assert!(r.at_end());
        let mut r = Reader::new(&[0x2b, 0x08, 0x07, 0x34]);
        let (f, wt) = r.key("k").unwrap();
        assert!(r.skip(f, wt, "g").is_err(), "mismatched end group");
    }
}
