//! How the server words its errors: one mapping of an error's kind to a gRPC status
//! ([`status`]) and, in [`crate::http`], to an HTTP answer; a store's error in the server's own
//! words ([`public`]); a request checked as Layotto checks it ([`check`]). Text from a request
//! is echoed cut to [`MAX_ECHO`] characters ([`echo`]).

use floe_sequencer::{ErrorKind, Key, Mode, SeqError, Sequencer, StoreHandle};
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
        let width = if c.is_control() { escaped.len() } else { 1 };
        if used.saturating_add(width) > max {
            out.push('…');
            break;
        }
        used += width;
        if c.is_control() {
            out.extend(escaped);
        } else {
            out.push(c);
        }
    }
    out
}

/// The gRPC status of an error: one mapping for the whole server. The message is used as it
/// is: errors reach here through [`check`] and [`public`], which word them.
pub fn status(e: &SeqError) -> Status {
    let code = match e.kind {
        ErrorKind::InvalidArgument | ErrorKind::UnknownStore => tonic::Code::InvalidArgument,
        ErrorKind::Unsupported | ErrorKind::Config => tonic::Code::FailedPrecondition,
        ErrorKind::Exhausted => tonic::Code::OutOfRange,
        // A local disk problem: the server cannot serve now.
        ErrorKind::Unavailable | ErrorKind::Io => tonic::Code::Unavailable,
        ErrorKind::Corrupt => tonic::Code::Internal,
        other => {
            unexpected(other);
            tonic::Code::Internal
        }
    };
    Status::new(code, e.message.clone())
}

/// An error kind this server does not know (floe-sequencer's `ErrorKind` is non-exhaustive):
/// answered as an internal error, and said on standard error so that it is not missed.
pub(crate) fn unexpected(kind: ErrorKind) {
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
}

/// A store's error in the server's own words: the store and the request's key (cut to
/// [`MAX_ECHO`]) and what went wrong, never what the store said about itself (a file path, a
/// server's address): that goes to standard error.
pub fn public(e: SeqError, handle: &StoreHandle, key: &str, asked: Asked) -> SeqError {
    let store = handle.name();
    let kind = handle.store().kind();
    let message = match e.kind {
        // The sequencer's words about an argument (a segment size, a key's length): no input
        // beyond a number, cut to a bound in case that changes.
        ErrorKind::InvalidArgument => echo(&e.message, MAX_DETAIL),
        ErrorKind::UnknownStore => format!("Sequencer store {} not found", echo(store, MAX_ECHO)),
        ErrorKind::Unsupported => match asked {
            Asked::NextId(Mode::Strong) => {
                format!("store {store} ({kind}) cannot serve STRONG: use WEAK")
            }
            Asked::NextId(Mode::Weak) => format!("store {store} ({kind}) cannot serve WEAK"),
            Asked::Segment => format!("store {store} ({kind}) cannot reserve segments"),
        },
        ErrorKind::Exhausted => format!(
            "the sequence of key {} in store {store} is exhausted: its next ID would pass i64::MAX",
            echo(key, MAX_ECHO)
        ),
        ErrorKind::Unavailable | ErrorKind::Io => {
            warn(Topic::Store, format_args!("store {store}: {}", e.message));
            format!("store {store} ({kind}) is unavailable or slow: retry later")
        }
        ErrorKind::Config => {
            warn(Topic::Store, format_args!("store {store}: {}", e.message));
            format!("store {store} ({kind}) is misconfigured: see the server's log")
        }
        ErrorKind::Corrupt => {
            warn(Topic::Store, format_args!("store {store}: {}", e.message));
            format!(
                "store {store} holds a value for key {} that floe did not write: see the server's log",
                echo(key, MAX_ECHO)
            )
        }
        other => {
            unexpected(other);
            warn(Topic::Store, format_args!("store {store}: {}", e.message));
            format!("store {store}: internal error: see the server's log")
        }
    };
    SeqError::new(e.kind, message)
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
) -> Result<(&'a StoreHandle, Mode), SeqError> {
    if sequencer.names().next().is_none() {
        return Err(SeqError::config("Sequencer store is not configured"));
    }
    if key.is_empty() {
        return Err(SeqError::new(
            ErrorKind::InvalidArgument,
            format!("Key is empty in sequencer store {}", echo(store, MAX_ECHO)),
        ));
    }
    let mode = mode.map_err(|e| SeqError::new(ErrorKind::InvalidArgument, e))?;
    let handle = sequencer.store(store).map_err(|e| match e.kind {
        // The sequencer's message lists every configured store: not for clients.
        ErrorKind::UnknownStore => SeqError::new(
            ErrorKind::UnknownStore,
            format!("Sequencer store {} not found", echo(store, MAX_ECHO)),
        ),
        _ => SeqError::new(e.kind, echo(&e.message, MAX_DETAIL)),
    })?;
    Key::check(key)
        .map_err(|e| SeqError::new(ErrorKind::InvalidArgument, echo(&e.to_string(), MAX_DETAIL)))?;
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
    }
}
