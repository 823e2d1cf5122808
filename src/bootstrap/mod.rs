//! Bootstrap mode: one publisher per model version on Kubernetes (being built).

use std::process::ExitCode;

/// `bootstrap` arguments.
#[derive(Debug, clap::Args)]
pub struct BootstrapArgs {
    /// Publisher spec.
    #[arg(long)]
    pub spec: Option<std::path::PathBuf>,
}

/// Runs a bootstrap command.
pub async fn run(_args: BootstrapArgs) -> ExitCode {
    eprintln!("bootstrap is not available in this build");
    ExitCode::from(2)
}
