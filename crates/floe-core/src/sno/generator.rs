//! The sno generator: tick and sequence in one atomic word, tick-tock on clock regressions.

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{
    unix_ms_of_wall, wall_of_unix_ms, Partition, SnoError, SnoId, EPOCH_MS, EPOCH_NANOS,
    MAX_SEQUENCE, MAX_TIMESTAMP, MIN_SEQUENCE_POOL, TIME_UNIT_NANOS,
};
use crate::clock::{Clock, SystemClock};
use crate::fence::Fence;
use crate::horizon::Horizon;
use crate::poll::{Poll, WaitReason};

// The state word: [ units: 39 bits | tick-tock: 1 bit | next sequence: 24 bits ].
// The 24-bit sequence field has room above sno's 16 bits, so calls that find the pool used
// up can still fetch_add without carrying into the tick or the timestamp.
const SEQ_BITS: u32 = 24;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
const TICK_BIT: u64 = 1 << SEQ_BITS;
const UNIT_SHIFT: u32 = SEQ_BITS + 1;

const fn pack(units: u64, tick: u64, next_seq: u64) -> u64 {
    (units << UNIT_SHIFT) | tick | next_seq
}

/// The bookkeeping of a generator: both its configuration and a way to save and restore it
/// across restarts (sno's `GeneratorSnapshot`; the JSON field names are the same).
///
/// **As configuration:** set `partition` and optionally `sequence_min`/`sequence_max` (given
/// in either order; `sequence_max` 0 means 65535 unless `sequence_min` is 65535).
///
/// **As a save:** take one with [`SnoGenerator::snapshot`] when the generator goes offline and
/// restore it with [`SnoGenerator::from_snapshot`]: a restarted generator whose clock is
/// behind the saved time then tick-tocks (or waits) instead of repeating IDs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "camelCase", default))]
pub struct SnoSnapshot {
    /// The partition of every ID.
    pub partition: Partition,
    /// Lower bound of the sequence pool (inclusive).
    pub sequence_min: u16,
    /// Upper bound of the sequence pool (inclusive).
    pub sequence_max: u16,
    /// The last sequence issued in the `wall_hi` time unit (0 means `sequence_min`). Above
    /// `sequence_max` while the generator is overflowing.
    pub sequence: u32,
    /// Wall time when the snapshot was taken, in 4 ms units since 2010-01-01.
    pub now: i64,
    /// The time unit of the last issued ID.
    pub wall_hi: i64,
    /// The highest time unit used on the other tick-tock timeline.
    pub wall_safe: i64,
    /// Clock regressions tick-tocked at so far; the low bit is the current tick-tock bit.
    pub drifts: u32,
}

impl SnoSnapshot {
    /// The configuration of a generator that starts after `not_before_ms` (Unix ms): the last
    /// time a previous run with this partition may have issued IDs at, such as its durable
    /// time bound ([`crate::horizon`]), a lease's last time, or a previous run's
    /// [`SnoGenerator::last_time_ms`].
    ///
    /// Both tick-tock timelines count as used up to and including the 4 ms unit of
    /// `not_before_ms`, so the generator's first ID is in a later unit (a clock at or behind
    /// that unit waits for the next one): nothing of the previous run's time is issued again.
    /// A `not_before_ms` before sno's epoch (such as 0, no previous run) gives a fresh
    /// generator; one past sno's range gives a generator that issues nothing before 2079.
    ///
    /// The sequence bounds are as in the fields of the same names (either order; `sequence_max`
    /// 0 means 65535), checked by [`SnoGenerator::from_snapshot`].
    pub fn starting_after(
        partition: Partition,
        not_before_ms: u64,
        sequence_min: u16,
        sequence_max: u16,
    ) -> Self {
        let fresh = SnoSnapshot {
            partition,
            sequence_min,
            sequence_max,
            ..SnoSnapshot::default()
        };
        if not_before_ms < EPOCH_MS {
            return fresh;
        }
        let wall = wall_of_unix_ms(not_before_ms);
        SnoSnapshot {
            wall_hi: wall,
            wall_safe: wall,
            // The unit's whole pool is used up (at or above any sequence_max, and never below
            // sequence_min); also not 0, so even unit 0 is not taken for a fresh start.
            sequence: u32::from(MAX_SEQUENCE),
            ..fresh
        }
    }
}

/// What a generator reports while callers stall on a used-up sequence pool, at most once
/// per time unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverflowNotification {
    /// Start of the time unit the stall happened in.
    pub now: SystemTime,
    /// Calls currently stalled, this one included.
    pub count: u32,
    /// For how many time units (4 ms each) the current overflow has lasted, this one included.
    pub ticks: u32,
}

type Handler = Arc<dyn Fn(&OverflowNotification) + Send + Sync>;

#[derive(Debug, Default)]
struct OverflowState {
    stalled: u32,
    first_unit: u64,
    last_unit: Option<u64>,
    notified_unit: Option<u64>,
}

/// A thread-safe sno generator for one partition.
///
/// **Fast path (wait-free):** one clock read, one load and one `fetch_add` on a single 64-bit
/// word that holds the time unit, the tick-tock bit and the sequence together. (Go sno keeps
/// them in separate atomics and so returns duplicates when two goroutines race a unit change.)
///
/// **Sequence:** restarts at `sequence_min` in each 4 ms unit and never passes
/// `sequence_max`: calls beyond it stall until the next unit and are reported through the
/// overflow handler ([`with_overflow_handler`](Self::with_overflow_handler)).
///
/// **Clock regressions:** the first regression does not wait: the generator toggles the
/// tick-tock bit and carries on at the earlier time on the other timeline, which is unused
/// there. Only a regression into time both timelines have used (at or before `wall_safe`)
/// waits, until the first unit that is safe again.
///
/// **Blocking:** [`new_id`](Self::new_id) waits through the clock;
/// [`poll_new`](Self::poll_new) never waits and returns the deadline instead.
pub struct SnoGenerator<C = SystemClock> {
    word: AtomicU64,
    seq_min: u64,
    seq_max: u64,
    partition: Partition,
    /// Regressions are rare; a std mutex serialises them (no await while held). Holds
    /// `wall_safe`, the highest unit used on the timeline the word is not on.
    regression: Mutex<u64>,
    drifts: AtomicU32,
    /// The separate sequence of `new_with_time`.
    static_seq: AtomicU64,
    overflow: Mutex<OverflowState>,
    on_overflow: Option<Handler>,
    fence: Option<Arc<Fence>>,
    horizon: Option<Arc<Horizon>>,
    clock: C,
}

impl<C> fmt::Debug for SnoGenerator<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnoGenerator")
            .field("partition", &self.partition)
            .field("sequence_min", &self.seq_min)
            .field("sequence_max", &self.seq_max)
            .field("drifts", &self.drifts.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock leaves plain numbers behind: carry on.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The next default partition: a base taken from the time of the first request, plus one
/// per generator, unique within the process for 65536 generators.
fn default_partition(now_nanos: u64) -> Result<Partition, SnoError> {
    static BASE: OnceLock<u16> = OnceLock::new();
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    if n > u32::from(u16::MAX) {
        return Err(SnoError::PartitionPoolExhausted);
    }
    let base = *BASE.get_or_init(|| ((now_nanos / 1_000_000) ^ (now_nanos >> 32)) as u16);
    Ok(Partition::from_u16(base.wrapping_add(n as u16)))
}

impl<C: Clock> SnoGenerator<C> {
    /// A generator with a partition from the in-process pool (unique among this process's
    /// generators, based on time so it changes across restarts) and the full sequence pool.
    ///
    /// # Errors
    /// [`SnoError::PartitionPoolExhausted`] after 65536 such generators.
    pub fn new(clock: C) -> Result<Self, SnoError> {
        let partition = default_partition(clock.now_nanos())?;
        Self::from_snapshot(
            &SnoSnapshot {
                partition,
                ..SnoSnapshot::default()
            },
            clock,
        )
    }

    /// A generator configured, or restored, from a snapshot.
    ///
    /// # Errors
    /// [`SnoError::InvalidSequenceBounds`]: identical bounds, a pool of fewer than 4
    /// sequences, or a current sequence below the lower bound.
    pub fn from_snapshot(snapshot: &SnoSnapshot, clock: C) -> Result<Self, SnoError> {
        let (mut min, mut max) = (snapshot.sequence_min, snapshot.sequence_max);
        let invalid = |reason| SnoError::InvalidSequenceBounds {
            min: snapshot.sequence_min,
            max: snapshot.sequence_max,
            sequence: snapshot.sequence,
            reason,
        };
        if max == 0 && min != MAX_SEQUENCE {
            max = MAX_SEQUENCE;
        }
        if min == max {
            return Err(invalid(
                "the bounds are identical, leaving no sequence pool",
            ));
        }
        if max < min {
            std::mem::swap(&mut min, &mut max);
        }
        if u32::from(max) - u32::from(min) + 1 < MIN_SEQUENCE_POOL {
            return Err(invalid("a generator needs a sequence pool of at least 4"));
        }
        let sequence = match snapshot.sequence {
            0 => u32::from(min),
            s if s < u32::from(min) => {
                return Err(invalid("the current sequence is below sequence_min"))
            }
            s => s,
        };
        let (min, max) = (u64::from(min), u64::from(max));
        let wall_hi = clamp_units(snapshot.wall_hi);
        // The word holds the *next* sequence; a snapshot holds the last one issued.
        let next = (u64::from(sequence) + 1).min(max + 1);
        let fresh = snapshot.wall_hi == 0 && snapshot.sequence == 0;
        let next = if fresh { max + 1 } else { next };
        Ok(SnoGenerator {
            word: AtomicU64::new(pack(
                wall_hi,
                u64::from(snapshot.drifts & 1) * TICK_BIT,
                next,
            )),
            seq_min: min,
            seq_max: max,
            partition: snapshot.partition,
            regression: Mutex::new(clamp_units(snapshot.wall_safe)),
            drifts: AtomicU32::new(snapshot.drifts),
            static_seq: AtomicU64::new(min),
            overflow: Mutex::new(OverflowState::default()),
            on_overflow: None,
            fence: None,
            horizon: None,
            clock,
        })
    }

    /// Issues no ID whose time is past `horizon` (one more atomic load per ID), waiting for
    /// it at most its stall wait.
    #[must_use]
    pub fn with_horizon(mut self, horizon: Arc<Horizon>) -> Self {
        self.horizon = Some(horizon);
        self
    }

    /// The time bound, if the generator has one (readiness probes check it).
    pub fn horizon(&self) -> Option<&Arc<Horizon>> {
        self.horizon.as_ref()
    }

    /// Calls `handler` (at most once per time unit) while calls stall on a used-up sequence
    /// pool. Keep it short; to hand the notifications to another thread, `try_send` them on
    /// a channel.
    #[must_use]
    pub fn with_overflow_handler(
        mut self,
        handler: impl Fn(&OverflowNotification) + Send + Sync + 'static,
    ) -> Self {
        self.on_overflow = Some(Arc::new(handler));
        self
    }

    /// Stops issuing IDs (with [`SnoError::LeaseLost`]) while `fence` is raised: the
    /// partition's lease holder raises it when the partition is no longer provably ours.
    #[must_use]
    pub fn with_fence(mut self, fence: Arc<Fence>) -> Self {
        self.fence = Some(fence);
        self
    }

    /// The partition of every ID.
    pub fn partition(&self) -> Partition {
        self.partition
    }
    /// The lower bound of the sequence pool.
    pub fn sequence_min(&self) -> u16 {
        self.seq_min as u16
    }
    /// The upper bound of the sequence pool.
    pub fn sequence_max(&self) -> u16 {
        self.seq_max as u16
    }
    /// The size of the sequence pool: IDs per 4 ms unit (sno's `Cap()`).
    pub fn cap(&self) -> u32 {
        (self.seq_max - self.seq_min + 1) as u32
    }
    /// IDs issued in the current time unit (sno's `Len()`).
    pub fn len(&self) -> u32 {
        let w = self.word.load(Ordering::Acquire);
        match self.units_now() {
            Ok(now) if now == w >> UNIT_SHIFT => {
                ((w & SEQ_MASK).min(self.seq_max + 1) - self.seq_min) as u32
            }
            _ => 0,
        }
    }
    /// Whether no ID was issued in the current time unit.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The last sequence issued in the current unit, `sequence_min` if the next call starts a
    /// new unit, above `sequence_max` while overflowing (sno's `Sequence()`).
    pub fn sequence(&self) -> u32 {
        let w = self.word.load(Ordering::Acquire);
        match self.units_now() {
            Ok(now) if now == w >> UNIT_SHIFT => ((w & SEQ_MASK) - 1) as u32,
            _ => self.seq_min as u32,
        }
    }
    /// Clock regressions tick-tocked at so far.
    pub fn drifts(&self) -> u32 {
        self.drifts.load(Ordering::Acquire)
    }
    /// The clock the generator reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Unix milliseconds of the start of the latest 4 ms time unit this generator has used:
    /// the unit of its last ID or, after a clock regression, the later unit the other
    /// tick-tock timeline reached before it, whichever is later (IDs of
    /// [`new_with_time`](Self::new_with_time) do not count). For a generator that has issued
    /// nothing, the unit it was restored at ([`EPOCH_MS`] when fresh).
    ///
    /// This is the not-before time of a next run:
    /// [`SnoSnapshot::starting_after`]`(partition, last_time_ms, ..)` issues none of this run's
    /// IDs again, even with a clock still behind. (Snowflake's counterpart is
    /// [`SnowflakeGenerator::last_timestamp_ms`](crate::snowflake::SnowflakeGenerator::last_timestamp_ms).)
    pub fn last_time_ms(&self) -> u64 {
        // Under the lock, as `regress` moves the word and `wall_safe` together.
        let wall_safe = *lock(&self.regression);
        let hi = self.word.load(Ordering::Acquire) >> UNIT_SHIFT;
        // Both are at most MAX_TIMESTAMP (2^39 - 1): the cast is exact.
        unix_ms_of_wall(hi.max(wall_safe) as i64)
    }

    /// A copy of the bookkeeping, to restore the generator later (take it once the generator
    /// is offline: it goes stale at once while IDs are being issued).
    pub fn snapshot(&self) -> SnoSnapshot {
        let wall_safe = lock(&self.regression);
        let w = self.word.load(Ordering::Acquire);
        SnoSnapshot {
            partition: self.partition,
            sequence_min: self.seq_min as u16,
            sequence_max: self.seq_max as u16,
            sequence: ((w & SEQ_MASK) - 1) as u32,
            now: self.units_now().map_or(0, |u| u as i64),
            wall_hi: (w >> UNIT_SHIFT) as i64,
            wall_safe: *wall_safe as i64,
            drifts: self.drifts.load(Ordering::Acquire),
        }
    }

    /// A new ID at the clock's time, stalling on a used-up pool and waiting out a regression
    /// into unsafe time.
    ///
    /// # Errors
    /// [`SnoError::TimeOutOfRange`] if the clock is outside 2010..2079.
    #[inline]
    pub fn new_id(&self, meta: u8) -> Result<SnoId, SnoError> {
        loop {
            let poll = match self.poll_new(meta) {
                Err(SnoError::HorizonStalled(stalled)) => {
                    // Only a generator with a horizon stalls on one.
                    let h = self
                        .horizon
                        .as_ref()
                        .ok_or(SnoError::HorizonStalled(stalled))?;
                    h.wait(self.clock.now_nanos())
                        .map_err(SnoError::HorizonStalled)?;
                    continue;
                }
                other => other?,
            };
            match poll {
                Poll::Ready(id) => return Ok(id),
                Poll::Pending {
                    until_nanos,
                    reason: WaitReason::SequenceExhausted,
                } => self.stall(until_nanos),
                Poll::Pending { until_nanos, .. } => self.clock.wait_until(until_nanos),
            }
        }
    }

    /// A new ID if one can be issued now, or the wall time to wait for. Never blocks (a
    /// regression takes a short lock).
    ///
    /// # Errors
    /// [`SnoError::TimeOutOfRange`] if the clock is outside 2010..2079.
    #[inline]
    pub fn poll_new(&self, meta: u8) -> Result<Poll<SnoId>, SnoError> {
        // One read-modify-write on the shared word, then the clock. The word fetch_add
        // returns is authoritative: its unit, tick and sequence were never handed out before.
        // Reading the clock after it means the word's unit comes from a reading no later
        // than ours, so `now < hi` is a real regression.
        let w = self.word.fetch_add(1, Ordering::AcqRel);
        let now = match self.issuable_units_now() {
            Ok(now) => now,
            Err(e) => {
                // Fenced or stalled: the sequence taken is never issued. Calls refused for
                // long (a lease lost for an hour under load) must not carry it into the tick
                // bit.
                self.clamp_overflow();
                return Err(e);
            }
        };
        let hi = w >> UNIT_SHIFT;
        if now == hi {
            if w & SEQ_MASK <= self.seq_max {
                return Ok(Poll::Ready(self.id_of(w, meta)));
            }
            self.clamp_overflow();
            return Ok(self.exhausted(hi));
        }
        // The sequence just taken belongs to another unit and is never issued: sequences are
        // only issued from the unit the clock reads, so skipping one is harmless.
        self.slow_path(now, meta)
    }

    /// A new unit, or a regression.
    #[cold]
    fn slow_path(&self, mut now: u64, meta: u8) -> Result<Poll<SnoId>, SnoError> {
        loop {
            let w = self.word.load(Ordering::Acquire);
            let hi = w >> UNIT_SHIFT;
            if now == hi {
                // Another thread moved the word to our unit meanwhile.
                let w = self.word.fetch_add(1, Ordering::AcqRel);
                if w >> UNIT_SHIFT == now && w & SEQ_MASK <= self.seq_max {
                    return Ok(Poll::Ready(self.id_of(w, meta)));
                }
                if w >> UNIT_SHIFT == now {
                    self.clamp_overflow();
                    return Ok(self.exhausted(now));
                }
            } else if now > hi {
                let tick = w & TICK_BIT;
                let next = pack(now, tick, self.seq_min + 1);
                if self
                    .word
                    .compare_exchange(w, next, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Ok(Poll::Ready(self.id_of(pack(now, tick, self.seq_min), meta)));
                }
            } else if let Some(poll) = self.regress(meta)? {
                return Ok(poll);
            }
            now = self.issuable_units_now()?;
        }
    }

    /// Keeps the 24-bit sequence field far from carrying into the tick bit: calls that find
    /// the pool used up (or poll a unit they cannot use) still add to it. Any value above
    /// `sequence_max` means "used up", so lowering it to `sequence_max + 1` issues nothing.
    #[cold]
    fn clamp_overflow(&self) {
        const CLAMP_ABOVE: u64 = 1 << (SEQ_BITS - 1);
        let _ = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (w & SEQ_MASK > CLAMP_ABOVE).then(|| (w & !SEQ_MASK) | (self.seq_max + 1))
            });
    }

    /// The clock moved back: toggle the timeline if the time is safe there, or say how long to
    /// wait. `None` means the regression was already dealt with: try again.
    #[cold]
    fn regress(&self, meta: u8) -> Result<Option<Poll<SnoId>>, SnoError> {
        let mut wall_safe = lock(&self.regression);
        loop {
            let w = self.word.load(Ordering::Acquire);
            let now = self.issuable_units_now()?;
            let hi = w >> UNIT_SHIFT;
            if now >= hi {
                return Ok(None);
            }
            if now > *wall_safe {
                // The other timeline was only used up to wall_safe: switch to it.
                let tick = (w & TICK_BIT) ^ TICK_BIT;
                let next = pack(now, tick, self.seq_min + 1);
                if self
                    .word
                    .compare_exchange(w, next, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    *wall_safe = hi;
                    self.drifts.fetch_add(1, Ordering::AcqRel);
                    let id = self.id_of(pack(now, tick, self.seq_min), meta);
                    return Ok(Some(Poll::Ready(id)));
                }
                continue;
            }
            // Both timelines have used this time. Staying on ours is safe from `hi` on; the
            // other one from `wall_safe + 1` on: wait for whichever comes first.
            self.clamp_overflow();
            let target = hi.min(*wall_safe + 1);
            return Ok(Some(Poll::Pending {
                until_nanos: unit_start(target),
                reason: WaitReason::UnsafePast {
                    by: Duration::from_nanos((target - now) * TIME_UNIT_NANOS),
                },
            }));
        }
    }

    fn exhausted(&self, unit: u64) -> Poll<SnoId> {
        Poll::Pending {
            until_nanos: unit_start(unit + 1),
            reason: WaitReason::SequenceExhausted,
        }
    }

    /// Waits for the next unit after a used-up pool, reporting the overflow.
    #[cold]
    fn stall(&self, until_nanos: u64) {
        let unit = (until_nanos - EPOCH_NANOS) / TIME_UNIT_NANOS - 1;
        let notification = {
            let mut o = lock(&self.overflow);
            // An overflow goes on while stalls keep coming in consecutive units.
            let continues = o.stalled > 0 || o.last_unit.is_some_and(|last| unit <= last + 1);
            if !continues {
                o.first_unit = unit;
            }
            o.last_unit = Some(o.last_unit.map_or(unit, |last| last.max(unit)));
            o.stalled += 1;
            if self.on_overflow.is_some() && o.notified_unit != Some(unit) {
                o.notified_unit = Some(unit);
                Some(OverflowNotification {
                    now: UNIX_EPOCH + Duration::from_nanos(unit_start(unit)),
                    count: o.stalled,
                    ticks: (unit.saturating_sub(o.first_unit) + 1) as u32,
                })
            } else {
                None
            }
        };
        if let (Some(n), Some(handler)) = (notification, &self.on_overflow) {
            handler(&n);
        }
        self.clock.wait_until(until_nanos);
        lock(&self.overflow).stalled -= 1;
    }

    /// An ID with a given timestamp (sno's `NewWithTime`), for porting old records.
    ///
    /// These IDs are exempt from tick-tock (the bit is 0) and take their sequence from a
    /// counter of their own, independent of time, which counts from `sequence_min` to
    /// `sequence_max` and then silently starts again at `sequence_min`: after a full pool at
    /// the same time unit, IDs repeat. Avoiding that is the caller's job.
    ///
    /// # Errors
    /// [`SnoError::TimeOutOfRange`] if `time` is outside 2010..2079.
    pub fn new_with_time(&self, meta: u8, time: SystemTime) -> Result<SnoId, SnoError> {
        let nanos = time
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64);
        let units = units_of(nanos)?;
        let (min, max) = (self.seq_min, self.seq_max);
        let seq = self
            .static_seq
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                Some(if s >= max { min } else { s + 1 })
            })
            .unwrap_or(min);
        Ok(SnoId::from_parts(
            units,
            false,
            meta,
            self.partition,
            seq as u16,
        ))
    }

    #[inline]
    fn id_of(&self, w: u64, meta: u8) -> SnoId {
        SnoId::from_parts(
            w >> UNIT_SHIFT,
            w & TICK_BIT != 0,
            meta,
            self.partition,
            (w & SEQ_MASK) as u16,
        )
    }

    #[inline]
    fn units_now(&self) -> Result<u64, SnoError> {
        units_of(self.clock.now_nanos())
    }

    /// The clock's unit for an ID about to be issued: as [`units_now`](Self::units_now), and
    /// within the horizon (calls that issue nothing, such as `len`, read `units_now`).
    #[inline]
    fn issuable_units_now(&self) -> Result<u64, SnoError> {
        let now = self.clock.now_nanos();
        // The lease, with this very reading: a process that wakes from a pause finds its
        // deadline passed before its first ID.
        if let Some(fence) = &self.fence {
            if !fence.admits(now, || self.clock.monotonic_nanos()) {
                return Err(SnoError::LeaseLost);
            }
        }
        if let Some(h) = &self.horizon {
            h.check(now).map_err(SnoError::HorizonStalled)?;
        }
        units_of(now)
    }
}

#[inline]
fn units_of(unix_nanos: u64) -> Result<u64, SnoError> {
    match unix_nanos.checked_sub(EPOCH_NANOS) {
        Some(since) if since / TIME_UNIT_NANOS <= MAX_TIMESTAMP => Ok(since / TIME_UNIT_NANOS),
        _ => Err(SnoError::TimeOutOfRange { unix_nanos }),
    }
}

fn unit_start(units: u64) -> u64 {
    EPOCH_NANOS + units * TIME_UNIT_NANOS
}

fn clamp_units(units: i64) -> u64 {
    units.clamp(0, MAX_TIMESTAMP as i64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::sync::atomic::AtomicUsize;

    /// 2023-11-14T22:13:20Z, on a 4 ms boundary.
    const T0_MS: u64 = 1_700_000_000_000;
    const UNIT: Duration = Duration::from_millis(4);

    fn gen(clock: &ManualClock, min: u16, max: u16) -> SnoGenerator<ManualClock> {
        SnoGenerator::from_snapshot(
            &SnoSnapshot {
                partition: Partition(*b"AB"),
                sequence_min: min,
                sequence_max: max,
                ..Default::default()
            },
            clock.clone(),
        )
        .unwrap()
    }

    fn t0_units() -> u64 {
        (T0_MS * 1_000_000 - EPOCH_NANOS) / TIME_UNIT_NANOS
    }

    #[test]
    fn sequence_resets_per_unit_from_min() {
        let clock = ManualClock::from_millis(T0_MS);
        let g = gen(&clock, 100, 200);
        let a = g.new_id(9).unwrap();
        let b = g.new_id(9).unwrap();
        assert_eq!((a.sequence(), b.sequence()), (100, 101));
        assert_eq!(a.timestamp_units(), t0_units());
        assert_eq!((a.meta(), a.partition()), (9, Partition(*b"AB")));
        assert!(!a.tick_tock());
        assert_eq!(g.len(), 2);
        assert_eq!(g.sequence(), 101);
        // Within the same 4 ms unit: same timestamp.
        clock.advance(Duration::from_millis(3));
        assert_eq!(g.new_id(0).unwrap().sequence(), 102);
        clock.advance(Duration::from_millis(1));
        let c = g.new_id(0).unwrap();
        assert_eq!((c.timestamp_units(), c.sequence()), (t0_units() + 1, 100));
        assert_eq!(g.cap(), 101);
    }

    #[test]
    fn first_regression_tick_tocks_without_waiting() {
        let clock = ManualClock::from_millis(T0_MS);
        let g = gen(&clock, 0, 0);
        let a = g.new_id(0).unwrap();
        clock.advance(UNIT * 10);
        let b = g.new_id(0).unwrap();
        clock.rewind(UNIT * 5);
        let c = g.new_id(0).unwrap();
        assert!(c.tick_tock());
        assert_eq!(c.timestamp_units(), t0_units() + 5);
        assert_eq!(g.drifts(), 1);
        assert_eq!(g.snapshot().wall_safe as u64, b.timestamp_units());
        assert_eq!(clock.waits(), 0);
        // Continue on the toggled timeline.
        clock.advance(UNIT);
        let d = g.new_id(0).unwrap();
        assert!(d.tick_tock());
        assert_ne!(a, c);
        assert!(d > c);
    }

    #[test]
    fn second_regression_past_wall_safe_flips_back() {
        let clock = ManualClock::from_millis(T0_MS);
        let g = gen(&clock, 0, 0);
        clock.advance(UNIT * 10);
        g.new_id(0).unwrap(); // t0+10, tick 0
        clock.rewind(UNIT * 5);
        g.new_id(0).unwrap(); // t0+5, tick 1; wall_safe = t0+10
        clock.advance(UNIT * 15);
        g.new_id(0).unwrap(); // t0+20, tick 1
        clock.rewind(UNIT * 8);
        let e = g.new_id(0).unwrap(); // t0+12 > wall_safe: back to tick 0
        assert!(!e.tick_tock());
        assert_eq!(e.timestamp_units(), t0_units() + 12);
        assert_eq!(g.drifts(), 2);
        assert_eq!(clock.waits(), 0);
    }

    #[test]
    fn second_regression_into_unsafe_past_waits_keeping_the_bit() {
        let clock = ManualClock::from_millis(T0_MS);
        let g = gen(&clock, 0, 0);
        clock.advance(UNIT * 10);
        g.new_id(0).unwrap(); // t0+10 tick 0
        clock.rewind(UNIT * 5);
        g.new_id(0).unwrap(); // t0+5 tick 1, wall_safe t0+10
        clock.advance(UNIT * 7);
        let hi = g.new_id(0).unwrap(); // t0+12 tick 1
        clock.rewind(UNIT * 4); // t0+8 <= wall_safe: unsafe on both timelines
        match g.poll_new(0).unwrap() {
            Poll::Pending {
                until_nanos,
                reason: WaitReason::UnsafePast { by },
            } => {
                // Tick 0 is free after t0+10, tick 1 after t0+12: wait for t0+11.
                assert_eq!(until_nanos, unit_start(t0_units() + 11));
                assert_eq!(by, UNIT * 3);
            }
            other => panic!("expected a wait, got {other:?}"),
        }
        let f = g.new_id(0).unwrap();
        assert_eq!(clock.waits(), 1);
        assert_eq!(clock.waited(), UNIT * 3);
        assert_eq!(f.timestamp_units(), t0_units() + 11);
        assert!(!f.tick_tock());
        assert_eq!(g.drifts(), 2);
        assert_ne!(f, hi);
    }

    #[test]
    fn unsafe_past_behind_our_own_high_waits_for_it() {
        let clock = ManualClock::from_millis(T0_MS);
        let g = gen(&clock, 0, 0);
        clock.advance(UNIT * 10);
        g.new_id(0).unwrap(); // t0+10 tick 0
        clock.rewind(UNIT * 5);
        let b = g.new_id(0).unwrap(); // t0+5 tick 1, wall_safe t0+10
        clock.advance(UNIT * 2);
        g.new_id(0).unwrap(); // t0+7 tick 1
        clock.rewind(UNIT * 4); // t0+3: our own timeline is free again from t0+7
        let c = g.new_id(0).unwrap();
        assert_eq!(clock.waited(), UNIT * 4);
        assert_eq!(c.timestamp_units(), t0_units() + 7);
        assert!(c.tick_tock());
        // Continues the sequence of t0+7 (0 was issued; 1 was taken by the call that found
        // the regression, and is never issued).
        assert_eq!(c.sequence(), 2);
        assert_ne!(b, c);
    }

    #[test]
    fn overflow_stalls_and_notifies_count_and_ticks() {
        let clock = ManualClock::from_millis(T0_MS);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let g = gen(&clock, 10, 13).with_overflow_handler(move |n| sink.lock().unwrap().push(*n));
        let ids: Vec<_> = (0..4).map(|_| g.new_id(0).unwrap()).collect();
        assert_eq!(
            ids.iter().map(|i| i.sequence()).collect::<Vec<_>>(),
            [10, 11, 12, 13]
        );
        // The fifth stalls until the next unit.
        let e = g.new_id(0).unwrap();
        assert_eq!((e.timestamp_units(), e.sequence()), (t0_units() + 1, 10));
        assert_eq!(clock.waits(), 1);
        // Overflow again in the next unit: the same overflow, two ticks long.
        for _ in 0..4 {
            g.new_id(0).unwrap();
        }
        let n = seen.lock().unwrap().clone();
        assert_eq!(n.len(), 2);
        assert_eq!((n[0].count, n[0].ticks), (1, 1));
        assert_eq!((n[1].count, n[1].ticks), (1, 2));
        assert_eq!(n[0].now, UNIX_EPOCH + Duration::from_millis(T0_MS));
        // A quiet unit in between starts a new overflow.
        clock.advance(UNIT * 3);
        for _ in 0..5 {
            g.new_id(0).unwrap();
        }
        let n = seen.lock().unwrap().clone();
        assert_eq!((n[2].count, n[2].ticks), (1, 1));
    }

    #[test]
    fn overflow_is_reported_once_per_unit_with_concurrent_stalls() {
        let clock = ManualClock::from_millis(T0_MS);
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        let g = gen(&clock, 0, 3).with_overflow_handler(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        for _ in 0..4 {
            g.new_id(0).unwrap();
        }
        // poll_new reports the overflow without stalling or notifying.
        assert!(matches!(
            g.poll_new(0).unwrap(),
            Poll::Pending {
                reason: WaitReason::SequenceExhausted,
                ..
            }
        ));
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        assert_eq!(g.len(), 4);
    }

    #[test]
    fn polling_a_used_up_pool_never_carries_into_the_tick_bit() {
        let clock = ManualClock::from_millis(T0_MS);
        let g = gen(&clock, 0, 3);
        for _ in 0..4 {
            g.new_id(0).unwrap();
        }
        // More polls than the 24-bit sequence field holds.
        for _ in 0..(1u32 << SEQ_BITS) + 1000 {
            assert!(g.poll_new(0).unwrap().ready().is_none());
        }
        let w = g.word.load(Ordering::Acquire);
        assert_eq!(w >> UNIT_SHIFT, t0_units());
        assert_eq!(w & TICK_BIT, 0);
        clock.advance(UNIT);
        let id = g.new_id(0).unwrap();
        assert_eq!(
            (id.timestamp_units(), id.tick_tock(), id.sequence()),
            (t0_units() + 1, false, 0)
        );
    }

    #[test]
    fn a_raised_fence_stops_the_generator_until_lowered() {
        let clock = ManualClock::from_millis(T0_MS);
        let fence = Arc::new(Fence::new());
        let g = gen(&clock, 0, 0).with_fence(fence.clone());
        g.new_id(0).unwrap();
        fence.raise();
        assert_eq!(g.new_id(0).unwrap_err(), SnoError::LeaseLost);
        fence.lower();
        assert!(g.new_id(0).is_ok());
    }

    #[test]
    fn a_lease_window_that_passed_stops_it_and_refused_calls_never_reach_the_tick_bit() {
        use crate::fence::Sent;
        let clock = ManualClock::from_millis(T0_MS);
        let fence = Arc::new(Fence::new());
        fence.confirm(Sent::now(&clock), Duration::from_secs(4));
        let g = gen(&clock, 0, 0).with_fence(fence.clone());
        let first = g.new_id(0).unwrap();
        clock.advance(Duration::from_secs(5));
        assert_eq!(g.poll_new(0).unwrap_err(), SnoError::LeaseLost);
        // Calls refused while fenced each take a sequence from the shared word; far more of
        // them than the 24-bit field holds must leave the timeline (tick bit) as it was.
        let w = g.word.load(Ordering::Acquire);
        g.word.store(
            (w & !SEQ_MASK) | ((1 << (SEQ_BITS - 1)) + 5),
            Ordering::Release,
        );
        for _ in 0..1_000 {
            assert_eq!(g.poll_new(0).unwrap_err(), SnoError::LeaseLost);
        }
        let after = g.word.load(Ordering::Acquire);
        assert_eq!(after & TICK_BIT, w & TICK_BIT);
        assert!(after & SEQ_MASK <= 1 << (SEQ_BITS - 1), "{after:x}");
        fence.confirm(Sent::now(&clock), Duration::from_secs(4));
        let next = g.new_id(0).unwrap();
        assert!(next > first);
        assert_eq!(next.tick_tock(), first.tick_tock());
    }

    #[test]
    fn bounds_are_validated() {
        let clock = ManualClock::from_millis(T0_MS);
        let snap = |min, max, sequence| SnoSnapshot {
            sequence_min: min,
            sequence_max: max,
            sequence,
            ..Default::default()
        };
        let err = |s: SnoSnapshot| {
            SnoGenerator::from_snapshot(&s, clock.clone())
                .unwrap_err()
                .to_string()
        };
        assert!(err(snap(5, 5, 0)).contains("identical"));
        assert!(err(snap(5, 7, 0)).contains("at least 4"));
        assert!(err(snap(10, 20, 3)).contains("below sequence_min"));
        // Either order; max 0 means 65535.
        let g = SnoGenerator::from_snapshot(&snap(200, 100, 0), clock.clone()).unwrap();
        assert_eq!((g.sequence_min(), g.sequence_max()), (100, 200));
        let g = SnoGenerator::from_snapshot(&snap(32768, 0, 0), clock.clone()).unwrap();
        assert_eq!((g.sequence_min(), g.sequence_max()), (32768, 65535));
        let g = SnoGenerator::from_snapshot(&snap(65535, 0, 0), clock.clone()).unwrap();
        assert_eq!((g.sequence_min(), g.sequence_max()), (0, 65535));
        let g = SnoGenerator::from_snapshot(&snap(0, 3, 0), clock).unwrap();
        assert_eq!(g.cap(), 4);
    }

    #[test]
    fn new_with_time_has_its_own_rolling_sequence() {
        let clock = ManualClock::from_millis(T0_MS);
        let g = gen(&clock, 7, 10);
        let t = UNIX_EPOCH + Duration::from_millis(1_300_000_000_123);
        let seqs: Vec<u16> = (0..6)
            .map(|_| g.new_with_time(1, t).unwrap().sequence())
            .collect();
        assert_eq!(seqs, [7, 8, 9, 10, 7, 8]);
        let id = g.new_with_time(1, t).unwrap();
        assert!(!id.tick_tock());
        assert_eq!(id.timestamp_unix_ns(), 1_300_000_000_120 * 1_000_000);
        // The time-based sequence is untouched.
        assert_eq!(g.new_id(0).unwrap().sequence(), 7);
        let before = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        assert!(matches!(
            g.new_with_time(0, before),
            Err(SnoError::TimeOutOfRange { .. })
        ));
    }

    #[test]
    fn clock_out_of_range_is_an_error() {
        let clock = ManualClock::from_millis(1_000_000_000_000); // 2001
        let g = gen(&clock, 0, 0);
        assert!(matches!(g.new_id(0), Err(SnoError::TimeOutOfRange { .. })));
    }

    #[test]
    fn snapshot_restore_keeps_ids_unique_across_a_restart_behind() {
        let clock = ManualClock::from_millis(T0_MS);
        let g = gen(&clock, 0, 0);
        let mut seen: Vec<SnoId> = (0..5).map(|_| g.new_id(0).unwrap()).collect();
        let snap = g.snapshot();
        assert_eq!(snap.sequence, 4);
        assert_eq!(snap.wall_hi as u64, t0_units());
        // Restart at the same time: continues the sequence.
        let r = SnoGenerator::from_snapshot(&snap, clock.clone()).unwrap();
        let x = r.new_id(0).unwrap();
        assert_eq!((x.timestamp_units(), x.sequence()), (t0_units(), 5));
        seen.push(x);
        // Restart with the clock 40 ms behind: tick-tocks instead of repeating.
        let snap = r.snapshot();
        clock.rewind(UNIT * 10);
        let r = SnoGenerator::from_snapshot(&snap, clock.clone()).unwrap();
        let y = r.new_id(0).unwrap();
        assert!(y.tick_tock());
        seen.push(y);
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 7);
    }

    #[cfg(feature = "serde")]
    #[test]
    fn snapshot_json_uses_sno_field_names() {
        let s = SnoSnapshot {
            partition: Partition([65, 10]),
            sequence_min: 1,
            sequence_max: 100,
            sequence: 5,
            now: 10,
            wall_hi: 9,
            wall_safe: 3,
            drifts: 1,
        };
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            json,
            r#"{"partition":[65,10],"sequenceMin":1,"sequenceMax":100,"sequence":5,"now":10,"wallHi":9,"wallSafe":3,"drifts":1}"#
        );
        assert_eq!(serde_json::from_str::<SnoSnapshot>(&json).unwrap(), s);
        // Missing fields default, as in Go.
        let d: SnoSnapshot = serde_json::from_str(r#"{"partition":[1,2]}"#).unwrap();
        assert_eq!(d.partition, Partition([1, 2]));
    }

    #[test]
    fn starting_after_issues_after_the_not_before_unit_only() {
        let clock = ManualClock::from_millis(T0_MS);
        let start = |nb| {
            let s = SnoSnapshot::starting_after(Partition(*b"AB"), nb, 3, 9);
            SnoGenerator::from_snapshot(&s, clock.clone()).unwrap()
        };
        // Not before 2 ms into the clock's unit: that unit counts as used, so the first ID
        // waits for the next one (on tick 0, from sequence_min).
        let g = start(T0_MS + 2);
        assert_eq!(g.last_time_ms(), T0_MS);
        let a = g.new_id(0).unwrap();
        assert_eq!(clock.waited(), UNIT);
        assert_eq!(
            (a.timestamp_units(), a.tick_tock(), a.sequence()),
            (t0_units() + 1, false, 3)
        );
        assert_eq!(g.last_time_ms(), T0_MS + 4);
        // A not-before time behind the clock: the clock's unit at once.
        let g = start(T0_MS - 400);
        let b = g.new_id(0).unwrap();
        assert_eq!(clock.waits(), 1);
        assert_eq!((b.timestamp_units(), b.sequence()), (t0_units() + 1, 3));
        // Before sno's epoch (0: no previous run): fresh.
        for nb in [0, EPOCH_MS - 1] {
            assert_eq!(
                SnoSnapshot::starting_after(Partition(*b"AB"), nb, 3, 9),
                SnoSnapshot {
                    partition: Partition(*b"AB"),
                    sequence_min: 3,
                    sequence_max: 9,
                    ..SnoSnapshot::default()
                }
            );
        }
        // Unit 0 itself, if used, is not fresh: it is not issued again.
        let s = SnoSnapshot::starting_after(Partition(*b"AB"), EPOCH_MS + 3, 0, 0);
        let early = ManualClock::from_millis(EPOCH_MS + 1);
        let g = SnoGenerator::from_snapshot(&s, early.clone()).unwrap();
        assert_eq!(g.new_id(0).unwrap().timestamp_units(), 1);
        assert_eq!(early.waited(), Duration::from_millis(3));
        // Past sno's range: clamped to its last unit, never wrapped.
        let s = SnoSnapshot::starting_after(Partition(*b"AB"), u64::MAX, 0, 0);
        assert_eq!(
            (s.wall_hi, s.wall_safe),
            (MAX_TIMESTAMP as i64, MAX_TIMESTAMP as i64)
        );
        // Bounds in either order, any bounds: the pool of the not-before unit (the clock's,
        // t0 + 1, by now) is used up.
        let s = SnoSnapshot::starting_after(Partition(*b"AB"), T0_MS + 4, 9, 3);
        let g = SnoGenerator::from_snapshot(&s, clock.clone()).unwrap();
        assert_eq!((g.sequence_min(), g.sequence_max()), (3, 9));
        assert!(g.poll_new(0).unwrap().ready().is_none());
    }

    #[test]
    fn last_time_ms_counts_the_timeline_left_behind_by_a_regression() {
        let clock = ManualClock::from_millis(T0_MS);
        let g = gen(&clock, 0, 3);
        assert_eq!(g.last_time_ms(), EPOCH_MS);
        let mut seen = Vec::new();
        for _ in 0..10 {
            seen.push(g.new_id(0).unwrap());
            clock.advance(UNIT);
        }
        assert_eq!(g.last_time_ms(), T0_MS + 4 * 9);
        // The clock goes back 20 units: the generator tick-tocks and issues there.
        clock.rewind(UNIT * 20);
        seen.push(g.new_id(0).unwrap());
        assert_eq!(g.drifts(), 1);
        assert_eq!(g.snapshot().wall_hi as u64, t0_units() - 10);
        // The last ID's unit is 19 units back, but the other timeline used up to t0+9.
        assert_eq!(g.last_time_ms(), T0_MS + 4 * 9);
        // A restart after it, with the clock still behind, repeats nothing of either.
        let s = SnoSnapshot::starting_after(g.partition(), g.last_time_ms(), 0, 3);
        let r = SnoGenerator::from_snapshot(&s, clock.clone()).unwrap();
        for _ in 0..40 {
            seen.push(r.new_id(0).unwrap());
        }
        let n = seen.len();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), n);
    }

    #[test]
    fn default_partitions_are_unique_in_process() {
        let clock = ManualClock::from_millis(T0_MS);
        let a = SnoGenerator::new(clock.clone()).unwrap();
        let b = SnoGenerator::new(clock).unwrap();
        assert_ne!(a.partition(), b.partition());
        let x = crate::sno::new(3).unwrap();
        assert_eq!(x.meta(), 3);
    }
}
