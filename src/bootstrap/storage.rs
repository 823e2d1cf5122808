//! Where the publisher's pods keep files, and which files may be kept there.
//!
//! ```yaml
//! storage:
//!   size_limit: 1Gi                 # sizeLimit of each generated emptyDir (default 1Gi)
//!   persistent:                     # optional: an existing PersistentVolumeClaim
//!     claim: publisher-data
//!     mount_path: /var/lib/observation-publisher/persistent   # the default
//! ```
//!
//! The working directory (`/var/lib/observation-publisher`) and `/tmp` are `emptyDir`s with a
//! `sizeLimit`, so they cannot fill a node. An `emptyDir` dies with its pod, and going over
//! `sizeLimit` evicts the pod: rows of a local sink or letters of a file dead-letter target kept
//! there would be lost **after their offsets were committed**. So those paths must be on the
//! persistent volume the spec names; the Kafka dead-letter target and the BIGQUERY sink are what
//! a Deployment should use.

use super::names::{is_dns_subdomain, is_quantity};
use crate::config::{Config, DeadLetter, Obj, Problems};
use serde_yaml_ng::Value;
use std::path::{Component, Path, PathBuf};

/// Directory the publisher's working directory points at; an `emptyDir` is mounted there.
pub const DATA_DIR: &str = "/var/lib/observation-publisher";
/// Scratch directory; an `emptyDir` is mounted there.
pub const TMP_DIR: &str = "/tmp";
/// Where the config Secret is mounted.
pub const CONFIG_DIR: &str = "/etc/observation-publisher";
/// Where the key Secret is mounted, when one is named.
pub const KEY_DIR: &str = "/var/run/secrets/gcp";

/// Default `sizeLimit` of each generated `emptyDir`.
pub const DEFAULT_SIZE_LIMIT: &str = "1Gi";
/// Default mount path of the persistent volume.
pub const DEFAULT_PERSISTENT_MOUNT: &str = "/var/lib/observation-publisher/persistent";

/// The spec's `storage` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Storage {
    /// `sizeLimit` of each generated `emptyDir` (a Kubernetes quantity).
    pub size_limit: String,
    /// A persistent volume for local files, when named.
    pub persistent: Option<Persistent>,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            size_limit: DEFAULT_SIZE_LIMIT.into(),
            persistent: None,
        }
    }
}

/// An existing PersistentVolumeClaim mounted into the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Persistent {
    /// Claim name (in the target namespace).
    pub claim: String,
    /// Absolute mount path.
    pub mount_path: PathBuf,
}

/// Whether a quantity's number is above zero.
fn positive(q: &str) -> bool {
    let end = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    q[..end].parse::<f64>().is_ok_and(|n| n > 0.0)
}

fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

impl Storage {
    /// Reads `storage` (absent: the defaults), recording problems.
    pub fn read(v: Option<&Value>, problems: &mut Problems) -> Storage {
        let mut s = Storage::default();
        let mut m = Obj::closed(v, "storage", &["size_limit", "persistent"], problems);
        if m.is_absent() {
            return s;
        }
        if let Some(v) = m.get("size_limit") {
            match text(Some(v)) {
                Some(q) if is_quantity(&q) && positive(&q) => s.size_limit = q,
                _ => problems.push(
                    "storage.size_limit",
                    "must be a positive Kubernetes quantity such as 512Mi or 2Gi",
                ),
            }
        }
        let mut p = m.closed_obj("persistent", &["claim", "mount_path"], problems);
        if !p.is_absent() {
            let claim = text(p.get("claim")).unwrap_or_default();
            if !is_dns_subdomain(&claim) {
                problems.push(
                    "storage.persistent.claim",
                    "required: the name of an existing PersistentVolumeClaim in the namespace",
                );
            }
            let mount_path = PathBuf::from(
                text(p.get("mount_path")).unwrap_or_else(|| DEFAULT_PERSISTENT_MOUNT.into()),
            );
            let bad_mount = !mount_path.is_absolute()
                || mount_path
                    .components()
                    .any(|c| matches!(c, Component::ParentDir))
                || mount_path == Path::new("/")
                || mount_path == Path::new(DATA_DIR)
                || mount_path == Path::new(TMP_DIR)
                || mount_path.starts_with(CONFIG_DIR)
                || mount_path.starts_with(KEY_DIR);
            if bad_mount {
                problems.push(
                        "storage.persistent.mount_path",
                        format_args!(
                            "{} is not usable: an absolute path of its own (not /, {DATA_DIR}, {TMP_DIR} or the config and key folders)",
                            mount_path.display()
                        ),
                    );
            }
            s.persistent = Some(Persistent { claim, mount_path });
        }
        s
    }

    /// Refuses local sink and file dead-letter paths that are not on the persistent volume
    /// (see the module docs for why). Relative paths are relative to the working directory.
    pub fn check_paths(
        &self,
        c: &Config,
        replicas: i32,
        problems: &mut Problems,
        warnings: &mut Vec<String>,
    ) {
        let mut files: Vec<(&str, &Path)> = Vec::new();
        if let DeadLetter::File { path } = &c.dead_letter {
            files.push(("config.dead_letter.path", path));
        }
        if let Some(l) = &c.local_sink {
            files.push(("config.local_sink.path", &l.path));
        }
        for (key, path) in &files {
            let resolved = Path::new(DATA_DIR).join(path);
            match &self.persistent {
                Some(p) if resolved.starts_with(&p.mount_path) => {}
                Some(p) => problems.push(
                    key,
                    format_args!(
                        "{} is not on the persistent volume (mounted at {}); put it there",
                        path.display(),
                        p.mount_path.display()
                    ),
                ),
                None => problems.push(
                    key,
                    format_args!(
                        "{} would be on an emptyDir, which dies with its pod (and going over its sizeLimit evicts the pod): what is written there is lost after its offsets were committed; use the Kafka dead-letter target and the BIGQUERY sink, or name a persistent volume in storage.persistent and put the path on it",
                        path.display()
                    ),
                ),
            }
        }
        if !files.is_empty() && self.persistent.is_some() && replicas > 1 {
            warnings.push(format!(
                "storage.persistent: {replicas} replicas mount the same claim; it must allow ReadWriteMany (or run 1 replica)"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> (Storage, Problems) {
        let v: Value = serde_yaml_ng::from_str(yaml).unwrap();
        let mut p = Problems::default();
        (Storage::read(Some(&v), &mut p), p)
    }

    #[test]
    fn defaults_and_values() {
        let (s, p) = read("{}");
        assert!(p.is_empty());
        assert_eq!(s, Storage::default());
        assert_eq!(s.size_limit, "1Gi");
        let (s, p) = read("{size_limit: 256Mi, persistent: {claim: data}}");
        assert!(p.is_empty(), "{p}");
        assert_eq!(s.size_limit, "256Mi");
        let pv = s.persistent.unwrap();
        assert_eq!(pv.claim, "data");
        assert_eq!(pv.mount_path, Path::new(DEFAULT_PERSISTENT_MOUNT));
    }

    /// Pins the wording, paths and order of the section's problems.
    #[test]
    fn problems_keep_their_wording() {
        let (_, p) =
            read("{size_limit: null, persistent: {claim: null, mount_path: /, x: 1}, 7: y}");
        assert_eq!(
            p.0,
            [
                "storage.7: unknown key; expected one of size_limit, persistent",
                "storage.size_limit: must be a positive Kubernetes quantity such as 512Mi or 2Gi",
                "storage.persistent.x: unknown key; expected one of claim, mount_path",
                "storage.persistent.claim: required: the name of an existing PersistentVolumeClaim in the namespace",
                "storage.persistent.mount_path: / is not usable: an absolute path of its own (not /, /var/lib/observation-publisher, /tmp or the config and key folders)",
            ]
        );
        let (_, p) = read("{persistent: [1]}");
        assert_eq!(p.0, ["storage.persistent: must be a mapping"]);
        let (_, p) = read("[1]");
        assert_eq!(p.0, ["storage: must be a mapping"]);
    }

    #[test]
    fn bad_values_are_problems() {
        let (_, p) = read("{size_limit: lots, persistent: {mount_path: tmp}, extra: 1}");
        let t = p.to_string();
        for k in [
            "storage.size_limit",
            "storage.persistent.claim",
            "storage.persistent.mount_path",
            "storage.extra",
        ] {
            assert!(t.contains(k), "{k} in {t}");
        }
        for zero in ["0", "0Gi", "0.0Mi"] {
            let (_, p) = read(&format!("{{size_limit: {zero}}}"));
            assert!(p.to_string().contains("storage.size_limit"), "{zero}");
        }
        let (_, p) = read("{persistent: {claim: d, mount_path: /tmp}}");
        assert!(p.to_string().contains("mount_path"));
    }
}
