//! Parquet writer options side by side, for docs/performance.md ("Parquet writer options"): decodes
//! `LOGS` generated 20-feature logs (each one distinct, as on a topic: ids and values do not
//! repeat in a cycle that the codecs or dictionaries could exploit) into batches of 50,000
//! rows (the default `max_rows`) and writes them as one Parquet file per batch (as the local
//! sink does) into memory, with the writer properties of `VARIANT`; prints the bytes written.
//! Run under callgrind once per variant and subtract the `none` run (decode only) for the
//! instructions the writer costs:
//!
//! ```text
//! cargo build --release --example parquet_options
//! for v in none publisher previous score-uncompressed version-no-dict int-ts-delta delta-uncompressed float-bss; do
//!   valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$v target/release/examples/parquet_options $v 50000
//! done
//! ```
//!
//! With `PER_COLUMN=1` it also prints each column's compressed and uncompressed bytes (from
//! the files' own metadata), to see where a codec pays.
//!
//! Variants: `publisher` is [`parquet_properties`] (what the sinks write). `previous` is what
//! they wrote before the per-column encodings (Snappy and PLAIN everywhere, dictionary on
//! every string column but the two ids, statistics on `request_timestamp` only); every other
//! variant changes one choice of `previous` (`delta-uncompressed`: two, DELTA_BINARY_PACKED
//! and no compression on integer and timestamp columns, which is what `publisher` adds), so
//! the earlier choices named in docs/performance.md stay reproducible (`snappy-no-dict`: no dictionary
//! on any column).
use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema};
use observation_publisher::decode::Decoder;
use observation_publisher::gen::{GenOptions, Generator};
use observation_publisher::output::parquet_properties;
use observation_publisher::table::TableLayout;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesBuilder};
use parquet::schema::types::ColumnPath;
use std::sync::Arc;

fn properties(variant: &str, schema: &Schema) -> Option<WriterProperties> {
    let b = previous(schema);
    let is = |name: &'static str| move |f: &Field| f.name() == name;
    let integer = |f: &Field| matches!(f.data_type(), DataType::Int64 | DataType::Timestamp(..));
    Some(match variant {
        "none" => return None,
        "publisher" => return Some(parquet_properties(schema)),
        "previous" => b.build(),
        "snappy-chunk-stats" => b.set_statistics_enabled(EnabledStatistics::Chunk).build(),
        "snappy-no-stats" => b
            .set_column_statistics_enabled(
                ColumnPath::from("request_timestamp"),
                EnabledStatistics::None,
            )
            .build(),
        "snappy-dict-all" => b.set_dictionary_enabled(true).build(),
        "uncompressed" => b.set_compression(Compression::UNCOMPRESSED).build(),
        "snappy-no-dict" => base().build(),
        "zstd1" => b
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).expect("level 1")))
            .build(),
        "score-uncompressed" => per_column(b, schema, is("prediction_score"), |b, p| {
            b.set_column_compression(p, Compression::UNCOMPRESSED)
        }),
        "version-no-dict" => per_column(b, schema, is("model_version"), |b, p| {
            b.set_column_dictionary_enabled(p, false)
        }),
        "int-ts-delta" => per_column(b, schema, integer, |b, p| {
            b.set_column_encoding(p, Encoding::DELTA_BINARY_PACKED)
        }),
        "delta-uncompressed" => per_column(b, schema, integer, |b, p| {
            b.set_column_encoding(p.clone(), Encoding::DELTA_BINARY_PACKED)
                .set_column_compression(p, Compression::UNCOMPRESSED)
        }),
        "float-bss" => per_column(
            b,
            schema,
            |f| f.data_type() == &DataType::Float64,
            |b, p| b.set_column_encoding(p, Encoding::BYTE_STREAM_SPLIT),
        ),
        other => panic!("unknown variant {other}"),
    })
}

/// Snappy everywhere, no dictionary, min/max only on `request_timestamp`: `previous` without
/// its per-column dictionaries (`snappy-no-dict`; a column's own setting would override
/// `set_dictionary_enabled`, so this is built without them, not from `previous`).
fn base() -> WriterPropertiesBuilder {
    WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .set_column_statistics_enabled(
            ColumnPath::from("request_timestamp"),
            EnabledStatistics::Chunk,
        )
}

/// The publisher's properties before the per-column encodings (commit 138490e): `base` with a
/// dictionary on every string column but the two ids.
fn previous(schema: &Schema) -> WriterPropertiesBuilder {
    let mut b = base();
    for (i, f) in schema.fields().iter().enumerate() {
        if i >= 2 && f.data_type() == &DataType::Utf8 {
            b = b.set_column_dictionary_enabled(ColumnPath::from(f.name().as_str()), true);
        }
    }
    b
}

/// `b` with `set` applied to each column `which` picks.
fn per_column(
    mut b: WriterPropertiesBuilder,
    schema: &Schema,
    which: impl Fn(&Field) -> bool,
    set: impl Fn(WriterPropertiesBuilder, ColumnPath) -> WriterPropertiesBuilder,
) -> WriterProperties {
    for f in schema.fields().iter().filter(|f| which(f)) {
        b = set(b, ColumnPath::from(f.name().as_str()));
    }
    b.build()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let variant = args.next().unwrap_or_else(|| "publisher".into());
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let schema = observation_publisher::gen::benchmark_schema(20);
    let mut g = Generator::new(
        &schema,
        GenOptions {
            rows_per_log: 1,
            seed: 1,
            malformed_ratio: 0.0,
            start_micros: 0,
            model: Default::default(),
        },
    );
    let logs: Vec<Vec<u8>> = (0..n).map(|_| g.next_log().bytes).collect();
    let layout = Arc::new(TableLayout::new(&schema, "1"));
    let props = properties(&variant, &layout.arrow);
    let mut d = Decoder::new(Arc::clone(&layout));
    let (mut bytes, mut files) = (0usize, 0usize);
    // Per column: (name, compressed bytes, uncompressed bytes), summed over the files.
    let mut per_column: Vec<(String, i64, i64)> = Vec::new();
    let mut write = |batch: RecordBatch| {
        let Some(p) = props.clone() else {
            std::hint::black_box(batch);
            return;
        };
        let mut out = Vec::new();
        let mut w = ArrowWriter::try_new(&mut out, batch.schema(), Some(p)).expect("writer");
        w.write(&batch).expect("write");
        let meta = w.close().expect("close");
        for rg in meta.row_groups() {
            for (i, c) in rg.columns().iter().enumerate() {
                if per_column.len() <= i {
                    per_column.push((c.column_path().string(), 0, 0));
                }
                per_column[i].1 += c.compressed_size();
                per_column[i].2 += c.uncompressed_size();
            }
        }
        bytes += out.len();
        files += 1;
    };
    for log in &logs {
        d.decode(log).expect("valid");
        if d.rows() >= 50_000 {
            write(d.finish());
        }
    }
    if d.rows() > 0 {
        write(d.finish());
    }
    println!("{variant}: {n} rows, {files} files, {bytes} bytes");
    if std::env::var_os("PER_COLUMN").is_some() {
        for (name, compressed, uncompressed) in &per_column {
            println!("  {name:<20} {compressed:>10} {uncompressed:>10}");
        }
    }
}
