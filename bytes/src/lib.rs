//! linefs-bytes: the one byte codec of linefs's persisted and wire formats — pm's log
//! records and the public area's attribute stream, proto's frame payloads. Replication
//! carries pm's log bytes inside proto frames, so both are written and read the same way.
//!
//! Every integer is explicitly little-endian, whatever the host. Two tools:
//!
//! * [`Reader`], a cursor over untrusted bytes: every take is bounds-checked and a short
//!   input is a [`Truncated`] error naming what was being read — never a panic, and never
//!   an allocation sized by the input (the caller bounds counts with
//!   [`Reader::check_count`] before it allocates).
//! * [`Fixed`] and [`FixedOut`], the fixed-size part of a layout read or built by offset.
//!   Offsets are const generics checked against the part's size at compile time, so an
//!   offset past the part fails to build instead of panicking at run time; the part itself
//!   is taken whole through [`Reader::fixed`] (or [`Fixed::new`] on an array), so the
//!   reads inside it cannot fail. Reserved bytes are zero in a [`FixedOut`] unless set,
//!   and [`Fixed::is_zero`] checks them on the way in.
//!
//! Appending variable parts (names, data, lists) is `Vec::extend_from_slice` and the
//! `put_*` helpers; a layout's documentation (the byte tables in pm and proto) says where
//! each goes.
//!
//! This crate knows no format: errors are mapped by each user onto its own (pm's
//! `FormatError::Corrupt`, proto's `DecodeError::Truncated`).
#![forbid(unsafe_code)]

/// A read past the end of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("truncated {what}: {need} bytes needed, {have} present")]
pub struct Truncated {
    /// What was being read.
    pub what: &'static str,
    pub need: usize,
    pub have: usize,
}

/// Why [`Reader::check_count`] refused a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountError {
    /// Over the caller's maximum (or its byte size overflows).
    TooMany,
    /// Fewer bytes left than the elements need.
    Short(Truncated),
}

/// A cursor over bytes that checks every take.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Bytes taken so far (the offset of the next take).
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Takes `n` bytes.
    pub fn bytes(&mut self, what: &'static str, n: usize) -> Result<&'a [u8], Truncated> {
        let have = self.remaining();
        if n > have {
            return Err(Truncated { what, need: n, have });
        }
        let b = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    /// Takes `N` bytes as an array.
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<&'a [u8; N], Truncated> {
        let have = self.remaining();
        let b = self.buf[self.pos..].first_chunk::<N>().ok_or(Truncated { what, need: N, have })?;
        self.pos += N;
        Ok(b)
    }

    /// Takes a fixed part of `N` bytes, to be read by offset.
    pub fn fixed<const N: usize>(&mut self, what: &'static str) -> Result<Fixed<'a, N>, Truncated> {
        self.array(what).map(Fixed)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, Truncated> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, Truncated> {
        self.array(what).map(|b| u16::from_le_bytes(*b))
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, Truncated> {
        self.array(what).map(|b| u32::from_le_bytes(*b))
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, Truncated> {
        self.array(what).map(|b| u64::from_le_bytes(*b))
    }

    /// Takes everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let b = &self.buf[self.pos..];
        self.pos = self.buf.len();
        b
    }

    /// Skips up to `n` bytes (padding that the end of the input may cut short); returns how
    /// many were skipped.
    pub fn skip_at_most(&mut self, n: usize) -> usize {
        let n = n.min(self.remaining());
        self.pos += n;
        n
    }

    /// Checks that `count` elements of `size` bytes each may be taken: `count` at most
    /// `max`, and that many bytes left. Call it before allocating anything sized by `count`.
    pub fn check_count(&self, what: &'static str, count: u64, size: usize, max: usize) -> Result<usize, CountError> {
        if count > max as u64 {
            return Err(CountError::TooMany);
        }
        // count <= max, a usize.
        let n = count as usize;
        let need = n.checked_mul(size).ok_or(CountError::TooMany)?;
        let have = self.remaining();
        if need > have {
            return Err(CountError::Short(Truncated { what, need, have }));
        }
        Ok(n)
    }
}

/// A fixed part of `N` bytes, read by offset. Offsets are const generics, so an offset past
/// the part fails to compile instead of panicking at run time.
#[derive(Debug, Clone, Copy)]
pub struct Fixed<'a, const N: usize>(&'a [u8; N]);

impl<'a, const N: usize> Fixed<'a, N> {
    pub fn new(b: &'a [u8; N]) -> Self {
        Fixed(b)
    }

    pub fn u8<const O: usize>(&self) -> u8 {
        const { assert!(O < N) };
        self.0[O]
    }

    pub fn u16<const O: usize>(&self) -> u16 {
        u16::from_le_bytes(self.array::<O, 2>())
    }

    pub fn u32<const O: usize>(&self) -> u32 {
        u32::from_le_bytes(self.array::<O, 4>())
    }

    pub fn u64<const O: usize>(&self) -> u64 {
        u64::from_le_bytes(self.array::<O, 8>())
    }

    pub fn i64<const O: usize>(&self) -> i64 {
        i64::from_le_bytes(self.array::<O, 8>())
    }

    /// Bytes `O..O + L`.
    pub fn array<const O: usize, const L: usize>(&self) -> [u8; L] {
        const { assert!(O + L <= N) };
        let mut a = [0u8; L];
        a.copy_from_slice(&self.0[O..O + L]);
        a
    }

    /// Whether bytes `O..E` are all zero (reserved bytes).
    pub fn is_zero<const O: usize, const E: usize>(&self) -> bool {
        const { assert!(O <= E && E <= N) };
        self.0[O..E].iter().all(|&b| b == 0)
    }

    /// The whole part.
    pub fn bytes(&self) -> &'a [u8; N] {
        self.0
    }
}

/// A fixed part being built: zeroed (so reserved bytes are zero), filled by offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedOut<const N: usize>([u8; N]);

impl<const N: usize> Default for FixedOut<N> {
    fn default() -> Self {
        FixedOut([0u8; N])
    }
}

impl<const N: usize> FixedOut<N> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn u8<const O: usize>(&mut self, v: u8) -> &mut Self {
        self.array::<O, 1>([v])
    }

    pub fn u16<const O: usize>(&mut self, v: u16) -> &mut Self {
        self.array::<O, 2>(v.to_le_bytes())
    }

    pub fn u32<const O: usize>(&mut self, v: u32) -> &mut Self {
        self.array::<O, 4>(v.to_le_bytes())
    }

    pub fn u64<const O: usize>(&mut self, v: u64) -> &mut Self {
        self.array::<O, 8>(v.to_le_bytes())
    }

    pub fn i64<const O: usize>(&mut self, v: i64) -> &mut Self {
        self.array::<O, 8>(v.to_le_bytes())
    }

    /// Sets bytes `O..O + L`.
    pub fn array<const O: usize, const L: usize>(&mut self, v: [u8; L]) -> &mut Self {
        const { assert!(O + L <= N) };
        self.0[O..O + L].copy_from_slice(&v);
        self
    }

    /// Appends the part to `out`.
    pub fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0);
    }

    /// The part's bytes.
    pub fn bytes(&self) -> &[u8; N] {
        &self.0
    }
}

/// Appends `v`, little-endian.
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v`, little-endian.
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests;
