//! The primary side's memory: per own log slot, the bytes published here and handed to
//! replication ([`Log::append`]), kept until every chain member acknowledged them durable
//! (the engine's reclaim point, [`Log::reclaim`]); chunks and retransmissions are cut from
//! here ([`Log::range`]), never read from the client's log again. Each piece keeps the
//! credentials of the client that wrote it, which travel with the chunk. [`Flow`] bounds
//! the bytes held, all logs together.

use crate::pipeline::replicate::Writer;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Above this many bytes held, publication pauses...
pub(crate) const HIGH_WATERMARK: u64 = 64 << 20;
/// ...until they drop below this.
pub(crate) const LOW_WATERMARK: u64 = 32 << 20;

/// The bytes held for replication, with a high and a low watermark: [`Flow::admit`] waits
/// while paused (above the high watermark, until below the low one).
#[derive(Debug, Default)]
pub(crate) struct Flow {
    state: Mutex<(u64, bool)>,
    below: Condvar,
}

impl Flow {
    /// Counts `len` more bytes, first waiting while paused (or until `stop()` says so).
    pub(crate) fn admit(&self, len: u64, stop: impl Fn() -> bool) {
        let mut st = self.state.lock();
        let mut logged = false;
        while st.1 && !stop() {
            if !logged {
                tracing::info!(bytes = st.0, "replication memory above the high watermark: publication waits");
                logged = true;
            }
            self.below.wait_for(&mut st, Duration::from_millis(100));
        }
        st.0 += len;
        if st.0 > HIGH_WATERMARK {
            st.1 = true;
        }
    }

    /// Counts `len` more bytes without waiting (what the engine thread adds itself).
    pub(crate) fn add(&self, len: u64) {
        let mut st = self.state.lock();
        st.0 += len;
        if st.0 > HIGH_WATERMARK {
            st.1 = true;
        }
    }

    /// `len` bytes were let go.
    pub(crate) fn release(&self, len: u64) {
        let mut st = self.state.lock();
        st.0 = st.0.saturating_sub(len);
        if st.1 && st.0 < LOW_WATERMARK {
            st.1 = false;
            self.below.notify_all();
        }
    }

    pub(crate) fn wake_all(&self) {
        self.below.notify_all();
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.state.lock().0
    }

    pub(crate) fn paused(&self) -> bool {
        self.state.lock().1
    }
}

/// A piece of a log: bytes from `start`, and who wrote them.
#[derive(Debug, Clone)]
pub(crate) struct Piece {
    pub(crate) start: u64,
    pub(crate) bytes: Arc<[u8]>,
    pub(crate) writer: Arc<Writer>,
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
        self.pieces.push_back(Piece { start: self.end, bytes, writer });
        self.end = end;
        self.times.push_back((end, Instant::now()));
        Ok(end)
    }

    /// Drops what lies below `upto`; returns the bytes let go.
    pub(crate) fn reclaim(&mut self, upto: u64) -> u64 {
        let mut freed = 0;
        while let Some(p) = self.pieces.front() {
            if p.end() > upto {
                break;
            }
            freed += p.bytes.len() as u64;
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
            out.push(Piece { start: a, bytes, writer: p.writer.clone() });
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
        assert_eq!(log.reclaim(112), 10, "the straddling piece stays");
        assert_eq!(log.range(100, 120).first().map(|p| p.start), Some(110));
        assert!(log.lag(115, Instant::now()).is_zero());
        assert_eq!(log.reclaim(115), 5);
        assert_eq!(log.held(), 0);
    }

    #[test]
    fn the_flow_pauses_above_the_high_watermark_and_resumes_below_the_low_one() {
        let f = Flow::default();
        f.admit(HIGH_WATERMARK + 1, || false);
        assert!(f.paused());
        f.release(HIGH_WATERMARK - LOW_WATERMARK);
        assert!(f.paused(), "between the marks it stays paused");
        f.release(10);
        assert!(!f.paused());
        // A stopping daemon never waits.
        f.admit(HIGH_WATERMARK, || true);
        f.admit(1, || true);
        assert!(f.paused());
    }
}
