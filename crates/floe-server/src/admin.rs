//! The admin API's steps, shared by HTTP (`/v1/admin/...`, [`crate::http`]) and gRPC
//! (`floe.v1.Admin`, [`crate::grpc`]): a store's keys and their values, one key's state
//! without taking an ID, a floor raised at run time, and registrations
//! (`floe_sequencer`'s `admin` docs say what each guarantees).
//!
//! **Who may call it.** It changes what IDs are issued (a floor burns IDs; an unregistered key
//! is refused), so a listener serves it only to callers that proved who they are (bearer
//! tokens, `auth.token_file`) or, without tokens, only on a loopback address, where the caller
//! is on the server's machine. Elsewhere it is refused: HTTP 403, gRPC `PERMISSION_DENIED`.

use floe_sequencer::{Key, KeyState, StoreHandle};

use crate::app::App;
use crate::error::{echo, ErrorKind, ServerError, MAX_ECHO};
use crate::{public, Asked};

/// Why the admin API is refused on a listener, when it is.
pub const REFUSED: &str = "the admin API is served with bearer tokens (auth.token_file), or without them on a loopback listener only";

/// Whether a listener serves the admin API: tokens are asked for, or it is bound to loopback
/// (unknown: not served).
pub fn allowed(tokens: bool, listener: Option<std::net::SocketAddr>) -> bool {
    tokens || listener.is_some_and(|a| a.ip().is_loopback())
}

/// The most keys one page lists by default.
pub const DEFAULT_PAGE: usize = 100;

impl App {
    fn admin_store(&self, store: &str) -> Result<&StoreHandle, ServerError> {
        self.sequencer.store(store).map(|h| &**h).map_err(|_| {
            ServerError::new(
                ErrorKind::UnknownStore,
                format!("Sequencer store {} not found", echo(store, MAX_ECHO)),
            )
        })
    }

    fn admin_key(key: &str) -> Result<Key, ServerError> {
        Key::new(key).map_err(|e| ServerError::new(ErrorKind::InvalidArgument, e.to_string()))
    }

    /// One key's state, nothing taken.
    ///
    /// # Errors
    /// The store or key unknown or invalid; the store's errors in the server's words.
    pub async fn admin_key_state(&self, store: &str, key: &str) -> Result<KeyState, ServerError> {
        let h = self.admin_store(store)?;
        let k = Self::admin_key(key)?;
        h.key_state(&k)
            .await
            .map_err(|e| public(e, h, key, Asked::Admin))
    }

    /// A page of a store's keys with their values, those after `after`.
    ///
    /// # Errors
    /// As [`admin_key_state`](Self::admin_key_state); `limit` out of 1 to 1,000.
    pub async fn admin_key_states(
        &self,
        store: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<KeyState>, ServerError> {
        let h = self.admin_store(store)?;
        let after = after.map(Self::admin_key).transpose()?;
        h.key_states(after.as_ref(), limit)
            .await
            .map_err(|e| public(e, h, after.as_ref().map_or("", Key::as_str), Asked::Admin))
    }

    /// Raises `key`'s floor: every ID issued afterwards is above `above`, by this server at once
    /// and by every other server of the store within 5 s (`floe_sequencer::changes`); the
    /// key's state after it.
    ///
    /// # Errors
    /// As [`admin_key_state`](Self::admin_key_state).
    pub async fn admin_raise(
        &self,
        store: &str,
        key: &str,
        above: i64,
    ) -> Result<KeyState, ServerError> {
        let h = self.admin_store(store)?;
        let k = Self::admin_key(key)?;
        h.raise_floor(&k, above)
            .await
            .map_err(|e| public(e, h, key, Asked::Admin))?;
        h.key_state(&k)
            .await
            .map_err(|e| public(e, h, key, Asked::Admin))
    }

    /// Registers (`on`) or unregisters `key`; whether that changed anything.
    ///
    /// # Errors
    /// As [`admin_key_state`](Self::admin_key_state).
    pub async fn admin_register(
        &self,
        store: &str,
        key: &str,
        on: bool,
    ) -> Result<bool, ServerError> {
        let h = self.admin_store(store)?;
        let k = Self::admin_key(key)?;
        let result = if on {
            h.register(&k).await
        } else {
            h.unregister(&k).await
        };
        result.map_err(|e| public(e, h, key, Asked::Admin))
    }

    /// A page of a store's registered keys, those after `after`.
    ///
    /// # Errors
    /// As [`admin_key_states`](Self::admin_key_states).
    pub async fn admin_registered(
        &self,
        store: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Key>, ServerError> {
        let h = self.admin_store(store)?;
        let after = after.map(Self::admin_key).transpose()?;
        h.registered_keys(after.as_ref(), limit)
            .await
            .map_err(|e| public(e, h, after.as_ref().map_or("", Key::as_str), Asked::Admin))
    }
}
