//! kill -9, then a clock behind: real `floe` processes killed with SIGKILL at random moments
//! and restarted under libfaketime with the clock 0.5 s, 1.4 s and 2.9 s behind (each restart
//! waits for the durable time bound, then issues) and 1 h behind (refused, naming the times).
//! Every generator whose uniqueness rests on time, and the snowflake store of `floe serve`:
//! zero repeated IDs across all runs.
//!
//! libfaketime comes from Debian's `faketime` package (scripts/test.sh installs it);
//! FLOE_TEST_FAKETIME may name the library.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

/// The clock steps of the restarts that must wait, in seconds behind the real clock.
const BEHIND: [&str; 3] = ["-0.5s", "-1.4s", "-2.9s"];

fn faketime_lib() -> String {
    if let Ok(path) = std::env::var("FLOE_TEST_FAKETIME") {
        return path;
    }
    let candidates = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
    ];
    candidates
        .iter()
        .find(|p| std::path::Path::new(p).exists())
        .map(|p| p.to_string())
        .expect("libfaketime not found: install Debian's faketime package (scripts/test.sh does) or set FLOE_TEST_FAKETIME")
}

/// `floe args...`, its clock `offset` behind (None: the real clock).
fn floe(args: &[String], offset: Option<&str>) -> Command {
    let mut c = common::cmd();
    c.args(args);
    if let Some(offset) = offset {
        c.env("LD_PRELOAD", faketime_lib())
            .env("FAKETIME", offset)
            .env("FAKETIME_DONT_RESET", "1");
    }
    c
}

/// A small random number (no RNG crate needed): the clock's low bits, mixed.
fn random_below(n: u64) -> u64 {
    let t = common::nanos() as u64;
    (t ^ (t >> 17)).wrapping_mul(0x9e37_79b9_7f4a_7c15) % n
}

/// Reads a child's stdout on a thread of its own, line by line, into a shared list.
fn collect_lines(child: &mut Child) -> (Arc<Mutex<Vec<String>>>, std::thread::JoinHandle<()>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let stdout = child.stdout.take().unwrap();
    let sink = lines.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            match line {
                Ok(l) => sink.lock().unwrap().push(l),
                Err(_) => return,
            }
        }
    });
    (lines, reader)
}

fn stderr_of(child: &mut Child) -> String {
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    err
}

/// Runs `floe gen` until it has issued for a random while, then kills it with SIGKILL.
/// Returns the IDs it printed (hex) and its standard error.
fn run_and_kill(args: &[String], offset: Option<&str>) -> (Vec<u128>, String) {
    let mut child = floe(args, offset).spawn().unwrap();
    let (lines, reader) = collect_lines(&mut child);
    // Wait until it issues (a restart first waits out the clock), bounded.
    let started = Instant::now();
    while lines.lock().unwrap().is_empty() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "floe {args:?} exited early ({status}): {}",
                stderr_of(&mut child)
            );
        }
        assert!(started.elapsed() < Duration::from_secs(20), "no ID in 20 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100 + random_below(500)));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    reader.join().unwrap();
    let err = stderr_of(&mut child);
    let ids = lines
        .lock()
        .unwrap()
        .iter()
        // The last line may be cut short by the kill.
        .filter_map(|l| u128::from_str_radix(l, 16).ok().filter(|_| !l.is_empty()))
        .collect::<Vec<_>>();
    (ids, err)
}

/// One generator: a first run on the real clock, killed; restarts each further behind,
/// killed; then one an hour behind, refused. Zero repeats over every run.
fn kill_and_restart_behind(kind: &str, extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = ["gen", kind, "-n", "1000000000", "-o", "hex", "--state-dir"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(dir.path().join("state").display().to_string());
    args.extend(
        extra
            .iter()
            .map(|s| s.replace("{dir}", &dir.path().display().to_string())),
    );
    let mut seen = HashSet::new();
    let mut add = |ids: Vec<u128>, run: &str| {
        assert!(!ids.is_empty(), "{kind} {run}: no IDs");
        let n = ids.len();
        let repeats = ids.into_iter().filter(|id| !seen.insert(*id)).count();
        assert_eq!(repeats, 0, "{kind} {run}: {repeats} of {n} IDs repeated");
    };
    let (ids, _) = run_and_kill(&args, None);
    add(ids, "first run");
    for offset in BEHIND {
        let (ids, err) = run_and_kill(&args, Some(offset));
        assert!(
            err.contains("behind the last recorded time") && err.contains("waited"),
            "{kind} {offset}: the restart must say it waited: {err}"
        );
        add(ids, offset);
    }
    // An hour behind: refused, naming the clock's time and the bound.
    let out = floe(&args, Some("-3600s")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{kind} -1h: {err}");
    assert!(out.stdout.is_empty(), "{kind} -1h issued IDs");
    assert!(
        err.contains("refusing to start") && err.contains("time bound") && err.contains("now "),
        "{kind} -1h: {err}"
    );
    // A clean run on the real clock afterwards still repeats nothing.
    let mut clean = args.clone();
    clean[3] = "10000".into();
    let out = common::ok(floe(&clean, None).output().unwrap());
    add(
        out.lines()
            .map(|l| u128::from_str_radix(l, 16).unwrap())
            .collect(),
        "clean run",
    );
}

#[test]
fn snowflake_file_registry() {
    kill_and_restart_behind(
        "snowflake",
        &[
            "--registry",
            "file://{dir}/registry",
            "--service",
            "s",
            "--port",
            "7",
        ],
    );
}

#[test]
fn snowflake_static_id() {
    kill_and_restart_behind("snowflake", &["--registry", "static:5"]);
}

#[test]
fn snowflake_no_registry() {
    kill_and_restart_behind("snowflake", &["--worker", "9"]);
}

#[test]
fn sno_file_registry() {
    kill_and_restart_behind(
        "sno",
        &[
            "--registry",
            "file://{dir}/registry",
            "--service",
            "s",
            "--port",
            "7",
        ],
    );
}

#[test]
fn sno_partition_by_hand() {
    kill_and_restart_behind("sno", &["--partition", "0x0a0b"]);
}

#[test]
fn lexical_no_registry() {
    kill_and_restart_behind("lexical", &["--worker-id", "77"]);
}

#[test]
fn a_second_process_with_the_same_worker_id_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let args: Vec<String> = [
        "gen",
        "snowflake",
        "-n",
        "1000000000",
        "--worker",
        "3",
        "--state-dir",
        &state,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut first = floe(&args, None).spawn().unwrap();
    let (lines, reader) = collect_lines(&mut first);
    let started = Instant::now();
    while lines.lock().unwrap().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = floe(&args, None).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("another process") && err.contains("snowflake-3"),
        "{err}"
    );
    first.kill().unwrap();
    first.wait().unwrap();
    reader.join().unwrap();
}

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Takes IDs from `floe serve`'s HTTP API on one keep-alive connection until it fails.
fn take_ids(port: u16, sink: Arc<Mutex<Vec<i64>>>) {
    let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let request = "GET /v1/sequencer/ids/orders HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        if writer.write_all(request.as_bytes()).is_err() {
            return;
        }
        let mut length = None;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse::<usize>().ok();
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; length.unwrap_or(0)];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let body = String::from_utf8_lossy(&body);
        let Some(id) = body.split('"').nth(3).and_then(|n| n.parse::<i64>().ok()) else {
            return;
        };
        sink.lock().unwrap().push(id);
    }
}

fn serve(state: &str, port: u16, offset: Option<&str>) -> Child {
    let args: Vec<String> = [
        "serve",
        "--store",
        "ids=snowflake",
        "--state-dir",
        state,
        "--grpc",
        "off",
        "--http",
        &format!("127.0.0.1:{port}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    floe(&args, offset).spawn().unwrap()
}

/// Runs `floe serve` under load from two clients, then kills it with SIGKILL.
fn serve_and_kill(state: &str, offset: Option<&str>) -> (Vec<i64>, String) {
    let port = free_port();
    let mut child = serve(state, port, offset);
    let ids = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    // Wait for the listener (a restart first waits out the clock), bounded.
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "floe serve exited early ({status}): {}",
                stderr_of(&mut child)
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "not serving in 20 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let ids = ids.clone();
            std::thread::spawn(move || take_ids(port, ids))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300 + random_below(700)));
    child.kill().unwrap();
    child.wait().unwrap();
    for c in clients {
        c.join().unwrap();
    }
    let err = stderr_of(&mut child);
    let ids = std::mem::take(&mut *ids.lock().unwrap());
    (ids, err)
}

#[test]
fn snowflake_store_of_floe_serve() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let mut seen = HashSet::new();
    let mut add = |ids: Vec<i64>, run: &str| {
        assert!(!ids.is_empty(), "{run}: no IDs served");
        let n = ids.len();
        let repeats = ids.into_iter().filter(|id| !seen.insert(*id)).count();
        assert_eq!(repeats, 0, "{run}: {repeats} of {n} IDs repeated");
    };
    let (ids, _) = serve_and_kill(&state, None);
    add(ids, "first run");
    for offset in BEHIND {
        let (ids, err) = serve_and_kill(&state, Some(offset));
        assert!(
            err.contains("waited"),
            "{offset}: the restart must say it waited: {err}"
        );
        add(ids, offset);
    }
    let out = serve(&state, free_port(), Some("-3600s"))
        .wait_with_output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "-1h: {err}");
    assert!(
        err.contains("refusing to start") && err.contains("time bound"),
        "{err}"
    );
}
