//! The tracing PM backend used by the crash tests.
//!
//! A traced [`PmRegion`](crate::PmRegion) keeps its bytes in memory, in two images:
//!
//! * **live**: what loads see (the CPU's view, caches included);
//! * **durable**: what is guaranteed to be in PM, i.e. what survives a power loss.
//!
//! # Persistency model (x86, cache-line granularity)
//!
//! * A store writes the live image and makes the 64-byte lines it touches *dirty*.
//! * `persist(range)` (clwb / clflushopt) snapshots each dirty line of the range: the line
//!   becomes *flush pending* with that snapshot.
//! * `fence()` (sfence) makes every flush-pending line durable: its snapshot is copied into
//!   the durable image. A line stored to again after its persist stays dirty after the fence
//!   (the later store was not covered by the flush).
//! * A dirty line may reach PM at any moment (cache eviction), flushed or not.
//!
//! So the states a power loss may leave at a given moment are: the durable image plus any
//! subset of the *pending* lines (dirty or flush pending), each included line at its latest
//! live content. With `torn_words`, a pending line may also be partly written: each of its
//! aligned 8-byte words independently old or new (8-byte aligned stores are atomic, so a word
//! is never torn). Intermediate contents (an older store to a line that was overwritten
//! before the crash, or the snapshot of a re-dirtied flush-pending line) are not enumerated:
//! the model only offers "durable" or "latest live" per line.
//!
//! # Invariants
//!
//! * A line is in the pending map iff its live content differs from its durable content or
//!   it holds a flush snapshot not yet fenced. Lines whose stores restored the durable
//!   content are dropped, since every crash image would be the same with or without them.
//! * The tracer never sees an out-of-range access: [`PmRegion`](crate::PmRegion) checks
//!   bounds before calling the crate-private store/load/persist entry points.
//!
//! # Recording crash points
//!
//! [`Tracer::start_recording`] saves the durable image as a base; from then on every change
//! of the durable image is appended to a delta list (line offset + new bytes). A crash point
//! (captured just before each fence takes effect, and at each [`Tracer::checkpoint`]) stores
//! only its position in the delta list and a copy of the pending lines; the durable image of
//! a point is rebuilt lazily from base + deltas when its images are generated.
//!
//! All state sits behind one mutex: the tracer is for correctness tests, not speed.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Cache-line size the tracer models.
pub const LINE_SIZE: u64 = 64;
/// Atomic store unit within a line (used for torn lines).
pub const WORD_SIZE: usize = 8;
/// Exhaustive enumeration is never attempted above this many pending lines, whatever
/// [`CrashOpts::max_exhaustive`] says (2^20 images is already far too many).
pub const EXHAUSTIVE_HARD_LIMIT: usize = 20;

/// One cache line that is not yet durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingLine {
    /// Offset of the line in the region (a multiple of [`LINE_SIZE`]).
    pub off: u64,
    /// The line's content in the durable image.
    pub durable: Vec<u8>,
    /// The line's latest live content.
    pub live: Vec<u8>,
    /// Whether a persist covered the line since its last durable update (a fence will make
    /// the persisted snapshot durable).
    pub flush_pending: bool,
    /// Sequence number of the store that first dirtied the line (orders "store order").
    pub first_store: u64,
}

/// One recorded event (only while recording).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceEvent {
    /// A store of `len` bytes at `off`.
    Store { off: u64, len: u64 },
    /// A persist of `[off, off + len)`.
    Persist { off: u64, len: u64 },
    /// A fence; `n` is its 1-based number over the tracer's lifetime.
    Fence { n: u64 },
    /// An explicit checkpoint.
    Checkpoint { label: String },
}

struct LineMeta {
    first_store: u64,
    /// Live content at the last persist covering the line, until the next fence.
    flush_snapshot: Option<Box<[u8]>>,
}

#[derive(Clone)]
struct Delta {
    off: u64,
    data: Box<[u8]>,
}

struct PointRec {
    label: String,
    fences: u64,
    delta_count: usize,
    pending: Arc<Vec<PendingLine>>,
}

struct Recording {
    base: Arc<Vec<u8>>,
    deltas: Arc<Vec<Delta>>,
    points: Vec<PointRec>,
    events: Vec<TraceEvent>,
}

struct State {
    live: Vec<u8>,
    durable: Vec<u8>,
    lines: BTreeMap<u64, LineMeta>,
    store_seq: u64,
    persists: u64,
    fences: u64,
    rec: Option<Recording>,
}

/// The tracing backend of a traced [`PmRegion`](crate::PmRegion).
pub struct Tracer {
    state: Mutex<State>,
}

impl fmt::Debug for Tracer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.state.lock();
        f.debug_struct("Tracer")
            .field("len", &s.live.len())
            .field("pending_lines", &s.lines.len())
            .field("stores", &s.store_seq)
            .field("fences", &s.fences)
            .field("recording", &s.rec.is_some())
            .finish()
    }
}

fn line_range(off: u64, len: u64, size: usize) -> std::ops::Range<usize> {
    let start = (off - off % LINE_SIZE) as usize;
    let end = (off + len) as usize;
    let end = end.min(size);
    start..end
}

fn line_end(line: usize, size: usize) -> usize {
    (line + LINE_SIZE as usize).min(size)
}

impl State {
    fn pending_snapshot(&self) -> Vec<PendingLine> {
        let mut v: Vec<PendingLine> = self
            .lines
            .iter()
            .map(|(&off, meta)| {
                let s = off as usize;
                let e = line_end(s, self.live.len());
                PendingLine {
                    off,
                    durable: self.durable[s..e].to_vec(),
                    live: self.live[s..e].to_vec(),
                    flush_pending: meta.flush_snapshot.is_some(),
                    first_store: meta.first_store,
                }
            })
            .collect();
        v.sort_by_key(|l| (l.first_store, l.off));
        v
    }

    fn capture(&mut self, label: String) {
        let pending = Arc::new(self.pending_snapshot());
        let fences = self.fences;
        if let Some(rec) = self.rec.as_mut() {
            rec.points.push(PointRec { label, fences, delta_count: rec.deltas.len(), pending });
        }
    }
}

impl Tracer {
    /// A tracer whose live and durable images both start as `image`.
    pub(crate) fn new(image: Vec<u8>) -> Tracer {
        Tracer {
            state: Mutex::new(State {
                durable: image.clone(),
                live: image,
                lines: BTreeMap::new(),
                store_seq: 0,
                persists: 0,
                fences: 0,
                rec: None,
            }),
        }
    }

    /// Region size in bytes.
    pub fn len(&self) -> u64 {
        self.state.lock().live.len() as u64
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Load `buf.len()` bytes at `off` from the live image. Caller checked bounds.
    pub(crate) fn read(&self, off: u64, buf: &mut [u8]) {
        let s = self.state.lock();
        let o = off as usize;
        buf.copy_from_slice(&s.live[o..o + buf.len()]);
    }

    /// Store `data` at `off`. Caller checked bounds.
    pub(crate) fn write(&self, off: u64, data: &[u8]) {
        self.store(off, data.len() as u64, |dst| dst.copy_from_slice(data));
    }

    /// Store `len` zero bytes at `off`. Caller checked bounds.
    pub(crate) fn zero(&self, off: u64, len: u64) {
        self.store(off, len, |dst| dst.fill(0));
    }

    fn store(&self, off: u64, len: u64, f: impl FnOnce(&mut [u8])) {
        if len == 0 {
            return;
        }
        let mut guard = self.state.lock();
        let s = &mut *guard;
        let o = off as usize;
        f(&mut s.live[o..o + len as usize]);
        s.store_seq += 1;
        let seq = s.store_seq;
        let size = s.live.len();
        for line in line_range(off, len, size).step_by(LINE_SIZE as usize) {
            let e = line_end(line, size);
            let same = s.live[line..e] == s.durable[line..e];
            let key = line as u64;
            match s.lines.get(&key) {
                Some(meta) => {
                    if same && meta.flush_snapshot.is_none() {
                        s.lines.remove(&key);
                    }
                }
                None => {
                    if !same {
                        s.lines.insert(key, LineMeta { first_store: seq, flush_snapshot: None });
                    }
                }
            }
        }
        if let Some(rec) = s.rec.as_mut() {
            rec.events.push(TraceEvent::Store { off, len });
        }
    }

    /// Persist (write back) the lines covering `[off, off + len)`. Caller checked bounds.
    pub(crate) fn persist(&self, off: u64, len: u64) {
        let mut guard = self.state.lock();
        let s = &mut *guard;
        s.persists += 1;
        if let Some(rec) = s.rec.as_mut() {
            rec.events.push(TraceEvent::Persist { off, len });
        }
        if len == 0 {
            return;
        }
        let size = s.live.len();
        let r = line_range(off, len, size);
        let (start, end) = (r.start as u64, r.end as u64);
        for (&line, meta) in s.lines.range_mut(start..end) {
            let l = line as usize;
            let e = line_end(l, size);
            meta.flush_snapshot = Some(s.live[l..e].to_vec().into_boxed_slice());
        }
    }

    /// Store fence: every flush-pending line becomes durable. When recording, a crash point
    /// "fence N" is captured just before the fence takes effect.
    pub(crate) fn fence(&self) {
        let mut guard = self.state.lock();
        let s = &mut *guard;
        let n = s.fences + 1;
        if s.rec.is_some() {
            s.capture(format!("fence {n}"));
            if let Some(rec) = s.rec.as_mut() {
                rec.events.push(TraceEvent::Fence { n });
            }
        }
        let size = s.live.len();
        let mut now_clean = Vec::new();
        for (&line, meta) in s.lines.iter_mut() {
            let Some(snap) = meta.flush_snapshot.take() else {
                continue;
            };
            let l = line as usize;
            let e = line_end(l, size);
            s.durable[l..e].copy_from_slice(&snap);
            if let Some(rec) = s.rec.as_mut() {
                // Clones the list only if a `CrashPoint` still shares it (then once).
                Arc::make_mut(&mut rec.deltas).push(Delta { off: line, data: snap });
            }
            if s.live[l..e] == s.durable[l..e] {
                now_clean.push(line);
            }
        }
        for line in now_clean {
            s.lines.remove(&line);
        }
        s.fences = n;
    }

    /// Number of fences executed so far.
    pub fn fence_count(&self) -> u64 {
        self.state.lock().fences
    }

    /// Number of stores executed so far.
    pub fn store_count(&self) -> u64 {
        self.state.lock().store_seq
    }

    /// Number of persist calls so far.
    pub fn persist_count(&self) -> u64 {
        self.state.lock().persists
    }

    /// Pending (not yet durable) cache lines right now, in store order.
    pub fn pending_lines(&self) -> Vec<PendingLine> {
        self.state.lock().pending_snapshot()
    }

    /// A copy of the durable image (what a crash right now is guaranteed to keep).
    pub fn durable_image(&self) -> Vec<u8> {
        self.state.lock().durable.clone()
    }

    /// A copy of the live image (what loads see).
    pub fn live_image(&self) -> Vec<u8> {
        self.state.lock().live.clone()
    }

    /// Start (or restart, discarding earlier points) recording crash points: from now on a
    /// crash point is captured at every fence (just before it takes effect) and at every
    /// [`checkpoint`](Self::checkpoint).
    pub fn start_recording(&self) {
        let mut s = self.state.lock();
        let base = Arc::new(s.durable.clone());
        s.rec = Some(Recording { base, deltas: Arc::new(Vec::new()), points: Vec::new(), events: Vec::new() });
        tracing::debug!(len = s.live.len(), "trace: recording crash points");
    }

    /// Stop recording; the points recorded so far are dropped.
    pub fn stop_recording(&self) {
        self.state.lock().rec = None;
    }

    /// Whether crash points are being recorded.
    pub fn is_recording(&self) -> bool {
        self.state.lock().rec.is_some()
    }

    /// Capture an explicit crash point labelled `label` (ignored when not recording).
    pub fn checkpoint(&self, label: &str) {
        let mut s = self.state.lock();
        if s.rec.is_none() {
            tracing::debug!(label, "trace: checkpoint ignored, not recording");
            return;
        }
        s.capture(label.to_string());
        if let Some(rec) = s.rec.as_mut() {
            rec.events.push(TraceEvent::Checkpoint { label: label.to_string() });
        }
    }

    /// The crash points recorded so far, in order (empty when not recording).
    pub fn crash_points(&self) -> Vec<CrashPoint> {
        let s = self.state.lock();
        let Some(rec) = s.rec.as_ref() else {
            return Vec::new();
        };
        rec.points
            .iter()
            .enumerate()
            .map(|(index, p)| CrashPoint {
                index,
                label: p.label.clone(),
                fence_count: p.fences,
                base: Arc::clone(&rec.base),
                deltas: Arc::clone(&rec.deltas),
                delta_count: p.delta_count,
                pending: Arc::clone(&p.pending),
            })
            .collect()
    }

    /// The stores, persists, fences and checkpoints recorded since `start_recording`.
    pub fn events(&self) -> Vec<TraceEvent> {
        self.state.lock().rec.as_ref().map(|r| r.events.clone()).unwrap_or_default()
    }
}

/// Options bounding the crash images generated for a crash point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashOpts {
    /// Enumerate all 2^n subsets when n pending lines <= this (capped at
    /// [`EXHAUSTIVE_HARD_LIMIT`]).
    pub max_exhaustive: usize,
    /// Random subsets drawn in the non-exhaustive case.
    pub samples: usize,
    /// Seed of the random draws.
    pub seed: u64,
    /// Also generate images where one pending line is only partly written.
    pub torn_words: bool,
    /// In the non-exhaustive case, the per-line images (each line alone, all but each line,
    /// each prefix, each torn line) are made for at most this many lines, evenly spaced in
    /// store order (a 16 KiB log entry leaves 256 lines pending before its fence).
    pub line_cap: usize,
}

impl Default for CrashOpts {
    fn default() -> Self {
        CrashOpts { max_exhaustive: 8, samples: 32, seed: 0, torn_words: false, line_cap: usize::MAX }
    }
}

/// One state a power loss could leave.
#[derive(Clone, PartialEq, Eq)]
pub struct CrashImage {
    /// Which pending lines were included (and how).
    pub description: String,
    /// The full region image.
    pub image: Vec<u8>,
}

impl fmt::Debug for CrashImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrashImage").field("description", &self.description).field("len", &self.image.len()).finish()
    }
}

/// A recorded crash point: the durable image at that moment plus the pending lines.
#[derive(Clone)]
pub struct CrashPoint {
    /// Position among the recorded points.
    pub index: usize,
    /// "fence N" (captured just before fence N took effect) or the checkpoint label.
    pub label: String,
    /// Fences completed before this point.
    pub fence_count: u64,
    base: Arc<Vec<u8>>,
    deltas: Arc<Vec<Delta>>,
    delta_count: usize,
    pending: Arc<Vec<PendingLine>>,
}

impl fmt::Debug for CrashPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrashPoint")
            .field("index", &self.index)
            .field("label", &self.label)
            .field("fence_count", &self.fence_count)
            .field("pending", &self.pending.len())
            .finish()
    }
}

/// How one crash image is built from the durable image.
struct Selection {
    kind: String,
    include: Vec<bool>,
    /// (pending line index, bitmask of its words taken from the live content)
    torn: Option<(usize, u64)>,
}

impl CrashPoint {
    /// Number of pending lines at this point.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// The pending lines at this point, in store order.
    pub fn pending_lines(&self) -> &[PendingLine] {
        &self.pending
    }

    /// The durable image at this point (no pending line included).
    pub fn durable_image(&self) -> Vec<u8> {
        let mut img = (*self.base).clone();
        for d in &self.deltas[..self.delta_count] {
            let o = d.off as usize;
            img[o..o + d.data.len()].copy_from_slice(&d.data);
        }
        img
    }

    /// Every crash image for this point, bounded by `opts`: with n pending lines and
    /// n <= `max_exhaustive`, all 2^n subsets; otherwise none, all, each line alone, all but
    /// each line, the prefixes in store order, and `samples` random subsets (seeded by
    /// `seed`). With `torn_words`, for each pending line of more than one word two more images
    /// follow: that line torn (a random non-trivial subset of its 8-byte words new) with the
    /// other lines absent, and with them present.
    pub fn images(&self, opts: &CrashOpts) -> impl Iterator<Item = CrashImage> + '_ {
        let n = self.pending.len();
        let mut rng = StdRng::seed_from_u64(opts.seed);
        // The lines (or prefix lengths) that get per-line images: all, or `line_cap` of them
        // evenly spaced.
        let cap = opts.line_cap.max(1);
        let spaced = move |len: usize| -> Vec<usize> {
            if len <= cap {
                (0..len).collect()
            } else {
                let mut v: Vec<usize> = (0..cap).map(|k| k * len / cap).collect();
                v.dedup();
                v
            }
        };
        let exhaustive = n <= opts.max_exhaustive.min(EXHAUSTIVE_HARD_LIMIT) || n <= 2;
        let subsets: Box<dyn Iterator<Item = Selection>> = if exhaustive {
            Box::new((0..1u64 << n).map(move |mask| Selection {
                kind: format!("subset {mask:#x}"),
                include: (0..n).map(|i| mask >> i & 1 == 1).collect(),
                torn: None,
            }))
        } else {
            let sel = move |kind: String, include: Vec<bool>| Selection { kind, include, torn: None };
            let mut random = Vec::with_capacity(opts.samples);
            let mut seen = HashSet::new();
            for k in 0..opts.samples {
                let include: Vec<bool> = (0..n).map(|_| rng.random_bool(0.5)).collect();
                let count = include.iter().filter(|b| **b).count();
                if count == 0 || count == n || !seen.insert(include.clone()) {
                    continue;
                }
                random.push(sel(format!("random {k}"), include));
            }
            Box::new(
                [sel("none".into(), vec![false; n]), sel("all".into(), vec![true; n])]
                    .into_iter()
                    .chain(spaced(n).into_iter().map(move |i| {
                        let mut v = vec![false; n];
                        v[i] = true;
                        sel(format!("single {i}"), v)
                    }))
                    .chain(spaced(n).into_iter().map(move |i| {
                        let mut v = vec![true; n];
                        v[i] = false;
                        sel(format!("all but {i}"), v)
                    }))
                    // Prefixes of length 1 and n-1 are a single / an all-but-one.
                    .chain(
                        spaced(n.saturating_sub(3))
                            .into_iter()
                            .map(move |k| k + 2)
                            .map(move |k| sel(format!("prefix {k}"), (0..n).map(|i| i < k).collect())),
                    )
                    .chain(random),
            )
        };
        let mut torn = Vec::new();
        if opts.torn_words {
            let lines = if exhaustive { (0..n).collect() } else { spaced(n) };
            for i in lines {
                let line = &self.pending[i];
                let words = line.live.len().div_ceil(WORD_SIZE);
                if words < 2 {
                    continue;
                }
                let full = if words >= 64 { u64::MAX } else { (1u64 << words) - 1 };
                for others in [false, true] {
                    let mut mask = 0;
                    while mask == 0 || mask == full {
                        mask = rng.random::<u64>() & full;
                    }
                    let kind = if others {
                        format!("torn line {i} (words {mask:#x}), others present")
                    } else {
                        format!("torn line {i} (words {mask:#x}), others absent")
                    };
                    torn.push(Selection { kind, include: vec![others; n], torn: Some((i, mask)) });
                }
            }
        }
        let durable = self.durable_image();
        subsets.chain(torn).map(move |sel| self.build(&durable, sel))
    }

    fn build(&self, durable: &[u8], sel: Selection) -> CrashImage {
        let mut image = durable.to_vec();
        let mut included = Vec::new();
        for (i, line) in self.pending.iter().enumerate() {
            let o = line.off as usize;
            if let Some((t, mask)) = sel.torn {
                if t == i {
                    for (w, chunk) in line.live.chunks(WORD_SIZE).enumerate() {
                        if mask >> w & 1 == 1 {
                            let wo = o + w * WORD_SIZE;
                            image[wo..wo + chunk.len()].copy_from_slice(chunk);
                        }
                    }
                    continue;
                }
            }
            if sel.include[i] {
                image[o..o + line.live.len()].copy_from_slice(&line.live);
                included.push(line.off);
            }
        }
        const SHOWN: usize = 8;
        let mut description = format!("{}: ", sel.kind);
        if included.is_empty() {
            description.push_str("no line");
        } else {
            let list: Vec<String> = included.iter().take(SHOWN).map(|o| format!("{o:#x}")).collect();
            description.push_str(&format!("lines [{}]", list.join(", ")));
            if included.len() > SHOWN {
                description.push_str(&format!(" (+{} more)", included.len() - SHOWN));
            }
        }
        description.push_str(&format!(" of {} pending", self.pending.len()));
        CrashImage { description, image }
    }
}

#[cfg(test)]
mod tests;
