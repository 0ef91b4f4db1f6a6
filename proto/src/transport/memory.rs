//! The in-process link: two ends joined by channels, for simulation and tests. It is a
//! [`LocalLink`]: descriptors pass with a frame (duplicated, as the kernel does with
//! SCM_RIGHTS), and each end states the credentials the other sees.
//!
//! A channel keeps frame boundaries: whatever one `send_raw` sent is what one `recv_raw`
//! takes, so a frame that does not decode never puts the link out of step (its errors are
//! `in_step`). What arrives is checked as a socket's bytes are — the header by
//! [`Header::decode`](crate::Header::decode), the payload's length against it — so tests of a hostile peer work
//! on it too.
//!
//! Faults, for simulation: [`MemoryLink::set_faults`] gives each frame an end sends a
//! [`Fault`] — delivered, dropped, delayed (delivered later by a timer thread, so frames
//! sent after it may overtake it), held back until the next frame has gone (a
//! reorder), or corrupted (one byte inverted). A dropped end closes the link: the other end's reads say
//! [`ReadError::Closed`] once what was sent is read, its writes fail with `BrokenPipe`.

use super::{FrameLink, LocalLink, PeerCred, RawFrame, ReadError};
use crate::codec;
use rustix::fd::{BorrowedFd, OwnedFd};
use std::io;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Mutex;
use std::time::Duration;

/// What happens to one frame an end sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Deliver,
    /// Lost.
    Drop,
    /// Delivered after this long; frames sent meanwhile may arrive first.
    Delay(Duration),
    /// Kept back and delivered right after the next frame this end sends (the two swap).
    Hold,
    /// Delivered with the byte at this index (modulo the frame's length) inverted: what a
    /// link without a check lets through, and a checked one must refuse.
    Corrupt(usize),
}

/// Decides the fate of each frame an end sends: called with the frame's number on this end
/// (from 0) and its bytes.
pub type FaultPlan = Box<dyn FnMut(u64, &[u8]) -> Fault + Send>;

struct Packet {
    bytes: Vec<u8>,
    fds: Vec<OwnedFd>,
}

/// One end of an in-process link.
pub struct MemoryLink {
    tx: Mutex<Sender<Packet>>,
    rx: Mutex<Receiver<Packet>>,
    /// Who the other end is.
    peer: PeerCred,
    sending: Mutex<Sending>,
}

#[derive(Default)]
struct Sending {
    plan: Option<FaultPlan>,
    sent: u64,
    held: Vec<Packet>,
}

impl MemoryLink {
    /// Two joined ends, both of this process (each sees this process's pid, uid and gid).
    pub fn pair() -> (MemoryLink, MemoryLink) {
        let me = PeerCred {
            pid: rustix::process::getpid().as_raw_nonzero().get(),
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        };
        MemoryLink::pair_as(me, me)
    }

    /// Two joined ends: the first of a process with credentials `a` (what the second sees
    /// as its peer), the second of one with `b`.
    pub fn pair_as(a: PeerCred, b: PeerCred) -> (MemoryLink, MemoryLink) {
        let (to_b, from_a) = channel();
        let (to_a, from_b) = channel();
        let end = |tx, rx, peer| MemoryLink {
            tx: Mutex::new(tx),
            rx: Mutex::new(rx),
            peer,
            sending: Mutex::new(Sending::default()),
        };
        (end(to_b, from_b, b), end(to_a, from_a, a))
    }

    /// Sets the fate of every frame this end sends from now on.
    pub fn set_faults(&self, plan: impl FnMut(u64, &[u8]) -> Fault + Send + 'static) {
        lock(&self.sending).plan = Some(Box::new(plan));
    }

    /// Every frame delivered again, in order (frames held back stay held until the next).
    pub fn clear_faults(&self) {
        lock(&self.sending).plan = None;
    }

    fn post(&self, bytes: &[u8], fds: Vec<OwnedFd>) -> io::Result<()> {
        let mut packet = Packet { bytes: bytes.to_vec(), fds };
        let mut s = lock(&self.sending);
        let n = s.sent;
        s.sent += 1;
        let fault = match s.plan.as_mut() {
            Some(plan) => plan(n, bytes),
            None => Fault::Deliver,
        };
        let tx = lock(&self.tx).clone();
        let gone = || io::Error::new(io::ErrorKind::BrokenPipe, "the other end of the link is gone");
        if let (Fault::Corrupt(at), false) = (fault, packet.bytes.is_empty()) {
            let n = packet.bytes.len();
            packet.bytes[at % n] ^= 0xff;
        }
        match fault {
            Fault::Drop => Ok(()),
            Fault::Hold => {
                s.held.push(packet);
                Ok(())
            }
            Fault::Delay(d) => {
                std::thread::spawn(move || {
                    std::thread::sleep(d);
                    // The other end may be gone by now: the frame is lost with it.
                    let _ = tx.send(packet);
                });
                Ok(())
            }
            Fault::Deliver | Fault::Corrupt(_) => {
                tx.send(packet).map_err(|_| gone())?;
                for held in s.held.drain(..) {
                    tx.send(held).map_err(|_| gone())?;
                }
                Ok(())
            }
        }
    }
}

impl FrameLink for MemoryLink {
    fn send_raw(&self, frame: &[u8]) -> io::Result<()> {
        self.post(frame, Vec::new())
    }

    fn recv_raw(&self, timeout: Option<Duration>) -> Result<RawFrame, ReadError> {
        // The descriptors are closed here; their count stays in the frame.
        self.recv_raw_with_fds(timeout).map(|(raw, _fds)| raw)
    }
}

impl LocalLink for MemoryLink {
    fn send_raw_with_fds(&self, frame: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        if fds.len() > crate::MAX_FDS {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many file descriptors for one frame"));
        }
        let fds = fds.iter().map(|fd| fd.try_clone_to_owned()).collect::<io::Result<Vec<_>>>()?;
        self.post(frame, fds)
    }

    fn recv_raw_with_fds(&self, timeout: Option<Duration>) -> Result<(RawFrame, Vec<OwnedFd>), ReadError> {
        let rx = lock(&self.rx);
        let packet = match timeout {
            None => rx.recv().map_err(|_| ReadError::Closed)?,
            Some(t) => rx.recv_timeout(t).map_err(|e| match e {
                RecvTimeoutError::Timeout => ReadError::TimedOut(t),
                RecvTimeoutError::Disconnected => ReadError::Closed,
            })?,
        };
        drop(rx);
        // The packet was taken whole: whatever is wrong with it, the link is in step.
        let (header, payload) =
            codec::split_frame(&packet.bytes).map_err(|(error, id)| ReadError::Decode { error, id, in_step: true })?;
        let raw = RawFrame { header, payload: payload.to_vec(), fds_found: packet.fds.len() };
        Ok((raw, packet.fds))
    }

    fn peer_credentials(&self) -> io::Result<PeerCred> {
        Ok(self.peer)
    }
}

/// A lock whose holder cannot leave the state half-changed (every critical section here
/// is a push, a take or a counter), so a poisoned one is used as is.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests;
