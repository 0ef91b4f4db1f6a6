//! The scripted workloads of the model check ([`ModelCfg`]) and their fault budgets.
//!
//! Every workload runs on 3 nodes and 2 records, one client per node. Written values are
//! distinct per record and never 0 (the initial value), so a value names its write and the
//! value checks can tell an obsolete or wrong value from the right one.

use super::{ModelCfg, Op};
use crate::mode::{Mode, Mutation};

impl ModelCfg {
    fn with_scripts(mode: Mode, scripts: Vec<Vec<Op>>) -> ModelCfg {
        let cfg = ModelCfg {
            mode,
            nodes: scripts.len() as u32,
            keys: 2,
            scripts,
            duplicates: 0,
            drops: 0,
            crashes: 0,
            fifo: false,
            mutation: Mutation::None,
        };
        cfg.assert_values_distinct();
        cfg
    }

    fn assert_values_distinct(&self) {
        let mut seen = vec![];
        for op in self.scripts.iter().flatten() {
            if let Op::Write { key, value } = *op {
                assert!(value != 0 && !seen.contains(&(key, value)), "values are distinct per record and not 0");
                seen.push((key, value));
            }
        }
    }

    /// 3 concurrent writes (two to the same record), a read on every node; in lin-scope
    /// every write is in its client's scope, which ends after the read.
    pub fn standard(mode: Mode) -> ModelCfg {
        use Op::*;
        let mut scripts = vec![
            vec![Write { key: 0, value: 1 }, Read { key: 1 }],
            vec![Write { key: 0, value: 2 }, Read { key: 0 }],
            vec![Write { key: 1, value: 3 }, Read { key: 0 }],
        ];
        if mode == Mode::Scope {
            for s in &mut scripts {
                s.push(ScopeEnd);
            }
        }
        ModelCfg::with_scripts(mode, scripts)
    }

    /// 3 concurrent writes to one record: the most snatching and obsolete skipping.
    pub fn contended(mode: Mode) -> ModelCfg {
        use Op::*;
        let mut scripts = vec![
            vec![Write { key: 0, value: 1 }, Read { key: 0 }],
            vec![Write { key: 0, value: 2 }],
            vec![Write { key: 0, value: 3 }, Read { key: 0 }],
        ];
        if mode == Mode::Scope {
            for s in &mut scripts {
                s.push(ScopeEnd);
            }
        }
        ModelCfg::with_scripts(mode, scripts)
    }

    /// 3 concurrent writes (two to the same record) and one read racing them.
    pub fn small(mode: Mode) -> ModelCfg {
        use Op::*;
        let mut scripts = vec![
            vec![Write { key: 0, value: 1 }],
            vec![Write { key: 0, value: 2 }, Read { key: 0 }],
            vec![Write { key: 1, value: 3 }],
        ];
        if mode == Mode::Scope {
            for s in &mut scripts {
                s.push(ScopeEnd);
            }
        }
        ModelCfg::with_scripts(mode, scripts)
    }

    /// 2 concurrent writes to one record, a read racing them on the third node; in lin-scope
    /// node 0 then ends its scope.
    pub fn pair(mode: Mode) -> ModelCfg {
        use Op::*;
        let mut scripts =
            vec![vec![Write { key: 0, value: 1 }], vec![Write { key: 0, value: 2 }], vec![Read { key: 0 }]];
        if mode == Mode::Scope {
            scripts[0].push(ScopeEnd);
        }
        ModelCfg::with_scripts(mode, scripts)
    }

    /// A scope of two writes: node 0 writes both records (in lin-scope, in one scope it then
    /// ends), node 1 reads record 1 racing them, node 2 follows.
    pub fn scoped(mode: Mode) -> ModelCfg {
        use Op::*;
        let mut scripts =
            vec![vec![Write { key: 0, value: 1 }, Write { key: 1, value: 2 }], vec![Read { key: 1 }], vec![]];
        if mode == Mode::Scope {
            scripts[0].push(ScopeEnd);
        }
        ModelCfg::with_scripts(mode, scripts)
    }

    /// The fault workload: node 0 writes record 0 (in lin-scope, in a scope it then ends),
    /// node 1 reads it, node 2 only follows. Explored with lost messages or a crash of any
    /// node at any point: the crash of a coordinator, of a follower, of a reader before its
    /// read.
    pub fn faulty(mode: Mode) -> ModelCfg {
        use Op::*;
        let mut scripts = vec![vec![Write { key: 0, value: 1 }], vec![Read { key: 0 }], vec![]];
        if mode == Mode::Scope {
            scripts[0].push(ScopeEnd);
        }
        ModelCfg::with_scripts(mode, scripts)
    }

    /// A workload by name: `pair`, `small`, `standard`, `contended`, `faulty` or `scoped`.
    pub fn named(name: &str, mode: Mode) -> Option<ModelCfg> {
        match name {
            "pair" => Some(ModelCfg::pair(mode)),
            "small" => Some(ModelCfg::small(mode)),
            "standard" => Some(ModelCfg::standard(mode)),
            "contended" => Some(ModelCfg::contended(mode)),
            "faulty" => Some(ModelCfg::faulty(mode)),
            "scoped" => Some(ModelCfg::scoped(mode)),
            _ => None,
        }
    }

    pub const WORKLOADS: [&'static str; 6] = ["pair", "small", "standard", "contended", "faulty", "scoped"];

    /// How many deliveries may keep their message for another delivery.
    pub fn with_duplicates(mut self, n: u8) -> ModelCfg {
        self.duplicates = n;
        self
    }

    /// How many messages may be lost.
    pub fn with_drops(mut self, n: u8) -> ModelCfg {
        self.drops = n;
        self
    }

    /// How many node crashes (each followed at once by the node's restart) may happen.
    pub fn with_crashes(mut self, n: u8) -> ModelCfg {
        self.crashes = n;
        self
    }

    pub fn with_fifo(mut self, fifo: bool) -> ModelCfg {
        self.fifo = fifo;
        self
    }

    pub fn with_mutation(mut self, m: Mutation) -> ModelCfg {
        self.mutation = m;
        self
    }
}
