//! One test per transition of the lease table, each also checking the table's invariants
//! after every step.

use super::*;
use LeaseMode::{Read, Write};

const A: SessionId = 1;
const B: SessionId = 2;
const C: SessionId = 3;
const X: Ino = 10;

/// A table that checks itself after every step.
struct T(LeaseTable);

impl T {
    fn new() -> T {
        T(LeaseTable::default())
    }

    fn step(&mut self, i: Input) -> Vec<Output> {
        let out = self.0.step(i);
        if let Err(e) = self.0.check() {
            panic!("after {i:?}: {e}");
        }
        out
    }

    fn req(&mut self, session: SessionId, req_id: u64, ino: Ino, mode: LeaseMode) -> Vec<Output> {
        self.step(Input::Request { session, req_id, ino, mode })
    }

    /// A request granted at once; its lease.
    fn granted(&mut self, session: SessionId, req_id: u64, ino: Ino, mode: LeaseMode) -> LeaseId {
        match self.req(session, req_id, ino, mode)[..] {
            [Output::Grant { session: s, req_id: r, ino: i, mode: m, lease }] => {
                assert_eq!((s, r, i, m), (session, req_id, ino, mode));
                lease
            }
            ref other => panic!("expected one grant, got {other:?}"),
        }
    }

    fn release(&mut self, session: SessionId, ino: Ino, lease: LeaseId, covered_lsn: Lsn) -> Vec<Output> {
        self.step(Input::Release { session, ino, lease, covered_lsn })
    }

    fn done(&mut self, session: SessionId, ino: Ino, lease: LeaseId, covered_lsn: Lsn) -> Vec<Output> {
        self.step(Input::RevokeDone { session, ino, lease, covered_lsn })
    }

    fn published(&mut self, session: SessionId, lsn: Lsn) -> Vec<Output> {
        self.step(Input::Published { session, lsn })
    }

    fn ended(&mut self, session: SessionId) -> Vec<Output> {
        self.step(Input::SessionEnded { session })
    }

    /// A table whose revokes expire after [`TIMEOUT`] ms.
    fn timed() -> T {
        T(LeaseTable::default().with_revoke_timeout(TIMEOUT))
    }

    fn tick(&mut self, now_ms: u64) -> Vec<Output> {
        self.step(Input::Tick { now_ms })
    }
}

const TIMEOUT: u64 = 100;

fn expire(session: SessionId, ino: Ino, lease: LeaseId) -> Output {
    Output::Expire { session, reason: Expiry { ino, lease, timeout_ms: TIMEOUT } }
}

fn grant(session: SessionId, req_id: u64, ino: Ino, mode: LeaseMode, lease: LeaseId) -> Output {
    Output::Grant { session, req_id, ino, mode, lease }
}

fn revoke(session: SessionId, ino: Ino, lease: LeaseId, keep_read: bool) -> Output {
    Output::Revoke { session, ino, lease, keep_read }
}

#[test]
fn readers_share_and_a_writer_is_alone() {
    let mut t = T::new();
    let a = t.granted(A, 1, X, Read);
    let b = t.granted(B, 1, X, Read);
    assert_ne!(a, b);
    assert_eq!(t.0.holders(X), (None, vec![(A, a), (B, b)]));
    let w = t.granted(C, 1, X + 1, Write);
    assert_eq!(t.0.holders(X + 1), (Some((C, w)), vec![]));
    let c = t.0.counts();
    assert_eq!((c.inodes, c.readers, c.writers, c.waiting, c.sessions, c.grants), (2, 2, 1, 0, 3, 3));
}

#[test]
fn a_holder_asking_again_is_answered_at_once_with_its_lease() {
    let mut t = T::new();
    let w = t.granted(A, 1, X, Write);
    // A read is satisfied by the write lease: the mode held is what the grant says.
    assert_eq!(t.req(A, 2, X, Read), vec![grant(A, 2, X, Write, w)]);
    assert_eq!(t.req(A, 3, X, Write), vec![grant(A, 3, X, Write, w)]);
    let r = t.granted(B, 1, X + 1, Read);
    assert_eq!(t.req(B, 2, X + 1, Read), vec![grant(B, 2, X + 1, Read, r)]);
}

#[test]
fn a_writer_makes_room_for_a_reader_by_downgrading_after_its_log_is_published() {
    let mut t = T::new();
    let w = t.granted(A, 1, X, Write);
    assert_eq!(t.req(B, 1, X, Read), vec![revoke(A, X, w, true)]);
    assert_eq!(t.0.counts().revokes_in_flight, 1);
    // A keeps reading under the same lease; its log up to 500 must be published first.
    assert_eq!(t.done(A, X, w, 500), vec![Output::Publish { session: A, lsn: 500 }]);
    assert_eq!(t.0.holders(X), (None, vec![(A, w)]));
    assert_eq!(t.0.counts().publications_awaited, 1);
    assert_eq!(t.published(A, 499), vec![], "not far enough");
    let out = t.published(A, 800);
    let [Output::Grant { session: B, req_id: 1, ino: X, mode: Read, lease: b }] = out[..] else { panic!("{out:?}") };
    assert_eq!(t.0.holders(X), (None, vec![(A, w), (B, b)]));
    assert_eq!(t.0.counts().publications_awaited, 0);
}

#[test]
fn a_writer_revoked_for_a_writer_goes_and_nothing_is_published_when_nothing_is_new() {
    let mut t = T::new();
    let w = t.granted(A, 1, X, Write);
    t.published(A, 0); // nothing indexed for A's publications: ignored
    assert_eq!(t.req(B, 7, X, Write), vec![revoke(A, X, w, false)]);
    // covered 0: nothing written under the lease, nothing to wait for.
    let out = t.done(A, X, w, 0);
    let [Output::Grant { session: B, req_id: 7, mode: Write, lease: b, .. }] = out[..] else { panic!("{out:?}") };
    assert!(b > w, "lease ids grow");
    assert_eq!(t.0.holders(X), (Some((B, b)), vec![]));
}

#[test]
fn a_write_request_revokes_every_reader() {
    let mut t = T::new();
    let a = t.granted(A, 1, X, Read);
    let b = t.granted(B, 1, X, Read);
    assert_eq!(t.req(C, 1, X, Write), vec![revoke(A, X, a, false), revoke(B, X, b, false)]);
    // Readers hand back with nothing to publish, whatever LSN they name.
    assert_eq!(t.done(A, X, a, 1000), vec![]);
    let out = t.done(B, X, b, 1000);
    assert!(matches!(out[..], [Output::Grant { session: C, mode: Write, .. }]), "{out:?}");
}

#[test]
fn an_upgrade_revokes_the_other_readers_and_replaces_the_read_lease() {
    let mut t = T::new();
    let a = t.granted(A, 1, X, Read);
    let b = t.granted(B, 1, X, Read);
    assert_eq!(t.req(A, 2, X, Write), vec![revoke(B, X, b, false)]);
    let out = t.done(B, X, b, 0);
    let [Output::Grant { session: A, req_id: 2, mode: Write, lease: w, .. }] = out[..] else { panic!("{out:?}") };
    assert_ne!(w, a);
    assert_eq!(t.0.holders(X), (Some((A, w)), vec![]));
    // The replaced read lease is stale now.
    assert_eq!(t.release(A, X, a, 0), vec![]);
    assert_eq!(t.0.counts().stale, 1);
    assert_eq!(t.0.holders(X), (Some((A, w)), vec![]));
}

#[test]
fn the_queue_is_served_in_order_with_readers_together() {
    let mut t = T::new();
    let w = t.granted(A, 1, X, Write);
    assert_eq!(t.req(B, 1, X, Read), vec![revoke(A, X, w, true)]);
    assert_eq!(t.req(C, 1, X, Read), vec![]);
    assert_eq!(t.req(B, 2, X, Write), vec![], "behind the readers");
    assert_eq!(t.req(C, 2, X, Read), vec![], "behind the writer: no overtaking");
    assert_eq!(t.0.counts().waiting, 4);
    // A downgrades; B and C read together, B's write then needs A and C gone.
    let out = t.done(A, X, w, 0);
    let [Output::Grant { session: B, req_id: 1, lease: b, .. }, Output::Grant { session: C, req_id: 1, lease: c, .. }, Output::Revoke { session: A, lease: a_again, keep_read: false, .. }, Output::Revoke { session: C, lease: c_again, keep_read: false, .. }] =
        out[..]
    else {
        panic!("{out:?}")
    };
    assert_eq!((a_again, c_again), (w, c));
    assert_eq!(t.done(A, X, w, 0), vec![]);
    let out = t.done(C, X, c, 0);
    // B's write replaces its read; C's request waits behind it again.
    let [Output::Grant { session: B, req_id: 2, mode: Write, lease: bw, .. }, Output::Revoke { session: B, keep_read: true, .. }] =
        out[..]
    else {
        panic!("{out:?}")
    };
    assert!(bw > b);
    let out = t.done(B, X, bw, 0);
    assert!(matches!(out[..], [Output::Grant { session: C, req_id: 2, mode: Read, .. }]), "{out:?}");
}

#[test]
fn a_released_write_lease_waits_for_its_publication_but_not_for_its_own_holder() {
    let mut t = T::new();
    let w = t.granted(A, 1, X, Write);
    assert_eq!(t.release(A, X, w, 300), vec![Output::Publish { session: A, lsn: 300 }]);
    assert_eq!(t.req(B, 1, X, Read), vec![], "waits for A's publication");
    // A itself need not wait for its own log... but it is behind B in the queue.
    assert_eq!(t.req(A, 2, X, Write), vec![]);
    let out = t.published(A, 300);
    let [Output::Grant { session: B, lease: b, .. }, Output::Revoke { session: B, lease: b2, keep_read: false, .. }] =
        out[..]
    else {
        panic!("{out:?}")
    };
    assert_eq!(b, b2);
    let out = t.done(B, X, b, 0);
    assert!(matches!(out[..], [Output::Grant { session: A, req_id: 2, mode: Write, .. }]), "{out:?}");
    // A again: its own awaited publication does not hold its own request.
    let mut t = T::new();
    let w = t.granted(A, 1, X, Write);
    assert_eq!(t.release(A, X, w, 300), vec![Output::Publish { session: A, lsn: 300 }]);
    let w2 = t.granted(A, 2, X, Write);
    assert!(w2 > w);
    assert_eq!(t.0.counts().publications_awaited, 1);
    // A reader's release publishes nothing.
    let r = t.granted(B, 1, X + 1, Read);
    assert_eq!(t.release(B, X + 1, r, 999), vec![]);
}

#[test]
fn publication_already_known_is_not_asked_again() {
    let mut t = T::new();
    let w = t.granted(A, 1, X, Write);
    assert_eq!(t.release(A, X, w, 300), vec![Output::Publish { session: A, lsn: 300 }]);
    let w2 = t.granted(A, 2, X, Write);
    assert_eq!(t.published(A, 400), vec![]);
    // A is known to have published up to 400 (it still appears in the table).
    assert_eq!(t.release(A, X, w2, 350), vec![]);
    assert!(t.0.is_empty(), "{:?}", t.0);
}

#[test]
fn stale_hand_backs_are_ignored() {
    let mut t = T::new();
    let w = t.granted(A, 1, X, Write);
    assert_eq!(t.release(A, X, w + 100, 0), vec![], "unknown lease id");
    assert_eq!(t.done(A, X, w, 0), vec![], "no revoke in flight");
    assert_eq!(t.release(B, X, w, 0), vec![], "another session's lease");
    assert_eq!(t.release(A, X + 1, w, 0), vec![], "another inode");
    assert_eq!(t.0.counts().stale, 4);
    assert_eq!(t.0.holders(X), (Some((A, w)), vec![]));
    // A release crossing a revoke: the release counts, the answer to the revoke is stale.
    assert_eq!(t.req(B, 1, X, Write), vec![revoke(A, X, w, false)]);
    let out = t.release(A, X, w, 0);
    let [Output::Grant { session: B, lease: b, .. }] = out[..] else { panic!("{out:?}") };
    assert_eq!(t.done(A, X, w, 0), vec![]);
    assert_eq!(t.0.counts().stale, 5);
    // A repeated answer to a keep_read revoke does not drop the read lease kept.
    assert_eq!(t.req(C, 1, X, Read), vec![revoke(B, X, b, true)]);
    let out = t.done(B, X, b, 0);
    assert!(matches!(out[..], [Output::Grant { session: C, .. }]), "{out:?}");
    assert_eq!(t.done(B, X, b, 0), vec![]);
    assert_eq!(t.0.counts().stale, 6);
    assert_eq!(t.0.holders(X).1.len(), 2);
}

#[test]
fn a_holder_being_revoked_waits_for_its_own_answer() {
    let mut t = T::new();
    let a = t.granted(A, 1, X, Read);
    assert_eq!(t.req(B, 1, X, Write), vec![revoke(A, X, a, false)]);
    // A asks again before seeing the revoke: it is not answered with the lease going away.
    assert_eq!(t.req(A, 2, X, Read), vec![]);
    let out = t.done(A, X, a, 0);
    let [Output::Grant { session: B, lease: b, .. }, Output::Revoke { session: B, keep_read: true, .. }] = out[..]
    else {
        panic!("{out:?}")
    };
    let out = t.done(B, X, b, 0);
    let [Output::Grant { session: A, req_id: 2, mode: Read, lease: a2, .. }] = out[..] else { panic!("{out:?}") };
    assert!(a2 > b);
}

#[test]
fn a_session_end_drops_everything_of_it() {
    let mut t = T::new();
    let w = t.granted(A, 1, X, Write);
    let r = t.granted(A, 2, X + 1, Read);
    t.step(Input::GrantNew { session: A, first: 100, count: 10 });
    assert_eq!(t.req(B, 1, X, Read), vec![revoke(A, X, w, true)]);
    assert_eq!(t.req(A, 3, X + 2, Write).len(), 1);
    assert!(matches!(t.req(B, 2, X + 2, Read)[..], [Output::Revoke { session: A, keep_read: true, .. }]));
    let other = t.granted(C, 1, X + 3, Write);
    assert_eq!(t.release(C, X + 3, other, 70), vec![Output::Publish { session: C, lsn: 70 }]);
    assert_eq!(t.req(A, 4, X + 3, Read), vec![], "waits for C's publication");
    // A dies with a lease being revoked, a request waiting and an implicit range.
    let out = t.ended(A);
    assert!(
        matches!(out[..], [Output::Grant { session: B, req_id: 1, .. }, Output::Grant { session: B, req_id: 2, .. }]),
        "{out:?}"
    );
    assert!(!t.0.busy(105));
    let _ = r;
    // C's awaited publication was kept; C's end drops it too.
    assert_eq!(t.0.counts().publications_awaited, 1);
    assert_eq!(t.ended(C), vec![]);
    assert_eq!(t.ended(C), vec![], "idempotent");
    assert_eq!(t.ended(B), vec![]);
    assert!(t.0.is_empty(), "{:?}", t.0);
    // A session that had a publication awaited and ended: another may have the inode.
    let mut t = T::new();
    let w = t.granted(A, 1, X, Write);
    t.release(A, X, w, 10);
    assert_eq!(t.req(B, 1, X, Write), vec![]);
    assert!(matches!(t.ended(A)[..], [Output::Grant { session: B, .. }]));
}

#[test]
fn numbers_handed_out_are_held_implicitly_until_someone_asks() {
    let mut t = T::new();
    assert_eq!(t.step(Input::GrantNew { session: A, first: 100, count: 10 }), vec![]);
    assert!(t.0.busy(100) && t.0.busy(109) && !t.0.busy(110) && !t.0.busy(99));
    let c = t.0.counts();
    assert_eq!((c.inodes, c.implicit_ranges), (0, 1));
    // The creator asking learns its lease id at once.
    let w = t.granted(A, 1, 103, Write);
    assert_eq!(t.0.holders(103), (Some((A, w)), vec![]));
    assert_eq!(t.0.counts().implicit_ranges, 2, "split around 103");
    assert_eq!(t.req(A, 2, 104, Read), vec![grant(A, 2, 104, Write, w + 1)]);
    // Another session asking revokes the creator, naming a lease it never saw.
    let out = t.req(B, 1, 107, Read);
    let [Output::Revoke { session: A, ino: 107, lease: l, keep_read: true }] = out[..] else { panic!("{out:?}") };
    assert_eq!(t.done(A, 107, l, 40), vec![Output::Publish { session: A, lsn: 40 }]);
    assert!(matches!(t.published(A, 40)[..], [Output::Grant { session: B, ino: 107, mode: Read, .. }]));
    assert_eq!(t.0.holders(107).1.len(), 2, "the creator reads on");
    // Numbers the table knows are left out of a range handed out.
    t.step(Input::GrantNew { session: C, first: 105, count: 10 });
    assert!(t.0.busy(112));
    let out = t.req(C, 1, 106, Write);
    assert!(matches!(out[..], [Output::Revoke { session: A, .. }]), "106 is still A's: {out:?}");
    // A's end hands 106 to C; B keeps reading 107.
    let out = t.ended(A);
    assert!(matches!(out[..], [Output::Grant { session: C, ino: 106, mode: Write, .. }]), "{out:?}");
    assert_eq!(t.0.holders(107).1.len(), 1);
}

/// Admits one entry `lsn..lsn + 10` of `s` changing `inos`; whether it was.
fn admits(t: &mut T, s: SessionId, lsn: Lsn, inos: &[Ino]) -> bool {
    let (n, refused) = t.0.admit(s, [(lsn, lsn + 10, inos)]);
    if let Err(e) = t.0.check() {
        panic!("after admitting: {e}");
    }
    assert_eq!(n == 1, refused.is_none());
    n == 1
}

#[test]
fn only_the_writer_may_change_an_inode_and_its_handed_back_log_only_up_to_covered() {
    let mut t = T::new();
    assert!(!admits(&mut t, A, 0, &[X]), "no lease at all");
    let r = t.granted(B, 1, X, Read);
    assert!(!admits(&mut t, B, 0, &[X]), "a read lease");
    t.release(B, X, r, 0);
    let w = t.granted(A, 2, X, Write);
    assert!(admits(&mut t, A, 0, &[X]));
    assert!(!admits(&mut t, B, 0, &[X]), "another session's inode");
    // A hands it back covering 100: entries before 100 may still be published, later ones
    // not (logged after the lease was given up).
    t.release(A, X, w, 100);
    assert!(admits(&mut t, A, 50, &[X]));
    assert!(!admits(&mut t, A, 100, &[X]));
    t.published(A, 100);
    assert!(!admits(&mut t, A, 50, &[X]), "published already: a replayed entry");
}

#[test]
fn numbers_handed_out_may_be_changed_by_their_session_only() {
    let mut t = T::new();
    t.step(Input::GrantNew { session: A, first: 100, count: 10 });
    assert!(admits(&mut t, A, 0, &[100, 109]));
    assert!(!admits(&mut t, A, 0, &[110]));
    assert!(!admits(&mut t, B, 0, &[105]));
}

#[test]
fn admission_stops_at_the_first_refused_entry() {
    let mut t = T::new();
    t.granted(A, 1, X, Write);
    let (e1, e2, e3): (&[Ino], &[Ino], &[Ino]) = (&[X], &[X, 11], &[X]);
    let (n, refused) = t.0.admit(A, [(0, 10, e1), (10, 20, e2), (20, 30, e3)]);
    assert_eq!(n, 1);
    let (lsn, why) = refused.unwrap();
    assert_eq!(lsn, 10);
    assert!(why.contains("inode 11"), "{why}");
}

#[test]
fn a_lease_handed_back_while_its_changes_are_being_published_waits_for_them() {
    // The publisher admits A's entries up to 500 while A holds X; A then hands X back
    // claiming its log covers only 100. X must not move before A is published to 500.
    let mut t = T::new();
    let w = t.granted(A, 1, X, Write);
    assert!(admits(&mut t, A, 490, &[X]));
    t.req(B, 2, X, Write);
    let out = t.done(A, X, w, 100);
    assert!(out.contains(&Output::Publish { session: A, lsn: 500 }), "{out:?}");
    assert!(!out.iter().any(|o| matches!(o, Output::Grant { .. })), "{out:?}");
    let out = t.published(A, 500);
    assert!(matches!(out[..], [Output::Grant { session: B, ino: X, .. }]), "{out:?}");
}

#[test]
fn a_freed_inode_is_forgotten_and_the_next_in_line_is_served() {
    let mut t = T::new();
    t.step(Input::GrantNew { session: A, first: 100, count: 3 });
    // An implicit number: the range is split around it, the rest stays A's.
    t.step(Input::Forget { session: A, ino: 101 });
    assert!(!t.0.busy(101));
    assert!(t.0.busy(100) && t.0.busy(102));
    // An explicit writer with a reader waiting: the reader is granted at once.
    let _w = t.granted(A, 1, X, Write);
    assert!(matches!(t.req(B, 2, X, Read)[..], [Output::Revoke { session: A, .. }]));
    let out = t.step(Input::Forget { session: A, ino: X });
    assert!(matches!(out[..], [Output::Grant { session: B, ino: X, .. }]), "{out:?}");
    // Another session's number is not forgotten.
    t.step(Input::Forget { session: B, ino: 100 });
    assert!(t.0.busy(100));
}

#[test]
fn a_holder_that_does_not_answer_in_time_expires_once() {
    let mut t = T::timed();
    t.tick(1000);
    let w = t.granted(A, 1, X, Write);
    let r = t.granted(A, 2, X + 1, Read);
    assert_eq!(t.req(B, 1, X, Write), vec![revoke(A, X, w, false)]);
    assert_eq!(t.0.next_deadline(), Some(1000 + TIMEOUT));
    assert_eq!(t.tick(1000 + TIMEOUT), vec![], "the whole timeout, not past it yet");
    assert_eq!(t.tick(1020), vec![], "the clock does not go back");
    // A second revoke to A, due later.
    t.tick(1050);
    assert_eq!(t.req(C, 1, X + 1, Write), vec![revoke(A, X + 1, r, false)]);
    assert_eq!(t.tick(1000 + TIMEOUT + 1), vec![expire(A, X, w)]);
    let reason = Expiry { ino: X, lease: w, timeout_ms: TIMEOUT };
    assert_eq!(reason.to_string(), format!("did not answer the revoke of inode {X} within {TIMEOUT} ms"));
    assert!(t.0.expired(A) && !t.0.expired(B));
    assert_eq!(t.0.next_deadline(), None, "A's other revoke is disarmed");
    assert_eq!(t.tick(1_000_000), vec![], "once per session");
    let c = t.0.counts();
    assert_eq!((c.expired, c.revokes_in_flight, c.waiting), (1, 2, 2));
    // A keeps what it holds until its session ends: nicfs first publishes its log up to
    // where it stood. Then both waiting requests are served.
    assert_eq!(t.0.holders(X), (Some((A, w)), vec![]));
    let out = t.ended(A);
    assert!(
        matches!(
            out[..],
            [
                Output::Grant { session: B, req_id: 1, ino: X, mode: Write, .. },
                Output::Grant { session: C, req_id: 1, mode: Write, .. }
            ]
        ),
        "{out:?}"
    );
    assert!(!t.0.expired(A));
}

#[test]
fn a_revoke_answered_in_time_expires_nobody() {
    let mut t = T::timed();
    t.tick(0);
    let w = t.granted(A, 1, X, Write);
    assert_eq!(t.req(B, 1, X, Read), vec![revoke(A, X, w, true)]);
    assert_eq!(t.tick(TIMEOUT), vec![]);
    assert_eq!(t.done(A, X, w, 40), vec![Output::Publish { session: A, lsn: 40 }]);
    assert_eq!(t.0.next_deadline(), None, "answered: no deadline left");
    // The publication takes longer than the timeout: that is not the holder's to answer.
    assert_eq!(t.tick(10 * TIMEOUT), vec![]);
    let out = t.published(A, 40);
    let [Output::Grant { session: B, lease: b, .. }] = out[..] else { panic!("{out:?}") };
    // A revoke sent after a long quiet time gets the whole timeout from when it is sent.
    t.tick(50_000);
    let out = t.req(C, 1, X, Write);
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(t.0.next_deadline(), Some(50_000 + TIMEOUT));
    t.tick(50_000 + TIMEOUT);
    assert_eq!(t.done(A, X, w, 40), vec![]);
    let out = t.done(B, X, b, 0);
    assert!(matches!(out[..], [Output::Grant { session: C, mode: Write, .. }]), "{out:?}");
    assert_eq!(t.tick(u64::MAX), vec![]);
    assert_eq!(t.0.counts().expired, 0);
}

#[test]
fn a_revoke_answered_after_expiry_is_stale_and_the_waiters_go_on_without_the_expired_session() {
    let mut t = T::timed();
    const Y: Ino = 20;
    const D: SessionId = 4;
    t.tick(0);
    let w = t.granted(A, 1, X, Write);
    assert_eq!(t.req(C, 1, X, Write), vec![revoke(A, X, w, false)]);
    // A also waits for Y, which B holds and is asked for later; D waits behind A.
    t.tick(50);
    let b = t.granted(B, 1, Y, Write);
    assert_eq!(t.req(A, 2, Y, Read), vec![revoke(B, Y, b, true)]);
    assert_eq!(t.req(D, 1, Y, Write), vec![]);
    // A expires: its request for Y goes, D is at the head, still behind B's answer.
    assert_eq!(t.tick(TIMEOUT + 1), vec![expire(A, X, w)]);
    assert_eq!(t.0.counts().waiting, 2, "C's and D's");
    // B answers in time: D is next (A's read is not granted).
    let out = t.done(B, Y, b, 0);
    let [Output::Revoke { session: B, ino: Y, keep_read: false, .. }] = out[..] else { panic!("{out:?}") };
    let out = t.done(B, Y, b, 0);
    assert!(matches!(out[..], [Output::Grant { session: D, ino: Y, mode: Write, .. }]), "{out:?}");
    // A answers late, releases, asks again: all ignored; it still holds X.
    let stale = t.0.counts().stale;
    assert_eq!(t.done(A, X, w, 500), vec![]);
    assert_eq!(t.release(A, X, w, 500), vec![]);
    assert_eq!(t.0.counts().stale, stale + 2);
    assert_eq!(t.req(A, 3, X + 7, Read), vec![], "an expired session is granted nothing");
    assert_eq!(t.0.holders(X), (Some((A, w)), vec![]));
    assert_eq!(t.0.holders(X + 7), (None, vec![]));
    // Its publication up to the fence is not what C waits for (the late answer asked for
    // none); the end of its session is.
    assert_eq!(t.published(A, 500), vec![]);
    let out = t.ended(A);
    assert!(matches!(out[..], [Output::Grant { session: C, ino: X, mode: Write, .. }]), "{out:?}");
    // Nothing of A is left; it could expire again only as a new session.
    assert!(!t.0.expired(A));
    t.ended(C);
    t.ended(D);
    t.ended(B);
    assert!(t.0.is_empty(), "{:?}", t.0);
}

#[test]
fn an_expired_session_s_entries_are_admitted_until_it_ends_and_none_after() {
    let mut t = T::timed();
    t.tick(0);
    let w = t.granted(A, 1, X, Write);
    t.req(B, 1, X, Write);
    t.tick(TIMEOUT + 1);
    assert!(t.0.expired(A));
    // What it logged while it held the lease is published before the inode moves on...
    assert!(admits(&mut t, A, 0, &[X]));
    // ...and once its session ends, nothing of its log is.
    let out = t.ended(A);
    assert!(matches!(out[..], [Output::Grant { session: B, .. }]), "{out:?}");
    assert!(!admits(&mut t, A, 10, &[X]));
    let _ = w;
}

#[test]
fn revokes_never_expire_without_a_timeout() {
    let mut t = T::new();
    t.tick(0);
    let w = t.granted(A, 1, X, Write);
    assert_eq!(t.req(B, 1, X, Write), vec![revoke(A, X, w, false)]);
    assert_eq!(t.0.next_deadline(), None);
    assert_eq!(t.tick(u64::MAX), vec![]);
    assert!(!t.0.expired(A));
    assert_eq!(t.0.revoke_timeout_ms(), 0);
}
