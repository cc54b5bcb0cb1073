//! LexicalUUID per thread, and UUIDv7 / ULID through floe beside the same crates called
//! directly.

use std::sync::Mutex;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use floe_core::clock::{Clock, SystemClock};
use floe_core::horizon::{Horizon, DEFAULT_STALL_WAIT};
use floe_core::lexical::LexicalGenerator;
use floe_core::ulid::{random_at, UlidGenerator};
use floe_core::uuid7::Uuid7Generator;

fn lexical(c: &mut Criterion) {
    let mut g = c.benchmark_group("lexical");
    g.throughput(Throughput::Elements(1));
    let gen = LexicalGenerator::new(SystemClock, 42);
    g.bench_function("floe_next_id", |b| b.iter(|| gen.next_id().unwrap()));
    g.finish();
}

fn uuid_ulid(c: &mut Criterion) {
    let mut g = c.benchmark_group("uuid7");
    g.throughput(Throughput::Elements(1));
    let floe = Uuid7Generator::new(SystemClock);
    g.bench_function("floe", |b| b.iter(|| floe.generate()));
    // Under a durable time bound (as floe serve and floe gen run it): one more atomic load.
    let bound = || std::sync::Arc::new(Horizon::new(u64::MAX / 2_000_000, DEFAULT_STALL_WAIT));
    let bounded = Uuid7Generator::new(SystemClock).horizon(bound());
    g.bench_function("floe_bounded", |b| b.iter(|| bounded.generate()));
    g.bench_function("uuid_now_v7", |b| b.iter(uuid::Uuid::now_v7));
    g.finish();

    let mut g = c.benchmark_group("ulid_monotonic");
    g.throughput(Throughput::Elements(1));
    let floe = UlidGenerator::new(SystemClock);
    g.bench_function("floe", |b| b.iter(|| floe.generate().unwrap()));
    let bounded = UlidGenerator::new(SystemClock).horizon(bound());
    g.bench_function("floe_bounded", |b| b.iter(|| bounded.generate().unwrap()));
    // The crate's own generator, shared the only way it can be (a mutex), on the system time.
    let direct = Mutex::new(ulid::Generator::new());
    g.bench_function("ulid_generator", |b| {
        b.iter(|| {
            direct
                .lock()
                .unwrap()
                .generate_from_datetime(SystemClock.now_system_time())
                .unwrap()
        })
    });
    g.finish();

    let mut g = c.benchmark_group("ulid_random");
    g.throughput(Throughput::Elements(1));
    g.bench_function("floe", |b| b.iter(|| random_at(&SystemClock)));
    g.bench_function("ulid_generate", |b| b.iter(ulid::Ulid::generate));
    g.finish();
}

criterion_group!(benches, lexical, uuid_ulid);
criterion_main!(benches);
