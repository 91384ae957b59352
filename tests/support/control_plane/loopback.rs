//! Plain HTTP on loopback, enough for etcd's JSON gateway and the sidecar's probes and metrics.

use std::io::Read as _;
use std::time::Duration;

/// A plain-HTTP GET on loopback answered 200 (etcd's /health, the sidecar's probes).
pub fn http_ok(port: u16, path: &str) -> bool {
    http_get(port, path).is_some()
}

/// The body of the HTTP answer read from `stream`, if it is a 200.
fn ok_body(stream: std::net::TcpStream) -> Option<String> {
    ok_answer(stream).map(|(_, body)| body)
}

/// (headers, body) of the HTTP answer read from `stream`, if it is a 200.
fn ok_answer(mut stream: std::net::TcpStream) -> Option<(String, String)> {
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    if !(answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200")) {
        return None;
    }
    answer.split_once("\r\n\r\n").map(|(h, b)| (h.to_string(), b.to_string()))
}

/// The body of a 200 answer to a JSON POST of `body` to `path` on loopback `port`.
pub fn http_post(port: u16, path: &str, body: &str) -> Option<String> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    write!(
        s,
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    ok_body(s)
}

/// The body of a 200 answer to GET `path` on loopback `port`; None for anything else.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    http_get_with(port, path, "").map(|(_, body)| body)
}

/// (headers, body) of a 200 answer to GET `path` with extra request `headers` (each line ending
/// in \r\n), e.g. a scraper's Accept.
pub fn http_get_with(port: u16, path: &str, headers: &str) -> Option<(String, String)> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{headers}\r\n").ok()?;
    ok_answer(s)
}

/// (status code, body) of a GET `path` on loopback `port`, whatever the status (a probe's 503
/// says why in its body).
pub fn http_get_status(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let code = answer.split_whitespace().nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((code, body))
}
