//! Shared helpers for the integration tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

/// The built `observation-publisher` binary.
pub(crate) fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_observation-publisher"))
}

/// The consumer group `run` joins with the configuration at `config`, as `check-config` says
/// it on its own line (`consumer group: <name>`).
pub(crate) fn consumer_group_of(config: &std::path::Path) -> String {
    let o = run(&["check-config", "-c", config.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().find_map(|l| l.strip_prefix("consumer group: "));
    let Some(name) = line else {
        panic!(
            "check-config names no consumer group:\n{out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    serde_yaml_ng::from_str::<String>(name).unwrap()
}

/// Adds librdkafka settings (`      key: value` lines) to the `observation_source` of the
/// configuration at `config`, right after its `group_id`.
pub(crate) fn add_consumer_settings(config: &std::path::Path, lines: &str) {
    let cfg = std::fs::read_to_string(config).unwrap();
    let at = cfg.find("    group_id: ").expect("a group_id line");
    let end = at + cfg[at..].find('\n').unwrap() + 1;
    let cfg = format!(
        "{}    additional_consumer_config:\n{lines}{}",
        &cfg[..end],
        &cfg[end..]
    );
    std::fs::write(config, cfg).unwrap();
}

/// Runs the binary with `args` and returns its output.
pub(crate) fn run(args: &[&str]) -> Output {
    bin()
        .args(args)
        .env_remove("OBS_PUBLISHER_CONFIG")
        .output()
        .expect("binary runs")
}

/// A file under the repository's `config/` folder.
pub(crate) fn repo_config(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config")
        .join(name)
}

/// `config/local.yaml` as the publisher reads it (for what `convert` needs: the schema).
pub(crate) fn local_config() -> observation_publisher::config::Config {
    use observation_publisher::config::{load_value, Config, Needs};
    let v = load_value(Some(&repo_config("local.yaml")), Vec::new(), &[]).unwrap();
    Config::from_value(&v, Needs::CONVERT).unwrap().0
}

/// `n` logs generated for config/local.yaml into `dir/logs.bin` (`extra`: more `gen`
/// arguments, e.g. a seed or a malformed ratio).
pub(crate) fn generated(dir: &Path, n: u32, extra: &[&str]) -> PathBuf {
    let logs = dir.join("logs.bin");
    let cfg = repo_config("local.yaml");
    let n = n.to_string();
    let mut args = vec!["gen", "-c", cfg.to_str().unwrap(), "-n", &n];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-o", logs.to_str().unwrap()]);
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    logs
}

/// stderr as text.
pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A child process that is killed and reaped when dropped, so a test that fails (panics)
/// while its publisher runs does not leave the publisher running after it. Derefs to the
/// [`Child`]; signalling, waiting and killing it first work as on the child itself.
pub(crate) struct Reaped(pub(crate) Child);

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        // Both fail harmlessly for a child that has already exited or been reaped.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The Python of the venv `name` under the test services' directory: `$SERVICES_DIR` (relative
/// to the repository), by default target/test-services, where scripts/ put the venvs.
pub(crate) fn venv_python(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let services = std::env::var_os("SERVICES_DIR")
        .map_or_else(|| root.join("target/test-services"), |d| root.join(d));
    services.join(name).join("bin/python")
}

/// The Python of an oracle's venv `name`, created by `scripts/<script> setup` the first time
/// (`once`: one per oracle, since tests run in parallel and must not build a venv twice at once).
pub(crate) fn oracle_python(
    script: &str,
    name: &str,
    once: &'static std::sync::OnceLock<bool>,
) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ok = *once.get_or_init(|| {
        Command::new(root.join("scripts").join(script))
            .arg("setup")
            .status()
            .is_ok_and(|s| s.success())
    });
    assert!(ok, "scripts/{script} setup failed");
    venv_python(name)
}
