//! `floe`: generate and inspect IDs, and serve per-key sequences. A thin shell over `floe-core`: argument parsing,
//! formatting, and exit codes (0 ok, 2 bad input or a refused generation).

mod describe;
mod inspect;
mod serve;
mod worker;

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand, ValueEnum};
use floe_core::clock::SystemClock;
use floe_core::lexical::{worker_id_for_host, LexicalGenerator};
use floe_core::sno::{Partition, SnoGenerator, SnoSnapshot};
use floe_core::snowflake::{Layout, SnowflakeConfig};
use floe_core::ulid::UlidGenerator;
use floe_core::uuid7::{Uuid, Uuid7Generator};
use floe_registry::IdSpace;

use describe::{hex, Described};
use inspect::Format;

#[derive(Debug, Parser)]
#[command(
    name = "floe",
    version,
    about = "Distributed unique IDs: generate and inspect Snowflake, sno, LexicalUUID, UUIDv7 and ULID"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate IDs to standard output, one per line.
    Gen(GenArgs),
    /// Decode IDs into their parts (format detected from the text).
    Inspect(InspectArgs),
    /// Worker IDs in a registry: list, register, release.
    Worker(worker::WorkerArgs),
    /// Serve per-key sequences over gRPC (Layotto's GetNextId) and HTTP.
    Serve(serve::ServeArgs),
    /// Print a key's sequence IDs (or segments) from a store.
    Seq(serve::SeqArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Kind {
    /// 64-bit Snowflake (layouts: leaf, twitter, flake-idgen, or bit widths).
    Snowflake,
    /// 10-byte sno, 16 characters of base32.
    Sno,
    /// 128-bit Cassie LexicalUUID.
    Lexical,
    /// UUID version 7.
    Uuid7,
    /// ULID.
    Ulid,
}

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
    /// Layout: leaf, twitter, flake-idgen, or bit widths TS/WORKER/SEQ or TS/DC/WORKER/SEQ.
    #[arg(long, default_value = "leaf")]
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
    kind: Kind,
    /// How many IDs.
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
    /// sno metabyte.
    #[arg(long, default_value_t = 0)]
    meta: u8,
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
    #[arg(long, value_enum, default_value_t = Format::Auto)]
    format: Format,
    #[command(flatten)]
    snowflake: SnowflakeArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Gen(args) => gen(&args),
        Command::Inspect(args) => inspect_all(&args),
        Command::Worker(args) => worker::run(&args)
            .map(|()| ExitCode::SUCCESS)
            .map_err(Failure::Usage),
        Command::Serve(args) => serve::serve(&args)
            .map(|()| ExitCode::SUCCESS)
            .map_err(Failure::Usage),
        Command::Seq(args) => serve::seq(&args)
            .map(|()| ExitCode::SUCCESS)
            .map_err(Failure::Usage),
    };
    match result {
        Ok(code) => code,
        Err(Failure::Usage(msg)) => {
            eprintln!("floe: error: {msg}");
            ExitCode::from(2)
        }
        Err(Failure::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Io(e)) => {
            eprintln!("floe: error: {e}");
            ExitCode::from(1)
        }
    }
}

#[derive(Debug)]
enum Failure {
    /// Bad input or a refused generation: exit 2.
    Usage(String),
    Io(io::Error),
}

impl From<String> for Failure {
    fn from(msg: String) -> Self {
        Failure::Usage(msg)
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Io(e)
    }
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

/// Whether `layout` can issue IDs at this clock's time: its epoch is not in the future and its
/// timestamp field has not run out.
fn check_layout_now(layout: &Layout) -> Result<(), String> {
    let now_ms = floe_core::clock::Clock::now_nanos(&SystemClock) / 1_000_000;
    layout.validate_epoch(now_ms).map_err(|e| e.to_string())?;
    match layout.last_time_ms() {
        Some(last) if last < now_ms => Err(format!(
            "layout: its timestamp field ran out at {last} ms (Unix), before now ({now_ms} ms): choose a later epoch or more timestamp bits"
        )),
        _ => Ok(()),
    }
}

/// With a time unit longer than a millisecond, a generator that starts after `not_before_ms`
/// waits for the next unit: say so, or refuse when that is further away than `max_wait_ms`.
fn wait_for_unit(layout: &Layout, not_before_ms: u64, max_wait_ms: u64) -> Result<(), String> {
    let unit = layout.time_unit_ms();
    let Some(since) = not_before_ms.checked_sub(layout.epoch_ms()) else {
        return Ok(());
    };
    if unit <= 1 || not_before_ms == 0 {
        return Ok(());
    }
    let next = (since / unit)
        .checked_add(1)
        .and_then(|u| u.checked_mul(unit))
        .and_then(|ms| ms.checked_add(layout.epoch_ms()))
        .unwrap_or(u64::MAX);
    let now_ms = floe_core::clock::Clock::now_nanos(&SystemClock) / 1_000_000;
    let wait = next.saturating_sub(now_ms);
    if wait == 0 {
        return Ok(());
    }
    if wait > max_wait_ms {
        return Err(format!(
            "the previous run issued IDs in the time unit of {not_before_ms} ms (units of {unit} ms); the next unit starts at {next} ms, {wait} ms from now, more than --max-clock-wait-ms {max_wait_ms}: refusing to start (its IDs may repeat). Start again then, or use a shorter --time-unit-ms"
        ));
    }
    eprintln!("floe: waiting {wait} ms for the next time unit ({unit} ms units): the previous run used the one at {not_before_ms} ms");
    Ok(())
}

/// Unix ms of the time unit of a sno generator's last ID.
fn sno_last_ms(g: &SnoGenerator<SystemClock>) -> u64 {
    // wall_hi is a 32-bit unit count: the product fits, but say so in the arithmetic.
    u64::try_from(g.snapshot().wall_hi)
        .unwrap_or(0)
        .saturating_mul(4)
        .saturating_add(floe_core::sno::EPOCH * 1000)
}

pub(crate) fn host_name() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

/// Writes one generated ID in the chosen form: its text (written straight into the buffer,
/// no allocation), the hex of its big-endian bytes, or a JSON object of its parts.
fn emit<W: Write>(
    out: &mut W,
    output: Output,
    write_text: impl FnOnce(&mut W) -> io::Result<()>,
    bytes: impl AsRef<[u8]>,
    describe: impl FnOnce() -> Described,
) -> io::Result<()> {
    match output {
        Output::Text | Output::Dec => {
            write_text(out)?;
            out.write_all(b"\n")
        }
        Output::Hex => writeln!(out, "{}", hex(bytes.as_ref())),
        Output::Json => writeln!(out, "{}", describe().json_line()),
    }
}

fn gen(args: &GenArgs) -> Result<ExitCode, Failure> {
    if args.output == Output::Dec && args.kind != Kind::Snowflake {
        return Err(Failure::Usage(
            "--output dec applies to snowflake IDs only; use text, hex or json".into(),
        ));
    }
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let (n, output) = (args.count, args.output);
    match args.kind {
        Kind::Snowflake => {
            let layout = args.snowflake.layout()?;
            // Before any state is touched: a layout that cannot issue now fails as it is.
            check_layout_now(&layout)?;
            let mut config = SnowflakeConfig::new(layout);
            let mut lease = match &args.registry.registry {
                Some(_) => Some(worker::GenLease::acquire(
                    &args.registry,
                    &args.host,
                    IdSpace::snowflake(&layout),
                    "snowflake",
                )?),
                None => None,
            };
            config = match (&lease, args.id) {
                (Some(l), _) => config
                    .node_id(u64::from(l.lease.id))
                    .map_err(|e| e.to_string())?
                    .not_before_ms(l.lease.not_before_ms)
                    .fence(l.lease.fence.clone()),
                (None, Some(id)) => config.node_id(id).map_err(|e| e.to_string())?,
                (None, None) => config
                    .datacenter(args.datacenter.unwrap_or(0))
                    .worker(args.worker.unwrap_or(0)),
            };
            // Checked before the state directory is touched: a bad node fails as before.
            layout
                .check_node(config.datacenter, config.worker)
                .map_err(|e| e.to_string())?;
            // The durable time bound: the lease's, or the node's own slot.
            let standalone = match &lease {
                Some(l) => {
                    config = config.horizon(
                        l.lease
                            .horizon()
                            .ok_or_else(|| "internal: no time bound".to_string())?,
                    );
                    None
                }
                None => {
                    let node = (config.datacenter << layout.worker_bits()) | config.worker;
                    let started =
                        worker::standalone_horizon(&args.registry, &format!("snowflake-{node}"))?;
                    config = config
                        .not_before_ms(started.not_before_ms)
                        .horizon(started.horizon.horizon());
                    Some(started.horizon)
                }
            };
            if let Some(nb) = config.not_before_ms {
                wait_for_unit(&layout, nb, args.registry.max_clock_wait_ms)?;
            }
            let g = Arc::new(config.build(SystemClock).map_err(|e| e.to_string())?);
            if let Some(l) = &mut lease {
                let g = g.clone();
                l.start_heartbeats(move || g.last_timestamp_ms());
            }
            for _ in 0..n {
                let id = g.next_id().map_err(|e| e.to_string())?;
                emit(
                    &mut out,
                    output,
                    |o| write!(o, "{id}"),
                    id.to_be_bytes(),
                    || Described::snowflake(&layout, id),
                )?;
            }
            out.flush()?;
            if let Some(l) = lease {
                l.finish(g.last_timestamp_ms())?;
            }
            if let Some(h) = standalone {
                h.close(g.last_timestamp_ms()).map_err(|e| e.to_string())?;
            }
        }
        Kind::Sno => {
            let mut lease = match &args.registry.registry {
                Some(_) => Some(worker::GenLease::acquire(
                    &args.registry,
                    &args.host,
                    IdSpace::SNO_PARTITIONS,
                    "sno",
                )?),
                None => None,
            };
            let partition = match (&lease, &args.partition) {
                (Some(l), _) => Partition::from_u16(l.lease.id as u16),
                (None, Some(p)) => parse_partition(p)?,
                (None, None) => SnoGenerator::new(SystemClock)
                    .map_err(|e| e.to_string())?
                    .partition(),
            };
            // The durable time bound: the lease's, or the partition's own slot when it was
            // given by hand. (A partition from sno's in-process pool is drawn from the clock
            // at each start, so a restart gets another one: no slot is kept for it.)
            let standalone = match (&lease, &args.partition) {
                (None, Some(_)) => Some(worker::standalone_horizon(
                    &args.registry,
                    &format!("sno-{}", partition.as_u16()),
                )?),
                _ => None,
            };
            let (not_before_ms, horizon) = match (&lease, &standalone) {
                (Some(l), _) => (l.lease.not_before_ms, l.lease.horizon()),
                (None, Some(s)) => (s.not_before_ms, Some(s.horizon.horizon())),
                (None, None) => (0, None),
            };
            // Units of 4 ms since sno's epoch: both timelines (tick and tock) count as used
            // up to the not-before time, so nothing of the previous run's time is issued again.
            let wall_hi = (not_before_ms.saturating_sub(floe_core::sno::EPOCH * 1000) / 4) as i64;
            let snapshot = SnoSnapshot {
                partition,
                wall_hi,
                wall_safe: wall_hi,
                sequence: if wall_hi > 0 { u32::from(u16::MAX) } else { 0 },
                sequence_min: args.sequence_min,
                sequence_max: args.sequence_max,
                ..SnoSnapshot::default()
            };
            let mut g =
                SnoGenerator::from_snapshot(&snapshot, SystemClock).map_err(|e| e.to_string())?;
            if let Some(l) = &lease {
                g = g.with_fence(l.lease.fence.clone());
            }
            if let Some(h) = horizon {
                g = g.with_horizon(h);
            }
            let g = Arc::new(g);
            if let Some(l) = &mut lease {
                let g = g.clone();
                l.start_heartbeats(move || sno_last_ms(&g));
            }
            for _ in 0..n {
                let id = g.new_id(args.meta).map_err(|e| e.to_string())?;
                let text = |o: &mut _| Write::write_all(o, &id.encode());
                emit(&mut out, output, text, id.to_bytes(), || Described::Sno(id))?;
            }
            out.flush()?;
            if let Some(l) = lease {
                l.finish(sno_last_ms(&g))?;
            }
            if let Some(s) = standalone {
                s.horizon
                    .close(sno_last_ms(&g))
                    .map_err(|e| e.to_string())?;
            }
        }
        Kind::Lexical => {
            let worker = match (args.worker_id, &args.host) {
                (Some(w), _) => w,
                (None, Some(h)) => worker_id_for_host(h),
                (None, None) => worker_id_for_host(&host_name()),
            };
            let started = worker::standalone_horizon(
                &args.registry,
                &format!("lexical-{:016x}", worker as u64),
            )?;
            let g = LexicalGenerator::new(SystemClock, worker)
                .not_before_ms(started.not_before_ms)
                .horizon(started.horizon.horizon());
            for _ in 0..n {
                let id = g.next_id().map_err(|e| e.to_string())?;
                let text = |o: &mut _| Write::write_all(o, &id.encode());
                emit(&mut out, output, text, id.to_bytes(), || {
                    Described::Lexical(id)
                })?;
            }
            out.flush()?;
            // Timestamps run ahead of the clock past a million IDs a second.
            let last_ms = u64::try_from(g.last_timestamp_micros() / 1000).unwrap_or(0);
            started.horizon.close(last_ms).map_err(|e| e.to_string())?;
        }
        Kind::Uuid7 => {
            let g = Uuid7Generator::new(SystemClock);
            let mut buf = Uuid::encode_buffer();
            for _ in 0..n {
                let id = g.generate();
                let text = |o: &mut _| {
                    Write::write_all(o, id.as_hyphenated().encode_lower(&mut buf).as_bytes())
                };
                emit(&mut out, output, text, id.as_bytes(), || {
                    Described::uuid7(id)
                })?;
            }
        }
        Kind::Ulid => {
            let g = UlidGenerator::new(SystemClock);
            let mut buf = [0u8; 26];
            for _ in 0..n {
                let id = g.generate().map_err(|e| e.to_string())?;
                let text = |o: &mut _| Write::write_all(o, id.array_to_str(&mut buf).as_bytes());
                emit(&mut out, output, text, id.to_bytes(), || {
                    Described::Ulid(id)
                })?;
            }
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
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
