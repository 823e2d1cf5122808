//! MaxCompute column types and table columns (pure).

use crate::config::ColumnType;
use std::fmt;

/// The MaxCompute types the model's table uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OdpsType {
    /// STRING.
    String,
    /// BIGINT (64-bit).
    Bigint,
    /// DOUBLE.
    Double,
    /// BOOLEAN.
    Boolean,
    /// TIMESTAMP (nanosecond precision; we write microseconds).
    Timestamp,
}

impl OdpsType {
    /// The type name in DDL and in the table's schema JSON.
    pub fn name(self) -> &'static str {
        match self {
            OdpsType::String => "STRING",
            OdpsType::Bigint => "BIGINT",
            OdpsType::Double => "DOUBLE",
            OdpsType::Boolean => "BOOLEAN",
            OdpsType::Timestamp => "TIMESTAMP",
        }
    }

    /// Parses a type name as the service reports it (any case); `None` for other types.
    pub fn parse(name: &str) -> Option<Self> {
        [
            OdpsType::String,
            OdpsType::Bigint,
            OdpsType::Double,
            OdpsType::Boolean,
            OdpsType::Timestamp,
        ]
        .into_iter()
        .find(|t| t.name().eq_ignore_ascii_case(name.trim()))
    }
}

impl fmt::Display for OdpsType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<ColumnType> for OdpsType {
    /// Merlin's mapping: INT64 → BIGINT, FLOAT64 → DOUBLE, BOOLEAN, STRING, timestamp → TIMESTAMP.
    fn from(t: ColumnType) -> Self {
        match t {
            ColumnType::String => OdpsType::String,
            ColumnType::Int64 => OdpsType::Bigint,
            ColumnType::Float64 => OdpsType::Double,
            ColumnType::Boolean => OdpsType::Boolean,
            ColumnType::Timestamp => OdpsType::Timestamp,
        }
    }
}

/// A column of a MaxCompute table. The type of a column of another type than [`OdpsType`]'s
/// is kept as its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableColumn {
    /// Column name.
    pub name: String,
    /// Column type.
    pub ty: OdpsType,
}

impl TableColumn {
    /// The model table's columns (`table::TableLayout::columns`) as MaxCompute columns.
    pub fn from_layout(columns: &[crate::table::Column]) -> Vec<TableColumn> {
        columns
            .iter()
            .map(|c| TableColumn {
                name: c.name.clone(),
                ty: c.ty.into(),
            })
            .collect()
    }
}
