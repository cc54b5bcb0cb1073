//! Batches on a store without segments (the Snowflake store: a loop of its own `next_id`), and
//! the run arithmetic of [`Batch`] under proptest.

use std::collections::HashSet;
use std::sync::Arc;

use floe_core::clock::SystemClock;
use floe_core::snowflake::{Layout, SnowflakeConfig};
use floe_sequencer::stores::snowflake::SnowflakeStore;
use floe_sequencer::{Batch, ErrorKind, Mode, ServeOptions, StoreHandle, MAX_BATCH};
use proptest::prelude::*;

fn snowflake() -> StoreHandle {
    let g = SnowflakeConfig::new(Layout::LEAF)
        .node_id(1)
        .unwrap()
        .build(SystemClock)
        .unwrap();
    let store = SnowflakeStore::new(Arc::new(g)).unwrap();
    StoreHandle::new("ids", Arc::new(store), ServeOptions::default())
}

/// WEAK batches of the Snowflake store are whole, unique and ascending (one caller); STRONG is
/// refused as for single IDs; the bounds hold.
#[tokio::test]
async fn snowflake_batches_loop_over_next_id() {
    let h = snowflake();
    let mut seen = HashSet::new();
    let mut last = 0;
    for count in [1, 7, 500, MAX_BATCH] {
        let b = h.next_ids("k", Mode::Weak, count).await.unwrap();
        assert_eq!(b.len(), u64::from(count));
        for id in b.iter() {
            assert!(id > last, "{id} after {last}");
            last = id;
            assert!(seen.insert(id));
        }
    }
    let e = h.next_ids("k", Mode::Strong, 3).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    let e = h.next_ids("k", Mode::Weak, 0).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
}

proptest! {
    /// Runs pushed in any order and size: the batch holds exactly the IDs pushed, in order,
    /// counts them exactly (saturating, never wrapping), and joins only runs that follow on.
    #[test]
    fn runs_hold_exactly_what_was_pushed(
        runs in prop::collection::vec((any::<i64>(), 0u16..50), 0..40)
    ) {
        let mut b = Batch::new();
        let mut want = Vec::new();
        for &(first, extra) in &runs {
            let last = first.saturating_add(i64::from(extra));
            b.push_run(first, last);
            want.extend(first..=last);
        }
        prop_assert_eq!(b.len(), want.len() as u64);
        prop_assert_eq!(b.is_empty(), want.is_empty());
        prop_assert_eq!(b.iter().collect::<Vec<_>>(), want.clone());
        prop_assert_eq!(b.first(), want.first().copied());
        prop_assert_eq!(b.last(), want.last().copied());
        for r in b.runs() {
            prop_assert!(r.0 <= r.1);
        }
        for w in b.runs().windows(2) {
            prop_assert!(w[0].1.checked_add(1) != Some(w[1].0), "adjacent runs are joined");
        }
    }
}
