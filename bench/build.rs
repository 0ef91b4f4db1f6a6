//! Links the system LevelDB (Debian `libleveldb-dev`, C API in `leveldb/c.h`) for
//! `linefs bench leveldb` when it is there; `scripts/install-deps.sh` installs it. Without it
//! this crate, and so the `linefs` command, builds all the same (cfg `linefs_leveldb` unset)
//! and that one benchmark says why it cannot run. The operator CLI has no build script of its
//! own: this probe is the only place the library is looked for. `LINEFS_NO_LEVELDB=1` builds without it on purpose; `LEVELDB_LIB_DIR`
//! names a directory holding the library when it is not in a standard place.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo::rustc-check-cfg=cfg(linefs_leveldb)");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=LINEFS_NO_LEVELDB");
    println!("cargo:rerun-if-env-changed=LEVELDB_LIB_DIR");
    if std::env::var_os("LINEFS_NO_LEVELDB").is_some_and(|v| v != "0") {
        println!("cargo:warning=built without LevelDB (LINEFS_NO_LEVELDB): `linefs bench leveldb` is unavailable");
        return;
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("LEVELDB_LIB_DIR").map(PathBuf::from).into_iter().collect();
    let multiarch = format!(
        "/usr/lib/{}-linux-gnu",
        std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".to_string())
    );
    dirs.extend([multiarch.as_str(), "/usr/lib", "/usr/local/lib", "/usr/lib64"].map(PathBuf::from));
    let header = ["/usr/include/leveldb/c.h", "/usr/local/include/leveldb/c.h"].iter().any(|h| Path::new(h).is_file());
    let lib = dirs.iter().find(|d| d.join("libleveldb.so").exists() || d.join("libleveldb.a").exists());
    match lib {
        Some(dir) if header || std::env::var_os("LEVELDB_LIB_DIR").is_some() => {
            println!("cargo:rustc-link-search=native={}", dir.display());
            println!("cargo:rustc-link-lib=leveldb");
            println!("cargo:rustc-cfg=linefs_leveldb");
        }
        _ => println!(
            "cargo:warning=libleveldb-dev not found: building without `linefs bench leveldb` (scripts/install-deps.sh installs it)"
        ),
    }
}
