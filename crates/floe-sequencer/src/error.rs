//! One error type for stores and the sequencer above them: a kind, and whether it is temporary.

use std::fmt;

use floe_core::sequence::KeyError;

/// What went wrong, as a caller needs to know it (to pick a gRPC status or an HTTP code, or to
/// retry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A request's argument is not valid: the key (empty, too long, NUL), the increment, a
    /// segment size.
    InvalidArgument,
    /// No store of that name is configured.
    UnknownStore,
    /// The store serves only keys registered in it (Leaf's `leaf_alloc` tags, a store in
    /// registered-keys mode), and this key is not one: a typo, caught.
    UnknownKey,
    /// The store cannot do what was asked (STRONG on a Snowflake store, segments).
    Unsupported,
    /// The key's sequence would pass `i64::MAX`: nothing was issued and nothing changed.
    Exhausted,
    /// The store could not be reached or did not answer in time. Temporary: the same call may
    /// succeed later, and WEAK recovers by itself.
    Unavailable,
    /// A configuration error (URL, option, `bigger_than` the store cannot honour), found at
    /// start-up.
    Config,
    /// The store holds something floe did not write (a counter that is not a number).
    Corrupt,
    /// The store went backwards: it answered values at or below what it had already handed
    /// out (it lost writes: restarted without persistence, restored from a backup, wiped).
    /// The key or the store is refused until an operator raises it again: not worth retrying
    /// elsewhere blindly ([`guard`](crate::guard)).
    DataLoss,
    /// A local file or directory (the embedded store's) cannot be created or opened: a disk or
    /// permission problem.
    Io,
}

/// An error of a store or of the sequencer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqError {
    /// Its kind.
    pub kind: ErrorKind,
    /// What happened, naming the store, key or field.
    pub message: String,
}

impl SeqError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> SeqError {
        SeqError {
            kind,
            message: message.into(),
        }
    }

    /// A configuration error.
    pub fn config(message: impl Into<String>) -> SeqError {
        SeqError::new(ErrorKind::Config, message)
    }

    /// The store could not be reached.
    pub fn unavailable(message: impl Into<String>) -> SeqError {
        SeqError::new(ErrorKind::Unavailable, message)
    }

    /// The key's sequence is used up.
    pub fn exhausted(store: &str, key: &str) -> SeqError {
        SeqError::new(
            ErrorKind::Exhausted,
            format!("{store}: the sequence of key {key:?} is exhausted: its next ID would pass i64::MAX"),
        )
    }

    /// Whether the same call may succeed later.
    pub fn is_temporary(&self) -> bool {
        self.kind == ErrorKind::Unavailable
    }
}

impl fmt::Display for SeqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SeqError {}

impl From<KeyError> for SeqError {
    fn from(e: KeyError) -> SeqError {
        SeqError::new(ErrorKind::InvalidArgument, e.to_string())
    }
}
