//! Flow control of replication: a memory watermark over what is in flight.
//!
//! A primary's replication holds every chunk it has cut from a client log and sent down the
//! chain until the chain has acknowledged it (it may have to resend it), so the bytes and
//! chunks in flight are memory the node has committed. [`Watermark`] counts them — the driver
//! calls [`Watermark::admit`] when a chunk enters flight and [`Watermark::release`] when it
//! leaves (acknowledged by every member, or dropped by a rebase) — and says when proactive
//! replication must pause and when it may resume:
//!
//! * it **pauses** when, after an admit, the bytes in flight rise *above* the high watermark
//!   or the chunks in flight above theirs;
//! * it **resumes** only when, after a release, both have fallen *to or under* their low
//!   watermarks (low < high): hysteresis, so that a count hovering around one threshold does
//!   not turn replication on and off at every chunk. Between a pause and the next resume at
//!   least `high - low + 1` bytes (or chunks) were released, and between a resume and the next
//!   pause as many were admitted ([`tests`] and the property test check it).
//!
//! Both calls return the [`Transition`] they caused, if any, so the driver logs and counts
//! it where it happens. A paused watermark still counts what is admitted: chunks an fsync
//! waits for (urgent ones) are sent regardless, as are retransmissions of chunks already in
//! flight (which are not admitted twice) — the pause only stops *proactive* shipping, so it
//! can never hold up an fsync, and since every chunk in flight is released once acknowledged
//! or dropped, a drained watermark is always resumed. Releasing more than is in flight is a
//! driver's mistake: the count stops at zero and [`Stats::excess_releases`] counts it (a daemon
//! does not panic on it).
//!
//! Pure: no clock, no thread, no I/O.

/// Why a watermark cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowError {
    /// `low` must be below `high` (bytes or chunks).
    LowNotBelowHigh { what: &'static str, low: u64, high: u64 },
}

impl std::fmt::Display for FlowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FlowError::LowNotBelowHigh { what, low, high } => {
                write!(f, "flow control: the low watermark of {what} ({low}) must be below the high one ({high})")
            }
        }
    }
}

impl std::error::Error for FlowError {}

/// A change of state an [`Watermark::admit`] or [`Watermark::release`] caused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// In flight rose above a high watermark: stop proactive shipping.
    Paused,
    /// In flight fell to or under both low watermarks: ship again.
    Resumed,
}

/// The limits: pause above `high`, resume at or under `low`, for bytes and chunks alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub low_bytes: u64,
    pub high_bytes: u64,
    pub low_chunks: u64,
    pub high_chunks: u64,
}

impl Limits {
    /// Byte watermarks only (the chunk ones never trigger).
    pub fn bytes(low: u64, high: u64) -> Limits {
        Limits { low_bytes: low, high_bytes: high, low_chunks: u64::MAX - 1, high_chunks: u64::MAX }
    }
}

/// Counters for status and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub pauses: u64,
    pub resumes: u64,
    /// Most bytes in flight at once.
    pub peak_bytes: u64,
    pub peak_chunks: u64,
    /// Bytes admitted and released, all told.
    pub admitted_bytes: u64,
    pub released_bytes: u64,
    /// Releases of more bytes or chunks than were in flight (a driver's mistake; clamped).
    pub excess_releases: u64,
}

/// Bytes and chunks in flight, with pause/resume hysteresis (see the module note).
#[derive(Debug, Clone)]
pub struct Watermark {
    limits: Limits,
    bytes: u64,
    chunks: u64,
    paused: bool,
    stats: Stats,
}

impl Watermark {
    /// A watermark with nothing in flight, not paused.
    pub fn new(limits: Limits) -> Result<Watermark, FlowError> {
        if limits.low_bytes >= limits.high_bytes {
            return Err(FlowError::LowNotBelowHigh { what: "bytes", low: limits.low_bytes, high: limits.high_bytes });
        }
        if limits.low_chunks >= limits.high_chunks {
            return Err(FlowError::LowNotBelowHigh {
                what: "chunks",
                low: limits.low_chunks,
                high: limits.high_chunks,
            });
        }
        Ok(Watermark { limits, bytes: 0, chunks: 0, paused: false, stats: Stats::default() })
    }

    /// One chunk of `bytes` enters flight.
    pub fn admit(&mut self, bytes: u64) -> Option<Transition> {
        self.bytes = self.bytes.saturating_add(bytes);
        self.chunks = self.chunks.saturating_add(1);
        self.stats.admitted_bytes = self.stats.admitted_bytes.saturating_add(bytes);
        self.stats.peak_bytes = self.stats.peak_bytes.max(self.bytes);
        self.stats.peak_chunks = self.stats.peak_chunks.max(self.chunks);
        if !self.paused && self.above_high() {
            self.paused = true;
            self.stats.pauses += 1;
            return Some(Transition::Paused);
        }
        None
    }

    /// One chunk of `bytes` leaves flight (acknowledged by the whole chain, or dropped).
    pub fn release(&mut self, bytes: u64) -> Option<Transition> {
        if bytes > self.bytes || self.chunks == 0 {
            self.stats.excess_releases += 1;
        }
        let freed = bytes.min(self.bytes);
        self.bytes -= freed;
        self.chunks = self.chunks.saturating_sub(1);
        self.stats.released_bytes = self.stats.released_bytes.saturating_add(freed);
        if self.paused && self.at_or_under_low() {
            self.paused = false;
            self.stats.resumes += 1;
            return Some(Transition::Resumed);
        }
        None
    }

    /// Whether proactive shipping must wait.
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// Bytes in flight.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Chunks in flight.
    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    fn above_high(&self) -> bool {
        self.bytes > self.limits.high_bytes || self.chunks > self.limits.high_chunks
    }

    fn at_or_under_low(&self) -> bool {
        self.bytes <= self.limits.low_bytes && self.chunks <= self.limits.low_chunks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn wm(low: u64, high: u64) -> Watermark {
        Watermark::new(Limits::bytes(low, high)).unwrap()
    }

    #[test]
    fn limits_must_leave_a_gap() {
        assert!(matches!(Watermark::new(Limits::bytes(10, 10)), Err(FlowError::LowNotBelowHigh { what: "bytes", .. })));
        assert!(Watermark::new(Limits::bytes(11, 10)).is_err());
        let l = Limits { low_bytes: 0, high_bytes: 1, low_chunks: 4, high_chunks: 4 };
        let e = Watermark::new(l).unwrap_err();
        assert_eq!(e, FlowError::LowNotBelowHigh { what: "chunks", low: 4, high: 4 });
        assert!(e.to_string().contains("chunks (4)"), "{e}");
        assert!(Watermark::new(Limits::bytes(0, 1)).is_ok());
    }

    #[test]
    fn pauses_only_above_high_and_resumes_only_at_or_under_low() {
        let mut w = wm(100, 300);
        assert_eq!(w.admit(200), None);
        assert_eq!(w.admit(100), None, "at the high watermark is not above it");
        assert!(!w.paused());
        assert_eq!(w.admit(1), Some(Transition::Paused));
        assert!(w.paused());
        assert_eq!(w.admit(50), None, "a paused watermark still counts; no second pause");
        assert_eq!((w.bytes(), w.chunks()), (351, 4));
        // Between low and high: still paused (hysteresis).
        assert_eq!(w.release(200), None);
        assert_eq!(w.bytes(), 151);
        assert!(w.paused());
        assert_eq!(w.release(50), None, "101 > low");
        assert_eq!(w.release(1), Some(Transition::Resumed), "100 = low");
        assert!(!w.paused());
        assert_eq!(w.release(100), None, "already running");
        assert_eq!((w.bytes(), w.chunks()), (0, 0));
        let s = w.stats();
        assert_eq!((s.pauses, s.resumes, s.peak_bytes, s.peak_chunks), (1, 1, 351, 4));
        assert_eq!((s.admitted_bytes, s.released_bytes, s.excess_releases), (351, 351, 0));
    }

    #[test]
    fn a_single_chunk_larger_than_high_pauses_and_its_release_resumes() {
        let mut w = wm(0, 10);
        assert_eq!(w.admit(11), Some(Transition::Paused));
        assert_eq!(w.release(11), Some(Transition::Resumed));
    }

    #[test]
    fn chunks_have_their_own_watermarks() {
        let mut w =
            Watermark::new(Limits { low_bytes: 1000, high_bytes: 1 << 40, low_chunks: 1, high_chunks: 3 }).unwrap();
        for _ in 0..3 {
            assert_eq!(w.admit(1), None);
        }
        assert_eq!(w.admit(1), Some(Transition::Paused), "a fourth chunk");
        assert_eq!(w.release(1), None);
        assert_eq!(w.release(1), None, "2 chunks > 1");
        assert_eq!(w.release(1), Some(Transition::Resumed), "bytes 1 ≤ 1000 and 1 chunk ≤ 1");
    }

    #[test]
    fn both_counts_must_be_low_to_resume() {
        let mut w = Watermark::new(Limits { low_bytes: 10, high_bytes: 20, low_chunks: 1, high_chunks: 5 }).unwrap();
        assert_eq!(w.admit(21), Some(Transition::Paused));
        w.admit(0);
        w.admit(0);
        assert_eq!(w.release(21), None, "bytes are low but 2 chunks are in flight");
        assert_eq!(w.release(0), Some(Transition::Resumed));
    }

    #[test]
    fn releasing_more_than_in_flight_is_clamped_and_counted() {
        let mut w = wm(5, 10);
        w.admit(4);
        assert_eq!(w.release(9), None);
        assert_eq!((w.bytes(), w.chunks(), w.stats().excess_releases, w.stats().released_bytes), (0, 0, 1, 4));
        w.release(0);
        assert_eq!((w.chunks(), w.stats().excess_releases), (0, 2), "a release with no chunk in flight");
        assert_eq!(w.admit(u64::MAX), Some(Transition::Paused));
        assert_eq!(w.admit(u64::MAX), None, "saturates, never wraps");
        assert_eq!(w.bytes(), u64::MAX);
    }

    /// One step of a driver: admit a chunk, or release the oldest chunk in flight.
    #[derive(Debug, Clone)]
    enum Op {
        Admit(u64),
        ReleaseOldest,
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(
            prop_oneof![(0u64..5_000).prop_map(Op::Admit), Just(Op::ReleaseOldest), Just(Op::ReleaseOldest)],
            0..400,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, rng_seed: proptest::test_runner::RngSeed::Fixed(23), ..ProptestConfig::default() })]

        /// The invariants, under any sequence of admits and releases of chunks in flight:
        /// a pause happens only above high (never at or below low), a resume only at or
        /// under low; pauses and resumes alternate; between two transitions the count moved
        /// by more than the gap (no flapping faster than the hysteresis); the counts are
        /// exactly what is in flight; and draining everything always resumes.
        #[test]
        fn hysteresis_holds_and_a_drained_watermark_runs(
            low in 0u64..20_000,
            gap in 1u64..20_000,
            low_chunks in 0u64..16,
            chunk_gap in 1u64..16,
            script in ops(),
        ) {
            let limits = Limits { low_bytes: low, high_bytes: low + gap, low_chunks, high_chunks: low_chunks + chunk_gap };
            let mut w = Watermark::new(limits).unwrap();
            let mut flight: std::collections::VecDeque<u64> = Default::default();
            // (bytes, chunks) at the last transition.
            let mut last: Option<(Transition, u64, u64)> = None;
            let mut check = |t: Option<Transition>, w: &Watermark| -> Result<(), TestCaseError> {
                let (b, c) = (w.bytes(), w.chunks());
                match t {
                    Some(Transition::Paused) => {
                        prop_assert!(b > limits.high_bytes || c > limits.high_chunks, "paused at {b} B, {c} chunks");
                        prop_assert!(b > limits.low_bytes || c > limits.low_chunks, "paused at or below low");
                        if let Some((prev, pb, pc)) = last {
                            prop_assert_eq!(prev, Transition::Resumed);
                            prop_assert!(b > pb + gap || c > pc + chunk_gap, "flapped: resumed at {pb}/{pc}, paused at {b}/{c}");
                        }
                    }
                    Some(Transition::Resumed) => {
                        prop_assert!(b <= limits.low_bytes && c <= limits.low_chunks, "resumed at {b} B, {c} chunks");
                        let (prev, pb, pc) = last.expect("a resume follows a pause");
                        prop_assert_eq!(prev, Transition::Paused);
                        prop_assert!(pb > b + gap || pc > c + chunk_gap, "flapped: paused at {pb}/{pc}, resumed at {b}/{c}");
                    }
                    None => {}
                }
                if let Some(t) = t {
                    last = Some((t, b, c));
                }
                prop_assert_eq!(w.paused(), matches!(last, Some((Transition::Paused, _, _))));
                Ok(())
            };
            for op in &script {
                let t = match *op {
                    Op::Admit(n) => {
                        flight.push_back(n);
                        w.admit(n)
                    }
                    Op::ReleaseOldest => match flight.pop_front() {
                        Some(n) => w.release(n),
                        None => None,
                    },
                };
                check(t, &w)?;
                prop_assert_eq!(w.bytes(), flight.iter().sum::<u64>());
                prop_assert_eq!(w.chunks(), flight.len() as u64);
            }
            while let Some(n) = flight.pop_front() {
                let t = w.release(n);
                check(t, &w)?;
            }
            prop_assert!(!w.paused(), "drained but paused");
            let s = w.stats();
            prop_assert_eq!(s.pauses, s.resumes);
            prop_assert_eq!(s.excess_releases, 0);
            prop_assert_eq!(s.admitted_bytes, s.released_bytes);
        }
    }
}
