//! Adaptive compression of replicated chunks: whether to lz4 the next chunk.
//!
//! Replication is a pipeline — cut a chunk, compress it (maybe), send it — whose speed is its
//! slowest stage's. Compressing pays when the network is the bottleneck (fewer bytes to send)
//! and costs when the CPU is (lz4 runs slower than the link would carry the raw bytes).
//! [`Adaptive`] keeps compression on while it pays and turns it off while compression is the
//! bottleneck, from what the driver reports after each chunk ([`Sample`]): its raw and wire
//! bytes, the time lz4 took, the time sending its wire bytes took, the compress stage's
//! threads and the two stages' queue lengths.
//!
//! **Estimates** (exponential moving averages, weight [`Config::alpha`]): lz4's cost in ns per
//! raw byte and its ratio (wire / raw), from compressed chunks only; the network's cost in ns
//! per wire byte, from every chunk whose send time is known; the two queues' lengths.
//! Per raw byte, the pipeline then costs `max(lz4 / threads, network × ratio)` with
//! compression (the compress stage's threads share its work: an elastic stage that got more
//! threads makes compression pay again) and `network` without.
//!
//! **Rules.** A decision is taken after each sample, never sooner than [`Config::min_dwell`]
//! samples after the previous switch (so it cannot flap faster than that):
//! * on → off when lz4 saves less than [`Config::off_saving`] of the bytes (nothing to gain
//!   for its CPU), or the pipeline with compression is predicted slower than without by more
//!   than [`Config::off_above`], or the compress stage's queue dominates (at least
//!   [`Config::queue_long`] and more than [`Config::queue_factor`] times the send queue's):
//!   compression is the bottleneck and the saved bytes do not pay for it;
//! * off → on when lz4 saves at least [`Config::on_saving`] and the pipeline with
//!   compression is predicted no slower than [`Config::on_below`] times without. The
//!   thresholds of the two directions leave a gap (`on_saving > off_saving`,
//!   `on_below < off_above`): hysteresis.
//!
//! The queues say nothing while compression is off (its stage is idle), so the on rule cannot
//! see a queue-driven bottleneck coming back: each switch off for a long compress queue
//! doubles the dwell before the next switch on (up to 64 dwells; reset once compression has
//! stayed on for 8 dwells), so a compress stage that is the bottleneck by its queue alone
//! costs a shrinking share of the time rather than a steady flip-flop.
//!
//! While off, every [`Config::probe_every`]-th chunk is compressed anyway (a *probe*) so that
//! lz4's cost and ratio stay measured: data that became compressible again, or a CPU that
//! became free, turn compression back on. When the network time is unknown (a driver that
//! cannot measure it) the throughput rule is skipped and the savings and queues decide.
//!
//! Pure: no clock (times come in the samples), no thread, no I/O, no lz4 (the driver
//! compresses).

/// A queue-driven switch off doubles the next off → on dwell, up to this many times the
/// dwell...
const MAX_BACKOFF: u32 = 64;
/// ...and compression staying on this many dwells resets it.
const BACKOFF_RESET: u32 = 8;

/// The controller's tuning.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// While off, every this many chunks one is compressed to re-measure (≥ 1).
    pub probe_every: u32,
    /// Samples after a switch (and at start) before the next decision.
    pub min_dwell: u32,
    /// Weight of a new sample in the moving averages (0 < alpha ≤ 1).
    pub alpha: f64,
    /// Off when compression is predicted to make the pipeline this many times slower.
    pub off_above: f64,
    /// On when compression is predicted to make it at most this many times slower.
    pub on_below: f64,
    /// Off when lz4 saves less than this fraction of the bytes.
    pub off_saving: f64,
    /// On only when it saves at least this fraction.
    pub on_saving: f64,
    /// A compress queue (moving average) this long or longer...
    pub queue_long: f64,
    /// ...and this many times the send queue's says compression is the bottleneck.
    pub queue_factor: f64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            probe_every: 32,
            min_dwell: 16,
            alpha: 0.25,
            off_above: 1.10,
            on_below: 1.02,
            off_saving: 0.05,
            on_saving: 0.10,
            queue_long: 4.0,
            queue_factor: 2.0,
        }
    }
}

/// What the driver measured for one chunk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// Log bytes in the chunk.
    pub raw: u64,
    /// Bytes sent for it (`raw` when sent uncompressed, the lz4 frame's length otherwise).
    pub wire: u64,
    /// Whether lz4 ran on it (its output may still have been dropped for being larger).
    pub compressed: bool,
    /// Time lz4 took on it (ns; 0 if it did not run).
    pub compress_ns: u64,
    /// Time sending its wire bytes took (ns; 0: unknown).
    pub send_ns: u64,
    /// Threads of the compress stage when it ran (0 is taken as 1).
    pub compress_threads: u32,
    /// Length of the compress stage's queue when the chunk left it.
    pub compress_queue: u32,
    /// Length of the send stage's queue when the chunk left it.
    pub send_queue: u32,
}

/// Whether to compress the next chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub compress: bool,
    /// Compressed although the controller is off, to re-measure.
    pub probe: bool,
}

/// Why the controller switched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// lz4 saves too little.
    NoSaving,
    /// Compression makes the pipeline slower (the lz4 stage is the bottleneck).
    Slower,
    /// The compress stage's queue dominates the send stage's.
    QueueBottleneck,
    /// Compression saves bytes and does not slow the pipeline.
    Pays,
}

/// A switch of the controller, for the driver to log and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switch {
    pub on: bool,
    pub reason: Reason,
}

/// Counters and estimates for status and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stats {
    pub on: bool,
    pub chunks: u64,
    /// Chunks lz4 ran on, probes included.
    pub compressed: u64,
    pub probes: u64,
    pub raw_bytes: u64,
    pub wire_bytes: u64,
    /// raw − wire, over every chunk.
    pub saved_bytes: u64,
    pub switches_off: u64,
    pub switches_on: u64,
    pub last_reason: Option<Reason>,
    /// lz4 ns per raw byte; wire / raw; network ns per wire byte (None until measured).
    pub lz4_ns_per_byte: Option<f64>,
    pub ratio: Option<f64>,
    pub net_ns_per_byte: Option<f64>,
}

/// The controller (see the module note).
#[derive(Debug, Clone)]
pub struct Adaptive {
    cfg: Config,
    on: bool,
    /// Decisions since the last probe (while off).
    since_probe: u32,
    /// Samples since the last switch (or the start).
    since_switch: u32,
    /// The off → on dwell is `min_dwell × backoff` (see [`Adaptive::observe`]).
    backoff: u32,
    lz4: Ewma,
    ratio: Ewma,
    net: Ewma,
    cq: Ewma,
    sq: Ewma,
    /// Threads of the compress stage, as last reported (≥ 1).
    threads: u32,
    stats: Stats,
}

#[derive(Debug, Clone, Copy, Default)]
struct Ewma(Option<f64>);

impl Ewma {
    fn add(&mut self, x: f64, alpha: f64) {
        self.0 = Some(match self.0 {
            None => x,
            Some(m) => m + alpha * (x - m),
        });
    }
}

impl Adaptive {
    /// Starts on (compressing), with nothing measured. Out-of-range settings are clamped.
    pub fn new(cfg: Config) -> Adaptive {
        let mut cfg = cfg;
        cfg.probe_every = cfg.probe_every.max(1);
        cfg.alpha = if cfg.alpha.is_finite() { cfg.alpha.clamp(1e-3, 1.0) } else { 0.25 };
        Adaptive {
            cfg,
            on: true,
            since_probe: 0,
            since_switch: 0,
            backoff: 1,
            lz4: Ewma::default(),
            ratio: Ewma::default(),
            net: Ewma::default(),
            cq: Ewma::default(),
            sq: Ewma::default(),
            threads: 1,
            stats: Stats { on: true, ..Stats::default() },
        }
    }

    /// Whether to compress the next chunk (counts it).
    pub fn decide(&mut self) -> Decision {
        self.stats.chunks += 1;
        if self.on {
            return Decision { compress: true, probe: false };
        }
        self.since_probe += 1;
        if self.since_probe >= self.cfg.probe_every {
            self.since_probe = 0;
            self.stats.probes += 1;
            return Decision { compress: true, probe: true };
        }
        Decision { compress: false, probe: false }
    }

    /// What a chunk cost; may switch compression on or off.
    pub fn observe(&mut self, s: &Sample) -> Option<Switch> {
        let a = self.cfg.alpha;
        let wire = if s.compressed { s.wire.min(s.raw) } else { s.raw };
        self.stats.raw_bytes = self.stats.raw_bytes.saturating_add(s.raw);
        self.stats.wire_bytes = self.stats.wire_bytes.saturating_add(wire);
        self.stats.saved_bytes = self.stats.saved_bytes.saturating_add(s.raw - wire);
        if s.compressed {
            self.threads = s.compress_threads.max(1);
            self.stats.compressed += 1;
            if s.raw > 0 {
                self.lz4.add(s.compress_ns as f64 / s.raw as f64, a);
                self.ratio.add(wire as f64 / s.raw as f64, a);
            }
            if self.on {
                self.cq.add(f64::from(s.compress_queue), a);
            }
        }
        if s.send_ns > 0 && wire > 0 {
            self.net.add(s.send_ns as f64 / wire as f64, a);
        }
        self.sq.add(f64::from(s.send_queue), a);
        self.since_switch = self.since_switch.saturating_add(1);
        let dwell = if self.on { self.cfg.min_dwell } else { self.cfg.min_dwell.saturating_mul(self.backoff) };
        if self.on && self.since_switch >= self.cfg.min_dwell.saturating_mul(BACKOFF_RESET) {
            self.backoff = 1;
        }
        if self.since_switch < dwell {
            return None;
        }
        let verdict = if self.on { self.off_reason() } else { self.on_reason() };
        let reason = verdict?;
        if reason == Reason::QueueBottleneck {
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        }
        self.on = !self.on;
        self.since_switch = 0;
        self.since_probe = 0;
        self.cq = Ewma::default();
        if self.on {
            self.stats.switches_on += 1;
        } else {
            self.stats.switches_off += 1;
        }
        self.stats.on = self.on;
        self.stats.last_reason = Some(reason);
        Some(Switch { on: self.on, reason })
    }

    /// Whether compression is on (probes aside).
    pub fn on(&self) -> bool {
        self.on
    }

    pub fn config(&self) -> Config {
        self.cfg
    }

    pub fn stats(&self) -> Stats {
        Stats { lz4_ns_per_byte: self.lz4.0, ratio: self.ratio.0, net_ns_per_byte: self.net.0, ..self.stats }
    }

    /// Pipeline cost per raw byte (with, without) compression, when both are measured.
    fn costs(&self, threads: f64) -> Option<(f64, f64)> {
        let (lz4, ratio, net) = (self.lz4.0?, self.ratio.0?, self.net.0?);
        Some(((lz4 / threads).max(net * ratio), net))
    }

    fn saving(&self) -> Option<f64> {
        self.ratio.0.map(|r| 1.0 - r)
    }

    fn off_reason(&self) -> Option<Reason> {
        let c = &self.cfg;
        if self.saving()? < c.off_saving {
            return Some(Reason::NoSaving);
        }
        if let Some((with, without)) = self.costs(f64::from(self.threads)) {
            if with > without * c.off_above {
                return Some(Reason::Slower);
            }
        }
        let (cq, sq) = (self.cq.0.unwrap_or(0.0), self.sq.0.unwrap_or(0.0));
        if cq >= c.queue_long && cq > c.queue_factor * sq {
            return Some(Reason::QueueBottleneck);
        }
        None
    }

    fn on_reason(&self) -> Option<Reason> {
        let c = &self.cfg;
        if self.saving()? < c.on_saving {
            return None;
        }
        match self.costs(f64::from(self.threads)) {
            Some((with, without)) if with > without * c.on_below => None,
            _ => Some(Reason::Pays),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A chunk of 64 KiB in a regime: lz4 at `lz4` ns/byte, network at `net` ns/byte, lz4
    /// keeping `ratio` of the bytes.
    fn sample(d: Decision, lz4: f64, net: f64, ratio: f64) -> Sample {
        let raw = 64 << 10;
        let wire = if d.compress { ((raw as f64 * ratio) as u64).min(raw) } else { raw };
        Sample {
            raw,
            wire,
            compressed: d.compress,
            compress_ns: if d.compress { (lz4 * raw as f64) as u64 } else { 0 },
            send_ns: (net * wire as f64) as u64,
            compress_threads: 1,
            compress_queue: 0,
            send_queue: 0,
        }
    }

    /// Runs `n` chunks of a regime; returns the switches.
    fn run(a: &mut Adaptive, n: usize, lz4: f64, net: f64, ratio: f64) -> Vec<Switch> {
        (0..n)
            .filter_map(|_| {
                let d = a.decide();
                a.observe(&sample(d, lz4, net, ratio))
            })
            .collect()
    }

    /// Runs a regime until the controller switches; returns the samples before that one.
    fn until_switch(a: &mut Adaptive, lz4: f64, net: f64, ratio: f64) -> usize {
        let mut n = 0;
        loop {
            let d = a.decide();
            if a.observe(&sample(d, lz4, net, ratio)).is_some() {
                return n;
            }
            n += 1;
            assert!(n < 100_000, "never switches");
        }
    }

    #[test]
    fn starts_on_and_stays_on_when_the_network_is_the_bottleneck() {
        let mut a = Adaptive::new(Config::default());
        assert!(a.on());
        // 1 GB/s of lz4, 100 MB/s of network, 80 % saved.
        assert_eq!(run(&mut a, 500, 1.0, 10.0, 0.2), vec![]);
        let s = a.stats();
        assert_eq!((s.chunks, s.compressed, s.probes, s.switches_off), (500, 500, 0, 0));
        assert_eq!(s.saved_bytes, 500 * (65536 - 13107), "{s:?}");
        assert!((s.ratio.unwrap() - 0.2).abs() < 0.01);
    }

    #[test]
    fn turns_off_when_lz4_is_the_bottleneck_and_probes_while_off() {
        let mut a = Adaptive::new(Config::default());
        // lz4 at 500 MB/s, loopback at 10 GB/s: compression is 20× slower than the link.
        let sw = run(&mut a, 16, 2.0, 0.1, 0.3);
        assert_eq!(sw, vec![Switch { on: false, reason: Reason::Slower }], "off after the dwell");
        assert!(!a.on());
        let before = a.stats();
        let ds: Vec<Decision> = (0..64).map(|_| a.decide()).collect();
        let probes: Vec<usize> = ds.iter().enumerate().filter(|(_, d)| d.compress).map(|(i, _)| i).collect();
        assert_eq!(probes, vec![31, 63], "every 32nd chunk is a probe");
        assert!(ds.iter().all(|d| d.compress == d.probe));
        assert_eq!(a.stats().probes - before.probes, 2);
    }

    #[test]
    fn incompressible_data_turns_it_off_and_compressible_data_back_on() {
        let mut a = Adaptive::new(Config::default());
        assert_eq!(run(&mut a, 20, 0.5, 10.0, 1.0), vec![Switch { on: false, reason: Reason::NoSaving }]);
        // The data becomes compressible: probes see it; the moving average takes a few.
        let sw = run(&mut a, 400, 0.5, 10.0, 0.2);
        assert_eq!(sw, vec![Switch { on: true, reason: Reason::Pays }]);
        assert!(a.on());
        let s = a.stats();
        assert_eq!((s.switches_off, s.switches_on, s.last_reason), (1, 1, Some(Reason::Pays)));
    }

    #[test]
    fn a_cpu_freed_turns_it_back_on() {
        let mut a = Adaptive::new(Config::default());
        run(&mut a, 100, 2.0, 1.0, 0.4);
        assert!(!a.on(), "lz4 2 ns/B vs network 1 ns/B: off");
        // lz4 gets its CPU back (0.2 ns/B): with compression 0.4 ns/B per raw byte < 1.
        let sw = run(&mut a, 400, 0.2, 1.0, 0.4);
        assert_eq!(sw, vec![Switch { on: true, reason: Reason::Pays }]);
    }

    #[test]
    fn a_long_compress_queue_turns_it_off_and_backs_off() {
        let mut a = Adaptive::new(Config::default());
        // Costs say it pays (lz4 0.5, network 2 ns/B); the compress queue stays long.
        let mut sw = Vec::new();
        for _ in 0..40 {
            let d = a.decide();
            let mut s = sample(d, 0.5, 2.0, 0.5);
            s.compress_queue = 12;
            s.send_queue = 1;
            sw.extend(a.observe(&s));
        }
        assert_eq!(sw, vec![Switch { on: false, reason: Reason::QueueBottleneck }]);
        // The costs say it pays: it comes back on, but only after twice the dwell...
        let n = until_switch(&mut a, 0.5, 2.0, 0.5);
        assert!(a.on());
        assert_eq!(n, 2 * 16 - 24 - 1, "16 off samples seen in the loop above, then up to 32");
        // ...and a second queue-driven switch off doubles it again.
        let mut off_after = 0;
        loop {
            let d = a.decide();
            let mut s = sample(d, 0.5, 2.0, 0.5);
            s.compress_queue = 12;
            off_after += 1;
            if a.observe(&s).is_some() {
                break;
            }
        }
        assert_eq!(off_after, 16);
        assert_eq!(until_switch(&mut a, 0.5, 2.0, 0.5), 4 * 16 - 1);
    }

    #[test]
    fn more_compress_threads_make_compression_pay() {
        // lz4 2 ns/B, network 1 ns/B, 60 % saved: one lz4 thread is the bottleneck...
        let mut one = Adaptive::new(Config::default());
        assert_eq!(run(&mut one, 100, 2.0, 1.0, 0.4), vec![Switch { on: false, reason: Reason::Slower }]);
        // ...four share the work: 0.5 ns/B, faster than the link.
        let mut four = Adaptive::new(Config::default());
        let sw: Vec<Switch> = (0..100)
            .filter_map(|_| {
                let d = four.decide();
                let mut s = sample(d, 2.0, 1.0, 0.4);
                s.compress_threads = 4;
                four.observe(&s)
            })
            .collect();
        assert_eq!(sw, vec![]);
    }

    #[test]
    fn without_network_times_savings_decide() {
        let mut a = Adaptive::new(Config::default());
        let mut sw = Vec::new();
        for _ in 0..100 {
            let d = a.decide();
            let mut s = sample(d, 3.0, 1.0, 0.3);
            s.send_ns = 0;
            sw.extend(a.observe(&s));
        }
        assert_eq!(sw, vec![], "saves 70 %, no queue: stays on");
        assert_eq!(a.stats().net_ns_per_byte, None);
    }

    #[test]
    fn nothing_is_decided_before_the_dwell_and_odd_settings_are_clamped() {
        let mut a = Adaptive::new(Config { probe_every: 0, alpha: f64::NAN, ..Config::default() });
        assert_eq!((a.config().probe_every, a.config().alpha), (1, 0.25));
        assert_eq!(run(&mut a, 15, 5.0, 0.1, 1.0), vec![], "15 < min_dwell");
        assert_eq!(run(&mut a, 1, 5.0, 0.1, 1.0).len(), 1);
        // probe_every 1: every chunk is a probe while off.
        assert!(a.decide().probe);
        // A zero-byte chunk measures nothing and does not divide by zero.
        assert_eq!(a.observe(&Sample { compressed: true, ..Sample::default() }), None);
        assert!(a.stats().lz4_ns_per_byte.unwrap().is_finite());
    }

    /// A regime: (lz4 ns/B, network ns/B, ratio). Two random families: CPU-bound (lz4 much
    /// slower than the link) and network-bound (the link much slower than lz4, data that
    /// compresses).
    fn cpu_bound() -> impl Strategy<Value = (f64, f64, f64)> {
        (1.0f64..8.0, 0.02f64..0.3, 0.05f64..0.9)
    }

    fn net_bound() -> impl Strategy<Value = (f64, f64, f64)> {
        (0.1f64..1.0, 5.0f64..50.0, 0.05f64..0.6)
    }

    /// One step of a random run: a regime with a jitter factor on each time.
    fn noisy(d: Decision, r: (f64, f64, f64), j: (f64, f64)) -> Sample {
        sample(d, r.0 * j.0, r.1 * j.1, r.2)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, rng_seed: proptest::test_runner::RngSeed::Fixed(23), ..ProptestConfig::default() })]

        /// Under a CPU-bound regime compression ends off and stays off (only probes
        /// compress, every probe_every-th chunk); under a network-bound one it ends on and
        /// stays on — whichever regime came before.
        #[test]
        fn settles_off_when_cpu_bound_and_on_when_network_bound(
            first in prop_oneof![cpu_bound(), net_bound()],
            cpu in cpu_bound(),
            net in net_bound(),
            jitter in prop::collection::vec((0.8f64..1.25, 0.8f64..1.25), 200),
        ) {
            let cfg = Config::default();
            let mut a = Adaptive::new(cfg);
            let step = |a: &mut Adaptive, r, i: usize| {
                let d = a.decide();
                a.observe(&noisy(d, r, jitter[i % jitter.len()]));
                d
            };
            for i in 0..300 { step(&mut a, first, i); }
            // Settling takes at most a few probes' worth of chunks.
            for i in 0..600 { step(&mut a, cpu, i); }
            prop_assert!(!a.on(), "CPU-bound {cpu:?}: still on; {:?}", a.stats());
            let mut last_probe: Option<usize> = None;
            let mut probes = 0;
            for i in 0..320 {
                let d = step(&mut a, cpu, i);
                prop_assert!(!a.on(), "switched on under a CPU-bound regime");
                prop_assert_eq!(d.compress, d.probe);
                if d.probe {
                    if let Some(p) = last_probe {
                        prop_assert_eq!(i - p, cfg.probe_every as usize, "probes not every probe_every-th chunk");
                    }
                    last_probe = Some(i);
                    probes += 1;
                }
            }
            prop_assert_eq!(probes, 10, "320 chunks, one probe in 32");
            for i in 0..600 { step(&mut a, net, i); }
            prop_assert!(a.on(), "network-bound {net:?}: still off; {:?}", a.stats());
            for i in 0..320 {
                let d = step(&mut a, net, i);
                prop_assert!(a.on() && d.compress && !d.probe, "switched off under a network-bound regime");
            }
        }

        /// Whatever it is fed: switches are at least min_dwell samples apart and alternate;
        /// while off only probes compress, at most one per probe_every decisions; the byte
        /// counters add up.
        #[test]
        fn never_flaps_faster_than_its_dwell(
            dwell in 1u32..40,
            probe_every in 1u32..50,
            script in prop::collection::vec((any::<bool>(), 0u64..1 << 20, 0u64..1 << 20, 0u64..1 << 24, 0u64..1 << 24, 0u32..20, 0u32..20), 0..600),
        ) {
            let mut a = Adaptive::new(Config { min_dwell: dwell, probe_every, ..Config::default() });
            let mut since: Option<u32> = None;
            let mut since_probe = 0u32;
            let (mut raw, mut wire) = (0u64, 0u64);
            for &(_, r, w, cns, sns, cq, sq) in &script {
                let was_on = a.on();
                let d = a.decide();
                if was_on {
                    prop_assert!(d.compress && !d.probe);
                } else {
                    prop_assert_eq!(d.compress, d.probe);
                    since_probe += 1;
                    if d.probe {
                        prop_assert!(since_probe >= probe_every, "a probe {since_probe} decisions after the last");
                        since_probe = 0;
                    }
                }
                let s = Sample { raw: r, wire: w, compressed: d.compress, compress_ns: cns, send_ns: sns, compress_threads: 1, compress_queue: cq, send_queue: sq };
                raw += r;
                wire += if d.compress { w.min(r) } else { r };
                let n = since.map_or(1, |n| n + 1);
                since = Some(n);
                if let Some(sw) = a.observe(&s) {
                    prop_assert!(n >= dwell, "switched {n} samples after the last switch");
                    prop_assert_eq!(sw.on, !was_on);
                    prop_assert_eq!(sw.on, a.on());
                    since = Some(0);
                    since_probe = 0;
                }
            }
            let st = a.stats();
            prop_assert_eq!((st.raw_bytes, st.wire_bytes, st.saved_bytes), (raw, wire, raw - wire));
            prop_assert_eq!(st.on, a.on());
        }
    }
}
