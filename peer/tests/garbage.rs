//! The peer decoders against arbitrary bytes: handshake messages, each step of both sides
//! of the handshake, and sealed frames (random, and valid ones mutated). Never a panic; a
//! mutated frame is never taken for the original.

use linefs_peer::handshake::{self, Acceptor, Initiator, Message, ReplayGuard};
use linefs_peer::seal::{Opener, Sealer};
use linefs_peer::{Class, ClusterKey};
use linefs_proto::{encode, Control, Frame, LeaseHandback};
use proptest::prelude::*;

fn key() -> ClusterKey {
    ClusterKey::from_bytes([0x11; 32])
}

/// Bytes that start like a handshake message more often than chance would.
fn message_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..100),
        (1u8..6, any::<u8>(), proptest::collection::vec(any::<u8>(), 0..90)).prop_map(|(ty, class, rest)| {
            let mut b = b"LFPH".to_vec();
            b.extend_from_slice(&handshake::VERSION.to_le_bytes());
            b.push(ty);
            b.push(class);
            b.extend_from_slice(&rest);
            b
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn handshake_decoder_is_total_and_canonical(bytes in message_bytes()) {
        if let Ok(msg) = handshake::decode(&bytes) {
            // What decodes re-encodes to its bytes (for this side's version).
            let version = match &msg {
                Message::Hello { version, .. } | Message::Challenge { version, .. }
                | Message::Proof { version, .. } | Message::Verdict { version, .. } => *version,
            };
            if version == handshake::VERSION {
                prop_assert_eq!(&handshake::encode(&msg), &bytes);
            }
        }
        if let Some(prefix) = bytes.get(..8).and_then(|p| <&[u8; 8]>::try_from(p).ok()) {
            if let Ok(len) = handshake::message_len(prefix) {
                prop_assert!(len <= handshake::MAX_MESSAGE);
            }
        }
    }

    #[test]
    fn both_sides_of_the_handshake_take_any_bytes(bytes in message_bytes()) {
        let guard = ReplayGuard::default();
        // The acceptor, given anything as a Hello, then as a Proof.
        let _ = Acceptor::on_hello(&key(), 2, &guard, &bytes);
        let (initiator, hello) = Initiator::start(&key(), 1, Class::Bulk, None).unwrap();
        let (acceptor, _challenge) = Acceptor::on_hello(&key(), 2, &guard, &hello).unwrap();
        prop_assert!(acceptor.on_proof(&bytes).is_err());
        // The initiator, given anything as a Challenge and as a Verdict.
        prop_assert!(initiator.on_challenge(&bytes).is_err());
        let _ = initiator.on_verdict(&bytes);
    }

    #[test]
    fn opener_takes_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        prop_assert!(Opener::new([1; 32]).open_bytes(&bytes).is_err());
    }

    #[test]
    fn a_mutated_sealed_frame_is_never_taken(
        id in 1u64..,
        pos in any::<prop::sample::Index>(),
        xor in 1u8..,
        cut in any::<prop::sample::Index>(),
        huge in any::<bool>(),
    ) {
        let frame = encode(&Frame { id, msg: Control::LeaseRelease(LeaseHandback { lease: 3, inode: 4, covered_lsn: 5 }) }).unwrap();
        let sealed = Sealer::new([7; 32]).seal(&frame).unwrap();
        prop_assert_eq!(&Opener::new([7; 32]).open_bytes(&sealed).unwrap().payload[..], &frame[24..]);
        let mut b = sealed.clone();
        let at = pos.index(b.len());
        b[at] ^= xor;
        prop_assert!(Opener::new([7; 32]).open_bytes(&b).is_err());
        let short = &sealed[..cut.index(sealed.len())];
        prop_assert!(Opener::new([7; 32]).open_bytes(short).is_err());
        if huge {
            let mut b = sealed.clone();
            b[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
            prop_assert!(Opener::new([7; 32]).open_bytes(&b).is_err());
        }
    }

    #[test]
    fn a_handshake_between_two_machines_agrees(class_bulk in any::<bool>(), a in any::<u32>(), b in any::<u32>()) {
        prop_assume!(a != b);
        let class = if class_bulk { Class::Bulk } else { Class::LowLatency };
        let guard = ReplayGuard::default();
        let (initiator, hello) = Initiator::start(&key(), a, class, Some(b)).unwrap();
        let (acceptor, challenge) = Acceptor::on_hello(&key(), b, &guard, &hello).unwrap();
        let (proof, _) = initiator.on_challenge(&challenge).unwrap();
        let (_, verdict) = acceptor.on_proof(&proof).unwrap();
        initiator.on_verdict(&verdict).unwrap();
        // The same Hello again is a replay.
        prop_assert!(Acceptor::on_hello(&key(), b, &guard, &hello).is_err());
        // Another key on either side fails.
        let other = ClusterKey::from_bytes([0x22; 32]);
        let (acceptor2, challenge2) = Acceptor::on_hello(&other, b, &ReplayGuard::default(), &hello).unwrap();
        prop_assert!(initiator.on_challenge(&challenge2).is_err());
        prop_assert!(acceptor2.on_proof(&proof).is_err());
    }
}
