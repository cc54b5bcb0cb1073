//! # floe-registry
//!
//! A Snowflake generator is unique only if no two live generators share a worker ID, and no
//! generator reuses an ID's time after a restart or a clock step. This crate hands out worker
//! IDs (and sno partitions) and decides when it is safe to start:
//!
//! - [`Registry`]: one small trait, one module per backend. A registry gives an identity
//!   (service + host:port, as Leaf) a worker ID, the same one after a restart, and records the
//!   last time its holder was alive (told by a heartbeat). Backends here: [`file`] (the
//!   embedded default: the state directory and OS file locks) and [`static_id`] (an ID from
//!   configuration). ZooKeeper and etcd come next, behind the same trait and the same
//!   conformance suite.
//! - [`cache`]: every registration and heartbeat is also written to a local cache file,
//!   atomically; when the registry is unreachable at start-up floe starts from it.
//! - [`guard`]: at start-up, a clock behind the last recorded time refuses to start (or waits,
//!   within a small bound).
//! - [`horizon`]: the durable time bound of a generator slot in the state directory: IDs are
//!   never issued past a time that is not on disk, so a crash never hides the times it used.
//! - [`lease`]: the start-up decision put together: registry, then cache, then the explicit
//!   fallback, then the clock guard.
//!
//! ## Quick start
//!
//! ```
//! use floe_core::clock::SystemClock;
//! use floe_core::snowflake::{Layout, SnowflakeConfig};
//! use floe_registry::{cache::LocalCache, lease, IdSpace, Identity};
//!
//! # let dir = tempfile::tempdir().unwrap();
//! # let state = dir.path();
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
//! runtime.block_on(async {
//!     let registry = floe_registry::open(&format!("file://{}", state.display())).await.unwrap();
//!     let cache = LocalCache::new(state).unwrap();
//!     let config = lease::LeaseConfig::new(
//!         Identity::new("orders", "10.0.0.1", 8080),
//!         IdSpace::snowflake(&Layout::LEAF),
//!     );
//!     let lease = lease::acquire(registry.as_ref(), &cache, &config, &SystemClock).await.unwrap();
//!     let gen = SnowflakeConfig::new(Layout::LEAF)
//!         .worker(u64::from(lease.id))
//!         .not_before_ms(lease.not_before_ms)
//!         .build(SystemClock)
//!         .unwrap();
//!     assert_eq!(Layout::LEAF.decode(gen.next_id().unwrap()).worker, u64::from(lease.id));
//! });
//! ```
#![deny(missing_docs)]

pub mod cache;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod file;
pub mod guard;
pub mod horizon;
pub mod lease;
pub mod static_id;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

use std::fmt;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Who holds a worker ID: a service and the host and port it runs on (as Leaf's
/// `/leaf_snowflake/{service}/{host:port}`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Identity {
    /// The service name.
    pub service: String,
    /// The host name or address.
    pub host: String,
    /// The port.
    pub port: u16,
}

impl Identity {
    /// An identity.
    pub fn new(service: impl Into<String>, host: impl Into<String>, port: u16) -> Self {
        Identity {
            service: service.into(),
            host: host.into(),
            port,
        }
    }

    /// Checks the fields: a non-empty service of `[A-Za-z0-9._-]`, a non-empty host.
    ///
    /// # Errors
    /// [`RegistryError`] of kind [`ErrorKind::Config`] naming the field.
    pub fn validate(&self) -> Result<(), RegistryError> {
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if self.service.is_empty() || !self.service.chars().all(ok) {
            return Err(RegistryError::config(format!(
                "service: expected a non-empty name of letters, digits, '.', '_' or '-', found {:?}",
                self.service
            )));
        }
        if self.host.is_empty() || self.host.contains(['/', ' ']) {
            return Err(RegistryError::config(format!(
                "host: expected a non-empty host name or address, found {:?}",
                self.host
            )));
        }
        Ok(())
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}:{}", self.service, self.host, self.port)
    }
}

/// How many IDs there are to hand out: `2^node_bits` for a Snowflake layout (1024 for `leaf`,
/// 32 x 32 for `twitter`), 65536 for sno partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdSpace {
    /// IDs run from 0 to `size - 1`.
    pub size: u32,
}

impl IdSpace {
    /// The worker IDs of a Snowflake layout (datacenter and worker bits together).
    pub fn snowflake(layout: &floe_core::snowflake::Layout) -> Self {
        IdSpace {
            size: (layout.max_node() + 1).min(u64::from(u32::MAX)) as u32,
        }
    }

    /// sno partitions (16 bits).
    pub const SNO_PARTITIONS: IdSpace = IdSpace { size: 1 << 16 };
}

/// Checks a server registry's servers and root (as `connect` takes them), naming the field.
#[allow(dead_code)] // used by the server registries, each behind a feature
pub(crate) fn check_servers(kind: &str, servers: &str, root: &str) -> Result<(), RegistryError> {
    floe_core::endpoint::check_addresses(kind, servers)
        .and_then(|()| floe_core::endpoint::check_root(kind, root))
        .map_err(|e| RegistryError::config(format!("registry: {e}")))
}

/// The servers and root of a server registry URL (root `/floe` by default), naming the field.
#[allow(dead_code)] // used by the server registries, each behind a feature
fn servers_and_root<'a>(kind: &str, url: &'a str) -> Result<(&'a str, &'a str), RegistryError> {
    floe_core::endpoint::servers_and_root(kind, url, "/floe")
        .map_err(|e| RegistryError::config(format!("registry: {e}")))
}

/// What registering `identity` comes to, given the records of its service: its own ID again,
/// or one of the free IDs (lowest first; a registry takes the first it can claim atomically).
pub(crate) enum Plan {
    Own(WorkerRecord),
    Free(Vec<u32>),
}

/// Plans a registration. `store` names where the records live, for messages.
///
/// # Errors
/// [`ErrorKind::Config`] when the identity's own ID is outside `space` (a smaller layout than
/// it was registered with); [`ErrorKind::SpaceFull`] when no ID is free.
pub(crate) fn plan<'a>(
    records: impl IntoIterator<Item = &'a WorkerRecord>,
    identity: &Identity,
    space: IdSpace,
    store: &str,
) -> Result<Plan, RegistryError> {
    let mut used = std::collections::HashSet::new();
    for record in records {
        if &record.identity == identity {
            if record.id >= space.size {
                return Err(RegistryError::config(format!(
                    "{identity} holds worker ID {} in {store}, outside this layout's {} IDs: release it first",
                    record.id, space.size
                )));
            }
            return Ok(Plan::Own(record.clone()));
        }
        used.insert(record.id);
    }
    let free: Vec<u32> = (0..space.size).filter(|id| !used.contains(id)).collect();
    if free.is_empty() {
        return Err(space_full(identity, space, store));
    }
    Ok(Plan::Free(free))
}

/// The error for a space with no free ID.
pub(crate) fn space_full(identity: &Identity, space: IdSpace, store: &str) -> RegistryError {
    RegistryError::new(
        ErrorKind::SpaceFull,
        format!(
            "no free worker ID for {identity}: all {} IDs of service {:?} are allocated in {store} (see `floe worker list`)",
            space.size, identity.service
        ),
    )
}

/// The records `identity` may take over (see [`Registry::reclaim`]), longest idle first: in
/// the space, heartbeaten at least once, idle since `idle_before_ms`, and someone else's.
/// Whether each holder is still alive is the registry's own check. `record` finds the record in
/// an item (registries keep a version beside it).
pub(crate) fn idle_first<T>(
    items: impl IntoIterator<Item = T>,
    record: impl Fn(&T) -> &WorkerRecord,
    identity: &Identity,
    space: IdSpace,
    idle_before_ms: u64,
) -> Vec<T> {
    let mut idle: Vec<T> = items
        .into_iter()
        .filter(|item| {
            let r = record(item);
            r.id < space.size
                && r.last_time_ms > 0
                && r.last_time_ms <= idle_before_ms
                && &r.identity != identity
        })
        .collect();
    idle.sort_by_key(|item| record(item).last_time_ms);
    idle
}

/// One allocated ID, as a registry records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRecord {
    /// The ID.
    pub id: u32,
    /// Who holds it.
    pub identity: Identity,
    /// The last time (Unix ms) its holder was known alive; 0 if never.
    pub last_time_ms: u64,
}

/// What [`Registry::register`] returns.
#[derive(Debug)]
pub struct Registration {
    /// The record: the ID and the last time recorded *before* this registration (the
    /// previous run's, or the previous holder's when the ID was taken over).
    pub record: WorkerRecord,
    /// Whether the ID was already this identity's (a restart) rather than newly allocated.
    pub existing: bool,
    /// Raised by the registry when it learns in the background that the ID is no longer
    /// provably this identity's (etcd: the lease was lost); lowered when it holds it again.
    pub fence: std::sync::Arc<floe_core::fence::Fence>,
    /// Held for as long as the registration lives: for the file registry, the OS lock that
    /// keeps another process on this host off the ID; for ZooKeeper, the session that owns
    /// the ephemeral holder node.
    pub(crate) _hold: Option<Hold>,
}

impl Registration {
    /// A registration with a fence of its own (never raised unless the registry raises it).
    pub(crate) fn new(record: WorkerRecord, existing: bool, hold: Option<Hold>) -> Self {
        Registration {
            record,
            existing,
            fence: Default::default(),
            _hold: hold,
        }
    }
}

impl WorkerRecord {
    /// This record taken over by `identity`: the same ID and last time, a new holder.
    pub(crate) fn taken_over_by(self, identity: &Identity) -> WorkerRecord {
        WorkerRecord {
            identity: identity.clone(),
            ..self
        }
    }
}

/// Whatever keeps a registration's claim alive; dropped with the registration.
pub(crate) struct Hold(#[allow(dead_code)] Box<dyn std::any::Any + Send + Sync>);

impl Hold {
    pub(crate) fn new(inner: impl std::any::Any + Send + Sync) -> Self {
        Hold(Box::new(inner))
    }
}

impl fmt::Debug for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hold")
    }
}

/// The kind of a registry error, and so what to do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The registry cannot be reached or did not answer: temporary.
    Unavailable,
    /// Every ID of the space is allocated.
    SpaceFull,
    /// The ID is held by another live process or identity.
    Conflict,
    /// Invalid configuration (unknown registry, bad address, ID out of range).
    Config,
    /// The clock is behind the last recorded time.
    ClockBehind,
    /// Neither the registry nor the cache could give an ID.
    NoWorkerId,
    /// Stored data could not be read.
    Corrupt,
}

/// An error from a registry, the cache or a guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// What happened, naming the field, file or server.
    pub message: String,
}

impl RegistryError {
    /// An error of a kind.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        RegistryError {
            kind,
            message: message.into(),
        }
    }
    /// A configuration error.
    pub fn config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Config, message)
    }
    /// Whether the same call may succeed later.
    pub fn is_temporary(&self) -> bool {
        matches!(self.kind, ErrorKind::Unavailable | ErrorKind::Conflict)
    }
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RegistryError {}

/// A registry of worker IDs. One small primitive per operation; the cache, the clock guards
/// and heartbeat scheduling are written once, above every backend ([`lease`]).
#[async_trait]
pub trait Registry: Send + Sync + fmt::Debug {
    /// The registry's name in logs and URLs (`file`, `static`, `zookeeper`, `etcd`).
    fn name(&self) -> &'static str;

    /// Which registry this is, as a URL without options (`zk://host:port/root`,
    /// `file:///var/lib/floe`, `static:7`): the local cache keeps an ID under the registry
    /// that granted it, and never offers it to another.
    fn location(&self) -> String;

    /// Gives `identity` an ID in `space`: its own ID again if it has one, else a free one.
    /// The registration's record carries the last time recorded before this call.
    ///
    /// # Errors
    /// [`ErrorKind::SpaceFull`] when every ID is allocated, [`ErrorKind::Conflict`] when the
    /// identity's ID is held by another live process, [`ErrorKind::Unavailable`] when the
    /// registry cannot be reached.
    async fn register(
        &self,
        identity: &Identity,
        space: IdSpace,
    ) -> Result<Registration, RegistryError>;

    /// Records that the holder of `id` was alive at `last_time_ms` (never moving it back).
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`], or [`ErrorKind::Conflict`] if the ID is no longer this
    /// identity's.
    async fn heartbeat(
        &self,
        identity: &Identity,
        id: u32,
        last_time_ms: u64,
    ) -> Result<(), RegistryError>;

    /// Gives up `identity`'s ID. Its last time is forgotten with it, so only release an ID
    /// whose holder is gone for good.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`].
    async fn release(&self, identity: &Identity) -> Result<bool, RegistryError>;

    /// Every allocated ID of `service`, in ID order.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`].
    async fn list(&self, service: &str) -> Result<Vec<WorkerRecord>, RegistryError>;

    /// Ends this process's hold on `identity`'s ID at a clean shutdown, so that a restart
    /// need not wait for it to lapse. The ID stays allocated to the identity, with its last
    /// time. (The file registry's hold is an OS lock that ends with the registration.)
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`].
    async fn close(&self, identity: &Identity) -> Result<(), RegistryError> {
        let _ = identity;
        Ok(())
    }

    /// Takes over, for `identity`, the ID of another identity of the same service whose holder
    /// was last alive at or before `idle_before_ms` and is not alive now (no live process
    /// holds it). The ID longest idle goes first. The registration's record keeps the
    /// previous holder's last time, so the new holder starts after it. Records never
    /// heartbeaten (last time 0) are not taken. `None`: nothing to take.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`]; [`ErrorKind::Conflict`] if `identity` is held elsewhere.
    async fn reclaim(
        &self,
        identity: &Identity,
        space: IdSpace,
        idle_before_ms: u64,
    ) -> Result<Option<Registration>, RegistryError> {
        let _ = (identity, space, idle_before_ms);
        Ok(None)
    }
}

/// Opens a registry from its URL: `file:///state/dir` (or `file:relative/dir`), `static:ID`,
/// or `zk://host:port[,host:port...][/root]` (root `/floe` by default).
///
/// # Errors
/// [`ErrorKind::Config`] naming the field `registry`: an unknown scheme, a bad path or ID;
/// [`ErrorKind::Unavailable`] when a server registry cannot be reached.
pub async fn open(url: &str) -> Result<Box<dyn Registry>, RegistryError> {
    let (scheme, rest) = url.split_once(':').ok_or_else(|| {
        RegistryError::config(format!(
            "registry: expected a URL such as file:///var/lib/floe or static:7, found {url:?}"
        ))
    })?;
    match scheme {
        "file" => {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(RegistryError::config(format!(
                    "registry: {url:?} has no directory"
                )));
            }
            Ok(Box::new(file::FileRegistry::new(path)?))
        }
        "static" => {
            let id = rest.trim_start_matches('/').parse::<u32>().map_err(|_| {
                RegistryError::config(format!(
                    "registry: expected static:ID with a number, found {url:?}"
                ))
            })?;
            Ok(Box::new(static_id::StaticRegistry::new(id)))
        }
        #[cfg(feature = "zookeeper")]
        "zk" | "zookeeper" => {
            let (cluster, root) = servers_and_root("ZooKeeper", url)?;
            Ok(Box::new(
                zookeeper::ZkRegistry::connect(cluster, root).await?,
            ))
        }
        #[cfg(feature = "etcd")]
        "etcd" => {
            let (base, options) = floe_core::endpoint::take_options(url, &["ttl"]);
            let ttl = match options.last() {
                Some((_, t)) => t.parse::<i64>().map_err(|_| {
                    RegistryError::config(format!("registry: ttl must be whole seconds, found {t:?}"))
                })?,
                None => 10,
            };
            let (endpoints, root) = servers_and_root("etcd", &base)?;
            Ok(Box::new(etcd::EtcdRegistry::connect(endpoints, root, ttl).await?))
        }
        #[cfg(not(feature = "etcd"))]
        "etcd" => Err(RegistryError::config(
            "registry: etcd is not in this build: build floe with --features etcd (it needs protoc)",
        )),
        other => Err(RegistryError::config(format!(
            "registry: unknown scheme {other:?} in {url:?}: expected file:, static:, zk: or etcd:"
        ))),
    }
}

/// A registry that could not be reached when it was opened: every call answers with that
/// error (kind [`ErrorKind::Unavailable`]), so [`lease::acquire`] falls back to the cache.
#[derive(Debug)]
pub struct Unreachable {
    name: &'static str,
    location: String,
    error: RegistryError,
}

#[async_trait]
impl Registry for Unreachable {
    fn name(&self) -> &'static str {
        self.name
    }
    fn location(&self) -> String {
        self.location.clone()
    }
    async fn register(&self, _: &Identity, _: IdSpace) -> Result<Registration, RegistryError> {
        Err(self.error.clone())
    }
    async fn heartbeat(&self, _: &Identity, _: u32, _: u64) -> Result<(), RegistryError> {
        Err(self.error.clone())
    }
    async fn release(&self, _: &Identity) -> Result<bool, RegistryError> {
        Err(self.error.clone())
    }
    async fn list(&self, _: &str) -> Result<Vec<WorkerRecord>, RegistryError> {
        Err(self.error.clone())
    }
}

/// As [`open`], but a registry that cannot be reached opens as [`Unreachable`] instead of
/// failing, for start-ups that may use the local cache.
///
/// # Errors
/// Configuration errors, as [`open`].
pub async fn open_or_unreachable(url: &str) -> Result<Box<dyn Registry>, RegistryError> {
    match open(url).await {
        Err(error) if error.kind == ErrorKind::Unavailable => {
            let name = match url.split(':').next() {
                Some("zk" | "zookeeper") => "zookeeper",
                Some("etcd") => "etcd",
                Some("file") => "file",
                _ => "registry",
            };
            let location = location_of(url);
            Ok(Box::new(Unreachable {
                name,
                location,
                error,
            }))
        }
        other => other,
    }
}

/// A registry URL as [`Registry::location`] gives it: without floe's options (`?ttl=`), and
/// with the server registries' default root `/floe` when none is given.
pub fn location_of(url: &str) -> String {
    let (base, _) = floe_core::endpoint::take_options(url, &["ttl"]);
    match base.split_once("://") {
        Some((scheme @ ("zk" | "zookeeper" | "etcd"), rest)) => {
            let scheme = if scheme == "zookeeper" { "zk" } else { scheme };
            if rest.contains('/') {
                format!("{scheme}://{rest}")
            } else {
                format!("{scheme}://{rest}/floe")
            }
        }
        _ => match base.strip_prefix("file:") {
            Some(path) => format!("file://{}", path.strip_prefix("//").unwrap_or(path)),
            None => base.to_string(),
        },
    }
}
