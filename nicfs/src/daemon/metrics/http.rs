//! The HTTP endpoint Prometheus scrapes: `GET /metrics` on a loopback TCP port, served by
//! hyper's HTTP/1 server on a single-threaded tokio runtime of its own thread.
//!
//! * **Bounded.** A request head longer than [`MAX_REQUEST`] bytes is refused by hyper (431);
//!   one not complete within [`REQUEST_DEADLINE`] (a client that trickles bytes included)
//!   ends the connection; a whole exchange longer than [`CONNECTION_DEADLINE`] is cut off;
//!   at most [`MAX_CONNECTIONS`] connections are served at once and later ones wait in the
//!   kernel's backlog. Every connection is closed after its answer (no keep-alive), so a
//!   scraper cannot hold a connection, and nothing here ever holds up the daemon: it shares
//!   only the `render` closure.
//! * **Tolerant.** `GET` and `HEAD` of `/metrics` (a query string is ignored) get the
//!   metrics; another path 404, another method 405 with `Allow`; what hyper cannot parse as
//!   HTTP/1 gets its 400 (or nothing, if the peer sent nothing).
//! * **Loopback only.** [`bind`] refuses any address outside 127.0.0.0/8 and ::1 (the
//!   argument parser refuses them first): the metrics carry no secret, but the daemon
//!   listens on nothing the network can reach.

use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE as CONTENT_TYPE_HEADER};
use hyper::{Method, Request, Response, StatusCode};

/// The largest request head accepted (request line and headers); hyper's smallest buffer.
pub(crate) const MAX_REQUEST: usize = 8 << 10;
/// How long a client has to send its whole request head.
pub(crate) const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// How long one connection may last in all (reading the head and writing the answer).
pub(crate) const CONNECTION_DEADLINE: Duration = Duration::from_secs(7);
/// Connections served at once.
pub(crate) const MAX_CONNECTIONS: usize = 4;
/// The path served.
pub(crate) const PATH: &str = "/metrics";
/// What `prometheus-client`'s text encoder writes: OpenMetrics text.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Renders the exposition, or says why it cannot.
type Render = dyn Fn() -> Result<String, String> + Send + Sync;

fn text(status: StatusCode, body: impl Into<String>) -> Response<Full<Bytes>> {
    let mut body = body.into();
    body.push('\n');
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE_HEADER, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// The answer to one request. hyper leaves out the body of an answer to `HEAD` itself and
/// keeps its `Content-Length`.
fn answer(method: &Method, path: &str, render: &Render) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD are served");
        r.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if path != PATH {
        return text(StatusCode::NOT_FOUND, format!("not found: the metrics are at {PATH}"));
    }
    match render() {
        Ok(body) => {
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut().insert(CONTENT_TYPE_HEADER, HeaderValue::from_static(CONTENT_TYPE));
            r
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot encode the metrics");
            text(StatusCode::INTERNAL_SERVER_ERROR, "cannot encode the metrics")
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

/// Serves `listener` until the process ends (on the calling thread).
pub(crate) fn serve(listener: TcpListener, render: impl Fn() -> Result<String, String> + Send + Sync + 'static) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "metrics: cannot start the runtime; /metrics is not served");
            return;
        }
    };
    let render: Arc<Render> = Arc::new(render);
    runtime.block_on(accept_loop(listener, render));
}

async fn accept_loop(listener: TcpListener, render: Arc<Render>) {
    let listener = match listener.set_nonblocking(true).and_then(|()| tokio::net::TcpListener::from_std(listener)) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "metrics: cannot use the listener; /metrics is not served");
            return;
        }
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: accept failed");
                if e.raw_os_error() == Some(libc::EMFILE) || e.raw_os_error() == Some(libc::ENFILE) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                continue;
            }
        };
        let render = render.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let r = answer(req.method(), req.uri().path(), &*render);
                async move { Ok::<_, Infallible>(r) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(REQUEST_DEADLINE)
                .max_buf_size(MAX_REQUEST)
                .keep_alive(false)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            match tokio::time::timeout(CONNECTION_DEADLINE, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(error = %e, "metrics connection ended with an error"),
                Err(_) => tracing::debug!("metrics connection cut off at its deadline"),
            }
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpStream};
    use std::time::Instant;

    /// A listener on a free loopback port serving `body` from a thread of its own.
    fn server(render: impl Fn() -> Result<String, String> + Send + Sync + 'static) -> SocketAddr {
        let l = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || serve(l, render));
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

    fn lower(s: &str) -> String {
        s.to_ascii_lowercase()
    }

    #[test]
    fn a_scrape_gets_the_body_and_other_requests_an_error() {
        let addr = server(|| Ok("m 1\n# EOF\n".to_string()));
        let ok = exchange(addr, &[b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n"]);
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(lower(&ok).contains(&format!("content-type: {CONTENT_TYPE}\r\n")), "{ok}");
        assert!(lower(&ok).contains("content-length: 10\r\n") && ok.ends_with("\r\n\r\nm 1\n# EOF\n"), "{ok}");
        assert!(lower(&ok).contains("connection: close\r\n"), "{ok}");
        // The head in pieces, HTTP/1.0, a query string.
        let ok = exchange(addr, &[b"GET /met", b"rics?x=1 HTTP/1.0\r\n", b"\r\n"]);
        assert!(ok.starts_with("HTTP/1.0 200 OK\r\n") && ok.ends_with("m 1\n# EOF\n"), "{ok}");
        let head = exchange(addr, &[b"HEAD /metrics HTTP/1.1\r\n\r\n"]);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && head.ends_with("\r\n\r\n"), "{head}");
        let nf = exchange(addr, &[b"GET /other HTTP/1.1\r\n\r\n"]);
        assert!(nf.starts_with("HTTP/1.1 404 Not Found\r\n") && nf.contains("/metrics"), "{nf}");
        let post = exchange(addr, &[b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"]);
        assert!(post.starts_with("HTTP/1.1 405 ") && lower(&post).contains("allow: get, head\r\n"), "{post}");
        for garbage in [&b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n\n"[..], b"hello\r\n\r\n", b"GET\n\n"] {
            let bad = exchange(addr, &[garbage]);
            assert!(bad.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{garbage:?}: {bad}");
        }
        // A head cut short by the client's close gets no answer, and the server goes on.
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost:").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(!out.contains(" 200 "), "{out}");
        drop(TcpStream::connect(addr).unwrap());
        assert!(exchange(addr, &[b"GET /metrics HTTP/1.1\r\n\r\n"]).starts_with("HTTP/1.1 200 "));
    }

    #[test]
    fn oversized_and_slow_requests_are_cut_off() {
        let addr = server(|| Ok("ok\n".to_string()));
        let long = format!("GET /metrics HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "a".repeat(MAX_REQUEST));
        let big = exchange(addr, &[long.as_bytes()]);
        assert!(big.starts_with("HTTP/1.1 431 "), "{big}");
        // An endless head without a blank line.
        let endless = vec![b'A'; 4 * MAX_REQUEST];
        let e = exchange(addr, &[&endless]);
        assert!(!e.contains(" 200 "), "{e}");
        // Clients that send half a head and wait are cut off after the deadline, and while
        // more of them than the connection limit wait, a scrape is still answered (after
        // them at worst).
        let start = Instant::now();
        let mut slow: Vec<TcpStream> = (0..MAX_CONNECTIONS + 2)
            .map(|_| {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(b"GET /metrics HT").unwrap();
                s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
                s
            })
            .collect();
        assert!(exchange(addr, &[b"GET /metrics HTTP/1.1\r\n\r\n"]).ends_with("\r\n\r\nok\n"));
        for s in &mut slow {
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            assert!(!out.contains(" 200 "), "{out}");
        }
        let took = start.elapsed();
        assert!(took >= REQUEST_DEADLINE && took < REQUEST_DEADLINE * 4, "{took:?}");
    }

    #[test]
    fn an_encoding_failure_is_a_500_and_non_loopback_is_refused() {
        let addr = server(|| Err("broken".into()));
        assert!(exchange(addr, &[b"GET /metrics HTTP/1.1\r\n\r\n"]).starts_with("HTTP/1.1 500 "));
        for a in ["0.0.0.0:0", "10.0.0.1:9100", "[::]:0"] {
            let e = bind(a.parse().unwrap()).unwrap_err();
            assert!(e.contains("not a loopback address"), "{e}");
        }
    }
}
