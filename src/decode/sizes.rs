//! What a decoder's builders weigh ([`Decoder::sizes`], asked after every log by the batcher)
//! without a pass over every column per log: the held bytes are counted over all columns only
//! when some buffer may have reallocated since the last count.

use super::*;

/// The last full count of the held bytes, and how far the builders could grow from there
/// without any buffer reallocating.
pub(super) struct Counted {
    rows: usize,
    var: usize,
    held: usize,
    /// Rows that can be appended before a per-row buffer (values, offsets, NULL row numbers)
    /// of some column is full.
    room_rows: usize,
    /// String bytes that can be appended before the string buffer of some column is full.
    room_bytes: usize,
    rank_caps: (usize, usize),
}

impl Decoder {
    /// [`Decoder::approx_bytes`] and [`Decoder::allocated_bytes`]: what the open batch's data
    /// takes, and what its builders hold.
    ///
    /// Appending rows only lengthens buffers, by at most one element per row in each per-row
    /// buffer and by at most the string bytes appended in each string buffer, and a buffer
    /// reallocates only past its capacity. So while the rows and string bytes appended since
    /// the last full count fit the room every buffer had then, the held bytes are the ones
    /// counted. Anything else that may change a capacity (a rollback, a reservation, a
    /// truncation, [`Decoder::finish`]) drops the count.
    pub fn sizes(&mut self) -> (usize, usize) {
        let data = self.approx_bytes();
        let var = data - self.rows * self.fixed_row_bytes;
        let rank_caps = (self.rank_scratch.capacity(), self.rank_out.capacity());
        if let Some(c) = &self.counted {
            let rows = self.rows.checked_sub(c.rows);
            let bytes = var.checked_sub(c.var);
            if rows.is_some_and(|r| r <= c.room_rows)
                && bytes.is_some_and(|b| b <= c.room_bytes)
                && rank_caps == c.rank_caps
            {
                return (data, c.held);
            }
        }
        // Rooms first: they may reserve room for NULLs, which the count then includes.
        let (room_rows, room_bytes) = self
            .cols
            .iter_mut()
            .map(Col::room)
            .fold((usize::MAX, usize::MAX), |(r, b), (r2, b2)| {
                (r.min(r2), b.min(b2))
            });
        let held = self.allocated_bytes();
        self.counted = Some(Counted {
            rows: self.rows,
            var,
            held,
            room_rows,
            room_bytes,
            rank_caps,
        });
        (data, held)
    }

    /// Drops the last full count of [`Decoder::sizes`] (a capacity may change).
    pub(super) fn recount(&mut self) {
        self.counted = None;
    }
}
