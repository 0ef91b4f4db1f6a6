//! Message kinds: the numbers in the frame header, and for each the links it travels on,
//! who may send it, whether it is a request, a reply or a notice, and how many file
//! descriptors ride with it.
//!
//! Numbering: the high byte names the link (0x00 every link, 0x01 control, 0x02 bulk,
//! 0x03 kworker), the low byte counts within it. A number once given is never reused for
//! another meaning; a kind that goes away leaves a hole.

/// The three kinds of connection to nicfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Link {
    /// Client ↔ nicfs, low latency: attach, leases, fsync, allocation.
    Control,
    /// Client ↔ nicfs, throughput: chunk notifications and publication acknowledgements.
    Bulk,
    /// kworker ↔ nicfs: heartbeats and copy lists.
    Kworker,
}

impl Link {
    const fn bit(self) -> u8 {
        match self {
            Link::Control => 1,
            Link::Bulk => 2,
            Link::Kworker => 4,
        }
    }
}

/// Who sends a frame: the reader states it, the decoder refuses a kind this party never
/// sends (a client cannot forge nicfs's replies to another reader of the same code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Party {
    /// A mount daemon or a process using the libfs API.
    Client,
    Nicfs,
    Kworker,
}

impl Party {
    const fn bit(self) -> u8 {
        match self {
            Party::Client => 1,
            Party::Nicfs => 2,
            Party::Kworker => 4,
        }
    }
}

/// What a frame of a kind is to the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Expects exactly one reply naming its id (its kind's success reply, or Error).
    Request,
    /// Answers the request whose id it carries.
    Reply,
    /// Expects no reply; carries its sender's own id (for logs and ordering).
    Notice,
}

const ALL_LINKS: u8 = 7;
const C: u8 = 1; // Link::Control
const B: u8 = 2; // Link::Bulk
const K: u8 = 4; // Link::Kworker
const CLIENT: u8 = 1;
const NICFS: u8 = 2;
const KWORKER: u8 = 4;

/// The static facts about one kind.
struct Info {
    name: &'static str,
    links: u8,
    senders: u8,
    class: Class,
    fds: u8,
}

const fn info(name: &'static str, links: u8, senders: u8, class: Class) -> Info {
    Info { name, links, senders, class, fds: 0 }
}

macro_rules! kinds {
    ($( $(#[$doc:meta])* $name:ident = $num:literal => $info:expr, )*) => {
        /// A message kind, as numbered in the frame header.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum Kind { $( $(#[$doc])* $name = $num, )* }

        impl Kind {
            /// Every kind, in number order.
            pub const ALL: &'static [Kind] = &[$(Kind::$name,)*];

            /// The kind of a header's number, if this version knows it.
            pub fn from_u16(n: u16) -> Option<Kind> {
                match n { $( $num => Some(Kind::$name), )* _ => None }
            }

            fn info(self) -> Info {
                match self { $( Kind::$name => $info, )* }
            }
        }
    };
}

kinds! {
    /// Opens a connection: which link, which session, which role.
    Hello = 0x0001 => info("Hello", ALL_LINKS, CLIENT | KWORKER, Class::Request),
    /// Success with nothing more to say.
    Ok = 0x0002 => info("Ok", ALL_LINKS, NICFS, Class::Reply),
    /// Failure of the request named, or of a frame that could not be decoded.
    Error = 0x0003 => info("Error", ALL_LINKS, CLIENT | NICFS | KWORKER, Class::Reply),
    Attached = 0x0101 => Info { fds: 2, ..info("Attached", C, NICFS, Class::Reply) },
    LeaseRequest = 0x0102 => info("LeaseRequest", C, CLIENT, Class::Request),
    LeaseGranted = 0x0103 => info("LeaseGranted", C, NICFS, Class::Reply),
    LeaseRelease = 0x0104 => info("LeaseRelease", C, CLIENT, Class::Request),
    Revoke = 0x0105 => info("Revoke", C, NICFS, Class::Request),
    RevokeDone = 0x0106 => info("RevokeDone", C, CLIENT, Class::Reply),
    // 0x0107 was OpenCheck (until version 3): opens for writing are log records now (pm's
    // OPEN_WRITE), checked with the entries. A retired number is not given to another kind.
    Fsync = 0x0108 => info("Fsync", C, CLIENT, Class::Request),
    FsyncDone = 0x0109 => info("FsyncDone", C, NICFS, Class::Reply),
    AllocInodes = 0x010a => info("AllocInodes", C, CLIENT, Class::Request),
    InodeRange = 0x010b => info("InodeRange", C, NICFS, Class::Reply),
    ReserveBlocks = 0x010c => info("ReserveBlocks", C, CLIENT, Class::Request),
    ReleaseBlocks = 0x010d => info("ReleaseBlocks", C, CLIENT, Class::Request),
    Rejected = 0x010e => info("Rejected", C, NICFS, Class::Notice),
    Detach = 0x010f => info("Detach", C, CLIENT, Class::Request),
    Ping = 0x0110 => info("Ping", C, CLIENT | NICFS, Class::Request),
    Pong = 0x0111 => info("Pong", C, CLIENT | NICFS, Class::Reply),
    /// The node's free space and inodes, for statfs (version 2).
    StatFs = 0x0112 => info("StatFs", C, CLIENT, Class::Request),
    Space = 0x0113 => info("Space", C, NICFS, Class::Reply),
    /// The client opened an inode it did not hold open (version 3): nicfs does not free
    /// it as an orphan while it is open.
    Opened = 0x0114 => info("Opened", C, CLIENT, Class::Notice),
    /// The client's last open of an inode is closed (version 3).
    Closed = 0x0115 => info("Closed", C, CLIENT, Class::Notice),
    ChunkReady = 0x0201 => info("ChunkReady", B, CLIENT, Class::Notice),
    Published = 0x0202 => info("Published", B, NICFS, Class::Notice),
    Heartbeat = 0x0301 => info("Heartbeat", K, KWORKER, Class::Notice),
    CopyList = 0x0302 => info("CopyList", K, NICFS, Class::Request),
    CopyDone = 0x0303 => info("CopyDone", K, KWORKER, Class::Reply),
    CopyFailed = 0x0304 => info("CopyFailed", K, KWORKER, Class::Reply),
}

impl Kind {
    pub fn name(self) -> &'static str {
        self.info().name
    }

    pub fn class(self) -> Class {
        self.info().class
    }

    /// The most file descriptors that travel with a frame of this kind (a message may carry
    /// fewer: `LinkMessage::fds`).
    pub fn fds(self) -> u8 {
        self.info().fds
    }

    pub fn on_link(self, link: Link) -> bool {
        self.info().links & link.bit() != 0
    }

    pub fn sent_by(self, party: Party) -> bool {
        self.info().senders & party.bit() != 0
    }

    /// The parties that may send this kind.
    pub fn senders(self) -> impl Iterator<Item = Party> {
        [Party::Client, Party::Nicfs, Party::Kworker].into_iter().filter(move |p| self.sent_by(*p))
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({:#06x})", self.name(), *self as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip_and_high_byte_names_the_link() {
        for &k in Kind::ALL {
            assert_eq!(Kind::from_u16(k as u16), Some(k));
            let links: Vec<Link> =
                [Link::Control, Link::Bulk, Link::Kworker].into_iter().filter(|l| k.on_link(*l)).collect();
            match (k as u16) >> 8 {
                0 => assert_eq!(links.len(), 3, "{k}"),
                1 => assert_eq!(links, [Link::Control], "{k}"),
                2 => assert_eq!(links, [Link::Bulk], "{k}"),
                3 => assert_eq!(links, [Link::Kworker], "{k}"),
                _ => panic!("{k}: no link has this high byte"),
            }
            assert!(k.senders().next().is_some(), "{k} has no sender");
        }
        assert_eq!(Kind::from_u16(0), None);
        assert_eq!(Kind::from_u16(0x0116), None);
    }
}
