//! Signals received synchronously, the one way every linefs process handles them: the
//! signals are blocked before any thread starts (threads inherit the mask) and one thread
//! takes them with `sigwait`/`sigtimedwait`, so what follows a signal is ordinary code, not a
//! signal handler. The mount daemon, the CLI's temporary clusters, nicfs and kworker all use
//! this one type. (rustix has signal masks only in a hidden runtime module that bypasses
//! libc's reserved signals, hence libc here.)

use std::io;
use std::mem::MaybeUninit;
use std::time::Duration;

/// A set of signals blocked in the calling thread (and the threads it starts afterwards).
pub struct SignalSet {
    set: libc::sigset_t,
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl SignalSet {
    /// Blocks `signals` in the calling thread; call it before starting threads.
    pub fn block(signals: &[i32]) -> io::Result<SignalSet> {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: set is writable memory of the right size for sigemptyset to initialise.
        check(unsafe { libc::sigemptyset(set.as_mut_ptr()) })?;
        // SAFETY: sigemptyset initialised set.
        let mut set = unsafe { set.assume_init() };
        for &s in signals {
            // SAFETY: set is an initialised sigset_t.
            check(unsafe { libc::sigaddset(&mut set, s) })?;
        }
        // SAFETY: set is initialised; a null old-set pointer is allowed.
        let ret = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if ret != 0 {
            return Err(io::Error::from_raw_os_error(ret));
        }
        Ok(SignalSet { set })
    }

    /// Waits up to `timeout` for one of the signals; `None` on timeout or interruption.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<i32> {
        let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
        // SAFETY: set and ts are initialised; a null siginfo pointer is allowed.
        let ret = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &ts) };
        (ret > 0).then_some(ret)
    }

    /// Waits for one of the signals; returns its number.
    pub fn wait(&self) -> io::Result<i32> {
        let mut sig: libc::c_int = 0;
        // SAFETY: `self.set` is an initialised sigset_t; `sig` is a writable c_int.
        let rc = unsafe { libc::sigwait(&self.set, &mut sig) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(sig)
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
