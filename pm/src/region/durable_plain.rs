//! Durable stores where there are no cache-line instructions (not x86_64): a store and a
//! write-back, as the x86_64 `durable` module does for every backend it does not stream to.

use super::{PmError, PmRegion};

impl PmRegion {
    /// Store `data` at `off` and write it back; durable after the next fence.
    pub fn write_persist(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        self.write(off, data)?;
        self.persist(off, data.len() as u64)
    }

    /// Store `len` zero bytes at `off` and write them back; durable after the next fence.
    pub fn zero_persist(&self, off: u64, len: u64) -> Result<(), PmError> {
        self.zero(off, len)?;
        self.persist(off, len)
    }
}
