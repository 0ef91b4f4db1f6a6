//! Cluster-wide unique inode numbers: ranges cut from one counter znode by
//! compare-and-set (pure; the driver does the reads and writes).
//!
//! The counter only grows, and a range is the caller's only once its write succeeded. A
//! write whose answer was lost (ZooKeeper gone mid-request) may have gone through: the
//! retry reads the counter again and cuts a new range above it, so such a range is skipped,
//! never handed out twice. ZooKeeper logs each write to its data directory before it
//! answers, so a restart of the same data directory keeps the counter.

use crate::format::{decode_counter, encode_counter, FormatError};

/// Inode numbers `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InodeRange {
    pub start: u64,
    pub end: u64,
}

impl InodeRange {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
    pub fn contains(&self, ino: u64) -> bool {
        (self.start..self.end).contains(&ino)
    }
}

/// Why no range can be cut.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CutError {
    #[error("an inode range of 0 numbers")]
    Empty,
    #[error("inode numbers exhausted")]
    Exhausted,
    #[error("{0}")]
    Format(#[from] FormatError),
}

/// The range of `n` numbers after the counter's data (`None`: no counter yet, start at
/// `first`), and the counter's next data.
pub fn cut(current: Option<&[u8]>, n: u64, first: u64) -> Result<(InodeRange, Vec<u8>), CutError> {
    if n == 0 {
        return Err(CutError::Empty);
    }
    let start = match current {
        None => first,
        Some(d) => decode_counter(d)?,
    };
    let end = start.checked_add(n).ok_or(CutError::Exhausted)?;
    Ok((InodeRange { start, end }, encode_counter(end)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_each_other() {
        let (a, d) = cut(None, 10, 2).unwrap();
        assert_eq!(a, InodeRange { start: 2, end: 12 });
        let (b, _) = cut(Some(&d), 5, 2).unwrap();
        assert_eq!(b, InodeRange { start: 12, end: 17 });
        assert_eq!(cut(Some(&d), 0, 2), Err(CutError::Empty));
        assert_eq!(cut(Some(&encode_counter(u64::MAX - 1)), 2, 2), Err(CutError::Exhausted));
        assert!(matches!(cut(Some(b"junk"), 1, 2), Err(CutError::Format(_))));
    }
}
