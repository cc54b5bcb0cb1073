//! Helpers shared by the tests that run the real `floe` binary.
#![allow(dead_code)] // each test binary uses a part of them

use std::process::{Command, Output, Stdio};

/// The `floe` binary, with no standard input and its output captured.
pub fn cmd() -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("floe"));
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs `floe args...` to the end.
pub fn run(args: &[&str]) -> Output {
    cmd().args(args).output().unwrap()
}

/// The standard output of a run that must have succeeded.
pub fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Nanoseconds since the Unix epoch, to name things no other run uses.
pub fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}
