//! The fake MaxCompute endpoint (tests/it/maxcompute/fake.py), itself checked against pyodps
//! 0.12.2's `ODPS` client (client.py): table lookup (404 NoSuchObject), SQL instances running
//! our DDL (create, alter add columns, insert … select, drop), Tunnel upload and download, and a
//! wrong secret refused. Then our signer and encoder write through it with plain HTTP.

use super::encode::{binary, block, plain, rows, Row};
use super::python;
use observation_publisher::sink::maxcompute::ddl::{
    add_columns_sql, create_table_sql, missing_columns, qualified, table_name, SQL_SETTINGS,
};
use observation_publisher::sink::maxcompute::encode::RecordEncoder;
use observation_publisher::sink::maxcompute::record::BlockWriter;
use observation_publisher::sink::maxcompute::schema::{OdpsType, TableColumn};
use observation_publisher::sink::maxcompute::sign::{
    authorization, http_date, Credentials, RequestToSign,
};
use observation_publisher::table::TableLayout;
use serde_json::{json, Value as Json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

pub(crate) const ACCESS_ID: &str = "LTAI5tFakeAccessId";
pub(crate) const SECRET: &str = "fake-secret-PLANTED-19";
pub(crate) const PROJECT: &str = "proj";
pub(crate) const DATASET: &str = "ds";

/// The fake, running under pyodps 0.12.2, with its fake STS (fake_sts.py); killed on drop.
pub(crate) struct Fake {
    child: Child,
    pub(crate) port: u16,
    /// The fake STS's port (`AssumeRoleWithOIDC`; its keys are accepted by the fake).
    pub(crate) sts_port: u16,
}

impl Fake {
    pub(crate) fn start() -> Fake {
        Self::start_with(ACCESS_ID, SECRET)
    }

    /// A fake that accepts the key pair `access_id`, `secret` (e.g. Merlin's fixture's).
    pub(crate) fn start_with(access_id: &str, secret: &str) -> Fake {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/maxcompute/fake.py");
        let mut child = Command::new(python("0.12"))
            .arg(script)
            .args([access_id, secret])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ports: Vec<u16> = line
            .split_whitespace()
            .map(|p| p.parse().unwrap_or_else(|_| panic!("fake said {line:?}")))
            .collect();
        let [port, sts_port] = ports[..] else {
            panic!("fake said {line:?}")
        };
        Fake {
            child,
            port,
            sts_port,
        }
    }

    /// Sets the fake STS (`POST /__fake/sts`: `mode` up, refuse or closed; `life` and `lives`
    /// of the keys it issues, in seconds) and returns its state (see [`Fake::sts_state`]).
    pub(crate) fn sts(&self, spec: Json) -> Json {
        let (status, body) = http(
            self.port,
            "POST",
            "/__fake/sts",
            &[],
            spec.to_string().as_bytes(),
        );
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).unwrap()
    }

    /// The fake STS's state: `calls` (each with `oidc_token`, `role_arn`, `key` issued, …),
    /// `keys` (id → `secret`, `token`, `expires`, accepted `requests`, `first_use`, `last_use`),
    /// `expired_refusals` and `token_refusals` of the fake MaxCompute.
    pub(crate) fn sts_state(&self) -> Json {
        self.dump("sts")
    }

    /// A test-only dump (`/__fake/tables`, `/__fake/instances`, `/__fake/log`).
    pub(crate) fn dump(&self, what: &str) -> Json {
        let (status, body) = http(self.port, "GET", &format!("/__fake/{what}"), &[], b"");
        assert_eq!(status, 200);
        serde_json::from_slice(&body).unwrap()
    }

    /// The SQL instances the fake has run (`sql`, `settings`, `ok`, polls still `running`, …).
    pub(crate) fn instances(&self) -> Vec<Json> {
        self.dump("instances")
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Lets every instance held by `hold_instances` terminate and runs every deferred one, in
    /// the order they were created (`POST /__fake/release`).
    pub(crate) fn release(&self) {
        let (status, body) = http(self.port, "POST", "/__fake/release", &[], b"");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }

    /// Arms faults for the next SQL instance whose statement matches `spec["match"]` (`POST
    /// /__fake/instance_faults`, see fake.py's INSTANCE_FAULTS: `defer`, `lost_answer`,
    /// `missing_polls`).
    pub(crate) fn arm_instance(&self, spec: Json) {
        let (status, body) = http(
            self.port,
            "POST",
            "/__fake/instance_faults",
            &[],
            spec.to_string().as_bytes(),
        );
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }

    /// Arms faults for the next requests (`POST /__fake/faults`, see fake.py's FAULTS).
    pub(crate) fn arm(&self, faults: Json) {
        let (status, body) = http(
            self.port,
            "POST",
            "/__fake/faults",
            &[],
            faults.to_string().as_bytes(),
        );
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }

    /// A request signed by our signer (`api`: control plane, else the tunnel).
    fn signed(
        &self,
        creds: &Credentials,
        method: &str,
        api: bool,
        target: &str,
        extra: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, Vec<u8>) {
        let date = http_date(std::time::SystemTime::now());
        let mut headers: Vec<(&str, &str)> = vec![("Date", &date)];
        headers.extend_from_slice(extra);
        let auth = authorization(
            creds,
            &RequestToSign {
                method,
                target,
                headers: &headers,
            },
        );
        headers.push(("Authorization", &auth));
        let full = if api {
            format!("/api{target}")
        } else {
            target.to_string()
        };
        http(self.port, method, &full, &headers, body)
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 exchange over a fresh connection (`Connection: close`).
pub(crate) fn http(
    port: u16,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut req = format!(
        "{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, raw[split + 4..].to_vec())
}

pub(super) fn columns(layout: &TableLayout) -> Vec<TableColumn> {
    TableColumn::from_layout(&layout.columns)
}

fn as_pairs(v: &Json) -> Vec<(String, String)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c[0].as_str().unwrap().to_string(),
                c[1].as_str().unwrap().to_uppercase(),
            )
        })
        .collect()
}

fn pairs(cols: &[TableColumn]) -> Vec<(String, String)> {
    cols.iter()
        .map(|c| (c.name.clone(), c.ty.name().to_string()))
        .collect()
}

/// Rows as the fake dumps them: column (lower case) → value.
pub(super) fn as_maps(layout: &TableLayout, rows: &[Row]) -> Vec<Json> {
    rows.iter()
        .map(|r| {
            let values = plain(layout, r);
            let mut m = serde_json::Map::new();
            for (c, v) in layout.columns.iter().zip(values) {
                m.insert(c.name.to_lowercase(), v);
            }
            Json::Object(m)
        })
        .collect()
}

/// The rows pyodps's writer can carry exactly (its writer is one second late on instants before
/// 1970 with a fraction: see encode.rs).
fn exact_rows() -> Vec<Row> {
    rows()
        .into_iter()
        .filter(|r| !r.ts.is_some_and(|us| us < 0 && us % 1_000_000 != 0))
        .collect()
}

#[test]
fn pyodps_client_runs_our_ddl_and_the_tunnel_on_the_fake() {
    let fake = Fake::start();
    let layout = binary();
    let all = columns(&layout);
    let target = table_name("my-project", "fraud.model");
    let staging = format!("{target}_staging");
    // Created with the columns of an older schema; the alter statement adds the rest.
    let older = &all[..all.len() - 2];
    let existing = pairs(older);
    let missing = missing_columns(&target, &existing, &all).unwrap();
    assert_eq!(missing, all[all.len() - 2..].to_vec());
    let names: Vec<String> = all.iter().map(|c| c.name.clone()).collect();
    let rows = exact_rows();
    let spec = json!({
        "port": fake.port, "access_id": ACCESS_ID, "secret": SECRET,
        "project": PROJECT, "dataset": DATASET, "target": target, "staging": staging,
        "create": create_table_sql(DATASET, &target, older),
        "alter": add_columns_sql(DATASET, &target, &missing),
        "staging_create": format!("{} lifecycle 1",
            create_table_sql(DATASET, &staging, &all).split("  auto partitioned").next().unwrap()),
        "insert": format!("insert into {} ( {} ) select {} from {}",
            qualified(DATASET, &target), names.join(","), names.join(","), qualified(DATASET, &staging)),
        "drop": format!("drop table {}", qualified(DATASET, &staging)),
        "columns": super::encode::odps_columns(&layout),
        "rows": rows.iter().map(|r| plain(&layout, r)).collect::<Vec<_>>(),
    });
    let stdout = super::pyodps_script("client.py", &spec);
    let seen: Json = serde_json::from_slice(&stdout).unwrap();

    assert_eq!(seen["missing"], true, "{seen}");
    assert_eq!(as_pairs(&seen["created"]), existing);
    assert_eq!(seen["partitions"], json!(["request_timestamp_pt"]));
    assert_eq!(as_pairs(&seen["altered"]), pairs(&all));
    let failed = seen["failed_sql"]
        .as_str()
        .expect("the repeated alter fails");
    assert!(failed.contains("already exists"), "{failed}");
    assert!(missing_columns(&target, &as_pairs(&seen["altered"]), &all)
        .unwrap()
        .is_empty());
    let expected: Vec<Json> = rows.iter().map(|r| json!(plain(&layout, r))).collect();
    assert_eq!(seen["read_back"], json!(expected));
    assert_eq!(seen["staging_exists_after_drop"], false);
    assert_eq!(seen["wrong_secret"], "SignatureNotMatch");

    let tables = fake.dump("tables");
    let key = format!("{PROJECT}.{DATASET}.{target}");
    assert_eq!(
        tables.as_object().unwrap().keys().collect::<Vec<_>>(),
        vec![&key],
        "only the target is left"
    );
    let stored: Vec<Json> = tables[&key]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let mut r = r.as_object().unwrap().clone();
            r.remove("request_timestamp_pt");
            Json::Object(r)
        })
        .collect();
    assert_eq!(stored, as_maps(&layout, &rows));
    assert_eq!(
        tables[&key]["ddl"],
        create_table_sql(DATASET, &target, older),
        "the fake ran our create statement"
    );
    let instances = fake.dump("instances");
    for instance in instances.as_array().unwrap() {
        for (k, v) in SQL_SETTINGS {
            assert_eq!(instance["settings"][k], *v, "{instance}");
        }
    }
    let failed: Vec<&Json> = instances
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["ok"] == false)
        .collect();
    assert_eq!(failed.len(), 1, "only the repeated alter fails: {failed:?}");
    let log = fake.dump("log");
    let refused: Vec<&Json> = log
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["signature_ok"] == false)
        .collect();
    assert!(!refused.is_empty());
    // The wrong-secret client's calls (its tenant lookup and the table lookup) and nothing else.
    let table_path = format!("/api/projects/{PROJECT}/tables/{target}");
    assert!(
        refused.iter().all(|e| {
            let path = e["path"].as_str().unwrap();
            path.starts_with(&table_path) || path.starts_with("/api/tenants")
        }),
        "only the wrong-secret calls are refused: {refused:?}"
    );
    let accepted = log.as_array().unwrap().len() - refused.len();
    assert!(accepted > 20, "{log}");
}

/// The SQL task body pyodps posts (odps/models/instances.py), settings as a JSON property.
fn instance_xml(sql: &str) -> String {
    observation_publisher::sink::maxcompute::wire::instance_xml(sql, SQL_SETTINGS)
}

#[test]
fn our_signer_and_encoder_write_through_the_fake() {
    let fake = Fake::start();
    let creds = Credentials::new(ACCESS_ID, SECRET);
    let layout = binary();
    let all = columns(&layout);
    let table = "direct";
    let create = create_table_sql(DATASET, table, &all);
    let create = create.split("  auto partitioned").next().unwrap();

    let xml = instance_xml(create);
    let (status, _) = fake.signed(
        &creds,
        "POST",
        true,
        &format!("/projects/{PROJECT}/instances?curr_project={PROJECT}"),
        &[("Content-Type", "application/xml")],
        xml.as_bytes(),
    );
    assert_eq!(status, 201);
    let (status, host) = fake.signed(
        &creds,
        "GET",
        true,
        &format!("/projects/{PROJECT}/tunnel?service&curr_project={PROJECT}"),
        &[],
        b"",
    );
    assert_eq!(status, 200);
    assert_eq!(
        String::from_utf8(host).unwrap(),
        format!("127.0.0.1:{}", fake.port)
    );

    let resource = format!("/projects/{PROJECT}/schemas/{DATASET}/tables/{table}");
    let tunnel = [
        ("x-odps-tunnel-version", "6"),
        ("odps-tunnel-date-transform", "v1"),
    ];
    let (status, session) = fake.signed(
        &creds,
        "POST",
        false,
        &format!("{resource}?uploads=1&curr_project={PROJECT}"),
        &tunnel,
        b"",
    );
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&session));
    let session: Json = serde_json::from_slice(&session).unwrap();
    let upload_id = session["UploadID"].as_str().unwrap().to_string();
    // The encoder is planned from the session's schema, as the sink will do.
    let table_columns: Vec<TableColumn> = session["Schema"]["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| TableColumn {
            name: c["name"].as_str().unwrap().to_string(),
            ty: OdpsType::parse(c["type"].as_str().unwrap()).unwrap(),
        })
        .collect();
    assert_eq!(table_columns, all);
    let enc = RecordEncoder::new(&table_columns, Arc::clone(&layout.arrow)).unwrap();
    let rows = rows();
    let batch = super::encode::batch(&layout, &rows);
    let mut w = BlockWriter::new();
    enc.write(&batch, 0..batch.num_rows(), &mut w);
    assert_eq!(w.records(), rows.len() as u64);
    let data = w.finish();
    assert_eq!(data, block(&layout, &rows));
    let put = |block_id: u32, data: &[u8]| {
        let mut headers = tunnel.to_vec();
        headers.push(("Content-Type", "application/octet-stream"));
        fake.signed(
            &creds,
            "PUT",
            false,
            &format!("{resource}?uploadid={upload_id}&blockid={block_id}&curr_project={PROJECT}"),
            &headers,
            data,
        )
    };
    let (status, body) = put(0, &data);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));

    // Signed with another secret: refused, and nothing of it is kept.
    let wrong = Credentials::new(ACCESS_ID, "not-the-secret");
    let (status, body) = fake.signed(
        &wrong,
        "POST",
        false,
        &format!("{resource}?uploadid={upload_id}&curr_project={PROJECT}"),
        &tunnel,
        b"",
    );
    assert_eq!(status, 403);
    assert!(String::from_utf8_lossy(&body).contains("SignatureNotMatch"));
    assert_eq!(
        fake.dump("tables")[format!("{PROJECT}.{DATASET}.{table}")]["rows"],
        json!([])
    );

    let (status, _) = fake.signed(
        &creds,
        "POST",
        false,
        &format!("{resource}?uploadid={upload_id}&curr_project={PROJECT}"),
        &tunnel,
        b"",
    );
    assert_eq!(status, 200);
    let stored = &fake.dump("tables")[format!("{PROJECT}.{DATASET}.{table}")]["rows"];
    assert_eq!(*stored, json!(as_maps(&layout, &rows)));
}

/// Merlin's own path (merlin_sink.py: Merlin's MaxComputeSink calls on pyodps 0.12.2) runs on the
/// fake: create with Merlin's text (the same as ours), a DATETIME temp table with lifecycle 1,
/// `INSERT … SELECT` with the cast, `DROP`. Its rows keep only milliseconds.
#[test]
fn merlins_path_runs_on_the_fake_and_keeps_milliseconds() {
    let fake = Fake::start();
    let layout = binary();
    let all = columns(&layout);
    let target = table_name("my-project", "fraud.model");
    // Merlin's path cannot carry NULL features; both rows are whole.
    let full = rows()[0].clone();
    let later = Row {
        ts: Some(1_764_623_000_999_999),
        session: Some("s-2"),
        f_int: Some(-3),
        f_bool: Some(false),
        score: Some(0.25),
        label: Some("ok"),
        ..full.clone()
    };
    let sent = [full, later];
    let spec = json!({
        "port": fake.port, "access_id": ACCESS_ID, "secret": SECRET,
        "project": PROJECT, "dataset": DATASET, "table": target,
        "columns": pairs(&all),
        "rows": sent.iter().map(|r| plain(&layout, r)).collect::<Vec<_>>(),
    });
    super::pyodps_script("merlin_sink.py", &spec);

    let tables = fake.dump("tables");
    let key = format!("{PROJECT}.{DATASET}.{target}");
    assert_eq!(
        tables.as_object().unwrap().keys().collect::<Vec<_>>(),
        vec![&key],
        "the temp table is dropped"
    );
    // Merlin's create statement is ours, character for character.
    assert_eq!(
        tables[&key]["ddl"],
        create_table_sql(DATASET, &target, &all)
    );
    let millis: Vec<Row> = sent
        .iter()
        .map(|r| Row {
            ts: r.ts.map(|us| us.div_euclid(1_000) * 1_000),
            ..r.clone()
        })
        .collect();
    let stored: Vec<Json> = tables[&key]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let mut r = r.as_object().unwrap().clone();
            assert_eq!(r.remove("request_timestamp_pt"), Some(json!("2025-12-01")));
            Json::Object(r)
        })
        .collect();
    assert_eq!(stored, as_maps(&layout, &millis));
    let instances = fake.dump("instances");
    let temp_ddl = instances
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["sql"].as_str().unwrap())
        .find(|sql| sql.starts_with("CREATE TABLE"))
        .expect("pyodps created the temp table by SQL");
    assert!(
        temp_ddl.contains("`request_timestamp` DATETIME"),
        "{temp_ddl}"
    );
    assert!(temp_ddl.contains("LIFECYCLE 1"), "{temp_ddl}");
}
