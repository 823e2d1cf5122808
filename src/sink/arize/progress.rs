//! What the sink remembers about the batch it is writing, so that retrying the same batch after
//! an error does not re-send the requests Arize already acknowledged. Pure: no I/O.
//!
//! A batch becomes a list of requests (ranges of the body's rows with their encoded bodies).
//! Each is pending until Arize answers 2xx; a 413 splits it into two halves that take its place
//! (a single row that is still too large is refused for good: no smaller request exists).

use bytes::Bytes;
use std::ops::Range;

/// One request of a batch.
#[derive(Debug, Clone)]
pub struct Request {
    /// Rows of the body (not of the batch) it carries.
    pub rows: Range<usize>,
    /// The encoded IPC stream.
    pub body: Bytes,
    /// Whether Arize acknowledged it.
    pub acked: bool,
}

/// The requests of one batch and their state.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    requests: Vec<Request>,
    /// Body rows refused as too large (a one-row request answered 413).
    too_large: Vec<usize>,
}

impl Progress {
    /// The requests of a batch, none acknowledged yet.
    pub fn new(parts: Vec<(Range<usize>, Bytes)>) -> Self {
        Progress {
            requests: parts
                .into_iter()
                .map(|(rows, body)| Request {
                    rows,
                    body,
                    acked: false,
                })
                .collect(),
            too_large: Vec::new(),
        }
    }

    /// The first request not yet acknowledged, by index.
    pub fn next_pending(&self) -> Option<usize> {
        self.requests.iter().position(|r| !r.acked)
    }

    /// Request `i`.
    pub fn request(&self, i: usize) -> &Request {
        &self.requests[i]
    }

    /// Arize acknowledged request `i`.
    pub fn ack(&mut self, i: usize) {
        self.requests[i].acked = true;
    }

    /// Arize answered 413 to request `i`: it is replaced by its halves, built by `split` from
    /// the row ranges; a one-row request is refused for good instead (its row is returned).
    pub fn too_large<E>(
        &mut self,
        i: usize,
        split: impl FnOnce(Range<usize>, Range<usize>) -> Result<(Bytes, Bytes), E>,
    ) -> Result<Option<usize>, E> {
        let rows = self.requests[i].rows.clone();
        if rows.len() <= 1 {
            self.requests[i].acked = true;
            self.too_large.push(rows.start);
            return Ok(Some(rows.start));
        }
        let mid = rows.start + rows.len() / 2;
        let (a, b) = split(rows.start..mid, mid..rows.end)?;
        self.requests.splice(
            i..=i,
            [
                Request {
                    rows: rows.start..mid,
                    body: a,
                    acked: false,
                },
                Request {
                    rows: mid..rows.end,
                    body: b,
                    acked: false,
                },
            ],
        );
        Ok(None)
    }

    /// Body rows refused as too large.
    pub fn refused_too_large(&self) -> &[usize] {
        &self.too_large
    }

    /// Number of requests (after any splits).
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether there are no requests at all (every row refused, or an empty batch).
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn acknowledged_requests_are_not_pending_again() {
        let mut p = Progress::new(vec![(0..2, b("a")), (2..5, b("b")), (5..6, b("c"))]);
        assert_eq!(p.next_pending(), Some(0));
        p.ack(0);
        assert_eq!(p.next_pending(), Some(1));
        // An error on request 1 leaves it pending; the retry starts there.
        assert_eq!(p.next_pending(), Some(1));
        p.ack(1);
        p.ack(2);
        assert_eq!(p.next_pending(), None);
    }

    #[test]
    fn a_413_replaces_the_request_by_its_halves_in_place() {
        let mut p = Progress::new(vec![(0..2, b("a")), (2..7, b("b"))]);
        p.ack(0);
        let r: Result<_, ()> = p.too_large(1, |x, y| {
            assert_eq!((x.clone(), y.clone()), (2..4, 4..7));
            Ok((b("b1"), b("b2")))
        });
        assert_eq!(r, Ok(None));
        assert_eq!(p.len(), 3);
        assert_eq!(p.next_pending(), Some(1));
        assert_eq!(p.request(1).rows, 2..4);
        assert_eq!(p.request(2).rows, 4..7);
        assert_eq!(p.request(2).body, b("b2"));
    }

    #[test]
    fn a_single_row_still_too_large_is_refused() {
        let mut p = Progress::new(vec![(3..4, b("x"))]);
        let r: Result<_, ()> = p.too_large(0, |_, _| unreachable!());
        assert_eq!(r, Ok(Some(3)));
        assert_eq!(p.refused_too_large(), [3]);
        assert_eq!(p.next_pending(), None);
    }
}
