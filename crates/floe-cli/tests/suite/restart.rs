//! Issue 9 §4, measured on the real server: how many WEAK IDs a graceful restart under load
//! skips, without the tails kept (`sequencer.keep_tails = false`, as before) and with them.

use crate::serving;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serving::http;

/// Loads key `k` of store `default` from 4 threads, SIGTERMs the server while they run,
/// restarts it on the same state directory and returns the IDs skipped: the first ID after
/// the restart minus the largest before it, minus one.
fn skipped_by_a_restart(keep_tails: bool) -> (i64, usize) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state").display().to_string();
    let config = dir.path().join("floe.toml");
    std::fs::write(&config, format!("[sequencer]\nkeep_tails = {keep_tails}\n")).unwrap();
    let config = config.display().to_string();
    let args = ["--config", &config, "--state-dir", &state];
    let server = serving::start(&args);
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (addr, stop) = (server.http.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    match http(&addr, "GET", "/v1/sequencer/default/k") {
                        Ok((200, body)) => {
                            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                            ids.push(v["next_id"].as_str().unwrap().parse::<i64>().unwrap());
                        }
                        // Refused or closed once the server stops accepting.
                        _ => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
                ids
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(800));
    server.term();
    let (status, err, _) = server.wait(Duration::from_secs(30));
    stop.store(true, Ordering::Relaxed);
    assert!(status.success(), "{err}");
    let before: Vec<i64> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    assert!(!before.is_empty());
    let server = serving::start(&args);
    let (code, body) = http(&server.http, "GET", "/v1/sequencer/default/k").unwrap();
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let first = v["next_id"].as_str().unwrap().parse::<i64>().unwrap();
    server.term();
    server.wait(Duration::from_secs(30));
    let max = *before.iter().max().unwrap();
    assert!(first > max, "{first} after {max}: a repeat");
    (first - max - 1, before.len())
}

#[test]
fn a_graceful_restart_under_load_skips_no_weak_id() {
    let (without, n1) = skipped_by_a_restart(false);
    let (with, n2) = skipped_by_a_restart(true);
    println!("WEAK IDs skipped by a graceful restart under load: {without} without the tails kept ({n1} IDs served before), {with} with them ({n2} IDs served before)");
    assert!(
        without > 0,
        "without tails a restart skips the buffered segments"
    );
    assert_eq!(with, 0, "with tails a graceful restart skips nothing");
}
