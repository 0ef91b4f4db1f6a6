//! Links the system LevelDB (Debian `libleveldb-dev`, C API in `leveldb/c.h`) for
//! `linefs bench leveldb`; `scripts/install-deps.sh` installs it.

fn main() {
    println!("cargo:rustc-link-lib=leveldb");
    println!("cargo:rerun-if-changed=build.rs");
}
