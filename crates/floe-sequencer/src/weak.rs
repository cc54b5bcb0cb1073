//! WEAK serving: a key's IDs handed out from memory, out of segments reserved in the store,
//! double-buffered as Leaf's segment mode does. Written once, above every store.
//!
//! **The buffer.** Each key holds its current segment and at most one next segment. Once a
//! tenth of the current one is used, the next is fetched by a background task, so that a
//! caller almost never waits for the store. The size of each fetch (the step) follows the
//! key's rate through [`StepPolicy`]: doubled when a segment lasted less than the target,
//! halved when it lasted more than twice as long.
//!
//! **Two ways to take an ID.**
//! - [`WeakKey::next`]: one ID from the shared buffer under a short lock. IDs of a key follow
//!   the order of the calls in this process. The server uses it.
//! - [`WeakKey::next_local`]: a thread takes a small block of the current segment (1/32 of the
//!   step, at most 1,024 IDs) and hands it out with no atomic operation at all, so threads
//!   scale. IDs are unique and increase per thread; threads interleave. A block left over when
//!   the key moves to its next segment is dropped (a gap, never a reuse), which bounds how
//!   stale a thread's IDs can be.
//!
//! **Outages.** While the store is unreachable the key goes on serving what it has buffered.
//! With nothing buffered a call fails with `Unavailable`; the next call tries the store again
//! (prefetches retry at most every 200 ms), so the key recovers by itself when the store
//! returns. Callers waiting for one fetch share its result: one fetch per key at a time.
//!
//! **Gaps.** IDs buffered by a process that stops are never issued; nothing is reissued.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use floe_core::sequence::{Key, Segment, StepPolicy};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::batch::{check_count, Batch};
use crate::tails::segment_above;
use crate::{within, ErrorKind, SeqError, Store};

/// How long prefetches wait after a failed fetch before trying again.
const PREFETCH_RETRY: Duration = Duration::from_millis(200);

/// A thread's block of one key: IDs `next ..= end` of segment generation `gen`. Only positive
/// IDs are kept in blocks, as `u64`, so `next` can step past `i64::MAX` without overflowing.
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
    next: 1,
    end: 0,
};

/// Slots below this have their blocks in [`FAST`].
const FAST_SLOTS: usize = 64;

thread_local! {
    /// This thread's blocks of the first keys, indexed by [`WeakKey::slot`]: plain cells with
    /// nothing to drop, so reaching them costs no lazy set-up.
    static FAST: [Cell<Block>; FAST_SLOTS] = const { [const { Cell::new(NO_BLOCK) }; FAST_SLOTS] };
    /// The blocks of keys with higher slots.
    static MORE: RefCell<Vec<Block>> = const { RefCell::new(Vec::new()) };
}

/// Slots of dropped keys, for reuse; blocks are told apart by their owner, never reused.
static FREE_SLOTS: Mutex<(usize, Vec<usize>)> = Mutex::new((0, Vec::new()));
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

/// The shared part of a key's buffer.
struct State {
    /// The current segment's next ID and how many are left from it on (a count, so a segment
    /// ending at `i64::MAX` never overflows).
    cur: (i64, u64),
    /// Size of the current segment, for the prefetch threshold.
    cur_len: u64,
    next: Option<Segment>,
    fetching: bool,
    step: u32,
    /// When the last fetch started: a segment's life for step adaptation.
    last_fetch: Option<Instant>,
    /// No ID at or below this is served ([`WeakKey::cut_above`]): a floor raised at run time,
    /// applied to what the buffer holds and to every segment a fetch under way brings.
    floor: Option<i64>,
    /// The segment the fetch under way brings is dropped ([`WeakKey::invalidate`]).
    discard_fetch: bool,
    /// Fetches finished so far; a waiter knows the fetch it waited for has ended.
    rounds: u64,
    /// The last fetch's error, with its round.
    failed: Option<(u64, SeqError)>,
    retry_at: Option<Instant>,
}

impl State {
    fn left(&self) -> u64 {
        self.cur.1
    }

    /// The current segment's unused IDs, if any.
    fn current(&self) -> Option<Segment> {
        let (next, left) = self.cur;
        // `left` IDs from `next` were reserved, so `next + left - 1` fits an i64.
        let end = i64::try_from(i128::from(next) + i128::from(left) - 1).ok()?;
        (left > 0).then_some(Segment { start: next, end })
    }

    /// Makes `s` (or nothing) the rest of the current segment.
    fn set_current(&mut self, s: Option<Segment>) {
        self.cur = s.map_or((1, 0), |s| (s.start, crate::tails::ids_in(s)));
    }
}

/// The WEAK buffer of one key of one store.
pub struct WeakKey {
    key: Key,
    store: Arc<dyn Store>,
    policy: StepPolicy,
    timeout: Duration,
    slot: usize,
    owner: u64,
    /// Bumped each time the current segment is replaced; a thread's block of an older one is
    /// dropped.
    gen: AtomicU64,
    /// A std mutex, not a tokio one: no await happens while it is held.
    state: Mutex<State>,
    /// Woken when a fetch ends.
    fetched: Notify,
}

impl std::fmt::Debug for WeakKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state();
        f.debug_struct("WeakKey")
            .field("key", &self.key)
            .field("store", &self.store.kind())
            .field("current", &st.cur)
            .field("next", &st.next)
            .field("step", &st.step)
            .finish()
    }
}

impl Drop for WeakKey {
    fn drop(&mut self) {
        FREE_SLOTS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .push(self.slot);
    }
}

/// The future of [`WeakKey::next_local`].
pub enum NextLocal<'a> {
    /// Served from the thread's block.
    Ready(Option<i64>),
    /// Waiting for a new block.
    Refill(std::pin::Pin<Box<dyn std::future::Future<Output = Result<i64, SeqError>> + Send + 'a>>),
}

impl std::fmt::Debug for NextLocal<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NextLocal::Ready(id) => f.debug_tuple("Ready").field(id).finish(),
            NextLocal::Refill(_) => f.write_str("Refill"),
        }
    }
}

impl std::future::Future for NextLocal<'_> {
    type Output = Result<i64, SeqError>;

    #[inline]
    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match self.get_mut() {
            NextLocal::Ready(id) => {
                std::task::Poll::Ready(Ok(id.take().expect("NextLocal polled after it completed")))
            }
            NextLocal::Refill(f) => f.as_mut().poll(cx),
        }
    }
}

/// What a key's buffer holds now, for tests and operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferInfo {
    /// The current segment's next ID (meaningless when `left` is 0).
    pub next_id: i64,
    /// IDs left in the current segment.
    pub left: u64,
    /// Size of the current segment (0 before the first fetch).
    pub current_len: u64,
    /// The next segment, if fetched.
    pub next: Option<Segment>,
    /// The step of the next fetch.
    pub step: u32,
    /// Whether a fetch is under way.
    pub fetching: bool,
}

impl WeakKey {
    /// An empty buffer of `key` on `store`; nothing is fetched until the first call.
    pub fn new(store: Arc<dyn Store>, key: Key, policy: StepPolicy, timeout: Duration) -> WeakKey {
        WeakKey {
            key,
            store,
            policy,
            timeout,
            slot: take_slot(),
            owner: NEXT_OWNER.fetch_add(1, Ordering::Relaxed),
            gen: AtomicU64::new(0),
            state: Mutex::new(State {
                cur: (1, 0),
                cur_len: 0,
                next: None,
                fetching: false,
                step: policy.min,
                last_fetch: None,
                floor: None,
                discard_fetch: false,
                rounds: 0,
                failed: None,
                retry_at: None,
            }),
            fetched: Notify::new(),
        }
    }

    /// The key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the buffer holds now.
    pub fn info(&self) -> BufferInfo {
        let st = self.state();
        BufferInfo {
            next_id: st.cur.0,
            left: st.left(),
            current_len: st.cur_len,
            next: st.next,
            step: st.step,
            fetching: st.fetching,
        }
    }

    /// The next ID the shared buffer would hand out, without taking it (`None`: nothing
    /// buffered; the next call fetches).
    pub fn next_buffered(&self) -> Option<i64> {
        let st = self.state();
        if st.left() > 0 {
            Some(st.cur.0)
        } else {
            st.next.map(|s| s.start)
        }
    }

    /// The next ID, in call order within this process.
    pub async fn next(self: &Arc<Self>) -> Result<i64, SeqError> {
        self.take(1).await.map(|(id, _)| id)
    }

    /// `count` IDs (1 to [`MAX_BATCH`](crate::MAX_BATCH)) from the shared buffer: the rest of the current segment
    /// and on into the next ones until the batch is whole (see [`crate::batch`]). Whole or an
    /// error: IDs taken before an error are gaps.
    ///
    /// # Errors
    /// `InvalidArgument` for a `count` out of bounds; the errors of a fetch otherwise.
    pub async fn next_batch(self: &Arc<Self>, count: u32) -> Result<Batch, SeqError> {
        check_count(count)?;
        let mut batch = Batch::new();
        let mut left = count;
        while left > 0 {
            let (first, (last, _)) = self.take(left).await?;
            batch.push_run(first, last);
            // `take` hands out 1 to `left` IDs: `last - first` is below `left`.
            let taken = u32::try_from(i128::from(last) - i128::from(first) + 1)
                .expect("a run of take is at most the count asked for");
            left -= taken;
        }
        Ok(batch)
    }

    /// The next ID from this thread's block, without waiting: `None` when the thread has no
    /// block of the key's current segment left (then [`next_local`](Self::next_local) refills).
    #[inline]
    pub fn try_next_local(&self) -> Option<i64> {
        let gen = self.gen.load(Ordering::Acquire);
        let take = |b: &mut Block| {
            if b.owner == self.owner && b.gen == gen && b.next <= b.end {
                b.next += 1;
                // At most i64::MAX, so the conversion is exact.
                Some((b.next - 1) as i64)
            } else {
                None
            }
        };
        if self.slot < FAST_SLOTS {
            FAST.try_with(|cells| {
                let cell = &cells[self.slot];
                let mut b = cell.get();
                let id = take(&mut b)?;
                cell.set(b);
                Some(id)
            })
            .ok()
            .flatten()
        } else {
            MORE.try_with(|blocks| blocks.borrow_mut().get_mut(self.slot).and_then(take))
                .ok()
                .flatten()
        }
    }

    /// The next ID from this thread's block (see the module docs): the fastest way, and the
    /// one that scales with threads. The block is read before the future is made, so a warm
    /// call costs no state machine; a refill (once a block) is boxed.
    #[inline]
    pub fn next_local(self: &Arc<Self>) -> NextLocal<'_> {
        match self.try_next_local() {
            Some(id) => NextLocal::Ready(Some(id)),
            None => NextLocal::Refill(Box::pin(self.refill_local())),
        }
    }

    async fn refill_local(self: &Arc<Self>) -> Result<i64, SeqError> {
        let block = {
            let step = self.state().step;
            (step / 32).clamp(1, 1024)
        };
        let (id, (last, gen)) = self.take(block).await?;
        if id <= 0 {
            return Ok(id); // blocks hold positive IDs only (a store holding a negative value)
        }
        let block = Block {
            owner: self.owner,
            gen,
            next: id as u64 + 1,
            end: last as u64,
        };
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
        Ok(id)
    }

    /// Takes up to `n` IDs from the shared buffer: the first, and (last, generation). Waits
    /// for a fetch when nothing is buffered.
    async fn take(self: &Arc<Self>, n: u32) -> Result<(i64, (i64, u64)), SeqError> {
        let mut waited_for: Option<u64> = None;
        loop {
            let fetched = {
                let mut st = self.state();
                if st.left() == 0 {
                    if let Some(next) = st.next.take() {
                        self.install(&mut st, next);
                    }
                }
                let left = st.left();
                if left > 0 {
                    let first = st.cur.0;
                    let taken = u64::from(n).min(left);
                    let last = first + (taken as i64 - 1);
                    st.cur = (last.wrapping_add(1), left - taken);
                    let gen = self.gen.load(Ordering::Relaxed);
                    // Leaf's rule: fetch the next segment once a tenth of this one is used.
                    if st.next.is_none()
                        && !st.fetching
                        && st.left() * 10 < st.cur_len * 9
                        && st.retry_at.is_none_or(|at| Instant::now() >= at)
                    {
                        self.fetch(&mut st);
                    }
                    return Ok((first, (last, gen)));
                }
                if let (Some(round), Some((failed_round, error))) = (waited_for, &st.failed) {
                    if *failed_round > round {
                        return Err(error.clone());
                    }
                }
                if !st.fetching {
                    self.fetch(&mut st);
                }
                waited_for = Some(st.rounds);
                // Made under the lock: a fetch that ends after this reading of the state wakes
                // it (the fetch notifies after it updates the state). Only here, not per ID.
                self.fetched.notified()
            };
            fetched.await;
        }
    }

    /// Loads a saved tail ([`crate::tails`]) into an empty buffer, before it serves: the first
    /// segment becomes the current one, the second the next one; any more are dropped (gaps).
    /// Segments must ascend and lie below every segment the store reserves from now on.
    pub(crate) fn preload(&self, tail: Vec<Segment>) {
        let mut st = self.state();
        let mut tail: Vec<Segment> = tail.into_iter().filter(|s| s.start <= s.end).collect();
        tail.sort_by_key(|s| s.start);
        let mut tail = tail.into_iter();
        if st.cur.1 != 0 || st.next.is_some() || st.fetching {
            return; // already serving: a tail loaded now could follow newer IDs
        }
        if let Some(first) = tail.next() {
            st.set_current(Some(first));
            st.cur_len = st.cur.1;
            st.next = tail.next();
            self.gen.fetch_add(1, Ordering::Release);
        }
    }

    /// Empties the buffer and returns what it held: the rest of the current segment and the
    /// next one. No ID of them is served by this buffer afterwards (a later call fetches a new
    /// segment); a fetch under way still ends as usual.
    pub(crate) fn drain_tail(&self) -> Vec<Segment> {
        let mut st = self.state();
        let mut tail: Vec<Segment> = st.current().into_iter().collect();
        tail.extend(st.next.take());
        st.cur = (1, 0);
        st.cur_len = 0;
        self.gen.fetch_add(1, Ordering::Release);
        tail
    }

    /// Serves no ID at or below `floor` from now on (a floor raised at run time): the
    /// buffer's IDs at or below it are dropped (gaps), threads' blocks too, and so are those of
    /// a segment a fetch under way brings.
    pub(crate) fn cut_above(&self, floor: i64) {
        let mut st = self.state();
        st.floor = Some(st.floor.map_or(floor, |f| f.max(floor)));
        let current = st.current().and_then(|s| segment_above(s, floor));
        st.set_current(current);
        st.next = st.next.and_then(|s| segment_above(s, floor));
        self.gen.fetch_add(1, Ordering::Release);
    }

    /// Drops every ID the buffer holds (gaps), threads' blocks and the segment of a fetch
    /// under way too: a floor may have been raised elsewhere below them
    /// ([`crate::changes`]). The next call fetches a segment reserved from now on.
    pub(crate) fn invalidate(&self) {
        let mut st = self.state();
        st.set_current(None);
        st.cur_len = 0;
        st.next = None;
        st.discard_fetch = st.fetching;
        self.gen.fetch_add(1, Ordering::Release);
    }

    /// Makes `segment` the current one; threads' blocks of the one before are dropped.
    fn install(&self, st: &mut State, segment: Segment) {
        st.cur = (segment.start, segment.len());
        st.cur_len = segment.len();
        self.gen.fetch_add(1, Ordering::Release);
    }

    /// One segment of `step` IDs, or of fewer when the sequence is near its end: a key with
    /// fewer than `step` IDs left before `i64::MAX` still issues every one of them.
    async fn fetch_segment(&self, step: u32) -> Result<Segment, SeqError> {
        let mut size = step;
        loop {
            let segment = self.store.segment(&self.key, size);
            let result = within(
                &*self.store,
                self.timeout,
                "fetch a segment of",
                &self.key,
                segment,
            )
            .await
            .and_then(|s| {
                s.ok_or_else(|| {
                    SeqError::new(
                        ErrorKind::Unsupported,
                        format!("{}: cannot reserve segments", self.store.kind()),
                    )
                })
            });
            match result {
                Err(e) if e.kind == ErrorKind::Exhausted && size > 1 => size /= 2,
                other => return other,
            }
        }
    }

    /// Starts the one fetch of this key in a task of its own, so that a caller that gives up
    /// (a cancelled request) never leaves the key waiting for a fetch nobody finishes.
    fn fetch(self: &Arc<Self>, st: &mut State) {
        st.fetching = true;
        let now = Instant::now();
        if let Some(last) = st.last_fetch {
            st.step = self.policy.next_step(st.step, now - last);
        }
        st.last_fetch = Some(now);
        let step = st.step;
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let result = this.fetch_segment(step).await;
            {
                let mut st = this.state();
                st.fetching = false;
                st.rounds += 1;
                match result {
                    // Reserved before the buffer was invalidated: dropped.
                    Ok(_) if std::mem::take(&mut st.discard_fetch) => {
                        st.failed = None;
                        st.retry_at = None;
                    }
                    Ok(segment) => {
                        st.failed = None;
                        st.retry_at = None;
                        // A floor raised while the fetch was under way.
                        match st
                            .floor
                            .map_or(Some(segment), |f| segment_above(segment, f))
                        {
                            None => {}
                            Some(segment) if st.left() == 0 => this.install(&mut st, segment),
                            Some(segment) => st.next = Some(segment),
                        }
                    }
                    Err(error) => {
                        st.discard_fetch = false;
                        st.retry_at = Some(Instant::now() + PREFETCH_RETRY);
                        st.failed = Some((st.rounds, error));
                    }
                }
            }
            this.fetched.notify_waiters();
        });
    }
}
