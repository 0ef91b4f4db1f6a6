//! Scenario tests of the engine through a hand-driven cluster: messages and persists wait in
//! queues until a test step delivers or completes them, so each test fixes one interleaving.

use crate::{Config, Engine, Input, Message, Mode, NodeId, Output, Ts, Value};

type Msg = Message<u8>;

struct Cluster {
    nodes: Vec<Engine<u8>>,
    net: Vec<(NodeId, NodeId, Msg)>,
    persists: Vec<(NodeId, u8, Ts)>,
    writes_done: Vec<(NodeId, u64, Ts)>,
    reads_done: Vec<(NodeId, u64, Value)>,
    scopes_done: Vec<(NodeId, u64)>,
}

fn val(b: u8) -> Value {
    Value::from(&[b][..])
}

impl Cluster {
    fn new(n: u32, mode: Mode) -> Cluster {
        Cluster {
            nodes: (0..n).map(|i| Engine::new(Config::new(i, n, mode))).collect(),
            net: vec![],
            persists: vec![],
            writes_done: vec![],
            reads_done: vec![],
            scopes_done: vec![],
        }
    }

    fn input(&mut self, node: NodeId, input: Input<u8>) {
        for o in self.nodes[node as usize].on_input(input) {
            match o {
                Output::Send { to, msg } => self.net.push((node, to, msg)),
                Output::Apply { .. } => {}
                Output::Persist { key, ts, .. } => self.persists.push((node, key, ts)),
                Output::WriteDone { op, ts, .. } => self.writes_done.push((node, op, ts)),
                Output::ReadDone { op, value, .. } => self.reads_done.push((node, op, value)),
                Output::ScopeDone { op, .. } => self.scopes_done.push((node, op)),
            }
        }
    }

    fn write(&mut self, node: NodeId, op: u64, key: u8, b: u8) {
        self.input(node, Input::Write { op, key, value: val(b), scope: None });
    }

    /// Deliver the first queued message matching `pred`; panics if none.
    fn deliver(&mut self, pred: impl Fn(NodeId, NodeId, &Msg) -> bool) {
        let i = self.net.iter().position(|(f, t, m)| pred(*f, *t, m)).expect("a matching message");
        let (from, to, msg) = self.net.remove(i);
        self.input(to, Input::Receive { from, msg });
    }

    fn deliver_kind(&mut self, kind: &str) {
        while self.net.iter().any(|(_, _, m)| m.kind() == kind) {
            self.deliver(|_, _, m| m.kind() == kind);
        }
    }

    fn deliver_all(&mut self) {
        while !self.net.is_empty() {
            self.deliver(|_, _, _| true);
        }
    }

    fn persist_on(&mut self, node: NodeId) {
        while let Some(i) = self.persists.iter().position(|p| p.0 == node) {
            let (n, key, ts) = self.persists.remove(i);
            self.input(n, Input::Persisted { key, ts });
        }
    }

    fn persist_all(&mut self) {
        for n in 0..self.nodes.len() as NodeId {
            self.persist_on(n);
        }
    }

    fn settle(&mut self) {
        while !self.net.is_empty() || !self.persists.is_empty() {
            self.persist_all();
            self.deliver_all();
        }
    }
}

#[test]
fn synch_write_returns_after_every_persist_and_reads_wait_for_val() {
    let mut c = Cluster::new(3, Mode::Synch);
    c.write(0, 1, 7, 42);
    c.deliver_kind("INV");
    // Followers applied but have not persisted: no ACK yet.
    assert!(c.net.is_empty());
    c.input(1, Input::Read { op: 9, key: 7 });
    assert!(c.reads_done.is_empty(), "RDLock held until VAL");
    c.persist_on(1);
    c.persist_on(2);
    c.deliver_kind("ACK");
    assert!(c.writes_done.is_empty(), "the coordinator's own persist is awaited");
    c.persist_on(0);
    assert_eq!(c.writes_done, vec![(0, 1, Ts::new(1, 0))]);
    assert!(c.reads_done.is_empty());
    c.deliver_kind("VAL");
    assert_eq!(c.reads_done, vec![(1, 9, val(42))]);
    for n in &c.nodes {
        let r = n.record(&7);
        assert_eq!(
            (r.volatile_ts, r.glb_volatile_ts, r.glb_durable_ts, r.rdlock),
            (Ts::new(1, 0), Ts::new(1, 0), Ts::new(1, 0), None)
        );
        assert!(n.is_idle());
    }
}

#[test]
fn strict_releases_readers_at_val_c_and_returns_after_ack_p() {
    let mut c = Cluster::new(3, Mode::Strict);
    c.write(0, 1, 0, 5);
    c.deliver_kind("INV");
    c.persist_on(0);
    c.deliver_kind("ACK_C");
    c.deliver_kind("VAL_C");
    c.input(2, Input::Read { op: 3, key: 0 });
    assert_eq!(c.reads_done, vec![(2, 3, val(5))], "readers see it after VAL_C");
    assert!(c.writes_done.is_empty(), "but the write waits for ACK_P");
    c.persist_on(1);
    c.persist_on(2);
    c.deliver_kind("ACK_P");
    assert_eq!(c.writes_done.len(), 1);
    c.deliver_kind("VAL_P");
    assert!(c.nodes.iter().all(|n| n.record(&0).glb_durable_ts == Ts::new(1, 0)));
}

#[test]
fn renf_returns_at_ack_c_but_readers_wait_for_every_persist() {
    let mut c = Cluster::new(3, Mode::ReadEnforced);
    c.write(1, 1, 0, 5);
    c.deliver_kind("INV");
    c.deliver_kind("ACK_C");
    assert_eq!(c.writes_done.len(), 1, "returns after all ACK_C, nothing persisted");
    c.input(1, Input::Read { op: 2, key: 0 });
    c.input(0, Input::Read { op: 3, key: 0 });
    c.persist_on(0);
    c.persist_on(2);
    c.deliver_kind("ACK_P");
    assert!(c.reads_done.is_empty() && c.net.is_empty(), "coordinator's own persist missing");
    c.persist_on(1);
    assert_eq!(c.reads_done.len(), 1, "the coordinator's reader goes on");
    c.deliver_kind("VAL");
    assert_eq!(c.reads_done.len(), 2);
}

#[test]
fn event_returns_without_any_persist_and_persists_in_the_background() {
    let mut c = Cluster::new(3, Mode::Eventual);
    c.write(2, 1, 0, 5);
    c.deliver_kind("INV");
    c.deliver_kind("ACK_C");
    assert_eq!(c.writes_done.len(), 1);
    assert_eq!(c.persists.len(), 3, "every node persists, untracked");
    c.deliver_kind("VAL_C");
    c.persist_all();
    assert!(c.net.is_empty(), "no persistency message in event");
    assert!(c
        .nodes
        .iter()
        .all(|n| n.record(&0).glb_durable_ts == Ts::ZERO && n.record(&0).durable_ts == Ts::new(1, 2)));
}

#[test]
fn scope_end_returns_once_every_write_of_the_scope_is_persisted_everywhere() {
    let mut c = Cluster::new(3, Mode::Scope);
    c.input(0, Input::Write { op: 1, key: 0, value: val(1), scope: Some(77) });
    c.input(0, Input::Write { op: 2, key: 1, value: val(2), scope: Some(77) });
    c.deliver_all();
    assert_eq!(c.writes_done.len(), 2);
    c.input(0, Input::ScopeEnd { op: 3, scope: 77 });
    c.deliver_kind("[PERSIST]sc");
    c.persist_on(1);
    c.deliver_all();
    assert!(c.scopes_done.is_empty(), "node 2 and the coordinator have not persisted");
    c.persist_on(2);
    c.deliver_all();
    assert!(c.scopes_done.is_empty());
    c.persist_on(0);
    assert_eq!(c.scopes_done, vec![(0, 3)]);
    c.deliver_all();
    assert!(c.nodes.iter().all(|n| n.record(&1).glb_durable_ts == Ts::new(1, 0)));
}

#[test]
fn newer_write_snatches_the_rdlock_and_the_older_is_skipped_after_consistency_spin() {
    for mode in crate::Mode::ALL {
        let mut c = Cluster::new(3, mode);
        c.write(0, 1, 0, 10); // <1,0>
        c.write(1, 2, 0, 11); // <1,1>, newer
                              // Node 2 gets the newer INV first; the older one is obsolete there.
        c.deliver(|f, t, m| f == 1 && t == 2 && m.kind() == "INV");
        assert_eq!(c.nodes[2].record(&0).rdlock, Some(Ts::new(1, 1)));
        c.deliver(|f, t, m| f == 0 && t == 2 && m.kind() == "INV");
        assert_eq!(c.nodes[2].record(&0).volatile_ts, Ts::new(1, 1), "{mode}: obsolete write skipped");
        assert!(!c.net.iter().any(|(f, t, _)| *f == 2 && *t == 0), "{mode}: spinning before acking <1,0>");
        // Node 0 receives the newer INV: snatches the RDLock from its own older write.
        c.deliver(|f, t, m| f == 1 && t == 0 && m.kind() == "INV");
        assert_eq!(c.nodes[0].record(&0).rdlock, Some(Ts::new(1, 1)));
        c.settle();
        assert_eq!(c.writes_done.len(), 2, "{mode}");
        for n in &c.nodes {
            let r = n.record(&0);
            assert_eq!((r.volatile_ts, r.glb_volatile_ts, r.rdlock), (Ts::new(1, 1), Ts::new(1, 1), None), "{mode}");
            assert_eq!(r.value, val(11));
            assert!(n.is_idle(), "{mode}: {n:?}");
        }
        c.input(0, Input::Read { op: 5, key: 0 });
        assert_eq!(c.reads_done.last().unwrap().2, val(11));
    }
}

#[test]
fn duplicate_messages_change_nothing() {
    let mut c = Cluster::new(2, Mode::Strict);
    c.write(0, 1, 0, 1);
    let inv = c.net[0].clone();
    c.deliver_all();
    c.persist_all();
    let acks: Vec<_> = c.net.clone();
    c.settle();
    let before: Vec<_> = c.nodes.clone();
    c.input(inv.1, Input::Receive { from: inv.0, msg: inv.2 });
    for (f, t, m) in acks {
        c.input(t, Input::Receive { from: f, msg: m });
    }
    // The copy of the INV is acked again (its first ack may have been lost) and changes
    // nothing else; the copies of the acks change nothing.
    assert!(c.persists.is_empty());
    assert!(c.net.iter().all(|(_, _, m)| matches!(m, Message::AckC { .. } | Message::AckP { .. })), "{:?}", c.net);
    assert_eq!(c.nodes, before);
    c.deliver_all();
    assert_eq!(c.nodes, before);
    assert_eq!(c.writes_done.len(), 1);
}

#[test]
fn a_restarted_node_catches_up_before_serving_and_its_writes_are_completed() {
    let mut c = Cluster::new(3, Mode::Eventual);
    // Node 2 acks <1,0> but crashes before persisting it.
    c.write(0, 1, 0, 1);
    c.deliver_all();
    c.persist_on(0);
    c.persist_on(1);
    c.persists.retain(|p| p.0 != 2);
    c.net.retain(|m| m.0 != 2 && m.1 != 2);
    assert_eq!(c.writes_done.len(), 1, "event returns at all ACK_C");
    let (e, out) = Engine::recover(Config::new(2, 3, Mode::Eventual), Vec::<(u8, Ts, Value)>::new());
    c.nodes[2] = e;
    for o in out {
        if let Output::Send { to, msg } = o {
            c.net.push((2, to, msg));
        }
    }
    // A read on the restarted node waits for the catch-up.
    c.input(2, Input::Read { op: 7, key: 0 });
    assert!(c.reads_done.is_empty() && c.nodes[2].is_rejoining());
    c.deliver_all();
    assert!(!c.nodes[2].is_rejoining());
    // Caught up, but the record is locked until the write is validated again.
    assert!(c.reads_done.is_empty());
    c.input(2, Input::Tick);
    c.deliver_all();
    c.persist_all();
    c.deliver_all();
    assert_eq!(c.reads_done, vec![(2, 7, val(1))]);
    assert!(c.nodes.iter().all(|n| n.is_idle()));
}

#[test]
fn a_write_whose_coordinator_crashed_is_completed_by_a_follower() {
    let mut c = Cluster::new(3, Mode::Synch);
    c.write(0, 1, 0, 5);
    // The INVs reach the followers, then node 0 crashes with nothing persisted.
    c.deliver_kind("INV");
    c.persists.retain(|p| p.0 != 0);
    c.net.retain(|m| m.0 != 0 && m.1 != 0);
    let (e, out) = Engine::recover(Config::new(0, 3, Mode::Synch), Vec::<(u8, Ts, Value)>::new());
    c.nodes[0] = e;
    for o in out {
        if let Output::Send { to, msg } = o {
            c.net.push((0, to, msg));
        }
    }
    c.deliver_all();
    c.persist_all();
    c.deliver_all();
    // Node 1 times out holding an unvalidated write and completes it.
    c.input(1, Input::Tick);
    for _ in 0..4 {
        c.deliver_all();
        c.persist_all();
    }
    c.input(0, Input::Read { op: 8, key: 0 });
    assert_eq!(c.reads_done, vec![(0, 8, val(5))]);
    assert!(c.writes_done.is_empty(), "the crashed client is never answered");
    assert!(c.nodes.iter().all(|n| n.is_idle() && n.record(&0).volatile_ts == Ts::new(1, 0)));
}
