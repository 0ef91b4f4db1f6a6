//! A real `nicfs` process serving a formatted node in a temporary directory, for the tests
//! that run libfs in the offload mode.
#![allow(dead_code)]

use libfs::{Fs, FsOptions};
use linefs_pm::layout::FormatParams;

/// A formatted node in a temporary directory and the `nicfs` serving it (killed on drop).
pub struct Nicfs {
    pub dir: tempfile::TempDir,
    pub node: std::path::PathBuf,
    pub socket: std::path::PathBuf,
    child: std::process::Child,
    args: Vec<String>,
}

impl Nicfs {
    /// The `nicfs` binary next to this test's directory (built by `cargo build --bins`).
    fn binary() -> std::path::PathBuf {
        let exe = std::env::current_exe().expect("test binary path");
        let bin = exe.parent().and_then(|deps| deps.parent()).expect("target directory").join("nicfs");
        assert!(bin.exists(), "{} is missing: build the binaries first (cargo build --bins)", bin.display());
        bin
    }

    /// A 64 MiB node.
    pub fn start() -> Nicfs {
        Nicfs::start_with(&FormatParams { size: 64 << 20, log_size: 8 << 20, log_slots: 2, inodes: 4096 })
    }

    pub fn start_with(params: &FormatParams) -> Nicfs {
        Nicfs::start_with_args(params, &[])
    }

    /// [`Nicfs::start_with`], nicfs given `args` too (limits, a trusted group).
    pub fn start_with_args(params: &FormatParams, args: &[&str]) -> Nicfs {
        let dir = tempfile::tempdir().expect("tempdir");
        let node = dir.path().join("node0");
        linefs_pm::mkfs::format_dir(&node, params).expect("format");
        let socket = dir.path().join("nicfs.sock");
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let child = spawn(&node, &socket, &args);
        Nicfs { dir, node, socket, child, args }
    }

    /// Kills this nicfs (SIGKILL) and starts another on the same node, which recovers it.
    pub fn restart(&mut self) {
        self.kill();
        self.child = spawn(&self.node, &self.socket, &self.args);
    }
}

/// Starts nicfs on `node` and waits until it accepts connections on `socket`.
fn spawn(node: &std::path::Path, socket: &std::path::Path, args: &[String]) -> std::process::Child {
    let mut child = std::process::Command::new(Nicfs::binary())
        .arg("--node")
        .arg(node)
        .arg("--socket")
        .arg(socket)
        .args(args)
        .env("RUST_LOG", std::env::var("NICFS_LOG").unwrap_or_else(|_| "warn".into()))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start nicfs");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        if let Ok(Some(st)) = child.try_wait() {
            panic!("nicfs exited at start: {st}");
        }
        assert!(std::time::Instant::now() < deadline, "nicfs did not serve within 20 s");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child
}

impl Nicfs {
    /// A client attached to this nicfs with `opts` (the node and socket filled in).
    pub fn attach(&self, opts: FsOptions) -> Fs {
        Fs::mount(FsOptions { pm_path: self.node.clone(), nicfs: Some(self.socket.clone()), ..opts })
            .expect("attach to nicfs")
    }

    /// Whether the nicfs process still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILLs it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Nicfs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
