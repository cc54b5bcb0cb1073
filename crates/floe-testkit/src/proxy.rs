//! A TCP proxy between a client and a server that a test can cut, as a network partition
//! would, in either of the two ways a partition looks from the client:
//!
//! - [`Cut::Refuse`]: every connection is reset (RST) and new ones are refused (the port is
//!   closed): the client learns at once that it is cut off.
//! - [`Cut::Blackhole`]: connections stay open and new ones are accepted, but nothing gets
//!   through in either direction and nothing ever closes: the client learns nothing until its
//!   own timeouts run out. Bytes are not dropped: they wait in the kernel's buffers (as TCP
//!   retransmits them across a real partition) and arrive late once it heals.
//!
//! [`Proxy::heal`] lets traffic through again (connections cut by `Refuse` stay closed: the
//! client reconnects; connections held by `Blackhole` carry what waited, then the rest, as
//! after a healed partition whose TCP connections outlived it).
//!
//! Plain threads, no runtime: it serves synchronous and asynchronous tests alike.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How the proxy cuts the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Connections reset, new ones refused.
    Refuse,
    /// Bytes vanish, nothing closes.
    Blackhole,
}

const PASS: u8 = 0;
const REFUSE: u8 = 1;
const BLACKHOLE: u8 = 2;

/// How often the proxy's threads look at its mode.
const TICK: Duration = Duration::from_millis(10);

struct Shared {
    target: String,
    mode: AtomicU8,
    stopped: AtomicBool,
    /// Every connection the proxy made, both ends, to reset at a `Refuse` cut.
    links: Mutex<Vec<(TcpStream, TcpStream)>>,
}

/// A proxy on a loopback port to a target `host:port`; stopped when dropped.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("target", &self.shared.target)
            .field("mode", &self.shared.mode.load(Ordering::SeqCst))
            .finish()
    }
}

impl Proxy {
    /// A proxy to `target` on a free loopback port.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().expect("the proxy's address");
        let shared = Arc::new(Shared {
            target: target.to_string(),
            mode: AtomicU8::new(PASS),
            stopped: AtomicBool::new(false),
            links: Mutex::new(Vec::new()),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || accept(listener, addr, &shared))
        };
        Proxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// Where clients connect: `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Cuts the path, the way `how` says.
    pub fn cut(&self, how: Cut) {
        match how {
            Cut::Refuse => {
                // Linger 0 first: when the pumps see the mode and let go of their ends, the
                // sockets close with a reset.
                for (a, b) in self.links().iter() {
                    reset(a);
                    reset(b);
                }
                self.shared.mode.store(REFUSE, Ordering::SeqCst);
                self.links().clear();
            }
            Cut::Blackhole => self.shared.mode.store(BLACKHOLE, Ordering::SeqCst),
        }
    }

    /// Lets traffic through again.
    pub fn heal(&self) {
        self.shared.mode.store(PASS, Ordering::SeqCst);
    }

    fn links(&self) -> std::sync::MutexGuard<'_, Vec<(TcpStream, TcpStream)>> {
        self.shared
            .links
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        for (a, b) in self.links().drain(..) {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

/// Makes the connection end with a reset when its last handle is closed (SO_LINGER 0).
fn reset(s: &TcpStream) {
    let _ = rustix::net::sockopt::set_socket_linger(s, Some(Duration::ZERO));
}

/// Accepts connections; while refusing, the port is closed (the listener dropped) and bound
/// again on healing.
fn accept(listener: TcpListener, addr: SocketAddr, shared: &Arc<Shared>) {
    let mut listener = Some(listener);
    while !shared.stopped.load(Ordering::SeqCst) {
        let mode = shared.mode.load(Ordering::SeqCst);
        if mode == REFUSE {
            listener = None; // connections to the port are refused
            std::thread::sleep(TICK);
            continue;
        }
        let l = match &listener {
            Some(l) => l,
            None => match TcpListener::bind(addr) {
                Ok(l) => listener.insert(l),
                Err(_) => {
                    std::thread::sleep(TICK);
                    continue;
                }
            },
        };
        let _ = l.set_nonblocking(true);
        match l.accept() {
            Ok((inbound, _)) => {
                let _ = inbound.set_nonblocking(false);
                link(inbound, shared);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(TICK),
            Err(_) => std::thread::sleep(TICK),
        }
    }
}

/// Connects `inbound` to the target and pumps both ways, one thread each way.
fn link(inbound: TcpStream, shared: &Arc<Shared>) {
    let shared = Arc::clone(shared);
    std::thread::spawn(move || {
        // While blackholed, a new connection is accepted and held: nothing reaches the target.
        while shared.mode.load(Ordering::SeqCst) == BLACKHOLE {
            if shared.stopped.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(TICK);
        }
        if shared.mode.load(Ordering::SeqCst) == REFUSE {
            reset(&inbound);
            return;
        }
        let Ok(outbound) = TcpStream::connect(&shared.target) else {
            reset(&inbound);
            return;
        };
        let (Ok(a), Ok(b)) = (inbound.try_clone(), outbound.try_clone()) else {
            return;
        };
        shared
            .links
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((a, b));
        let back = {
            let (shared, from, to) = (
                Arc::clone(&shared),
                outbound.try_clone(),
                inbound.try_clone(),
            );
            std::thread::spawn(move || {
                if let (Ok(from), Ok(to)) = (from, to) {
                    pump(from, to, &shared);
                }
            })
        };
        pump(inbound, outbound, &shared);
        let _ = back.join();
    });
}

/// Copies `from` to `to` until either closes, the proxy stops, or a `Refuse` cut (then it lets
/// go of its ends without a word: the cut set them to reset). While blackholed it reads
/// nothing: what is sent waits in the kernel's buffers.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared) {
    let _ = from.set_read_timeout(Some(TICK));
    let mut buf = [0u8; 16 * 1024];
    loop {
        match shared.mode.load(Ordering::SeqCst) {
            REFUSE => return,
            BLACKHOLE => {
                if shared.stopped.load(Ordering::SeqCst) {
                    break;
                }
                std::thread::sleep(TICK);
                continue;
            }
            _ => {}
        }
        if shared.stopped.load(Ordering::SeqCst) {
            break;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // Read while passing: forwarded even if a blackhole began meanwhile (it was
                // on its way).
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// An echo server on a loopback port.
    fn echo() -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn round_trip(s: &mut TcpStream, wait: Duration) -> std::io::Result<Vec<u8>> {
        s.set_read_timeout(Some(wait))?;
        s.write_all(b"ping")?;
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf)?;
        Ok(buf.to_vec())
    }

    #[test]
    fn passes_refuses_blackholes_and_heals() {
        let proxy = Proxy::start(&echo());
        let mut s = TcpStream::connect(proxy.addr()).unwrap();
        assert_eq!(round_trip(&mut s, Duration::from_secs(2)).unwrap(), b"ping");

        // Blackhole: the connection stays open, nothing comes back, nothing closes.
        proxy.cut(Cut::Blackhole);
        std::thread::sleep(Duration::from_millis(50));
        let e = round_trip(&mut s, Duration::from_millis(300)).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{e}"
        );
        // A new connection is accepted, and held.
        let mut fresh = TcpStream::connect(proxy.addr()).unwrap();
        assert!(round_trip(&mut fresh, Duration::from_millis(300)).is_err());
        // Healed: what was sent meanwhile arrives late, on both connections, then the rest.
        proxy.heal();
        let mut buf = [0u8; 4];
        for c in [&mut s, &mut fresh] {
            c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            c.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"ping", "the late bytes");
        }
        s.write_all(b"pong").unwrap();
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"pong");

        // Refuse: the connection is reset, new ones are refused at once.
        proxy.cut(Cut::Refuse);
        let started = Instant::now();
        let mut buf = [0u8; 1];
        let read = s.read(&mut buf);
        assert!(
            matches!(&read, Err(e) if e.kind() == ErrorKind::ConnectionReset),
            "{read:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
        let refused = TcpStream::connect(proxy.addr()).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::ConnectionRefused, "{refused}");
        assert!(started.elapsed() < Duration::from_secs(2));
        // Healed: new connections go through again.
        proxy.heal();
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut again = loop {
            match TcpStream::connect(proxy.addr()) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => std::thread::sleep(TICK),
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(
            round_trip(&mut again, Duration::from_secs(2)).unwrap(),
            b"ping"
        );
    }
}
