//! Why a server did not start ([`StartError`]), and of what kind (the CLI's exit code follows
//! it).

use floe_sequencer::{ErrorKind, SeqError};

/// What kind of failure kept a server from starting (the CLI's exit code follows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartErrorKind {
    /// The configuration is wrong: fix it (a restart alone does not help).
    Config,
    /// A registry or store cannot be reached.
    Unavailable,
    /// Refused for now: the clock behind the last recorded time, a worker ID held by another
    /// live process. The same start may succeed later.
    Refused,
    /// A local file or directory (the state directory, the embedded store) cannot be created
    /// or opened: a disk or permission problem.
    Io,
    /// Anything else (a port in use, every worker ID taken, a store holding what floe did not
    /// write).
    Other,
}

/// Why a server did not start: one line, and its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartError {
    /// The kind.
    pub kind: StartErrorKind,
    /// The line, naming the configuration key or component.
    pub message: String,
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StartError {}

impl From<String> for StartError {
    fn from(message: String) -> Self {
        StartError {
            kind: StartErrorKind::Other,
            message,
        }
    }
}

impl From<crate::config::ConfigError> for StartError {
    fn from(e: crate::config::ConfigError) -> Self {
        StartError::config(e)
    }
}

impl From<&str> for StartError {
    fn from(message: &str) -> Self {
        StartError::from(message.to_string())
    }
}

impl StartError {
    pub(crate) fn config(message: impl std::fmt::Display) -> StartError {
        StartError {
            kind: StartErrorKind::Config,
            message: message.to_string(),
        }
    }

    /// A registry's error under `context`, of the kind its own kind says.
    pub(crate) fn registry(context: &str, e: &floe_registry::RegistryError) -> StartError {
        StartError {
            kind: StartErrorKind::of_registry(e.kind),
            message: format!("{context}: {e}"),
        }
    }

    /// A store's error under `context`, of the kind its own kind says.
    pub(crate) fn store(context: &str, e: &SeqError) -> StartError {
        StartError {
            kind: StartErrorKind::of_store(e.kind),
            message: format!("{context}: {e}"),
        }
    }
}

impl StartErrorKind {
    /// The kind of a registry's error (one table for the server and the CLI's exit codes).
    pub fn of_registry(kind: floe_registry::ErrorKind) -> StartErrorKind {
        use floe_registry::ErrorKind as K;
        match kind {
            K::Config => StartErrorKind::Config,
            // Neither the registry nor the cache could give an ID: the registry is unreachable.
            K::Unavailable | K::NoWorkerId => StartErrorKind::Unavailable,
            // The clock catches up, a holder's lease ends.
            K::ClockBehind | K::Conflict => StartErrorKind::Refused,
            K::Io => StartErrorKind::Io,
            // Every ID allocated: an operator's call (--reclaim-after, `floe worker release`).
            K::SpaceFull | K::Corrupt => StartErrorKind::Other,
            // A kind added later (the enum is non-exhaustive): Other until it is given one.
            _ => StartErrorKind::Other,
        }
    }

    /// The kind of a store's error (one table for the server and the CLI's exit codes).
    pub fn of_store(kind: ErrorKind) -> StartErrorKind {
        match kind {
            ErrorKind::InvalidArgument
            | ErrorKind::UnknownStore
            | ErrorKind::UnknownKey
            | ErrorKind::Unsupported
            | ErrorKind::Config => StartErrorKind::Config,
            ErrorKind::Unavailable => StartErrorKind::Unavailable,
            ErrorKind::Io => StartErrorKind::Io,
            ErrorKind::Exhausted | ErrorKind::Corrupt | ErrorKind::DataLoss => {
                StartErrorKind::Other
            }
            // A kind added later (the enum is non-exhaustive): Other until it is given one.
            _ => StartErrorKind::Other,
        }
    }
}
