//! Mount options: parsing `-o opt,opt,...` into a [`MountConfig`].
//!
//! Defaults: `fsname=linefs`, subtype `linefs` (the mount reads `fuse.linefs`),
//! `allow_other`, `default_permissions`, `nosuid`, `nodev`. Options that turn these off:
//! `nosubtype` (plain `fuse`, as xfstests needs), `noallow_other`, `nodefault_permissions`,
//! `suid`, `dev`. Mount flags (`ro`, `rw`, `noexec`, `noatime`, ...) become `mount(2)` flags.
//! Kernel FUSE options (`max_read=N`, `blksize=N`) are passed through. `writeback_cache` /
//! `no_writeback_cache` turn the kernel's writeback cache on or off for a linefs mount
//! (default: [`MountConfig::writeback_cache`]); `read_ahead_kb=N` sets the mount's readahead
//! window. Anything else is rejected with its name, so
//! that a typo does not silently mount with the wrong semantics.

use libfs::AtimePolicy;
use thiserror::Error;

/// A bad mount option.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum OptionError {
    #[error("unknown mount option {0:?}")]
    Unknown(String),
    #[error("mount option {option:?} needs a value ({hint})")]
    BadValue { option: String, hint: &'static str },
    #[error("mount option {0:?} is set by linefs-fuse itself")]
    Reserved(String),
}

/// How to mount: the parsed mount options plus the session's thread count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountConfig {
    /// The mount's source, shown by `mount` and `df`.
    pub fsname: String,
    /// `Some("linefs")` mounts as `fuse.linefs`; `None` as plain `fuse`.
    pub subtype: Option<String>,
    pub allow_other: bool,
    pub default_permissions: bool,
    pub read_only: bool,
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
    pub noatime: bool,
    pub nodiratime: bool,
    pub relatime: Option<bool>,
    pub sync: bool,
    pub dirsync: bool,
    /// Kernel FUSE options passed through verbatim (`max_read=N`, `blksize=N`).
    pub kernel_options: Vec<String>,
    /// Request-serving threads.
    pub threads: usize,
    /// The kernel's writeback cache (`FUSE_WRITEBACK_CACHE`): `Some` when an option chose;
    /// `None` leaves it to the mount's mode (see `crate::daemon`).
    pub writeback_cache: Option<bool>,
    /// `read_ahead_kb=N`: the mount's readahead window (its backing device's
    /// `read_ahead_kb` in sysfs); `None` leaves it to the backend (see `crate::daemon`).
    pub read_ahead_kb: Option<u32>,
}

impl Default for MountConfig {
    fn default() -> MountConfig {
        MountConfig {
            fsname: "linefs".to_string(),
            subtype: Some("linefs".to_string()),
            allow_other: true,
            default_permissions: true,
            read_only: false,
            nosuid: true,
            nodev: true,
            noexec: false,
            noatime: false,
            nodiratime: false,
            relatime: None,
            sync: false,
            dirsync: false,
            kernel_options: Vec::new(),
            threads: 4,
            writeback_cache: None,
            read_ahead_kb: None,
        }
    }
}

impl MountConfig {
    /// Applies a list of `-o` arguments, each of which may hold several comma-separated
    /// options. Later options override earlier ones.
    pub fn apply_options<S: AsRef<str>>(&mut self, args: &[S]) -> Result<(), OptionError> {
        for arg in args {
            for opt in arg.as_ref().split(',').map(str::trim).filter(|o| !o.is_empty()) {
                self.apply_one(opt)?;
            }
        }
        Ok(())
    }

    fn apply_one(&mut self, opt: &str) -> Result<(), OptionError> {
        let (key, value) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        let flag = |v: Option<&str>| -> Result<(), OptionError> {
            match v {
                None => Ok(()),
                Some(_) => Err(OptionError::Unknown(opt.to_string())),
            }
        };
        match key {
            "fsname" => match value {
                Some(v) if !v.is_empty() && !v.contains(',') => self.fsname = v.to_string(),
                _ => return Err(bad(opt, "fsname=NAME")),
            },
            "subtype" => match value {
                Some(v) if valid_subtype(v) => self.subtype = Some(v.to_string()),
                _ => return Err(bad(opt, "subtype=NAME, letters digits _ -")),
            },
            "nosubtype" => {
                flag(value)?;
                self.subtype = None;
            }
            "allow_other" => {
                flag(value)?;
                self.allow_other = true;
            }
            "noallow_other" => {
                flag(value)?;
                self.allow_other = false;
            }
            "default_permissions" => {
                flag(value)?;
                self.default_permissions = true;
            }
            "nodefault_permissions" => {
                flag(value)?;
                self.default_permissions = false;
            }
            "ro" | "rw" => {
                flag(value)?;
                self.read_only = key == "ro";
            }
            "suid" | "nosuid" => {
                flag(value)?;
                self.nosuid = key == "nosuid";
            }
            "dev" | "nodev" => {
                flag(value)?;
                self.nodev = key == "nodev";
            }
            "exec" | "noexec" => {
                flag(value)?;
                self.noexec = key == "noexec";
            }
            "atime" | "noatime" => {
                flag(value)?;
                self.noatime = key == "noatime";
            }
            "diratime" | "nodiratime" => {
                flag(value)?;
                self.nodiratime = key == "nodiratime";
            }
            "relatime" | "norelatime" | "strictatime" => {
                flag(value)?;
                self.relatime = Some(key == "relatime");
            }
            "sync" | "async" => {
                flag(value)?;
                self.sync = key == "sync";
            }
            "dirsync" => {
                flag(value)?;
                self.dirsync = true;
            }
            // Options mount(8) and mount.fuse3 add that mean nothing here.
            "defaults" | "auto" | "noauto" | "user" | "nouser" | "_netdev" | "nofail" => {}
            "max_read" | "blksize" => match value.and_then(|v| v.parse::<u32>().ok()) {
                Some(n) if n > 0 => self.kernel_options.push(format!("{key}={n}")),
                _ => return Err(bad(opt, "a positive number")),
            },
            "writeback_cache" | "no_writeback_cache" => {
                flag(value)?;
                self.writeback_cache = Some(key == "writeback_cache");
            }
            "read_ahead_kb" => match value.and_then(|v| v.parse::<u32>().ok()) {
                Some(n) if n <= 1 << 20 => self.read_ahead_kb = Some(n),
                _ => return Err(bad(opt, "read_ahead_kb=N with N <= 1048576")),
            },
            "threads" => match value.and_then(|v| v.parse::<usize>().ok()) {
                Some(n) if (1..=256).contains(&n) => self.threads = n,
                _ => return Err(bad(opt, "threads=N with 1 <= N <= 256")),
            },
            "fd" | "rootmode" | "user_id" | "group_id" => return Err(OptionError::Reserved(opt.to_string())),
            _ => return Err(OptionError::Unknown(opt.to_string())),
        }
        Ok(())
    }

    /// How reads of files and listings of directories update access times: never on a
    /// read-only or `noatime` mount, always with `strictatime`, else as `relatime` (Linux's
    /// default); `nodiratime` turns it off for directories.
    pub fn atime_policies(&self) -> (AtimePolicy, AtimePolicy) {
        let files = if self.read_only || self.noatime {
            AtimePolicy::Never
        } else if self.relatime == Some(false) {
            AtimePolicy::Strict
        } else {
            AtimePolicy::Relative
        };
        let dirs = if self.nodiratime { AtimePolicy::Never } else { files };
        (files, dirs)
    }

    /// The `mount(2)` file-system type: `fuse.SUBTYPE` or `fuse`.
    pub fn fstype(&self) -> String {
        match &self.subtype {
            Some(s) => format!("fuse.{s}"),
            None => "fuse".to_string(),
        }
    }

    /// The `mount(2)` flags.
    pub fn ms_flags(&self) -> libc::c_ulong {
        let mut f: libc::c_ulong = 0;
        let set = |f: &mut libc::c_ulong, on: bool, bit: libc::c_ulong| {
            if on {
                *f |= bit;
            }
        };
        set(&mut f, self.read_only, libc::MS_RDONLY);
        set(&mut f, self.nosuid, libc::MS_NOSUID);
        set(&mut f, self.nodev, libc::MS_NODEV);
        set(&mut f, self.noexec, libc::MS_NOEXEC);
        set(&mut f, self.noatime, libc::MS_NOATIME);
        set(&mut f, self.nodiratime, libc::MS_NODIRATIME);
        set(&mut f, self.relatime == Some(true), libc::MS_RELATIME);
        set(&mut f, self.relatime == Some(false), libc::MS_STRICTATIME);
        set(&mut f, self.sync, libc::MS_SYNCHRONOUS);
        set(&mut f, self.dirsync, libc::MS_DIRSYNC);
        f
    }

    /// The equivalent fuser options, for the `fusermount3` fallback (non-root users).
    pub fn fuser_options(&self) -> Vec<fuser::MountOption> {
        use fuser::MountOption as M;
        let mut v = vec![M::FSName(self.fsname.clone())];
        if let Some(s) = &self.subtype {
            v.push(M::Subtype(s.clone()));
        }
        if self.default_permissions {
            v.push(M::DefaultPermissions);
        }
        v.push(if self.read_only { M::RO } else { M::RW });
        v.push(if self.nosuid { M::NoSuid } else { M::Suid });
        v.push(if self.nodev { M::NoDev } else { M::Dev });
        if self.noexec {
            v.push(M::NoExec);
        }
        if self.noatime {
            v.push(M::NoAtime);
        }
        if self.sync {
            v.push(M::Sync);
        }
        if self.dirsync {
            v.push(M::DirSync);
        }
        for o in &self.kernel_options {
            v.push(M::CUSTOM(o.clone()));
        }
        v
    }
}

fn bad(opt: &str, hint: &'static str) -> OptionError {
    OptionError::BadValue { option: opt.to_string(), hint }
}

fn valid_subtype(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c = MountConfig::default();
        assert_eq!(c.fstype(), "fuse.linefs");
        assert!(c.allow_other && c.default_permissions);
        assert_eq!(c.ms_flags(), libc::MS_NOSUID | libc::MS_NODEV);
    }

    #[test]
    fn parses_options() {
        let mut c = MountConfig::default();
        c.apply_options(&["nosubtype,fsname=foo", "ro", "nodefault_permissions,max_read=4096"]).unwrap();
        assert_eq!(c.fstype(), "fuse");
        assert_eq!(c.fsname, "foo");
        assert!(c.read_only && !c.default_permissions);
        assert_eq!(c.kernel_options, vec!["max_read=4096".to_string()]);
        assert!(c.ms_flags() & libc::MS_RDONLY != 0);
    }

    #[test]
    fn atime_policies() {
        let policies = |opts: &str| {
            let mut c = MountConfig::default();
            c.apply_options(&[opts]).unwrap();
            c.atime_policies()
        };
        assert_eq!(policies("rw"), (AtimePolicy::Relative, AtimePolicy::Relative));
        assert_eq!(policies("strictatime"), (AtimePolicy::Strict, AtimePolicy::Strict));
        assert_eq!(policies("strictatime,nodiratime"), (AtimePolicy::Strict, AtimePolicy::Never));
        assert_eq!(policies("noatime"), (AtimePolicy::Never, AtimePolicy::Never));
        assert_eq!(policies("ro,strictatime"), (AtimePolicy::Never, AtimePolicy::Never));
    }

    #[test]
    fn writeback_cache_option() {
        let mut c = MountConfig::default();
        assert_eq!(c.writeback_cache, None);
        c.apply_options(&["writeback_cache"]).unwrap();
        assert_eq!(c.writeback_cache, Some(true));
        c.apply_options(&["no_writeback_cache"]).unwrap();
        assert_eq!(c.writeback_cache, Some(false));
        assert!(matches!(c.apply_options(&["writeback_cache=1"]), Err(OptionError::Unknown(_))));
        c.apply_options(&["read_ahead_kb=128"]).unwrap();
        assert_eq!(c.read_ahead_kb, Some(128));
        assert!(matches!(c.apply_options(&["read_ahead_kb=x"]), Err(OptionError::BadValue { .. })));
    }

    #[test]
    fn rejects_bad_options() {
        let mut c = MountConfig::default();
        assert_eq!(c.apply_options(&["bogus"]), Err(OptionError::Unknown("bogus".into())));
        assert!(matches!(c.apply_options(&["fd=3"]), Err(OptionError::Reserved(_))));
        assert!(matches!(c.apply_options(&["max_read=x"]), Err(OptionError::BadValue { .. })));
        assert!(matches!(c.apply_options(&["ro=1"]), Err(OptionError::Unknown(_))));
        assert!(matches!(c.apply_options(&["subtype=a b"]), Err(OptionError::BadValue { .. })));
    }
}
