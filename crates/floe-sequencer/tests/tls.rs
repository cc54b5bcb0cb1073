//! The PostgreSQL, MariaDB and Redis stores over TLS, against real servers that accept TLS
//! connections only (scripts/test.sh: `start_postgres_tls`, `start_mariadb_tls`,
//! `start_redis_tls`, each with a throw-away CA in `FLOE_TEST_*_TLS_CA`): each issues IDs
//! with the certificate checked against that CA; a connection without TLS is refused by the
//! server (so the IDs did travel over TLS); an untrusted certificate is refused by floe; and a
//! URL that asks for TLS of a plain-text server fails with a clear error, in bounded time.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use floe_sequencer::{ErrorKind, SeqError, Store};

/// Opens `url`, within 15 s (a TLS mismatch must fail, not hang).
async fn open(url: &str) -> Result<Arc<dyn Store>, SeqError> {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let opened = tokio::time::timeout(
        Duration::from_secs(15),
        floe_sequencer::open(url, dir.path()),
    )
    .await
    .unwrap_or_else(|_| panic!("opening {url} hung"));
    assert!(started.elapsed() < Duration::from_secs(15));
    opened
}

/// The store issues increasing IDs of a fresh key, from two clients.
async fn issues(url: &str) {
    let store = open(url)
        .await
        .unwrap_or_else(|e| panic!("open {url}: {e}"));
    let second = open(url).await.unwrap();
    let key = common::key("tls");
    let a = store.reserve(&key, 10).await.unwrap();
    let b = second.reserve(&key, 10).await.unwrap();
    let c = store.reserve(&key, 1).await.unwrap();
    assert_eq!((a, b, c), (10, 20, 21), "{url}");
    store.close().await;
    second.close().await;
}

fn err(r: Result<Arc<dyn Store>, SeqError>) -> SeqError {
    match r {
        Ok(_) => panic!("opened"),
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_tls() {
    let base = floe_testkit::env("FLOE_TEST_POSTGRES_TLS");
    let ca = floe_testkit::env("FLOE_TEST_POSTGRES_TLS_CA");
    issues(&format!("{base}?sslmode=verify-full&sslrootcert={ca}")).await;
    issues(&format!("{base}?sslmode=verify-ca&sslrootcert={ca}")).await;
    issues(&format!("{base}?sslmode=require")).await;
    // The server takes TLS connections only.
    let e = err(open(&format!("{base}?sslmode=disable")).await);
    assert!(
        e.message.contains("pg_hba.conf") || e.message.contains("no encryption"),
        "{e}"
    );
    // The system's roots do not hold the test CA.
    let e = err(open(&format!("{base}?sslmode=verify-full")).await);
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(e.message.contains("cannot connect to"), "{e}");
    // A URL that asks for TLS of a plain-text server.
    let plain = floe_testkit::env("FLOE_TEST_POSTGRES");
    let e = err(open(&format!("{plain}?sslmode=require")).await);
    assert!(e.message.contains("cannot connect to"), "{e}");
    assert!(e.message.to_lowercase().contains("tls"), "{e}");
    assert!(!e.message.contains('\n'), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_over_tls() {
    let base = floe_testkit::env("FLOE_TEST_MARIADB_TLS");
    let ca = floe_testkit::env("FLOE_TEST_MARIADB_TLS_CA");
    issues(&format!("{base}?ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}")).await;
    issues(&format!("{base}?ssl-mode=VERIFY_CA&ssl-ca={ca}")).await;
    issues(&format!("{base}?ssl-mode=REQUIRED")).await;
    // The server refuses connections without TLS (require_secure_transport: MariaDB 10.11
    // answers "Access denied" to the same user it let in over TLS above).
    let e = err(open(&format!("{base}?ssl-mode=DISABLED")).await);
    assert!(
        e.message.contains("Access denied") || e.message.contains("secure"),
        "{e}"
    );
    let e = err(open(&format!("{base}?ssl-mode=VERIFY_IDENTITY")).await);
    assert!(e.message.contains("cannot connect to"), "{e}");
    let plain = floe_testkit::env("FLOE_TEST_MARIADB");
    let e = err(open(&format!("{plain}?ssl-mode=REQUIRED")).await);
    assert!(e.message.contains("cannot connect to"), "{e}");
    assert!(
        e.message.to_lowercase().contains("tls") || e.message.to_lowercase().contains("ssl"),
        "{e}"
    );
    assert!(!e.message.contains('\n'), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls() {
    let base = floe_testkit::env("FLOE_TEST_REDIS_TLS");
    let ca = floe_testkit::env("FLOE_TEST_REDIS_TLS_CA");
    issues(&format!("{base}/0?ca_cert={ca}")).await;
    issues(&format!("{base}/0?ca_cert={ca}&prefix=floe:tls:")).await;
    // Without the CA the certificate is not trusted.
    let e = err(open(&format!("{base}/0")).await);
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    // Plain text to the TLS port.
    let plain_to_tls = base.replacen("rediss://", "redis://", 1);
    let e = err(open(&format!("{plain_to_tls}/0")).await);
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    // ca_cert without TLS, and a CA file that is not one.
    let e = err(open(&format!("{plain_to_tls}/0?ca_cert={ca}")).await);
    assert!(e.message.contains("ca_cert is for TLS"), "{e}");
    let e = err(open(&format!("{base}/0?ca_cert=/nonexistent/ca.pem")).await);
    assert!(
        e.message
            .contains("ca_cert: cannot read /nonexistent/ca.pem"),
        "{e}"
    );
    // TLS to a plain-text server: an error, not a hang.
    let plain = floe_testkit::env("FLOE_TEST_REDIS").replacen("redis://", "rediss://", 1);
    let e = err(open(&format!("{plain}/0?ca_cert={ca}")).await);
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(e.message.contains("cannot connect to"), "{e}");
    assert!(e.message.contains("TLS"), "{e}");
}

/// A store's password from a file (`password_file=`) or an environment variable
/// (`password_env=`), so that it is in neither argv nor the configuration file: against a
/// MariaDB user that has one (made here on the test MariaDB). A wrong one is refused by the
/// server, and no message shows a password.
#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_password_comes_from_a_file_or_a_variable() {
    use sqlx::AssertSqlSafe;
    let root = floe_testkit::env("FLOE_TEST_MARIADB");
    let (_, address) = root.split_once("root@").unwrap();
    let user = floe_testkit::unique("pw").replace('-', "_");
    let user = &user[user.len().saturating_sub(24)..];
    let password = "s3cret:p@ss/w rd%";
    let pool = sqlx::MySqlPool::connect(&root).await.unwrap();
    // 'localhost' too: MariaDB's anonymous ''@'localhost' would win over '%' for loopback.
    let hosts = ["%", "localhost"];
    for statement in hosts.iter().flat_map(|host| {
        [
            format!("CREATE USER '{user}'@'{host}' IDENTIFIED BY '{password}'"),
            format!("GRANT ALL ON floe.* TO '{user}'@'{host}'"),
        ]
    }) {
        sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(&pool)
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("password");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    let with = |option: &str| {
        let sep = if address.contains('?') { '&' } else { '?' };
        format!("mysql://{user}@{address}{sep}{option}")
    };
    let store = open(&with(&format!("password_file={}", file.display())))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let key = common::key("password");
    assert_eq!(store.reserve(&key, 5).await.unwrap(), 5);
    store.close().await;
    // A variable only this test sets.
    let variable = format!("FLOE_TEST_PW_{}", user.to_uppercase());
    std::env::set_var(&variable, password);
    let store = open(&with(&format!("password_env={variable}")))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(store.reserve(&key, 1).await.unwrap(), 6);
    store.close().await;

    std::fs::write(&file, "not-the-password\n").unwrap();
    let e = err(open(&with(&format!("password_file={}", file.display()))).await);
    assert!(e.message.contains("Access denied"), "{e}");
    assert!(!e.message.contains("not-the-password"), "{e}");
    let e = err(open(&with("password_file=/nonexistent/pw")).await);
    assert_eq!(e.kind, ErrorKind::Config, "{e}");
    assert!(
        e.message
            .contains("password_file: cannot read /nonexistent/pw"),
        "{e}"
    );
    let e = err(open(&with("password_env=FLOE_TEST_NO_SUCH_VARIABLE")).await);
    assert!(
        e.message.contains("FLOE_TEST_NO_SUCH_VARIABLE is not set"),
        "{e}"
    );
    for host in hosts {
        sqlx::raw_sql(AssertSqlSafe(format!("DROP USER '{user}'@'{host}'")))
            .execute(&pool)
            .await
            .unwrap();
    }
}

/// A PostgreSQL user let in by its client certificate alone (`cert` in pg_hba.conf): the store
/// opens with `sslcert=`/`sslkey=`; the files are read at each new connection, so certificates
/// renewed on disk serve the next connection without a restart (and a certificate the server's
/// CA did not sign is refused by it), while a store already open keeps its connections.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_client_certificates_are_read_at_each_connection() {
    use sqlx::AssertSqlSafe;
    let base = floe_testkit::env("FLOE_TEST_POSTGRES_TLS");
    let ca = std::path::PathBuf::from(floe_testkit::env("FLOE_TEST_POSTGRES_TLS_CA"));
    let ca_key = std::path::PathBuf::from(floe_testkit::env("FLOE_TEST_POSTGRES_TLS_CA_KEY"));
    let admin = sqlx::PgPool::connect(&format!("{base}?sslmode=require"))
        .await
        .unwrap();
    // Once per server: a superuser, so that it may make floe's table.
    let _ = sqlx::raw_sql(AssertSqlSafe(
        "CREATE ROLE floe_cert LOGIN SUPERUSER".to_string(),
    ))
    .execute(&admin)
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("client.pem"), dir.path().join("client.key"));
    floe_testkit::client_cert(&ca, &ca_key, "floe_cert", &cert, &key);
    let url = format!(
        "{}?sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
        base.replace("postgres@", "floe_cert@"),
        ca.display(),
        cert.display(),
        key.display()
    );
    let store = open(&url).await.unwrap_or_else(|e| panic!("{e}"));
    let k = common::key("client-cert");
    assert_eq!(store.reserve(&k, 3).await.unwrap(), 3);

    // Renewed by another CA (a mistake): the next connection is refused by the server.
    let other = floe_testkit::test_ca_named(dir.path(), "other-", None);
    std::fs::copy(&other.cert, &cert).unwrap();
    std::fs::copy(&other.key, &key).unwrap();
    let e = err(open(&url).await);
    assert!(e.message.contains("cannot connect to"), "{e}");
    // The open store goes on with its connection.
    assert_eq!(store.reserve(&k, 1).await.unwrap(), 4);
    // Renewed by the right CA: the next connection takes it.
    floe_testkit::client_cert(&ca, &ca_key, "floe_cert", &cert, &key);
    let renewed = open(&url).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(renewed.reserve(&k, 1).await.unwrap(), 5);
    renewed.close().await;
    store.close().await;
}
