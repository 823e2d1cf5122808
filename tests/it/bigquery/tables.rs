//! Table management against the emulator's REST API.

use super::*;
use observation_publisher::bigquery::table::normalize_type;
use observation_publisher::bigquery::{AppendWriter, TableError};

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
