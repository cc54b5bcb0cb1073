//! The stores, one file each. Each implements [`crate::Store`]'s two primitives and maps its
//! client's errors in one function.

pub mod embedded;
pub mod memory;
pub mod snowflake;

#[cfg(any(feature = "etcd", feature = "zookeeper"))]
mod cas;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(any(
    feature = "redis",
    feature = "mysql",
    feature = "zookeeper",
    feature = "etcd"
))]
pub mod layotto;
#[cfg(feature = "mysql")]
pub mod leaf_alloc;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod sql;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

#[cfg(any(feature = "redis", feature = "etcd", feature = "zookeeper"))]
use floe_core::sequence::Key;

#[cfg(any(feature = "redis", feature = "etcd", feature = "zookeeper"))]
use crate::{ErrorKind, SeqError};

/// A value as stored: decimal text (Redis, etcd, ZooKeeper). `Corrupt` otherwise, naming the
/// store and the key.
#[cfg(any(feature = "redis", feature = "etcd", feature = "zookeeper"))]
pub(crate) fn parse(store: &str, key: &Key, data: &[u8]) -> Result<i64, SeqError> {
    std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .ok_or_else(|| {
            SeqError::new(
                ErrorKind::Corrupt,
                format!(
                    "{store}: the value of key {:?} is not a number: {:?}",
                    key.as_str(),
                    String::from_utf8_lossy(&data[..data.len().min(40)])
                ),
            )
        })
}
