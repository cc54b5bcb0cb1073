//! sno: saturated throughput on 1 and 2 threads (cap 16,384,000 IDs/s per partition), encode
//! and decode.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use floe_bench::batch;
use floe_core::clock::SystemClock;
use floe_core::sno::{SnoGenerator, SnoId};

/// 100 ms worth of IDs at the cap.
const BATCH: u64 = 1_638_400;

fn saturated(c: &mut Criterion) {
    let mut g = c.benchmark_group("sno_saturated");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Elements(BATCH));
    for threads in [1usize, 2] {
        let gen = SnoGenerator::new(SystemClock).unwrap();
        g.bench_function(BenchmarkId::new("floe", threads), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| batch(threads, BATCH, &|| gen.new_id(0).unwrap()))
                    .sum()
            })
        });
    }
    g.finish();
}

fn codec(c: &mut Criterion) {
    let mut g = c.benchmark_group("sno_codec");
    g.throughput(Throughput::Elements(1));
    let id = SnoId::from_bytes([78, 111, 33, 96, 160, 255, 154, 10, 16, 51]);
    let text = id.encode();
    g.bench_function("encode", |b| {
        b.iter(|| std::hint::black_box(std::hint::black_box(id).encode()))
    });
    g.bench_function("decode", |b| {
        b.iter(|| SnoId::decode(std::hint::black_box(&text[..])).unwrap())
    });
    // The harness's own cost for a 10-byte ID through the same Result and black_box.
    let bytes = id.to_bytes();
    g.bench_function("from_slice_baseline", |b| {
        b.iter(|| SnoId::from_slice(std::hint::black_box(&bytes[..])).unwrap())
    });
    g.finish();
}

criterion_group!(benches, saturated, codec);
criterion_main!(benches);
