//! A `floe` process as the tests run it (most often `floe serve`): spawned from a command the
//! test sets up, its standard output and standard error read as they come (so that a chatty
//! server never blocks on a full pipe), its listening addresses read from its start-up line,
//! signals, SIGKILL, a bounded wait, and its log. Killed when dropped, so that a test that
//! fails early leaves no process holding a port, a lock or a worker ID.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The longest [`Floe::start`] waits for the start-up line (a lease waiting out a previous
/// holder's session, a clock behind, included).
pub const START_WITHIN: Duration = Duration::from_secs(30);

/// The `floe` binary to run: `FLOE_BIN` when it is set (scripts/faults.sh runs the release
/// build), else `built` (the caller's own build, e.g. `assert_cmd::cargo::cargo_bin("floe")`).
pub fn floe_bin(built: impl Into<PathBuf>) -> PathBuf {
    std::env::var_os("FLOE_BIN").map_or_else(|| built.into(), PathBuf::from)
}

/// A running `floe` process.
#[derive(Debug)]
pub struct Floe {
    /// Its start-up line (`floe serving grpc=ADDR http=ADDR stores=...`), once
    /// [`Floe::wait_serving`] read it; empty before.
    pub line: String,
    /// The gRPC address of the start-up line (`off` when it serves none).
    pub grpc: String,
    /// The HTTP address of the start-up line (`off` when it serves none).
    pub http: String,
    child: Mutex<Child>,
    pid: u32,
    /// Lines of standard output, the first one first.
    stdout: Receiver<String>,
    /// Lines of standard error so far.
    stderr: Arc<Mutex<Vec<String>>>,
    stderr_reader: Option<JoinHandle<()>>,
}

/// Reads `pipe` line by line until it ends, giving each line (lossy UTF-8, without its end)
/// to `sink`.
fn read_lines(
    pipe: impl Read + Send + 'static,
    mut sink: impl FnMut(String) + Send + 'static,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(pipe);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    let text = line.strip_suffix(b"\n").unwrap_or(&line);
                    sink(String::from_utf8_lossy(text).into_owned());
                }
            }
        }
    })
}

impl Floe {
    /// Spawns `command` as the caller set it up (binary, working directory, arguments,
    /// environment), with no standard input, and returns at once.
    pub fn spawn(mut command: Command) -> Floe {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
        let (tx, stdout) = std::sync::mpsc::channel();
        read_lines(child.stdout.take().unwrap(), move |l| {
            let _ = tx.send(l);
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let lines = Arc::clone(&stderr);
        let stderr_reader = read_lines(child.stderr.take().unwrap(), move |l| {
            lines.lock().unwrap().push(l);
        });
        Floe {
            line: String::new(),
            grpc: String::new(),
            http: String::new(),
            pid: child.id(),
            child: Mutex::new(child),
            stdout,
            stderr,
            stderr_reader: Some(stderr_reader),
        }
    }

    /// Spawns `command` (a `floe serve`) and waits for its start-up line, at most
    /// [`START_WITHIN`]; panics (the process killed) with its standard error when none came.
    pub fn start(command: Command) -> Floe {
        let mut floe = Floe::spawn(command);
        if let Err(e) = floe.wait_serving(START_WITHIN) {
            panic!("{e}");
        }
        floe
    }

    /// Waits at most `within` for the first line of standard output, which must be the
    /// start-up line `floe serving grpc=ADDR http=ADDR ...`: sets [`line`](Self::line),
    /// [`grpc`](Self::grpc) and [`http`](Self::http). Otherwise kills the process and says why,
    /// with its standard error.
    pub fn wait_serving(&mut self, within: Duration) -> Result<(), String> {
        let line = match self.stdout.recv_timeout(within) {
            Ok(line) if line.starts_with("floe serving") => line,
            Ok(line) => {
                self.kill9();
                return Err(format!(
                    "floe serve did not start: {line:?} {}",
                    self.stderr()
                ));
            }
            Err(RecvTimeoutError::Timeout) => {
                self.kill9();
                return Err(format!(
                    "floe serve printed no line within {within:?}: {}",
                    self.stderr()
                ));
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.wait_timeout(Duration::from_secs(10));
                return Err(format!(
                    "floe serve exited ({status:?}) without its line: {}",
                    self.stderr()
                ));
            }
        };
        let addr = |name: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .unwrap_or_default()
                .to_string()
        };
        self.grpc = addr("grpc=");
        self.http = addr("http=");
        self.line = line;
        Ok(())
    }

    /// Waits until something accepts connections on `addr` (`Ok`), or the process exits
    /// (`Err` with its status), at most `limit` (`Err` too). The process is left as it is.
    pub fn wait_listening(&self, addr: &str, limit: Duration) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if std::net::TcpStream::connect(addr).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.try_wait() {
                return Err(format!("exited ({status})"));
            }
            if started.elapsed() > limit {
                return Err(format!("not listening after {limit:?}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Its process ID.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its exit status, if it has exited (reaped then: no signal goes to its pid after that).
    pub fn try_wait(&self) -> Option<ExitStatus> {
        self.child.lock().unwrap().try_wait().unwrap()
    }

    /// Sends `signal` (`TERM`, `KILL`, `STOP`, `CONT`, `HUP`...) with `kill(1)`, unless the
    /// process has already exited.
    pub fn signal(&self, signal: &str) {
        // The lock keeps the process from being reaped (its pid reused) before the signal.
        let mut child = self.child.lock().unwrap();
        if child.try_wait().unwrap().is_some() {
            return;
        }
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {}", self.pid);
    }

    /// Sends SIGTERM.
    pub fn term(&self) {
        self.signal("TERM");
    }

    /// SIGKILL, as a crash would, and waits until it is gone.
    pub fn kill9(&self) {
        let mut child = self.child.lock().unwrap();
        let _ = child.kill();
        child.wait().unwrap();
    }

    /// Waits at most `within` for the process to exit: its status, or `None` (still running).
    pub fn wait_timeout(&self, within: Duration) -> Option<ExitStatus> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            if started.elapsed() > within {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for the process to exit, at most `within`; returns its status, standard error and
    /// how long it took. Kills it and panics when it overruns.
    pub fn wait(self, within: Duration) -> (ExitStatus, String, Duration) {
        let started = Instant::now();
        let Some(status) = self.wait_timeout(within) else {
            self.kill9();
            panic!("floe did not exit within {within:?}: {}", self.stderr());
        };
        let took = started.elapsed();
        (status, self.stderr(), took)
    }

    /// The lines it wrote to standard error so far.
    pub fn log(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// Its standard error as text, each line ended by `\n`: all of it once the process has
    /// exited (the reader is given up to 10 s to reach the end of the pipe).
    pub fn stderr(&self) -> String {
        if self.try_wait().is_some() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while self
                .stderr_reader
                .as_ref()
                .is_some_and(|r| !r.is_finished())
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let mut text = String::new();
        for line in self.stderr.lock().unwrap().iter() {
            text.push_str(line);
            text.push('\n');
        }
        text
    }

    /// Its open sockets (the descriptors connections use: not the files its time bounds,
    /// registry and cache open and close in the background).
    pub fn sockets(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy().starts_with("socket:"))
            .count()
    }
}

impl Drop for Floe {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Ok(None) = child.try_wait() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
