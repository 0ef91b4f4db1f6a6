//! clustermgr: membership, epochs, root leases and chain order over ZooKeeper.
//! Not built yet: see docs/ARCHITECTURE.md.
