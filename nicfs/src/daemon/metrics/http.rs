//! A tiny blocking HTTP/1.1 responder for `GET /metrics` on a loopback TCP port, on one
//! thread of its own. It is not a web server: it reads one request head per connection,
//! answers it and closes the connection (`Connection: close`).
//!
//! * **Bounded.** A request head longer than [`MAX_REQUEST`] bytes is answered 431; one not
//!   complete within [`REQUEST_DEADLINE`] (a client that trickles bytes included) is
//!   answered 408; a write that blocks longer than [`WRITE_TIMEOUT`] gives up. Connections
//!   are served one at a time, so a slow scraper holds up other scrapers by at most those
//!   times and never holds up the daemon.
//! * **Tolerant.** Only the request line is looked at: `METHOD TARGET HTTP/1.x`. `GET` and
//!   `HEAD` of `/metrics` (a query string is ignored) get the metrics; another path 404,
//!   another method 405, anything that is not such a line (binary, wrong number of words,
//!   not HTTP/1) 400. Headers are skipped and a body is never read. Nothing a peer sends
//!   can panic it: [`parse`] is total over byte strings.
//! * **Loopback only.** [`bind`] refuses any address outside 127.0.0.0/8 and ::1 (the
//!   argument parser refuses them first): the metrics carry no secret, but the daemon
//!   listens on nothing the network can reach.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The largest request head read (request line and headers).
pub(crate) const MAX_REQUEST: usize = 8 << 10;
/// How long a client has to send its whole request head.
pub(crate) const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// How long one write of the answer may block.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// The path served.
pub(crate) const PATH: &str = "/metrics";
/// What `prometheus-client`'s text encoder writes: OpenMetrics text.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What a request head asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// `GET` or `HEAD` (then `head_only`) of [`PATH`].
    Metrics { head_only: bool },
    /// A well-formed request for another path.
    NotFound { head_only: bool },
    /// A well-formed request with another method.
    MethodNotAllowed,
    /// Not an HTTP/1 request line; why.
    Bad(&'static str),
}

/// Reads the request line of `head` (the bytes up to its first line feed).
pub(crate) fn parse(head: &[u8]) -> Request {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Ok(line) = std::str::from_utf8(line) else { return Request::Bad("the request line is not text") };
    let mut words = line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (words.next(), words.next(), words.next(), words.next())
    else {
        return Request::Bad("expected METHOD TARGET HTTP/1.x");
    };
    if method.is_empty() || target.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Request::Bad("expected METHOD TARGET HTTP/1.x");
    }
    if !matches!(version, "HTTP/1.0" | "HTTP/1.1") {
        return Request::Bad("only HTTP/1.0 and HTTP/1.1 are spoken");
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Request::MethodNotAllowed,
    };
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    if path == PATH {
        Request::Metrics { head_only }
    } else {
        Request::NotFound { head_only }
    }
}

/// Why no request head could be read.
#[derive(Debug, PartialEq, Eq)]
enum ReadFailure {
    /// The peer closed or failed before sending anything: nothing to answer.
    Gone,
    /// The peer closed or stopped mid-head.
    Truncated,
    TooLarge,
    TimedOut,
}

/// Where a request head ends in `buf` (after its blank line), if it does.
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Reads a request head, bounded in size and time.
fn read_head(stream: &mut TcpStream) -> Result<Vec<u8>, ReadFailure> {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Err(ReadFailure::TimedOut);
        }
        match stream.read(&mut chunk) {
            Ok(0) if buf.is_empty() => return Err(ReadFailure::Gone),
            Ok(0) => return Err(ReadFailure::Truncated),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if let Some(end) = head_end(&buf) {
                    buf.truncate(end);
                    return Ok(buf);
                }
                if buf.len() >= MAX_REQUEST {
                    return Err(ReadFailure::TooLarge);
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(ReadFailure::TimedOut)
            }
            Err(_) if buf.is_empty() => return Err(ReadFailure::Gone),
            Err(_) => return Err(ReadFailure::Truncated),
        }
    }
}

/// An answer: status code, reason, content type, body, and whether to send the body.
struct Answer {
    code: u16,
    reason: &'static str,
    content_type: &'static str,
    body: String,
    head_only: bool,
    allow: bool,
}

impl Answer {
    fn text(code: u16, reason: &'static str, body: impl Into<String>) -> Answer {
        let mut body = body.into();
        body.push('\n');
        Answer { code, reason, content_type: "text/plain; charset=utf-8", body, head_only: false, allow: false }
    }

    fn bytes(&self) -> Vec<u8> {
        let allow = if self.allow { "Allow: GET, HEAD\r\n" } else { "" };
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
            self.code,
            self.reason,
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        if !self.head_only {
            out.extend_from_slice(self.body.as_bytes());
        }
        out
    }
}

/// The answer to a request head; `metrics` renders the exposition.
fn answer(head: &[u8], metrics: &dyn Fn() -> Result<String, String>) -> Answer {
    match parse(head) {
        Request::Metrics { head_only } => match metrics() {
            Ok(body) => Answer { code: 200, reason: "OK", content_type: CONTENT_TYPE, body, head_only, allow: false },
            Err(e) => {
                tracing::warn!(error = %e, "cannot encode the metrics");
                Answer::text(500, "Internal Server Error", "cannot encode the metrics")
            }
        },
        Request::NotFound { head_only } => {
            Answer { head_only, ..Answer::text(404, "Not Found", format!("not found: the metrics are at {PATH}")) }
        }
        Request::MethodNotAllowed => {
            Answer { allow: true, ..Answer::text(405, "Method Not Allowed", "only GET and HEAD are served") }
        }
        Request::Bad(why) => Answer::text(400, "Bad Request", why),
    }
}

/// Serves one connection: reads its request head, answers, closes.
pub(crate) fn handle(mut stream: TcpStream, metrics: &dyn Fn() -> Result<String, String>) {
    let a = match read_head(&mut stream) {
        Ok(head) => answer(&head, metrics),
        Err(ReadFailure::Gone) => return,
        Err(ReadFailure::Truncated) => Answer::text(400, "Bad Request", "the request head is incomplete"),
        Err(ReadFailure::TooLarge) => Answer::text(
            431,
            "Request Header Fields Too Large",
            format!("the request head exceeds {MAX_REQUEST} bytes"),
        ),
        Err(ReadFailure::TimedOut) => Answer::text(408, "Request Timeout", "the request head took too long"),
    };
    if a.code != 200 {
        tracing::debug!(code = a.code, "metrics request answered with an error");
    }
    if stream.set_write_timeout(Some(WRITE_TIMEOUT)).is_err() {
        return;
    }
    if let Err(e) = stream.write_all(&a.bytes()) {
        tracing::debug!(error = %e, "cannot write the metrics answer");
        return;
    }
    // Close gently: a client still sending (an oversized head) would otherwise get a reset
    // that can destroy the answer before it reads it. What it sends meanwhile is discarded,
    // for a bounded time and amount.
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        match stream.read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
}

/// Binds the metrics listener; refuses an address outside the loopback.
pub(crate) fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    if !addr.ip().is_loopback() {
        return Err(format!("metrics address {addr} is not a loopback address (127.0.0.0/8 or [::1])"));
    }
    TcpListener::bind(addr).map_err(|e| format!("cannot listen for metrics on {addr}: {e}"))
}

/// Serves `listener` until the process ends, one connection at a time.
pub(crate) fn serve(listener: TcpListener, metrics: impl Fn() -> Result<String, String>) {
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => handle(stream, &metrics),
            Err(e) => {
                tracing::warn!(error = %e, "metrics: accept failed");
                if e.raw_os_error() == Some(libc::EMFILE) || e.raw_os_error() == Some(libc::ENFILE) {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_are_parsed_and_garbage_refused() {
        use Request::*;
        let cases: &[(&[u8], Request)] = &[
            (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", Metrics { head_only: false }),
            (b"GET /metrics?name[]=x HTTP/1.0\n\n", Metrics { head_only: false }),
            (b"HEAD /metrics HTTP/1.1\r\n\r\n", Metrics { head_only: true }),
            (b"GET / HTTP/1.1\r\n\r\n", NotFound { head_only: false }),
            (b"GET /metrics/ HTTP/1.1\r\n\r\n", NotFound { head_only: false }),
            (b"POST /metrics HTTP/1.1\r\n\r\n", MethodNotAllowed),
            (b"DELETE / HTTP/1.1\r\n\r\n", MethodNotAllowed),
            (b"GET /metrics HTTP/2.0\r\n\r\n", Bad("only HTTP/1.0 and HTTP/1.1 are spoken")),
            (b"GET /metrics\r\n\r\n", Bad("expected METHOD TARGET HTTP/1.x")),
            (b"GET  /metrics HTTP/1.1\r\n\r\n", Bad("expected METHOD TARGET HTTP/1.x")),
            (b"GET /metrics HTTP/1.1 extra\r\n\r\n", Bad("expected METHOD TARGET HTTP/1.x")),
            (b"get /metrics HTTP/1.1\r\n\r\n", Bad("expected METHOD TARGET HTTP/1.x")),
            (b"\xff\xfe /metrics HTTP/1.1\r\n\r\n", Bad("the request line is not text")),
            (b"", Bad("expected METHOD TARGET HTTP/1.x")),
            (b"\r\n\r\n", Bad("expected METHOD TARGET HTTP/1.x")),
        ];
        for (head, want) in cases {
            assert_eq!(parse(head), *want, "{:?}", String::from_utf8_lossy(head));
        }
    }

    #[test]
    fn parse_is_total_over_random_bytes() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        let alphabet = b"GETHAD /mtrics?HTP1.0\r\n\xff\x00";
        for _ in 0..20_000 {
            let len = rng.random_range(0..64);
            let bytes: Vec<u8> = (0..len)
                .map(
                    |_| if rng.random_bool(0.8) { alphabet[rng.random_range(0..alphabet.len())] } else { rng.random() },
                )
                .collect();
            let _ = parse(&bytes);
            let _ = head_end(&bytes);
        }
    }

    /// A listener on a free loopback port serving `body` from a thread of its own.
    fn server(body: &'static str) -> SocketAddr {
        let l = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || serve(l, move || Ok(body.to_string())));
        addr
    }

    /// Sends `request` (in pieces, if several) and reads the whole answer.
    fn exchange(addr: SocketAddr, request: &[&[u8]]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        for piece in request {
            // The server may answer (and stop reading) before every piece is sent.
            if s.write_all(piece).is_err() {
                break;
            }
        }
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn a_scrape_gets_the_body_and_other_requests_an_error() {
        let addr = server("m 1\n# EOF\n");
        let ok = exchange(addr, &[b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n"]);
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains(&format!("Content-Type: {CONTENT_TYPE}\r\n")), "{ok}");
        assert!(ok.contains("Content-Length: 10\r\n") && ok.ends_with("\r\n\r\nm 1\n# EOF\n"), "{ok}");
        // The head in pieces.
        let ok = exchange(addr, &[b"GET /met", b"rics HTTP/1.0\r\n", b"\r\n"]);
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.ends_with("m 1\n# EOF\n"), "{ok}");
        let head = exchange(addr, &[b"HEAD /metrics HTTP/1.1\r\n\r\n"]);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && head.ends_with("\r\n\r\n"), "{head}");
        assert!(head.contains("Content-Length: 10\r\n"), "{head}");
        let nf = exchange(addr, &[b"GET /other HTTP/1.1\r\n\r\n"]);
        assert!(nf.starts_with("HTTP/1.1 404 Not Found\r\n") && nf.contains("/metrics"), "{nf}");
        let post = exchange(addr, &[b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"]);
        assert!(post.starts_with("HTTP/1.1 405 ") && post.contains("Allow: GET, HEAD\r\n"), "{post}");
        for garbage in [&b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n\n"[..], b"hello\r\n\r\n", b"GET\n\n"] {
            let bad = exchange(addr, &[garbage]);
            assert!(bad.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{garbage:?}: {bad}");
        }
        // A head cut short by the client's close.
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost:").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 400 "), "{out}");
        // A connection that says nothing and closes gets nothing, and the server goes on.
        drop(TcpStream::connect(addr).unwrap());
        assert!(exchange(addr, &[b"GET /metrics HTTP/1.1\r\n\r\n"]).starts_with("HTTP/1.1 200 "));
    }

    #[test]
    fn oversized_and_slow_requests_are_cut_off() {
        let addr = server("ok\n");
        let long = format!("GET /metrics HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "a".repeat(MAX_REQUEST));
        let big = exchange(addr, &[long.as_bytes()]);
        assert!(big.starts_with("HTTP/1.1 431 "), "{big}");
        // An endless head without a blank line.
        let endless = vec![b'A'; 4 * MAX_REQUEST];
        assert!(exchange(addr, &[&endless]).starts_with("HTTP/1.1 431 "));
        // A client that sends half a head and waits: 408 after the deadline.
        let start = Instant::now();
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HT").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 408 "), "{out}");
        let took = start.elapsed();
        assert!(took >= REQUEST_DEADLINE && took < REQUEST_DEADLINE * 3, "{took:?}");
        assert!(exchange(addr, &[b"GET /metrics HTTP/1.1\r\n\r\n"]).ends_with("\r\n\r\nok\n"));
    }

    #[test]
    fn an_encoding_failure_is_a_500_and_non_loopback_is_refused() {
        let l = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || serve(l, || Err("broken".into())));
        assert!(exchange(addr, &[b"GET /metrics HTTP/1.1\r\n\r\n"]).starts_with("HTTP/1.1 500 "));
        for a in ["0.0.0.0:0", "10.0.0.1:9100", "[::]:0"] {
            let e = bind(a.parse().unwrap()).unwrap_err();
            assert!(e.contains("not a loopback address"), "{e}");
        }
    }
}
