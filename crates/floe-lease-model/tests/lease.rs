//! The lease rule checked exhaustively (see the crate docs): floe's rule (lease rule 2, a
//! reach chosen apart from the registry's expiry) on etcd and on ZooKeeper holds for 3 nodes
//! and 2 worker IDs; each planted bug is found.

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

/// The default reach, 900 s: ticks of 90 s.
const REACH: Duration = Duration::from_secs(900);

/// Ticks of `H/5` (180 s): the window (4.5 ticks) rounds up to 5, the wait (5.6) down to 5.
fn coarse(zookeeper: bool, nodes: u8, ids: u8) -> Lease {
    Lease {
        max_expiries: zookeeper.then_some(2),
        ..Lease::floe_in(5, REACH, zookeeper, 0, nodes, ids)
    }
}

fn etcd(nodes: u8, ids: u8, frozen: u8) -> Lease {
    Lease::floe(REACH, false, frozen, nodes, ids)
}

/// At most two sessions expired by the leader in a run (any session, at any moment).
fn zookeeper(nodes: u8, ids: u8, frozen: u8) -> Lease {
    Lease {
        max_expiries: Some(2),
        ..Lease::floe(REACH, true, frozen, nodes, ids)
    }
}

#[test]
fn the_rule_in_ticks_is_floe_registrys() {
    // A window of 810 s (9 ticks of 90 s); a takeover wait of 1009.85 s (11 whole ticks).
    for l in [etcd(3, 2, 0), zookeeper(3, 2, 0)] {
        assert_eq!((l.expiry, l.window, l.wait), (1, 9, 11));
    }
    // In ticks of H/5 (the 3-node checks): 810 s is 4.5 ticks, 1009.85 s 5.6.
    let c = coarse(true, 3, 2);
    assert_eq!((c.window, c.wait), (5, 5));
}

#[test]
fn etcd_one_issuer_per_id_for_3_nodes_and_2_ids() {
    if let Some(path) = check("etcd 3x2", coarse(false, 3, 2)) {
        panic!("two issuers of one ID:\n{path}");
    }
}

#[test]
fn zookeeper_one_issuer_per_id_for_3_nodes_and_2_ids() {
    if let Some(path) = check("zookeeper 3x2", coarse(true, 3, 2)) {
        panic!("two issuers of one ID:\n{path}");
    }
}

/// The margin covers a pause with the clock standing still of a tick (90 s at the default).
#[test]
fn takeovers_cover_a_frozen_clock() {
    for (name, model) in [
        ("etcd, frozen 1", etcd(2, 2, 1)),
        ("zookeeper, frozen 1", zookeeper(2, 2, 1)),
    ] {
        if let Some(path) = check(name, model) {
            panic!("two issuers of one ID:\n{path}");
        }
    }
}

/// Planted: a reach longer than the takeover wait (a holder issuing for as long as a taker
/// waits: no margin).
#[test]
fn a_reach_longer_than_the_takeover_wait_is_found() {
    let bug = Lease {
        window: 6,
        ..coarse(true, 2, 2)
    };
    assert!(check("zookeeper, window > wait", bug).is_some());
}

/// Planted: a confirmation counted from its answer, not its send (the request may have
/// reached the registry long before: its expiry runs from then).
#[test]
fn a_confirmation_counted_from_its_answer_is_found() {
    let bug = Lease {
        bug_from_answer: true,
        delay: 3,
        ..etcd(2, 2, 0)
    };
    assert!(check("etcd, confirmed from the answer", bug).is_some());
}

/// Planted: a takeover without the wait, on etcd too (the lease ends seconds after the last
/// keep-alive; its holder issues for its reach).
#[test]
fn a_takeover_without_its_wait_is_found() {
    let bug = Lease {
        wait: 0,
        ..etcd(2, 2, 0)
    };
    assert!(check("etcd, no takeover wait", bug).is_some());
}

/// Planted: a restart that counts its lease afresh instead of from the last confirmation its
/// predecessor recorded (a lease token without its time).
#[test]
fn a_restart_that_forgets_its_last_confirmation_is_found() {
    let bug = Lease {
        bug_restart_afresh: true,
        ..coarse(true, 2, 2)
    };
    let path = check("zookeeper, a restart counted afresh", bug).expect("found");
    assert!(path.contains("Restart"), "{path}");
}

/// Planted: a takeover that waits the window and no margin, under a pause of a tick with the
/// clock standing still: the holder, frozen just before its window ended, issues on after the
/// new holder began.
#[test]
fn a_takeover_without_the_margin_is_found_under_a_frozen_clock() {
    let bug = Lease {
        wait: 9,
        ..zookeeper(2, 2, 1)
    };
    let path = check("zookeeper, a wait without the margin", bug).expect("found");
    assert!(path.contains("Pause"), "{path}");
}
