//! The file registry's OS locks never hold the async executor: with the registry's lock taken
//! by someone else, a call waits for it on the blocking pool while the executor's only thread
//! goes on running other tasks (here: the task that lets the lock go).

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use floe_core::clock::ManualClock;
use floe_core::snowflake::Layout;
use floe_registry::cache::LocalCache;
use floe_registry::file::FileRegistry;
use floe_registry::lease::{acquire, LeaseConfig};
use floe_registry::{IdSpace, Identity, Registry};

/// Takes `registry.lock` of `dir` as another process would.
fn take_registry_lock(dir: &Path) -> File {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join("registry.lock"))
        .unwrap();
    file.lock().unwrap();
    file
}

/// Runs `f` on a current-thread runtime (one executor thread) in a thread of its own, failing
/// the test if it does not finish in 20 s (a call blocking the executor would deadlock: the
/// task that lets the lock go could never run).
fn on_one_thread<F>(f: impl FnOnce() -> F + Send + 'static)
where
    F: std::future::Future<Output = ()>,
{
    let (done, finished) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(f());
        done.send(()).unwrap();
    });
    match finished.recv_timeout(Duration::from_secs(20)) {
        Ok(()) => thread.join().unwrap(),
        // The thread failed: its own panic says why.
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(thread.join().unwrap_err())
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("the executor was blocked for 20 s"),
    }
}

/// Holds the lock, lets the executor run `call` concurrently with a task that drops the lock
/// after 200 ms, and checks that `call` waited for it (it finished after the lock went).
async fn waits_for_the_lock_off_the_executor<T>(
    dir: &Path,
    call: impl std::future::Future<Output = T>,
) -> T {
    let lock = take_registry_lock(dir);
    let started = tokio::time::Instant::now();
    let release = async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(lock);
    };
    let (out, ()) = tokio::join!(call, release);
    assert!(started.elapsed() >= Duration::from_millis(200));
    out
}

#[test]
fn file_registry_calls_wait_for_its_lock_off_the_executor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    on_one_thread(move || async move {
        let registry = FileRegistry::new(&path).unwrap();
        let who = Identity::new("orders", "h1", 1);
        let space = IdSpace::new(8);
        let reg = waits_for_the_lock_off_the_executor(&path, registry.register(&who, space))
            .await
            .unwrap();
        let id = reg.record.id;
        waits_for_the_lock_off_the_executor(&path, registry.heartbeat(&who, id, 1_000))
            .await
            .unwrap();
        let list = waits_for_the_lock_off_the_executor(&path, registry.list("orders"))
            .await
            .unwrap();
        assert_eq!((list[0].id, list[0].last_time_ms), (id, 1_000));
        drop(reg);
        let h2 = Identity::new("orders", "h2", 2);
        let taken = waits_for_the_lock_off_the_executor(&path, registry.reclaim(&h2, space, 5_000))
            .await
            .unwrap()
            .expect("h1's ID is idle since 1000 ms and its holder gone");
        assert_eq!((taken.record.id, taken.record.last_time_ms), (id, 1_000));
        // Released once its holder is gone (never under a live one).
        drop(taken);
        assert!(
            waits_for_the_lock_off_the_executor(&path, registry.release(&h2))
                .await
                .unwrap()
        );
    });
}

#[test]
fn lease_start_up_and_heartbeats_wait_for_the_registry_off_the_executor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    on_one_thread(move || async move {
        let registry = FileRegistry::new(path.join("registry")).unwrap();
        let cache = LocalCache::new(path.join("state")).unwrap();
        let config = LeaseConfig::new(
            Identity::new("orders", "h1", 1),
            IdSpace::snowflake(&Layout::LEAF),
        );
        let clock = ManualClock::from_millis(1_700_000_000_000);
        let lease = waits_for_the_lock_off_the_executor(
            &path.join("registry"),
            acquire(&registry, &cache, &config, &clock),
        )
        .await
        .unwrap();
        waits_for_the_lock_off_the_executor(
            &path.join("registry"),
            lease.heartbeat(&registry, &cache, 1_700_000_000_500),
        )
        .await
        .unwrap();
        let cached = cache
            .load(&config.identity, &registry.location())
            .unwrap()
            .unwrap();
        assert_eq!(cached.last_time_ms, 1_700_000_000_500);
    });
}
