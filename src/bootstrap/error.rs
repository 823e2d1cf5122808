//! Errors of the bootstrap commands: each says whether retrying can help and maps to an exit code.

use crate::config::Problems;

/// Exit code: done (or superseded).
pub const EXIT_OK: u8 = 0;
/// Exit code: rollout failed or timed out, drain timed out (nothing deleted), cluster or Kafka
/// error.
pub const EXIT_FAILED: u8 = 1;
/// Exit code: invalid spec or usage.
pub const EXIT_USAGE: u8 = 2;

/// What went wrong in a bootstrap command.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The spec is invalid (every problem is listed).
    #[error("{0}")]
    Spec(Problems),
    /// No usable kubeconfig or in-cluster configuration.
    #[error("cannot configure the Kubernetes client: {0}")]
    ClientConfig(String),
    /// An API-server call failed.
    #[error("{op}: {source}")]
    Kube {
        /// What was being done, e.g. "apply Deployment mlobs/x".
        op: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// Waiting for something exceeded the deadline.
    #[error("timed out {what}")]
    Timeout {
        /// What was awaited.
        what: String,
    },
    /// `delete --drain`: the consumer group still had lag at the deadline; nothing was deleted.
    #[error("drain timed out: consumer group {group:?} still lags {lag} message(s) behind on topic {topic:?}; nothing was deleted")]
    DrainTimeout {
        /// Consumer group.
        group: String,
        /// Topic.
        topic: String,
        /// Remaining lag.
        lag: i64,
    },
    /// An object under this version's name carries another version's identity labels.
    #[error(
        "{object} belongs to {owner}, not to this spec's {ours}; refusing to change or delete it"
    )]
    NotOurs {
        /// `Kind namespace/name`.
        object: String,
        /// The identity its labels name.
        owner: String,
        /// This spec's identity.
        ours: String,
    },
    /// Kafka could not be queried.
    #[error("kafka: {0}")]
    Kafka(String),
    /// A Kafka credential the spec reads from a Secret could not be read for bootstrap's own
    /// look-ups: the setting, the Secret and its key, and what to do (never the value).
    #[error("{0}")]
    KafkaCredential(String),
    /// The checksum key could not be drawn (the OS random source failed).
    #[error(transparent)]
    Randomness(#[from] super::checksum::NoRandomness),
}

/// Whether a kube error means "no such object". A bare 404 (an API group that is not installed,
/// e.g. KEDA's) carries no `NotFound` reason, so the code counts too.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_not_found() || s.code == 404)
}

impl BootstrapError {
    /// Wraps a kube error with what was being done.
    pub(crate) fn kube(op: impl Into<String>, source: kube::Error) -> Self {
        BootstrapError::Kube {
            op: op.into(),
            source,
        }
    }

    /// Whether running the same command again may succeed without changing anything.
    pub fn is_retryable(&self) -> bool {
        match self {
            BootstrapError::Spec(_)
            | BootstrapError::ClientConfig(_)
            | BootstrapError::NotOurs { .. }
            | BootstrapError::KafkaCredential(_) => false,
            BootstrapError::Kube { source, .. } => match source {
                kube::Error::Api(s) => s.code == 409 || s.code == 429 || s.code >= 500,
                kube::Error::HyperError(_) | kube::Error::Service(_) => true,
                _ => false,
            },
            BootstrapError::Timeout { .. }
            | BootstrapError::DrainTimeout { .. }
            | BootstrapError::Kafka(_)
            | BootstrapError::Randomness(_) => true,
        }
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            BootstrapError::Spec(_) => EXIT_USAGE,
            _ => EXIT_FAILED,
        }
    }

    /// One line for the operator: the error and whether to retry.
    pub fn report(&self) -> String {
        let hint = match self {
            BootstrapError::Spec(_) => "fix the spec and run again",
            _ if self.is_retryable() => "retryable: run the same command again",
            _ => "not retryable as is: fix the cause first",
        };
        format!("error: {self}\n({hint})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    #[test]
    fn retry_classification() {
        let api = |code: u16, reason: &str| {
            BootstrapError::kube(
                "op",
                kube::Error::Api(Status::failure("m", reason).with_code(code).boxed()),
            )
        };
        assert!(api(409, "Conflict").is_retryable());
        assert!(api(503, "ServiceUnavailable").is_retryable());
        assert!(!api(403, "Forbidden").is_retryable());
        assert!(!api(422, "Invalid").is_retryable());
        assert!(!BootstrapError::Spec(Problems::default()).is_retryable());
        assert_eq!(
            BootstrapError::Spec(Problems::default()).exit_code(),
            EXIT_USAGE
        );
        let d = BootstrapError::DrainTimeout {
            group: "g".into(),
            topic: "t".into(),
            lag: 3,
        };
        assert_eq!(d.exit_code(), EXIT_FAILED);
        assert!(d.report().contains("retryable"));
    }
}
