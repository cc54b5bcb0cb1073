//! `floe serve` (the sequencer server) and `floe seq` (sequence IDs on standard output).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use floe_core::clock::SystemClock;
use floe_core::snowflake::{Layout, SnowflakeConfig};
use floe_registry::IdSpace;
use floe_sequencer::stores::snowflake::SnowflakeStore;
use floe_sequencer::{Key, Mode, Sequencer, ServeOptions, StepPolicy, Store, StoreHandle};

use crate::worker::{GenLease, RegistryArgs};

/// How stores are served (shared by `serve` and `seq`).
#[derive(Debug, Args)]
pub struct TuningArgs {
    /// WEAK: the smallest (and first) segment a key reserves.
    #[arg(long, default_value_t = 1000)]
    step_min: u32,
    /// WEAK: the largest segment.
    #[arg(long, default_value_t = 1_000_000)]
    step_max: u32,
    /// WEAK: how long a segment should last, in seconds (shorter doubles the step, more than
    /// twice as long halves it).
    #[arg(long, default_value_t = 60)]
    step_target_secs: u64,
    /// The longest a store call may take, in milliseconds, before it fails as unavailable.
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
    /// The most keys a store holds in memory (each key's WEAK buffer and STRONG queue, about
    /// 0.5 KB). When full, the least recently used keys with no request under way are
    /// dropped; their buffered IDs become gaps, never reissued.
    #[arg(long, default_value_t = 100_000)]
    max_keys: usize,
    /// A key unused for this many seconds is dropped from memory; its next request reserves a
    /// fresh segment.
    #[arg(long, default_value_t = 60)]
    key_idle_secs: u64,
}

impl TuningArgs {
    fn options(&self) -> Result<ServeOptions, String> {
        let step = StepPolicy {
            min: self.step_min,
            max: self.step_max,
            target: Duration::from_secs(self.step_target_secs),
        };
        step.validate()?;
        if self.timeout_ms == 0 {
            return Err("timeout-ms: expected a positive number of milliseconds, found 0".into());
        }
        Ok(ServeOptions {
            step,
            timeout: Duration::from_millis(self.timeout_ms),
        })
    }

    /// A store's handle with these key limits.
    fn handle(
        &self,
        name: impl Into<String>,
        store: Arc<dyn floe_sequencer::Store>,
        options: ServeOptions,
    ) -> Result<StoreHandle, String> {
        StoreHandle::new(name, store, options)
            .key_limits(floe_sequencer::KeyLimits {
                idle: Duration::from_secs(self.key_idle_secs),
                max_keys: self.max_keys,
            })
            .map_err(|e| format!("--max-keys / --key-idle-secs: {e}"))
    }
}

/// `floe serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A store, NAME=URL (repeat for more): embedded[:PATH], memory, redis://..., postgres://...,
    /// mysql://..., etcd://..., zk://..., or snowflake (WEAK IDs from a leased worker ID).
    /// Default: default=embedded (a file in --state-dir).
    #[arg(long = "store", value_name = "NAME=URL")]
    stores: Vec<String>,
    /// gRPC address (Layotto's Runtime/GetNextId), or "off".
    #[arg(long, default_value = "127.0.0.1:34904")]
    grpc: String,
    /// HTTP address, or "off".
    #[arg(long, default_value = "127.0.0.1:34903")]
    http: String,
    /// Every ID of KEY is greater than N: [STORE:]KEY=N (all stores when STORE is not named).
    #[arg(long = "bigger-than", value_name = "[STORE:]KEY=N")]
    bigger_than: Vec<String>,
    /// Layout of a snowflake store's IDs (at most 63 bits).
    #[arg(long, default_value = "leaf")]
    layout: String,
    #[command(flatten)]
    tuning: TuningArgs,
    #[command(flatten)]
    connections: ConnectionArgs,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// How long connections and requests may last, and how many (`floe serve`).
#[derive(Debug, Args)]
pub struct ConnectionArgs {
    /// Connections open at once on each listener; beyond it new connections wait until one
    /// closes.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: u64,
    /// Requests under way at once on one gRPC (HTTP/2) connection.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    max_streams: u32,
    /// Seconds a new connection may take to send its first request, and an HTTP/1 request its
    /// headers (HTTP/1 keep-alive connections are closed after this long between requests).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    header_timeout_secs: u64,
    /// Seconds a connection may stay open with no request under way.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    idle_timeout_secs: u64,
    /// Seconds a request may take from its headers to its answer (must be longer than
    /// --timeout-ms); slower ones are answered DEADLINE_EXCEEDED / HTTP 503.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    request_timeout_secs: u64,
    /// Seconds shutdown (SIGTERM, Ctrl-C) waits for open connections before it drops them and
    /// closes the stores.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    shutdown_timeout_secs: u64,
    /// A host name HTTP answers to besides IP addresses and localhost (repeat for more): a
    /// request with any other `Host` is refused (403), so a web page cannot reach floe by
    /// rebinding its own name to 127.0.0.1.
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_host: Vec<String>,
}

impl ConnectionArgs {
    fn limits(&self, store_timeout: Duration) -> Result<floe_server::Limits, String> {
        let request_timeout = Duration::from_secs(self.request_timeout_secs);
        if request_timeout <= store_timeout {
            return Err(format!(
                "request-timeout-secs: must be longer than --timeout-ms (one store call), found {} s and {} ms",
                self.request_timeout_secs,
                store_timeout.as_millis()
            ));
        }
        let limits = floe_server::Limits {
            max_connections: usize::try_from(self.max_connections)
                .map_err(|_| format!("max-connections: too large: {}", self.max_connections))?,
            max_streams: self.max_streams,
            header_timeout: Duration::from_secs(self.header_timeout_secs),
            idle_timeout: Duration::from_secs(self.idle_timeout_secs),
            request_timeout,
            shutdown_timeout: Duration::from_secs(self.shutdown_timeout_secs),
        };
        limits.validate()?;
        Ok(limits)
    }
}

/// `floe seq`.
#[derive(Debug, Args)]
pub struct SeqArgs {
    /// The sequence key.
    key: String,
    /// How many IDs.
    #[arg(short = 'n', long = "count", default_value_t = 1)]
    count: u64,
    /// weak (from cached segments) or strong (one store increment per ID).
    #[arg(long, default_value = "weak")]
    increment: String,
    /// Store URL (see `floe serve --help`). Default: embedded, a file in --state-dir.
    #[arg(long, default_value = "embedded")]
    store: String,
    /// Every ID is greater than N.
    #[arg(long)]
    bigger_than: Option<i64>,
    /// Reserve segments of this size and print each as START END instead of single IDs.
    #[arg(long)]
    segment: Option<u32>,
    /// Directory of the embedded store.
    #[arg(long, default_value = ".floe")]
    state_dir: std::path::PathBuf,
    #[command(flatten)]
    tuning: TuningArgs,
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

/// Opens one store URL; `snowflake` takes a worker lease first.
fn open_store(
    url: &str,
    state_dir: &Path,
    args: &ServeArgs,
    leases: &mut Vec<(
        GenLease,
        Arc<floe_core::snowflake::SnowflakeGenerator<SystemClock>>,
    )>,
    rt: &tokio::runtime::Runtime,
) -> Result<Arc<dyn Store>, String> {
    if url == "snowflake" {
        let layout = Layout::preset(&args.layout).map_err(|e| format!("layout: {e}"))?;
        if !layout.fits_i64() {
            return Err(format!(
                "layout: a snowflake store needs at most 63 bits (next_id is an int64), found {}",
                layout.total_bits()
            ));
        }
        let mut registry = args.registry.clone();
        if registry.registry.is_none() {
            registry.registry = Some(format!("file://{}", state_dir.display()));
        }
        let mut lease =
            GenLease::acquire(&registry, &None, IdSpace::snowflake(&layout), "snowflake")?;
        let horizon = lease.lease.horizon().ok_or("internal: no time bound")?;
        let g = Arc::new(
            SnowflakeConfig::new(layout)
                .node_id(u64::from(lease.lease.id))
                .map_err(|e| e.to_string())?
                .not_before_ms(lease.lease.not_before_ms)
                .fence(lease.lease.fence.clone())
                .horizon(horizon)
                .build(SystemClock)
                .map_err(|e| e.to_string())?,
        );
        let beat = Arc::clone(&g);
        lease.start_heartbeats(move || beat.last_timestamp_ms());
        let store = SnowflakeStore::new(Arc::clone(&g)).map_err(|e| e.to_string())?;
        leases.push((lease, g));
        return Ok(Arc::new(store));
    }
    rt.block_on(floe_sequencer::open(url, state_dir))
        .map_err(|e| e.to_string())
}

fn parse_store(spec: &str) -> Result<(String, String), String> {
    let (name, url) = spec
        .split_once('=')
        .ok_or_else(|| format!("store: expected NAME=URL, found {spec:?}"))?;
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !ok {
        return Err(format!(
            "store: a name is 1 to 64 of A-Z a-z 0-9 - _ . , found {name:?}"
        ));
    }
    Ok((name.to_string(), url.to_string()))
}

/// `[STORE:]KEY=N` into (store or None, key, N), knowing the store names.
fn parse_bigger_than(spec: &str, names: &[String]) -> Result<(Option<String>, Key, i64), String> {
    let (target, n) = spec
        .rsplit_once('=')
        .ok_or_else(|| format!("bigger-than: expected [STORE:]KEY=N, found {spec:?}"))?;
    let n = n
        .parse::<i64>()
        .map_err(|_| format!("bigger-than: expected an int64 after '=', found {n:?}"))?;
    let (store, key) = match target.split_once(':') {
        Some((s, k)) if names.iter().any(|n| n == s) => (Some(s.to_string()), k),
        _ => (None, target),
    };
    let key = Key::new(key).map_err(|e| format!("bigger-than: {e}"))?;
    Ok((store, key, n))
}

async fn bind(addr: &str, what: &str) -> Result<Option<tokio::net::TcpListener>, String> {
    if addr == "off" {
        return Ok(None);
    }
    tokio::net::TcpListener::bind(addr)
        .await
        .map(Some)
        .map_err(|e| format!("{what}: cannot listen on {addr}: {e}"))
}

/// Runs the server until SIGINT or SIGTERM.
pub fn serve(args: &ServeArgs) -> Result<(), String> {
    if args.grpc == "off" && args.http == "off" {
        return Err("grpc, http: both are off, so there is nothing to serve: give --grpc or --http an address".into());
    }
    let options = args.tuning.options()?;
    let limits = args.connections.limits(options.timeout)?;
    let rt = runtime()?;
    let specs = if args.stores.is_empty() {
        vec!["default=embedded".to_string()]
    } else {
        args.stores.clone()
    };
    let mut parsed = Vec::new();
    for spec in &specs {
        let (name, url) = parse_store(spec)?;
        if parsed.iter().any(|(n, _)| *n == name) {
            return Err(format!("store: {name:?} is named twice"));
        }
        parsed.push((name, url));
    }
    let names: Vec<String> = parsed.iter().map(|(n, _)| n.clone()).collect();
    let mut floors: BTreeMap<String, BTreeMap<Key, i64>> = BTreeMap::new();
    for spec in &args.bigger_than {
        let (store, key, n) = parse_bigger_than(spec, &names)?;
        for name in names
            .iter()
            .filter(|n| store.as_ref().is_none_or(|s| s == *n))
        {
            floors
                .entry(name.clone())
                .or_default()
                .insert(key.clone(), n);
        }
    }
    // One worker lease per identity: a second snowflake store would wait for the first's.
    if parsed.iter().filter(|(_, url)| url == "snowflake").count() > 1 {
        return Err(
            "store: at most one snowflake store per floe serve (they would lease one worker ID); serve its IDs under one name"
                .into(),
        );
    }
    let mut leases = Vec::new();
    let mut sequencer = Sequencer::new();
    let mut described = Vec::new();
    for (name, url) in &parsed {
        let store = open_store(url, &args.registry.state_dir, args, &mut leases, &rt)
            .map_err(|e| format!("store {name}: {e}"))?;
        let handle = args.tuning.handle(name.clone(), store, options)?;
        if let Some(f) = floors.get(name) {
            rt.block_on(handle.init(f))
                .map_err(|e| format!("store {name}: bigger-than: {e}"))?;
        }
        described.push(format!("{name}={}", handle.store().kind()));
        sequencer.add(handle);
    }
    let sequencer = Arc::new(sequencer);
    let result = rt.block_on(async {
        let grpc = bind(&args.grpc, "grpc").await?;
        let http = bind(&args.http, "http").await?;
        let addr = |l: &Option<tokio::net::TcpListener>| {
            l.as_ref()
                .and_then(|l| l.local_addr().ok())
                .map_or("off".to_string(), |a| a.to_string())
        };
        // One line on stdout for scripts and tests (ports chosen with :0 included).
        println!(
            "floe serving grpc={} http={} stores={}",
            addr(&grpc),
            addr(&http),
            described.join(",")
        );
        let _ = std::io::stdout().flush();
        floe_server::serve(
            Arc::clone(&sequencer),
            grpc,
            http,
            limits,
            args.connections.allow_host.clone(),
            shutdown_signal(),
        )
        .await
        .map_err(|e| format!("server: {e}"))?;
        Ok::<(), String>(())
    });
    // Every connection is closed or dropped: close the stores (the embedded store's file lock
    // goes with its last reference), then end the runtime, whose background tasks (WEAK
    // fetches) hold the others; a store call under way on a blocking thread is given a moment.
    rt.block_on(sequencer.close());
    drop(sequencer);
    rt.shutdown_timeout(Duration::from_secs(2));
    for (lease, g) in leases {
        lease.finish(g.last_timestamp_ms())?;
    }
    result
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    eprintln!("floe: shutting down");
}

/// Prints a key's IDs (or segments).
pub fn seq(args: &SeqArgs) -> Result<(), String> {
    let options = args.tuning.options()?;
    let mode: Mode = args.increment.parse()?;
    let key = Key::new(args.key.as_str()).map_err(|e| e.to_string())?;
    let rt = runtime()?;
    let stdout = std::io::stdout();
    rt.block_on(async {
        let store = floe_sequencer::open(&args.store, &args.state_dir)
            .await
            .map_err(|e| e.to_string())?;
        let handle = args.tuning.handle("cli", store, options)?;
        if let Some(n) = args.bigger_than {
            handle
                .init(&BTreeMap::from([(key.clone(), n)]))
                .await
                .map_err(|e| e.to_string())?;
        }
        let mut out = std::io::BufWriter::new(stdout.lock());
        let io = |e: std::io::Error| e.to_string();
        for _ in 0..args.count {
            match args.segment {
                Some(size) => {
                    let s = handle
                        .segment(key.as_str(), size)
                        .await
                        .map_err(|e| e.to_string())?;
                    writeln!(out, "{} {}", s.start, s.end).map_err(io)?;
                }
                None => {
                    let id = handle
                        .next_id(key.as_str(), mode)
                        .await
                        .map_err(|e| e.to_string())?;
                    writeln!(out, "{id}").map_err(io)?;
                }
            }
        }
        out.flush().map_err(io)?;
        handle.store().close().await;
        Ok(())
    })
}
