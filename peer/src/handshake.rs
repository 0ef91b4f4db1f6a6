//! The handshake: before the first frame, each side of a new peer connection proves it holds
//! the cluster key, and both derive the session's two frame keys. A pure state machine
//! (bytes in, bytes and a verdict out): [`crate::tcp`] does the I/O, and a tokio link
//! could drive the same machine.
//!
//! # Exchange
//!
//! ```text
//! initiator (dials)                          acceptor (listens)
//!   Hello     {class, node_i, nonce_i}   -->
//!                                        <--  Challenge {class, node_a, nonce_a, mac_a}
//!   Proof     {mac_i}                    -->
//!                                        <--  Verdict   {status}
//! ```
//!
//! Both nonces are 32 bytes from the operating system's random source, fresh for every
//! connection. The transcript `T` is everything the two sides agreed on:
//!
//! ```text
//! T = version (u16) | class (u8) | node_i (u32) | node_a (u32) | nonce_i (32) | nonce_a (32)
//! mac_a = HMAC-SHA256(K, "linefs-peer acceptor proof\0" | T)
//! mac_i = HMAC-SHA256(K, "linefs-peer initiator proof\0" | T)
//! prk   = HMAC-SHA256(K, "linefs-peer session\0" | T)
//! key_i2a = HMAC-SHA256(prk, "initiator to acceptor\0" | 0x01)   (frames the initiator sends)
//! key_a2i = HMAC-SHA256(prk, "acceptor to initiator\0" | 0x01)   (frames the acceptor sends)
//! ```
//!
//! (`K` the cluster key, integers little-endian, `|` concatenation; the session keys are
//! HKDF-SHA256's extract-then-expand written out with HMAC.) The initiator checks `mac_a`
//! before it sends anything that depends on the key, the acceptor checks `mac_i` before it
//! takes any frame; both compare in constant time. Different labels for the two proofs
//! keep one side's proof from being reflected back as the other's.
//!
//! What that buys: a side without `K` cannot make either proof (HMAC is a PRF), and learns
//! nothing of `K` from the proofs it sees. A recorded handshake replayed to an acceptor
//! fails: the acceptor's fresh `nonce_a` is in the `mac_i` it expects, so an old `mac_i`
//! does not match (and the acceptor refuses outright a Hello whose `nonce_i` it has
//! seen recently, [`ReplayGuard`]). An old Challenge replayed to an initiator fails the
//! same way on `nonce_i`. A proof made for another class, version, node pair or nonce pair
//! does not match either, since all of them are in `T`. Frames of one session do not verify
//! under another's keys.
//!
//! # Bytes
//!
//! Every message starts with the same 8 bytes; its type fixes its length, so a reader
//! knows how much to read from the first 8 and never allocates by a peer's word.
//!
//! ```text
//! off len field         (all messages)
//!   0   4 magic         b"LFPH" (linefs peer handshake)
//!   4   2 version       the sender's protocol version (linefs_proto::PROTOCOL_VERSION, 7)
//!   6   1 type          1 Hello, 2 Challenge, 3 Proof, 4 Verdict
//!   7   1 class         1 low-latency, 2 bulk (the class of the connection; Verdict: 0)
//!
//! Hello (48 bytes)                      Challenge (80 bytes)
//!   8   4 node_i                          8   4 node_a
//!  12   4 reserved, 0                    12   4 reserved, 0
//!  16  32 nonce_i                        16  32 nonce_a
//!                                        48  32 mac_a
//! Proof (40 bytes)                      Verdict (16 bytes)
//!   8  32 mac_i                           8   1 status: 0 accepted, 1 bad proof,
//!                                                       2 version refused, 3 refused
//!                                         9   7 reserved, 0
//! ```
//!
//! Frozen across versions: the 8-byte prefix and the Verdict, so that a side of any
//! version can read "refused: I speak version N" (the Verdict's `version` field says it).
//! A Verdict is not authenticated: a network attacker can forge a refusal (it can cut the
//! connection anyway), never an acceptance that matters — the frames after it are MACed
//! with keys it does not have.

use crate::key::ClusterKey;
use crate::mac::{hmac, verify, MAC_LEN};
use linefs_bytes::{Fixed, FixedOut};
use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

/// `b"LFPH"`: the first bytes of every handshake message.
pub const MAGIC: [u8; 4] = *b"LFPH";
/// The version the handshake speaks: the protocol's.
pub const VERSION: u16 = linefs_proto::PROTOCOL_VERSION;
/// Bytes of a nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes every message starts with.
pub const PREFIX_LEN: usize = 8;
pub const HELLO_LEN: usize = 48;
pub const CHALLENGE_LEN: usize = 80;
pub const PROOF_LEN: usize = 40;
pub const VERDICT_LEN: usize = 16;
/// The longest message (what a reader's buffer holds).
pub const MAX_MESSAGE: usize = CHALLENGE_LEN;

const LABEL_ACCEPTOR: &[u8] = b"linefs-peer acceptor proof\0";
const LABEL_INITIATOR: &[u8] = b"linefs-peer initiator proof\0";
const LABEL_SESSION: &[u8] = b"linefs-peer session\0";
const LABEL_I2A: &[u8] = b"initiator to acceptor\0";
const LABEL_A2I: &[u8] = b"acceptor to initiator\0";

/// A node's id in its cluster: the node record's `node_id` (pm's `noderecord`).
pub type NodeId = u32;

/// The two connection classes between a pair of nodes (as in LineFS): low-latency for the
/// small messages someone waits on (fsync, leases, acknowledgements; `TCP_NODELAY`), bulk
/// for the log chunks. A connection is of one class for its life, and the class is in the
/// handshake's transcript, so a proof for one class does not open a connection of the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Class {
    LowLatency = 1,
    Bulk = 2,
}

impl Class {
    fn from_u8(v: u8) -> Option<Class> {
        match v {
            1 => Some(Class::LowLatency),
            2 => Some(Class::Bulk),
            _ => None,
        }
    }
}

/// Message types (byte 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum MsgType {
    Hello = 1,
    Challenge = 2,
    Proof = 3,
    Verdict = 4,
}

impl MsgType {
    fn from_u8(v: u8) -> Option<MsgType> {
        match v {
            1 => Some(MsgType::Hello),
            2 => Some(MsgType::Challenge),
            3 => Some(MsgType::Proof),
            4 => Some(MsgType::Verdict),
            _ => None,
        }
    }

    /// The whole message's length.
    pub fn size(self) -> usize {
        match self {
            MsgType::Hello => HELLO_LEN,
            MsgType::Challenge => CHALLENGE_LEN,
            MsgType::Proof => PROOF_LEN,
            MsgType::Verdict => VERDICT_LEN,
        }
    }
}

/// A Verdict's status (byte 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    Accepted = 0,
    /// The initiator's proof did not verify: it does not hold the key (or replayed one).
    BadProof = 1,
    /// The acceptor speaks another version (the Verdict's version field).
    VersionRefused = 2,
    /// Refused for another reason (a replayed nonce, the acceptor's own node id, a class or
    /// a node it does not take); the acceptor's log says which.
    Refused = 3,
}

impl Status {
    fn from_u8(v: u8) -> Option<Status> {
        match v {
            0 => Some(Status::Accepted),
            1 => Some(Status::BadProof),
            2 => Some(Status::VersionRefused),
            3 => Some(Status::Refused),
            _ => None,
        }
    }
}

/// A decoded handshake message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Hello { version: u16, class: Class, node: NodeId, nonce: [u8; NONCE_LEN] },
    Challenge { version: u16, class: Class, node: NodeId, nonce: [u8; NONCE_LEN], mac: [u8; MAC_LEN] },
    Proof { version: u16, class: Class, mac: [u8; MAC_LEN] },
    Verdict { version: u16, status: Status },
}

/// Why a handshake failed. Each says what the log line and the caller need.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("not a linefs peer: handshake magic {found:02x?}")]
    BadMagic { found: [u8; 4] },
    #[error("unknown handshake message type {found}")]
    UnknownType { found: u8 },
    #[error("expected a handshake {expected:?}, got {found:?}")]
    UnexpectedType { expected: MsgType, found: MsgType },
    #[error("handshake {what}: {need} bytes needed, {have} present")]
    Truncated { what: &'static str, need: usize, have: usize },
    #[error("handshake field {field} = {value} is out of range")]
    FieldOutOfRange { field: &'static str, value: u64 },
    #[error("reserved bytes of the handshake {what} are not zero")]
    ReservedNonZero { what: &'static str },
    #[error("peer speaks protocol version {theirs}, this side {ours}")]
    Version { ours: u16, theirs: u16 },
    #[error("connection class changed during the handshake: {expected:?} then {found:?}")]
    ClassMismatch { expected: Class, found: Class },
    #[error("expected node {expected}, the peer says it is node {found}")]
    UnexpectedPeer { expected: NodeId, found: NodeId },
    #[error("the peer claims this node's own id {node}")]
    OwnId { node: NodeId },
    #[error("the peer's proof does not verify: it does not hold the cluster key, or replays an old handshake")]
    BadProof,
    #[error("replayed handshake: this acceptor has seen the initiator's nonce before")]
    ReplayedNonce,
    #[error("the peer refused this side's proof: the two sides do not hold the same cluster key")]
    RefusedProof,
    #[error("the peer refused the handshake (its log says why)")]
    Refused,
    #[error("no randomness from the operating system: {0}")]
    Random(String),
}

/// What the handshake leaves: who the peer is, the class, and the two frame keys.
#[derive(Clone)]
pub struct Session {
    pub peer: NodeId,
    pub class: Class,
    pub(crate) send_key: [u8; MAC_LEN],
    pub(crate) recv_key: [u8; MAC_LEN],
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("peer", &self.peer).field("class", &self.class).finish_non_exhaustive()
    }
}

/// The length of the message whose first 8 bytes are `prefix` (magic and type checked).
pub fn message_len(prefix: &[u8; PREFIX_LEN]) -> Result<usize, HandshakeError> {
    let found: [u8; 4] = [prefix[0], prefix[1], prefix[2], prefix[3]];
    if found != MAGIC {
        return Err(HandshakeError::BadMagic { found });
    }
    MsgType::from_u8(prefix[6]).map(MsgType::size).ok_or(HandshakeError::UnknownType { found: prefix[6] })
}

/// Decodes one whole message. Total: any bytes give a message or an error, never a panic.
pub fn decode(bytes: &[u8]) -> Result<Message, HandshakeError> {
    let prefix: &[u8; PREFIX_LEN] = bytes
        .get(..PREFIX_LEN)
        .and_then(|p| p.try_into().ok())
        .ok_or(HandshakeError::Truncated { what: "message prefix", need: PREFIX_LEN, have: bytes.len() })?;
    let need = message_len(prefix)?;
    if bytes.len() != need {
        return Err(HandshakeError::Truncated { what: "message", need, have: bytes.len() });
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    let ty = MsgType::from_u8(bytes[6]).ok_or(HandshakeError::UnknownType { found: bytes[6] })?;
    let class =
        || Class::from_u8(bytes[7]).ok_or(HandshakeError::FieldOutOfRange { field: "class", value: bytes[7] as u64 });
    Ok(match ty {
        MsgType::Hello => {
            let b: &[u8; HELLO_LEN] = bytes.try_into().map_err(|_| truncated(need, bytes.len()))?;
            let f = Fixed::new(b);
            if !f.is_zero::<12, 16>() {
                return Err(HandshakeError::ReservedNonZero { what: "hello" });
            }
            Message::Hello { version, class: class()?, node: f.u32::<8>(), nonce: f.array::<16, NONCE_LEN>() }
        }
        MsgType::Challenge => {
            let b: &[u8; CHALLENGE_LEN] = bytes.try_into().map_err(|_| truncated(need, bytes.len()))?;
            let f = Fixed::new(b);
            if !f.is_zero::<12, 16>() {
                return Err(HandshakeError::ReservedNonZero { what: "challenge" });
            }
            Message::Challenge {
                version,
                class: class()?,
                node: f.u32::<8>(),
                nonce: f.array::<16, NONCE_LEN>(),
                mac: f.array::<48, MAC_LEN>(),
            }
        }
        MsgType::Proof => {
            let b: &[u8; PROOF_LEN] = bytes.try_into().map_err(|_| truncated(need, bytes.len()))?;
            Message::Proof { version, class: class()?, mac: Fixed::new(b).array::<8, MAC_LEN>() }
        }
        MsgType::Verdict => {
            if bytes[7] != 0 || bytes[9..VERDICT_LEN].iter().any(|&b| b != 0) {
                return Err(HandshakeError::ReservedNonZero { what: "verdict" });
            }
            let status = Status::from_u8(bytes[8])
                .ok_or(HandshakeError::FieldOutOfRange { field: "status", value: bytes[8] as u64 })?;
            Message::Verdict { version, status }
        }
    })
}

fn truncated(need: usize, have: usize) -> HandshakeError {
    HandshakeError::Truncated { what: "message", need, have }
}

fn prefix<const N: usize>(ty: MsgType, class: u8) -> FixedOut<N> {
    let mut out = FixedOut::<N>::new();
    out.array::<0, 4>(MAGIC).u16::<4>(VERSION).u8::<6>(ty as u8).u8::<7>(class);
    out
}

/// Encodes a message (in this side's version, whatever `version` the value says).
pub fn encode(msg: &Message) -> Vec<u8> {
    match msg {
        Message::Hello { class, node, nonce, .. } => prefix::<HELLO_LEN>(MsgType::Hello, *class as u8)
            .u32::<8>(*node)
            .array::<16, NONCE_LEN>(*nonce)
            .bytes()
            .to_vec(),
        Message::Challenge { class, node, nonce, mac, .. } => prefix::<CHALLENGE_LEN>(MsgType::Challenge, *class as u8)
            .u32::<8>(*node)
            .array::<16, NONCE_LEN>(*nonce)
            .array::<48, MAC_LEN>(*mac)
            .bytes()
            .to_vec(),
        Message::Proof { class, mac, .. } => {
            prefix::<PROOF_LEN>(MsgType::Proof, *class as u8).array::<8, MAC_LEN>(*mac).bytes().to_vec()
        }
        Message::Verdict { status, .. } => {
            prefix::<VERDICT_LEN>(MsgType::Verdict, 0).u8::<8>(*status as u8).bytes().to_vec()
        }
    }
}

/// The Verdict this side sends.
pub fn verdict(status: Status) -> Vec<u8> {
    encode(&Message::Verdict { version: VERSION, status })
}

/// The transcript both proofs and the session keys are bound to.
struct Transcript([u8; TRANSCRIPT_LEN]);

const TRANSCRIPT_LEN: usize = 2 + 1 + 4 + 4 + NONCE_LEN + NONCE_LEN;

impl Transcript {
    fn new(
        class: Class,
        node_i: NodeId,
        node_a: NodeId,
        nonce_i: &[u8; NONCE_LEN],
        nonce_a: &[u8; NONCE_LEN],
    ) -> Transcript {
        let mut t = FixedOut::<TRANSCRIPT_LEN>::new();
        t.u16::<0>(VERSION)
            .u8::<2>(class as u8)
            .u32::<3>(node_i)
            .u32::<7>(node_a)
            .array::<11, NONCE_LEN>(*nonce_i)
            .array::<43, NONCE_LEN>(*nonce_a);
        Transcript(*t.bytes())
    }

    fn mac(&self, key: &ClusterKey, label: &[u8]) -> [u8; MAC_LEN] {
        hmac(key.bytes(), &[label, &self.0])
    }

    fn verify(&self, key: &ClusterKey, label: &[u8], tag: &[u8; MAC_LEN]) -> bool {
        verify(key.bytes(), &[label, &self.0], tag)
    }

    /// The two frame keys: (initiator to acceptor, acceptor to initiator).
    fn session_keys(&self, key: &ClusterKey) -> ([u8; MAC_LEN], [u8; MAC_LEN]) {
        let prk = self.mac(key, LABEL_SESSION);
        (hmac(&prk, &[LABEL_I2A, &[1]]), hmac(&prk, &[LABEL_A2I, &[1]]))
    }
}

fn nonce() -> Result<[u8; NONCE_LEN], HandshakeError> {
    let mut n = [0u8; NONCE_LEN];
    crate::random_bytes(&mut n).map_err(HandshakeError::Random)?;
    Ok(n)
}

fn check_version(version: u16) -> Result<(), HandshakeError> {
    if version == VERSION {
        Ok(())
    } else {
        Err(HandshakeError::Version { ours: VERSION, theirs: version })
    }
}

/// The dialling side, after its Hello.
pub struct Initiator {
    key: ClusterKey,
    me: NodeId,
    class: Class,
    expect: Option<NodeId>,
    nonce: [u8; NONCE_LEN],
}

impl Initiator {
    /// Starts a handshake as node `me` for a connection of `class`, to node `expect` if the
    /// caller knows whom it dials. Returns the Hello to send.
    pub fn start(
        key: &ClusterKey,
        me: NodeId,
        class: Class,
        expect: Option<NodeId>,
    ) -> Result<(Initiator, Vec<u8>), HandshakeError> {
        let nonce = nonce()?;
        let hello = encode(&Message::Hello { version: VERSION, class, node: me, nonce });
        Ok((Initiator { key: key.clone(), me, class, expect, nonce }, hello))
    }

    /// Takes the acceptor's answer (a Challenge, or a Verdict refusing the Hello): checks
    /// the acceptor's proof and returns this side's Proof to send and the session (valid
    /// once the Verdict says accepted, [`Initiator::on_verdict`]).
    pub fn on_challenge(&self, bytes: &[u8]) -> Result<(Vec<u8>, Session), HandshakeError> {
        let (node, nonce_a, mac) = match decode(bytes)? {
            Message::Challenge { version, class, node, nonce, mac } => {
                check_version(version)?;
                if class != self.class {
                    return Err(HandshakeError::ClassMismatch { expected: self.class, found: class });
                }
                (node, nonce, mac)
            }
            Message::Verdict { version, status } => return Err(refusal(version, status)),
            other => {
                return Err(HandshakeError::UnexpectedType { expected: MsgType::Challenge, found: type_of(&other) })
            }
        };
        if let Some(expected) = self.expect {
            if node != expected {
                return Err(HandshakeError::UnexpectedPeer { expected, found: node });
            }
        }
        if node == self.me {
            return Err(HandshakeError::OwnId { node });
        }
        let t = Transcript::new(self.class, self.me, node, &self.nonce, &nonce_a);
        if !t.verify(&self.key, LABEL_ACCEPTOR, &mac) {
            return Err(HandshakeError::BadProof);
        }
        let proof =
            encode(&Message::Proof { version: VERSION, class: self.class, mac: t.mac(&self.key, LABEL_INITIATOR) });
        let (i2a, a2i) = t.session_keys(&self.key);
        Ok((proof, Session { peer: node, class: self.class, send_key: i2a, recv_key: a2i }))
    }

    /// Takes the acceptor's Verdict.
    pub fn on_verdict(&self, bytes: &[u8]) -> Result<(), HandshakeError> {
        match decode(bytes)? {
            Message::Verdict { status: Status::Accepted, version } => check_version(version),
            Message::Verdict { version, status } => Err(refusal(version, status)),
            other => Err(HandshakeError::UnexpectedType { expected: MsgType::Verdict, found: type_of(&other) }),
        }
    }
}

fn refusal(version: u16, status: Status) -> HandshakeError {
    match status {
        Status::VersionRefused => HandshakeError::Version { ours: VERSION, theirs: version },
        Status::BadProof => HandshakeError::RefusedProof,
        Status::Refused | Status::Accepted => HandshakeError::Refused,
    }
}

fn type_of(m: &Message) -> MsgType {
    match m {
        Message::Hello { .. } => MsgType::Hello,
        Message::Challenge { .. } => MsgType::Challenge,
        Message::Proof { .. } => MsgType::Proof,
        Message::Verdict { .. } => MsgType::Verdict,
    }
}

/// Initiator nonces an acceptor has seen lately: a Hello that reuses one is a replay and is
/// refused before any proof is computed. Bounded (the oldest are forgotten first); the
/// acceptor's own fresh nonce is what makes an older replay fail all the same.
pub struct ReplayGuard {
    inner: Mutex<Seen>,
    capacity: usize,
}

/// The nonces seen, as a set and in arrival order (the oldest go first).
type Seen = (HashSet<[u8; NONCE_LEN]>, VecDeque<[u8; NONCE_LEN]>);

impl ReplayGuard {
    pub fn new(capacity: usize) -> ReplayGuard {
        ReplayGuard { inner: Mutex::new((HashSet::new(), VecDeque::new())), capacity: capacity.max(1) }
    }

    /// Records `nonce`; false if it was seen already.
    fn first_time(&self, nonce: &[u8; NONCE_LEN]) -> bool {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (set, order) = &mut *g;
        if !set.insert(*nonce) {
            return false;
        }
        order.push_back(*nonce);
        if order.len() > self.capacity {
            if let Some(old) = order.pop_front() {
                set.remove(&old);
            }
        }
        true
    }
}

impl Default for ReplayGuard {
    fn default() -> ReplayGuard {
        ReplayGuard::new(1 << 16)
    }
}

/// The listening side, after its Challenge.
pub struct Acceptor {
    key: ClusterKey,
    transcript: Transcript,
    peer: NodeId,
    class: Class,
}

/// A refusal by the acceptor: why, and the Verdict to send before closing (none when the
/// bytes were not our protocol at all).
#[derive(Debug)]
pub struct Refusal {
    pub error: HandshakeError,
    pub verdict: Option<Vec<u8>>,
}

impl Acceptor {
    /// Takes an initiator's Hello as node `me`: returns the Challenge to send.
    pub fn on_hello(
        key: &ClusterKey,
        me: NodeId,
        guard: &ReplayGuard,
        bytes: &[u8],
    ) -> Result<(Acceptor, Vec<u8>), Refusal> {
        let refuse = |error, status: Option<Status>| Refusal { error, verdict: status.map(verdict) };
        let (version, class, node, nonce_i) = match decode(bytes) {
            Ok(Message::Hello { version, class, node, nonce }) => (version, class, node, nonce),
            Ok(other) => {
                let e = HandshakeError::UnexpectedType { expected: MsgType::Hello, found: type_of(&other) };
                return Err(refuse(e, Some(Status::Refused)));
            }
            Err(e @ (HandshakeError::BadMagic { .. } | HandshakeError::Truncated { .. })) => {
                return Err(refuse(e, None))
            }
            Err(e) => return Err(refuse(e, Some(Status::Refused))),
        };
        if let Err(e) = check_version(version) {
            return Err(refuse(e, Some(Status::VersionRefused)));
        }
        if node == me {
            return Err(refuse(HandshakeError::OwnId { node }, Some(Status::Refused)));
        }
        if !guard.first_time(&nonce_i) {
            return Err(refuse(HandshakeError::ReplayedNonce, Some(Status::Refused)));
        }
        let nonce_a = nonce().map_err(|e| refuse(e, Some(Status::Refused)))?;
        let transcript = Transcript::new(class, node, me, &nonce_i, &nonce_a);
        let mac = transcript.mac(key, LABEL_ACCEPTOR);
        let challenge = encode(&Message::Challenge { version: VERSION, class, node: me, nonce: nonce_a, mac });
        Ok((Acceptor { key: key.clone(), transcript, peer: node, class }, challenge))
    }

    /// Takes the initiator's Proof: the session, and the Verdict to send either way.
    pub fn on_proof(&self, bytes: &[u8]) -> Result<(Session, Vec<u8>), Refusal> {
        let refuse = |error, status: Status| Refusal { error, verdict: Some(verdict(status)) };
        let mac = match decode(bytes) {
            Ok(Message::Proof { version, class, mac }) => {
                if let Err(e) = check_version(version) {
                    return Err(refuse(e, Status::VersionRefused));
                }
                if class != self.class {
                    return Err(refuse(
                        HandshakeError::ClassMismatch { expected: self.class, found: class },
                        Status::Refused,
                    ));
                }
                mac
            }
            Ok(other) => {
                let e = HandshakeError::UnexpectedType { expected: MsgType::Proof, found: type_of(&other) };
                return Err(refuse(e, Status::Refused));
            }
            Err(e) => return Err(refuse(e, Status::Refused)),
        };
        if !self.transcript.verify(&self.key, LABEL_INITIATOR, &mac) {
            return Err(refuse(HandshakeError::BadProof, Status::BadProof));
        }
        let (i2a, a2i) = self.transcript.session_keys(&self.key);
        Ok((Session { peer: self.peer, class: self.class, send_key: a2i, recv_key: i2a }, verdict(Status::Accepted)))
    }

    /// The node the initiator says it is (proved once [`Acceptor::on_proof`] succeeds).
    pub fn peer(&self) -> NodeId {
        self.peer
    }
}
