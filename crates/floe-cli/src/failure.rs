//! Why a command failed, and its exit code (like sysexits.h): each failure gets its kind where
//! it is produced, from the typed errors of floe-registry, floe-sequencer, floe-core and gRPC,
//! never from its message.

use std::io;
use std::process::ExitCode;

use floe_core::lexical::LexicalError;
use floe_core::sno::SnoError;
use floe_core::snowflake::SnowflakeError;
use floe_core::ulid::UlidError;
use floe_registry::RegistryError;
use floe_sequencer::SeqError;
use tonic::Code;

/// The exit codes, documented in `floe --help` ([`EXIT_CODES_HELP`]).
pub(crate) mod code {
    /// Bad usage, input or configuration (clap's own code for a bad command line too).
    pub(crate) const USAGE: u8 = 2;
    /// EX_UNAVAILABLE: a registry, store or `--server` that cannot be reached.
    pub(crate) const UNAVAILABLE: u8 = 69;
    /// EX_IOERR: reading or writing a local file, standard input or output failed.
    pub(crate) const IO: u8 = 74;
    /// EX_TEMPFAIL: refused for now, the same command may succeed later.
    pub(crate) const TEMPFAIL: u8 = 75;
    /// Anything else.
    pub(crate) const OTHER: u8 = 1;
}

/// The exit codes, as `floe --help` ends.
pub(crate) const EXIT_CODES_HELP: &str = "\
Exit codes:
  0   success
  1   any other failure (e.g. a store holding something floe did not write)
  2   bad usage, input or configuration (an unknown option, a bad ID, layout or URL)
  69  unavailable: a registry, store or --server that cannot be reached, or an embedded
      store another floe process holds (EX_UNAVAILABLE)
  74  a local I/O error: the state directory, standard input or output (EX_IOERR)
  75  refused for now, try again later: the clock is behind the last recorded time, the
      worker ID is held by another live process, or its lease was lost (EX_TEMPFAIL)";

/// The exit codes, as the manual pages' EXIT STATUS says them (the same as
/// [`EXIT_CODES_HELP`], at more length).
pub(crate) const EXIT_CODES: [(u8, &str); 6] = [
    (0, "Success (also a closed pipe, as with `| head`)."),
    (
        code::OTHER,
        "Any other failure: every worker ID taken, a store holding what floe did not write, a \
         port in use.",
    ),
    (
        code::USAGE,
        "Bad usage, input or configuration: an unknown option, a bad ID, layout, URL or \
         configuration file, TLS files. A service manager should not restart on it \
         (RestartPreventExitStatus=2).",
    ),
    (
        code::UNAVAILABLE,
        "EX_UNAVAILABLE: a registry, store or --server that cannot be reached, or an embedded \
         store another floe process holds.",
    ),
    (
        code::IO,
        "EX_IOERR: a local I/O error: the state directory, standard input or output.",
    ),
    (
        code::TEMPFAIL,
        "EX_TEMPFAIL: refused for now, try again later: the clock is behind the last \
         recorded time, the worker ID is held by another live process, or its lease was lost.",
    ),
];

/// A failed command: its message (printed as `floe: error: ...`) and its kind.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Bad input or configuration: exit 2.
    Usage(String),
    /// A registry, store or server that cannot be reached: exit 69.
    Unavailable(String),
    /// Refused for now (clock behind, ID held elsewhere, lease lost): exit 75.
    TempFail(String),
    /// A local I/O error: exit 74 (a closed pipe on standard output is success).
    Io(io::Error),
    /// Anything else: exit 1.
    Other(String),
}

impl Failure {
    /// The exit code of this failure.
    pub(crate) fn code(&self) -> u8 {
        match self {
            Failure::Usage(_) => code::USAGE,
            Failure::Unavailable(_) => code::UNAVAILABLE,
            Failure::TempFail(_) => code::TEMPFAIL,
            Failure::Io(_) => code::IO,
            Failure::Other(_) => code::OTHER,
        }
    }

    /// Prints the message to standard error and gives the exit code.
    pub(crate) fn report(self) -> ExitCode {
        match self {
            Failure::Io(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            other => {
                let code = other.code();
                eprintln!("floe: error: {}", other.message());
                ExitCode::from(code)
            }
        }
    }

    /// The message, without the kind.
    pub(crate) fn message(&self) -> String {
        match self {
            Failure::Usage(m)
            | Failure::Unavailable(m)
            | Failure::TempFail(m)
            | Failure::Other(m) => m.clone(),
            Failure::Io(e) => e.to_string(),
        }
    }

    /// A gRPC status from a `--server`, as `server: CODE: message`.
    pub(crate) fn from_status(code: Code, message: String) -> Failure {
        match code {
            // The server, or the store behind it, cannot serve now.
            Code::Unavailable | Code::DeadlineExceeded => Failure::Unavailable(message),
            // What was asked is refused as it is.
            Code::InvalidArgument
            | Code::NotFound
            | Code::OutOfRange
            | Code::FailedPrecondition
            | Code::AlreadyExists
            | Code::Unimplemented
            // No token, or one the server does not accept: the caller's --token-file.
            | Code::Unauthenticated
            | Code::PermissionDenied => Failure::Usage(message),
            Code::Ok
            | Code::Cancelled
            | Code::Unknown
            | Code::ResourceExhausted
            | Code::Aborted
            | Code::Internal
            | Code::DataLoss => Failure::Other(message),
        }
    }
}

impl From<String> for Failure {
    /// A plain message is bad input: the commands' own checks of their arguments.
    fn from(msg: String) -> Self {
        Failure::Usage(msg)
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Io(e)
    }
}

impl From<RegistryError> for Failure {
    /// By floe-server's table ([`floe_server::StartErrorKind::of_registry`]), which
    /// `floe serve` follows too.
    fn from(e: RegistryError) -> Self {
        Failure::from(floe_server::StartError {
            kind: floe_server::StartErrorKind::of_registry(e.kind),
            message: e.to_string(),
        })
    }
}

impl From<floe_server::StartError> for Failure {
    fn from(e: floe_server::StartError) -> Self {
        use floe_server::StartErrorKind as K;
        match e.kind {
            K::Config => Failure::Usage(e.message),
            K::Unavailable => Failure::Unavailable(e.message),
            K::Refused => Failure::TempFail(e.message),
            K::Io => Failure::Io(io::Error::other(e.message)),
            K::Other => Failure::Other(e.message),
        }
    }
}

impl From<SeqError> for Failure {
    /// By floe-server's table ([`floe_server::StartErrorKind::of_store`]), which `floe serve`
    /// follows too.
    fn from(e: SeqError) -> Self {
        Failure::from(floe_server::StartError {
            kind: floe_server::StartErrorKind::of_store(e.kind),
            message: e.to_string(),
        })
    }
}

impl From<SnowflakeError> for Failure {
    fn from(e: SnowflakeError) -> Self {
        let m = e.to_string();
        match e {
            SnowflakeError::InvalidLayout { .. }
            | SnowflakeError::InvalidNode { .. }
            | SnowflakeError::InvalidParts { .. }
            | SnowflakeError::ClockBeforeEpoch { .. } => Failure::Usage(m),
            SnowflakeError::ClockMovedBackwards { .. }
            | SnowflakeError::SequenceExhausted { .. }
            | SnowflakeError::LeaseLost
            | SnowflakeError::HorizonStalled(_) => Failure::TempFail(m),
            SnowflakeError::TimestampOverflow { .. } => Failure::Other(m),
            // A kind added later (the enum is non-exhaustive): 1 until it is given a code.
            _ => Failure::Other(m),
        }
    }
}

impl From<SnoError> for Failure {
    fn from(e: SnoError) -> Self {
        let m = e.to_string();
        match e {
            SnoError::InvalidSequenceBounds { .. } | SnoError::TimeOutOfRange { .. } => {
                Failure::Usage(m)
            }
            SnoError::PartitionPoolExhausted
            | SnoError::LeaseLost
            | SnoError::HorizonStalled(_) => Failure::TempFail(m),
            // A kind added later (the enum is non-exhaustive): 1 until it is given a code.
            _ => Failure::Other(m),
        }
    }
}

impl From<LexicalError> for Failure {
    fn from(e: LexicalError) -> Self {
        let m = e.to_string();
        match e {
            LexicalError::HorizonStalled(_) | LexicalError::ClockBehind { .. } => {
                Failure::TempFail(m)
            }
            LexicalError::TimestampOverflow => Failure::Other(m),
            // A kind added later (the enum is non-exhaustive): 1 until it is given a code.
            _ => Failure::Other(m),
        }
    }
}

impl From<floe_core::horizon::HorizonStalled> for Failure {
    /// The durable time bound did not move (a slow or full disk): it may pass.
    fn from(e: floe_core::horizon::HorizonStalled) -> Self {
        Failure::TempFail(e.to_string())
    }
}

impl From<UlidError> for Failure {
    /// Every ULID of this millisecond was issued (the next millisecond has more), or the
    /// durable time bound did not move: both pass.
    fn from(e: UlidError) -> Self {
        let m = e.to_string();
        match e {
            UlidError::Overflow | UlidError::HorizonStalled(_) => Failure::TempFail(m),
            // A kind added later (the enum is non-exhaustive): 1 until it is given a code.
            _ => Failure::Other(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_registry::ErrorKind as RegistryKind;
    use floe_sequencer::ErrorKind as SeqKind;

    #[test]
    fn kinds_have_their_codes() {
        let reg = |kind| Failure::from(RegistryError::new(kind, "x".to_string())).code();
        assert_eq!(reg(RegistryKind::Unavailable), 69);
        assert_eq!(reg(RegistryKind::NoWorkerId), 69);
        assert_eq!(reg(RegistryKind::ClockBehind), 75);
        assert_eq!(reg(RegistryKind::Conflict), 75);
        assert_eq!(reg(RegistryKind::Config), 2);
        assert_eq!(reg(RegistryKind::SpaceFull), 1);
        assert_eq!(reg(RegistryKind::Io), 74);
        let seq = |kind| Failure::from(SeqError::new(kind, "x")).code();
        assert_eq!(seq(SeqKind::Unavailable), 69);
        assert_eq!(seq(SeqKind::Config), 2);
        assert_eq!(seq(SeqKind::Corrupt), 1);
        assert_eq!(seq(SeqKind::Io), 74);
        assert_eq!(
            Failure::from_status(Code::Unauthenticated, "x".into()).code(),
            2,
            "the caller's token"
        );
        assert_eq!(Failure::from(SnowflakeError::LeaseLost).code(), 75);
        assert_eq!(Failure::from(io::Error::other("disk")).code(), 74);
        assert_eq!(
            Failure::from_status(Code::Unavailable, "x".into()).code(),
            69
        );
        assert_eq!(
            Failure::from_status(Code::InvalidArgument, "x".into()).code(),
            2
        );
    }

    #[test]
    fn the_help_names_every_code() {
        for c in [
            code::USAGE,
            code::UNAVAILABLE,
            code::IO,
            code::TEMPFAIL,
            code::OTHER,
        ] {
            assert!(
                EXIT_CODES_HELP.contains(&format!("\n  {c} ")),
                "{c} missing from the help"
            );
        }
    }

    /// The manual pages' EXIT STATUS says the help's codes, in the same order.
    #[test]
    fn the_man_pages_say_the_help_s_codes() {
        let in_help: Vec<u8> = EXIT_CODES_HELP
            .lines()
            .filter_map(|l| {
                l.strip_prefix("  ")?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .collect();
        let in_man: Vec<u8> = EXIT_CODES.iter().map(|(c, _)| *c).collect();
        assert_eq!(in_help, in_man);
    }
}
