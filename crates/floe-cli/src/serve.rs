//! `floe serve` (the ID server, assembled by floe-server from its configuration) and `floe seq`
//! (sequence IDs on standard output).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use floe_core::clock::Clock;

use floe_server::ServerConfig;

/// `floe serve`: every setting of the configuration file can also be given here; a flag wins
/// over its `FLOE_*` variable, which wins over the file.
///
/// Each flag sets the key of floe.toml that [`FLAG_KEYS`](crate::settings::FLAG_KEYS) names
/// ([`crate::settings::overlay`]); the lists and tables are parsed here (`#[serde(skip)]`).
#[derive(Debug, Args, serde::Serialize)]
pub(crate) struct ServeArgs {
    /// The configuration file (TOML; see docs/floe.toml). Unknown keys refuse to start.
    #[arg(
        long,
        help_heading = "Configuration",
        env = "FLOE_CONFIG",
        value_name = "FILE"
    )]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// Print the effective configuration (file, variables and flags) as TOML and exit
    /// (passwords in store and registry URLs shown as ****).
    #[arg(long, help_heading = "Configuration")]
    #[serde(skip)]
    print_config: bool,
    /// gRPC address (Layotto's Runtime, floe.v1, health, reflection), or "off".
    #[arg(long, help_heading = "Listeners", env = "FLOE_GRPC")]
    grpc: Option<String>,
    /// HTTP address, or "off".
    #[arg(long, help_heading = "Listeners", env = "FLOE_HTTP")]
    http: Option<String>,
    /// A host name HTTP answers to besides IP addresses and localhost where the Host is
    /// checked (repeat for more): NAME, *.SUFFIX (e.g. *.svc.cluster.local) or * (any).
    #[arg(long = "allow-host", help_heading = "Listeners", value_name = "NAME")]
    #[serde(skip)]
    allow_host: Vec<String>,
    /// Where HTTP checks the Host against DNS rebinding (a browser on the same machine):
    /// auto (on a loopback listener only), on, or off. /healthz, /readyz and /metrics are
    /// never refused for their Host.
    #[arg(
        long,
        help_heading = "Listeners",
        env = "FLOE_HOST_CHECK",
        value_name = "auto|on|off"
    )]
    host_check: Option<String>,
    /// Directory of the embedded store, file registry, cache and time bounds.
    #[arg(long, help_heading = "Identity and registry", env = "FLOE_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Registry of worker IDs: file:///dir, zk://host:port/root, etcd://host:port/prefix
    /// (etcds://user@host:port/prefix with the options cacert=, cert=, key= for TLS, and
    /// password_file= or password_env= for the user's password), static:ID, static:ordinal[+OFFSET]
    /// (the worker ID is the trailing -N of --host, a StatefulSet pod's name), or leaf+zk://host:port (Meituan Leaf's nodes in ZooKeeper: --service is
    /// leaf.name, --host and --port the Leaf server's IPv4 and leaf.snowflake.port)
    /// [default: a file registry in the state directory].
    #[arg(long, help_heading = "Identity and registry", env = "FLOE_REGISTRY")]
    registry: Option<String>,
    /// Service name of this server's identity.
    #[arg(long, help_heading = "Identity and registry", env = "FLOE_SERVICE")]
    service: Option<String>,
    /// Host of the identity [default: this machine's host name].
    #[arg(long, help_heading = "Identity and registry", env = "FLOE_HOST")]
    host: Option<String>,
    /// Port of the identity [default: the gRPC port, else the HTTP port].
    #[arg(long, help_heading = "Identity and registry", env = "FLOE_PORT")]
    port: Option<u16>,
    /// When neither registry nor cache answers, use worker ID = port % IDs.
    #[arg(
        long,
        help_heading = "Identity and registry",
        env = "FLOE_PORT_FALLBACK",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    port_fallback: bool,
    /// When the registry (ZooKeeper, etcd) is unreachable at start-up, start from the local
    /// cache anyway, as Leaf does: the IDs then have no lease, and a replacement started
    /// during the same partition may hold the same worker ID. Off: refused (exit 69).
    #[arg(
        long,
        help_heading = "Identity and registry",
        env = "FLOE_START_FROM_CACHE",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    start_from_cache: bool,
    /// Take over a worker ID whose holder has not been alive this many seconds.
    #[arg(
        long,
        help_heading = "Identity and registry",
        env = "FLOE_RECLAIM_AFTER",
        value_name = "SECONDS"
    )]
    reclaim_after: Option<u64>,
    /// At start-up, wait at most this long for a clock behind the last recorded time.
    #[arg(
        long,
        help_heading = "Identity and registry",
        env = "FLOE_MAX_CLOCK_WAIT_MS",
        value_name = "MS"
    )]
    max_clock_wait_ms: Option<u64>,
    /// A store, NAME=URL (repeat for more; replaces the file's stores): embedded[:PATH],
    /// memory, redis://..., postgres://..., mysql://..., etcd://..., etcds://..., zk://..., or snowflake
    /// (WEAK IDs from the server's Snowflake generator). Default: default=embedded.
    #[arg(
        long = "store",
        help_heading = "Stores and sequences",
        value_name = "NAME=URL"
    )]
    #[serde(skip)]
    stores: Vec<String>,
    /// Every ID of KEY is greater than N: [STORE:]KEY=N (all stores when STORE is not named).
    #[arg(
        long = "bigger-than",
        help_heading = "Stores and sequences",
        value_name = "[STORE:]KEY=N"
    )]
    #[serde(skip)]
    bigger_than: Vec<String>,
    #[command(flatten)]
    #[serde(flatten)]
    sequencer: crate::seq::SequencerArgs,
    /// Stores that serve registered keys only (as Leaf serves the tags of its table): a key not
    /// registered (`floe seq keys register`) is refused, HTTP 404 / gRPC NOT_FOUND. A list,
    /// comma-separated.
    #[arg(
        long,
        help_heading = "Stores and sequences",
        env = "FLOE_REGISTERED_ONLY",
        value_name = "STORE[,STORE]",
        value_delimiter = ','
    )]
    registered_only: Option<Vec<String>>,
    #[arg(
        long,
        help_heading = "IDs and templates",
        env = "FLOE_LAYOUT",
        help = crate::layout_help("Layout of the Snowflake generator")
    )]
    layout: Option<String>,
    /// Epoch of the Snowflake layout, Unix milliseconds [default: the layout's].
    #[arg(long, help_heading = "IDs and templates", env = "FLOE_EPOCH_MS")]
    epoch_ms: Option<u64>,
    /// Every Snowflake ID above this one: the last ID of the system floe replaces (a Leaf
    /// fleet's, say). floe refuses to start, naming both numbers, if an ID issued now would not
    /// be above it, and never issues in its time unit or before.
    #[arg(
        long,
        help_heading = "IDs and templates",
        env = "FLOE_SNOWFLAKE_ABOVE",
        value_name = "ID"
    )]
    snowflake_above: Option<u64>,
    /// The first sequence of each new millisecond is random below N (Meituan Leaf's rule), so
    /// that IDs at low traffic spread over `id % N` shards; 0: every millisecond starts at 0.
    #[arg(
        long,
        help_heading = "IDs and templates",
        env = "FLOE_RANDOM_START",
        value_name = "N"
    )]
    random_start: Option<u64>,
    /// A named ID template, NAME=TEMPLATE (repeat for more), e.g.
    /// 'orders=ORD-{date:%Y%m%d}-{seq:06}': asked for with ?template=NAME (HTTP sequencer,
    /// /v1/ids/snowflake and Leaf's segment routes) or `template` (gRPC NextSequence). See
    /// `floe seq --help` for the placeholders.
    #[arg(
        long = "template",
        help_heading = "IDs and templates",
        value_name = "NAME=TEMPLATE"
    )]
    #[serde(skip)]
    templates: Vec<String>,
    /// The scramble keys of {seq:scrambled} and ?scramble=true (see `floe scramble --help`)
    /// [default: $FLOE_SCRAMBLE_KEY].
    #[arg(
        long,
        help_heading = "IDs and templates",
        env = "FLOE_SCRAMBLE_KEY_FILE",
        value_name = "FILE"
    )]
    scramble_key_file: Option<PathBuf>,
    /// The scramble domain: int63 or digits:N.
    #[arg(
        long,
        help_heading = "IDs and templates",
        env = "FLOE_SCRAMBLE_DOMAIN",
        value_name = "DOMAIN"
    )]
    scramble_domain: Option<String>,
    /// The most IDs one request may ask for (count).
    #[arg(long, help_heading = "Limits", env = "FLOE_MAX_BATCH")]
    max_batch: Option<u32>,
    /// Connections open at once on each listener.
    #[arg(long, help_heading = "Limits", env = "FLOE_MAX_CONNECTIONS", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: Option<u64>,
    /// Requests under way at once on one gRPC (HTTP/2) connection.
    #[arg(long, help_heading = "Limits", env = "FLOE_MAX_STREAMS", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    max_streams: Option<u32>,
    /// Seconds a connection may take to send its first request (HTTP/1: each request's
    /// headers).
    #[arg(long, help_heading = "Limits", env = "FLOE_HEADER_TIMEOUT_SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    header_timeout_secs: Option<u64>,
    /// Seconds a connection may stay open with no request under way.
    #[arg(long, help_heading = "Limits", env = "FLOE_IDLE_TIMEOUT_SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    idle_timeout_secs: Option<u64>,
    /// Seconds a request may take (longer than --timeout-ms).
    #[arg(long, help_heading = "Limits", env = "FLOE_REQUEST_TIMEOUT_SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    request_timeout_secs: Option<u64>,
    /// Seconds shutdown waits for open connections before dropping them.
    #[arg(long, help_heading = "Limits", env = "FLOE_SHUTDOWN_TIMEOUT_SECS", value_parser = clap::value_parser!(u64).range(0..=86_400))]
    shutdown_timeout_secs: Option<u64>,
    /// Seconds to go on serving, not ready (/readyz 503, gRPC health NOT_SERVING), after
    /// SIGTERM before the listeners close, so that load balancers take the server out first.
    #[arg(long, help_heading = "Limits", env = "FLOE_SHUTDOWN_DELAY_SECS", value_parser = clap::value_parser!(u64).range(0..=3_600))]
    shutdown_delay_secs: Option<u64>,
    /// TLS on both listeners: the certificate chain, PEM (with --tls-key). SIGHUP reads it and
    /// its key again.
    #[arg(
        long,
        help_heading = "Security",
        env = "FLOE_TLS_CERT",
        value_name = "FILE"
    )]
    tls_cert: Option<PathBuf>,
    /// TLS on both listeners: the certificate's private key, PEM (with --tls-cert).
    #[arg(
        long,
        help_heading = "Security",
        env = "FLOE_TLS_KEY",
        value_name = "FILE"
    )]
    tls_key: Option<PathBuf>,
    /// Accepted bearer tokens, one a line (blank lines and # comments left out): every request
    /// then needs `Authorization: Bearer TOKEN` (gRPC: `authorization` metadata). SIGHUP reads
    /// it again; a browser signs in to the status page at /login.
    #[arg(
        long,
        help_heading = "Security",
        env = "FLOE_TOKEN_FILE",
        value_name = "FILE"
    )]
    token_file: Option<PathBuf>,
    /// With --token-file: health (/healthz, /readyz, /metrics, /openapi.json, gRPC health) needs a token too
    /// [default: open].
    #[arg(
        long,
        help_heading = "Security",
        env = "FLOE_HEALTH_NEEDS_TOKEN",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    health_needs_token: bool,
    /// Log lines on standard error as text or as JSON (one object a line, for log shippers).
    /// RUST_LOG filters them. It replaces the default (floe's own lines from info, other
    /// crates' from warn) whole, so name floe's targets in it: floe (the start-up line),
    /// floe_server (debug: a line per request), floe_registry, floe_sequencer.
    #[arg(long, help_heading = "Observability", env = "FLOE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    #[serde(skip)]
    log_format: LogFormat,
}

impl ServeArgs {
    /// The effective configuration: the file's (or the defaults), then the flags and their
    /// variables.
    pub(crate) fn config(&self) -> Result<ServerConfig, String> {
        let c = match &self.config {
            Some(path) => ServerConfig::from_file(path)?,
            None => ServerConfig::default(),
        };
        let mut c = crate::settings::overlay(&c, self)?;
        c.listen.allow_hosts.extend(self.allow_host.iter().cloned());
        let mut named = std::collections::BTreeSet::new();
        for spec in &self.templates {
            let (name, pattern) = spec.split_once('=').ok_or_else(|| {
                format!(
                    "template: expected NAME=TEMPLATE, found {}",
                    floe_core::endpoint::quoted(spec)
                )
            })?;
            let t = floe_server::config::TemplateConfig {
                pattern: pattern.to_string(),
                utc_offset: None,
            };
            if !named.insert(name) {
                return Err(format!("template: {name:?} is named twice"));
            }
            c.templates.insert(name.to_string(), t);
        }
        if !self.stores.is_empty() {
            c.stores.clear();
            for spec in &self.stores {
                let (name, url) = parse_store(spec)?;
                if c.stores.insert(name.clone(), url).is_some() {
                    return Err(format!("store: {name:?} is named twice"));
                }
            }
        }
        // `[STORE:]KEY` is read once, by the configuration (ServerConfig::floors), which knows
        // the store names.
        for spec in &self.bigger_than {
            let (target, n) = parse_bigger_than(spec)?;
            c.bigger_than.insert(target.to_string(), n);
        }
        Ok(c)
    }
}

fn parse_store(spec: &str) -> Result<(String, String), String> {
    let (name, url) = spec
        .split_once('=')
        .ok_or_else(|| format!("store: expected NAME=URL, found {spec:?}"))?;
    if !floe_server::config::valid_store_name(name) {
        return Err(format!(
            "store: a name is 1 to 64 of A-Z a-z 0-9 - _ . , found {name:?}"
        ));
    }
    Ok((name.to_string(), url.to_string()))
}

/// `[STORE:]KEY=N` into (`[STORE:]KEY`, N).
fn parse_bigger_than(spec: &str) -> Result<(&str, i64), String> {
    let (target, n) = spec
        .rsplit_once('=')
        .ok_or_else(|| format!("bigger-than: expected [STORE:]KEY=N, found {spec:?}"))?;
    let n = n
        .parse::<i64>()
        .map_err(|_| format!("bigger-than: expected an int64 after '=', found {n:?}"))?;
    Ok((target, n))
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object a line.
    Json,
}

/// Sends `tracing` events to standard error, filtered by RUST_LOG (default: floe's own lines
/// from `info`, other crates' from `warn`).
fn init_logs(format: LogFormat) -> Result<(), String> {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => EnvFilter::try_new(&spec)
            .map_err(|e| format!("RUST_LOG: {e}: expected e.g. info or floe_server=debug"))?,
        // floe's own lines from info up; other crates' warnings and errors.
        _ => {
            EnvFilter::new("warn,floe=info,floe_server=info,floe_registry=info,floe_sequencer=info")
        }
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder
            .with_target(false)
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    installed.map_err(|e| format!("cannot start logging: {e}"))
}

/// Runs the server until SIGINT or SIGTERM, on one async runtime.
///
/// Exit codes ([`crate::failure::EXIT_CODES_HELP`]): a bad configuration is 2; a failure to
/// start follows [`floe_server::StartErrorKind`]: a registry or store unreachable 69, a clock
/// behind or a worker ID held elsewhere 75, the state directory 74, anything else (a port
/// taken) 1. A service manager restarts on all but 2.
pub(crate) fn serve(args: &ServeArgs) -> Result<(), crate::Failure> {
    let config = args.config()?;
    let origin = args
        .config
        .as_ref()
        .map_or(String::new(), |p| format!("{}: ", p.display()));
    config.validate().map_err(|e| format!("{origin}{e}"))?;
    if args.print_config {
        print!("{}", config.to_toml_redacted());
        return Ok(());
    }
    // One check, before anything is leased or opened: a layout that cannot issue now is the
    // configuration's fault (2), not a failure to start.
    let now_ms = floe_core::clock::SystemClock.now_nanos() / 1_000_000;
    let plan = config.check(now_ms).map_err(|e| format!("{origin}{e}"))?;
    init_logs(args.log_format)?;
    // `floe_build_info` names the commit `floe --version` does.
    floe_server::observe::set_build_commit(env!("FLOE_BUILD_COMMIT"));
    let rt = crate::runtime().map_err(crate::Failure::Other)?;
    let result = rt.block_on(async {
        let mut shutdown = Box::pin(shutdown_signal().map_err(crate::Failure::Other)?);
        let hup = reload_signal().map_err(crate::Failure::Other)?;
        // A stop while starting (a lease waiting out its previous holder, a clock catching up)
        // ends the start at once: what it took is let go, nothing was served.
        let server = tokio::select! {
            started = floe_server::Server::start(plan, Arc::new(floe_core::clock::SystemClock)) => started?,
            () = &mut shutdown => {
                tracing::info!("stopped while starting: nothing was served");
                return Ok(());
            }
        };
        for note in &server.notes {
            match note {
                floe_server::config::Note::Warning(line) => tracing::warn!("{line}"),
                floe_server::config::Note::Info(line) => tracing::info!("{line}"),
            }
        }
        let addr = |a: Option<std::net::SocketAddr>| a.map_or("off".to_string(), |a| a.to_string());
        let stores: Vec<String> = server
            .app()
            .sequencer
            .stores()
            .map(|h| format!("{}={}", h.name(), h.store().kind()))
            .collect();
        // One line on stdout for scripts and tests (ports chosen with :0 included).
        println!(
            "floe serving grpc={} http={} stores={}",
            addr(server.grpc_addr()),
            addr(server.http_addr()),
            stores.join(",")
        );
        let _ = std::io::stdout().flush();
        for line in &server.described {
            tracing::info!("{line}");
        }
        // The start-up line: every listener, store, the registry, worker IDs and horizons.
        tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            grpc = %addr(server.grpc_addr()),
            http = %addr(server.http_addr()),
            registry = %server.app().telemetry.registry,
            stores = %stores.join(","),
            "floe started: {}",
            server.described.join("; ")
        );
        tokio::spawn(reload_on(hup, server.reloader()));
        server.run(shutdown).await.map_err(crate::Failure::Other)
    });
    // Background tasks (WEAK fetches) hold stores until they end: a store call under way on a
    // blocking thread is given a moment.
    rt.shutdown_timeout(Duration::from_secs(2));
    result
}

/// Completes on the first SIGTERM or SIGINT. The handlers are installed when this is called
/// (not when first polled): a signal that comes while the server starts, or right after its
/// start-up line, is a graceful stop too.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    let mut int =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot handle SIGINT: {e}"))?;
    Ok(async move {
        let name = tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        };
        tracing::info!("shutting down ({name})");
    })
}

/// SIGHUP, caught from the call on (so that one that comes while the server starts does not
/// end it): each one read after the start reads the TLS certificate, key and token files
/// again ([`floe_server::Reloader`]); a failed reload keeps the old ones and says why.
fn reload_signal() -> Result<tokio::signal::unix::Signal, String> {
    use tokio::signal::unix::{signal, SignalKind};
    signal(SignalKind::hangup()).map_err(|e| format!("cannot handle SIGHUP: {e}"))
}

/// Reloads on every SIGHUP `hup` receives.
async fn reload_on(mut hup: tokio::signal::unix::Signal, reloader: floe_server::Reloader) {
    while hup.recv().await.is_some() {
        match reloader.reload().await {
            Ok(done) if done.is_empty() => {
                tracing::info!("SIGHUP: nothing to reload (no TLS certificate, no token file)");
            }
            Ok(done) => tracing::info!("SIGHUP: reloaded {}", done.join(", ")),
            Err(e) => tracing::warn!("SIGHUP: reload failed, the old ones are kept: {e}"),
        }
    }
}
