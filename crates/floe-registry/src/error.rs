//! Registry errors, with a kind that says what to do about them.

use std::fmt;

/// The kind of a registry error, and so what to do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The registry cannot be reached or did not answer: temporary.
    Unavailable,
    /// Every ID of the space is allocated.
    SpaceFull,
    /// The ID is held by another live process or identity.
    Conflict,
    /// Invalid configuration (unknown registry, bad address, ID out of range).
    Config,
    /// The clock is behind the last recorded time.
    ClockBehind,
    /// Neither the registry nor the cache could give an ID.
    NoWorkerId,
    /// Stored data could not be read.
    Corrupt,
    /// A local file or directory (the state directory, the cache, a time bound) cannot be
    /// created, read or written: a disk or permission problem.
    Io,
}

/// An error from a registry, the cache or a guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// What happened, naming the field, file or server.
    pub message: String,
}

impl RegistryError {
    /// An error of a kind.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        RegistryError {
            kind,
            message: message.into(),
        }
    }
    /// A configuration error.
    pub fn config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Config, message)
    }
    /// Whether the same call may succeed later.
    pub fn is_temporary(&self) -> bool {
        matches!(self.kind, ErrorKind::Unavailable | ErrorKind::Conflict)
    }
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RegistryError {}
