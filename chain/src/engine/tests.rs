//! Hand-driven cases of the engine's rules; the simulation covers the interleavings.

use super::*;
use crate::msg::Output;
use crate::types::Data;

const P: NodeId = 0;
const S: StreamId = StreamId { primary: P, slot: 1 };

fn view(epoch: Epoch, nodes: &[NodeId]) -> Input {
    Input::View(View { epoch, nodes: nodes.to_vec() })
}

fn chunk(epoch: Epoch, start: Lsn, bytes: &[u8]) -> Message {
    Message::Chunk { stream: S, epoch, start, data: Data::new(bytes.to_vec()), urgent: false }
}

#[test]
fn an_ack_means_persisted_and_fsync_waits_for_every_member() {
    let mut p = Engine::new(Config::new(P, 2, 4));
    let mut r1 = Engine::new(Config::new(1, 2, 4));
    for e in [&mut p, &mut r1] {
        e.on_input(view(1, &[0, 1, 2]));
    }
    let out = p.on_input(Input::Append { slot: 1, end: 6 });
    assert_eq!(out, vec![Output::SendLog { to: 1, slot: 1, epoch: 1, start: 0, end: 4, urgent: false }]);
    let out = p.on_input(Input::Fsync { op: 7, targets: vec![(S, 6)] });
    assert_eq!(out, vec![Output::SendLog { to: 1, slot: 1, epoch: 1, start: 4, end: 6, urgent: true }]);

    // Replica 1: forwards and persists in the same step, acknowledges only once persisted.
    let out = r1.on_input(Input::Receive { from: P, msg: chunk(1, 0, b"abcd") });
    assert!(matches!(out[0], Output::Send { to: 2, .. }));
    assert!(matches!(&out[1], Output::Persist { start: 0, data, .. } if data.len() == 4));
    assert_eq!(out.len(), 2, "no ack before the persist: {out:?}");
    let out = r1.on_input(Input::Persisted { stream: S, start: 0, end: 4 });
    assert_eq!(out[0], Output::Send { to: P, msg: Message::Ack { stream: S, epoch: 1, durable: 4 } });
    assert_eq!(out[1], Output::Publish { stream: S, start: 0, end: 4 });

    // Replica 1's ack alone does not complete the fsync; a duplicate of it neither.
    let ack = |from, durable| Input::Receive { from, msg: Message::Ack { stream: S, epoch: 1, durable } };
    assert!(p.on_input(ack(1, 6)).is_empty());
    assert!(p.on_input(ack(1, 6)).is_empty());
    let out = p.on_input(ack(2, 6));
    assert!(out.contains(&Output::FsyncDone { op: 7 }), "{out:?}");
    assert!(out.contains(&Output::Replicated { slot: 1, lsn: 6 }));
    // Nothing is published yet: nothing is reclaimed.
    assert!(!out.iter().any(|o| matches!(o, Output::Reclaim { .. })));
    let out = p.on_input(Input::Published { stream: S, start: 0, end: 5 });
    assert_eq!(out, vec![Output::Reclaim { stream: S, upto: 5 }]);
}

#[test]
fn stale_and_newer_epochs_are_dropped_at_the_door() {
    let mut r1 = Engine::new(Config::new(1, 2, 4));
    r1.on_input(view(3, &[0, 1, 2]));
    let before = r1.clone();
    assert!(r1.on_input(Input::Receive { from: P, msg: chunk(2, 0, b"ab") }).is_empty());
    assert_eq!(r1, before);
    let out = r1.on_input(Input::Receive { from: P, msg: chunk(4, 0, b"ab") });
    assert_eq!(out, vec![Output::NewerEpoch { epoch: 4, from: P }]);
    assert_eq!(r1, before);
    // An older view is ignored too.
    assert!(r1.on_input(view(2, &[1])).is_empty());
    assert_eq!(r1, before);
}

#[test]
fn a_gap_is_not_accepted_and_a_duplicate_is_reacknowledged() {
    let mut r = Engine::new(Config::new(2, 2, 4));
    r.on_input(view(1, &[0, 1, 2]));
    let out = r.on_input(Input::Receive { from: 1, msg: chunk(1, 4, b"efgh") });
    assert!(out.is_empty(), "tail: nothing to forward, and a gap: {out:?}");
    let out = r.on_input(Input::Receive { from: 1, msg: chunk(1, 0, b"abcdef") });
    assert_eq!(out, vec![Output::Persist { stream: S, start: 0, data: Data::new(b"abcdef".to_vec()) }]);
    let out = r.on_input(Input::Receive { from: 1, msg: chunk(1, 2, b"cdefgh") });
    assert_eq!(out, vec![Output::Persist { stream: S, start: 6, data: Data::new(b"gh".to_vec()) }]);
    let out = r.on_input(Input::Receive { from: 1, msg: chunk(1, 0, b"ab") });
    assert_eq!(out, vec![Output::Send { to: P, msg: Message::Ack { stream: S, epoch: 1, durable: 0 } }]);
    // Persists complete out of order: the ack waits for the prefix.
    assert!(r.on_input(Input::Persisted { stream: S, start: 6, end: 8 }).is_empty());
    let out = r.on_input(Input::Persisted { stream: S, start: 0, end: 6 });
    assert_eq!(out[0], Output::Send { to: P, msg: Message::Ack { stream: S, epoch: 1, durable: 8 } });
}

#[test]
fn a_new_member_is_probed_and_caught_up_or_rebased() {
    let mut p = Engine::new(Config::new(P, 1, 4));
    p.on_input(view(1, &[0, 1, 2]));
    p.on_input(Input::Append { slot: 1, end: 8 });
    let ack = |epoch, from, durable| Input::Receive { from, msg: Message::Ack { stream: S, epoch, durable } };
    p.on_input(ack(1, 1, 8));
    p.on_input(Input::Published { stream: S, start: 0, end: 8 });
    assert_eq!(p.log(1).expect("log").reclaimed, 8);
    // Node 1 leaves: node 2 joins the chain and is probed; an fsync waits for it.
    let out = p.on_input(view(2, &[0, 2]));
    assert_eq!(out, vec![Output::Send { to: 2, msg: Message::Probe { stream: S, epoch: 2 } }]);
    p.on_input(Input::Fsync { op: 1, targets: vec![(S, 8)] });
    // Its copy ends below the reclaimed point: rebase. The replicated LSN follows the
    // current chain down; nothing more is reclaimed.
    let out = p.on_input(ack(2, 2, 3));
    assert_eq!(
        out,
        vec![
            Output::Send { to: 2, msg: Message::Rebase { stream: S, epoch: 2, lsn: 8 } },
            Output::Replicated { slot: 1, lsn: 3 }
        ]
    );
    let out = p.on_input(ack(2, 2, 8));
    assert_eq!(out, vec![Output::Replicated { slot: 1, lsn: 8 }, Output::FsyncDone { op: 1 }]);
}

#[test]
fn fsync_of_another_nodes_log_is_refused() {
    let mut p = Engine::new(Config::new(P, 1, 4));
    let other = StreamId { primary: 3, slot: 0 };
    let out = p.on_input(Input::Fsync { op: 9, targets: vec![(S, 1), (other, 1)] });
    assert_eq!(out, vec![Output::FsyncRefused { op: 9, stream: other }]);
}
