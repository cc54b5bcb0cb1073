//! `floe serve` with TLS and bearer tokens, and `floe gen/seq --server` against it: the
//! client trusts a private CA with --ca-cert and sends a token with --token-file; bad files
//! fail at start-up naming the file; a listener beyond loopback without TLS or tokens is
//! warned about on standard error.

use crate::common;
use crate::serving;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

/// A private CA and a server certificate it signed, as PEM files in `dir`.
fn certs(dir: &Path) -> floe_testkit::Certs {
    floe_testkit::test_ca(dir)
}

fn run(args: &[&str]) -> Output {
    common::run(args)
}

fn err(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn the_client_talks_tls_to_a_tls_server_with_the_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let c = certs(dir.path());
    let state = dir.path().join("state");
    let server = serving::start(&[
        "--state-dir",
        s(&state),
        "--tls-cert",
        s(&c.cert),
        "--tls-key",
        s(&c.key),
        "--store",
        "main=memory",
    ]);
    let url = format!("https://{}", server.grpc);

    let out = run(&[
        "gen",
        "ulid",
        "-n",
        "3",
        "--server",
        &url,
        "--ca-cert",
        s(&c.ca),
    ]);
    assert!(out.status.success(), "{}", err(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
    let out = run(&[
        "seq",
        "k",
        "-n",
        "2",
        "--server",
        &url,
        "--ca-cert",
        s(&c.ca),
    ]);
    assert!(out.status.success(), "{}", err(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n2\n");
    // The CA from the environment.
    let out = common::cmd()
        .args(["gen", "uuid7", "--server", &url])
        .env("FLOE_CA_CERT", &c.ca)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", err(&out));

    // Without the CA, the certificate is not trusted: a clear one-line error, exit 2.
    let out = run(&["gen", "ulid", "--server", &url]);
    assert_eq!(out.status.code(), Some(2), "{}", err(&out));
    let e = err(&out);
    assert!(e.contains("cannot reach the server"), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    // Plain text to the TLS port fails: the server cuts the connection (69, as any server
    // that cannot be talked to).
    let plain = format!("http://{}", server.grpc);
    let out = run(&["gen", "ulid", "--server", &plain]);
    assert_eq!(out.status.code(), Some(69), "{}", err(&out));
    // --ca-cert with http:// is refused, naming the flag.
    let out = run(&["gen", "ulid", "--server", &plain, "--ca-cert", s(&c.ca)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err(&out).contains("--ca-cert: given for a server without TLS"),
        "{}",
        err(&out)
    );
    // A CA file that is not one.
    let out = run(&["gen", "ulid", "--server", &url, "--ca-cert", s(&c.key)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(err(&out).contains("--ca-cert: "), "{}", err(&out));
}

#[test]
fn bad_tls_files_fail_at_start_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let c = certs(dir.path());
    let state = dir.path().join("state");
    let missing = dir.path().join("missing-cert.pem");
    let out = run(&[
        "serve",
        "--state-dir",
        s(&state),
        "--grpc",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--tls-cert",
        s(&missing),
        "--tls-key",
        s(&c.key),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", err(&out));
    let e = err(&out);
    assert!(
        e.contains("tls.cert: cannot read") && e.contains("missing-cert.pem"),
        "{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
    // A key file holding the certificate.
    let out = run(&[
        "serve",
        "--state-dir",
        s(&state),
        "--grpc",
        "127.0.0.1:0",
        "--tls-cert",
        s(&c.cert),
        "--tls-key",
        s(&c.cert),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", err(&out));
    assert!(err(&out).contains("tls.key: "), "{}", err(&out));
    // An expired certificate, and the CA's certificate given as the server's.
    let old = floe_testkit::test_ca_named(
        dir.path(),
        "old-",
        Some((floe_testkit::day(2020, 1, 1), floe_testkit::day(2021, 1, 1))),
    );
    for (cert, words) in [
        (&old.cert, "expired on 2021-01-01"),
        (&old.ca, "is a CA certificate"),
    ] {
        let out = run(&[
            "serve",
            "--state-dir",
            s(&state),
            "--grpc",
            "127.0.0.1:0",
            "--tls-cert",
            s(cert),
            "--tls-key",
            s(&old.key),
        ]);
        assert_eq!(out.status.code(), Some(2), "{}", err(&out));
        let e = err(&out);
        assert!(e.contains("tls.cert: ") && e.contains(words), "{e}");
        assert_eq!(
            e.lines().filter(|l| l.contains("tls.cert")).count(),
            1,
            "{e}"
        );
    }
    // One without the other, from the environment.
    let out = common::cmd()
        .args(["serve", "--state-dir", s(&state), "--print-config"])
        .env("FLOE_TLS_CERT", &c.cert)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", err(&out));
    assert!(err(&out).contains("tls.key: missing"), "{}", err(&out));
}

#[test]
fn the_client_sends_a_token_from_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let server_tokens = dir.path().join("server-tokens");
    std::fs::write(&server_tokens, "# clients\nalpha-secret-1\nbeta-secret-2\n").unwrap();
    let server = serving::start(&[
        "--state-dir",
        s(&state),
        "--token-file",
        s(&server_tokens),
        "--store",
        "main=memory",
    ]);
    let url = format!("http://{}", server.grpc);

    let out = run(&["seq", "k", "--server", &url]);
    assert_eq!(out.status.code(), Some(2), "{}", err(&out));
    assert!(err(&out).contains("UNAUTHENTICATED"), "{}", err(&out));
    let out = run(&["gen", "ulid", "--server", &url]);
    assert!(err(&out).contains("UNAUTHENTICATED"), "{}", err(&out));

    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "gamma-secret-3\n").unwrap();
    let out = run(&["gen", "ulid", "--server", &url, "--token-file", s(&wrong)]);
    assert!(err(&out).contains("UNAUTHENTICATED"), "{}", err(&out));
    assert!(!err(&out).contains("gamma-secret"), "{}", err(&out));

    // The client sends its file's first token: the server's second line.
    let mine = dir.path().join("mine");
    std::fs::write(&mine, "# mine\n\nbeta-secret-2\n").unwrap();
    let out = run(&[
        "seq",
        "k",
        "-n",
        "3",
        "--server",
        &url,
        "--token-file",
        s(&mine),
    ]);
    assert!(out.status.success(), "{}", err(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n2\n3\n");
    let out = common::cmd()
        .args(["gen", "ulid", "--server", &url])
        .env("FLOE_TOKEN_FILE", &mine)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", err(&out));

    let empty = dir.path().join("empty");
    std::fs::write(&empty, "# none\n").unwrap();
    let out = run(&["gen", "ulid", "--server", &url, "--token-file", s(&empty)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err(&out).contains("--token-file: ") && err(&out).contains("holds no token"),
        "{}",
        err(&out)
    );

    // HTTP too; health stays open.
    let (code, _) = serving::http(&server.http, "GET", "/v1/ids/ulid").unwrap();
    assert_eq!(code, 401);
    let (code, _) = serving::http(&server.http, "GET", "/healthz").unwrap();
    assert_eq!(code, 200);
    server.term();
    let (status, stderr, _) = server.wait(Duration::from_secs(20));
    assert!(status.success(), "{stderr}");
    for secret in ["alpha-secret", "beta-secret", "gamma-secret"] {
        assert!(!stderr.contains(secret), "{stderr}");
    }
}

#[test]
fn a_listener_beyond_loopback_without_tls_or_tokens_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let server = serving::start_on(
        "0.0.0.0:0",
        "127.0.0.1:0",
        &["--state-dir", s(&state), "--store", "main=memory"],
    );
    let grpc = server.grpc.clone();
    server.term();
    let (status, stderr, _) = server.wait(Duration::from_secs(20));
    assert!(status.success(), "{stderr}");
    let warning = stderr
        .lines()
        .find(|l| l.contains(&grpc) && l.contains("WARN"))
        .unwrap_or_else(|| panic!("no warning naming {grpc}: {stderr}"));
    assert!(
        warning.contains("TLS") && warning.contains("tokens"),
        "{warning}"
    );
    // The loopback listener is not named.
    assert!(!stderr.contains("listen.http listens on"), "{stderr}");
}

/// Passwords in store and registry URLs never reach the terminal: `--print-config` masks
/// them, and URLs that fail (a server not there, an unknown scheme, a password with a raw
/// `/` that cannot be read) never repeat them.
#[test]
fn passwords_in_urls_are_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let out = run(&[
        "serve",
        "--state-dir",
        s(&state),
        "--store",
        "p=postgres://floe:s3cret-pw@127.0.0.1:1/floe",
        "--print-config",
    ]);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", err(&out));
    assert!(!printed.contains("s3cret-pw"), "{printed}");
    assert!(
        printed.contains("postgres://floe:****@127.0.0.1:1/floe"),
        "{printed}"
    );
    for (args, code) in [
        (&["--store", "e=etcd://u:s3cret-pw@127.0.0.1:1/x"][..], 69),
        (&["--registry", "etcd://u:s3cret-pw@127.0.0.1:1/x"], 69),
        (&["--store", "n=nosuch://u:s3cret-pw@127.0.0.1:1/x"], 2),
        (&["--registry", "zk://u:s3c/ret-pw@127.0.0.1:1/x"], 2),
        (&["--store", "z=zk://u:s3c?ret-pw@127.0.0.1:1/x"], 2),
        (&["--registry", "etcd://u:s3c#ret-pw@127.0.0.1:1/x"], 2),
    ] {
        let out = common::serve_output(&state, args);
        let e = err(&out);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {e}");
        assert!(
            !e.contains("s3cret-pw") && !e.contains("ret-pw"),
            "{args:?}: {e}"
        );
    }
}
