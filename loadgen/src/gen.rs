//! Data of a chosen lz4-compressibility, for `--compressible PCT`.
//!
//! The bytes come in 256-byte pieces: the first `PCT`% of each piece repeat one byte (a run
//! lz4 encodes as a match of a few bytes), the rest are pseudo-random (xorshift64*, seeded:
//! the same seed gives the same bytes), which lz4 cannot shorten. lz4_flex's block
//! compressor then removes about `PCT`% of the bytes (checked in the tests: within 3 points
//! for 0, 40, 60, 80 %; at 0 % the output is a little larger than the input, and a sender
//! keeps the raw bytes).

/// Bytes per piece.
const PIECE: usize = 256;
/// What lz4 spends on encoding one run (measured with lz4_flex: the tests check the result).
const RUN_COST: usize = 8;

/// A seeded generator of data about `pct`% of which lz4 removes.
#[derive(Debug, Clone)]
pub struct Gen {
    state: u64,
    run: usize,
}

impl Gen {
    /// `pct` is clamped to 0..=100.
    pub fn new(seed: u64, pct: u8) -> Gen {
        let pct = usize::from(pct.min(100));
        // A run costs lz4 about RUN_COST bytes (its first byte as a literal, a token, an
        // offset, length extensions): the run is that much longer than the share removed.
        let run = if pct == 0 { 0 } else { (PIECE * pct / 100 + RUN_COST).min(PIECE) };
        Gen { state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, run }
    }

    fn next(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Fills `buf` (pieces continue across calls only at piece boundaries: fill whole
    /// multiples of 256 bytes for exact ratios).
    pub fn fill(&mut self, buf: &mut [u8]) {
        for piece in buf.chunks_mut(PIECE) {
            let run = self.run.min(piece.len());
            let b = self.next() as u8;
            piece[..run].fill(b);
            for w in piece[run..].chunks_mut(8) {
                let r = self.next().to_le_bytes();
                w.copy_from_slice(&r[..w.len()]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fraction of the bytes lz4 removes from 16 KiB blocks of `pct`% data.
    fn saved(pct: u8) -> f64 {
        let mut g = Gen::new(7, pct);
        let (mut raw, mut wire) = (0usize, 0usize);
        let mut buf = vec![0u8; 16 << 10];
        for _ in 0..64 {
            g.fill(&mut buf);
            raw += buf.len();
            wire += lz4_flex::block::compress(&buf).len();
        }
        1.0 - wire as f64 / raw as f64
    }

    #[test]
    fn lz4_removes_about_the_asked_share() {
        for pct in [0u8, 40, 60, 80] {
            let s = saved(pct) * 100.0;
            assert!((s - f64::from(pct)).abs() <= 3.0, "{pct}% compressible: lz4 saved {s:.1}%");
        }
        assert!(saved(0) <= 0.0, "random data does not shrink");
    }

    #[test]
    fn seeded_and_round_trips() {
        let (mut a, mut b) = (Gen::new(1, 60), Gen::new(1, 60));
        let (mut x, mut y) = (vec![0u8; 4096], vec![0u8; 4096]);
        a.fill(&mut x);
        b.fill(&mut y);
        assert_eq!(x, y);
        Gen::new(2, 60).fill(&mut y);
        assert_ne!(x, y);
        let c = lz4_flex::block::compress(&x);
        assert_eq!(lz4_flex::block::decompress(&c, x.len()).unwrap(), x);
        // Odd lengths fill every byte.
        let mut z = vec![0u8; 1000];
        Gen::new(3, 100).fill(&mut z);
        assert!(z[..256].iter().all(|&v| v == z[0]));
    }
}
