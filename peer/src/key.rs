//! The cluster key: 32 random bytes that every node of a cluster holds, kept in a file only
//! its owner may read (`linefs up` makes it). Holding it is what makes a peer a peer: the
//! handshake proves it ([`crate::handshake`]) and the frames' MACs are keyed from it.
//!
//! The file is the 32 bytes and nothing else (no header: its size is its format). Loading
//! refuses a missing file, a file of another size, and a file that its group or others may
//! read or write (as ssh refuses a private key that others can read): a key others can read
//! is not secret, and refusing it at start-up is better than running with it.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Bytes of a cluster key.
pub const KEY_LEN: usize = 32;

/// The cluster key. Its `Debug` prints no byte of it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterKey([u8; KEY_LEN]);

impl fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

/// Why a key file could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cluster key file {path} does not exist (`linefs up` makes it)")]
    Missing { path: PathBuf },
    #[error("cluster key file {path} already exists (it is never overwritten)")]
    Exists { path: PathBuf },
    #[error("cluster key file {path} holds {size} bytes, a key is exactly {KEY_LEN}")]
    WrongSize { path: PathBuf, size: u64 },
    #[error("cluster key file {path} has mode {mode:04o}: its group or others may use it; it must be 0600 or 0400")]
    TooOpen { path: PathBuf, mode: u32 },
    #[error("cluster key file {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("no randomness from the operating system: {0}")]
    Random(String),
}

impl ClusterKey {
    /// A new key from the operating system's random source.
    pub fn random() -> Result<ClusterKey, KeyError> {
        let mut k = [0u8; KEY_LEN];
        crate::random_bytes(&mut k).map_err(KeyError::Random)?;
        Ok(ClusterKey(k))
    }

    /// A key of these bytes (tests, and whoever keeps the key elsewhere).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> ClusterKey {
        ClusterKey(bytes)
    }

    pub(crate) fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// Makes a new key and writes it to `path`, created with mode 0600 (never overwriting a
    /// file that is there: a cluster's key changes only by an operator's deliberate act).
    pub fn generate(path: &Path) -> Result<ClusterKey, KeyError> {
        let key = ClusterKey::random()?;
        let io = |source| KeyError::Io { path: path.to_owned(), source };
        let mut file = match OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(KeyError::Exists { path: path.to_owned() })
            }
            Err(e) => return Err(io(e)),
        };
        // The umask can only narrow 0600; set it exactly all the same.
        file.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(io)?;
        file.write_all(&key.0).map_err(io)?;
        file.sync_all().map_err(io)?;
        Ok(key)
    }

    /// Reads the key at `path`, refusing a missing file, a wrong size, or a mode that lets
    /// its group or others read or write it.
    pub fn load(path: &Path) -> Result<ClusterKey, KeyError> {
        let io = |source| KeyError::Io { path: path.to_owned(), source };
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(KeyError::Missing { path: path.to_owned() }),
            Err(e) => return Err(io(e)),
        };
        // Checked on the open file, so a rename between the check and the read changes nothing.
        let meta = file.metadata().map_err(io)?;
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(KeyError::TooOpen { path: path.to_owned(), mode });
        }
        if meta.len() != KEY_LEN as u64 {
            return Err(KeyError::WrongSize { path: path.to_owned(), size: meta.len() });
        }
        let mut k = [0u8; KEY_LEN];
        // One more byte than a key: a file that grew since the size check is refused too.
        let mut buf = [0u8; KEY_LEN + 1];
        let n = read_up_to(&file, &mut buf).map_err(io)?;
        if n != KEY_LEN {
            return Err(KeyError::WrongSize { path: path.to_owned(), size: n as u64 });
        }
        k.copy_from_slice(&buf[..KEY_LEN]);
        Ok(ClusterKey(k))
    }
}

fn read_up_to(mut file: &File, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generate_then_load_gives_the_same_key_and_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.key");
        let key = ClusterKey::generate(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read(&path).unwrap().len(), KEY_LEN);
        assert_eq!(ClusterKey::load(&path).unwrap(), key);
        // Two keys are not the same key.
        let other = ClusterKey::generate(&dir.path().join("other.key")).unwrap();
        assert_ne!(other, key);
        assert_eq!(format!("{key:?}"), "ClusterKey(..)");
    }

    #[test]
    fn generate_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.key");
        let key = ClusterKey::generate(&path).unwrap();
        assert!(matches!(ClusterKey::generate(&path), Err(KeyError::Exists { .. })));
        assert_eq!(ClusterKey::load(&path).unwrap(), key);
    }

    #[test]
    fn load_refuses_missing_wrong_size_and_too_open() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.key");
        let e = ClusterKey::load(&missing).unwrap_err();
        assert!(matches!(e, KeyError::Missing { .. }), "{e}");
        assert!(e.to_string().contains("does not exist"));

        let short = dir.path().join("short.key");
        std::fs::write(&short, [7u8; 31]).unwrap();
        std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(ClusterKey::load(&short), Err(KeyError::WrongSize { size: 31, .. })));
        let long = dir.path().join("long.key");
        std::fs::write(&long, [7u8; 33]).unwrap();
        std::fs::set_permissions(&long, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(ClusterKey::load(&long), Err(KeyError::WrongSize { size: 33, .. })));

        let open = dir.path().join("open.key");
        std::fs::write(&open, [7u8; 32]).unwrap();
        for mode in [0o644, 0o640, 0o604, 0o620, 0o602] {
            std::fs::set_permissions(&open, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = ClusterKey::load(&open).unwrap_err();
            assert!(matches!(e, KeyError::TooOpen { mode: m, .. } if m == mode), "{mode:o}: {e}");
        }
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&open, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(ClusterKey::load(&open).unwrap(), ClusterKey::from_bytes([7u8; 32]));
        }
    }
}
