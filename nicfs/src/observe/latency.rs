//! Latency bookkeeping: a [`Latency`] records durations of one kind (a stage's queue wait or
//! service time, a chunk's or an fsync's end-to-end time) twice, for its two readers:
//!
//! * an HDR histogram (`hdrhistogram`) in microseconds, from [`LOWEST_US`] to
//!   [`HIGHEST_US`] (1 µs .. 60 s) with [`SIGNIFICANT_DIGITS`] significant digits, for the
//!   quantiles the status file shows ([`Summary`]: p50, p99, p99.9, max, count). A value
//!   above the range is recorded as the top of the range (saturating): a max of 60 s
//!   means "60 s or more";
//! * a Prometheus histogram (`prometheus-client`) in seconds with the fixed
//!   [`BUCKETS_SECONDS`] bounds, exact count and sum, which `/metrics` exposes
//!   ([`crate::daemon::metrics`]).
//!
//! Both cover everything since nicfs started. Recording takes two short mutexes (the HDR
//! histogram's, and the Prometheus histogram's own), each held only to bump a bucket: work
//! items are chunks and requests, not bytes, so this costs far less than the work timed,
//! and stage threads recording at once wait for each other only that long. A `Latency` is
//! a cheap handle (clones share the histograms).

use parking_lot::Mutex;
use prometheus_client::metrics::histogram::Histogram as PromHistogram;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// The smallest value the HDR histograms tell apart, in µs.
pub(crate) const LOWEST_US: u64 = 1;
/// The largest value recorded as is, in µs (60 s); larger ones are recorded as this.
pub(crate) const HIGHEST_US: u64 = 60_000_000;
/// Precision of the HDR histograms: values are kept to 3 significant digits (0.1 %).
pub(crate) const SIGNIFICANT_DIGITS: u8 = 3;

/// Upper bounds (seconds) of the Prometheus buckets: 1–2.5–5 steps from 10 µs to 10 s
/// (a `+Inf` bucket is implicit).
pub(crate) const BUCKETS_SECONDS: [f64; 19] = [
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Quantiles of one kind of latency since start, in µs, as the status file shows them.
/// All zero while nothing was recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Summary {
    pub(crate) count: u64,
    pub(crate) p50_us: u64,
    pub(crate) p99_us: u64,
    pub(crate) p999_us: u64,
    pub(crate) max_us: u64,
}

struct Inner {
    hdr: Mutex<hdrhistogram::Histogram<u64>>,
    prom: PromHistogram,
}

/// One kind of latency: record with [`Latency::record`], read with [`Latency::summary`]
/// (status) and [`Latency::prometheus`] (`/metrics`).
#[derive(Clone)]
pub(crate) struct Latency(Arc<Inner>);

impl Default for Latency {
    fn default() -> Self {
        Latency::new()
    }
}

impl std::fmt::Debug for Latency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Latency").field(&self.summary()).finish()
    }
}

impl Latency {
    pub(crate) fn new() -> Latency {
        // The bounds are constants that hdrhistogram accepts (checked by a test).
        let hdr = hdrhistogram::Histogram::new_with_bounds(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
            .expect("constant histogram bounds are valid");
        Latency(Arc::new(Inner { hdr: Mutex::new(hdr), prom: PromHistogram::new(BUCKETS_SECONDS) }))
    }

    /// Records one duration.
    pub(crate) fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.0.hdr.lock().saturating_record(us);
        self.0.prom.observe(d.as_secs_f64());
    }

    /// Records the time since `start`.
    pub(crate) fn since(&self, start: std::time::Instant) {
        self.record(start.elapsed());
    }

    /// The quantiles now (the histogram's lock is held while they are read).
    pub(crate) fn summary(&self) -> Summary {
        let h = self.0.hdr.lock();
        if h.is_empty() {
            return Summary::default();
        }
        Summary {
            count: h.len(),
            p50_us: h.value_at_quantile(0.5),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }

    /// The Prometheus histogram (seconds), shared with this handle.
    pub(crate) fn prometheus(&self) -> &PromHistogram {
        &self.0.prom
    }
}

/// The end-to-end latencies nicfs measures outside the stages (taken in
/// [`crate::pipeline::sequencer`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct EndToEnd {
    /// From a `ChunkReady` read (bulk connection) to the `Published` that covers its LSN
    /// being sent: the sequencer's queue, fetch, validate, coalesce, publish (the durable
    /// checkpoint) and the way back to the sequencer.
    pub(crate) chunk: Latency,
    /// From an `Fsync` read (control connection) to its `FsyncDone` being sent.
    pub(crate) fsync: Latency,
}

/// [`EndToEnd`] as the status file shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct EndToEndStatus {
    pub(crate) chunk: Summary,
    pub(crate) fsync: Summary,
}

impl EndToEnd {
    pub(crate) fn status(&self) -> EndToEndStatus {
        EndToEndStatus { chunk: self.chunk.summary(), fsync: self.fsync.summary() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::EncodeMetric;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// The Prometheus histogram's text, encoded alone.
    fn prom_text(l: &Latency) -> String {
        let mut reg = prometheus_client::registry::Registry::default();
        reg.register("t", "test", l.prometheus().clone());
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
        assert_eq!(l.prometheus().metric_type().as_str(), "histogram");
        out
    }

    #[test]
    fn nothing_recorded_is_all_zero() {
        let l = Latency::new();
        assert_eq!(l.summary(), Summary::default());
        assert!(prom_text(&l).contains("t_count 0"), "{}", prom_text(&l));
    }

    #[test]
    fn quantiles_follow_what_was_recorded() {
        let l = Latency::new();
        // 1..=1000 µs, once each: p50 ~500, p99 ~990, p99.9 ~999, max 1000 (exact below
        // 2048 µs at 3 significant digits).
        for n in 1..=1000 {
            l.record(us(n));
        }
        let s = l.summary();
        assert_eq!((s.count, s.p50_us, s.p99_us, s.p999_us, s.max_us), (1000, 500, 990, 999, 1000));
        // Larger values keep 3 significant digits.
        let l = Latency::new();
        l.record(Duration::from_millis(12_345));
        let max = l.summary().max_us;
        assert!(max.abs_diff(12_345_000) <= 12_345, "{max}");
    }

    #[test]
    fn out_of_range_values_saturate() {
        let l = Latency::new();
        l.record(Duration::from_secs(3600));
        l.record(Duration::ZERO);
        l.record(Duration::MAX);
        let s = l.summary();
        assert_eq!(s.count, 3);
        assert!(s.max_us >= HIGHEST_US && s.max_us <= HIGHEST_US + HIGHEST_US / 1000, "{s:?}");
        assert_eq!(s.p50_us, s.max_us, "two of three at the top of the range");
    }

    #[test]
    fn the_prometheus_histogram_counts_in_seconds() {
        let l = Latency::new();
        l.record(us(20)); // <= 25 µs
        l.record(us(700)); // <= 1 ms
        l.record(Duration::from_secs(20)); // +Inf only
        let text = prom_text(&l);
        assert!(text.contains("t_count 3"), "{text}");
        assert!(text.contains("t_bucket{le=\"2.5e-5\"} 1") || text.contains("t_bucket{le=\"0.000025\"} 1"), "{text}");
        assert!(text.contains("t_bucket{le=\"10.0\"} 2"), "{text}");
        assert!(text.contains("t_bucket{le=\"+Inf\"} 3"), "{text}");
        let sum: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("t_sum "))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no sum in {text}"));
        assert!((sum - 20.000_72).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn clones_share_and_threads_record_concurrently() {
        let l = Latency::new();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || (0..1000).for_each(|i| l.record(us(i % 100 + 1))))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(l.summary().count, 4000);
        assert!(prom_text(&l).contains("t_count 4000"));
        let e = EndToEnd::default();
        e.fsync.record(us(5));
        assert_eq!((e.status().fsync.count, e.status().chunk.count), (1, 0));
    }
}
