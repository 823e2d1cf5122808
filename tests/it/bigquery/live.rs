//! Against real BigQuery: run with
//! `OBS_PUBLISHER_LIVE_BQ_PROJECT=<project> OBS_PUBLISHER_LIVE_BQ_DATASET=<existing dataset>
//! cargo test --test it live -- --ignored` and Application Default Credentials
//! (`GOOGLE_APPLICATION_CREDENTIALS` or `gcloud auth application-default login`). It creates a
//! table `prediction_log_it_fraud` in that dataset (kept; 14-day partition expiration), appends 20
//! rows and reads them back. Not run in CI.

use super::*;
use observation_publisher::sink::bigquery::AppendWriter;

#[tokio::test]
#[ignore = "needs BigQuery credentials"]
async fn live_bigquery_round_trip() {
    let Ok(project) = std::env::var("OBS_PUBLISHER_LIVE_BQ_PROJECT") else {
        panic!("set OBS_PUBLISHER_LIVE_BQ_PROJECT (and OBS_PUBLISHER_LIVE_BQ_DATASET) to run the live test");
    };
    let dataset = std::env::var("OBS_PUBLISHER_LIVE_BQ_DATASET")
        .unwrap_or_else(|_| "observation_publisher_it".into());
    let (config, mut sink) = super::config(&dataset, FEATURES, "");
    sink.project = project.clone();
    sink.storage_endpoint = observation_publisher::config::DEFAULT_STORAGE_ENDPOINT.into();
    sink.rest_base_url = observation_publisher::config::DEFAULT_REST_BASE_URL.into();
    sink.auth = observation_publisher::config::BigQueryAuth::Adc;
    sink.emulator_compat = false;
    let (client, tables) = observation_publisher::sink::bigquery::connect(&sink)
        .await
        .expect("credentials");
    let spec = TableSpec::from_config(&config, &sink).expect("spec");
    tables.ensure_table(&spec).await.expect("table");
    let layout = Arc::new(TableLayout::from_config(&config));
    let w = AppendWriter::start(
        client,
        &spec.table,
        Arc::clone(&layout.arrow),
        Default::default(),
    )
    .expect("writer");
    let batch = batch_for(&layout, &config, fastrand::u64(..), 10, 2);
    let session = arrow_array::cast::AsArray::as_string::<i32>(batch.column(0))
        .value(0)
        .to_string();
    let out = w
        .append(batch)
        .await
        .expect("append")
        .await
        .expect("acknowledged");
    assert_eq!(out.appended, 20);
    assert!(w.close(Duration::from_secs(60)).await);
    let q = tables
        .query(
            &project,
            &format!(
                "SELECT COUNT(*) FROM `{}` WHERE session_id = '{session}'",
                spec.table.dotted()
            ),
        )
        .await
        .expect("query");
    assert_eq!(q.scalar(), Some("2"));
}
