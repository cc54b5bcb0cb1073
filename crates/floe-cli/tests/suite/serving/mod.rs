//! `floe serve` as a child process: start it, read its addresses, talk to it with plain
//! sockets, count its file descriptors, send it SIGTERM.
#![allow(dead_code)] // each test binary uses a part of them

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The longest [`Serve::start_on`] waits for the start-up line (a lease waiting out a previous
/// holder's session, a clock behind, included).
pub const START_WITHIN: Duration = Duration::from_secs(30);

/// A running `floe serve`.
pub struct Serve {
    pub child: Child,
    pub http: String,
    pub grpc: String,
    pub line: String,
}

impl Serve {
    /// Starts `floe serve ARGS --grpc 127.0.0.1:0 --http 127.0.0.1:0` and waits for its line.
    pub fn start(args: &[&str]) -> Serve {
        Serve::start_on("127.0.0.1:0", "127.0.0.1:0", args)
    }

    /// Starts `floe serve --grpc GRPC --http HTTP ARGS` and waits for its line, at most
    /// [`START_WITHIN`] (then kills it and panics with its standard error).
    pub fn start_on(grpc: &str, http: &str, args: &[&str]) -> Serve {
        Serve::start_with_env(grpc, http, args, &[])
    }

    /// [`Serve::start_on`] with environment variables set for the server.
    pub fn start_with_env(grpc: &str, http: &str, args: &[&str], env: &[(&str, &str)]) -> Serve {
        // A working directory of its own: a server given no --state-dir keeps `.floe` there,
        // never beside another test's.
        static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cwd = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("serve-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&cwd).unwrap();
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("floe"))
            .current_dir(&cwd)
            .arg("serve")
            .args(["--grpc", grpc, "--http", http])
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let read = BufReader::new(stdout).read_line(&mut line).map(|_| line);
            let _ = tx.send(read);
        });
        let Ok(line) = rx.recv_timeout(START_WITHIN) else {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "floe serve printed no line within {START_WITHIN:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let line = line.unwrap();
        if !line.starts_with("floe serving") {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "floe serve did not start: {line:?} {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let addr = |name: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .unwrap()
                .to_string()
        };
        Serve {
            http: addr("http="),
            grpc: addr("grpc="),
            line: line.clone(),
            child,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its open sockets (the descriptors connections use: not the files its time bounds,
    /// registry and cache open and close in the background).
    pub fn sockets(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy().starts_with("socket:"))
            .count()
    }

    /// Sends SIGTERM.
    pub fn term(&self) {
        let pid = i32::try_from(self.pid()).unwrap();
        assert!(Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap()
            .success());
    }

    /// Waits for the process to exit, at most `within`; returns its status, standard error
    /// and how long it took. Kills it when it overruns.
    pub fn wait(mut self, within: Duration) -> (std::process::ExitStatus, String, Duration) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // (Empty when the caller took standard error to read it as it comes.)
                let mut err = String::new();
                if let Some(mut stderr) = self.child.stderr.take() {
                    stderr.read_to_string(&mut err).unwrap();
                }
                return (status, err, started.elapsed());
            }
            if started.elapsed() > within {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("floe serve did not exit within {within:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// gRPC health's SERVING and NOT_SERVING.
pub const SERVING: i32 = 1;
pub const NOT_SERVING: i32 = 2;

/// The gRPC health status of `service` on `server`.
pub fn health(server: &Serve, service: &str) -> i32 {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
            .unwrap()
            .connect()
            .await
            .unwrap();
        tonic_health::pb::health_client::HealthClient::new(channel)
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status
    })
}

/// Waits (up to 10 s) until the gRPC health of `service` is `want`: the health service follows
/// readiness on a watch of its own, a moment after `/readyz` does. Panics with the last state.
pub fn wait_health(server: &Serve, service: &str, want: i32) {
    let started = std::time::Instant::now();
    loop {
        let got = health(server, service);
        if got == want {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "gRPC health of {service:?}: {got}, not {want}, after 10 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One HTTP/1.1 request with `Connection: close`: its status and body.
pub fn http(addr: &str, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    if text.len() < 12 {
        return Err(std::io::Error::other(format!("no answer: {text:?}")));
    }
    let code = text[9..12].parse().map_err(std::io::Error::other)?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((code, body))
}

/// The next STRONG ID of `key` in `store`.
pub fn next_strong(addr: &str, store: &str, key: &str) -> std::io::Result<i64> {
    let (code, body) = http(
        addr,
        "POST",
        &format!("/v1/sequencer/{store}/{key}?increment=strong"),
    )?;
    if code != 200 {
        return Err(std::io::Error::other(format!("{code}: {body}")));
    }
    let v: serde_json::Value = serde_json::from_str(&body).map_err(std::io::Error::other)?;
    v["next_id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(body))
}

/// The client preface of HTTP/2 and an empty SETTINGS frame: a connection that then never
/// sends a request.
pub const H2_PREFACE: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// An HTTP/2 HEADERS frame (stream 1, END_HEADERS, no END_STREAM) of a GetNextId request to
/// `authority`: a gRPC request whose body never comes. HPACK by hand: indexed :method POST and
/// :scheme http, literal :path, :authority and content-type, none longer than 126 bytes.
pub fn grpc_headers_without_body(authority: &str) -> Vec<u8> {
    fn literal(block: &mut Vec<u8>, value: &str) {
        block.push(u8::try_from(value.len()).unwrap());
        block.extend_from_slice(value.as_bytes());
    }
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
    block.push(0x04); // :path, name from the static table, value literal
    literal(&mut block, "/spec.proto.runtime.v1.Runtime/GetNextId");
    block.push(0x01); // :authority
    literal(&mut block, authority);
    block.push(0x00); // a new name
    literal(&mut block, "content-type");
    literal(&mut block, "application/grpc");
    block.push(0x00);
    literal(&mut block, "te");
    literal(&mut block, "trailers");
    let len = u32::try_from(block.len()).unwrap().to_be_bytes();
    let mut frame = vec![len[1], len[2], len[3], 0x1, 0x4, 0, 0, 0, 1];
    frame.extend_from_slice(&block);
    frame
}

/// Whether the server has closed `s` (end of file or reset) within `within`.
pub fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    while started.elapsed() < within {
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return true,
        }
    }
    false
}

impl Drop for Serve {
    /// A server whose test ended early (a failed assertion) is killed, so that it holds no
    /// port, lock or worker ID into the tests that follow.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
