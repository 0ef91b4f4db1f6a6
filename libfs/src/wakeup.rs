//! The publisher thread's wake-up: a chunk is waiting, nicfs published something, or the
//! client stops. A leaf: the front end, the publisher and the offload link all ring it.

use parking_lot::{Condvar, Mutex};

/// Wakes the publisher thread: a chunk is waiting (`kick`) or the client stops.
pub(crate) struct Wakeup {
    pub(crate) flags: Mutex<WakeFlags>,
    pub(crate) cond: Condvar,
}

pub(crate) struct WakeFlags {
    pub(crate) kick: bool,
    pub(crate) stop: bool,
}

impl Wakeup {
    pub(crate) fn new() -> Wakeup {
        Wakeup { flags: Mutex::new(WakeFlags { kick: false, stop: false }), cond: Condvar::new() }
    }

    pub(crate) fn kick(&self) {
        self.flags.lock().kick = true;
        self.cond.notify_one();
    }

    pub(crate) fn stop(&self) {
        self.flags.lock().stop = true;
        self.cond.notify_all();
    }
}
