//! Shared helpers for the integration tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The built `observation-publisher` binary.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_observation-publisher"))
}

/// Runs the binary with `args` and returns its output.
pub fn run(args: &[&str]) -> Output {
    bin().args(args).env_remove("OBS_PUBLISHER_CONFIG").output().expect("binary runs")
}

/// A file under the repository's `config/` folder.
pub fn repo_config(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config").join(name)
}

/// stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
