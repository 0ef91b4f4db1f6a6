//! Starting the `linefs-fuse` daemon built with these tests.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Starts `linefs-fuse --pm PM MNT` and returns once it reports `ready` (the mount serves).
pub fn start_linefs_fuse(pm: &Path, mnt: &Path) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_linefs-fuse"))
        .arg("--pm")
        .arg(pm)
        .arg(mnt)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn linefs-fuse");
    let out = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).expect("read readiness");
    assert_eq!(line.trim(), "ready", "linefs-fuse did not become ready");
    child
}
