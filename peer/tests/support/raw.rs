//! A peer written from the documented bytes, not through the library: it builds the
//! handshake messages, computes the proofs and session keys from the formulas in
//! `handshake.rs`'s docs, and seals frames as `seal.rs`'s docs say, with `hmac` and `sha2`
//! directly. What the library does must agree with it.
#![allow(dead_code)]

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::{Read, Write};
use std::net::TcpStream;

pub const VERSION: u16 = 7;

pub fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap();
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

pub fn prefix(version: u16, ty: u8, class: u8) -> Vec<u8> {
    let mut b = b"LFPH".to_vec();
    b.extend_from_slice(&version.to_le_bytes());
    b.push(ty);
    b.push(class);
    b
}

pub fn hello(version: u16, class: u8, node: u32, nonce: &[u8; 32]) -> Vec<u8> {
    let mut b = prefix(version, 1, class);
    b.extend_from_slice(&node.to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(nonce);
    assert_eq!(b.len(), 48);
    b
}

pub fn proof(class: u8, mac: &[u8; 32]) -> Vec<u8> {
    let mut b = prefix(VERSION, 3, class);
    b.extend_from_slice(mac);
    assert_eq!(b.len(), 40);
    b
}

pub fn verdict(version: u16, status: u8) -> Vec<u8> {
    let mut b = prefix(version, 4, 0);
    b.push(status);
    b.extend_from_slice(&[0; 7]);
    b
}

pub fn transcript(class: u8, node_i: u32, node_a: u32, nonce_i: &[u8; 32], nonce_a: &[u8; 32]) -> Vec<u8> {
    let mut t = VERSION.to_le_bytes().to_vec();
    t.push(class);
    t.extend_from_slice(&node_i.to_le_bytes());
    t.extend_from_slice(&node_a.to_le_bytes());
    t.extend_from_slice(nonce_i);
    t.extend_from_slice(nonce_a);
    t
}

/// The two session keys (initiator to acceptor, acceptor to initiator).
pub fn session_keys(key: &[u8; 32], t: &[u8]) -> ([u8; 32], [u8; 32]) {
    let prk = hmac(key, &[b"linefs-peer session\0", t]);
    (hmac(&prk, &[b"initiator to acceptor\0", &[1]]), hmac(&prk, &[b"acceptor to initiator\0", &[1]]))
}

pub fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut b = vec![0; n];
    s.read_exact(&mut b).unwrap();
    b
}

/// The outcome of a handshake done by hand as the initiator.
pub struct ByHand {
    pub hello: Vec<u8>,
    pub proof: Vec<u8>,
    pub send_key: [u8; 32],
    pub recv_key: [u8; 32],
    pub verdict: Vec<u8>,
}

/// Runs the initiator's side by hand on `s` as node `me`, class `class`, key `key`, nonce
/// `nonce`; checks the acceptor's proof; returns what was sent and the keys.
pub fn initiate(s: &mut TcpStream, key: &[u8; 32], me: u32, class: u8, nonce: [u8; 32]) -> ByHand {
    let hello = hello(VERSION, class, me, &nonce);
    s.write_all(&hello).unwrap();
    let ch = read_n(s, 80);
    assert_eq!(&ch[..8], &prefix(VERSION, 2, class)[..], "challenge prefix");
    let node_a = u32::from_le_bytes(ch[8..12].try_into().unwrap());
    assert_eq!(&ch[12..16], &[0; 4], "challenge reserved bytes");
    let nonce_a: [u8; 32] = ch[16..48].try_into().unwrap();
    let t = transcript(class, me, node_a, &nonce, &nonce_a);
    assert_eq!(&ch[48..80], &hmac(key, &[b"linefs-peer acceptor proof\0", &t]), "acceptor's proof");
    let proof = proof(class, &hmac(key, &[b"linefs-peer initiator proof\0", &t]));
    s.write_all(&proof).unwrap();
    let verdict = read_n(s, 16);
    let (send_key, recv_key) = session_keys(key, &t);
    ByHand { hello, proof, send_key, recv_key, verdict }
}

/// A frame sealed as the docs say: check byte 1, then seq and the first 16 bytes of the MAC.
pub fn seal(key: &[u8; 32], seq: u64, frame: &[u8]) -> Vec<u8> {
    let mut b = frame.to_vec();
    b[13] = 1;
    let tag = hmac(key, &[&seq.to_le_bytes(), &b]);
    b.extend_from_slice(&seq.to_le_bytes());
    b.extend_from_slice(&tag[..16]);
    b
}
