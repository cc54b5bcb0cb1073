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

/// Checks a server registry's servers and root (as `connect` takes them), naming the field:
/// for the URL parser above and for each server registry's `connect`.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub(crate) fn check_servers(
    kind: &str,
    servers: &str,
    root: &str,
) -> Result<(), crate::RegistryError> {
    floe_core::endpoint::check_addresses(kind, servers)
        .and_then(|()| floe_core::endpoint::check_root(kind, root))
        .map_err(|e| crate::RegistryError::config(format!("registry: {e}")))
}
