//! Command-line interface (clap derive). Each subcommand is a thin shell over library code.

use crate::config::LogFormat;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Publishes Merlin prediction logs from Kafka into BigQuery, and deploys one publisher per
/// model version.
#[derive(Debug, Parser)]
#[command(
    name = "observation-publisher",
    version,
    about,
    propagate_version = true
)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Options every config-reading command shares.
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    /// The publisher configuration (Merlin's YAML, optionally with the publisher's own sections).
    #[arg(long, short = 'c', env = "OBS_PUBLISHER_CONFIG")]
    pub config: PathBuf,
    /// Override one key: `--set batching.max_rows=1000` (repeatable; wins over env and file).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the publisher: Kafka → decode → batch → sinks → commit.
    Run(RunArgs),
    /// Convert length-delimited PredictionLogs into table rows (jsonl, parquet or arrow).
    Convert(ConvertArgs),
    /// Write synthetic, realistic PredictionLogs for the configured schema (length-delimited).
    Gen(GenArgs),
    /// Print what a configured sink creates or sends: the BigQuery table resource (REST JSON),
    /// the MaxCompute DDL, or the Arize schema (JSON).
    Schema(SchemaArgs),
    /// Validate the configuration and print it resolved, secrets redacted.
    CheckConfig(ConfigOnlyArgs),
    /// Produce a length-delimited file of logs into a Kafka topic (demo, tests, benchmarks).
    Produce(ProduceArgs),
    /// Deploy, inspect or remove the publisher of one model version on Kubernetes.
    Bootstrap(crate::bootstrap::BootstrapArgs),
}

/// `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Configuration.
    #[command(flatten)]
    pub cfg: ConfigArgs,
    /// Read a length-delimited dump instead of Kafka (backfills, DLQ replay, benchmarks).
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// Log format (overrides `logging.format`).
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
}

/// Output formats of `convert`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// One JSON object per row.
    Jsonl,
    /// One Parquet file.
    Parquet,
    /// Arrow IPC stream format.
    Arrow,
}

/// `convert`.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// Configuration.
    #[command(flatten)]
    pub cfg: ConfigArgs,
    /// Input file of length-delimited PredictionLogs (`-` = stdin).
    #[arg(long, short, default_value = "-")]
    pub input: String,
    /// Output file (`-` = stdout). Its extension names the format when `-f` is not given:
    /// `.jsonl`/`.ndjson`/`.json`, `.parquet`, `.arrow`/`.arrows`/`.ipc`.
    #[arg(long, short, default_value = "-")]
    pub output: String,
    /// Output format [default: from the output's extension; jsonl for stdout or a name without
    /// one]. One that disagrees with the extension is refused.
    #[arg(long, short, value_enum)]
    pub format: Option<OutputFormat>,
    /// Exit 1 if any log is rejected.
    #[arg(long)]
    pub strict: bool,
}

/// `gen`.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// Configuration.
    #[command(flatten)]
    pub cfg: ConfigArgs,
    /// Number of logs.
    #[arg(long, short = 'n')]
    pub count: u64,
    /// Rows per log.
    #[arg(long, default_value_t = 1)]
    pub rows_per_log: u32,
    /// Random seed (same seed, same output).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Fraction of logs to make malformed (0.0–1.0), for tests and demos.
    #[arg(long, default_value_t = 0.0)]
    pub malformed_ratio: f64,
    /// Timestamp of the first log: RFC 3339 (e.g. 2026-01-01T00:00:00Z) or `now`; logs are
    /// 1 ms apart. Same seed and start time give the same bytes.
    #[arg(long, default_value = "now")]
    pub start_time: String,
    /// Output file (`-` = stdout; e.g. `logs.bin`). A name ending in a row format's extension
    /// (`.parquet`, `.jsonl`, `.arrow`) is refused: `convert` makes rows of these logs.
    #[arg(long, short, default_value = "-")]
    pub output: String,
    /// Drift from this fraction of the logs on (0.0–1.0): see `--drift`.
    #[arg(long, value_name = "FRACTION")]
    pub drift_at: Option<f64>,
    /// What drifts at `--drift-at` (comma-separated): `feature` (the first float64 feature's
    /// distribution shifts), `nulls` (the first string feature turns NULL in 30% of rows),
    /// `score` (the score's logit rises by 1.5).
    #[arg(long, value_delimiter = ',', default_value = "feature,nulls,score")]
    pub drift: Vec<DriftKind>,
}

/// What `gen --drift-at` changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DriftKind {
    /// A feature's distribution.
    Feature,
    /// A feature's NULL share.
    Nulls,
    /// The score's level.
    Score,
}

/// `produce`.
#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Kafka bootstrap servers.
    #[arg(long, default_value = "127.0.0.1:19092")]
    pub brokers: String,
    /// Topic to produce to.
    #[arg(long)]
    pub topic: String,
    /// Create the topic with this many partitions if it does not exist.
    #[arg(long, default_value_t = 3)]
    pub partitions: i32,
    /// Input file of length-delimited messages (`-` = stdin).
    #[arg(long, short, default_value = "-")]
    pub input: String,
    /// Extra producer settings, `key=value` (repeatable).
    #[arg(long = "producer-config", value_name = "KEY=VALUE")]
    pub producer_config: Vec<String>,
    /// How long a message may wait for the broker's acknowledgement (librdkafka
    /// `message.timeout.ms`) before `produce` gives up, naming the broker's error; also the
    /// limit of the topic's creation.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub delivery_timeout: std::time::Duration,
}

/// The sink types `schema` answers for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SchemaSink {
    /// The BigQuery REST `Table` resource the sink creates.
    Bigquery,
    /// The MaxCompute `CREATE TABLE` the sink runs when the table is missing.
    Maxcompute,
    /// The Arize schema and body columns the sink sends.
    Arize,
}

/// `schema`.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// Configuration.
    #[command(flatten)]
    pub cfg: ConfigArgs,
    /// Which sink's schema [default: the configured sinks' type, when they are of one type].
    #[arg(long, value_enum)]
    pub sink: Option<SchemaSink>,
}

/// Commands that only read the configuration.
#[derive(Debug, Args)]
pub struct ConfigOnlyArgs {
    /// Configuration.
    #[command(flatten)]
    pub cfg: ConfigArgs,
}

/// A command-line error as it may be shown: every argument of the form `key=value` quoted in it
/// appears as `key=…` (an override given without `--set`, or misspelt, may carry a secret).
pub fn without_values(text: &str, args: &[String]) -> String {
    let mut out = text.to_string();
    let mut with_values: Vec<&String> = args
        .iter()
        .filter(|a| a.split_once('=').is_some_and(|(_, v)| !v.is_empty()))
        .collect();
    // Longest first, so an argument containing another goes whole.
    with_values.sort_by_key(|a| std::cmp::Reverse(a.len()));
    for a in with_values {
        let (key, _) = a.split_once('=').expect("filtered");
        out = out.replace(a.as_str(), &format!("{key}=…"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_of_key_value_arguments_are_cut_from_errors() {
        let args = vec![
            "check-config".to_string(),
            "observation_sinks.1.config.api_key=planted-s3cret".to_string(),
            "--sett=a=planted-other".to_string(),
            "empty=".to_string(),
        ];
        let text =
            "error: unexpected argument 'observation_sinks.1.config.api_key=planted-s3cret' \
                    found; '--sett=a=planted-other'; 'empty='";
        let shown = without_values(text, &args);
        assert!(!shown.contains("planted"), "{shown}");
        assert!(
            shown.contains("'observation_sinks.1.config.api_key=…'") && shown.contains("'empty='"),
            "{shown}"
        );
    }
}
