//! Column lists resolved to output columns, cached per table: logs of one model repeat the same
//! encoded `columns` list, so the map is rebuilt only when the bytes differ.

use super::cells::{parse_value, utf8, ListIter, V};
use super::{DecodeError, ErrorKind};
use std::collections::HashMap;

/// Position that maps to no output column.
pub(super) const DROP: u32 = u32::MAX;

/// A column list (`columns` of one table) resolved to output columns.
pub(super) struct ColumnMap {
    /// The encoded `columns` list this map was built from (cache key).
    key: Vec<u8>,
    /// Whether `key` is a valid cache entry.
    valid: bool,
    /// Position in the table → index among the targets, or [`DROP`].
    pub(super) pos: Vec<u32>,
    /// Targets that no position feeds (NULL in every row).
    pub(super) missing: Vec<u32>,
    /// The names at [`DROP`] positions (undeclared features) and the cells counted for each
    /// since they were last taken ([`ColumnMap::take_dropped`]).
    pub(super) dropped: Vec<(String, u64)>,
    /// Counts of the dropped names of lists this map was built from before.
    spilled: Vec<(String, u64)>,
}

impl ColumnMap {
    pub(super) fn empty() -> Self {
        ColumnMap {
            key: Vec::new(),
            valid: false,
            pos: Vec::new(),
            missing: Vec::new(),
            dropped: Vec::new(),
            spilled: Vec::new(),
        }
    }

    /// Counts `rows` cells for every dropped name (a log of `rows` rows was appended).
    #[inline]
    pub(super) fn count_dropped(&mut self, rows: usize) {
        for d in &mut self.dropped {
            d.1 += rows as u64;
        }
    }

    /// Moves the dropped names' counts (those of earlier lists too) into `out`; zeroes them.
    pub(super) fn take_dropped(&mut self, out: &mut Vec<(String, u64)>) {
        out.append(&mut self.spilled);
        for (name, n) in &mut self.dropped {
            if *n > 0 {
                out.push((name.clone(), std::mem::take(n)));
            }
        }
    }

    /// Forgets the current list's dropped names, keeping their counts for the next take.
    pub(super) fn spill_dropped(&mut self) {
        self.spilled
            .extend(self.dropped.drain(..).filter(|(_, n)| *n > 0));
    }

    /// Rebuilds the map from names; `n_targets` output columns, `index` name → target.
    pub(super) fn build<'a>(
        &mut self,
        names: impl Iterator<Item = Result<&'a str, DecodeError>>,
        index: &HashMap<String, u32>,
        n_targets: usize,
        table: &str,
    ) -> Result<(), DecodeError> {
        self.valid = false;
        self.pos.clear();
        self.missing.clear();
        self.spill_dropped();
        let mut seen = vec![false; n_targets];
        for name in names {
            let name = name?;
            match index.get(name) {
                Some(&t) => {
                    if std::mem::replace(&mut seen[t as usize], true) {
                        return Err(DecodeError::new(
                            ErrorKind::DuplicateColumn,
                            format!("{table}.columns names {name:?} more than once"),
                        ));
                    }
                    self.pos.push(t);
                }
                None => {
                    self.pos.push(DROP);
                    self.dropped.push((name.to_string(), 0));
                }
            }
        }
        self.missing
            .extend((0..n_targets as u32).filter(|t| !seen[*t as usize]));
        Ok(())
    }
}

/// Refreshes a cached column map unless `cols` is the same encoded list as last time (the
/// check inline, the rebuild out of line).
#[inline(always)]
pub(super) fn refresh(
    map: &mut ColumnMap,
    cols: &[u8],
    index: &HashMap<String, u32>,
    n_targets: usize,
    table: &str,
) -> Result<(), DecodeError> {
    if map.valid && map.key == cols {
        return Ok(());
    }
    rebuild(map, cols, index, n_targets, table)
}

/// [`refresh`] for a column list that is not the cached one.
#[inline(never)]
fn rebuild(
    map: &mut ColumnMap,
    cols: &[u8],
    index: &HashMap<String, u32>,
    n_targets: usize,
    table: &str,
) -> Result<(), DecodeError> {
    let mut it = ListIter::new(cols);
    let mut i = 0usize;
    let names = std::iter::from_fn(|| {
        let item = match it.next("columns") {
            Ok(Some(b)) => b,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        let idx = i;
        i += 1;
        Some(match parse_value(item, "columns") {
            Ok(V::Str(s)) => utf8(s).map_err(|_| {
                DecodeError::new(
                    ErrorKind::InvalidValue,
                    format!("{table}.columns[{idx}] is not valid UTF-8"),
                )
            }),
            Ok(other) => Err(DecodeError::new(
                ErrorKind::TypeMismatch,
                format!(
                    "{table}.columns[{idx}]: expected a string, found {}",
                    other.name()
                ),
            )),
            Err(e) => Err(e),
        })
    });
    map.build(names, index, n_targets, table)?;
    map.key.clear();
    map.key.extend_from_slice(cols);
    map.valid = true;
    Ok(())
}
