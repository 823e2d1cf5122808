//! An Arize outage holds the commit. The real binary, the real broker, the Parquet
//! local sink and the ARIZE sink pointed at the capturing server ([`super::server`]): while
//! Arize answers 503 the rows are in Parquet but the group's offsets do not move; once it
//! answers 200 every row reaches Arize exactly once and the offsets commit.

use crate::http_capture::{Captured, Reply, Server};
use crate::runtime::{
    committed_total, create_topic, expected_rows, logs, produce, stop, unique, wait_for, Setup,
};
use arrow_array::cast::AsArray;
use std::collections::BTreeSet;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(90);

/// The `_prediction_id` (`<session id>_<row id>`) of every row in an Arrow IPC stream body.
fn prediction_ids(body: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    for b in arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None).unwrap() {
        let b = b.unwrap();
        let col = b
            .column_by_name("_prediction_id")
            .expect("_prediction_id column");
        out.extend(
            col.as_string::<i32>()
                .iter()
                .map(|v| v.unwrap().to_string()),
        );
    }
    out
}

fn answered(reqs: &[Captured], status: u16) -> Vec<&Captured> {
    reqs.iter()
        .filter(|r| r.path.ends_with("/pandas_arrow") && r.answered == Some(status))
        .collect()
}

#[test]
fn an_arize_outage_holds_the_commit_until_arize_acknowledges() {
    let server = Server::start();
    // Arize is down: every request is answered 503 until the script is cleared.
    server.script(std::iter::repeat_n(Reply::Status(503, vec![]), 100_000));
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-arize");
    create_topic(&topic, 1);
    let n = 200;
    let input = logs(n, 31, 0.0);
    let extra = format!(
        "observation_sinks:\n- type: ARIZE\n  config:\n    api_key: k-1\n    space_key: s-2\n    uri: {}\n",
        server.uri()
    );
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), &extra);
    let child = s.start();
    produce(&topic, &input);

    // Parquet has every row, and Arize was tried (and retried) meanwhile...
    assert!(
        wait_for(LIMIT, || s.rows().len() == n),
        "Parquet has the rows while Arize fails\n{}",
        s.log_tail()
    );
    let seen = server.count();
    assert!(
        wait_for(LIMIT, || server.count() >= seen + 2),
        "the ARIZE sink retries\n{}",
        s.log_tail()
    );
    // ...but nothing is committed, and the publisher says it is not ready.
    assert_eq!(
        committed_total(&topic, &s.group, 1),
        0,
        "no offset commits while Arize has not acknowledged\n{}",
        s.log_tail()
    );
    // It says which sink fails and what the service answered.
    let (status, why) = s.get("/readyz").unwrap();
    assert_eq!(status, 503, "{why}");
    assert!(
        why.contains("a sink is failing: arize: Arize answered HTTP 503"),
        "{why}"
    );

    // Arize is back.
    server.unscript();
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &s.group, 1) == n as i64),
        "every offset commits once Arize acknowledges\n{}",
        s.log_tail()
    );
    let (status, why) = s.get("/readyz").unwrap();
    assert_eq!(status, 200, "ready again once Arize acknowledges: {why}");
    assert_eq!(stop(child), Some(0));

    let reqs = server.take();
    assert!(!answered(&reqs, 503).is_empty());
    let ids: Vec<String> = answered(&reqs, 200)
        .iter()
        .flat_map(|r| prediction_ids(&r.body))
        .collect();
    let distinct: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(ids.len(), n, "every row reached Arize exactly once");
    assert_eq!(distinct.len(), n);
    let want: BTreeSet<String> = expected_rows(&input, 31)
        .into_iter()
        .map(|(session, row)| format!("{session}_{row}"))
        .collect();
    assert_eq!(distinct.into_iter().cloned().collect::<BTreeSet<_>>(), want);
    assert_eq!(s.rows().len(), n, "Parquet wrote each row once");
    assert_eq!(s.dead_letters(), 0);
}
