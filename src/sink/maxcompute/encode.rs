//! Arrow record batches of the model's table → Tunnel records (pure; no I/O).
//!
//! The upload session's schema decides the tags: a record's field for table column `i` carries
//! tag `i + 1`, so a table whose columns were added by `ALTER TABLE` over time (another order
//! than ours) is written correctly. Batch columns are matched to table columns by name
//! (MaxCompute names are case-insensitive); a table column the batch does not have is NULL.

use super::record::{BlockWriter, Value};
use super::schema::{OdpsType, TableColumn};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, SchemaRef, TimeUnit};

/// Why a batch cannot be written into a table (a configuration problem: do not retry).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The batch column has an Arrow type that the table column's type cannot hold.
    #[error("column {column}: the table's type is {table}, the batch holds {arrow}")]
    TypeMismatch {
        /// Column name.
        column: String,
        /// The table's type.
        table: OdpsType,
        /// The batch's Arrow type.
        arrow: String,
    },
    /// The batch has a column the table lacks (the table must be altered first).
    #[error("column {0} is not in the table")]
    MissingInTable(String),
}

/// Which batch column feeds which table column, checked once per (table schema, batch schema).
#[derive(Debug, Clone)]
pub struct RecordEncoder {
    /// (table column index, batch column index, type), in table order.
    plan: Vec<(usize, usize, OdpsType)>,
    batch_schema: SchemaRef,
}

fn fits(ty: OdpsType, arrow: &DataType) -> bool {
    matches!(
        (ty, arrow),
        (OdpsType::String, DataType::Utf8)
            | (OdpsType::Bigint, DataType::Int64)
            | (OdpsType::Double, DataType::Float64)
            | (OdpsType::Boolean, DataType::Boolean)
            | (
                OdpsType::Timestamp,
                DataType::Timestamp(TimeUnit::Microsecond, _)
            )
    )
}

impl RecordEncoder {
    /// Plans the encoding of batches of `batch_schema` into a table with `table` columns (the
    /// upload session's schema, partition columns excluded).
    pub fn new(table: &[TableColumn], batch_schema: SchemaRef) -> Result<Self, EncodeError> {
        let mut plan = Vec::with_capacity(table.len());
        for field in batch_schema.fields() {
            if !table
                .iter()
                .any(|c| c.name.eq_ignore_ascii_case(field.name()))
            {
                return Err(EncodeError::MissingInTable(field.name().clone()));
            }
        }
        for (ti, column) in table.iter().enumerate() {
            let found = batch_schema
                .fields()
                .iter()
                .position(|f| f.name().eq_ignore_ascii_case(&column.name));
            if let Some(bi) = found {
                let arrow = batch_schema.field(bi).data_type();
                if !fits(column.ty, arrow) {
                    return Err(EncodeError::TypeMismatch {
                        column: column.name.clone(),
                        table: column.ty,
                        arrow: arrow.to_string(),
                    });
                }
                plan.push((ti, bi, column.ty));
            }
        }
        Ok(RecordEncoder { plan, batch_schema })
    }

    /// The batch schema this encoder was planned for.
    pub fn batch_schema(&self) -> &SchemaRef {
        &self.batch_schema
    }

    /// Appends rows `rows` of `batch` (whose schema must be the planned one) to `block`.
    ///
    /// # Panics
    /// When the batch's columns do not have the planned types (a different schema).
    pub fn write(
        &self,
        batch: &RecordBatch,
        rows: std::ops::Range<usize>,
        block: &mut BlockWriter,
    ) {
        for row in rows {
            for &(ti, bi, ty) in &self.plan {
                let array = batch.column(bi);
                if array.is_null(row) {
                    continue;
                }
                let value = match ty {
                    OdpsType::String => Value::String(array.as_string::<i32>().value(row)),
                    OdpsType::Bigint => Value::Bigint(array.as_primitive::<Int64Type>().value(row)),
                    OdpsType::Double => {
                        Value::Double(array.as_primitive::<Float64Type>().value(row))
                    }
                    OdpsType::Boolean => Value::Boolean(array.as_boolean().value(row)),
                    OdpsType::Timestamp => Value::TimestampMicros(
                        array.as_primitive::<TimestampMicrosecondType>().value(row),
                    ),
                };
                block.field(ti, value);
            }
            block.end_record();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{Field, Schema};
    use std::sync::Arc;

    fn col(name: &str, ty: OdpsType) -> TableColumn {
        TableColumn {
            name: name.into(),
            ty,
        }
    }

    #[test]
    fn tags_follow_the_table_order_and_absent_columns_are_null() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Utf8, true),
            Field::new("B", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(StringArray::from(vec![Some("x")])),
                Arc::new(Int64Array::from(vec![Some(-1)])),
            ],
        )
        .unwrap();
        // Table order: b, z (absent from the batch), a.
        let table = [
            col("b", OdpsType::Bigint),
            col("z", OdpsType::Double),
            col("a", OdpsType::String),
        ];
        let enc = RecordEncoder::new(&table, schema).unwrap();
        let mut ours = BlockWriter::new();
        enc.write(&batch, 0..1, &mut ours);
        let mut expected = BlockWriter::new();
        expected.field(0, Value::Bigint(-1));
        expected.field(2, Value::String("x"));
        expected.end_record();
        assert_eq!(ours.finish(), expected.finish());
    }

    #[test]
    fn mismatches_are_refused() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Utf8, true)]));
        let err =
            RecordEncoder::new(&[col("a", OdpsType::Bigint)], Arc::clone(&schema)).unwrap_err();
        assert!(matches!(err, EncodeError::TypeMismatch { ref column, .. } if column == "a"));
        let err = RecordEncoder::new(&[col("b", OdpsType::String)], schema).unwrap_err();
        assert_eq!(err, EncodeError::MissingInTable("a".into()));
    }
}
