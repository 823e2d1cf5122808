//! Table management against the emulator's REST API.

use super::*;
use observation_publisher::sink::bigquery::table::normalize_type;
use observation_publisher::sink::bigquery::{AppendWriter, TableError};

#[tokio::test]
async fn table_is_created_with_schema_partitioning_expiration_and_clustering() {
    let f = Fixture::with(
        "create",
        FEATURES,
        "    clustering: [merchant_id, model_version]",
    )
    .await;
    let t = f
        .tables
        .get_table(f.table())
        .await
        .expect("tables.get")
        .expect("table exists");
    assert_eq!(t["tableReference"]["tableId"], "prediction_log_it_fraud");
    let fields: Vec<(String, String, String)> = t["schema"]["fields"]
        .as_array()
        .expect("fields")
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or("").to_string();
            (s("name"), normalize_type(&s("type")), s("mode"))
        })
        .collect();
    let expected = [
        ("session_id", "STRING"),
        ("row_id", "STRING"),
        ("request_timestamp", "TIMESTAMP"),
        ("model_version", "STRING"),
        ("amount", "FLOAT64"),
        ("merchant_id", "STRING"),
        ("num_txn_24h", "INT64"),
        ("is_foreign", "BOOL"),
        ("prediction_score", "FLOAT64"),
        ("_prediction_label", "STRING"),
    ];
    assert_eq!(fields.len(), expected.len(), "{fields:?}");
    for ((name, ty, mode), (en, et)) in fields.iter().zip(expected) {
        assert_eq!(
            (name.as_str(), ty.as_str(), mode.as_str()),
            (en, et, "NULLABLE")
        );
    }
    assert_eq!(t["timePartitioning"]["type"], "DAY");
    assert_eq!(t["timePartitioning"]["field"], "request_timestamp");
    assert_eq!(
        t["timePartitioning"]["expirationMs"],
        (14 * 86_400_000u64).to_string()
    );
    assert_eq!(
        t["clustering"]["fields"],
        serde_json::json!(["merchant_id", "model_version"])
    );

    // Idempotent: a second start-up changes nothing.
    let again = f.tables.ensure_table(&f.spec).await.expect("ensure again");
    assert_eq!(again, Default::default());
}

#[tokio::test]
async fn changed_ttl_updates_partition_expiration() {
    let f = Fixture::new("ttl").await;
    let (config, sink) = super::config(&f.spec.table.dataset, FEATURES, "");
    let mut sink = sink;
    sink.ttl_days = 30;
    let spec = TableSpec::from_config(&config, &sink).expect("spec");
    let report = f.tables.ensure_table(&spec).await.expect("ensure");
    assert_eq!(
        report.expiration_changed,
        Some((Some(14 * 86_400_000), Some(30 * 86_400_000)))
    );
    let t = f
        .tables
        .get_table(f.table())
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(
        t["timePartitioning"]["expirationMs"],
        (30 * 86_400_000u64).to_string()
    );
    assert_eq!(
        t["timePartitioning"]["field"], "request_timestamp",
        "partitioning kept"
    );
}

#[tokio::test]
async fn an_extra_feature_adds_a_column_and_keeps_old_rows() {
    let f = Fixture::new("evolve").await;
    let writer = AppendWriter::start(
        storage(&grpc_url()),
        f.table(),
        Arc::clone(&f.layout.arrow),
        test_writer_options(),
    )
    .expect("writer");
    let old = f.batch(1, 10, 2);
    let out = writer
        .append(old)
        .await
        .expect("append")
        .await
        .expect("acked");
    assert_eq!(out.appended, 20);
    assert!(writer.close(Duration::from_secs(30)).await);

    // New model version: one more feature.
    let features = format!("{FEATURES}\n    country: string");
    let (config2, sink2) = super::config(&f.spec.table.dataset, &features, "");
    let spec2 = TableSpec::from_config(&config2, &sink2).expect("spec");
    let report = f.tables.ensure_table(&spec2).await.expect("evolved");
    assert_eq!(report.added_columns, ["country"]);
    let t = f
        .tables
        .get_table(f.table())
        .await
        .expect("get")
        .expect("exists");
    let last = t["schema"]["fields"]
        .as_array()
        .and_then(|a| a.last())
        .cloned()
        .expect("fields");
    assert_eq!(
        (last["name"].as_str(), last["mode"].as_str()),
        (Some("country"), Some("NULLABLE"))
    );

    let layout2 = Arc::new(TableLayout::from_config(&config2));
    let writer = AppendWriter::start(
        storage(&grpc_url()),
        f.table(),
        Arc::clone(&layout2.arrow),
        test_writer_options(),
    )
    .expect("writer");
    let new = batch_for(&layout2, &config2, 2, 5, 2);
    let out = writer
        .append(new)
        .await
        .expect("append")
        .await
        .expect("acked");
    assert_eq!(out.appended, 10);
    assert!(writer.close(Duration::from_secs(30)).await);

    assert_eq!(f.counts().await, (30, 30));
    let q = f
        .query("SELECT COUNTIF(country IS NULL), COUNTIF(country IS NOT NULL), COUNTIF(merchant_id IS NOT NULL) FROM {t}")
        .await;
    let v = |i: usize| {
        q.rows[0][i]
            .as_deref()
            .unwrap_or("")
            .parse::<u64>()
            .expect("count")
    };
    assert_eq!(v(0), 20, "old rows have NULL in the new column");
    assert!(
        v(1) >= 9,
        "new rows carry the new feature (≈1% generated NULLs)"
    );
    assert!(v(2) >= 28, "old columns intact");
    // Nothing more to do on the next start-up.
    assert_eq!(
        f.tables
            .ensure_table(&spec2)
            .await
            .expect("ensure")
            .added_columns,
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn a_changed_column_type_is_a_configuration_error() {
    let f = Fixture::new("typechange").await;
    let features = FEATURES.replace("num_txn_24h: int64", "num_txn_24h: string");
    let (config2, sink2) = super::config(&f.spec.table.dataset, &features, "");
    let spec2 = TableSpec::from_config(&config2, &sink2).expect("spec");
    let err = f
        .tables
        .ensure_table(&spec2)
        .await
        .expect_err("type change refused");
    assert!(err.is_config_error(), "{err}");
    let text = err.to_string();
    assert!(matches!(err, TableError::TypeChanged { .. }), "{text}");
    for part in [
        "\"num_txn_24h\"",
        "INTEGER",
        "STRING",
        f.table().dotted().as_str(),
    ] {
        assert!(text.contains(part), "{part:?} missing from: {text}");
    }
    // The same type under its other spelling is not a change.
    let mut spec3 = f.spec.clone();
    for (_, ty) in &mut spec3.fields {
        *ty = match ty.as_str() {
            "INTEGER" => "INT64".into(),
            "FLOAT" => "FLOAT64".into(),
            "BOOLEAN" => "BOOL".into(),
            other => other.into(),
        };
    }
    f.tables
        .ensure_table(&spec3)
        .await
        .expect("INT64 = INTEGER, FLOAT64 = FLOAT, BOOL = BOOLEAN");
}

#[tokio::test]
async fn a_missing_dataset_is_reported_not_created() {
    let _serial = serial().await;
    let (config, sink) = super::config(&fresh_name("nods"), FEATURES, "");
    let spec = TableSpec::from_config(&config, &sink).expect("spec");
    let err = manager().ensure_table(&spec).await.expect_err("no dataset");
    assert!(matches!(err, TableError::DatasetMissing { .. }), "{err}");
    assert!(err.is_config_error());
    assert!(err.to_string().contains(&sink.dataset), "{err}");
}

#[tokio::test]
async fn a_failed_query_in_a_200_body_is_an_error() {
    let _serial = serial().await;
    let err = manager()
        .query(PROJECT, "SELEC 1")
        .await
        .expect_err("syntax error");
    assert!(matches!(err, TableError::Query { .. }), "{err}");
    let ok = manager()
        .query(PROJECT, "SELECT 41 + 1")
        .await
        .expect("query");
    assert_eq!(ok.scalar(), Some("42"));
}

/// The table spec of `project`/`model` in `dataset` (otherwise the fixture's configuration).
fn spec_for(project: &str, model: &str, dataset: &str) -> TableSpec {
    let (mut c, sink) = config(dataset, FEATURES, "");
    c.project = project.into();
    c.model_id = model.into();
    TableSpec::from_config(&c, &sink).expect("spec")
}

#[tokio::test]
async fn a_table_labelled_for_another_model_is_refused_naming_both() {
    let _serial = serial().await;
    let dataset = fresh_name("owner");
    let tables = manager();
    tables.create_dataset(PROJECT, &dataset).await.unwrap();
    // Merlin's naming maps both identities to prediction_log_fraud_team_model.
    let ours = spec_for("fraud-team", "model", &dataset);
    let theirs = spec_for("fraud", "team-model", &dataset);
    assert_eq!(ours.table, theirs.table);

    assert!(tables.ensure_table(&ours).await.unwrap().created);
    let t = tables.get_table(&ours.table).await.unwrap().unwrap();
    assert_eq!(t["labels"]["merlin_project"], "fraud-team");
    assert_eq!(t["labels"]["merlin_model"], "model");
    let err = tables.ensure_table(&theirs).await.unwrap_err();
    assert!(matches!(err, TableError::OtherModel { .. }), "{err:?}");
    assert!(err.is_config_error(), "exit 2 at start-up");
    let text = err.to_string();
    for both in ["\"fraud-team\"", "\"model\"", "\"fraud\"", "\"team-model\""] {
        assert!(text.contains(both), "{both} in {text}");
    }
    // The owner itself still starts.
    let again = tables.ensure_table(&ours).await.unwrap();
    assert!(!again.created && !again.labelled, "{again:?}");
}

#[tokio::test]
async fn an_unlabelled_table_is_claimed_by_the_first_publisher() {
    let _serial = serial().await;
    let dataset = fresh_name("claim");
    let tables = manager();
    tables.create_dataset(PROJECT, &dataset).await.unwrap();
    let spec = spec_for("it", "fraud", &dataset);
    // A table as Merlin's publisher created it: no labels.
    let mut merlin = spec.resource.clone();
    merlin.as_object_mut().unwrap().remove("labels");
    let merlin = TableSpec::from_resource(merlin, &[]).unwrap();
    assert!(tables.ensure_table(&merlin).await.unwrap().created);

    let report = tables.ensure_table(&spec).await.unwrap();
    assert!(report.labelled, "{report:?}");
    let t = tables.get_table(&spec.table).await.unwrap().unwrap();
    assert_eq!(
        t["labels"]["observation-publisher-identity"],
        spec.resource["labels"]["observation-publisher-identity"]
    );
    let other = spec_for("it", "fraud-2", &dataset);
    let mut other = other.resource.clone();
    other["tableReference"] = spec.resource["tableReference"].clone();
    let other = TableSpec::from_resource(other, &[]).unwrap();
    assert!(matches!(
        tables.ensure_table(&other).await,
        Err(TableError::OtherModel { .. })
    ));
}

/// What reaches the wire (the emulator's HTTP stack decodes `%2F` before routing, so it cannot
/// show this): a server that records the raw request paths and answers 404.
#[tokio::test]
async fn rest_paths_are_percent_encoded() {
    use std::sync::{Arc, Mutex};
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = Arc::clone(&seen);
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let record = Arc::clone(&record);
        async move {
            record.lock().unwrap().push(req.uri().to_string());
            (
                axum::http::StatusCode::NOT_FOUND,
                r#"{"error":{"code":404,"errors":[{"reason":"notFound"}]}}"#,
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let tables = TableManager::new(RestOptions {
        base_url: format!("http://{addr}/bigquery/v2"),
        credentials: None,
        emulator_compat: false,
        timeout: Duration::from_secs(10),
    })
    .unwrap();
    // Unencoded, this dataset name would address table t of dataset d.
    assert_eq!(tables.get_dataset("p", "d/tables/t").await.unwrap(), None);
    let t = TableRef {
        project: "sam/ple".into(),
        dataset: "d".into(),
        table: "prediction_log_città model?x=1#y".into(),
    };
    assert_eq!(tables.get_table(&t).await.unwrap(), None);
    server.abort();
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "/bigquery/v2/projects/p/datasets/d%2Ftables%2Ft",
            "/bigquery/v2/projects/sam%2Fple/datasets/d/tables/prediction_log_citt%C3%A0%20model%3Fx%3D1%23y",
        ]
    );
}
