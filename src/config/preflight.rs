//! Preflight: every file the configuration or the environment names, checked the way `run`
//! will use it, so that `check-config` (and `run`, before it connects anywhere) reports a
//! missing key or CA file as one problem naming the setting and the path, instead of `run`
//! meeting it later as an OpenSSL code or an error that names neither.
//!
//! [`named_files`] lists the files; [`check`] checks one. A new setting that names a file joins
//! the list in [`named_files`].

use super::{BigQueryAuth, Config, DeadLetter, Problems, SinkConfig};
use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// The environment variable of Application Default Credentials' key file.
pub const CREDENTIALS_ENV: &str = "GOOGLE_APPLICATION_CREDENTIALS";

/// librdkafka settings that name a file `run` reads, and whether a directory may stand for it
/// (`ssl.ca.location` may name a directory of CA certificates).
const KAFKA_FILE_KEYS: &[(&str, bool)] = &[
    ("ssl.ca.location", true),
    ("ssl.certificate.location", false),
    ("ssl.key.location", false),
    ("ssl.crl.location", false),
    ("ssl.keystore.location", false),
    ("sasl.kerberos.keytab", false),
];

/// How `run` uses a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// Read: it must exist and be readable (a directory is allowed when `true`).
    Read(bool),
    /// Appended to, created with its directories if absent: an existing one must be a writable
    /// file, an absent one must have a directory as its nearest existing ancestor.
    Append,
    /// A directory written under, created if absent: an existing one must be a directory, an
    /// absent one must have a directory as its nearest existing ancestor.
    Dir,
}

/// A file a setting names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedFile {
    /// The setting's key path (`observation_source.config.additional_consumer_config.ssl.ca.location`)
    /// or the environment variable's name.
    pub setting: String,
    /// The path as given.
    pub path: PathBuf,
    /// How `run` uses it.
    pub usage: Use,
}

/// Every file `cfg` and the environment (`env`: a variable's value by name) name for `run`.
pub fn named_files(cfg: &Config, env: &dyn Fn(&str) -> Option<OsString>) -> Vec<NamedFile> {
    let mut out = Vec::new();
    if let Some(src) = &cfg.observation_source {
        for (k, v) in &src.additional_consumer_config {
            let Some((_, dir_ok)) = KAFKA_FILE_KEYS.iter().find(|(f, _)| f == k) else {
                continue;
            };
            // `probe`: librdkafka looks for the system's CA bundle itself.
            if v.is_empty() || (k == "ssl.ca.location" && v == "probe") {
                continue;
            }
            out.push(NamedFile {
                setting: format!("observation_source.config.additional_consumer_config.{k}"),
                path: v.into(),
                usage: Use::Read(*dir_ok),
            });
        }
    }
    let adc = cfg
        .observation_sinks
        .iter()
        .any(|s| matches!(s, SinkConfig::BigQuery(b) if b.auth == BigQueryAuth::Adc));
    if let Some(p) = env(CREDENTIALS_ENV).filter(|p| adc && !p.is_empty()) {
        out.push(NamedFile {
            setting: CREDENTIALS_ENV.into(),
            path: p.into(),
            usage: Use::Read(false),
        });
    }
    if let DeadLetter::File { path } = &cfg.dead_letter {
        out.push(NamedFile {
            setting: "dead_letter.path".into(),
            path: path.clone(),
            usage: Use::Append,
        });
    }
    if let Some(l) = &cfg.local_sink {
        out.push(NamedFile {
            setting: "local_sink.path".into(),
            path: l.path.clone(),
            usage: Use::Dir,
        });
    }
    out
}

/// Checks every file [`named_files`] lists; each one `run` could not use is a problem at its
/// setting.
pub fn preflight(cfg: &Config, env: &dyn Fn(&str) -> Option<OsString>) -> Problems {
    let mut problems = Problems::default();
    for f in named_files(cfg, env) {
        if let Err(why) = check(&f.path, f.usage) {
            let fix = if f.setting == CREDENTIALS_ENV {
                "; point it at the service-account key file, or unset it to use the metadata server"
            } else {
                ""
            };
            problems.push(&f.setting, format_args!("{:?} {why}{fix}", f.path));
        }
    }
    problems
}

/// Whether `run` can use the file at `path` as `usage` says; why not (`does not exist`,
/// `cannot be read: …`).
pub fn check(path: &Path, usage: Use) -> Result<(), String> {
    match (usage, std::fs::metadata(path)) {
        (Use::Read(dir_ok), Ok(m)) if m.is_dir() => {
            if !dir_ok {
                return Err("is a directory, not a file".into());
            }
            std::fs::read_dir(path)
                .map(drop)
                .map_err(|e| format!("cannot be read: {}", reason(&e)))
        }
        (Use::Read(_), Ok(_)) => std::fs::File::open(path)
            .map(drop)
            .map_err(|e| format!("cannot be read: {}", reason(&e))),
        (Use::Append, Ok(m)) if m.is_dir() => Err("is a directory, not a file".into()),
        // Opening for append without `create` changes nothing.
        (Use::Append, Ok(_)) => std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map(drop)
            .map_err(|e| format!("cannot be written: {}", reason(&e))),
        (Use::Dir, Ok(m)) if !m.is_dir() => Err("is not a directory".into()),
        (Use::Dir, Ok(_)) => Ok(()),
        (Use::Read(_), Err(e)) if absent(&e) => Err("does not exist".into()),
        (Use::Append | Use::Dir, Err(e)) if absent(&e) => creatable(path),
        (_, Err(e)) => Err(format!("cannot be read: {}", reason(&e))),
    }
}

/// An absent path `run` creates with its directories: its nearest existing ancestor must be a
/// directory.
fn creatable(path: &Path) -> Result<(), String> {
    let Some(existing) = path.ancestors().skip(1).find(|a| a.exists()) else {
        // A relative path whose every ancestor is absent is under the working directory.
        return Ok(());
    };
    if existing.as_os_str().is_empty() || existing.is_dir() {
        Ok(())
    } else {
        Err(format!(
            "cannot be created: {:?} is not a directory",
            existing
        ))
    }
}

/// Nothing is at the path: it is missing, or a folder on the way is a file.
fn absent(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory)
}

/// An I/O error's reason without Rust's `(os error N)` suffix.
fn reason(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::PermissionDenied => "permission denied".into(),
        ErrorKind::NotFound => "not found".into(),
        _ => e.to_string(),
    }
}
