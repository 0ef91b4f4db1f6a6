//! linefs-passthrough: the "FUSE passthrough of the node-local directory" baseline of the
//! benchmarks (DESIGN section 8), kept out of the production FUSE crate (`fuse-mount`).
//!
//! - [`fs`]: [`Passthrough`], a fuser file system forwarding every call to a source directory;
//!   `host` holds the host calls and conversions it makes, `sys` the one raw system call.
//! - [`daemon`]: the `linefs-passthrough` program as a library function (`--ready-fd`,
//!   `--status-file`, SIGINT/SIGTERM as `linefs-fuse` has them), so that `linefs bench` can
//!   also run it from the `linefs` binary. It mounts with `fuse_mount::mount`, as linefs does,
//!   so that the two differ only in what serves the requests.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod daemon;
pub mod fs;
mod host;
mod sys;

pub use fs::Passthrough;
pub use host::raise_nofile_limit;
