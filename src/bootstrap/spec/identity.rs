//! The spec's `identity` block: who the publisher's pods are to Google Cloud and Alibaba Cloud.
//!
//! Each way is keyless but `key_secret`: GKE's Workload Identity Federation through a Google
//! service account (`gcp_service_account`) or with roles granted to the Kubernetes
//! ServiceAccount itself (`gcp_workload_identity: direct`), and ACK's RRSA, where the
//! `ack-pod-identity-webhook` gives pods of a ServiceAccount annotated with a RAM role that
//! role's OIDC token and environment (`alibaba_ram_role`).

use super::DEFAULT_KEY_ITEM;
use crate::bootstrap::names::is_dns_subdomain;
use crate::config::{scalar_text, Obj, Problems};
use serde_yaml_ng::Value;

/// Keys of the `identity` block.
pub(super) const IDENTITY_KEYS: &[&str] = &[
    "gcp_service_account",
    "gcp_workload_identity",
    "key_secret",
    "alibaba_ram_role",
];

/// The identity of the publisher's pods.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// GCP service-account email for workload identity (`iam.gke.io/gcp-service-account`).
    pub gcp_service_account: Option<String>,
    /// `gcp_workload_identity: direct`: Google roles are granted to the Kubernetes
    /// ServiceAccount itself (Workload Identity Federation for GKE without a Google service
    /// account); nothing is annotated, and no warning is given about it.
    pub gcp_direct: bool,
    /// An existing Secret holding a GCP JSON key, mounted only when named.
    pub key_secret: Option<KeySecret>,
    /// RAM role the ServiceAccount asks ACK's pod-identity webhook for
    /// (`pod-identity.alibabacloud.com/role-name`).
    pub alibaba_ram_role: Option<String>,
}

/// An existing Secret holding a GCP service-account key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySecret {
    /// Secret name (in the target namespace).
    pub name: String,
    /// Item holding the JSON key (default `service-account.json`).
    pub key: String,
}

impl Identity {
    /// Whether the spec says how the pods get Google credentials.
    pub fn names_google(&self) -> bool {
        self.gcp_service_account.is_some() || self.gcp_direct || self.key_secret.is_some()
    }
}

/// The warning for a spec whose BIGQUERY sink authenticates with whatever GKE's metadata
/// server gives the pod, when `identity` does not say which that is.
pub(super) fn metadata_server_warning(namespace: &str, service_account: &str) -> String {
    format!(
        "identity: no gcp_service_account, gcp_workload_identity or key_secret: the BIGQUERY sink \
         authenticates as what GKE's metadata server gives the pod. With Workload Identity \
         Federation for GKE that is the Kubernetes ServiceAccount {namespace}/{service_account} \
         itself (grant it BigQuery roles by its principal and set \
         identity.gcp_workload_identity: direct); on a node pool without Workload Identity it \
         is the node's service account, shared by every pod on the node"
    )
}

/// Whether `name` is a valid RAM role name: 1 to 64 letters, digits, `.` and `-`.
fn is_ram_role_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
}

/// `identity`: the ways the pods authenticate.
pub(super) fn read_identity(mut m: Obj<'_>, p: &mut Problems) -> Identity {
    if m.is_absent() {
        return Identity::default();
    }
    let gcp_service_account = m.text("gcp_service_account", p);
    if let Some(e) = &gcp_service_account {
        let ok = e
            .split_once('@')
            .is_some_and(|(a, d)| !a.is_empty() && d.contains('.'))
            && !e.contains(char::is_whitespace);
        if !ok {
            p.push(
                "identity.gcp_service_account",
                format_args!("{e:?} is not a service-account email"),
            );
        }
    }
    let gcp_direct = match m.text("gcp_workload_identity", p).as_deref() {
        None => false,
        Some("direct") => true,
        Some(other) => {
            p.push(
                "identity.gcp_workload_identity",
                format_args!(
                    "{other:?}: expected direct (Google roles granted to the Kubernetes \
                     ServiceAccount itself); to act as a Google service account, set \
                     gcp_service_account instead"
                ),
            );
            false
        }
    };
    if gcp_direct && gcp_service_account.is_some() {
        p.push(
            "identity.gcp_workload_identity",
            "direct means no Google service account: leave out gcp_service_account, or this",
        );
    }
    let key_secret = read_key_secret(m.get("key_secret"), p);
    let alibaba_ram_role = m.text("alibaba_ram_role", p);
    if let Some(r) = &alibaba_ram_role {
        if !is_ram_role_name(r) {
            p.push(
                "identity.alibaba_ram_role",
                format_args!(
                    "{r:?} is not a RAM role name (1 to 64 letters, digits, '.' and '-'; the \
                     name, not the ARN)"
                ),
            );
        }
    }
    Identity {
        gcp_service_account,
        gcp_direct,
        key_secret,
        alibaba_ram_role,
    }
}

fn read_key_secret(v: Option<&Value>, p: &mut Problems) -> Option<KeySecret> {
    let key_secret = match v {
        None | Some(Value::Null) => None,
        v @ Some(Value::Mapping(_)) => {
            let mut km = Obj::closed(v, "identity.key_secret", &["name", "key"], p);
            let name = km.req_text("name", p);
            let key = km.text("key", p).unwrap_or_else(|| DEFAULT_KEY_ITEM.into());
            Some(KeySecret { name, key })
        }
        Some(v) => match scalar_text(v) {
            Some(name) => Some(KeySecret {
                name,
                key: DEFAULT_KEY_ITEM.into(),
            }),
            None => {
                p.push(
                    "identity.key_secret",
                    "must be a Secret name or {name, key}",
                );
                None
            }
        },
    };
    if let Some(k) = &key_secret {
        if !is_dns_subdomain(&k.name) {
            p.push(
                "identity.key_secret.name",
                format_args!("{:?} is not a valid Secret name", k.name),
            );
        }
        if !is_secret_item(&k.key) {
            p.push(
                "identity.key_secret.key",
                format_args!("{:?} is not a valid Secret item name", k.key),
            );
        }
    }
    key_secret
}

/// Whether `key` is a valid key of a Secret's data (`[-._a-zA-Z0-9]+`).
pub(crate) fn is_secret_item(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}
