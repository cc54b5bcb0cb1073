//! TLS, client certificates and user/password: how a URL asks for them, in one place for every
//! user of this crate (floe's registry and store accept and refuse the same URLs with the same
//! words), and the files read when a connection is made.
//!
//! The URL: `etcds://[user[:password]@]host:port[,host:port...][/root]?cacert=PATH&cert=PATH&key=PATH&password_file=PATH`.
//! `etcds://` is TLS (`etcd://` plain text); the option names are etcdctl's flags:
//! - `cacert`: the CA that signed etcd's certificate (PEM); without it, the system's roots;
//! - `cert` and `key`: a client certificate and its private key (PEM), for etcd's
//!   `--client-cert-auth`; one without the other is refused;
//! - `user:password@`: an etcd user (`Authenticate`), percent-decoded; or `user@` with
//!   `password_file=PATH`, a file holding the password (its trailing newline dropped), so that
//!   the password is in no URL, argv or environment.

use std::fmt;
use std::path::{Path, PathBuf};

use floe_core::endpoint::{quoted, take_credentials, take_options};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// The URL options [`Security::from_url`] reads.
pub const OPTIONS: [&str; 4] = ["cacert", "cert", "key", "password_file"];

/// How to reach a cluster: TLS (with a CA, a client certificate) and an etcd user, as a URL
/// asks. Holds file paths and a password, never file contents; its `Debug` hides the password.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Security {
    tls: bool,
    ca: Option<PathBuf>,
    identity: Option<(PathBuf, PathBuf)>,
    user: Option<String>,
    password: Password,
}

/// Where the password comes from.
#[derive(Clone, Default, PartialEq, Eq)]
enum Password {
    #[default]
    None,
    Inline(String),
    File(PathBuf),
}

impl fmt::Debug for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let password = match &self.password {
            Password::None => "none".to_string(),
            Password::Inline(_) => "****".to_string(),
            Password::File(p) => format!("file {}", p.display()),
        };
        f.debug_struct("Security")
            .field("tls", &self.tls)
            .field("ca", &self.ca)
            .field("identity", &self.identity)
            .field("user", &self.user)
            .field("password", &password)
            .finish()
    }
}

/// A user and its password, as read (the password never shown).
#[derive(Clone)]
pub(crate) struct Login {
    pub(crate) user: String,
    pub(crate) password: String,
}

impl fmt::Debug for Login {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Login")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Security {
    /// Plain text, no user: what `etcd://host:port` asks.
    pub fn plain() -> Security {
        Security::default()
    }

    /// Takes the security part out of an `etcd://` or `etcds://` URL: the URL without its
    /// `user:password@` and without the options of [`OPTIONS`] (the others left for the
    /// caller), and what they ask. Pure: no file is read here ([`crate::Client::connect_secure`]
    /// reads them).
    ///
    /// # Errors
    /// A message naming the option: another scheme; an option given twice or empty; TLS
    /// options on `etcd://`; `cert` without `key` or the reverse; a user with no password, a
    /// password twice, or `password_file` with no user. It never holds the password.
    pub fn from_url(url: &str) -> Result<(String, Security), String> {
        let tls = match url.split_once("://") {
            Some(("etcds", _)) => true,
            Some(("etcd", _)) => false,
            _ => {
                return Err(format!(
                    "expected etcd://host:port or etcds://host:port (TLS), found {}",
                    quoted(&floe_core::endpoint::redacted(url))
                ))
            }
        };
        let (url, credentials) = take_credentials(url)?;
        let (url, options) = take_options(&url, &OPTIONS);
        let value = |name: &str| -> Result<Option<PathBuf>, String> {
            let mut found = options.iter().filter(|(n, _)| *n == name);
            let first = found.next();
            if found.next().is_some() {
                return Err(format!("the option {name} is given twice"));
            }
            match first {
                Some((_, v)) if v.is_empty() => Err(format!("{name}= is empty: expected a file")),
                Some((_, v)) => Ok(Some(PathBuf::from(v))),
                None => Ok(None),
            }
        };
        let ca = value("cacert")?;
        let cert = value("cert")?;
        let key = value("key")?;
        let password_file = value("password_file")?;
        if !tls {
            if let Some(name) = [("cacert", &ca), ("cert", &cert), ("key", &key)]
                .iter()
                .find_map(|(n, v)| v.is_some().then_some(*n))
            {
                return Err(format!(
                    "{name}= is a TLS option: use an etcds:// URL (etcd:// is plain text)"
                ));
            }
        }
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) => {
                return Err(
                    "cert= needs key= (the client certificate's private key, PEM)".to_string(),
                )
            }
            (None, Some(_)) => {
                return Err("key= needs cert= (the client certificate, PEM)".to_string())
            }
        };
        let (user, password) = match (credentials, password_file) {
            (None, None) => (None, Password::None),
            (None, Some(_)) => {
                return Err(
                    "password_file= needs a user: etcd://USER@host:port?password_file=PATH"
                        .to_string(),
                )
            }
            (Some(c), Some(_)) if !c.password.is_empty() => {
                return Err(format!(
                    "the password of user {} is given twice, in the URL and in password_file=: give one",
                    quoted(&c.user)
                ))
            }
            (Some(c), Some(file)) => (Some(c.user), Password::File(file)),
            (Some(c), None) if c.password.is_empty() => {
                return Err(format!(
                    "user {} has no password: give USER:PASSWORD@ or password_file=PATH",
                    quoted(&c.user)
                ))
            }
            (Some(c), None) => (Some(c.user), Password::Inline(c.password)),
        };
        Ok((
            url,
            Security {
                tls,
                ca,
                identity,
                user,
                password,
            },
        ))
    }

    /// Whether connections use TLS (`etcds://`).
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The etcd user, if any.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The URL scheme: `etcds` or `etcd`.
    pub fn scheme(&self) -> &'static str {
        if self.tls {
            "etcds"
        } else {
            "etcd"
        }
    }

    /// Reads the password (from its file, if so). Blocking file I/O.
    pub(crate) fn login(&self) -> Result<Option<Login>, String> {
        let Some(user) = &self.user else {
            return Ok(None);
        };
        let password = match &self.password {
            Password::None => return Ok(None),
            Password::Inline(p) => p.clone(),
            Password::File(path) => {
                let text = read(path, "password_file")?;
                let text = String::from_utf8(text)
                    .map_err(|_| format!("password_file={}: not UTF-8 text", path.display()))?;
                floe_core::endpoint::password_in_file(&text)
                    .ok_or_else(|| format!("password_file={}: the file is empty", path.display()))?
                    .to_string()
            }
        };
        Ok(Some(Login {
            user: user.clone(),
            password,
        }))
    }

    /// Reads the CA and client certificate files and checks that they are PEM: the TLS
    /// configuration of a new connection (`None` for plain text). Blocking file I/O.
    pub(crate) fn tls_config(&self) -> Result<Option<ClientTlsConfig>, String> {
        if !self.tls {
            return Ok(None);
        }
        let mut config = ClientTlsConfig::new();
        config = match &self.ca {
            Some(path) => {
                let pem = read(path, "cacert")?;
                certificates(&pem, path, "cacert")?;
                config.ca_certificate(Certificate::from_pem(pem))
            }
            None => config.with_native_roots(),
        };
        if let Some((cert_path, key_path)) = &self.identity {
            let cert = read(cert_path, "cert")?;
            certificates(&cert, cert_path, "cert")?;
            let key = read(key_path, "key")?;
            PrivateKeyDer::from_pem_slice(&key).map_err(|e| {
                format!("key={}: no PEM private key in it ({e})", key_path.display())
            })?;
            config = config.identity(Identity::from_pem(cert, key));
        }
        Ok(Some(config))
    }
}

impl Security {
    /// The client certificate and key as read now, for [`crate::probe`]; `None` when there is
    /// none or they cannot be read. Blocking file I/O.
    pub(crate) fn identity_der(
        &self,
    ) -> Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
        let (cert, key) = self.identity.as_ref()?;
        let certs = CertificateDer::pem_file_iter(cert)
            .ok()?
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        let key = PrivateKeyDer::from_pem_file(key).ok()?;
        Some((certs, key))
    }
}

/// The bytes of file `path`, given as option `name`.
fn read(path: &Path, name: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{name}={}: cannot read it: {e}", path.display()))
}

/// Checks that `pem` holds at least one PEM certificate and nothing unreadable.
fn certificates(pem: &[u8], path: &Path, name: &str) -> Result<(), String> {
    let mut count = 0usize;
    for cert in CertificateDer::pem_slice_iter(pem) {
        cert.map_err(|e| format!("{name}={}: a bad PEM certificate ({e})", path.display()))?;
        count = count.saturating_add(1);
    }
    if count == 0 {
        return Err(format!(
            "{name}={}: no PEM certificate in it (expected a \"CERTIFICATE\" block)",
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<(String, Security), String> {
        Security::from_url(url)
    }

    #[test]
    fn a_secure_url_is_taken_apart() {
        let (rest, s) = parse(
            "etcds://floe:p%40ss@a:1,b:2/root?ttl=5&cacert=/c/ca.pem&cert=/c/cl.pem&key=/c/cl.key",
        )
        .unwrap();
        assert_eq!(rest, "etcds://a:1,b:2/root?ttl=5");
        assert!(s.is_tls());
        assert_eq!(s.user(), Some("floe"));
        assert!(s.password == Password::Inline("p@ss".into()));
        assert_eq!(s.ca, Some(PathBuf::from("/c/ca.pem")));
        assert!(!format!("{s:?}").contains("p@ss"), "{s:?}");
        let (rest, s) = parse("etcd://floe@a:1?password_file=/run/pw").unwrap();
        assert_eq!(rest, "etcd://a:1");
        assert!(!s.is_tls());
        assert!(s.password == Password::File("/run/pw".into()));
        assert_eq!(parse("etcd://a:1/x").unwrap().1, Security::plain());
        // TLS with the system's roots.
        assert!(parse("etcds://a:1").unwrap().1.is_tls());
    }

    #[test]
    fn bad_security_options_are_refused_naming_them() {
        for (url, words) in [
            ("etcd://a:1?cacert=/ca.pem", "cacert= is a TLS option"),
            ("etcd://a:1?cert=/c&key=/k", "cert= is a TLS option"),
            ("etcds://a:1?cert=/c", "cert= needs key="),
            ("etcds://a:1?key=/k", "key= needs cert="),
            ("etcds://a:1?cacert=", "cacert= is empty"),
            ("etcds://a:1?cacert=/a&cacert=/b", "cacert is given twice"),
            (
                "etcds://a:1?password_file=/p",
                "password_file= needs a user",
            ),
            ("etcds://u:secret@a:1?password_file=/p", "given twice"),
            ("etcds://u@a:1", "has no password"),
            ("zk://a:1", "expected etcd://"),
        ] {
            let e = parse(url).unwrap_err();
            assert!(e.contains(words), "{url}: {e}");
            assert!(!e.contains("secret"), "{url}: {e}");
        }
    }

    #[test]
    fn unreadable_or_non_pem_files_are_named() {
        let dir = std::env::temp_dir().join(format!("floe-etcd-sec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let missing = dir.join("missing.pem");
        let url = |q: String| parse(&format!("etcds://a:1?{q}")).unwrap().1;
        let e = url(format!("cacert={}", missing.display()))
            .tls_config()
            .unwrap_err();
        assert!(e.starts_with("cacert=") && e.contains("cannot read"), "{e}");
        let e = url(format!("cacert={}", junk.display()))
            .tls_config()
            .unwrap_err();
        assert!(e.starts_with("cacert=") && e.contains("no PEM"), "{e}");
        let e = url(format!("cert={}&key={}", junk.display(), junk.display()))
            .tls_config()
            .unwrap_err();
        assert!(e.starts_with("cert=") && e.contains("no PEM"), "{e}");
        let pw = dir.join("pw");
        std::fs::write(&pw, "s3cret\n").unwrap();
        let s = parse(&format!("etcd://floe@a:1?password_file={}", pw.display()))
            .unwrap()
            .1;
        assert_eq!(s.login().unwrap().unwrap().password, "s3cret");
        std::fs::write(&pw, "\n").unwrap();
        assert!(s.login().unwrap_err().contains("empty"));
        let s = parse(&format!(
            "etcd://floe@a:1?password_file={}",
            missing.display()
        ))
        .unwrap()
        .1;
        assert!(s.login().unwrap_err().starts_with("password_file="));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
