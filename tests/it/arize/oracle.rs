//! The SDK and our sink, side by side: same rows, same server, compared field by field.

use super::*;
use crate::http_capture::{Captured, Server};
use arrow_array::RecordBatch;
use base64::Engine as _;
use observation_publisher::sink::arize::schema::pb;
use observation_publisher::sink::Sink;
use std::collections::BTreeMap;

/// Headers that belong to the HTTP client, not to the Arize protocol.
const TRANSPORT: [&str; 6] = [
    "host",
    "user-agent",
    "accept-encoding",
    "accept",
    "connection",
    "content-length",
];
/// Headers whose values name the client's language and version (they must exist).
const LANGUAGE: [&str; 3] = ["sdk-language", "language-version", "sdk-version"];

fn protocol_headers(c: &Captured) -> BTreeMap<String, String> {
    c.headers
        .iter()
        .filter(|(k, _)| !TRANSPORT.contains(&k.as_str()) && !LANGUAGE.contains(&k.as_str()))
        .cloned()
        .collect()
}

fn schema_of(b64: &str) -> pb::Schema {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    prost::Message::decode(bytes.as_slice()).unwrap()
}

fn table_of(body: &[u8]) -> (arrow_schema::SchemaRef, Vec<RecordBatch>) {
    let r = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(body.to_vec()), None)
        .unwrap();
    let schema = r.schema();
    (schema, r.map(|b| b.unwrap()).collect())
}

fn logs_for(model: Model) -> Vec<TestLog> {
    match model {
        Model::Ranking => vec![
            TestLog::new("sess-rank-1", 4, 3_600_000_000, 1),
            TestLog::new("sess-rank-2", 3, 1_800_000_000, 2),
        ],
        _ => vec![
            TestLog::new("sess-1", 3, 3_600_000_000, 1),
            TestLog::new("sess-2", 2, 1_800_000_000, 2),
        ],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_and_the_sink_send_the_same_requests_for_every_model_type() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    let now = SystemTime::now();
    let models = [Model::Binary, Model::Regression, Model::Ranking];

    // Ours first: one request per model (the batch is far under the size cap).
    let mut ours = Vec::new();
    for model in models {
        let cfg = model.config();
        let mut s = sink(&cfg, &server.uri(), 8 << 20);
        let report = s.write(batch(&cfg, &logs_for(model), now)).await.unwrap();
        assert_eq!(report.rejected, [], "{model:?}");
        let mut got = server.take();
        assert_eq!(got.len(), 1, "{model:?}");
        ours.push(got.remove(0));
    }

    // Then the SDK, in one Python process; it also decodes our requests with its own decoders.
    let mut decode = Vec::new();
    for (model, c) in models.iter().zip(&ours) {
        let path = dir.path().join(format!("{model:?}.arrows"));
        std::fs::write(&path, &c.body).unwrap();
        decode.push(json!({
            "name": format!("{model:?}"),
            "schema_b64": c.header("schema").unwrap(),
            "body_path": path,
        }));
    }
    let spec = json!({
        "uri": server.uri(),
        "cases": models.iter().map(|m| case(&format!("{m:?}"), *m, &logs_for(*m), now)).collect::<Vec<_>>(),
        "decode": decode,
    });
    let answer = oracle(dir.path(), &spec);
    let sdk = server.take();
    assert_eq!(sdk.len(), 3, "{answer}");

    for ((model, ours), (sdk, (sent, decoded))) in models.iter().zip(&ours).zip(
        sdk.iter().zip(
            answer["sent"]
                .as_array()
                .unwrap()
                .iter()
                .zip(answer["decoded"].as_array().unwrap()),
        ),
    ) {
        assert_eq!(sent["refused"], json!(false), "{model:?}: {sent}");
        // Request line.
        assert_eq!(
            (ours.method.as_str(), ours.path.as_str()),
            ("POST", "/v1/pandas_arrow")
        );
        assert_eq!(
            (sdk.method.as_str(), sdk.path.as_str()),
            ("POST", "/v1/pandas_arrow")
        );
        // Headers: the protocol's, names and values, are the same; the language ones exist.
        assert_eq!(protocol_headers(ours), protocol_headers(sdk), "{model:?}");
        for h in ["authorization", "space", "sync", "number-of-rows", "schema"] {
            assert!(ours.header(h).is_some(), "{model:?}: {h}");
        }
        assert_eq!(ours.header("authorization"), Some(API_KEY));
        assert_eq!(ours.header("space"), Some(SPACE_KEY));
        for h in LANGUAGE {
            assert!(ours.header(h).is_some() && sdk.header(h).is_some(), "{h}");
        }
        assert_eq!(ours.header("content-type"), None);
        assert_eq!(sdk.header("content-type"), None);
        // The schema protobuf, decoded by our prost types and by the SDK's public_pb2.
        let (s_ours, s_sdk) = (
            schema_of(ours.header("schema").unwrap()),
            schema_of(sdk.header("schema").unwrap()),
        );
        assert_eq!(s_ours, s_sdk, "{model:?}");
        assert_eq!(
            s_ours.constants.as_ref().unwrap().model_id,
            "proj-a-model-b"
        );
        let expected_type = match model {
            Model::Binary => "SCORE_CATEGORICAL",
            Model::Regression => "NUMERIC",
            Model::Ranking => "RANKING",
        };
        assert_eq!(decoded["schema"]["constants"]["model_type"], expected_type);
        assert_eq!(decoded["schema"]["constants"]["environment"], "PRODUCTION");
        // A narrow schema rides in the header only, as the SDK sends it.
        assert_eq!(decoded["metadata_schema"], "absent", "{model:?}");
        // The Arrow tables: names, order, types, values.
        let (sch_ours, b_ours) = table_of(&ours.body);
        let (sch_sdk, b_sdk) = table_of(&sdk.body);
        let fields = |s: &arrow_schema::SchemaRef| {
            s.fields()
                .iter()
                .map(|f| (f.name().clone(), f.data_type().clone(), f.is_nullable()))
                .collect::<Vec<_>>()
        };
        assert_eq!(fields(&sch_ours), fields(&sch_sdk), "{model:?}");
        for sch in [&sch_ours, &sch_sdk] {
            assert!(!sch.metadata().contains_key("arize-schema"), "{model:?}");
        }
        let t_ours = arrow_select::concat::concat_batches(&sch_ours, &b_ours).unwrap();
        let t_sdk = arrow_select::concat::concat_batches(&sch_sdk, &b_sdk).unwrap();
        assert_eq!(t_ours.num_rows(), t_sdk.num_rows());
        for (i, f) in sch_ours.fields().iter().enumerate() {
            assert_eq!(
                t_ours.column(i).to_data(),
                t_sdk.column(i).to_data(),
                "{model:?}: column {}",
                f.name()
            );
        }
        assert_eq!(decoded["rows"], json!(t_ours.num_rows()));
        let py_names: Vec<&str> = decoded["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f[0].as_str().unwrap())
            .collect();
        let names: Vec<&str> = sch_sdk.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(py_names, names);
        // The timestamp: timestamp[ns] without a zone, whole microseconds.
        let ts_type = &decoded["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f[0] == "request_timestamp")
            .unwrap()[1];
        assert_eq!(ts_type, "timestamp[ns]");
    }
}

/// Features of the wide model: names of ~21 characters, enough that the schema's base64 passes
/// the SDK's 63,000-byte header limit.
fn wide_features() -> Vec<String> {
    (0..2_500)
        .map(|i| format!("feature_wide_col_{i:05}"))
        .collect()
}

/// One log of one row of the wide model, as protobuf (for our decoder) and as the oracle's
/// case.
fn wide_log(features: &[String], now: SystemTime) -> (Vec<u8>, Json) {
    fn v(k: Kind) -> Value {
        Value { kind: Some(k) }
    }
    fn list(values: Vec<Value>) -> Value {
        v(Kind::ListValue(ListValue { values }))
    }
    let s = |x: &str| v(Kind::StringValue(x.into()));
    let table = |fields: Vec<(&str, Value)>| Struct {
        fields: fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    };
    let values: Vec<f64> = (0..features.len()).map(|i| i as f64 * 0.5).collect();
    let (seconds, nanos) = TestLog::new("sess-wide", 1, 3_600_000_000, 1).timestamp(now);
    let proto = PredictionLog {
        prediction_id: "sess-wide".into(),
        model_version: "3".into(),
        input: Some(ModelInput {
            features_table: Some(table(vec![
                ("columns", list(features.iter().map(|n| s(n)).collect())),
                (
                    "data",
                    list(vec![list(
                        values.iter().map(|x| v(Kind::NumberValue(*x))).collect(),
                    )]),
                ),
            ])),
            ..Default::default()
        }),
        output: Some(ModelOutput {
            prediction_results_table: Some(table(vec![
                ("columns", list(vec![s("score")])),
                ("data", list(vec![list(vec![v(Kind::NumberValue(0.25))])])),
                ("row_ids", list(vec![s("row-0")])),
            ])),
            ..Default::default()
        }),
        request_timestamp: Some(Timestamp { seconds, nanos }),
        ..Default::default()
    }
    .encode_to_vec();
    let case = json!({
        "name": "wide",
        "project": "proj-a",
        "model_id": "model-b",
        "model_version": "3",
        "api_key": API_KEY,
        "space_key": SPACE_KEY,
        "schema": {
            "feature_types": features.iter().map(|n| (n, "float64")).collect::<Vec<_>>(),
            "output": "regression",
            "score": "score",
            "session_id_column": "session_id",
            "row_id_column": "row_id",
        },
        "logs": [{
            "prediction_id": "sess-wide",
            "seconds": seconds,
            "nanos": nanos,
            "feature_columns": features,
            "feature_rows": [values],
            "prediction_columns": ["score"],
            "prediction_rows": [[0.25]],
            "row_ids": ["row-0"],
        }],
    });
    (proto, case)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wide_models_schema_rides_only_in_the_arrow_metadata_as_the_sdk_sends_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    let now = SystemTime::now();
    let features = wide_features();
    let yaml = format!(
        "project: proj-a\nmodel_id: model-b\nmodel_version: \"3\"\ninference_schema:\n  feature_types: {{{}}}\n  model_prediction_output: {{output_class: RegressionOutput, prediction_score_column: score, actual_score_column: ''}}\n",
        features
            .iter()
            .map(|n| format!("{n}: float64"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).unwrap();
    let cfg = Config::from_value(&v, Needs::CONVERT).unwrap().0;
    let (proto, case) = wide_log(&features, now);
    let layout = Arc::new(TableLayout::from_config(&cfg));
    let mut b = Batcher::new(layout, Batching::default());
    let mut ready = Vec::new();
    b.push(0, 0, &proto, Instant::now(), &mut ready).unwrap();
    let batch = Arc::new(b.flush().unwrap());

    let mut s = sink(&cfg, &server.uri(), 8 << 20);
    let report = s.write(batch).await.unwrap();
    assert_eq!(report.rejected, []);
    let ours = server.take().remove(0);
    let (sch_ours, _) = table_of(&ours.body);
    let meta_ours = sch_ours
        .metadata()
        .get("arize-schema")
        .expect("the wide schema in the Arrow metadata")
        .clone();
    assert!(meta_ours.len() > 63_000, "{}", meta_ours.len());

    let path = dir.path().join("wide.arrows");
    std::fs::write(&path, &ours.body).unwrap();
    let spec = json!({
        "uri": server.uri(),
        "cases": [case],
        "decode": [{"name": "wide", "schema_b64": meta_ours, "body_path": path}],
    });
    let answer = oracle(dir.path(), &spec);
    assert_eq!(answer["sent"][0]["refused"], json!(false), "{answer}");
    let sdk = server.take();
    assert_eq!(sdk.len(), 1, "{answer}");
    let sdk = &sdk[0];
    // Neither sends the header; both carry the same schema in the metadata.
    assert_eq!(ours.header("schema"), None);
    assert_eq!(sdk.header("schema"), None);
    assert_eq!(protocol_headers(&ours), protocol_headers(sdk));
    let (sch_sdk, _) = table_of(&sdk.body);
    let meta_sdk = sch_sdk
        .metadata()
        .get("arize-schema")
        .expect("SDK metadata");
    assert_eq!(schema_of(&meta_ours), schema_of(meta_sdk));
    assert_eq!(answer["decoded"][0]["metadata_schema"], "matches");
    let names = |s: &arrow_schema::SchemaRef| {
        s.fields()
            .iter()
            .map(|f| f.name().clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&sch_ours), names(&sch_sdk));
}

/// One check of `Validator.validate_values`: a log with one bad row.
struct Check {
    name: &'static str,
    model: Model,
    bad: TestLog,
    /// The bad row within the bad log.
    bad_row: usize,
    code: &'static str,
    /// For binary: the label Merlin's frame would carry for the bad row, overridden.
    label_override: Option<Json>,
}

fn checks() -> Vec<Check> {
    const DAY: i64 = 86_400_000_000;
    let one = |session: &str, ago: i64| TestLog::new(session, 1, ago, 5);
    let mut no_score = one("sess-bad", DAY);
    no_score.scores = vec![None];
    let mut rank_101 = TestLog::new("sess-101", 101, DAY, 6);
    // Distinct descending scores: row 100 gets rank 101.
    rank_101.scores = (0..101).map(|r| Some(1000.0 - r as f64)).collect();
    vec![
        Check {
            name: "timestamp_future",
            model: Model::Regression,
            bad: one("sess-bad", -400 * DAY),
            bad_row: 0,
            code: "arize_timestamp_range",
            label_override: None,
        },
        Check {
            name: "timestamp_past",
            model: Model::Regression,
            bad: one("sess-bad", (5 * 365 + 10) * DAY),
            bad_row: 0,
            code: "arize_timestamp_range",
            label_override: None,
        },
        Check {
            name: "prediction_id_length",
            model: Model::Regression,
            bad: one(&"x".repeat(600), DAY),
            bad_row: 0,
            code: "arize_prediction_id_length",
            label_override: None,
        },
        Check {
            name: "group_id_length",
            model: Model::Ranking,
            bad: one("", DAY),
            bad_row: 0,
            code: "arize_group_id_length",
            label_override: None,
        },
        Check {
            name: "rank_range",
            model: Model::Ranking,
            bad: rank_101,
            bad_row: 100,
            code: "arize_rank_range",
            label_override: None,
        },
        Check {
            name: "no_prediction_regression",
            model: Model::Regression,
            bad: no_score.clone(),
            bad_row: 0,
            code: "arize_no_prediction",
            label_override: None,
        },
        Check {
            name: "no_prediction_binary",
            model: Model::Binary,
            bad: no_score,
            bad_row: 0,
            code: "arize_no_prediction",
            // Our table keeps a NULL label for a NULL score (Merlin would label NaN "no").
            label_override: Some(json!([null])),
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_refuses_a_frame_for_one_bad_row_and_the_sink_letters_only_that_row() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    let now = SystemTime::now();
    let checks = checks();
    let mut cases = Vec::new();
    for c in &checks {
        let cfg = c.model.config();
        let good = TestLog::new("sess-good", 2, 60_000_000, 9);
        let logs = [good.clone(), c.bad.clone(), good];
        let b = batch(&cfg, &logs, now);
        let mut s = sink(&cfg, &server.uri(), 8 << 20);
        let report = s.write(Arc::clone(&b)).await.unwrap();
        let bad_batch_row = 2 + c.bad_row;
        let rejected: Vec<_> = report.rejected.iter().map(|r| (r.row, r.code)).collect();
        assert_eq!(rejected, [(bad_batch_row, c.code)], "{}", c.name);
        let sent = server.take();
        assert_eq!(sent.len(), 1, "{}", c.name);
        let (_, batches) = table_of(&sent[0].body);
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(rows, b.rows() - 1, "{}: the rest is sent", c.name);
        assert_eq!(
            sent[0].header("number-of-rows"),
            Some((b.rows() - 1).to_string().as_str())
        );
        let mut k = case(c.name, c.model, std::slice::from_ref(&c.bad), now);
        if let Some(l) = &c.label_override {
            k["label_override"] = l.clone();
        }
        cases.push(k);
    }
    // Control: the good log alone passes the SDK's validation for every model.
    for m in [Model::Binary, Model::Regression, Model::Ranking] {
        cases.push(case(
            &format!("control_{m:?}"),
            m,
            &[TestLog::new("sess-good", 2, 60_000_000, 9)],
            now,
        ));
    }
    let answer = oracle(dir.path(), &json!({"uri": server.uri(), "cases": cases}));
    let sent = answer["sent"].as_array().unwrap();
    for (c, r) in checks.iter().zip(sent) {
        assert_eq!(
            r["refused"],
            json!(true),
            "the SDK accepted {}: {r}",
            c.name
        );
    }
    for r in &sent[checks.len()..] {
        assert_eq!(r["refused"], json!(false), "{r}");
    }
    // Only the controls reached the server.
    assert_eq!(server.take().len(), 3);
}

/// A space named by its ID, as Arize's current SDK (7.40.1) names it: the same space headers,
/// the same values, and no `space` key header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_space_id_is_sent_as_the_current_sdk_sends_it() {
    const SPACE_ID: &str = "U3BhY2U6OTk5OmFiY2Q=";
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    let now = SystemTime::now();
    let model = Model::Regression;
    let cfg = model.config();
    let mut arize = arize_cfg(&server.uri(), 8 << 20);
    arize.space_key = String::new();
    arize.space_id = SPACE_ID.into();
    let mut s = observation_publisher::sink::arize::ArizeSink::new(&cfg, &arize).unwrap();
    let report = s.write(batch(&cfg, &logs_for(model), now)).await.unwrap();
    assert_eq!(report.rejected, []);
    let ours = server.take().remove(0);

    let mut c = case("space-id", model, &logs_for(model), now);
    c.as_object_mut().unwrap().remove("space_key");
    c["space_id"] = json!(SPACE_ID);
    let answer = oracle_current(dir.path(), &json!({"uri": server.uri(), "cases": [c]}));
    assert_eq!(answer["sent"][0]["refused"], json!(false), "{answer}");
    let sdk = server.take().remove(0);
    let space = |c: &Captured| -> BTreeMap<String, String> {
        c.headers
            .iter()
            .filter(|(k, _)| k.contains("space") || k == "authorization")
            .cloned()
            .collect()
    };
    assert_eq!(space(&ours), space(&sdk));
    assert_eq!(ours.header("arize-space-id"), Some(SPACE_ID));
    assert_eq!(ours.header("space_id"), Some(SPACE_ID));
    assert_eq!(ours.header("space"), None);
}
