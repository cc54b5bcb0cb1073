//! floe-client's cached hand-out beside a bare `AtomicU64::fetch_add` (the ceiling), in the
//! same run, against a real server in-process (floe-server on 127.0.0.1, a `memory` store,
//! `limits.max_batch` 1,000,000):
//!
//! - `client/atomic_fetch_add/T`: `fetch_add(1, Relaxed)` on one counter shared by T threads.
//! - `client/weak_try_next/T`, `client/weak_next/T` (1 thread), `client/snowflake_try_next/T`:
//!   IDs handed out **once cached**: before each timed stretch the cache is filled (untimed:
//!   the current segment and the next one fetched), and a stretch draws at most what is
//!   cached, so no timed call waits for the server. Blocks of 1,024; WEAK segments of 10,000
//!   (the sequencer's largest batch), Snowflake segments of 1,000,000 of a layout with 20
//!   sequence bits (`41/2/20`, so that filling between stretches is quick).
//! - `client/weak_next_sustained/1`, `client/snowflake_next_sustained/1`: `next()` with every
//!   wait for the server included (one caller drawing as fast as it can), so the end-to-end
//!   rate: the server's segment fetches (and, for Snowflake, the default layout's 4,096 IDs a
//!   millisecond) bound it.
//! - `client/grpc_round_trip_*`: one gRPC call per ID (`NextSequence` WEAK count 1, `NextIds`
//!   Snowflake count 1), for contrast.
//!
//! `cargo bench -p floe-client --bench client -- --quick`

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use floe_client::{CacheOptions, CacheStats, Client, Increment, SnowflakeBuffer, WeakSequence};
use tokio::runtime::Runtime;

/// A WEAK segment: the sequencer's largest batch.
const WEAK_SEGMENT: u32 = 10_000;
/// A Snowflake segment: the largest `max_batch`.
const SNOWFLAKE_SEGMENT: u32 = 1_000_000;
/// Blocks of 1,024 IDs a thread.
const BLOCK: u32 = 1_024;

/// The server, on a runtime of its own (one worker: the client's background fetches run there
/// too, off the measuring threads).
struct Bench {
    rt: Runtime,
    url: String,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

fn server() -> Bench {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut c = floe_server::ServerConfig {
        state_dir: dir.path().to_path_buf(),
        ..floe_server::ServerConfig::default()
    };
    c.listen.grpc = "127.0.0.1:0".into();
    c.listen.http = "off".into();
    c.limits.max_batch = SNOWFLAKE_SEGMENT;
    c.stores.insert("main".into(), "memory".into());
    // 20 sequence bits (a million IDs a millisecond): a cached segment of a million is
    // fetched in about a millisecond of the generator's time, not the 244 ms of 4,096 a
    // millisecond, so that filling the cache between timed stretches stays short.
    c.snowflake.named.insert(
        "wide".into(),
        floe_server::config::LayoutConfig {
            layout: "41/2/20".into(),
            ..Default::default()
        },
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let url = rt.block_on(async {
        let clock: floe_server::ServerClock = Arc::new(floe_core::clock::SystemClock);
        let now_ms = clock.now_nanos() / 1_000_000;
        let server = floe_server::Server::start(c.check(now_ms).unwrap(), clock)
            .await
            .unwrap();
        let url = format!("http://{}", server.grpc_addr().unwrap());
        tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        url
    });
    Bench {
        rt,
        url,
        _dir: dir,
        _stop: stop,
    }
}

/// Runs `per_thread(n)` on `threads` threads at once, `iters` calls in all; the wall time.
fn on_threads(threads: u64, iters: u64, per_thread: &(dyn Fn(u64) + Sync)) -> Duration {
    let barrier = Barrier::new(threads as usize + 1);
    std::thread::scope(|s| {
        for t in 0..threads {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                per_thread(iters / threads + u64::from(t < iters % threads));
            });
        }
        barrier.wait();
        Instant::now()
    })
    .elapsed()
}

/// A cache to measure: its stats, and one untimed draw (waiting if need be).
trait Cached: Sync {
    fn stats(&self) -> CacheStats;
    fn draw(&self, rt: &Runtime);
}

impl Cached for WeakSequence {
    fn stats(&self) -> CacheStats {
        WeakSequence::stats(self)
    }
    fn draw(&self, rt: &Runtime) {
        if self.try_next().is_none() {
            black_box(rt.block_on(self.next()).unwrap());
        }
    }
}

impl Cached for SnowflakeBuffer {
    fn stats(&self) -> CacheStats {
        SnowflakeBuffer::stats(self)
    }
    fn draw(&self, rt: &Runtime) {
        if self.try_next().is_none() {
            black_box(rt.block_on(self.next()).unwrap());
        }
    }
}

/// Fills the cache (untimed): draws until the next segment is being fetched, then waits for
/// it. What is cached afterwards: the current segment's rest and the next one.
fn fill(cache: &dyn Cached, rt: &Runtime) -> u64 {
    loop {
        let s = cache.stats();
        if s.next_ready {
            return s.buffered;
        }
        if s.fetching {
            std::thread::sleep(Duration::from_micros(200));
        } else {
            cache.draw(rt);
        }
    }
}

/// `iters` calls of `draw` on `threads` threads, timed only while the cache holds what they
/// draw: stretches of at most what is cached, the cache filled between them (untimed).
fn cached_draws(
    cache: &dyn Cached,
    rt: &Runtime,
    threads: u64,
    iters: u64,
    draw: &(dyn Fn(u64) + Sync),
) -> Duration {
    // More threads: each may drop the rest of a block when the cache moves to its next
    // segment (two segments a stretch at most), so leave that much unasked.
    let margin = if threads > 1 {
        threads * 2 * u64::from(BLOCK)
    } else {
        0
    };
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let cached = fill(cache, rt);
        let n = left.min(cached - margin);
        total += if threads == 1 {
            // On this thread: no thread to start within the timed stretch.
            let start = Instant::now();
            draw(n);
            start.elapsed()
        } else {
            on_threads(threads, n, draw)
        };
        left -= n;
    }
    total
}

fn cached(c: &mut Criterion) {
    let bench = server();
    let rt = &bench.rt;
    let client = rt.block_on(Client::connect(bench.url.clone())).unwrap();
    let weak = client
        .weak_sequence(
            "main",
            "bench",
            CacheOptions {
                segment: WEAK_SEGMENT,
                block: Some(BLOCK),
                refill_at_percent: 10,
            },
        )
        .unwrap();
    let snow_options = CacheOptions {
        segment: SNOWFLAKE_SEGMENT,
        block: Some(BLOCK),
        refill_at_percent: 10,
    };
    let snow = client.snowflake_buffer("wide", snow_options).unwrap();
    // The default layout (4,096 IDs a millisecond), for the end-to-end rate.
    let snow_default = client.snowflake_buffer("", snow_options).unwrap();
    let counter = AtomicU64::new(0);

    let mut g = c.benchmark_group("client");
    g.throughput(Throughput::Elements(1));
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    g.sample_size(20);
    for threads in [1u64, 2] {
        g.bench_function(BenchmarkId::new("atomic_fetch_add", threads), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, &|n| {
                    for _ in 0..n {
                        black_box(counter.fetch_add(1, Ordering::Relaxed));
                    }
                })
            })
        });
        if threads == 1 {
            // Stretches of at most two segments of 10,000: one thread only, as starting
            // threads for each stretch would cost more than the stretch.
            g.bench_function(BenchmarkId::new("weak_try_next", threads), |b| {
                b.iter_custom(|iters| {
                    cached_draws(&weak, rt, threads, iters, &|n| {
                        for _ in 0..n {
                            black_box(weak.try_next().expect("cached"));
                        }
                    })
                })
            });
        }
        g.bench_function(BenchmarkId::new("snowflake_try_next", threads), |b| {
            b.iter_custom(|iters| {
                cached_draws(&snow, rt, threads, iters, &|n| {
                    for _ in 0..n {
                        black_box(snow.try_next().expect("cached"));
                    }
                })
            })
        });
    }
    g.bench_function(BenchmarkId::new("weak_next", 1), |b| {
        b.iter_custom(|iters| {
            let h = rt.handle();
            cached_draws(&weak, rt, 1, iters, &|n| {
                h.block_on(async {
                    for _ in 0..n {
                        black_box(weak.next().await.unwrap());
                    }
                })
            })
        })
    });
    g.finish();

    // Every wait included: the end-to-end rate of one caller.
    let mut g = c.benchmark_group("client");
    g.throughput(Throughput::Elements(1));
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(3));
    g.sample_size(10);
    g.bench_function(BenchmarkId::new("weak_next_sustained", 1), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            rt.block_on(async {
                for _ in 0..iters {
                    black_box(weak.next().await.unwrap());
                }
            });
            start.elapsed()
        })
    });
    g.bench_function(BenchmarkId::new("snowflake_next_sustained", 1), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            rt.block_on(async {
                for _ in 0..iters {
                    black_box(snow_default.next().await.unwrap());
                }
            });
            start.elapsed()
        })
    });
    g.finish();

    // One gRPC call per ID.
    let mut g = c.benchmark_group("client");
    g.throughput(Throughput::Elements(1));
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    g.bench_function("grpc_round_trip_weak", |b| {
        b.iter(|| {
            rt.block_on(client.next_sequence("main", "bench-rt", Increment::Weak, 1))
                .unwrap()
        })
    });
    g.bench_function("grpc_round_trip_snowflake", |b| {
        b.iter(|| rt.block_on(client.snowflakes("", 1)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, cached);
criterion_main!(benches);
