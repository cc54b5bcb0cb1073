//! The Snowflake generator: lock-free, one atomic word of state.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{Layout, SnowflakeError};
use crate::clock::{Clock, NANOS_PER_MILLI};
use crate::fence::Fence;
use crate::horizon::Horizon;
use crate::poll::{Poll, WaitReason};

/// What a generator does when every sequence number of a time unit has been issued.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnExhausted {
    /// Wait for the next time unit (the default; what Leaf and Twitter do).
    #[default]
    Wait,
    /// Return [`SnowflakeError::SequenceExhausted`] (what flake-idgen's `next()` does).
    Fail,
}

/// A source of random numbers for the first sequence of a time unit
/// ([`SnowflakeConfig::random_start`]). Injectable, so that tests choose the numbers.
pub trait StartSource: Send + Sync + std::fmt::Debug {
    /// A number from 0 to `bound - 1` (`bound` is at least 1).
    fn below(&self, bound: u64) -> u64;
}

/// The default [`StartSource`]: wyrand over one atomic word, seeded by the caller. Fast and
/// evenly spread, not cryptographic: the start only spreads IDs over `id % N` shards.
#[derive(Debug)]
pub struct WyRand(AtomicU64);

impl WyRand {
    /// A source seeded with `seed`.
    pub fn new(seed: u64) -> WyRand {
        WyRand(AtomicU64::new(seed))
    }
}

impl StartSource for WyRand {
    fn below(&self, bound: u64) -> u64 {
        let s = self
            .0
            .fetch_add(0xa076_1d64_78bd_642f, Ordering::Relaxed)
            .wrapping_add(0xa076_1d64_78bd_642f);
        let m = u128::from(s) * u128::from(s ^ 0xe703_7ed1_a0b4_28db);
        let r = ((m >> 64) as u64) ^ (m as u64);
        // Lemire's multiply-shift: `bound` values, none favoured beyond 2^-64.
        ((u128::from(r) * u128::from(bound.max(1))) >> 64) as u64
    }
}

/// How to build a [`SnowflakeGenerator`].
///
/// # Examples
///
/// ```
/// use floe_core::clock::ManualClock;
/// use floe_core::snowflake::{Layout, SnowflakeConfig};
///
/// let clock = ManualClock::from_millis(1_700_000_000_000);
/// let gen = SnowflakeConfig::new(Layout::TWITTER)
///     .datacenter(3)
///     .worker(9)
///     .build(clock)
///     .unwrap();
/// let parts = Layout::TWITTER.decode(gen.next_id().unwrap());
/// assert_eq!((parts.timestamp_ms, parts.datacenter, parts.worker, parts.sequence),
///            (1_700_000_000_000, 3, 9, 0));
/// ```
#[derive(Debug, Clone)]
pub struct SnowflakeConfig {
    /// The bit layout, epoch and time unit.
    pub layout: Layout,
    /// The datacenter field (0 for layouts without one).
    pub datacenter: u64,
    /// The worker field.
    pub worker: u64,
    /// The largest clock rollback the generator waits out (5 ms by default, as Leaf); a larger
    /// one fails with [`SnowflakeError::ClockMovedBackwards`].
    pub max_backward: Duration,
    /// What to do when a time unit's sequence is used up.
    pub on_exhausted: OnExhausted,
    /// Issue no ID in a time unit at or before this Unix millisecond (the last time a previous
    /// holder of this node was alive, or this process's own last time before a restart).
    pub not_before_ms: Option<u64>,
    /// Stop issuing IDs (with [`SnowflakeError::LeaseLost`]) while this fence is raised: the
    /// worker ID's lease holder raises it when the ID is no longer provably ours.
    pub fence: Option<Arc<Fence>>,
    /// Issue no ID whose time is past this durable bound ([`crate::horizon`]).
    pub horizon: Option<Arc<Horizon>>,
    /// The first sequence of a new time unit is random below this (Leaf's rule: 100), so that
    /// IDs at low traffic are not all multiples of `2^sequence_bits` and `id % N` spreads them;
    /// 0 (the default): every unit starts at 0. See [`SnowflakeConfig::random_start`].
    pub random_start: u64,
    /// Where the random starts come from (a [`WyRand`] seeded from the clock and the node when
    /// `None`).
    pub start_source: Option<Arc<dyn StartSource>>,
}

impl SnowflakeConfig {
    /// The default configuration for a layout: node 0, wait out rollbacks up to 5 ms, wait on
    /// exhaustion.
    pub fn new(layout: Layout) -> Self {
        SnowflakeConfig {
            layout,
            datacenter: 0,
            worker: 0,
            max_backward: Duration::from_millis(5),
            on_exhausted: OnExhausted::Wait,
            not_before_ms: None,
            fence: None,
            horizon: None,
            random_start: 0,
            start_source: None,
        }
    }

    /// Sets the datacenter field.
    #[must_use]
    pub fn datacenter(mut self, datacenter: u64) -> Self {
        self.datacenter = datacenter;
        self
    }

    /// Sets the worker field.
    #[must_use]
    pub fn worker(mut self, worker: u64) -> Self {
        self.worker = worker;
        self
    }

    /// Sets datacenter and worker from one node number (datacenter = high bits, worker = low
    /// `worker_bits`), as flake-idgen's `id` option.
    ///
    /// # Errors
    /// [`SnowflakeError::InvalidNode`] with field `id` if it does not fit the node bits.
    pub fn node_id(mut self, id: u64) -> Result<Self, SnowflakeError> {
        let (dc, worker) = self.layout.split_node(id)?;
        self.datacenter = dc;
        self.worker = worker;
        Ok(self)
    }

    /// Sets the largest rollback waited out.
    #[must_use]
    pub fn max_backward(mut self, max_backward: Duration) -> Self {
        self.max_backward = max_backward;
        self
    }

    /// Sets the exhaustion policy.
    #[must_use]
    pub fn on_exhausted(mut self, policy: OnExhausted) -> Self {
        self.on_exhausted = policy;
        self
    }

    /// Issue no ID at or before this Unix millisecond.
    #[must_use]
    pub fn not_before_ms(mut self, ms: u64) -> Self {
        self.not_before_ms = Some(ms);
        self
    }

    /// Checks `fence` on every call.
    #[must_use]
    pub fn fence(mut self, fence: Arc<Fence>) -> Self {
        self.fence = Some(fence);
        self
    }

    /// Issues no ID whose time is past `horizon` (one more atomic load per ID).
    #[must_use]
    pub fn horizon(mut self, horizon: Arc<Horizon>) -> Self {
        self.horizon = Some(horizon);
        self
    }

    /// Starts each new time unit's sequence at a random number below `below` (Meituan Leaf:
    /// 100), at most a quarter of the layout's sequence space; 0 turns it off. Only after a
    /// unit whose sequence was not used up: under full load every unit starts at 0 and the
    /// layout's cap stands.
    #[must_use]
    pub fn random_start(mut self, below: u64) -> Self {
        self.random_start = below;
        self
    }

    /// Takes the random starts from `source` (tests: numbers of their choosing).
    #[must_use]
    pub fn start_source(mut self, source: Arc<dyn StartSource>) -> Self {
        self.start_source = Some(source);
        self
    }

    /// Validates the configuration and builds a generator reading `clock`.
    ///
    /// # Errors
    /// [`SnowflakeError::InvalidLayout`] (including an epoch after the clock's time) or
    /// [`SnowflakeError::InvalidNode`], naming the field.
    pub fn build<C: Clock>(self, clock: C) -> Result<SnowflakeGenerator<C>, SnowflakeError> {
        let layout = self.layout;
        layout.validate()?;
        layout.validate_epoch(clock.now_nanos() / NANOS_PER_MILLI)?;
        layout.check_node(self.datacenter, self.worker)?;
        let seq_bits = layout.sequence_bits() as u32;
        let max_seq = layout.max_sequence();
        // The state word holds (units << seq_bits) | sequence of the last issued ID. A unit
        // with its sequence used up keeps the first ID out of it and every earlier unit.
        let state = match self.not_before_ms {
            Some(ms) if ms >= layout.epoch_ms() => {
                let units =
                    ((ms - layout.epoch_ms()) / layout.time_unit_ms()).min(layout.max_timestamp());
                (units << seq_bits) | max_seq
            }
            // Nothing issued yet: FRESH when no real state can equal it.
            _ if fits_fresh(&layout) => FRESH,
            _ => max_seq,
        };
        let node = (self.datacenter << layout.worker_bits()) | self.worker;
        // At most a quarter of the sequence space: three quarters of each unit stay.
        let below = self.random_start.min((max_seq >> 2) + 1);
        let start = (below > 1).then(|| {
            let source = self
                .start_source
                .unwrap_or_else(|| Arc::new(WyRand::new(clock.now_nanos() ^ node.rotate_left(32))));
            (below, source)
        });
        Ok(SnowflakeGenerator {
            state: AtomicU64::new(state),
            start,
            node,
            seq_bits,
            max_seq,
            max_units: layout.max_timestamp(),
            epoch_ns: layout.epoch_ms() * NANOS_PER_MILLI,
            unit_ns: layout.time_unit_ms() * NANOS_PER_MILLI,
            max_backward_units: self.max_backward.as_millis() as u64 / layout.time_unit_ms(),
            on_exhausted: self.on_exhausted,
            fence: self.fence,
            horizon: self.horizon,
            stats: Counters::default(),
            layout,
            clock,
        })
    }
}

/// The state of a generator that has issued nothing: all ones, which no real state reaches
/// while the timestamp and sequence fields leave a bit of the word unused.
const FRESH: u64 = u64::MAX;

fn fits_fresh(layout: &Layout) -> bool {
    (layout.timestamp_bits() as u32) + (layout.sequence_bits() as u32) < 64
}

/// A thread-safe Snowflake generator.
///
/// **Fast path:** one clock read, one atomic load and one compare-and-swap on a single
/// 64-bit word that holds the last issued time unit and sequence together, so the two can
/// never disagree (no lock, no torn update).
///
/// **Sequence:** restarts at 0 in every new time unit and counts up to the layout's maximum.
/// Then the generator waits for the next unit ([`OnExhausted::Wait`]) or fails
/// ([`OnExhausted::Fail`]); it never moves its timestamp ahead of the clock.
///
/// **Clock rollback:** if the clock reads a unit before the last issued one, the generator
/// waits until the clock is back there when the step is at most `max_backward`, and fails
/// with [`SnowflakeError::ClockMovedBackwards`] otherwise. It never issues a duplicate.
///
/// **Blocking:** [`next_id`](Self::next_id) waits through the clock;
/// [`poll_next`](Self::poll_next) never waits and returns the deadline instead.
#[derive(Debug)]
pub struct SnowflakeGenerator<C> {
    /// `(units << seq_bits) | sequence` of the last issued ID.
    state: AtomicU64,
    /// The first sequence of a new unit is random below this, from this source.
    start: Option<(u64, Arc<dyn StartSource>)>,
    /// Datacenter and worker, already combined.
    node: u64,
    seq_bits: u32,
    max_seq: u64,
    max_units: u64,
    epoch_ns: u64,
    unit_ns: u64,
    max_backward_units: u64,
    on_exhausted: OnExhausted,
    fence: Option<Arc<Fence>>,
    horizon: Option<Arc<Horizon>>,
    stats: Counters,
    layout: Layout,
    clock: C,
}

/// Counters of a generator's slow paths, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnowflakeStats {
    /// Waits for the next time unit after the sequence was used up.
    pub exhausted_waits: u64,
    /// Waits for the clock to catch up after a small rollback.
    pub backward_waits: u64,
    /// Calls refused because the clock rolled back more than `max_backward`.
    pub backward_refusals: u64,
}

#[derive(Debug, Default)]
struct Counters {
    exhausted_waits: AtomicU64,
    backward_waits: AtomicU64,
    backward_refusals: AtomicU64,
}

impl<C: Clock> SnowflakeGenerator<C> {
    /// The layout IDs are issued in.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The clock the generator reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The datacenter field of every ID.
    pub fn datacenter(&self) -> u64 {
        self.node >> self.layout.worker_bits()
    }

    /// The worker field of every ID.
    pub fn worker(&self) -> u64 {
        self.node & self.layout.max_worker()
    }

    /// Unix milliseconds of the time unit of the last issued ID (or of `not_before_ms` before
    /// the first). A registry heartbeat records this.
    pub fn last_timestamp_ms(&self) -> u64 {
        let state = self.state.load(Ordering::Acquire);
        let units = if state == FRESH {
            0
        } else {
            state >> self.seq_bits
        };
        self.layout.epoch_ms() + units * self.layout.time_unit_ms()
    }

    /// Counters of waits and refusals so far.
    pub fn stats(&self) -> SnowflakeStats {
        SnowflakeStats {
            exhausted_waits: self.stats.exhausted_waits.load(Ordering::Relaxed),
            backward_waits: self.stats.backward_waits.load(Ordering::Relaxed),
            backward_refusals: self.stats.backward_refusals.load(Ordering::Relaxed),
        }
    }

    /// The next ID, waiting (through the clock) when the sequence is used up or the clock is a
    /// little behind.
    ///
    /// # Errors
    /// [`SnowflakeError::ClockMovedBackwards`], [`SnowflakeError::ClockBeforeEpoch`],
    /// [`SnowflakeError::TimestampOverflow`], or [`SnowflakeError::SequenceExhausted`] under
    /// [`OnExhausted::Fail`].
    #[inline]
    pub fn next_id(&self) -> Result<u64, SnowflakeError> {
        loop {
            let poll = match self.poll_next() {
                Err(SnowflakeError::HorizonStalled(stalled)) => {
                    // Only a generator with a horizon stalls on one.
                    let h = self
                        .horizon
                        .as_ref()
                        .ok_or(SnowflakeError::HorizonStalled(stalled))?;
                    h.wait(self.clock.now_nanos())
                        .map_err(SnowflakeError::HorizonStalled)?;
                    continue;
                }
                other => other?,
            };
            match poll {
                Poll::Ready(id) => return Ok(id),
                Poll::Pending {
                    until_nanos,
                    reason,
                } => {
                    let counter = match reason {
                        WaitReason::SequenceExhausted => &self.stats.exhausted_waits,
                        _ => &self.stats.backward_waits,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    self.clock.wait_until(until_nanos);
                }
            }
        }
    }

    /// The next ID if one can be issued now, or the wall time to wait for. Never blocks.
    ///
    /// # Errors
    /// As [`next_id`](Self::next_id).
    #[inline]
    pub fn poll_next(&self) -> Result<Poll<u64>, SnowflakeError> {
        // Load before reading the clock: the unit in the word then comes from a reading no
        // later than ours, so `now < last` means the clock really moved back.
        let mut state = self.state.load(Ordering::Acquire);
        let mut now = self.units_now()?;
        loop {
            let last = state >> self.seq_bits;
            let next = if now > last {
                (now << self.seq_bits) | self.first_sequence(state)
            } else if now == last {
                if state & self.max_seq == self.max_seq {
                    return self.exhausted(last);
                }
                state + 1
            } else if state == FRESH {
                // The first ID (FRESH reads as a unit far in the future).
                (now << self.seq_bits) | self.first_sequence(state)
            } else {
                return self.behind(last, now);
            };
            match self
                .state
                .compare_exchange_weak(state, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(Poll::Ready(self.compose(next))),
                Err(actual) => {
                    state = actual;
                    // Another thread moved to a later unit after our clock read: read again
                    // rather than mistake our stale reading for a rollback.
                    if actual >> self.seq_bits > now {
                        now = self.units_now()?;
                    }
                }
            }
        }
    }

    /// Why the next ID would be refused now, without issuing one or counting a refusal
    /// (`None`: it would be issued, at once or after a wait short enough to take): a lease
    /// fenced, a time bound stalled, a clock before the epoch or past the layout's end, or a
    /// clock further behind the last ID than the generator waits for. Readiness probes ask.
    pub fn refusal(&self) -> Option<SnowflakeError> {
        let state = self.state.load(Ordering::Acquire);
        let now = self.clock.now_nanos();
        if let Some(e) = self.fenced(now) {
            return Some(e);
        }
        if let Some(h) = &self.horizon {
            if let Some(e) = h.refusal(now, self.clock.monotonic_nanos()) {
                return Some(SnowflakeError::HorizonStalled(e));
            }
        }
        let now = match self.units_at(now) {
            Ok(now) => now,
            Err(e) => return Some(e),
        };
        let last = state >> self.seq_bits;
        if state == FRESH || now >= last || last - now <= self.max_backward_units {
            return None;
        }
        Some(SnowflakeError::ClockMovedBackwards {
            by: Duration::from_millis((last - now).saturating_mul(self.layout.time_unit_ms())),
        })
    }

    /// The time bound, if the generator has one.
    pub fn horizon(&self) -> Option<&Arc<Horizon>> {
        self.horizon.as_ref()
    }

    /// The first sequence of a new time unit, after the unit of `state`: random below the
    /// configured bound, unless that unit's sequence was used up (full load: start at 0 and
    /// keep the cap).
    #[inline]
    fn first_sequence(&self, state: u64) -> u64 {
        match &self.start {
            Some((below, source)) if state == FRESH || state & self.max_seq != self.max_seq => {
                source.below(*below).min(*below - 1)
            }
            _ => 0,
        }
    }

    #[inline]
    fn compose(&self, state: u64) -> u64 {
        self.layout
            .compose(state >> self.seq_bits, self.node, state & self.max_seq)
    }

    /// The clock, in time units since the epoch.
    #[inline]
    fn units_now(&self) -> Result<u64, SnowflakeError> {
        let now = self.clock.now_nanos();
        // The lease, with this very reading: a process that wakes from a pause finds its
        // deadline passed before its first ID.
        if let Some(e) = self.fenced(now) {
            return Err(e);
        }
        if let Some(h) = &self.horizon {
            h.check(now).map_err(SnowflakeError::HorizonStalled)?;
        }
        self.units_at(now)
    }

    /// `LeaseLost` when the fence does not admit a reading of `now` (Unix ns).
    #[inline]
    fn fenced(&self, now: u64) -> Option<SnowflakeError> {
        let fence = self.fence.as_ref()?;
        (!fence.admits(now, || self.clock.monotonic_nanos())).then_some(SnowflakeError::LeaseLost)
    }

    /// A reading of `now` (Unix ns) in time units since the epoch.
    #[inline]
    fn units_at(&self, now: u64) -> Result<u64, SnowflakeError> {
        let Some(since) = now.checked_sub(self.epoch_ns) else {
            return Err(SnowflakeError::ClockBeforeEpoch {
                now_ms: now / NANOS_PER_MILLI,
                epoch_ms: self.layout.epoch_ms(),
            });
        };
        // Division by a constant compiles to a multiplication: the common 1 ms unit gets it.
        let units = if self.unit_ns == NANOS_PER_MILLI {
            since / NANOS_PER_MILLI
        } else {
            since / self.unit_ns
        };
        if units > self.max_units {
            return Err(SnowflakeError::TimestampOverflow {
                now_ms: now / NANOS_PER_MILLI,
            });
        }
        Ok(units)
    }

    fn unit_start_nanos(&self, units: u64) -> u64 {
        self.epoch_ns + units * self.unit_ns
    }

    #[cold]
    fn exhausted(&self, last: u64) -> Result<Poll<u64>, SnowflakeError> {
        match self.on_exhausted {
            OnExhausted::Wait => Ok(Poll::Pending {
                until_nanos: self.unit_start_nanos(last + 1),
                reason: WaitReason::SequenceExhausted,
            }),
            OnExhausted::Fail => Err(SnowflakeError::SequenceExhausted {
                timestamp_ms: self.layout.epoch_ms() + last * self.layout.time_unit_ms(),
            }),
        }
    }

    #[cold]
    fn behind(&self, last: u64, now: u64) -> Result<Poll<u64>, SnowflakeError> {
        let units = last - now;
        let by = Duration::from_millis(units * self.layout.time_unit_ms());
        if units <= self.max_backward_units {
            Ok(Poll::Pending {
                until_nanos: self.unit_start_nanos(last),
                reason: WaitReason::ClockBehind { by },
            })
        } else {
            self.stats.backward_refusals.fetch_add(1, Ordering::Relaxed);
            Err(SnowflakeError::ClockMovedBackwards { by })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::snowflake::SnowflakeParts;

    const T0: u64 = 1_700_000_000_000;

    fn leaf(clock: &ManualClock) -> SnowflakeGenerator<ManualClock> {
        SnowflakeConfig::new(Layout::LEAF)
            .worker(5)
            .build(clock.clone())
            .unwrap()
    }

    fn parts(id: u64) -> SnowflakeParts {
        Layout::LEAF.decode(id)
    }

    #[test]
    fn sequence_counts_within_a_unit_and_restarts_in_the_next() {
        let clock = ManualClock::from_millis(T0);
        let g = leaf(&clock);
        for seq in 0..3 {
            let p = parts(g.next_id().unwrap());
            assert_eq!((p.timestamp_ms, p.worker, p.sequence), (T0, 5, seq));
        }
        clock.advance(Duration::from_millis(1));
        let p = parts(g.next_id().unwrap());
        assert_eq!((p.timestamp_ms, p.sequence), (T0 + 1, 0));
        assert_eq!(g.last_timestamp_ms(), T0 + 1);
        assert_eq!(clock.waits(), 0);
    }

    /// Numbers of the test's choosing, in turn (then 0), each checked against its bound.
    #[derive(Debug, Default)]
    struct Script(std::sync::Mutex<Vec<u64>>, std::sync::Mutex<Vec<u64>>);

    impl StartSource for Script {
        fn below(&self, bound: u64) -> u64 {
            self.1.lock().unwrap().push(bound);
            let mut next = self.0.lock().unwrap();
            if next.is_empty() {
                0
            } else {
                next.remove(0)
            }
        }
    }

    /// Leaf's rule: each new unit starts at a random sequence below 100 (the source's number),
    /// then counts up; a unit whose sequence was used up is followed by one that starts at 0.
    #[test]
    fn a_new_unit_starts_at_a_random_sequence_unless_the_last_was_used_up() {
        let clock = ManualClock::from_millis(T0);
        let source = Arc::new(Script(vec![42, 99, 7].into(), Default::default()));
        let g = SnowflakeConfig::new(Layout::LEAF)
            .worker(5)
            .random_start(100)
            .start_source(source.clone())
            .build(clock.clone())
            .unwrap();
        let seq = |g: &SnowflakeGenerator<ManualClock>| parts(g.next_id().unwrap()).sequence;
        assert_eq!((seq(&g), seq(&g)), (42, 43));
        clock.advance(Duration::from_millis(1));
        assert_eq!(seq(&g), 99);
        // Used up: 4095 reached in this unit, the next one starts at 0, the source unasked.
        for _ in 100..4096 {
            g.next_id().unwrap();
        }
        let asked = source.1.lock().unwrap().len();
        let p = parts(g.next_id().unwrap());
        assert_eq!((p.timestamp_ms, p.sequence), (T0 + 2, 0));
        assert_eq!(source.1.lock().unwrap().len(), asked);
        clock.advance(Duration::from_millis(5));
        assert_eq!(seq(&g), 7);
        assert!(source.1.lock().unwrap().iter().all(|&b| b == 100));
    }

    /// The bound is at most a quarter of the sequence space (a 4-bit sequence: below 4), 0
    /// and 1 turn it off, and the default source stays below its bound.
    #[test]
    fn the_random_start_is_bounded_by_the_layout() {
        let clock = ManualClock::from_millis(T0);
        let source = Arc::new(Script(vec![u64::MAX].into(), Default::default()));
        let g = SnowflakeConfig::new(Layout::new(41, 0, 10, 4).unwrap())
            .random_start(100)
            .start_source(source.clone())
            .build(clock.clone())
            .unwrap();
        assert_eq!(
            Layout::new(41, 0, 10, 4)
                .unwrap()
                .decode(g.next_id().unwrap())
                .sequence,
            3
        );
        assert_eq!(source.1.lock().unwrap()[0], 4);
        for off in [0, 1] {
            let g = SnowflakeConfig::new(Layout::LEAF)
                .random_start(off)
                .build(clock.clone())
                .unwrap();
            clock.advance(Duration::from_millis(1));
            assert_eq!(parts(g.next_id().unwrap()).sequence, 0);
        }
        let w = WyRand::new(7);
        let mut seen = [false; 100];
        for _ in 0..10_000 {
            let r = w.below(100);
            assert!(r < 100);
            seen[r as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "every start is reached");
    }

    #[test]
    fn exhaustion_waits_for_the_next_unit() {
        let clock = ManualClock::from_millis(T0);
        let g = leaf(&clock);
        for _ in 0..4096 {
            g.next_id().unwrap();
        }
        assert!(matches!(
            g.poll_next().unwrap(),
            Poll::Pending { reason: WaitReason::SequenceExhausted, until_nanos } if until_nanos == (T0 + 1) * NANOS_PER_MILLI
        ));
        let p = parts(g.next_id().unwrap());
        assert_eq!((p.timestamp_ms, p.sequence), (T0 + 1, 0));
        assert_eq!(clock.waits(), 1);
        assert_eq!(clock.waited(), Duration::from_millis(1));
        assert_eq!(g.stats().exhausted_waits, 1);
    }

    #[test]
    fn exhaustion_fails_under_the_fail_policy() {
        let clock = ManualClock::from_millis(T0);
        let g = SnowflakeConfig::new(Layout::new(41, 0, 10, 2).unwrap())
            .on_exhausted(OnExhausted::Fail)
            .build(clock.clone())
            .unwrap();
        for _ in 0..4 {
            g.next_id().unwrap();
        }
        assert_eq!(
            g.next_id().unwrap_err(),
            SnowflakeError::SequenceExhausted { timestamp_ms: T0 }
        );
        clock.advance(Duration::from_millis(1));
        assert!(g.next_id().is_ok());
    }

    #[test]
    fn small_rollback_waits_and_continues_the_sequence() {
        let clock = ManualClock::from_millis(T0);
        let g = leaf(&clock);
        let a = g.next_id().unwrap();
        clock.rewind(Duration::from_millis(5));
        assert!(matches!(
            g.poll_next().unwrap(),
            Poll::Pending { reason: WaitReason::ClockBehind { by }, .. } if by == Duration::from_millis(5)
        ));
        let b = g.next_id().unwrap();
        assert!(b > a);
        let p = parts(b);
        assert_eq!((p.timestamp_ms, p.sequence), (T0, 1));
        assert_eq!(clock.waits(), 1);
        assert_eq!(clock.waited(), Duration::from_millis(5));
        assert_eq!(g.stats().backward_waits, 1);
    }

    #[test]
    fn large_rollback_fails_until_the_clock_catches_up() {
        let clock = ManualClock::from_millis(T0);
        let g = leaf(&clock);
        let a = g.next_id().unwrap();
        clock.rewind(Duration::from_millis(6));
        assert_eq!(
            g.next_id().unwrap_err(),
            SnowflakeError::ClockMovedBackwards {
                by: Duration::from_millis(6)
            }
        );
        assert_eq!(clock.waits(), 0);
        assert_eq!(g.stats().backward_refusals, 1);
        clock.advance(Duration::from_millis(6));
        let b = g.next_id().unwrap();
        assert!(b > a);
    }

    #[test]
    fn zero_max_backward_refuses_any_rollback() {
        let clock = ManualClock::from_millis(T0);
        let g = SnowflakeConfig::new(Layout::LEAF)
            .max_backward(Duration::ZERO)
            .build(clock.clone())
            .unwrap();
        g.next_id().unwrap();
        clock.rewind(Duration::from_millis(1));
        assert!(matches!(
            g.next_id(),
            Err(SnowflakeError::ClockMovedBackwards { .. })
        ));
    }

    #[test]
    fn not_before_keeps_a_restart_out_of_used_time() {
        let clock = ManualClock::from_millis(T0);
        // The previous run was alive until T0 + 3 (clock now 3 ms behind it: waited out).
        let g = SnowflakeConfig::new(Layout::LEAF)
            .not_before_ms(T0 + 3)
            .build(clock.clone())
            .unwrap();
        let p = parts(g.next_id().unwrap());
        assert_eq!(p.timestamp_ms, T0 + 4);
        // 100 ms behind: refused.
        let g = SnowflakeConfig::new(Layout::LEAF)
            .not_before_ms(T0 + 100)
            .build(clock.clone())
            .unwrap();
        assert!(matches!(
            g.next_id(),
            Err(SnowflakeError::ClockMovedBackwards { .. })
        ));
    }

    #[test]
    fn clock_before_epoch_and_past_the_end_fail() {
        let layout = Layout::LEAF.with_epoch_ms(T0);
        let clock = ManualClock::from_millis(T0);
        let g = SnowflakeConfig::new(layout).build(clock.clone()).unwrap();
        clock.rewind(Duration::from_millis(1));
        assert!(matches!(
            g.next_id(),
            Err(SnowflakeError::ClockBeforeEpoch { .. })
        ));
        clock.set_millis(T0);
        let small = Layout::new(10, 0, 0, 4).unwrap().with_epoch_ms(T0);
        let g = SnowflakeConfig::new(small).build(clock.clone()).unwrap();
        clock.set_millis(T0 + 1024);
        assert!(matches!(
            g.next_id(),
            Err(SnowflakeError::TimestampOverflow { .. })
        ));
        clock.set_millis(T0 + 1023);
        assert!(g.next_id().is_ok());
    }

    #[test]
    fn build_rejects_future_epoch_and_bad_nodes() {
        let clock = ManualClock::from_millis(T0);
        let e = SnowflakeConfig::new(Layout::LEAF.with_epoch_ms(T0 + 1))
            .build(clock.clone())
            .unwrap_err();
        assert!(e.to_string().contains("epoch"), "{e}");
        let e = SnowflakeConfig::new(Layout::LEAF)
            .worker(1024)
            .build(clock.clone())
            .unwrap_err();
        assert!(e.to_string().contains("worker"), "{e}");
        let e = SnowflakeConfig::new(Layout::LEAF)
            .datacenter(1)
            .build(clock)
            .unwrap_err();
        assert!(e.to_string().contains("datacenter"), "{e}");
    }

    #[test]
    fn a_refusal_is_told_without_issuing_or_counting() {
        let clock = ManualClock::from_millis(T0);
        let g = SnowflakeConfig::new(Layout::LEAF)
            .worker(5)
            .max_backward(Duration::from_millis(5))
            .build(clock.clone())
            .unwrap();
        assert!(g.refusal().is_none(), "fresh");
        let first = g.next_id().unwrap();
        clock.rewind(Duration::from_millis(5));
        assert!(g.refusal().is_none(), "5 ms behind: waited for");
        clock.rewind(Duration::from_millis(1));
        assert!(
            matches!(g.refusal(), Some(SnowflakeError::ClockMovedBackwards { by }) if by == Duration::from_millis(6)),
            "{:?}",
            g.refusal()
        );
        assert_eq!(g.stats().backward_refusals, 0, "a probe is no refusal");
        clock.advance(Duration::from_millis(7));
        assert!(g.refusal().is_none());
        assert!(
            g.next_id().unwrap() > first,
            "the probe issued nothing in between"
        );
        let fence = Arc::new(Fence::new());
        let fenced = SnowflakeConfig::new(Layout::LEAF)
            .fence(fence.clone())
            .build(clock.clone())
            .unwrap();
        fence.raise();
        assert!(matches!(fenced.refusal(), Some(SnowflakeError::LeaseLost)));
    }

    #[test]
    fn a_raised_fence_stops_the_generator_until_lowered() {
        let clock = ManualClock::from_millis(T0);
        let fence = Arc::new(Fence::new());
        let g = SnowflakeConfig::new(Layout::LEAF)
            .fence(fence.clone())
            .build(clock)
            .unwrap();
        let a = g.next_id().unwrap();
        fence.raise();
        assert_eq!(g.next_id().unwrap_err(), SnowflakeError::LeaseLost);
        assert!(g.poll_next().is_err());
        fence.lower();
        assert!(g.next_id().unwrap() > a);
    }

    #[test]
    fn a_lease_window_that_passed_during_a_pause_stops_the_first_id_after_it() {
        use crate::fence::Sent;
        let clock = ManualClock::from_millis(T0);
        let fence = Arc::new(Fence::new());
        fence.confirm(Sent::now(&clock), Duration::from_secs(4));
        let g = SnowflakeConfig::new(Layout::LEAF)
            .fence(fence.clone())
            .build(clock.clone())
            .unwrap();
        let a = g.next_id().unwrap();
        clock.advance(Duration::from_millis(3_999));
        assert!(g.next_id().is_ok());
        // Paused past the window: nothing ran meanwhile, yet the first call is refused.
        clock.advance(Duration::from_secs(6));
        assert_eq!(g.poll_next().unwrap_err(), SnowflakeError::LeaseLost);
        assert_eq!(g.next_id().unwrap_err(), SnowflakeError::LeaseLost);
        // The wall clock set back by the pause's length does not reopen it.
        clock.rewind(Duration::from_secs(6));
        assert_eq!(g.next_id().unwrap_err(), SnowflakeError::LeaseLost);
        // The registry confirms again: IDs go on, after every earlier one.
        clock.advance(Duration::from_secs(6));
        fence.confirm(Sent::now(&clock), Duration::from_secs(4));
        assert!(g.next_id().unwrap() > a);
    }

    #[test]
    fn custom_time_unit() {
        let layout = Layout::new(39, 0, 16, 8)
            .unwrap()
            .with_time_unit_ms(10)
            .with_epoch_ms(T0);
        let clock = ManualClock::from_millis(T0 + 25);
        let g = SnowflakeConfig::new(layout)
            .worker(3)
            .build(clock.clone())
            .unwrap();
        let p = layout.decode(g.next_id().unwrap());
        assert_eq!((p.timestamp_ms, p.worker, p.sequence), (T0 + 20, 3, 0));
        clock.advance(Duration::from_millis(4));
        let p = layout.decode(g.next_id().unwrap());
        assert_eq!((p.timestamp_ms, p.sequence), (T0 + 20, 1));
    }
}
