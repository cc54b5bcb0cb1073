//! The start-up decision and the heartbeat, written once above every registry.
//!
//! [`acquire`]: continue the lease of this identity's previous process on the same state
//! directory, boot and machine if its window is still open ([`crate::continuation`]: no
//! registry needed, no takeover wait); else ask the registry; if it is unreachable, start
//! from the local cache (and say so) where that is safe; with neither, refuse, unless the
//! operator chose Leaf's fallback (`port % space`) explicitly.
//!
//! **A start from the cache has no lease.** A registry that leases (ZooKeeper, etcd) may give
//! the cached ID to another node while this one cannot reach it (a replacement with the same
//! identity, or `reclaim_after`), and a node started from its cache never hears of it: both
//! would issue with one ID. So with such a registry a start from the cache is refused unless
//! the operator accepts that risk ([`LeaseConfig::start_from_cache`], Leaf's behaviour). The
//! file registry, which is on the same host, keeps the plain cache start.
//!
//! Then the clock guard: a clock behind the last recorded time (registry, cache or the
//! durable time bound, the latest) refuses to start, or waits when it is behind by at most
//! the allowed wait. The lease's [`not_before_ms`](Lease::not_before_ms) keeps the
//! generator out of every time unit the previous run used.
//!
//! With [`LeaseConfig::horizon_kind`] set (floe's CLI and server always set it), the lease
//! also keeps the ID's durable time bound ([`crate::horizon`]) in the cache's directory:
//! give [`Lease::horizon`] to the generator, and the previous run's time is known exactly
//! even after `kill -9`, whatever the registry.
//!
//! **The fallback's risk:** `port % space` is the same ID for two services on the same port
//! on different hosts, and for ports that differ by a multiple of the space; two live
//! generators with one ID issue duplicates. Use it only where one instance per port and
//! space is guaranteed by other means.
//! With a registry that leases, it is also an ID with no lease (as a start from the cache).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floe_core::clock::{Clock, NANOS_PER_MILLI};
use floe_core::fence::Fence;

use crate::blocking::off_executor;
use crate::cache::{CacheEntry, LocalCache};
use crate::guard::{check_start, StartCheck};
use crate::horizon::{DurableHorizon, HorizonConfig, HorizonFile};
use crate::{ErrorKind, IdSpace, Identity, Registration, Registry, RegistryError};

/// How often a running generator's holder heartbeats by default (Leaf: every 3 s). Pass
/// it to [`run_heartbeats`].
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(3);

/// The longest a heartbeat waits for the registry.
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(2);

/// How to acquire a worker ID.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Who is asking.
    pub identity: Identity,
    /// The IDs there are.
    pub space: IdSpace,
    /// The largest clock lag waited out at start-up without a time bound (default 5 ms); a
    /// larger one refuses. With a time bound, `horizon.max_start_wait` applies instead.
    pub max_clock_wait: Duration,
    /// Keep a durable time bound for the ID, in the slot `{horizon_kind}-{id}` of the cache's
    /// directory (`snowflake`, `sno`). `None`: no bound (the start-up guard then knows only
    /// the registry's and the cache's last times, which lag by up to a heartbeat).
    pub horizon_kind: Option<String>,
    /// How the time bound is kept.
    pub horizon: HorizonConfig,
    /// Seed 000's last resort when neither registry nor cache answers: `port % space`. Off by
    /// default; see the module docs for its risk.
    pub port_fallback: bool,
    /// Start from the local cache when a registry that leases (ZooKeeper, etcd) is
    /// unreachable, as Leaf does (off by default): the ID is then issued with no lease, and a
    /// replacement started during the same partition may hold it too. See the module docs.
    pub start_from_cache: bool,
    /// Take over the ID of another identity whose holder was last alive longer ago than this,
    /// when the space is full (off by default). The new holder starts after the previous
    /// holder's last time, so a host whose clock is behind cannot repeat its IDs.
    pub reclaim_after: Option<Duration>,
    /// How long to keep retrying while the identity is held by another session (10 s by
    /// default, and at least the registry's [`holder_linger`](Registry::holder_linger) + 2 s):
    /// after a crash, the previous holder's ZooKeeper session lingers until its timeout (6 s),
    /// an etcd lease until its TTL, and a restart should wait it out rather than fail.
    pub conflict_wait: Duration,
}

impl LeaseConfig {
    /// The defaults for an identity and space.
    pub fn new(identity: Identity, space: IdSpace) -> Self {
        LeaseConfig {
            identity,
            space,
            max_clock_wait: Duration::from_millis(5),
            horizon_kind: None,
            horizon: HorizonConfig::default(),
            port_fallback: false,
            start_from_cache: false,
            reclaim_after: None,
            conflict_wait: Duration::from_secs(10),
        }
    }
}

/// Where the ID came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The registry answered.
    Registry,
    /// The registry was unreachable; the local cache had the ID.
    Cache,
    /// Neither answered; the operator's fallback `port % space`.
    PortFallback,
    /// The lease of this identity's previous process on this state directory, boot and
    /// machine, continued without a takeover wait ([`crate::continuation`]); the registry
    /// holds it again in the background.
    Continued,
}

/// Counters for the server's metrics.
#[derive(Debug, Default)]
pub struct LeaseStats {
    /// Heartbeats the registry did not take.
    pub heartbeat_failures: AtomicU64,
    /// Heartbeats the local cache did not take.
    pub cache_failures: AtomicU64,
    /// Set once the registry said the ID is someone else's (released, or taken over): fenced
    /// for good, as `/healthz` says.
    pub lost: std::sync::atomic::AtomicBool,
    /// The service's worker IDs as last surveyed ([`run_heartbeats`], every
    /// [`SURVEY_EVERY`]): how many the space has, how many no record holds, and how many are
    /// parked ([`crate::RecordState::Parked`]). `ids_total` 0: not surveyed yet.
    pub ids_total: AtomicU64,
    /// See [`ids_total`](Self::ids_total).
    pub ids_free: AtomicU64,
    /// See [`ids_total`](Self::ids_total).
    pub ids_parked: AtomicU64,
}

/// How often a node counts its service's free and parked worker IDs (one list of the records).
pub const SURVEY_EVERY: Duration = Duration::from_secs(60);

static CLOCK_REFUSALS: AtomicU64 = AtomicU64::new(0);

/// Start-ups refused in this process because the clock was behind the last recorded time
/// (process-wide: a refused start-up has no lease to count it on).
pub fn clock_refusals() -> u64 {
    CLOCK_REFUSALS.load(Ordering::Relaxed)
}

/// A worker ID this process may use.
#[derive(Debug)]
pub struct Lease {
    /// The ID.
    pub id: u32,
    /// Issue no ID at or before this Unix ms (the last recorded time, 0 if none).
    pub not_before_ms: u64,
    /// Where the ID came from.
    pub source: Source,
    /// What happened on the way, for the log (e.g. "registry unreachable, started from cache").
    pub notes: Vec<String>,
    /// The identity the ID belongs to.
    pub identity: Identity,
    /// How many worker IDs the space has.
    pub space_size: u32,
    /// Counters (shared: a server's metrics read them without holding the lease).
    pub stats: Arc<LeaseStats>,
    /// Raised when a heartbeat learns that the ID is no longer this identity's (released, or
    /// taken over), and, for registries that can give the ID away, closed by itself when the
    /// registry has not confirmed the claim within its window ([`crate::terms`]): give it to
    /// the generators (`SnowflakeConfig::fence`, `SnoGenerator::with_fence`,
    /// `LexicalGenerator::fence`) so that they stop at once. `fence.periods()` counts the
    /// fenced periods.
    pub fence: Arc<Fence>,
    /// The registry's lease terms, when the ID came from a registry that has them (ZooKeeper,
    /// etcd): the window the fence's deadline runs on.
    pub terms: Option<crate::terms::LeaseTerms>,
    horizon: Option<DurableHorizon>,
    registry: String,
    /// The lock of the identity's entry in the state directory, held for the lease's life.
    _lock: Option<std::fs::File>,
    /// The mark last written to the cache ([`crate::continuation`]).
    mark: std::sync::Mutex<Option<crate::continuation::LeaseMark>>,
    /// Set by [`close`](Lease::close), once the generators stopped for good.
    closing: std::sync::atomic::AtomicBool,
    registration: Option<Registration>,
}

/// How long a registration waits before its first ID when the registry forgot the identity
/// (`cached` says it held an ID under this very registry, and `reg` is a new allocation, not
/// a restart nor a takeover): long enough for every node whose record was lost with it to
/// find so at a heartbeat (interval and timeout), or to reach the end of its window if the
/// registry stopped confirming it; plus the takeover margin. `None` where the registry does
/// not lease (a file registry's hold is an OS lock) or nothing was forgotten.
///
/// Limits (docs/reliability.md): on etcd a wipe leaves the leases, so a forgotten holder's
/// keep-alives go on and only a heartbeat that reaches the registry stops it (one that times
/// out is tried again 3 s later); and the previous holder's reach, which its record said, is
/// gone with it.
fn forgotten_wait(
    registry: &dyn Registry,
    reg: &Registration,
    cached: Option<&CacheEntry>,
) -> Option<Duration> {
    let terms = registry.lease_terms()?;
    cached?;
    if reg.existing || reg.previous_holder.is_some() {
        return None;
    }
    Some(crate::terms::LeaseTerms::takeover_wait(
        terms.reach_ms(),
        HEARTBEAT_INTERVAL + HEARTBEAT_TIMEOUT,
    ))
}

/// How long a start keeps asking a registry that is unreachable before it falls back on the
/// local cache or refuses: a connection lost for a moment (a leader elected, a server
/// restarted) does not stop a start.
pub const REGISTER_RETRY: Duration = Duration::from_secs(3);

/// How long to sleep between two tries of the registry at start.
const RETRY_PAUSE: Duration = Duration::from_millis(250);

/// Acquires a worker ID in five steps, each a function of its own: what the local cache
/// remembers (`remembered`); a claim in the registry (`claim`), else the cache or the
/// explicit fallback (`without_registry`); a takeover's wait and floor (`wait_out`); the
/// clock guard and the durable time bound (`floor_and_bound`); then the cache is written.
///
/// # Errors
/// The registry's own error when it answered with one (space full, conflict, bad config);
/// [`ErrorKind::NoWorkerId`] when neither registry nor cache could give an ID;
/// [`ErrorKind::ClockBehind`] when the clock is too far behind the last recorded time.
pub async fn acquire<C: Clock + Clone + 'static>(
    registry: &dyn Registry,
    cache: &LocalCache,
    config: &LeaseConfig,
    clock: &C,
) -> Result<Lease, RegistryError> {
    let identity = &config.identity;
    identity.validate()?;
    let location = registry.location();
    let mut notes = Vec::new();
    let lock = lock_identity(registry, cache, identity, &location).await?;
    let cached = remembered(cache, identity, &location, &mut notes).await;
    let continued = match &lock {
        Some(_) => continue_lease(registry, cache, config, cached.as_ref(), &mut notes),
        None => None,
    };
    let (id, registry_last, source, registration, floors) = match continued {
        Some(reg) => (
            reg.record.id,
            None,
            Source::Continued,
            Some(reg),
            Floors::default(),
        ),
        None => match claim(registry, config, clock, &mut notes).await {
            Ok(reg) => {
                let floors = if lock.is_some()
                    && token_confirmed(&reg, cached.as_ref(), cache, identity, &mut notes)
                {
                    Floors::default()
                } else {
                    wait_out(registry, &reg, cached.as_ref(), config, clock, &mut notes).await
                };
                let last = Some(reg.record.last_time_ms).filter(|&t| t > 0);
                (reg.record.id, last, Source::Registry, Some(reg), floors)
            }
            Err(e) if e.kind == ErrorKind::Unavailable => {
                let (id, source) =
                    without_registry(registry, cache, config, cached.as_ref(), e, &mut notes)?;
                (id, None, source, None, Floors::default())
            }
            Err(e) => return Err(e),
        },
    };
    let cache_last = cached.filter(|c| c.id == id).map(|c| c.last_time_ms);
    let recorded = [
        ("the registry", registry_last),
        ("the local cache", cache_last),
        ("the moment it was taken over", floors.taken_over_at),
        (
            "its previous holder's reach (its last recorded time + a heartbeat + its window)",
            floors.previous_reach,
        ),
    ];
    let fence = registration.as_ref().map(|r| r.fence.clone());
    let (not_before_ms, horizon) =
        floor_and_bound(cache, config, clock, id, &recorded, fence, &mut notes).await?;
    let lease = Lease {
        id,
        not_before_ms,
        source,
        notes,
        identity: identity.clone(),
        space_size: config.space.size,
        stats: Arc::new(LeaseStats::default()),
        fence: registration
            .as_ref()
            .map_or_else(|| Arc::new(Fence::new()), |r| r.fence.clone()),
        terms: registration.as_ref().and_then(|_| registry.lease_terms()),
        horizon,
        registry: location,
        _lock: lock,
        mark: std::sync::Mutex::new(None),
        closing: std::sync::atomic::AtomicBool::new(false),
        registration,
    };
    let now_ms = clock.now_nanos() / NANOS_PER_MILLI;
    lease.record_cache(cache, not_before_ms.max(now_ms)).await?;
    Ok(lease)
}

/// Whether registration `reg` took back the identity's own ID from this very state
/// directory's previous process: the record carried, until now, the registration number the
/// directory's mark names, and the mark was written in this directory (not a copy). That
/// process is gone (this one holds the directory's lock; on another boot, the machine
/// rebooted), and nobody registered the ID since, so there is no one to wait out; its last IDs
/// are behind the local cache's time and the durable time bound, as after any restart.
/// A note says so when it did.
fn token_confirmed(
    reg: &Registration,
    cached: Option<&CacheEntry>,
    cache: &LocalCache,
    identity: &Identity,
    notes: &mut Vec<String>,
) -> bool {
    let Some(entry) = cached else {
        return false;
    };
    let Some(mark) = entry.lease.as_ref() else {
        return false;
    };
    let confirmed = reg.existing
        && reg.previous_token != 0
        && entry.id == reg.record.id
        && mark.holder == reg.previous_token
        && mark.written_in(cache.dir());
    if confirmed {
        let note = format!(
            "the registry confirmed this state directory's lease token for worker ID {} (its last holder was this directory's previous process, and nobody registered it since): no takeover wait",
            reg.record.id
        );
        tracing::info!(identity = %identity, "{note}");
        notes.push(note);
    }
    confirmed
}

/// The lock of `identity`'s entry in the state directory, for a registry that leases (the
/// file registry's claim is an OS lock already): a lease is continued only by the process
/// that holds it ([`crate::continuation`]).
///
/// # Errors
/// [`ErrorKind::Conflict`] when another process holds it; the cache's error.
async fn lock_identity(
    registry: &dyn Registry,
    cache: &LocalCache,
    identity: &Identity,
    location: &str,
) -> Result<Option<std::fs::File>, RegistryError> {
    if registry.lease_terms().is_none() {
        return Ok(None);
    }
    let (c, who, at) = (cache.clone(), identity.clone(), location.to_string());
    match off_executor("local cache: lock", move || c.lock(&who, &at)).await? {
        Some(file) => Ok(Some(file)),
        None => Err(RegistryError::new(
            ErrorKind::Conflict,
            format!(
                "{identity} is in use by another floe process on the state directory {} (its lock {}.lock is held): one process per identity and directory",
                cache.dir().display(),
                cache.path(identity, location).display()
            ),
        )),
    }
}

/// Continues the lease the local cache's mark describes ([`crate::continuation`]), if it
/// may be: the registry adopts the claim and holds it again in the background. `None` (and a
/// note saying why, when there was a mark): ask the registry.
fn continue_lease(
    registry: &dyn Registry,
    cache: &LocalCache,
    config: &LeaseConfig,
    cached: Option<&CacheEntry>,
    notes: &mut Vec<String>,
) -> Option<Registration> {
    let entry = cached?;
    let mark = entry.lease.as_ref()?;
    if entry.id >= config.space.size || mark.holder == 0 {
        return None;
    }
    let remaining = match mark.remaining(cache.dir()) {
        Ok(left) => left,
        Err(why) => {
            notes.push(format!(
                "the lease of worker ID {} in the state directory was not continued: {why}",
                entry.id
            ));
            return None;
        }
    };
    let fence = Arc::new(Fence::new());
    fence.confirm(
        floe_core::fence::Sent::now(&floe_core::clock::SystemClock),
        remaining,
    );
    let continued = crate::Continued {
        identity: config.identity.clone(),
        id: entry.id,
        holder: mark.holder,
        recorded_ms: entry.last_time_ms,
    };
    let reg = registry.adopt(&continued, fence)?;
    let note = format!(
        "continued the lease of worker ID {} from the state directory (this boot, this directory; {:.1} s of its window left): no takeover wait; the registry holds it again in the background",
        entry.id,
        remaining.as_secs_f64()
    );
    tracing::info!(identity = %config.identity, "{note}");
    notes.push(note);
    Some(reg)
}

/// What the local cache remembers of `identity` under the registry at `location` (a cache
/// that cannot be read is ignored, and a note says why).
async fn remembered(
    cache: &LocalCache,
    identity: &Identity,
    location: &str,
    notes: &mut Vec<String>,
) -> Option<CacheEntry> {
    let identity_name = identity.to_string();
    let (cache, identity, location) = (cache.clone(), identity.clone(), location.to_string());
    let loaded = off_executor("local cache: load", move || {
        cache.load(&identity, &location)
    })
    .await;
    loaded.unwrap_or_else(|e| {
        // Said at once: without the entry a restart may wait out its own reach, and the
        // notes are logged only once the start is over.
        let note = format!("local cache ignored: {e}");
        tracing::warn!(identity = %identity_name, "{note}: this start cannot continue the lease it held (if any), and waits as a replacement would");
        notes.push(note);
        None
    })
}

/// Claims a worker ID in the registry: retries while the identity's previous holder's claim
/// lingers (a crashed process's session or lease, until it ends), while the registry is
/// unreachable for up to [`REGISTER_RETRY`], and takes over an idle ID when the space is full
/// and [`LeaseConfig::reclaim_after`] allows it.
async fn claim<C: Clock>(
    registry: &dyn Registry,
    config: &LeaseConfig,
    clock: &C,
    notes: &mut Vec<String>,
) -> Result<Registration, RegistryError> {
    let identity = &config.identity;
    // A holder killed just after renewing its hold keeps it for the registry's whole linger.
    let conflict_wait = config
        .conflict_wait
        .max(registry.holder_linger() + Duration::from_secs(2));
    // Each wait on its own clock, from the first answer that asks for it: time spent on one
    // (the registry unreachable for a moment) is not taken from the other.
    let mut waiting_since: Option<tokio::time::Instant> = None;
    let mut unreachable_since: Option<tokio::time::Instant> = None;
    let since = |at: &mut Option<tokio::time::Instant>| {
        at.get_or_insert_with(tokio::time::Instant::now).elapsed()
    };
    let mut said = false;
    loop {
        let e = match registry.register(identity, config.space).await {
            Ok(reg) => return Ok(reg),
            Err(e) => e,
        };
        let retry = match e.kind {
            ErrorKind::Conflict if since(&mut waiting_since) < conflict_wait => {
                if !std::mem::replace(&mut said, true) {
                    tracing::info!(identity = %identity, "waiting up to {conflict_wait:?} for the identity's previous holder (a crashed or cut-off process's claim lasts until its session or lease ends): {e}");
                }
                true
            }
            ErrorKind::Conflict => {
                notes.push(format!(
                    "gave up after waiting {conflict_wait:?} for the identity's previous holder"
                ));
                false
            }
            ErrorKind::Unavailable
                if registry.may_answer_later()
                    && since(&mut unreachable_since) < REGISTER_RETRY =>
            {
                if unreachable_since.is_some_and(|t| t.elapsed() < RETRY_PAUSE) {
                    tracing::info!(identity = %identity, "registry {} unreachable, trying again for up to {REGISTER_RETRY:?}: {e}", registry.name());
                }
                true
            }
            ErrorKind::SpaceFull if config.reclaim_after.is_some() => {
                let started = *waiting_since.get_or_insert_with(tokio::time::Instant::now);
                match reclaim(registry, config, clock, started, conflict_wait, notes).await {
                    Ok(Some(reg)) => return Ok(reg),
                    Ok(None) => true,
                    Err(None) => false,
                    Err(Some(other)) => return Err(other),
                }
            }
            _ => false,
        };
        if !retry {
            return Err(e);
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// One try at taking over an idle ID of another identity, the space being full: `Ok(Some)`
/// took one; `Ok(None)` found none yet but may look again (an idle ID whose holder's claim
/// still lingers: a paused or cut-off holder's session or lease lasts until it expires);
/// `Err(None)` gives up with the space full; `Err(Some)` with the registry's error.
async fn reclaim<C: Clock>(
    registry: &dyn Registry,
    config: &LeaseConfig,
    clock: &C,
    started: tokio::time::Instant,
    conflict_wait: Duration,
    notes: &mut Vec<String>,
) -> Result<Option<Registration>, Option<RegistryError>> {
    // A registry whose claims end with their process (file) has none to wait for.
    let reclaim_wait = if registry.holder_linger().is_zero() {
        Duration::ZERO
    } else {
        conflict_wait
    };
    let idle = config.reclaim_after.unwrap_or_default().as_millis() as u64;
    let now_ms = clock.now_nanos() / NANOS_PER_MILLI;
    let answer = registry
        .reclaim(&config.identity, config.space, now_ms.saturating_sub(idle))
        .await;
    let looking = started.elapsed() < reclaim_wait;
    match answer {
        Ok(Some(reg)) => {
            notes.push(format!(
                "space full: took over worker ID {} (its previous holder was last alive at {} ms)",
                reg.record.id, reg.record.last_time_ms
            ));
            Ok(Some(reg))
        }
        Ok(None) if looking => Ok(None),
        Ok(None) => Err(None),
        Err(other) if other.kind == ErrorKind::Conflict && looking => Ok(None),
        Err(other) => Err(Some(other)),
    }
}

/// The floors a takeover sets (Unix ms): none at or before the moment the ID was taken over,
/// after any wait; nor before the previous holder's reach by its own clock.
#[derive(Debug, Default)]
struct Floors {
    taken_over_at: Option<u64>,
    previous_reach: Option<u64>,
}

/// Waits out whoever may still issue with the ID just claimed, and says which floors that
/// sets: a previous holder that did not close it cleanly (its reach and margin), and nodes
/// a registry that forgot this identity may still have issuing with it ([`forgotten_wait`]).
async fn wait_out<C: Clock>(
    registry: &dyn Registry,
    reg: &Registration,
    cached: Option<&CacheEntry>,
    config: &LeaseConfig,
    clock: &C,
    notes: &mut Vec<String>,
) -> Floors {
    let identity = &config.identity;
    let mut floors = Floors::default();
    if !reg.takeover_wait.is_zero() {
        // The previous holder may be paused or cut off and still inside its window: wait on
        // the monotonic clock, from the moment the ID was found free.
        let note = format!(
            "the previous holder of worker ID {} ({}) did not close it cleanly: waited {} ms (its reach and margin) before the first ID",
            reg.record.id,
            reg.previous_holder.as_ref().map_or_else(|| identity.to_string(), ToString::to_string),
            reg.takeover_wait.as_millis()
        );
        tracing::info!(identity = %identity, "{}", note.replacen("waited", "waiting", 1));
        notes.push(note);
        tokio::time::sleep(reg.takeover_wait).await;
    }
    if let Some(wait) = forgotten_wait(registry, reg, cached) {
        // This node held an ID under this registry (its cache says so) and the registry no
        // longer knows it: wiped, restored from an older backup, or released by hand. Other
        // nodes it forgot may still issue with the ID just given: each stops at its next
        // heartbeat, which finds its record gone.
        let note = format!(
            "the registry had no record of {identity}, which held worker ID {} under it (the local cache says so): wiped, restored from an older backup, or released by hand? Waited {} ms before the first ID, so that any node it forgot stops first (its next heartbeat finds its record gone)",
            cached.map_or(0, |c| c.id),
            wait.as_millis()
        );
        tracing::warn!(identity = %identity, "{}", note.replacen("Waited", "Waiting", 1));
        notes.push(note);
        tokio::time::sleep(wait).await;
        // A forgotten holder's last IDs may carry times up to about now.
        floors.taken_over_at = Some(clock.now_nanos() / NANOS_PER_MILLI);
    }
    if reg.previous_open {
        // The previous holder's last IDs may carry times up to about now (in a coarse time
        // unit, this very one): issue none at or before it.
        floors.taken_over_at = Some(clock.now_nanos() / NANOS_PER_MILLI);
        // Nor before its reach by its own clock: its last recorded time, a heartbeat and its
        // reach later. Past by now where the clocks agree (the takeover waited that long); a
        // clock behind the previous holder's by more waits or refuses, naming the times,
        // instead of repeating its IDs.
        // The record's reach (not this node's own: a Leaf server's record has none, and floe
        // watched its node instead of waiting).
        let window = Duration::from_millis(reg.previous_reach_ms).min(crate::terms::MAX_REACH);
        let reach = u64::try_from((HEARTBEAT_INTERVAL + window).as_millis()).unwrap_or(u64::MAX);
        floors.previous_reach = Some(reg.record.last_time_ms)
            .filter(|&t| t > 0)
            .map(|t| t.saturating_add(reach));
    }
    floors
}

/// The worker ID when the registry is unreachable (`e`): the local cache's, where that is
/// safe or the operator accepted the risk ([`LeaseConfig::start_from_cache`]; module docs),
/// else the explicit port fallback, else a refusal.
fn without_registry(
    registry: &dyn Registry,
    cache: &LocalCache,
    config: &LeaseConfig,
    cached: Option<&CacheEntry>,
    e: RegistryError,
    notes: &mut Vec<String>,
) -> Result<(u32, Source), RegistryError> {
    let identity = &config.identity;
    let path = cache.path(identity, &registry.location());
    match cached {
        Some(entry) if entry.id < config.space.size => {
            if registry.lease_terms().is_some() && !config.start_from_cache {
                return Err(RegistryError::new(
                    ErrorKind::NoWorkerId,
                    format!(
                        "no lease for {identity}: registry {} unreachable ({e}); refusing to start from the local cache {} (worker ID {}): without a lease, another node may be given that ID meanwhile. Start again when the registry answers, or accept the risk with --start-from-cache (registry.start_from_cache)",
                        registry.name(),
                        path.display(),
                        entry.id
                    ),
                ));
            }
            notes.push(format!(
                "registry {} unreachable ({e}); started from the local cache {} with worker ID {}",
                registry.name(),
                path.display(),
                entry.id
            ));
            Ok((entry.id, Source::Cache))
        }
        _ if config.port_fallback => {
            let id = u32::from(identity.port) % config.space.size;
            notes.push(format!(
                "registry {} unreachable ({e}) and no local cache: using the port fallback, worker ID {id} = port {} % {}",
                registry.name(),
                identity.port,
                config.space.size
            ));
            Ok((id, Source::PortFallback))
        }
        _ => Err(RegistryError::new(
            ErrorKind::NoWorkerId,
            format!(
                "no worker ID for {identity}: registry {} unreachable ({e}) and no local cache at {}; refusing to start",
                registry.name(),
                path.display()
            ),
        )),
    }
}

/// The first time the generator may issue (`not_before_ms`) and its durable time bound: with
/// [`LeaseConfig::horizon_kind`], the bound's slot `{kind}-{id}` is opened and started above
/// every `recorded` time (and follows `fence`, moving only while the lease is confirmed);
/// without, the clock guard checks the clock against them. A clock too far behind refuses.
async fn floor_and_bound<C: Clock + Clone + 'static>(
    cache: &LocalCache,
    config: &LeaseConfig,
    clock: &C,
    id: u32,
    recorded: &[(&'static str, Option<u64>); 4],
    fence: Option<Arc<Fence>>,
    notes: &mut Vec<String>,
) -> Result<(u64, Option<DurableHorizon>), RegistryError> {
    let refused = |e: RegistryError| {
        if e.kind == ErrorKind::ClockBehind {
            CLOCK_REFUSALS.fetch_add(1, Ordering::Relaxed);
        }
        e
    };
    let Some(kind) = &config.horizon_kind else {
        let now_ms = clock.now_nanos() / NANOS_PER_MILLI;
        match check_start(now_ms, recorded, config.max_clock_wait).map_err(refused)? {
            StartCheck::Start => {}
            StartCheck::WaitUntil(ms) => {
                notes.push(format!(
                    "clock {} ms behind the last recorded time: waited",
                    ms - now_ms
                ));
                clock.wait_until((ms + 1) * NANOS_PER_MILLI);
            }
        }
        let floor = recorded.iter().filter_map(|(_, t)| *t).max().unwrap_or(0);
        return Ok((floor, None));
    };
    let slot = format!("{kind}-{id}");
    let (dir, horizon_config, clock) = (cache.dir().to_path_buf(), config.horizon, clock.clone());
    let recorded = *recorded;
    // File locks, fsyncs and the start-up wait are blocking: off the executor.
    let started = off_executor("time bound start-up", move || {
        let file = HorizonFile::open(&dir, &slot)?;
        crate::horizon::start(file, &recorded, horizon_config, clock)
    })
    .await
    .map_err(refused)?;
    notes.extend(started.notes);
    if let Some(fence) = fence {
        // The bound moves ahead only while the lease is confirmed.
        started.horizon.follow(fence);
    }
    Ok((started.not_before_ms, Some(started.horizon)))
}

impl Lease {
    /// The durable time bound to give the generators (`SnowflakeConfig::horizon`,
    /// `SnoGenerator::with_horizon`), when [`LeaseConfig::horizon_kind`] was set.
    pub fn horizon(&self) -> Option<Arc<floe_core::horizon::Horizon>> {
        self.horizon.as_ref().map(DurableHorizon::horizon)
    }

    /// The time bound's writer (its counters and file), if any.
    pub fn durable_horizon(&self) -> Option<&DurableHorizon> {
        self.horizon.as_ref()
    }

    /// Writes the cache entry (an atomic, `fsync`ed write) on the blocking pool.
    async fn record_cache(
        &self,
        cache: &LocalCache,
        last_time_ms: u64,
    ) -> Result<(), RegistryError> {
        let lease = {
            let mut mark = self.mark.lock().unwrap_or_else(|p| p.into_inner());
            if !self.closing.load(Ordering::Acquire) {
                // While it runs, the mark follows the fence. A closing lease keeps the last one
                // (its fence is retired): should the registry not take the clean close (it is
                // unreachable), a restart continues the lease from it; once the record says
                // closed, `close` takes it away.
                let holder = self.registration.as_ref().map_or(0, |r| r.record.holder);
                *mark = match self.fence.remaining(&floe_core::clock::SystemClock) {
                    Some(left) if holder != 0 && !left.is_zero() => {
                        crate::continuation::LeaseMark::now(holder, left, cache.dir())
                    }
                    _ => None,
                };
            }
            mark.clone()
        };
        self.write_cache(cache, last_time_ms, lease).await
    }

    /// Writes the cache entry with `lease` as its mark.
    async fn write_cache(
        &self,
        cache: &LocalCache,
        last_time_ms: u64,
        lease: Option<crate::continuation::LeaseMark>,
    ) -> Result<(), RegistryError> {
        let entry = CacheEntry {
            registry: self.registry.clone(),
            identity: self.identity.clone(),
            id: self.id,
            last_time_ms,
            lease,
        };
        let cache = cache.clone();
        off_executor("local cache: store", move || cache.store(&entry)).await
    }

    /// Records `last_time_ms` in the local cache and the registry. The cache is written even
    /// when the registry fails, so a restart during an outage still knows the time.
    ///
    /// # Errors
    /// The registry's error (counted in `heartbeat_failures`), or the cache's.
    pub async fn heartbeat(
        &self,
        registry: &dyn Registry,
        cache: &LocalCache,
        last_time_ms: u64,
    ) -> Result<(), RegistryError> {
        // A lease lost, or in doubt (its window passed without a confirmation), does not
        // vouch for its ID in the cache: the entry is not refreshed meanwhile. (A closing lease
        // records its generators' last time: they stopped for good.)
        let in_doubt = !self.closing.load(Ordering::Acquire)
            && !self.fence.admits_now(&floe_core::clock::SystemClock);
        let cached = if self.is_lost() || in_doubt {
            Ok(())
        } else {
            self.record_cache(cache, last_time_ms).await
        };
        if cached.is_err() {
            self.stats.cache_failures.fetch_add(1, Ordering::Relaxed);
        }
        if self.leased() {
            // A registry that lost its server may hold a request until it reconnects: bound
            // the wait so that beats keep coming.
            let beat = registry.heartbeat(&self.identity, self.id, last_time_ms);
            let result = match tokio::time::timeout(HEARTBEAT_TIMEOUT, beat).await {
                Ok(r) => r,
                Err(_) => Err(RegistryError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "{}: heartbeat timed out after {HEARTBEAT_TIMEOUT:?}",
                        registry.name()
                    ),
                )),
            };
            if let Err(e) = result {
                self.stats
                    .heartbeat_failures
                    .fetch_add(1, Ordering::Relaxed);
                if e.kind == ErrorKind::Conflict {
                    // The ID is someone else's now: stop every generator using it, and never
                    // start from it again (a restart while the registry is unreachable would
                    // take it from the cache).
                    self.fence.raise();
                    if !self.stats.lost.swap(true, Ordering::AcqRel) {
                        let (cache, identity, location, id) = (
                            cache.clone(),
                            self.identity.clone(),
                            self.registry.clone(),
                            self.id,
                        );
                        let forgot = off_executor("local cache: forget", move || {
                            cache.forget(&identity, &location, id)
                        })
                        .await;
                        if let Err(f) = forgot {
                            self.stats.cache_failures.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(identity = %self.identity, "cannot forget the lost worker ID {} in the local cache: {f}", self.id);
                        }
                    }
                }
                return Err(e);
            }
        }
        cached
    }
}

impl Lease {
    /// Whether the ID is held under a registration (from the registry, or continued): not
    /// from the cache nor the port fallback.
    fn leased(&self) -> bool {
        self.registration.is_some()
    }

    /// Whether the registry said the ID is someone else's (fenced for good).
    pub fn is_lost(&self) -> bool {
        self.stats.lost.load(Ordering::Acquire)
    }

    /// At a clean shutdown: records `last_time_ms` (as a heartbeat) and ends this process's
    /// hold on the ID, so that a restart finds it free at once. The ID stays this identity's.
    /// An ID already lost to another process is left alone (its record is not this process's
    /// to write): that is no error.
    ///
    /// # Errors
    /// As [`Lease::heartbeat`], or the registry's error on closing.
    pub async fn close(
        mut self,
        registry: &dyn Registry,
        cache: &LocalCache,
        last_time_ms: u64,
    ) -> Result<(), RegistryError> {
        // Stops the generators for good (no keeper lowers it again): the record is about to
        // say so.
        self.fence.retire();
        self.closing.store(true, Ordering::Release);
        if let Some(h) = self.horizon.take() {
            // Brings the bound back to now (fsync).
            off_executor("time bound close", move || h.close(last_time_ms)).await?;
        }
        let leased = self.leased();
        let closed = match self.heartbeat(registry, cache, last_time_ms).await {
            Err(e) if e.kind == ErrorKind::Conflict => {
                tracing::info!(identity = %self.identity, worker_id = self.id, "stopping with a worker ID that is no longer this identity's: nothing to record ({e})");
                return Ok(());
            }
            Err(e) if leased && e.kind == ErrorKind::Unavailable => Err(e),
            Err(e) => return Err(e),
            Ok(()) if leased => registry.close(&self.identity, self.id).await,
            Ok(()) => return Ok(()),
        };
        match closed {
            // The record says closed: a restart registers (with no wait) rather than
            // continue a lease that ended.
            Ok(()) => self.write_cache(cache, last_time_ms, None).await,
            // The registry cannot be told now (unreachable, or the claim not held again
            // yet): the generators stopped all the same. The cache keeps the lease's mark.
            Err(e) if e.kind == ErrorKind::Unavailable => {
                tracing::warn!(identity = %self.identity, worker_id = self.id, "stopped without closing worker ID {} in the registry ({e}): a restart on this state directory continues the lease; anyone else who takes the ID waits out its reach", self.id);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// Counts the service's free and parked worker IDs into the lease's stats (a registry that
/// does not answer in a heartbeat's time leaves the last count).
async fn survey(lease: &Lease, registry: &dyn Registry) {
    if lease.terms.is_none() {
        return; // no registry that leases (a file, a static ID): nothing parks
    }
    let listed = tokio::time::timeout(HEARTBEAT_TIMEOUT, registry.list(&lease.identity.service));
    let Ok(Ok(records)) = listed.await else {
        return;
    };
    #[allow(clippy::disallowed_methods)] // compared with the records' wall-clock times
    let now_ms = floe_core::clock::SystemClock.now_nanos() / NANOS_PER_MILLI;
    let size = u64::from(lease.space_size);
    let held = records.iter().filter(|r| r.id < lease.space_size).count() as u64;
    let parked = records
        .iter()
        .filter(|r| matches!(r.state(now_ms), crate::RecordState::Parked { .. }))
        .count() as u64;
    lease
        .stats
        .ids_free
        .store(size.saturating_sub(held), Ordering::Relaxed);
    lease.stats.ids_parked.store(parked, Ordering::Relaxed);
    lease.stats.ids_total.store(size, Ordering::Relaxed);
}

/// Heartbeats every `interval` (3 s in Leaf) until `shutdown` resolves, recording the time
/// `last_time_ms` returns (the generator's last issued time, or the clock). Failures are
/// counted in the lease's stats and retried at the next beat.
pub async fn run_heartbeats(
    lease: &Lease,
    registry: &dyn Registry,
    cache: &LocalCache,
    interval: Duration,
    last_time_ms: impl Fn() -> u64,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    // Fenced as of the last beat: a change is logged once (a ZooKeeper session's lapse raises
    // the fence between beats, a window runs out by itself).
    let closed = || !lease.fence.admits_now(&floe_core::clock::SystemClock);
    let mut fenced = closed();
    let mut next_survey = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = ticker.tick() => {
                if let Err(e) = lease.heartbeat(registry, cache, last_time_ms()).await {
                    tracing::warn!(
                        identity = %lease.identity,
                        worker_id = lease.id,
                        "heartbeat to {} failed: {e}",
                        registry.name()
                    );
                }
                // After the beat, which a slow list must not delay.
                if tokio::time::Instant::now() >= next_survey {
                    next_survey = tokio::time::Instant::now() + SURVEY_EVERY;
                    survey(lease, registry).await;
                }
                let now_fenced = closed();
                match (std::mem::replace(&mut fenced, now_fenced), now_fenced) {
                    (false, true) => tracing::warn!(
                        identity = %lease.identity,
                        worker_id = lease.id,
                        "worker lease lost or not confirmed by the registry within its window: generation stopped (fenced) until the registry confirms it again"
                    ),
                    (true, false) => tracing::info!(
                        identity = %lease.identity,
                        worker_id = lease.id,
                        "worker lease held again: generation resumed"
                    ),
                    _ => {}
                }
            }
        }
    }
}
