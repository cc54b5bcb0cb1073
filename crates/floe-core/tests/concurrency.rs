//! Several threads, millions of IDs: no duplicate, and each thread's IDs in order.
//!
//! The real-clock tests exercise real races; the manual-clock tests add a thread that moves
//! the clock forwards and backwards while the others generate.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use floe_core::clock::{Clock, ManualClock, SystemClock};
use floe_core::lexical::LexicalGenerator;
use floe_core::sno::{SnoGenerator, SnoId, SnoSnapshot};
use floe_core::snowflake::{Layout, SnowflakeConfig, SnowflakeError, SnowflakeGenerator};
use floe_core::ulid::UlidGenerator;
use floe_core::uuid7::Uuid7Generator;

const THREADS: usize = 4;

/// Runs `per_thread` calls of `next` on each of THREADS threads.
fn run<T: Send>(per_thread: usize, next: impl Fn() -> T + Sync) -> Vec<Vec<T>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| s.spawn(|| (0..per_thread).map(|_| next()).collect::<Vec<T>>()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn assert_unique<T: Eq + Hash + Copy>(per_thread: &[Vec<T>]) {
    let total: usize = per_thread.iter().map(Vec::len).sum();
    let mut seen = HashSet::with_capacity(total);
    for ids in per_thread {
        for id in ids {
            assert!(seen.insert(*id), "duplicate ID");
        }
    }
    assert_eq!(seen.len(), total);
}

fn assert_each_thread_increasing<T: Ord>(per_thread: &[Vec<T>]) {
    for ids in per_thread {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "a thread's IDs went backwards"
        );
    }
}

#[test]
fn snowflake_saturated_leaf_real_clock() {
    // 12 sequence bits: every thread keeps hitting exhaustion and unit changes.
    let gen = SnowflakeConfig::new(Layout::LEAF)
        .worker(3)
        .build(SystemClock)
        .unwrap();
    let ids = run(500_000, || gen.next_id().unwrap());
    assert_unique(&ids);
    assert_each_thread_increasing(&ids);
}

/// Leaf's random start (below 100) on a clock that moves on and back while threads take IDs:
/// still no duplicate, each thread's IDs still increasing, and starts above 0 seen.
#[test]
fn snowflake_random_start_manual_clock_with_rollbacks() {
    let clock = ManualClock::from_millis(1_700_000_000_000);
    let layout = Layout::new(41, 0, 10, 9).unwrap();
    let gen = SnowflakeConfig::new(layout)
        .random_start(100)
        .build(clock.clone())
        .unwrap();
    let ids = under_chaos(&gen, &clock);
    assert_unique(&ids);
    assert_each_thread_increasing(&ids);
    let firsts: std::collections::BTreeMap<u64, u64> = ids
        .iter()
        .flatten()
        .map(|&id| layout.decode(id))
        .fold(Default::default(), |mut m, p| {
            let e = m.entry(p.timestamp_ms).or_insert(p.sequence);
            *e = (*e).min(p.sequence);
            m
        });
    assert!(firsts.values().any(|&s| s > 0), "some unit started above 0");
    assert!(
        firsts.values().all(|&s| s < 100),
        "every unit started below 100"
    );
}

#[test]
fn snowflake_wide_sequence_real_clock() {
    let layout = Layout::new(41, 0, 0, 22).unwrap();
    let gen = SnowflakeConfig::new(layout).build(SystemClock).unwrap();
    let ids = run(1_000_000, || gen.next_id().unwrap());
    assert_unique(&ids);
    assert_each_thread_increasing(&ids);
}

/// Runs `next` on THREADS threads until `done`, and at least `min` times each.
fn run_until<T: Send>(done: &AtomicBool, min: usize, next: impl Fn() -> T + Sync) -> Vec<Vec<T>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    let mut ids = Vec::with_capacity(min);
                    while ids.len() < min || !done.load(Ordering::Relaxed) {
                        ids.push(next());
                    }
                    ids
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Moves `clock` by `moves` random small steps, mostly forwards, then sets `done`.
fn chaos(clock: &ManualClock, done: &AtomicBool, unit: Duration, max_back: u64, moves: usize) {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..moves {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if x.is_multiple_of(4) {
            clock.rewind(unit * (1 + (x >> 8) % max_back) as u32);
        } else {
            clock.advance(unit);
        }
        for _ in 0..(x >> 20) % 200 {
            std::hint::spin_loop();
        }
    }
    done.store(true, Ordering::Relaxed);
}

/// IDs of `gen` from every thread while [`chaos`] moves `clock` by milliseconds, on and back
/// (a step back past the generator's tolerance is answered by moving the clock on).
fn under_chaos(gen: &SnowflakeGenerator<ManualClock>, clock: &ManualClock) -> Vec<Vec<u64>> {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| chaos(clock, &done, Duration::from_millis(1), 12, 20_000));
        run_until(&done, 100_000, || loop {
            match gen.next_id() {
                Ok(id) => break id,
                Err(SnowflakeError::ClockMovedBackwards { .. }) => {
                    clock.advance(Duration::from_millis(1))
                }
                Err(e) => panic!("{e}"),
            }
        })
    })
}

#[test]
fn snowflake_manual_clock_with_rollbacks() {
    let clock = ManualClock::from_millis(1_700_000_000_000);
    let gen = SnowflakeConfig::new(Layout::new(41, 0, 10, 6).unwrap())
        .build(clock.clone())
        .unwrap();
    let ids = under_chaos(&gen, &clock);
    assert_unique(&ids);
    assert_each_thread_increasing(&ids);
    let stats = gen.stats();
    assert!(
        stats.backward_waits > 0 && stats.exhausted_waits > 0,
        "{stats:?}"
    );
}

#[test]
fn sno_real_clock() {
    let gen = SnoGenerator::new(SystemClock).unwrap();
    let ids = run(1_000_000, || gen.new_id(0).unwrap());
    assert_unique(&ids);
    if gen.drifts() == 0 {
        assert_each_thread_increasing(&ids);
    }
}

#[test]
fn sno_small_pool_real_clock_overflows_without_duplicates() {
    let snap = SnoSnapshot {
        sequence_max: 255,
        ..Default::default()
    };
    let gen = SnoGenerator::from_snapshot(&snap, SystemClock).unwrap();
    let ids = run(20_000, || gen.new_id(1).unwrap());
    assert_unique(&ids);
}

#[test]
fn sno_manual_clock_with_regressions_tick_tocks_without_duplicates() {
    let clock = ManualClock::from_millis(1_700_000_000_000);
    let snap = SnoSnapshot {
        sequence_max: 63,
        ..Default::default()
    };
    let gen = SnoGenerator::from_snapshot(&snap, clock.clone()).unwrap();
    let done = AtomicBool::new(false);
    let ids: Vec<Vec<SnoId>> = std::thread::scope(|s| {
        s.spawn(|| chaos(&clock, &done, Duration::from_millis(4), 8, 20_000));
        run_until(&done, 100_000, || gen.new_id(0).unwrap())
    });
    assert_unique(&ids);
    assert!(
        gen.drifts() > 1,
        "the test should have tick-tocked: drifts {} waits {} now {}",
        gen.drifts(),
        clock.waits(),
        clock.now_nanos()
    );
}

#[test]
fn lexical_real_clock() {
    let gen = LexicalGenerator::new(SystemClock, 42);
    let ids = run(1_000_000, || gen.next_id().unwrap());
    assert_unique(&ids);
    assert_each_thread_increasing(&ids);
}

#[test]
fn lexical_manual_clock_standing_still() {
    let clock = ManualClock::from_millis(1_700_000_000_000);
    let gen = LexicalGenerator::new(clock.clone(), 42);
    let ids = run(250_000, || gen.next_id().unwrap());
    assert_unique(&ids);
    assert_each_thread_increasing(&ids);
    // A clock standing still: the timestamps are exactly now .. now + N - 1.
    let max = ids.iter().flatten().map(|i| i.timestamp).max().unwrap();
    assert_eq!(
        max as u64,
        clock.now_nanos() / 1000 + (THREADS * 250_000) as u64 - 1
    );
}

#[test]
fn uuid7_and_ulid_real_clock() {
    let gen = Uuid7Generator::new(SystemClock);
    let ids = run(250_000, || gen.generate().unwrap());
    assert_unique(&ids);
    assert_each_thread_increasing(&ids);
    let gen = UlidGenerator::new(SystemClock);
    let ids = run(250_000, || gen.generate().unwrap());
    assert_unique(&ids);
    assert_each_thread_increasing(&ids);
}
