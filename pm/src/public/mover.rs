//! How file data reaches the public area's data blocks: the [`DataMover`] a publisher hands
//! to [`PublicArea::apply_with`](super::PublicArea::apply_with). Only *file data* goes
//! through it — the bytes of WRITE records, the zero fill of a newly mapped data block, the
//! zeros a truncate or a punch leaves in a partial block. Everything else (inodes, directory
//! slots, block-map pointers, indirect and xattr blocks) is metadata, and the publisher
//! writes it itself.
//!
//! Two ways to move:
//!
//! * **Direct** ([`DirectMover`]): the publisher reads the data out of the writer's log and
//!   stores it into the public area at once, persisted; `flush` is a fence. This is how
//!   libfs's host-only publisher and recovery publish (and what they did before movers
//!   existed: the same stores in the same order).
//! * **Deferred** ([`Collector`]): the moves are only *recorded*, in order, as a list of
//!   [`Move`]s, and executed all at once by `flush` — by nicfs through kworker's copy lists,
//!   or by a test's executor. Since a recorded move has not happened yet, the publisher keeps
//!   every pointer to a data block it allocated for one in DRAM (*pending links*) and
//!   persists those pointers only after `flush` returned, which is what keeps "a block's
//!   contents are durable before a pointer to it is persisted" true (see
//!   [`super::PublicArea::settle`]).
//!
//! A mover's writes are persisted (not necessarily fenced) when a move returns (direct) or
//! when `flush` returns, fenced (deferred); the publisher fences before its checkpoint.

use super::PublishError;
use crate::layout::BLOCK_SIZE;
use crate::region::PmRegion;

type Result<T, E = PublishError> = std::result::Result<T, E>;

/// Moves file data into the public area for a publisher (see the module notes).
pub trait DataMover {
    /// Bytes of the writer's log file: a WRITE record's data must lie within it.
    fn log_len(&self) -> u64;

    /// Whether moves are only recorded, to be executed by [`DataMover::flush`]. The
    /// publisher then defers every pointer to a new data block until after the flush.
    fn deferred(&self) -> bool;

    /// Copy `len` bytes at offset `src` of the writer's log file to byte `dst` of the
    /// public file.
    fn copy(&mut self, public: &PmRegion, dst: u64, src: u64, len: u64) -> Result<()>;

    /// Zero `len` bytes at byte `dst` of the public file.
    fn zero(&mut self, public: &PmRegion, dst: u64, len: u64) -> Result<()>;

    /// Fill the newly allocated block at byte `dst` (a whole block): zeros, except `len`
    /// bytes of log data from `src` placed at `within`.
    fn fill_block(&mut self, public: &PmRegion, dst: u64, within: u64, src: u64, len: u64) -> Result<()> {
        if within > 0 {
            self.zero(public, dst, within)?;
        }
        self.copy(public, dst + within, src, len)?;
        let rest = BLOCK_SIZE - within - len;
        if rest > 0 {
            self.zero(public, dst + within + len, rest)?;
        }
        Ok(())
    }

    /// Make every move so far durable: executed, persisted and fenced.
    fn flush(&mut self, public: &PmRegion) -> Result<()>;
}

/// Moves data at once, reading it from the writer's log region (host-only publication and
/// recovery, where the log is trusted).
pub struct DirectMover<'a> {
    log: &'a PmRegion,
    buf: Vec<u8>,
}

impl<'a> DirectMover<'a> {
    pub fn new(log: &'a PmRegion) -> DirectMover<'a> {
        DirectMover { log, buf: Vec::new() }
    }

    fn buf(&mut self) -> &mut Vec<u8> {
        if self.buf.is_empty() {
            self.buf = vec![0u8; BLOCK_SIZE as usize];
        }
        &mut self.buf
    }
}

impl DataMover for DirectMover<'_> {
    fn log_len(&self) -> u64 {
        self.log.len()
    }

    fn deferred(&self) -> bool {
        false
    }

    fn copy(&mut self, public: &PmRegion, dst: u64, src: u64, len: u64) -> Result<()> {
        let log = self.log;
        let buf = self.buf();
        let mut done = 0;
        while done < len {
            let n = (len - done).min(BLOCK_SIZE);
            log.read(src + done, &mut buf[..n as usize])?;
            public.write_persist(dst + done, &buf[..n as usize])?;
            done += n;
        }
        Ok(())
    }

    fn zero(&mut self, public: &PmRegion, dst: u64, len: u64) -> Result<()> {
        public.zero_persist(dst, len)?;
        Ok(())
    }

    /// One store and one persist of the whole block, data and zeros together.
    fn fill_block(&mut self, public: &PmRegion, dst: u64, within: u64, src: u64, len: u64) -> Result<()> {
        let log = self.log;
        let buf = self.buf();
        buf.fill(0);
        log.read(src, &mut buf[within as usize..(within + len) as usize])?;
        public.write_persist(dst, buf)?;
        Ok(())
    }

    fn flush(&mut self, public: &PmRegion) -> Result<()> {
        public.fence();
        Ok(())
    }
}

/// One recorded move of a [`Collector`]: byte offsets in the writer's log file (`src`) and
/// in the public file (`dst`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    Copy { src: u64, dst: u64, len: u64 },
    Zero { dst: u64, len: u64 },
}

impl Move {
    pub fn len(&self) -> u64 {
        match *self {
            Move::Copy { len, .. } | Move::Zero { len, .. } => len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn dst(&self) -> u64 {
        match *self {
            Move::Copy { dst, .. } | Move::Zero { dst, .. } => dst,
        }
    }

    /// `self` followed by `next` as one move, when they are contiguous.
    fn merge(&self, next: &Move) -> Option<Move> {
        match (*self, *next) {
            (Move::Copy { src, dst, len }, Move::Copy { src: s2, dst: d2, len: l2 })
                if src + len == s2 && dst + len == d2 =>
            {
                Some(Move::Copy { src, dst, len: len + l2 })
            }
            (Move::Zero { dst, len }, Move::Zero { dst: d2, len: l2 }) if dst + len == d2 => {
                Some(Move::Zero { dst, len: len + l2 })
            }
            _ => None,
        }
    }
}

/// What a [`Collector`] moved so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MoveStats {
    /// Flushes that had moves to execute (each one ordered list).
    pub lists: u64,
    /// Moves executed, after contiguous ones were merged.
    pub moves: u64,
    pub copy_bytes: u64,
    pub zero_bytes: u64,
}

/// A deferred mover: records moves in order (merging contiguous ones) and has `exec`
/// execute them at [`DataMover::flush`]. `exec` must return only once every move of the
/// list is executed, persisted and fenced, in list order (a later move to the same bytes
/// wins); an `Err` is the reason it could not.
pub struct Collector<F> {
    log_len: u64,
    moves: Vec<Move>,
    exec: F,
    stats: MoveStats,
}

impl<F: FnMut(&[Move]) -> Result<(), String>> Collector<F> {
    /// A collector for a writer whose log file has `log_len` bytes.
    pub fn new(log_len: u64, exec: F) -> Collector<F> {
        Collector { log_len, moves: Vec::new(), exec, stats: MoveStats::default() }
    }

    pub fn stats(&self) -> MoveStats {
        self.stats
    }

    /// Moves recorded and not yet flushed.
    pub fn pending(&self) -> &[Move] {
        &self.moves
    }

    fn push(&mut self, m: Move) {
        if m.is_empty() {
            return;
        }
        if let Some(merged) = self.moves.last().and_then(|last| last.merge(&m)) {
            *self.moves.last_mut().expect("there is a last move") = merged;
        } else {
            self.moves.push(m);
        }
    }
}

impl<F: FnMut(&[Move]) -> Result<(), String>> DataMover for Collector<F> {
    fn log_len(&self) -> u64 {
        self.log_len
    }

    fn deferred(&self) -> bool {
        true
    }

    fn copy(&mut self, _: &PmRegion, dst: u64, src: u64, len: u64) -> Result<()> {
        self.push(Move::Copy { src, dst, len });
        Ok(())
    }

    fn zero(&mut self, _: &PmRegion, dst: u64, len: u64) -> Result<()> {
        self.push(Move::Zero { dst, len });
        Ok(())
    }

    fn flush(&mut self, _: &PmRegion) -> Result<()> {
        if self.moves.is_empty() {
            return Ok(());
        }
        (self.exec)(&self.moves).map_err(PublishError::Mover)?;
        self.stats.lists += 1;
        self.stats.moves += self.moves.len() as u64;
        for m in self.moves.drain(..) {
            match m {
                Move::Copy { len, .. } => self.stats.copy_bytes += len,
                Move::Zero { len, .. } => self.stats.zero_bytes += len,
            }
        }
        Ok(())
    }
}

/// Executes `moves` directly from `log` into `public`, persisted and fenced: the executor a
/// test (or any in-process publisher) gives a [`Collector`].
pub fn execute_moves(moves: &[Move], log: &PmRegion, public: &PmRegion) -> Result<(), String> {
    let mut direct = DirectMover::new(log);
    for m in moves {
        let r = match *m {
            Move::Copy { src, dst, len } => direct.copy(public, dst, src, len),
            Move::Zero { dst, len } => direct.zero(public, dst, len),
        };
        r.map_err(|e| e.to_string())?;
    }
    public.fence();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collector_merges_contiguous_moves_in_order_and_executes_at_flush() {
        let public = PmRegion::traced(1 << 16);
        let log = PmRegion::traced(1 << 16);
        log.write(100, b"abcdefgh").unwrap();
        let mut seen = Vec::new();
        let mut c = Collector::new(log.len(), |m: &[Move]| {
            seen.push(m.to_vec());
            execute_moves(m, &log, &public)
        });
        c.copy(&public, 8192, 100, 4).unwrap();
        c.copy(&public, 8196, 104, 4).unwrap();
        c.zero(&public, 8200, 8).unwrap();
        c.zero(&public, 8208, 8).unwrap();
        c.zero(&public, 0, 0).unwrap();
        c.copy(&public, 8194, 100, 2).unwrap();
        assert_eq!(
            c.pending(),
            [
                Move::Copy { src: 100, dst: 8192, len: 8 },
                Move::Zero { dst: 8200, len: 16 },
                Move::Copy { src: 100, dst: 8194, len: 2 }
            ]
        );
        let mut got = [0u8; 8];
        public.read(8192, &mut got).unwrap();
        assert_eq!(got, [0; 8], "nothing moves before the flush");
        c.flush(&public).unwrap();
        c.flush(&public).unwrap();
        assert_eq!(c.stats(), MoveStats { lists: 1, moves: 3, copy_bytes: 10, zero_bytes: 16 });
        drop(c);
        assert_eq!(seen.len(), 1);
        public.read(8192, &mut got).unwrap();
        assert_eq!(&got, b"ababefgh", "later moves win");
    }

    #[test]
    fn a_failed_execution_is_a_publish_error() {
        let public = PmRegion::traced(1 << 16);
        let mut c = Collector::new(10, |_: &[Move]| Err("kworker says no".to_string()));
        c.zero(&public, 0, 8).unwrap();
        let e = c.flush(&public).unwrap_err();
        assert!(e.to_string().contains("kworker says no"), "{e}");
    }
}
