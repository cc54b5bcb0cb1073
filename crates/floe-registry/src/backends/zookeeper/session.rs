//! A registry's ZooKeeper sessions: opened detached, connected again on a new client, and
//! ended when the registry goes.

use std::time::Duration;

use zookeeper_client::{Client, Error as ZkError};

use super::Ensemble;
#[cfg(doc)]
use super::Shared;

/// The session timeout asked of the server by default (`?session_timeout=` in the URL).
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

/// Opens a session on `cluster`, asking for `timeout`.
///
/// Every session is **detached**: dropping its client does not end it, because the keeper
/// may have moved the session to a second connection (see [`resume_session`]), and the
/// first client, still trying to reconnect in the background, must not close it when it
/// gets through. The registry ends its session itself when it is dropped ([`Shared`]'s
/// `Drop`), and a clean close deletes the holder nodes anyway.
pub(super) async fn open_session(cluster: &Ensemble, timeout: Duration) -> Result<Client, ZkError> {
    cluster
        .connect(connector(cluster, timeout).with_detached())
        .await
}

/// A connector for sessions of `timeout` on `cluster`, authenticated by its credentials (the
/// client sends them again on every connection of the session, so a reconnect or a session
/// resumed on a new client stays authenticated). Its connection timeout (`T/2`, at most 3 s)
/// is also how long a connection may stay silent before the client drops it; it pings every
/// 3/8 of it.
fn connector(cluster: &Ensemble, timeout: Duration) -> zookeeper_client::Connector {
    let connector = Client::connector()
        .with_session_timeout(timeout)
        .with_connection_timeout((timeout / 2).min(Duration::from_secs(3)));
    match &cluster.credentials {
        Some(c) => connector.with_auth("digest", format!("{}:{}", c.user, c.password).as_bytes()),
        None => connector,
    }
}

/// Connects to `session` again on a new client, trying each server of `cluster` once.
///
/// The client's own reconnects back off exponentially (100 ms doubling per round of the
/// servers: with one server its tries come 0.1, 0.3, 0.7, 1.5, 3.1 and 6.3 s after a refused
/// cut), so a cut of 3.7 s was healed only at 6.3 s, after a 6 s session had ended. The keeper
/// calls this every [`RESUME_EVERY`] once its client has been disconnected for `T/6`; the
/// server moves the session to the newest connection (the old client's, if it gets through
/// later, takes it back for a moment, finds its client dropped and goes).
pub(super) async fn resume_session(
    cluster: &Ensemble,
    session: zookeeper_client::SessionInfo,
    timeout: Duration,
) -> Result<Client, ZkError> {
    cluster
        .connect(rejoin(cluster, session, timeout).with_detached())
        .await
}

/// A connector back into `session`, trying each server once.
fn rejoin(
    cluster: &Ensemble,
    session: zookeeper_client::SessionInfo,
    timeout: Duration,
) -> zookeeper_client::Connector {
    connector(cluster, timeout)
        .with_session(session)
        .with_fail_eagerly()
}

/// How often the keeper tries [`resume_session`] while its client stays disconnected.
pub(super) const RESUME_EVERY: Duration = Duration::from_millis(250);

/// Ends `session` on `cluster`: a client of it that is not detached, dropped at once, sends
/// the server a close (its ephemeral nodes go now, not after the timeout).
/// Tries until the session is closed, or could no longer be alive (1.4 `T`, when the client
/// itself would give it up: a registry dropped during an outage).
pub(super) async fn end_session(
    cluster: &Ensemble,
    session: zookeeper_client::SessionInfo,
    timeout: Duration,
) {
    let until = tokio::time::Instant::now() + timeout * 7 / 5;
    while tokio::time::Instant::now() < until {
        let connect = cluster.connect(rejoin(cluster, session.clone(), timeout));
        match tokio::time::timeout(timeout / 2, connect).await {
            Ok(Ok(client)) => {
                // A request answered, so that the close goes out on an established
                // connection.
                let _ = tokio::time::timeout(timeout / 2, client.check_stat("/")).await;
                return; // dropped: the close goes out
            }
            Ok(Err(ZkError::SessionExpired)) => return,
            _ => tokio::time::sleep(RESUME_EVERY).await,
        }
    }
}
