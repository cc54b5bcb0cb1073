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
