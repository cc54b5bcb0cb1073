//! Small clients of floe's HTTP listener on plain sockets (no HTTP library between the test
//! and the bytes): a one-shot request, the next STRONG ID, a GET on a kept-alive connection,
//! and the raw pieces the connection tests send.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// What a request got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The status line and the headers, without the blank line that ends them.
    pub head: String,
    /// The body, as text.
    pub body: String,
}

/// One HTTP/1.1 request: `Host: {host}` unless `headers` names the host, `Content-Length: 0`,
/// `headers` (each `Name: value`), `Connection: close`. Waits for the whole answer (at most 30 s
/// without a byte).
pub fn request(
    addr: &str,
    host: &str,
    method: &str,
    path: &str,
    headers: &[&str],
) -> std::io::Result<Answer> {
    request_with_body(addr, host, method, path, headers, "")
}

/// [`request`] with `body` sent after the head (its `Content-Length` set).
pub fn request_with_body(
    addr: &str,
    host: &str,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &str,
) -> std::io::Result<Answer> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let named = headers
        .iter()
        .any(|h| h.to_ascii_lowercase().starts_with("host:"));
    let mut text = format!("{method} {path} HTTP/1.1\r\n");
    if !named {
        text.push_str(&format!("Host: {host}\r\n"));
    }
    text.push_str(&format!("Content-Length: {}\r\n", body.len()));
    for h in headers {
        text.push_str(h);
        text.push_str("\r\n");
    }
    text.push_str("Connection: close\r\n\r\n");
    text.push_str(body);
    s.write_all(text.as_bytes())?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    if text.len() < 12 {
        return Err(std::io::Error::other(format!("no answer: {text:?}")));
    }
    let status = text[9..12].parse().map_err(std::io::Error::other)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Ok(Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    })
}

/// One HTTP/1.1 request to `Host: localhost` with `Connection: close`: its status and body.
pub fn http(addr: &str, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    request(addr, "localhost", method, path, &[]).map(|a| (a.status, a.body))
}

/// The next STRONG ID of `key` in `store`; an error unless the answer is a 200 with one.
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

/// One HTTP/1.1 GET on a kept-alive connection (`writer` and a reader of the same socket):
/// the status and the body, or `None` when the connection failed.
pub fn get(
    writer: &mut TcpStream,
    reader: &mut BufReader<TcpStream>,
    path: &str,
) -> Option<(u16, String)> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    writer.write_all(request.as_bytes()).ok()?;
    let mut status_line = String::new();
    if reader.read_line(&mut status_line).ok()? == 0 {
        return None;
    }
    let status = status_line.split(' ').nth(1)?.parse().ok()?;
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().ok()?;
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((status, String::from_utf8_lossy(&body).into_owned()))
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
