//! The sequencer: WEAK from a warm buffer beside a bare `AtomicU64::fetch_add` (1 and 2
//! threads), STRONG on each store beside the raw store operation issued by the same client
//! library at the same concurrency, and each store's segment fetch latency (p50, p99); and the
//! guard's price alone (floe_sequencer::guard): STRONG on a memory store beside the same store
//! declaring itself durable (so guarded), one caller.
//!
//! Server stores are benchmarked when their URL is in the environment (FLOE_TEST_REDIS,
//! FLOE_TEST_POSTGRES, FLOE_TEST_MARIADB, FLOE_TEST_ETCD, FLOE_TEST_ZOOKEEPER, as
//! scripts/bench.sh sets them after starting the servers); others are skipped with a note.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use floe_sequencer::weak::WeakKey;
use floe_sequencer::{Key, Mode, ServeOptions, StepPolicy, Store, StoreHandle};
use tokio::runtime::Runtime;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `per_thread(n)` on `threads` threads at once, `iters` calls in all; the wall time.
fn on_threads(threads: u64, iters: u64, per_thread: &(dyn Fn(u64) + Sync)) -> Duration {
    let barrier = Barrier::new(threads as usize + 1);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                barrier.wait();
                per_thread(iters / threads);
            });
        }
        barrier.wait();
        let start = Instant::now();
        // The scope joins the threads when it ends.
        start
    })
    .elapsed()
}

fn weak_warm(c: &mut Criterion) {
    let rt = runtime();
    let store: Arc<dyn Store> = Arc::new(floe_sequencer::stores::memory::MemoryStore::new());
    let key = Arc::new(WeakKey::new(
        store,
        Key::new("bench").unwrap(),
        StepPolicy {
            min: 1 << 20,
            max: 1 << 30,
            target: Duration::from_secs(60),
        },
        Duration::from_secs(2),
    ));
    // Warm: the first segment is fetched.
    rt.block_on(key.next()).unwrap();
    let counter = AtomicU64::new(0);
    let h = rt.handle().clone();

    let mut g = c.benchmark_group("weak_warm");
    g.throughput(Throughput::Elements(1));
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
        g.bench_function(BenchmarkId::new("floe_next_local", threads), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, &|n| {
                    h.block_on(async {
                        for _ in 0..n {
                            black_box(key.next_local().await.unwrap());
                        }
                    })
                })
            })
        });
        g.bench_function(BenchmarkId::new("floe_try_next_local", threads), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, &|n| {
                    h.block_on(async {
                        for _ in 0..n {
                            let id = match key.try_next_local() {
                                Some(id) => id,
                                None => key.next_local().await.unwrap(),
                            };
                            black_box(id);
                        }
                    })
                })
            })
        });
        g.bench_function(BenchmarkId::new("floe_next_ordered", threads), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, &|n| {
                    h.block_on(async {
                        for _ in 0..n {
                            black_box(key.next().await.unwrap());
                        }
                    })
                })
            })
        });
    }
    g.finish();
}

/// A raw increment of the store, issued with the store's own client library.
type RawOp =
    Arc<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync>;

/// The stores to measure: name, floe store, raw operation (None when its URL is not set).
async fn stores(dir: &std::path::Path) -> Vec<(&'static str, Arc<dyn Store>, RawOp)> {
    let mut out: Vec<(&'static str, Arc<dyn Store>, RawOp)> = Vec::new();
    let var = |n: &str| std::env::var(n).ok();
    let raw_key = "floe-bench-raw";

    // embedded: a redb write transaction, committed durably, on a blocking thread.
    {
        let path = dir.join("raw.redb");
        let db = Arc::new(redb::Database::create(&path).unwrap());
        let table: redb::TableDefinition<&str, i64> = redb::TableDefinition::new("raw");
        let store = floe_sequencer::open("embedded", dir).await.unwrap();
        let raw: RawOp = Arc::new(move || {
            let db = Arc::clone(&db);
            Box::pin(async move {
                tokio::task::spawn_blocking(move || {
                    use redb::ReadableTable;
                    let txn = db.begin_write().unwrap();
                    {
                        let mut t = txn.open_table(table).unwrap();
                        let v = t.get(raw_key).unwrap().map(|v| v.value()).unwrap_or(0);
                        t.insert(raw_key, v + 1).unwrap();
                    }
                    txn.commit().unwrap();
                })
                .await
                .unwrap();
            })
        });
        out.push(("embedded", store, raw));
    }
    if let Some(url) = var("FLOE_TEST_REDIS") {
        let client = redis::Client::open(url.as_str()).unwrap();
        let conn = redis::aio::ConnectionManager::new(client).await.unwrap();
        let raw: RawOp = Arc::new(move || {
            let mut conn = conn.clone();
            Box::pin(async move {
                let _: i64 = redis::cmd("INCR")
                    .arg(raw_key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            })
        });
        out.push(("redis", floe_sequencer::open(&url, dir).await.unwrap(), raw));
    } else {
        eprintln!("FLOE_TEST_REDIS not set: redis skipped");
    }
    if let Some(url) = var("FLOE_TEST_POSTGRES") {
        let store = floe_sequencer::open(&url, dir).await.unwrap();
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(16)
            .connect(&url)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO floe_sequences (key, value) VALUES ($1, 0) ON CONFLICT DO NOTHING",
        )
        .bind(raw_key)
        .execute(&pool)
        .await
        .unwrap();
        let raw: RawOp = Arc::new(move || {
            let pool = pool.clone();
            Box::pin(async move {
                sqlx::query(
                    "UPDATE floe_sequences SET value = value + 1 WHERE key = $1 RETURNING value",
                )
                .bind(raw_key)
                .fetch_one(&pool)
                .await
                .unwrap();
            })
        });
        out.push(("postgres", store, raw));
    } else {
        eprintln!("FLOE_TEST_POSTGRES not set: postgres skipped");
    }
    if let Some(url) = var("FLOE_TEST_MARIADB") {
        let store = floe_sequencer::open(&url, dir).await.unwrap();
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(16)
            .connect(&url)
            .await
            .unwrap();
        sqlx::query("INSERT IGNORE INTO floe_sequences (k, value) VALUES (?, 0)")
            .bind(raw_key.as_bytes())
            .execute(&pool)
            .await
            .unwrap();
        let raw: RawOp = Arc::new(move || {
            let pool = pool.clone();
            Box::pin(async move {
                sqlx::query("UPDATE floe_sequences SET value = value + 1 WHERE k = ?")
                    .bind(raw_key.as_bytes())
                    .execute(&pool)
                    .await
                    .unwrap();
            })
        });
        out.push(("mysql", store, raw));
    } else {
        eprintln!("FLOE_TEST_MARIADB not set: mysql skipped");
    }
    if let Some(addr) = var("FLOE_TEST_ETCD") {
        let store = floe_sequencer::open(&format!("etcd://{addr}"), dir)
            .await
            .unwrap();
        let client =
            floe_etcd::Client::connect([addr.as_str()], floe_etcd::ConnectOptions::default())
                .unwrap();
        // etcd has no increment: the raw operation is its plainest write, a put.
        let raw: RawOp = Arc::new(move || {
            let client = client.clone();
            Box::pin(async move {
                client.put("/floe-bench-raw", "1", 0).await.unwrap();
            })
        });
        out.push(("etcd", store, raw));
    } else {
        eprintln!("FLOE_TEST_ETCD not set: etcd skipped");
    }
    if let Some(addr) = var("FLOE_TEST_ZOOKEEPER") {
        let store = floe_sequencer::open(&format!("zk://{addr}"), dir)
            .await
            .unwrap();
        let client = zookeeper_client::Client::connect(&addr).await.unwrap();
        let mode = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        let _ = client.create("/floe-bench-raw", b"0", &mode).await;
        // ZooKeeper has no increment: the raw operation is its plainest write, setData.
        let raw: RawOp = Arc::new(move || {
            let client = client.clone();
            Box::pin(async move {
                client
                    .set_data("/floe-bench-raw", b"1", None)
                    .await
                    .unwrap();
            })
        });
        out.push(("zookeeper", store, raw));
    } else {
        eprintln!("FLOE_TEST_ZOOKEEPER not set: zookeeper skipped");
    }
    out
}

/// `iters` calls of `op` spread over `conc` tasks; the wall time.
async fn concurrently(
    conc: u64,
    iters: u64,
    op: Arc<
        dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync,
    >,
) -> Duration {
    let start = Instant::now();
    let tasks: Vec<_> = (0..conc)
        .map(|t| {
            let op = Arc::clone(&op);
            let n = iters / conc + u64::from(t < iters % conc);
            tokio::spawn(async move {
                for _ in 0..n {
                    op().await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    start.elapsed()
}

fn strong(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let stores = rt.block_on(stores(dir.path()));
    for (name, store, raw) in stores {
        let mut g = c.benchmark_group(format!("strong_{name}"));
        g.throughput(Throughput::Elements(1));
        g.sample_size(10);
        g.warm_up_time(Duration::from_secs(1));
        g.measurement_time(Duration::from_secs(4));
        let handle = Arc::new(StoreHandle::new(name, store, ServeOptions::default()));
        for conc in [1u64, 16] {
            let raw = Arc::clone(&raw);
            g.bench_function(BenchmarkId::new("raw", conc), |b| {
                b.iter_custom(|iters| rt.block_on(concurrently(conc, iters, Arc::clone(&raw))))
            });
            let h = Arc::clone(&handle);
            let floe: RawOp = Arc::new(move || {
                let h = Arc::clone(&h);
                Box::pin(async move {
                    h.next_id("floe-bench-strong", Mode::Strong).await.unwrap();
                })
            });
            g.bench_function(BenchmarkId::new("floe", conc), |b| {
                b.iter_custom(|iters| rt.block_on(concurrently(conc, iters, Arc::clone(&floe))))
            });
        }
        g.finish();

        // Segment fetch latency: p50 and p99 of 300 fetches of 1,000 IDs, one at a time.
        let s = Arc::clone(handle.store());
        let mut samples: Vec<Duration> = rt.block_on(async {
            let k = Key::new("floe-bench-segment").unwrap();
            let mut v = Vec::with_capacity(300);
            for _ in 0..300 {
                let t = Instant::now();
                s.segment(&k, 1000).await.unwrap();
                v.push(t.elapsed());
            }
            v
        });
        samples.sort();
        let p = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
        let line = format!(
            "{{\"store\":\"{name}\",\"p50_us\":{:.1},\"p99_us\":{:.1},\"samples\":{}}}",
            p(0.50).as_secs_f64() * 1e6,
            p(0.99).as_secs_f64() * 1e6,
            samples.len()
        );
        println!("segment_latency {line}");
        let out =
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("../criterion/segment_latency");
        std::fs::create_dir_all(&out).ok();
        std::fs::write(out.join(format!("{name}.json")), line).ok();
    }
}

/// The memory store behind one more layer, declaring itself durable or not: [`StoreHandle`]
/// guards it when durable (high marks per key around each reservation). Both sides of the
/// comparison pay for the layer.
#[derive(Debug)]
struct DurableMemory(Arc<dyn Store>, bool);

#[async_trait::async_trait]
impl Store for DurableMemory {
    fn kind(&self) -> &'static str {
        "durable-memory"
    }
    fn capabilities(&self) -> floe_sequencer::Capabilities {
        floe_sequencer::Capabilities {
            durable: self.1,
            ..self.0.capabilities()
        }
    }
    async fn reserve(&self, key: &Key, n: u32) -> Result<i64, floe_sequencer::SeqError> {
        self.0.reserve(key, n).await
    }
    async fn raise(&self, key: &Key, floor: i64) -> Result<(), floe_sequencer::SeqError> {
        self.0.raise(key, floor).await
    }
}

/// What the guard costs a store call: STRONG (one reservation each) on a memory store, and on
/// the same store guarded, in one run.
fn guard_cost(c: &mut Criterion) {
    let rt = runtime();
    let mut g = c.benchmark_group("guard_cost");
    g.throughput(Throughput::Elements(1));
    for (name, guarded) in [("memory_unguarded", false), ("memory_guarded", true)] {
        let rt2 = rt.handle().clone();
        let store = rt
            .block_on(floe_sequencer::open("memory", "".as_ref()))
            .unwrap();
        let store: Arc<dyn Store> = Arc::new(DurableMemory(store, guarded));
        let h = StoreHandle::new(name, store, ServeOptions::default());
        assert_eq!(h.guard().is_some(), guarded);
        g.bench_function(name, |b| {
            b.iter(|| {
                rt2.block_on(async {
                    black_box(h.next_id("guard-bench", Mode::Strong).await.unwrap());
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, weak_warm, strong, guard_cost);
criterion_main!(benches);
