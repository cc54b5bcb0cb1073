//! Opening a registry: the constructors of [`ZkRegistry`], which open its first session and
//! start its keeper.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::access::first_time;
use super::keeper::keep;
use super::leaf;
use super::records::Claims;
use super::session::open_session;
#[cfg(not(feature = "zookeeper-tls"))]
use super::NO_TLS;
use super::SESSION_TIMEOUT;
use super::{map_err, Ensemble, LeafGuard, Nodes, Session, Shared, ZkAccess, ZkRegistry};
#[cfg(doc)]
use crate::ErrorKind;
use crate::RegistryError;

impl ZkRegistry {
    /// Sets the reach of the claims this registry makes from now on ([`crate::terms`]):
    /// [`DEFAULT_REACH`](crate::terms::DEFAULT_REACH) unless told.
    #[must_use]
    pub fn with_reach(self, reach: Duration) -> Self {
        let reach = reach.clamp(crate::terms::MIN_REACH, crate::terms::MAX_REACH);
        self.shared.reach_ms.store(
            u64::try_from(reach.as_millis()).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Release,
        );
        self
    }

    /// Connects to `cluster` (`host:port[,host:port...]`) and uses `root` (e.g. `/floe`).
    /// Call it on a tokio runtime: it starts the session's keeper there (see the module docs).
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a bad root; [`ErrorKind::Unavailable`] when no server answers
    /// within the connection timeout.
    pub async fn connect(cluster: &str, root: &str) -> Result<Self, RegistryError> {
        Self::connect_with(cluster, root, SESSION_TIMEOUT).await
    }

    /// As [`connect`](Self::connect), asking the server for sessions of `session_timeout`.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub async fn connect_with(
        cluster: &str,
        root: &str,
        session_timeout: Duration,
    ) -> Result<Self, RegistryError> {
        Self::connect_nodes(
            cluster,
            root,
            session_timeout,
            Nodes::Floe,
            ZkAccess::default(),
        )
        .await
    }

    /// As [`connect_with`](Self::connect_with), every session authenticated by `credentials`
    /// (ZooKeeper's `digest` scheme), and every node floe creates given creator-only ACLs; with
    /// `None`, as [`connect_with`](Self::connect_with): open ACLs, and a warning logged.
    ///
    /// # Errors
    /// As [`connect`](Self::connect); [`ErrorKind::Config`] when the server refuses the
    /// session's authentication (it requires credentials and none were given).
    pub async fn connect_with_credentials(
        cluster: &str,
        root: &str,
        session_timeout: Duration,
        access: impl Into<ZkAccess>,
    ) -> Result<Self, RegistryError> {
        Self::connect_nodes(cluster, root, session_timeout, Nodes::Floe, access.into()).await
    }

    /// As [`connect_with`](Self::connect_with), with the records in Meituan Leaf's nodes under
    /// `root` (Leaf's `/snowflake`, or `/chroot/snowflake`), a node a Leaf server wrote last
    /// taken over only as `guard` allows ([`leaf`]).
    ///
    /// # Errors
    /// As [`connect`](Self::connect); [`ErrorKind::Config`] for a root whose last part is not
    /// `snowflake`.
    pub async fn connect_leaf(
        cluster: &str,
        root: &str,
        session_timeout: Duration,
        guard: LeafGuard,
    ) -> Result<Self, RegistryError> {
        Self::connect_leaf_with_credentials(cluster, root, session_timeout, guard, None).await
    }

    /// As [`connect_leaf`](Self::connect_leaf), authenticated by `credentials` as
    /// [`connect_with_credentials`](Self::connect_with_credentials).
    ///
    /// # Errors
    /// As [`connect_leaf`](Self::connect_leaf).
    pub async fn connect_leaf_with_credentials(
        cluster: &str,
        root: &str,
        session_timeout: Duration,
        guard: LeafGuard,
        access: impl Into<ZkAccess>,
    ) -> Result<Self, RegistryError> {
        leaf::check_root(root)?;
        Self::connect_nodes(
            cluster,
            root,
            session_timeout,
            Nodes::Leaf(guard),
            access.into(),
        )
        .await
    }

    async fn connect_nodes(
        cluster: &str,
        root: &str,
        session_timeout: Duration,
        nodes: Nodes,
        access: ZkAccess,
    ) -> Result<Self, RegistryError> {
        super::check_servers("ZooKeeper", cluster, root)?;
        #[cfg(not(feature = "zookeeper-tls"))]
        if access.tls.is_some() {
            return Err(RegistryError::config(NO_TLS));
        }
        let ensemble = Ensemble {
            servers: cluster.to_string(),
            credentials: access.credentials,
            tls: access.tls,
        };
        let client = open_session(&ensemble, session_timeout)
            .await
            .map_err(|e| map_err(&format!("cannot connect to {cluster}"), e))?;
        match &ensemble.credentials {
            Some(c) => tracing::debug!(
                "zookeeper: sessions on {cluster} authenticated as digest user {:?}; floe's nodes under {root} are created creator-only",
                c.user
            ),
            // Once per process and place: `floe serve` opens the registry once per generator.
            None if first_time(&format!("{cluster}{root}")) => tracing::warn!(
                "zookeeper: no credentials in the registry URL: the nodes floe creates under {root} on {cluster} are open to anyone (world:anyone), so anyone who reaches ZooKeeper can rewrite or delete the worker records and make two nodes issue the same IDs; give credentials (zk://USER:PASSWORD@host:port{root}, or zk://USER@host:port{root}?password_file=PATH) to create them creator-only"
            ),
            None => {}
        }
        let watcher = client.state_watcher();
        let shared = Arc::new(Shared {
            root: root.to_string(),
            cluster: ensemble,
            nodes,
            asked: session_timeout,
            session: Mutex::new(Session {
                client,
                epoch: 0,
                open: true,
            }),
            claims: Claims::default(),
            ended: Mutex::default(),
            runtime: tokio::runtime::Handle::current(),
            reach_ms: AtomicU64::new(
                u64::try_from(crate::terms::DEFAULT_REACH.as_millis()).unwrap_or(u64::MAX),
            ),
        });
        tokio::spawn(keep(Arc::downgrade(&shared), watcher));
        Ok(ZkRegistry { shared })
    }
}
