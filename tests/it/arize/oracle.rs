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
        assert_eq!(decoded["metadata_schema_matches"], json!(true));
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
