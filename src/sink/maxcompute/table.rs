//! The MAXCOMPUTE sink's tables: the target (Merlin's, created or migrated at start) and this
//! process's staging table (its name, and the statements that fill, move and drop it). The
//! names and statements are pure; [`ensure_target`] and [`reset_staging`] are the thin I/O.

use crate::sink::maxcompute::client::{CallError, Client};
use crate::sink::maxcompute::ddl::{self, qualified, quote_ident, SQL_SETTINGS};
use crate::sink::maxcompute::error::Class;
use crate::sink::maxcompute::schema::TableColumn;
use crate::sink::StartError;

/// MaxCompute's longest table name.
pub const MAX_TABLE_NAME: usize = 128;

/// Days a staging table lives after its last change when nobody drops it (a crashed pod that
/// never comes back): the backstop behind the drop at a clean stop and at the next start.
pub const STAGING_LIFECYCLE_DAYS: u32 = 1;

/// The instance's name in staging table names: `POD_NAME` when set, else `HOSTNAME` (in
/// Kubernetes the pod's name, which a container restarted after a crash keeps), else the
/// kernel's host name (`/proc/sys/kernel/hostname`: shells do not always export `HOSTNAME`),
/// else `local`. `env` reads a variable; the host name file is read only when both are unset.
pub fn instance_name(env: impl Fn(&str) -> Option<String>) -> String {
    ["POD_NAME", "HOSTNAME"]
        .into_iter()
        .filter_map(env)
        .chain(std::iter::once_with(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default()
        }))
        .map(|v| v.trim().to_string())
        .find(|v| !v.is_empty())
        .unwrap_or_else(|| "local".to_string())
}

/// FNV-1a, 64 bits: a stable short tag for names cut to fit (no cryptographic need).
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// This instance's staging table: `<target>_stg_<instance>`, the instance lower-cased with
/// every character outside `[a-z0-9_]` as `_`. Each pod of a consumer group has its own (pod
/// names differ); a restarted container keeps its pod's name, so it finds the table a crash
/// left. When the name would pass [`MAX_TABLE_NAME`], the parts are cut and a hash of the
/// whole added, so distinct instances keep distinct names.
pub fn staging_table_name(target: &str, instance: &str) -> String {
    let inst: String = instance
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let full = format!("{target}_stg_{inst}");
    if full.len() <= MAX_TABLE_NAME {
        return full;
    }
    let tag = format!("_{:016x}", fnv(&full));
    let inst_cut: String = inst.chars().take(40).collect();
    let suffix = format!("_stg_{inst_cut}{tag}");
    let keep = MAX_TABLE_NAME - suffix.len();
    let prefix: String = target.chars().take(keep).collect();
    format!("{prefix}{suffix}")
}

/// The staging table: our columns (TIMESTAMP keeps microseconds), no partition, a lifecycle as
/// the backstop.
pub fn create_staging_sql(dataset: &str, staging: &str, columns: &[TableColumn]) -> String {
    let cols = columns
        .iter()
        .map(|c| format!("{} {}", quote_ident(&c.name), c.ty))
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "create table {} ( {cols} ) lifecycle {STAGING_LIFECYCLE_DAYS}",
        qualified(dataset, staging)
    )
}

/// Moves every staged row into the target, our columns by name (the target may have more,
/// left NULL; its auto partition is computed by the service from `request_timestamp`).
pub fn insert_sql(dataset: &str, target: &str, staging: &str, columns: &[TableColumn]) -> String {
    let cols = columns
        .iter()
        .map(|c| quote_ident(&c.name))
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "insert into {} ( {cols} ) select {cols} from {}",
        qualified(dataset, target),
        qualified(dataset, staging)
    )
}

/// Empties the staging table after a move.
pub fn truncate_sql(dataset: &str, staging: &str) -> String {
    format!("truncate table {}", qualified(dataset, staging))
}

/// Drops the staging table (a clean stop, or what a crash left at start).
pub fn drop_sql(dataset: &str, staging: &str) -> String {
    format!("drop table if exists {}", qualified(dataset, staging))
}

/// A failed start-up call: a retryable one is retried by the caller (`run` waits while the
/// service is unavailable), anything else ends the process with exit 2.
fn start_error(e: CallError) -> StartError {
    if e.class == Class::Retry {
        StartError::Unavailable(e.to_string())
    } else {
        StartError::Config(e.to_string())
    }
}

/// How often the target is read again after a DDL statement failed: publishers of one model
/// start together (a rollout, a scale-up), so another one may create the table or add the
/// columns between our read and our statement, and its "already exists" is then no fault.
const DDL_RACE_READS: usize = 2;

/// Creates the target with Merlin's DDL when it is missing, or adds the columns it lacks; a
/// changed type is a configuration error naming the column. A statement that fails is judged on
/// the table as it is now: when another instance made the change first, that is success.
pub async fn ensure_target(
    client: &Client,
    dataset: &str,
    target: &str,
    columns: &[TableColumn],
) -> Result<&'static str, StartError> {
    let mut raced = 0;
    loop {
        let (sql, outcome) = match client.table(target).await.map_err(start_error)? {
            None => (ddl::create_table_sql(dataset, target, columns), "created"),
            Some(existing) => {
                let have: Vec<(String, String)> = existing
                    .iter()
                    .map(|c| (c.name.clone(), c.ty.name().to_string()))
                    .collect();
                let missing = ddl::missing_columns(&format!("{dataset}.{target}"), &have, columns)
                    .map_err(|e| StartError::Config(e.to_string()))?;
                if missing.is_empty() {
                    return Ok(if raced == 0 {
                        "unchanged"
                    } else {
                        "changed by another instance"
                    });
                }
                (
                    ddl::add_columns_sql(dataset, target, &missing),
                    "columns added",
                )
            }
        };
        match client.run_sql(&sql, SQL_SETTINGS).await {
            Ok(_) => return Ok(outcome),
            Err(e) if e.class != Class::Retry && raced < DDL_RACE_READS => {
                tracing::info!(
                    table = %target,
                    error = %e,
                    "a table statement failed; reading the table again, another instance may have changed it first"
                );
                raced += 1;
            }
            Err(e) => return Err(start_error(e)),
        }
    }
}

/// Drops the staging table a crash may have left (its rows are either in the target already
/// or not committed in Kafka, see docs/maxcompute.md) and creates it empty. Returns whether
/// one was there.
pub async fn reset_staging(
    client: &Client,
    dataset: &str,
    staging: &str,
    columns: &[TableColumn],
) -> Result<bool, StartError> {
    let left = client.table(staging).await.map_err(start_error)?.is_some();
    if left {
        client
            .run_sql(&drop_sql(dataset, staging), SQL_SETTINGS)
            .await
            .map_err(start_error)?;
    }
    client
        .run_sql(&create_staging_sql(dataset, staging, columns), SQL_SETTINGS)
        .await
        .map_err(start_error)?;
    Ok(left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::maxcompute::schema::OdpsType;

    #[test]
    fn staging_names_are_per_instance_bounded_and_distinct() {
        let t = "prediction_log_p_m";
        assert_eq!(
            staging_table_name(t, "model-1-publisher-7d9f-abcde"),
            "prediction_log_p_m_stg_model_1_publisher_7d9f_abcde"
        );
        assert_ne!(
            staging_table_name(t, "pod-a"),
            staging_table_name(t, "pod-b")
        );
        let long_t = "prediction_log_".to_string() + &"x".repeat(120);
        let a = staging_table_name(&long_t, &("pod-".to_string() + &"a".repeat(60) + "1"));
        let b = staging_table_name(&long_t, &("pod-".to_string() + &"a".repeat(60) + "2"));
        assert!(
            a.len() <= MAX_TABLE_NAME && b.len() <= MAX_TABLE_NAME,
            "{a}"
        );
        assert_ne!(a, b, "cut names keep the instances apart");
        assert!(a.starts_with("prediction_log_x"), "{a}");
    }

    #[test]
    fn instance_prefers_pod_name_then_hostname() {
        let env = |pod: Option<&str>, host: Option<&str>| {
            let (pod, host) = (pod.map(String::from), host.map(String::from));
            instance_name(move |k| {
                if k == "POD_NAME" {
                    pod.clone()
                } else {
                    host.clone()
                }
            })
        };
        assert_eq!(env(Some("p1"), Some("h1")), "p1");
        assert_eq!(env(Some(" "), Some("h1")), "h1");
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "local".into());
        assert_eq!(env(None, None), host);
    }

    #[test]
    fn statements() {
        let cols = [
            TableColumn {
                name: "session_id".into(),
                ty: OdpsType::String,
            },
            TableColumn {
                name: "request_timestamp".into(),
                ty: OdpsType::Timestamp,
            },
            TableColumn {
                name: "has space".into(),
                ty: OdpsType::Double,
            },
        ];
        assert_eq!(
            create_staging_sql("ds", "t_stg_a", &cols),
            "create table ds.t_stg_a ( session_id STRING,request_timestamp TIMESTAMP,`has space` DOUBLE ) lifecycle 1"
        );
        assert_eq!(
            insert_sql("ds", "t", "t_stg_a", &cols),
            "insert into ds.t ( session_id,request_timestamp,`has space` ) select session_id,request_timestamp,`has space` from ds.t_stg_a"
        );
        assert_eq!(truncate_sql("ds", "s"), "truncate table ds.s");
        assert_eq!(drop_sql("ds", "s"), "drop table if exists ds.s");
    }
}
