//! Every time-based generator stops at its durable time bound (the horizon): no ID whose
//! time is past it, a bounded wait for it to move, then a clear error; and a restart from a
//! bound issues only after it.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use floe_core::clock::{Clock, ManualClock, NANOS_PER_MILLI};
use floe_core::horizon::Horizon;
use floe_core::lexical::{LexicalError, LexicalGenerator};
use floe_core::sno::{Partition, SnoError, SnoGenerator, SnoSnapshot};
use floe_core::snowflake::{Layout, SnowflakeConfig, SnowflakeError};

const T0: u64 = 1_700_000_000_000;

fn horizon(bound_ms: u64) -> Arc<Horizon> {
    Arc::new(Horizon::new(bound_ms, Duration::from_millis(1)))
}

#[test]
fn snowflake_issues_up_to_the_bound_then_fails_and_goes_on_when_it_moves() {
    let clock = ManualClock::from_millis(T0);
    let h = horizon(T0 + 1);
    let g = SnowflakeConfig::new(Layout::LEAF)
        .horizon(h.clone())
        .build(clock.clone())
        .unwrap();
    g.next_id().unwrap();
    clock.advance(Duration::from_millis(1));
    let at_bound = Layout::LEAF.decode(g.next_id().unwrap());
    assert_eq!(at_bound.timestamp_ms, T0 + 1);
    clock.advance(Duration::from_micros(1_000));
    // poll never waits: it reports the stall at once.
    assert!(matches!(
        g.poll_next(),
        Err(SnowflakeError::HorizonStalled(s)) if s.now_ms == T0 + 2 && s.bound_ms == T0 + 1
    ));
    let e = g.next_id().unwrap_err();
    assert!(e.is_temporary());
    assert!(e.to_string().contains("durable time bound"), "{e}");
    assert_eq!(
        g.last_timestamp_ms(),
        T0 + 1,
        "nothing issued past the bound"
    );
    h.advance(T0 + 10);
    assert_eq!(
        Layout::LEAF.decode(g.next_id().unwrap()).timestamp_ms,
        T0 + 2
    );
}

#[test]
fn snowflake_waits_for_a_writer_that_is_late_but_not_stalled() {
    let clock = ManualClock::from_millis(T0 + 5);
    let h = Arc::new(Horizon::new(T0, Duration::from_secs(30)));
    let g = SnowflakeConfig::new(Layout::LEAF)
        .horizon(h.clone())
        .build(clock)
        .unwrap();
    let writer = {
        let h = h.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            h.advance(T0 + 1_000);
        })
    };
    assert_eq!(
        Layout::LEAF.decode(g.next_id().unwrap()).timestamp_ms,
        T0 + 5
    );
    writer.join().unwrap();
}

#[test]
fn snowflake_restart_from_a_bound_never_repeats_with_the_clock_behind() {
    // Run 1 issues every ID it can up to its bound, then "dies".
    let clock = ManualClock::from_millis(T0);
    let bound = T0 + 3;
    let g = SnowflakeConfig::new(Layout::new(41, 0, 10, 2).unwrap())
        .horizon(horizon(bound))
        .build(clock.clone())
        .unwrap();
    let mut seen = HashSet::new();
    loop {
        match g.next_id() {
            Ok(id) => assert!(seen.insert(id)),
            Err(SnowflakeError::HorizonStalled(_)) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(seen.len(), 4 * 4, "four units of four IDs");
    // Run 2 starts from the durable bound with the clock 2 ms behind: it waits, then issues
    // only after the bound.
    let clock = ManualClock::from_millis(T0 + 1);
    let g = SnowflakeConfig::new(Layout::new(41, 0, 10, 2).unwrap())
        .not_before_ms(bound)
        .horizon(horizon(bound + 100))
        .build(clock.clone())
        .unwrap();
    for _ in 0..20 {
        assert!(seen.insert(g.next_id().unwrap()));
    }
    assert!(clock.waits() > 0);
}

#[test]
fn sno_stops_at_the_bound() {
    let clock = ManualClock::from_millis(T0);
    let h = horizon(T0 + 3);
    let g = SnoGenerator::from_snapshot(
        &SnoSnapshot {
            partition: Partition::from_u16(7),
            ..SnoSnapshot::default()
        },
        clock.clone(),
    )
    .unwrap()
    .with_horizon(h.clone());
    let id = g.new_id(0).unwrap();
    assert_eq!(id.partition(), Partition::from_u16(7));
    clock.advance(Duration::from_millis(4));
    assert!(matches!(g.new_id(0), Err(SnoError::HorizonStalled(s)) if s.bound_ms == T0 + 3));
    h.advance(T0 + 100);
    let later = g.new_id(0).unwrap();
    assert!(later > id);
    let unix_ms = later
        .time()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(unix_ms >= T0 + 4);
}

#[test]
fn lexical_timestamps_never_pass_the_bound_even_when_running_ahead_of_the_clock() {
    let clock = ManualClock::from_millis(T0);
    let h = horizon(T0);
    let g = LexicalGenerator::new(clock.clone(), 9).horizon(h.clone());
    // The clock stands still: timestamps run ahead one microsecond per ID, up to the end of
    // the bound's millisecond, and no further.
    let mut n = 0;
    let last = loop {
        match g.next_timestamp() {
            Ok(t) => {
                n += 1;
                assert!((t as u64) < (T0 + 1) * 1000);
            }
            Err(LexicalError::HorizonStalled(s)) => break s,
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(n, 1000);
    assert_eq!(last.bound_ms, T0);
    h.advance(T0 + 1);
    assert_eq!(g.next_timestamp().unwrap() as u64, (T0 + 1) * 1000);
    // A restart from that bound starts after the bound's millisecond.
    let g = LexicalGenerator::new(ManualClock::from_millis(T0 - 5), 9).not_before_ms(T0 + 1);
    assert_eq!(g.next_timestamp().unwrap() as u64, (T0 + 2) * 1000);
    assert_eq!(
        clock.now_nanos(),
        T0 * NANOS_PER_MILLI,
        "the clock never moved"
    );
}

/// Calls that issue nothing read the clock as before whatever the horizon says (found in
/// review: `len`, `sequence` and `snapshot` went through the issuing path's check).
#[test]
fn sno_calls_that_issue_nothing_ignore_the_bound() {
    let clock = ManualClock::from_millis(T0);
    let h = horizon(T0 + 3);
    let g = SnoGenerator::from_snapshot(&SnoSnapshot::default(), clock.clone())
        .unwrap()
        .with_horizon(h.clone());
    for _ in 0..3 {
        g.new_id(0).unwrap();
    }
    let (len, sequence, snapshot) = (g.len(), g.sequence(), g.snapshot());
    h.close();
    assert!(g.new_id(0).is_err(), "closed: nothing is issued");
    // (The refused call took a sequence number, as sno's fetch-and-add does, issuing nothing.)
    assert!(g.len() >= len && len == 3, "{} {len}", g.len());
    assert!(g.sequence() >= sequence && sequence > 0, "{}", g.sequence());
    assert_eq!(g.snapshot().now, snapshot.now);
    assert!(snapshot.now > 0);
}
