//! Each link's message enum over the payload layouts of [`super::payloads`]: which layout a
//! variant is, and which kinds a link's decoder accepts.

use super::payloads::{get_word, put_word, Payload};
use super::{Codec, EncodeError, Reader};
use crate::error::DecodeError;
use crate::kind::{Kind, Link};
use crate::messages::*;

/// A kind of another link reached a link's decoder (the caller checks links first, so
/// this is a second line of defence, not a path taken).
fn not_on(kind: Kind, link: Link) -> DecodeError {
    DecodeError::WrongLink { kind, link }
}

impl Codec for Control {
    fn encode_payload(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match self {
            Control::Hello(m) => m.put(out),
            Control::Attached(m) => m.put(out),
            Control::LeaseRequest(m) => m.put(out),
            Control::LeaseGranted(m) => m.put(out),
            Control::LeaseRelease(m) | Control::RevokeDone(m) => m.put(out),
            Control::Revoke(m) => m.put(out),
            Control::Fsync(m) => put_word(out, m.lsn),
            Control::FsyncDone(m) => put_word(out, m.durable_lsn),
            Control::AllocInodes(m) => m.put(out),
            Control::InodeRange(m) => m.put(out),
            Control::ReserveBlocks(m) | Control::ReleaseBlocks(m) => put_word(out, m.count),
            Control::Rejected(m) => m.put(out),
            Control::Space(m) => m.put(out),
            Control::Opened(m) | Control::Closed(m) => put_word(out, m.inode),
            Control::Detach | Control::Ping | Control::Pong | Control::StatFs | Control::Ok => Ok(()),
            Control::Error(m) => m.put(out),
        }
    }

    fn decode_payload(kind: Kind, payload: &[u8]) -> Result<Self, DecodeError> {
        let r = &mut Reader::new(kind, payload);
        let m = match kind {
            Kind::Hello => Control::Hello(Hello::get(r)?),
            Kind::Attached => Control::Attached(Attached::get(r)?),
            Kind::LeaseRequest => Control::LeaseRequest(LeaseRequest::get(r)?),
            Kind::LeaseGranted => Control::LeaseGranted(LeaseGranted::get(r)?),
            Kind::LeaseRelease => Control::LeaseRelease(LeaseHandback::get(r)?),
            Kind::Revoke => Control::Revoke(Revoke::get(r)?),
            Kind::RevokeDone => Control::RevokeDone(LeaseHandback::get(r)?),
            Kind::Fsync => Control::Fsync(Fsync { lsn: get_word(r, "Fsync")? }),
            Kind::FsyncDone => Control::FsyncDone(FsyncDone { durable_lsn: get_word(r, "FsyncDone")? }),
            Kind::AllocInodes => Control::AllocInodes(AllocInodes::get(r)?),
            Kind::InodeRange => Control::InodeRange(InodeRange::get(r)?),
            Kind::ReserveBlocks => Control::ReserveBlocks(Blocks { count: get_word(r, "ReserveBlocks")? }),
            Kind::ReleaseBlocks => Control::ReleaseBlocks(Blocks { count: get_word(r, "ReleaseBlocks")? }),
            Kind::Rejected => Control::Rejected(Rejected::get(r)?),
            Kind::Detach => Control::Detach,
            Kind::Ping => Control::Ping,
            Kind::Pong => Control::Pong,
            Kind::StatFs => Control::StatFs,
            Kind::Space => Control::Space(Space::get(r)?),
            Kind::Opened => Control::Opened(InodeRef { inode: get_word(r, "Opened")? }),
            Kind::Closed => Control::Closed(InodeRef { inode: get_word(r, "Closed")? }),
            Kind::Ok => Control::Ok,
            Kind::Error => Control::Error(ErrorReply::get(r)?),
            Kind::ChunkReady
            | Kind::Published
            | Kind::Heartbeat
            | Kind::CopyList
            | Kind::CopyDone
            | Kind::CopyFailed => return Err(not_on(kind, Link::Control)),
        };
        finish(r, m)
    }
}

impl Codec for Bulk {
    fn encode_payload(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match self {
            Bulk::Hello(m) => m.put(out),
            Bulk::ChunkReady(m) => put_word(out, m.committed_lsn),
            Bulk::Published(m) => m.put(out),
            Bulk::Ok => Ok(()),
            Bulk::Error(m) => m.put(out),
        }
    }

    fn decode_payload(kind: Kind, payload: &[u8]) -> Result<Self, DecodeError> {
        let r = &mut Reader::new(kind, payload);
        let m = match kind {
            Kind::Hello => Bulk::Hello(Hello::get(r)?),
            Kind::ChunkReady => Bulk::ChunkReady(ChunkReady { committed_lsn: get_word(r, "ChunkReady")? }),
            Kind::Published => Bulk::Published(Published::get(r)?),
            Kind::Ok => Bulk::Ok,
            Kind::Error => Bulk::Error(ErrorReply::get(r)?),
            _ => return Err(not_on(kind, Link::Bulk)),
        };
        finish(r, m)
    }
}

impl Codec for Kworker {
    fn encode_payload(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match self {
            Kworker::Hello(m) => m.put(out),
            Kworker::Heartbeat(m) => m.put(out),
            Kworker::CopyList(m) => m.put(out),
            Kworker::CopyDone(m) => put_word(out, m.list_id),
            Kworker::CopyFailed(m) => m.put(out),
            Kworker::Ok => Ok(()),
            Kworker::Error(m) => m.put(out),
        }
    }

    fn decode_payload(kind: Kind, payload: &[u8]) -> Result<Self, DecodeError> {
        let r = &mut Reader::new(kind, payload);
        let m = match kind {
            Kind::Hello => Kworker::Hello(Hello::get(r)?),
            Kind::Heartbeat => Kworker::Heartbeat(Heartbeat::get(r)?),
            Kind::CopyList => Kworker::CopyList(CopyList::get(r)?),
            Kind::CopyDone => Kworker::CopyDone(CopyDone { list_id: get_word(r, "CopyDone")? }),
            Kind::CopyFailed => Kworker::CopyFailed(CopyFailed::get(r)?),
            Kind::Ok => Kworker::Ok,
            Kind::Error => Kworker::Error(ErrorReply::get(r)?),
            _ => return Err(not_on(kind, Link::Kworker)),
        };
        finish(r, m)
    }
}

fn finish<M>(r: &Reader<'_>, m: M) -> Result<M, DecodeError> {
    r.finish()?;
    Ok(m)
}
