//! `floe worker list|register|release`, and the worker-ID lease behind `floe gen --registry`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use floe_core::clock::SystemClock;
use floe_core::snowflake::Layout;
use floe_registry::horizon::{HorizonConfig, HorizonFile, Started};
use floe_registry::lease::Lease;
use floe_registry::{IdSpace, Identity, RecordState, Registry};
use floe_server::config::RegistryConfig;
use floe_server::lease::WorkerLease;
use serde_json::json;

use crate::Failure;

/// Where worker IDs come from (shared by `floe worker` and `floe gen`).
#[derive(Debug, Clone, Args)]
pub(crate) struct RegistryArgs {
    /// Registry URL: file:///state/dir (the embedded default), static:ID,
    /// zk://HOST:PORT[,HOST:PORT...][/ROOT][?session_timeout=SECONDS],
    /// leaf+zk://HOST:PORT[,HOST:PORT...][/CHROOT/snowflake][?session_timeout=SECONDS]
    /// (Meituan Leaf's nodes: the service is leaf.name),
    /// etcd://HOST:PORT[,HOST:PORT...][/ROOT][?ttl=SECONDS] or, over TLS with an etcd user,
    /// etcds://[USER[:PASSWORD]@]HOST:PORT[,...][/ROOT] with the options cacert=FILE,
    /// cert=FILE, key=FILE (TLS) and password_file=FILE or password_env=NAME (a password
    /// kept out of the command line; zk:// takes them too); static:ordinal or
    /// static:ordinal+OFFSET takes the ID from the trailing -N of --host, a StatefulSet pod's
    /// name.
    #[arg(long, global = true)]
    pub registry: Option<String>,
    /// Service name of the identity (service + host:port).
    #[arg(long, default_value = "floe", global = true)]
    pub service: String,
    /// Port of the identity.
    #[arg(long, default_value_t = 0, global = true)]
    pub port: u16,
    /// Directory of the local cache that outlives a registry outage.
    #[arg(long, default_value = ".floe", global = true)]
    pub state_dir: PathBuf,
    /// When neither registry nor cache answers, use worker ID = port % IDs (Leaf's
    /// fallback: two services on one port on different hosts then share an ID).
    #[arg(long, global = true)]
    pub port_fallback: bool,
    /// When the registry (ZooKeeper, etcd) is unreachable, start from the local cache anyway,
    /// as Leaf does: the IDs then have no lease, and a replacement started during the same
    /// partition may hold the same worker ID. Off: refused (exit 69).
    #[arg(long, global = true)]
    pub start_from_cache: bool,
    /// When every ID is allocated, take over one whose holder has not been alive for this many
    /// seconds (it then starts after that holder's last time). Off by default.
    #[arg(long, global = true, value_name = "SECONDS")]
    pub reclaim_after: Option<u64>,
    /// At start-up, wait at most this long for a clock that is behind the last recorded time
    /// (the durable time bound, the registry's or the cache's); further behind refuses. After
    /// a crash the bound is up to 1 s ahead of the crash, so a quick restart waits up to 1 s.
    #[arg(long, global = true, value_name = "MS", default_value_t = 5000)]
    pub max_clock_wait_ms: u64,
}

impl RegistryArgs {
    pub(crate) fn horizon_config(&self) -> HorizonConfig {
        HorizonConfig {
            max_start_wait: std::time::Duration::from_millis(self.max_clock_wait_ms),
            ..HorizonConfig::default()
        }
    }
}

/// A durable time bound for a generator whose node number was given by hand (no registry):
/// slot `slot` in the state directory. Prints what happened on the way to stderr.
pub(crate) fn standalone_horizon(args: &RegistryArgs, slot: &str) -> Result<Started, Failure> {
    let file = HorizonFile::open(&args.state_dir, slot)?;
    let started = floe_registry::horizon::start(file, &[], args.horizon_config(), SystemClock)?;
    for note in &started.notes {
        eprintln!("floe: {note}");
    }
    Ok(started)
}

/// `floe worker`.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    #[command(subcommand)]
    command: WorkerCommand,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Host of the identity (default: this machine's host name).
    #[arg(long, global = true)]
    host: Option<String>,
    /// Snowflake layout whose node bits bound the IDs (default leaf: 1024 IDs).
    #[arg(long, default_value = "leaf", global = true)]
    layout: String,
    /// One JSON object per line.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum WorkerCommand {
    /// What is allocated, to whom, and how long ago each holder was last alive.
    List,
    /// Registers the identity (or finds its ID again) and prints the ID.
    Register,
    /// Releases the identity's ID (its last time is forgotten: only for holders gone for good).
    Release,
}

/// Runs `f` on the process's runtime. One runtime for the whole process, with a worker
/// thread of its own: a registry's session (ZooKeeper's pings) runs on it in the background
/// while IDs are generated, between these calls.
pub(crate) fn block_on<T>(f: impl std::future::Future<Output = T>) -> Result<T, Failure> {
    Ok(runtime().map_err(Failure::Other)?.block_on(f))
}

fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RUNTIME: std::sync::OnceLock<Result<tokio::runtime::Runtime, String>> =
        std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the async runtime: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn now_ms() -> u64 {
    use floe_core::clock::Clock;
    SystemClock.now_nanos() / floe_core::clock::NANOS_PER_MILLI
}

fn registry_url(args: &RegistryArgs) -> Result<&str, String> {
    args.registry.as_deref().ok_or_else(|| {
        "registry: --registry URL is required (e.g. file:///var/lib/floe)".to_string()
    })
}

fn open(args: &RegistryArgs) -> Result<Box<dyn Registry>, Failure> {
    Ok(block_on(floe_registry::open(registry_url(args)?))??)
}

fn identity(args: &RegistryArgs, host: &Option<String>) -> Identity {
    let host = host.clone().unwrap_or_else(crate::host_name);
    Identity::new(args.service.clone(), host, args.port)
}

/// A worker lease for `floe gen`, heartbeating in the background while IDs are generated: the
/// server's lease ([`WorkerLease`]) on this process's runtime.
pub(crate) struct GenLease {
    /// The lease (ID, not-before time, fence, time bound).
    pub lease: Arc<Lease>,
    inner: WorkerLease,
}

impl GenLease {
    /// Acquires a lease, printing what happened on the way to stderr.
    /// `kind` names the generator (`snowflake`, `sno`): the lease keeps the durable time
    /// bound of `{kind}-{id}` in the state directory.
    pub(crate) fn acquire(
        args: &RegistryArgs,
        host: &Option<String>,
        space: IdSpace,
        kind: &str,
    ) -> Result<Self, Failure> {
        let config = RegistryConfig {
            url: Some(registry_url(args)?.to_string()),
            service: args.service.clone(),
            host: host.clone(),
            port: Some(args.port),
            port_fallback: args.port_fallback,
            start_from_cache: args.start_from_cache,
            reclaim_after_secs: args.reclaim_after,
            max_clock_wait_ms: args.max_clock_wait_ms,
        };
        let inner = block_on(WorkerLease::try_acquire(
            &config,
            &args.state_dir,
            identity(args, host),
            space,
            kind,
            &(Arc::new(floe_core::clock::SystemClock) as floe_server::ServerClock),
        ))??;
        for note in &inner.lease.notes {
            eprintln!("floe: {note}");
        }
        Ok(GenLease {
            lease: Arc::clone(&inner.lease),
            inner,
        })
    }

    /// Heartbeats every 3 s (as Leaf) with the time `last_time_ms` gives, until `finish`, so
    /// that a run that dies leaves a recent last time behind.
    pub(crate) fn start_heartbeats(
        &mut self,
        last_time_ms: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        if let Ok(rt) = runtime() {
            let _on = rt.enter();
            self.inner.start_heartbeats(last_time_ms);
        }
    }

    /// Stops the heartbeats, records the last issued time in the registry and the cache, and
    /// ends this process's hold on the ID so that the next run finds it free at once.
    pub(crate) fn finish(self, last_time_ms: u64) -> Result<(), Failure> {
        let GenLease { lease, inner } = self;
        drop(lease);
        Ok(block_on(inner.try_finish(last_time_ms))??)
    }
}

/// A record's state for `floe worker list`: `live`; `closed` (another identity may take it
/// at once); `parked`, the holder having gone silent without closing it (it may still be
/// issuing, cut off): a takeover waits its reach and margin from the moment it finds the
/// holder's claim gone, so the ID frees no sooner than `frees_at_ms`.
fn describe(record: &floe_registry::WorkerRecord, now_ms: u64) -> String {
    let wait = floe_registry::terms::LeaseTerms::takeover_wait(record.reach(), Duration::ZERO);
    match record.state(now_ms) {
        RecordState::Live => "live".to_string(),
        RecordState::Closed => "closed".to_string(),
        RecordState::Parked { frees_at_ms } if frees_at_ms > now_ms => format!(
            "parked (silent, not closed): a takeover waits {} once it finds the holder's claim gone, so not before about {} from now; `floe worker release` frees it at once if the holder is gone for good",
            human(wait),
            human(Duration::from_millis(frees_at_ms - now_ms))
        ),
        RecordState::Parked { .. } => format!(
            "parked (silent past its reach): a takeover still waits {} once it finds the holder's claim gone; `floe worker release` frees it at once",
            human(wait)
        ),
    }
}

/// `d` for a reader: seconds, minutes, hours or days.
fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    match s {
        s if s < 120.0 => format!("{s:.0} s"),
        s if s < 7_200.0 => format!("{:.1} min", s / 60.0),
        s if s < 172_800.0 => format!("{:.1} h", s / 3_600.0),
        s => format!("{:.1} days", s / 86_400.0),
    }
}

/// `floe worker ...`.
pub(crate) fn run(args: &WorkerArgs) -> Result<(), Failure> {
    let registry = open(&args.registry)?;
    let layout = Layout::preset(&args.layout).map_err(|e| e.to_string())?;
    let who = identity(&args.registry, &args.host);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match args.command {
        WorkerCommand::List => {
            let records = block_on(registry.list(&args.registry.service))??;
            let now = now_ms();
            if !args.json {
                writeln!(
                    out,
                    "{:<6} {:<40} {:<16} state",
                    "id", "holder", "last alive"
                )
                .map_err(Failure::Io)?;
            }
            for r in records {
                let age = (r.last_time_ms > 0).then(|| now.saturating_sub(r.last_time_ms));
                let state = r.state(now);
                let text = describe(&r, now);
                if args.json {
                    let (name, frees_at_ms) = match state {
                        RecordState::Live => ("live", None),
                        RecordState::Closed => ("closed", None),
                        RecordState::Parked { frees_at_ms } => ("parked", Some(frees_at_ms)),
                    };
                    let v = json!({
                        "id": r.id, "service": r.identity.service, "host": r.identity.host,
                        "port": r.identity.port, "last_time_ms": r.last_time_ms, "age_ms": age,
                        "closed": r.closed, "state": name, "frees_at_ms": frees_at_ms,
                        "window_ms": r.window_ms, "reach_ms": r.reach(),
                        "rule": r.rule, "layout": r.layout,
                    });
                    writeln!(out, "{v}").map_err(Failure::Io)?;
                } else {
                    let holder = format!("{}:{}", r.identity.host, r.identity.port);
                    let age = age.map_or("never".to_string(), |a| {
                        format!("{:.1} s ago", a as f64 / 1000.0)
                    });
                    writeln!(out, "{:<6} {holder:<40} {age:<16} {text}", r.id)
                        .map_err(Failure::Io)?;
                }
            }
        }
        WorkerCommand::Register => {
            let reg = block_on(registry.register(&who, IdSpace::snowflake(&layout)))??;
            if !reg.takeover_wait.is_zero() {
                // Taken from a holder that did not close it cleanly (it may still be issuing):
                // its window is waited out before the record may say closed.
                eprintln!(
                    "floe: worker ID {}'s previous holder did not close it cleanly: waiting {} ms (its reach and margin)",
                    reg.record.id,
                    reg.takeover_wait.as_millis()
                );
                block_on(tokio::time::sleep(reg.takeover_wait))?;
            }
            // Registered, not used: closed cleanly, so that the identity's first start does not
            // wait out a window nobody used.
            block_on(registry.close(&who, reg.record.id))??;
            if args.json {
                let v = json!({"id": reg.record.id, "existing": reg.existing, "last_time_ms": reg.record.last_time_ms});
                writeln!(out, "{v}").map_err(Failure::Io)?;
            } else {
                writeln!(out, "{}", reg.record.id).map_err(Failure::Io)?;
            }
        }
        WorkerCommand::Release => {
            let released = block_on(registry.release(&who))??;
            if !released {
                // Not a usage error (exit 1): the command was right, the registry has nothing
                // under that identity (a typo, or released already).
                return Err(Failure::Other(format!(
                    "{who} holds no worker ID in this registry, nothing released (`floe worker list` shows who does; `floe serve` leases sno and LexicalUUID under the services {service}-sno and {service}-lexical, each released by its own --service)",
                    service = args.registry.service
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_registry::WorkerRecord;

    #[test]
    fn list_says_when_a_parked_id_frees_in_units_a_reader_takes_in() {
        let t = 1_000_000;
        let record = WorkerRecord {
            reach_ms: 900_000,
            holder: 1,
            ..WorkerRecord::new(0, Identity::new("s", "h", 1), t)
        };
        assert_eq!(describe(&record, t + 1_000), "live");
        let parked = describe(&record, t + 10_000);
        // The wait is 16.8 min; the earliest free moment, from a beat after its last time.
        assert!(
            parked.starts_with("parked (silent, not closed): a takeover waits 16.8 min"),
            "{parked}"
        );
        assert!(
            parked.contains("not before about 16.7 min from now"),
            "{parked}"
        );
        let past = describe(&record, t + 2_000_000);
        assert!(past.starts_with("parked (silent past its reach)"), "{past}");
        let week = WorkerRecord {
            reach_ms: 604_800_000,
            ..record.clone()
        };
        assert!(describe(&week, t + 10_000).contains("waits 7.9 days"));
        let closed = WorkerRecord {
            closed: true,
            ..record
        };
        assert_eq!(describe(&closed, t + 10_000), "closed");
        assert_eq!(human(Duration::from_secs(45)), "45 s");
        assert_eq!(human(Duration::from_secs(3 * 3_600)), "3.0 h");
    }
}
