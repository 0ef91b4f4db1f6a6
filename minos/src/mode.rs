//! The five <Lin, persistency> modes and what each changes in the Synch algorithm.
//!
//! Figure 2 of the MINOS paper gives the <Lin, Synch> algorithm; Figure 3 replaces a few
//! lettered steps for the other persistency models. Everything that differs between modes is
//! asked here, through small predicates, so that the engine reads as one algorithm:
//!
//! | step (Fig. 2/3)                  | synch | strict | renf | event | scope |
//! |----------------------------------|-------|--------|------|-------|-------|
//! | a/h: PersistencySpin on obsolete | yes   | yes    | yes  | no    | no    |
//! | d: coordinator persist awaited before step e | yes | yes | no (background) | no | no |
//! | follower acks                    | ACK after persist | ACK_C, then ACK_P after persist | ACK_C, ACK_P | ACK_C | ACK_C |
//! | coordinator returns to client    | all ACK + own persist | all ACK_P (after VAL_C) | all ACK_C | all ACK_C | all ACK_C |
//! | RDLock released at coordinator   | with return | after all ACK_C | after all ACK_P + own persist | after all ACK_C | after all ACK_C |
//! | validation messages              | VAL   | VAL_C, then VAL_P | VAL (after all ACK_P) | VAL_C | VAL_C |
//! | durability tracked by            | ACK   | ACK_P  | ACK_P | nothing | [PERSIST]sc / [ACK_P]sc |
//!
//! [`Mutation`] lists the deliberate single-line bugs that the checker's mutation tests plant
//! in the engine to show that the checker catches them; production code leaves it at
//! [`Mutation::None`].

use std::fmt;
use std::str::FromStr;

/// A <Lin, persistency> model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// <Lin, Synch>: a write returns when every replica is updated and persisted (one ACK).
    Synch,
    /// <Lin, Strict>: separate ACK_C/ACK_P and VAL_C/VAL_P; returns after all ACK_P.
    Strict,
    /// <Lin, REnf>: returns after all ACK_C; reads wait for VAL, sent after all ACK_P.
    ReadEnforced,
    /// <Lin, Event>: returns after all ACK_C; persists happen in the background, untracked.
    Eventual,
    /// <Lin, Scope>: like Event, and a scope end ([PERSIST]sc) returns once every write of
    /// the scope is persisted on every node.
    Scope,
}

impl Mode {
    pub const ALL: [Mode; 5] = [Mode::Synch, Mode::Strict, Mode::ReadEnforced, Mode::Eventual, Mode::Scope];

    /// Followers answer an INV with one combined ACK (consistency and persistency).
    pub fn single_ack(self) -> bool {
        self == Mode::Synch
    }

    /// Followers send ACK_P after their persist completes (separate persistency acks).
    pub fn tracks_ack_p(self) -> bool {
        matches!(self, Mode::Strict | Mode::ReadEnforced)
    }

    /// Step d: the coordinator's own persist is on the critical path, awaited before the
    /// step-e actions (Synch and Strict); the other modes persist in the background.
    pub fn coordinator_persist_in_critical_path(self) -> bool {
        matches!(self, Mode::Synch | Mode::Strict)
    }

    /// Steps a/h: handleObsolete runs PersistencySpin after ConsistencySpin.
    pub fn persistency_spin(self) -> bool {
        matches!(self, Mode::Synch | Mode::Strict | Mode::ReadEnforced)
    }

    /// A read may return a value only once it is persisted on every node (Synch: the single
    /// VAL; REnf: the VAL sent after all ACK_P).
    pub fn reads_see_only_durable(self) -> bool {
        matches!(self, Mode::Synch | Mode::ReadEnforced)
    }

    /// A write returns only once it is persisted on every node.
    pub fn write_returns_durable(self) -> bool {
        matches!(self, Mode::Synch | Mode::Strict)
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Synch => "lin-synch",
            Mode::Strict => "lin-strict",
            Mode::ReadEnforced => "lin-renf",
            Mode::Eventual => "lin-event",
            Mode::Scope => "lin-scope",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        let s = s.strip_prefix("lin-").unwrap_or(s);
        match s {
            "synch" => Ok(Mode::Synch),
            "strict" => Ok(Mode::Strict),
            "renf" => Ok(Mode::ReadEnforced),
            "event" => Ok(Mode::Eventual),
            "scope" => Ok(Mode::Scope),
            _ => Err(format!("unknown mode {s:?} (synch, strict, renf, event, scope)")),
        }
    }
}

/// A deliberate bug, planted by the mutation tests to show that the checker finds it. Each
/// is one changed condition in the engine, marked with `Mutation::` at its one use.
/// Production code never sets one: [`crate::Config::new`] leaves it at [`Mutation::None`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mutation {
    #[default]
    None,
    /// The coordinator treats its consistency acks as complete after the first one, so VAL
    /// (VAL_C) goes out before all ACKs arrived.
    ValBeforeAllAcks,
    /// A follower does not release the RDLock when the VAL (VAL_C) arrives.
    RdLockNotReleased,
    /// A follower applies an INV older than its volatileTS instead of skipping it.
    ObsoleteApplied,
    /// In lin-synch a follower sends its ACK without waiting for its persist.
    SynchPersistNotAwaited,
    /// A scope end returns to the client once [PERSIST]sc is sent, not after all [ACK_P]sc.
    ScopeEndsEarly,
    /// A follower persists the value its record held before the INV, not the INV's.
    WrongValuePersisted,
    /// A follower skips an obsolete INV in its metadata but hands its (older) value to the
    /// driver's store with an `Apply`.
    ObsoleteValueApplied,
    /// The coordinator counts acknowledgements instead of keeping them as sets: a second
    /// copy of a follower's ack counts as another follower's.
    AcksCounted,
    /// A tick does not retransmit the INVs of a write still missing acks.
    NoRetransmit,
    /// A tick does not complete writes left unvalidated (lost VAL, crashed coordinator).
    NoRedrive,
    /// A restarted node serves its clients at once, without catching up from its peers.
    NoCatchup,
    /// A follower ignores a copy of an INV it applied already, without acking it again.
    DuplicateInvNotReacked,
}

impl Mutation {
    pub const ALL: [Mutation; 12] = [
        Mutation::ValBeforeAllAcks,
        Mutation::RdLockNotReleased,
        Mutation::ObsoleteApplied,
        Mutation::SynchPersistNotAwaited,
        Mutation::ScopeEndsEarly,
        Mutation::WrongValuePersisted,
        Mutation::ObsoleteValueApplied,
        Mutation::AcksCounted,
        Mutation::NoRetransmit,
        Mutation::NoRedrive,
        Mutation::NoCatchup,
        Mutation::DuplicateInvNotReacked,
    ];
}
