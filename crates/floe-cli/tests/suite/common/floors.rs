//! Floors and unregistrations made on one node, honoured by every node of the store (issue 31,
//! case 3): two `floe serve` on one shared store under WEAK load from both; a raise (or an
//! unregistration) through one node's admin API. The node that made it honours it at once;
//! the other within 5 s (floe_sequencer::changes::REACH) of the call's return.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe_testkit::free_port;
use floe_testkit::http::http;

use super::faults::{client, serve, wait_listening, ClientLog, Row, Tally};
use super::nanos;

/// The bound the contract states.
const REACH: Duration = Duration::from_secs(5);

/// One node: its server, port and state directory.
struct Node {
    server: floe_testkit::process::Floe,
    port: u16,
    _dir: tempfile::TempDir,
}

fn node(store: &str, extra: &[&str]) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let port = free_port();
    let store = format!("s={store}");
    let mut args = vec![
        "--store",
        &store,
        "--state-dir",
        &state,
        "--timeout-ms",
        "1000",
    ];
    args.extend_from_slice(extra);
    let server = serve(&args, port, None);
    wait_listening(&server, port);
    Node {
        server,
        port,
        _dir: dir,
    }
}

fn call(port: u16, method: &str, path: &str) -> (u16, String) {
    http(&format!("127.0.0.1:{port}"), method, path).unwrap_or((0, String::new()))
}

/// [`call`] again while the store answers 503 (a store slow under the load, on a busy
/// machine), for at most 20 s: every admin call here may be made twice.
fn call_until_served(port: u16, method: &str, path: &str) -> (u16, String) {
    let began = Instant::now();
    loop {
        let (status, body) = call(port, method, path);
        if status != 503 || began.elapsed() > Duration::from_secs(20) {
            return (status, body);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Two WEAK clients on each of `nodes` until `stop`.
fn load(
    nodes: &[&Node; 2],
    key: &str,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<ClientLog>> {
    let path = format!("/v1/sequencer/s/{key}?increment=weak");
    nodes
        .iter()
        .flat_map(|n| [n.port, n.port])
        .map(|port| client(port, path.clone(), stop.clone()))
        .collect()
}

/// The longest time after `from` at which a request `late` says of was sent, and how many
/// were sent past `from + REACH`.
fn lateness(log: &ClientLog, from: Instant, late: impl Fn(u128) -> bool) -> (Duration, usize) {
    let mut longest = Duration::ZERO;
    let mut past = 0;
    for (&id, &sent) in log.ids.iter().zip(&log.sent) {
        if sent > from && late(id) {
            longest = longest.max(sent - from);
            past += usize::from(sent - from > REACH);
        }
    }
    (longest, past)
}

fn stop_all(nodes: [Node; 2]) {
    for n in &nodes {
        n.server.term();
    }
    for n in nodes {
        let _ = n.server.wait_timeout(Duration::from_secs(60));
    }
}

/// A floor raised through node A's admin API to the store's value (every ID either node holds
/// lies at or below it) while both serve WEAK: A issues nothing at or below it from the
/// call's return, B nothing after REACH.
pub fn floor_reaches_every_node(name: &str, store: &str) -> Row {
    let (a, b) = (node(store, &[]), node(store, &[]));
    let key = format!("floors-{}", nanos());
    let stop = Arc::new(AtomicBool::new(false));
    let clients = load(&[&a, &b], &key, &stop);
    std::thread::sleep(Duration::from_millis(1000));
    let (status, state) =
        call_until_served(a.port, "GET", &format!("/v1/admin/stores/s/keys/{key}"));
    let floor: u128 = state
        .split("\"value\":\"")
        .nth(1)
        .and_then(|v| v.split('"').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("key state {status}: {state}"));
    let asked = Instant::now();
    let (status, body) = call_until_served(
        a.port,
        "POST",
        &format!("/v1/admin/stores/s/keys/{key}/raise?above={floor}"),
    );
    let returned = Instant::now();
    std::thread::sleep(REACH + Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    let logs: Vec<ClientLog> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    stop_all([a, b]);
    let below = |id: u128| id <= floor;
    let (a_late, _) = [&logs[0], &logs[1]]
        .iter()
        .map(|l| lateness(l, returned, below))
        .fold((Duration::ZERO, 0), |(d, n), (d2, n2)| (d.max(d2), n + n2));
    let (b_late, b_past) = [&logs[2], &logs[3]]
        .iter()
        .map(|l| lateness(l, returned, below))
        .fold((Duration::ZERO, 0), |(d, n), (d2, n2)| (d.max(d2), n + n2));
    let a_any: usize = [&logs[0], &logs[1]]
        .iter()
        .map(|l| {
            l.ids
                .iter()
                .zip(&l.sent)
                .filter(|(&id, &s)| s > returned && id <= floor)
                .count()
        })
        .sum();
    let mut tally = Tally::default();
    tally.row.scenario = format!(
        "{name}: a floor raised through node A (to the store's value, above every ID either node holds) while A and B serve WEAK on the key"
    );
    for l in &logs {
        tally.unordered(&l.ids);
    }
    let failed = status != 200 || a_any > 0 || b_past > 0;
    tally.row.outcome = format!(
        "{}raise answered {status} in {} ms; node A: {a_any} IDs at or below the floor after it (longest {} ms); node B: served IDs at or below it for {} ms after the return, {b_past} past the 5 s bound{}",
        if failed { "FAILED: " } else { "" },
        (returned - asked).as_millis(),
        a_late.as_millis(),
        b_late.as_millis(),
        if status == 200 { String::new() } else { format!(" ({body})") },
    );
    tally.row
}

/// A key of a registered-keys store unregistered through node A's admin API while both
/// nodes serve it WEAK: A refuses it from the call's return, B within REACH.
pub fn unregister_reaches_every_node(name: &str, store: &str) -> Row {
    let only = ["--registered-only", "s"];
    let (a, b) = (node(store, &only), node(store, &only));
    let key = format!("unreg-{}", nanos());
    let (status, body) =
        call_until_served(a.port, "PUT", &format!("/v1/admin/stores/s/keys/{key}"));
    assert_eq!(status, 200, "register: {body}");
    let stop = Arc::new(AtomicBool::new(false));
    let clients = load(&[&a, &b], &key, &stop);
    std::thread::sleep(Duration::from_millis(1000));
    let asked = Instant::now();
    let (status, body) =
        call_until_served(a.port, "DELETE", &format!("/v1/admin/stores/s/keys/{key}"));
    let returned = Instant::now();
    std::thread::sleep(REACH + Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    let logs: Vec<ClientLog> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    stop_all([a, b]);
    let a_after: usize = [&logs[0], &logs[1]]
        .iter()
        .map(|l| l.sent.iter().filter(|&&s| s > returned).count())
        .sum();
    let (b_late, b_past) = [&logs[2], &logs[3]]
        .iter()
        .map(|l| lateness(l, returned, |_| true))
        .fold((Duration::ZERO, 0), |(d, n), (d2, n2)| (d.max(d2), n + n2));
    let refused: usize = logs[2..].iter().map(|l| l.errors).sum();
    let mut tally = Tally::default();
    tally.row.scenario =
        format!("{name}: a registered key unregistered through node A while A and B serve it WEAK");
    for l in &logs {
        tally.unordered(&l.ids);
    }
    let failed = status != 200 || a_after > 0 || b_past > 0 || refused == 0;
    tally.row.outcome = format!(
        "{}unregister answered {status} in {} ms; node A: {a_after} IDs served after it; node B: served the key for {} ms after the return, {b_past} past the 5 s bound, then refused {refused} requests{}",
        if failed { "FAILED: " } else { "" },
        (returned - asked).as_millis(),
        b_late.as_millis(),
        if status == 200 { String::new() } else { format!(" ({body})") },
    );
    tally.row
}

/// A node stopped gracefully (its WEAK buffer saved as tails), a floor raised meanwhile by
/// another process, the node started again: its saved tails lie below the floor and are
/// dropped (said at its start), not served.
pub fn a_raise_while_stopped_drops_saved_tails(name: &str, store: &str) -> Row {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let key = format!("stopped-{}", nanos());
    let path = format!("/v1/sequencer/s/{key}?increment=weak");
    let start = || {
        let port = free_port();
        let store = format!("s={store}");
        let server = serve(&["--store", &store, "--state-dir", &state], port, None);
        wait_listening(&server, port);
        (server, port)
    };
    let (first, port) = start();
    let mut before = Vec::new();
    for _ in 0..10 {
        let (status, body) = call_until_served(port, "GET", &path);
        assert_eq!(status, 200, "{body}");
        before.push(super::faults::dec(body.split('"').nth(3).unwrap()).unwrap());
    }
    first.term();
    let _ = first.wait_timeout(Duration::from_secs(60));
    // The floor: inside what the stopped node saved (its segment runs past its last ID).
    let floor = before.iter().max().unwrap() + 100;
    let raised = super::faults::floe(
        &[
            "seq".into(),
            "keys".into(),
            "raise".into(),
            key.clone(),
            "--above".into(),
            floor.to_string(),
            "--store".into(),
            store.into(),
        ],
        None,
    )
    .output()
    .unwrap();
    assert!(raised.status.success(), "{raised:?}");
    let (second, port) = start();
    let mut after = Vec::new();
    for _ in 0..10 {
        let (status, body) = call_until_served(port, "GET", &path);
        assert_eq!(status, 200, "{body}");
        after.push(super::faults::dec(body.split('"').nth(3).unwrap()).unwrap());
    }
    second.term();
    let _ = second.wait_timeout(Duration::from_secs(60));
    let said = second
        .stderr()
        .contains("a floor was raised or a key unregistered");
    let below = after.iter().filter(|&&id| id <= floor).count();
    let mut tally = Tally::default();
    tally.row.scenario = format!(
        "{name}: a node stopped with saved WEAK tails, a floor raised inside them by another process, the node started again"
    );
    tally.run(&before);
    tally.run(&after);
    tally.row.outcome = format!(
        "{}{below} IDs at or below the floor after the restart; the dropped tails {}",
        if below > 0 || !said { "FAILED: " } else { "" },
        if said {
            "said at its start"
        } else {
            "not said"
        }
    );
    tally.row
}
