//! What the decoder counts about the data as it walks it, for the quality metrics
//! ([`crate::metrics::quality`]): feature cells of another kind than their column's type, and
//! cells of features the schema does not declare. Plain integers, touched off the common path
//! only (a mismatched cell never takes the fast path; undeclared names are counted per log);
//! taken once per batch with [`super::Decoder::take_counts`].

/// Counts since the last [`super::Decoder::take_counts`], over every log decoded, accepted or
/// rejected (a rejected log's counts stop at the cell that rejected it).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    /// Per declared feature, in layout order: cells whose value had another kind than the
    /// column's type (a bool in a numeric column, coerced; a string in a numeric column,
    /// rejected; a list or struct).
    pub mismatches: Vec<u64>,
    /// Cells per undeclared feature name of the accepted logs (a name may repeat).
    pub undeclared: Vec<(String, u64)>,
}

impl Counts {
    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.mismatches.iter().all(|n| *n == 0) && self.undeclared.is_empty()
    }
}
