//! CPU lists — `3`, `2,3`, `0-1,4` — and pinning the calling thread to one. nicfs is pinned
//! to the SmartNIC's cores with it, `linefs up --cpus` checks its list with it before
//! anything starts (so the CLI refuses exactly what nicfs would), and the benchmark's load
//! generator pins its clients and co-runner with it.

use rustix::thread::{sched_setaffinity, CpuSet};

/// CPU numbers, sorted, without duplicates. (A newtype: clap reads `Option<Vec<_>>` as a
/// repeated argument.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// Parses a CPU list: comma-separated numbers and inclusive ranges.
pub fn parse(s: &str) -> Result<CpuList, String> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim) {
        let num = |t: &str| t.trim().parse::<usize>().map_err(|_| format!("bad CPU number {t:?} in {s:?}"));
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(part)?, num(part)?),
        };
        if lo > hi {
            return Err(format!("empty CPU range {part:?}"));
        }
        if hi >= CpuSet::MAX_CPU {
            return Err(format!("CPU {hi} is beyond the {} this system call can name", CpuSet::MAX_CPU));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(CpuList(cpus))
}

impl CpuList {
    /// Pins the calling thread — call it before starting any other, which inherit it.
    pub fn pin(&self) -> std::io::Result<()> {
        let mut set = CpuSet::new();
        for &c in &self.0 {
            set.set(c);
        }
        sched_setaffinity(None, &set)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(parse("3").unwrap().0, vec![3]);
        assert_eq!(parse("0-2,5, 1").unwrap().0, vec![0, 1, 2, 5]);
        assert_eq!(parse("1,0-1").unwrap(), CpuList(vec![0, 1]));
        assert!(parse("2-1").is_err());
        assert!(parse("x").is_err());
        assert!(parse("").is_err());
        assert!(parse("99999").is_err());
    }
}
