//! kill -9, then a clock behind: real `floe` processes killed with SIGKILL at random moments
//! and restarted under libfaketime with the clock 0.5 s, 1.4 s and 2.9 s behind (each restart
//! waits for the durable time bound, then issues) and 1 h behind (refused, naming the times).
//! Every generator whose uniqueness rests on time, and the snowflake store of `floe serve`:
//! zero repeated IDs across all runs. (The same scenarios, longer, are rows of
//! scripts/faults.sh's table.)
//!
//! libfaketime comes from Debian's `faketime` package (scripts/test.sh installs it).

use crate::common;

use std::time::{Duration, Instant};

use common::faults::{floe, gen_clock_steps, hex, read_ids, serve_snowflake_clock_steps};

#[test]
fn snowflake_file_registry() {
    let extra = [
        "--registry",
        "file://{dir}/registry",
        "--service",
        "s",
        "--port",
        "7",
    ];
    gen_clock_steps("snowflake", &extra, 1).assert_clean(false);
}

#[test]
fn snowflake_static_id() {
    gen_clock_steps("snowflake", &["--registry", "static:5"], 1).assert_clean(false);
}

#[test]
fn snowflake_no_registry() {
    gen_clock_steps("snowflake", &["--worker", "9"], 1).assert_clean(false);
}

#[test]
fn sno_file_registry() {
    let extra = [
        "--registry",
        "file://{dir}/registry",
        "--service",
        "s",
        "--port",
        "7",
    ];
    gen_clock_steps("sno", &extra, 1).assert_clean(false);
}

#[test]
fn sno_partition_by_hand() {
    gen_clock_steps("sno", &["--partition", "0x0a0b"], 1).assert_clean(false);
}

#[test]
fn lexical_no_registry() {
    gen_clock_steps("lexical", &["--worker-id", "77"], 1).assert_clean(false);
}

#[test]
fn snowflake_store_of_floe_serve() {
    serve_snowflake_clock_steps(1).assert_clean(false);
}

/// Two processes on one state directory with the same worker ID (or sno partition), however
/// each got it: the second is refused (a hostile probe once found a registry's partition 10
/// and `--partition 10` kept apart, repeating 1.8 M IDs).
#[test]
fn a_second_process_with_the_same_worker_id_is_refused() {
    let cases: [(&[&str], &[&str], &str); 3] = [
        (
            &["snowflake", "--worker", "3"],
            &["snowflake", "--worker", "3"],
            "snowflake-3",
        ),
        (
            &["snowflake", "--registry", "static:3"],
            &["snowflake", "--worker", "3"],
            "snowflake-3",
        ),
        (
            &["sno", "--registry", "static:10"],
            &["sno", "--partition", "10"],
            "sno-10",
        ),
    ];
    for (first_args, second_args, slot) in cases {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().display().to_string();
        let args = |kind: &[&str]| -> Vec<String> {
            let mut a = vec!["gen".to_string(), kind[0].to_string()];
            a.extend(kind[1..].iter().map(|s| s.to_string()));
            a.extend(["-n", "1000000000", "-o", "hex", "--state-dir", &state].map(String::from));
            a
        };
        let mut first = floe(&args(first_args), None).spawn().unwrap();
        let (lines, reader) = read_ids(&mut first, hex);
        let started = Instant::now();
        while lines.lock().unwrap().is_empty() {
            assert!(started.elapsed() < Duration::from_secs(20));
            std::thread::sleep(Duration::from_millis(5));
        }
        let out = floe(&args(second_args), None).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        // EX_TEMPFAIL: the slot is free again once the other process ends.
        assert_eq!(out.status.code(), Some(75), "{second_args:?}: {err}");
        assert!(
            err.contains("another process") && err.contains(slot),
            "{err}"
        );
        first.kill().unwrap();
        first.wait().unwrap();
        reader.join().unwrap();
    }
}

/// Start-ups that cannot go on fail before they touch the state directory, or say why they
/// wait (each found by a hostile probe).
#[test]
fn start_ups_that_cannot_issue_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state").display().to_string();
    let run = |args: &[&str]| {
        let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        all.extend(["--state-dir".to_string(), state.clone()]);
        floe(&all, None).output().unwrap()
    };
    let refused = |code: i32, args: &[&str], want: &str| {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    };
    // An epoch in the future, a layout whose time ran out: refused, no time bound left behind
    // (it would have made the next start wait).
    refused(
        2,
        &["gen", "snowflake", "--epoch", "2099-01-01T00:00:00Z"],
        "epoch",
    );
    refused(
        2,
        &["gen", "snowflake", "--layout", "22/10/12", "--epoch", "0"],
        "ran out",
    );
    assert!(!dir.path().join("state").exists());
    // Two snowflake stores in one serve would lease one worker ID twice.
    refused(
        2,
        &[
            "serve",
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "off",
            "--store",
            "a=snowflake",
            "--store",
            "b=snowflake",
        ],
        "at most one snowflake store",
    );
    // A service name too long for a file name is bad configuration, not an unreachable registry.
    let long = "s".repeat(300);
    refused(
        2,
        &[
            "gen",
            "snowflake",
            "--registry",
            "static:1",
            "--service",
            &long,
        ],
        "service: expected 1 to 100",
    );
    // A time unit of a minute: a restart in the unit the last run used must wait for the next
    // unit; further away than --max-clock-wait-ms, it refuses instead of hanging silently.
    let minute = [
        "gen",
        "snowflake",
        "--layout",
        "30/10/12",
        "--time-unit-ms",
        "60000",
        "--worker",
        "1",
    ];
    assert!(run(&minute).status.success());
    let mut again = minute.to_vec();
    again.extend(["--max-clock-wait-ms", "100"]);
    // EX_TEMPFAIL: the same command succeeds once the next unit has begun.
    refused(75, &again, "the next unit starts at");
}
