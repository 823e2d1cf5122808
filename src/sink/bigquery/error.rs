//! What to do about a BigQuery Storage Write error: one classification of gRPC codes shared by
//! the RPC-level status (the stream ended) and the in-band status of one append response.
//!
//! The table is the sink's retry policy; each row is unit-tested below. Messages are consulted
//! only where BigQuery and the emulator give no structured signal (the request size cap).

use super::proto::{storage_error::StorageErrorCode, StorageError};
use prost::Message;
use tonic::Code;

/// The decision for one error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Transient: back off (jittered, capped), reconnect, re-send every un-acknowledged request.
    Retry,
    /// The request exceeded the size cap: split it and re-send the halves, never as is.
    Split,
    /// The request's data was refused without `row_errors`: bisect it to find the bad rows
    /// (a single refused row is reported as rejected).
    BadRows,
    /// The writer's schema has columns the table lacks (`SCHEMA_MISMATCH_EXTRA_FIELDS`): the table
    /// must gain them; until then retry slowly on a new connection.
    SchemaMismatch,
    /// Configuration or permissions (PERMISSION_DENIED, NOT_FOUND, UNAUTHENTICATED, and states a
    /// default stream never reaches): the sink is unhealthy; retry slowly, acknowledge nothing.
    Fatal,
    /// Explicit-offset streams: the offset was already written.
    AlreadyExists,
    /// Explicit-offset streams: the offset is past the end of the stream (a gap).
    OutOfRange,
}

/// One error as the classifier sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorInfo {
    /// gRPC code.
    pub code: Code,
    /// Message (for logs; matched only for the size cap).
    pub message: String,
    /// The `StorageError` detail code, when BigQuery attached one.
    pub storage_code: Option<StorageErrorCode>,
}

impl ErrorInfo {
    /// From an RPC-level status (the AppendRows call or stream failed).
    pub fn from_status(s: &tonic::Status) -> Self {
        let storage_code = super::proto::rpc::Status::decode(s.details())
            .ok()
            .and_then(|st| storage_code(&st.details));
        ErrorInfo {
            code: s.code(),
            message: s.message().to_string(),
            storage_code,
        }
    }

    /// From the in-band status of one append response.
    pub fn from_rpc(s: &super::proto::rpc::Status) -> Self {
        ErrorInfo {
            code: Code::from_i32(s.code),
            message: s.message.clone(),
            storage_code: storage_code(&s.details),
        }
    }

    /// The decision for this error.
    pub fn action(&self) -> Action {
        classify(self.code, &self.message, self.storage_code)
    }

    /// A short code name for metric labels (bounded).
    pub fn code_name(&self) -> &'static str {
        code_name(self.code)
    }
}

impl std::fmt::Display for ErrorInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.code_name(), self.message)?;
        if let Some(c) = self.storage_code {
            write!(f, " [{}]", c.as_str_name())?;
        }
        Ok(())
    }
}

fn storage_code(details: &[prost_types::Any]) -> Option<StorageErrorCode> {
    details
        .iter()
        .filter(|a| {
            a.type_url
                .ends_with("google.cloud.bigquery.storage.v1.StorageError")
        })
        .find_map(|a| StorageError::decode(a.value.as_slice()).ok())
        .and_then(|e| StorageErrorCode::try_from(e.code).ok())
}

/// True when the message says the request was over a size limit (BigQuery: INVALID_ARGUMENT
/// "AppendRows request too large"; the emulator: RESOURCE_EXHAUSTED "exceeds the … size cap";
/// transports: "larger than max").
fn is_size_cap(code: Code, message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    match code {
        Code::ResourceExhausted => {
            m.contains("size cap") || m.contains("larger than max") || m.contains("too large")
        }
        Code::InvalidArgument => m.contains("too large") || m.contains("size cap"),
        _ => false,
    }
}

/// The decision for a gRPC code, its message and its `StorageError` detail.
pub fn classify(code: Code, message: &str, storage: Option<StorageErrorCode>) -> Action {
    match storage {
        Some(StorageErrorCode::SchemaMismatchExtraFields) => return Action::SchemaMismatch,
        Some(StorageErrorCode::OffsetAlreadyExists) => return Action::AlreadyExists,
        Some(StorageErrorCode::OffsetOutOfRange) => return Action::OutOfRange,
        Some(
            StorageErrorCode::TableNotFound
            | StorageErrorCode::StreamNotFound
            | StorageErrorCode::KmsPermissionDenied,
        ) => return Action::Fatal,
        Some(StorageErrorCode::KmsServiceError) => return Action::Retry,
        _ => {}
    }
    if is_size_cap(code, message) {
        return Action::Split;
    }
    match code {
        Code::Unavailable
        | Code::ResourceExhausted
        | Code::Aborted
        | Code::Internal
        | Code::DeadlineExceeded
        | Code::Cancelled
        // The emulator reports its own failures as UNKNOWN; real BigQuery would say INTERNAL.
        | Code::Unknown => Action::Retry,
        Code::InvalidArgument => Action::BadRows,
        Code::AlreadyExists => Action::AlreadyExists,
        Code::OutOfRange => Action::OutOfRange,
        Code::PermissionDenied
        | Code::NotFound
        | Code::Unauthenticated
        | Code::FailedPrecondition
        | Code::Unimplemented
        | Code::DataLoss
        | Code::Ok => Action::Fatal,
    }
}

/// The upper-case gRPC name of a code.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_codes_retry() {
        for c in [
            Code::Unavailable,
            Code::ResourceExhausted,
            Code::Aborted,
            Code::Internal,
            Code::DeadlineExceeded,
            Code::Unknown,
        ] {
            assert_eq!(
                classify(c, "Task is overloaded (memory-protection)", None),
                Action::Retry,
                "{c:?}"
            );
        }
    }

    #[test]
    fn size_caps_split_never_retry() {
        let emu = "AppendRowsRequest exceeds the 10485760-byte size cap (10642873 bytes). Split the payload into smaller batches.";
        assert_eq!(classify(Code::ResourceExhausted, emu, None), Action::Split);
        assert_eq!(
            classify(
                Code::InvalidArgument,
                "AppendRows request too large: 11854265 limit 10485760",
                None
            ),
            Action::Split
        );
        assert_eq!(
            classify(
                Code::ResourceExhausted,
                "SERVER: Received message larger than max (25100473 vs. 11534336)",
                None
            ),
            Action::Split
        );
    }

    #[test]
    fn permission_and_missing_tables_are_fatal() {
        for c in [
            Code::PermissionDenied,
            Code::NotFound,
            Code::Unauthenticated,
            Code::FailedPrecondition,
        ] {
            assert_eq!(classify(c, "x", None), Action::Fatal, "{c:?}");
        }
        assert_eq!(
            classify(
                Code::InvalidArgument,
                "x",
                Some(StorageErrorCode::TableNotFound)
            ),
            Action::Fatal
        );
    }

    #[test]
    fn data_errors_bisect_and_offsets_are_told_apart() {
        assert_eq!(
            classify(Code::InvalidArgument, "Failed to parse string: 'abc'", None),
            Action::BadRows
        );
        assert_eq!(
            classify(Code::AlreadyExists, "Offset 0 already committed", None),
            Action::AlreadyExists
        );
        assert_eq!(
            classify(Code::OutOfRange, "Offset 100 beyond next expected 6", None),
            Action::OutOfRange
        );
        assert_eq!(
            classify(
                Code::InvalidArgument,
                "x",
                Some(StorageErrorCode::SchemaMismatchExtraFields)
            ),
            Action::SchemaMismatch
        );
        assert_eq!(
            classify(
                Code::InvalidArgument,
                "x",
                Some(StorageErrorCode::OffsetAlreadyExists)
            ),
            Action::AlreadyExists
        );
    }

    #[test]
    fn storage_error_details_are_decoded() {
        let detail = StorageError {
            code: StorageErrorCode::SchemaMismatchExtraFields as i32,
            ..Default::default()
        };
        let status = super::super::proto::rpc::Status {
            code: Code::InvalidArgument as i32,
            message: "Input schema has more fields than BigQuery schema".into(),
            details: vec![prost_types::Any {
                type_url: "type.googleapis.com/google.cloud.bigquery.storage.v1.StorageError"
                    .into(),
                value: detail.encode_to_vec(),
            }],
        };
        let info = ErrorInfo::from_rpc(&status);
        assert_eq!(info.action(), Action::SchemaMismatch);
        let t =
            tonic::Status::with_details(Code::InvalidArgument, "m", status.encode_to_vec().into());
        assert_eq!(ErrorInfo::from_status(&t).action(), Action::SchemaMismatch);
        assert_eq!(info.to_string(), "INVALID_ARGUMENT (Input schema has more fields than BigQuery schema) [SCHEMA_MISMATCH_EXTRA_FIELDS]");
    }
}
