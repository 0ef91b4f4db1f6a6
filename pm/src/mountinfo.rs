//! The one parser of `/proc/self/mountinfo` in linefs: the PM layer asks it whether a PM file
//! sits on a DAX mount, the `linefs` command whether a FUSE mount is (still) attached.
//!
//! A line reads (proc(5)):
//!
//! ```text
//! 36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//! (1)(2)(3)   (4)   (5)         (6)       (7)    (8) (9)   (10)      (11)
//! ```
//!
//! mount id, parent id, major:minor, root, mount point, mount options, optional fields up to
//! a lone `-`, then the file-system type, the source and the super options. The kernel writes
//! a space, tab, newline and backslash inside the path fields and the source as an octal
//! escape (`\040`, `\011`, `\012`, `\134`); [`unescape`] undoes them, byte-exactly, so a
//! mount point that is not UTF-8 comes back as the same path. Lines that do not have this
//! shape are skipped, never an error: the text is the kernel's, and a parser that refused it
//! would take DAX detection or mount bookkeeping down with it.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// Where the current process's mount table is.
pub const SELF_MOUNTINFO: &str = "/proc/self/mountinfo";

/// One mount: one line of mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    pub mount_id: u64,
    pub parent_id: u64,
    /// The directory of the mounted file system that is mounted here (`/` for a whole one).
    pub root: PathBuf,
    pub mount_point: PathBuf,
    /// The file-system type, with its subtype if any (`ext4`, `fuse.linefs`, `fuse`).
    pub fs_type: String,
    /// The source (a device, `tmpfs`, the `fsname` of a FUSE mount), unescaped.
    pub source: String,
    /// Per-mount options (`rw`, `nosuid`, `relatime`, ...).
    pub mount_options: Vec<String>,
    /// Per-super-block options (`rw`, `dax=always`, `user_id=0`, ...).
    pub super_options: Vec<String>,
}

impl MountInfo {
    /// Every option of the mount: the per-mount ones, then the super-block ones.
    pub fn options(&self) -> impl Iterator<Item = &str> {
        self.mount_options.iter().chain(&self.super_options).map(String::as_str)
    }

    /// Whether this is a FUSE file-system mount (type `fuse` or `fuse.SUBTYPE`; not
    /// `fuseblk`, which linefs never mounts).
    pub fn is_fuse(&self) -> bool {
        self.fs_type == "fuse" || self.fs_type.starts_with("fuse.")
    }
}

/// Undoes mountinfo's octal escapes: a backslash followed by three octal digits of a value
/// up to 255 is that byte; anything else is kept as it is.
pub fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let digits = &b[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let v = digits.iter().fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

fn path(field: &str) -> PathBuf {
    PathBuf::from(OsString::from_vec(unescape(field)))
}

fn options(field: &str) -> Vec<String> {
    field.split(',').filter(|o| !o.is_empty()).map(str::to_string).collect()
}

/// Parses one line; None if it does not have mountinfo's shape.
pub fn parse_line(line: &str) -> Option<MountInfo> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    // Six fixed fields, then the optional ones, then the separator.
    let sep = fields.iter().skip(6).position(|f| *f == "-")? + 6;
    let fs_type = fields.get(sep + 1)?;
    Some(MountInfo {
        mount_id: fields[0].parse().ok()?,
        parent_id: fields[1].parse().ok()?,
        root: path(fields[3]),
        mount_point: path(fields[4]),
        fs_type: (*fs_type).to_string(),
        source: String::from_utf8_lossy(&unescape(fields.get(sep + 2).copied().unwrap_or(""))).into_owned(),
        mount_options: options(fields[5]),
        super_options: options(fields.get(sep + 3).copied().unwrap_or("")),
    })
}

/// Parses mountinfo text, in its order (a mount comes after the mounts it sits on); lines of
/// another shape are skipped.
pub fn parse(text: &str) -> Vec<MountInfo> {
    text.lines().filter_map(parse_line).collect()
}

/// The current process's mounts: [`SELF_MOUNTINFO`] parsed.
pub fn read() -> std::io::Result<Vec<MountInfo>> {
    Ok(parse(&std::fs::read_to_string(SELF_MOUNTINFO)?))
}

/// The topmost mount whose mount point is exactly `path`, if `path` is a mount point.
pub fn mounted_at<'a>(mounts: &'a [MountInfo], path: &Path) -> Option<&'a MountInfo> {
    mounts.iter().rev().find(|m| m.mount_point == path)
}

/// The mount that holds `path` (absolute, canonical): the one with the longest mount point
/// that contains it, the last listed among equals (the one on top).
pub fn holding<'a>(mounts: &'a [MountInfo], path: &Path) -> Option<&'a MountInfo> {
    let mut best: Option<(usize, &MountInfo)> = None;
    for m in mounts.iter().filter(|m| path.starts_with(&m.mount_point)) {
        let depth = m.mount_point.components().count();
        if best.is_none_or(|(d, _)| depth >= d) {
            best = Some((depth, m));
        }
    }
    best.map(|(_, m)| m)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
36 22 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 propagate_from:2 - ext3 /dev/root rw,errors=continue
42 22 0:39 / /tmp/x rw,nosuid,nodev - fuse.linefs linefs rw,user_id=0,group_id=0
43 42 0:40 / /tmp/x rw - fuse my\\040src rw
44 22 8:2 / /media/usb rw - fuseblk /dev/sdb1 rw
bad line
1 2 3 - x
";

    #[test]
    fn parses_every_field() {
        let m = parse(INFO);
        assert_eq!(m.len(), 5);
        assert_eq!(m[1].mount_id, 36);
        assert_eq!(m[1].parent_id, 22);
        assert_eq!(m[1].root, PathBuf::from("/mnt1"));
        assert_eq!(m[1].mount_point, PathBuf::from("/mnt/a b"));
        assert_eq!(m[1].fs_type, "ext3");
        assert_eq!(m[1].source, "/dev/root");
        assert_eq!(m[1].mount_options, ["rw", "noatime"]);
        assert_eq!(m[1].super_options, ["rw", "errors=continue"]);
        assert_eq!(m[2].fs_type, "fuse.linefs");
        assert_eq!(m[2].source, "linefs");
        assert!(m[2].options().any(|o| o == "nosuid"));
        assert!(m[2].options().any(|o| o == "user_id=0"));
        assert_eq!(m[3].source, "my src");
    }

    #[test]
    fn finds_mounts_by_path() {
        let m = parse(INFO);
        // The topmost of two mounts on one point.
        assert_eq!(mounted_at(&m, Path::new("/tmp/x")).map(|m| m.mount_id), Some(43));
        assert!(mounted_at(&m, Path::new("/tmp")).is_none());
        assert_eq!(holding(&m, Path::new("/tmp/x/y")).map(|m| m.mount_id), Some(43));
        assert_eq!(holding(&m, Path::new("/tmp/xy")).map(|m| m.mount_id), Some(22));
        assert_eq!(holding(&m, Path::new("/mnt/a b/c")).map(|m| m.mount_id), Some(36));
        assert!(holding(&[], Path::new("/")).is_none());
    }

    #[test]
    fn fuse_types() {
        let m = parse(INFO);
        assert!(!m[0].is_fuse());
        assert!(m[2].is_fuse() && m[3].is_fuse());
        assert!(!m[4].is_fuse());
    }

    #[test]
    fn unescapes_octal() {
        assert_eq!(unescape("a\\040b\\134c\\9"), b"a b\\c\\9");
        // An escape at the very end, one cut short, and one above 255.
        assert_eq!(unescape("x\\011"), b"x\t");
        assert_eq!(unescape("x\\01"), b"x\\01");
        assert_eq!(unescape("\\777"), b"\\777");
        // Bytes that are not UTF-8 survive into the path.
        assert_eq!(path("/mnt/\\377").into_os_string().into_vec(), b"/mnt/\xff");
    }

    #[test]
    fn skips_lines_of_another_shape() {
        assert!(parse("garbage\n\n1 2 3 - x\n1 2 3 4 5 6 - \nx 2 0:1 / / rw - ext4 a b\n").is_empty());
    }

    #[test]
    fn reads_own_mounts() {
        let mounts = read().expect("read /proc/self/mountinfo");
        assert!(holding(&mounts, Path::new("/")).is_some(), "no mount holds /: {mounts:?}");
    }
}
