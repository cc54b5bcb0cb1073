//! How a registry reaches ZooKeeper beyond its servers: digest credentials and the ACLs of the
//! nodes floe creates ([`ZkAccess`]), TLS ([`ZkTls`]), and the warnings about open ACLs.

use std::fmt;
use std::sync::Mutex;

use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

use floe_core::endpoint::Credentials;

use super::Ensemble;

/// How a registry reaches ZooKeeper beyond its servers: the digest credentials its sessions
/// authenticate with (and its nodes' creator-only ACLs), and TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZkAccess {
    /// Digest credentials; `None`: no authentication, open ACLs (and a warning).
    pub credentials: Option<Credentials>,
    /// TLS to every server (`zks://`); `None`: plain TCP.
    pub tls: Option<ZkTls>,
}

impl From<Option<Credentials>> for ZkAccess {
    fn from(credentials: Option<Credentials>) -> Self {
        ZkAccess {
            credentials,
            tls: None,
        }
    }
}

/// TLS to ZooKeeper (`zks://...?cacert=PATH[&cert=PATH&key=PATH]`): the CA that signed the
/// servers' certificates (their names or addresses are checked against them), and floe's own
/// certificate and key for a server that asks for one (ZooKeeper's default,
/// `ssl.clientAuth=need`). PEM text, read at start; its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ZkTls {
    /// The CA certificates, PEM.
    pub ca: String,
    /// floe's certificate chain and private key, PEM.
    pub identity: Option<(String, String)>,
}

impl fmt::Debug for ZkTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkTls")
            .field("identity", &self.identity.as_ref().map(|_| "****"))
            .finish_non_exhaustive()
    }
}

impl ZkTls {
    /// Reads the PEM files of `cacert=`, `cert=` and `key=` (the last two both or neither),
    /// checking them as the client will use them.
    ///
    /// # Errors
    /// A message naming the option and the file.
    pub fn from_files(
        ca: Option<&str>,
        cert: Option<&str>,
        key: Option<&str>,
    ) -> Result<ZkTls, String> {
        let read = |option: &str, path: &str| {
            std::fs::read_to_string(path).map_err(|e| {
                format!(
                    "{option} {}: cannot read it: {e}",
                    floe_core::endpoint::quoted(path)
                )
            })
        };
        let ca = match ca {
            Some(path) => read("cacert", path)?,
            None => {
                return Err(
                    "ZooKeeper over TLS needs cacert=PATH, the CA that signed the servers' certificates (PEM)"
                        .to_string(),
                )
            }
        };
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some((read("cert", cert)?, read("key", key)?)),
            (None, None) => None,
            (Some(_), None) => {
                return Err("cert= needs key= (the certificate's private key, PEM)".into())
            }
            (None, Some(_)) => return Err("key= needs cert= (its certificate, PEM)".into()),
        };
        let tls = ZkTls { ca, identity };
        #[cfg(feature = "zookeeper-tls")]
        tls.options()?;
        Ok(tls)
    }

    /// The client's TLS options.
    #[cfg(feature = "zookeeper-tls")]
    fn options(&self) -> Result<zookeeper_client::TlsOptions, String> {
        let options = zookeeper_client::TlsOptions::new()
            .with_pem_ca(&self.ca)
            .map_err(|e| format!("cacert: no CA certificate in it ({e})"))?;
        match &self.identity {
            Some((cert, key)) => options
                .with_pem_identity(cert, key)
                .map_err(|e| format!("cert=, key=: no certificate and private key in them ({e})")),
            None => Ok(options),
        }
    }
}

impl fmt::Display for Ensemble {
    /// The servers (never the credentials).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.servers)
    }
}

impl Ensemble {
    /// The ACLs of every node floe creates: with credentials, **creator-only** (`auth` ids,
    /// all permissions: only a session with the same user and password may read, write, delete
    /// or create children); without, open to anyone (`world:anyone`, all), as before.
    pub(crate) fn acls(&self) -> Acls<'static> {
        if self.credentials.is_some() {
            Acls::creator_all()
        } else {
            Acls::anyone_all()
        }
    }

    /// Persistent nodes with [`Self::acls`].
    pub(super) fn persistent(&self) -> zookeeper_client::CreateOptions<'static> {
        CreateMode::Persistent.with_acls(self.acls())
    }

    /// Ephemeral nodes with [`Self::acls`].
    pub(super) fn ephemeral(&self) -> zookeeper_client::CreateOptions<'static> {
        CreateMode::Ephemeral.with_acls(self.acls())
    }

    /// Connects `connector` to the servers, over TLS if asked.
    pub(super) async fn connect(
        &self,
        connector: zookeeper_client::Connector,
    ) -> Result<Client, ZkError> {
        #[cfg(feature = "zookeeper-tls")]
        if let Some(tls) = &self.tls {
            // zookeeper-client builds its rustls configuration with the process's provider:
            // floe's is ring (its own TLS and its stores'), whichever other is compiled in.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let options = tls.options().map_err(ZkError::UnexpectedError)?;
            return connector
                .with_tls(options)
                .secure_connect(&self.servers)
                .await;
        }
        connector.connect(&self.servers).await
    }
}

/// Why `zks://` is refused by a build without the feature `zookeeper-tls`.
pub const NO_TLS: &str = "registry: ZooKeeper over TLS (zks://) is not in this build: build floe with the cargo feature zookeeper-tls";

/// Whether `place` is seen for the first time in this process (for warnings given once).
pub(super) fn first_time(place: &str) -> bool {
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if seen.iter().any(|s| s == place) {
        return false;
    }
    seen.push(place.to_string());
    true
}

/// With credentials, warns (once per process and directories) when a directory floe uses, created
/// before with open ACLs, lets anyone change it: its existing children keep their ACLs, and
/// whoever may create or delete children in it can remove a worker record's holder or add
/// nodes. Only a warning: floe's own nodes in it are creator-only all the same.
pub(super) async fn warn_if_open(client: &Client, root: &str, dirs: &[String]) {
    let mut paths = vec![root.to_string()];
    paths.extend(dirs.iter().cloned());
    let mut open = Vec::new();
    for path in paths {
        if let Ok((acls, _)) = client.get_acl(&path).await {
            let writable = acls.iter().any(|acl| {
                acl.scheme() == "world"
                    && acl.id() == "anyone"
                    && acl.permission() != zookeeper_client::Permission::READ
                    && acl.permission() != zookeeper_client::Permission::NONE
            });
            if writable {
                open.push(path);
            }
        }
    }
    if !open.is_empty() && first_time(&open.join(",")) {
        tracing::warn!(
            "zookeeper: {} created before with open ACLs (world:anyone may change {}): anyone who reaches ZooKeeper can still add or delete nodes there; set creator-only ACLs on them (zkCli: addauth digest USER:PASSWORD, then setAcl -R PATH auth::cdrwa), or start on a new root",
            open.join(", "),
            if open.len() == 1 { "it" } else { "them" }
        );
    }
}
