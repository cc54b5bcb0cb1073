//! How many WEAK IDs a restart skips, without and with kept tails ([`floe_sequencer::tails`]).
//!
//! 8 tasks issue WEAK IDs for 3 keys (default step policy), the load stops, the sequencer is
//! closed (plainly, as before; or with `close_keeping`), a new one starts on the same state
//! directory and store, and each key's first ID is compared with the largest issued before:
//! the gap is what the restart skipped.
//!
//! `cargo run -p floe-sequencer --example restart_gap -- [STORE_URL] [IDS_PER_TASK]`
//! (default `embedded` in a temporary directory, 25,000 IDs per task).

use std::sync::Arc;

use floe_sequencer::{Key, Mode, SavedTails, Sequencer, ServeOptions, StoreHandle, TailDir};

const TASKS: usize = 8;

async fn start(url: &str, state: &std::path::Path, keep: bool) -> (Sequencer, Option<TailDir>) {
    let tails = if keep {
        TailDir::lock(state).expect("lock")
    } else {
        None
    };
    let mut saved = match &tails {
        Some(dir) => dir.take().expect("take"),
        None => SavedTails::new(),
    };
    let store = loop {
        match floe_sequencer::open(url, state).await {
            Ok(store) => break store,
            // The embedded file of the sequencer just closed, held by a fetch still ending.
            Err(e) if e.message.contains("is held") || e.message.contains("already open") => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await
            }
            Err(e) => panic!("open {url}: {e}"),
        }
    };
    let mut handle = StoreHandle::new("main", store, ServeOptions::default());
    if keep {
        handle = handle.with_tails(url, state, &mut saved);
    }
    let mut seq = Sequencer::new();
    seq.add(handle);
    (seq, tails)
}

#[allow(clippy::disallowed_methods)] // the real time the real store sees
async fn round(url: &str, per_task: usize, keep: bool) -> Vec<(i64, i64)> {
    let state = tempfile::tempdir().expect("tempdir");
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let run = format!("{}-{}", std::process::id(), since_epoch.as_nanos());
    let keys: Vec<Key> = (0..3)
        .map(|i| Key::new(format!("gap-{run}-{keep}-{i}")).expect("key"))
        .collect();
    let (seq, tails) = start(url, state.path(), keep).await;
    let seq = Arc::new(seq);
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let seq = Arc::clone(&seq);
        let keys = keys.clone();
        tasks.push(tokio::spawn(async move {
            let mut max = [0i64; 3];
            for i in 0..per_task {
                let k = (i + t) % 3;
                let id = seq
                    .next_id("main", keys[k].as_str(), Mode::Weak)
                    .await
                    .expect("id");
                max[k] = max[k].max(id);
            }
            max
        }));
    }
    let mut before = [0i64; 3];
    for t in tasks {
        let m = t.await.expect("task");
        for k in 0..3 {
            before[k] = before[k].max(m[k]);
        }
    }
    match &tails {
        Some(dir) => {
            seq.close_keeping(dir).await.expect("close_keeping");
        }
        None => seq.close().await,
    }
    drop(seq);
    drop(tails);
    let (seq, _tails) = start(url, state.path(), keep).await;
    let mut out = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        let first = seq
            .next_id("main", key.as_str(), Mode::Weak)
            .await
            .expect("id");
        out.push((before[k], first));
    }
    seq.close().await;
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "embedded".into());
    let per_task: usize = args
        .next()
        .map(|n| n.parse().expect("IDS_PER_TASK: a number"))
        .unwrap_or(25_000);
    println!(
        "store {}, {TASKS} tasks x {per_task} WEAK IDs over 3 keys",
        url.split(':').next().unwrap_or("?")
    );
    for (label, keep) in [("close (before)", false), ("close_keeping (after)", true)] {
        let rows = round(&url, per_task, keep).await;
        let mut total = 0i64;
        for (k, (last, first)) in rows.iter().enumerate() {
            let gap = first - last - 1;
            total += gap;
            println!("{label}: key {k}: last before {last}, first after {first}, skipped {gap}");
        }
        println!("{label}: skipped {total} IDs over 3 keys");
    }
}
