//! nicfs: the NIC-side daemon of a linefs node. In the emulation (DESIGN §1) it is a process
//! of its own, optionally pinned to CPUs of its own (`--cpus`), and it owns the node's PM:
//! the public area and the allocation state. Clients attach over a Unix socket with the
//! `linefs-proto` protocol, write only their own log, and nicfs publishes it.
//!
//! ```text
//! nicfs --node DIR --socket PATH [--cpus LIST] [--status-file PATH] [--kworker-heartbeat-ms N]
//!       [--chunk-bytes N] [--no-coalesce] [--metrics-addr IP:PORT] [--node-id N --zk HOST:PORT,…
//!       --cluster-key PATH [--peer-addr ADDR] [--bulk-addr ADDR]]
//! ```
//!
//! What exists now:
//!
//! * **process** ([`daemon`], [`daemon::args`], [`config`], pm's `signals`): an exclusive
//!   `flock` of `DIR/nicfs.lock` (pm's `node::lock_node`: a file no client is handed; a
//!   second nicfs, or a host-only mount, is refused: one line on stderr, exit 1), log files
//!   of the wrong size replaced, pm's recovery of the node, the socket (mode 0666, a stale
//!   one replaced), a thread per connection within the limits; SIGTERM/SIGINT publish every
//!   attached client's committed log, write the last status, remove the socket and exit 0.
//! * **limits and faults** ([`limits`], [`node::sigbus`]): per-user limits on connections
//!   (counted at accept, the excess refused without a thread), log slots (root keeps a reserve),
//!   inode numbers and block reservations; a fenced uid's backoff; refusals counted in
//!   status. A client that resizes its log file under nicfs's mapping fails its session;
//!   nicfs survives the fault.
//! * **sessions** ([`daemon::conn`], [`daemon::control`], [`session`], [`daemon::bulk`],
//!   [`node::slots`]): a control Hello claims a free log slot (an exclusive `flock` of its
//!   log file, held for the session), records the peer's SO_PEERCRED, and answers
//!   `Attached` with the log file read-write and the public file read-only — the kernel
//!   enforces that a client writes only its own log. No free slot: EBUSY. The bulk Hello
//!   names the session; the same process only, one per session. When a session ends its
//!   slot's log file is replaced by a fresh one before the slot is claimed again, so that
//!   the descriptor the client keeps reaches nothing.
//! * **the publishing pipeline** ([`pipeline`], [`pipeline::stage`],
//!   [`pipeline::sequencer`], [`pipeline::chunk`], [`host::copylist`], [`node`]): each
//!   session's sequencer keeps the client's order and asks for its committed log to be
//!   fetched; **fetch** copies chunks of it (4 MiB) out of the client's log file into
//!   nicfs's memory, **validate** checks and decodes them there (nothing is read from the
//!   log again), **coalesce** works out what a later record of the same chunk overwrites,
//!   **publish** applies each chunk as one batch under the public area's mutex — metadata
//!   by nicfs, file data as one copy list executed by the kworker (or by nicfs when
//!   isolated) — then the durable checkpoint; the sequencer **acknowledges** (`Published`,
//!   `FsyncDone`, `Rejected`) in log order. Stages run on elastic thread pools shared by
//!   all sessions. A refused entry fails its session and nothing else.
//! * **client death**: the end of the control connection ends the session: nicfs publishes
//!   what the slot has committed, drops a refused suffix (the checkpoint moves past it, so
//!   the next client of the slot starts clean), replaces the slot's log file and frees the
//!   slot.
//! * **bad input**: a frame that does not decode gets an Error reply and a log line; the
//!   connection closes when the stream is out of step or after [`peer::MAX_BAD_FRAMES`].
//!   Nothing a peer sends panics the daemon.
//! * **inode numbers and blocks** ([`node::alloc`]): node-wide ranges of inode numbers
//!   (`Attached`, `AllocInodes`) and block reservations (`ReserveBlocks`, `ReleaseBlocks`,
//!   `StatFs`).
//! * **leases** ([`lease::table`], [`lease::manager`]): single writer, many readers per
//!   inode. The table is a pure state machine (FIFO queue per inode, revokes with
//!   `keep_read` to downgrade a writer for a reader, a written inode granted to another
//!   session only once its writer's log is published up to what it handed back, implicit
//!   write leases of the numbers a session was handed), simulated under a seeded scheduler
//!   in its tests. The daemon feeds it from the control connections, the publishers and the
//!   sessions' ends, and carries out its outputs after its mutex is released: grants and
//!   revokes through each session's outbox thread, publications as `PublishTo` jobs — so no
//!   connection's reader ever waits on another client. A failed or ended session's leases
//!   end with it.
//! * **host link** ([`host::link`]): one kworker per node (a second gets EBUSY); the mode
//!   is `normal` while it heartbeats, `isolated` when its connection ends or 3 intervals
//!   pass without a heartbeat (noticed within a second); `HostLink::copy` sends a copy list
//!   to the kworker, or runs it in nicfs with the same executor (`linefs-copier`), and
//!   redoes a list whose kworker was lost — after killing that kworker, so that it cannot
//!   finish the list late.
//! * **status** ([`daemon::status`], [`observe::counters`], [`observe::latency`]): a JSON
//!   file rewritten every second, at each mode switch and at exit: sessions, the mode, the
//!   publication counters (one struct), each stage's queue, threads and wait/service
//!   latency quantiles, the end-to-end chunk and fsync latencies, and the metrics address.
//! * **metrics** ([`daemon::metrics`], [`daemon::metrics::http`]): with `--metrics-addr
//!   IP:PORT` (loopback only; port 0 picks one), Prometheus text — the same numbers, the
//!   latencies as histograms — served to `GET /metrics` by a small HTTP/1.1 responder on a
//!   thread of its own.
//!
//! * **cluster membership** (`daemon::cluster`): with `--node-id` and `--zk`, the node joins
//!   its cluster through clustermgr on a runtime thread of its own, persists each new view
//!   (epoch, members, chain position) in its node record before reporting it, never goes
//!   below the epoch it persisted, and rejoins after a lost session; ZooKeeper lost, it logs
//!   its retries and serves on. Without the flags it never talks to ZooKeeper.
//!
//! * **peer links** (`daemon::peers`): with `--zk`, the node loads the cluster key
//!   (`--cluster-key`), listens on two loopback TCP ports (the peer link's low-latency and
//!   bulk classes) registered in its member znode, and keeps one authenticated link of each
//!   class to every other member of the view (the lower id dials), with Ping/Pong beats that
//!   carry the epoch and give the round trip.
//!
//! * **chain replication** (`daemon::replication`, [`pipeline::replicate`]): with `--zk`,
//!   every client log is replicated down its chain by `linefs-chain`'s engine on a thread of
//!   its own: what the pipeline published (the validated copy's bytes) is shipped from
//!   memory over the peer links, each replica persists it into its copy of the log before it
//!   acknowledges and publishes it through the same checks, with the writer's credentials;
//!   an fsync returns once every live chain member holds its LSN durable, and a client
//!   reuses its log only below what is published and replicated.
//!
//! * **admission** ([`lease::manager`], [`lease::perms`], [`node::grants`]): an entry is
//!   published only if its session holds the write lease of every inode it changes and its
//!   caller may make the change (pm's permission rules; the caller as [`node::caller`]
//!   resolves it, the files it may write through an open for writing or as their creator as
//!   [`node::grants`] keeps them); otherwise it and what follows are refused and the
//!   session fails. After a crash, the next start's recovery judges the committed suffixes
//!   the same way ([`node::rejudge`]): by the write leases and, for what nicfs had not
//!   applied, by meaning, for each session's credentials, both recorded in PM
//!   ([`node::lease_record`]).
//!
//! # Layout: folders by concern, imports only downward
//!
//! ```text
//! daemon/    the process: Config in, socket, connections (conn, control, bulk), cluster
//!            membership (cluster), peer links (peers), chain replication (replication),
//!            the daemon's private shared state (ctx), status file, /metrics, args (clap)
//! pipeline/  fetch → validate → coalesce → publish stages (stage), the chunk that flows
//!            through them (chunk), each session's acknowledging sequencer (sequencer),
//!            what it hands replication (replicate)
//! config     what the core runs with (thread counts, chunk size, timeouts, limits)
//! lease/     the lease table (pure), the lease manager, permissions (perms)
//! session    a session, the registry, its job queue and outbox
//! node/      the node's PM: slots, allocation, grants, opens, lease record, recovery
//! observe/   counters and latency histograms the working parts record into
//! host/      the kworker link and the node's mode; copy lists
//! limits, peer   per-user limits and refusals; a connection's peer and bad frames
//! ```
//!
//! Each module imports only modules listed below it (`daemon` → `pipeline` → `config` →
//! `lease` → `session` → `node` → `observe` → `host` → `limits`, `peer`), never one above:
//! no import cycle, between folders or between modules. The daemon's shared state
//! (`daemon::ctx::Ctx`) is private to `daemon`; the parts below are handed what they use.
//!
//! Not built yet: the replication of the lease record, state transfer to a replica behind
//! the primary's reclaimed log, the MINOS engine. See docs/ARCHITECTURE.md, "nicfs".
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod config;
pub(crate) mod daemon;
pub mod host;
pub(crate) mod lease;
pub(crate) mod limits;
pub(crate) mod node;
pub(crate) mod observe;
pub(crate) mod peer;
pub(crate) mod pipeline;
pub(crate) mod session;

pub use config::Config;
pub use daemon::args::Args;
pub use daemon::run;
