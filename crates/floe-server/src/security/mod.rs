//! What guards the listeners: TLS ([`tls`]) and bearer tokens ([`auth`]), read
//! from the configuration's `[tls]` and `[auth]` sections at start-up and again on
//! [`Security::reload`] (SIGHUP), and the warning about a listener reachable beyond this
//! machine without them.

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::config::ServerConfig;

pub mod auth;
pub mod login;
pub mod tls;

/// The largest certificate, key or token file read (they are a few kilobytes).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// The bytes of the regular file at `path`, at most [`MAX_FILE_BYTES`], or one line naming
/// `key` (the configuration key) and the file: not a regular file (a FIFO would block a
/// reload forever, `/dev/zero` would fill memory), too large, or unreadable.
pub(crate) fn read_file(key: &str, path: &std::path::Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let cannot = |e: std::io::Error| format!("{key}: cannot read {}: {e}", path.display());
    let not_regular = || format!("{key}: {} is not a regular file", path.display());
    // Before opening: opening a FIFO waits for a writer.
    if !std::fs::metadata(path).map_err(cannot)?.is_file() {
        return Err(not_regular());
    }
    let mut file = std::fs::File::open(path).map_err(cannot)?;
    if !file.metadata().map_err(cannot)?.is_file() {
        return Err(not_regular());
    }
    let mut bytes = Vec::new();
    file.by_ref()
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "{key}: {} is larger than {} bytes: not a certificate, key or token file",
            path.display(),
            MAX_FILE_BYTES
        ));
    }
    Ok(bytes)
}

use auth::{Guard, Tokens};
use tls::Tls;

/// TLS and tokens for both listeners. The default is neither (plain text, no tokens).
#[derive(Clone, Debug, Default)]
pub struct Security {
    /// TLS on both listeners.
    pub tls: Option<Tls>,
    /// The accepted bearer tokens (none: no token is asked for), swapped whole on a reload.
    pub tokens: Option<Arc<ArcSwap<Tokens>>>,
    /// Whether health (`/healthz`, `/readyz`, `/metrics`, `/openapi.json`, gRPC health) needs a token too.
    pub health_needs_token: bool,
    /// The status page's sign-in sessions ([`login`]).
    pub sessions: Arc<login::Sessions>,
}

impl Security {
    /// Reads the certificate, key and token files `config` names, checking the certificate at
    /// `now_ms` (Unix ms, the server's clock). Blocking file I/O: call it off the async
    /// executor.
    ///
    /// # Errors
    /// One line naming the key (`tls.cert`, `tls.key`, `auth.token_file`), the file and what
    /// is wrong with it.
    pub fn load(config: &ServerConfig, now_ms: u64) -> Result<Security, String> {
        let tls = match (&config.tls.cert, &config.tls.key) {
            (Some(cert), Some(key)) => Some(Tls::load(cert, key, now_ms)?),
            (None, None) => None,
            _ => {
                config.tls.validate().map_err(|e| e.to_string())?;
                None
            }
        };
        let tokens = match &config.auth.token_file {
            Some(path) => Some(Arc::new(ArcSwap::from_pointee(Tokens::load(path)?))),
            None => None,
        };
        Ok(Security {
            tls,
            tokens,
            health_needs_token: config.auth.health_needs_token,
            sessions: Arc::default(),
        })
    }

    /// Reads again the certificate, key and token files `tls` and `auth` name (those read by
    /// [`load`](Self::load): whether TLS and tokens are on does not change) and, when every one
    /// of them is good, serves them from the next handshake and request on; open connections
    /// keep theirs. When one is not, nothing changes. Blocking file I/O: call it off the async
    /// executor.
    ///
    /// # Errors
    /// One line naming the key and the file that is wrong; the old ones are kept.
    pub fn reload(
        &self,
        tls: &crate::config::TlsConfig,
        auth: &crate::config::AuthConfig,
        now_ms: u64,
    ) -> Result<Vec<String>, String> {
        let certificate = match (&self.tls, &tls.cert, &tls.key) {
            (Some(_), Some(cert), Some(key)) => Some(tls::Certificate::load(cert, key, now_ms)?),
            _ => None,
        };
        let tokens = match (&self.tokens, &auth.token_file) {
            (Some(_), Some(path)) => Some(Tokens::load(path)?),
            _ => None,
        };
        let mut done = Vec::new();
        if let (Some(tls), Some(certificate)) = (&self.tls, certificate) {
            done.push(format!(
                "TLS certificate {} (valid until {})",
                certificate.subject,
                tls::date(certificate.not_after_s)
            ));
            tls.replace(certificate);
        }
        if let (Some(slot), Some(tokens)) = (&self.tokens, tokens) {
            if slot.load().same_as(&tokens) {
                done.push(format!("{} token(s), unchanged", tokens.len()));
            } else {
                done.push(format!("{} token(s)", tokens.len()));
                slot.store(Arc::new(tokens));
                // A token taken away takes its status-page sessions with it.
                self.sessions.end_all();
            }
        }
        self.record();
        Ok(done)
    }

    /// Sets `floe_tls_certificate_expiry_seconds` (when TLS is on): the served certificate's
    /// end of validity, in Unix seconds.
    pub fn record(&self) {
        if let Some(tls) = &self.tls {
            #[allow(clippy::cast_precision_loss)]
            metrics::gauge!("floe_tls_certificate_expiry_seconds", "certificate" => "listeners")
                .set(tls.not_after_s() as f64);
        }
    }

    /// The guard of a listener whose health paths are `health`, if tokens are on; `pages`:
    /// whether it serves the status pages (HTTP), which a sign-in session opens.
    pub(crate) fn guard(&self, health: &'static [&'static str], pages: bool) -> Option<Arc<Guard>> {
        self.tokens.as_ref().map(|tokens| {
            Arc::new(Guard {
                tokens: Arc::clone(tokens),
                open: if self.health_needs_token { &[] } else { health },
                sessions: pages.then(|| Arc::clone(&self.sessions)),
            })
        })
    }

    /// Which OpenAPI description this server serves: open routes only where the guard
    /// leaves them open.
    pub fn openapi(&self) -> crate::http::Openapi {
        match (self.tokens.is_some(), self.health_needs_token) {
            (false, _) => crate::http::Openapi::Open,
            (true, false) => crate::http::Openapi::Tokens,
            (true, true) => crate::http::Openapi::TokensEverywhere,
        }
    }

    /// The status page's sign-in, if tokens are on.
    pub fn login(&self) -> Option<login::Login> {
        self.tokens.as_ref().map(|tokens| login::Login {
            tokens: Arc::clone(tokens),
            sessions: Arc::clone(&self.sessions),
            secure: self.tls.is_some(),
        })
    }

    /// What a listener bound to `addr` lacks, when `addr` is reachable beyond this machine:
    /// `None` for a loopback address, or when it has both TLS and tokens.
    pub fn exposed(&self, addr: SocketAddr) -> Option<String> {
        if addr.ip().is_loopback() {
            return None;
        }
        let missing: Vec<&str> = [
            self.tls.is_none().then_some("TLS (--tls-cert, --tls-key)"),
            self.tokens.is_none().then_some("tokens (--token-file)"),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!missing.is_empty()).then(|| missing.join(" and "))
    }

    /// Warns (`tracing::warn!`) about `addr`, the address of listener `name`, when it is
    /// reachable beyond this machine without TLS or tokens.
    pub fn warn_if_exposed(&self, name: &str, addr: SocketAddr) {
        if let Some(missing) = self.exposed(addr) {
            tracing::warn!(
                "{name} listens on {addr}, beyond this machine, without {missing}: anyone who reaches it can take IDs{}",
                if self.tls.is_none() { " and read them in transit" } else { "" }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FIFO (which would block a reload forever), a device (`/dev/zero` would fill memory)
    /// and a file larger than any certificate or token file are refused, naming the key.
    #[test]
    fn only_small_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = read_file("auth.token_file", &fifo).unwrap_err();
        assert!(
            e.starts_with("auth.token_file: ") && e.contains("not a regular file"),
            "{e}"
        );
        let e = read_file("tls.cert", std::path::Path::new("/dev/zero")).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; (MAX_FILE_BYTES + 1) as usize]).unwrap();
        let e = read_file("tls.key", &big).unwrap_err();
        assert!(e.contains("larger than"), "{e}");
        let small = dir.path().join("small");
        std::fs::write(&small, "token\n").unwrap();
        assert_eq!(read_file("auth.token_file", &small).unwrap(), b"token\n");
    }

    #[test]
    fn only_addresses_beyond_loopback_are_named() {
        let plain = Security::default();
        assert_eq!(plain.exposed("127.0.0.1:1".parse().unwrap()), None);
        assert_eq!(plain.exposed("[::1]:1".parse().unwrap()), None);
        let missing = plain.exposed("0.0.0.0:1".parse().unwrap()).unwrap();
        assert!(
            missing.contains("TLS") && missing.contains("tokens"),
            "{missing}"
        );
        let tokens = Security {
            tokens: Some(Arc::new(ArcSwap::from_pointee(
                Tokens::parse("t\n").unwrap(),
            ))),
            ..Security::default()
        };
        let missing = tokens.exposed("10.0.0.1:1".parse().unwrap()).unwrap();
        assert!(
            missing.contains("TLS") && !missing.contains("tokens"),
            "{missing}"
        );
    }
}
