//! Table management over BigQuery's REST API (plain reqwest; rustls with ring).
//!
//! At start-up [`TableManager::ensure_table`] makes the table match the configuration, add-only:
//! - the dataset must exist (it is reported clearly, never created);
//! - a missing table is created from [`crate::table::bigquery_table_resource`] (DAY partitioning on
//!   `request_timestamp`, partition expiration from `ttl_days`) plus the configured clustering;
//! - an existing table gains the columns it lacks (NULLABLE, via `tables.patch`; with
//!   `emulator_compat` also `ALTER TABLE … ADD COLUMN`, which the emulator needs to alter its
//!   physical table), its partition expiration follows `ttl_days`, its clustering follows the
//!   configured one when one is configured;
//! - a column whose type differs is a configuration error naming the column and both types
//!   (`INT64`/`INTEGER`, `FLOAT64`/`FLOAT`, `BOOL`/`BOOLEAN` are the same type);
//! - the table carries the model identity in its labels ([`crate::table::IDENTITY_LABEL`]): a new
//!   table is created with it, an unlabelled one is labelled, and a table labelled for another
//!   model is a configuration error naming both (Merlin's table ids are not injective).
//!
//! Every path segment (project, dataset, table, job) is percent-encoded.
//!
//! Errors are matched on HTTP status and `reason`, never on message text. A `jobs.query` answered
//! with HTTP 200 and an `errors` list (the emulator's way) is a failure.

use super::metrics as m;
use super::TableRef;
use crate::auth::google::{AuthError, Credentials};
use serde_json::{json, Value};
use std::time::Duration;
use tracing::{info, warn};

/// REST client settings.
#[derive(Debug, Clone)]
pub struct RestOptions {
    /// Base URL up to and including `/bigquery/v2`.
    pub base_url: String,
    /// Bearer tokens; None for the emulator.
    pub credentials: Option<Credentials>,
    /// Also run `ALTER TABLE … ADD COLUMN` when adding columns (the emulator needs it).
    pub emulator_compat: bool,
    /// Per-request timeout.
    pub timeout: Duration,
}

/// What the table should look like.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSpec {
    /// The table.
    pub table: TableRef,
    /// Columns in order: name and REST type name.
    pub fields: Vec<(String, String)>,
    /// Partition expiration, if any.
    pub expiration_ms: Option<i64>,
    /// Clustering columns (empty: none).
    pub clustering: Vec<String>,
    /// The REST `Table` resource used to create the table.
    pub resource: Value,
}

impl TableSpec {
    /// From a REST `Table` resource as [`crate::table::bigquery_table_resource`] builds it, with
    /// the configured clustering columns.
    pub fn from_resource(mut resource: Value, clustering: &[String]) -> Result<Self, TableError> {
        let bad = |what: &str| TableError::Spec(format!("table resource lacks {what}"));
        let r = &resource["tableReference"];
        let table = TableRef {
            project: r["projectId"]
                .as_str()
                .ok_or_else(|| bad("tableReference.projectId"))?
                .to_string(),
            dataset: r["datasetId"]
                .as_str()
                .ok_or_else(|| bad("tableReference.datasetId"))?
                .to_string(),
            table: r["tableId"]
                .as_str()
                .ok_or_else(|| bad("tableReference.tableId"))?
                .to_string(),
        };
        let fields = resource["schema"]["fields"]
            .as_array()
            .ok_or_else(|| bad("schema.fields"))?
            .iter()
            .map(|f| {
                let name = f["name"].as_str().ok_or_else(|| bad("a field name"))?;
                let ty = f["type"].as_str().ok_or_else(|| bad("a field type"))?;
                Ok((name.to_string(), ty.to_string()))
            })
            .collect::<Result<Vec<_>, TableError>>()?;
        let expiration_ms = ms(&resource["timePartitioning"]["expirationMs"]);
        if !clustering.is_empty() {
            resource["clustering"] = json!({ "fields": clustering });
        }
        Ok(TableSpec {
            table,
            fields,
            expiration_ms,
            clustering: clustering.to_vec(),
            resource,
        })
    }

    /// The spec of the configured model's table.
    pub fn from_config(
        config: &crate::config::Config,
        sink: &crate::config::BigQuerySink,
    ) -> Result<Self, TableError> {
        let layout = crate::table::TableLayout::from_config(config);
        let resource =
            crate::table::bigquery_table_resource(&layout, &config.project, &config.model_id, sink);
        Self::from_resource(resource, &sink.clustering)
    }
}

fn ms(v: &Value) -> Option<i64> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

/// What [`TableManager::ensure_table`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EnsureReport {
    /// The table was created.
    pub created: bool,
    /// Columns added to an existing table.
    pub added_columns: Vec<String>,
    /// The partition expiration was changed from the first to the second value.
    pub expiration_changed: Option<(Option<i64>, Option<i64>)>,
    /// The clustering columns were changed.
    pub clustering_changed: bool,
    /// The table had no identity label and was given ours.
    pub labelled: bool,
    /// Things that could not be made to match and are left as they are.
    pub warnings: Vec<String>,
}

/// Table management failed.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The dataset does not exist.
    #[error("BigQuery dataset {project}:{dataset} does not exist (or is not visible to these credentials); create it, the publisher only creates tables")]
    DatasetMissing {
        /// Project.
        project: String,
        /// Dataset.
        dataset: String,
    },
    /// A column exists with another type.
    #[error("column {column:?} of table {table} is {existing} in BigQuery but the configuration makes it {wanted}; BigQuery cannot change a column's type: use a new column name or a new table")]
    TypeChanged {
        /// `project.dataset.table`.
        table: String,
        /// Column name.
        column: String,
        /// Type in BigQuery.
        existing: String,
        /// Type in the configuration.
        wanted: String,
    },
    /// A REQUIRED column the publisher does not write.
    #[error("column {column:?} of table {table} is REQUIRED but the publisher does not write it; make it NULLABLE")]
    RequiredNotWritten {
        /// `project.dataset.table`.
        table: String,
        /// Column name.
        column: String,
    },
    /// The table is labelled for another model (two identities map to one table id).
    #[error("table {table} belongs to another model: its labels say {theirs}, this publisher is for {ours}; two Merlin models map to the same table id, so give one of them another name (or another dataset)")]
    OtherModel {
        /// `project.dataset.table`.
        table: String,
        /// The owner recorded in the table's labels.
        theirs: String,
        /// This publisher's model.
        ours: String,
    },
    /// The table spec is malformed (a bug, not configuration).
    #[error("invalid table spec: {0}")]
    Spec(String),
    /// BigQuery answered with an error.
    #[error("BigQuery REST {op}: HTTP {status} {reason}: {message}")]
    Api {
        /// What was attempted.
        op: String,
        /// HTTP status.
        status: u16,
        /// `error.errors[0].reason` (or `error.status`).
        reason: String,
        /// `error.message`.
        message: String,
    },
    /// A query ran and failed.
    #[error("BigQuery query failed ({reason}): {message}")]
    Query {
        /// `errors[0].reason`.
        reason: String,
        /// `errors[0].message`.
        message: String,
    },
    /// Transport failure.
    #[error("BigQuery REST {0}: {1}")]
    Http(String, #[source] reqwest::Error),
    /// No token.
    #[error(transparent)]
    Auth(#[from] AuthError),
}

impl TableError {
    /// A configuration error: exit 2 at start-up, retrying cannot help.
    pub fn is_config_error(&self) -> bool {
        match self {
            TableError::DatasetMissing { .. }
            | TableError::OtherModel { .. }
            | TableError::TypeChanged { .. }
            | TableError::RequiredNotWritten { .. } => true,
            TableError::Api { status, .. } => matches!(status, 400 | 401 | 403 | 404),
            _ => false,
        }
    }
}

/// Result rows of a query: column names and values as BigQuery's JSON gives them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryResult {
    /// Column names.
    pub columns: Vec<String>,
    /// Rows; `None` for NULL.
    pub rows: Vec<Vec<Option<String>>>,
}

impl QueryResult {
    /// The single value of a one-row, one-column result.
    pub fn scalar(&self) -> Option<&str> {
        self.rows.first()?.first()?.as_deref()
    }
}

/// REST client for tables, datasets and queries.
#[derive(Debug, Clone)]
pub struct TableManager {
    http: reqwest::Client,
    opts: RestOptions,
}

/// BigQuery's type names, normalized (`INTEGER` → `INT64`, …).
pub fn normalize_type(t: &str) -> String {
    let u = t.to_ascii_uppercase();
    match u.as_str() {
        "INTEGER" => "INT64".into(),
        "FLOAT" => "FLOAT64".into(),
        "BOOLEAN" => "BOOL".into(),
        "RECORD" => "STRUCT".into(),
        "NUMERIC" | "DECIMAL" => "NUMERIC".into(),
        "BIGNUMERIC" | "BIGDECIMAL" => "BIGNUMERIC".into(),
        _ => u,
    }
}

impl TableManager {
    /// A client for `opts.base_url`.
    pub fn new(opts: RestOptions) -> Result<Self, TableError> {
        crate::sink::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(opts.timeout)
            .build()
            .map_err(|e| TableError::Http("client".into(), e))?;
        Ok(TableManager { http, opts })
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.opts.base_url.trim_end_matches('/'))
    }

    /// Sends one request; `Ok(None)` for 404, the JSON body for 2xx.
    async fn call(
        &self,
        op: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Option<Value>, TableError> {
        let mut rb = self.http.request(method, self.url(path));
        if let Some(c) = &self.opts.credentials {
            // `bearer_auth` marks the header sensitive (kept out of `Debug` and HPACK tables).
            rb = rb.bearer_auth(c.token().await?);
            if let Some(q) = c.quota_project() {
                rb = rb.header(crate::auth::google::QUOTA_PROJECT_HEADER, q);
            }
        }
        if let Some(b) = body {
            rb = rb.json(b);
        }
        let resp = rb
            .send()
            .await
            .map_err(|e| TableError::Http(op.into(), e))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| TableError::Http(op.into(), e))?;
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(Some(v));
        }
        if status.as_u16() == 404 {
            return Ok(None);
        }
        let err = &v["error"];
        let reason = err["errors"][0]["reason"]
            .as_str()
            .or_else(|| err["status"].as_str())
            .unwrap_or("")
            .to_string();
        let message = err["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| text.chars().take(500).collect());
        Err(TableError::Api {
            op: op.into(),
            status: status.as_u16(),
            reason,
            message,
        })
    }

    fn table_path(t: &TableRef) -> String {
        format!(
            "{}/tables/{}",
            dataset_path(&t.project, &t.dataset),
            seg(&t.table)
        )
    }

    /// `datasets.get`: None when missing.
    pub async fn get_dataset(
        &self,
        project: &str,
        dataset: &str,
    ) -> Result<Option<Value>, TableError> {
        self.call(
            "datasets.get",
            reqwest::Method::GET,
            &dataset_path(project, dataset),
            None,
        )
        .await
    }

    /// `datasets.insert` (tests and tooling; the publisher itself never creates datasets).
    /// An existing dataset is not an error.
    pub async fn create_dataset(&self, project: &str, dataset: &str) -> Result<(), TableError> {
        let body = json!({"datasetReference": {"projectId": project, "datasetId": dataset}});
        match self
            .call(
                "datasets.insert",
                reqwest::Method::POST,
                &format!("projects/{}/datasets", seg(project)),
                Some(&body),
            )
            .await
        {
            Err(TableError::Api { status: 409, .. }) | Ok(_) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `tables.get`: None when missing.
    pub async fn get_table(&self, t: &TableRef) -> Result<Option<Value>, TableError> {
        self.call(
            "tables.get",
            reqwest::Method::GET,
            &Self::table_path(t),
            None,
        )
        .await
    }

    async fn patch_table(&self, t: &TableRef, body: &Value) -> Result<Value, TableError> {
        self.call(
            "tables.patch",
            reqwest::Method::PATCH,
            &Self::table_path(t),
            Some(body),
        )
        .await?
        .ok_or_else(|| TableError::Api {
            op: "tables.patch".into(),
            status: 404,
            reason: "notFound".into(),
            message: format!("table {} disappeared", t.dotted()),
        })
    }

    /// Makes the table match `spec` (see the module docs).
    pub async fn ensure_table(&self, spec: &TableSpec) -> Result<EnsureReport, TableError> {
        let t = &spec.table;
        if self.get_dataset(&t.project, &t.dataset).await?.is_none() {
            return Err(TableError::DatasetMissing {
                project: t.project.clone(),
                dataset: t.dataset.clone(),
            });
        }
        let existing = match self.get_table(t).await? {
            Some(v) => v,
            None => {
                let path = format!("{}/tables", dataset_path(&t.project, &t.dataset));
                match self
                    .call(
                        "tables.insert",
                        reqwest::Method::POST,
                        &path,
                        Some(&spec.resource),
                    )
                    .await
                {
                    Ok(_) => {
                        info!(table = %t.dotted(), "created BigQuery table");
                        return Ok(EnsureReport {
                            created: true,
                            ..Default::default()
                        });
                    }
                    // Created concurrently (another replica): reconcile with what is there.
                    Err(TableError::Api { status: 409, .. }) => {
                        self.get_table(t).await?.ok_or_else(|| TableError::Api {
                            op: "tables.get".into(),
                            status: 404,
                            reason: "notFound".into(),
                            message: format!("table {} vanished after a 409", t.dotted()),
                        })?
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        self.reconcile(spec, &existing).await
    }

    async fn reconcile(
        &self,
        spec: &TableSpec,
        existing: &Value,
    ) -> Result<EnsureReport, TableError> {
        let t = &spec.table;
        let mut report = EnsureReport {
            labelled: self.check_owner(spec, existing).await?,
            ..EnsureReport::default()
        };
        let have: Vec<Value> = existing["schema"]["fields"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut missing = Vec::new();
        for (name, ty) in &spec.fields {
            match have.iter().find(|f| {
                f["name"]
                    .as_str()
                    .is_some_and(|n| crate::naming::same_column(n, name))
            }) {
                Some(f) => {
                    let existing_ty = f["type"].as_str().unwrap_or("");
                    if normalize_type(existing_ty) != normalize_type(ty)
                        || f["mode"].as_str() == Some("REPEATED")
                    {
                        let existing = match f["mode"].as_str() {
                            Some("REPEATED") => format!("REPEATED {existing_ty}"),
                            _ => existing_ty.to_string(),
                        };
                        return Err(TableError::TypeChanged {
                            table: t.dotted(),
                            column: name.clone(),
                            existing,
                            wanted: ty.clone(),
                        });
                    }
                }
                None => missing.push((name.clone(), ty.clone())),
            }
        }
        for f in &have {
            let name = f["name"].as_str().unwrap_or("");
            let written = spec
                .fields
                .iter()
                .any(|(n, _)| crate::naming::same_column(n, name));
            if !written && f["mode"].as_str() == Some("REQUIRED") {
                return Err(TableError::RequiredNotWritten {
                    table: t.dotted(),
                    column: name.to_string(),
                });
            }
        }
        if !missing.is_empty() {
            self.add_columns(t, &have, &missing).await?;
            report.added_columns = missing.into_iter().map(|(n, _)| n).collect();
        }

        let tp = &existing["timePartitioning"];
        let field = tp["field"].as_str();
        let wanted_field = spec.resource["timePartitioning"]["field"].as_str();
        if tp.is_null() || field != wanted_field {
            if spec.expiration_ms.is_some() {
                report.warnings.push(format!(
                    "table {} is partitioned {} instead of by DAY on {}; partitioning cannot be changed, expiration left as is",
                    t.dotted(),
                    field.map_or("not at all".to_string(), |f| format!("on {f}")),
                    wanted_field.unwrap_or("request_timestamp"),
                ));
            }
        } else if ms(&tp["expirationMs"]) != spec.expiration_ms {
            let mut new_tp = tp.clone();
            match spec.expiration_ms {
                Some(e) => new_tp["expirationMs"] = json!(e.to_string()),
                None => new_tp["expirationMs"] = Value::Null,
            }
            self.patch_table(t, &json!({ "timePartitioning": new_tp }))
                .await?;
            info!(table = %t.dotted(), from = ?ms(&tp["expirationMs"]), to = ?spec.expiration_ms, "updated partition expiration");
            report.expiration_changed = Some((ms(&tp["expirationMs"]), spec.expiration_ms));
        }

        if !spec.clustering.is_empty() {
            let have_cl: Vec<&str> = existing["clustering"]["fields"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let same = have_cl.len() == spec.clustering.len()
                && have_cl
                    .iter()
                    .zip(&spec.clustering)
                    .all(|(a, b)| crate::naming::same_column(a, b));
            if !same {
                self.patch_table(t, &json!({ "clustering": { "fields": spec.clustering } }))
                    .await?;
                info!(table = %t.dotted(), clustering = ?spec.clustering, "updated clustering (applies to new data)");
                report.clustering_changed = true;
            }
        }
        for w in &report.warnings {
            warn!("{w}");
        }
        Ok(report)
    }

    /// Refuses a table labelled for another model; labels an unlabelled one (returns true).
    async fn check_owner(&self, spec: &TableSpec, existing: &Value) -> Result<bool, TableError> {
        use crate::table::{IDENTITY_LABEL, MODEL_LABEL, PROJECT_LABEL};
        let wanted = &spec.resource["labels"];
        let Some(ours) = wanted[IDENTITY_LABEL].as_str() else {
            return Ok(false);
        };
        let have = &existing["labels"];
        let owner = |l: &Value, id: &str| {
            format!(
                "project {:?}, model {:?} (identity {id})",
                l[PROJECT_LABEL].as_str().unwrap_or("?"),
                l[MODEL_LABEL].as_str().unwrap_or("?"),
            )
        };
        match have[IDENTITY_LABEL].as_str() {
            Some(theirs) if theirs == ours => Ok(false),
            Some(theirs) => Err(TableError::OtherModel {
                table: spec.table.dotted(),
                theirs: owner(have, theirs),
                ours: owner(wanted, ours),
            }),
            None => {
                let mut labels = match have {
                    Value::Object(m) => m.clone(),
                    _ => serde_json::Map::new(),
                };
                if let Value::Object(w) = wanted {
                    labels.extend(w.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                self.patch_table(&spec.table, &json!({ "labels": labels }))
                    .await?;
                info!(table = %spec.table.dotted(), identity = ours, "labelled the table with this model's identity");
                Ok(true)
            }
        }
    }

    /// Adds NULLABLE columns (`tables.patch` with the full schema; with `emulator_compat` also
    /// `ALTER TABLE … ADD COLUMN`). Used at start-up and when BigQuery reports a schema mismatch.
    pub async fn add_columns(
        &self,
        t: &TableRef,
        have: &[Value],
        missing: &[(String, String)],
    ) -> Result<(), TableError> {
        let mut fields: Vec<Value> = have.to_vec();
        fields.extend(
            missing
                .iter()
                .map(|(n, ty)| json!({"name": n, "type": ty, "mode": "NULLABLE"})),
        );
        self.patch_table(t, &json!({ "schema": { "fields": fields } }))
            .await?;
        if self.opts.emulator_compat {
            for (n, ty) in missing {
                let sql = format!(
                    "ALTER TABLE `{}` ADD COLUMN `{n}` {}",
                    t.dotted(),
                    normalize_type(ty)
                );
                self.query(&t.project, &sql).await?;
            }
        }
        metrics::counter!(m::SCHEMA_EVOLUTIONS_TOTAL).increment(missing.len() as u64);
        info!(table = %t.dotted(), columns = ?missing.iter().map(|(n, _)| n).collect::<Vec<_>>(), "added columns");
        Ok(())
    }

    /// Runs a GoogleSQL query (`jobs.query`, `useInt64Timestamp`: TIMESTAMPs come back as integer
    /// microseconds on both BigQuery and the emulator) and waits for its rows.
    pub async fn query(&self, project: &str, sql: &str) -> Result<QueryResult, TableError> {
        let body = json!({
            "query": sql,
            "useLegacySql": false,
            "timeoutMs": 30000,
            "formatOptions": { "useInt64Timestamp": true },
        });
        let path = format!("projects/{}/queries", seg(project));
        let mut v = self
            .call("jobs.query", reqwest::Method::POST, &path, Some(&body))
            .await?
            .ok_or_else(|| TableError::Query {
                reason: "notFound".into(),
                message: "jobs.query returned 404".into(),
            })?;
        for _ in 0..60 {
            if let Some(e) = v["errors"].as_array().and_then(|a| a.first()) {
                return Err(TableError::Query {
                    reason: e["reason"].as_str().unwrap_or("").to_string(),
                    message: e["message"].as_str().unwrap_or("").to_string(),
                });
            }
            if v["jobComplete"].as_bool() != Some(false) {
                return Ok(parse_rows(&v));
            }
            let job = v["jobReference"]["jobId"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let mut p = format!(
                "projects/{}/queries/{}?timeoutMs=10000&formatOptions.useInt64Timestamp=true",
                seg(project),
                seg(&job)
            );
            if let Some(loc) = v["jobReference"]["location"].as_str() {
                p.push_str(&format!("&location={}", seg(loc)));
            }
            v = self
                .call("jobs.getQueryResults", reqwest::Method::GET, &p, None)
                .await?
                .unwrap_or(Value::Null);
        }
        Err(TableError::Query {
            reason: "timeout".into(),
            message: "query did not complete".into(),
        })
    }
}

/// One URL path segment, percent-encoded: a name holding `/`, `?`, `#`, spaces or non-ASCII
/// text always addresses the resource it names.
fn seg(s: &str) -> String {
    crate::naming::path_segment(s)
}

/// `projects/<p>/datasets/<d>`, every segment encoded.
fn dataset_path(project: &str, dataset: &str) -> String {
    format!("projects/{}/datasets/{}", seg(project), seg(dataset))
}

fn parse_rows(v: &Value) -> QueryResult {
    let columns = v["schema"]["fields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| f["name"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default();
    let rows = v["rows"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|r| {
                    r["f"]
                        .as_array()
                        .map(|cells| {
                            cells
                                .iter()
                                .map(|c| c["v"].as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default();
    QueryResult { columns, rows }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_spellings_are_one_type() {
        for (a, b) in [
            ("INT64", "INTEGER"),
            ("FLOAT64", "FLOAT"),
            ("BOOL", "BOOLEAN"),
            ("string", "STRING"),
        ] {
            assert_eq!(normalize_type(a), normalize_type(b));
        }
        assert_ne!(normalize_type("INT64"), normalize_type("FLOAT"));
    }

    #[test]
    fn spec_from_resource_reads_fields_and_expiration() {
        let r = json!({
            "tableReference": {"projectId": "p", "datasetId": "d", "tableId": "t"},
            "schema": {"fields": [{"name": "a", "type": "STRING", "mode": "NULLABLE"}]},
            "timePartitioning": {"type": "DAY", "field": "request_timestamp", "expirationMs": "86400000"},
        });
        let s = TableSpec::from_resource(r, &["a".to_string()]).unwrap();
        assert_eq!(s.table.dotted(), "p.d.t");
        assert_eq!(s.fields, [("a".to_string(), "STRING".to_string())]);
        assert_eq!(s.expiration_ms, Some(86_400_000));
        assert_eq!(s.resource["clustering"]["fields"][0], "a");
    }

    #[test]
    fn query_rows_are_parsed_with_nulls() {
        let v = json!({
            "jobComplete": true,
            "schema": {"fields": [{"name": "x"}, {"name": "y"}]},
            "rows": [{"f": [{"v": "1"}, {"v": null}]}],
        });
        let q = parse_rows(&v);
        assert_eq!(q.columns, ["x", "y"]);
        assert_eq!(q.rows, [vec![Some("1".to_string()), None]]);
        assert_eq!(q.scalar(), Some("1"));
    }

    #[test]
    fn config_errors_are_told_apart() {
        let e = TableError::TypeChanged {
            table: "p.d.t".into(),
            column: "amount".into(),
            existing: "STRING".into(),
            wanted: "FLOAT".into(),
        };
        assert!(e.is_config_error());
        assert!(
            e.to_string().contains("\"amount\"")
                && e.to_string().contains("STRING")
                && e.to_string().contains("FLOAT")
        );
        let e = TableError::Api {
            op: "x".into(),
            status: 503,
            reason: "backendError".into(),
            message: "m".into(),
        };
        assert!(!e.is_config_error());
    }
}
