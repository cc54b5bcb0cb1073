//! What floe's stores share to continue a Layotto sidecar's sequences: the keys Layotto stores,
//! and the one-way takeover (`?from_layotto=APP`) that lifts floe's own keys above them.
//!
//! **Layotto's keys.** Layotto's runtime rewrites every key before its component sees it:
//! `sequencer|||{app}||{key}` with its default `keyPrefix` strategy (`appid`: `{app}` is the
//! runtime's `app_id`), `sequencer|||{store name}||{key}` with `name`, `sequencer|||{prefix,
//! lowercased}||{key}` with any other value, and `sequencer|||{key}` with `none` (or no app
//! id). floe's options take that middle part: `layotto=APP` / `from_layotto=APP` mean the
//! prefix `sequencer|||APP||`, and an empty value (`layotto=`) means `sequencer|||`. Layotto
//! refuses keys containing `||`, so a stored key whose rest holds `||` belongs to another app
//! and is skipped.
//!
//! **Its `biggerThan`** entries name the stored key (the runtime does not rewrite them);
//! floe's `bigger_than` names keys as clients send them, on every store and mode.

use crate::SeqError;
#[cfg(any(feature = "mysql", feature = "zookeeper", feature = "etcd"))]
use crate::Store;
#[cfg(any(feature = "mysql", feature = "zookeeper", feature = "etcd"))]
use floe_core::sequence::Key;

/// Layotto's API prefix and separators (its `sequencer_config.go`).
const API_PREFIX: &str = "sequencer|||";
const SEPARATOR: &str = "||";

/// The prefix Layotto puts before a client's key for `app` (see the module docs).
pub(crate) fn key_prefix(option: &str, app: &str) -> Result<String, SeqError> {
    if app.contains(SEPARATOR) {
        return Err(SeqError::config(format!(
            "store: {option}: expected Layotto's app id (or store name, or key prefix), which cannot hold \"||\", found {app:?}"
        )));
    }
    Ok(if app.is_empty() {
        API_PREFIX.to_string()
    } else {
        format!("{API_PREFIX}{app}{SEPARATOR}")
    })
}

/// The client's key of a key Layotto stored under `prefix`: `None` when it is not one of the
/// app's keys (another prefix, or its rest holds `||`), or is no key floe can serve (empty,
/// more than 255 bytes, not UTF-8): floe never issues IDs for those, so nothing is lost.
#[cfg(any(feature = "mysql", feature = "zookeeper", feature = "etcd"))]
pub(crate) fn client_key(stored: &[u8], prefix: &str) -> Option<Key> {
    let rest = stored.strip_prefix(prefix.as_bytes())?;
    if rest.windows(2).any(|w| w == SEPARATOR.as_bytes()) {
        return None;
    }
    Key::new(std::str::from_utf8(rest).ok()?).ok()
}

/// The one-way takeover: each of `found` (a key Layotto stored, and the last ID Layotto gave
/// it, or a value at least as high) lifts floe's own key of `store` to at least that value, so
/// floe continues above it. Idempotent: a key already higher is left as it is. Returns how many
/// of the app's keys were found.
#[cfg(any(feature = "mysql", feature = "zookeeper", feature = "etcd"))]
pub(crate) async fn take_over(
    store: &dyn Store,
    prefix: &str,
    found: impl IntoIterator<Item = (Vec<u8>, i64)>,
) -> Result<usize, SeqError> {
    let mut n = 0;
    for (stored, last) in found {
        if let Some(key) = client_key(&stored, prefix) {
            store.raise(&key, last).await?;
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(all(test, any(feature = "mysql", feature = "zookeeper", feature = "etcd")))]
mod tests {
    use super::*;

    #[test]
    fn layottos_keys_map_to_clients_keys() {
        let p = key_prefix("layotto", "app1").unwrap();
        assert_eq!(p, "sequencer|||app1||");
        assert_eq!(key_prefix("layotto", "").unwrap(), "sequencer|||");
        assert!(key_prefix("layotto", "a||b").is_err());
        let k = |s: &str| client_key(s.as_bytes(), &p);
        assert_eq!(k("sequencer|||app1||order").unwrap().as_str(), "order");
        assert_eq!(k("sequencer|||app2||order"), None);
        assert_eq!(k("other"), None);
        assert_eq!(k("sequencer|||app1||"), None);
        assert_eq!(k(&format!("sequencer|||app1||{}", "x".repeat(300))), None);
        assert_eq!(client_key(b"sequencer|||app1||\xff", &p), None);
        let none = key_prefix("layotto", "").unwrap();
        assert_eq!(
            client_key(b"sequencer|||order", &none).unwrap().as_str(),
            "order"
        );
        assert_eq!(
            client_key(b"sequencer|||app1||order", &none),
            None,
            "another app's key"
        );
    }
}
