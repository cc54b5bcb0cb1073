//! The cost of showing an ID, beside the plain ID in the same run: a Snowflake ID
//! as issued, written in decimal, written through templates (padded, dated, with meta and a
//! check digit), and scrambled (FF1 over int63 and over 10 digits), then a scrambled ID
//! decoded. Goals: a rendered ID under 1 µs, a scrambled one under 5 µs, on one core.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use floe_core::clock::SystemClock;
use floe_core::scramble::{Domain, Keyring, Scrambler};
use floe_core::snowflake::{Layout, SnowflakeConfig};
use floe_core::template::{NoMeta, Template};

const KEY: &str = "1:7d2f6c0e9a4b13c58e0f21d3a6b9c4e7f0a1b2c3d4e5f60718293a4b5c6d7e8f";

fn present(c: &mut Criterion) {
    let mut g = c.benchmark_group("present");
    g.throughput(Throughput::Elements(1));
    // 22 sequence bits: never saturates on one thread.
    let wide = Layout::new(41, 0, 0, 22).unwrap();
    let gen = SnowflakeConfig::new(wide).build(SystemClock).unwrap();
    g.bench_function("plain/snowflake_id", |b| b.iter(|| gen.next_id().unwrap()));
    g.bench_function("plain/snowflake_id_decimal", |b| {
        b.iter(|| {
            let mut buf = itoa::Buffer::new();
            black_box(buf.format(gen.next_id().unwrap()).len())
        })
    });

    let keys = Keyring::parse(KEY).unwrap();
    let int63 = Scrambler::new(Domain::Int63, &keys);
    let digits = Scrambler::new(Domain::digits(10).unwrap(), &keys);
    let now_ms = 1_795_395_723_004u64;
    let meta = [("uid", "1234")];
    let templates = [
        ("render/seq_padded", "ORD-{seq:20}"),
        ("render/dated", "ORD-{date:%Y%m%d}-{seq:20}"),
        ("render/meta_luhn", "{meta.uid:08}{seq:20}{luhn}"),
        (
            "render/dated_meta_damm",
            "INV{date:%y%j}{meta.uid:06}{seq:20}{damm}",
        ),
    ];
    let mut out = String::with_capacity(64);
    for (name, pattern) in templates {
        let t = Template::parse(pattern).unwrap();
        g.bench_function(name, |b| {
            b.iter(|| {
                let id = gen.next_id().unwrap();
                out.clear();
                t.render_into(&mut out, id, now_ms, &meta[..], None)
                    .unwrap();
                black_box(out.len())
            })
        });
    }
    g.bench_function("render/new_string", |b| {
        let t = Template::parse("ORD-{date:%Y%m%d}-{seq:20}").unwrap();
        b.iter(|| {
            black_box(
                t.render(gen.next_id().unwrap(), now_ms, &NoMeta, None)
                    .unwrap(),
            )
        })
    });

    // Sequence-sized numbers (a scrambled Snowflake ID is the same cost: 63 bits either way).
    let mut n = 0u64;
    g.bench_function("scramble/int63", |b| {
        b.iter(|| {
            n += 1;
            int63.scramble(n).unwrap()
        })
    });
    g.bench_function("scramble/digits10", |b| {
        b.iter(|| {
            n += 1;
            digits.scramble(n % 10_000_000_000).unwrap()
        })
    });
    let t = Template::parse("P{seq:scrambled}").unwrap();
    g.bench_function("scramble/template_int63", |b| {
        b.iter(|| {
            n += 1;
            out.clear();
            t.render_into(&mut out, n, now_ms, &NoMeta, Some(&int63))
                .unwrap();
            black_box(out.len())
        })
    });
    let text = int63.encode(123_456_789).unwrap();
    g.bench_function("unscramble/int63_text", |b| {
        b.iter(|| int63.decode(black_box(&text)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, present);
criterion_main!(benches);
