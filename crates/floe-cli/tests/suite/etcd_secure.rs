//! The `floe` binary against the etcd that scripts/test.sh starts on https with client
//! certificates and RBAC (FLOE_TEST_ETCD_SECURE, its files in FLOE_TEST_ETCD_SECURE_DIR: see
//! start_etcd_secure in scripts/lib/services.sh): worker IDs and sequences over `etcds://`,
//! and each mistake refused at start with one line naming it and exit 2 (a configuration to
//! fix, not a registry to wait for).
#![cfg(feature = "etcd")]

use crate::common;

use common::{cmd, ok};

fn dir() -> String {
    floe_testkit::env("FLOE_TEST_ETCD_SECURE_DIR")
}

fn server() -> String {
    floe_testkit::env("FLOE_TEST_ETCD_SECURE")
}

/// `etcds://floe@SERVER/ROOT?...` with the test CA, client certificate and password file.
fn secure_url(root: &str) -> String {
    let d = dir();
    format!(
        "etcds://floe@{}/{root}?cacert={d}/ca.pem&cert={d}/client.pem&key={d}/client.key&password_file={d}/password",
        server()
    )
}

fn password() -> String {
    std::fs::read_to_string(format!("{}/password", dir()))
        .unwrap()
        .trim_end()
        .to_string()
}

#[test]
fn worker_ids_and_sequences_over_etcd_with_mtls_and_a_password() {
    let state = tempfile::tempdir().unwrap();
    let root = floe_testkit::unique("floe-cli-secure");
    let url = secure_url(&root);
    let out = ok(cmd()
        .args([
            "gen",
            "snowflake",
            "-n",
            "5",
            "--registry",
            &url,
            "--state-dir",
        ])
        .arg(state.path())
        .args(["--service", "orders", "--host", "h1", "--port", "9100"])
        .output()
        .unwrap());
    assert_eq!(out.lines().count(), 5, "{out}");
    let listed = ok(cmd()
        .args(["worker", "list", "--registry", &url, "--service", "orders"])
        .output()
        .unwrap());
    assert!(listed.contains("h1:9100"), "{listed}");
    assert!(!listed.contains(&password()), "{listed}");
    // The store: sequences under the same user's prefix.
    let store = secure_url(&format!("{root}/sequences"));
    let first = ok(cmd()
        .args(["seq", "k", "-n", "3", "--store", &store, "--state-dir"])
        .arg(state.path())
        .output()
        .unwrap());
    let again = ok(cmd()
        .args(["seq", "k", "-n", "2", "--store", &store, "--state-dir"])
        .arg(state.path())
        .output()
        .unwrap());
    let all: Vec<i64> = first
        .lines()
        .chain(again.lines())
        .map(|l| l.parse().unwrap())
        .collect();
    let mut distinct = all.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 5, "{all:?}");
}

/// Each mistake, for the registry and the store alike: exit 2, one line on standard error
/// naming what to check, nothing issued, no password.
#[test]
fn wrong_credentials_and_certificates_exit_2_with_one_clear_line() {
    let d = dir();
    let s = server();
    let pw = format!("{d}/password");
    let cases = [
        (
            format!("etcds://floe:not-the-password@{s}/floe?cacert={d}/ca.pem&cert={d}/client.pem&key={d}/client.key"),
            "wrong user name or password",
        ),
        (
            format!("etcds://floe@{s}/floe?cacert={d}/ca.pem&cert={d}/other-client.pem&key={d}/other-client.key&password_file={pw}"),
            "refused the client certificate",
        ),
        (
            format!("etcds://floe@{s}/floe?cacert={d}/ca.pem&password_file={pw}"),
            "refused the client certificate",
        ),
        (
            format!("etcds://floe@{s}/floe?cacert={d}/other-ca.pem&cert={d}/client.pem&key={d}/client.key&password_file={pw}"),
            "check cacert=",
        ),
        (
            format!("etcd://floe@{s}/floe?password_file={pw}"),
            "the server speaks TLS: use an etcds:// URL",
        ),
        (
            format!("etcds://floe@{s}/floe?cacert={d}/missing.pem&cert={d}/client.pem&key={d}/client.key&password_file={pw}"),
            "cacert=",
        ),
        (
            format!("etcds://floe@{s}/floe?cacert={d}/ca.pem&cert={d}/client.pem&password_file={pw}"),
            "cert= needs key=",
        ),
        (
            format!("etcds://floe@{s}/floe?cacert={d}/password&cert={d}/client.pem&key={d}/client.key&password_file={pw}"),
            "no PEM certificate",
        ),
    ];
    let state = tempfile::tempdir().unwrap();
    for (url, words) in cases {
        for (what, args) in [
            ("registry", vec!["gen", "snowflake", "--registry", &url]),
            ("store", vec!["seq", "k", "--store", &url]),
        ] {
            let out = cmd()
                .args(&args)
                .arg("--state-dir")
                .arg(state.path())
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{what} {url}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{what} {url}: {err}");
            assert!(err.contains(words), "{what} {url}: {err}");
            assert!(!err.contains(&password()), "{what} {url}: {err}");
            assert!(out.stdout.is_empty(), "{what} {url}");
        }
    }
}

/// An etcds:// cluster that cannot be reached stays an outage (69), as etcd:// is: only what
/// etcd refuses is a configuration error.
#[test]
fn an_unreachable_secure_etcd_is_unavailable() {
    let d = dir();
    let port = floe_testkit::free_port();
    let url = format!(
        "etcds://floe@127.0.0.1:{port}/floe?cacert={d}/ca.pem&cert={d}/client.pem&key={d}/client.key&password_file={d}/password"
    );
    let state = tempfile::tempdir().unwrap();
    for args in [
        vec!["gen", "snowflake", "--registry", &url],
        vec!["seq", "k", "--store", &url],
    ] {
        let out = cmd()
            .args(&args)
            .arg("--state-dir")
            .arg(state.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    }
}

/// A node on `etcds://` (client certificate, user) paused (SIGSTOP) past its lease while
/// another process with the same identity starts: the second takes the worker ID once the
/// first's lease is gone and issues; the first, resumed, issues nothing more (fenced, 503).
/// Every ID issued once, and the password in no log. Found by hand on the release binary.
#[test]
fn a_paused_node_on_secure_etcd_is_fenced_when_another_takes_its_worker_id() {
    let root = floe_testkit::unique("floe-pause");
    let url = format!("{}&ttl=3&reach=2", secure_url(&root));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("floe.toml");
    std::fs::write(&config, "[ids]\nkinds = [\"snowflake\"]\n").unwrap();
    let node = |state: &str| {
        let state = dir.path().join(state);
        crate::serving::start(&[
            "--registry",
            &url,
            "--service",
            "paused",
            "--host",
            "10.9.9.9",
            "--port",
            "7000",
            "--config",
            config.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ])
    };
    let snowflake = |server: &crate::serving::Serve| {
        crate::serving::http(&server.http, "GET", "/v1/ids/snowflake").unwrap()
    };
    let a = node("a");
    let mut ids = std::collections::HashSet::new();
    let mut take = |server: &crate::serving::Serve| {
        let (status, body) = snowflake(server);
        assert_eq!(status, 200, "{body}");
        assert!(ids.insert(body.clone()), "{body} twice");
    };
    for _ in 0..3 {
        take(&a);
    }
    a.signal("STOP");
    // Refused while a's lease lives (3 s), then it takes the ID, within the start harness's
    // limit.
    let b = node("b");
    for _ in 0..3 {
        take(&b);
    }
    a.signal("CONT");
    let (status, body) = snowflake(&a);
    assert_eq!(status, 503, "a resumed must not issue: {body}");
    assert!(body.contains("fenced"), "{body}");
    for server in [a, b] {
        server.term();
        let (_, err, _) = server.wait(std::time::Duration::from_secs(30));
        assert!(!err.contains(&password()), "{err}");
    }
}
