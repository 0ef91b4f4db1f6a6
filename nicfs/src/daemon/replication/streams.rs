//! The primary side's memory: per own log slot, the bytes published here and handed to
//! replication ([`Log::append`]), kept until every chain member acknowledged them durable
//! (the engine's reclaim point, [`Log::reclaim`]); chunks and retransmissions are cut from
//! here ([`Log::range`]), never read from the client's log again. Each piece keeps the
//! credentials of the client that wrote it, which travel with the chunk. [`Flow`] bounds
//! the bytes held, all logs together, with `linefs_chain::flow::Watermark`.

use super::status::FlowStatus;
use crate::pipeline::replicate::Writer;
use linefs_chain::flow::{Limits, Transition, Watermark};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Above this many bytes held, publication pauses...
pub(crate) const HIGH_WATERMARK: u64 = 64 << 20;
/// ...until they drop to this.
pub(crate) const LOW_WATERMARK: u64 = 32 << 20;

/// The bytes held for replication, bounded by `linefs_chain::flow::Watermark` (pause above
/// [`HIGH_WATERMARK`], resume at or under [`LOW_WATERMARK`]): [`Flow::admit`] waits while
/// paused. One admit per piece a log holds, one release per piece let go, so the
/// watermark's chunk count is the pieces held.
#[derive(Debug)]
pub(crate) struct Flow {
    mark: Mutex<Watermark>,
    below: Condvar,
}

impl Default for Flow {
    fn default() -> Flow {
        Flow::new(LOW_WATERMARK, HIGH_WATERMARK)
    }
}

impl Flow {
    /// A flow with these byte watermarks (`low < high`; swapped and widened otherwise).
    pub(crate) fn new(low: u64, high: u64) -> Flow {
        let (low, high) = (low.min(high), high.max(low));
        let high = high.max(low.saturating_add(1));
        let mark = match Watermark::new(Limits::bytes(low, high)) {
            Ok(m) => m,
            // Unreachable (low < high above); a plain byte limit rather than a panic.
            Err(_) => Watermark::new(Limits::bytes(0, u64::MAX)).unwrap_or_else(|_| unreachable!()),
        };
        Flow { mark: Mutex::new(mark), below: Condvar::new() }
    }

    /// Counts a piece of `len` more bytes, first waiting while paused (or until `stop()`
    /// says so).
    pub(crate) fn admit(&self, len: u64, stop: impl Fn() -> bool) {
        let mut m = self.mark.lock();
        let mut logged = false;
        while m.paused() && !stop() {
            if !logged {
                tracing::debug!(bytes = m.bytes(), "replication memory above the high watermark: publication waits");
                logged = true;
            }
            self.below.wait_for(&mut m, Duration::from_millis(100));
        }
        let t = m.admit(len);
        self.transition(&m, t);
    }

    /// Counts a piece of `len` more bytes without waiting (what the engine thread adds
    /// itself).
    pub(crate) fn add(&self, len: u64) {
        let mut m = self.mark.lock();
        let t = m.admit(len);
        self.transition(&m, t);
    }

    /// A piece of `len` bytes was let go.
    pub(crate) fn release(&self, len: u64) {
        let mut m = self.mark.lock();
        let t = m.release(len);
        self.transition(&m, t);
    }

    /// A piece admitted with `admitted` bytes is kept with only `kept` (0: dropped).
    pub(crate) fn shrink(&self, admitted: u64, kept: u64) {
        if kept == admitted {
            return;
        }
        let mut m = self.mark.lock();
        let t = m.release(admitted);
        self.transition(&m, t);
        if kept > 0 {
            let t = m.admit(kept);
            self.transition(&m, t);
        }
    }

    fn transition(&self, m: &Watermark, t: Option<Transition>) {
        match t {
            Some(Transition::Paused) => {
                tracing::debug!(bytes = m.bytes(), pieces = m.chunks(), "replication flow paused (high watermark)")
            }
            Some(Transition::Resumed) => {
                tracing::debug!(bytes = m.bytes(), pieces = m.chunks(), "replication flow resumed (low watermark)");
                self.below.notify_all();
            }
            None => {}
        }
    }

    pub(crate) fn wake_all(&self) {
        self.below.notify_all();
    }

    #[cfg(test)]
    fn bytes(&self) -> u64 {
        self.mark.lock().bytes()
    }

    #[cfg(test)]
    fn paused(&self) -> bool {
        self.mark.lock().paused()
    }

    /// The watermark's state for the status file.
    pub(crate) fn status(&self) -> FlowStatus {
        let m = self.mark.lock();
        let (l, s) = (m.limits(), m.stats());
        FlowStatus {
            paused: m.paused(),
            bytes: m.bytes(),
            pieces: m.chunks(),
            high_bytes: l.high_bytes,
            low_bytes: l.low_bytes,
            pauses: s.pauses,
            resumes: s.resumes,
            peak_bytes: s.peak_bytes,
            excess_releases: s.excess_releases,
        }
    }
}

/// A piece of a log: bytes from `start`, and who wrote them.
#[derive(Debug, Clone)]
pub(crate) struct Piece {
    pub(crate) start: u64,
    pub(crate) bytes: Arc<[u8]>,
    pub(crate) writer: Arc<Writer>,
    /// When it was appended.
    pub(crate) at: Instant,
}

impl Piece {
    fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

/// One own log slot's bytes in memory.
#[derive(Debug, Default)]
pub(crate) struct Log {
    /// Contiguous pieces, oldest first.
    pieces: VecDeque<Piece>,
    /// Where the next append is expected (the log's end as replication knows it).
    pub(crate) end: u64,
    /// When each append's end was reached (for the members' lag in ms), oldest first.
    times: VecDeque<(u64, Instant)>,
}

impl Log {
    pub(crate) fn at(end: u64) -> Log {
        Log { end, ..Log::default() }
    }

    /// Adds published bytes from `from`; returns the new end, or `Err(expected)` when they
    /// do not continue the log (a gap: the bytes before `from` were never handed over).
    pub(crate) fn append(&mut self, from: u64, bytes: Arc<[u8]>, writer: Arc<Writer>) -> Result<u64, u64> {
        let len = bytes.len() as u64;
        if from > self.end {
            return Err(self.end);
        }
        let end = from + len;
        if end <= self.end {
            return Ok(self.end);
        }
        let skip = (self.end - from) as usize;
        let bytes = if skip == 0 { bytes } else { Arc::from(&bytes[skip..]) };
        let at = Instant::now();
        self.pieces.push_back(Piece { start: self.end, bytes, writer, at });
        self.end = end;
        self.times.push_back((end, at));
        Ok(end)
    }

    /// Drops what lies below `upto`; returns the sizes of the pieces let go.
    pub(crate) fn reclaim(&mut self, upto: u64) -> Vec<u64> {
        let mut freed = Vec::new();
        while let Some(p) = self.pieces.front() {
            if p.end() > upto {
                break;
            }
            freed.push(p.bytes.len() as u64);
            self.pieces.pop_front();
        }
        // A piece straddling `upto` is kept whole (freed once all of it is reclaimed).
        while self.times.front().is_some_and(|&(e, _)| e <= upto) {
            self.times.pop_front();
        }
        freed
    }

    /// The pieces of `[start, end)`, cut to it; what is not held (reclaimed) is left out.
    pub(crate) fn range(&self, start: u64, end: u64) -> Vec<Piece> {
        let mut out = Vec::new();
        for p in &self.pieces {
            if p.end() <= start {
                continue;
            }
            if p.start >= end {
                break;
            }
            let (a, b) = (start.max(p.start), end.min(p.end()));
            let bytes: Arc<[u8]> = if a == p.start && b == p.end() {
                p.bytes.clone()
            } else {
                Arc::from(&p.bytes[(a - p.start) as usize..(b - p.start) as usize])
            };
            out.push(Piece { start: a, bytes, writer: p.writer.clone(), at: p.at });
        }
        out
    }

    /// When the last append was made (None: nothing held).
    pub(crate) fn last_append(&self) -> Option<Instant> {
        self.times.back().map(|&(_, t)| t)
    }

    /// Bytes held.
    pub(crate) fn held(&self) -> u64 {
        self.pieces.iter().map(|p| p.bytes.len() as u64).sum()
    }

    /// How long ago the first append ending past `acked` was made.
    pub(crate) fn lag(&self, acked: u64, now: Instant) -> Duration {
        self.times.iter().find(|&&(e, _)| e > acked).map_or(Duration::ZERO, |&(_, t)| now.saturating_duration_since(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(uid: u32) -> Arc<Writer> {
        Arc::new(Writer { uid, ..Writer::default() })
    }

    #[test]
    fn pieces_continue_the_log_are_cut_by_range_and_reclaimed_whole() {
        let mut log = Log::at(100);
        assert_eq!(log.append(120, Arc::from(&[1u8; 10][..]), w(1)), Err(100), "a gap is refused");
        assert_eq!(log.append(100, Arc::from(&[1u8; 10][..]), w(1)), Ok(110));
        // An overlap keeps only the new part.
        assert_eq!(log.append(105, Arc::from(&[2u8; 10][..]), w(2)), Ok(115));
        assert_eq!(log.append(100, Arc::from(&[3u8; 5][..]), w(3)), Ok(115), "nothing new");
        let r = log.range(108, 113);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].start, &r[0].bytes[..], r[0].writer.uid), (108, &[1u8, 1][..], 1));
        assert_eq!((r[1].start, &r[1].bytes[..], r[1].writer.uid), (110, &[2u8; 3][..], 2));
        assert_eq!(log.held(), 15);
        assert_eq!(log.reclaim(112), vec![10], "the straddling piece stays");
        assert_eq!(log.range(100, 120).first().map(|p| p.start), Some(110));
        assert!(log.lag(115, Instant::now()).is_zero());
        assert_eq!(log.reclaim(115), vec![5]);
        assert_eq!(log.held(), 0);
    }

    #[test]
    fn the_flow_pauses_above_the_high_watermark_and_resumes_at_the_low_one() {
        let f = Flow::default();
        f.admit(HIGH_WATERMARK + 1, || false);
        assert!(f.paused());
        f.add(10);
        f.release(HIGH_WATERMARK - LOW_WATERMARK);
        assert!(f.paused(), "between the marks it stays paused");
        f.release(11);
        assert!(!f.paused(), "at the low watermark it resumes");
        let st = f.status();
        assert_eq!((st.pauses, st.resumes, st.bytes, st.pieces, st.excess_releases), (1, 1, LOW_WATERMARK, 0, 0));
        assert_eq!((st.high_bytes, st.low_bytes, st.peak_bytes), (HIGH_WATERMARK, LOW_WATERMARK, HIGH_WATERMARK + 11));
        f.release(LOW_WATERMARK);
        assert_eq!(f.status().excess_releases, 1, "a release of more pieces than held is counted");
        // A stopping daemon never waits.
        f.admit(HIGH_WATERMARK, || true);
        f.admit(1, || true);
        assert!(f.paused());
        assert_eq!(f.status().pauses, 2);
    }

    #[test]
    fn a_shrunk_piece_keeps_one_piece_of_what_was_kept() {
        let f = Flow::new(10, 100);
        f.admit(50, || false);
        f.shrink(50, 20);
        assert_eq!((f.bytes(), f.status().pieces), (20, 1));
        f.shrink(20, 20);
        assert_eq!((f.bytes(), f.status().pieces), (20, 1));
        f.admit(5, || false);
        f.shrink(5, 0);
        assert_eq!((f.bytes(), f.status().pieces), (20, 1), "a piece not kept is gone");
        f.release(20);
        let st = f.status();
        assert_eq!((st.bytes, st.pieces, st.excess_releases), (0, 0, 0));
        // Odd limits are put in order rather than refused.
        let odd = Flow::new(100, 10);
        assert_eq!((odd.status().low_bytes, odd.status().high_bytes), (10, 100));
    }
}
