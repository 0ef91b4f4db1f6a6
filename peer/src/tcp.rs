//! [`TcpLink`]: proto's [`FrameLink`] over a blocking TCP stream, made by the handshake
//! ([`crate::handshake`]) and carrying sealed frames ([`crate::seal`]).
//!
//! * [`TcpLink::connect`] dials a peer and runs the initiator's side; [`PeerListener`]
//!   accepts connections and runs the acceptor's, each under one deadline for the whole
//!   handshake. A failed handshake is logged (`warn`, with the address and the reason) and
//!   returned as an error; the listener goes on with the next connection.
//! * The low-latency class sets `TCP_NODELAY` (a small frame leaves at once); the bulk class
//!   leaves Nagle on (its frames are large, and each is written by one `write_all`).
//! * Sending seals the frame and writes it under the send lock, so the sequence numbers are
//!   in the order the bytes are on the wire, and writers never interleave. Every frame's
//!   write has one deadline (`write_timeout`, each `write` under `SO_SNDTIMEO` set to what
//!   is left of it): a peer that stops or slows its reading cannot hold a writer longer; a write that fails or times out part-way closes the link (the peer's
//!   stream would be out of step).
//! * Receiving waits for a frame's first byte as long as the call's timeout (or the link's
//!   `idle_timeout`) lets it, then gives the whole frame one deadline (`frame_timeout`, or
//!   the call's if that ends first), checks the header before reading or allocating the
//!   payload, reads payload and trailer, and verifies. A frame that times out before its first byte
//!   leaves the link as it was; one that stops part-way, is oversized, garbled, forged,
//!   replayed or out of order closes the link with a `warn` line naming the peer and the
//!   reason, and is a [`ReadError::Decode`] that is not in step. Nothing on this path
//!   panics on input.
//!
//! Blocking, not tokio: proto's [`FrameLink`] is a blocking trait, and the nicfs threads
//! that will drive replication (one reader per connection, a few writers) are threads
//! already; a chain has a handful of peers with two connections each, well within a thread
//! apiece. The handshake and the seal are sans-I/O, so a tokio link, should the cluster
//! need many more connections, reuses both and writes only its reads and writes.

use crate::handshake::{
    message_len, Acceptor, Class, HandshakeError, Initiator, NodeId, ReplayGuard, Session, PREFIX_LEN,
};
use crate::key::ClusterKey;
use crate::seal::{Opener, Sealer, TRAILER_LEN};
use linefs_proto::{DecodeError, FrameLink, RawFrame, ReadError, HEADER_LEN};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Deadlines of a peer link.
#[derive(Debug, Clone, Copy)]
pub struct LinkConfig {
    /// To establish the TCP connection.
    pub connect_timeout: Duration,
    /// For the whole handshake, from the first byte sent or awaited to the Verdict.
    pub handshake_timeout: Duration,
    /// For each frame written (and each handshake write).
    pub write_timeout: Duration,
    /// How long `recv_raw(None)` waits for a frame (`None`: for ever).
    pub idle_timeout: Option<Duration>,
    /// How long a frame may take once its first byte has arrived, whatever the wait before
    /// it: a peer that stops or trickles mid-frame is cut off after this.
    pub frame_timeout: Duration,
}

impl Default for LinkConfig {
    fn default() -> LinkConfig {
        LinkConfig {
            connect_timeout: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            idle_timeout: None,
            frame_timeout: Duration::from_secs(10),
        }
    }
}

/// Why a peer link could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("peer {addr}: {source}")]
    Io { addr: String, source: io::Error },
    #[error("peer {addr}: handshake not done within {after:?}")]
    TimedOut { addr: String, after: Duration },
    #[error("peer {addr}: connection closed during the handshake ({during})")]
    Closed { addr: String, during: &'static str },
    #[error("peer {addr}: {source}")]
    Handshake { addr: String, source: HandshakeError },
}

impl LinkError {
    /// The handshake's reason, if it was one.
    pub fn handshake(&self) -> Option<&HandshakeError> {
        match self {
            LinkError::Handshake { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A link to a peer node: one TCP connection of one class, authenticated, every frame
/// MACed and numbered. Share it by reference (or `Arc`) between a reader and writers.
pub struct TcpLink {
    stream: TcpStream,
    peer: NodeId,
    class: Class,
    addr: String,
    send: Mutex<Sealer>,
    recv: Mutex<Opener>,
    /// Set once the link was closed for cause: every later call fails at once.
    broken: AtomicBool,
    idle_timeout: Option<Duration>,
    frame_timeout: Duration,
    write_timeout: Duration,
}

impl std::fmt::Debug for TcpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpLink")
            .field("peer", &self.peer)
            .field("class", &self.class)
            .field("addr", &self.addr)
            .finish()
    }
}

/// One deadline over a sequence of reads and writes.
struct Deadline {
    end: Instant,
    total: Duration,
}

impl Deadline {
    fn new(total: Duration) -> Deadline {
        Deadline { end: Instant::now() + total, total }
    }

    /// This deadline, or `other` if that one ends first.
    fn or_earlier(self, other: Option<&Deadline>) -> Deadline {
        match other {
            Some(o) if o.end < self.end => Deadline { end: o.end, total: o.total },
            _ => self,
        }
    }

    fn left(&self) -> Option<Duration> {
        let left = self.end.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }
}

/// How a read of exactly `buf.len()` bytes ended short.
enum Short {
    /// The peer closed having sent `got` bytes of it.
    Closed {
        got: usize,
    },
    TimedOut {
        got: usize,
    },
    Io(io::Error),
}

/// Reads at least one byte into `buf` (not empty) within `deadline` (`None`: no
/// deadline), in one `read`: how many.
fn read_some(stream: &TcpStream, buf: &mut [u8], deadline: Option<&Deadline>) -> Result<usize, Short> {
    loop {
        let timeout = match deadline {
            Some(d) => match d.left() {
                Some(left) => Some(left),
                None => return Err(Short::TimedOut { got: 0 }),
            },
            None => None,
        };
        stream.set_read_timeout(timeout).map_err(Short::Io)?;
        match (&*stream).read(buf) {
            Ok(0) => return Err(Short::Closed { got: 0 }),
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(Short::TimedOut { got: 0 })
            }
            Err(e) => return Err(Short::Io(e)),
        }
    }
}

/// Reads exactly `buf.len()` bytes within `deadline` (`None`: no deadline).
fn read_exact_by(stream: &TcpStream, buf: &mut [u8], deadline: Option<&Deadline>) -> Result<(), Short> {
    let mut got = 0;
    while got < buf.len() {
        got += read_some(stream, &mut buf[got..], deadline).map_err(|short| match short {
            Short::Closed { .. } => Short::Closed { got },
            Short::TimedOut { .. } => Short::TimedOut { got },
            io => io,
        })?;
    }
    Ok(())
}

/// Writes all of `bytes` within `deadline`: each `write` waits at most what is left of it
/// (`SO_SNDTIMEO`), so a peer that reads slowly cannot stretch one frame past it.
fn write_all_by(stream: &TcpStream, bytes: &[u8], deadline: &Deadline) -> io::Result<()> {
    let mut sent = 0;
    while sent < bytes.len() {
        let left = deadline.left().ok_or_else(|| {
            io::Error::new(io::ErrorKind::TimedOut, format!("write not done within {:?}", deadline.total))
        })?;
        stream.set_write_timeout(Some(left))?;
        match (&*stream).write(&bytes[sent..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("write not done within {:?}", deadline.total),
                ))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The handshake's I/O: one deadline for all of it.
struct Wire<'a> {
    stream: &'a TcpStream,
    addr: &'a str,
    deadline: Deadline,
}

impl Wire<'_> {
    fn send(&self, bytes: &[u8]) -> Result<(), LinkError> {
        write_all_by(self.stream, bytes, &self.deadline).map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut => self.timed_out(),
            _ => self.io(e),
        })
    }

    /// Reads one handshake message (its length from its first 8 bytes).
    fn recv(&self, during: &'static str) -> Result<Vec<u8>, LinkError> {
        let mut prefix = [0u8; PREFIX_LEN];
        self.read(&mut prefix, during)?;
        let len = message_len(&prefix).map_err(|source| LinkError::Handshake { addr: self.addr.to_owned(), source })?;
        let mut msg = vec![0u8; len];
        msg[..PREFIX_LEN].copy_from_slice(&prefix);
        self.read(&mut msg[PREFIX_LEN..], during)?;
        Ok(msg)
    }

    fn read(&self, buf: &mut [u8], during: &'static str) -> Result<(), LinkError> {
        read_exact_by(self.stream, buf, Some(&self.deadline)).map_err(|short| match short {
            Short::Closed { .. } => LinkError::Closed { addr: self.addr.to_owned(), during },
            Short::TimedOut { .. } => self.timed_out(),
            Short::Io(e) => self.io(e),
        })
    }

    fn timed_out(&self) -> LinkError {
        LinkError::TimedOut { addr: self.addr.to_owned(), after: self.deadline.total }
    }

    fn io(&self, source: io::Error) -> LinkError {
        LinkError::Io { addr: self.addr.to_owned(), source }
    }

    fn handshake(&self, source: HandshakeError) -> LinkError {
        LinkError::Handshake { addr: self.addr.to_owned(), source }
    }
}

impl TcpLink {
    /// Dials `addr` as node `me` for a connection of `class`, to node `expect` if known,
    /// and runs the handshake. A failure is logged and returned; the connection is closed.
    pub fn connect(
        addr: SocketAddr,
        key: &ClusterKey,
        me: NodeId,
        class: Class,
        expect: Option<NodeId>,
        config: &LinkConfig,
    ) -> Result<TcpLink, LinkError> {
        let name = addr.to_string();
        let stream = TcpStream::connect_timeout(&addr, config.connect_timeout)
            .map_err(|source| LinkError::Io { addr: name.clone(), source })?;
        let result = Self::initiate(&stream, &name, key, me, class, expect, config);
        match result {
            Ok(session) => TcpLink::new(stream, session, name, config),
            Err(e) => {
                tracing::warn!(peer = %name, ?class, "peer handshake failed (dialling): {e}");
                let _ = stream.shutdown(Shutdown::Both);
                Err(e)
            }
        }
    }

    fn initiate(
        stream: &TcpStream,
        name: &str,
        key: &ClusterKey,
        me: NodeId,
        class: Class,
        expect: Option<NodeId>,
        config: &LinkConfig,
    ) -> Result<Session, LinkError> {
        let wire = Wire { stream, addr: name, deadline: Deadline::new(config.handshake_timeout) };
        let (initiator, hello) = Initiator::start(key, me, class, expect).map_err(|e| wire.handshake(e))?;
        wire.send(&hello)?;
        let answer = wire.recv("awaiting the challenge")?;
        let (proof, session) = initiator.on_challenge(&answer).map_err(|e| wire.handshake(e))?;
        wire.send(&proof)?;
        let verdict = wire.recv("awaiting the verdict")?;
        initiator.on_verdict(&verdict).map_err(|e| wire.handshake(e))?;
        Ok(session)
    }

    /// Runs the acceptor's side of the handshake on a connection just accepted. A failure
    /// is logged and returned; the connection is closed (after a Verdict saying why, when
    /// the peer spoke our protocol).
    pub fn accept(
        stream: TcpStream,
        key: &ClusterKey,
        me: NodeId,
        guard: &ReplayGuard,
        config: &LinkConfig,
    ) -> Result<TcpLink, LinkError> {
        let name = stream.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "unknown".into());
        match Self::answer(&stream, &name, key, me, guard, config) {
            Ok(session) => TcpLink::new(stream, session, name, config),
            Err(e) => {
                tracing::warn!(peer = %name, "peer handshake refused: {e}");
                let _ = stream.shutdown(Shutdown::Both);
                Err(e)
            }
        }
    }

    fn answer(
        stream: &TcpStream,
        name: &str,
        key: &ClusterKey,
        me: NodeId,
        guard: &ReplayGuard,
        config: &LinkConfig,
    ) -> Result<Session, LinkError> {
        let wire = Wire { stream, addr: name, deadline: Deadline::new(config.handshake_timeout) };
        let refused = |r: crate::handshake::Refusal| {
            if let Some(v) = &r.verdict {
                // Best effort: the peer may be gone already.
                let _ = wire.send(v);
            }
            wire.handshake(r.error)
        };
        let hello = wire.recv("awaiting the hello")?;
        let (acceptor, challenge) = Acceptor::on_hello(key, me, guard, &hello).map_err(refused)?;
        wire.send(&challenge)?;
        let proof = wire.recv("awaiting the proof")?;
        let (session, verdict) = acceptor.on_proof(&proof).map_err(refused)?;
        wire.send(&verdict)?;
        Ok(session)
    }

    fn new(stream: TcpStream, session: Session, addr: String, config: &LinkConfig) -> Result<TcpLink, LinkError> {
        stream
            .set_nodelay(session.class == Class::LowLatency)
            .map_err(|source| LinkError::Io { addr: addr.clone(), source })?;
        tracing::debug!(peer = session.peer, %addr, class = ?session.class, "peer link up");
        Ok(TcpLink {
            stream,
            peer: session.peer,
            class: session.class,
            addr,
            send: Mutex::new(Sealer::new(session.send_key)),
            recv: Mutex::new(Opener::new(session.recv_key)),
            broken: AtomicBool::new(false),
            idle_timeout: config.idle_timeout,
            frame_timeout: config.frame_timeout,
            write_timeout: config.write_timeout,
        })
    }

    /// The peer's node id (proved by the handshake).
    pub fn peer(&self) -> NodeId {
        self.peer
    }

    pub fn class(&self) -> Class {
        self.class
    }

    /// Whether `TCP_NODELAY` is set (it is on the low-latency class).
    pub fn nodelay(&self) -> io::Result<bool> {
        self.stream.nodelay()
    }

    /// The peer's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the link was closed for cause (a bad frame, a failed write).
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    /// Closes the link: both directions, now.
    pub fn close(&self) {
        self.broken.store(true, Ordering::Release);
        let _ = self.stream.shutdown(Shutdown::Both);
    }

    /// Closes the link for cause, with a log line naming the peer and the reason.
    fn fail(&self, reason: &dyn std::fmt::Display) {
        if !self.broken.swap(true, Ordering::AcqRel) {
            tracing::warn!(peer = self.peer, addr = %self.addr, class = ?self.class, "closing the peer link: {reason}");
        }
        let _ = self.stream.shutdown(Shutdown::Both);
    }

    fn refuse(&self, error: DecodeError, id: u64) -> ReadError {
        self.fail(&error);
        ReadError::Decode { error, id, in_step: false }
    }

    fn gone() -> io::Error {
        io::Error::new(io::ErrorKind::NotConnected, "peer link closed")
    }
}

impl FrameLink for TcpLink {
    fn send_raw(&self, frame: &[u8]) -> io::Result<()> {
        let mut sealer = self.send.lock().unwrap_or_else(|p| p.into_inner());
        if self.is_broken() {
            return Err(Self::gone());
        }
        let bytes = sealer.seal(frame).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        if let Err(e) = write_all_by(&self.stream, &bytes, &Deadline::new(self.write_timeout)) {
            // Part of the frame may be on the wire: the peer's stream is out of step.
            self.fail(&format_args!("write failed: {e}"));
            return Err(e);
        }
        Ok(())
    }

    fn recv_raw(&self, timeout: Option<Duration>) -> Result<RawFrame, ReadError> {
        let mut opener = self.recv.lock().unwrap_or_else(|p| p.into_inner());
        if self.is_broken() {
            return Err(ReadError::Io(Self::gone()));
        }
        let wait = timeout.or(self.idle_timeout);
        let deadline = wait.map(Deadline::new);
        let mut head = [0u8; HEADER_LEN];
        // Waiting for a frame to start may take as long as the caller lets it; once its first
        // byte is here, the whole frame has `frame_timeout` at most.
        let first = match read_some(&self.stream, &mut head, deadline.as_ref()) {
            Ok(n) => n,
            Err(Short::Closed { .. }) => {
                self.close();
                return Err(ReadError::Closed);
            }
            // Nothing of a frame read: the link is as it was.
            Err(Short::TimedOut { .. }) => return Err(ReadError::TimedOut(wait.unwrap_or_default())),
            Err(short) => return Err(self.short(short, "frame header", HEADER_LEN, Duration::ZERO)),
        };
        let frame = Deadline::new(self.frame_timeout).or_earlier(deadline.as_ref());
        if let Err(short) = read_exact_by(&self.stream, &mut head[first..], Some(&frame)) {
            let short = match short {
                Short::Closed { got } => Short::Closed { got: first + got },
                Short::TimedOut { got } => Short::TimedOut { got: first + got },
                io => io,
            };
            return Err(self.short(short, "frame header", HEADER_LEN, frame.total));
        }
        let header = Opener::header(&head).map_err(|error| self.refuse(error, 0))?;
        // The size was checked against MAX_FRAME: this allocation is bounded.
        let mut rest = vec![0u8; header.payload_len as usize + TRAILER_LEN];
        if let Err(short) = read_exact_by(&self.stream, &mut rest, Some(&frame)) {
            return Err(self.short(short, "frame payload and trailer", rest.len(), frame.total));
        }
        let (payload, trailer) = rest.split_at(header.payload_len as usize);
        let trailer: &[u8; TRAILER_LEN] = trailer.try_into().map_err(|_| {
            self.refuse(DecodeError::Truncated { what: "frame trailer", need: TRAILER_LEN, have: trailer.len() }, 0)
        })?;
        // Until the MAC verifies, the header's id is the word of whoever sent it: say 0.
        opener.open(&head, payload, trailer).map_err(|error| self.refuse(error, 0))?;
        rest.truncate(header.payload_len as usize);
        Ok(RawFrame { header, payload: rest, fds_found: 0 })
    }
}

impl TcpLink {
    /// A frame that stopped part-way: the link closes (the stream is out of step).
    fn short(&self, short: Short, what: &'static str, need: usize, within: Duration) -> ReadError {
        match short {
            Short::Closed { got } => self.refuse(DecodeError::Truncated { what, need, have: got }, 0),
            Short::TimedOut { got } => {
                self.fail(&format_args!("{what} not whole within {within:?} ({got} of {need} bytes)"));
                ReadError::TimedOut(within)
            }
            Short::Io(e) => {
                self.fail(&format_args!("read failed: {e}"));
                ReadError::Io(e)
            }
        }
    }
}

/// A listening socket that accepts peers: each accepted connection runs the acceptor's
/// handshake as node `me` under the cluster key, with one [`ReplayGuard`] for all.
pub struct PeerListener {
    listener: TcpListener,
    key: ClusterKey,
    me: NodeId,
    guard: Arc<ReplayGuard>,
    config: LinkConfig,
}

impl PeerListener {
    pub fn bind(addr: impl ToSocketAddrs, key: ClusterKey, me: NodeId, config: LinkConfig) -> io::Result<PeerListener> {
        Ok(PeerListener {
            listener: TcpListener::bind(addr)?,
            key,
            me,
            guard: Arc::new(ReplayGuard::default()),
            config,
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Waits for the next connection and runs its handshake on this thread. `Err` for a
    /// connection whose handshake failed (logged; the caller goes on accepting) or a failed
    /// `accept`. A peer that stalls its handshake holds this call up to the handshake's
    /// deadline: a daemon takes connections with [`PeerListener::accept_tcp`] and runs
    /// [`PeerListener::handshake`] for each on a thread of its own.
    pub fn accept(&self) -> Result<TcpLink, LinkError> {
        let stream = self.accept_tcp().map_err(|source| LinkError::Io { addr: "listener".into(), source })?;
        self.handshake(stream)
    }

    /// Waits for the next TCP connection, not yet authenticated.
    pub fn accept_tcp(&self) -> io::Result<TcpStream> {
        let (stream, addr) = self.listener.accept()?;
        tracing::debug!(%addr, "peer connection");
        Ok(stream)
    }

    /// Runs the acceptor's handshake on a connection from [`PeerListener::accept_tcp`]
    /// (the listener is `Sync`: several may run at once, sharing its replay guard).
    pub fn handshake(&self, stream: TcpStream) -> Result<TcpLink, LinkError> {
        TcpLink::accept(stream, &self.key, self.me, &self.guard, &self.config)
    }
}
