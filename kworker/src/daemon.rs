//! The kworker process: connect to nicfs, say Hello on the kworker link, heartbeat, execute
//! copy lists, and start over (with backoff) whenever the connection ends, until SIGTERM or
//! SIGINT.
//!
//! One connection at a time. Its reader (the main thread) executes the lists in the order
//! they arrive and answers each — `CopyDone{list_id}` or `CopyFailed{list_id, entry, errno}`
//! with the request's frame id — after the list's fence. A heartbeat thread sends
//! `Heartbeat{lists_in_flight}` every interval; both write through one mutex, a whole frame
//! at a time. Heartbeats keep flowing while a long list runs, so nicfs can tell a busy
//! kworker from a dead one.
//!
//! The node's files are opened afresh for each connection, before the Hello (a node that
//! cannot be opened is retried with backoff rather than announced to nicfs).
//!
//! Test hook: the environment variable [`ENTRY_DELAY_ENV`] (milliseconds) makes kworker
//! sleep before every entry, so that tests can kill it in the middle of a list.

use crate::args::Args;
use linefs_copier::NodeFiles;
use linefs_pm::signals::SignalSet;
use linefs_proto::{
    read_frame, write_frame, Channel, CopyDone, CopyFailed, Frame, Heartbeat, Hello, Kworker, Party, ReadError, Role,
};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Milliseconds to sleep before each entry of a list (tests only).
pub const ENTRY_DELAY_ENV: &str = "LINEFS_KWORKER_ENTRY_DELAY_MS";
/// First and longest wait between connection attempts.
pub const BACKOFF_MIN: Duration = Duration::from_millis(50);
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How long nicfs may take to answer the Hello, and a write may block.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// What the signal thread shares with the connection loop.
#[derive(Default)]
struct Shared {
    stopping: AtomicBool,
    /// The live connection, shut down by the signal thread to end a blocked read.
    current: Mutex<Option<UnixStream>>,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }
}

/// Runs kworker until SIGTERM/SIGINT; the error is the one-line reason it cannot start.
pub fn run(args: Args) -> Result<(), String> {
    let signals =
        SignalSet::block(&[libc::SIGTERM, libc::SIGINT]).map_err(|e| format!("cannot block SIGTERM/SIGINT: {e}"))?;
    let shared = Arc::new(Shared::default());
    {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                match signals.wait() {
                    Ok(sig) => tracing::info!(sig, "signal received: stopping"),
                    Err(e) => tracing::error!(error = %e, "waiting for a signal failed: stopping"),
                }
                shared.stopping.store(true, Ordering::Release);
                if let Some(s) = &*shared.current.lock().unwrap_or_else(|p| p.into_inner()) {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
            })
            .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    }
    let delay = std::env::var(ENTRY_DELAY_ENV).ok().and_then(|v| v.parse().ok()).map(Duration::from_millis);
    let interval = Duration::from_millis(args.heartbeat_ms);
    tracing::info!(node = %args.node.display(), socket = %args.socket.display(), heartbeat_ms = args.heartbeat_ms, pid = std::process::id(), "kworker starting");
    let mut backoff = BACKOFF_MIN;
    while !shared.stopping() {
        match connection(&args, &shared, interval, delay) {
            Ok(()) => backoff = BACKOFF_MIN,
            Err(e) => tracing::warn!(retry_in = ?backoff, "{e}"),
        }
        // Sleep in slices so that a signal ends the wait promptly.
        let mut slept = Duration::ZERO;
        while slept < backoff && !shared.stopping() {
            std::thread::sleep(Duration::from_millis(10));
            slept += Duration::from_millis(10);
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
    tracing::info!("kworker stopped");
    Ok(())
}

/// One connection to nicfs, from connect to its end. Ok when it was served and ended
/// (nicfs went away or a signal came); Err when it could not be set up.
fn connection(args: &Args, shared: &Shared, interval: Duration, delay: Option<Duration>) -> Result<(), String> {
    let files = NodeFiles::open(&args.node).map_err(|e| format!("cannot open the node: {e}"))?;
    let stream = UnixStream::connect(&args.socket)
        .map_err(|e| format!("cannot connect to nicfs at {}: {e}", args.socket.display()))?;
    stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(|e| format!("socket: {e}"))?;
    let hello = Hello { channel: Channel::Kworker, role: Role::Kworker, session: 0 };
    write_frame(&stream, &Frame { id: 1, msg: Kworker::Hello(hello) })
        .map_err(|e| format!("cannot send Hello: {e}"))?;
    match read_frame::<Kworker>(&stream, Party::Nicfs, Some(IO_TIMEOUT)) {
        Ok(Frame { msg: Kworker::Ok, .. }) => {}
        Ok(Frame { msg: Kworker::Error(e), .. }) => {
            return Err(format!("nicfs refused the Hello (errno {}): {}", e.errno(), e.message))
        }
        Ok(other) => return Err(format!("unexpected answer to Hello: {other:?}")),
        Err(e) => return Err(format!("no answer to Hello: {e}")),
    }
    let reader = stream.try_clone().map_err(|e| format!("socket: {e}"))?;
    *shared.current.lock().unwrap_or_else(|p| p.into_inner()) =
        Some(reader.try_clone().map_err(|e| format!("socket: {e}"))?);
    if shared.stopping() {
        let _ = reader.shutdown(std::net::Shutdown::Both);
    }
    tracing::info!("connected to nicfs");
    let link = Arc::new(Link {
        writer: Mutex::new(stream),
        alive: AtomicBool::new(true),
        in_flight: AtomicU32::new(0),
        next_id: AtomicU64::new(2),
    });
    let heartbeats = {
        let link = link.clone();
        std::thread::Builder::new()
            .name("heartbeat".into())
            .spawn(move || link.heartbeat(interval))
            .map_err(|e| format!("cannot start the heartbeat thread: {e}"))?
    };
    serve(&files, &reader, &link, delay);
    link.alive.store(false, Ordering::Release);
    let _ = reader.shutdown(std::net::Shutdown::Both);
    let _ = heartbeats.join();
    *shared.current.lock().unwrap_or_else(|p| p.into_inner()) = None;
    Ok(())
}

/// The writing half of a connection and what the heartbeat reports.
struct Link {
    writer: Mutex<UnixStream>,
    alive: AtomicBool,
    in_flight: AtomicU32,
    next_id: AtomicU64,
}

impl Link {
    fn send(&self, frame: &Frame<Kworker>) -> Result<(), linefs_proto::SendError> {
        write_frame(&self.writer.lock().unwrap_or_else(|p| p.into_inner()), frame)
    }

    /// Sends a heartbeat every `interval` until the connection ends.
    fn heartbeat(&self, interval: Duration) {
        while self.alive.load(Ordering::Acquire) {
            let hb = Heartbeat { lists_in_flight: self.in_flight.load(Ordering::Acquire) };
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = self.send(&Frame { id, msg: Kworker::Heartbeat(hb) }) {
                tracing::debug!(error = %e, "heartbeat not sent; the connection is ending");
                return;
            }
            std::thread::sleep(interval);
        }
    }
}

/// Reads and executes copy lists until the connection ends.
fn serve(files: &NodeFiles, reader: &UnixStream, link: &Link, delay: Option<Duration>) {
    loop {
        let frame = match read_frame::<Kworker>(reader, Party::Nicfs, None) {
            Ok(f) => f,
            Err(ReadError::Closed) => {
                tracing::info!("nicfs closed the connection");
                return;
            }
            Err(e) => {
                if linefs_proto::answer_bad_frame(reader, "nicfs", &e) {
                    continue;
                }
                tracing::info!(reason = %e, "connection to nicfs ended");
                return;
            }
        };
        match frame.msg {
            Kworker::CopyList(list) => {
                link.in_flight.fetch_add(1, Ordering::AcqRel);
                let entries = list.entries.len();
                let bytes: u64 = list.entries.iter().map(|e| e.len).sum();
                let result = files.execute_observed(&list, |_| {
                    if let Some(d) = delay {
                        std::thread::sleep(d);
                    }
                });
                link.in_flight.fetch_sub(1, Ordering::AcqRel);
                let msg = match result {
                    Ok(()) => {
                        tracing::debug!(list = list.list_id, entries, bytes, "copy list done");
                        Kworker::CopyDone(CopyDone { list_id: list.list_id })
                    }
                    Err(f) => {
                        tracing::warn!(
                            list = list.list_id,
                            entry = f.entry,
                            errno = f.errno,
                            "copy list failed: {}",
                            f.why
                        );
                        Kworker::CopyFailed(CopyFailed { list_id: list.list_id, entry: f.entry, errno: f.errno })
                    }
                };
                if let Err(e) = link.send(&Frame { id: frame.id, msg }) {
                    tracing::warn!(list = list.list_id, error = %e, "cannot answer the copy list; nicfs will redo it");
                    return;
                }
            }
            Kworker::Error(e) => {
                tracing::warn!(id = frame.id, errno = e.errno(), "nicfs reports an error: {}", e.message)
            }
            Kworker::Ok => {}
            other => tracing::debug!(id = frame.id, ?other, "unexpected frame ignored"),
        }
    }
}
