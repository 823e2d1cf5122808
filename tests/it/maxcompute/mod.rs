//! The MaxCompute protocol pieces against pyodps's own code: pyodps 0.12.2
//! (Merlin's pin) and the latest 0.13.x, each in a venv of `scripts/odps-oracle setup`.
//! - [`sign`]: golden vectors from pyodps's `AliyunAccount`; ours gives the same `Authorization`.
//! - [`encode`]: our Tunnel blocks decode with pyodps's `TunnelRecordReader` (C and pure
//!   Python) to the values written; byte-equal to pyodps's pure-Python writer where it is right.
//! - [`fake`]: the fake MaxCompute endpoint (tests/it/maxcompute/fake.py), checked with pyodps
//!   0.12.2's own `ODPS` client and with Merlin's own calls (merlin_sink.py); our signer and
//!   encoder write through it.
//! - [`sink`]: the MAXCOMPUTE sink in the binary, through the fake with the real broker:
//!   the same rows as Parquet and as Merlin's path, faults, a crash-left staging table.
//! - [`moves`]: a move's `INSERT` runs once through poll errors and upper-case statuses; a
//!   revoke duplicates nothing (two pods in one group).
//! - [`budget`]: staged rows' bookkeeping fills the in-flight budget: an early move, intake
//!   paused while it runs and resumed after, every log once.
//! - [`staging`]: the staging table under statements answered unclearly or run late (a drop
//!   polled through errors, a late drop of a moved epoch, a stop during a queued `INSERT`).
//! - [`rolling`]: a rolling restart of three publishers in one group under steady load, with
//!   MAXCOMPUTE and BIGQUERY (at_least_once): each log once in each target, no process killed.
//! - [`creds`]: keyless: Alibaba's default credential chain against fake STS and ECS metadata
//!   endpoints, its requests compared with Alibaba's credentials SDK's; a temporary key signs as
//!   pyodps's `StsAccount`; keys refreshed ahead of expiry, never sent expired.
//! - [`keyless`]: `run` without keys: RRSA against the fake STS, whose temporary keys the fake
//!   MaxCompute checks (token, expiry); keys refreshed during the run, the token file read again,
//!   STS down at start (unready, named), every row landing.
//! - [`clients`]: our SQL instance and Tunnel clients through the fake, with injected faults
//!   (failed tasks, refused signatures, 503, throttling, a dropped block PUT, a failed commit).

mod budget;
mod clients;
mod creds;
mod encode;
pub(crate) mod fake;
mod keyless;
mod moves;
mod rolling;
mod sign;
mod sink;
mod staging;

use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The pyodps versions every oracle test runs against (`scripts/odps-oracle python V`).
pub(crate) const VERSIONS: [&str; 2] = ["0.12", "0.13"];

/// The python of the venv for `version` (`creds`: Alibaba's credentials SDK), creating the venvs once per test run.
pub(crate) fn python(version: &str) -> PathBuf {
    static SETUP: OnceLock<()> = OnceLock::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    SETUP.get_or_init(|| {
        let status = Command::new(root.join("scripts/odps-oracle"))
            .arg("setup")
            .status()
            .unwrap();
        assert!(status.success(), "scripts/odps-oracle setup failed");
    });
    let out = Command::new(root.join("scripts/odps-oracle"))
        .args(["python", version])
        .output()
        .unwrap();
    assert!(out.status.success());
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// The headers of one request the signing oracle answered (`{"headers": [[name, value], …]}`).
pub(crate) fn signed_headers(request: &Json) -> Vec<(String, String)> {
    (request["headers"].as_array().unwrap().iter())
        .map(|h| (h[0].as_str().unwrap().into(), h[1].as_str().unwrap().into()))
        .collect()
}

/// Runs `tests/it/maxcompute/SCRIPT spec.json` under pyodps 0.12.2 (Merlin's pin) with `spec`
/// written to a temporary file; panics with its stderr when it fails; returns its stdout.
pub(crate) fn pyodps_script(script: &str, spec: &Json) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let spec_path = dir.path().join("spec.json");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let out = Command::new(python("0.12"))
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/it/maxcompute")
                .join(script),
        )
        .arg(&spec_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Runs `oracle.py COMMAND spec` under pyodps `version`, its C implementation or (`force_py`)
/// its pure-Python one; returns its JSON answer.
pub(crate) fn oracle(version: &str, force_py: bool, command: &str, spec: &Json) -> Json {
    let dir = tempfile::tempdir().unwrap();
    let spec_path = dir.path().join("spec.json");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/maxcompute/oracle.py");
    let out = Command::new(python(version))
        .arg(script)
        .arg(command)
        .arg(&spec_path)
        .env("ODPS_FORCE_PY", if force_py { "1" } else { "0" })
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "oracle {command} (pyodps {version}, force_py {force_py}) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "oracle output: {e}\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}
