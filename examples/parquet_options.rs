//! Parquet writer options side by side, for docs/performance.md ("Parquet options"): decodes
//! `LOGS` generated 20-feature logs (each one distinct, as on a topic: ids and values do not
//! repeat in a cycle that the codecs or dictionaries could exploit) into batches of 50,000
//! rows (the default `max_rows`) and writes them as one Parquet file per batch (as the local
//! sink does) into memory, with the writer properties of `VARIANT`; prints the bytes written.
//! Run under callgrind once per variant and subtract the `none` run (decode only) for the
//! instructions the writer costs:
//!
//! ```text
//! cargo build --release --example parquet_options
//! for v in none publisher snappy-chunk-stats snappy-no-stats snappy-stats-ts-only snappy-dict-all snappy-no-dict uncompressed zstd1; do
//!   valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$v target/release/examples/parquet_options $v 200000
//! done
//! ```
//!
//! Variants: `publisher` is [`parquet_properties`] (what the sinks write); the others change one
//! choice of it at a time (`snappy-no-dict`: no dictionary on any column).
use arrow_array::RecordBatch;
use observation_publisher::decode::Decoder;
use observation_publisher::gen::{GenOptions, Generator};
use observation_publisher::output::parquet_properties;
use observation_publisher::table::TableLayout;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use std::sync::Arc;

fn properties(variant: &str, schema: &arrow_schema::Schema) -> Option<WriterProperties> {
    let base = parquet_properties(schema);
    let b = base.into_builder();
    Some(match variant {
        "none" => return None,
        "publisher" => return Some(parquet_properties(schema)),
        "snappy-chunk-stats" => b.set_statistics_enabled(EnabledStatistics::Chunk).build(),
        "snappy-no-stats" => b.set_statistics_enabled(EnabledStatistics::None).build(),
        "snappy-stats-ts-only" => b
            .set_statistics_enabled(EnabledStatistics::None)
            .set_column_statistics_enabled(
                parquet::schema::types::ColumnPath::from("request_timestamp"),
                EnabledStatistics::Chunk,
            )
            .build(),
        "snappy-dict-all" => b.set_dictionary_enabled(true).build(),
        "uncompressed" => b.set_compression(Compression::UNCOMPRESSED).build(),
        "snappy-no-dict" => no_dict(),
        "zstd1" => b
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).expect("level 1")))
            .build(),
        other => panic!("unknown variant {other}"),
    })
}

/// The publisher's properties without its per-column dictionaries (built afresh: a column's
/// own setting overrides `set_dictionary_enabled`).
fn no_dict() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .set_column_statistics_enabled(
            parquet::schema::types::ColumnPath::from("request_timestamp"),
            EnabledStatistics::Chunk,
        )
        .build()
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
    let mut write = |batch: RecordBatch| {
        let Some(p) = props.clone() else {
            std::hint::black_box(batch);
            return;
        };
        let mut out = Vec::new();
        let mut w = ArrowWriter::try_new(&mut out, batch.schema(), Some(p)).expect("writer");
        w.write(&batch).expect("write");
        w.close().expect("close");
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
}
