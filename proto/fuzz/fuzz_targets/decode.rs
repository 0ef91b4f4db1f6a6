//! Any bytes, decoded as a header and as every link from every party: no panic, and
//! whatever decodes re-encodes to the same bytes (the encoding is canonical).
#![no_main]

use libfuzzer_sys::fuzz_target;
use linefs_proto::{
    decode, encode, Bulk, Codec, Control, Header, Kworker, Party, CHECK_MAC, CHECK_NONE, HEADER_LEN, PROTOCOL_VERSION,
};

fn check<M: Codec>(data: &[u8], from: Party) {
    if let Ok(frame) = decode::<M>(data, from) {
        assert_eq!(encode(&frame).expect("a decoded frame encodes"), data);
    }
}

fuzz_target!(|data: &[u8]| {
    // The header alone (its check byte included): what decodes in our version re-encodes to
    // its bytes. A header of another version is returned with only its frozen prefix
    // checked (so that a version refusal can be read), and its other bytes are not ours to
    // judge: re-encoding it need not give them back.
    if let Some(head) = data.get(..HEADER_LEN).and_then(|h| <&[u8; HEADER_LEN]>::try_from(h).ok()) {
        for scheme in [CHECK_NONE, CHECK_MAC] {
            if let Ok(h) = Header::decode_with_check(head, scheme) {
                if h.version == PROTOCOL_VERSION {
                    assert_eq!(h.check, scheme);
                    assert_eq!(&h.encode(), head);
                }
            }
        }
    }
    for from in [Party::Client, Party::Nicfs, Party::Kworker] {
        check::<Control>(data, from);
        check::<Bulk>(data, from);
        check::<Kworker>(data, from);
    }
});
