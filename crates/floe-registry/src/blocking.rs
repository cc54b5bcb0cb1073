//! Blocking file I/O (OS locks, `fsync`) run off the async executor.

use crate::{ErrorKind, RegistryError};

/// Runs `f` on tokio's blocking pool and waits for it without holding an executor thread.
/// `what` names the work in the error should the task not finish (it panicked).
pub(crate) async fn off_executor<T, F>(what: &str, f: F) -> Result<T, RegistryError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, RegistryError> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RegistryError::new(ErrorKind::Unavailable, format!("{what} failed: {e}")))?
}
