//! `floe seq`: a key's IDs (or segments) on standard output, from a store opened here or from a
//! running server (`--server`); and the sequencer's settings, one set for `seq` and `serve`
//! ([`SequencerArgs`]).

use std::collections::BTreeMap;
use std::io::{self, BufWriter, Write};

use clap::Args;
use floe_core::clock::Clock;
use floe_sequencer::{Key, Mode, StoreHandle};
use floe_server::proto_floe::{
    self as pb, NextSequenceRequest, NextSequenceResponse, StreamSequenceRequest,
};

use crate::connect::{finished, status, take, Client};
use crate::progress::Progress;
use crate::Failure;

/// How stores serve sequences: `floe serve` and `floe seq` take the same flags, each applied over
/// the configuration's `[sequencer]` section (its defaults: [`floe_server::config::SequencerConfig::default`]).
#[derive(Debug, Args, serde::Serialize)]
pub(crate) struct SequencerArgs {
    /// WEAK: the smallest (and first) segment a key reserves.
    #[arg(long, help_heading = "Stores and sequences", env = "FLOE_STEP_MIN")]
    step_min: Option<u32>,
    /// WEAK: the largest segment.
    #[arg(long, help_heading = "Stores and sequences", env = "FLOE_STEP_MAX")]
    step_max: Option<u32>,
    /// WEAK: how long a segment should last, in seconds (shorter doubles the step, more than
    /// twice as long halves it).
    #[arg(
        long,
        help_heading = "Stores and sequences",
        env = "FLOE_STEP_TARGET_SECS"
    )]
    step_target_secs: Option<u64>,
    /// The longest a store call may take, in milliseconds, before it fails as unavailable.
    #[arg(long, help_heading = "Stores and sequences", env = "FLOE_TIMEOUT_MS")]
    timeout_ms: Option<u64>,
    /// The most keys a store holds in memory (each key's WEAK buffer and STRONG queue, about
    /// 0.5 KB). When full, the least recently used keys with no request under way are
    /// dropped; their unused IDs are parked (twice as many keys more) and served when they return.
    #[arg(long, help_heading = "Stores and sequences", env = "FLOE_MAX_KEYS")]
    max_keys: Option<usize>,
    /// A key unused for this many seconds is dropped from memory; its unused IDs are parked,
    /// so its next request goes on where it stopped.
    #[arg(
        long,
        help_heading = "Stores and sequences",
        env = "FLOE_KEY_IDLE_SECS"
    )]
    key_idle_secs: Option<u64>,
}

impl SequencerArgs {
    /// A handle on `store` served as these flags (over the defaults) say, checked as the server
    /// checks its configuration; an error names the flag.
    fn handle(
        &self,
        store: std::sync::Arc<dyn floe_sequencer::Store>,
    ) -> Result<StoreHandle, String> {
        let config = crate::settings::overlay(&floe_server::ServerConfig::default(), self)?;
        let flag = |e: floe_server::config::ConfigError| {
            format!("{}: {}", crate::settings::flag_of(&e.key), e.message)
        };
        let options = config.serve_options().map_err(flag)?;
        let limits = config.key_limits().map_err(flag)?;
        StoreHandle::new("cli", store, options)
            .key_limits(limits)
            .map_err(|e| e.to_string())
    }
}

/// `floe seq`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct SeqArgs {
    /// The sequence key (a key named `keys`: `floe seq -- keys`).
    #[arg(required = true)]
    pub(crate) key: Option<String>,
    #[command(subcommand)]
    pub(crate) admin: Option<SeqCommand>,
    /// How many IDs. With --server: more than one are streamed in messages of the server's
    /// --max-batch, at most 1,000,000,000 in all.
    #[arg(short = 'n', long = "count", default_value_t = 1)]
    pub(crate) count: u64,
    /// weak (from cached segments) or strong (one store increment per ID).
    #[arg(long, default_value = "weak")]
    pub(crate) increment: String,
    /// Store URL (see `floe serve --help`) [default: embedded, a file in --state-dir]. With
    /// --server: the name of one of the server's stores [default: its only store].
    #[arg(long)]
    pub(crate) store: Option<String>,
    /// Every ID is greater than N.
    #[arg(long)]
    bigger_than: Option<i64>,
    /// Reserve segments of this size and print each as START END instead of single IDs.
    #[arg(long, conflicts_with = "template")]
    segment: Option<u32>,
    /// Directory of the embedded store.
    #[arg(long, default_value = ".floe")]
    state_dir: std::path::PathBuf,
    #[command(flatten)]
    sequencer: SequencerArgs,
    /// Ask a running `floe serve` for the IDs over gRPC instead of opening the store here:
    /// http://HOST:PORT, https://HOST:PORT (TLS) or HOST:PORT, its gRPC address. The options that open or
    /// tune a local store are refused with it.
    #[arg(
        long,
        value_name = "URL",
        conflicts_with_all = [
            "bigger_than", "segment", "state_dir", "step_min", "step_max", "step_target_secs",
            "timeout_ms", "max_keys", "key_idle_secs", "template",
        ]
    )]
    pub(crate) server: Option<String>,
    #[command(flatten)]
    pub(crate) client: crate::connect::ClientArgs,
    #[command(flatten)]
    pub(crate) present: crate::present::TemplateArgs,
}

/// What `floe seq` does besides issuing IDs.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum SeqCommand {
    /// A store's keys: list them, show one, raise its floor, register it (see `floe seq keys
    /// --help`).
    Keys(crate::keys::KeysArgs),
}

/// Prints a key's IDs (or segments), from a store opened here or from a server (`--server`).
pub(crate) fn run(args: &SeqArgs) -> Result<(), crate::Failure> {
    if let Some(SeqCommand::Keys(keys)) = &args.admin {
        return crate::keys::run(keys);
    }
    let Some(key_text) = args.key.as_deref() else {
        return Err(crate::Failure::Usage("floe seq: a KEY is required".into()));
    };
    if let Some(url) = &args.server {
        return remote(url, args, key_text);
    }
    let mode: Mode = args.increment.parse()?;
    let key = Key::new(key_text).map_err(|e| e.to_string())?;
    let presenter = args.present.presenter()?;
    // The date of a dated template: this machine's clock, never back within the run.
    let now_ms = || floe_core::clock::SystemClock.now_nanos() / 1_000_000;
    // The key an ID is numbered under: KEY@DATE with a dated template.
    let key_at = |at_ms: u64| -> Result<Key, crate::Failure> {
        match &presenter {
            Some(p) if p.template.has_date() => p
                .template
                .dated_key(key.as_str(), at_ms)
                .map_err(crate::Failure::Usage),
            _ => Ok(key.clone()),
        }
    };
    let rt = crate::runtime().map_err(crate::Failure::Other)?;
    let stdout = std::io::stdout();
    rt.block_on(async {
        let store =
            floe_sequencer::open(args.store.as_deref().unwrap_or("embedded"), &args.state_dir)
                .await?;
        let handle = args.sequencer.handle(store)?;
        if let Some(n) = args.bigger_than {
            // With a dated template: this period's key.
            handle
                .init(&BTreeMap::from([(key_at(now_ms())?, n)]))
                .await?;
        }
        let mut out = std::io::BufWriter::new(stdout.lock());
        let mut buf = String::new();
        let mut progress = crate::progress::Progress::new(args.count);
        for _ in 0..args.count {
            progress.add(1);
            match (args.segment, &presenter) {
                (Some(size), _) => {
                    let s = handle.segment(key.as_str(), size).await?;
                    writeln!(out, "{} {}", s.start, s.end)?;
                }
                (None, None) => {
                    let id = handle.next_id(key.as_str(), mode).await?;
                    writeln!(out, "{id}")?;
                }
                (None, Some(p)) => {
                    let at = p.template.moment(now_ms());
                    let id = handle.next_id(key_at(at)?.as_str(), mode).await?;
                    // A key may be below zero (`--bigger-than` is any int64): a template writes
                    // numbers from 0 up, never -1 as 1.
                    let value = u64::try_from(id).map_err(|_| {
                        crate::Failure::Other(format!(
                            "--template: ID {id} is below 0, and a template writes numbers from 0 up"
                        ))
                    })?;
                    p.write(&mut out, &mut buf, value, at)?;
                }
            }
        }
        out.flush()?;
        handle.store().close().await;
        Ok(())
    })
}

/// `floe seq KEY --server URL`: `args.count` IDs of the key from the server, one a line.
fn remote(url: &str, args: &SeqArgs, key: &str) -> Result<(), Failure> {
    let mode: Mode = args.increment.parse()?;
    let increment = match mode {
        Mode::Weak => pb::Increment::Weak,
        Mode::Strong => pb::Increment::Strong,
    } as i32;
    let store = args.store.clone().unwrap_or_default();
    let key = key.to_string();
    let mut client = Client::connect(url, &args.client)?;
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let count = args.count;
    let mut got = 0u64;
    let mut progress = Progress::new(count);
    let mut write =
        |answer: &NextSequenceResponse, out: &mut BufWriter<_>| -> Result<(), Failure> {
            take(&mut got, count, answer.ids.len())?;
            progress.add(answer.ids.len() as u64);
            for id in &answer.ids {
                writeln!(out, "{id}")?;
            }
            out.flush()?;
            Ok(())
        };
    match count {
        0 => {}
        1 => {
            let request = NextSequenceRequest {
                store,
                key,
                increment,
                count: 1,
                ..Default::default()
            };
            let answer = client
                .rt
                .block_on(client.floe.next_sequence(request))
                .map_err(status)?
                .into_inner();
            write(&answer, &mut out)?;
        }
        total => {
            let request = StreamSequenceRequest {
                store,
                key,
                increment,
                total,
                batch: 0,
            };
            let mut stream = client
                .rt
                .block_on(client.floe.stream_sequence(request))
                .map_err(status)?
                .into_inner();
            while let Some(answer) = client.next(&mut stream)? {
                write(&answer, &mut out)?;
            }
        }
    }
    out.flush()?;
    finished(got, count)
}
