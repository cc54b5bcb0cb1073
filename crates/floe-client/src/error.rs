//! The client's one error type.

use std::fmt;

pub use tonic::Code;

/// What went wrong with a call. Cloned to every caller that waited for the same fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Bad input, refused on this side before anything was sent: a count of 0 or above the
    /// limit, an empty key, a URL that is not a server's address, a cache option out of range.
    InvalidArgument(String),
    /// The server could not be reached, or the connection broke (the server is down, stopped
    /// or unreachable; its TLS certificate is not trusted). Nothing was issued to this call.
    Unavailable(String),
    /// The server's answer: a gRPC status other than OK (for instance `INVALID_ARGUMENT` for a
    /// count above its `max_batch`, `UNAUTHENTICATED` without a good token, `UNAVAILABLE` while
    /// its store is down, `OUT_OF_RANGE` for a sequence past `i64::MAX`).
    Status {
        /// The gRPC status code.
        code: Code,
        /// The server's message.
        message: String,
    },
    /// The server answered something that does not fit the request (another number of IDs
    /// than asked for): no ID of that answer is handed out.
    Protocol(String),
}

impl Error {
    /// The gRPC status code, when the server answered one.
    pub fn code(&self) -> Option<Code> {
        match self {
            Error::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether trying again later may succeed (the server or its store unreachable for now).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Unavailable(_) => true,
            Error::Status { code, .. } => {
                matches!(code, Code::Unavailable | Code::DeadlineExceeded)
            }
            _ => false,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::InvalidArgument(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::Unavailable(m) => write!(f, "server unavailable: {m}"),
            Error::Status { code, message } => {
                write!(f, "server: {}: {message}", code_name(*code))
            }
            Error::Protocol(m) => write!(f, "server: unexpected answer: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// gRPC's name of a status code (`UNAVAILABLE`).
fn code_name(code: Code) -> &'static str {
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

/// An error and its causes on one line, each said once.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ").replace(['\r', '\n'], " ")
}

impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Error {
        // A status made on this side (the connection broke, what answered is not gRPC) has
        // the transport's error as its source: not the server's word.
        if let Some(source) = std::error::Error::source(&s) {
            return Error::Unavailable(format!("{}: {}", s.message(), chain(source)));
        }
        let message = if s.message().is_empty() {
            s.code().description().to_string()
        } else {
            s.message().to_string()
        };
        Error::Status {
            code: s.code(),
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_keep_their_code() {
        let e = Error::from(tonic::Status::invalid_argument("count: bad"));
        assert_eq!(e.code(), Some(Code::InvalidArgument));
        assert_eq!(e.to_string(), "server: INVALID_ARGUMENT: count: bad");
        assert!(!e.is_retryable());
        let e = Error::from(tonic::Status::unavailable("store down"));
        assert!(e.is_retryable());
        assert!(Error::Unavailable("x".into()).is_retryable());
        assert!(!Error::invalid("count").is_retryable());
    }
}
