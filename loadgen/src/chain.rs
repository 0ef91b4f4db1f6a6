//! A bare replication chain over loopback TCP, for the baselines of `linefs bench
//! replication`: hop processes ([`hop`]) that each store every message in a PM file, persist
//! it, forward it to the next hop and acknowledge it upstream once it is durable here and
//! below, and the sending end ([`Link`]).
//!
//! **Hops.** `linefs-loadgen hop --next ADDR` listens on loopback and prints
//! `{"listening": "127.0.0.1:PORT"}`. Every connection it accepts gets a connection of its
//! own to the next hop (if any) and a PM file of its own (`--pm-dir`, a ring of `--pm-size`
//! bytes mapped with pm's `PmRegion`, touched once at set-up). Per message, its reader thread forwards the frame
//! downstream *first* (so the next hop's persist overlaps this one's), then decompresses it
//! if it is lz4, writes the raw bytes at their ring position, persists and fences them. The
//! last hop acknowledges each message as soon as it is durable; a middle hop relays the
//! next hop's acknowledgements upstream once its own copy is durable up to them (a thread of
//! its own). An ack therefore means "durable on every hop below", as a chain's must. The
//! hop exits when its standard input closes.
//!
//! **Sender.** [`Link`] numbers messages from 1, compresses them with lz4 (`lz4_flex`'s
//! block format) when asked and when that makes them smaller, and bounds what is in flight
//! with the chain crate's flow-control [`Watermark`]: past its high watermark a send waits
//! for acks until in flight falls to the low one. A thread reads the cumulative acks.
//!
//! **Wire format** (version 1, little-endian; the bench's own, not linefs's peer protocol).
//! Data frame, a 24-byte header then `wire_len` bytes:
//!
//! ```text
//! off len field
//!   0   4 magic     b"LGCH"
//!   4   1 version   1
//!   5   1 flags     bit 0: the payload is an lz4 block of raw_len bytes; others 0
//!   6   2 reserved  0
//!   8   8 seq       message number, from 1, consecutive
//!  16   4 raw_len   bytes of the message (≤ MAX_MSG)
//!  20   4 wire_len  bytes that follow (≤ MAX_MSG; = raw_len when not compressed)
//! ```
//!
//! Ack, 16 bytes: `b"LGAK"`, version 1, 3 reserved zero bytes, `seq` (u64): every message up
//! to `seq` is durable on this hop and every hop after it. On a new connection a hop first
//! sends an ack of `seq` 0 once it and every hop after it are ready (PM file mapped, next hop
//! connected and ready): [`Link::connect`] waits for it, so that no measured message waits
//! for a hop's setup. A header that breaks any of these
//! rules ends the connection (decoding never panics).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use linefs_chain::compress::{Adaptive, Config as AdaptiveConfig, Sample, Stats as AdaptiveStats};
use linefs_chain::flow::{Limits, Watermark};
use linefs_pm::region::PmRegion;
use serde_json::json;

/// Largest message.
pub const MAX_MSG: usize = 8 << 20;
const DATA_MAGIC: &[u8; 4] = b"LGCH";
const ACK_MAGIC: &[u8; 4] = b"LGAK";
const VERSION: u8 = 1;
const HEADER: usize = 24;
const ACK: usize = 16;
const FLAG_LZ4: u8 = 1;
/// A send waits for acks above this many bytes in flight...
const HIGH_BYTES: u64 = 8 << 20;
/// ...until in flight falls to this.
const LOW_BYTES: u64 = 4 << 20;
/// No ack for this long: the chain is stuck.
const ACK_WAIT: Duration = Duration::from_secs(60);

/// A data frame's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub seq: u64,
    pub lz4: bool,
    pub raw_len: u32,
    pub wire_len: u32,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[0..4].copy_from_slice(DATA_MAGIC);
        h[4] = VERSION;
        h[5] = if self.lz4 { FLAG_LZ4 } else { 0 };
        h[8..16].copy_from_slice(&self.seq.to_le_bytes());
        h[16..20].copy_from_slice(&self.raw_len.to_le_bytes());
        h[20..24].copy_from_slice(&self.wire_len.to_le_bytes());
        h
    }

    /// Total: any 24 bytes give a header or an error.
    pub fn decode(h: &[u8; HEADER]) -> Result<Header, String> {
        if &h[0..4] != DATA_MAGIC || h[4] != VERSION || h[5] & !FLAG_LZ4 != 0 || h[6..8] != [0, 0] {
            return Err(format!("bad data frame header {h:02x?}"));
        }
        let u32_at = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&h[8..16]);
        let hd = Header {
            seq: u64::from_le_bytes(seq),
            lz4: h[5] & FLAG_LZ4 != 0,
            raw_len: u32_at(16),
            wire_len: u32_at(20),
        };
        if hd.raw_len as usize > MAX_MSG || hd.wire_len as usize > MAX_MSG || (!hd.lz4 && hd.raw_len != hd.wire_len) {
            return Err(format!("bad data frame lengths {hd:?}"));
        }
        Ok(hd)
    }
}

fn encode_ack(seq: u64) -> [u8; ACK] {
    let mut a = [0u8; ACK];
    a[0..4].copy_from_slice(ACK_MAGIC);
    a[4] = VERSION;
    a[8..16].copy_from_slice(&seq.to_le_bytes());
    a
}

/// Total.
fn decode_ack(a: &[u8; ACK]) -> Result<u64, String> {
    if &a[0..4] != ACK_MAGIC || a[4] != VERSION || a[5..8] != [0, 0, 0] {
        return Err(format!("bad ack {a:02x?}"));
    }
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&a[8..16]);
    Ok(u64::from_le_bytes(seq))
}

/// Reads exactly `buf`; `Ok(false)` on a clean end of stream before its first byte.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "frame cut short")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// The next data frame (header, payload), None at the end of the stream.
fn read_frame(r: &mut impl Read, payload: &mut Vec<u8>) -> Result<Option<Header>, String> {
    let mut h = [0u8; HEADER];
    if !read_full(r, &mut h).map_err(|e| format!("read: {e}"))? {
        return Ok(None);
    }
    let hd = Header::decode(&h)?;
    payload.resize(hd.wire_len as usize, 0);
    if !read_full(r, payload).map_err(|e| format!("read: {e}"))? && hd.wire_len > 0 {
        return Err("frame cut short".into());
    }
    Ok(Some(hd))
}

fn read_ack(r: &mut impl Read) -> Result<Option<u64>, String> {
    let mut a = [0u8; ACK];
    if !read_full(r, &mut a).map_err(|e| format!("read ack: {e}"))? {
        return Ok(None);
    }
    decode_ack(&a).map(Some)
}

/// A counter threads wait on: the highest sequence number durable (or acknowledged).
#[derive(Default)]
struct Mark {
    v: Mutex<(u64, bool)>,
    cv: Condvar,
}

impl Mark {
    fn set(&self, seq: u64) {
        let mut g = self.v.lock().unwrap_or_else(|p| p.into_inner());
        g.0 = g.0.max(seq);
        self.cv.notify_all();
    }
    fn close(&self) {
        self.v.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.cv.notify_all();
    }
    fn get(&self) -> u64 {
        self.v.lock().unwrap_or_else(|p| p.into_inner()).0
    }
    /// Waits until the mark reaches `seq`; false if it was closed or `wait` passed first.
    fn wait(&self, seq: u64, wait: Duration) -> bool {
        let end = Instant::now() + wait;
        let mut g = self.v.lock().unwrap_or_else(|p| p.into_inner());
        while g.0 < seq {
            let now = Instant::now();
            if g.1 || now >= end {
                return false;
            }
            g = self.cv.wait_timeout(g, end - now).unwrap_or_else(|p| p.into_inner()).0;
        }
        true
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct HopArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// The next hop (none: this is the last).
    #[arg(long, value_name = "ADDR")]
    next: Option<String>,
    /// Where each connection's PM file goes (hop-PID-N.pm, removed when the connection ends).
    #[arg(long, value_name = "DIR")]
    pm_dir: PathBuf,
    /// Size of each PM file (the ring the messages are stored in).
    #[arg(long, default_value = "64M", value_parser = crate::util::parse_size)]
    pm_size: u64,
}

/// The hop verb: see the module note. Returns when standard input closes.
pub fn hop(a: &HopArgs) -> Result<(), String> {
    let listener = TcpListener::bind(&a.listen).map_err(|e| format!("listen on {}: {e}", a.listen))?;
    let addr = listener.local_addr().map_err(|e| format!("local address: {e}"))?;
    crate::util::emit(&json!({ "listening": addr.to_string() }))?;
    let (next, dir, size) = (a.next.clone(), a.pm_dir.clone(), a.pm_size);
    std::thread::spawn(move || {
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(conn) = conn else { continue };
            let (next, path) = (next.clone(), dir.join(format!("hop-{}-{n}.pm", std::process::id())));
            std::thread::spawn(move || {
                if let Err(e) = serve(conn, next.as_deref(), &path, size) {
                    tracing::warn!(error = %e, "hop connection ended");
                }
                let _ = std::fs::remove_file(&path);
            });
        }
    });
    let mut sink = Vec::new();
    let _ = io::stdin().read_to_end(&mut sink);
    Ok(())
}

/// One upstream connection of a hop.
fn serve(up: TcpStream, next: Option<&str>, path: &Path, size: u64) -> Result<(), String> {
    up.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
    let region = PmRegion::create(path, size).map_err(|e| format!("{}: {e}", path.display()))?;
    let ring = region.len();
    // Touched once before the hop says it is ready: a page's first store (tmpfs allocating
    // it) is set-up, not the transport's cost.
    region.zero(0, ring).map_err(|e| format!("{}: {e}", path.display()))?;
    let durable = Arc::new(Mark::default());
    let mut up_w = up.try_clone().map_err(|e| format!("dup: {e}"))?;
    let mut down = match next {
        Some(addr) => {
            let d = TcpStream::connect(addr).map_err(|e| format!("connect to the next hop {addr}: {e}"))?;
            d.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
            let mut acks = d.try_clone().map_err(|e| format!("dup: {e}"))?;
            match read_ack(&mut acks)? {
                Some(0) => {}
                other => return Err(format!("the next hop {addr} is not ready: {other:?}")),
            }
            let mut relay = up.try_clone().map_err(|e| format!("dup: {e}"))?;
            let mine = durable.clone();
            std::thread::spawn(move || {
                // Relays each downstream ack once this hop's own copy is durable up to it.
                while let Ok(Some(seq)) = read_ack(&mut acks) {
                    if !mine.wait(seq, ACK_WAIT) || relay.write_all(&encode_ack(seq)).is_err() {
                        break;
                    }
                }
                let _ = relay.shutdown(std::net::Shutdown::Both);
            });
            Some(d)
        }
        None => None,
    };
    up_w.write_all(&encode_ack(0)).map_err(|e| format!("ready: {e}"))?;
    let mut upr = io::BufReader::with_capacity(1 << 20, up);
    let (mut payload, mut raw) = (Vec::new(), Vec::new());
    let mut pos = 0u64;
    let result = loop {
        let hd = match read_frame(&mut upr, &mut payload) {
            Ok(Some(h)) => h,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        if let Some(d) = down.as_mut() {
            let mut frame = Vec::with_capacity(HEADER + payload.len());
            frame.extend_from_slice(&hd.encode());
            frame.extend_from_slice(&payload);
            if let Err(e) = d.write_all(&frame) {
                break Err(format!("forward: {e}"));
            }
        }
        let bytes: &[u8] = if hd.lz4 {
            raw.resize(hd.raw_len as usize, 0);
            match lz4_flex::block::decompress_into(&payload, &mut raw) {
                Ok(n) if n == raw.len() => &raw,
                Ok(n) => break Err(format!("message {}: lz4 gave {n} bytes, not {}", hd.seq, hd.raw_len)),
                Err(e) => break Err(format!("message {}: lz4: {e}", hd.seq)),
            }
        } else {
            &payload
        };
        if let Err(e) = store(&region, ring, pos, bytes) {
            break Err(e);
        }
        pos += bytes.len() as u64;
        durable.set(hd.seq);
        if down.is_none() && up_w.write_all(&encode_ack(hd.seq)).is_err() {
            break Ok(());
        }
    };
    durable.close();
    if let Some(d) = down {
        let _ = d.shutdown(std::net::Shutdown::Write);
    }
    result
}

/// Writes `bytes` at ring position `pos` (wrapping), persists and fences them.
fn store(region: &PmRegion, ring: u64, pos: u64, bytes: &[u8]) -> Result<(), String> {
    let mut done = 0usize;
    while done < bytes.len() {
        let off = (pos + done as u64) % ring;
        let n = ((ring - off) as usize).min(bytes.len() - done);
        region.write(off, &bytes[done..done + n]).map_err(|e| format!("store: {e}"))?;
        region.persist(off, n as u64).map_err(|e| format!("persist: {e}"))?;
        done += n;
    }
    region.fence();
    Ok(())
}

/// How a [`Link`] compresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Compress {
    Off,
    On,
    /// The chain crate's adaptive controller decides per message.
    Adaptive,
}

/// What one send did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub seq: u64,
    pub wire: u64,
}

/// The sending end of a chain (see the module note).
pub struct Link {
    out: TcpStream,
    seq: u64,
    acked: Arc<Mark>,
    flow: Watermark,
    in_flight: VecDeque<(u64, u64)>,
    mode: Compress,
    adaptive: Adaptive,
    frame: Vec<u8>,
    pub raw_bytes: u64,
    pub wire_bytes: u64,
    pub lz4_messages: u64,
}

impl Link {
    pub fn connect(addr: &str, mode: Compress) -> Result<Link, String> {
        let out = TcpStream::connect(addr).map_err(|e| format!("connect to the chain at {addr}: {e}"))?;
        out.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
        let mut acks = out.try_clone().map_err(|e| format!("dup: {e}"))?;
        match read_ack(&mut acks)? {
            Some(0) => {}
            other => return Err(format!("the chain at {addr} is not ready: {other:?}")),
        }
        let acked = Arc::new(Mark::default());
        let a = acked.clone();
        std::thread::spawn(move || {
            while let Ok(Some(seq)) = read_ack(&mut acks) {
                a.set(seq);
            }
            a.close();
        });
        let flow = Watermark::new(Limits::bytes(LOW_BYTES, HIGH_BYTES)).map_err(|e| e.to_string())?;
        Ok(Link {
            out,
            seq: 0,
            acked,
            flow,
            in_flight: VecDeque::new(),
            mode,
            adaptive: Adaptive::new(AdaptiveConfig::default()),
            frame: Vec::new(),
            raw_bytes: 0,
            wire_bytes: 0,
            lz4_messages: 0,
        })
    }

    /// Releases what the chain has acknowledged from the flow-control count.
    fn settle(&mut self) {
        let acked = self.acked.get();
        while let Some(&(seq, len)) = self.in_flight.front() {
            if seq > acked {
                break;
            }
            self.in_flight.pop_front();
            self.flow.release(len);
        }
    }

    /// Sends one message (≤ [`MAX_MSG`]); waits first while flow control is paused.
    pub fn send(&mut self, data: &[u8]) -> Result<Sent, String> {
        if data.len() > MAX_MSG {
            return Err(format!("message of {} bytes > {MAX_MSG}", data.len()));
        }
        self.settle();
        // The network's time for this message includes waiting for the chain to take it:
        // past the watermark, the acks pace the sender (the socket buffer alone would hide
        // a slow chain).
        let waited = Instant::now();
        while self.flow.paused() {
            let next = self.in_flight.front().map_or(self.seq, |&(s, _)| s);
            if !self.acked.wait(next, ACK_WAIT) {
                return Err("the chain stopped acknowledging".into());
            }
            self.settle();
        }
        let decision = match self.mode {
            Compress::Off => None,
            Compress::On => Some(false),
            Compress::Adaptive => {
                let d = self.adaptive.decide();
                d.compress.then_some(d.probe)
            }
        };
        let wait_ns = waited.elapsed().as_nanos() as u64;
        let t0 = Instant::now();
        let packed = decision.map(|_| lz4_flex::block::compress(data));
        let compress_ns = t0.elapsed().as_nanos() as u64;
        let payload: &[u8] = match &packed {
            Some(p) if p.len() < data.len() => p,
            _ => data,
        };
        let lz4 = payload.len() < data.len();
        self.seq += 1;
        let hd = Header { seq: self.seq, lz4, raw_len: data.len() as u32, wire_len: payload.len() as u32 };
        self.frame.clear();
        self.frame.extend_from_slice(&hd.encode());
        self.frame.extend_from_slice(payload);
        let t1 = Instant::now();
        self.out.write_all(&self.frame).map_err(|e| format!("send: {e}"))?;
        let send_ns = t1.elapsed().as_nanos() as u64 + wait_ns;
        if self.mode == Compress::Adaptive {
            let switched = self.adaptive.observe(&Sample {
                raw: data.len() as u64,
                wire: payload.len() as u64,
                compressed: decision.is_some(),
                compress_ns: if decision.is_some() { compress_ns } else { 0 },
                send_ns,
                compress_threads: 1,
                compress_queue: 0,
                send_queue: 0,
            });
            if let Some(sw) = switched {
                let st = self.adaptive.stats();
                tracing::debug!(
                    seq = self.seq, on = sw.on, reason = ?sw.reason, lz4_ns_per_byte = ?st.lz4_ns_per_byte,
                    ratio = ?st.ratio, net_ns_per_byte = ?st.net_ns_per_byte, "adaptive compression switched"
                );
            }
        }
        let wire = (HEADER + payload.len()) as u64;
        self.flow.admit(wire);
        self.in_flight.push_back((self.seq, wire));
        self.raw_bytes += data.len() as u64;
        self.wire_bytes += wire;
        self.lz4_messages += u64::from(lz4);
        Ok(Sent { seq: self.seq, wire })
    }

    /// Waits until every message sent so far is acknowledged (durable on every hop).
    pub fn wait_all(&mut self) -> Result<(), String> {
        if !self.acked.wait(self.seq, ACK_WAIT) {
            return Err(format!("no ack for message {} (acked {})", self.seq, self.acked.get()));
        }
        self.settle();
        Ok(())
    }

    /// The flow-control pauses so far, and the adaptive controller's counters.
    pub fn stats(&self) -> (u64, AdaptiveStats) {
        (self.flow.stats().pauses, self.adaptive.stats())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_bad_ones_are_refused() {
        let h = Header { seq: 7, lz4: true, raw_len: 16384, wire_len: 900 };
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        let raw = Header { seq: 1, lz4: false, raw_len: 10, wire_len: 10 };
        assert_eq!(Header::decode(&raw.encode()), Ok(raw));
        for (i, v) in [(0usize, b'X'), (4, 2), (5, 2), (6, 1)] {
            let mut b = h.encode();
            b[i] = v;
            assert!(Header::decode(&b).is_err(), "byte {i} = {v}");
        }
        let big = Header { seq: 1, lz4: true, raw_len: MAX_MSG as u32 + 1, wire_len: 1 };
        assert!(Header::decode(&big.encode()).is_err());
        let lying = Header { seq: 1, lz4: false, raw_len: 10, wire_len: 11 };
        assert!(Header::decode(&lying.encode()).is_err());
        assert_eq!(decode_ack(&encode_ack(99)), Ok(99));
        let mut a = encode_ack(1);
        a[7] = 1;
        assert!(decode_ack(&a).is_err());
    }

    #[test]
    fn decoders_are_total() {
        let mut x: u64 = 5;
        for _ in 0..20_000 {
            let mut h = [0u8; HEADER];
            for b in h.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            h[..4].copy_from_slice(DATA_MAGIC);
            let _ = Header::decode(&h);
            let mut a = [0u8; ACK];
            a.copy_from_slice(&h[..ACK]);
            let _ = decode_ack(&a);
        }
    }

    /// Three hops in this process, each serving one connection into DIR/hopK.pm of `ring`
    /// bytes; returns the first hop's address.
    fn chain(dir: &Path, ring: u64) -> String {
        std::fs::create_dir_all(dir).unwrap();
        let mut next: Option<String> = None;
        for k in 0..3 {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap().to_string();
            let (n, p) = (next.clone(), dir.join(format!("hop{k}.pm")));
            std::thread::spawn(move || {
                let (c, _) = l.accept().unwrap();
                serve(c, n.as_deref(), &p, ring).unwrap();
            });
            next = Some(addr);
        }
        next.unwrap()
    }

    /// Every message arrives, stored, at every hop, and the acks come back (lz4 included).
    #[test]
    fn three_hops_store_forward_and_ack() {
        let dir = std::env::temp_dir().join(format!("loadgen-chain-{}", std::process::id()));
        let mut link = Link::connect(&chain(&dir, 1 << 20), Compress::On).unwrap();
        let mut g = crate::gen::Gen::new(3, 80);
        let mut all = Vec::new();
        for _ in 0..40 {
            let mut m = vec![0u8; 16 << 10];
            g.fill(&mut m);
            link.send(&m).unwrap();
            all.extend_from_slice(&m);
        }
        link.wait_all().unwrap();
        assert!(link.wire_bytes < link.raw_bytes / 3, "80% compressible: {} of {}", link.wire_bytes, link.raw_bytes);
        assert_eq!(link.lz4_messages, 40);
        // 640 KiB in a 1 MiB ring: every hop holds all of it at offset 0.
        for k in 0..3 {
            let r = PmRegion::open_read_only(&dir.join(format!("hop{k}.pm"))).unwrap();
            let mut got = vec![0u8; all.len()];
            r.read(0, &mut got).unwrap();
            assert!(got == all, "hop {k} holds other bytes");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Past the high watermark a send waits for acks (a pause) and resumes once they come:
    /// a hop that acknowledges nothing before it holds 32 messages of 256 KiB (with their
    /// headers just past the 8 MiB high watermark) would deadlock a sender that did not
    /// pause, and one that paused earlier.
    #[test]
    fn flow_control_pauses_until_acks_come() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (c, _) = l.accept().unwrap();
            let mut w = c.try_clone().unwrap();
            w.write_all(&encode_ack(0)).unwrap();
            let mut r = io::BufReader::new(c);
            let mut buf = Vec::new();
            while let Ok(Some(h)) = read_frame(&mut r, &mut buf) {
                if h.seq >= 32 && w.write_all(&encode_ack(h.seq)).is_err() {
                    break;
                }
            }
        });
        let mut link = Link::connect(&addr, Compress::Off).unwrap();
        let m = vec![7u8; 256 << 10];
        for _ in 0..64 {
            link.send(&m).unwrap();
        }
        link.wait_all().unwrap();
        let (pauses, _) = link.stats();
        assert!(pauses >= 1, "16 MiB through an 8 MiB watermark never paused");
        assert_eq!((link.raw_bytes, link.lz4_messages), (64 * (256 << 10), 0));
    }
}
