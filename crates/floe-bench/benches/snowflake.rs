//! Snowflake: saturated throughput on 1 and 2 threads beside snowflaked, rs-snowflake and
//! ferroid (cap 4,096,000 IDs/s for 12 sequence bits per ms), and the generator's own cost
//! on a layout that never saturates, beside a bare clock read; each of floe's also with
//! Meituan Leaf's random start of a millisecond's sequence.

use std::sync::Mutex;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use floe_bench::batch;
use floe_core::clock::{Clock, SystemClock};
use floe_core::snowflake::{Layout, SnowflakeConfig};

/// 100 ms worth of IDs at the cap.
const BATCH: u64 = 409_600;

fn saturated(c: &mut Criterion) {
    let mut g = c.benchmark_group("snowflake_saturated");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Elements(BATCH));
    for threads in [1usize, 2] {
        let floe = SnowflakeConfig::new(Layout::TWITTER)
            .worker(1)
            .build(SystemClock)
            .unwrap();
        g.bench_function(BenchmarkId::new("floe", threads), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| batch(threads, BATCH, &|| floe.next_id().unwrap()))
                    .sum()
            })
        });
        // Meituan Leaf's random start (below 100) on every unit after one not used up: at
        // the cap every unit is used up, so the cap stands.
        let leafish = SnowflakeConfig::new(Layout::TWITTER)
            .worker(1)
            .random_start(100)
            .build(SystemClock)
            .unwrap();
        g.bench_function(BenchmarkId::new("floe_random_start", threads), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| batch(threads, BATCH, &|| leafish.next_id().unwrap()))
                    .sum()
            })
        });
        let snowflaked = snowflaked::sync::Generator::new(1);
        g.bench_function(BenchmarkId::new("snowflaked", threads), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| batch(threads, BATCH, &|| snowflaked.generate::<u64>()))
                    .sum()
            })
        });
        let rs = Mutex::new(snowflake::SnowflakeIdGenerator::new(1, 1));
        g.bench_function(BenchmarkId::new("rs-snowflake", threads), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| batch(threads, BATCH, &|| rs.lock().unwrap().real_time_generate()))
                    .sum()
            })
        });
        let ferroid = ferroid::generator::AtomicSnowflakeGenerator::<
            ferroid::id::SnowflakeTwitterId,
            _,
        >::new(
            1,
            ferroid::time::MonotonicClock::<1>::with_epoch(ferroid::time::TWITTER_EPOCH),
        );
        g.bench_function(BenchmarkId::new("ferroid", threads), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        batch(threads, BATCH, &|| {
                            ferroid.next_id(|_| std::hint::spin_loop())
                        })
                    })
                    .sum()
            })
        });
    }
    g.finish();
}

fn own_cost(c: &mut Criterion) {
    let mut g = c.benchmark_group("snowflake_cost");
    g.throughput(Throughput::Elements(1));
    g.bench_function("system_clock_read", |b| b.iter(|| SystemClock.now_nanos()));
    // 22 sequence bits: 4.2 billion IDs/s, more than one thread can ask for.
    let wide = Layout::new(41, 0, 0, 22).unwrap();
    let floe = SnowflakeConfig::new(wide).build(SystemClock).unwrap();
    g.bench_function("floe_unsaturated", |b| b.iter(|| floe.next_id().unwrap()));
    let leafish = SnowflakeConfig::new(wide)
        .random_start(100)
        .build(SystemClock)
        .unwrap();
    g.bench_function("floe_unsaturated_random_start", |b| {
        b.iter(|| leafish.next_id().unwrap())
    });
    g.finish();
}

criterion_group!(benches, saturated, own_cost);
criterion_main!(benches);
