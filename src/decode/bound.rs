//! The per-log size bound (`batching.max_log_bytes`): an upper bound on a log's decoded size,
//! computed from its wire bytes before any row is appended.

use super::*;

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
    /// would be appended; the loop then reports the malformation. The bound is returned too:
    /// the batcher decides from it, before appending, whether the log fits the open batch.
    #[inline]
    pub(super) fn check_size(
        &self,
        f_data: &[u8],
        row_ids: &[u8],
        p_data: &[u8],
        session_len: usize,
    ) -> Result<(usize, usize), DecodeError> {
        let bound = |rows: usize| {
            rows.saturating_mul(self.row_bound_bytes.saturating_add(session_len))
                .saturating_add(row_ids.len())
                .saturating_add(f_data.len())
        };
        let most_rows = f_data.len().min(p_data.len()).min(row_ids.len()) / 2;
        let most = bound(most_rows);
        if most <= COUNT_ABOVE_BYTES.min(self.max_log_bytes) {
            return Ok((0, most));
        }
        self.count_and_check(f_data, row_ids, p_data, bound)
    }

    #[inline(never)]
    pub(super) fn count_and_check(
        &self,
        f_data: &[u8],
        row_ids: &[u8],
        p_data: &[u8],
        bound: impl Fn(usize) -> usize,
    ) -> Result<(usize, usize), DecodeError> {
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
        Ok((rows, bound))
    }
}

#[cold]
#[inline(never)]
pub(super) fn too_large(bound: usize, rows: usize, max: usize) -> DecodeError {
    DecodeError::new(
        ErrorKind::TooLarge,
        format!(
            "the log would take up to {bound} bytes decoded ({rows} rows), over the per-log limit of {max} bytes (batching.max_log_bytes)"
        ),
    )
}

/// Elements of an encoded `ListValue` up to the first malformed one, and whether the list was
/// read to its end.
pub(super) fn count_items(list: &[u8]) -> (usize, bool) {
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
