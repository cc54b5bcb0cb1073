//! The keys a store holds in memory (each key's WEAK buffer and STRONG queue), bounded in
//! number and in time.
//!
//! **Bounds** ([`KeyLimits`]): a key unused for `idle` (60 s by default) is dropped from memory
//! by a sweep that runs every `idle / 4` (at most a minute apart) in a task of the runtime; at
//! most `max_keys` (100,000 by default) are held at once. When a new key finds the map full,
//! the least recently used keys that can go are dropped: enough to make room, and at least a
//! batch of `max_keys / 16`, so that the scan that finds them (under the read lock: requests
//! for keys held go on meanwhile) is paid once per batch; the write lock is held only to remove
//! them, each checked again.
//!
//! **Which keys can go.** Only a key whose state nothing but the map holds: no request under
//! way, no background segment fetch, no STRONG increment in flight or waiting, no
//! [`WeakKey`](crate::weak::WeakKey) or [`StrongKey`](crate::strong::StrongKey) handed out by
//! [`StoreHandle::weak_key`](crate::StoreHandle::weak_key) and still held. Every way to reach a
//! key's state goes through the map's lock, so a state the map alone holds (its `Arc` count is
//! one) seen under the write lock stays so until it is dropped: dropping it races with
//! nothing.
//!
//! **When no key can go** (every key held is in use), the new key is held all the same, over
//! `max_keys`, and keys go as soon as they can: memory stays within `max_keys` plus the keys with
//! work under way at once (which the number of requests in flight bounds). So are new keys that
//! other callers added while room was being made for this one. Not served uncached:
//! an ID reserved apart from the key's buffer could be followed, in a later request, by an
//! older ID of the buffer, and WEAK IDs must follow the order of the requests. Not by dropping a
//! key in use either: its buffer could go on fetching after a new one did, with the same effect.
//! So at most one WEAK buffer and one STRONG queue of a key are alive in one handle at a time.
//!
//! **A dropped key keeps its place (parked).** When a key's WEAK buffer is dropped (idle, or
//! to make room), the rest of it (the current segment's unused end and the next segment, at
//! most two ranges) is *parked*: kept in a second map, by key, under the same lock as the
//! drop. When the key is asked for again, its new buffer serves the parked IDs first, so a
//! quiet key goes on 1, 2, 3 however long it was idle. At most twice `max_keys` keys are parked
//! (at least 16; a key's text and two ranges each, a fifth of a held key or less);
//! beyond that the least recently parked go, each given back to the store when nothing was
//! reserved after it ([`Store::give_back`](crate::Store::give_back): the key's next segment then
//! starts where it stopped) and a gap otherwise. Give-backs run one after another in at most two
//! tasks per store, at most 4,096 tails a task: a crowd of keys let go at once becomes gaps
//! rather than a flood of store calls (or of tasks in memory). A graceful stop keeps the parked tails with
//! the others ([`crate::tails`]).
//!
//! **Gaps, never repeats.** Parked IDs were never served and are served only by the key's next
//! buffer in this process (taken out under the map's lock as it is made), or given back to the
//! store only while nothing was reserved after them. After a crash they are gaps. A thread's
//! block of a dropped buffer ([`WeakKey::next_local`](crate::weak::WeakKey::next_local)) is a
//! gap.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::Duration;

use floe_core::sequence::{Key, Segment};
use tokio::time::Instant;

use crate::strong::StrongKey;
use crate::weak::WeakKey;
use crate::Store;

/// How many keys a store holds in memory, and for how long (see [`StoreHandle`]'s docs).
///
/// [`StoreHandle`]: crate::StoreHandle
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyLimits {
    /// A key unused for this long is dropped from memory (by a sweep every quarter of it, at
    /// most a minute apart): its buffered WEAK IDs become gaps, and its next request reserves a
    /// fresh segment.
    pub idle: Duration,
    /// The most keys held in memory at once. When a new key finds them all held, the least
    /// recently used keys with no work under way are dropped (at least `max_keys / 16` of
    /// them); if every key held has work under way, the new key is held all the same (over the
    /// limit, until keys can go).
    pub max_keys: usize,
}

impl Default for KeyLimits {
    /// 60 s idle, 100,000 keys.
    fn default() -> Self {
        KeyLimits {
            idle: Duration::from_secs(60),
            max_keys: 100_000,
        }
    }
}

impl KeyLimits {
    /// Checks the limits, naming the field at fault (`max_keys`, `idle`).
    ///
    /// # Errors
    /// When `max_keys` is 0 or `idle` is zero.
    pub fn validate(&self) -> Result<(), floe_core::FieldError> {
        use floe_core::FieldError;
        if self.max_keys == 0 {
            return Err(FieldError::new(
                "max_keys",
                "expected at least 1 key held in memory, found 0",
            ));
        }
        if self.idle.is_zero() {
            return Err(FieldError::new(
                "idle",
                "expected a positive duration, found 0",
            ));
        }
        Ok(())
    }

    /// How often idle keys are looked for: every quarter of `idle`, from 1 ms to 1 min.
    fn sweep_every(&self) -> Duration {
        (self.idle / 4).clamp(Duration::from_millis(1), Duration::from_secs(60))
    }

    /// How many keys' tails are parked at most: twice `max_keys` (a graceful stop keeps the
    /// tails of the keys held and of those parked, which the next start parks), at least 16.
    fn most_parked(&self) -> usize {
        self.max_keys.saturating_mul(2).max(16)
    }

    /// How many keys one scan of a full map drops, at least.
    fn batch(&self) -> usize {
        (self.max_keys / 16).max(1)
    }
}

/// One key's state.
#[derive(Debug)]
pub(crate) struct Entry {
    weak: OnceLock<Arc<WeakKey>>,
    strong: OnceLock<Arc<StrongKey>>,
    /// When it was last used: milliseconds since the map was made.
    used: AtomicU64,
    /// The generation of registrations ([`crate::changes`]) at which the key was last found
    /// registered (registered-keys mode); 0: not yet.
    checked: AtomicU64,
}

impl Entry {
    fn new(now: u64) -> Entry {
        Entry {
            weak: OnceLock::new(),
            strong: OnceLock::new(),
            used: AtomicU64::new(now),
            checked: AtomicU64::new(0),
        }
    }

    /// Marks it used at `now`. A plain load first, so that a key used by many threads at once
    /// is written at most once a millisecond.
    fn touch(&self, now: u64) {
        if self.used.load(Ordering::Relaxed) < now {
            self.used.store(now, Ordering::Relaxed);
        }
    }

    fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Whether nothing but the map holds its state. Only meaningful under the map's write lock
    /// (then nobody can take a new reference, see the module docs).
    fn unused(&self) -> bool {
        self.weak.get().is_none_or(|w| Arc::strong_count(w) == 1)
            && self.strong.get().is_none_or(|s| Arc::strong_count(s) == 1)
    }
}

/// What [`Keys`] hands out: the state of one kind.
pub(crate) trait Kind: Sized {
    fn cell(entry: &Entry) -> &OnceLock<Arc<Self>>;
}

impl Kind for WeakKey {
    fn cell(entry: &Entry) -> &OnceLock<Arc<Self>> {
        &entry.weak
    }
}

impl Kind for StrongKey {
    fn cell(entry: &Entry) -> &OnceLock<Arc<Self>> {
        &entry.strong
    }
}

/// The unused tail of a dropped WEAK buffer (at most two ascending ranges), and when it was
/// parked.
#[derive(Debug)]
struct ParkedTail {
    tail: Vec<Segment>,
    parked: u64,
}

/// Where parked tails beyond the limit are given back: the store, and the bound of a call.
#[derive(Debug, Clone)]
pub(crate) struct GiveBack {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) timeout: Duration,
    /// Tasks giving tails back now.
    pub(crate) running: Arc<AtomicUsize>,
}

impl GiveBack {
    /// Tails of `store` given back within `timeout` a call.
    pub(crate) fn new(store: Arc<dyn Store>, timeout: Duration) -> GiveBack {
        GiveBack {
            store,
            timeout,
            running: Arc::default(),
        }
    }
}

/// The most tasks giving tails back at once, per store.
const GIVE_BACKS_AT_ONCE: usize = 2;
/// The most tails one task gives back (the rest of a larger batch are gaps).
const GIVE_BACK_BATCH: usize = 4096;

/// Counts a give-back task as running until it is dropped.
struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The keys of one store held in memory.
#[derive(Debug)]
pub(crate) struct Keys {
    limits: KeyLimits,
    /// The time `Entry::used` counts from (tokio's clock: a paused clock in tests).
    start: Instant,
    map: RwLock<HashMap<Key, Entry>>,
    /// The tails of dropped buffers and of a restart's saved ones, by key (see the module
    /// docs). Locked after `map`, never before it.
    parked: Mutex<HashMap<Key, ParkedTail>>,
    /// Where the tails parked beyond `max_keys` go (none: they are gaps).
    give_back: Option<GiveBack>,
    /// Held while room is made, so that callers that find the map full at once scan it once.
    making_room: Mutex<()>,
    sweeping: AtomicBool,
}

impl Keys {
    pub(crate) fn new(limits: KeyLimits, give_back: Option<GiveBack>) -> Keys {
        Keys {
            limits,
            start: Instant::now(),
            map: RwLock::new(HashMap::new()),
            parked: Mutex::new(HashMap::new()),
            give_back,
            making_room: Mutex::new(()),
            sweeping: AtomicBool::new(false),
        }
    }

    /// Whether `key` is held and was found registered at generation `gen` or later.
    pub(crate) fn checked_at(&self, key: &str, gen: u64) -> bool {
        self.read()
            .get(key)
            .is_some_and(|e| e.checked.load(Ordering::Acquire) >= gen)
    }

    /// Records that `key` (if held) was found registered at generation `gen`.
    pub(crate) fn mark_checked(&self, key: &str, gen: u64) {
        if let Some(e) = self.read().get(key) {
            e.checked.fetch_max(gen, Ordering::AcqRel);
        }
    }

    /// Lets `key` go if nothing but the map holds it (its WEAK tail parked as usual).
    pub(crate) fn let_go(&self, key: &Key) {
        self.remove(vec![key.clone()], |_| true);
    }

    /// `key`'s WEAK buffer, if it is held.
    pub(crate) fn weak_of(&self, key: &Key) -> Option<Arc<WeakKey>> {
        self.read().get(key).and_then(|e| e.weak.get().cloned())
    }

    /// The first ID of `key`'s parked tail, if it has one.
    pub(crate) fn parked_first(&self, key: &Key) -> Option<i64> {
        self.parked()
            .get(key)
            .and_then(|p| p.tail.iter().map(|s| s.start).min())
    }

    /// How many keys are held now.
    pub(crate) fn len(&self) -> usize {
        self.read().len()
    }

    fn parked(&self) -> std::sync::MutexGuard<'_, HashMap<Key, ParkedTail>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes `key`'s parked tail (its new buffer serves it first). Called as the key's buffer
    /// is made, under the map's lock.
    pub(crate) fn unpark(&self, key: &Key) -> Option<Vec<Segment>> {
        self.parked().remove(key).map(|p| p.tail)
    }

    /// Parks `tail` for `key` (a restart's saved tail, or a dropped buffer's); the caller then
    /// holds the parked keys within their bound ([`trim_parked`](Self::trim_parked)).
    pub(crate) fn park(&self, key: Key, tail: Vec<Segment>) {
        if !tail.is_empty() {
            let now = self.now();
            self.parked().insert(key, ParkedTail { tail, parked: now });
        }
    }

    /// Holds the parked keys within their bound: the least recently parked beyond it (a batch
    /// at least, so that the scan is paid once per batch) are given back to the store or
    /// dropped, never `spare`'s (the key room is being made for: its new buffer takes the tail
    /// next). Called without the map's lock.
    pub(crate) fn trim_parked(&self, spare: Option<&str>) {
        let most = self.limits.most_parked();
        let over = {
            let mut parked = self.parked();
            if parked.len() <= most {
                return;
            }
            let mut oldest: Vec<(u64, &Key)> = parked
                .iter()
                .filter(|(k, _)| Some(k.as_str()) != spare)
                .map(|(k, p)| (p.parked, k))
                .collect();
            let batch = self
                .limits
                .batch()
                .max(parked.len() - most)
                .min(oldest.len());
            if batch == 0 {
                return;
            }
            oldest.select_nth_unstable(batch - 1);
            let victims: Vec<Key> = oldest[..batch].iter().map(|(_, k)| (*k).clone()).collect();
            let over: Vec<(Key, Vec<Segment>)> = victims
                .into_iter()
                .filter_map(|k| parked.remove(&k).map(|p| (k, p.tail)))
                .collect();
            shrink(&mut parked);
            over
        };
        self.give_back_all(over);
    }

    /// Gives the tails back to the store, one after another in a task of their own, at most
    /// [`GIVE_BACKS_AT_ONCE`] such tasks per store at a time (best effort: a tail the store
    /// does not take back, or beyond those bounds, is a gap), so that many keys let go at once
    /// never flood the store.
    fn give_back_all(&self, tails: Vec<(Key, Vec<Segment>)>) {
        let (Some(to), Ok(runtime)) = (&self.give_back, tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let running = Arc::clone(&to.running);
        let started = running.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < GIVE_BACKS_AT_ONCE).then_some(n + 1)
        });
        if started.is_err() {
            return;
        }
        let to = to.clone();
        runtime.spawn(async move {
            let _done = Running(running);
            for (key, tail) in tails.into_iter().take(GIVE_BACK_BATCH) {
                let Some((first, last)) = returnable(&tail) else {
                    continue;
                };
                let call = to.store.give_back(&key, first, last);
                // Not taken back (or no answer): a gap, as it always was.
                let _ = crate::within(&*to.store, to.timeout, "give back IDs of", &key, call).await;
            }
        });
    }

    /// Every parked tail, taken out (a graceful stop keeps them).
    pub(crate) fn drain_parked(&self) -> Vec<(Key, Vec<Segment>)> {
        self.parked().drain().map(|(k, p)| (k, p.tail)).collect()
    }

    /// How many IDs are parked.
    pub(crate) fn parked_ids(&self) -> u64 {
        self.parked()
            .values()
            .flat_map(|p| p.tail.iter())
            .map(|s| crate::tails::ids_in(*s))
            .fold(0u64, u64::saturating_add)
    }

    /// Cuts `key`'s parked tail above `floor` (a `bigger_than` applied after it was parked).
    pub(crate) fn cut_parked(&self, key: &Key, floor: i64) {
        let mut parked = self.parked();
        if let Some(p) = parked.remove(key) {
            let tail = crate::tails::above(p.tail, floor);
            if !tail.is_empty() {
                parked.insert(
                    key.clone(),
                    ParkedTail {
                        tail,
                        parked: p.parked,
                    },
                );
            }
        }
    }

    /// The WEAK buffers held now.
    pub(crate) fn weak_keys(&self) -> Vec<Arc<WeakKey>> {
        self.read()
            .values()
            .filter_map(|e| e.weak.get().cloned())
            .collect()
    }

    fn read(&self) -> RwLockReadGuard<'_, HashMap<Key, Entry>> {
        // A panic while the lock was held leaves a map of whole entries.
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<Key, Entry>> {
        self.map.write().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> u64 {
        let ms = Instant::now()
            .saturating_duration_since(self.start)
            .as_millis();
        u64::try_from(ms).unwrap_or(u64::MAX)
    }

    /// The state of `key` (a checked key's text), made by `make` on first use. A key already
    /// held is found under the read lock, by its text: no allocation.
    pub(crate) fn get<T: Kind>(self: &Arc<Self>, key: &str, make: impl FnOnce(Key) -> T) -> Arc<T> {
        let now = self.now();
        {
            let map = self.read();
            if let Some((k, entry)) = map.get_key_value(key) {
                return hand_out(k, entry, now, make);
            }
        }
        self.start_sweeper();
        let mut made_room = false;
        loop {
            let mut map = self.write();
            if let Some((k, entry)) = map.get_key_value(key) {
                return hand_out(k, entry, now, make);
            }
            // Full: room is made once (not under the write lock); if the map is full again by
            // then, only of keys in use or of keys added meanwhile, the key is held over it.
            if map.len() < self.limits.max_keys || made_room {
                let key = Key::new(key).expect("callers pass a checked key");
                let entry = map.entry(key.clone()).or_insert_with(|| Entry::new(now));
                return hand_out(&key, entry, now, make);
            }
            drop(map);
            // A scan of the map on this (async) thread: paid once per max_keys / 16 new keys.
            self.make_room(key);
            made_room = true;
        }
    }

    /// Drops the least recently used keys that can go: as many as make room for one more key,
    /// and at least a batch (ties on the same millisecond broken arbitrarily). They are picked
    /// under the read lock and removed under the write lock, each only if it still can go and
    /// was not used since.
    fn make_room(&self, for_key: &str) {
        let _one = self.making_room.lock().unwrap_or_else(|p| p.into_inner());
        let (victims, newest) = {
            let map = self.read();
            if map.len() < self.limits.max_keys {
                return; // made by the caller before us
            }
            let mut candidates: Vec<(u64, &Key)> = map
                .iter()
                .filter(|(_, e)| e.unused())
                .map(|(k, e)| (e.used(), k))
                .collect();
            if candidates.is_empty() {
                return;
            }
            let room = map.len() + 1 - self.limits.max_keys;
            let batch = self.limits.batch().max(room).min(candidates.len());
            candidates.select_nth_unstable(batch - 1);
            candidates.truncate(batch);
            let newest = candidates.iter().map(|c| c.0).max().unwrap_or(0);
            let victims: Vec<Key> = candidates.into_iter().map(|(_, k)| k.clone()).collect();
            (victims, newest)
        };
        self.remove_sparing(victims, |e| e.used() <= newest, Some(for_key));
    }

    /// Removes those of `keys` that still can go and pass `still`, under the write lock; how
    /// many went. Their WEAK buffers' tails are parked under the same lock (so the key's next
    /// buffer finds them); their states are dropped after the lock is let go.
    fn remove(&self, keys: Vec<Key>, still: impl Fn(&Entry) -> bool) -> usize {
        self.remove_sparing(keys, still, None)
    }

    /// [`remove`](Self::remove), never letting `spare`'s parked tail go when the parked keys
    /// are trimmed after it (once the map's lock is let go).
    fn remove_sparing(
        &self,
        keys: Vec<Key>,
        still: impl Fn(&Entry) -> bool,
        spare: Option<&str>,
    ) -> usize {
        let mut gone = Vec::with_capacity(keys.len());
        {
            let mut map = self.write();
            for key in keys {
                if map.get(&key).is_some_and(|e| e.unused() && still(e)) {
                    if let Some(entry) = map.remove(&key) {
                        if let Some(weak) = entry.weak.get() {
                            // Under the lock: the key's next buffer, made under it too, finds
                            // the tail.
                            self.park(key, weak.drain_tail());
                        }
                        gone.push(entry);
                    }
                }
            }
            shrink(&mut map);
        }
        self.trim_parked(spare);
        gone.len()
    }

    /// Stamps before this one are idle at `now`.
    fn idle_before(&self, now: u64) -> u64 {
        let idle = u64::try_from(self.limits.idle.as_millis()).unwrap_or(u64::MAX);
        now.saturating_sub(idle)
    }

    /// Drops every key idle at `now` that can go; how many went. They are picked under the read
    /// lock and removed under the write lock, each only if it still can go and is still idle.
    pub(crate) fn expire(&self, now: u64) -> usize {
        let idle = self.idle_before(now);
        let expired = |e: &Entry| e.used() < idle;
        let victims: Vec<Key> = self
            .read()
            .iter()
            .filter(|(_, e)| expired(e) && e.unused())
            .map(|(k, _)| k.clone())
            .collect();
        if victims.is_empty() {
            return 0;
        }
        self.remove(victims, expired)
    }

    /// Starts the task that drops idle keys on the runtime of the caller that adds a key,
    /// unless one runs (none without a runtime: then keys go only when the map is full). It
    /// holds the map weakly and ends when the map is dropped; if its runtime shuts down first,
    /// the next key added starts another.
    fn start_sweeper(self: &Arc<Self>) {
        if self.sweeping.load(Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.sweeping.swap(true, Ordering::Relaxed) {
            return;
        }
        let keys: Weak<Keys> = Arc::downgrade(self);
        let every = self.limits.sweep_every();
        runtime.spawn(async move {
            let _running = Sweeping(keys.clone());
            let mut ticks = tokio::time::interval_at(Instant::now() + every, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(keys) = keys.upgrade() else {
                    return;
                };
                let now = keys.now();
                // A scan of up to `max_keys` entries: off the async worker threads.
                if tokio::task::spawn_blocking(move || keys.expire(now))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
    }
}

/// Marks the sweeper gone when its task ends or is dropped (its runtime shut down).
struct Sweeping(Weak<Keys>);

impl Drop for Sweeping {
    fn drop(&mut self) {
        if let Some(keys) = self.0.upgrade() {
            keys.sweeping.store(false, Ordering::Relaxed);
        }
    }
}

/// The IDs of a tail that can be given back to the store: its last range, and the one before
/// when the two join (the unused IDs that end at the tail's last reservation).
pub(crate) fn returnable(tail: &[Segment]) -> Option<(i64, i64)> {
    let mut ranges = tail.iter().rev();
    let last = ranges.next()?;
    let mut first = last.start;
    for s in ranges {
        if s.end.checked_add(1) == Some(first) {
            first = s.start;
        } else {
            break;
        }
    }
    (first <= last.end).then_some((first, last.end))
}

/// Gives memory back once the map holds far fewer keys than it has room for.
fn shrink<V>(map: &mut HashMap<Key, V>) {
    if map.capacity() > 1024 && map.len() < map.capacity() / 4 {
        map.shrink_to(map.len() * 2);
    }
}

/// `key`'s state of kind `T` in `entry`, made by `make` if it has none yet; the entry is
/// marked used at `now`.
fn hand_out<T: Kind>(key: &Key, entry: &Entry, now: u64, make: impl FnOnce(Key) -> T) -> Arc<T> {
    entry.touch(now);
    Arc::clone(T::cell(entry).get_or_init(|| Arc::new(make(key.clone()))))
}
