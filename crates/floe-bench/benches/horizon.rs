//! The cost of the durable time bound (issue 8): each time-based generator with and without a
//! horizon, in the same run. The horizon is far ahead (as the writer keeps it), so the check
//! always passes: what is measured is the one more atomic load and compare per ID.

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use floe_core::clock::SystemClock;
use floe_core::horizon::Horizon;
use floe_core::lexical::LexicalGenerator;
use floe_core::sno::SnoGenerator;
use floe_core::snowflake::{Layout, SnowflakeConfig};

fn far() -> Arc<Horizon> {
    // A year ahead: never reached while the bench runs.
    let now_ms = now_ms();
    Arc::new(Horizon::new(
        now_ms + 365 * 86_400_000,
        Duration::from_secs(2),
    ))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn cost(c: &mut Criterion) {
    let mut g = c.benchmark_group("horizon_cost");
    g.throughput(Throughput::Elements(1));
    // 22 sequence bits: never saturates on one thread.
    let wide = Layout::new(41, 0, 0, 22).unwrap();
    let plain = SnowflakeConfig::new(wide).build(SystemClock).unwrap();
    g.bench_function("snowflake/without", |b| b.iter(|| plain.next_id().unwrap()));
    let bounded = SnowflakeConfig::new(wide)
        .horizon(far())
        .build(SystemClock)
        .unwrap();
    g.bench_function("snowflake/with", |b| b.iter(|| bounded.next_id().unwrap()));

    let plain = LexicalGenerator::new(SystemClock, 7);
    g.bench_function("lexical/without", |b| b.iter(|| plain.next_id().unwrap()));
    let bounded = LexicalGenerator::new(SystemClock, 7).horizon(far());
    g.bench_function("lexical/with", |b| b.iter(|| bounded.next_id().unwrap()));

    // sno saturates at 16,384 IDs per 4 ms unit: both sides stall alike.
    let plain = SnoGenerator::new(SystemClock).unwrap();
    g.bench_function("sno/without", |b| b.iter(|| plain.new_id(0).unwrap()));
    let bounded = SnoGenerator::new(SystemClock).unwrap().with_horizon(far());
    g.bench_function("sno/with", |b| b.iter(|| bounded.new_id(0).unwrap()));
    g.finish();
}

criterion_group!(benches, cost);
criterion_main!(benches);
