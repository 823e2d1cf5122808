//! `observation-publisher bootstrap …`: arguments and the thin glue from them to the library.
//!
//! Results go to stdout (one line, or JSON for `status`); progress, warnings and errors go to
//! stderr. Exit codes: 0 done or superseded, 1 rollout failed or timed out, drain timed out
//! (nothing deleted), cluster or Kafka error; 2 invalid spec or usage.

use super::apply::{apply, ApplyOptions};
use super::checksum::ChecksumKey;
use super::delete::{delete, DrainOptions};
use super::error::{BootstrapError, EXIT_FAILED, EXIT_USAGE};
use super::kafka::partition_count_async;
use super::manifest::{build, render_yaml};
use super::secret_lookup::lookup_source;
use super::spec::Spec;
use super::status::status;
use clap::{Args, Subcommand};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// How long Kafka look-ups (partition count, lag) may take before they are skipped.
const KAFKA_LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// `bootstrap` arguments.
#[derive(Debug, Args)]
pub struct BootstrapArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: BootstrapCommand,
    /// Kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then the in-cluster account).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
}

/// The bootstrap subcommands.
#[derive(Debug, Subcommand)]
pub enum BootstrapCommand {
    /// Create or update the publisher of one model version and wait for its rollout.
    Apply(ApplyArgs),
    /// Remove the publisher of one model version (optionally after draining its topic).
    Delete(DeleteArgs),
    /// Print, as JSON, what exists for one model version.
    Status(SpecArg),
}

/// `--spec FILE`.
#[derive(Debug, Args)]
pub struct SpecArg {
    /// The publisher spec (YAML).
    #[arg(long, value_name = "FILE")]
    pub spec: PathBuf,
}

fn duration(s: &str) -> Result<Duration, String> {
    crate::config::parse_duration(s)
}

/// `bootstrap apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The spec.
    #[command(flatten)]
    pub spec: SpecArg,
    /// Print the manifests as YAML documents and contact nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run: show the Secret's values instead of `<redacted>`.
    #[arg(long, requires = "dry_run")]
    pub show_secrets: bool,
    /// Bound on waiting for an older rollout and for this one (e.g. 30s, 10m).
    #[arg(long, value_parser = duration, default_value = "10m")]
    pub wait: Duration,
}

/// `bootstrap delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The spec.
    #[command(flatten)]
    pub spec: SpecArg,
    /// First wait until the version's consumer group has consumed its topic to the end.
    #[arg(long)]
    pub drain: bool,
    /// Bound on --drain; when it passes with lag left, nothing is deleted (exit 1).
    #[arg(long, value_parser = duration, default_value = "10m", requires = "drain")]
    pub drain_timeout: Duration,
}

/// Builds a client from `--kubeconfig`/`--context`, else the standard inference.
pub async fn client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<Client, BootstrapError> {
    let opts = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| BootstrapError::ClientConfig(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|e| BootstrapError::ClientConfig(e.to_string()))?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&opts)
            .await
            .map_err(|e| BootstrapError::ClientConfig(e.to_string()))?,
        None => kube::Config::infer()
            .await
            .map_err(|e| BootstrapError::ClientConfig(e.to_string()))?,
    };
    Client::try_from(config).map_err(|e| BootstrapError::ClientConfig(e.to_string()))
}

fn load_spec(path: &Path) -> Result<Spec, ExitCode> {
    match Spec::load(path) {
        Ok((spec, warnings)) => {
            for w in warnings {
                eprintln!("warning: {w}");
            }
            Ok(spec)
        }
        Err(p) => {
            eprint!("{}: {p}", path.display());
            Err(ExitCode::from(EXIT_USAGE))
        }
    }
}

fn fail(e: &BootstrapError) -> ExitCode {
    eprintln!("{}", e.report());
    ExitCode::from(e.exit_code())
}

/// Warns when more replicas than partitions would run (extra consumers sit idle).
async fn warn_partitions(client: &Client, spec: &Spec) {
    let source = match lookup_source(client, spec).await {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => {
            eprintln!("warning: could not compare replicas with the topic's partitions ({e})");
            return;
        }
    };
    let most = spec
        .autoscaling
        .as_ref()
        .map_or(spec.replicas, |a| a.max_replicas);
    match partition_count_async(&source, KAFKA_LOOKUP_TIMEOUT).await {
        Ok(n) if usize::try_from(most).unwrap_or(0) > n => eprintln!(
            "warning: {most} replica(s) but topic {:?} has {n} partition(s); the extra consumers will sit idle",
            source.topic
        ),
        Ok(_) => {}
        Err(e) => eprintln!("warning: could not compare replicas with the topic's partitions ({e})"),
    }
}

/// Runs a bootstrap command and returns its exit code.
pub async fn execute(args: BootstrapArgs) -> ExitCode {
    let spec_path = match &args.command {
        BootstrapCommand::Apply(a) => &a.spec.spec,
        BootstrapCommand::Delete(a) => &a.spec.spec,
        BootstrapCommand::Status(a) => &a.spec,
    };
    let spec = match load_spec(spec_path) {
        Ok(s) => s,
        Err(code) => return code,
    };
    if let BootstrapCommand::Apply(a) = &args.command {
        if a.dry_run {
            return match render_yaml(&build(&spec, &ChecksumKey::DryRun), a.show_secrets) {
                Ok(yaml) => crate::stdout::print("bootstrap", &yaml),
                Err(e) => {
                    eprintln!("error: cannot render the manifests: {e}");
                    ExitCode::from(EXIT_FAILED)
                }
            };
        }
    }
    let client = match client(args.kubeconfig.as_deref(), args.context.as_deref()).await {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    match args.command {
        BootstrapCommand::Apply(a) => {
            warn_partitions(&client, &spec).await;
            match apply(
                &client,
                &spec,
                ApplyOptions {
                    wait: a.wait,
                    backoff: super::poll::polling(),
                },
            )
            .await
            {
                Ok(outcome) => {
                    if crate::stdout::print("bootstrap", &format!("{outcome}\n"))
                        != ExitCode::SUCCESS
                    {
                        return ExitCode::from(EXIT_FAILED);
                    }
                    ExitCode::from(outcome.exit_code())
                }
                Err(e) => fail(&e),
            }
        }
        BootstrapCommand::Delete(a) => {
            let drain = a.drain.then_some(DrainOptions {
                timeout: a.drain_timeout,
                backoff: super::poll::polling(),
            });
            match delete(&client, &spec, drain).await {
                Ok(r) => {
                    let mut text = String::new();
                    for d in &r.deleted {
                        text.push_str(&format!("deleted {d}\n"));
                    }
                    for d in &r.already_gone {
                        text.push_str(&format!("already gone {d}\n"));
                    }
                    crate::stdout::print("bootstrap", &text)
                }
                Err(e) => fail(&e),
            }
        }
        BootstrapCommand::Status(_) => {
            match status(&client, &spec, Some(KAFKA_LOOKUP_TIMEOUT)).await {
                Ok(r) => match serde_json::to_string_pretty(&r) {
                    Ok(json) => crate::stdout::print("bootstrap", &format!("{json}\n")),
                    Err(e) => {
                        eprintln!("error: cannot encode the status: {e}");
                        ExitCode::from(EXIT_FAILED)
                    }
                },
                Err(e) => fail(&e),
            }
        }
    }
}
