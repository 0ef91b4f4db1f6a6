//! The operation-log ring of one client (a log slot).
//!
//! A slot is a log file of its own (see [`crate::node`]): one header block followed by a ring
//! of `ring_bytes`. Positions in the log are
//! *LSNs*: byte offsets in an endless virtual log; an LSN lives at ring offset
//! `lsn % ring_bytes`. Every entry starts on a 64-byte boundary (so two entries never share a
//! cache line), never wraps (a PAD entry fills the end of the ring instead), and records its
//! own LSN, so stale entries from an earlier lap of the ring are recognised as such.
//!
//! Slot header block (little-endian):
//!
//! ```text
//! off len field
//!   0   8 magic          b"LFLOGSLT"
//!   8   4 slot           index of this slot
//!  12   4 reserved       0
//!  16   8 ring_bytes     size of the ring
//!  24  36 reserved       0
//!  60   4 crc32c         over bytes 0..60
//!  64   8 published_lsn  everything before it is published; recovery scans from here
//!  72   8 replicated_lsn everything before it is on every replica of the node's chain
//!                        (version 5; a node without replicas raises it with
//!                        published_lsn)
//! ```
//!
//! Each LSN is one aligned 8-byte store, so both are deliberately outside the checksum.
//! Log space is reclaimed — may be overwritten — only before the smaller of the two
//! ([`LogSlot::reclaim_lsn`]): an entry is dropped once it is both in the public area and
//! on every replica.
//!
//! Entry (little-endian):
//!
//! ```text
//! off len field
//!   0   4 magic          b"LFEN"
//!   4   4 total_len      bytes of the entry incl. header and padding, multiple of 64
//!   8   8 lsn            the entry's own position
//!  16   4 payload_len    bytes of records that follow the header
//!  20   2 kind           0 = records, 1 = pad (payload_len 0)
//!  22   6 reserved       0
//!  28   4 crc32c         over bytes 0..28 (the whole header before it), then the payload
//!  32   … payload (records, see crate::record), zero padding to total_len
//! ```
//!
//! The offsets are the constants of [`slot_off`] and [`entry_off`], used by the encoders and
//! decoders alike; `pm/tests/format_bytes.rs` pins the bytes against these tables. (Before
//! format version 3 the entry checksum sat at 24..28 and left 28..32 unprotected.)
//!
//! Commit point: an entry is committed once all its bytes are persisted and fenced; its
//! checksum makes a torn entry detectable. Appends are sequential and each is fenced before
//! the next starts, so the committed log is exactly the prefix up to the first entry that
//! fails validation — the scan stops there.

use crate::layout::{FormatError, Geometry, BLOCK_SIZE};
use crate::region::PmRegion;
use linefs_bytes::{Fixed, FixedOut};
use std::sync::Arc;

pub const SLOT_MAGIC: &[u8; 8] = b"LFLOGSLT";
pub const ENTRY_MAGIC: &[u8; 4] = b"LFEN";
pub const ENTRY_HEADER: u64 = 32;
pub const ENTRY_ALIGN: u64 = 64;
const KIND_RECORDS: u16 = 0;
const KIND_PAD: u16 = 1;

/// Byte offsets of the slot header's fields (the table in the module doc).
pub mod slot_off {
    pub const MAGIC: usize = 0;
    pub const SLOT: usize = 8;
    pub const RESERVED0: usize = 12;
    pub const RING_BYTES: usize = 16;
    pub const RESERVED1: usize = 24;
    /// crc32c over bytes `0..CRC`.
    pub const CRC: usize = 60;
    pub const PUBLISHED_LSN: usize = 64;
    pub const REPLICATED_LSN: usize = 72;
    /// Bytes of the header that carry fields.
    pub const END: usize = 80;
    const _: () = assert!(
        RING_BYTES + 8 == RESERVED1
            && CRC + 4 == PUBLISHED_LSN
            && PUBLISHED_LSN.is_multiple_of(8)
            && PUBLISHED_LSN + 8 == REPLICATED_LSN
    );
}

/// Byte offsets of an entry header's fields (the table in the module doc).
pub mod entry_off {
    pub const MAGIC: usize = 0;
    pub const TOTAL_LEN: usize = 4;
    pub const LSN: usize = 8;
    pub const PAYLOAD_LEN: usize = 16;
    pub const KIND: usize = 20;
    pub const RESERVED: usize = 22;
    /// crc32c over bytes `0..CRC`, then the payload.
    pub const CRC: usize = 28;
    pub const PAYLOAD: usize = 32;
    const _: () = assert!(CRC + 4 == PAYLOAD && PAYLOAD as u64 == super::ENTRY_HEADER);
}

/// A committed entry found by [`LogSlot::scan`] or written by [`LogSlot::append`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryLoc {
    pub lsn: u64,
    /// LSN just past this entry.
    pub end: u64,
    /// Region offset of the payload.
    pub payload_off: u64,
    pub payload_len: u64,
}

/// Why a scan stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanStop {
    /// The next position holds no entry of this lap (the normal end of the log).
    End,
    /// The next position holds an entry that fails validation: torn or corrupt.
    Invalid(String),
    /// The scan reached a full ring's worth of entries.
    Full,
    /// The scan reached the bound its caller set ([`LogSlot::scan_bounded`]).
    Limit,
}

/// The committed entries from a starting LSN.
#[derive(Debug, Clone)]
pub struct Scan {
    pub entries: Vec<EntryLoc>,
    /// LSN just past the last committed entry (where the next append goes).
    pub end: u64,
    pub stop: ScanStop,
}

/// Not enough free ring space for an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("log full: entry of {need} bytes, {free} bytes free")]
pub struct LogFull {
    pub need: u64,
    pub free: u64,
}

/// One client's log slot in a PM region.
pub struct LogSlot {
    region: Arc<PmRegion>,
    slot: u32,
    hdr_off: u64,
    ring_off: u64,
    ring_bytes: u64,
}

fn align(n: u64) -> u64 {
    n.div_ceil(ENTRY_ALIGN) * ENTRY_ALIGN
}

impl LogSlot {
    /// Slot `slot` of a node with geometry `geo`, in its log file `region` (header block at
    /// offset 0, then the ring).
    pub fn new(region: Arc<PmRegion>, geo: &Geometry, slot: u32) -> LogSlot {
        LogSlot { region, slot, hdr_off: 0, ring_off: BLOCK_SIZE, ring_bytes: (geo.log_blocks - 1) * BLOCK_SIZE }
    }

    /// The log file: entries' payloads (and so WRITE records' data) live at offsets in it.
    pub fn region(&self) -> &Arc<PmRegion> {
        &self.region
    }

    /// Index of this slot.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    pub fn ring_bytes(&self) -> u64 {
        self.ring_bytes
    }

    /// Largest payload of one entry: a quarter of the ring, so that an entry always fits
    /// once everything before it is published.
    pub fn max_payload(&self) -> u64 {
        self.ring_bytes / 4 - ENTRY_HEADER
    }

    /// Write an empty slot: header with published_lsn 0 and a zeroed first ring block.
    pub fn format(&self) -> Result<(), FormatError> {
        self.format_at(0, 0)
    }

    /// Write an empty slot whose log starts at `published` (and is replicated up to
    /// `replicated`): the header, and a zeroed first ring block; persisted, not fenced. The
    /// log is empty only if the ring holds no entry of the lap at `published`: a fresh
    /// file's ring is all zeros ([`crate::slotfile`]).
    pub fn format_at(&self, published: u64, replicated: u64) -> Result<(), FormatError> {
        use slot_off as o;
        let mut h = FixedOut::<128>::new();
        h.array::<{ o::MAGIC }, 8>(*SLOT_MAGIC).u32::<{ o::SLOT }>(self.slot).u64::<{ o::RING_BYTES }>(self.ring_bytes);
        let crc = crc32c::crc32c(&h.bytes()[..o::CRC]);
        h.u32::<{ o::CRC }>(crc).u64::<{ o::PUBLISHED_LSN }>(published).u64::<{ o::REPLICATED_LSN }>(replicated);
        self.region.write(self.hdr_off, h.bytes())?;
        self.region.zero(self.ring_off, BLOCK_SIZE)?;
        self.region.persist(self.hdr_off, 128)?;
        self.region.persist(self.ring_off, BLOCK_SIZE)?;
        Ok(())
    }

    /// Check the header and return the published LSN.
    pub fn published_lsn(&self) -> Result<u64, FormatError> {
        Ok(Fixed::new(&self.header()?).u64::<{ slot_off::PUBLISHED_LSN }>())
    }

    /// Check the header and return the replicated LSN.
    pub fn replicated_lsn(&self) -> Result<u64, FormatError> {
        Ok(Fixed::new(&self.header()?).u64::<{ slot_off::REPLICATED_LSN }>())
    }

    /// Where log space may be reused up to: the smaller of the published and replicated
    /// LSNs.
    pub fn reclaim_lsn(&self) -> Result<u64, FormatError> {
        let h = self.header()?;
        let h = Fixed::new(&h);
        Ok(h.u64::<{ slot_off::PUBLISHED_LSN }>().min(h.u64::<{ slot_off::REPLICATED_LSN }>()))
    }

    /// The header's fields, checked.
    fn header(&self) -> Result<[u8; slot_off::END], FormatError> {
        use slot_off as o;
        let mut h = [0u8; o::END];
        self.region.read(self.hdr_off, &mut h)?;
        let bad = |d: String| FormatError::Corrupt { what: format!("log slot {} header", self.slot), detail: d };
        let f = Fixed::new(&h);
        if f.array::<{ o::MAGIC }, 8>() != *SLOT_MAGIC {
            return Err(bad("bad magic".into()));
        }
        if f.u32::<{ o::CRC }>() != crc32c::crc32c(&h[..o::CRC]) {
            return Err(bad("checksum mismatch".into()));
        }
        if f.u32::<{ o::SLOT }>() != self.slot || f.u64::<{ o::RING_BYTES }>() != self.ring_bytes {
            return Err(bad("does not match the superblock".into()));
        }
        Ok(h)
    }

    /// Durably advance the published LSN (the checkpoint). A node has no replicas yet (the
    /// cluster's chain replication will advance the replicated LSN itself): what is
    /// published counts as replicated, so the replicated LSN is raised with it, and
    /// everything before `lsn` may be overwritten from now on.
    pub fn set_published_lsn(&self, lsn: u64) -> Result<(), FormatError> {
        let at = self.hdr_off + slot_off::PUBLISHED_LSN as u64;
        self.region.write_u64(at, lsn)?;
        let rep = self.hdr_off + slot_off::REPLICATED_LSN as u64;
        if self.region.read_u64(rep)? < lsn {
            self.region.write_u64(rep, lsn)?;
        }
        self.region.persist(at, 16)?;
        self.region.fence();
        Ok(())
    }

    /// Durably set the replicated LSN (replication's own progress).
    pub fn set_replicated_lsn(&self, lsn: u64) -> Result<(), FormatError> {
        let at = self.hdr_off + slot_off::REPLICATED_LSN as u64;
        self.region.write_u64(at, lsn)?;
        self.region.persist(at, 8)?;
        self.region.fence();
        Ok(())
    }

    /// Bytes an entry with `payload_len` bytes of payload occupies (padding of the ring end
    /// not counted).
    pub fn entry_len(payload_len: u64) -> u64 {
        align(ENTRY_HEADER + payload_len)
    }

    /// Append an entry at `tail` and make it durable. `published` is the current published
    /// LSN (space before it is free). Returns the entry's location; the next tail is
    /// `loc.end`.
    pub fn append(&self, tail: u64, published: u64, payload: &[u8]) -> Result<EntryLoc, AppendError> {
        let len = Self::entry_len(payload.len() as u64);
        if payload.len() as u64 > self.max_payload() {
            return Err(AppendError::TooLarge { len: payload.len() as u64, max: self.max_payload() });
        }
        let mut lsn = tail;
        let pos = lsn % self.ring_bytes;
        let room = self.ring_bytes - pos;
        let pad = if len > room { room } else { 0 };
        let used = tail - published;
        if used + pad + len > self.ring_bytes {
            return Err(AppendError::Full(LogFull { need: pad + len, free: self.ring_bytes - used }));
        }
        if pad > 0 {
            let h = header(lsn, pad, KIND_PAD, &[]);
            self.region.write(self.ring_off + pos, &h)?;
            self.region.persist(self.ring_off + pos, ENTRY_HEADER)?;
            lsn += pad;
        }
        let at = self.ring_off + lsn % self.ring_bytes;
        let h = header(lsn, len, KIND_RECORDS, payload);
        self.region.write(at, &h)?;
        self.region.persist(at, ENTRY_HEADER)?;
        self.region.write_persist(at + ENTRY_HEADER, payload)?;
        let tail_pad = len - ENTRY_HEADER - payload.len() as u64;
        if tail_pad > 0 {
            self.region.zero_persist(at + ENTRY_HEADER + payload.len() as u64, tail_pad)?;
        }
        self.region.fence();
        Ok(EntryLoc { lsn, end: lsn + len, payload_off: at + ENTRY_HEADER, payload_len: payload.len() as u64 })
    }

    /// Find the committed entries from `from` (normally the published LSN).
    pub fn scan(&self, from: u64) -> Result<Scan, FormatError> {
        self.scan_bounded(from, u64::MAX, u64::MAX)
    }

    /// [`LogSlot::scan`], stopping with [`ScanStop::Limit`] before an entry that starts at or
    /// after `until` (an LSN the caller knows to be committed, such as a client's tail), or
    /// once the entries found span `max_bytes` (at least one entry is returned).
    pub fn scan_bounded(&self, from: u64, until: u64, max_bytes: u64) -> Result<Scan, FormatError> {
        self.scan_with(from, until, max_bytes, |_, _| {})
    }

    /// [`LogSlot::scan_bounded`], handing each committed entry's payload to `f` as it is
    /// read and checked, so that a publisher decodes what the scan already read instead of
    /// reading it from PM a second time.
    pub fn scan_with(
        &self,
        from: u64,
        until: u64,
        max_bytes: u64,
        f: impl FnMut(&EntryLoc, &[u8]),
    ) -> Result<Scan, FormatError> {
        let source = Ring::Pm { region: &self.region, ring_off: self.ring_off };
        scan_ring(self.ring_off, self.ring_bytes, from, until, max_bytes, source, f)
    }

    /// Copies committed entries out of the log into memory, as a publisher that must not
    /// read the log again (nicfs) does: the whole entries from `from` that start before
    /// `until`, until they span `max_bytes` (at least one entry, however long). A pad at the
    /// end of the ring goes with the entry after it, so that a copy never ends with one (the
    /// next copy starts where publishing this one leaves the checkpoint). Only the entry
    /// headers are looked at, read one by one to find where the copy ends; nothing is
    /// checked — [`LogCopy::scan_with`] does that on the copy. Returns the copy and the
    /// bytes read from the log (the headers looked at, then the copy).
    pub fn fetch(&self, from: u64, until: u64, max_bytes: u64) -> Result<(LogCopy, u64), FormatError> {
        self.fetch_into(from, until, max_bytes, Vec::new())
    }

    /// [`LogSlot::fetch`] into `buf`, a buffer of an earlier copy handed back for reuse: its
    /// allocation is kept and only bytes beyond its old length are zeroed before the copy.
    pub fn fetch_into(
        &self,
        from: u64,
        until: u64,
        max_bytes: u64,
        mut buf: Vec<u8>,
    ) -> Result<(LogCopy, u64), FormatError> {
        let mut lsn = from;
        let mut read = 0;
        let mut after_pad = false;
        let mut entries = 0;
        while lsn < until && lsn - from < self.ring_bytes {
            if !after_pad && entries > 0 && lsn - from >= max_bytes {
                break;
            }
            let pos = lsn % self.ring_bytes;
            let mut h = [0u8; ENTRY_HEADER as usize];
            self.region.read(self.ring_off + pos, &mut h)?;
            read += ENTRY_HEADER;
            let f = Fixed::new(&h);
            let total = f.u32::<{ entry_off::TOTAL_LEN }>() as u64;
            if f.array::<{ entry_off::MAGIC }, 4>() != *ENTRY_MAGIC
                || f.u64::<{ entry_off::LSN }>() != lsn
                || total < ENTRY_ALIGN
                || !total.is_multiple_of(ENTRY_ALIGN)
                || total > self.ring_bytes - pos
                || lsn + total - from > self.ring_bytes
            {
                break;
            }
            after_pad = f.u16::<{ entry_off::KIND }>() == KIND_PAD;
            entries += u64::from(!after_pad);
            lsn += total;
        }
        let len = (lsn - from) as usize;
        if buf.len() < len {
            buf.resize(len, 0);
        }
        buf.truncate(len);
        self.read_lsns(from, &mut buf)?;
        read += lsn - from;
        Ok((LogCopy { slot: self.slot, from, bytes: buf, ring_off: self.ring_off, ring_bytes: self.ring_bytes }, read))
    }

    /// Fills `out` with the log bytes of LSNs `[lsn, lsn + out.len())` (at most a ring).
    fn read_lsns(&self, lsn: u64, out: &mut [u8]) -> Result<(), FormatError> {
        let len = out.len() as u64;
        let pos = lsn % self.ring_bytes;
        let first = len.min(self.ring_bytes - pos);
        self.region.read(self.ring_off + pos, &mut out[..first as usize])?;
        if first < len {
            self.region.read(self.ring_off, &mut out[first as usize..])?;
        }
        Ok(())
    }

    /// Read an entry's payload.
    pub fn read_payload(&self, loc: &EntryLoc) -> Result<Vec<u8>, FormatError> {
        let mut p = vec![0u8; loc.payload_len as usize];
        self.region.read(loc.payload_off, &mut p)?;
        Ok(p)
    }
}

/// Part of a slot's log copied into memory ([`LogSlot::fetch`]): the bytes of LSNs
/// `[from, from + bytes.len())`, whole entries, not yet checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogCopy {
    pub slot: u32,
    pub from: u64,
    pub bytes: Vec<u8>,
    ring_off: u64,
    ring_bytes: u64,
}

impl LogCopy {
    /// The LSN just past the copy.
    pub fn end(&self) -> u64 {
        self.from + self.bytes.len() as u64
    }

    /// Scans the copy as [`LogSlot::scan_with`] scans the log (every check, the same
    /// [`EntryLoc`]s: payload offsets are offsets in the log file), from its start to its
    /// end: an entry that does not lie wholly in the copy ends the scan
    /// ([`ScanStop::Limit`]).
    pub fn scan_with(&self, f: impl FnMut(&EntryLoc, &[u8])) -> Scan {
        let source = Ring::Copy { bytes: &self.bytes, from: self.from, ring_bytes: self.ring_bytes };
        scan_ring(self.ring_off, self.ring_bytes, self.from, self.end(), u64::MAX, source, f)
            .expect("reading a copy cannot fail")
    }
}

/// The bytes a scan reads: a slot's ring in PM, or a copy of part of it in memory, whose
/// payloads the scan checks and hands on where they lie instead of copying them.
enum Ring<'a> {
    Pm { region: &'a PmRegion, ring_off: u64 },
    Copy { bytes: &'a [u8], from: u64, ring_bytes: u64 },
}

impl<'a> Ring<'a> {
    /// The `len` bytes at ring position `pos` (read into `scratch` from PM; in place from a
    /// copy, None past its end).
    fn get<'b>(&'b self, pos: u64, len: usize, scratch: &'b mut Vec<u8>) -> Result<Option<&'b [u8]>, FormatError> {
        match *self {
            Ring::Pm { region, ring_off } => {
                scratch.clear();
                scratch.resize(len, 0);
                region.read(ring_off + pos, scratch)?;
                Ok(Some(&scratch[..]))
            }
            Ring::Copy { bytes, from, ring_bytes } => {
                // Ring position -> LSN: the copy spans at most one ring, starting at `from`.
                let lsn = from + (pos + ring_bytes - from % ring_bytes) % ring_bytes;
                let at = (lsn - from) as usize;
                Ok(bytes.get(at..at + len))
            }
        }
    }
}

/// The scan of a ring whose bytes `source` gives (bytes it does not have end the scan with
/// [`ScanStop::Limit`]); see [`LogSlot::scan_bounded`].
fn scan_ring(
    ring_off: u64,
    ring_bytes: u64,
    from: u64,
    until: u64,
    max_bytes: u64,
    source: Ring,
    mut f: impl FnMut(&EntryLoc, &[u8]),
) -> Result<Scan, FormatError> {
    let mut scratch = Vec::new();
    let mut entries = Vec::new();
    let mut lsn = from;
    let stop = loop {
        if lsn >= until || (lsn - from >= max_bytes && !entries.is_empty()) {
            break ScanStop::Limit;
        }
        if lsn - from >= ring_bytes {
            break ScanStop::Full;
        }
        let pos = lsn % ring_bytes;
        let mut h = [0u8; ENTRY_HEADER as usize];
        match source.get(pos, h.len(), &mut scratch)? {
            Some(b) => h.copy_from_slice(b),
            None => break ScanStop::Limit,
        }
        let fields = Fixed::new(&h);
        if fields.array::<{ entry_off::MAGIC }, 4>() != *ENTRY_MAGIC || fields.u64::<{ entry_off::LSN }>() != lsn {
            break ScanStop::End;
        }
        let total = fields.u32::<{ entry_off::TOTAL_LEN }>() as u64;
        let plen = fields.u32::<{ entry_off::PAYLOAD_LEN }>() as u64;
        let kind = fields.u16::<{ entry_off::KIND }>();
        let room = ring_bytes - pos;
        if total < ENTRY_ALIGN || !total.is_multiple_of(ENTRY_ALIGN) || total > room || ENTRY_HEADER + plen > total {
            break ScanStop::Invalid(format!("entry at lsn {lsn}: bad length {total}/{plen}"));
        }
        if kind == KIND_PAD {
            if plen != 0 || total != room {
                break ScanStop::Invalid(format!("pad at lsn {lsn}: bad length"));
            }
        } else if kind != KIND_RECORDS {
            break ScanStop::Invalid(format!("entry at lsn {lsn}: unknown kind {kind}"));
        }
        let Some(payload) = source.get(pos + ENTRY_HEADER, plen as usize, &mut scratch)? else {
            break ScanStop::Limit;
        };
        if entry_crc(&h, payload) != fields.u32::<{ entry_off::CRC }>() {
            break ScanStop::Invalid(format!("entry at lsn {lsn}: checksum mismatch"));
        }
        if kind == KIND_RECORDS {
            let loc = EntryLoc { lsn, end: lsn + total, payload_off: ring_off + pos + ENTRY_HEADER, payload_len: plen };
            f(&loc, payload);
            entries.push(loc);
        }
        lsn += total;
    };
    Ok(Scan { entries, end: lsn, stop })
}

/// Why an append failed.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error(transparent)]
    Full(LogFull),
    #[error("log entry of {len} bytes exceeds the largest entry ({max} bytes)")]
    TooLarge { len: u64, max: u64 },
    #[error(transparent)]
    Pm(#[from] crate::region::PmError),
}

fn header(lsn: u64, total: u64, kind: u16, payload: &[u8]) -> [u8; ENTRY_HEADER as usize] {
    use entry_off as o;
    let mut h = FixedOut::<{ ENTRY_HEADER as usize }>::new();
    h.array::<{ o::MAGIC }, 4>(*ENTRY_MAGIC)
        .u32::<{ o::TOTAL_LEN }>(total as u32)
        .u64::<{ o::LSN }>(lsn)
        .u32::<{ o::PAYLOAD_LEN }>(payload.len() as u32)
        .u16::<{ o::KIND }>(kind);
    let crc = entry_crc(h.bytes(), payload);
    *h.u32::<{ o::CRC }>(crc).bytes()
}

/// Log bytes `[from, to)` made of entries that hold no record: what a replica's copy
/// receives for a range of its primary's log that was dropped unpublished (a refused
/// suffix, moved past by the checkpoint), so that the copy keeps the primary's LSNs and
/// publishing it changes nothing. `from` and `to` are multiples of [`ENTRY_ALIGN`] (as
/// every entry's LSN is); no entry crosses the end of a ring of `ring_bytes`.
pub fn empty_entries(from: u64, to: u64, ring_bytes: u64) -> Vec<u8> {
    let mut out = vec![0u8; to.saturating_sub(from) as usize];
    let most = u64::from(u32::MAX) / ENTRY_ALIGN * ENTRY_ALIGN;
    let mut lsn = from;
    while lsn < to && ring_bytes > 0 {
        let room = ring_bytes - lsn % ring_bytes;
        let total = (to - lsn).min(room).min(most);
        if total < ENTRY_ALIGN {
            break;
        }
        let at = (lsn - from) as usize;
        out[at..at + ENTRY_HEADER as usize].copy_from_slice(&header(lsn, total, KIND_RECORDS, &[]));
        lsn += total;
    }
    out
}

/// An entry's checksum: crc32c over every header byte before the checksum field, then the
/// payload.
fn entry_crc(h: &[u8; ENTRY_HEADER as usize], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&h[..entry_off::CRC]), payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::FormatParams;

    fn slot() -> LogSlot {
        let params = FormatParams { size: 8 << 20, log_size: 256 << 10, log_slots: 1, inodes: 64 };
        let geo = Geometry::compute(&params).unwrap();
        let region = Arc::new(PmRegion::traced(8 << 20));
        let s = LogSlot::new(region, &geo, 0);
        s.format().unwrap();
        s
    }

    #[test]
    fn empty_entries_scan_as_entries_without_records_up_to_their_end() {
        let s = slot();
        let ring = s.ring_bytes();
        // From 128 before the ring's end to 320 after it: split at the end.
        let (from, to) = (2 * ring - 128, 2 * ring + 320);
        let bytes = empty_entries(from, to, ring);
        let first = (ring - from % ring) as usize;
        s.region().write(BLOCK_SIZE + from % ring, &bytes[..first]).unwrap();
        s.region().write(BLOCK_SIZE, &bytes[first..]).unwrap();
        let mut payloads = Vec::new();
        let scan = s.scan_with(from, u64::MAX, u64::MAX, |loc, p| payloads.push((loc.lsn, p.len()))).unwrap();
        assert_eq!(scan.end, to, "{:?}", scan.stop);
        assert_eq!(payloads, vec![(from, 0), (2 * ring, 0)]);
        assert!(crate::record::decode_records(&[], 0).unwrap().is_empty());
    }

    #[test]
    fn append_then_scan_wraps_the_ring() {
        let s = slot();
        let mut tail = 0;
        let mut published = 0;
        let mut all = Vec::new();
        for i in 0..200u32 {
            let payload = vec![i as u8; 100 + (i as usize * 37) % 3000];
            let loc = match s.append(tail, published, &payload) {
                Ok(l) => l,
                Err(AppendError::Full(_)) => {
                    published = tail;
                    s.set_published_lsn(published).unwrap();
                    s.append(tail, published, &payload).unwrap()
                }
                Err(e) => panic!("{e}"),
            };
            tail = loc.end;
            all.push((loc, payload));
        }
        let scan = s.scan(s.published_lsn().unwrap()).unwrap();
        assert_eq!(scan.stop, ScanStop::End);
        assert_eq!(scan.end, tail);
        let expect: Vec<_> = all.iter().filter(|(l, _)| l.lsn >= published).collect();
        assert_eq!(scan.entries.len(), expect.len());
        for (got, (loc, payload)) in scan.entries.iter().zip(expect) {
            assert_eq!(got, loc);
            assert_eq!(&s.read_payload(got).unwrap(), payload);
        }
    }

    #[test]
    fn scan_stops_at_torn_entry() {
        let s = slot();
        let a = s.append(0, 0, b"first entry").unwrap();
        let b = s.append(a.end, 0, b"second entry").unwrap();
        s.region.write(b.payload_off + 2, b"X").unwrap();
        let scan = s.scan(0).unwrap();
        assert_eq!(scan.entries, vec![a]);
        assert!(matches!(scan.stop, ScanStop::Invalid(_)));
        assert_eq!(scan.end, a.end);
    }

    #[test]
    fn too_large_and_full_are_errors() {
        let s = slot();
        let big = vec![0u8; s.max_payload() as usize + 1];
        assert!(matches!(s.append(0, 0, &big), Err(AppendError::TooLarge { .. })));
        let chunk = vec![1u8; s.max_payload() as usize];
        let mut tail = 0;
        let mut full = false;
        for _ in 0..8 {
            match s.append(tail, 0, &chunk) {
                Ok(l) => tail = l.end,
                Err(AppendError::Full(_)) => {
                    full = true;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(full);
        assert_eq!(s.scan(0).unwrap().end, tail);
    }

    /// Appends entries of the given payload sizes; returns them with their payloads.
    fn fill(s: &LogSlot, tail: &mut u64, published: u64, sizes: &[usize]) -> Vec<(EntryLoc, Vec<u8>)> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let payload: Vec<u8> = (0..n).map(|k| (k * 7 + i) as u8).collect();
                let loc = s.append(*tail, published, &payload).unwrap();
                *tail = loc.end;
                (loc, payload)
            })
            .collect()
    }

    fn scanned(copy: &LogCopy) -> (Vec<(EntryLoc, Vec<u8>)>, Scan) {
        let mut got = Vec::new();
        let scan = copy.scan_with(|l, p| got.push((*l, p.to_vec())));
        (got, scan)
    }

    #[test]
    fn a_fetched_copy_holds_whole_entries_and_scans_like_the_log() {
        let s = slot();
        let mut tail = 0;
        let all = fill(&s, &mut tail, 0, &[100, 5000, 300, 20_000, 64]);
        let headers = |n: u64| n * ENTRY_HEADER;
        // Everything: the copy ends where the log does, and scans to the same entries (the
        // headers were read once more, to find the end, and the one after the last).
        let (copy, read) = s.fetch(0, tail, u64::MAX).unwrap();
        assert_eq!((copy.from, copy.end(), read), (0, tail, tail + headers(5)));
        let (got, scan) = scanned(&copy);
        assert_eq!(got, all);
        assert_eq!((scan.end, scan.stop), (tail, ScanStop::Limit));
        // A budget ending inside an entry: the copy takes that entry whole and stops.
        let (copy, read) = s.fetch(0, tail, all[1].0.end + 10).unwrap();
        assert_eq!((copy.end(), read), (all[2].0.end, all[2].0.end + headers(3)));
        assert_eq!(scanned(&copy).0, all[..3].to_vec());
        // A first entry longer than the budget is fetched whole.
        let (copy, read) = s.fetch(all[3].0.lsn, tail, 1000).unwrap();
        assert_eq!((copy.from, copy.end()), (all[3].0.lsn, all[3].0.end));
        assert_eq!(read, all[3].0.end - all[3].0.lsn + headers(1));
        assert_eq!(scanned(&copy).0, vec![all[3].clone()]);
        // Only entries that start before `until`; nothing for an empty range.
        let (copy, _) = s.fetch(0, all[2].0.lsn, u64::MAX).unwrap();
        assert_eq!(scanned(&copy).0, all[..2].to_vec());
        assert!(s.fetch(tail, tail, u64::MAX).unwrap().0.bytes.is_empty());
    }

    #[test]
    fn a_fetch_across_the_end_of_the_ring_and_a_tampered_copy() {
        let s = slot();
        let mut tail = 0;
        // Fill most of the ring, publish it, then wrap (a pad fills the end of the ring).
        fill(&s, &mut tail, 0, &[60_000, 60_000, 60_000]);
        let published = tail;
        s.set_published_lsn(published).unwrap();
        let all = fill(&s, &mut tail, published, &[30_000, 30_000, 30_000]);
        assert!(all[2].0.lsn % s.ring_bytes() < all[0].0.lsn % s.ring_bytes(), "the log wrapped");
        let (copy, _) = s.fetch(published, tail, u64::MAX).unwrap();
        assert_eq!(copy.end(), tail);
        let (got, scan) = scanned(&copy);
        assert_eq!(got, all);
        assert_eq!(scan.end, tail);
        // A budget reached just after the pad at the end of the ring takes the entry after
        // the pad too (a copy never ends with a pad); reached before the pad, it stops there.
        let pad = all[2].0.lsn - (all[2].0.lsn % s.ring_bytes());
        assert!(all[1].0.end < pad && pad == all[2].0.lsn, "entry 2 follows a pad");
        let one = all[1].0.end - all[1].0.lsn;
        let (cut, _) = s.fetch(all[1].0.lsn, tail, one + 1).unwrap();
        assert_eq!(cut.end(), all[2].0.end);
        assert_eq!(scanned(&cut).0, all[1..].to_vec());
        let (cut, _) = s.fetch(all[1].0.lsn, tail, one).unwrap();
        assert_eq!(cut.end(), all[1].0.end);
        // A byte changed in the copy: its scan stops at that entry (the log is not read).
        let mut bad = copy.clone();
        let at = (all[1].0.lsn - published) as usize + 100;
        bad.bytes[at] ^= 1;
        let (got, scan) = scanned(&bad);
        assert_eq!(got, all[..1].to_vec());
        assert!(matches!(scan.stop, ScanStop::Invalid(_)));
    }
}
