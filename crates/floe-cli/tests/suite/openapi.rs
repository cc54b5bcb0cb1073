//! floe's HTTP API against its own description: a real `floe serve` (embedded store, a
//! template, a scramble key) is tested by schemathesis (PyPI), a property-based API tester, from
//! the `/openapi.json` it serves, with every check (no 5xx but Leaf's documented 500s, every
//! status, content type, header and body as described, valid input accepted and invalid input
//! refused, undocumented methods refused with 405, tokens enforced where the description asks
//! for them); once without tokens and once with them. And a `curl` at the gRPC port is told
//! where the HTTP API is (plain and over TLS), while gRPC goes on being served there.
//!
//! scripts/test.sh installs schemathesis in a venv (scripts/lib/openapi.sh) and names it in
//! FLOE_TEST_SCHEMATHESIS; without it (or `schemathesis` on PATH) these tests fail, saying so.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;
use crate::serving;

/// The schemathesis command: `$FLOE_TEST_SCHEMATHESIS`, else `schemathesis` on PATH.
fn schemathesis() -> PathBuf {
    if let Some(path) = std::env::var_os("FLOE_TEST_SCHEMATHESIS") {
        return path.into();
    }
    on_path("schemathesis").unwrap_or_else(|| {
        panic!(
            "schemathesis is not installed: scripts/test.sh installs it (source \
             scripts/lib/services.sh; source scripts/lib/openapi.sh; install_openapi_tools) and \
             sets FLOE_TEST_SCHEMATHESIS to its command"
        )
    })
}

/// `name` in a directory of PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// How many cases schemathesis makes per operation and phase: about half a minute for the
/// whole API on a loaded 2-core machine.
const EXAMPLES: &str = "15";

/// Runs schemathesis against the server at `http` with every check, `args` added; panics
/// with its report unless every check held.
fn check_api(http: &str, workdir: &Path, args: &[&str]) {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/suite/schemathesis.toml");
    let out = Command::new(schemathesis())
        .current_dir(workdir)
        .args(["--config-file", config, "--no-color", "run"])
        .arg(format!("http://{http}/openapi.json"))
        .args(["--checks", "all", "--max-examples", EXAMPLES])
        // The API's one DELETE unregisters a key (registered-keys mode): the key stays, and
        // GET shows it "registered": false (see schemathesis.toml).
        .args(["--exclude-checks", "use_after_free"])
        .args(["--request-timeout", "10"])
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run schemathesis: {e}"));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found the API and its description apart (its seed is in the report: \
         st run --seed N reproduces the run):\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It tested every operation, none left out for a description it could not read: all but
    // GET /openapi.json, which schemathesis leaves out as the description's own location.
    let tested = format!("Tested: {}", operations(http) - 1);
    assert!(report.contains(&tested), "not {tested}:\n{report}");
}

/// How many operations (a path's methods) the served description has.
fn operations(http: &str) -> usize {
    let (status, body) = serving::http(http, "GET", "/openapi.json").unwrap();
    assert_eq!(status, 200, "{body}");
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    let methods = [
        "get", "put", "post", "delete", "patch", "head", "options", "trace",
    ];
    doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|k| methods.contains(&k.as_str()))
                .count()
        })
        .sum()
}

/// A server with a template and a scramble key, so that every parameter has something to
/// serve, and `extra` arguments.
fn server(dir: &Path, extra: &[&str]) -> serving::Serve {
    let key = dir.join("scramble.key");
    std::fs::write(&key, format!("1:{}\n", "0123456789abcdef".repeat(4))).unwrap();
    let state = dir.join("state");
    let mut args = vec![
        "--state-dir",
        state.to_str().unwrap(),
        "--template",
        "orders=ORD-{seq:06}",
        "--scramble-key-file",
        key.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    serving::start(&args)
}

#[test]
fn the_api_is_what_its_description_says() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), &[]);
    check_api(&server.http, dir.path(), &[]);
}

#[test]
fn the_api_with_tokens_is_what_its_description_says() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "api-token-1\n").unwrap();
    let server = server(dir.path(), &["--token-file", tokens.to_str().unwrap()]);
    // The description is open: tokens protect IDs, not it.
    let (status, body) = serving::http(&server.http, "GET", "/openapi.json").unwrap();
    assert_eq!(status, 200, "{body}");
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["security"], serde_json::json!([{ "bearerAuth": [] }]));
    check_api(
        &server.http,
        dir.path(),
        &["--header", "Authorization: Bearer api-token-1"],
    );
}

/// `curl` (Debian: curl, installed by scripts/test.sh).
fn curl(args: &[&str]) -> std::process::Output {
    let curl = on_path("curl").unwrap_or_else(|| {
        panic!("curl is not installed: scripts/test.sh installs it (Debian: curl)")
    });
    Command::new(curl).args(args).output().unwrap()
}

fn hint(http: &str, scheme: &str) -> String {
    format!("this is floe's gRPC port (gRPC over HTTP/2); its HTTP API is on {scheme}://{http}/\n")
}

/// curl with `base` and each case's arguments gets `hint` and the case's status.
fn assert_hinted(base: &[&str], cases: &[(&[&str], &str)], hint: &str) {
    for (args, status) in cases {
        let out = curl(&[&["-sS", "-w", "\n%{http_code}"][..], base, args].concat());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{hint}\n{status}"),
            "{args:?}"
        );
    }
}

#[test]
fn curl_at_the_grpc_port_is_told_where_the_http_api_is() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let server = serving::start(&["--state-dir", state.to_str().unwrap()]);
    let url = format!("http://{}/v1/ids/ulid", server.grpc);
    // HTTP/1.1, and HTTP/2 with prior knowledge (no gRPC content type).
    let cases = [(&[][..], "426"), (&["--http2-prior-knowledge"][..], "415")];
    assert_hinted(&[&url], &cases, &hint(&server.http, "http"));
    // gRPC, on the same port, as before.
    let grpc = format!("http://{}", server.grpc);
    let ids = common::ok(common::run(&["gen", "ulid", "-n", "2", "--server", &grpc]));
    assert_eq!(ids.lines().count(), 2, "{ids}");
}

#[test]
fn curl_over_tls_at_the_grpc_port_is_told_where_the_http_api_is() {
    let dir = tempfile::tempdir().unwrap();
    let certs = floe_testkit::test_ca(dir.path());
    let state = dir.path().join("state");
    let server = serving::start(&[
        "--state-dir",
        state.to_str().unwrap(),
        "--tls-cert",
        certs.cert.to_str().unwrap(),
        "--tls-key",
        certs.key.to_str().unwrap(),
    ]);
    let url = format!("https://{}/", server.grpc);
    let ca = certs.ca.to_str().unwrap();
    // curl's default over TLS (ALPN h2, then HTTP/2 without gRPC's content type), and HTTP/1.1.
    let cases = [(&[][..], "415"), (&["--http1.1"][..], "426")];
    assert_hinted(
        &["--cacert", ca, &url],
        &cases,
        &hint(&server.http, "https"),
    );
    let grpc = format!("https://{}", server.grpc);
    let ids = common::ok(common::run(&[
        "gen",
        "ulid",
        "-n",
        "2",
        "--server",
        &grpc,
        "--ca-cert",
        ca,
    ]));
    assert_eq!(ids.lines().count(), 2, "{ids}");
}
