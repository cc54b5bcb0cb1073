//! `floe`: generate and inspect IDs, manage worker IDs, and serve every ID kind and per-key
//! sequences (`floe-server`). This crate holds argument parsing, formatting, and exit codes by
//! kind (see [`failure`]: 0 ok, 2 bad input, 69 unreachable,
//! 74 local I/O, 75 refused for now, 1 anything else).
// The doc comments of arguments are clap's help texts: `[:PATH]`, `[STORE:]` are their
// syntax, not links.
#![allow(rustdoc::broken_intra_doc_links)]
#![warn(unreachable_pub)]

mod connect;
mod describe;
mod failure;
mod gen;
mod inspect;
mod keys;
mod manpage;
mod present;
mod progress;
mod seq;
mod serve;
mod settings;
mod worker;

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use floe_core::sno::Partition;
use floe_core::snowflake::Layout;

use describe::Described;
pub(crate) use failure::Failure;
use inspect::Format;

/// `floe --version`: the version and the commit it was built from (build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("FLOE_BUILD_COMMIT"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "floe",
    version = VERSION,
    propagate_version = true,
    about = "Distributed unique IDs: generate and inspect Snowflake, sno, LexicalUUID, UUIDv7 and ULID",
    after_help = failure::EXIT_CODES_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate IDs to standard output, one per line (here, or by a `floe serve` with --server).
    Gen(GenArgs),
    /// Decode IDs into their parts (format detected from the text).
    Inspect(InspectArgs),
    /// Worker IDs in a registry: list, register, release.
    Worker(worker::WorkerArgs),
    /// Serve every ID kind and per-key sequences over gRPC (floe.v1, Layotto's GetNextId) and
    /// HTTP (floe's routes and Leaf's).
    Serve(Box<serve::ServeArgs>),
    /// Print a key's sequence IDs (or segments) from a store, or from a `floe serve` with
    /// --server.
    Seq(seq::SeqArgs),
    /// Scramble numbers (sequence IDs) into non-guessable public IDs: FF1 format-preserving
    /// encryption (AES-256), a keyed permutation, so no two numbers give the same ID. Prints
    /// the key ID, then the scrambled number zero-padded (--raw: the number alone).
    Scramble(present::ScrambleArgs),
    /// Read scrambled IDs back into their numbers, with whichever key of the file their
    /// first digit names.
    Unscramble(present::ScrambleArgs),
    /// Print a shell completion script to standard output, e.g.
    /// `floe completions bash > /etc/bash_completion.d/floe`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) of floe, or of one of its commands (`floe man gen`,
    /// `floe man worker list`); with --out-dir, write every page as floe.1, floe-gen.1, ...
    Man {
        /// The command whose page to print (default: floe's own).
        #[arg(conflicts_with = "out_dir")]
        command: Vec<String>,
        /// Write every page into this directory instead (e.g. /usr/share/man/man1).
        #[arg(long, value_name = "DIR")]
        out_dir: Option<std::path::PathBuf>,
    },
}

/// The kinds of ID, as `floe gen KIND` takes them: floe-core's own list, its names and
/// summaries the help's.
fn kind_parser() -> impl clap::builder::TypedValueParser<Value = Kind> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(Kind::ALL.map(|k| PossibleValue::new(k.name()).help(k.summary())))
        .try_map(|name| Kind::parse(&name))
}

use floe_core::kind::IdKind as Kind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// The format's usual text (decimal for Snowflake).
    Text,
    /// Decimal (Snowflake only).
    Dec,
    /// Hex of the ID's big-endian bytes.
    Hex,
    /// One JSON object per line, the ID and its parts (IDs as strings).
    Json,
}

#[derive(Debug, Args)]
struct SnowflakeArgs {
    #[arg(
        long,
        default_value = "leaf",
        help = layout_help(
            "Layout (with `gen --server`: the name of one of the server's Snowflake generators, \
             the default one when not given)"
        )
    )]
    layout: String,
    /// Epoch: Unix milliseconds or an RFC 3339 time (default: the layout's).
    #[arg(long)]
    epoch: Option<String>,
    /// Time unit in milliseconds (default 1).
    #[arg(long)]
    time_unit_ms: Option<u64>,
}

impl SnowflakeArgs {
    fn layout(&self) -> Result<Layout, String> {
        let mut layout = Layout::preset(&self.layout).map_err(|e| e.to_string())?;
        if let Some(epoch) = &self.epoch {
            layout = layout.with_epoch_ms(parse_epoch(epoch)?);
        }
        if let Some(unit) = self.time_unit_ms {
            layout = layout.with_time_unit_ms(unit);
        }
        layout.validate().map_err(|e| e.to_string())?;
        Ok(layout)
    }
}

#[derive(Debug, Args)]
struct GenArgs {
    /// The kind of ID.
    #[arg(value_parser = kind_parser())]
    kind: Kind,
    /// How many IDs. With --server: more than one are streamed in messages of the server's
    /// --max-batch, at most 1,000,000,000 in all.
    #[arg(short = 'n', long = "count", default_value_t = 1)]
    count: u64,
    /// Output form.
    #[arg(short, long, value_enum, default_value_t = Output::Text)]
    output: Output,
    #[command(flatten)]
    snowflake: SnowflakeArgs,
    /// Snowflake datacenter field.
    #[arg(long, conflicts_with_all = ["id", "registry"])]
    datacenter: Option<u64>,
    /// Snowflake worker field.
    #[arg(long, conflicts_with_all = ["id", "registry"])]
    worker: Option<u64>,
    /// Snowflake node number (datacenter = high bits, worker = low bits), as flake-idgen's id.
    #[arg(long)]
    id: Option<u64>,
    /// sno metabyte [default: 0; with --server, the server's default].
    #[arg(long)]
    meta: Option<u8>,
    /// sno partition: 0-65535, or 0x0000-0xffff (default: from the in-process pool).
    #[arg(long)]
    partition: Option<String>,
    /// sno lower sequence bound.
    #[arg(long, default_value_t = 0)]
    sequence_min: u16,
    /// sno upper sequence bound.
    #[arg(long, default_value_t = u16::MAX)]
    sequence_max: u16,
    /// LexicalUUID worker ID (default: Cassie's FNV-1a of the host name).
    #[arg(long, allow_hyphen_values = true, conflicts_with = "host")]
    worker_id: Option<i64>,
    /// Host name: hashed for a LexicalUUID worker ID; the identity's host with --registry
    /// (default: this machine's).
    #[arg(long)]
    host: Option<String>,
    /// Snowflake worker ID / sno partition from a registry instead of the options above.
    #[command(flatten)]
    registry: worker::RegistryArgs,
    /// Ask a running `floe serve` for the IDs over gRPC instead of generating them here:
    /// http://HOST:PORT, https://HOST:PORT (TLS) or HOST:PORT, its gRPC address. The server's generators,
    /// node numbers and time bounds are used; the options that set up a local generator are
    /// refused with it.
    #[arg(
        long,
        value_name = "URL",
        conflicts_with_all = [
            "epoch", "time_unit_ms", "datacenter", "worker", "id", "partition",
            "sequence_min", "sequence_max", "worker_id", "host", "registry", "service", "port",
            "state_dir", "port_fallback", "start_from_cache", "reclaim_after", "max_clock_wait_ms", "template",
        ]
    )]
    server: Option<String>,
    #[command(flatten)]
    client: connect::ClientArgs,
    #[command(flatten)]
    present: present::TemplateArgs,
    /// Whether --layout was given (its default, leaf, is not a generator name on a server).
    #[arg(skip)]
    layout_given: bool,
}

#[derive(Debug, Args)]
struct InspectArgs {
    /// IDs to decode; `-` reads one per line from standard input.
    #[arg(required = true, allow_negative_numbers = true)]
    ids: Vec<String>,
    /// One JSON object per ID.
    #[arg(long)]
    json: bool,
    /// The format, when the text is ambiguous.
    #[arg(long, value_parser = inspect::format_parser(), default_value = "auto")]
    format: Format,
    #[command(flatten)]
    snowflake: SnowflakeArgs,
}

/// floe's command line, its help showing the configuration's defaults ([`settings`]).
fn command() -> clap::Command {
    settings::with_defaults(Cli::command())
}

fn main() -> ExitCode {
    let matches = command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Command::Gen(args) = &mut cli.command {
        args.layout_given = matches
            .subcommand_matches("gen")
            .and_then(|m| m.value_source("layout"))
            == Some(ValueSource::CommandLine);
    }
    let result = match cli.command {
        Command::Gen(args) => gen::run(&args),
        Command::Inspect(args) => inspect_all(&args),
        Command::Worker(args) => worker::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Serve(args) => serve::serve(&args).map(|()| ExitCode::SUCCESS),
        Command::Seq(args) => seq::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Scramble(args) => present::scramble(&args, true).map(|()| ExitCode::SUCCESS),
        Command::Unscramble(args) => present::scramble(&args, false).map(|()| ExitCode::SUCCESS),
        Command::Completions { shell } => completions(shell).map(|()| ExitCode::SUCCESS),
        Command::Man { command, out_dir } => {
            man(&command, out_dir.as_deref()).map(|()| ExitCode::SUCCESS)
        }
    };
    result.unwrap_or_else(Failure::report)
}

/// `floe completions SHELL`.
fn completions(shell: clap_complete::Shell) -> Result<(), Failure> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command(), "floe", &mut out);
    let mut stdout = io::stdout().lock();
    stdout.write_all(&out)?;
    stdout.flush()?;
    Ok(())
}

/// `floe man [COMMAND...]` / `floe man --out-dir DIR`: clap_mangen's sections and floe's
/// EXAMPLES, ENVIRONMENT, FILES and EXIT STATUS ([`manpage`]).
fn man(page_of: &[String], out_dir: Option<&std::path::Path>) -> Result<(), Failure> {
    // Built, so that each command's page is named floe-gen, floe-worker-list, ...
    let mut cmd = command().disable_help_subcommand(true);
    cmd.build();
    if let Some(dir) = out_dir {
        let in_dir = |e: io::Error| {
            Failure::Io(io::Error::new(
                e.kind(),
                format!("--out-dir {}: {e}", dir.display()),
            ))
        };
        std::fs::create_dir_all(dir).map_err(in_dir)?;
        let mut result = Ok(());
        manpage::walk(&cmd, "floe", &mut |name, page| {
            if result.is_err() {
                return;
            }
            let mut out = Vec::new();
            result = manpage::render(name, page, &cmd, &mut out)
                .and_then(|()| std::fs::write(dir.join(format!("{name}.1")), out));
        });
        return result.map_err(in_dir);
    }
    let mut page = &cmd;
    let mut name = String::from("floe");
    for sub in page_of {
        page = page.find_subcommand(sub).ok_or_else(|| {
            let known: Vec<&str> = page.get_subcommands().map(|c| c.get_name()).collect();
            Failure::Usage(format!(
                "man: no command {} under `{}`: expected one of {}",
                inspect::shown(sub),
                page.get_display_name().unwrap_or(page.get_name()),
                known.join(", ")
            ))
        })?;
        name = format!("{name}-{}", page.get_name());
    }
    let mut out = Vec::new();
    manpage::render(&name, page, &cmd, &mut out)?;
    let mut stdout = io::stdout().lock();
    stdout.write_all(&out)?;
    stdout.flush()?;
    Ok(())
}

/// The help of a `--layout` flag: `what`, then every preset with the system it matches.
pub(crate) fn layout_help(what: &str) -> String {
    format!(
        "{what}: {}; or bit widths TS/WORKER/SEQ or TS/DC/WORKER/SEQ",
        Layout::PRESET_HELP
    )
}

fn parse_epoch(text: &str) -> Result<u64, String> {
    const EXPECTED: &str =
        "expected Unix milliseconds (0 or more) or an RFC 3339 time such as 2023-01-01T00:00:00Z";
    let bad = |why: &str| format!("invalid epoch {}: {why}{EXPECTED}", inspect::shown(text));
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    // Digits only: u64::from_str would also take `+5`.
    if digits(text) {
        return text
            .parse::<u64>()
            .map_err(|_| bad("more than 18446744073709551615 ms; "));
    }
    if text.strip_prefix('-').is_some_and(digits) {
        return Err(bad("before 1970; "));
    }
    let t = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|_| bad(""))?;
    // `time` reads a leap second (`23:59:60`) as 23:59:59.999999999; say what it is instead.
    if text.get(17..19) == Some("60") {
        return Err(bad("a leap second (:60), which no Unix time names; "));
    }
    let nanos = t.unix_timestamp_nanos();
    // Any time before 1970, even by less than a millisecond (truncated towards zero,
    // 1969-12-31T23:59:59.9995Z would read as 0).
    if nanos < 0 {
        return Err(bad("before 1970; "));
    }
    if nanos % 1_000_000 != 0 {
        return Err(bad("finer than a millisecond; "));
    }
    u64::try_from(nanos / 1_000_000).map_err(|_| bad("past 18446744073709551615 ms; "))
}

fn parse_partition(text: &str) -> Result<Partition, String> {
    let (digits, radix) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(h) => (h, 16),
        None => (text, 10),
    };
    // Digits only: u16::from_str_radix would also take a sign (`+5`, `0x+ff`).
    let parsed = if !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix)) {
        u16::from_str_radix(digits, radix).ok()
    } else {
        None
    };
    parsed.map(Partition::from_u16).ok_or_else(|| {
        format!(
            "invalid partition {}: expected 0-65535 or 0x0000-0xffff",
            inspect::shown(text)
        )
    })
}

/// The async runtime of `serve` and `seq`.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

pub(crate) fn host_name() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

/// `floe inspect`: each argument is an ID (trimmed; an empty one is an error), `-` reads one
/// ID a line from standard input (trimmed; blank lines skipped; a line not UTF-8 or longer
/// than 1024 bytes is an error naming its number). A bad ID is reported on standard error and
/// the rest are still read; the exit code is then 2.
fn inspect_all(args: &InspectArgs) -> Result<ExitCode, Failure> {
    let layout = args.snowflake.layout()?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut failed = false;
    let mut first = true;
    let mut one = |result: Result<Described, String>,
                   out: &mut BufWriter<io::StdoutLock<'_>>|
     -> io::Result<()> {
        match result {
            Ok(d) if args.json => writeln!(out, "{}", d.json_line()),
            Ok(d) => {
                if !first {
                    writeln!(out)?;
                }
                first = false;
                write!(out, "{}", d.text_block())
            }
            Err(msg) => {
                // What came before goes out first, so the error stands where the ID stood.
                out.flush()?;
                eprintln!("floe: error: {msg}");
                failed = true;
                Ok(())
            }
        }
    };
    for id in &args.ids {
        if id != "-" {
            one(inspect::inspect(id.trim(), args.format, &layout), &mut out)?;
            continue;
        }
        let stdin = io::stdin();
        let mut input = stdin.lock();
        let mut line = Vec::new();
        let mut number: u64 = 0;
        let read_error = |e: io::Error| io::Error::new(e.kind(), format!("standard input: {e}"));
        while let Some(too_long) =
            inspect::read_line(&mut input, &mut line, inspect::MAX_LINE).map_err(read_error)?
        {
            number = number.saturating_add(1);
            match inspect::stdin_line(number, &line, too_long) {
                Ok(None) => {}
                Ok(Some(text)) => one(
                    inspect::inspect(text, args.format, &layout)
                        .map_err(|e| format!("standard input line {number}: {e}")),
                    &mut out,
                )?,
                Err(msg) => one(Err(msg), &mut out)?,
            }
        }
    }
    out.flush()?;
    Ok(if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}
