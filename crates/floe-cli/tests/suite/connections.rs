//! Idle sockets cannot use up `floe serve`'s file descriptors: each listener holds at most
//! --max-connections, the rest wait in the backlog, idle ones are closed by the header timeout,
//! and a real client is served once places free up.

use crate::serving;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use serving::next_strong;

#[test]
fn idle_sockets_beyond_the_cap_wait_and_file_descriptors_stay_bounded() {
    let server = serving::start(&[
        "--store",
        "mem=memory",
        "--max-connections",
        "4",
        "--header-timeout-secs",
        "1",
        "--idle-timeout-secs",
        "1",
    ]);
    // Sockets, not every descriptor: the server's time bound writers, heartbeats and cache
    // open files now and then (a flake when all descriptors were counted).
    let baseline = server.sockets();
    // Twenty idle sockets on each port: four accepted on each, the rest wait.
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(TcpStream::connect(&server.http).unwrap());
        idle.push(TcpStream::connect(&server.grpc).unwrap());
    }
    let bound = baseline + 2 * 4 + 2;
    let started = Instant::now();
    let mut most = 0;
    let client = {
        let addr = server.http.clone();
        std::thread::spawn(move || next_strong(&addr, "mem", "k"))
    };
    while !client.is_finished() {
        most = most.max(server.sockets());
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the client was not served"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(client.join().unwrap().unwrap(), 1);
    let took = started.elapsed();
    assert!(
        most <= bound,
        "{most} sockets open, {baseline} before the idle sockets"
    );
    // The client waited behind the idle sockets that came first: at least four rounds of
    // one second each on the HTTP port.
    assert!(took >= Duration::from_millis(3500), "{took:?}");
    server.term();
    let (status, err, _) = server.wait(Duration::from_secs(10));
    assert!(status.success(), "{status:?}: {err}");
    drop(idle);
}
