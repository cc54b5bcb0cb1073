//! Nothing below floe makes it repeat: a store that goes backwards is refused before a value
//! is issued twice.
//!
//! A store can forget what it handed out without floe being told: Redis restarted without
//! AOF, a database restored from last night's backup, a file truncated, a value set lower by
//! hand. Every durable store with ranges (not `memory`, not a Snowflake store) has a [`Guard`],
//! which the layer every store call passes through ([`crate::measured`]) consults; it watches
//! the store in three ways:
//!
//! 1. **High marks, per key, in memory.** The highest value the store gave this process for a
//!    key (by [`reserve`](Store::reserve), [`segment`](Store::segment) or
//!    [`next_id`](Store::next_id)). An answer that starts at or below the mark a call saw when
//!    it began went back: it is refused with [`ErrorKind::DataLoss`] and so is every later call
//!    of that key (without asking the store), until an operator says it is repaired (below). Calls under way at once are told apart: only answers that completed
//!    before a call began bound it, so two reservations racing never look like a loss. A give
//!    back the store took lowers the mark to where the store now stands. At most twice the
//!    handle's `max_keys` keys are remembered ([`KeyLimits`](crate::KeyLimits)): when full, the
//!    marks of keys not refused are forgotten and gathered anew (memory stays bounded), and
//!    the epoch guards every key meanwhile.
//! 2. **The store's epoch** ([`EPOCH_KEY`], a counter in the store itself). Each node adds one
//!    at start and every [`BUMP_EVERY`] checks, reads it every check (a second by default), and
//!    remembers the highest value it saw, in memory and in the state directory's ledger
//!    ([`Ledger`]). A store whose epoch is below what a node saw lost writes (wiped, restarted
//!    empty, restored from a backup older than the node's last bump): every key of it is
//!    refused, including keys this node never served, which its high marks cannot know.
//! 3. **Claims of saved WEAK tails.** A graceful stop keeps its unused WEAK ranges in the
//!    state directory ([`crate::tails`]); a copy of that directory (a cloned VM, a restored
//!    volume snapshot) would serve them again. Each node has a key of its own in the store
//!    (`floe.node.ID`, its ID in the ledger); at the stop it adds one to it and writes the
//!    answer `c` beside the tails; at the next start it adds one again and serves the tails
//!    only if the store answers exactly `c + 1`. Two copies starting from one directory get
//!    `c + 1` and `c + 2`: one serves the tails, the other drops them (a gap). An older copy
//!    restored gets more than `c + 1` and drops them.
//!
//! **Repair.** A refusal is lifted only by an operator, never by the store moving on by itself:
//! a key's value passing this node's mark, or the epoch climbing back with other nodes' bumps,
//! says nothing of what other nodes issued. Having raised each key above the highest value any
//! node issued, the operator raises [`REPAIR_KEY`] above the value the refusal names; every
//! node reads it every check and serves again, the epoch it remembers reset to the store's.
//!
//! The refusal takes only that store's keys out of service (gRPC `DATA_LOSS`, HTTP 500 with
//! the reason); the calls are counted in `floe_store_call_errors_total{kind="DataLoss"}`.
//!
//! **What it cannot see.** A store and the ledger that remembers it lost together (the
//! embedded store and its state directory deleted, or both restored from one old copy); a
//! store restored to a point after every node's last epoch bump, for keys no running node
//! holds; a new node (no ledger) on a store wiped while no node was running, unless the
//! registry mirrors the epoch (floe-server passes it to
//! [`StoreHandle::check_start`](crate::StoreHandle::check_start) as `mirrored`).
//! docs/reliability.md says what each costs.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::ErrorKind as IoKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use floe_core::sequence::Key;

use crate::{Capabilities, ErrorKind, SeqError, Store};

/// The key of a store's epoch (see the module docs). Raising it is how an operator tells the
/// nodes that a store which went back was repaired.
pub const EPOCH_KEY: &str = "floe.epoch";

/// The key an operator raises to say that a store which went back was repaired (every key
/// raised above what any node issued): every refusal of the store on every node is lifted
/// once it is above its value when the refusal began. No node changes it by itself.
pub const REPAIR_KEY: &str = "floe.repair";

/// The prefix of a node's own key in a store (for the claims of its saved tails).
pub const NODE_KEY_PREFIX: &str = "floe.node.";

/// How many keys' high marks a store remembers at most, until
/// [`StoreHandle::key_limits`](crate::StoreHandle::key_limits) says otherwise (twice its
/// `max_keys`).
pub const MAX_MARKS: usize = 200_000;

/// How often a node checks a store's epoch, by default.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Every how many checks a node adds one to the epoch (and writes its ledger).
pub const BUMP_EVERY: u32 = 30;

/// How far above the epoch it remembers a node raises a repaired store's epoch: past the bumps
/// other nodes may have kept in their ledgers but not in the registry's mirror (at a stop, and
/// in the last seconds before the loss), so that none of them refuses the store again.
pub const REPAIR_MARGIN: i64 = 1_000_000;

#[derive(Debug, Clone, Copy)]
struct Mark {
    high: i64,
    refused: bool,
}

/// What a store is watched by, so that it is refused when it goes backwards (see the module
/// docs). The layer every call of a [`StoreHandle`](crate::StoreHandle) passes through
/// ([`crate::measured`]) calls it around each reservation.
#[derive(Debug)]
pub struct Guard {
    inner: Arc<dyn Store>,
    name: String,
    /// Set while every key is refused (the epoch went back); the reason in `reason`.
    refused: AtomicBool,
    reason: Mutex<Option<String>>,
    /// The highest epoch this process saw (0: none).
    epoch: AtomicI64,
    /// Whether the store keeps floe's epoch (set by the start check).
    epoch_kept: AtomicBool,
    marks: Mutex<HashMap<Key, Mark>>,
    max_marks: std::sync::atomic::AtomicUsize,
    /// Whether a key is refused (so that the checks need not scan the marks).
    keys_refused: AtomicBool,
    /// [`REPAIR_KEY`]'s value when the last refusal began.
    repair_seen: AtomicI64,
    /// This node's own key in the store, once the start check claimed it.
    node_key: Mutex<Option<Key>>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Refuses a request for one of floe's own keys ([`EPOCH_KEY`], [`REPAIR_KEY`], a node's
/// key): a client's increment of `floe.repair` would lift every refusal. An operator raises
/// them through the admin API (`floe seq keys raise`), which this does not stand in front of.
pub(crate) fn not_floes_own(key: &str) -> Result<(), SeqError> {
    let own = key.starts_with("floe.")
        && (key == EPOCH_KEY
            || key == REPAIR_KEY
            || key == crate::changes::CHANGES_KEY
            || key.starts_with(NODE_KEY_PREFIX));
    if own {
        return Err(SeqError::new(
            ErrorKind::InvalidArgument,
            format!(
                "key {key:?} is floe's own (it watches the store with it): choose another name"
            ),
        ));
    }
    Ok(())
}

fn epoch_key() -> Key {
    Key::new(EPOCH_KEY).expect("a valid key")
}

fn repair_key() -> Key {
    Key::new(REPAIR_KEY).expect("a valid key")
}

/// What the start check found ([`Guard::start`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StartCheck {
    /// Why the store is refused from the start (its epoch went back), if it is.
    pub went_back: Option<String>,
    /// The epoch this node now remembers, when the store keeps one.
    pub epoch: Option<i64>,
    /// Whether the store's saved tails may be served (false: claimed by another copy of the
    /// state directory, or not claimable).
    pub tails_claimed: bool,
    /// Why the store keeps no epoch, when it does not (a note for the operator).
    pub unguarded: Option<String>,
    /// How many IDs of saved tails were dropped (gaps) because their claim failed.
    pub tails_dropped: u64,
    /// How many IDs of saved tails were dropped (gaps) because a floor was raised or a key
    /// unregistered since they were saved ([`crate::changes`]).
    pub tails_stale: u64,
}

impl Guard {
    /// `inner`, guarded, under the store name `name`.
    pub fn new(name: &str, inner: Arc<dyn Store>) -> Guard {
        Guard {
            inner,
            name: name.to_string(),
            refused: AtomicBool::new(false),
            reason: Mutex::new(None),
            epoch: AtomicI64::new(0),
            epoch_kept: AtomicBool::new(false),
            marks: Mutex::new(HashMap::new()),
            max_marks: std::sync::atomic::AtomicUsize::new(MAX_MARKS),
            repair_seen: AtomicI64::new(0),
            keys_refused: AtomicBool::new(false),
            node_key: Mutex::new(None),
        }
    }

    /// Whether a store of these capabilities is guarded: durable stores with ranges (a
    /// `memory` store lives and dies with the process; a Snowflake store has no counters).
    pub fn applies(caps: Capabilities) -> bool {
        caps.durable && (caps.segments || caps.strong)
    }

    /// Remembers the marks of at most `n` keys (at least 16).
    pub fn set_max_marks(&self, n: usize) {
        self.max_marks.store(n.max(16), Ordering::Relaxed);
    }

    /// Why every key is refused, if it is.
    pub fn refusal(&self) -> Option<String> {
        if !self.refused.load(Ordering::Acquire) {
            return None;
        }
        locked(&self.reason).clone()
    }

    /// The value of [`REPAIR_KEY`] when the store, or a key of it, was last refused: the
    /// operator's raise above it lifts every refusal.
    fn repair_needed(&self) -> i64 {
        self.repair_seen.load(Ordering::Acquire)
    }

    /// Reads [`REPAIR_KEY`] as a refusal begins, so that only a raise after it lifts it (0
    /// when it cannot be read: a store wiped has none).
    async fn note_repair(&self) {
        let v = self.inner.value(&repair_key()).await.ok().flatten();
        self.repair_seen.fetch_max(v.unwrap_or(0), Ordering::AcqRel);
    }

    fn refuse(&self, reason: String) {
        let mut r = locked(&self.reason);
        if r.is_none() {
            tracing::error!(store = %self.name, "{reason}");
        }
        *r = Some(reason);
        self.refused.store(true, Ordering::Release);
    }

    /// The mark a call of `key` starts from (`None`: none yet), or the refusal of the store or
    /// of the key (no store call is made for a refused one).
    fn admit(&self, key: &Key) -> Result<Option<i64>, SeqError> {
        if key.as_str() == REPAIR_KEY {
            // The operator's own key: how a refusal is lifted, never refused itself.
            return Ok(None);
        }
        if let Some(reason) = self.refusal() {
            return Err(SeqError::new(ErrorKind::DataLoss, reason));
        }
        let mark = locked(&self.marks).get(key).copied();
        match mark {
            Some(m) if m.refused => Err(self.key_refused(key, m.high, None)),
            Some(m) => Ok(Some(m.high)),
            None => Ok(None),
        }
    }

    fn key_refused(&self, key: &Key, high: i64, answer: Option<(i64, i64)>) -> SeqError {
        let name = &self.name;
        let k = key.as_str();
        let answered = match answer {
            Some((first, last)) => format!(" it answered {first}..={last}, but"),
            None => String::new(),
        };
        SeqError::new(
            ErrorKind::DataLoss,
            format!(
                "store {name} went back on key {k:?}:{answered} this node already had values up to {high} from it. The store lost writes (restarted without persistence, restored from a backup, wiped, or the value was set lower by hand); the key is refused so that no value is issued twice. {}",
                self.recover()
            ),
        )
    }

    /// The recovery, as every refusal words it.
    fn recover(&self) -> String {
        let name = &self.name;
        format!(
            "Recover: raise each key above the highest value any node issued (`floe seq keys raise KEY --above N --store {name} --server ADDR`, or --store URL), then say it is repaired: `floe seq keys raise {REPAIR_KEY} --above {} --store {name} --server ADDR`; every node serves again within a second",
            self.repair_needed()
        )
    }

    /// Records an answer `first ..= last` to a call that began at `before`: `Err` with the
    /// key's mark when it starts at or below what the store had given before (or below a mark
    /// lowered since by a give back); the key is then refused.
    fn answered(&self, key: &Key, before: Option<i64>, first: i64, last: i64) -> Result<(), i64> {
        let mut marks = locked(&self.marks);
        if marks.len() >= self.max_marks.load(Ordering::Relaxed) && !marks.contains_key(key) {
            // Full: forget the marks of keys not refused (bounded memory; the epoch guards
            // every key meanwhile).
            marks.retain(|_, m| m.refused);
        }
        match marks.get_mut(key) {
            Some(m) => {
                let bound = before.map_or(m.high, |b| b.min(m.high));
                if before.is_some() && first <= bound {
                    m.refused = true;
                    self.keys_refused.store(true, Ordering::Release);
                    return Err(m.high);
                }
                m.high = m.high.max(last);
            }
            None => {
                marks.insert(
                    key.clone(),
                    Mark {
                        high: last,
                        refused: false,
                    },
                );
            }
        }
        Ok(())
    }

    /// After `key` went back (its answer `first ..= last`, its mark `high`): notes the repair
    /// counter, checks the epoch at once (a store wiped whole is refused whole before another
    /// key is served), and words the refusal.
    async fn went_back(&self, key: &Key, high: i64, first: i64, last: i64) -> SeqError {
        self.note_repair().await;
        self.check_epoch().await;
        let e = self.key_refused(key, high, Some((first, last)));
        tracing::error!(store = %self.name, key = key.as_str(), "{e}");
        e
    }

    /// Lifts every refusal when [`REPAIR_KEY`] was raised above its value when the last one
    /// began; the epoch this node remembers is then the store's. Nothing is refused, or the
    /// store cannot be reached: nothing changes.
    pub async fn check_repair(&self) {
        if !self.refused.load(Ordering::Acquire) && !self.keys_refused.load(Ordering::Acquire) {
            return;
        }
        let Ok(v) = self.inner.value(&repair_key()).await else {
            return;
        };
        if v.unwrap_or(0) <= self.repair_needed() {
            return;
        }
        if self.epoch_kept.load(Ordering::Acquire) {
            // The store's epoch raised above every epoch this node remembers (its ledger's, the
            // registry's mirror), and then some for the bumps of nodes stopped meanwhile: a
            // later start of any node compares the store with those, and must not refuse it
            // again for the loss just repaired.
            let above = self
                .epoch
                .load(Ordering::Acquire)
                .saturating_add(REPAIR_MARGIN);
            if self.inner.raise(&epoch_key(), above).await.is_err() {
                return;
            }
            let Ok(epoch) = self.inner.value(&epoch_key()).await else {
                return;
            };
            self.epoch.store(epoch.unwrap_or(0), Ordering::Release);
        }
        for m in locked(&self.marks).values_mut() {
            m.refused = false;
        }
        self.keys_refused.store(false, Ordering::Release);
        self.repair_seen.fetch_max(v.unwrap_or(0), Ordering::AcqRel);
        *locked(&self.reason) = None;
        self.refused.store(false, Ordering::Release);
        tracing::warn!(store = %self.name, "store {}: {REPAIR_KEY} was raised: served again", self.name);
    }

    /// The start check: adds one to the store's epoch and compares it with `remembered` (the
    /// ledger's); claims the node's key against `claim` (the saved tails' claim). See the
    /// module docs.
    ///
    /// # Errors
    /// The store's errors (it cannot be reached now), but not that it cannot keep the epoch
    /// (then [`StartCheck::unguarded`] says why).
    pub async fn start(
        &self,
        remembered: Option<i64>,
        node_key: Option<Key>,
        claim: Option<i64>,
    ) -> Result<StartCheck, SeqError> {
        let mut check = StartCheck::default();
        let e = match self.inner.reserve(&epoch_key(), 1).await {
            Ok(e) => e,
            Err(err)
                if matches!(
                    err.kind,
                    ErrorKind::UnknownKey | ErrorKind::Unsupported | ErrorKind::InvalidArgument
                ) =>
            {
                check.unguarded = Some(format!(
                    "store {}: it cannot keep floe's epoch ({err}): a wiped or restored store is noticed only on the keys this process serves, and saved WEAK tails are served unclaimed",
                    self.name
                ));
                check.tails_claimed = claim.is_none();
                return Ok(check);
            }
            Err(err) => return Err(err),
        };
        self.epoch_kept.store(true, Ordering::Release);
        let seen = match remembered {
            Some(r) if e <= r => {
                self.note_repair().await;
                let reason = self.epoch_reason(e - 1, r);
                self.refuse(reason.clone());
                check.went_back = Some(reason);
                r
            }
            Some(r) => e.max(r),
            None => e,
        };
        self.epoch.fetch_max(seen, Ordering::AcqRel);
        check.epoch = Some(seen);
        if let Some(node) = node_key {
            let v = self.inner.reserve(&node, 1).await?;
            check.tails_claimed = claim.is_none_or(|c| c.checked_add(1) == Some(v));
            *locked(&self.node_key) = Some(node);
        } else {
            // No ledger (another process holds it): tails with a claim cannot be checked.
            check.tails_claimed = claim.is_none();
        }
        Ok(check)
    }

    fn epoch_reason(&self, now: i64, seen: i64) -> String {
        format!(
            "store {} went back: its epoch ({EPOCH_KEY}) is {now}, below {seen}, which this node (or another, through the registry) saw. It lost writes (restarted without persistence, restored from an older backup, wiped, or another store now answers at its address); every key of it is refused so that no value is issued twice. {}",
            self.name,
            self.recover()
        )
    }

    /// Reads the epoch: below what this node saw, the store is refused (until it is
    /// repaired: [`check_repair`](Self::check_repair)). Nothing changes when the store cannot
    /// be reached or is refused already.
    pub async fn check_epoch(&self) {
        if !self.epoch_kept.load(Ordering::Acquire) || self.refused.load(Ordering::Acquire) {
            return;
        }
        let Ok(value) = self.inner.value(&epoch_key()).await else {
            return;
        };
        self.saw_epoch(value.unwrap_or(0)).await;
    }

    async fn saw_epoch(&self, now: i64) {
        let seen = self.epoch.load(Ordering::Acquire);
        if now < seen {
            self.note_repair().await;
            self.refuse(self.epoch_reason(now, seen));
        } else {
            self.epoch.fetch_max(now, Ordering::AcqRel);
        }
    }

    /// Adds one to the epoch; the epoch this node now remembers.
    pub async fn bump_epoch(&self) -> Option<i64> {
        if !self.epoch_kept.load(Ordering::Acquire) || self.refused.load(Ordering::Acquire) {
            return None;
        }
        let e = self.inner.reserve(&epoch_key(), 1).await.ok()?;
        // The value before the bump is `e - 1`.
        self.saw_epoch(e - 1).await;
        if self.refused.load(Ordering::Acquire) {
            return None;
        }
        self.epoch.fetch_max(e, Ordering::AcqRel);
        Some(self.epoch.load(Ordering::Acquire))
    }

    /// The epoch this node remembers (0: none).
    pub fn epoch(&self) -> i64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Claims this node's saved tails at a graceful stop: the value its key now holds, which the
    /// next start must find one below its own answer. `None` without a node key.
    ///
    /// # Errors
    /// The store's.
    pub async fn claim(&self) -> Result<Option<i64>, SeqError> {
        let node = locked(&self.node_key).clone();
        match node {
            Some(node) => self.inner.reserve(&node, 1).await.map(Some),
            None => Ok(None),
        }
    }

    /// Checks the epoch every `every`, adding one to it every [`BUMP_EVERY`] checks (then
    /// `saved` is called with the epoch, to keep it in the ledger), for as long as the store
    /// lives.
    pub fn watch(
        this: &Arc<Guard>,
        every: Duration,
        saved: impl Fn(i64) + Send + 'static,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let weak: Weak<Guard> = Arc::downgrade(this);
        async move {
            let mut n = 0u32;
            loop {
                tokio::time::sleep(every).await;
                let Some(g) = weak.upgrade() else { return };
                g.check_repair().await;
                n = n.wrapping_add(1);
                if n.is_multiple_of(BUMP_EVERY) {
                    if let Some(e) = g.bump_epoch().await {
                        saved(e);
                    }
                } else {
                    g.check_epoch().await;
                }
            }
        }
    }
}

pub(crate) fn range_of(last: i64, n: u32) -> Result<(i64, i64), SeqError> {
    let first = last.checked_sub(i64::from(n.max(1)) - 1).ok_or_else(|| {
        SeqError::new(
            ErrorKind::Corrupt,
            format!("a store answered {last} to an increment by {n}"),
        )
    })?;
    Ok((first, last))
}

impl Guard {
    /// Runs `call`, a reservation of `key` whose answer `range` reads as `first ..= last`,
    /// under the guard: refused before it is made when the store or the key is refused; its
    /// answer refused when it went back (see the module docs).
    pub(crate) async fn reserving<T>(
        &self,
        key: &Key,
        range: impl FnOnce(&T) -> Result<Option<(i64, i64)>, SeqError>,
        call: impl std::future::Future<Output = Result<T, SeqError>>,
    ) -> Result<T, SeqError> {
        let before = self.admit(key)?;
        let answer = call.await?;
        if let Some((first, last)) = range(&answer)? {
            if let Err(high) = self.answered(key, before, first, last) {
                return Err(self.went_back(key, high, first, last).await);
            }
        }
        Ok(answer)
    }

    /// After the store took back `first ..= last` of `key`: it stands at `first - 1` again, so
    /// its next answer starts at `first`.
    pub(crate) fn gave_back(&self, key: &Key, first: i64) {
        if let Some(m) = locked(&self.marks).get_mut(key) {
            m.high = m.high.min(first - 1);
        }
    }
}

const LEDGER: &str = "sequencer-ledger";
const LEDGER_TMP: &str = "sequencer-ledger.tmp";
const LEDGER_LOCK: &str = "sequencer-ledger.lock";
const LEDGER_HEADER: &str = "floe-sequencer-ledger 1";

/// What a node remembers of its stores, in its state directory: its own ID (for its key in
/// each store) and, per store identity, the highest epoch it saw. Locked for the process's
/// life; written atomically.
#[derive(Debug)]
pub struct Ledger {
    dir: PathBuf,
    _lock: File,
    node: String,
    epochs: BTreeMap<String, i64>,
    /// Why the file on disk could not be read, when it could not (it is written anew).
    pub damaged: Option<String>,
}

fn ledger_io(what: &str, path: &Path, e: std::io::Error) -> SeqError {
    SeqError::new(
        ErrorKind::Io,
        format!("ledger: cannot {what} {}: {e}", path.display()),
    )
}

/// A node ID: 16 hex digits from the process's random hash keys (seeded by the operating
/// system's randomness) and the pid. Not a secret: two nodes drawing the same one only share a
/// key for their tails' claims, which then drop tails (gaps), never serve them twice.
fn new_node_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

impl Ledger {
    /// Locks and reads `{dir}/sequencer-ledger` (a new node ID when there is none): `None` when
    /// another process holds it. Blocking file I/O.
    ///
    /// # Errors
    /// `Io` naming the path when the directory or the lock cannot be made.
    pub fn open(dir: &Path) -> Result<Option<Ledger>, SeqError> {
        fs::create_dir_all(dir).map_err(|e| ledger_io("create", dir, e))?;
        let lock_path = dir.join(LEDGER_LOCK);
        let lock = match crate::statefile::lock(dir, LEDGER_LOCK) {
            Ok(Some(lock)) => lock,
            Ok(None) => return Ok(None),
            Err((what, e)) => return Err(ledger_io(what, &lock_path, e)),
        };
        let path = dir.join(LEDGER);
        let mut ledger = Ledger {
            dir: dir.to_path_buf(),
            _lock: lock,
            node: String::new(),
            epochs: BTreeMap::new(),
            damaged: None,
        };
        match fs::read(&path) {
            Ok(bytes) => {
                if let Err(why) = ledger.decode(&bytes) {
                    ledger.damaged = Some(format!("{}: {why}", path.display()));
                    ledger.epochs.clear();
                }
            }
            Err(e) if e.kind() == IoKind::NotFound => {}
            Err(e) => ledger.damaged = Some(format!("{}: {e}", path.display())),
        }
        if ledger.node.is_empty() {
            ledger.node = new_node_id();
        }
        Ok(Some(ledger))
    }

    fn decode(&mut self, bytes: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
        let lines: Vec<&str> = text.lines().collect();
        if lines.first() != Some(&LEDGER_HEADER) {
            return Err(format!("expected the header {LEDGER_HEADER:?}"));
        }
        let end = format!("end {}", lines.len().saturating_sub(2));
        if lines.last() != Some(&end.as_str()) {
            return Err("not whole (no matching end line)".to_string());
        }
        for line in &lines[1..lines.len() - 1] {
            let f: Vec<&str> = line.split(' ').collect();
            match f.as_slice() {
                ["node", id] if id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    self.node = (*id).to_string();
                }
                ["e", identity, epoch] => {
                    let identity = crate::tails::unhex(identity)
                        .ok_or_else(|| format!("a bad line {line:?}"))?;
                    let epoch: i64 = epoch.parse().map_err(|_| format!("a bad line {line:?}"))?;
                    self.epochs.insert(identity, epoch);
                }
                _ => return Err(format!("a bad line {line:?}")),
            }
        }
        Ok(())
    }

    fn encode(&self) -> String {
        let mut out = format!("{LEDGER_HEADER}\nnode {}\n", self.node);
        for (identity, epoch) in &self.epochs {
            let _ = writeln!(out, "e {} {epoch}", crate::tails::hex(identity));
        }
        let _ = writeln!(out, "end {}", self.epochs.len() + 1);
        out
    }

    /// This node's own key in every store.
    pub fn node_key(&self) -> Key {
        Key::new(format!("{NODE_KEY_PREFIX}{}", self.node)).expect("a valid key")
    }

    /// The highest epoch this node saw in the store of `identity`
    /// ([`store_identity`](crate::store_identity)).
    pub fn epoch(&self, identity: &str) -> Option<i64> {
        self.epochs.get(identity).copied()
    }

    /// Remembers `epoch` for the store of `identity` (never lowers it).
    pub fn set_epoch(&mut self, identity: &str, epoch: i64) {
        let e = self.epochs.entry(identity.to_string()).or_insert(epoch);
        *e = (*e).max(epoch);
    }

    /// Writes the ledger atomically (temporary file, fsync, rename, fsync of the directory).
    /// Blocking file I/O.
    ///
    /// # Errors
    /// `Io` naming the path.
    pub fn save(&self) -> Result<(), SeqError> {
        crate::statefile::write_atomically(&self.dir, LEDGER_TMP, LEDGER, &self.encode())
            .map_err(|e| ledger_io("write", &self.dir.join(LEDGER), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stores::memory::MemoryStore;
    use crate::{ServeOptions, StoreHandle};
    use async_trait::async_trait;
    use floe_core::sequence::Mode;

    /// A memory store that says it is durable and can forget everything (a Redis restarted
    /// without AOF), or be set back to a copy (a restore).
    #[derive(Debug)]
    struct Forgetful {
        now: Mutex<Arc<MemoryStore>>,
    }

    impl Forgetful {
        fn new() -> Arc<Forgetful> {
            Arc::new(Forgetful {
                now: Mutex::new(Arc::new(MemoryStore::new())),
            })
        }
        fn wipe(&self) {
            *locked(&self.now) = Arc::new(MemoryStore::new());
        }
        fn inner(&self) -> Arc<MemoryStore> {
            Arc::clone(&locked(&self.now))
        }
    }

    #[async_trait]
    impl Store for Forgetful {
        fn kind(&self) -> &'static str {
            "forgetful"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                segments: true,
                strong: true,
                durable: true,
                shared: true,
            }
        }
        async fn reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError> {
            self.inner().reserve(key, n).await
        }
        async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
            self.inner().raise(key, floor).await
        }
        async fn value(&self, key: &Key) -> Result<Option<i64>, SeqError> {
            self.inner().value(key).await
        }
    }

    fn key(k: &str) -> Key {
        Key::new(k).unwrap()
    }

    #[tokio::test]
    async fn a_store_that_forgets_is_refused_on_the_keys_it_served_then_raised_back() {
        let store = Forgetful::new();
        let h = StoreHandle::new("s", store.clone(), ServeOptions::default());
        for want in 1..=5 {
            assert_eq!(h.next_id("k", Mode::Strong).await.unwrap(), want);
        }
        store.wipe();
        let e = h.next_id("k", Mode::Strong).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::DataLoss, "{e}");
        assert!(e.message.contains("had values up to 5"), "{e}");
        assert!(
            e.message
                .contains("floe seq keys raise floe.repair --above 0"),
            "{e}"
        );
        // Refused again (the store is not asked to give more meanwhile past the mark).
        let e = h.next_id("k", Mode::Strong).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::DataLoss, "{e}");
        // The key raised: still refused, until the operator says it is repaired (the store
        // passing this node's mark says nothing of what other nodes issued).
        h.raise_floor(&key("k"), 5).await.unwrap();
        let e = h.next_id("k", Mode::Strong).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::DataLoss, "{e}");
        h.raise_floor(&key(REPAIR_KEY), 0).await.unwrap();
        let next = h.next_id("k", Mode::Strong).await.unwrap();
        assert!(next > 5, "{next}");
        // Another key is not refused by the key's loss alone (no epoch kept here).
        assert_eq!(h.next_id("other", Mode::Strong).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn weak_segments_that_go_back_are_refused_before_an_id_is_served_twice() {
        let store = Forgetful::new();
        let h = StoreHandle::new("s", store.clone(), ServeOptions::default());
        let mut seen = std::collections::HashSet::new();
        let mut refused = 0;
        for i in 0..20_000 {
            if i == 7_000 {
                store.wipe();
            }
            match h.next_id("w", Mode::Weak).await {
                Ok(id) => assert!(seen.insert(id), "{id} issued twice"),
                Err(e) => {
                    assert_eq!(e.kind, ErrorKind::DataLoss, "{e}");
                    refused += 1;
                }
            }
        }
        assert!(refused > 0, "the loss was never noticed");
    }

    #[tokio::test]
    async fn the_epoch_refuses_every_key_of_a_store_that_went_back_until_it_is_raised() {
        let store = Forgetful::new();
        let h = StoreHandle::new("s", store.clone(), ServeOptions::default());
        let g = Arc::clone(h.guard().unwrap());
        let first = g.start(None, None, None).await.unwrap();
        assert_eq!((first.epoch, first.went_back), (Some(1), None));
        g.bump_epoch().await.unwrap();
        assert_eq!(g.epoch(), 2);
        store.wipe();
        g.check_epoch().await;
        // A key this process never served is refused too.
        let e = h.next_id("never", Mode::Strong).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::DataLoss);
        assert!(
            e.message.contains("epoch (floe.epoch) is 0, below 2"),
            "{e}"
        );
        assert!(
            e.message
                .contains("floe seq keys raise floe.repair --above 0"),
            "{e}"
        );
        // Other nodes bumping the epoch back up does not lift it: only the repair does.
        h.raise_floor(&key(EPOCH_KEY), 5).await.unwrap();
        g.check_epoch().await;
        g.check_repair().await;
        assert_eq!(
            h.next_id("never", Mode::Strong).await.unwrap_err().kind,
            ErrorKind::DataLoss
        );
        h.raise_floor(&key(REPAIR_KEY), 0).await.unwrap();
        assert_eq!(h.next_id("never", Mode::Strong).await.unwrap(), 1);
        // The epoch remembered is the store's now: the next checks do not refuse again.
        g.check_epoch().await;
        assert!(g.refusal().is_none());

        // A start that finds the epoch below the ledger's (or the registry's mirror) is refused
        // from the start.
        let store2 = Forgetful::new();
        let h2 = StoreHandle::new("s", store2.clone(), ServeOptions::default());
        let g2 = Arc::clone(h2.guard().unwrap());
        let check = g2.start(Some(9), None, None).await.unwrap();
        assert!(check.went_back.is_some());
        assert_eq!(check.epoch, Some(9));
        let e = h2.next_id("k", Mode::Weak).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::DataLoss);
        // Repaired: the store's epoch is raised above what the node remembered, so that the
        // next start with that ledger (or mirror) is not refused again.
        h2.raise_floor(&key(REPAIR_KEY), 0).await.unwrap();
        assert!(h2.next_id("k", Mode::Strong).await.is_ok());
        let raised = store2.value(&key(EPOCH_KEY)).await.unwrap().unwrap();
        assert!(raised > 9, "{raised}");
        let h3 = StoreHandle::new("s", store2.clone(), ServeOptions::default());
        let again = h3
            .guard()
            .unwrap()
            .start(Some(9), None, None)
            .await
            .unwrap();
        assert_eq!(again.went_back, None);
        assert!(h3.next_id("k", Mode::Strong).await.is_ok());
    }

    #[tokio::test]
    async fn tails_are_served_by_the_first_copy_that_claims_them_only() {
        let store = Forgetful::new();
        let node = key("floe.node.0123456789abcdef");
        let a = Guard::new("s", store.clone());
        a.start(None, Some(node.clone()), None).await.unwrap();
        let claim = a.claim().await.unwrap().unwrap();
        // Two copies of the state directory start with the same claim: one serves the tails.
        let b = Guard::new("s", store.clone());
        let c = Guard::new("s", store.clone());
        let b = b
            .start(Some(1), Some(node.clone()), Some(claim))
            .await
            .unwrap();
        let c = c
            .start(Some(1), Some(node.clone()), Some(claim))
            .await
            .unwrap();
        assert!(b.tails_claimed);
        assert!(!c.tails_claimed);
        // An older copy (restored) never does.
        let d = Guard::new("s", store.clone());
        let d = d.start(Some(1), Some(node), Some(claim)).await.unwrap();
        assert!(!d.tails_claimed);
    }

    #[tokio::test]
    async fn concurrent_calls_of_one_key_never_look_like_a_loss() {
        let h = Arc::new(StoreHandle::new(
            "s",
            Forgetful::new(),
            ServeOptions::default(),
        ));
        let k = key("k");
        let mut tasks = Vec::new();
        for i in 0..16 {
            let h = Arc::clone(&h);
            let k = k.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..200 {
                    if i % 2 == 0 {
                        h.segment(k.as_str(), 7).await.unwrap();
                    } else {
                        h.next_id(k.as_str(), Mode::Strong).await.unwrap();
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_client_cannot_take_ids_of_floes_own_keys() {
        let h = StoreHandle::new("s", Forgetful::new(), ServeOptions::default());
        for k in [EPOCH_KEY, REPAIR_KEY, "floe.node.0123456789abcdef"] {
            for mode in [Mode::Weak, Mode::Strong] {
                let e = h.next_id(k, mode).await.unwrap_err();
                assert_eq!(e.kind, ErrorKind::InvalidArgument, "{k}: {e}");
                let e = h.next_ids(k, mode, 3).await.unwrap_err();
                assert_eq!(e.kind, ErrorKind::InvalidArgument, "{k}: {e}");
            }
            let e = h.segment(k, 10).await.unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{k}: {e}");
        }
        // Near names are anyone's; the operator's raise of the repair key goes through.
        for k in ["floe.epochs", "floe", "floe.repair2", "x.floe.repair"] {
            h.next_id(k, Mode::Strong).await.unwrap();
        }
        h.raise_floor(&key(REPAIR_KEY), 3).await.unwrap();
    }

    #[test]
    fn the_ledger_is_read_back_and_a_damaged_one_is_said() {
        let dir = tempfile::tempdir().unwrap();
        let node = {
            let mut l = Ledger::open(dir.path()).unwrap().unwrap();
            // A second process does not get it.
            assert!(Ledger::open(dir.path()).unwrap().is_none());
            l.set_epoch("redis://h:1/0", 7);
            l.set_epoch("redis://h:1/0", 3);
            l.save().unwrap();
            l.node_key()
        };
        let l = Ledger::open(dir.path()).unwrap().unwrap();
        assert_eq!(l.epoch("redis://h:1/0"), Some(7));
        assert_eq!(l.node_key(), node);
        assert!(l.damaged.is_none());
        drop(l);
        fs::write(dir.path().join(LEDGER), b"\0\0\0").unwrap();
        let l = Ledger::open(dir.path()).unwrap().unwrap();
        assert!(l.damaged.is_some());
        assert_eq!(l.epoch("redis://h:1/0"), None);
    }
}
