//! The Parquet files the publisher writes (the local sink's, and `convert -f parquet`'s: both
//! use `output::parquet_properties`) are read by the readers users open them with, each giving
//! exactly the rows the decoder produced. The properties choose DELTA_BINARY_PACKED for integer
//! and timestamp columns, an encoding older readers may lack, so this checks pyarrow 26 and
//! DuckDB 1.5 (the BigQuery emulator's venv) and pyarrow 16 (the Arize oracle's venv, pinned to
//! Merlin's `pyarrow<17`). Needs `scripts/bigquery start` to have created its venv once, as
//! `scripts/test` does.

use crate::common::{repo_config, run, stderr};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_array::Array;
use arrow_schema::DataType;
use serde_json::{json, Value};
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The rows of an Arrow IPC stream as JSON values, timestamps as microseconds and floats as
/// `"f64:"` and their bits (as tests/it/parquet_readers.py writes them).
fn arrow_rows(path: &Path) -> (Vec<String>, Vec<Vec<Value>>) {
    let file = std::fs::File::open(path).unwrap();
    let reader = arrow_ipc::reader::StreamReader::try_new(file, None).unwrap();
    let names = reader
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        for r in 0..batch.num_rows() {
            let row = batch
                .columns()
                .iter()
                .map(|c| {
                    if c.is_null(r) {
                        return Value::Null;
                    }
                    match c.data_type() {
                        DataType::Utf8 => json!(c.as_string::<i32>().value(r)),
                        DataType::Int64 => json!(c.as_primitive::<Int64Type>().value(r)),
                        DataType::Float64 => {
                            let f = c.as_primitive::<Float64Type>().value(r);
                            json!(format!("f64:{}", f.to_bits()))
                        }
                        DataType::Boolean => json!(c.as_boolean().value(r)),
                        DataType::Timestamp(..) => {
                            json!(c.as_primitive::<TimestampMicrosecondType>().value(r))
                        }
                        other => panic!("unexpected column type {other}"),
                    }
                })
                .collect();
            rows.push(row);
        }
    }
    (names, rows)
}

/// What `python` prints for `file` with tests/it/parquet_readers.py.
fn read_with(python: &Path, file: &Path) -> Value {
    assert!(
        python.exists(),
        "{} is missing: run scripts/bigquery start once (scripts/test does)",
        python.display()
    );
    let out = std::process::Command::new(python)
        .arg(root().join("tests/it/parquet_readers.py"))
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "reader failed:\n{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A venv's Python under the test services' folder (`scripts/bigquery` creates `venv-bq`).
#[test]
fn publisher_parquet_reads_back_identically_in_pyarrow_and_duckdb() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let config = repo_config("bench-20.yaml");
    let config = config.to_str().unwrap();
    // Bad logs too: they are skipped, and the rows around them must still line up.
    let o = run(&[
        "gen",
        "-c",
        config,
        "-n",
        "3000",
        "--seed",
        "11",
        "--malformed-ratio",
        "0.02",
        "--start-time",
        "2026-03-01T00:00:00Z",
        "-o",
        &p("in.bin"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    for (format, out) in [("arrow", "rows.arrow"), ("parquet", "rows.parquet")] {
        let o = run(&[
            "convert",
            "-c",
            config,
            "-i",
            &p("in.bin"),
            "-f",
            format,
            "-o",
            &p(out),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let (names, expected) = arrow_rows(&dir.path().join("rows.arrow"));
    assert!(expected.len() > 2_800, "{} rows", expected.len());

    // The file uses the encoding older readers may lack: otherwise this test checks nothing new.
    let file = std::fs::File::open(dir.path().join("rows.parquet")).unwrap();
    let meta = parquet::file::reader::FileReader::metadata(
        &parquet::file::reader::SerializedFileReader::new(file).unwrap(),
    )
    .clone();
    let delta = meta.row_groups()[0]
        .columns()
        .iter()
        .filter(|c| {
            c.encodings()
                .any(|e| e == parquet::basic::Encoding::DELTA_BINARY_PACKED)
        })
        .count();
    assert_eq!(delta, 6, "request_timestamp and the five int64 features");

    let mut seen = Vec::new();
    for python in [
        crate::common::venv_python("venv-bq"),
        crate::arize::oracle_python(),
    ] {
        let got = read_with(&python, &dir.path().join("rows.parquet"));
        for (reader, r) in got.as_object().unwrap() {
            let who = format!("{reader} {}", r["version"]);
            assert_eq!(r["columns"], json!(names), "{who}");
            let rows = r["rows"].as_array().unwrap();
            assert_eq!(rows.len(), expected.len(), "{who}");
            for (i, (row, want)) in rows.iter().zip(&expected).enumerate() {
                assert_eq!(row, &json!(want), "{who}, row {i}");
            }
            seen.push(who);
        }
    }
    assert_eq!(seen.len(), 3, "pyarrow twice and DuckDB once: {seen:?}");
}
