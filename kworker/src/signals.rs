//! SIGTERM and SIGINT, taken synchronously: the signals are blocked before any thread
//! starts (threads inherit the mask) and one thread waits for them with `sigwait`, so the
//! reaction is ordinary code, not a signal handler.

use std::io;

/// The blocked shutdown signals.
pub struct Shutdown {
    set: libc::sigset_t,
}

impl Shutdown {
    /// Blocks SIGTERM and SIGINT in the calling thread; call it before starting threads.
    pub fn block() -> io::Result<Shutdown> {
        // SAFETY: a sigset_t is plain data, and sigemptyset initialises it below before use.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid sigset_t we own; SIGTERM and SIGINT are valid signals.
        unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigaddset(&mut set, libc::SIGINT);
        }
        // SAFETY: `set` is initialised; the old mask is not asked for (null is allowed).
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(Shutdown { set })
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
