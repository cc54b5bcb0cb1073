//! The stores' epochs mirrored in the fleet's registry (issue 31): a node that remembers
//! nothing of a store (a new node, or one whose state directory was lost) still notices a
//! store that went back while no node that remembered it was running.
//!
//! Each node keeps, in its state directory's ledger, the highest epoch it saw of each guarded
//! store (floe-sequencer's guard). Where the node's worker IDs come from ZooKeeper or etcd, it
//! also keeps that epoch in the registry, at `{root}/{service}/stores/{name}`, never lowering
//! it; at start it compares the store with the higher of the two. `name` is a digest of the
//! store's URL without its password, so nodes that name one store alike share one entry. A
//! store that is each node's own (the embedded store, a server on the loopback address or a
//! Unix socket) gets an entry per node: another node's store of the same URL is another store.
//!
//! The mirror is a help, never a condition: a registry that cannot be reached, or that keeps
//! no mirror (the file registry, Leaf's layout), leaves the ledger alone to guard the store.

use std::sync::{Arc, Weak};
use std::time::Duration;

use floe_registry::Registry;
use floe_sequencer::Guard;
use sha2::{Digest, Sha256};

/// How long a read or write of the mirror may take before it is given up (the start goes on
/// without it).
const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// How often the epochs the guards saw are written to the registry when they moved.
const KEEP_EVERY: Duration = Duration::from_secs(5);

/// The registry a node keeps its stores' epochs in.
#[derive(Debug, Clone)]
pub(super) struct Mirror {
    registry: Arc<dyn Registry>,
    service: String,
    /// This node, as its worker identity names it (`host:port`): the prefix of its own
    /// stores' names.
    node: String,
}

impl Mirror {
    /// The mirror of `registry_url` (only a registry that leases: ZooKeeper, etcd) under
    /// `service`, for the node `node`. `Err`: it cannot be opened now (the start goes on
    /// without it, and says so).
    pub(super) async fn open(
        registry_url: &str,
        service: &str,
        node: String,
    ) -> Result<Option<Mirror>, String> {
        // Only floe's own layout keeps a mirror: no session is opened for nothing.
        if !floe_registry::leases(registry_url) || registry_url.starts_with("leaf+") {
            return Ok(None);
        }
        let opened = tokio::time::timeout(CALL_TIMEOUT, floe_registry::open(registry_url))
            .await
            .map_err(|_| format!("no answer within {CALL_TIMEOUT:?}"))?
            .map_err(|e| e.to_string())?;
        Ok(Some(Mirror {
            registry: opened.into(),
            service: service.to_string(),
            node,
        }))
    }

    /// The name of the store `identity` ([`floe_sequencer::store_identity`]) in the registry.
    pub(super) fn name(&self, identity: &str) -> String {
        let text = if node_local(identity) {
            format!("{}/{identity}", self.node)
        } else {
            identity.to_string()
        };
        let digest = Sha256::digest(text.as_bytes());
        digest.iter().take(12).map(|b| format!("{b:02x}")).collect()
    }

    /// The highest epoch any node recorded for `identity`.
    pub(super) async fn read(&self, identity: &str) -> Result<Option<i64>, String> {
        let name = self.name(identity);
        tokio::time::timeout(
            CALL_TIMEOUT,
            self.registry.store_epoch(&self.service, &name),
        )
        .await
        .map_err(|_| format!("no answer within {CALL_TIMEOUT:?}"))?
        .map_err(|e| e.to_string())
    }

    /// Records `epoch` for `identity` (never lowering it).
    pub(super) async fn keep(&self, identity: &str, epoch: i64) -> Result<(), String> {
        let name = self.name(identity);
        tokio::time::timeout(
            CALL_TIMEOUT,
            self.registry.keep_store_epoch(&self.service, &name, epoch),
        )
        .await
        .map_err(|_| format!("no answer within {CALL_TIMEOUT:?}"))?
        .map(|_| ())
        .map_err(|e| e.to_string())
    }

    /// Writes each guard's epoch to the registry whenever it moved (checked every
    /// [`KEEP_EVERY`]), for as long as one of the guards lives.
    pub(super) fn watch(self, guards: Vec<(String, Weak<Guard>, i64)>) {
        if guards.is_empty() {
            return;
        }
        tokio::spawn(async move {
            let mut guards = guards;
            loop {
                tokio::time::sleep(KEEP_EVERY).await;
                guards.retain(|(_, g, _)| g.strong_count() > 0);
                if guards.is_empty() {
                    return;
                }
                for (identity, guard, kept) in &mut guards {
                    let Some(epoch) = guard.upgrade().map(|g| g.epoch()) else {
                        continue;
                    };
                    if epoch <= *kept {
                        continue;
                    }
                    match self.keep(identity, epoch).await {
                        Ok(()) => *kept = epoch,
                        Err(e) => tracing::debug!(
                            "registry: the epoch of a store could not be mirrored now: {e}"
                        ),
                    }
                }
            }
        });
    }
}

/// Whether the store `identity` is this node's own: embedded, or a server on the loopback
/// address or a Unix socket (each node's `redis://127.0.0.1` is another server).
fn node_local(identity: &str) -> bool {
    let Some((scheme, rest)) = identity.split_once("://") else {
        // `embedded:PATH`, and whatever names no server.
        return true;
    };
    if scheme.contains("unix") || rest.contains("host=/") || rest.contains("socket=") {
        return true;
    }
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let hosts = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    // Several hosts (a cluster): its own only if every one is.
    hosts.split(',').all(|h| {
        let host = match h.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => h.split(':').next().unwrap_or(""),
        };
        host.is_empty()
            || host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    })
}

#[cfg(test)]
mod tests {
    use super::node_local;

    #[test]
    fn a_nodes_own_stores_are_told_from_shared_ones() {
        for own in [
            "embedded:/var/lib/floe/sequences.redb",
            "redis://127.0.0.1:6379",
            "redis://localhost",
            "postgres://u@[::1]:5432/db",
            "redis+unix:///run/redis.sock",
            "postgres://u@/db?host=/run/postgresql",
            "etcd://127.0.0.1:2379,127.0.0.2:2379/root",
        ] {
            assert!(node_local(own), "{own}");
        }
        for shared in [
            "redis://10.0.0.5:6379",
            "redis://user@redis.prod:6379/0",
            "mysql://root@db.internal:3306/floe?table=t",
            "etcd://127.0.0.1:2379,10.0.0.2:2379/root",
            "zk://zk-0.zk:2181/floe",
        ] {
            assert!(!node_local(shared), "{shared}");
        }
    }
}
