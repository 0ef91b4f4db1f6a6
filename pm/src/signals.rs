//! Signals received synchronously, the one way every linefs process handles them: the
//! signals are blocked before any thread starts (threads inherit the mask) and one thread
//! takes them from a `signalfd` (nix's), so what follows a signal is ordinary code, not a
//! signal handler. The mount daemon, the CLI's temporary clusters, nicfs and kworker all use
//! this one type.

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

/// A set of signals blocked in the calling thread (and the threads it starts afterwards),
/// read from a signalfd.
pub struct SignalSet {
    fd: SignalFd,
}

impl SignalSet {
    /// Blocks `signals` in the calling thread; call it before starting threads.
    pub fn block(signals: &[i32]) -> io::Result<SignalSet> {
        let mut set = SigSet::empty();
        for &s in signals {
            set.add(Signal::try_from(s)?);
        }
        set.thread_block()?;
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)?;
        Ok(SignalSet { fd })
    }

    /// Waits up to `timeout` for one of the signals; `None` on timeout or interruption.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<i32> {
        let timeout = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
        self.next(timeout).ok().flatten()
    }

    /// Waits for one of the signals; returns its number.
    pub fn wait(&self) -> io::Result<i32> {
        loop {
            if let Some(sig) = self.next(PollTimeout::NONE)? {
                return Ok(sig);
            }
        }
    }

    /// The next signal, waiting up to `timeout` for one (None: none came, or the wait was
    /// interrupted).
    fn next(&self, timeout: PollTimeout) -> io::Result<Option<i32>> {
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => return Ok(None),
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(self.fd.read_signal()?.and_then(|info| i32::try_from(info.ssi_signo).ok()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_signal_is_received_synchronously() {
        // In a thread of its own so that the mask does not leak into other tests.
        std::thread::spawn(|| {
            let set = SignalSet::block(&[libc::SIGUSR2]).unwrap();
            assert_eq!(set.wait_timeout(Duration::from_millis(10)), None);
            // SAFETY: raising a signal that this thread has blocked only makes it pending.
            assert_eq!(unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGUSR2) }, 0);
            assert_eq!(set.wait().unwrap(), libc::SIGUSR2);
        })
        .join()
        .unwrap();
    }
}
