//! Tests of the local Parquet sink against a temporary folder.

use super::*;
use crate::batch::testing::{layout, log};
use crate::batch::Batcher;
use crate::config::Batching;
use arrow_array::types::Int64Type;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::time::{Duration, Instant};

/// 2024-03-01T12:00:00Z and the next day.
const DAY1: i64 = 1_709_294_400_000_000;
const DAY2: i64 = DAY1 + MICROS_PER_DAY;

fn cfg(path: &Path, rotate_bytes: u64) -> LocalSink {
    LocalSink {
        path: path.to_path_buf(),
        rotate_bytes,
        rotate_interval: Duration::from_secs(300),
    }
}

/// One batch of one-row logs with `x` = 0, 1, … at the given timestamps.
fn batch_at(times: &[i64]) -> Batch {
    let mut b = Batcher::new(layout(), Batching::default());
    let mut ready = Vec::new();
    for (i, t) in times.iter().enumerate() {
        b.push(
            0,
            i as i64,
            &log(&format!("s{i}"), 1, i as i64, *t),
            Instant::now(),
            &mut ready,
        )
        .unwrap();
    }
    assert!(ready.is_empty());
    b.flush().unwrap()
}

/// Every file under `dir`, recursively, relative to it, sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// (x, request_timestamp) of every row in a file.
fn read_back(file: &Path) -> Vec<(i64, i64)> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(file).unwrap())
        .unwrap()
        .build()
        .unwrap();
    let mut rows = Vec::new();
    for rb in reader {
        let rb = rb.unwrap();
        assert_eq!(rb.schema(), layout().arrow, "columns as the table");
        let x = rb.column(4).as_primitive::<Int64Type>();
        let ts = rb.column(2).as_primitive::<TimestampMicrosecondType>();
        rows.extend((0..rb.num_rows()).map(|i| (x.value(i), ts.value(i))));
    }
    rows
}

#[test]
fn rows_land_durably_with_their_values() {
    let dir = tempfile::tempdir().unwrap();
    let sink = ParquetSink::new(cfg(dir.path(), 128 << 20));
    let files = sink
        .write_blocking(&batch_at(&[DAY1, DAY1 + 1, DAY1 + 2]))
        .unwrap();
    assert_eq!(files.len(), 1);
    let names = tree(dir.path());
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(
        names[0].starts_with("dt=2024-03-01/part-") && names[0].ends_with(".parquet"),
        "{names:?}"
    );
    assert_eq!(
        read_back(&files[0]),
        vec![(0, DAY1), (1, DAY1 + 1), (2, DAY1 + 2)]
    );
}

#[test]
fn only_request_timestamp_carries_statistics() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::file::statistics::Statistics;
    let dir = tempfile::tempdir().unwrap();
    let sink = ParquetSink::new(cfg(dir.path(), 128 << 20));
    let files = sink
        .write_blocking(&batch_at(&[DAY1 + 5, DAY1 + 1, DAY1 + 9]))
        .unwrap();
    let reader = SerializedFileReader::new(File::open(&files[0]).unwrap()).unwrap();
    let meta = reader.metadata();
    assert_eq!(meta.num_row_groups(), 1);
    let rg = meta.row_group(0);
    for c in rg.columns() {
        let name = c.column_path().string();
        if name == crate::output::STATISTICS_COLUMN {
            match c.statistics() {
                Some(Statistics::Int64(s)) => {
                    assert_eq!(
                        (s.min_opt(), s.max_opt()),
                        (Some(&(DAY1 + 1)), Some(&(DAY1 + 9)))
                    );
                }
                other => panic!("{name}: expected int64 min/max, found {other:?}"),
            }
        } else {
            let minmax = c.statistics().is_some_and(|s| s.min_bytes_opt().is_some());
            assert!(!minmax, "{name} carries min/max statistics");
        }
    }
    assert!(
        meta.file_metadata().schema_descr().num_columns() > 1,
        "more than one column checked"
    );
}

/// The per-column choices of `parquet_properties`, on a table with every column kind, stated
/// per column rather than re-derived: delta encoding and no compression for integers and
/// timestamps, Snappy for the rest, dictionaries only on the feature and label strings.
#[test]
fn encodings_and_codecs_follow_the_column_kind() {
    use parquet::basic::{Compression, Encoding};
    use parquet::schema::types::ColumnPath;
    const DELTA: Option<Encoding> = Some(Encoding::DELTA_BINARY_PACKED);
    const PLAIN: Compression = Compression::UNCOMPRESSED;
    const SNAPPY: Compression = Compression::SNAPPY;
    // (column, encoding, codec, dictionary) for the 4-feature bench table: float, int, string,
    // bool, then the binary model's score and label.
    let expected = [
        ("session_id", None, SNAPPY, false),
        ("row_id", None, SNAPPY, false),
        ("request_timestamp", DELTA, PLAIN, false),
        ("model_version", None, SNAPPY, false),
        ("feature_00", None, SNAPPY, false),
        ("feature_01", DELTA, PLAIN, false),
        ("feature_02", None, SNAPPY, true),
        ("feature_03", None, SNAPPY, false),
        ("prediction_score", None, SNAPPY, false),
        ("_prediction_label", None, SNAPPY, true),
    ];
    let layout = crate::table::TableLayout::new(&crate::gen::benchmark_schema(4), "1");
    let names: Vec<&str> = layout
        .arrow
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(
        names,
        expected.map(|e| e.0),
        "the table checked is the one described"
    );
    let props = parquet_properties(&layout.arrow);
    for (name, encoding, codec, dictionary) in expected {
        let path = ColumnPath::from(name);
        assert_eq!(props.encoding(&path), encoding, "{name}");
        assert_eq!(props.compression(&path), codec, "{name}");
        assert_eq!(props.dictionary_enabled(&path), dictionary, "{name}");
    }
}

#[test]
fn batches_are_split_by_day() {
    let dir = tempfile::tempdir().unwrap();
    let sink = ParquetSink::new(cfg(dir.path(), 128 << 20));
    // Interleaved days, one row just before midnight UTC.
    let midnight = DAY2 - DAY2.rem_euclid(MICROS_PER_DAY);
    let files = sink
        .write_blocking(&batch_at(&[DAY1, DAY2, DAY1 + 5, midnight - 1, midnight]))
        .unwrap();
    assert_eq!(files.len(), 2);
    let names = tree(dir.path());
    assert!(
        names[0].starts_with("dt=2024-03-01/") && names[1].starts_with("dt=2024-03-02/"),
        "{names:?}"
    );
    assert_eq!(
        read_back(&files[0]),
        vec![(0, DAY1), (2, DAY1 + 5), (3, midnight - 1)]
    );
    assert_eq!(read_back(&files[1]), vec![(1, DAY2), (4, midnight)]);
    // A second batch on the same day gets a file of its own.
    sink.write_blocking(&batch_at(&[DAY1])).unwrap();
    assert_eq!(
        tree(dir.path())
            .iter()
            .filter(|n| n.starts_with("dt=2024-03-01/"))
            .count(),
        2
    );
}

#[test]
fn rotate_bytes_caps_files() {
    let dir = tempfile::tempdir().unwrap();
    let sink = ParquetSink::new(cfg(dir.path(), 1));
    let times: Vec<i64> = (0..10).map(|i| DAY1 + i).collect();
    let files = sink.write_blocking(&batch_at(&times)).unwrap();
    assert_eq!(
        files.len(),
        10,
        "one row per file when every row exceeds rotate_bytes"
    );
    let mut all: Vec<(i64, i64)> = files.iter().flat_map(|f| read_back(f)).collect();
    all.sort();
    assert_eq!(
        all,
        times
            .iter()
            .enumerate()
            .map(|(i, t)| (i as i64, *t))
            .collect::<Vec<_>>()
    );
}

#[test]
fn an_empty_batch_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let sink = ParquetSink::new(cfg(dir.path(), 1 << 20));
    let mut b = Batcher::new(layout(), Batching::default());
    let mut ready = Vec::new();
    b.push(0, 0, &log("s", 0, 0, DAY1), Instant::now(), &mut ready)
        .unwrap();
    assert_eq!(
        sink.write_blocking(&b.flush().unwrap()).unwrap(),
        Vec::<PathBuf>::new()
    );
    assert!(tree(dir.path()).is_empty());
}

#[test]
fn an_unwritable_folder_is_a_retryable_error_and_leaves_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("out");
    fs::create_dir_all(base.join("dt=2024-03-01")).unwrap();
    fs::set_permissions(&base, fs::Permissions::from_mode(0o555)).unwrap();
    fs::set_permissions(
        base.join("dt=2024-03-01"),
        fs::Permissions::from_mode(0o555),
    )
    .unwrap();
    // Root ignores permission bits; then make the base path a regular file instead, which no
    // user can write under.
    let probe = base.join("dt=2024-03-01/probe");
    let target = if File::create(&probe).is_ok() {
        fs::remove_file(&probe).unwrap();
        let file = dir.path().join("not-a-folder");
        fs::write(&file, b"x").unwrap();
        file.join("out")
    } else {
        base.clone()
    };
    let sink = ParquetSink::new(cfg(&target, 1 << 20));
    for times in [&[DAY1][..], &[DAY2][..]] {
        let e = sink.write_blocking(&batch_at(times)).unwrap_err();
        assert!(e.is_retryable(), "{e}");
        assert_eq!(e.kind, SinkErrorKind::Io);
    }
    fs::set_permissions(&base, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(
        base.join("dt=2024-03-01"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    assert!(
        tree(dir.path())
            .iter()
            .all(|n| !n.ends_with(".parquet") && !n.ends_with(".tmp")),
        "{:?}",
        tree(dir.path())
    );
}

#[tokio::test]
async fn the_sink_acknowledges_after_the_file_is_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = ParquetSink::new(cfg(dir.path(), 128 << 20));
    assert_eq!(sink.name(), "local_parquet");
    let batch = Arc::new(batch_at(&[DAY1, DAY2]));
    sink.write(Arc::clone(&batch)).await.unwrap();
    let names = tree(dir.path());
    assert_eq!(names.len(), 2);
    assert!(
        names
            .iter()
            .all(|n| n.ends_with(".parquet") && !n.contains(".tmp")),
        "{names:?}"
    );
}
