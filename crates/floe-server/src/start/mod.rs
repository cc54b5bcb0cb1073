//! A server assembled from its [`ServerConfig`]: listeners bound, worker IDs leased, generators
//! and stores opened ([`Server::start`]); then served until a shutdown signal and closed in
//! order ([`Server::run`]). The `floe serve` binary only fills the configuration.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use floe_core::clock::{Clock, SystemClock};
use floe_core::lexical::LexicalGenerator;
use floe_core::sno::{Partition, SnoGenerator, SnoSnapshot};
use floe_core::snowflake::{Layout, SnowflakeConfig};
use floe_registry::horizon::{DurableHorizon, HorizonConfig, HorizonFile};
use floe_registry::{IdSpace, Identity};
use floe_sequencer::stores::snowflake::SnowflakeStore;
use floe_sequencer::{KeyLimits, SavedTails, SeqError, Sequencer, Store, StoreHandle, TailDir};
use tokio::net::TcpListener;

use crate::app::{store_flags, App};
use crate::config::{LayoutConfig, ServerConfig};
use crate::ids::{Generators, IdKind, Snowflake, DEFAULT_GENERATOR};
use crate::observe::{LeaseView, Telemetry};
use crate::present::Presentation;
use crate::Limits;

mod error;
pub mod lease;

pub use error::{StartError, StartErrorKind};
use lease::WorkerLease;

/// The LexicalUUID worker IDs a registry leases (as many as sno partitions).
const LEXICAL_WORKERS: IdSpace = IdSpace { size: 1 << 16 };

/// A generator's last issued time, in Unix ms.
type LastTime = Arc<dyn Fn() -> u64 + Send + Sync>;

/// What the server holds for a generator until it stops (a worker lease, a durable time bound
/// of its own), with the generator's last issued time to record then.
struct Held<T> {
    held: T,
    last: LastTime,
}

impl<T: std::fmt::Debug> std::fmt::Debug for Held<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.held.fmt(f)
    }
}

/// Starts `lease`'s heartbeats with its generator's time and keeps it for the stop; the
/// status page and metrics see it as `generator`'s.
fn keep(
    leases: &mut Vec<Held<WorkerLease>>,
    views: &mut Vec<LeaseView>,
    generator: &str,
    mut lease: WorkerLease,
    last: LastTime,
) {
    views.push(LeaseView::of(generator, &lease.lease));
    let beat = Arc::clone(&last);
    lease.start_heartbeats(move || alive_at(beat()));
    leases.push(Held { held: lease, last });
}

/// A server, started: listeners bound, numbers leased, stores open.
#[derive(Debug)]
pub struct Server {
    app: Arc<App>,
    grpc: Option<TcpListener>,
    http: Option<TcpListener>,
    limits: Limits,
    security: crate::Security,
    leases: Vec<Held<WorkerLease>>,
    bounds: Vec<Held<DurableHorizon>>,
    /// The state directory's tails lock, when this process holds it (WEAK tails are kept).
    tails: Option<TailDir>,
    /// What happened while starting (a clock waited for, a registry unreachable), for the log.
    pub notes: Vec<String>,
    /// One line per generator and store: what the start-up line names.
    pub described: Vec<String>,
}

async fn bind(addr: &str, key: &str) -> Result<Option<TcpListener>, String> {
    if addr == "off" {
        return Ok(None);
    }
    TcpListener::bind(addr)
        .await
        .map(Some)
        .map_err(|e| format!("{key}: cannot listen on {addr}: {e}"))
}

fn now_ms() -> u64 {
    SystemClock.now_nanos() / 1_000_000
}

/// The time a heartbeat records: the later of the generator's last issued time and the clock,
/// as Leaf's heartbeat records the clock. A restart must start after it either way; an idle
/// server then shows as alive in `floe worker list` rather than as last seen at the epoch.
fn alive_at(last_issued_ms: u64) -> u64 {
    last_issued_ms.max(now_ms())
}

/// When a timestamp field runs out, and how long that is from now.
fn horizon_text(last_ms: Option<u64>) -> String {
    match last_ms {
        Some(end) => {
            let years = (end as f64 - now_ms() as f64) / (365.25 * 86_400_000.0);
            format!(
                "timestamp field ends {} ({years:.1} years)",
                crate::observe::status::utc(end)
            )
        }
        None => "timestamp field never ends".to_string(),
    }
}

/// A layout checked against the clock: one that cannot issue now fails naming its key.
fn layout_now(config: &LayoutConfig, key: &str) -> Result<Layout, String> {
    let layout = config.layout().map_err(|e| format!("{key}: {e}"))?;
    layout
        .validate_now(now_ms())
        .map_err(|e| format!("{key}: {e}"))?;
    Ok(layout)
}

/// A sno generator on a leased partition, starting after `not_before_ms`.
fn sno_generator(
    lease: &WorkerLease,
    config: &crate::config::SnoConfig,
) -> Result<SnoGenerator<SystemClock>, String> {
    let l = &lease.lease;
    let partition = u16::try_from(l.id).map(Partition::from_u16).map_err(|_| {
        format!(
            "registry: a sno partition is 0 to 65535, the registry gave {}",
            l.id
        )
    })?;
    let snapshot = SnoSnapshot::starting_after(
        partition,
        l.not_before_ms,
        config.sequence_min,
        config.sequence_max,
    );
    // Overflow stalls are counted (at most once per 4 ms unit: the handler's own bound).
    let stalls = metrics::counter!("floe_sno_overflow_stalls_total");
    let mut g = SnoGenerator::from_snapshot(&snapshot, SystemClock)
        .map_err(|e| format!("sno: {e}"))?
        .with_fence(l.fence.clone())
        .with_overflow_handler(move |_| stalls.increment(1));
    if let Some(h) = l.horizon() {
        g = g.with_horizon(h);
    }
    Ok(g)
}

impl Server {
    /// Leases the Snowflake and sno numbers (identity: the registry's service, this host, and
    /// [`ServerConfig::identity_port`]), starts the LexicalUUID time bound, opens the stores,
    /// applies `bigger_than`, and binds the listeners last, so that nothing listens before the
    /// server can answer.
    ///
    /// # Errors
    /// One line naming the configuration key or the component that failed.
    pub async fn start(config: &ServerConfig) -> Result<Server, StartError> {
        config.validate().map_err(StartError::config)?;
        let limits = config.limits().map_err(StartError::config)?;
        let options = config.serve_options().map_err(StartError::config)?;
        let floors = config.floors().map_err(StartError::config)?;
        // TLS and token files first: a bad one fails before anything is leased.
        let security = {
            let config = config.clone();
            tokio::task::spawn_blocking(move || crate::Security::load(&config))
                .await
                .map_err(|e| format!("tls, auth: {e}"))?
                .map_err(StartError::config)?
        };
        // Templates and scramble keys too (a file read: off the executor).
        let presentation = {
            let config = config.clone();
            Arc::new(
                tokio::task::spawn_blocking(move || Presentation::load(&config))
                    .await
                    .map_err(|e| format!("templates, scramble: {e}"))?
                    .map_err(StartError::config)?,
            )
        };
        let state_dir = config.state_dir.as_path();
        let default_layout = layout_now(&config.snowflake.default, "snowflake.layout")
            .map_err(StartError::config)?;
        let mut named_layouts = Vec::new();
        for (name, l) in &config.snowflake.named {
            named_layouts.push((
                name.clone(),
                layout_now(l, &format!("snowflake.named.{name}")).map_err(StartError::config)?,
            ));
        }

        // Before anything registers a metric: the recorder.
        let mut telemetry = Telemetry::new(config.metrics.enabled);
        telemetry.registry = crate::lease::registry_url(&config.registry, state_dir);
        let port = config.identity_port();
        let host = config
            .registry
            .host
            .clone()
            .unwrap_or_else(|| gethostname::gethostname().to_string_lossy().into_owned());
        let service = &config.registry.service;
        let mut notes = Vec::new();
        let mut described = Vec::new();
        let mut leases = Vec::new();

        // Snowflake: the default generator and the named ones, each on a lease of its own.
        let mut snowflakes: Vec<(String, Snowflake)> = Vec::new();
        let all_layouts: Vec<(String, Layout)> =
            std::iter::once((DEFAULT_GENERATOR.to_string(), default_layout))
                .chain(named_layouts)
                .collect();
        let serves = |kind| config.ids.serves(kind);
        let snowflake_lease = |name: &str| {
            if name == DEFAULT_GENERATOR {
                (service.clone(), "snowflake".to_string())
            } else {
                (
                    format!("{service}-snowflake-{name}"),
                    format!("snowflake-{name}"),
                )
            }
        };
        // Every worker lease at once: a takeover waits out its previous holder's window
        // (floe_registry::terms), and the waits then overlap instead of adding up.
        let mut wanted: Vec<(String, Identity, IdSpace)> = Vec::new();
        if serves(IdKind::Snowflake) {
            for (name, layout) in &all_layouts {
                let (svc, kind) = snowflake_lease(name);
                wanted.push((
                    kind,
                    Identity::new(svc, host.clone(), port),
                    IdSpace::snowflake(layout),
                ));
            }
        }
        if serves(IdKind::Sno) {
            wanted.push((
                "sno".to_string(),
                Identity::new(format!("{service}-sno"), host.clone(), port),
                IdSpace::SNO_PARTITIONS,
            ));
        }
        if serves(IdKind::Lexical) && config.lexical.worker_id.is_none() {
            wanted.push((
                "lexical".to_string(),
                Identity::new(format!("{service}-lexical"), host.clone(), port),
                LEXICAL_WORKERS,
            ));
        }
        // The first that fails ends the others (their claims released with them): a start
        // that cannot have one lease does not wait out the rest.
        let acquired = futures_util::future::try_join_all(wanted.into_iter().map(
            |(kind, identity, space)| {
                let registry = &config.registry;
                async move {
                    match WorkerLease::try_acquire(registry, state_dir, identity, space, &kind)
                        .await
                    {
                        Ok(lease) => Ok((kind, lease)),
                        Err(e) => Err((kind, e)),
                    }
                }
            },
        ))
        .await;
        let mut acquired: std::collections::HashMap<String, WorkerLease> = match acquired {
            Ok(leases) => leases.into_iter().collect(),
            Err((kind, e)) => {
                let what = match kind.as_str() {
                    "sno" => "sno: partition".to_string(),
                    "lexical" => "lexical: worker ID".to_string(),
                    "snowflake" => format!("snowflake {DEFAULT_GENERATOR}: worker ID"),
                    other => format!(
                        "snowflake {}: worker ID",
                        other.strip_prefix("snowflake-").unwrap_or(other)
                    ),
                };
                return Err(StartError::registry(&what, &e));
            }
        };
        let mut take_lease = |kind: &str| {
            acquired.remove(kind).ok_or_else(|| {
                floe_registry::RegistryError::new(
                    floe_registry::ErrorKind::Corrupt,
                    format!("internal: no lease was asked for {kind}"),
                )
            })
        };
        for (name, layout) in all_layouts
            .into_iter()
            .filter(|_| serves(IdKind::Snowflake))
        {
            let (_, kind) = snowflake_lease(&name);
            let lease = take_lease(&kind)
                .map_err(|e| StartError::registry(&format!("snowflake {name}: worker ID"), &e))?;
            notes.extend(
                lease
                    .lease
                    .notes
                    .iter()
                    .map(|n| format!("snowflake {name}: {n}")),
            );
            let l = &lease.lease;
            let horizon = l
                .horizon()
                .ok_or("internal: a lease without a time bound")?;
            let g = Arc::new(
                SnowflakeConfig::new(layout)
                    .node_id(u64::from(l.id))
                    .map_err(|e| format!("snowflake {name}: {e}"))?
                    .not_before_ms(l.not_before_ms)
                    .fence(l.fence.clone())
                    .horizon(horizon)
                    .build(SystemClock)
                    .map_err(|e| format!("snowflake {name}: {e}"))?,
            );
            described.push(format!(
                "snowflake {name}: worker {} ({}/{}/{}/{} bits, {} IDs/s at most, {})",
                l.id,
                layout.timestamp_bits(),
                layout.datacenter_bits(),
                layout.worker_bits(),
                layout.sequence_bits(),
                layout.cap_per_second(),
                horizon_text(layout.last_time_ms())
            ));
            let last = Arc::clone(&g);
            keep(
                &mut leases,
                &mut telemetry.leases,
                &format!("snowflake {name}"),
                lease,
                Arc::new(move || last.last_timestamp_ms()),
            );
            snowflakes.push((name, g));
        }

        let mut generators = Generators::new().with_snowflake(snowflakes);
        let mut bounds = Vec::new();
        let mut lexical_lease = None;

        // sno: a partition of its own.
        if serves(IdKind::Sno) {
            let sno_lease =
                take_lease("sno").map_err(|e| StartError::registry("sno: partition", &e))?;
            notes.extend(sno_lease.lease.notes.iter().map(|n| format!("sno: {n}")));
            let sno = Arc::new(sno_generator(&sno_lease, &config.sno)?);
            described.push(format!(
                "sno: partition {} ({})",
                sno_lease.lease.id,
                horizon_text(Some(crate::observe::sno_end_ms()))
            ));
            let last = Arc::clone(&sno);
            keep(
                &mut leases,
                &mut telemetry.leases,
                "sno",
                sno_lease,
                Arc::new(move || last.last_time_ms()),
            );
            generators = generators.with_sno(sno, config.sno.meta);
        }

        // LexicalUUID: a worker ID leased as sno's partition is (unless one is configured,
        // which is then the operator's to keep unique), and a durable time bound.
        let mut lexical_bound = None;
        if serves(IdKind::Lexical) {
            let (worker, not_before_ms, horizon, fence) = match config.lexical.worker_id {
                Some(worker) => {
                    let slot = format!("lexical-{:016x}", worker as u64);
                    let dir = state_dir.to_path_buf();
                    let horizon_config = HorizonConfig {
                        max_start_wait: Duration::from_millis(config.registry.max_clock_wait_ms),
                        ..HorizonConfig::default()
                    };
                    let started = tokio::task::spawn_blocking(move || {
                        let file = HorizonFile::open(&dir, &slot)?;
                        floe_registry::horizon::start(file, &[], horizon_config, SystemClock)
                    })
                    .await
                    .map_err(|e| format!("lexical: time bound: {e}"))?
                    .map_err(|e| StartError::registry("lexical: time bound", &e))?;
                    notes.extend(started.notes.iter().map(|n| format!("lexical: {n}")));
                    let horizon = started.horizon.horizon();
                    lexical_bound = Some(started.horizon);
                    (worker, started.not_before_ms, horizon, None)
                }
                None => {
                    let lease = take_lease("lexical")
                        .map_err(|e| StartError::registry("lexical: worker ID", &e))?;
                    notes.extend(lease.lease.notes.iter().map(|n| format!("lexical: {n}")));
                    let l = &lease.lease;
                    let horizon = l
                        .horizon()
                        .ok_or("internal: a lease without a time bound")?;
                    let leased = (
                        i64::from(l.id),
                        l.not_before_ms,
                        horizon,
                        Some(l.fence.clone()),
                    );
                    lexical_lease = Some(lease);
                    leased
                }
            };
            let mut lexical = LexicalGenerator::new(SystemClock, worker)
                .not_before_ms(not_before_ms)
                .horizon(Arc::clone(&horizon));
            if let Some(fence) = &fence {
                lexical = lexical.fence(Arc::clone(fence));
            }
            described.push(format!("lexical: worker {worker}"));
            generators = generators.with_lexical(lexical, Some(horizon), fence);
        }
        if let Some(line) = presentation.describe() {
            described.push(line);
        }
        if serves(IdKind::Uuid7) {
            generators = generators.with_uuid7();
        }
        if serves(IdKind::Ulid) {
            generators = generators.with_ulid();
        }
        let generators = Arc::new(generators);
        let last_lexical: LastTime = {
            let g = Arc::clone(&generators);
            Arc::new(move || g.lexical().map_or(0, LexicalGenerator::last_time_ms))
        };
        if let Some(lease) = lexical_lease {
            keep(
                &mut leases,
                &mut telemetry.leases,
                "lexical",
                lease,
                Arc::clone(&last_lexical),
            );
        }
        if let Some(bound) = lexical_bound {
            bounds.push(Held {
                held: bound,
                last: last_lexical,
            });
        }

        // The unused WEAK tails a graceful stop kept, read and removed before anything is
        // served (only by the process holding the state directory's tails lock).
        let (tails, mut saved) = if config.sequencer.keep_tails {
            let dir = state_dir.to_path_buf();
            tokio::task::spawn_blocking(move || -> Result<_, SeqError> {
                match TailDir::lock(&dir)? {
                    Some(lock) => {
                        let saved = lock.take()?;
                        Ok((Some(lock), saved))
                    }
                    None => Ok((None, SavedTails::new())),
                }
            })
            .await
            .map_err(|e| format!("sequencer: tails: {e}"))?
            .map_err(|e| format!("sequencer: tails: {e}"))?
        } else {
            (None, SavedTails::new())
        };
        if config.sequencer.keep_tails && tails.is_none() {
            notes.push(format!(
                "sequencer: another process holds {}'s tails lock: WEAK tails are neither used nor kept",
                state_dir.display()
            ));
        }

        // Stores. A node of a fleet (worker IDs from ZooKeeper or etcd) with a store of its own
        // is warned: its sequences are not the fleet's.
        let fleet = config
            .registry
            .url
            .as_deref()
            .is_some_and(|u| u.starts_with("zk://") || u.starts_with("etcd://"));
        let mut sequencer = Sequencer::new();
        for (name, url) in &config.store_specs() {
            let store: Arc<dyn Store> = if url == "snowflake" {
                // Validated: a snowflake store keeps "snowflake" in ids.kinds.
                let g = generators
                    .snowflake(None)
                    .map_err(|e| format!("stores.{name}: {}", e.message))?;
                Arc::new(
                    SnowflakeStore::new(Arc::clone(g))
                        .map_err(|e| format!("stores.{name}: {e}"))?,
                )
            } else {
                floe_sequencer::open(url, state_dir)
                    .await
                    .map_err(|e| StartError::store(&format!("stores.{name}"), &e))?
            };
            let handle = StoreHandle::new(name.clone(), store, options)
                .key_limits(KeyLimits {
                    idle: Duration::from_secs(config.sequencer.key_idle_secs),
                    max_keys: config.sequencer.max_keys,
                })
                .map_err(|e| StartError::config(format!("sequencer.max_keys: {e}")))?;
            let handle = handle.with_tails(url, state_dir, &mut saved);
            if handle.tails_pending() > 0 {
                notes.push(format!(
                    "store {name}: {} WEAK IDs kept by the last graceful stop are served first",
                    handle.tails_pending()
                ));
            }
            if let Some(f) = floors.get(name) {
                handle
                    .init(f)
                    .await
                    .map_err(|e| StartError::store(&format!("bigger_than: store {name}"), &e))?;
            }
            described.push(format!("store {name}: {}", handle.store().kind()));
            if fleet && !handle.store().capabilities().shared {
                notes.push(format!(
                    "warning: store {name} ({}) is this node's own, while its worker IDs come from a shared registry: other nodes count the same keys separately (the same IDs); use a shared store (postgres, mysql, redis, etcd, zk) for sequences across nodes",
                    handle.store().kind()
                ));
            }
            sequencer.add(handle);
        }

        // Last: nothing listens until the server can answer (a restart waiting for its lease
        // is refused, not held, by load balancers and health checks).
        let grpc = bind(&config.listen.grpc, "listen.grpc").await?;
        let http = bind(&config.listen.http, "listen.http").await?;
        for (name, listener) in [("grpc", &grpc), ("http", &http)] {
            if let Some(addr) = listener.as_ref().and_then(|l| l.local_addr().ok()) {
                telemetry.listeners.push(format!("{name} {addr}"));
            }
        }
        telemetry.stores_ready = store_flags(&sequencer);
        let app = App {
            telemetry,
            sequencer: Arc::new(sequencer),
            ids: Some(generators),
            max_batch: config.limits.max_batch,
            leaf_store: config.leaf_store(),
            allowed_hosts: config.listen.allow_hosts.clone(),
            max_wait: limits.request_timeout.min(Duration::from_secs(2)),
            presentation,
        };
        Ok(Server {
            app: Arc::new(app),
            grpc,
            http,
            limits,
            security,
            leases,
            bounds,
            tails,
            notes,
            described,
        })
    }

    /// The bound gRPC address, if gRPC is on.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The bound HTTP address, if HTTP is on.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// What is served.
    pub fn app(&self) -> &Arc<App> {
        &self.app
    }

    /// Serves until `shutdown` completes, then: connections end (or are dropped at the
    /// shutdown deadline), the unused tails of WEAK segments are kept (when this process
    /// holds the state directory's tails lock), the stores close, each lease records its generator's last time and
    /// is released, and the time bounds come back to the last issued times.
    ///
    /// # Errors
    /// The server's, or the first that closing met (every step is still taken).
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), String> {
        let Server {
            app,
            grpc,
            http,
            limits,
            security,
            leases,
            bounds,
            tails,
            ..
        } = self;
        let served =
            crate::serve_app_secure(Arc::clone(&app), grpc, http, limits, security, shutdown)
                .await
                .map_err(|e| format!("server: {e}"));
        let mut result = served;
        match &tails {
            // Closes the stores too, even when the tails cannot be written.
            Some(dir) => {
                if let Err(e) = app.sequencer.close_keeping(dir).await {
                    if result.is_ok() {
                        result = Err(format!("sequencer: keeping WEAK tails: {e}"));
                    }
                }
            }
            None => app.sequencer.close().await,
        }
        drop(tails);
        for Held { held: lease, last } in leases {
            let finished = lease.finish(alive_at(last())).await;
            if result.is_ok() {
                result = finished;
            }
        }
        for Held { held: bound, last } in bounds {
            let last = last();
            let closed = tokio::task::spawn_blocking(move || bound.close(last))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()));
            if result.is_ok() {
                result = closed.map_err(|e| format!("lexical: time bound: {e}"));
            }
        }
        result
    }
}
