//! fuse-mount: the FUSE front end of linefs.
//!
//! Two layers, each in its own module:
//!
//! - [`adapter`]: [`LinefsFuse`], a thin `fuser::Filesystem` adapter over [`libfs::Fs`]. Each
//!   method opens a tracing span, calls libfs, converts the result and replies. libfs decides
//!   every errno; the adapter only adds `EINVAL`/`ENOSYS` for requests it cannot express.
//!   [`cache`] decides what the kernel may cache and for how long; [`invalidate`] drops the
//!   kernel's caches of what another client of the node is about to change (offload).
//! - [`mount`]: mounting and unmounting a session (our own `mount(2)` so that the mount shows as
//!   `fuse.linefs`, with a `fusermount3` fallback for non-root users), and [`options`], the
//!   parsing of `-o` mount options.
//!
//! [`daemon`] is the whole `linefs-fuse` program as a library function, so that the `linefs`
//! CLI can also run it from its own binary. The benchmarks' FUSE passthrough baseline is a
//! crate of its own (`linefs-passthrough`), mounted the same way.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod adapter;
pub mod cache;
pub mod creds;
pub mod daemon;
pub mod invalidate;
pub mod mount;
pub mod options;

pub use adapter::LinefsFuse;
pub use linefs_pm::signals::SignalSet;
pub use mount::{MountError, MountedSession};
pub use options::MountConfig;
