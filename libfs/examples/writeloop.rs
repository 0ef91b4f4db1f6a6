//! Micro-benchmark of the libfs write path without FUSE: 16 KiB appends to one file.
//! `cargo run --release -p libfs --example writeloop -- NODEDIR [MiB]` (NODEDIR is replaced)

use libfs::*;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = std::path::PathBuf::from(args.next().expect("NODEDIR"));
    let mib: u64 = args.next().map(|s| s.parse().expect("MiB")).unwrap_or(256);
    let _ = std::fs::remove_dir_all(&path);
    linefs_pm::mkfs::format_dir(&path, &linefs_pm::layout::FormatParams::for_size(1 << 30)).expect("format");
    let bg = std::env::var_os("NO_BG").is_none();
    let fs =
        Fs::mount(FsOptions { pm_path: path.clone(), background_publish: bg, ..Default::default() }).expect("mount");
    let root = Cred::root();
    let (a, _) = fs.create(&root, ROOT_INO, b"f", 0o644, 0, libc::O_RDWR).expect("create");
    let buf = vec![7u8; 16384];
    let n = mib * 64;
    let t = Instant::now();
    for i in 0..n {
        fs.write(&root, a.ino, i * 16384, &buf).expect("write");
    }
    let el = t.elapsed();
    println!(
        "{} writes of 16 KiB: {:.1} MB/s, {:.2} us/write",
        n,
        (n * 16384) as f64 / el.as_secs_f64() / 1e6,
        el.as_secs_f64() * 1e6 / n as f64
    );
    let t = Instant::now();
    fs.sync_all().expect("sync");
    println!("final publish: {:?}", t.elapsed());
}
