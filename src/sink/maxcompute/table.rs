//! The MAXCOMPUTE sink's tables: the target (Merlin's, created or migrated at start) and this
//! process's staging table (its name, and the statements that fill, move and drop it). The
//! names and statements are pure; [`ensure_target`] and [`prepare_staging`] are the thin I/O.

use crate::sink::maxcompute::client::{CallError, Client};
use crate::sink::maxcompute::ddl::{self, qualified, quote_ident, SQL_SETTINGS};
use crate::sink::maxcompute::error::Class;
use crate::sink::maxcompute::schema::TableColumn;
use crate::sink::StartError;

/// MaxCompute's longest table name.
pub const MAX_TABLE_NAME: usize = 128;

/// Days a staging partition lives after its last change when nobody drops it (a crashed pod
/// that never comes back): the backstop behind the drop at a clean stop and at the next start
/// of the same pod. MaxCompute reclaims a partitioned table's partitions, not the empty table.
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

/// The staging table's partition column: the move epoch its rows were uploaded in. A move
/// copies one epoch's partition and then drops it, so a statement that runs late (an answer
/// lost, a process gone) can only touch the epoch it was written for, never rows staged later.
pub const EPOCH_COLUMN: &str = "_epoch";

/// Characters of the start stamp that ends every staging table's name: `_` + UTC
/// `YYYYMMDDhhmmss` + `_` + 6 hex digits of randomness.
pub const START_STAMP_LEN: usize = 22;

/// `instance` lower-cased with every character outside `[a-z0-9_]` as `_`.
fn sanitized(instance: &str) -> String {
    instance
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// What every staging table of this instance starts with: `<target>_stg_<instance>`. When a
/// name would pass [`MAX_TABLE_NAME`] the parts are cut and a hash of the whole added, so
/// distinct instances keep distinct prefixes. Each pod of a consumer group has its own (pod
/// names differ); a container restarted after a crash keeps its pod's name, so its start finds
/// the tables its earlier starts left ([`left_by_earlier_start`]).
pub fn staging_prefix(target: &str, instance: &str) -> String {
    let inst = sanitized(instance);
    let full = format!("{target}_stg_{inst}");
    if full.len() + START_STAMP_LEN <= MAX_TABLE_NAME {
        return full;
    }
    let tag = format!("_{:016x}", fnv(&full));
    let inst_cut: String = inst.chars().take(40).collect();
    let suffix = format!("_stg_{inst_cut}{tag}");
    let keep = MAX_TABLE_NAME - START_STAMP_LEN - suffix.len();
    let prefix: String = target.chars().take(keep).collect();
    format!("{prefix}{suffix}")
}

/// The start stamp of a process (pure): `_` + `unix_secs` as UTC `YYYYMMDDhhmmss` + `_` +
/// `random`'s low 24 bits as 6 hex digits.
pub fn start_stamp(unix_secs: u64, random: u32) -> String {
    let secs = unix_secs % 86_400;
    let (y, m, d) = crate::output::civil_from_days((unix_secs / 86_400) as i64);
    format!(
        "_{y:04}{m:02}{d:02}{:02}{:02}{:02}_{:06x}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        random & 0xff_ffff
    )
}

/// This process's staging table: [`staging_prefix`] + [`start_stamp`]. A name per process start,
/// so a statement an earlier process left running (or a crashed one's leftovers) never shares a
/// table with this one.
pub fn staging_table_name(target: &str, instance: &str, stamp: &str) -> String {
    format!("{}{stamp}", staging_prefix(target, instance))
}

/// Whether `name` is a staging table of an earlier start of the instance whose tables begin
/// with `prefix` ([`staging_prefix`]): the prefix followed by exactly a start stamp. Another
/// instance whose name merely begins like this one's (`pod-a` and `pod-a-2`) never matches.
pub fn left_by_earlier_start(name: &str, prefix: &str) -> bool {
    let Some(stamp) = name.strip_prefix(prefix) else {
        return false;
    };
    let b = stamp.as_bytes();
    b.len() == START_STAMP_LEN
        && b[0] == b'_'
        && b[1..15].iter().all(u8::is_ascii_digit)
        && b[15] == b'_'
        && b[16..]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// The staging table: our columns (TIMESTAMP keeps microseconds), partitioned by
/// [`EPOCH_COLUMN`], with a lifecycle as the backstop for the rows of a process that never
/// drops it.
pub fn create_staging_sql(dataset: &str, staging: &str, columns: &[TableColumn]) -> String {
    let cols = columns
        .iter()
        .map(|c| format!("{} {}", quote_ident(&c.name), c.ty))
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "create table {} ( {cols} ) partitioned by ( {EPOCH_COLUMN} STRING ) lifecycle {STAGING_LIFECYCLE_DAYS}",
        qualified(dataset, staging)
    )
}

/// The partition of epoch `epoch`, as SQL names it.
fn partition(epoch: u64) -> String {
    format!("partition ( {EPOCH_COLUMN}='{epoch}' )")
}

/// The partition of epoch `epoch`, as the Tunnel names it (pyodps sends the spec without
/// quotes: `TableUploadSession.normalize_partition_spec`).
pub fn tunnel_partition(epoch: u64) -> String {
    format!("{EPOCH_COLUMN}={epoch}")
}

/// Makes the partition uploads of `epoch` go into (idempotent: a copy run twice adds nothing).
pub fn add_partition_sql(dataset: &str, staging: &str, epoch: u64) -> String {
    format!(
        "alter table {} add if not exists {}",
        qualified(dataset, staging),
        partition(epoch)
    )
}

/// Moves epoch `epoch`'s staged rows into the target, our columns by name (the target may
/// have more, left NULL; its auto partition is computed by the service from
/// `request_timestamp`).
pub fn insert_sql(
    dataset: &str,
    target: &str,
    staging: &str,
    columns: &[TableColumn],
    epoch: u64,
) -> String {
    let cols = columns
        .iter()
        .map(|c| quote_ident(&c.name))
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "insert into {} ( {cols} ) select {cols} from {} where {EPOCH_COLUMN} = '{epoch}'",
        qualified(dataset, target),
        qualified(dataset, staging)
    )
}

/// Empties epoch `epoch` after its move: only that partition, so a copy of this statement
/// running late removes nothing staged since.
pub fn drop_partition_sql(dataset: &str, staging: &str, epoch: u64) -> String {
    format!(
        "alter table {} drop if exists {}",
        qualified(dataset, staging),
        partition(epoch)
    )
}

/// Drops a staging table (a clean stop, or what an earlier start of this instance left).
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

/// Prepares this process's staging table `staging` (its name begins with `prefix`, this
/// instance's [`staging_prefix`]): drops every table an earlier start of this instance left
/// (a container restarted after a crash keeps its pod's name; its earlier process is gone, and
/// every row it staged is either in the target already or uncommitted in Kafka, which delivers
/// it again: see docs/maxcompute.md), then creates ours with epoch 0's partition. Returns how
/// many tables were dropped. A refused column name ([`EPOCH_COLUMN`]) is a configuration error.
pub async fn prepare_staging(
    client: &Client,
    dataset: &str,
    prefix: &str,
    staging: &str,
    columns: &[TableColumn],
) -> Result<usize, StartError> {
    if let Some(c) = columns
        .iter()
        .find(|c| c.name.eq_ignore_ascii_case(EPOCH_COLUMN))
    {
        return Err(StartError::Config(format!(
            "MAXCOMPUTE sink: the model has a column named {:?}, the name of the staging \
             table's partition column; rename that feature or prediction column",
            c.name
        )));
    }
    let mut dropped = 0;
    for name in client.list_tables(prefix).await.map_err(start_error)? {
        if left_by_earlier_start(&name, prefix) && name != staging {
            client
                .run_sql(&drop_sql(dataset, &name), SQL_SETTINGS)
                .await
                .map_err(start_error)?;
            dropped += 1;
        }
    }
    for sql in [
        create_staging_sql(dataset, staging, columns),
        add_partition_sql(dataset, staging, 0),
    ] {
        client
            .run_sql(&sql, SQL_SETTINGS)
            .await
            .map_err(start_error)?;
    }
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::maxcompute::schema::OdpsType;
    use proptest::prelude::*;

    #[test]
    fn staging_names_are_per_start_bounded_and_found_by_their_instance() {
        let t = "prediction_log_p_m";
        let stamp = start_stamp(1_796_530_855, 0xa3f9c1);
        assert_eq!(stamp, "_20261206042055_a3f9c1");
        assert_eq!(stamp.len(), START_STAMP_LEN);
        let name = staging_table_name(t, "model-1-publisher-7d9f-abcde", &stamp);
        assert_eq!(
            name,
            "prediction_log_p_m_stg_model_1_publisher_7d9f_abcde_20261206042055_a3f9c1"
        );
        let prefix = staging_prefix(t, "model-1-publisher-7d9f-abcde");
        assert!(left_by_earlier_start(&name, &prefix));
        assert!(!left_by_earlier_start(&prefix, &prefix), "no stamp");
        assert!(!left_by_earlier_start(&format!("{name}x"), &prefix));
        let longer = staging_table_name(t, "model-1-publisher-7d9f-abcde-2", &stamp);
        assert!(!left_by_earlier_start(&longer, &prefix), "another pod's");
        assert_eq!(start_stamp(0, 0), "_19700101000000_000000");
        assert_eq!(
            start_stamp(951_827_696, 0xfff_ffff),
            "_20000229123456_ffffff"
        );
    }

    /// Distinct, non-empty instance names made of pod-name characters (long ones included),
    /// the second often the first with more after it (`pod-a`, `pod-a-2`).
    fn instances() -> impl Strategy<Value = (String, String)> {
        let one = "[a-zA-Z0-9._-]{1,90}";
        (one, one, any::<bool>())
            .prop_map(|(a, b, extend)| {
                let b = if extend { format!("{a}-{b}") } else { b };
                (a, b)
            })
            .prop_filter("distinct after sanitizing", |(a, b)| {
                sanitized(a) != sanitized(b)
            })
    }

    proptest! {
        /// Every name fits MaxCompute's limit, is found as its own instance's earlier start,
        /// and never as another instance's (so a start drops only its own pod's leftovers).
        #[test]
        fn staging_names_fit_and_never_match_another_instance(
            target_len in 1usize..128,
            (a, b) in instances(),
            secs in 0u64..4_102_444_800,
            random in any::<u32>(),
        ) {
            let target = format!("prediction_log_{}", "x".repeat(target_len));
            let stamp = start_stamp(secs, random);
            prop_assert_eq!(stamp.len(), START_STAMP_LEN);
            let (pa, pb) = (staging_prefix(&target, &a), staging_prefix(&target, &b));
            let (na, nb) = (
                staging_table_name(&target, &a, &stamp),
                staging_table_name(&target, &b, &stamp),
            );
            prop_assert!(na.len() <= MAX_TABLE_NAME && nb.len() <= MAX_TABLE_NAME, "{}", na);
            prop_assert!(na.starts_with(&target[..target.len().min(40)]), "{}", na);
            prop_assert!(left_by_earlier_start(&na, &pa));
            prop_assert!(left_by_earlier_start(&nb, &pb));
            prop_assert!(!left_by_earlier_start(&nb, &pa), "{} found as {}'s", nb, pa);
            prop_assert!(!left_by_earlier_start(&na, &pb), "{} found as {}'s", na, pb);
        }
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
            "create table ds.t_stg_a ( session_id STRING,request_timestamp TIMESTAMP,`has space` DOUBLE ) partitioned by ( _epoch STRING ) lifecycle 1"
        );
        assert_eq!(
            insert_sql("ds", "t", "t_stg_a", &cols, 7),
            "insert into ds.t ( session_id,request_timestamp,`has space` ) select session_id,request_timestamp,`has space` from ds.t_stg_a where _epoch = '7'"
        );
        assert_eq!(
            add_partition_sql("ds", "s", 8),
            "alter table ds.s add if not exists partition ( _epoch='8' )"
        );
        assert_eq!(
            drop_partition_sql("ds", "s", 7),
            "alter table ds.s drop if exists partition ( _epoch='7' )"
        );
        assert_eq!(tunnel_partition(7), "_epoch=7");
        assert_eq!(drop_sql("ds", "s"), "drop table if exists ds.s");
    }
}
