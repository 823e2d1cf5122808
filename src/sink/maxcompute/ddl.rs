//! Merlin's MaxCompute DDL as pure functions: the table's name, the `CREATE TABLE` when it is
//! missing, the `ALTER TABLE … ADD COLUMNS` when columns are missing, and the refusal of a
//! changed type.
//!
//! The statements are Merlin's text (publisher/observation_sink.py `MaxComputeSink`), with two
//! differences: a column name that is not a plain identifier is quoted with backticks (Merlin
//! would send invalid SQL), and every statement runs with [`SQL_SETTINGS`]
//! (`odps.namespace.schema=true`), without which the service may read the two-part name
//! `<dataset>.<table>` as `<project>.<table>`.

use super::schema::{OdpsType, TableColumn};

/// The partition column of Merlin's auto-partitioned table.
pub const PARTITION_COLUMN: &str = "request_timestamp_pt";

/// The settings (`hints`) every SQL statement runs with: `dataset` is a schema inside the
/// project.
pub const SQL_SETTINGS: &[(&str, &str)] = &[("odps.namespace.schema", "true")];

/// Merlin's table name: `prediction_log_<project>_<model>` with `-` and `.` replaced by `_`.
pub fn table_name(project: &str, model: &str) -> String {
    crate::naming::table_id(project, model)
}

/// `name` as it appears in SQL: as is when it is a plain identifier, else in backticks.
pub fn quote_ident(name: &str) -> String {
    let mut chars = name.chars();
    let plain = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("`{}`", name.replace('`', "``"))
    }
}

fn column_list(columns: &[TableColumn]) -> String {
    columns
        .iter()
        .map(|c| format!("{} {}", quote_ident(&c.name), c.ty))
        .collect::<Vec<_>>()
        .join(",")
}

/// `<dataset>.<table>`.
pub fn qualified(dataset: &str, table: &str) -> String {
    format!("{}.{}", quote_ident(dataset), quote_ident(table))
}

/// Merlin's create statement: the columns in table order, auto-partitioned by the day of
/// `request_timestamp` into `request_timestamp_pt`, no lifecycle (`ttl_days` is not used).
pub fn create_table_sql(dataset: &str, table: &str, columns: &[TableColumn]) -> String {
    format!(
        "create table {} ( {} )  auto partitioned by (trunc_time(request_timestamp, 'day') as {PARTITION_COLUMN})",
        qualified(dataset, table),
        column_list(columns)
    )
}

/// Merlin's alter statement adding `missing`.
pub fn add_columns_sql(dataset: &str, table: &str, missing: &[TableColumn]) -> String {
    format!(
        "alter table {} add columns ( {} )",
        qualified(dataset, table),
        column_list(missing)
    )
}

/// A column of the table whose type differs from the model's (a configuration error: exit 2,
/// as for BigQuery; retrying cannot help).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "column {column} of MaxCompute table {table} is {existing}, the model's schema needs {wanted}: \
     change the schema or the table"
)]
pub struct TypeChanged {
    /// The table.
    pub table: String,
    /// The column.
    pub column: String,
    /// Its type in the table (as the service names it).
    pub existing: String,
    /// The type the model's schema gives it.
    pub wanted: OdpsType,
}

/// What to do with an existing table: the columns it lacks (names compare case-insensitively,
/// as MaxCompute's do), or the first column whose type changed. `existing` is the table's
/// columns as (name, type name) from its schema, partition columns excluded.
pub fn missing_columns(
    table: &str,
    existing: &[(String, String)],
    wanted: &[TableColumn],
) -> Result<Vec<TableColumn>, TypeChanged> {
    let mut missing = Vec::new();
    for w in wanted {
        match existing
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(&w.name))
        {
            None => missing.push(w.clone()),
            Some((_, ty)) if OdpsType::parse(ty) == Some(w.ty) => {}
            Some((_, ty)) => {
                return Err(TypeChanged {
                    table: table.to_string(),
                    column: w.name.clone(),
                    existing: ty.clone(),
                    wanted: w.ty,
                })
            }
        }
    }
    Ok(missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, ty: OdpsType) -> TableColumn {
        TableColumn {
            name: name.into(),
            ty,
        }
    }

    #[test]
    fn create_statement_is_merlins() {
        let cols = [
            col("session_id", OdpsType::String),
            col("request_timestamp", OdpsType::Timestamp),
            col("age", OdpsType::Bigint),
        ];
        assert_eq!(
            create_table_sql("ds", &table_name("my-proj", "model.v1"), &cols),
            "create table ds.prediction_log_my_proj_model_v1 ( session_id STRING,request_timestamp TIMESTAMP,age BIGINT )  \
             auto partitioned by (trunc_time(request_timestamp, 'day') as request_timestamp_pt)"
        );
        assert_eq!(
            add_columns_sql(
                "ds",
                "t",
                &[
                    col("x", OdpsType::Double),
                    col("has space", OdpsType::Boolean)
                ]
            ),
            "alter table ds.t add columns ( x DOUBLE,`has space` BOOLEAN )"
        );
        assert_eq!(quote_ident("a`b"), "`a``b`");
        assert_eq!(quote_ident("1a"), "`1a`");
    }

    #[test]
    fn missing_columns_and_changed_types() {
        let existing = vec![
            ("SESSION_ID".to_string(), "string".to_string()),
            ("age".to_string(), "BIGINT".to_string()),
            ("old".to_string(), "DATETIME".to_string()),
        ];
        let wanted = [
            col("session_id", OdpsType::String),
            col("age", OdpsType::Bigint),
            col("score", OdpsType::Double),
        ];
        assert_eq!(
            missing_columns("t", &existing, &wanted).unwrap(),
            vec![col("score", OdpsType::Double)]
        );
        let err = missing_columns("t", &existing, &[col("age", OdpsType::Double)]).unwrap_err();
        assert_eq!(err.column, "age");
        assert!(err.to_string().contains("column age"), "{err}");
        assert!(err.to_string().contains("BIGINT"), "{err}");
    }
}
