//! Any bytes, decoded as every link from every party: no panic, and whatever decodes
//! re-encodes to the same bytes (the encoding is canonical).
#![no_main]

use libfuzzer_sys::fuzz_target;
use linefs_proto::{decode, encode, Bulk, Codec, Control, Kworker, Party};

fn check<M: Codec>(data: &[u8], from: Party) {
    if let Ok(frame) = decode::<M>(data, from) {
        assert_eq!(encode(&frame).expect("a decoded frame encodes"), data);
    }
}

fuzz_target!(|data: &[u8]| {
    for from in [Party::Client, Party::Nicfs, Party::Kworker] {
        check::<Control>(data, from);
        check::<Bulk>(data, from);
        check::<Kworker>(data, from);
    }
});
