//! A server assembled from its checked configuration ([`Plan`]): generators on their leases
//! (`generators`), stores (`stores`), listeners bound last ([`Server::start`]); then served
//! until a shutdown signal and closed in order ([`Server::run`]). A start that fails releases
//! what it took (`Taken`). The `floe serve` binary only fills the configuration.

use std::net::SocketAddr;
use std::sync::Arc;

use floe_core::clock::Clock;
use floe_registry::horizon::DurableHorizon;
use floe_sequencer::TailDir;
use tokio::net::TcpListener;

use crate::app::{store_flags, App};
use crate::config::{Note, Plan};
use crate::observe::{LeaseView, Telemetry};
use crate::present::Presentation;
use crate::{Limits, ServerClock};

mod error;
mod generators;
pub mod lease;
mod mirror;
mod stores;

pub use error::{StartError, StartErrorKind};
use lease::WorkerLease;

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

/// What a start has taken so far: worker leases (with their generators' times), durable time
/// bounds, and leases granted that no generator was built on (yet). A start that fails releases
/// it all ([`Taken::release`]), as a stop would: no worker ID stays held under this server's
/// identity, no time bound stays pushed ahead.
#[derive(Debug)]
struct Taken {
    /// The server's clock.
    clock: ServerClock,
    leases: Vec<Held<WorkerLease>>,
    bounds: Vec<Held<DurableHorizon>>,
    /// Leases granted, by generator, waiting for it to be built.
    pending: Vec<(String, WorkerLease)>,
    /// The leases as the status page and metrics show them.
    views: Vec<LeaseView>,
}

impl Taken {
    /// Nothing taken yet.
    fn new(clock: ServerClock) -> Taken {
        Taken {
            clock,
            leases: Vec::new(),
            bounds: Vec::new(),
            pending: Vec::new(),
            views: Vec::new(),
        }
    }

    /// Releases everything, recording each generator's last time; the first error is returned,
    /// after every step was taken.
    async fn release(self) -> Result<(), String> {
        let mut result = Ok(());
        for Held { held: lease, last } in self.leases {
            let finished = lease.finish(alive_at(&self.clock, last())).await;
            if result.is_ok() {
                result = finished;
            }
        }
        for (_, lease) in self.pending {
            let finished = lease.finish(now_ms(&self.clock)).await;
            if result.is_ok() {
                result = finished;
            }
        }
        for Held { held: bound, last } in self.bounds {
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

/// A server, started: listeners bound, numbers leased, stores open.
#[derive(Debug)]
pub struct Server {
    app: Arc<App>,
    grpc: Option<TcpListener>,
    http: Option<TcpListener>,
    limits: Limits,
    security: crate::Security,
    /// The files [`Reloader::reload`] reads again (paths only: never a store's URL, whose
    /// password `Debug` would show).
    files: Arc<(crate::config::TlsConfig, crate::config::AuthConfig)>,
    taken: Taken,
    /// The state directory's own lock ([`lock_state_dir`]), held until the server stops.
    dir_lock: std::fs::File,
    /// The state directory's tails lock, when this process holds it (WEAK tails are kept).
    tails: Option<TailDir>,
    /// What happened while starting (a clock waited for, a registry unreachable), for the log.
    pub notes: Vec<Note>,
    /// One line per generator and store: what the start-up line names.
    pub described: Vec<String>,
}

/// A listener on `addr` (`None`: off); `key` names it in an error.
async fn bind(addr: Option<&str>, key: &str) -> Result<Option<TcpListener>, String> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    TcpListener::bind(addr)
        .await
        .map(Some)
        .map_err(|e| format!("{key}: cannot listen on {addr}: {e}"))
}

fn now_ms(clock: &ServerClock) -> u64 {
    clock.now_nanos() / 1_000_000
}

/// The time a heartbeat records: the later of the generator's last issued time and the clock,
/// as Leaf's heartbeat records the clock. A restart must start after it either way; an idle
/// server then shows as alive in `floe worker list` rather than as last seen at the epoch.
fn alive_at(clock: &ServerClock, last_issued_ms: u64) -> u64 {
    last_issued_ms.max(now_ms(clock))
}

/// When a timestamp field runs out, and how long that is from now.
fn horizon_text(now_ms: u64, last_ms: Option<u64>) -> String {
    match last_ms {
        Some(end) => {
            let years = (end as f64 - now_ms as f64) / (365.25 * 86_400_000.0);
            format!(
                "timestamp field ends {} ({years:.1} years)",
                crate::observe::status::utc(end)
            )
        }
        None => "timestamp field never ends".to_string(),
    }
}

impl Server {
    /// Starts the server `plan` describes, reading `clock` (the system's but in tests): TLS, token and scramble-key files read; the
    /// generators' worker IDs leased (identity: the registry's service, this host, and
    /// [`ServerConfig::identity_port`](crate::ServerConfig::identity_port)) and the generators
    /// built; the stores opened with their floors; the listeners bound last, so that nothing
    /// listens before the server can answer. A start that fails releases what it took.
    ///
    /// # Errors
    /// One line naming the configuration key or the component that failed.
    pub async fn start(plan: Plan, clock: ServerClock) -> Result<Server, StartError> {
        // TLS, token and key files first: a bad one fails before anything is leased.
        let (security, presentation) = {
            let config = plan.config.clone();
            let now_ms = now_ms(&clock);
            let templates = plan.templates.clone();
            let domain = plan.scramble_domain;
            tokio::task::spawn_blocking(move || {
                let security =
                    crate::Security::load(&config, now_ms).map_err(StartError::config)?;
                let key_file = config.scramble.key_file.as_deref();
                let presentation =
                    Presentation::load(templates, domain, key_file).map_err(StartError::config)?;
                Ok::<_, StartError>((security, Arc::new(presentation)))
            })
            .await
            .map_err(|e| format!("tls, auth, templates: {e}"))??
        };
        // Before anything registers a metric: the recorder.
        let mut telemetry = Telemetry::new(plan.config.metrics.enabled, Arc::clone(&clock));
        // Shown in logs and on the status page: never a password.
        telemetry.registry = floe_core::endpoint::redacted(&lease::registry_url(
            &plan.config.registry,
            &plan.state_dir,
        ));
        // Before anything is leased: a second server on this directory takes nothing.
        let dir_lock = {
            let dir = plan.state_dir.clone();
            tokio::task::spawn_blocking(move || lock_state_dir(&dir))
                .await
                .map_err(|e| format!("state directory: {e}"))??
        };
        let mut taken = Taken::new(Arc::clone(&clock));
        let mut notes = Vec::new();
        let mut described = Vec::new();
        let assembled =
            Self::assemble(&plan, &mut taken, &mut notes, &mut described, &presentation).await;
        let (sequencer, generators, tails, grpc, http) = match assembled {
            Ok(parts) => parts,
            Err(e) => {
                if let Err(release) = taken.release().await {
                    tracing::warn!("after a failed start, releasing what it took: {release}");
                }
                return Err(e);
            }
        };
        for (name, listener) in [("grpc", &grpc), ("http", &http)] {
            if let Some(addr) = listener.as_ref().and_then(|l| l.local_addr().ok()) {
                telemetry.listeners.push(format!("{name} {addr}"));
            }
        }
        telemetry.leases = std::mem::take(&mut taken.views);
        telemetry.stores_ready = store_flags(&sequencer);
        let app = App {
            telemetry,
            sequencer: Arc::new(sequencer),
            ids: Some(generators),
            max_batch: plan.max_batch,
            leaf_store: plan.leaf_store.clone(),
            hosts: crate::http::guard::HostPolicy {
                check: plan.config.listen.host_check,
                allowed: plan.config.listen.allow_hosts.clone(),
            },
            max_wait: plan.max_wait,
            presentation,
            clock,
            login: security.login(),
            openapi: security.openapi(),
        };
        Ok(Server {
            app: Arc::new(app),
            grpc,
            http,
            limits: plan.limits,
            security,
            files: Arc::new((plan.config.tls.clone(), plan.config.auth.clone())),
            taken,
            dir_lock,
            tails,
            notes,
            described,
        })
    }

    /// What [`start`](Self::start) builds, in order; what it takes goes into `taken`.
    #[allow(clippy::type_complexity)]
    async fn assemble(
        plan: &Plan,
        taken: &mut Taken,
        notes: &mut Vec<Note>,
        described: &mut Vec<String>,
        presentation: &Presentation,
    ) -> Result<
        (
            floe_sequencer::Sequencer,
            Arc<crate::ids::Generators>,
            Option<TailDir>,
            Option<TcpListener>,
            Option<TcpListener>,
        ),
        StartError,
    > {
        let generators = generators::build(plan, taken, notes, described).await?;
        if let Some(line) = presentation.describe() {
            described.push(line);
        }
        let (tails, mut saved) = stores::tails(plan, notes).await?;
        let sequencer = stores::open(plan, &generators, &mut saved, notes, described).await?;
        // Last: nothing listens until the server can answer (a restart waiting for its lease
        // is refused, not held, by load balancers and health checks).
        let listeners = async {
            let grpc = bind(plan.listen.grpc.as_deref(), "listen.grpc").await?;
            let http = bind(plan.listen.http.as_deref(), "listen.http").await?;
            Ok::<_, String>((grpc, http))
        };
        match listeners.await {
            Ok((grpc, http)) => Ok((sequencer, generators, tails, grpc, http)),
            Err(e) => {
                sequencer.close().await;
                Err(StartError::from(e))
            }
        }
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

    /// What reads the certificate, key and token files again on SIGHUP.
    pub fn reloader(&self) -> Reloader {
        Reloader {
            security: self.security.clone(),
            files: Arc::clone(&self.files),
            clock: Arc::clone(&self.app.clock),
        }
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
            taken,
            dir_lock,
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
        let released = taken.release().await;
        if result.is_ok() {
            result = released;
        }
        drop(dir_lock);
        result
    }
}

/// Takes the state directory's own lock (`serve.lock` in it, created with the directory when
/// missing; an exclusive `flock` held while the file is open, its holder's pid written in
/// it): one `floe serve` per state directory. Taken before anything is leased, so that a
/// second server started on a directory in use by mistake takes no worker ID on its way out.
///
/// # Errors
/// [`StartErrorKind::Refused`] when another process holds it; [`StartErrorKind::Io`] when the
/// directory or the file cannot be created (a read-only or full disk, permissions).
fn lock_state_dir(dir: &std::path::Path) -> Result<std::fs::File, StartError> {
    use std::io::Write;
    let io = |what: &str, e: std::io::Error| StartError {
        kind: StartErrorKind::Io,
        message: format!("state directory {}: {what}: {e}", dir.display()),
    };
    std::fs::create_dir_all(dir).map_err(|e| io("cannot create it", e))?;
    match floe_sequencer::lock_file(dir, "serve.lock") {
        Ok(Some(mut file)) => {
            // Only said for a person reading the file: the lock is the flock.
            let _ = file
                .set_len(0)
                .and_then(|()| writeln!(file, "{}", std::process::id()));
            Ok(file)
        }
        Ok(None) => {
            let path = dir.join("serve.lock");
            let pid = std::fs::read_to_string(&path).unwrap_or_default();
            let by = match pid.trim() {
                "" => String::new(),
                pid => format!(" (pid {pid})"),
            };
            Err(StartError {
                kind: StartErrorKind::Refused,
                message: format!(
                    "state directory {} is in use by another floe serve{by}, which holds {}: one floe serve per state directory (give this one a --state-dir of its own)",
                    dir.display(),
                    path.display()
                ),
            })
        }
        Err((what, e)) => Err(io(&format!("cannot {what} serve.lock"), e)),
    }
}

/// Reads the listeners' certificate, key and token files again (SIGHUP): see
/// [`Security::reload`](crate::Security::reload).
#[derive(Debug, Clone)]
pub struct Reloader {
    security: crate::Security,
    files: Arc<(crate::config::TlsConfig, crate::config::AuthConfig)>,
    clock: ServerClock,
}

impl Reloader {
    /// Reads the files again, off the async executor, and serves them when all are good:
    /// what was reloaded (empty when TLS and tokens are off).
    ///
    /// # Errors
    /// One line naming the key and the file that is wrong; the old ones are kept.
    pub async fn reload(&self) -> Result<Vec<String>, String> {
        let (security, files) = (self.security.clone(), Arc::clone(&self.files));
        let now = now_ms(&self.clock);
        tokio::task::spawn_blocking(move || security.reload(&files.0, &files.1, now))
            .await
            .map_err(|e| format!("reload: {e}"))?
    }
}
