//! Opening a registry by its URL.

#[cfg(any(feature = "etcd", feature = "zookeeper"))]
use crate::backends::check_servers;
#[cfg(feature = "etcd")]
use crate::backends::etcd;
#[cfg(feature = "zookeeper")]
use crate::backends::zookeeper;
use crate::backends::{file, static_id};
use crate::blocking::off_executor;
use crate::{ErrorKind, Registry, RegistryError, Unreachable};

/// The root of a `zk://` or `etcd://` URL that names none.
const FLOE_ROOT: &str = "/floe";

/// The servers and root of a server registry URL (root `default_root` when it names none),
/// naming the field.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
fn servers_and_root<'a>(
    kind: &str,
    url: &'a str,
    default_root: &'a str,
) -> Result<(&'a str, &'a str), RegistryError> {
    floe_core::endpoint::servers_and_root(kind, url, default_root)
        .map_err(|e| RegistryError::config(format!("registry: {e}")))
}

/// What a registry URL names, parsed and checked, nothing opened yet.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    File(String),
    Static(static_id::StaticId),
    #[cfg(feature = "zookeeper")]
    Zk {
        cluster: String,
        root: String,
        session_timeout: std::time::Duration,
        /// `?reach=` ([`crate::terms`]).
        reach: std::time::Duration,
        /// Meituan Leaf's nodes (`leaf+zk://`) rather than floe's.
        leaf: bool,
        /// Digest credentials (`user:password@`, or `user@` and `?password_file=`): every
        /// session authenticates with them and floe's nodes are created creator-only.
        credentials: Option<floe_core::endpoint::Credentials>,
        /// TLS (`zks://`, `leaf+zks://`): the CA, and floe's certificate and key.
        tls: Option<zookeeper::ZkTls>,
    },
    #[cfg(feature = "etcd")]
    Etcd {
        endpoints: String,
        root: String,
        ttl: i64,
        /// `?reach=` ([`crate::terms`]).
        reach: std::time::Duration,
        /// TLS and user (`etcds://`, `user:password@`, `cacert=`...).
        security: floe_etcd::Security,
    },
}

/// The `?reach=SECONDS` option of a registry that leases ([`crate::terms`]): 1 to 604800
/// (7 days); [`DEFAULT_REACH`](crate::terms::DEFAULT_REACH) when not given.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
fn reach(value: Option<&str>) -> Result<std::time::Duration, RegistryError> {
    use crate::terms::{DEFAULT_REACH, MAX_REACH, MIN_REACH};
    let Some(text) = value else {
        return Ok(DEFAULT_REACH);
    };
    let secs = text.parse::<u64>().map_err(|_| {
        RegistryError::config(format!(
            "registry: reach must be whole seconds (how long a node cut off from its registry goes on issuing), found {text:?}"
        ))
    })?;
    if !(MIN_REACH.as_secs()..=MAX_REACH.as_secs()).contains(&secs) {
        return Err(RegistryError::config(format!(
            "registry: reach must be {} to {} seconds (7 days), found {secs}",
            MIN_REACH.as_secs(),
            MAX_REACH.as_secs()
        )));
    }
    Ok(std::time::Duration::from_secs(secs))
}

/// Refuses an option given twice (which one was meant?).
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
fn once(options: &[(&str, String)]) -> Result<(), RegistryError> {
    for (i, (name, _)) in options.iter().enumerate() {
        if options[..i].iter().any(|(n, _)| n == name) {
            return Err(RegistryError::config(format!(
                "registry: the option {name} is given twice"
            )));
        }
    }
    Ok(())
}

/// Parses a registry URL (see [`open`]) without opening anything.
fn parse(url: &str) -> Result<Target, RegistryError> {
    // A password from the environment first (`password_env=NAME`), for every scheme.
    let resolved = floe_core::endpoint::with_password_env(url, |name| std::env::var(name).ok())
        .map_err(|e| {
            RegistryError::config(format!(
                "registry: {}: {e}",
                floe_core::endpoint::redacted(url)
            ))
        })?;
    parse_resolved(&resolved)
}

/// [`parse`] on the blocking pool: it may read a password file and certificate files.
async fn parse_off_executor(url: &str) -> Result<Target, RegistryError> {
    let url = url.to_string();
    off_executor("registry: reading its URL", move || parse(&url)).await
}

/// [`parse`] of a URL whose `password_env=` is resolved.
fn parse_resolved(url: &str) -> Result<Target, RegistryError> {
    let (scheme, rest) = url.split_once(':').ok_or_else(|| {
        RegistryError::config(format!(
            "registry: expected a URL such as file:///var/lib/floe or static:7, found {:?}",
            floe_core::endpoint::redacted(url)
        ))
    })?;
    match scheme {
        "file" => {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(RegistryError::config(format!(
                    "registry: {:?} has no directory",
                    floe_core::endpoint::redacted(url)
                )));
            }
            Ok(Target::File(path.to_string()))
        }
        "static" => {
            let id = static_id::StaticId::parse(rest).ok_or_else(|| {
                RegistryError::config(format!(
                    "registry: expected static:ID with a number, static:ordinal or \
                     static:ordinal+OFFSET, found {:?}",
                    floe_core::endpoint::redacted(url)
                ))
            })?;
            Ok(Target::Static(id))
        }
        #[cfg(feature = "zookeeper")]
        "zk" | "zookeeper" | "leaf+zk" | "zks" | "leaf+zks" => {
            let leaf = scheme.starts_with("leaf+");
            let secure = scheme.ends_with("zks");
            let (base, options) = floe_core::endpoint::take_options(
                url,
                &["session_timeout", "reach", "password_file", "cacert", "cert", "key"],
            );
            once(&options)?;
            let option = |name| {
                options
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.as_str())
            };
            let (base, credentials) = floe_core::endpoint::take_credentials(&base)
                .and_then(|(base, c)| {
                    floe_core::endpoint::with_password_file(c, option("password_file"))
                        .map(|c| (base, c))
                })
                .map_err(|e| RegistryError::config(format!("registry: {e}")))?;
            let tls = if secure {
                #[cfg(not(feature = "zookeeper-tls"))]
                return Err(RegistryError::config(zookeeper::NO_TLS));
                #[cfg(feature = "zookeeper-tls")]
                Some(
                    zookeeper::ZkTls::from_files(option("cacert"), option("cert"), option("key"))
                        .map_err(|e| RegistryError::config(format!("registry: {e}")))?,
                )
            } else {
                if let Some(name) = ["cacert", "cert", "key"]
                    .into_iter()
                    .find(|n| option(n).is_some())
                {
                    return Err(RegistryError::config(format!(
                        "registry: {name}= is for ZooKeeper over TLS: write zks:// (leaf+zks://) to use it"
                    )));
                }
                None
            };
            let secs = match option("session_timeout") {
                Some(t) => t.parse::<u64>().map_err(|_| {
                    RegistryError::config(format!(
                        "registry: session_timeout must be whole seconds, found {t:?}"
                    ))
                })?,
                None => zookeeper::SESSION_TIMEOUT.as_secs(),
            };
            if !(2..=3600).contains(&secs) {
                return Err(RegistryError::config(format!(
                    "registry: session_timeout must be 2 to 3600 seconds, found {secs}"
                )));
            }
            let default_root = if leaf {
                zookeeper::leaf::LEAF_ROOT
            } else {
                FLOE_ROOT
            };
            let (cluster, root) = servers_and_root("ZooKeeper", &base, default_root)?;
            check_servers("ZooKeeper", cluster, root)?;
            if leaf {
                zookeeper::leaf::check_root(root)?;
            }
            Ok(Target::Zk {
                cluster: cluster.to_string(),
                root: root.to_string(),
                session_timeout: std::time::Duration::from_secs(secs),
                reach: reach(option("reach"))?,
                leaf,
                credentials,
                tls,
            })
        }
        #[cfg(feature = "etcd")]
        "etcd" | "etcds" => {
            let (url, security) = floe_etcd::Security::from_url(url)
                .map_err(|e| RegistryError::config(format!("registry: etcd: {e}")))?;
            let (base, options) = floe_core::endpoint::take_options(&url, &["ttl", "reach"]);
            once(&options)?;
            let reach = reach(
                options
                    .iter()
                    .find(|(n, _)| *n == "reach")
                    .map(|(_, v)| v.as_str()),
            )?;
            let ttl = match options.iter().find(|(n, _)| *n == "ttl") {
                Some((_, t)) => t.parse::<i64>().map_err(|_| {
                    RegistryError::config(format!("registry: ttl must be whole seconds, found {t:?}"))
                })?,
                None => 10,
            };
            if !(2..=3600).contains(&ttl) {
                return Err(RegistryError::config(format!(
                    "registry: ttl must be 2 to 3600 seconds, found {ttl}"
                )));
            }
            let (endpoints, root) = servers_and_root("etcd", &base, FLOE_ROOT)?;
            check_servers("etcd", endpoints, root)?;
            Ok(Target::Etcd {
                endpoints: endpoints.to_string(),
                root: root.to_string(),
                ttl,
                reach,
                security,
            })
        }
        #[cfg(not(feature = "zookeeper"))]
        "zk" | "zookeeper" | "leaf+zk" | "zks" | "leaf+zks" => Err(RegistryError::config(
            "registry: ZooKeeper is not in this build: build floe with the cargo feature zookeeper (on by default)",
        )),
        #[cfg(not(feature = "etcd"))]
        "etcd" | "etcds" => Err(RegistryError::config(
            "registry: etcd is not in this build: build floe with the cargo feature etcd (on by default)",
        )),
        other => Err(RegistryError::config(format!(
            "registry: unknown scheme {other:?} in {:?}: expected file:, static:, zk:, leaf+zk:, etcd: or etcds:",
            floe_core::endpoint::redacted(url)
        ))),
    }
}

/// Checks a registry URL as [`open`] would, without opening anything: for a caller that tells
/// a bad URL from an unreachable registry before it starts (the CLI's exit codes).
///
/// # Errors
/// [`ErrorKind::Config`](crate::ErrorKind::Config), as [`open`].
pub fn check_url(url: &str) -> Result<(), RegistryError> {
    parse(url).map(drop)
}

/// Whether the registry a URL names leases its IDs (ZooKeeper, etcd: shared by a fleet, with
/// terms), as opposed to a file or a static ID of one machine; `false` for a URL that does not
/// parse.
pub fn leases(url: &str) -> bool {
    parse(url).is_ok_and(|t| t.lease_terms().is_some())
}

/// Opens a registry from its URL: `file:///state/dir` (or `file:relative/dir`), `static:ID`,
/// `static:ordinal` or `static:ordinal+OFFSET` (the worker ID is the StatefulSet ordinal of the
/// identity's host, the trailing `-N` of a pod name, plus OFFSET; see [`static_id`]),
/// `zk://[user:password@]host:port[,host:port...][/root][?session_timeout=SECONDS][&password_file=PATH]`
/// (root `/floe` and a 6 s session by default; the server may grant another within its own
/// bounds; with a user, every session authenticates with ZooKeeper's `digest` scheme and every
/// node floe creates is creator-only, the password given in the URL, percent-encoded, or as the
/// content of `password_file` with `zk://user@host:port...`; without, the nodes are open to
/// anyone and a warning says so),
/// `leaf+zk://[user:password@]host:port[,host:port...][/root][?session_timeout=SECONDS][&password_file=PATH]` (ZooKeeper with the
/// worker IDs in Meituan Leaf's nodes, `/snowflake/{service}/forever/{ip}:{port}-{sequence}`:
/// root `/snowflake` by default, `/chroot/snowflake` under a chroot; the service is Leaf's
/// `leaf.name`; credentials as for `zk://`; see [`zookeeper::leaf`](crate::zookeeper::leaf)),
/// `zks://` and `leaf+zks://` with `cacert=PATH[&cert=PATH&key=PATH]` (the same over TLS to
/// every server: the CA of the servers' certificates, floe's client certificate and key, PEM;
/// builds with the cargo feature `zookeeper-tls`), or
/// `etcd://host:port[,host:port...][/root][?ttl=SECONDS]` (10 s by default), or over TLS
/// with an etcd user,
/// `etcds://[user[:password]@]host:port[,host:port...][/root][?ttl=SECONDS&cacert=PATH&cert=PATH&key=PATH&password_file=PATH]`
/// (see [`floe_etcd::Security`]).
///
/// # Errors
/// [`ErrorKind::Config`](crate::ErrorKind::Config) naming the field `registry`: an unknown scheme, a bad path or ID;
/// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable) when a server registry cannot be reached.
pub async fn open(url: &str) -> Result<Box<dyn Registry>, RegistryError> {
    open_target(parse_off_executor(url).await?).await
}

impl Target {
    /// The registry's name, as [`Registry::name`] gives it.
    fn name(&self) -> &'static str {
        match self {
            Target::File(_) => "file",
            Target::Static(_) => "static",
            #[cfg(feature = "zookeeper")]
            Target::Zk { .. } => "zookeeper",
            #[cfg(feature = "etcd")]
            Target::Etcd { .. } => "etcd",
        }
    }

    /// The terms it leases on (the timeout asked: the server may grant another), if any.
    fn lease_terms(&self) -> Option<crate::terms::LeaseTerms> {
        match self {
            Target::File(_) | Target::Static(_) => None,
            #[cfg(feature = "zookeeper")]
            Target::Zk {
                session_timeout,
                reach,
                ..
            } => Some(crate::terms::LeaseTerms::new(*session_timeout, *reach)),
            #[cfg(feature = "etcd")]
            Target::Etcd { ttl, reach, .. } => Some(crate::terms::LeaseTerms::new(
                std::time::Duration::from_secs(ttl.unsigned_abs()),
                *reach,
            )),
        }
    }
}

async fn open_target(target: Target) -> Result<Box<dyn Registry>, RegistryError> {
    match target {
        Target::File(path) => {
            let registry =
                off_executor("file registry: open", move || file::FileRegistry::new(path)).await?;
            Ok(Box::new(registry))
        }
        Target::Static(id) => Ok(Box::new(static_id::StaticRegistry::of(id))),
        #[cfg(feature = "zookeeper")]
        Target::Zk {
            cluster,
            root,
            session_timeout,
            reach,
            leaf,
            credentials,
            tls,
        } => Ok(Box::new(
            if leaf {
                zookeeper::ZkRegistry::connect_leaf_with_credentials(
                    &cluster,
                    &root,
                    session_timeout,
                    zookeeper::LeafGuard::DEFAULT,
                    zookeeper::ZkAccess { credentials, tls },
                )
                .await?
            } else {
                zookeeper::ZkRegistry::connect_with_credentials(
                    &cluster,
                    &root,
                    session_timeout,
                    zookeeper::ZkAccess { credentials, tls },
                )
                .await?
            }
            .with_reach(reach),
        )),
        #[cfg(feature = "etcd")]
        Target::Etcd {
            endpoints,
            root,
            ttl,
            reach,
            security,
        } => Ok(Box::new(
            etcd::EtcdRegistry::connect_secure(&endpoints, &root, ttl, security)
                .await?
                .with_reach(reach),
        )),
    }
}

/// As [`open`], but a registry that cannot be reached opens as [`Unreachable`] instead of
/// failing, for start-ups that may use the local cache or continue a lease: it is opened again
/// when it answers.
///
/// # Errors
/// Configuration errors, as [`open`].
pub async fn open_or_unreachable(url: &str) -> Result<Box<dyn Registry>, RegistryError> {
    let target = parse_off_executor(url).await?;
    // Its name and terms, so that a start from the cache knows it would have had a lease.
    let (name, terms) = (target.name(), target.lease_terms());
    let unreachable = |error| -> Box<dyn Registry> {
        Box::new(Unreachable::new(
            name,
            location_of(url),
            error,
            terms,
            Some(url.to_string()),
        ))
    };
    // A registry down may take its client's whole connection timeout to say so (ZooKeeper's,
    // 3 s): a start that can go on without it (a lease continued from the state directory)
    // does not wait that long; the registry is opened in the background meanwhile.
    match tokio::time::timeout(OPEN_WAIT, open_target(target)).await {
        Ok(Err(error)) if error.kind == ErrorKind::Unavailable => Ok(unreachable(error)),
        Ok(other) => other,
        Err(_) => Ok(unreachable(RegistryError::new(
            ErrorKind::Unavailable,
            format!(
                "{name}: cannot reach {} within {OPEN_WAIT:?}",
                location_of(url)
            ),
        ))),
    }
}

/// How long [`open_or_unreachable`] waits for the registry to open.
const OPEN_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// A registry URL as [`Registry::location`](crate::Registry::location) gives it: without floe's options (`?ttl=`,
/// `?session_timeout=`, etcd's `cacert=`, `cert=`, `key=`, `password_file=`) and without a
/// `user:password@`, and with the server registries' default root (`/floe`; `/snowflake` for
/// `leaf+zk://`) when none is given.
pub fn location_of(url: &str) -> String {
    let url = match floe_core::endpoint::take_credentials(url) {
        Ok((url, _)) => url,
        Err(_) => floe_core::endpoint::redacted(url),
    };
    let (base, _) = floe_core::endpoint::take_options(
        &url,
        &[
            "ttl",
            "session_timeout",
            "reach",
            "cacert",
            "cert",
            "key",
            "password_file",
            "password_env",
        ],
    );
    match base.split_once("://") {
        Some((
            scheme @ ("zk" | "zookeeper" | "leaf+zk" | "zks" | "leaf+zks" | "etcd" | "etcds"),
            rest,
        )) => {
            let scheme = if scheme == "zookeeper" { "zk" } else { scheme };
            let default_root = if scheme.starts_with("leaf+") {
                "/snowflake"
            } else {
                FLOE_ROOT
            };
            if rest.contains('/') {
                format!("{scheme}://{rest}")
            } else {
                format!("{scheme}://{rest}{default_root}")
            }
        }
        _ => match base.strip_prefix("file:") {
            Some(path) => format!("file://{}", path.strip_prefix("//").unwrap_or(path)),
            None => base.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every spelling of a leasing registry leases; a file or a static ID does not.
    #[test]
    fn leasing_registries_are_known_by_their_parsed_url() {
        assert_eq!(
            leases("zk://127.0.0.1:2181/floe"),
            cfg!(feature = "zookeeper")
        );
        assert_eq!(
            leases("zookeeper://127.0.0.1:2181"),
            cfg!(feature = "zookeeper")
        );
        assert_eq!(leases("etcd://127.0.0.1:2379"), cfg!(feature = "etcd"));
        assert_eq!(
            leases("etcds://floe:pw@127.0.0.1:2379?cacert=/ca.pem"),
            cfg!(feature = "etcd")
        );
        assert!(!leases("file:///tmp/x"));
        assert!(!leases("static:3"));
        assert!(!leases("nosuch://x"));
    }

    /// `leaf+zk://` is ZooKeeper in Leaf's layout, rooted at Leaf's `/snowflake`; a leaf.name
    /// written into the URL is refused, naming the service setting.
    #[cfg(feature = "zookeeper")]
    #[test]
    fn leaf_urls_name_leafs_directory_and_leave_the_name_to_the_service() {
        let parsed = parse("leaf+zk://127.0.0.1:2181,127.0.0.2:2181?session_timeout=8").unwrap();
        assert_eq!(
            parsed,
            Target::Zk {
                cluster: "127.0.0.1:2181,127.0.0.2:2181".into(),
                root: "/snowflake".into(),
                session_timeout: std::time::Duration::from_secs(8),
                reach: crate::terms::DEFAULT_REACH,
                leaf: true,
                credentials: None,
                tls: None,
            }
        );
        assert!(leases("leaf+zk://127.0.0.1:2181"));
        check_url("leaf+zk://127.0.0.1:2181/app/snowflake").unwrap();
        let e = check_url("leaf+zk://127.0.0.1:2181/snowflake/orders").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config);
        assert!(
            e.message
                .contains("give leaf.name \"orders\" as the service"),
            "{e}"
        );
        let e = check_url("leaf+zk://127.0.0.1:2181/floe").unwrap_err();
        assert!(e.message.contains("Leaf's /snowflake directory"), "{e}");
        assert_eq!(
            location_of("leaf+zk://127.0.0.1:2181?session_timeout=8"),
            "leaf+zk://127.0.0.1:2181/snowflake"
        );
        assert_eq!(
            location_of("leaf+zk://127.0.0.1:2181/app/snowflake"),
            "leaf+zk://127.0.0.1:2181/app/snowflake"
        );
    }

    /// A ZooKeeper URL's `user:password@` (or `user@` and `password_file=`) becomes the
    /// sessions' digest credentials; a bad one is refused naming the field, and neither the
    /// error nor the location shows the password.
    #[cfg(feature = "zookeeper")]
    #[test]
    fn zookeeper_credentials_come_from_the_url_or_a_password_file() {
        let Target::Zk {
            credentials,
            cluster,
            root,
            ..
        } = parse("zk://floe:s%40cret@127.0.0.1:2181/fleet?session_timeout=8").unwrap()
        else {
            panic!("not zk")
        };
        let c = credentials.unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("floe", "s@cret"));
        assert_eq!(
            (cluster.as_str(), root.as_str()),
            ("127.0.0.1:2181", "/fleet")
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "from-file\n").unwrap();
        let url = format!(
            "leaf+zk://floe@127.0.0.1:2181?password_file={}",
            file.display()
        );
        let Target::Zk { credentials, .. } = parse(&url).unwrap() else {
            panic!("not zk")
        };
        assert_eq!(credentials.unwrap().password, "from-file");
        assert_eq!(location_of(&url), "leaf+zk://127.0.0.1:2181/snowflake");
        assert_eq!(
            location_of("zk://floe:s3cret@127.0.0.1:2181/x"),
            "zk://127.0.0.1:2181/x"
        );
        for bad in [
            "zk://floe@127.0.0.1:2181/x",
            "zk://:s3cret@127.0.0.1:2181/x",
            "zk://floe:s3cret@127.0.0.1:2181/x?password_file=/nonexistent",
            "zk://127.0.0.1:2181/x?password_file=/nonexistent",
        ] {
            let e = check_url(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Config, "{bad}");
            assert!(e.message.starts_with("registry: "), "{e}");
            assert!(!e.message.contains("s3cret"), "{e}");
        }
        let e = check_url("zk://floe@127.0.0.1:2181/x?password_file=/nonexistent").unwrap_err();
        assert!(e.message.contains("cannot read it"), "{e}");
    }

    /// `password_env=NAME` gives any registry URL its password from the environment (a
    /// variable only this test sets), and a missing variable is refused naming it.
    #[cfg(all(feature = "zookeeper", feature = "etcd"))]
    #[test]
    fn a_registry_password_comes_from_a_variable() {
        std::env::set_var("FLOE_TEST_OPEN_RS_PW", "from-env");
        let url = "zk://floe@127.0.0.1:2181/x?password_env=FLOE_TEST_OPEN_RS_PW";
        let Target::Zk { credentials, .. } = parse(url).unwrap() else {
            panic!("not zk")
        };
        assert_eq!(credentials.unwrap().password, "from-env");
        assert_eq!(location_of(url), "zk://127.0.0.1:2181/x");
        let Target::Etcd { security, .. } =
            parse("etcds://floe@127.0.0.1:2379/x?password_env=FLOE_TEST_OPEN_RS_PW").unwrap()
        else {
            panic!("not etcd")
        };
        assert_eq!(security.user(), Some("floe"));
        let e = check_url("zk://floe@127.0.0.1:2181/x?password_env=FLOE_TEST_OPEN_RS_NONE")
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config);
        assert!(
            e.message.contains("FLOE_TEST_OPEN_RS_NONE is not set"),
            "{e}"
        );
    }

    /// `zks://` without the feature `zookeeper-tls` is refused naming the feature; TLS options
    /// on a plain `zk://` URL are refused naming the scheme to write.
    #[cfg(feature = "zookeeper")]
    #[test]
    fn zookeeper_tls_urls_name_what_they_need() {
        let e = check_url("zks://127.0.0.1:2181/x?cacert=/nonexistent").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config);
        if cfg!(feature = "zookeeper-tls") {
            assert!(e.message.contains("cannot read it"), "{e}");
        } else {
            assert!(e.message.contains("cargo feature zookeeper-tls"), "{e}");
        }
        let e = check_url("zk://127.0.0.1:2181/x?cert=/a.pem").unwrap_err();
        assert!(e.message.contains("write zks://"), "{e}");
        assert_eq!(
            location_of("leaf+zks://floe:pw@127.0.0.1:2181?cacert=/ca.pem"),
            "leaf+zks://127.0.0.1:2181/snowflake"
        );
    }

    /// A server registry of this build parses; one whose feature is off is refused as a
    /// configuration error naming the feature (not as an unknown scheme).
    #[test]
    fn a_registry_left_out_of_the_build_names_its_feature() {
        for (url, built) in [
            ("zk://127.0.0.1:2181/floe", cfg!(feature = "zookeeper")),
            ("zookeeper://127.0.0.1:2181", cfg!(feature = "zookeeper")),
            ("leaf+zk://127.0.0.1:2181", cfg!(feature = "zookeeper")),
            ("etcd://127.0.0.1:2379/floe", cfg!(feature = "etcd")),
            ("etcds://127.0.0.1:2379/floe", cfg!(feature = "etcd")),
        ] {
            match check_url(url) {
                Ok(()) => assert!(built, "{url}"),
                Err(e) => {
                    assert!(!built, "{url}: {}", e.message);
                    assert_eq!(e.kind, ErrorKind::Config);
                    assert!(e.message.contains("cargo feature"), "{}", e.message);
                }
            }
        }
    }

    /// etcd over TLS with a user: the options are read in one place (floe-etcd's), refused
    /// naming the option; the location holds neither the password nor the options.
    #[cfg(feature = "etcd")]
    #[test]
    fn etcd_security_options_are_checked_and_left_out_of_the_location() {
        let url =
            "etcds://floe:s3cret@a:1,b:2/fleet?ttl=5&reach=60&cacert=/c/ca.pem&cert=/c/c.pem&key=/c/c.key";
        match parse(url).unwrap() {
            Target::Etcd {
                endpoints,
                root,
                ttl,
                reach,
                security,
            } => {
                assert_eq!(
                    (endpoints.as_str(), root.as_str(), ttl, reach.as_secs()),
                    ("a:1,b:2", "/fleet", 5, 60)
                );
                assert!(security.is_tls());
                assert_eq!(security.user(), Some("floe"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(location_of(url), "etcds://a:1,b:2/fleet");
        assert_eq!(
            location_of("etcd://floe@a:1?password_file=/p"),
            "etcd://a:1/floe"
        );
        for (bad, words) in [
            (
                "etcd://a:1?cacert=/ca.pem",
                "registry: etcd: cacert= is a TLS option",
            ),
            (
                "etcds://a:1?cert=/c.pem",
                "registry: etcd: cert= needs key=",
            ),
            ("etcds://a:1?key=/c.key", "registry: etcd: key= needs cert="),
            ("etcds://u:s3cret@a:1?password_file=/p", "given twice"),
            ("etcds://a:1?cacert=/x&ttl=5&cacrt=/y", "unknown option"),
        ] {
            let e = check_url(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Config, "{bad}");
            assert!(e.message.contains(words), "{bad}: {}", e.message);
            assert!(!e.message.contains("s3cret"), "{bad}: {}", e.message);
        }
    }
}
