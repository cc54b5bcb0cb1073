//! The registries, one file each: [`file`] and [`static_id`] keep no server; [`zookeeper`] and
//! [`etcd`] are server registries.

#[cfg(feature = "etcd")]
pub mod etcd;
pub mod file;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
mod records;
pub mod static_id;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;
