//! `snowflake`: WEAK IDs from one Snowflake generator (a leased worker ID), for every key.
//!
//! IDs are unique across every key and process holding its own worker ID, and roughly
//! time-ordered; they do not start at 1, cannot honour STRONG, and cannot reserve segments.
//! The layout must fit an `i64` (63 bits: Leaf's and Twitter's do; flake-idgen's 64-bit layout
//! is refused at start-up). A `bigger_than` above the IDs the clock gives now is refused at
//! start-up rather than waited for.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use floe_core::clock::Clock;
use floe_core::sequence::Key;
use floe_core::snowflake::{SnowflakeError, SnowflakeGenerator};
use floe_core::Poll;

use crate::{Capabilities, ErrorKind, SeqError, Store};

/// A Snowflake generator serving every key.
#[derive(Debug)]
pub struct SnowflakeStore<C: Clock> {
    generator: Arc<SnowflakeGenerator<C>>,
}

impl<C: Clock> SnowflakeStore<C> {
    /// Serves `generator`'s IDs.
    ///
    /// # Errors
    /// `Config` when its layout does not fit an `i64`.
    pub fn new(generator: Arc<SnowflakeGenerator<C>>) -> Result<Self, SeqError> {
        if !generator.layout().fits_i64() {
            return Err(SeqError::config(format!(
                "store: a snowflake sequencer needs a layout of at most 63 bits (next_id is an int64); this one has {}",
                generator.layout().total_bits()
            )));
        }
        Ok(SnowflakeStore { generator })
    }

    fn map_err(e: SnowflakeError) -> SeqError {
        match e {
            SnowflakeError::TimestampOverflow { .. } => {
                SeqError::new(ErrorKind::Exhausted, format!("snowflake: {e}"))
            }
            // A lost lease, a clock behind, a stalled time bound, a used-up time unit: the
            // same call may succeed later. Any other (new) kind is not a client's fault
            // either: it is the server's to fix, so it reads as unavailable, not exhausted.
            _ => SeqError::unavailable(format!("snowflake: {e}")),
        }
    }
}

#[async_trait]
impl<C: Clock + std::fmt::Debug + 'static> Store for SnowflakeStore<C> {
    fn kind(&self) -> &'static str {
        "snowflake"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            segments: false,
            strong: false,
            durable: true,
            shared: true,
        }
    }

    async fn reserve(&self, _key: &Key, _n: u32) -> Result<i64, SeqError> {
        Err(SeqError::new(
            ErrorKind::Unsupported,
            "snowflake: cannot reserve ranges",
        ))
    }

    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        let now = self.next_id(key).await?;
        if now <= floor {
            return Err(SeqError::config(format!(
                "store: snowflake IDs are now about {now}, not above bigger_than {floor} of key {:?}",
                key.as_str()
            )));
        }
        Ok(())
    }

    async fn next_id(&self, _key: &Key) -> Result<i64, SeqError> {
        loop {
            let poll = match self.generator.poll_next() {
                // The time bound is behind the clock (its disk write is late): wait for it,
                // on this runtime's timer, at most its stall wait.
                Err(SnowflakeError::HorizonStalled(stalled)) => {
                    let stalled = || Self::map_err(SnowflakeError::HorizonStalled(stalled));
                    // Only a generator with a horizon stalls on one.
                    let horizon = self.generator.horizon().ok_or_else(stalled)?;
                    let deadline = tokio::time::Instant::now() + horizon.stall_wait();
                    while !horizon.allows_nanos(self.generator.clock().now_nanos()) {
                        if tokio::time::Instant::now() >= deadline {
                            return Err(stalled());
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    continue;
                }
                other => other.map_err(Self::map_err)?,
            };
            match poll {
                // fits_i64 was checked at construction.
                Poll::Ready(id) => return Ok(id as i64),
                Poll::Pending { until_nanos, .. } => {
                    let now = self.generator.clock().now_nanos();
                    let wait = until_nanos.saturating_sub(now).clamp(1_000, 5_000_000);
                    tokio::time::sleep(Duration::from_nanos(wait)).await;
                }
            }
        }
    }
}
