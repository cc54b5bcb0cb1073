//! Worker leases of a server's generators, on the server's own runtime: acquired at start-up,
//! heartbeating while serving, fenced when lost, closed at a clean stop.
//!
//! Each generator that needs a unique number leases it under an identity of its own
//! (service + host + port): the default Snowflake generator under `{service}`, sno under
//! `{service}-sno`, a named Snowflake generator under `{service}-snowflake-{name}`. So the
//! registry keeps one space per generator, and two servers never share a number of one.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use floe_core::clock::SystemClock;
use floe_registry::cache::LocalCache;
use floe_registry::horizon::HorizonConfig;
use floe_registry::lease::{acquire, run_heartbeats, Lease, LeaseConfig, HEARTBEAT_INTERVAL};
use floe_registry::{ErrorKind, IdSpace, Identity, Registry, RegistryError};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::RegistryConfig;
use crate::ServerClock;

/// A leased worker ID, heartbeating on the runtime it was started on.
pub struct WorkerLease {
    /// The lease (ID, fence, time bound).
    pub lease: Arc<Lease>,
    registry: Arc<dyn Registry>,
    cache: Arc<LocalCache>,
    beats: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
}

impl std::fmt::Debug for WorkerLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerLease")
            .field("id", &self.lease.id)
            .field("identity", &self.lease.identity)
            .field("registry", &self.registry.location())
            .finish_non_exhaustive()
    }
}

/// The registry URL a configuration names: its own, or a file registry in `state_dir`.
pub fn registry_url(config: &RegistryConfig, state_dir: &Path) -> String {
    config
        .url
        .clone()
        .unwrap_or_else(|| format!("file://{}", state_dir.display()))
}

impl WorkerLease {
    /// Acquires an ID of `space` for `identity`, keeping the durable time bound of slot
    /// `{kind}-{id}` in `state_dir`. What happened on the way is in `lease.notes`.
    ///
    /// # Errors
    /// The registry's words (space full, clock behind, unreachable with no cache).
    pub async fn acquire(
        config: &RegistryConfig,
        state_dir: &Path,
        identity: Identity,
        space: IdSpace,
        kind: &str,
    ) -> Result<WorkerLease, String> {
        let clock: ServerClock = Arc::new(SystemClock);
        Self::try_acquire(config, state_dir, identity, space, kind, &clock)
            .await
            .map_err(|e| e.to_string())
    }

    /// [`acquire`](Self::acquire), with the error's kind (unreachable, clock behind, held
    /// elsewhere...) kept, for a caller that tells them apart (the CLI's exit codes).
    ///
    /// # Errors
    /// The registry's, the cache's or the time bound's.
    pub async fn try_acquire(
        config: &RegistryConfig,
        state_dir: &Path,
        identity: Identity,
        space: IdSpace,
        kind: &str,
        clock: &ServerClock,
    ) -> Result<WorkerLease, RegistryError> {
        let url = registry_url(config, state_dir);
        let registry: Arc<dyn Registry> = floe_registry::open_or_unreachable(&url).await?.into();
        let dir = state_dir.to_path_buf();
        let cache = tokio::task::spawn_blocking(move || LocalCache::new(dir))
            .await
            .map_err(|e| {
                RegistryError::new(
                    ErrorKind::Corrupt,
                    format!("cannot open the local cache: {e}"),
                )
            })??;
        let mut lease_config = LeaseConfig::new(identity, space);
        lease_config.port_fallback = config.port_fallback;
        lease_config.start_from_cache = config.start_from_cache;
        lease_config.reclaim_after = config.reclaim_after_secs.map(Duration::from_secs);
        lease_config.horizon_kind = Some(kind.to_string());
        lease_config.horizon = HorizonConfig {
            max_start_wait: Duration::from_millis(config.max_clock_wait_ms),
            ..HorizonConfig::default()
        };
        let lease = acquire(registry.as_ref(), &cache, &lease_config, clock).await?;
        Ok(WorkerLease {
            lease: Arc::new(lease),
            registry,
            cache: Arc::new(cache),
            beats: None,
        })
    }

    /// Heartbeats every 3 s with the time `last_time_ms` gives, until [`finish`](Self::finish).
    pub fn start_heartbeats(&mut self, last_time_ms: impl Fn() -> u64 + Send + Sync + 'static) {
        let (stop, stopped) = oneshot::channel::<()>();
        let (lease, registry, cache) = (
            Arc::clone(&self.lease),
            Arc::clone(&self.registry),
            Arc::clone(&self.cache),
        );
        let task = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            run_heartbeats(
                &lease,
                registry.as_ref(),
                &cache,
                HEARTBEAT_INTERVAL,
                last_time_ms,
                shutdown,
            )
            .await;
        });
        self.beats = Some((stop, task));
    }

    /// Stops the heartbeats, records `last_time_ms` and ends this process's hold on the ID, so
    /// that a restart finds it free at once.
    ///
    /// # Errors
    /// The registry's words.
    pub async fn finish(self, last_time_ms: u64) -> Result<(), String> {
        self.try_finish(last_time_ms)
            .await
            .map_err(|e| e.to_string())
    }

    /// [`finish`](Self::finish), with the error's kind kept.
    ///
    /// # Errors
    /// The registry's or the cache's.
    pub async fn try_finish(mut self, last_time_ms: u64) -> Result<(), RegistryError> {
        if let Some((stop, task)) = self.beats.take() {
            let _ = stop.send(());
            let _ = task.await;
        }
        let WorkerLease {
            lease,
            registry,
            cache,
            ..
        } = self;
        let lease = Arc::try_unwrap(lease).map_err(|_| {
            RegistryError::new(ErrorKind::Corrupt, "internal: the lease is still shared")
        })?;
        lease.close(registry.as_ref(), &cache, last_time_ms).await
    }
}
