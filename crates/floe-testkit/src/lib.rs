//! What floe's tests against real servers share. scripts/test.sh starts the servers and
//! exports `FLOE_TEST_<SERVER>` (its address or URL), `_PID` and `_START` (a script that
//! starts the same server again on the same data) for each. [`process`] runs `floe` itself,
//! [`http`] talks to it on plain sockets.
#![deny(missing_docs)]

pub mod history;
pub mod http;
pub mod process;
pub mod proxy;

use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A variable scripts/test.sh sets (a server's address, pid or start script). A test whose
/// server is missing fails: in CI nothing skips.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the suite with scripts/test.sh, which starts the servers")
    })
}

/// A name no other test (nor an earlier run on the same server) uses:
/// `{prefix}-{pid}-{nanos}-{n}`.
#[allow(clippy::disallowed_methods)] // the wall clock as a name, not as time
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}-{n}", std::process::id())
}

/// A free loopback port (bound, then released: for a server to bind, or as an address where
/// nothing listens).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A server a test started again itself, stopped when the test ends however it ends.
#[derive(Debug)]
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Kills the process `pid` and its children (PostgreSQL's backends) with SIGKILL, as a crash
/// of the machine would, and waits until it is gone.
pub fn kill9(pid: &str) {
    let _ = Command::new("pkill").args(["-9", "-P", pid]).status();
    let status = Command::new("kill").args(["-9", pid]).status().unwrap();
    assert!(status.success(), "kill -9 {pid}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
    {
        assert!(Instant::now() < deadline, "{pid} still alive");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts a server again with the start script scripts/test.sh wrote for it.
pub fn restart(start_script: &str) -> Server {
    Server(Command::new("bash").arg(start_script).spawn().unwrap())
}

/// A TCP proxy on a free loopback port in front of a server (plain threads, no runtime):
/// a registry or store URL through it is the same URL while the proxy runs, and an
/// unreachable one once it is dropped (the listener closes, every connection is cut).
#[derive(Debug)]
pub struct Proxy {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// A proxy to `target` (`host:port`).
    pub fn start(target: &str) -> Proxy {
        Proxy::start_at("127.0.0.1:0", target)
    }

    /// A proxy to `target` listening on `addr` (a dropped proxy's address: the same URL
    /// reaches the server again).
    pub fn start_at(addr: &str, target: &str) -> Proxy {
        use std::net::{Shutdown, TcpListener, TcpStream};
        use std::sync::atomic::AtomicBool;
        use std::sync::{Arc, Mutex};
        let listener = TcpListener::bind(addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let (target, flag) = (target.to_string(), stop.clone());
        let accept = std::thread::spawn(move || {
            let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        let Ok(server) = TcpStream::connect(&target) else {
                            continue;
                        };
                        for (mut from, mut to) in [
                            (client.try_clone().unwrap(), server.try_clone().unwrap()),
                            (server.try_clone().unwrap(), client.try_clone().unwrap()),
                        ] {
                            std::thread::spawn(move || {
                                let _ = std::io::copy(&mut from, &mut to);
                                let _ = to.shutdown(Shutdown::Both);
                            });
                        }
                        open.lock().unwrap().extend([client, server]);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            for s in open.lock().unwrap().drain(..) {
                let _ = s.shutdown(Shutdown::Both);
            }
        });
        Proxy {
            addr,
            stop,
            accept: Some(accept),
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// PEM files of a private CA and of a server certificate it signed (for `localhost` and
/// 127.0.0.1), made by [`test_ca`].
#[derive(Debug, Clone)]
pub struct Certs {
    /// The CA's certificate (what clients trust).
    pub ca: std::path::PathBuf,
    /// The server's certificate.
    pub cert: std::path::PathBuf,
    /// The server's private key.
    pub key: std::path::PathBuf,
}

/// A private CA and a server certificate it signed for `localhost` and 127.0.0.1, written as
/// `ca.pem`, `cert.pem` and `key.pem` in `dir` (rustls refuses a CA certificate as a server's,
/// so the two are separate).
pub fn test_ca(dir: &std::path::Path) -> Certs {
    test_ca_named(dir, "", None)
}

/// A client certificate with the common name `name`, signed by the CA whose certificate and
/// key are the PEM files `ca` and `ca_key`, written over `cert` and `key`.
pub fn client_cert(
    ca: &std::path::Path,
    ca_key: &std::path::Path,
    name: &str,
    cert: &std::path::Path,
    key: &std::path::Path,
) {
    let ca_key = rcgen::KeyPair::from_pem(&std::fs::read_to_string(ca_key).unwrap()).unwrap();
    let issuer =
        rcgen::Issuer::from_ca_cert_pem(&std::fs::read_to_string(ca).unwrap(), ca_key).unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let pair = rcgen::KeyPair::generate().unwrap();
    let signed = params.signed_by(&pair, &issuer).unwrap();
    std::fs::write(cert, signed.pem()).unwrap();
    std::fs::write(key, pair.serialize_pem()).unwrap();
}

/// Midnight UTC of a day, for [`test_ca_named`]'s validity.
pub fn day(year: i32, month: u8, day: u8) -> time::OffsetDateTime {
    rcgen::date_time_ymd(year, month, day)
}

/// [`test_ca`] with every file name prefixed by `prefix` (`b-ca.pem`, ...), and the server
/// certificate valid from `validity.0` to `validity.1` when given (`rcgen::date_time_ymd`
/// makes dates). A new CA each call.
pub fn test_ca_named(
    dir: &std::path::Path,
    prefix: &str,
    validity: Option<(time::OffsetDateTime, time::OffsetDateTime)>,
) -> Certs {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "floe test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    if let Some((not_before, not_after)) = validity {
        params.not_before = not_before;
        params.not_after = not_after;
    }
    let cert = params.signed_by(&key, &ca).unwrap();
    let certs = Certs {
        ca: dir.join(format!("{prefix}ca.pem")),
        cert: dir.join(format!("{prefix}cert.pem")),
        key: dir.join(format!("{prefix}key.pem")),
    };
    std::fs::write(&certs.ca, ca.as_ref().pem()).unwrap();
    std::fs::write(&certs.cert, cert.pem()).unwrap();
    std::fs::write(&certs.key, key.serialize_pem()).unwrap();
    certs
}

/// A small seeded random number generator (splitmix64) for tests that must replay: the same
/// seed gives the same numbers on every machine.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// A duration of `lo..=hi` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }

    /// `true` with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}
