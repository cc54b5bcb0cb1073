//! The cost of the durable time bound and of the lease's local deadline:
//! each time-based generator without either, with a horizon, with a fence whose deadline is
//! far ahead (as a confirmed lease keeps it), and with both (as `floe serve` runs them), in the
//! same run. Both checks always pass: what is measured is the atomic loads and, for the
//! deadline, the read of the coarse monotonic clock. The clock reads themselves are measured
//! beside them (`clock/...`).

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use floe_core::clock::{Clock, SystemClock};
use floe_core::fence::{Fence, Sent};
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

/// A fence confirmed for a year: the deadline is checked on every ID, never reached.
fn leased() -> Arc<Fence> {
    let fence = Arc::new(Fence::new());
    fence.confirm(Sent::now(&SystemClock), Duration::from_secs(365 * 86_400));
    fence
}

#[allow(clippy::disallowed_methods)] // the benches run on the real clock
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn cost(c: &mut Criterion) {
    let mut g = c.benchmark_group("horizon_cost");
    g.throughput(Throughput::Elements(1));
    g.bench_function("clock/wall", |b| b.iter(|| SystemClock.now_nanos()));
    g.bench_function("clock/monotonic_coarse", |b| {
        b.iter(|| SystemClock.monotonic_nanos())
    });
    g.bench_function("clock/instant", |b| b.iter(std::time::Instant::now));

    // 22 sequence bits: never saturates on one thread.
    let wide = Layout::new(41, 0, 0, 22).unwrap();
    let plain = SnowflakeConfig::new(wide).build(SystemClock).unwrap();
    g.bench_function("snowflake/without", |b| b.iter(|| plain.next_id().unwrap()));
    let bounded = SnowflakeConfig::new(wide)
        .horizon(far())
        .build(SystemClock)
        .unwrap();
    g.bench_function("snowflake/with", |b| b.iter(|| bounded.next_id().unwrap()));
    let fenced = SnowflakeConfig::new(wide)
        .fence(leased())
        .build(SystemClock)
        .unwrap();
    g.bench_function("snowflake/lease", |b| b.iter(|| fenced.next_id().unwrap()));
    let both = SnowflakeConfig::new(wide)
        .horizon(far())
        .fence(leased())
        .build(SystemClock)
        .unwrap();
    g.bench_function("snowflake/both", |b| b.iter(|| both.next_id().unwrap()));

    let plain = LexicalGenerator::new(SystemClock, 7);
    g.bench_function("lexical/without", |b| b.iter(|| plain.next_id().unwrap()));
    let bounded = LexicalGenerator::new(SystemClock, 7).horizon(far());
    g.bench_function("lexical/with", |b| b.iter(|| bounded.next_id().unwrap()));
    let fenced = LexicalGenerator::new(SystemClock, 7).fence(leased());
    g.bench_function("lexical/lease", |b| b.iter(|| fenced.next_id().unwrap()));
    let both = LexicalGenerator::new(SystemClock, 7)
        .horizon(far())
        .fence(leased());
    g.bench_function("lexical/both", |b| b.iter(|| both.next_id().unwrap()));

    // sno saturates at 16,384 IDs per 4 ms unit: every side stalls alike.
    let plain = SnoGenerator::new(SystemClock).unwrap();
    g.bench_function("sno/without", |b| b.iter(|| plain.new_id(0).unwrap()));
    let bounded = SnoGenerator::new(SystemClock).unwrap().with_horizon(far());
    g.bench_function("sno/with", |b| b.iter(|| bounded.new_id(0).unwrap()));
    let fenced = SnoGenerator::new(SystemClock).unwrap().with_fence(leased());
    g.bench_function("sno/lease", |b| b.iter(|| fenced.new_id(0).unwrap()));
    let both = SnoGenerator::new(SystemClock)
        .unwrap()
        .with_horizon(far())
        .with_fence(leased());
    g.bench_function("sno/both", |b| b.iter(|| both.new_id(0).unwrap()));
    g.finish();
}

criterion_group!(benches, cost);
criterion_main!(benches);
