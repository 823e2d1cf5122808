//! Tests of the decoder's fast paths: each one against the general path it
//! short-cuts, on arbitrary bytes (malformed included), and the whole walker against the prost
//! reference on random schemas with values long and short (so both paths run).

use super::cells::ListIter;
use super::columns::pack_bits;
use super::reference::{batch_cells, convert};
use super::wire::Reader;
use super::*;
use crate::config::{FeatureType, InferenceSchema, ModelOutput};
use crate::proto::{ModelInput, ModelOutput as PbOutput, PredictionLog};
use proptest::prelude::*;
use prost::Message;
use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Timestamp, Value};

/// Every element (or the error) of a list, read with the fast path first or only the general
/// path.
fn elements(b: &[u8], fast: bool) -> Vec<Result<Vec<u8>, String>> {
    let mut it = ListIter::new(b);
    let mut out = Vec::new();
    loop {
        let r = if fast {
            it.next("l")
        } else {
            it.next_general("l")
        };
        match r {
            Ok(Some(e)) => out.push(Ok(e.to_vec())),
            Ok(None) => return out,
            Err(e) => {
                out.push(Err(e.to_string()));
                return out;
            }
        }
    }
}

/// Bytes that are mostly list elements of every length class, with arbitrary bytes mixed in.
fn arb_list_bytes() -> impl Strategy<Value = Vec<u8>> {
    let element = prop_oneof![
        // An element: key 0x0a (or another field), length, payload of 0..200 bytes.
        8 => (
            prop_oneof![8 => Just(0x0au8), 1 => any::<u8>()],
            prop::collection::vec(any::<u8>(), 0..200)
        )
            .prop_map(|(key, payload)| {
                let mut b = vec![key];
                let mut n = payload.len() as u64;
                loop {
                    let byte = (n & 0x7f) as u8;
                    n >>= 7;
                    if n == 0 {
                        b.push(byte);
                        break;
                    }
                    b.push(byte | 0x80);
                }
                b.extend(payload);
                b
            }),
        1 => prop::collection::vec(any::<u8>(), 0..4),
    ];
    (
        prop::collection::vec(element, 0..6),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(parts, cut)| {
            let b: Vec<u8> = parts.concat();
            let cut = cut.index(b.len() + 1).max(b.len().saturating_sub(3));
            b[..cut].to_vec()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The one-byte-length shortcut of list elements reads what the general path reads, and
    /// fails where it fails, on arbitrary bytes.
    #[test]
    fn list_elements_fast_path_agrees_with_the_general_path(b in arb_list_bytes()) {
        prop_assert_eq!(elements(&b, true), elements(&b, false));
    }

    #[test]
    fn list_elements_agree_on_arbitrary_bytes(b in prop::collection::vec(any::<u8>(), 0..64)) {
        prop_assert_eq!(elements(&b, true), elements(&b, false));
    }

    /// `short_len_field` takes only what `key` + `expect` + `bytes` would, and leaves the
    /// cursor where they do.
    #[test]
    fn short_len_field_is_a_prefix_of_the_general_read(b in prop::collection::vec(any::<u8>(), 0..8)) {
        let mut fast = Reader::new(&b);
        if let Some(got) = fast.short_len_field(0x0a) {
            let mut r = Reader::new(&b);
            let (field, wt) = r.key("k").unwrap();
            prop_assert_eq!(field, 1);
            r.expect(wt, WireType::Len, "k").unwrap();
            prop_assert_eq!(r.bytes("k").unwrap(), got);
            prop_assert_eq!(r.at_end(), fast.at_end());
        }
    }

    /// A map entry read by the key-then-value shortcut is the one the general loop reads.
    #[test]
    fn map_entries_fast_path_agrees_with_the_general_path(b in arb_list_bytes()) {
        let b: Vec<u8> = b.iter().enumerate().map(|(i, x)| if i > 0 && *x == 0x0a && i % 3 == 0 { 0x12 } else { *x }).collect();
        let fast = walk::entry_parts(&b, "t").map_err(|e| e.to_string());
        let general = walk::entry_parts_general(&b, "t").map_err(|e| e.to_string());
        prop_assert_eq!(fast, general);
    }

    /// A table entry read by the list shortcut is the key and list the general path reads.
    #[test]
    fn list_entries_fast_path_agrees_with_the_general_path(
        key in prop_oneof![Just(b"data".to_vec()), prop::collection::vec(any::<u8>(), 0..140)],
        list in prop::collection::vec(any::<u8>(), 0..300),
        tags in (prop_oneof![8 => Just(0x12u8), 1 => any::<u8>()], prop_oneof![8 => Just(0x32u8), 1 => any::<u8>()]),
        extra in prop_oneof![3 => Just(vec![]), 1 => prop::collection::vec(any::<u8>(), 1..3)],
        drop in prop_oneof![3 => Just(0usize), 1 => 1usize..4],
    ) {
        let field = |tag: u8, body: &[u8]| {
            let mut b = vec![tag];
            prost::encoding::encode_varint(body.len() as u64, &mut b);
            b.extend_from_slice(body);
            b
        };
        let value = [field(tags.1, &list), extra.clone()].concat();
        let entry = [field(0x0a, &key), field(tags.0, &value)].concat();
        let entry = &entry[..entry.len().saturating_sub(drop)];
        if let Some((k, l)) = walk::list_entry(entry) {
            let (gk, gv) = walk::entry_parts_general(entry, "t").expect("the general path reads it");
            prop_assert_eq!(k, gk);
            match cells::parse_value(gv, "t") {
                Ok(cells::V::List(gl)) => prop_assert_eq!(l, gl),
                _ => prop_assert!(false, "the general path reads no list"),
            }
        }
    }

    /// The timestamp read from its usual encoding is what the general loop reads, on any
    /// bytes (cut, repeated and unknown fields, long varints included), and every encoding of
    /// a seconds and nanos pair prost writes whose varints fit in 8 bytes takes the shortcut.
    #[test]
    fn timestamps_fast_path_agrees_with_the_general_path(
        b in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..24),
            (any::<i64>(), any::<i32>(), 0usize..3).prop_map(|(seconds, nanos, cut)| {
                let b = Timestamp { seconds, nanos }.encode_to_vec();
                b[..b.len().saturating_sub(cut)].to_vec()
            }),
            (0i64..1 << 56, 0i32..1 << 28, prop::collection::vec(any::<u8>(), 0..4))
                .prop_map(|(seconds, nanos, tail)| [Timestamp { seconds, nanos }.encode_to_vec(), tail].concat()),
        ],
    ) {
        let general = walk::walk_timestamp_general(&b).map_err(|e| e.to_string());
        prop_assert_eq!(walk::walk_timestamp(&b).map_err(|e| e.to_string()), general.clone());
        if let Ok((seconds, nanos)) = general {
            if (0..1 << 56).contains(&seconds) && (0..1 << 28).contains(&nanos)
                && b == (Timestamp { seconds, nanos }.encode_to_vec())
            {
                prop_assert_eq!(walk::timestamp_usual(&b), Some((seconds, nanos)));
            }
        }
    }

    /// Validity and boolean values packed eight bytes at a time match bit-by-bit packing.
    #[test]
    fn bits_pack_like_arrow(v in prop::collection::vec(any::<bool>(), 0..200)) {
        let bytes: Vec<u8> = v.iter().map(|x| u8::from(*x)).collect();
        let want = arrow_buffer::BooleanBuffer::collect_bool(v.len(), |i| v[i]);
        prop_assert_eq!(pack_bits(&bytes), want);
    }
}

// ---------------------------------------------------------------------------------------------
// The walker against the reference on random schemas, with long values.

fn value(kind: Kind) -> Value {
    Value { kind: Some(kind) }
}

fn s(x: &str) -> Value {
    value(Kind::StringValue(x.into()))
}

fn list(v: Vec<Value>) -> Value {
    value(Kind::ListValue(ListValue { values: v }))
}

const TYPES: [FeatureType; 4] = [
    FeatureType::Float64,
    FeatureType::Int64,
    FeatureType::String,
    FeatureType::Boolean,
];

/// A cell for a column of type `ty`: mostly well-typed, sometimes long, null or wrong.
fn arb_cell(ty: FeatureType) -> BoxedStrategy<Value> {
    let typed = match ty {
        FeatureType::Float64 => (-1e9f64..1e9)
            .prop_map(|f| value(Kind::NumberValue(f)))
            .boxed(),
        FeatureType::Int64 => (-1e6f64..1e6)
            .prop_map(|f| value(Kind::NumberValue(f.trunc())))
            .boxed(),
        FeatureType::Boolean => any::<bool>()
            .prop_map(|b| value(Kind::BoolValue(b)))
            .boxed(),
        FeatureType::String => prop_oneof![
            3 => "[a-z]{0,8}".prop_map(|x| s(&x)),
            // Either side of the ASCII check's 16 bytes, with a non-ASCII one now and then.
            2 => "[a-zé]{9,40}".prop_map(|x| s(&x)),
            1 => "[a-zé]{100,300}".prop_map(|x| s(&x)),
        ]
        .boxed(),
    };
    prop_oneof![
        20 => typed,
        2 => Just(value(Kind::NullValue(0))),
        1 => Just(Value { kind: None }),
        1 => Just(value(Kind::NumberValue(2.5))),
        1 => Just(s("x")),
        1 => Just(value(Kind::BoolValue(true))),
        1 => Just(list(vec![])),
    ]
    .boxed()
}

prop_compose! {
    /// A schema of 1–12 features of random types, binary or multiclass, maybe with
    /// `feature_orders`; and a few logs for it whose tables name the features in a random
    /// order, with undeclared columns and long strings.
    fn arb_case()(
        types in prop::collection::vec(prop::sample::select(TYPES.to_vec()), 1..12),
        multiclass in any::<bool>(),
        ordered in prop::bool::weighted(0.2),
        extra in 0usize..3,
    )(
        order in Just((0..types.len() + extra).collect::<Vec<_>>()).prop_shuffle(),
        rows in prop::collection::vec(
            (
                (0..types.len() + extra)
                    .map(|i| arb_cell(types.get(i).copied().unwrap_or(FeatureType::String)))
                    .collect::<Vec<_>>(),
                prop::collection::vec(prop_oneof![8 => (0f64..1.0).prop_map(|f| value(Kind::NumberValue(f))), 1 => Just(value(Kind::NullValue(0)))], 3),
                prop_oneof![4 => "[0-9]{1,4}", 1 => "[a-z]{120,200}"],
            ),
            0..4,
        ),
        drop_id in prop::bool::weighted(0.05),
        types in Just(types), multiclass in Just(multiclass), ordered in Just(ordered),
    ) -> (InferenceSchema, Vec<PredictionLog>) {
        let names: Vec<String> = (0..types.len()).map(|i| format!("feature_{i:02}")).collect();
        let all: Vec<String> = (0..order.len()).map(|i| names.get(i).cloned().unwrap_or(format!("extra_{i}"))).collect();
        let output = if multiclass {
            ModelOutput::Multiclass {
                prediction_score_columns: vec!["p_a".into(), "p_b".into(), "p_c".into()],
                class_labels: vec!["a".into(), "b".into(), "c".into()],
            }
        } else {
            ModelOutput::Binary {
                prediction_score_column: "p_a".into(),
                actual_score_column: None,
                positive_class_label: "yes".into(),
                negative_class_label: "no".into(),
                score_threshold: 0.5,
            }
        };
        let n_scores = if multiclass { 3 } else { 1 };
        let schema = InferenceSchema {
            feature_types: names.iter().cloned().zip(types.iter().copied()).collect(),
            model_prediction_output: output,
            session_id_column: "session_id".into(),
            row_id_column: "row_id".into(),
            feature_orders: if ordered { order.iter().map(|i| all[*i].clone()).collect() } else { vec![] },
        };
        let mut f_rows = Vec::new();
        let mut p_rows = Vec::new();
        let mut ids = Vec::new();
        for (cells, scores, id) in rows {
            f_rows.push(list(order.iter().map(|i| cells[*i].clone()).collect()));
            let scores: Vec<Value> = scores.into_iter().take(n_scores).collect();
            p_rows.push(if n_scores == 1 { scores[0].clone() } else { list(scores) });
            ids.push(s(&id));
        }
        if drop_id {
            ids.pop();
        }
        let mut f = Struct::default();
        if !ordered {
            f.fields.insert("columns".into(), list(order.iter().map(|i| s(&all[*i])).collect()));
        }
        f.fields.insert("data".into(), list(f_rows));
        let mut p = Struct::default();
        let score_names = ["p_a", "p_b", "p_c"];
        p.fields.insert("columns".into(), list(score_names[..n_scores].iter().map(|n| s(n)).collect()));
        p.fields.insert("data".into(), list(p_rows));
        p.fields.insert("row_ids".into(), list(ids));
        let log = PredictionLog {
            prediction_id: "session-with-a-fairly-long-id".into(),
            input: Some(ModelInput { features_table: Some(f), ..Default::default() }),
            output: Some(PbOutput { prediction_results_table: Some(p), ..Default::default() }),
            request_timestamp: Some(Timestamp { seconds: 1_700_000_000, nanos: 5_000 }),
            ..Default::default()
        };
        (schema, vec![log])
    }
}

proptest! {
    /// The word-wise ASCII check is `is_ascii` at every length up to 16 (and refuses longer
    /// slices), wherever the one non-ASCII byte is; `valid_utf8` built on it is `from_utf8`.
    #[test]
    fn ascii_short_is_is_ascii(
        b in prop::collection::vec(0u8..0x80, 0..40),
        high in prop::option::of((any::<prop::sample::Index>(), 0x80u8..=0xff)),
    ) {
        let mut b = b;
        if let (Some((i, v)), false) = (high, b.is_empty()) {
            let i = i.index(b.len());
            b[i] = v;
        }
        prop_assert_eq!(cells::ascii_short(&b), b.len() <= 16 && b.is_ascii());
        prop_assert_eq!(cells::valid_utf8(&b), std::str::from_utf8(&b).is_ok());
    }
}

proptest! {
    /// The one-pass read of a usual log's top level is the general walk's, and every log prost
    /// writes (fields in order) under 16 KiB takes it; on any bytes made from such a log by
    /// cutting, overwriting or inserting a byte (fields out of order, repeated, malformed),
    /// whatever the shortcut accepts is what the general walk reads.
    #[test]
    fn log_top_level_fast_path_agrees_with_the_general_path(
        (_, logs) in arb_case(),
        names in prop::collection::vec(prop_oneof![Just(String::new()), "[a-z0-9-]{1,20}", "\\PC{1,3}"], 4),
        version in prop_oneof![Just(0u32), any::<u32>()],
        at in (any::<i64>(), any::<i32>()),
        edit in prop::option::of((any::<prop::sample::Index>(), any::<u8>(), 0u8..3)),
    ) {
        let mut log = logs[0].clone();
        log.target_name = names[0].clone();
        log.project_name = names[1].clone();
        log.model_name = names[2].clone();
        log.model_version = names[3].clone();
        log.table_schema_version = version;
        log.request_timestamp = Some(Timestamp { seconds: at.0, nanos: at.1 });
        let mut b = log.encode_to_vec();
        if let Some((i, byte, how)) = edit {
            let i = i.index(b.len());
            match how {
                0 => b.truncate(i),
                1 => b[i] = byte,
                _ => b.insert(i, byte),
            }
        }
        let general = walk::walk_log_general(&b).ok();
        let fast = walk::log_usual(&b);
        if fast.is_some() {
            prop_assert_eq!(&fast, &general);
        }
        if edit.is_none() && b.len() < 16 << 10 {
            prop_assert!(fast.is_some(), "a log in field order not taken by the shortcut");
            prop_assert!(general.is_some());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn walker_matches_reference_on_random_schemas((schema, logs) in arb_case(), repeat in 1usize..3) {
        let layout = Arc::new(TableLayout::new(&schema, "9"));
        let mut d = Decoder::new(Arc::clone(&layout));
        let mut expected = Vec::new();
        // Repeated: the second time the column lists come from the cache.
        for _ in 0..repeat {
            for l in &logs {
                let bytes = l.encode_to_vec();
                let want = convert(&layout, &bytes);
                let got = d.decode(&bytes);
                prop_assert_eq!(want.is_ok(), got.is_ok(), "reference {:?} vs walker {:?}", want, got);
                if let Ok(rows) = want {
                    prop_assert_eq!(got.unwrap(), rows.len());
                    expected.extend(rows);
                }
                // The running size is the one over every column.
                prop_assert_eq!(d.str_bytes, d.str_bytes_counted());
                prop_assert_eq!(d.approx_bytes(), d.sizes().0);
                prop_assert_eq!(d.allocated_bytes(), d.sizes().1);
            }
        }
        prop_assert_eq!(batch_cells(&d.finish()), expected);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// `sizes` counts the held bytes over every column only when a buffer may have grown:
    /// after any mix of appended, rejected and taken-back logs and finished batches it equals
    /// the full count.
    #[test]
    fn sizes_equal_the_full_count_through_growth_rollbacks_and_batches(
        (schema, logs) in arb_case(),
        ops in prop::collection::vec(0u8..16, 1..300),
    ) {
        let layout = Arc::new(TableLayout::new(&schema, "9"));
        let mut d = Decoder::new(layout);
        let bytes: Vec<Vec<u8>> = logs.iter().map(|l| l.encode_to_vec()).collect();
        for op in ops {
            match op {
                0 => {
                    d.finish();
                }
                1 => d.truncate(d.rows() / 2),
                _ => {
                    let _ = d.decode(&bytes[usize::from(op) % bytes.len()]);
                }
            }
            // The running string bytes: through appends, rejected logs, rollbacks and batches.
            prop_assert_eq!(d.str_bytes, d.str_bytes_counted());
            let (data, held) = d.sizes();
            prop_assert_eq!(data, d.approx_bytes());
            prop_assert_eq!(held, d.allocated_bytes());
        }
    }
}

/// The cached count holds for exactly the room the buffers had: once every buffer has room for
/// `ROOM_ROWS` rows, a log of that many rows fits and one row more does not, and either way
/// `sizes` equals the full count.
#[test]
fn sizes_recount_one_row_past_the_room() {
    use super::columns::{ROOM_BYTES, ROOM_ROWS};
    use crate::batch::testing::{layout, log as log_of};
    let log = |rows: usize| log_of("s", rows, 0, 1_700_000_000_000_000);
    let layout = layout();
    // At most five string bytes a row (session id, row id, model version): the rows run out
    // first.
    const { assert!(5 * (ROOM_ROWS + 1) <= ROOM_BYTES) };
    for rows in [ROOM_ROWS, ROOM_ROWS + 1] {
        let mut d = Decoder::new(Arc::clone(&layout));
        d.decode(&log(1)).expect("valid");
        d.finish();
        // The next batch's first log, then a full count: every per-row buffer gets room for
        // exactly ROOM_ROWS more rows.
        d.decode(&log(1)).expect("valid");
        assert_eq!(
            grows_past_a_count(&mut d, &log(rows), rows),
            rows > ROOM_ROWS,
            "{rows} rows"
        );
    }
}

/// Counts `d`'s sizes, appends `log` (`rows` rows) and checks that `sizes` is the full count
/// then; whether a buffer grew.
fn grows_past_a_count(d: &mut Decoder, log: &[u8], rows: usize) -> bool {
    let (_, before) = d.sizes();
    assert_eq!(before, d.allocated_bytes());
    assert_eq!(d.decode(log).expect("valid"), rows);
    assert_eq!(
        d.sizes(),
        (d.approx_bytes(), d.allocated_bytes()),
        "{rows} rows"
    );
    d.allocated_bytes() > before
}

/// The NULL row numbers bound the rows between two full counts too: after a count, with room
/// in every other buffer, a log whose `x` is NULL in `ROOM_NULLS` rows fits their room and one
/// row more grows that list; either way `sizes` equals the full count.
#[test]
fn sizes_recount_one_null_past_the_null_room() {
    use super::columns::ROOM_NULLS;
    use crate::batch::testing::{layout, log as log_of};
    const MICROS: i64 = 1_700_000_000_000_000;
    // `x` is left out of the features' column list (`z` is not declared): NULL in every row.
    let null_x = |rows: usize| {
        let mut l = PredictionLog::decode(&log_of("s", rows, 0, MICROS)[..]).expect("a log");
        let table = l
            .input
            .as_mut()
            .and_then(|i| i.features_table.as_mut())
            .expect("a feature table");
        table
            .fields
            .insert("columns".to_string(), list(vec![s("z")]));
        l.encode_to_vec()
    };
    let layout = layout();
    for rows in [ROOM_NULLS, ROOM_NULLS + 1] {
        let mut d = Decoder::new(Arc::clone(&layout));
        // A first batch of 16 × ROOM_NULLS rows: the next one reserves that much room in every
        // value and string buffer at its first log, so only the NULL lists can run out.
        d.decode(&log_of("s", 16 * ROOM_NULLS, 0, MICROS))
            .expect("valid");
        d.finish();
        d.decode(&log_of("s", 1, 0, MICROS)).expect("valid");
        assert_eq!(
            grows_past_a_count(&mut d, &null_x(rows), rows),
            rows > ROOM_NULLS,
            "{rows} rows"
        );
    }
}

/// The layout of the 8-feature benchmark schema and a generator of its logs.
fn bench_8(seed: u64) -> (Arc<TableLayout>, crate::gen::Generator) {
    let schema = crate::gen::benchmark_schema(8);
    let opts = crate::gen::GenOptions {
        seed,
        ..Default::default()
    };
    (
        Arc::new(TableLayout::new(&schema, "1")),
        crate::gen::Generator::new(&schema, opts),
    )
}

/// A batch reserves what the last one held at its first log, so filling it to the same size
/// grows no buffer, also when the first log tried was rejected.
#[test]
fn a_batch_starts_with_the_room_the_last_one_needed() {
    let (layout, mut g) = bench_8(7);
    let logs: Vec<Vec<u8>> = (0..10_000)
        .map(|i| g.valid_log(i).encode_to_vec())
        .collect();
    // Rejected by its row (a string in the float64 feature_00), after every check of prepare.
    let mut bad = g.valid_log(0);
    let data = bad
        .input
        .as_mut()
        .and_then(|i| i.features_table.as_mut())
        .and_then(|t| t.fields.get_mut("data"));
    match data.and_then(|v| v.kind.as_mut()) {
        Some(Kind::ListValue(rows)) => match rows.values[0].kind.as_mut() {
            Some(Kind::ListValue(row)) => row.values[0] = s("x"),
            _ => panic!("a row is a list"),
        },
        _ => panic!("data is a list"),
    }
    let bad = bad.encode_to_vec();
    let mut d = Decoder::new(layout);
    for l in &logs {
        d.decode(l).expect("valid");
    }
    let first = d.finish();
    assert_eq!(first.num_rows(), 10_000);
    let full = first.get_array_memory_size();

    // A first log rejected by its rows (its buffers, over 64 KiB each, are given back): the
    // next first log still gets the room.
    assert_eq!(
        d.decode(&bad).map_err(|e| e.kind),
        Err(ErrorKind::TypeMismatch)
    );
    d.decode(&logs[0]).expect("valid");
    let reserved = d.allocated_bytes();
    for l in &logs[1..] {
        d.decode(l).expect("valid");
    }
    assert_eq!(d.allocated_bytes(), reserved, "a buffer grew");
    // (Counting may add the small room of `Col::room`, and counts it.)
    let (_, held) = d.sizes();
    assert_eq!(held, d.allocated_bytes());
    let second = d.finish();
    // What the second batch holds is what it needed, not a doubling past it.
    assert!(
        second.get_array_memory_size() <= full,
        "{} > {full}",
        second.get_array_memory_size()
    );
}

/// A batch a little larger than the last (batches flush at the log that crosses the size) fits
/// the eighth of room its first log reserved: no buffer doubles for its last rows.
#[test]
fn a_batch_a_little_past_the_last_one_grows_no_buffer() {
    let (layout, mut g) = bench_8(9);
    let logs: Vec<Vec<u8>> = (0..11_000)
        .map(|i| g.valid_log(i).encode_to_vec())
        .collect();
    let mut d = Decoder::new(layout);
    for l in &logs[..10_000] {
        d.decode(l).expect("valid");
    }
    d.finish();
    d.decode(&logs[0]).expect("valid");
    let reserved = d.allocated_bytes();
    for l in &logs[1..11_000] {
        d.decode(l).expect("valid");
    }
    assert_eq!(d.allocated_bytes(), reserved, "a buffer grew past its room");
}

/// `recycle` gives a written batch's buffers to the next batch: its values are written where
/// the last batch's were, it holds only its own rows (equal to a fresh decoder's batch), and a
/// buffer still shared elsewhere is not taken (its holder keeps its values).
#[test]
fn a_recycled_batch_is_refilled_in_place_with_only_the_new_rows() {
    let (layout, mut g) = bench_8(11);
    let logs: Vec<Vec<u8>> = (0..3_000).map(|i| g.valid_log(i).encode_to_vec()).collect();
    // Each column's buffer addresses (bits of boolean columns and NULL bitmaps are built anew).
    let addresses = |b: &RecordBatch| -> Vec<Vec<usize>> {
        b.columns()
            .iter()
            .map(|a| match a.data_type() {
                arrow_schema::DataType::Boolean => Vec::new(),
                _ => a
                    .to_data()
                    .buffers()
                    .iter()
                    .map(|x| x.as_ptr() as usize)
                    .collect(),
            })
            .collect()
    };
    let mut d = Decoder::new(Arc::clone(&layout));
    for l in &logs {
        d.decode(l).expect("valid");
    }
    let first = d.finish();
    let before = addresses(&first);
    let shared_col = FIRST_FEATURE; // float64 feature_00, kept by another holder
    let shared = Arc::clone(first.column(shared_col));
    let kept = shared.to_data();
    d.recycle(first);
    assert!(d.allocated_bytes() > 0, "nothing was taken back");

    let mut fresh = Decoder::new(layout);
    for l in &logs[1_000..2_000] {
        d.decode(l).expect("valid");
        fresh.decode(l).expect("valid");
    }
    let second = d.finish();
    assert_eq!(second, fresh.finish());
    let after = addresses(&second);
    for (c, (b, a)) in before.iter().zip(&after).enumerate() {
        if c == shared_col {
            assert_ne!(b, a, "column {c}: a shared buffer was taken");
        } else {
            assert_eq!(b, a, "column {c} was not refilled in place");
        }
    }
    assert_eq!(shared.to_data(), kept, "the other holder's values changed");
}

/// A log rejected at its second row, after its first row appended NULLs, leaves no NULL row
/// number behind: the rows around it keep their own NULLs and nothing else.
#[test]
fn a_rollback_takes_back_the_nulls_of_the_rejected_rows() {
    let schema = InferenceSchema {
        feature_types: vec![
            ("f_a".into(), FeatureType::Float64),
            ("f_b".into(), FeatureType::String),
            ("f_c".into(), FeatureType::Boolean),
        ],
        model_prediction_output: ModelOutput::Binary {
            prediction_score_column: "p".into(),
            actual_score_column: None,
            positive_class_label: "yes".into(),
            negative_class_label: "no".into(),
            score_threshold: 0.5,
        },
        session_id_column: "session_id".into(),
        row_id_column: "row_id".into(),
        feature_orders: vec![],
    };
    let null = || value(Kind::NullValue(0));
    let num = |f: f64| value(Kind::NumberValue(f));
    let log_of = |rows: Vec<Vec<Value>>, ids: Vec<Value>| {
        let mut f = Struct::default();
        f.fields
            .insert("columns".into(), list(vec![s("f_a"), s("f_b"), s("f_c")]));
        let n = rows.len();
        f.fields
            .insert("data".into(), list(rows.into_iter().map(list).collect()));
        let mut p = Struct::default();
        p.fields.insert("data".into(), list(vec![null(); n]));
        p.fields.insert("row_ids".into(), list(ids));
        PredictionLog {
            prediction_id: "s".into(),
            input: Some(ModelInput {
                features_table: Some(f),
                ..Default::default()
            }),
            output: Some(PbOutput {
                prediction_results_table: Some(p),
                ..Default::default()
            }),
            request_timestamp: Some(Timestamp {
                seconds: 1,
                nanos: 0,
            }),
            ..Default::default()
        }
        .encode_to_vec()
    };
    let good = log_of(
        vec![
            vec![null(), s("x"), value(Kind::BoolValue(true))],
            vec![num(1.5), null(), null()],
        ],
        vec![s("0"), s("1")],
    );
    let bad = log_of(
        vec![vec![null(), null(), null()], vec![null(), null(), null()]],
        vec![s("0"), num(1.0)],
    );
    let layout = Arc::new(TableLayout::new(&schema, "1"));
    let mut d = Decoder::new(Arc::clone(&layout));
    assert_eq!(d.decode(&good), Ok(2));
    assert_eq!(
        d.decode(&bad).unwrap_err().kind,
        ErrorKind::TypeMismatch,
        "rejected at the second row id"
    );
    assert_eq!(d.decode(&good), Ok(2));
    let mut want = convert(&layout, &good).unwrap();
    want.extend(convert(&layout, &good).unwrap());
    assert_eq!(batch_cells(&d.finish()), want);
}

/// Unknown fields at the top level (length-delimited ones take the one-byte-key shortcut,
/// others the general path) are skipped exactly once: the log decodes as without them, and as
/// the reference decodes it.
#[test]
fn unknown_top_level_fields_are_skipped_once() {
    let mut g = crate::gen::Generator::new(
        &crate::gen::benchmark_schema(6),
        crate::gen::GenOptions {
            rows_per_log: 2,
            seed: 5,
            ..Default::default()
        },
    );
    let layout = Arc::new(TableLayout::new(&crate::gen::benchmark_schema(6), "1"));
    let plain = g.next_log().bytes;
    // Field 7 (length 3), field 6 (varint), field 13 (length 0), field 15 (length 200).
    let mut unknown = vec![
        0x3a, 3, b'a', b'b', b'c', 0x30, 5, 0x6a, 0, 0x7a, 0xc8, 0x01,
    ];
    unknown.extend([7u8; 200]);
    let mut d = Decoder::new(Arc::clone(&layout));
    assert_eq!(d.decode(&plain), Ok(2));
    let want = batch_cells(&d.finish());
    for bytes in [
        [unknown.clone(), plain.clone()].concat(),
        [plain.clone(), unknown.clone()].concat(),
    ] {
        assert_eq!(
            convert(&layout, &bytes).expect("the reference skips them"),
            want
        );
        assert_eq!(d.decode(&bytes), Ok(2));
        assert_eq!(batch_cells(&d.finish()), want);
    }
}

#[test]
fn a_batch_over_the_string_limit_is_too_large_not_bad_input() {
    use super::cells::{cell_error, CellError};
    let col = crate::config::Column {
        name: "f".into(),
        ty: crate::config::ColumnType::String,
    };
    let refused = super::columns::too_much_string();
    let e = cell_error(
        CellError::Column(refused),
        "input.features_table",
        3,
        1,
        &col,
    );
    assert_eq!(e.kind, ErrorKind::TooLarge);
    assert!(
        e.reason.starts_with("input.features_table.data[3][1]")
            && e.reason.contains("2 GiB")
            && !e.reason.contains("UTF-8"),
        "{}",
        e.reason
    );
    let e = cell_error(CellError::Utf8, "input.features_table", 3, 1, &col);
    assert_eq!(e.kind, ErrorKind::InvalidValue);
}
