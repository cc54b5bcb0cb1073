//! The local segment cache under [`WeakSequence`](crate::WeakSequence) and
//! [`SnowflakeBuffer`](crate::SnowflakeBuffer): values fetched from a source a segment at a
//! time, double-buffered as Leaf's segment mode does, handed out from thread-local blocks.
//!
//! **Values** are `u64`s held as runs of consecutive values (a WEAK segment is usually one
//! run; a batch of Snowflake IDs is one run per millisecond, since IDs of one millisecond
//! differ in their low sequence bits only). The typed wrappers map their IDs onto `u64`
//! keeping order (sequence IDs: `i64` with its sign bit flipped).
//!
//! **Three levels.**
//! - The *source* ([`Source`]): one fetch of `segment` values (one gRPC call).
//! - The *shared buffer*, under a short `std` mutex: the rest of the current segment and at
//!   most one next segment. Once `refill_at_percent` of the current segment is used, the next
//!   one is fetched by a background task, so callers rarely wait for the server. One fetch at a
//!   time; callers waiting for it share its result, an error included.
//! - Each thread's *block*: up to `block` values taken from the shared buffer at once and
//!   handed out with no lock and no atomic read-modify-write (a thread-local cell), which is
//!   why [`Cache::try_next`] costs about what an uncontended `fetch_add` does.
//!
//! **Exactly once.** Every value of a fetched segment goes either to exactly one caller or to
//! nobody (a gap): values are moved out of the shared buffer under its lock into one thread's
//! block, and a block is only ever read by its thread. Gaps: a thread's block of a segment
//! that is no longer the current one is dropped at its next call (so a thread's values lag
//! the others' by at most one segment); blocks of a dropped cache; a segment fetched after the
//! cache was dropped. WEAK sequences allow gaps; none of these values is handed out twice.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::Error;

/// The largest segment: the largest `max_batch` a server takes.
pub const MAX_SEGMENT: u32 = 1_000_000;

/// The default segment: a server's default `max_batch`.
pub const DEFAULT_SEGMENT: u32 = 10_000;

/// The largest block a thread takes at once.
pub const MAX_BLOCK: u32 = 4_096;

/// How long background fetches wait after a failed one before trying again (a caller that
/// finds nothing buffered fetches at once, whatever this says).
const PREFETCH_RETRY: Duration = Duration::from_millis(100);

/// How a cache fetches and hands out its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheOptions {
    /// Values per fetch (one gRPC call): 1 to [`MAX_SEGMENT`], and at most the server's
    /// `max_batch` (10,000 by default; a larger segment is the server's `INVALID_ARGUMENT`).
    pub segment: u32,
    /// Values a thread takes from the shared buffer at once: 1 to the segment and to
    /// [`MAX_BLOCK`]; `None` is a 32nd of the segment, at most 1,024. Smaller blocks keep the
    /// threads' values closer together; larger ones take the lock less often.
    pub block: Option<u32>,
    /// The share of the current segment used, in percent (0 to 100), at which the next one is
    /// fetched in the background (Leaf: 10). 100 fetches only once the current one is used up.
    pub refill_at_percent: u8,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            segment: DEFAULT_SEGMENT,
            block: None,
            refill_at_percent: 10,
        }
    }
}

impl CacheOptions {
    /// The options with `segment` values per fetch.
    pub fn segment(segment: u32) -> CacheOptions {
        CacheOptions {
            segment,
            ..CacheOptions::default()
        }
    }

    /// The block size these options give, once checked.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the option out of range.
    pub fn check(&self) -> Result<u32, Error> {
        if self.segment == 0 || self.segment > MAX_SEGMENT {
            return Err(Error::invalid(format!(
                "segment: expected 1 to {MAX_SEGMENT}, found {}",
                self.segment
            )));
        }
        if self.refill_at_percent > 100 {
            return Err(Error::invalid(format!(
                "refill_at_percent: expected 0 to 100, found {}",
                self.refill_at_percent
            )));
        }
        match self.block {
            None => Ok((self.segment / 32).clamp(1, 1024)),
            Some(b) if b == 0 || b > self.segment || b > MAX_BLOCK => Err(Error::invalid(format!(
                "block: expected 1 to {} (the segment, at most {MAX_BLOCK}), found {b}",
                self.segment.min(MAX_BLOCK)
            ))),
            Some(b) => Ok(b),
        }
    }
}

/// Consecutive values `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) first: u64,
    pub(crate) last: u64,
}

impl Run {
    /// How many values (at least 1; `u64::MAX` for a run of every value but one, as a run of
    /// all 2^64 values never comes from a fetch of at most a million).
    fn len(&self) -> u64 {
        (self.last - self.first).saturating_add(1)
    }
}

/// `values` as runs of consecutive values, in their order.
pub(crate) fn runs_of(values: impl IntoIterator<Item = u64>) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for v in values {
        match runs.last_mut() {
            Some(r) if r.last.checked_add(1) == Some(v) => r.last = v,
            _ => runs.push(Run { first: v, last: v }),
        }
    }
    runs
}

/// One fetch's future.
pub(crate) type Fetch = Pin<Box<dyn Future<Output = Result<Vec<u64>, Error>> + Send>>;

/// Where a cache's values come from: `fetch(n)` must answer exactly `n` values, each never
/// answered before (by any fetch of any client), or an error.
pub(crate) trait Source: Send + Sync + 'static {
    /// `n` new values.
    fn fetch(&self, n: u32) -> Fetch;
}

/// A thread's block of one cache: values `next..end` (end excluded, so `u64::MAX` is never
/// in a block: it is handed out from the shared buffer) of the cache's segment `gen`.
#[derive(Clone, Copy, Debug)]
struct Block {
    owner: u64,
    gen: u64,
    next: u64,
    end: u64,
}

const NO_BLOCK: Block = Block {
    owner: 0,
    gen: 0,
    next: 0,
    end: 0,
};

/// Caches whose slot is below this keep their blocks in [`FAST`].
const FAST_SLOTS: usize = 64;

thread_local! {
    /// This thread's blocks of the first caches, by slot: plain cells with nothing to drop,
    /// so reaching them costs no lazy set-up.
    static FAST: [Cell<Block>; FAST_SLOTS] = const { [const { Cell::new(NO_BLOCK) }; FAST_SLOTS] };
    /// The blocks of caches with higher slots.
    static MORE: RefCell<Vec<Block>> = const { RefCell::new(Vec::new()) };
}

/// Slots of dropped caches, for reuse (blocks are told apart by their owner, never reused),
/// and the number of slots ever taken.
static FREE_SLOTS: Mutex<(usize, Vec<usize>)> = Mutex::new((0, Vec::new()));
/// Owner 0 is no cache's ([`NO_BLOCK`]).
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

fn take_slot() -> usize {
    let mut slots = FREE_SLOTS.lock().unwrap_or_else(|p| p.into_inner());
    match slots.1.pop() {
        Some(slot) => slot,
        None => {
            slots.0 += 1;
            slots.0 - 1
        }
    }
}

/// What a cache has done so far, and holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Fetches started (one gRPC call each).
    pub fetches: u64,
    /// Fetches that failed.
    pub failures: u64,
    /// Calls that found nothing buffered and waited for a fetch (or, for `try_next`, returned
    /// `None`).
    pub waits: u64,
    /// Values handed out to threads' blocks or callers from the shared buffer.
    pub taken: u64,
    /// Values left in the shared buffer: the current segment's rest and the next segment.
    pub buffered: u64,
    /// Whether the next segment is fetched and waiting.
    pub next_ready: bool,
    /// Whether a fetch is under way.
    pub fetching: bool,
}

/// The shared buffer.
#[derive(Debug)]
struct State {
    /// The rest of the current segment, in order.
    current: VecDeque<Run>,
    /// Values left in `current`.
    left: u64,
    /// Size of the current segment, for the prefetch threshold.
    current_len: u64,
    /// The next segment and its size.
    next: Option<(Vec<Run>, u64)>,
    fetching: bool,
    /// Fetches finished; a waiter knows the fetch it waited for has ended.
    rounds: u64,
    /// The last fetch's error, with its round.
    failed: Option<(u64, Error)>,
    /// No background fetch before this (after a failure).
    retry_at: Option<Instant>,
    stats: CacheStats,
}

/// A segment cache over a [`Source`].
pub(crate) struct Cache {
    source: Box<dyn Source>,
    segment: u32,
    block: u32,
    refill_at_percent: u8,
    runtime: tokio::runtime::Handle,
    slot: usize,
    owner: u64,
    /// Bumped each time a segment becomes the current one; blocks of older ones are dropped.
    gen: AtomicU64,
    state: Mutex<State>,
    /// Woken when a fetch ends.
    fetched: Notify,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("segment", &self.segment)
            .field("block", &self.block)
            .field("refill_at_percent", &self.refill_at_percent)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        FREE_SLOTS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .push(self.slot);
    }
}

/// Marks the fetch as ended however its task ends: with its result, or cancelled (the runtime
/// shut down, the task dropped) so that waiters are never left waiting.
struct Fetching {
    cache: Arc<Cache>,
    result: Option<Result<Vec<u64>, Error>>,
}

impl Fetching {
    fn done(&mut self, result: Result<Vec<u64>, Error>) {
        self.result = Some(result);
    }
}

impl Drop for Fetching {
    fn drop(&mut self) {
        let result = self.result.take().unwrap_or_else(|| {
            Err(Error::Unavailable(
                "the fetch was cancelled (its runtime shut down)".into(),
            ))
        });
        self.cache.finish_fetch(result);
    }
}

/// A fetch marked as under way, to spawn once the state's lock is released.
#[must_use]
struct Spawn(Arc<Cache>);

impl Spawn {
    fn spawn(self) {
        let cache = self.0;
        let fetch = cache.source.fetch(cache.segment);
        let runtime = cache.runtime.clone();
        let mut guard = Fetching {
            cache,
            result: None,
        };
        // A task dropped unrun still ends the fetch, by its guard.
        runtime.spawn(async move {
            let result = fetch.await;
            guard.done(result);
        });
    }
}

impl Cache {
    /// An empty cache: nothing is fetched until the first call. Background fetches run on
    /// `runtime`.
    pub(crate) fn new(
        source: Box<dyn Source>,
        options: CacheOptions,
        runtime: tokio::runtime::Handle,
    ) -> Result<Arc<Cache>, Error> {
        let block = options.check()?;
        Ok(Arc::new(Cache {
            source,
            segment: options.segment,
            block,
            refill_at_percent: options.refill_at_percent,
            runtime,
            slot: take_slot(),
            owner: NEXT_OWNER.fetch_add(1, Ordering::Relaxed),
            gen: AtomicU64::new(0),
            state: Mutex::new(State {
                current: VecDeque::new(),
                left: 0,
                current_len: 0,
                next: None,
                fetching: false,
                rounds: 0,
                failed: None,
                retry_at: None,
                stats: CacheStats::default(),
            }),
            fetched: Notify::new(),
        }))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the cache has done and holds.
    pub(crate) fn stats(&self) -> CacheStats {
        let st = self.state();
        let mut stats = st.stats;
        stats.buffered = st.left + st.next.as_ref().map_or(0, |n| n.1);
        stats.next_ready = st.next.is_some();
        stats.fetching = st.fetching;
        stats
    }

    /// The next value of this thread's block: no lock, no atomic read-modify-write.
    #[inline]
    fn take_from_block(&self) -> Option<u64> {
        let gen = self.gen.load(Ordering::Acquire);
        let take = |b: &mut Block| {
            if b.owner == self.owner && b.gen == gen && b.next < b.end {
                b.next += 1;
                Some(b.next - 1)
            } else {
                None
            }
        };
        if self.slot < FAST_SLOTS {
            FAST.try_with(|cells| {
                let cell = &cells[self.slot];
                let mut b = cell.get();
                let v = take(&mut b)?;
                cell.set(b);
                Some(v)
            })
            .ok()
            .flatten()
        } else {
            MORE.try_with(|blocks| blocks.borrow_mut().get_mut(self.slot).and_then(take))
                .ok()
                .flatten()
        }
    }

    fn set_block(&self, block: Block) {
        let slot = self.slot;
        if slot < FAST_SLOTS {
            let _ = FAST.try_with(|cells| cells[slot].set(block));
        } else {
            let _ = MORE.try_with(|blocks| {
                let mut blocks = blocks.borrow_mut();
                if blocks.len() <= slot {
                    blocks.resize(slot + 1, NO_BLOCK);
                }
                blocks[slot] = block;
            });
        }
    }

    /// The next value without waiting: from this thread's block, else a new block from the
    /// shared buffer (a short lock). `None` when nothing is buffered: a fetch is then under
    /// way (started by this call if none was), and [`next`](Self::next) waits for it.
    #[inline]
    pub(crate) fn try_next(self: &Arc<Self>) -> Option<u64> {
        match self.take_from_block() {
            Some(v) => Some(v),
            None => self.try_refill(),
        }
    }

    #[cold]
    fn try_refill(self: &Arc<Self>) -> Option<u64> {
        let (v, fetch) = {
            let mut st = self.state();
            let (v, mut fetch) = self.take_block(&mut st);
            if v.is_none() {
                st.stats.waits += 1;
                if fetch.is_none() && !st.fetching {
                    fetch = Some(self.start_fetch(&mut st));
                }
            }
            (v, fetch)
        };
        if let Some(fetch) = fetch {
            fetch.spawn();
        }
        v
    }

    /// The next value: from this thread's block at once, else waits for the shared buffer.
    #[inline]
    pub(crate) fn next(self: &Arc<Self>) -> Next<'_> {
        match self.take_from_block() {
            Some(v) => Next::Ready(Some(v)),
            None => Next::Wait(Box::pin(self.next_slow())),
        }
    }

    async fn next_slow(self: &Arc<Self>) -> Result<u64, Error> {
        let mut waited_for: Option<u64> = None;
        loop {
            let (fetched, fetch) = {
                let mut st = self.state();
                let (v, fetch) = self.take_block(&mut st);
                if let Some(v) = v {
                    drop(st);
                    if let Some(fetch) = fetch {
                        fetch.spawn();
                    }
                    return Ok(v);
                }
                if let (Some(round), Some((failed_round, error))) = (waited_for, &st.failed) {
                    // The fetch this call waited for failed: its error, not another wait.
                    if *failed_round > round {
                        return Err(error.clone());
                    }
                }
                if waited_for.is_none() {
                    st.stats.waits += 1;
                }
                let fetch = match fetch {
                    Some(f) => Some(f),
                    None => (!st.fetching).then(|| self.start_fetch(&mut st)),
                };
                waited_for = Some(st.rounds);
                // Made under the lock: the fetch notifies after it updates the state, so a
                // fetch that ends after this reading wakes it.
                (self.fetched.notified(), fetch)
            };
            if let Some(fetch) = fetch {
                fetch.spawn();
            }
            fetched.await;
        }
    }

    /// Takes a block from the shared buffer for this thread and returns its first value
    /// (`None`: nothing buffered), and the background fetch of the next segment to spawn
    /// once the lock is released, when this take passed the threshold.
    fn take_block(self: &Arc<Self>, st: &mut State) -> (Option<u64>, Option<Spawn>) {
        (self.take_block_value(st), self.prefetch(st))
    }

    fn take_block_value(&self, st: &mut State) -> Option<u64> {
        if st.left == 0 {
            let (runs, len) = st.next.take()?;
            st.current = runs.into();
            st.left = len;
            st.current_len = len;
            self.gen.fetch_add(1, Ordering::Release);
        }
        let run = st.current.front_mut()?;
        let first = run.first;
        // Values first..first+taken, at most the block and the run.
        let mut taken = u64::from(self.block).min(run.len());
        // The block holds first+1..end, end excluded: first+taken must fit, so a run ending at
        // u64::MAX leaves its last value for a later call (handed out alone, as `first`).
        let end = match first.checked_add(taken) {
            Some(end) => end,
            None if taken == 1 => first, // first is u64::MAX: an empty block
            None => {
                taken -= 1;
                first + taken
            }
        };
        if taken == run.len() {
            st.current.pop_front();
        } else {
            run.first = first + taken;
        }
        st.left -= taken;
        st.stats.taken += taken;
        let gen = self.gen.load(Ordering::Relaxed);
        self.set_block(Block {
            owner: self.owner,
            gen,
            next: first.saturating_add(1).min(end),
            end,
        });
        Some(first)
    }

    /// The background fetch of the next segment, when the current one is used past the
    /// threshold and none is fetched or waiting.
    fn prefetch(self: &Arc<Self>, st: &mut State) -> Option<Spawn> {
        let used = st.current_len - st.left;
        let due = st.current_len > 0
            && st.next.is_none()
            && !st.fetching
            && used.saturating_mul(100) >= st.current_len * u64::from(self.refill_at_percent)
            && st.retry_at.is_none_or(|at| Instant::now() >= at);
        due.then(|| self.start_fetch(st))
    }

    /// Marks a fetch of one segment as under way; the caller spawns it once it has released
    /// the lock (a task dropped at once, by a runtime that shut down, ends the fetch by
    /// taking the lock).
    fn start_fetch(self: &Arc<Self>, st: &mut State) -> Spawn {
        st.fetching = true;
        st.stats.fetches += 1;
        Spawn(Arc::clone(self))
    }

    /// Records a fetch's result and wakes its waiters.
    fn finish_fetch(&self, result: Result<Vec<u64>, Error>) {
        let asked = u64::from(self.segment);
        let result = result.and_then(|values| {
            if values.len() as u64 == asked {
                Ok(runs_of(values))
            } else {
                Err(Error::Protocol(format!(
                    "answered {} values of the {asked} asked for",
                    values.len()
                )))
            }
        });
        {
            let mut st = self.state();
            st.fetching = false;
            st.rounds += 1;
            match result {
                Ok(runs) => {
                    st.failed = None;
                    st.retry_at = None;
                    // At most one fetch at a time, and none while a next segment waits: `next`
                    // is empty here. It becomes the current one when a caller needs it, so that
                    // no thread's block is dropped before the current segment is used up.
                    debug_assert!(st.next.is_none());
                    st.next = Some((runs, asked));
                }
                Err(e) => {
                    st.stats.failures += 1;
                    st.failed = Some((st.rounds, e));
                    st.retry_at = Some(Instant::now() + PREFETCH_RETRY);
                }
            }
        }
        self.fetched.notify_waiters();
    }
}

/// The future of [`Cache::next`]: ready at once when the thread's block has a value, else
/// waiting for the shared buffer (boxed: once a block).
pub(crate) enum Next<'a> {
    Ready(Option<u64>),
    Wait(Pin<Box<dyn Future<Output = Result<u64, Error>> + Send + 'a>>),
}

impl Future for Next<'_> {
    type Output = Result<u64, Error>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Next::Ready(v) => Poll::Ready(Ok(v.take().expect("Next polled after it completed"))),
            Next::Wait(f) => f.as_mut().poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    /// A source that answers from a script of batches (each a list of values), then errors.
    struct Script {
        batches: Mutex<VecDeque<Result<Vec<u64>, Error>>>,
    }

    impl Source for Arc<Script> {
        fn fetch(&self, _n: u32) -> Fetch {
            let next = self.batches.lock().unwrap().pop_front();
            Box::pin(async move {
                next.unwrap_or_else(|| Err(Error::Unavailable("script ended".into())))
            })
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    fn cache_of(
        batches: Vec<Result<Vec<u64>, Error>>,
        options: CacheOptions,
        rt: &tokio::runtime::Runtime,
    ) -> Arc<Cache> {
        let script = Arc::new(Script {
            batches: Mutex::new(batches.into()),
        });
        Cache::new(Box::new(script), options, rt.handle().clone()).unwrap()
    }

    #[test]
    fn runs_merge_consecutive_values() {
        assert_eq!(runs_of([]), vec![]);
        assert_eq!(
            runs_of([1, 2, 3, 7, 8, 2, u64::MAX - 1, u64::MAX, 0]),
            vec![
                Run { first: 1, last: 3 },
                Run { first: 7, last: 8 },
                Run { first: 2, last: 2 },
                Run {
                    first: u64::MAX - 1,
                    last: u64::MAX
                },
                Run { first: 0, last: 0 },
            ]
        );
    }

    #[test]
    fn options_are_checked() {
        for (bad, what) in [
            (
                CacheOptions::segment(0),
                "segment: expected 1 to 1000000, found 0",
            ),
            (
                CacheOptions::segment(MAX_SEGMENT + 1),
                "segment: expected 1 to 1000000, found 1000001",
            ),
            (
                CacheOptions {
                    block: Some(0),
                    ..CacheOptions::segment(10)
                },
                "block: expected 1 to 10",
            ),
            (
                CacheOptions {
                    block: Some(11),
                    ..CacheOptions::segment(10)
                },
                "block: expected 1 to 10",
            ),
            (
                CacheOptions {
                    block: Some(MAX_BLOCK + 1),
                    ..CacheOptions::default()
                },
                "block: expected 1 to 4096",
            ),
            (
                CacheOptions {
                    refill_at_percent: 101,
                    ..CacheOptions::default()
                },
                "refill_at_percent: expected 0 to 100, found 101",
            ),
        ] {
            let e = bad.check().unwrap_err();
            assert!(
                matches!(&e, Error::InvalidArgument(m) if m.contains(what)),
                "{bad:?}: {e}"
            );
        }
        assert_eq!(CacheOptions::default().check(), Ok(312));
        assert_eq!(CacheOptions::segment(1).check(), Ok(1));
        assert_eq!(CacheOptions::segment(MAX_SEGMENT).check(), Ok(1024));
    }

    #[test]
    fn an_error_reaches_the_waiter_and_the_next_call_fetches_again() {
        let rt = runtime();
        let cache = cache_of(
            vec![
                Err(Error::Unavailable("down".into())),
                Ok(vec![5, 6]),
                Ok(vec![1, 2, 3]),
            ],
            CacheOptions {
                segment: 2,
                block: Some(1),
                refill_at_percent: 100,
            },
            &rt,
        );
        rt.block_on(async {
            assert_eq!(cache.next().await, Err(Error::Unavailable("down".into())));
            assert_eq!(cache.next().await, Ok(5));
            assert_eq!(cache.next().await, Ok(6));
            // The third batch has 3 values, not 2: refused whole.
            assert!(matches!(cache.next().await, Err(Error::Protocol(_))));
            assert_eq!(
                cache.next().await,
                Err(Error::Unavailable("script ended".into()))
            );
        });
        let stats = cache.stats();
        assert_eq!((stats.fetches, stats.failures, stats.taken), (4, 3, 2));
    }

    #[test]
    fn try_next_starts_a_fetch_and_never_waits() {
        let rt = runtime();
        let cache = cache_of(
            vec![Ok(vec![10, 11, 12, 13])],
            CacheOptions {
                segment: 4,
                block: Some(2),
                refill_at_percent: 100,
            },
            &rt,
        );
        assert_eq!(cache.try_next(), None);
        assert!(cache.stats().fetching);
        // The fetch runs once the runtime runs.
        rt.block_on(async {
            while cache.stats().fetching {
                tokio::task::yield_now().await;
            }
        });
        let got: Vec<_> = std::iter::from_fn(|| cache.try_next()).take(4).collect();
        assert_eq!(got, vec![10, 11, 12, 13]);
    }

    #[test]
    fn u64_max_is_handed_out_once() {
        let rt = runtime();
        let top = u64::MAX;
        let cache = cache_of(
            vec![Ok(vec![top - 2, top - 1, top]), Ok(vec![top, 0, 1])],
            CacheOptions {
                segment: 3,
                block: Some(3),
                refill_at_percent: 100,
            },
            &rt,
        );
        let got: Vec<u64> = rt.block_on(async {
            let mut got = Vec::new();
            for _ in 0..6 {
                got.push(cache.next().await.unwrap());
            }
            got
        });
        // The script repeats u64::MAX on purpose: the cache hands out what it is given, in
        // order, each given value once.
        assert_eq!(got, vec![top - 2, top - 1, top, top, 0, 1]);
    }

    /// Batches of distinct values: `n` batches of `segment` values, from a shuffled range with
    /// holes, some runs at the top of the range.
    fn batches(segment: u32, n: usize, seed: u64) -> Vec<Vec<u64>> {
        let mut v = seed;
        let mut next = || {
            v = v
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            v >> 33
        };
        let mut base = if seed.is_multiple_of(3) {
            // At most 6 a value: the last one is at most u64::MAX.
            u64::MAX - u64::from(segment) * n as u64 * 6
        } else {
            1
        };
        (0..n)
            .map(|_| {
                (0..segment)
                    .map(|_| {
                        // Mostly consecutive, sometimes a hole.
                        base += if next().is_multiple_of(7) {
                            2 + next() % 5
                        } else {
                            1
                        };
                        base
                    })
                    .collect()
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// One thread: every value of every batch, in the order fetched, each once, whatever
        /// the segment, block and threshold.
        #[test]
        fn one_thread_gets_every_value_in_order(
            segment in 1u32..40,
            block_part in 0u32..40,
            refill in 0u8..=100,
            n in 1usize..6,
            seed in any::<u64>(),
            sync_calls in proptest::collection::vec(any::<bool>(), 1..200),
        ) {
            let block = 1 + block_part % segment;
            let rt = runtime();
            let script = batches(segment, n, seed);
            let expected: Vec<u64> = script.iter().flatten().copied().collect();
            let cache = cache_of(
                script.into_iter().map(Ok).collect(),
                CacheOptions { segment, block: Some(block), refill_at_percent: refill },
                &rt,
            );
            let mut got = Vec::new();
            let mut calls = sync_calls.iter().cycle();
            rt.block_on(async {
                while got.len() < expected.len() {
                    if *calls.next().unwrap() {
                        match cache.try_next() {
                            Some(v) => got.push(v),
                            None => tokio::task::yield_now().await,
                        }
                    } else {
                        got.push(cache.next().await.unwrap());
                    }
                }
            });
            prop_assert_eq!(&got, &expected);
            // The script is used up: the next call is its error, not a value again.
            prop_assert!(rt.block_on(cache.next()).is_err());
        }

        /// Threads drawing at once: no value twice, every value one of the batches', and
        /// only blocks left behind by threads are missing.
        #[test]
        fn threads_never_share_a_value(
            segment in 1u32..64,
            block_part in 0u32..64,
            threads in 2usize..5,
            seed in any::<u64>(),
        ) {
            let block = 1 + block_part % segment;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let n = 8;
            let script = batches(segment, n, seed);
            let all: HashSet<u64> = script.iter().flatten().copied().collect();
            let script_len = all.len();
            let cache = {
                let s = Arc::new(Script {
                    batches: Mutex::new(script.into_iter().map(Ok).collect()),
                });
                Cache::new(
                    Box::new(s),
                    CacheOptions { segment, block: Some(block), refill_at_percent: 10 },
                    rt.handle().clone(),
                )
                .unwrap()
            };
            let got: Vec<Vec<u64>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads)
                    .map(|_| {
                        let cache = Arc::clone(&cache);
                        let h = rt.handle().clone();
                        s.spawn(move || {
                            let mut mine = Vec::new();
                            // Until the script's end: its error.
                            while let Ok(v) = h.block_on(cache.next()) {
                                mine.push(v);
                            }
                            mine
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let mut seen = HashSet::new();
            for mine in &got {
                for v in mine {
                    prop_assert!(all.contains(v), "{} was never fetched", v);
                    prop_assert!(seen.insert(*v), "{} handed out twice", v);
                }
            }
            // Each thread's values come in the order they were fetched (blocks of one segment,
            // segments in order): increasing here, as the batches are.
            for mine in &got {
                prop_assert!(mine.windows(2).all(|w| w[0] < w[1]));
            }
            // At most one dropped block per thread per segment is missing.
            let missing = script_len - seen.len();
            prop_assert!(missing <= threads * n * block as usize, "{} missing", missing);
        }
    }
}
