//! Named stores, each with its WEAK buffers: what the server and the CLI call.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floe_core::sequence::{Key, Mode, Segment, StepPolicy};

use crate::batch::{check_count, Batch};
use crate::guard::{Guard, Ledger, StartCheck, EPOCH_KEY};
use crate::keys::{GiveBack, KeyLimits, Keys};
use crate::strong::StrongKey;
use crate::tails::{above, store_identity, SavedTails, TailDir};
use crate::weak::WeakKey;
use crate::{within, ErrorKind, SeqError, Store};

/// How a store is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeOptions {
    /// WEAK segment sizes.
    pub step: StepPolicy,
    /// The longest a store call may take before it fails with `Unavailable`.
    pub timeout: Duration,
}

impl Default for ServeOptions {
    /// [`StepPolicy::default`], and 2 s per store call.
    fn default() -> Self {
        ServeOptions {
            step: StepPolicy::default(),
            timeout: Duration::from_secs(2),
        }
    }
}

/// One store and the state of its keys in memory: each key's WEAK buffer and STRONG queue.
///
/// Keys are held in memory within [`KeyLimits`] ([`KeyLimits::default`] unless
/// [`key_limits`](Self::key_limits) says otherwise): a key unused for a while is dropped, and
/// so are the least recently used keys when too many are held. A dropped key's unused WEAK IDs
/// are parked (at most twice `max_keys` keys' worth): its next buffer serves them first, so a quiet key
/// goes on 1, 2, 3 however long it was idle; parked tails beyond the limit are given back to the
/// store when nothing was reserved after them ([`Store::give_back`]), gaps otherwise, never
/// reissued elsewhere. See the `keys` module docs in the source for how this stays race-free.
#[derive(Debug)]
pub struct StoreHandle {
    pub(crate) name: String,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) options: ServeOptions,
    pub(crate) keys: Arc<Keys>,
    /// Serve registered keys only ([`registered_only`](Self::registered_only)).
    pub(crate) registered_only: bool,
    /// Set by [`with_tails`](Self::with_tails): the store's identity, under which the tails
    /// are kept at a graceful stop.
    tails: Option<String>,
    /// The `bigger_than` floors [`init`](Self::init) (and [`raise_floor`](Self::raise_floor))
    /// applied, for tails loaded after them.
    pub(crate) floors: Mutex<HashMap<Key, i64>>,
    /// IDs issued, WEAK and STRONG.
    issued: [AtomicU64; 2],
    /// The guard of a durable store with ranges ([`crate::guard`]).
    guard: Option<Arc<Guard>>,
    /// The store's identity in the ledger, once [`check_start`](Self::check_start) ran.
    identity: Option<String>,
    /// Changes of floors and registrations, as this handle knows them ([`crate::changes`]).
    pub(crate) changes: crate::changes::Changes,
}

/// The sums of a store's WEAK buffers ([`StoreHandle::weak_totals`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WeakTotals {
    /// WEAK keys held.
    pub keys: u64,
    /// IDs buffered, over every key.
    pub buffered: u64,
    /// The largest step of a next fetch.
    pub max_step: u32,
}

fn mode_index(mode: Mode) -> usize {
    match mode {
        Mode::Weak => 0,
        Mode::Strong => 1,
    }
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl StoreHandle {
    /// Serves `store` under `name`, holding keys within [`KeyLimits::default`].
    /// Its calls are measured ([`crate::measured`]); a durable store with ranges is guarded
    /// against going backwards ([`crate::guard`]).
    pub fn new(name: impl Into<String>, store: Arc<dyn Store>, options: ServeOptions) -> Self {
        let name = name.into();
        let guard = Guard::applies(store.capabilities())
            .then(|| Arc::new(Guard::new(&name, Arc::clone(&store))));
        let store: Arc<dyn Store> =
            Arc::new(crate::measured::Measured::new(&name, store, guard.clone()));
        StoreHandle {
            guard,
            identity: None,
            issued: [AtomicU64::new(0), AtomicU64::new(0)],
            keys: Arc::new(Keys::new(
                KeyLimits::default(),
                Some(GiveBack::new(Arc::clone(&store), options.timeout)),
            )),
            store,
            name,
            options,
            registered_only: false,
            tails: None,
            floors: Mutex::new(HashMap::new()),
            changes: Default::default(),
        }
    }

    /// The same handle, serving the tails `saved` holds for this store first, and keeping its
    /// own at [`Sequencer::close_keeping`] (see [`crate::tails`]). `url` and `state_dir` are
    /// what the store was opened with ([`open`](crate::open)): its identity
    /// ([`store_identity`](crate::store_identity): no password; the file's path for
    /// `embedded`) must match the one the tails were saved under. Call it before serving. The store's tails are taken out of `saved` in any
    /// case; on a store that is not durable or has no segments (`memory`, Snowflake) they are
    /// dropped and nothing is kept at close.
    pub fn with_tails(mut self, url: &str, state_dir: &Path, saved: &mut SavedTails) -> Self {
        let identity = store_identity(url, state_dir);
        let pending = saved.take_store(&self.name, &identity);
        let caps = self.store.capabilities();
        if !(caps.segments && caps.durable) {
            return self;
        }
        {
            let floors = locked(&self.floors);
            for (key, tail) in pending {
                let tail = match floors.get(&key) {
                    Some(&floor) => above(tail, floor),
                    None => tail,
                };
                self.keys.park(key, tail);
            }
        }
        self.keys.trim_parked(None);
        self.tails = Some(identity);
        self
    }

    /// The guard of a durable store with ranges ([`crate::guard`]).
    pub fn guard(&self) -> Option<&Arc<Guard>> {
        self.guard.as_ref()
    }

    /// The guard's start check ([`crate::guard`]): adds one to the store's epoch and refuses
    /// the store if it is below what `ledger` remembers, or below `mirrored` (the highest
    /// epoch the fleet's registry keeps for the store, read by the caller); claims the node's
    /// key, and drops from `saved` the store's tails when another copy of the state directory
    /// claimed them. `url` and `state_dir` are what the store was opened with. Call it before
    /// [`with_tails`](Self::with_tails). Nothing to do for a store without a guard.
    ///
    /// # Errors
    /// The store's, within the call timeout (it cannot be reached now).
    pub async fn check_start(
        &mut self,
        url: &str,
        state_dir: &Path,
        ledger: Option<&mut Ledger>,
        mirrored: Option<i64>,
        saved: &mut SavedTails,
    ) -> Result<StartCheck, SeqError> {
        let Some(guard) = &self.guard else {
            return Ok(StartCheck {
                tails_claimed: true,
                ..StartCheck::default()
            });
        };
        let identity = store_identity(url, state_dir);
        let remembered = ledger
            .as_ref()
            .and_then(|l| l.epoch(&identity))
            .max(mirrored);
        let node = ledger.as_ref().map(|l| l.node_key());
        let claim = saved.claim(&self.name, &identity);
        let key = Key::new(EPOCH_KEY)?;
        let mut check = self
            .bounded(
                "check the epoch of",
                &key,
                guard.start(remembered, node, claim),
            )
            .await?;
        if let (Some(ledger), Some(e)) = (ledger, check.epoch) {
            ledger.set_epoch(&identity, e);
        }
        self.identity = Some(identity.clone());
        if !check.tails_claimed && saved.holds(&self.name, &identity) {
            check.tails_dropped = saved.drop_store(&self.name, &identity);
        }
        // A floor raised or a key unregistered on any node while this one was stopped: its
        // saved tails may lie below it (crate::changes).
        if let Some(then) = saved.changes(&self.name, &identity) {
            let now = self.changes_now().await;
            if now != Some(then) {
                check.tails_stale = saved.drop_store(&self.name, &identity);
            }
        }
        Ok(check)
    }

    /// How many IDs of saved tails and of dropped keys' buffers no key has taken yet (parked,
    /// see [`StoreHandle`]).
    pub fn tails_pending(&self) -> u64 {
        self.keys.parked_ids()
    }

    /// Empties every key's WEAK buffer and the parked tails into `saved` (nothing without
    /// [`with_tails`](Self::with_tails)). No ID of them is served afterwards.
    fn drain_tails(&self, saved: &mut SavedTails) {
        let Some(identity) = &self.tails else {
            return;
        };
        for weak in self.keys.weak_keys() {
            let tail = weak.drain_tail();
            saved.add(&self.name, identity, weak.key().clone(), tail);
        }
        for (key, tail) in self.keys.drain_parked() {
            saved.add(&self.name, identity, key, tail);
        }
    }

    /// Claims the tails `saved` holds for this store on its node key ([`crate::guard`]), or
    /// drops them (gaps) when the claim cannot be made.
    async fn claim_tails(&self, saved: &mut SavedTails) {
        let (Some(identity), Some(guard)) = (&self.tails, &self.guard) else {
            return;
        };
        if !saved.holds(&self.name, identity) {
            return;
        }
        let Ok(key) = Key::new(EPOCH_KEY) else { return };
        match self
            .bounded("claim the tails of", &key, guard.claim())
            .await
        {
            Ok(Some(c)) => {
                saved.set_claim(&self.name, identity, c);
                match self.changes_now().await {
                    Some(g) => saved.set_changes(&self.name, identity, g),
                    None => {
                        let ids = saved.drop_store(&self.name, identity);
                        tracing::warn!(store = %self.name, "store {}: {ids} WEAK IDs not kept (gaps): {} could not be read", self.name, crate::CHANGES_KEY);
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                let ids = saved.drop_store(&self.name, identity);
                tracing::warn!(store = %self.name, "store {}: {ids} WEAK IDs not kept (gaps): their claim could not be written: {e}", self.name);
            }
        }
    }

    /// The longest a store call may take.
    pub fn timeout(&self) -> Duration {
        self.options.timeout
    }

    /// The same handle, holding keys within `limits` (call it before serving: keys held so far
    /// are let go).
    ///
    /// # Errors
    /// `Config` naming the field when the limits are not valid ([`KeyLimits::validate`]).
    pub fn key_limits(mut self, limits: KeyLimits) -> Result<Self, SeqError> {
        limits
            .validate()
            .map_err(|e| SeqError::config(e.to_string()))?;
        let keys = Keys::new(
            limits,
            Some(GiveBack::new(Arc::clone(&self.store), self.options.timeout)),
        );
        for (key, tail) in self.keys.drain_parked() {
            keys.park(key, tail);
        }
        keys.trim_parked(None);
        self.keys = Arc::new(keys);
        if let Some(g) = &self.guard {
            g.set_max_marks(limits.max_keys.saturating_mul(2));
        }
        Ok(self)
    }

    /// How many keys are held in memory now (each with its WEAK buffer, STRONG queue or both).
    pub fn keys_in_memory(&self) -> usize {
        self.keys.len()
    }

    /// The sums of the WEAK buffers (for metrics: no key is copied, nothing sorted).
    pub fn weak_totals(&self) -> WeakTotals {
        let mut totals = WeakTotals::default();
        for k in self.keys.weak_keys() {
            let info = k.info();
            totals.keys += 1;
            totals.buffered = totals.buffered.saturating_add(info.left);
            totals.max_step = totals.max_step.max(info.step);
        }
        totals
    }

    /// Every WEAK key's buffer, by key (for Leaf's cache view; [`weak_totals`](Self::weak_totals)
    /// when only the sums are wanted).
    pub fn weak_buffers(&self) -> Vec<(Key, crate::weak::BufferInfo)> {
        let mut all: Vec<_> = self
            .keys
            .weak_keys()
            .into_iter()
            .map(|k| (k.key().clone(), k.info()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Applies `bigger_than` (Layotto's `Init`), bounded by the call timeout per key. Saved
    /// tails ([`with_tails`](Self::with_tails), before or after this) are cut above the floors;
    /// every other node of the store drops what it holds within
    /// [`REACH`](crate::changes::REACH).
    pub async fn init(&self, bigger_than: &BTreeMap<Key, i64>) -> Result<(), SeqError> {
        for (key, floor) in bigger_than {
            self.bounded("apply bigger_than to", key, self.store.raise(key, *floor))
                .await?;
            let mut floors = locked(&self.floors);
            let kept = floors.entry(key.clone()).or_insert(*floor);
            *kept = (*kept).max(*floor);
            self.keys.cut_parked(key, *kept);
        }
        if !bigger_than.is_empty() {
            // Other nodes may hold IDs below a floor new to them (crate::changes).
            self.announce_change().await?;
        }
        Ok(())
    }

    /// The WEAK buffer of `key`, made on first use, then shared. The key is not dropped from
    /// memory while the buffer returned is held.
    pub fn weak_key(&self, key: &Key) -> Arc<WeakKey> {
        self.weak(key.as_str())
    }

    /// The STRONG queue of `key`, made on first use, then shared. The key is not dropped from
    /// memory while the queue returned is held.
    pub fn strong_key(&self, key: &Key) -> Arc<StrongKey> {
        self.strong(key.as_str())
    }

    /// [`weak_key`](Self::weak_key) by the key's text, which the caller has checked.
    fn weak(&self, key: &str) -> Arc<WeakKey> {
        self.keys.get(key, |key| {
            let tail = self.keys.unpark(&key);
            let weak = WeakKey::new(
                Arc::clone(&self.store),
                key,
                self.options.step,
                self.options.timeout,
            );
            if let Some(tail) = tail {
                weak.preload(tail);
            }
            weak
        })
    }

    /// [`strong_key`](Self::strong_key) by the key's text, which the caller has checked.
    fn strong(&self, key: &str) -> Arc<StrongKey> {
        self.keys.get(key, |key| {
            StrongKey::new(Arc::clone(&self.store), key, self.options.timeout)
        })
    }

    /// The next ID of `key` (checked as a [`Key`]).
    ///
    /// A key already served is found by its text: no allocation per call.
    pub async fn next_id(&self, key: &str, mode: Mode) -> Result<i64, SeqError> {
        let id = self.next_id_unmeasured(key, mode).await?;
        self.issued(mode, 1);
        Ok(id)
    }

    fn issued(&self, mode: Mode, n: u32) {
        self.issued[mode_index(mode)].fetch_add(u64::from(n), Ordering::Relaxed);
    }

    /// IDs issued so far in `mode` (through [`next_id`](Self::next_id) and
    /// [`next_ids`](Self::next_ids)), for metrics.
    pub fn issued_total(&self, mode: Mode) -> u64 {
        self.issued[mode_index(mode)].load(Ordering::Relaxed)
    }

    async fn next_id_unmeasured(&self, key: &str, mode: Mode) -> Result<i64, SeqError> {
        Key::check(key)?;
        crate::guard::not_floes_own(key)?;
        self.check_registered(key).await?;
        let caps = self.store.capabilities();
        match mode {
            // The buffer's Arc lives through the await: the key is not dropped meanwhile.
            Mode::Weak if caps.segments => self.weak(key).next().await,
            Mode::Weak => {
                let key = Key::new(key)?;
                self.bounded("get the next ID of", &key, self.store.next_id(&key))
                    .await
            }
            Mode::Strong if caps.strong => self.strong(key).next().await,
            Mode::Strong => Err(self.no_strong()),
        }
    }

    /// `count` IDs of `key` (1 to [`MAX_BATCH`](crate::MAX_BATCH)) in one call: see [`crate::batch`] for what a
    /// batch is in each mode. Whole or an error, never cut short.
    ///
    /// # Errors
    /// `InvalidArgument` naming `count` and its bounds, or the key; then as
    /// [`next_id`](Self::next_id).
    pub async fn next_ids(&self, key: &str, mode: Mode, count: u32) -> Result<Batch, SeqError> {
        let batch = self.next_ids_unmeasured(key, mode, count).await?;
        self.issued(mode, count);
        Ok(batch)
    }

    async fn next_ids_unmeasured(
        &self,
        key: &str,
        mode: Mode,
        count: u32,
    ) -> Result<Batch, SeqError> {
        Key::check(key)?;
        crate::guard::not_floes_own(key)?;
        check_count(count)?;
        self.check_registered(key).await?;
        let caps = self.store.capabilities();
        match mode {
            Mode::Weak if caps.segments => self.weak(key).next_batch(count).await,
            Mode::Weak => {
                // A store without segments (Snowflake): its own next_id, `count` times.
                let key = Key::new(key)?;
                let mut batch = Batch::new();
                for _ in 0..count {
                    let id = self
                        .bounded("get the next ID of", &key, self.store.next_id(&key))
                        .await?;
                    batch.push(id);
                }
                Ok(batch)
            }
            Mode::Strong if caps.strong => {
                let (first, last) = self.strong(key).next_run(count).await?;
                Ok(Batch::run(first, last))
            }
            Mode::Strong => Err(self.no_strong()),
        }
    }

    fn no_strong(&self) -> SeqError {
        SeqError::new(
            ErrorKind::Unsupported,
            format!(
                "store {} ({}) cannot serve STRONG: its IDs do not strictly increase across processes; use WEAK",
                self.name,
                self.store.kind()
            ),
        )
    }

    /// `size` IDs straight from the store (Layotto's `GetSegment`), for callers that cache.
    pub async fn segment(&self, key: &str, size: u32) -> Result<Segment, SeqError> {
        let key = Key::new(key)?;
        crate::guard::not_floes_own(key.as_str())?;
        if size == 0 || size > self.options.step.max {
            return Err(SeqError::new(
                ErrorKind::InvalidArgument,
                format!(
                    "invalid size: expected 1 to {}, found {size}",
                    self.options.step.max
                ),
            ));
        }
        self.bounded("reserve a segment of", &key, self.store.segment(&key, size))
            .await?
            .ok_or_else(|| {
                SeqError::new(
                    ErrorKind::Unsupported,
                    format!(
                        "store {} ({}) cannot reserve segments",
                        self.name,
                        self.store.kind()
                    ),
                )
            })
    }

    /// In registered-keys mode, refuses a key the store does not have registered with
    /// `UnknownKey`; a key held in memory was checked once since the registrations last
    /// changed ([`crate::changes`]: an unregistration on any node).
    async fn check_registered(&self, key: &str) -> Result<(), SeqError> {
        if !self.registered_only {
            return Ok(());
        }
        let gen = self.changes.registrations();
        if self.keys.checked_at(key, gen) {
            return Ok(());
        }
        let k = Key::new(key)?;
        let call = self.store.is_registered(&k);
        if self.bounded("check the registration of", &k, call).await? {
            // Marked if held now; a key held from this request on is checked at its next.
            self.keys.mark_checked(key, gen);
            Ok(())
        } else {
            Err(SeqError::new(
                ErrorKind::UnknownKey,
                format!(
                    "store {}: key {key:?} is not registered (this store serves registered keys only)",
                    self.name
                ),
            ))
        }
    }

    pub(crate) async fn bounded<T>(
        &self,
        what: &str,
        key: &Key,
        call: impl std::future::Future<Output = Result<T, SeqError>>,
    ) -> Result<T, SeqError> {
        within(&*self.store, self.options.timeout, what, key, call).await
    }
}

/// Stores by name: what a request's `store_name` picks.
#[derive(Debug, Default)]
pub struct Sequencer {
    stores: BTreeMap<String, Arc<StoreHandle>>,
    /// The state directory's ledger ([`keep_ledger`](Self::keep_ledger)).
    ledger: Option<Arc<Mutex<Ledger>>>,
}

impl Sequencer {
    /// No stores yet.
    pub fn new() -> Sequencer {
        Sequencer::default()
    }

    /// Adds a store, replacing one of the same name.
    pub fn add(&mut self, handle: StoreHandle) {
        self.stores.insert(handle.name.clone(), Arc::new(handle));
    }

    /// The store called `name`. An empty name means the only store, when there is one.
    pub fn store(&self, name: &str) -> Result<&Arc<StoreHandle>, SeqError> {
        if name.is_empty() && self.stores.len() == 1 {
            return Ok(self.stores.values().next().expect("one store"));
        }
        self.stores.get(name).ok_or_else(|| {
            if self.stores.is_empty() {
                SeqError::new(ErrorKind::UnknownStore, "Sequencer store is not configured")
            } else {
                SeqError::new(
                    ErrorKind::UnknownStore,
                    format!(
                        "Sequencer store {name} not found (configured: {})",
                        self.names().collect::<Vec<_>>().join(", ")
                    ),
                )
            }
        })
    }

    /// The names of the stores.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.stores.keys().map(String::as_str)
    }

    /// The stores.
    pub fn stores(&self) -> impl Iterator<Item = &Arc<StoreHandle>> {
        self.stores.values()
    }

    /// The next ID of `key` in store `store`.
    pub async fn next_id(&self, store: &str, key: &str, mode: Mode) -> Result<i64, SeqError> {
        self.store(store)?.next_id(key, mode).await
    }

    /// `count` IDs of `key` in store `store` ([`StoreHandle::next_ids`]).
    pub async fn next_ids(
        &self,
        store: &str,
        key: &str,
        mode: Mode,
        count: u32,
    ) -> Result<Batch, SeqError> {
        self.store(store)?.next_ids(key, mode, count).await
    }

    /// Keeps the epochs of the stores in `ledger` at close ([`crate::guard`]): each guarded
    /// store's epoch gets one more, written to the ledger, so that a store restored while this
    /// node is stopped from a backup taken while it served is refused at its next start.
    ///
    /// # Errors
    /// `Io` naming the path when the ledger cannot be written now.
    pub async fn keep_ledger(&mut self, ledger: Ledger) -> Result<(), SeqError> {
        let ledger = Arc::new(Mutex::new(ledger));
        let saving = Arc::clone(&ledger);
        tokio::task::spawn_blocking(move || locked(&saving).save())
            .await
            .map_err(|e| {
                SeqError::new(ErrorKind::Io, format!("ledger: the write stopped: {e}"))
            })??;
        self.ledger = Some(ledger);
        Ok(())
    }

    /// Watches every guarded store for as long as it lives ([`Guard::watch`]): its epoch read
    /// every `every`, one added to it now and then (kept in the ledger, if any), a refusal
    /// lifted once the operator's repair is seen. Call it once the stores are added, on the
    /// runtime that serves them.
    pub fn watch(&self, every: Duration) {
        for handle in self.stores.values() {
            let Some(guard) = &handle.guard else { continue };
            tokio::spawn(crate::changes::watch(handle));
            // Weak: the ledger's lock goes with the Sequencer, not with its watches (a new
            // Sequencer on the same directory in this process takes it at once).
            let kept = self
                .ledger
                .as_ref()
                .map(Arc::downgrade)
                .zip(handle.identity.clone());
            tokio::spawn(Guard::watch(guard, every, move |epoch| {
                let Some((ledger, identity)) = kept.clone() else {
                    return;
                };
                let Some(ledger) = ledger.upgrade() else {
                    return;
                };
                tokio::task::spawn_blocking(move || {
                    let mut l = locked(&ledger);
                    l.set_epoch(&identity, epoch);
                    if let Err(e) = l.save() {
                        tracing::warn!("sequencer: {e}");
                    }
                });
            }));
        }
    }

    /// One more to each guarded store's epoch, kept in the ledger (nothing without one).
    async fn bump_epochs(&self) {
        let Some(ledger) = &self.ledger else { return };
        let Ok(key) = Key::new(EPOCH_KEY) else { return };
        let mut bumped = Vec::new();
        for handle in self.stores.values() {
            let Some((g, identity)) = handle.guard.as_ref().zip(handle.identity.as_ref()) else {
                continue;
            };
            let call = async { Ok(g.bump_epoch().await) };
            if let Ok(Some(e)) = handle.bounded("add one to the epoch of", &key, call).await {
                bumped.push((identity.clone(), e));
            }
        }
        if bumped.is_empty() {
            return;
        }
        let ledger = Arc::clone(ledger);
        let saved = tokio::task::spawn_blocking(move || {
            let mut l = locked(&ledger);
            for (identity, e) in &bumped {
                l.set_epoch(identity, *e);
            }
            l.save()
        })
        .await;
        if let Ok(Err(e)) = saved {
            tracing::warn!("sequencer: {e}");
        }
    }

    /// Closes every store after keeping the unused tails of their WEAK segments in `dir`
    /// (see [`crate::tails`]): every key's buffer is emptied (none of its IDs is served
    /// afterwards), the tails of the stores given [`StoreHandle::with_tails`] are written
    /// atomically while `dir` is locked, and the stores are closed. Call it once, when no more
    /// requests are served. How many IDs were kept.
    ///
    /// # Errors
    /// `Unavailable` naming the path when the file cannot be written (the tails are then gaps;
    /// the stores are closed all the same).
    pub async fn close_keeping(&self, dir: &TailDir) -> Result<u64, SeqError> {
        self.bump_epochs().await;
        let mut saved = SavedTails::new();
        for handle in self.stores.values() {
            handle.drain_tails(&mut saved);
            handle.claim_tails(&mut saved).await;
        }
        let ids = saved.ids();
        // `dir` is borrowed until the write ends: its lock is held meanwhile.
        let path = dir.dir().to_path_buf();
        let written = tokio::task::spawn_blocking(move || crate::tails::save(&path, &saved))
            .await
            .unwrap_or_else(|e| {
                Err(SeqError::unavailable(format!(
                    "tails: the write stopped: {e}"
                )))
            });
        self.close().await;
        written.map(|()| ids)
    }

    /// Closes every store.
    pub async fn close(&self) {
        self.bump_epochs().await;
        for handle in self.stores.values() {
            handle.store.close().await;
        }
    }
}
