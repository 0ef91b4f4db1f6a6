//! The publishing pipeline (LineFS §3.3.1): **fetch → validate → coalesce → publish**,
//! each stage a
//! queue and an elastic pool of threads ([`crate::pipeline::stage`]) shared by every session, and
//! the **acknowledgment** done by each session's sequencer ([`crate::pipeline::sequencer`]), which
//! also decides what to fetch.
//!
//! * **fetch** ([`FetchReq`]): copies a session's committed log, from where its last chunk
//!   ended up to what the client declared committed, out of its log file into nicfs's
//!   memory in chunks of at most [`CHUNK_BYTES`](crate::node::CHUNK_BYTES) (whole entries;
//!   the bytes are counted). One request per session at a time, so a session's chunks are
//!   cut in log order and numbered (`seq`); different sessions fetch in parallel.
//! * **validate**: scans each chunk *on the copy* (checksums, LSNs, lengths) and decodes its
//!   records (pm's [`Batch::from_copy`]); nothing is read from the client's log after this.
//!   Chunks of every session, including several of one session, are checked in parallel.
//! * **coalesce**: works out what of the chunk a later record of the same chunk overwrites
//!   (pm's [`coalesce::plan`]: data overwritten, truncated or punched, files created and
//!   freed, attributes set again) so that it is not copied or applied. A chunk is
//!   published and checkpointed as one batch, so only its end state is ever seen. The plan
//!   assumes every entry is valid; if publication refuses one, pm plans the valid prefix
//!   again.
//! * **publish**: restores each session's chunk order (a chunk waits until the one before
//!   it is published), admits its entries by the session's leases
//!   ([`Leases::admit`]: an entry changing an inode the session holds no write lease on is
//!   refused, and everything after it), then publishes — each entry also checked against
//!   the caller's permissions ([`crate::lease::perms`]) under the area's mutex — the chunk as one batch
//!   ([`Node::publish_batch`](crate::node::Node::publish_batch)): validation against the
//!   public state, metadata applied by nicfs, file data as one ordered copy list executed
//!   through the host link, the pointers to the new blocks, the fence and the durable
//!   checkpoint — all under the public area's mutex, which is why this stage has one
//!   thread: a crash must find at most one slot mid-batch (recovery's assumption), and
//!   blocks a batch frees are reused only after its checkpoint.
//! * **acknowledge**: the session's sequencer gets each chunk's outcome in order and sends
//!   `Published`, answers fsyncs, or fails the session.
//! * **replicate** ([`replicate`]): on a node of a cluster, what each chunk published is
//!   handed to the replication driver in log order (the validated copy's bytes), before the
//!   sequencer hears of it; an fsync is answered once it is replicated too.
//!
//! A chunk whose session has failed (an entry refused) is dropped at the publish stage; of a
//! fenced session (its lease expired, [`crate::pipeline::sequencer`]) an entry ending past the fence
//! is refused like an entry admission refuses, with everything after it. A
//! chunk that no longer starts at its slot's checkpoint — an earlier chunk of the session
//! ended short, at an entry that failed its checks on the copy — is dropped as stale (pm
//! refuses it before changing anything), and the sequencer fetches again from the
//! checkpoint when the client next asks.

pub(crate) mod chunk;
pub(crate) mod replicate;
pub(crate) mod sequencer;
pub(crate) mod stage;

use crate::config::Threads;
use crate::host::link::HostLink;
use crate::lease::manager::Leases;
use crate::lease::perms::SessionPerms;
use crate::node::Node;
use crate::observe::latency::Latency;
use crate::pipeline::chunk::{Checked, Event, FetchReq, Fetched};
use crate::pipeline::replicate::{Replicate, Writer};
use crate::pipeline::stage::{Budget, Stage, StageStatus, TUNE_PERIOD};
use linefs_pm::coalesce;
use linefs_pm::public::Permissions;
use linefs_pm::publish::{Batch, Published, SlotError};
use linefs_pm::record::{InodeImage, Record};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock, Weak};

/// Fetch buffers kept for reuse once their chunk is decoded: a chunk's copy is megabytes,
/// and a fresh allocation of that size is mapped, zeroed and faulted in page by page.
const SPARE_BUFFERS: usize = 8;

/// Per session: which chunk is published next, and the ones that arrived early.
#[derive(Default)]
struct Order {
    next: u64,
    parked: BTreeMap<u64, Checked>,
    busy: bool,
}

/// The pipeline of a node.
pub(crate) struct Pipeline {
    node: Arc<Node>,
    host: Arc<HostLink>,
    /// Admission of entries by the leases their session holds (None: every structurally
    /// valid entry is published — the pipeline's unit tests, which have no lease table).
    leases: Option<Arc<Leases>>,
    fetch: Stage<FetchReq>,
    validate: Stage<Fetched>,
    coalesce: Option<Stage<Checked>>,
    publish: Stage<Checked>,
    order: Mutex<HashMap<u64, Order>>,
    /// Buffers of decoded chunks, for the next fetches ([`SPARE_BUFFERS`] at most).
    spare: Mutex<Vec<Vec<u8>>>,
    /// The replication driver, on a node of a cluster (set once, before any session).
    replicate: OnceLock<Arc<dyn Replicate>>,
}

impl Pipeline {
    /// Starts the stages' threads and the tuner that grows them; without `coalesce`, chunks
    /// go from validation straight to publication.
    pub(crate) fn start(
        node: Arc<Node>,
        host: Arc<HostLink>,
        leases: Option<Arc<Leases>>,
        coalesce: bool,
        threads: &Threads,
    ) -> Arc<Pipeline> {
        let budget = Budget::new(threads.extra);
        let p = Arc::new_cyclic(|me: &Weak<Pipeline>| {
            let (fmin, fmax) = threads.fetch;
            let (vmin, vmax) = threads.validate;
            let (cmin, cmax) = threads.coalesce;
            let (pmin, pmax) = threads.publish;
            Pipeline {
                node,
                host,
                leases,
                fetch: Stage::new("fetch", fmin, fmax, budget.clone(), on(me, Pipeline::do_fetch)),
                validate: Stage::new("validate", vmin, vmax, budget.clone(), on(me, Pipeline::do_validate)),
                coalesce: coalesce
                    .then(|| Stage::new("coalesce", cmin, cmax, budget.clone(), on(me, Pipeline::do_coalesce))),
                publish: Stage::new("publish", pmin, pmax, budget.clone(), on(me, Pipeline::do_publish)),
                order: Mutex::new(HashMap::new()),
                spare: Mutex::new(Vec::new()),
                replicate: OnceLock::new(),
            }
        });
        let me = Arc::downgrade(&p);
        let tuner = std::thread::Builder::new().name("tuner".into()).spawn(move || loop {
            std::thread::sleep(TUNE_PERIOD);
            let Some(p) = me.upgrade() else { break };
            p.fetch.tune();
            p.validate.tune();
            if let Some(c) = &p.coalesce {
                c.tune();
            }
            p.publish.tune();
        });
        if let Err(e) = tuner {
            tracing::error!(error = %e, "cannot start the pipeline's tuner: stages keep their threads");
        }
        p
    }

    /// Hands what is published to `r` from now on ([`replicate`]); set once, before the
    /// first session attaches.
    pub(crate) fn set_replication(&self, r: Arc<dyn Replicate>) {
        if self.replicate.set(r).is_err() {
            tracing::error!("replication was set twice; the first stays");
        }
    }

    /// The replication driver, if the node replicates.
    pub(crate) fn replication(&self) -> Option<&Arc<dyn Replicate>> {
        self.replicate.get()
    }

    /// Queues a fetch request (its session has none in progress).
    pub(crate) fn fetch(&self, req: FetchReq) {
        self.fetch.submit(req);
    }

    /// Forgets a session that ended (nothing of it is in flight).
    pub(crate) fn forget(&self, session: u64) {
        self.order.lock().remove(&session);
    }

    pub(crate) fn stages(&self) -> Vec<StageStatus> {
        let mut v = vec![self.fetch.status(), self.validate.status()];
        v.extend(self.coalesce.as_ref().map(Stage::status));
        v.push(self.publish.status());
        v
    }

    /// Each stage's name and its wait and service histograms, in pipeline order.
    pub(crate) fn stage_latencies(&self) -> Vec<(&'static str, Latency, Latency)> {
        fn of<T: Send + 'static>(s: &Stage<T>) -> (&'static str, Latency, Latency) {
            let (wait, service) = s.latencies();
            (s.name(), wait, service)
        }
        let mut v = vec![of(&self.fetch), of(&self.validate)];
        v.extend(self.coalesce.as_ref().map(of));
        v.push(of(&self.publish));
        v
    }

    fn do_fetch(&self, req: FetchReq) {
        let slot = req.flow.session.slot;
        let (mut at, mut seq) = (req.from, req.seq);
        let mut error = None;
        while at < req.until {
            let buf = self.spare.lock().pop().unwrap_or_default();
            match self.node.fetch_into(slot, at, req.until, buf) {
                Ok(copy) if copy.bytes.is_empty() => {
                    self.give_back(copy.bytes);
                    break;
                }
                Ok(copy) => {
                    at = copy.end();
                    self.validate.submit(Fetched { flow: req.flow.clone(), seq, copy });
                    seq += 1;
                }
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        req.flow.tell(Event::Fetched { generation: req.generation, end: at, next_seq: seq, error });
    }

    fn do_validate(&self, f: Fetched) {
        let (batch, stop) = Batch::from_copy(&f.copy);
        if batch.end() < f.copy.end() && batch.malformed.is_none() {
            tracing::warn!(slot = f.copy.slot, lsn = batch.end(), ?stop, "chunk ends short of what was fetched");
        }
        // Kept for replication: the bytes that were checked, up to the batch's last entry.
        let bytes = self.replicate.get().map(|_| {
            let len = (batch.end() - f.copy.from).min(f.copy.bytes.len() as u64) as usize;
            Arc::<[u8]>::from(&f.copy.bytes[..len])
        });
        let checked = Checked { flow: f.flow, seq: f.seq, end: f.copy.end(), batch, plan: None, bytes };
        self.give_back(f.copy.bytes);
        match &self.coalesce {
            Some(c) => c.submit(checked),
            None => self.publish.submit(checked),
        }
    }

    /// Keeps a decoded chunk's buffer for a later fetch, if fewer than [`SPARE_BUFFERS`] are.
    fn give_back(&self, buf: Vec<u8>) {
        let mut spare = self.spare.lock();
        if spare.len() < SPARE_BUFFERS {
            spare.push(buf);
        }
    }

    fn do_coalesce(&self, mut c: Checked) {
        if !c.batch.entries.is_empty() {
            c.plan = Some(coalesce::plan(c.batch.entries.iter().map(|(_, r)| &r[..])));
        }
        self.publish.submit(c);
    }

    /// Publishes the session's chunks in order: `c` waits if an earlier chunk has not been
    /// published yet; whoever publishes the earlier one carries on with it.
    fn do_publish(&self, c: Checked) {
        let session = c.flow.session.id;
        {
            let mut order = self.order.lock();
            let o = order.entry(session).or_default();
            o.parked.insert(c.seq, c);
            if o.busy {
                return;
            }
            o.busy = true;
        }
        loop {
            let next = {
                let mut order = self.order.lock();
                // Gone: the session ended (its sequencer forgets it once nothing is left).
                let Some(o) = order.get_mut(&session) else { return };
                match o.parked.remove(&o.next) {
                    Some(c) => {
                        o.next += 1;
                        c
                    }
                    None => {
                        o.busy = false;
                        return;
                    }
                }
            };
            self.publish_one(next);
        }
    }

    fn publish_one(&self, c: Checked) {
        let flow = &c.flow;
        if flow.session.failed() {
            flow.tell(Event::Dropped { seq: c.seq });
            return;
        }
        if c.batch.is_empty() {
            let nothing = Published { from: c.batch.from, upto: c.batch.from, ..Published::default() };
            flow.tell(Event::Published { seq: c.seq, end: c.end, result: Ok(nothing) });
            return;
        }
        // A fenced session's entries past its fence are refused (its client may have
        // rewritten its log since the fence was read), and so are entries the session had no
        // right to log — each with everything after it.
        let fenced = fence_cut(&c.batch, flow.session.fence());
        let batch = fenced.as_ref().unwrap_or(&c.batch);
        let admitted;
        let mut batch = match self.leases.as_ref().map(|l| l.admit(flow.session.id, batch)) {
            Some((n, Some((lsn, why)))) => {
                admitted = batch.refused_from(n, lsn, why);
                &admitted
            }
            _ => batch,
        };
        // Frees of inodes another session holds open are not published: nicfs keeps those
        // orphans ([`crate::node::opens`]). The coalescing plan was made with the frees.
        let kept = kept_orphans(&self.node.opens, flow.session.id, batch);
        let without;
        let mut plan = c.plan.as_ref();
        if !kept.is_empty() {
            tracing::debug!(session = flow.session.id, ?kept, "frees of inodes open elsewhere kept back");
            without = without_frees(batch, &kept, |ino| self.node.inode(ino).ok().flatten());
            batch = &without;
            plan = None;
        }
        let mut perms =
            SessionPerms { session: &flow.session, grants: &self.node.grants, record: Some(&self.node.leases) };
        let perms = self.leases.is_some().then_some(&mut perms as &mut dyn Permissions);
        match self.node.publish_batch(batch, plan, &self.host, perms) {
            (Err(SlotError::Stale { from, checkpoint, .. }), _) => {
                tracing::debug!(seq = c.seq, from, checkpoint, "stale chunk dropped");
                flow.tell(Event::Dropped { seq: c.seq });
            }
            (result, _copied) => {
                if let Ok(p) | Err(SlotError::Rejected { published: p, .. }) = &result {
                    self.freed(flow.session.id, &c.batch, p.entries as usize, &kept);
                    self.replicate(&c, p);
                }
                flow.tell(Event::Published { seq: c.seq, end: c.end, result })
            }
        }
    }

    /// Hands what `c`'s publication `p` accepted to replication (before the sequencer hears
    /// of it, so that an fsync it then asks for comes after).
    fn replicate(&self, c: &Checked, p: &Published) {
        let (Some(r), Some(bytes)) = (self.replicate.get(), &c.bytes) else { return };
        if p.upto <= p.from || p.from != c.batch.from {
            return;
        }
        let len = (p.upto - p.from) as usize;
        if len > bytes.len() {
            tracing::error!(
                slot = c.batch.slot,
                from = p.from,
                upto = p.upto,
                "published past the checked bytes: not replicated"
            );
            return;
        }
        let bytes = if len == bytes.len() { bytes.clone() } else { Arc::from(&bytes[..len]) };
        let s = &c.flow.session;
        let writer = Writer { uid: s.cred.uid, gid: s.cred.gid, groups: s.groups.clone(), trusted: s.cred.uid == 0 };
        r.append(c.batch.slot, p.from, bytes, &writer);
    }

    /// After the first `n` entries of `batch` are published: the session's leases on the
    /// inodes they free end, and the numbers freed (not kept) are free again.
    fn freed(&self, session: u64, batch: &Batch, n: usize, kept: &[u64]) {
        for (_, records) in batch.entries.iter().take(n) {
            for r in records {
                if let Record::FreeInode { ino } = *r {
                    if let Some(l) = &self.leases {
                        l.feed(crate::lease::table::Input::Forget { session, ino });
                    }
                    if kept.contains(&ino) {
                        self.node.alloc.forget_grant(ino);
                    } else {
                        self.node.alloc.freed(ino);
                    }
                }
            }
        }
    }
}

/// `batch` cut before its first entry that ends past `fence`, that entry refused; None if
/// every entry ends before it.
fn fence_cut(batch: &Batch, fence: u64) -> Option<Batch> {
    let (n, (loc, _)) = batch.entries.iter().enumerate().find(|(_, (loc, _))| loc.end > fence)?;
    Some(batch.refused_from(n, loc.lsn, format!("logged past the session's fence at lsn {fence}")))
}

/// The inodes `batch` frees that another session holds open (now kept by `opens`).
fn kept_orphans(opens: &crate::node::opens::Opens, session: u64, batch: &Batch) -> Vec<u64> {
    let mut kept = Vec::new();
    for (_, records) in &batch.entries {
        for r in records {
            if let Record::FreeInode { ino } = *r {
                if opens.keep(session, ino) {
                    kept.push(ino);
                }
            }
        }
    }
    kept
}

/// `batch` with its frees of `kept` replaced by the inode's attributes with no link left
/// (a client frees an unlinked inode without writing its last link count first): the
/// orphan stays, unreachable, until nicfs frees it — or recovery does, after a crash.
/// `published` is an inode's image in the public area.
fn without_frees(batch: &Batch, kept: &[u64], published: impl Fn(u64) -> Option<InodeImage>) -> Batch {
    let mut b = batch.clone();
    let mut latest: std::collections::HashMap<u64, InodeImage> = std::collections::HashMap::new();
    for (_, records) in &mut b.entries {
        for r in records.iter_mut() {
            match r {
                Record::Inode { img, .. } => {
                    latest.insert(img.ino, *img);
                }
                Record::FreeInode { ino } if kept.contains(ino) => {
                    let ino = *ino;
                    if let Some(mut img) = latest.get(&ino).copied().or_else(|| published(ino)) {
                        img.nlink = 0;
                        latest.insert(ino, img);
                        *r = Record::Inode { fresh: false, img };
                    }
                }
                _ => {}
            }
        }
        records.retain(|r| !matches!(r, Record::FreeInode { ino } if kept.contains(ino)));
    }
    b
}

/// A stage handler calling `f` on the pipeline, if it still exists.
fn on<T: 'static>(me: &Weak<Pipeline>, f: fn(&Pipeline, T)) -> impl Fn(T) + Send + Sync + 'static {
    let me = me.clone();
    move |item| {
        if let Some(p) = me.upgrade() {
            f(&p, item)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::chunk::Flow;
    use crate::session::Session;
    use linefs_pm::layout::FormatParams;
    use linefs_pm::node::log_file_name;
    use linefs_pm::oplog::LogSlot;
    use linefs_pm::record::{dtype, EntryBuilder, InodeImage, ROOT_INO};
    use linefs_pm::PmRegion;
    use linefs_proto::{PeerCred, Role};
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    /// A node with three committed entries in slot 0, cut into three chunks, and a
    /// pipeline with a session of that slot whose events come to the returned receiver.
    fn setup() -> (tempfile::TempDir, Arc<Pipeline>, Arc<Flow>, crossbeam_channel::Receiver<Event>, Vec<Checked>) {
        let dir = tempfile::tempdir().unwrap();
        let params = FormatParams { size: 8 << 20, log_size: 1 << 20, log_slots: 1, inodes: 64 };
        linefs_pm::mkfs::format_dir(dir.path(), &params).unwrap();
        let node = Arc::new(Node::open(dir.path()).unwrap());
        let log =
            LogSlot::new(Arc::new(PmRegion::open(&dir.path().join(log_file_name(0))).unwrap()), &node.geometry, 0);
        let mut tail = 0;
        for ino in 2..5 {
            let mut b = EntryBuilder::new();
            let img = InodeImage { ino, mode: libc::S_IFREG | 0o644, nlink: 1, size: 3, ..Default::default() };
            b.inode(&img, true);
            b.dirent(ROOT_INO, format!("f{ino}").as_bytes(), ino, dtype::REG);
            b.write(ino, 0, b"abc");
            tail = log.append(tail, 0, b.payload()).unwrap().end;
        }
        node.set_chunk_bytes(64);
        let host = Arc::new(HostLink::new(dir.path().to_path_buf(), Duration::from_millis(100)));
        let p = Pipeline::start(node.clone(), host, None, true, &Threads::default());
        let (control, _peer) = UnixStream::pair().unwrap();
        let cred = PeerCred { pid: 1, uid: 0, gid: 0 };
        let leases =
            Arc::new(crate::lease::manager::Leases::new(&Arc::new(crate::session::Sessions::default()), None, 0));
        let (session, _jobs, _outbox) = Session::new(7, 0, (cred, Vec::new()), Role::DirectApi, control, 0, leases);
        let session = Arc::new(session);
        let (tx, events) = crossbeam_channel::unbounded();
        let flow = Arc::new(Flow { session, events: tx });
        let mut chunks = Vec::new();
        let mut at = 0;
        while at < tail {
            let copy = node.fetch(0, at, tail).unwrap();
            at = copy.end();
            let (batch, _) = Batch::from_copy(&copy);
            chunks.push(Checked {
                flow: flow.clone(),
                seq: chunks.len() as u64,
                end: at,
                batch,
                plan: None,
                bytes: None,
            });
        }
        assert_eq!(chunks.len(), 3);
        (dir, p, flow, events, chunks)
    }

    fn outcome(events: &crossbeam_channel::Receiver<Event>) -> (u64, Option<u64>) {
        match events.recv_timeout(Duration::from_secs(10)).unwrap() {
            Event::Published { seq, result, .. } => (seq, Some(result.unwrap().entries)),
            Event::Dropped { seq } => (seq, None),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn chunks_checked_out_of_order_are_published_in_order() {
        let (_dir, p, _flow, events, mut chunks) = setup();
        // The last two arrive first: they wait for the first.
        let first = chunks.remove(0);
        for c in chunks.into_iter().rev() {
            p.do_publish(c);
        }
        assert!(events.try_recv().is_err(), "nothing published before chunk 0");
        p.do_publish(first);
        assert_eq!([outcome(&events), outcome(&events), outcome(&events)], [(0, Some(1)), (1, Some(1)), (2, Some(1))]);
        let names = p.node.freeze().reader().load().unwrap().dirs[&ROOT_INO].len();
        assert_eq!(names, 3);
        p.forget(7);
        assert!(p.order.lock().is_empty(), "nothing left of the session");
    }

    #[test]
    fn chunks_of_a_failed_session_and_stale_ones_are_dropped() {
        let (_dir, p, flow, events, chunks) = setup();
        let mut chunks = chunks.into_iter();
        let (c0, c1, c2) = (chunks.next().unwrap(), chunks.next().unwrap(), chunks.next().unwrap());
        // Chunk 1 again after it was published: it no longer starts at the checkpoint.
        let again =
            Checked { flow: c1.flow.clone(), seq: 2, end: c1.end, batch: c1.batch.clone(), plan: None, bytes: None };
        p.do_publish(c0);
        p.do_publish(c1);
        p.do_publish(again);
        assert_eq!([outcome(&events), outcome(&events), outcome(&events)], [(0, Some(1)), (1, Some(1)), (2, None)]);
        flow.session.fail("refused".into());
        p.do_publish(Checked { seq: 3, ..c2 });
        assert_eq!(outcome(&events), (3, None));
    }
}
