//! The memory of a process serving many distinct keys stays bounded. Each case runs in a child
//! process of its own (this test binary again, running `case`), so that it reads an RSS
//! (`/proc/self/status`) nothing else touched.
//!
//! For the memory store (100,000 keys) and the embedded store (20,000: each new key is a redb
//! commit, slow in a debug build): N new keys (WEAK, and STRONG on every fourth), then N more,
//! on a handle that holds at most N / 10 keys. The number of keys held never passes the limit
//! (plus the few with work under way), and the second N keys grow the RSS by less than 250
//! bytes a key: the store's own data (the memory store's map, the embedded store's file pages).
//! Then a control, in the same process: N more keys on a handle with no limit, as floe was
//! before; it must grow at least three times as much (about 560 bytes a key are a key's WEAK
//! buffer and STRONG queue), which shows the limit is what keeps the first figure down.

use std::sync::Arc;
use std::time::{Duration, Instant};

use floe_sequencer::{KeyLimits, Mode, ServeOptions, Store, StoreHandle};

/// Tasks asking at once: also how many keys can be in use at once, beyond the limit.
const TASKS: usize = 16;

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status");
    kb * 1024
}

/// `n` new keys named `{prefix}{i}` through `h`, from [`TASKS`] tasks; the most keys held at
/// any check.
async fn new_keys(h: &Arc<StoreHandle>, prefix: &str, n: usize) -> usize {
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let h = Arc::clone(h);
            let prefix = prefix.to_string();
            tokio::spawn(async move {
                let mut most = 0;
                for i in (t..n).step_by(TASKS) {
                    let key = format!("{prefix}{i}");
                    h.next_id(&key, Mode::Weak).await.unwrap();
                    if i % 4 == 0 {
                        h.next_id(&key, Mode::Strong).await.unwrap();
                    }
                    if i % 256 == t {
                        most = most.max(h.keys_in_memory());
                    }
                }
                most
            })
        })
        .collect();
    let mut most = 0;
    for t in tasks {
        most = most.max(t.await.unwrap());
    }
    most
}

async fn bounded(name: &str, store: Arc<dyn Store>, n: usize) {
    let limits = KeyLimits {
        idle: Duration::from_secs(600),
        max_keys: n / 10,
    };
    let h = Arc::new(
        StoreHandle::new(name, Arc::clone(&store), ServeOptions::default())
            .key_limits(limits)
            .unwrap(),
    );
    let started = Instant::now();
    let r0 = rss_bytes();
    let most = new_keys(&h, "a", n).await;
    let r1 = rss_bytes();
    let most = most.max(new_keys(&h, "b", n).await);
    let r2 = rss_bytes();
    drop(h);

    // The control: no limit.
    let unlimited = KeyLimits {
        idle: Duration::from_secs(600),
        max_keys: usize::MAX,
    };
    let h = Arc::new(
        StoreHandle::new(name, store, ServeOptions::default())
            .key_limits(unlimited)
            .unwrap(),
    );
    new_keys(&h, "c", n).await;
    let r3 = rss_bytes();
    let held = h.keys_in_memory();

    let mb = |b: u64| b as f64 / 1e6;
    let per_key = |a: u64, b: u64| b.saturating_sub(a) / n as u64;
    println!(
        "{name}: RSS {:.1} MB, {:.1} MB after {n} keys, {:.1} MB after {} ({} bytes/key for \
         the second {n}; at most {most} keys held); no limit: {:.1} MB after {n} more ({} \
         bytes/key, {held} keys held); {:.1} s",
        mb(r0),
        mb(r1),
        mb(r2),
        2 * n,
        per_key(r1, r2),
        mb(r3),
        per_key(r2, r3),
        started.elapsed().as_secs_f64()
    );
    assert!(most <= n / 10 + 2 * TASKS, "{most} keys held");
    assert_eq!(held, n, "the control holds every key");
    assert!(
        per_key(r1, r2) < 250,
        "{name}: {} bytes a key from {n} to {} keys",
        per_key(r1, r2),
        2 * n
    );
    assert!(
        per_key(r2, r3) > 3 * per_key(r1, r2),
        "{name}: the limit made no difference: {} bytes a key with it, {} without",
        per_key(r1, r2),
        per_key(r2, r3)
    );
}

/// Runs `case` in a child process: this binary, with `FLOE_MEMORY_CASE` set.
fn in_child(case: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "case", "--nocapture", "--test-threads=1"])
        .env("FLOE_MEMORY_CASE", case)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "{case}: {stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("{case}: RSS")),
        "{case} did not run: {stdout}"
    );
}

#[test]
fn the_memory_store_stays_bounded() {
    in_child("memory");
}

#[test]
fn the_embedded_store_stays_bounded() {
    in_child("embedded");
}

/// A case, in the child process `in_child` starts; nothing in the parent.
#[test]
fn case() {
    let Ok(case) = std::env::var("FLOE_MEMORY_CASE") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match case.as_str() {
            "memory" => {
                let store = floe_sequencer::open("memory", "".as_ref()).await.unwrap();
                bounded("memory", store, 100_000).await;
            }
            "embedded" => {
                // On a tmpfs when there is one: this measures memory, not fsync.
                let shm = std::path::Path::new("/dev/shm");
                let dir = if shm.is_dir() {
                    tempfile::tempdir_in(shm).unwrap()
                } else {
                    tempfile::tempdir().unwrap()
                };
                let store = floe_sequencer::open("embedded", dir.path()).await.unwrap();
                bounded("embedded", store, 20_000).await;
            }
            other => panic!("FLOE_MEMORY_CASE: expected memory or embedded, found {other:?}"),
        }
    });
}
