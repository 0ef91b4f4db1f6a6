//! A hostile client that speaks nicfs's wire and log formats itself: frames are built and
//! read byte by byte from the tables in proto/src/frame.rs and proto/src/codec/payloads.rs,
//! descriptors received with `recvmsg` (SCM_RIGHTS), log entries framed with their own
//! header and crc32c as pm/src/oplog.rs documents them (the records inside come from pm's
//! record encoder: the attacks here are on nicfs's daemon, not on record decoding). Nothing
//! goes through linefs-proto's transport or libfs. The only thing taken from proto is the
//! protocol version number, so that this client stays in step when it changes.
#![allow(dead_code)] // each test uses part of it

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

pub const HELLO: u16 = 0x0001;
pub const ERROR: u16 = 0x0003;
pub const ATTACHED: u16 = 0x0101;
pub const LEASE_REQUEST: u16 = 0x0102;
pub const LEASE_GRANTED: u16 = 0x0103;
pub const RESERVE_BLOCKS: u16 = 0x010c;
pub const REJECTED: u16 = 0x010e;
pub const STATFS: u16 = 0x0112;
pub const SPACE: u16 = 0x0113;
pub const CHUNK_READY: u16 = 0x0201;
pub const PUBLISHED: u16 = 0x0202;

pub const CONTROL: u8 = 0;
pub const BULK: u8 = 1;
pub const KWORKER: u8 = 2;
pub const ROLE_DIRECT: u8 = 1;
pub const ROLE_KWORKER: u8 = 2;

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// A frame: the 24-byte header (magic, version, kind, payload_len, fd_count, reserved, id),
/// then the payload.
pub fn frame(kind: u16, id: u64, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(24 + payload.len());
    f.extend_from_slice(b"LFSP");
    f.extend_from_slice(&linefs_proto::PROTOCOL_VERSION.to_le_bytes());
    f.extend_from_slice(&kind.to_le_bytes());
    f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(&id.to_le_bytes());
    f.extend_from_slice(payload);
    f
}

/// Hello: channel, role, 6 reserved bytes, session.
pub fn hello(channel: u8, role: u8, session: u64) -> Vec<u8> {
    let mut p = vec![channel, role, 0, 0, 0, 0, 0, 0];
    p.extend_from_slice(&session.to_le_bytes());
    p
}

/// A frame as read: kind, id, payload and the descriptors it carried.
#[derive(Debug)]
pub struct Got {
    pub kind: u16,
    pub id: u64,
    pub payload: Vec<u8>,
    pub fds: Vec<OwnedFd>,
}

impl Got {
    /// An Error's errno and message.
    pub fn error(&self) -> Option<(i32, String)> {
        (self.kind == ERROR).then(|| {
            let n = u16::from_le_bytes([self.payload[4], self.payload[5]]) as usize;
            (le32(&self.payload, 0) as i32, String::from_utf8_lossy(&self.payload[8..8 + n]).into_owned())
        })
    }
}

/// One connection to nicfs.
pub struct Conn {
    pub s: UnixStream,
    next_id: u64,
}

impl Conn {
    pub fn connect(socket: &Path) -> std::io::Result<Conn> {
        Ok(Conn { s: UnixStream::connect(socket)?, next_id: 1 })
    }

    /// A connection over `s` (ids from 1000, apart from the other handle's).
    pub fn from_stream(s: UnixStream) -> Conn {
        Conn { s, next_id: 1000 }
    }

    /// Sends a frame of `kind`; returns its id.
    pub fn send(&mut self, kind: u16, payload: &[u8]) -> std::io::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        self.s.write_all(&frame(kind, id, payload))?;
        Ok(id)
    }

    /// Reads one frame (None at the end of the connection or after `wait`).
    pub fn recv(&self, wait: Duration) -> Option<Got> {
        self.s.set_read_timeout(Some(wait)).unwrap();
        let mut head = [0u8; 24];
        let mut cmsg = [0u64; 16];
        let mut iov = libc::iovec { iov_base: head.as_mut_ptr().cast(), iov_len: head.len() };
        // SAFETY: a zeroed msghdr is valid; it points at live buffers of the sizes given.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cmsg.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cmsg);
        // SAFETY: recvmsg on our socket into the buffers above.
        let n = unsafe { libc::recvmsg(self.s.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n <= 0 {
            return None;
        }
        let mut fds = Vec::new();
        // SAFETY: walking the control messages the kernel wrote into `cmsg`.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c).cast::<i32>();
                    let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / 4;
                    for i in 0..count {
                        fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        let mut s = &self.s;
        if (n as usize) < head.len() {
            s.read_exact(&mut head[n as usize..]).ok()?;
        }
        assert_eq!(&head[0..4], b"LFSP", "a frame from nicfs");
        let len = le32(&head, 8) as usize;
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).ok()?;
        Some(Got { kind: u16::from_le_bytes([head[6], head[7]]), id: le64(&head, 16), payload, fds })
    }

    /// Reads frames until one of `kind` (or an Error) comes; skips notices of other kinds.
    pub fn expect(&self, kind: u16, wait: Duration) -> Option<Got> {
        loop {
            let g = self.recv(wait)?;
            if g.kind == kind || g.kind == ERROR {
                return Some(g);
            }
        }
    }
}

/// What `Attached` said, and the descriptors it carried.
pub struct Session {
    pub control: Conn,
    pub session: u64,
    pub slot: u32,
    pub ring_offset: u64,
    pub ring_bytes: u64,
    pub start_lsn: u64,
    pub ino_first: u64,
    pub ino_count: u64,
    /// The log file (read-write), and whatever else came (the public file, if given).
    pub log: std::fs::File,
    pub others: Vec<OwnedFd>,
    /// The next entry's LSN.
    pub tail: u64,
}

/// Attaches as a direct API client; the Error's errno and message if refused.
pub fn attach(socket: &Path) -> Result<Session, (i32, String)> {
    let c = Conn::connect(socket).map_err(|e| (e.raw_os_error().unwrap_or(0), e.to_string()))?;
    attach_over(c)
}

/// [`attach`] over a connection made already (perhaps by another process).
pub fn attach_over(mut c: Conn) -> Result<Session, (i32, String)> {
    c.send(HELLO, &hello(CONTROL, ROLE_DIRECT, 0)).map_err(|e| (0, e.to_string()))?;
    let Some(mut g) = c.recv(Duration::from_secs(40)) else { return Err((0, "no answer to Hello".into())) };
    if let Some(e) = g.error() {
        return Err(e);
    }
    assert_eq!(g.kind, ATTACHED);
    assert!(!g.fds.is_empty(), "Attached carries the log file");
    let p = &g.payload;
    let log = std::fs::File::from(g.fds.remove(0));
    Ok(Session {
        session: le64(p, 0),
        slot: le32(p, 8),
        ring_offset: le64(p, 16),
        ring_bytes: le64(p, 24),
        start_lsn: le64(p, 32),
        ino_first: le64(p, 48),
        ino_count: le64(p, 56),
        tail: le64(p, 32),
        control: c,
        log,
        others: g.fds,
    })
}

impl Session {
    /// Opens the session's bulk connection.
    pub fn bulk(&self, socket: &Path) -> Conn {
        self.bulk_over(Conn::connect(socket).unwrap())
    }

    /// Makes `b` (a connection made already) the session's bulk connection.
    pub fn bulk_over(&self, mut b: Conn) -> Conn {
        b.send(HELLO, &hello(BULK, ROLE_DIRECT, self.session)).unwrap();
        b
    }

    /// Writes an entry of records `payload` at the tail: header (magic, total_len, lsn,
    /// payload_len, kind 0, reserved, crc32c over bytes 0..28 then the payload), payload,
    /// zero padding to a multiple of 64. Returns where the log ends after it.
    pub fn append(&mut self, payload: &[u8]) -> u64 {
        let total = (32 + payload.len() as u64).div_ceil(64) * 64;
        assert!(self.tail % self.ring_bytes + total <= self.ring_bytes, "no wrap in these tests");
        let mut e = Vec::with_capacity(total as usize);
        e.extend_from_slice(b"LFEN");
        e.extend_from_slice(&(total as u32).to_le_bytes());
        e.extend_from_slice(&self.tail.to_le_bytes());
        e.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        e.extend_from_slice(&[0u8; 8]);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&e[..28]), payload);
        e.extend_from_slice(&crc.to_le_bytes());
        e.extend_from_slice(payload);
        e.resize(total as usize, 0);
        self.log.write_all_at(&e, self.ring_offset + self.tail % self.ring_bytes).unwrap();
        self.log.sync_data().unwrap();
        self.tail += total;
        self.tail
    }

    /// Asks for a lease on `inode` (`write`: a write lease) with the process's own uid and
    /// gid; the answer (LeaseGranted or Error).
    pub fn lease(&mut self, inode: u64, write: bool) -> Option<Got> {
        let mut p = Vec::new();
        p.extend_from_slice(&inode.to_le_bytes());
        p.extend_from_slice(&self.tail.to_le_bytes());
        p.push(u8::from(write));
        p.extend_from_slice(&[0u8; 7]);
        p.extend_from_slice(&rustix::process::getuid().as_raw().to_le_bytes());
        p.extend_from_slice(&rustix::process::getgid().as_raw().to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        self.control.send(LEASE_REQUEST, &p).unwrap();
        self.control.expect(LEASE_GRANTED, Duration::from_secs(10))
    }

    /// StatFs: (free_blocks, free_inodes).
    pub fn statfs(&mut self) -> (u64, u64) {
        self.control.send(STATFS, &[]).unwrap();
        let g = self.control.expect(SPACE, Duration::from_secs(10)).unwrap();
        assert_eq!(g.kind, SPACE, "{:?}", g.error());
        (le64(&g.payload, 0), le64(&g.payload, 8))
    }

    /// ReserveBlocks: None if granted, the Error if refused.
    pub fn reserve(&mut self, count: u64) -> Option<(i32, String)> {
        self.control.send(RESERVE_BLOCKS, &count.to_le_bytes()).unwrap();
        let g = self.control.recv(Duration::from_secs(10)).unwrap();
        g.error()
    }
}
