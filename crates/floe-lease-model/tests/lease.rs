//! The lease rule checked exhaustively (see the crate docs): floe's rule on etcd and on
//! ZooKeeper holds for 3 nodes and 2 worker IDs; each planted bug is found.

use std::time::{Duration, Instant};

use floe_lease_model::{representative, trace, Lease};
use stateright::{Checker, Model};

/// Checks `model`; the counterexample of "one issuer per ID", if any.
fn check(name: &str, model: Lease) -> Option<String> {
    let began = Instant::now();
    let checker = model
        .checker()
        .threads(2)
        .symmetry_fn(representative)
        .spawn_dfs()
        .join();
    let found = checker.discovery("one issuer per ID").map(|p| trace(&p));
    println!(
        "{name}: {} states ({} unique) in {:.1?}: {}",
        checker.state_count(),
        checker.unique_state_count(),
        began.elapsed(),
        if found.is_some() { "violated" } else { "holds" }
    );
    found
}

fn etcd(nodes: u8, ids: u8) -> Lease {
    // etcd's default TTL; a pause with the clock standing still of up to T/6 (the margin is
    // T/3: a pause of less than that).
    Lease::floe(Duration::from_secs(10), false, 1, nodes, ids)
}

fn zookeeper(nodes: u8, ids: u8, frozen: u8) -> Lease {
    Lease::floe(Duration::from_secs(6), true, frozen, nodes, ids)
}

#[test]
fn the_rule_in_ticks_is_floe_registrys() {
    let e = etcd(3, 2);
    assert_eq!((e.expiry, e.window, e.wait), (6, 4, 0));
    let z = zookeeper(3, 2, 0);
    // 6.29 s of takeover wait at the 6 s session (the window, its margin, 4% and 50 ms): 6
    // whole ticks of 1 s.
    assert_eq!((z.expiry, z.window, z.wait), (6, 4, 6));
}

#[test]
fn etcd_one_issuer_per_id_for_3_nodes_and_2_ids() {
    if let Some(path) = check("etcd 3x2", etcd(3, 2)) {
        panic!("two issuers of one ID:\n{path}");
    }
}

#[test]
fn zookeeper_one_issuer_per_id_for_3_nodes_and_2_ids() {
    if let Some(path) = check("zookeeper 3x2", zookeeper(3, 2, 0)) {
        panic!("two issuers of one ID:\n{path}");
    }
}

/// Planted: a window as long as the registry's expiry (no margin for a frozen pause).
#[test]
fn a_window_as_long_as_the_expiry_is_found() {
    let bug = Lease {
        window: 6,
        ..etcd(2, 2)
    };
    assert!(check("etcd, window = expiry", bug).is_some());
}

/// Planted: a confirmation counted from its answer, not its send (the request may have
/// reached the registry long before: its expiry runs from then). With messages of up to two
/// ticks each way: at one, the rule's margin hides the bug.
#[test]
fn a_confirmation_counted_from_its_answer_is_found() {
    let bug = Lease {
        bug_from_answer: true,
        delay: 2,
        ..etcd(3, 2)
    };
    assert!(check("etcd, confirmed from the answer", bug).is_some());
}

/// Planted: ZooKeeper's takeover without the wait (its leader may expire a session before the
/// holder's window ends).
#[test]
fn a_zookeeper_takeover_without_its_wait_is_found() {
    let bug = Lease {
        wait: 0,
        ..zookeeper(3, 2, 0)
    };
    assert!(check("zookeeper, no takeover wait", bug).is_some());
}

/// What the checker found of the earlier rule: on ZooKeeper, a takeover wait of the previous
/// holder's window, 4% and 50 ms (4 ticks) left no room for a pause with the clock standing
/// still of a tick (1 s): the holder, frozen just before its window ended, issued on after the
/// new holder began. The wait now adds the window's margin (half of it: the expiry in all, as
/// on etcd), and the pause is covered; the earlier wait is the planted bug of the next test.
#[test]
fn zookeeper_takeovers_cover_a_frozen_clock() {
    if let Some(path) = check("zookeeper, a frozen pause of 1 tick", zookeeper(2, 2, 1)) {
        panic!("two issuers of one ID:\n{path}");
    }
}

/// Planted: the earlier ZooKeeper takeover wait (the window, 4% and 50 ms: 4 ticks) under a
/// frozen pause of a tick.
#[test]
fn a_zookeeper_takeover_without_the_margin_is_found() {
    let bug = Lease {
        wait: 4,
        ..zookeeper(2, 2, 1)
    };
    let path = check("zookeeper, a wait without the margin", bug).expect("found");
    assert!(path.contains("Pause"), "{path}");
}
