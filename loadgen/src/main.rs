//! `linefs-loadgen`: the processes `linefs bench offload` measures. One `write` process is
//! one libfs client: it attaches to its node's nicfs (`--nicfs SOCKET`, offload) or opens the
//! node's PM itself (host-only: it publishes its own log), writes files sequentially in
//! `--io`-sized writes into a directory of its own, shuts the client down (which publishes
//! everything) and prints one JSON line of what it did and what it cost. `spin` is the
//! CPU-bound co-runner: busy threads until its standard input closes.
//!
//! For `linefs bench replication` it also plays the chain baselines ([`chain`]): `hop` is
//! one hop of a bare loopback TCP chain (store in a PM file, persist, forward, ack), `push`
//! ([`push`]) sends generated data ([`gen`], of a chosen lz4-compressibility) down such a
//! chain with no file system, and `write --chain` is a host-only client that replicates its
//! own log down one, as Assise does.
//! What the verbs share (sizes, CPU time, the JSON lines, latency percentiles) is [`util`].
//!
//! Why a crate of its own: the client must be libfs used directly (no FUSE in the way), and
//! the dependency direction allows it nowhere else — libfs may not depend on the cli, the cli
//! drives processes and does not link libfs, and fuse-mount is the FUSE adapter (a load
//! generator there would be a second, unrelated binary linking fuser for nothing). Here it
//! is `linefs-loadgen → libfs → pm`, with a small build. The cli finds the binary beside
//! `linefs`, where `cargo build --bins` puts it (as it finds nicfs and kworker).
//!
//! Output contract of `write` (stdout, one JSON object per line): with `--wait-go`, first
//! `{"ready": true, ...}` once the client is mounted and its directory exists; then it waits
//! for one byte on stdin (EOF instead: it exits without writing, status 3) and finally
//! prints the result object (see [`write::run`]). Errors go to stderr as one line, exit 1.
//! `--cpus LIST` pins the process before any thread starts, so every thread (libfs's
//! publisher, reader threads) inherits it.

mod chain;
mod gen;
mod push;
mod util;
mod write;

use std::io::Read;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use clap::{Parser, Subcommand};
use linefs_pm::cpus::{self, CpuList};

#[derive(Parser)]
#[command(
    name = "linefs-loadgen",
    version,
    about = "One libfs client writing files sequentially, or a CPU-bound co-runner"
)]
struct Cli {
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Subcommand)]
enum Verb {
    /// Mount (or attach), write `--bytes` into `--files` files of a new directory in `--io`
    /// writes, shut down (publishes everything), print one JSON line.
    Write(write::WriteArgs),
    /// One hop of a bare loopback TCP chain: store, persist, forward, ack (until stdin closes).
    Hop(chain::HopArgs),
    /// Send `--bytes` of generated data down a chain with acks, no file system.
    Push(push::PushArgs),
    /// Busy-loop `--threads` threads until standard input closes (or a signal).
    Spin {
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// CPUs to run on, e.g. `0` or `0-2`.
        #[arg(long, value_parser = cpus::parse)]
        cpus: Option<CpuList>,
        /// Start a session of its own first (`setsid`): the scheduler's autogroup then
        /// treats it as an application of its own, as a co-tenant would be.
        #[arg(long)]
        session: bool,
    },
}

/// Pins the calling thread (call it before starting any other: they inherit it).
pub fn pin(cpus: &CpuList) -> Result<(), String> {
    cpus.pin().map_err(|e| format!("pin to CPUs {:?}: {e}", cpus.0))
}

/// The co-runner: `threads` threads spinning on arithmetic until stdin reaches EOF (the
/// bench closes it; if the bench dies, the kernel does), so it never outlives its driver.
fn spin(threads: usize, cpus: Option<&CpuList>, session: bool) -> Result<(), String> {
    if session {
        rustix::process::setsid().map_err(|e| format!("setsid: {e}"))?;
    }
    if let Some(c) = cpus {
        pin(c)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let spins = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..threads.max(1))
        .map(|_| {
            let (stop, spins) = (stop.clone(), spins.clone());
            std::thread::spawn(move || {
                let mut x: u64 = 1;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..4096 {
                        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407));
                    }
                    n += 1;
                }
                spins.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    tracing::debug!(rounds = spins.load(Ordering::Relaxed), "co-runner stopped");
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    linefs_logging::init("warn");
    let res = match cli.verb {
        Verb::Write(args) => write::main(&args),
        Verb::Hop(args) => chain::hop(&args).map(|()| ExitCode::SUCCESS),
        Verb::Push(args) => match push::run(&args) {
            Ok(Some(v)) => util::emit(&v).map(|()| ExitCode::SUCCESS),
            Ok(None) => Ok(ExitCode::from(3)),
            Err(e) => Err(e),
        },
        Verb::Spin { threads, cpus, session } => spin(threads, cpus.as_ref(), session).map(|()| ExitCode::SUCCESS),
    };
    match res {
        Ok(code) => code,
        Err(e) => {
            eprintln!("linefs-loadgen: {}", e.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let spin = |cpus: &str| Cli::try_parse_from(["linefs-loadgen", "spin", "--cpus", cpus]).map(|c| c.verb);
        assert!(matches!(spin("1,0-1"), Ok(Verb::Spin { cpus: Some(c), .. }) if c == CpuList(vec![0, 1])));
        assert!(spin("2-1").is_err());
        assert!(spin("x").is_err());
    }
}
