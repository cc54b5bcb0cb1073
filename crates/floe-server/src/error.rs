//! The server's own error ([`ServerError`]: a kind and a message in the server's words), with
//! one mapping into a gRPC status ([`status`], `From<ServerError> for Status`) and one into an
//! HTTP answer ([`crate::http::HttpError`]); a store's error in the server's own words
//! ([`public`]); a request checked as Layotto checks it ([`check`]). Text from a request is
//! echoed cut to [`MAX_ECHO`] characters ([`echo`]).

use floe_sequencer::{ErrorKind as SeqKind, Key, Mode, SeqError, Sequencer, StoreHandle};
use tonic::Status;

use crate::observe::log::{warn, Topic};

/// The most characters of a request's own text (a store name, a key, a parameter) an error
/// message repeats; longer text is cut and ends with an ellipsis.
pub const MAX_ECHO: usize = 64;

/// The most characters of a library's words (a parse error, a key error) a message repeats.
pub(crate) const MAX_DETAIL: usize = 200;

/// `text` for an error message: control characters escaped (`\n`, `\u{1b}`), at most `max`
/// characters of that, and `…` when it was cut.
pub fn echo(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut used = 0usize;
    for c in text.chars() {
        let escaped = c.escape_debug();
        // Control characters, and what Rust does not print as itself (bidirectional
        // overrides such as U+202E, which would turn a log line around): escaped. Quotes and
        // backslashes stay as they are.
        let escape = c.is_control() || (escaped.len() > 1 && !matches!(c, '"' | '\'' | '\\'));
        let width = if escape { escaped.len() } else { 1 };
        if used.saturating_add(width) > max {
            out.push('…');
            break;
        }
        used += width;
        if escape {
            out.extend(escaped);
        } else {
            out.push(c);
        }
    }
    out
}

/// What kind of error a request met: one per answer the server gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is wrong: HTTP 400, gRPC `INVALID_ARGUMENT`.
    InvalidArgument,
    /// No store of that name: HTTP 404, gRPC `INVALID_ARGUMENT` (as Layotto answers).
    UnknownStore,
    /// A store that serves registered keys only was asked for another: HTTP 404, gRPC
    /// `NOT_FOUND`.
    UnknownKey,
    /// The store cannot do what was asked (STRONG on a store that cannot): HTTP 409, gRPC
    /// `FAILED_PRECONDITION`.
    Unsupported,
    /// A sequence or a timestamp field has run out: HTTP 409, gRPC `OUT_OF_RANGE`.
    Exhausted,
    /// Not now (a store, a lease, a clock, a disk): retry. HTTP 503, gRPC `UNAVAILABLE`.
    Unavailable,
    /// Not configured on this server (a kind not served, no store): HTTP 503, gRPC
    /// `FAILED_PRECONDITION`.
    NotConfigured,
    /// The server's own fault, or a stored value floe did not write: HTTP 500, gRPC
    /// `INTERNAL`.
    Internal,
    /// A store went backwards (it lost writes): the key or store is refused until an
    /// operator repairs it, so that no value is issued twice. Not worth retrying elsewhere
    /// blindly: HTTP 500 (`data_loss`), gRPC `DATA_LOSS`.
    DataLoss,
}

/// An error as the server answers it: its kind and one line in the server's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// The kind: the status it is answered with.
    pub kind: ErrorKind,
    /// For people: one line.
    pub message: String,
}

impl ServerError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ServerError {
        ServerError {
            kind,
            message: message.into(),
        }
    }

    /// [`ErrorKind::NotConfigured`].
    pub fn config(message: impl Into<String>) -> ServerError {
        ServerError::new(ErrorKind::NotConfigured, message)
    }

    /// [`ErrorKind::Unavailable`].
    pub fn unavailable(message: impl Into<String>) -> ServerError {
        ServerError::new(ErrorKind::Unavailable, message)
    }
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ServerError {}

impl From<SeqError> for ServerError {
    /// A sequencer's error, its message kept: reach here through [`check`] and [`public`],
    /// which word it, or with a message of the sequencer's that names no store's detail.
    fn from(e: SeqError) -> ServerError {
        let kind = match e.kind {
            SeqKind::InvalidArgument => ErrorKind::InvalidArgument,
            SeqKind::UnknownStore => ErrorKind::UnknownStore,
            SeqKind::UnknownKey => ErrorKind::UnknownKey,
            SeqKind::Unsupported => ErrorKind::Unsupported,
            SeqKind::Exhausted => ErrorKind::Exhausted,
            // A local disk problem: the server cannot serve now.
            SeqKind::Unavailable | SeqKind::Io => ErrorKind::Unavailable,
            SeqKind::Config => ErrorKind::NotConfigured,
            SeqKind::Corrupt => ErrorKind::Internal,
            SeqKind::DataLoss => ErrorKind::DataLoss,
            other => {
                unexpected(other);
                ErrorKind::Internal
            }
        };
        ServerError::new(kind, e.message)
    }
}

/// The gRPC status of an error: one mapping for the whole server.
pub fn status(e: &ServerError) -> Status {
    let code = match e.kind {
        ErrorKind::InvalidArgument | ErrorKind::UnknownStore => tonic::Code::InvalidArgument,
        ErrorKind::UnknownKey => tonic::Code::NotFound,
        ErrorKind::Unsupported | ErrorKind::NotConfigured => tonic::Code::FailedPrecondition,
        ErrorKind::Exhausted => tonic::Code::OutOfRange,
        ErrorKind::Unavailable => tonic::Code::Unavailable,
        ErrorKind::Internal => tonic::Code::Internal,
        ErrorKind::DataLoss => tonic::Code::DataLoss,
    };
    Status::new(code, e.message.clone())
}

impl From<ServerError> for Status {
    fn from(e: ServerError) -> Status {
        status(&e)
    }
}

/// An error kind this server does not know (floe-sequencer's `ErrorKind` is non-exhaustive):
/// answered as an internal error, and said on standard error so that it is not missed.
pub(crate) fn unexpected(kind: SeqKind) {
    warn(
        Topic::Internal,
        format_args!(
            "an error of a kind this server does not map ({kind:?}) was answered as internal"
        ),
    );
}

/// What a request asked of a store: the words of its errors depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    /// One ID.
    NextId(Mode),
    /// A segment.
    Segment,
    /// The admin API (an operator's call: what the store cannot do is said as it is).
    Admin,
}

/// A store's error in the server's own words: the store and the request's key (cut to
/// [`MAX_ECHO`]) and what went wrong, never what the store said about itself (a file path, a
/// server's address): that goes to standard error.
pub fn public(e: SeqError, handle: &StoreHandle, key: &str, asked: Asked) -> ServerError {
    let store = handle.name();
    let kind = handle.store().kind();
    let message = match e.kind {
        // The sequencer's words about an argument (a segment size, a key's length): no input
        // beyond a number, cut to a bound in case that changes.
        SeqKind::InvalidArgument => echo(&e.message, MAX_DETAIL),
        SeqKind::UnknownStore => format!("Sequencer store {} not found", echo(store, MAX_ECHO)),
        SeqKind::UnknownKey => format!(
            "key {} is not registered in store {store}: register it first (a typo?)",
            echo(key, MAX_ECHO)
        ),
        SeqKind::Unsupported => match asked {
            Asked::NextId(Mode::Strong) => {
                format!("store {store} ({kind}) cannot serve STRONG: use WEAK")
            }
            Asked::NextId(Mode::Weak) => format!("store {store} ({kind}) cannot serve WEAK"),
            Asked::Segment => format!("store {store} ({kind}) cannot reserve segments"),
            Asked::Admin => echo(&e.message, MAX_DETAIL),
        },
        SeqKind::Exhausted => format!(
            "the sequence of key {} in store {store} is exhausted: its next ID would pass i64::MAX",
            echo(key, MAX_ECHO)
        ),
        SeqKind::Unavailable | SeqKind::Io => {
            warn(Topic::Store, format_args!("store {store}: {}", e.message));
            format!("store {store} ({kind}) is unavailable or slow: retry later")
        }
        SeqKind::Config => {
            warn(Topic::Store, format_args!("store {store}: {}", e.message));
            format!("store {store} ({kind}) is misconfigured: see the server's log")
        }
        SeqKind::Corrupt => {
            warn(Topic::Store, format_args!("store {store}: {}", e.message));
            format!(
                "store {store} holds a value for key {} that floe did not write: see the server's log",
                echo(key, MAX_ECHO)
            )
        }
        // The guard's own words (floe-sequencer's guard): the store, the key (escaped), the
        // values and the command that repairs it; logged once when it was found.
        SeqKind::DataLoss => echo(&e.message, 1000),
        // A kind this server does not map: `ServerError::from` below says so.
        _ => {
            warn(Topic::Store, format_args!("store {store}: {}", e.message));
            format!("store {store}: internal error: see the server's log")
        }
    };
    ServerError {
        message,
        ..ServerError::from(e)
    }
}

/// A request checked as Layotto checks it, in its order: a store is configured, the key is not
/// empty, the increment is legal (`mode`, as parsed by the caller, in the server's words), the
/// store exists, then the key is a valid key. The error's kind gives its status ([`status`],
/// [`crate::http::HttpError`]); its message repeats at most [`MAX_ECHO`] characters of the request.
pub fn check<'a>(
    sequencer: &'a Sequencer,
    store: &str,
    key: &str,
    mode: Result<Mode, String>,
) -> Result<(&'a StoreHandle, Mode), ServerError> {
    if sequencer.names().next().is_none() {
        return Err(ServerError::config("Sequencer store is not configured"));
    }
    if key.is_empty() {
        return Err(ServerError::new(
            ErrorKind::InvalidArgument,
            format!("Key is empty in sequencer store {}", echo(store, MAX_ECHO)),
        ));
    }
    let mode = mode.map_err(|e| ServerError::new(ErrorKind::InvalidArgument, e))?;
    let handle = sequencer.store(store).map_err(|e| match e.kind {
        // The sequencer's message lists every configured store: not for clients.
        SeqKind::UnknownStore => ServerError::new(
            ErrorKind::UnknownStore,
            format!("Sequencer store {} not found", echo(store, MAX_ECHO)),
        ),
        _ => ServerError {
            message: echo(&e.message, MAX_DETAIL),
            ..ServerError::from(e)
        },
    })?;
    Key::check(key).map_err(|e| {
        ServerError::new(ErrorKind::InvalidArgument, echo(&e.to_string(), MAX_DETAIL))
    })?;
    Ok((handle, mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_cuts_at_the_bound_and_escapes_control_characters() {
        assert_eq!(echo("orders", MAX_ECHO), "orders");
        assert_eq!(echo(&"x".repeat(64), 64), "x".repeat(64));
        assert_eq!(echo(&"x".repeat(65), 64), format!("{}…", "x".repeat(64)));
        assert_eq!(echo(&"é".repeat(100), 3), "ééé…");
        assert_eq!(echo("a\nb\u{1b}", 64), "a\\nb\\u{1b}");
        // Escapes count at their printed width.
        assert_eq!(echo(&"\u{1b}".repeat(100), 14), "\\u{1b}\\u{1b}…");
        assert_eq!(echo("", 64), "");
        // A right-to-left override would reverse the rest of a log line.
        assert_eq!(echo("a\u{202e}b", 64), "a\\u{202e}b");
        assert_eq!(echo("\"q\" 'q' \\ é", 64), "\"q\" 'q' \\ é");
    }

    #[test]
    fn each_kind_has_one_grpc_code_and_a_sequencer_error_keeps_its_kind() {
        use tonic::Code;
        let table = [
            (ErrorKind::InvalidArgument, Code::InvalidArgument),
            (ErrorKind::UnknownStore, Code::InvalidArgument),
            (ErrorKind::UnknownKey, Code::NotFound),
            (ErrorKind::Unsupported, Code::FailedPrecondition),
            (ErrorKind::Exhausted, Code::OutOfRange),
            (ErrorKind::Unavailable, Code::Unavailable),
            (ErrorKind::NotConfigured, Code::FailedPrecondition),
            (ErrorKind::Internal, Code::Internal),
            (ErrorKind::DataLoss, Code::DataLoss),
        ];
        for (kind, code) in table {
            let s = Status::from(ServerError::new(kind, "words"));
            assert_eq!((s.code(), s.message()), (code, "words"), "{kind:?}");
        }
        let from = |k| ServerError::from(SeqError::new(k, "m")).kind;
        assert_eq!(from(SeqKind::Io), ErrorKind::Unavailable);
        assert_eq!(from(SeqKind::Config), ErrorKind::NotConfigured);
        assert_eq!(from(SeqKind::Corrupt), ErrorKind::Internal);
        assert_eq!(from(SeqKind::DataLoss), ErrorKind::DataLoss);
        assert_eq!(from(SeqKind::UnknownStore), ErrorKind::UnknownStore);
        assert_eq!(from(SeqKind::UnknownKey), ErrorKind::UnknownKey);
    }
}
