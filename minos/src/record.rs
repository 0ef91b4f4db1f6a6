//! The metadata a node keeps per record (Figure 1(a) of the MINOS paper).
//!
//! - `volatile_ts`: the version of the record in this node's volatile memory. It only grows:
//!   an update older than it is obsolete and skipped.
//! - `glb_volatile_ts`: the newest write known to be in every node's volatile memory (set by
//!   the coordinator on all consistency acks, by a follower on VAL / VAL_C).
//! - `glb_durable_ts`: the newest write known to be persisted on every node (set on all
//!   persistency acks, VAL in synch and renf, VAL_P in strict, [VAL_P]sc in scope; never in
//!   event, which tracks no persistency).
//! - `rdlock`: `RDLock_Owner`, the timestamp of the write that holds the read lock, `None` for
//!   the paper's `<-1,-1>`. A read of the record waits while it is held.
//! - `durable_ts`: the newest update of the record this node has persisted (the head of its
//!   persistent log for the record); persists may complete out of order.
//!
//! The write lock (WRLock) of the paper guards the local-write critical section (Figure 2,
//! lines 9-15: the second obsolete check and the volatile update). This engine handles one
//! input at a time, so that section is atomic by construction and the WRLock is never
//! observable between inputs; like MINOS-O (section V-B.4), the engine has no WRLock field.
//!
//! Invariants (checked by the model checker): `glb_volatile_ts <= volatile_ts`,
//! `glb_durable_ts <= volatile_ts`, and a held RDLock is owned by the write that last updated
//! the volatile record (`rdlock == Some(volatile_ts)`), because snatching and the volatile
//! update happen in the same step and only a newer write can do either.

use crate::msg::Value;
use crate::ts::Ts;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    pub value: Value,
    pub volatile_ts: Ts,
    pub glb_volatile_ts: Ts,
    pub glb_durable_ts: Ts,
    pub rdlock: Option<Ts>,
    pub durable_ts: Ts,
}

impl Default for Record {
    fn default() -> Record {
        Record {
            value: Value::from(&[][..]),
            volatile_ts: Ts::ZERO,
            glb_volatile_ts: Ts::ZERO,
            glb_durable_ts: Ts::ZERO,
            rdlock: None,
            durable_ts: Ts::ZERO,
        }
    }
}

impl Record {
    /// `Obsolete(TS_WR)`: a newer write already updated the volatile record.
    pub fn obsolete(&self, ts: Ts) -> bool {
        ts < self.volatile_ts
    }

    /// "Snatch RDLock" (Figure 2, line 8): take a free lock, snatch it from an older write,
    /// leave it with a younger one.
    pub fn snatch_rdlock(&mut self, ts: Ts) {
        match self.rdlock {
            None => self.rdlock = Some(ts),
            Some(owner) if owner < ts => self.rdlock = Some(ts),
            Some(_) => {}
        }
    }

    /// Lines 20-21 / 42-43: the owner, and only the owner, releases the RDLock.
    pub fn release_rdlock_if_owner(&mut self, ts: Ts) {
        if self.rdlock == Some(ts) {
            self.rdlock = None;
        }
    }

    pub fn raise_glb_volatile(&mut self, ts: Ts) {
        self.glb_volatile_ts = self.glb_volatile_ts.max(ts);
    }

    pub fn raise_glb_durable(&mut self, ts: Ts) {
        self.glb_durable_ts = self.glb_durable_ts.max(ts);
    }
}
