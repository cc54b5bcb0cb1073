//! kill -9, then a clock behind: real `floe` processes killed with SIGKILL at random moments
//! and restarted under libfaketime with the clock 0.5 s, 1.4 s and 2.9 s behind (each restart
//! waits for the durable time bound, then issues) and 1 h behind (refused, naming the times).
//! Every generator whose uniqueness rests on time, and the snowflake store of `floe serve`:
//! zero repeated IDs across all runs. (The same scenarios, longer, are rows of
//! scripts/faults.sh's table.)
//!
//! libfaketime comes from Debian's `faketime` package (scripts/test.sh installs it).

mod common;

use std::time::{Duration, Instant};

use common::faults::{collect_lines, floe, gen_clock_steps, serve_snowflake_clock_steps};

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
            a.extend(["-n", "1000000000", "--state-dir", &state].map(String::from));
            a
        };
        let mut first = floe(&args(first_args), None).spawn().unwrap();
        let (lines, reader) = collect_lines(&mut first);
        let started = Instant::now();
        while lines.lock().unwrap().is_empty() {
            assert!(started.elapsed() < Duration::from_secs(20));
            std::thread::sleep(Duration::from_millis(5));
        }
        let out = floe(&args(second_args), None).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{second_args:?}: {err}");
        assert!(
            err.contains("another process") && err.contains(slot),
            "{err}"
        );
        first.kill().unwrap();
        first.wait().unwrap();
        reader.join().unwrap();
    }
}
