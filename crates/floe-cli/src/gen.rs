//! `floe gen`: one function per kind of ID, and the output they share.

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;
use std::sync::Arc;

use floe_core::clock::{Clock, SystemClock};
use floe_core::lexical::{worker_id_for_host, LexicalGenerator, LexicalUuid};
use floe_core::sno::{Partition, SnoGenerator, SnoId, SnoSnapshot};
use floe_core::snowflake::{Layout, SnowflakeConfig};
use floe_core::ulid::{Ulid, UlidGenerator};
use floe_core::uuid7::{Uuid, Uuid7Generator};
use floe_registry::horizon::{HorizonFile, Started};
use floe_registry::IdSpace;
use floe_server::proto_floe::{NextIdsRequest, NextIdsResponse, StreamIdsRequest};

use crate::connect::{finished, status, take, Client};
use crate::describe::{hex, Described};
use crate::progress::Progress;
use crate::{host_name, parse_partition, worker, Failure, GenArgs, Kind, Output};

/// `floe gen`: `args.count` IDs of `args.kind` to standard output, one a line.
pub(crate) fn run(args: &GenArgs) -> Result<ExitCode, Failure> {
    if args.output == Output::Dec && args.kind != Kind::Snowflake {
        return Err(Failure::Usage(
            "--output dec applies to snowflake IDs only; use text, hex or json".into(),
        ));
    }
    if args.present.template.is_some() {
        if args.kind != Kind::Snowflake {
            return Err(Failure::Usage(
                "--template writes numbers: it applies to snowflake IDs (and `floe seq`)".into(),
            ));
        }
        if args.output != Output::Text {
            return Err(Failure::Usage(
                "--template writes text: --output must be text".into(),
            ));
        }
    }
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    if let Some(url) = &args.server {
        remote(url, args, &mut out)?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    match args.kind {
        Kind::Snowflake => snowflake(args, &mut out)?,
        Kind::Sno => sno(args, &mut out)?,
        Kind::Lexical => lexical(args, &mut out)?,
        Kind::Uuid7 => uuid7(args, &mut out)?,
        Kind::Ulid => ulid(args, &mut out)?,
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
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

/// Whether a server's IDs of `kind` can be written in `output`: a Snowflake ID's parts depend on
/// its layout, which the server does not tell.
pub(crate) fn check_answerable(kind: Kind, output: Output) -> Result<(), Failure> {
    if kind == Kind::Snowflake && output == Output::Json {
        return Err(Failure::Usage(
            "--output json: the server does not say its Snowflake layout, so the parts cannot be decoded here; use -o dec and `floe inspect --json --layout LAYOUT -`".into(),
        ));
    }
    Ok(())
}

/// One of a server's IDs as its bytes: exactly `N`, or an error naming the kind.
fn answered_bytes<const N: usize>(kind: &str, bytes: &[u8]) -> Result<[u8; N], Failure> {
    bytes.try_into().map_err(|_| {
        Failure::Usage(format!(
            "server: answered a {kind} ID of {} bytes, expected {N}",
            bytes.len()
        ))
    })
}

/// Writes the IDs of a server's answer (`floe gen --server`) as the local generators write
/// theirs: the same text, hex and JSON, decoded from the answer's numbers (Snowflake) or bytes
/// (the other kinds).
pub(crate) fn write_answer<W: Write>(
    out: &mut W,
    kind: Kind,
    output: Output,
    answer: &NextIdsResponse,
) -> Result<(), Failure> {
    let wrong_field = |field: &str| {
        Failure::Usage(format!(
            "server: answered {} IDs in `{field}`, which is not that kind's field",
            format!("{kind:?}").to_lowercase()
        ))
    };
    if kind == Kind::Snowflake {
        if !answer.binary.is_empty() {
            return Err(wrong_field("binary"));
        }
        check_answerable(kind, output)?;
        for &id in &answer.numbers {
            match output {
                Output::Text | Output::Dec => writeln!(out, "{id}")?,
                Output::Hex => writeln!(out, "{}", hex(&id.to_be_bytes()))?,
                // Refused above: the layout is not known.
                Output::Json => {}
            }
        }
        return Ok(());
    }
    if !answer.numbers.is_empty() {
        return Err(wrong_field("numbers"));
    }
    let mut uuid_buf = Uuid::encode_buffer();
    let mut ulid_buf = [0u8; 26];
    for bytes in &answer.binary {
        match kind {
            Kind::Sno => {
                let id = SnoId::from_bytes(answered_bytes("sno", bytes)?);
                let text = |o: &mut _| Write::write_all(o, &id.encode());
                emit(out, output, text, id.to_bytes(), || Described::Sno(id))?;
            }
            Kind::Lexical => {
                let id = LexicalUuid::from_bytes(answered_bytes("lexical", bytes)?);
                let text = |o: &mut _| Write::write_all(o, &id.encode());
                emit(out, output, text, id.to_bytes(), || Described::Lexical(id))?;
            }
            Kind::Uuid7 => {
                let id = Uuid::from_bytes(answered_bytes("uuid7", bytes)?);
                let text = |o: &mut _| {
                    Write::write_all(o, id.as_hyphenated().encode_lower(&mut uuid_buf).as_bytes())
                };
                emit(out, output, text, id.as_bytes(), || Described::uuid7(id))?;
            }
            Kind::Ulid => {
                let id = Ulid::from_bytes(answered_bytes("ulid", bytes)?);
                let text =
                    |o: &mut _| Write::write_all(o, id.array_to_str(&mut ulid_buf).as_bytes());
                emit(out, output, text, id.to_bytes(), || Described::Ulid(id))?;
            }
            Kind::Snowflake => return Err(wrong_field("binary")),
        }
    }
    Ok(())
}

/// Whether `layout` can issue IDs at this clock's time: its epoch is not in the future and its
/// timestamp field has not run out.
fn check_layout_now(layout: &Layout) -> Result<(), String> {
    let now_ms = SystemClock.now_nanos() / 1_000_000;
    layout
        .validate_now(now_ms)
        .map_err(|e| format!("layout: {e}"))
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
    let now_ms = SystemClock.now_nanos() / 1_000_000;
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

fn snowflake<W: Write>(args: &GenArgs, out: &mut W) -> Result<(), Failure> {
    let layout = args.snowflake.layout()?;
    let presenter = args.present.presenter()?;
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
            .node_id(u64::from(l.lease.id))?
            .not_before_ms(l.lease.not_before_ms)
            .fence(l.lease.fence.clone()),
        (None, Some(id)) => config.node_id(id)?,
        (None, None) => config
            .datacenter(args.datacenter.unwrap_or(0))
            .worker(args.worker.unwrap_or(0)),
    };
    // Checked before the state directory is touched: a bad node fails as before.
    layout.check_node(config.datacenter, config.worker)?;
    // The durable time bound: the lease's, or the node's own slot.
    let standalone = match &lease {
        Some(l) => {
            config = config.horizon(
                l.lease
                    .horizon()
                    .ok_or_else(|| Failure::Other("internal: no time bound".into()))?,
            );
            None
        }
        None => {
            let node = (config.datacenter << layout.worker_bits()) | config.worker;
            let started = worker::standalone_horizon(&args.registry, &format!("snowflake-{node}"))?;
            config = config
                .not_before_ms(started.not_before_ms)
                .horizon(started.horizon.horizon());
            Some(started.horizon)
        }
    };
    if let Some(nb) = config.not_before_ms {
        wait_for_unit(&layout, nb, args.registry.max_clock_wait_ms).map_err(Failure::TempFail)?;
    }
    let g = Arc::new(config.build(SystemClock)?);
    if let Some(p) = &presenter {
        // A width no ID can fit today is refused before any ID is made.
        let smallest = layout.smallest_id_at(SystemClock.now_nanos() / 1_000_000);
        p.template
            .check_fits(smallest, p.scrambler.as_ref())
            .map_err(|e| Failure::Usage(format!("--{e}")))?;
    }
    if let Some(l) = &mut lease {
        let g = g.clone();
        l.start_heartbeats(move || g.last_timestamp_ms());
    }
    let mut progress = Progress::new(args.count);
    let mut buf = String::new();
    for _ in 0..args.count {
        progress.add(1);
        let id = g.next_id()?;
        if let Some(p) = &presenter {
            // {date} is the ID's own time.
            p.write(out, &mut buf, id, layout.decode(id).timestamp_ms)?;
            continue;
        }
        emit(
            out,
            args.output,
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
        h.close(g.last_timestamp_ms())?;
    }
    Ok(())
}

fn sno<W: Write>(args: &GenArgs, out: &mut W) -> Result<(), Failure> {
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
        (None, None) => SnoGenerator::new(SystemClock)?.partition(),
    };
    // The durable time bound: the lease's, or the partition's own slot when it was given by
    // hand. (A partition from sno's in-process pool is drawn from the clock at each start, so
    // a restart gets another one: no slot is kept for it.)
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
    // Nothing of the previous run's time is issued again (0: no previous run).
    let snapshot = SnoSnapshot::starting_after(
        partition,
        not_before_ms,
        args.sequence_min,
        args.sequence_max,
    );
    let mut g = SnoGenerator::from_snapshot(&snapshot, SystemClock)?;
    if let Some(l) = &lease {
        g = g.with_fence(l.lease.fence.clone());
    }
    if let Some(h) = horizon {
        g = g.with_horizon(h);
    }
    let g = Arc::new(g);
    if let Some(l) = &mut lease {
        let g = g.clone();
        l.start_heartbeats(move || g.last_time_ms());
    }
    let mut progress = Progress::new(args.count);
    for _ in 0..args.count {
        progress.add(1);
        let id = g.new_id(args.meta.unwrap_or(0))?;
        let text = |o: &mut _| Write::write_all(o, &id.encode());
        emit(out, args.output, text, id.to_bytes(), || Described::Sno(id))?;
    }
    out.flush()?;
    if let Some(l) = lease {
        l.finish(g.last_time_ms())?;
    }
    if let Some(s) = standalone {
        s.horizon.close(g.last_time_ms())?;
    }
    Ok(())
}

fn lexical<W: Write>(args: &GenArgs, out: &mut W) -> Result<(), Failure> {
    let worker = match (args.worker_id, &args.host) {
        (Some(w), _) => w,
        (None, Some(h)) => worker_id_for_host(h),
        (None, None) => worker_id_for_host(&host_name()),
    };
    let started =
        worker::standalone_horizon(&args.registry, &format!("lexical-{:016x}", worker as u64))?;
    let g = LexicalGenerator::new(SystemClock, worker)
        .not_before_ms(started.not_before_ms)
        .horizon(started.horizon.horizon());
    let mut progress = Progress::new(args.count);
    for _ in 0..args.count {
        progress.add(1);
        let id = g.next_id()?;
        let text = |o: &mut _| Write::write_all(o, &id.encode());
        emit(out, args.output, text, id.to_bytes(), || {
            Described::Lexical(id)
        })?;
    }
    out.flush()?;
    // Timestamps run ahead of the clock past a million IDs a second.
    let last_ms = g.last_time_ms();
    started.horizon.close(last_ms)?;
    Ok(())
}

/// The durable time bound of UUIDv7's or ULID's slot (`kind`) in the state directory, carried
/// on above rather than waited for; none when another process holds the slot (a second `floe
/// gen` at once: IDs of both are unique, their order across runs is not kept).
fn bound_above(args: &GenArgs, kind: &str) -> Result<Option<Started>, Failure> {
    let file = match HorizonFile::open(&args.registry.state_dir, kind) {
        Ok(file) => file,
        Err(e) if e.kind == floe_registry::ErrorKind::Conflict => {
            eprintln!("floe: {kind}: another process holds its time bound ({e}): this run's IDs are not ordered after its");
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    let started =
        floe_registry::horizon::start_above(file, args.registry.horizon_config(), SystemClock)?;
    for note in &started.notes {
        eprintln!("floe: {kind}: {note}");
    }
    Ok(Some(started))
}

fn uuid7<W: Write>(args: &GenArgs, out: &mut W) -> Result<(), Failure> {
    let started = bound_above(args, "uuid7")?;
    let mut g = Uuid7Generator::new(SystemClock);
    if let Some(s) = &started {
        g = g
            .not_before_ms(s.not_before_ms)
            .horizon(s.horizon.horizon());
    }
    let mut buf = Uuid::encode_buffer();
    let mut progress = Progress::new(args.count);
    for _ in 0..args.count {
        progress.add(1);
        let id = g.generate()?;
        let text =
            |o: &mut _| Write::write_all(o, id.as_hyphenated().encode_lower(&mut buf).as_bytes());
        emit(out, args.output, text, id.as_bytes(), || {
            Described::uuid7(id)
        })?;
    }
    out.flush()?;
    if let Some(s) = started {
        s.horizon.close(g.last_time_ms())?;
    }
    Ok(())
}

fn ulid<W: Write>(args: &GenArgs, out: &mut W) -> Result<(), Failure> {
    let started = bound_above(args, "ulid")?;
    let mut g = UlidGenerator::new(SystemClock);
    if let Some(s) = &started {
        g = g
            .not_before_ms(s.not_before_ms)
            .horizon(s.horizon.horizon());
    }
    let mut buf = [0u8; 26];
    let mut progress = Progress::new(args.count);
    for _ in 0..args.count {
        progress.add(1);
        let id = g.generate()?;
        let text = |o: &mut _| Write::write_all(o, id.array_to_str(&mut buf).as_bytes());
        emit(out, args.output, text, id.to_bytes(), || {
            Described::Ulid(id)
        })?;
    }
    out.flush()?;
    if let Some(s) = started {
        s.horizon.close(g.last_time_ms())?;
    }
    Ok(())
}

/// `floe gen --server URL`: `args.count` IDs from the server, written by `gen::write_answer`.
fn remote<W: Write>(url: &str, args: &GenArgs, out: &mut W) -> Result<(), Failure> {
    check_answerable(args.kind, args.output)?;
    let layout = if args.layout_given {
        args.snowflake.layout.clone()
    } else {
        String::new()
    };
    let meta = args.meta.map(u32::from);
    let kind = floe_server::grpc::floe::proto_kind(args.kind) as i32;
    let mut client = Client::connect(url, &args.client)?;
    let count = args.count;
    let mut got = 0u64;
    let mut progress = Progress::new(count);
    let mut write = |answer: &NextIdsResponse, out: &mut W| -> Result<(), Failure> {
        let n = answer.numbers.len().max(answer.binary.len());
        take(&mut got, count, n)?;
        progress.add(n as u64);
        write_answer(out, args.kind, args.output, answer)?;
        // Each message as it comes: a slow stream shows its progress, and a closed output
        // (`| head`) is noticed at the next message.
        out.flush()?;
        Ok(())
    };
    match count {
        0 => {}
        1 => {
            let request = NextIdsRequest {
                kind,
                count: 1,
                layout,
                meta,
                with_text: false,
            };
            let answer = client
                .rt
                .block_on(client.floe.next_ids(request))
                .map_err(status)?
                .into_inner();
            write(&answer, out)?;
        }
        total => {
            let request = StreamIdsRequest {
                kind,
                total,
                batch: 0,
                layout,
                meta,
                with_text: false,
            };
            let mut stream = client
                .rt
                .block_on(client.floe.stream_ids(request))
                .map_err(status)?
                .into_inner();
            while let Some(answer) = client.next(&mut stream)? {
                write(&answer, out)?;
            }
        }
    }
    finished(got, count)
}
