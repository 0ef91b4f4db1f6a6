//! A DRAM bitmap allocator over a range of numbers: data blocks of the public area (the
//! publisher's block allocator) and inode numbers (the client's inode allocator) both use
//! it. Nothing here is persisted: callers rebuild a bitmap from persisted state at load.
//!
//! Allocation is next-fit from a roving cursor (or from a caller's goal, to keep a file's
//! blocks together), skipping whole full words.

/// A set of used numbers in `[0, len)`.
#[derive(Debug, Clone)]
pub struct Bitmap {
    words: Vec<u64>,
    len: u64,
    free: u64,
    next: u64,
}

impl Bitmap {
    /// All `len` numbers free.
    pub fn new(len: u64) -> Bitmap {
        Bitmap { words: vec![0; len.div_ceil(64) as usize], len, free: len, next: 0 }
    }

    /// Numbers in the range.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Numbers not in use.
    pub fn free(&self) -> u64 {
        self.free
    }

    /// Whether `i` is in use (false beyond the range).
    pub fn test(&self, i: u64) -> bool {
        i < self.len && self.words[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    /// Mark `i` used; false if it already was or is out of range.
    pub fn set(&mut self, i: u64) -> bool {
        if i >= self.len || self.test(i) {
            return false;
        }
        self.words[(i / 64) as usize] |= 1 << (i % 64);
        self.free -= 1;
        true
    }

    /// Mark `i` free; false if it was not in use.
    pub fn clear(&mut self, i: u64) -> bool {
        if !self.test(i) {
            return false;
        }
        self.words[(i / 64) as usize] &= !(1 << (i % 64));
        self.free += 1;
        true
    }

    /// Take a free number: the first at or after `goal` (if in range), else after the cursor,
    /// wrapping around. None when all are used.
    pub fn alloc(&mut self, goal: Option<u64>) -> Option<u64> {
        if self.free == 0 {
            return None;
        }
        let start = goal.filter(|&g| g < self.len).unwrap_or(if self.next < self.len { self.next } else { 0 });
        let mut i = start;
        loop {
            let w = self.words[(i / 64) as usize];
            if w == u64::MAX {
                i = (i / 64 + 1) * 64;
            } else if w & (1 << (i % 64)) == 0 {
                break;
            } else {
                i += 1;
            }
            if i >= self.len {
                i = 0;
            }
            if i == start {
                return None;
            }
        }
        self.set(i);
        self.next = if i + 1 >= self.len { 0 } else { i + 1 };
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn alloc_wraps_and_respects_goals() {
        let mut b = Bitmap::new(130);
        assert_eq!(b.alloc(None), Some(0));
        assert_eq!(b.alloc(Some(100)), Some(100));
        assert_eq!(b.alloc(None), Some(101));
        assert!(b.set(5));
        assert!(!b.set(5));
        assert!(!b.set(130));
        assert_eq!(b.free(), 126);
        for _ in 0..126 {
            assert!(b.alloc(Some(129)).is_some());
        }
        assert_eq!(b.alloc(None), None);
        assert!(b.clear(64));
        assert!(!b.clear(64));
        assert_eq!(b.alloc(Some(3)), Some(64));
    }

    proptest! {
        /// The bitmap agrees with a set after any sequence of operations.
        #[test]
        fn agrees_with_a_set(len in 1u64..300, ops in prop::collection::vec((0u8..3, 0u64..320), 0..400)) {
            let mut b = Bitmap::new(len);
            let mut used = std::collections::BTreeSet::new();
            for (op, n) in ops {
                match op {
                    0 => prop_assert_eq!(b.set(n), n < len && used.insert(n)),
                    1 => prop_assert_eq!(b.clear(n), used.remove(&n)),
                    _ => match b.alloc(Some(n)) {
                        Some(i) => { prop_assert!(i < len); prop_assert!(used.insert(i)); }
                        None => prop_assert_eq!(used.len() as u64, len),
                    },
                }
                prop_assert_eq!(b.free(), len - used.len() as u64);
            }
        }
    }
}
