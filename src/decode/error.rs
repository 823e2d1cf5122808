//! Why a log was rejected: a bounded code (metric label, `x-error-code` header) and a precise,
//! human-readable reason naming the field.

use std::fmt;

/// Bounded classification of a rejected log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The bytes are not a valid protobuf encoding of a PredictionLog.
    InvalidProtobuf,
    /// A zero-length message.
    EmptyMessage,
    /// A required part is missing (tables, `data`, `row_ids`, `request_timestamp`, column names).
    MissingField,
    /// Row, column or row-id counts disagree.
    ShapeMismatch,
    /// A value of the wrong type for its column (e.g. a number in a string feature).
    TypeMismatch,
    /// A value that cannot be represented (±Inf/NaN or out of range for int64, a timestamp
    /// outside BigQuery's range, invalid UTF-8).
    InvalidValue,
    /// A list or struct where a scalar was expected.
    NestedValue,
    /// A column name appears twice in a table.
    DuplicateColumn,
    /// The log's decoded size bound is over the per-log limit (`batching.max_log_bytes`), or
    /// the batch cannot hold it (string data over 2 GiB).
    TooLarge,
}

impl ErrorKind {
    /// Stable snake_case code.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::InvalidProtobuf => "invalid_protobuf",
            ErrorKind::EmptyMessage => "empty_message",
            ErrorKind::MissingField => "missing_field",
            ErrorKind::ShapeMismatch => "shape_mismatch",
            ErrorKind::TypeMismatch => "type_mismatch",
            ErrorKind::InvalidValue => "invalid_value",
            ErrorKind::NestedValue => "nested_value",
            ErrorKind::DuplicateColumn => "duplicate_column",
            ErrorKind::TooLarge => "too_large",
        }
    }

    /// Every code, for describing metrics up front.
    pub const ALL: [ErrorKind; 9] = [
        ErrorKind::InvalidProtobuf,
        ErrorKind::EmptyMessage,
        ErrorKind::MissingField,
        ErrorKind::ShapeMismatch,
        ErrorKind::TypeMismatch,
        ErrorKind::InvalidValue,
        ErrorKind::NestedValue,
        ErrorKind::DuplicateColumn,
        ErrorKind::TooLarge,
    ];
}

/// A rejected log. Input problems are never retryable: the same bytes fail the same way.
///
/// Boxed: the decoder's functions return `Result<_, DecodeError>` on every step of the hot
/// path, and a one-pointer error keeps those results small enough to come back in registers
/// (a kind and a `String` inline made every one of them a 32-byte value returned through
/// memory). Read the fields through [`Deref`](std::ops::Deref): `e.kind`, `e.reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(Box<DecodeErrorParts>);

/// What a [`DecodeError`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeErrorParts {
    /// Classification.
    pub kind: ErrorKind,
    /// Which field, and why.
    pub reason: String,
}

impl DecodeError {
    #[cold]
    pub(crate) fn new(kind: ErrorKind, reason: impl Into<String>) -> Self {
        DecodeError(Box::new(DecodeErrorParts {
            kind,
            reason: reason.into(),
        }))
    }

    /// The reason, taken out.
    pub fn into_reason(self) -> String {
        self.0.reason
    }
}

impl std::ops::Deref for DecodeError {
    type Target = DecodeErrorParts;

    fn deref(&self) -> &DecodeErrorParts {
        &self.0
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.code(), self.reason)
    }
}

impl std::error::Error for DecodeError {}
