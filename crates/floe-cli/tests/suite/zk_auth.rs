//! ZooKeeper digest credentials through the real `floe` binary: a wrong password or none
//! against a ZooKeeper that refuses unauthenticated clients (FLOE_TEST_ZOOKEEPER_SECURE:
//! `enforce.auth.enabled=true`) is one line and exit 2 (a configuration error, not retried);
//! the password, given in the URL or a file, is never printed; and a registry with no
//! credentials logs one warning at start.

use std::time::{Duration, Instant};

use crate::common::{cmd, ok};
use crate::serving;

const PASSWORD: &str = "cl1-s3cret";

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// `floe worker register` of h1:8080 in `url`'s registry, with a state directory of its own.
fn register(url: &str, host: &str) -> std::process::Output {
    let state = tempfile::tempdir().unwrap();
    cmd()
        .args(["worker", "register", "--registry", url, "--service", "acl"])
        .args(["--host", host, "--port", "8080", "--state-dir"])
        .arg(state.path())
        .output()
        .unwrap()
}

#[test]
fn a_wrong_password_or_none_is_one_line_and_exit_2() {
    let server = floe_testkit::env("FLOE_TEST_ZOOKEEPER_SECURE");
    let root = format!("/{}", floe_testkit::unique("floe-cli-acl"));
    // The right password, from a file (not in argv): the root is created creator-only.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("zk-password");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    let right = format!("zk://floe@{server}{root}?password_file={}", file.display());
    let out = register(&right, "h1");
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = crate::common::worker_list(&right, "acl");
    assert_eq!(listed.lines().count(), 1, "{listed}");

    for (url, says) in [
        (format!("zk://floe:wrong-pass@{server}{root}"), "NoAuth"),
        (format!("zk://{server}{root}"), "AuthFailed"),
    ] {
        let started = Instant::now();
        let out = register(&url, "h2");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{url}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(err.contains(says), "{url}: {err}");
        assert!(!err.contains("wrong-pass"), "the password printed: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{url}: not failed at once ({:?})",
            started.elapsed()
        );
    }
    // Nothing was added by either.
    let listed = crate::common::worker_list(&right, "acl");
    assert_eq!(listed.lines().count(), 1, "{listed}");
}

/// `floe serve` on a ZooKeeper registry with no credentials logs, once, that anyone who
/// reaches ZooKeeper can rewrite its worker records, and how to fix it; with credentials it
/// does not, and `--print-config` never shows the password.
#[test]
fn a_registry_without_credentials_is_warned_about_once() {
    let plain = floe_testkit::env("FLOE_TEST_ZOOKEEPER");
    let root = format!("/{}", floe_testkit::unique("floe-cli-open"));
    let state = tempfile::tempdir().unwrap();
    let url = format!("zk://{plain}{root}");
    let server = serving::start(&[
        "--registry",
        &url,
        "--host",
        "h1",
        "--port",
        "8080",
        "--state-dir",
        state.path().to_str().unwrap(),
    ]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let warned = loop {
        let log = server.stderr();
        let lines: Vec<String> = log
            .lines()
            .filter(|l| l.contains("anyone who reaches ZooKeeper can rewrite"))
            .map(str::to_string)
            .collect();
        if !lines.is_empty() || Instant::now() > deadline {
            break lines;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(warned.len(), 1, "{}", server.stderr());
    assert!(warned[0].contains("WARN"), "{}", warned[0]);
    assert!(warned[0].contains("password_file="), "{}", warned[0]);
    server.term();
    let _ = server.wait_timeout(Duration::from_secs(10));

    let secure = floe_testkit::env("FLOE_TEST_ZOOKEEPER_SECURE");
    let state = tempfile::tempdir().unwrap();
    let url = format!("zk://floe:{PASSWORD}@{secure}{root}");
    let server = serving::start(&[
        "--registry",
        &url,
        "--host",
        "h1",
        "--port",
        "8080",
        "--state-dir",
        state.path().to_str().unwrap(),
    ]);
    std::thread::sleep(Duration::from_millis(500));
    let log = server.stderr();
    assert!(!log.contains("anyone who reaches ZooKeeper"), "{log}");
    assert!(!log.contains(PASSWORD), "{log}");
    server.term();
    let _ = server.wait_timeout(Duration::from_secs(10));

    let out = cmd()
        .args(["serve", "--print-config", "--registry", &url])
        .output()
        .unwrap();
    let printed = ok(out);
    assert!(!printed.contains(PASSWORD), "{printed}");
    assert!(printed.contains("floe:****@"), "{printed}");
}

/// `zks://` through the binary (cargo feature `zookeeper-tls`): a worker registered over TLS
/// with credentials and a client certificate (FLOE_TEST_ZOOKEEPER_TLS), listed again.
#[cfg(feature = "zookeeper-tls")]
#[test]
fn a_worker_registers_over_tls() {
    let server = floe_testkit::env("FLOE_TEST_ZOOKEEPER_TLS");
    let root = format!("/{}", floe_testkit::unique("floe-cli-tls"));
    let url = format!(
        "zks://floe:{PASSWORD}@{server}{root}?cacert={}&cert={}&key={}",
        floe_testkit::env("FLOE_TEST_ZOOKEEPER_TLS_CA"),
        floe_testkit::env("FLOE_TEST_ZOOKEEPER_TLS_CERT"),
        floe_testkit::env("FLOE_TEST_ZOOKEEPER_TLS_KEY")
    );
    let out = register(&url, "h1");
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = crate::common::worker_list(&url, "acl");
    assert_eq!(listed.lines().count(), 1, "{listed}");
}

/// With credentials, a root created open before (`world:anyone`, as floe did without
/// credentials) is warned about at start, naming it and how to close it.
#[test]
fn an_open_root_is_warned_about_with_credentials() {
    let secure = floe_testkit::env("FLOE_TEST_ZOOKEEPER_SECURE");
    let root = format!("/{}", floe_testkit::unique("floe-cli-was-open"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = zookeeper_client::Client::connector()
            .with_auth("digest", format!("floe:{PASSWORD}").as_bytes())
            .connect(&secure)
            .await
            .unwrap();
        let open = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        client.create(&root, b"", &open).await.unwrap();
    });
    let state = tempfile::tempdir().unwrap();
    let url = format!("zk://floe:{PASSWORD}@{secure}{root}");
    let server = serving::start(&[
        "--registry",
        &url,
        "--host",
        "h1",
        "--port",
        "8080",
        "--state-dir",
        state.path().to_str().unwrap(),
    ]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let warned = loop {
        let lines: Vec<String> = server
            .stderr()
            .lines()
            .filter(|l| l.contains("created before with open ACLs"))
            .map(str::to_string)
            .collect();
        if !lines.is_empty() || Instant::now() > deadline {
            break lines;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(warned.len(), 1, "{}", server.stderr());
    assert!(
        warned[0].contains(&root) && warned[0].contains("setAcl"),
        "{}",
        warned[0]
    );
    assert!(!server.stderr().contains(PASSWORD));
    server.term();
    let _ = server.wait_timeout(Duration::from_secs(10));
}
