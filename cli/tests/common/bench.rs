//! What the bench tests share: running the built `linefs bench …` with its JSON report on
//! stdout, bounded in time (killed, and the test failed, past the limit; its stderr shown
//! either way), and the check that a figure is a positive number.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const LINEFS: &str = env!("CARGO_BIN_EXE_linefs");

/// Runs `linefs bench ARGS` (the mount daemon from linefs itself), at most `limit`; returns
/// its JSON report.
pub fn run<I, S>(args: I, limit: Duration) -> Value
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<S> = args.into_iter().collect();
    let shown: Vec<String> = args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
    let start = Instant::now();
    let mut child = Command::new(LINEFS)
        .env("LINEFS_FUSE", "self")
        .arg("bench")
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run linefs");
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect");
            panic!("linefs bench {shown:?} took over {limit:?}; killed\n{}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("collect");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "linefs bench {shown:?} -> {} in {:.1} s\n{stdout}{}",
        out.status,
        start.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "linefs bench {shown:?} failed");
    serde_json::from_str(stdout.trim()).expect("one JSON report on stdout")
}

/// `v[key]` as a positive, finite number (the test fails otherwise).
pub fn positive(v: &Value, key: &str, what: &str) -> f64 {
    let x = v[key].as_f64().unwrap_or(f64::NAN);
    assert!(x > 0.0 && x.is_finite(), "{what}: {key} = {x} (should be positive)\n{v}");
    x
}
