//! Per-key int64 sequences (Layotto's Sequencer API): one [`Store`] trait, eight
//! stores, and WEAK or STRONG serving written once above them.
//!
//! - **STRONG**: each ID comes from an atomic increment in the store made after its request
//!   arrived, so a key's IDs strictly increase across every process sharing the store, in real
//!   time. Requests that wait at the same time share one increment ([`strong`]).
//! - **WEAK**: IDs come from memory, out of segments reserved in the store and double-buffered
//!   per key ([`weak`]); unique, trend-increasing, and served on while the store is down for as
//!   long as the buffer lasts.
//!
//! A key's buffer and queue are held in memory within [`KeyLimits`] (60 s idle, 100,000 keys by
//! default): a key dropped from memory parks its unused WEAK IDs (two ranges at most), which its
//! next buffer serves first, so a quiet key goes on 1, 2, 3; never reissued elsewhere.
//!
//! | URL | store | durable | shared by processes |
//! |---|---|---|---|
//! | `embedded[:PATH]` | [`stores::embedded`]: one redb file (default) | yes (fsync per reservation) | no |
//! | `memory` | [`stores::memory`] | **no** | no |
//! | `redis://host:port[/db]`, `rediss://` (TLS) | [`stores::redis`]: `INCRBY` | with `appendfsync always` | yes |
//! | `postgres://user@host:port/db` | [`stores::postgres`]: `UPDATE ... RETURNING` | yes | yes |
//! | `mysql://user@host:port/db` | [`stores::mysql`] (MariaDB too): `LAST_INSERT_ID(expr)` | yes | yes |
//! | `leaf-mysql://user@host:port/db[?table=leaf_alloc]`, `leaf-mariadb://` | [`stores::leaf_alloc`]: Leaf's `leaf_alloc` table, its own SQL, beside Leaf's servers; unknown tags refused | yes | yes, with Leaf |
//! | `etcd://host:port[/root]` | [`stores::etcd`] (feature `etcd`): CAS on the revision | yes | yes |
//! | `zk://[user:password@]host:port[/root]` (`zks://...?cacert=` over TLS) | [`stores::zookeeper`]: versioned `setData` | yes | yes |
//! | `redis://host:port?layotto=APP` | [`stores::redis`] on Layotto's keys `sequencer\|\|\|APP\|\|{key}`, in place | as Redis | yes, with Layotto |
//! | `etcd://host:port?layotto=APP[&layotto_prefix=/layotto/]` | [`stores::etcd`] on Layotto's keys in place: ID = the key's version, one put per ID, no segments | yes | yes, with Layotto |
//! | `etcd://host:port[/root]?from_layotto=APP` | [`stores::etcd`], floe's keys lifted above Layotto's versions at start-up | yes | yes; Layotto stopped |
//! | `zk://host:port[/root]?from_layotto=APP` | [`stores::zookeeper`], floe's keys lifted above the versions of Layotto's live ephemeral nodes at start-up | yes | yes; Layotto's clients stopped |
//! | `mysql://user@host:port/db?from_layotto=APP[&layotto_table=layotto_sequencer]` | [`stores::mysql`], floe's keys lifted above Layotto's `sequencer_value`s at start-up | yes | yes; Layotto stopped |
//!
//! A Snowflake store ([`stores::snowflake`]) serves WEAK IDs from a leased worker's generator.
//! Layotto's key layout, and what each option does with it: [`stores::layotto`].
//!
//! **Batches**: [`StoreHandle::next_ids`] serves 1 to [`MAX_BATCH`] IDs of a key in one call,
//! as ascending runs ([`Batch`]); WEAK slices the key's buffer, STRONG takes one consecutive run
//! from a shared increment; whole or an error ([`batch`]).
//!
//! **Restart without waste**: a graceful stop ([`Sequencer::close_keeping`]) keeps the unused
//! tails of WEAK segments in the state directory, and the next start serves them first
//! ([`TailDir`], [`StoreHandle::with_tails`]); after a crash nothing is reused ([`tails`]).
//!
//! Keys are [`floe_core::sequence::Key`]s: 1 to 255 bytes of UTF-8. A key never used starts at
//! 1, or just above its `bigger_than`; a sequence that would pass `i64::MAX` fails with
//! [`ErrorKind::Exhausted`] and never wraps.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod admin;
pub mod batch;
pub mod changes;
mod error;
pub mod guard;
mod keys;
pub mod measured;
mod sequencer;
mod statefile;
mod store;
pub mod stores;
pub mod strong;
pub mod tails;
pub mod weak;

pub use admin::{KeyState, MAX_FLOOR, MAX_PAGE};
pub use batch::{Batch, MAX_BATCH};
pub use changes::CHANGES_KEY;
pub use error::{ErrorKind, SeqError};
pub use guard::{Guard, Ledger, StartCheck, EPOCH_KEY, REPAIR_KEY};
pub use keys::KeyLimits;
pub use sequencer::{Sequencer, ServeOptions, StoreHandle, WeakTotals};
/// A lock file in a state directory (an exclusive `flock`), as the sequencer's own files take
/// theirs: `floe serve` takes the directory's `serve.lock` with it.
pub use statefile::lock as lock_file;
pub(crate) use store::within;
pub use store::{Capabilities, Durability, Store};
pub use tails::{store_identity, SavedTails, TailDir};

pub use floe_core::sequence::{Key, Mode, Segment, StepPolicy};

use std::path::Path;
use std::sync::Arc;

/// Opens the store a URL names (see the table above). `state_dir` is where `embedded` keeps its
/// file when the URL gives no path.
///
/// # Errors
/// `Config` naming the URL for an unknown scheme, a bad address or a store built without its
/// feature; `Unavailable` when the server cannot be reached now.
pub async fn open(url: &str, state_dir: &Path) -> Result<Arc<dyn Store>, SeqError> {
    // sqlx's MySQL TLS, redis and zookeeper-client ask rustls for the process's default
    // provider: ring, floe's. A build with zookeeper-tls holds aws-lc-rs too, and rustls then
    // cannot choose alone (it panics).
    #[cfg(any(
        feature = "redis",
        feature = "postgres",
        feature = "mysql",
        feature = "zookeeper-tls"
    ))]
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (scheme, rest) = url.split_once(':').unwrap_or((url, ""));
    let url = floe_core::endpoint::with_password_env(url, |name| std::env::var(name).ok())
        .map_err(|e| {
            SeqError::config(format!(
                "store: {}: {e}",
                floe_core::endpoint::redacted(url)
            ))
        })?;
    let url = match scheme {
        "redis" | "rediss" | "postgres" | "postgresql" | "mysql" | "mariadb" | "leaf-mysql"
        | "leaf-mariadb" => password_from_file(&url).await?,
        _ => url,
    };
    check_options(scheme, &url)?;
    let (url, volatile) = take_volatile(&url)?;
    let store = connect(scheme, rest, &url, state_dir).await?;
    check_durable(store.as_ref(), &url, volatile).await?;
    Ok(store)
}

/// `url` without floe's `volatile=ok` option, and whether it was there: the operator's word
/// that the store may lose what it acknowledged ([`check_durable`]).
///
/// # Errors
/// `Config` for another value, or the option given twice.
fn take_volatile(url: &str) -> Result<(String, bool), SeqError> {
    let (bare, own) = floe_core::endpoint::take_options(url, &["volatile"]);
    match own.as_slice() {
        [] => Ok((url.to_string(), false)),
        [(_, v)] if v == "ok" => Ok((bare, true)),
        _ => Err(SeqError::config(format!(
            "store: {}: volatile= takes only ok, once (the store may lose what it acknowledged, and floe's epoch is the guard)",
            floe_core::endpoint::redacted(url)
        ))),
    }
}

/// Refuses a store whose server says it does not keep what it acknowledged (Redis without an
/// fsync per write, PostgreSQL with `fsync` or `synchronous_commit` off, InnoDB flushing its
/// log less than at each commit) unless `volatile` (the URL's `volatile=ok`); warns when the
/// server will not say (managed Redis often denies `CONFIG`): floe's epoch
/// ([`crate::guard`]) is the guard then, and a store that went back is refused at its first
/// answer, but every such loss then stops the store until an operator repairs it.
async fn check_durable(store: &dyn Store, url: &str, volatile: bool) -> Result<(), SeqError> {
    use floe_core::endpoint::redacted;
    match store.durability().await {
        Durability::Durable => Ok(()),
        Durability::Volatile(why) if volatile => {
            tracing::warn!(
                "store {}: {why}; accepted (volatile=ok): a loss is noticed by floe's epoch and stops the store until it is repaired",
                redacted(url)
            );
            Ok(())
        }
        Durability::Volatile(why) => Err(SeqError::config(format!(
            "store: {}: {why}, so a crash or restart can lose increments it acknowledged and floe would have to refuse the store until an operator repairs it. Make it durable, or say it may lose them with ?volatile=ok",
            redacted(url)
        ))),
        Durability::Unknown(why) => {
            tracing::warn!(
                "store {}: cannot tell whether it keeps what it acknowledged ({why}): floe's epoch notices a loss and refuses the store until it is repaired",
                redacted(url)
            );
            Ok(())
        }
    }
}

/// Connects to the store of `scheme` (`rest`: the URL after the scheme's colon).
async fn connect(
    scheme: &str,
    rest: &str,
    url: &str,
    state_dir: &Path,
) -> Result<Arc<dyn Store>, SeqError> {
    match scheme {
        "memory" => Ok(Arc::new(stores::memory::MemoryStore::new())),
        "embedded" => Ok(Arc::new(stores::embedded::EmbeddedStore::open(
            embedded_path(rest, state_dir),
        )?)),
        #[cfg(feature = "redis")]
        "redis" | "rediss" => Ok(Arc::new(stores::redis::RedisStore::connect(url).await?)),
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => Ok(Arc::new(
            stores::postgres::PostgresStore::connect(url).await?,
        )),
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => Ok(Arc::new(stores::mysql::MysqlStore::connect(url).await?)),
        #[cfg(feature = "mysql")]
        "leaf-mysql" | "leaf-mariadb" => Ok(Arc::new(
            stores::leaf_alloc::LeafAllocStore::connect(url).await?,
        )),
        #[cfg(feature = "etcd")]
        "etcd" | "etcds" => Ok(Arc::new(stores::etcd::EtcdStore::connect(url).await?)),
        #[cfg(feature = "zookeeper")]
        "zk" | "zookeeper" => Ok(Arc::new(stores::zookeeper::ZkStore::connect(url).await?)),
        #[cfg(feature = "zookeeper-tls")]
        "zks" => Ok(Arc::new(stores::zookeeper::ZkStore::connect(url).await?)),
        // Not a store of this build: check_scheme says why.
        _ => Err(check_scheme(url).err().unwrap_or_else(|| {
            SeqError::config(format!(
                "store: {:?}: no opener for {scheme}",
                floe_core::endpoint::redacted(url)
            ))
        })),
    }
}

/// `url` with the password its `password_file=PATH` option names (the file's text, its
/// trailing newline left out) written into it, for the stores that take their URL's
/// password as it is (PostgreSQL, MySQL, Redis); `url` as it is without the option. The file
/// is read at each open, so a rotated password is read by the next start.
///
/// # Errors
/// `Config` naming the option: given twice, an unreadable or empty file, a URL that also
/// writes a password.
async fn password_from_file(url: &str) -> Result<String, SeqError> {
    use floe_core::endpoint::{redacted, take_credentials, take_options, with_password};
    let (bare, own) = take_options(url, &["password_file"]);
    let path = match own.as_slice() {
        [] => return Ok(url.to_string()),
        [(_, path)] if !path.is_empty() => path,
        _ => {
            return Err(SeqError::config(format!(
                "store: {}: password_file= is empty or given twice",
                redacted(url)
            )))
        }
    };
    if let Ok((_, Some(c))) = take_credentials(&bare) {
        if !c.password.is_empty() {
            return Err(SeqError::config(format!(
                "store: {}: the URL writes a password and names password_file= too: give one of them",
                redacted(url)
            )));
        }
    }
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|e| SeqError::config(format!("store: password_file: cannot read {path}: {e}")))?;
    let password = floe_core::endpoint::password_in_file(&text)
        .ok_or_else(|| SeqError::config(format!("store: password_file: {path} is empty")))?;
    Ok(with_password(&bare, password))
}

/// The driver options (passed on to sqlx) a SQL URL may carry, beside floe's own.
const SQL_POSTGRES: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "application_name",
    "options",
    "statement-cache-capacity",
    "connect_timeout",
];
const SQL_MYSQL: &[&str] = &[
    "ssl-mode",
    "sslmode",
    "ssl-ca",
    "sslca",
    "ssl-cert",
    "sslcert",
    "ssl-key",
    "sslkey",
    "charset",
    "collation",
    "statement-cache-capacity",
    "timezone",
];

/// Every option a URL of `scheme` takes (floe's own, then its driver's), for the schemes whose
/// drivers would pass an unknown one over in silence; `None` for the stores that check their
/// own (etcd, ZooKeeper) or take none.
fn known_options(scheme: &str) -> Option<Vec<&'static str>> {
    let (own, driver): (&[&str], &[&str]) = match scheme {
        "redis" | "rediss" => (&["prefix", "ca_cert", "layotto"], &["protocol"]),
        "postgres" | "postgresql" => (&["table", "pool"], SQL_POSTGRES),
        "mysql" | "mariadb" => (
            &["table", "pool", "from_layotto", "layotto_table"],
            SQL_MYSQL,
        ),
        "leaf-mysql" | "leaf-mariadb" => (&["table", "pool"], SQL_MYSQL),
        _ => return None,
    };
    let mut all = vec!["password_file", "password_env", "volatile"];
    all.extend_from_slice(own);
    all.extend_from_slice(driver);
    Some(all)
}

/// Refuses an option a store URL does not take (a typo such as `?layoto=` or `?tabel=` would
/// otherwise be passed to the driver, which ignores it: the store then serves other keys
/// than meant), naming it and what is taken.
fn check_options(scheme: &str, url: &str) -> Result<(), SeqError> {
    let Some(known) = known_options(scheme) else {
        return Ok(());
    };
    let Some((_, query)) = url.split_once('?') else {
        return Ok(());
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let name = pair.split_once('=').map_or(pair, |(k, _)| k);
        if !known.contains(&name) {
            let near = known
                .iter()
                .find(|k| close(k, name))
                .map(|k| format!(" (did you mean {k}?)"))
                .unwrap_or_default();
            return Err(SeqError::config(format!(
                "store: {}: unknown option {:?}{near}: a {scheme} URL takes {}",
                floe_core::endpoint::redacted(url),
                name.chars().take(64).collect::<String>(),
                known.join(", ")
            )));
        }
    }
    Ok(())
}

/// Whether two option names are at most two edits apart (a typo: a letter missed, added,
/// changed, or two swapped).
fn close(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.len().abs_diff(b.len()) > 1 {
        return false;
    }
    // Levenshtein distance, at most 1; or a transposition.
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    let swapped = a.len() == b.len() && a.iter().zip(&b).filter(|(x, y)| x != y).count() == 2 && {
        let mut x = a.clone();
        let mut y = b.clone();
        x.sort_unstable();
        y.sort_unstable();
        x == y
    };
    prev[b.len()] <= 2 || swapped
}

/// Checks that a store URL names a store of this build (its scheme), without opening
/// anything: for a caller that tells a bad URL from an unreachable store before it starts
/// (the CLI's exit codes). The rest of the URL is checked when it is opened.
///
/// # Errors
/// `Config` naming the URL, as [`open`]: an unknown scheme, or a store built without its feature.
pub fn check_scheme(url: &str) -> Result<(), SeqError> {
    let (scheme, _) = url.split_once(':').unwrap_or((url, ""));
    match scheme {
        "memory" | "embedded" => Ok(()),
        #[cfg(feature = "redis")]
        "redis" | "rediss" => Ok(()),
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => Ok(()),
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" | "leaf-mysql" | "leaf-mariadb" => Ok(()),
        #[cfg(feature = "etcd")]
        "etcd" | "etcds" => Ok(()),
        #[cfg(feature = "zookeeper")]
        "zk" | "zookeeper" => Ok(()),
        #[cfg(feature = "zookeeper-tls")]
        "zks" => Ok(()),
        #[allow(unreachable_patterns)] // the schemes whose feature is on matched above
        "redis" | "rediss" | "postgres" | "postgresql" | "mysql" | "mariadb" | "leaf-mysql"
        | "leaf-mariadb" | "etcd" | "etcds" | "zk" | "zookeeper" | "zks" => {
            let feature = match scheme {
                "zks" => "zookeeper-tls",
                "rediss" => "redis",
                "postgresql" => "postgres",
                "mariadb" | "leaf-mysql" | "leaf-mariadb" => "mysql",
                "etcds" => "etcd",
                "zk" => "zookeeper",
                other => other,
            };
            Err(SeqError::config(format!(
                "store: {:?} needs floe built with the cargo feature {feature}",
                floe_core::endpoint::redacted(url)
            )))
        }
        _ => Err(SeqError::config(format!(
            "store: expected embedded[:PATH], memory, redis://, rediss://, postgres://, mysql://, leaf-mysql://, etcd://, etcds:// or zk://, found {:?}",
            floe_core::endpoint::redacted(url)
        ))),
    }
}

/// The file of an `embedded[:PATH]` URL (`rest` is what follows `embedded:`).
pub(crate) fn embedded_path(rest: &str, state_dir: &Path) -> std::path::PathBuf {
    let path = rest.strip_prefix("//").unwrap_or(rest);
    if path.is_empty() {
        state_dir.join("sequences.redb")
    } else {
        path.into()
    }
}

/// The servers and root of a server store URL (root `/floe/sequences` by default).
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub(crate) fn servers_and_root<'a>(
    kind: &str,
    url: &'a str,
) -> Result<(&'a str, &'a str), SeqError> {
    floe_core::endpoint::servers_and_root(kind, url, "/floe/sequences")
        .map_err(|e| SeqError::config(format!("store: {e}")))
}

/// A SQL table name: letters, digits and `_`, not starting with a digit, at most 63 bytes.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn check_table(table: &str) -> Result<(), SeqError> {
    let ok = !table.is_empty()
        && table.len() <= 63
        && !table.starts_with(|c: char| c.is_ascii_digit())
        && table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(SeqError::config(format!(
            "store: table must be letters, digits and _ (at most 63), found {table:?}"
        )))
    }
}

/// The Rust examples of docs/run.md (floe-core's and this crate's), compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/run.md")]
pub struct RunMdDoctests;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every scheme `open` serves passes the start-up check (`rediss://` once did not), and
    /// one whose feature is off in this build is refused, naming the feature.
    /// A typo in an option is refused, naming it and a near name, on every scheme whose driver
    /// would ignore it; the options floe and the drivers take pass.
    #[test]
    fn an_unknown_url_option_is_refused() {
        for (url, near) in [
            ("redis://127.0.0.1:1/?layoto=myapp", Some("layotto")),
            ("redis://127.0.0.1:1/?prefx=a", Some("prefix")),
            (
                "mysql://u@127.0.0.1:1/db?from_layoto=myapp",
                Some("from_layotto"),
            ),
            ("postgres://u@127.0.0.1:1/db?tabel=t", Some("table")),
            ("leaf-mysql://u@127.0.0.1:1/db?tabel=t", Some("table")),
            ("mariadb://u@127.0.0.1:1/db?zzz=1", None),
        ] {
            let scheme = url.split_once(':').unwrap().0;
            let e = check_options(scheme, url).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Config, "{url}");
            assert!(e.message.contains("unknown option"), "{e}");
            if let Some(near) = near {
                assert!(e.message.contains(&format!("did you mean {near}?")), "{e}");
            }
        }
        for url in [
            "redis://127.0.0.1:1/?prefix=a&layotto=b&protocol=resp3",
            "postgres://u@127.0.0.1:1/db?table=t&pool=4&sslmode=verify-full&sslrootcert=/ca",
            "mysql://u@127.0.0.1:1/db?ssl-mode=REQUIRED&from_layotto=a&layotto_table=t",
            "leaf-mysql://u@127.0.0.1:1/db?table=leaf_alloc&ssl-ca=/ca",
            "etcd://127.0.0.1:1?whatever=1",
        ] {
            let scheme = url.split_once(':').unwrap().0;
            check_options(scheme, url).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
    }

    #[test]
    fn every_scheme_open_serves_passes_the_start_up_check() {
        for (url, built) in [
            ("memory", true),
            ("embedded", true),
            ("embedded:/tmp/x.redb", true),
            ("redis://127.0.0.1:1/", cfg!(feature = "redis")),
            ("rediss://127.0.0.1:1/", cfg!(feature = "redis")),
            ("postgres://u@127.0.0.1:1/db", cfg!(feature = "postgres")),
            ("postgresql://u@127.0.0.1:1/db", cfg!(feature = "postgres")),
            ("mysql://u@127.0.0.1:1/db", cfg!(feature = "mysql")),
            ("mariadb://u@127.0.0.1:1/db", cfg!(feature = "mysql")),
            ("leaf-mysql://u@127.0.0.1:1/db", cfg!(feature = "mysql")),
            ("leaf-mariadb://u@127.0.0.1:1/db", cfg!(feature = "mysql")),
            ("etcd://127.0.0.1:1", cfg!(feature = "etcd")),
            ("etcds://127.0.0.1:1", cfg!(feature = "etcd")),
            ("zk://127.0.0.1:1", cfg!(feature = "zookeeper")),
        ] {
            match check_scheme(url) {
                Ok(()) => assert!(built, "{url}"),
                Err(e) => {
                    assert!(!built, "{url}: {e}");
                    assert_eq!(e.kind, ErrorKind::Config);
                    assert!(e.message.contains("cargo feature"), "{url}: {e}");
                }
            }
        }
        let e = check_scheme("nosuch://x").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config);
    }
}
