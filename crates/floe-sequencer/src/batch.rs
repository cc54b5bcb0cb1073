//! Batches: many IDs of one key in one call ([`StoreHandle::next_ids`]), as ascending
//! inclusive runs.
//!
//! - **WEAK** (stores with segments): slices of the key's buffer. A batch takes what it asks
//!   for from the current segment; when that has fewer left, it takes the rest and goes on in
//!   the next segment, so a batch may be two runs or more. Other callers of the same key may
//!   take IDs between two runs of a batch (each ID still goes to one caller only); other keys
//!   are never held up. A batch uses up the buffer as fast as that many single IDs, so the step
//!   follows batches as it follows single IDs.
//! - **STRONG**: one increment of the key's counter by the sum of the requests waiting (group
//!   commit, [`crate::strong`]); each batch gets one run of consecutive IDs, in arrival order.
//!   Every ID of a batch is above every ID of every call (single or batch) that returned before
//!   it was asked for, across every process sharing the store.
//! - **WEAK on a store without segments** (the Snowflake store): `count` calls of the store's
//!   own `next_id` in a loop, so the batch is as many runs as the IDs are not consecutive.
//!
//! **Whole or nothing.** `count` is 1 to [`MAX_BATCH`]; anything else is `InvalidArgument`
//! naming `count` and the bounds. A batch is never returned short: when the sequence would pass
//! `i64::MAX` before the batch is whole (`Exhausted`), or the store fails while a WEAK batch
//! waits for its next segment (`Unavailable`), the call fails, and the IDs the batch had
//! already taken are gaps, never issued to anyone.
//!
//! [`StoreHandle::next_ids`]: crate::StoreHandle::next_ids

use crate::{ErrorKind, SeqError};

/// The most IDs one batch may ask for.
pub const MAX_BATCH: u32 = 10_000;

/// Checks a batch's `count`.
///
/// # Errors
/// `InvalidArgument` naming `count` and its bounds when it is 0 or above [`MAX_BATCH`].
pub fn check_count(count: u32) -> Result<(), SeqError> {
    if count == 0 || count > MAX_BATCH {
        return Err(SeqError::new(
            ErrorKind::InvalidArgument,
            format!("invalid count: expected 1 to {MAX_BATCH}, found {count}"),
        ));
    }
    Ok(())
}

/// IDs of one key issued together, as inclusive runs `(first, last)` in the order the IDs were
/// issued; each run ascends (`first <= last`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    runs: Vec<(i64, i64)>,
    len: u64,
}

impl Batch {
    /// No IDs yet.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// A batch of one run.
    ///
    /// # Panics
    /// When `first > last` (a caller's bug, never user input).
    pub fn run(first: i64, last: i64) -> Batch {
        let mut b = Batch::new();
        b.push_run(first, last);
        b
    }

    /// Appends the IDs `first ..= last` (joined to the last run when they follow on it).
    ///
    /// # Panics
    /// When `first > last` (a caller's bug, never user input).
    pub fn push_run(&mut self, first: i64, last: i64) {
        assert!(first <= last, "a run ascends: {first} > {last}");
        // At most 2^64 - 1 IDs in a run; i128 keeps the difference exact.
        let n = u64::try_from(i128::from(last) - i128::from(first) + 1).unwrap_or(u64::MAX);
        self.len = self.len.saturating_add(n);
        if let Some(prev) = self.runs.last_mut() {
            if prev.1.checked_add(1) == Some(first) {
                prev.1 = last;
                return;
            }
        }
        self.runs.push((first, last));
    }

    /// Appends one ID.
    pub fn push(&mut self, id: i64) {
        self.push_run(id, id);
    }

    /// How many IDs it holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds no ID.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its runs, `(first, last)` inclusive, in the order issued.
    pub fn runs(&self) -> &[(i64, i64)] {
        &self.runs
    }

    /// Its first ID.
    pub fn first(&self) -> Option<i64> {
        self.runs.first().map(|r| r.0)
    }

    /// Its last ID.
    pub fn last(&self) -> Option<i64> {
        self.runs.last().map(|r| r.1)
    }

    /// Every ID, in the order issued.
    pub fn iter(&self) -> impl Iterator<Item = i64> + '_ {
        self.runs.iter().flat_map(|&(a, b)| a..=b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_join_and_count() {
        let mut b = Batch::new();
        b.push_run(5, 7);
        b.push_run(8, 8);
        b.push(20);
        b.push_run(i64::MAX - 1, i64::MAX);
        assert_eq!(b.runs(), &[(5, 8), (20, 20), (i64::MAX - 1, i64::MAX)]);
        assert_eq!(b.len(), 7);
        assert_eq!(
            b.iter().collect::<Vec<_>>(),
            vec![5, 6, 7, 8, 20, i64::MAX - 1, i64::MAX]
        );
        assert_eq!((b.first(), b.last()), (Some(5), Some(i64::MAX)));
        let whole = Batch::run(i64::MIN, i64::MAX);
        assert_eq!(whole.len(), u64::MAX, "saturates, never wraps");
    }

    #[test]
    fn count_bounds() {
        assert!(check_count(1).is_ok());
        assert!(check_count(MAX_BATCH).is_ok());
        for bad in [0, MAX_BATCH + 1, u32::MAX] {
            let e = check_count(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument);
            assert!(e.message.contains("count"), "{e}");
            assert!(e.message.contains("1 to 10000"), "{e}");
        }
    }
}
