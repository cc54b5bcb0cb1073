//! Exit codes by kind (sysexits.h), as `floe --help` documents them: 2 bad usage, 69 a
//! registry, store or --server that cannot be reached, 75 refused for now, 74 local I/O.
//! (The store and --server cases are in sequencer.rs and client.rs, with the tests they
//! belong to; the clock-behind cases in registry.rs and crash.rs.)

use crate::common;

use common::{cmd, run};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn the_help_documents_every_code() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for line in [
        "Exit codes:",
        "  0   success",
        "  1   ",
        "  2   bad usage",
        "  69  unavailable",
        "  74  a local I/O error",
        "  75  refused for now",
    ] {
        assert!(help.contains(line), "{line:?} missing from:\n{help}");
    }
}

#[test]
fn a_typo_is_a_usage_error() {
    for args in [
        &["gne", "snowflake"][..],
        &["gen", "snowflak"],
        &["gen", "snowflake", "--cuont", "3"],
        &["gen", "snowflake", "-n", "many"],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// `--registry` on a port nobody listens on, with no local cache to fall back on: 69, one
/// line naming the registry, nothing issued.
#[test]
fn an_unreachable_registry_is_unavailable() {
    let port = floe_testkit::free_port();
    for (command, url) in [
        (
            &["gen", "snowflake"][..],
            format!("zk://127.0.0.1:{port}/floe"),
        ),
        (&["gen", "sno"], format!("etcd://127.0.0.1:{port}/floe")),
        (&["worker", "list"], format!("zk://127.0.0.1:{port}/floe")),
        (&["worker", "register"], format!("etcd://127.0.0.1:{port}")),
    ] {
        let state = tempfile::tempdir().unwrap();
        let out = cmd()
            .args(command)
            .args(["--registry", &url, "--state-dir"])
            .arg(state.path())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(69), "{command:?} {url}: {err}");
        assert!(out.stdout.is_empty(), "{command:?} {url}: nothing issued");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains(&format!("127.0.0.1:{port}")),
            "names the registry: {err}"
        );
    }
}

/// A bad registry URL is the user's to fix: 2, not 69.
#[test]
fn a_bad_registry_url_is_a_usage_error() {
    let out = run(&["gen", "snowflake", "--registry", "zk://"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// Standard output that cannot be written is a local I/O error (74, EX_IOERR); a closed pipe
/// is not an error at all.
#[test]
fn local_output_errors_are_io_errors() {
    // Standard output is a file on a full device: /dev/full.
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        panic!("/dev/full is needed for this test");
    };
    let out = cmd()
        .args(["gen", "uuid7", "-n", "100000"])
        .stdout(full)
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(74), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    // A closed pipe is not an error (`floe gen ... | head`).
    let mut child = cmd()
        .args(["gen", "uuid7", "-n", "10000000"])
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

/// `floe serve` tells a service manager why it did not start: a registry or store that cannot
/// be reached is 69 (retry), a bad configuration 2 (do not), each in one error line.
#[test]
fn floe_serve_exits_by_kind_when_it_cannot_start() {
    let port = floe_testkit::free_port();
    let cases: [(&[&str], u8); 4] = [
        (&["--registry", &format!("zk://127.0.0.1:{port}/floe")], 69),
        (&["--store", &format!("main=redis://127.0.0.1:{port}/")], 69),
        (
            &[
                "--store",
                &format!("main=postgres://floe@127.0.0.1:{port}/floe"),
            ],
            69,
        ),
        (&["--store", "main=nosuch://x"], 2),
    ];
    for (args, code) in cases {
        let state = tempfile::tempdir().unwrap();
        let out = common::serve_output(state.path(), args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(i32::from(code)), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: never served");
        let errors: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("floe: error:"))
            .collect();
        assert_eq!(errors.len(), 1, "{args:?}: {err}");
    }
}

/// A mistyped option in a store URL stops the start (2), naming it and the option meant: the
/// drivers would pass over it (`?layoto=` served floe's keys, not Layotto's).
#[test]
fn a_mistyped_store_url_option_is_a_configuration_error() {
    for (url, near) in [
        ("redis://127.0.0.1:1/?layoto=myapp", "layotto"),
        ("mysql://u@127.0.0.1:1/db?from_layoto=myapp", "from_layotto"),
        ("postgres://u@127.0.0.1:1/db?tabel=t", "table"),
        ("leaf-mysql://u@127.0.0.1:1/db?tabel=leaf_alloc", "table"),
    ] {
        let state = tempfile::tempdir().unwrap();
        let out = common::serve_output(state.path(), &["--store", &format!("main={url}")]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{url}: {err}");
        assert!(err.contains("unknown option"), "{url}: {err}");
        assert!(
            err.contains(&format!("did you mean {near}?")),
            "{url}: {err}"
        );
    }
}

/// A listen address without a port from 0 to 65535 is a configuration error (2), naming its
/// key, found before anything is leased or written (it was 1, from the bind).
#[test]
fn a_listen_address_without_a_valid_port_is_a_configuration_error() {
    for (flag, addr, key) in [
        ("--http", "127.0.0.1:70000", "listen.http"),
        ("--grpc", "127.0.0.1:-1", "listen.grpc"),
        ("--http", "localhost", "listen.http"),
    ] {
        let state = tempfile::tempdir().unwrap();
        let other = if flag == "--http" { "--grpc" } else { "--http" };
        let out = common::cmd()
            .args(["serve", flag, addr, other, "127.0.0.1:0", "--state-dir"])
            .arg(state.path())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{flag} {addr}: {err}");
        assert!(
            err.contains(key) && err.contains(addr),
            "{flag} {addr}: {err}"
        );
        assert_eq!(
            std::fs::read_dir(state.path()).unwrap().count(),
            0,
            "{flag} {addr}: nothing written to the state directory"
        );
    }
}

/// A state directory that cannot be made is a local I/O error (74), not a usage error: a
/// service manager that stops on 2 would leave the server down after a disk problem.
#[test]
fn floe_serve_with_a_state_directory_it_cannot_make_is_an_io_error() {
    let state = std::path::Path::new("/proc/floe-cannot-be-made/state");
    let out = common::serve_output(state, &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(74), "{err}");
    assert!(err.contains("/proc/floe-cannot-be-made"), "{err}");
}

/// `floe worker release` of an identity that holds nothing: the command was right, there was
/// nothing to release (1, not 2), and the line says where the serve's other leases are.
#[test]
fn releasing_an_identity_that_holds_nothing_exits_1_and_says_why() {
    let registry = tempfile::tempdir().unwrap();
    let url = format!("file://{}", registry.path().display());
    let out = run(&[
        "worker",
        "release",
        "--registry",
        &url,
        "--service",
        "orders",
        "--host",
        "h1",
        "--port",
        "4242",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("holds no worker ID") && err.contains("orders-sno"),
        "{err}"
    );
}

/// A state directory that cannot be created or written is a local I/O error (74), found at the
/// start's first step, before anything is leased (it was 69, from the file registry behind
/// it). Here its parent is a file: a read-only directory would do the same for a user
/// other than root.
#[test]
fn a_state_directory_that_cannot_be_written_is_an_io_error() {
    let parent = tempfile::NamedTempFile::new().unwrap();
    let state = parent.path().join("state");
    let out = common::serve_output(&state, &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(74), "{err}");
    assert!(
        err.contains("state directory") && err.contains("cannot create it"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "never served");
}
