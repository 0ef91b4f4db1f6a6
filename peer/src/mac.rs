//! HMAC-SHA256, the one primitive of the peer link: the handshake's proofs, the session keys
//! derived from them, and every frame's MAC. Comparisons of a MAC against the expected one
//! are constant-time (the `hmac` crate's `verify_*`, through `subtle`).

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub(crate) type HmacSha256 = Hmac<Sha256>;

/// Bytes of a full HMAC-SHA256.
pub const MAC_LEN: usize = 32;

/// A keyed MAC over the concatenation of `parts`.
pub(crate) fn keyed(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC takes a key of any length: this cannot fail.
    let mut m = <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC takes a key of any length");
    for p in parts {
        m.update(p);
    }
    m
}

/// HMAC-SHA256 under `key` of the concatenation of `parts`.
pub(crate) fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
    keyed(key, parts).finalize().into_bytes().into()
}

/// Whether `tag` is the HMAC under `key` of `parts`: the full 32 bytes, or its first
/// `tag.len()` bytes (at least 16). Constant-time in the tag's bytes.
pub(crate) fn verify(key: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
    let m = keyed(key, parts);
    if tag.len() == MAC_LEN {
        m.verify_slice(tag).is_ok()
    } else {
        tag.len() >= 16 && m.verify_truncated_left(tag).is_ok()
    }
}
