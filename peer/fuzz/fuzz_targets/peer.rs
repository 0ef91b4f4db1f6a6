//! Any bytes, as a handshake message, as every step of both sides of the handshake, as
//! a sealed frame, and as a replication payload of every kind: no panic; what decodes as a
//! message of this version re-encodes to its bytes (a replication payload: when not
//! compressed); no sealed frame opens without the key.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linefs_peer::handshake::{self, Acceptor, Initiator, Message, ReplayGuard};
use linefs_peer::repl;
use linefs_peer::seal::Opener;
use linefs_peer::{Class, ClusterKey};

fuzz_target!(|data: &[u8]| {
    if let Ok(msg) = handshake::decode(data) {
        let version = match &msg {
            Message::Hello { version, .. }
            | Message::Challenge { version, .. }
            | Message::Proof { version, .. }
            | Message::Verdict { version, .. } => *version,
        };
        if version == handshake::VERSION {
            assert_eq!(handshake::encode(&msg), data);
        }
    }
    let key = ClusterKey::from_bytes([0x42; 32]);
    let guard = ReplayGuard::default();
    let _ = Acceptor::on_hello(&key, 2, &guard, data);
    if let Ok((initiator, hello)) = Initiator::start(&key, 1, Class::Bulk, None) {
        if let Ok((acceptor, _)) = Acceptor::on_hello(&key, 2, &guard, &hello) {
            assert!(acceptor.on_proof(data).is_err());
        }
        assert!(initiator.on_challenge(data).is_err());
        let _ = initiator.on_verdict(data);
    }
    assert!(Opener::new([0x42; 32]).open_bytes(data).is_err());
    for kind in [repl::KIND_CHUNK, repl::KIND_ACK, repl::KIND_PROBE, repl::KIND_REBASE] {
        if let Ok(frame) = repl::decode(kind, data) {
            let compressed = kind == repl::KIND_CHUNK && data[1] & repl::flags::COMPRESSED != 0;
            let (k, plain, _) = repl::encode(&frame, false).expect("a decoded frame encodes");
            assert_eq!(k, kind);
            if !compressed {
                assert_eq!(plain, data);
            }
            let (k, packed, _) = repl::encode(&frame, true).expect("a decoded frame encodes");
            assert_eq!(repl::decode(k, &packed).as_ref(), Ok(&frame));
        }
    }
});
