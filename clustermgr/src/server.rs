//! A ZooKeeper server on loopback from the Debian package `zookeeper` (with
//! `libslf4j-java` for its logger): one standalone server or a 3-server ensemble, each in
//! its own directory under the caller's, its pid recorded there so that a later
//! `linefs down` ([`ZkServer::stop_recorded`]) stops what `linefs up` started.
//!
//! Layout under the caller's directory, per server `i` (1-based): `zk<i>/zoo.cfg`,
//! `zk<i>/data/` (snapshots, transaction log, `myid`), `zk<i>/zookeeper.log` (its stdout and
//! stderr), `zk<i>/zookeeper.pid`; and `zookeeper.connect`, the connection string. Readiness: `ruok` answers `imok` and `srvr` names a mode
//! (standalone, leader or follower: the server serves).

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Where the Debian packages put the jars.
pub const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
pub const SLF4J_JAR: &str = "/usr/share/java/slf4j-simple.jar";

/// The file under the caller's directory that records the servers' connection string.
pub const CONNECT_FILE: &str = "zookeeper.connect";

/// The tick. A session expires at the first tick past its timeout, so a short tick keeps the
/// detection of a crashed member close to the session timeout
/// ([`crate::driver::DEFAULT_SESSION_TIMEOUT`]).
pub const TICK_MS: u32 = 100;
/// The session timeouts a client may ask for (the server clamps into them): 0.2–10 s.
pub const MIN_SESSION_MS: u32 = 2 * TICK_MS;
pub const MAX_SESSION_MS: u32 = 10_000;
/// The ensemble's limits in ticks: 10 s for a follower to connect and sync with the leader,
/// 2 s for it to answer.
const INIT_LIMIT_TICKS: u32 = 10_000 / TICK_MS;
const SYNC_LIMIT_TICKS: u32 = 2_000 / TICK_MS;

const HINT: &str = "install the Debian packages zookeeper and libslf4j-java (scripts/install-deps.sh)";

/// Why a server could not be started or stopped. Each reads as one line.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("java not found: {HINT}")]
    JavaMissing,
    #[error("{0} not found: {HINT}")]
    JarMissing(&'static str),
    #[error("ZooKeeper port 127.0.0.1:{0} is already in use")]
    PortInUse(u16),
    #[error("ZooKeeper server {server} exited during start-up ({status}): {reason} (see {log})")]
    Exited { server: usize, status: String, reason: String, log: String },
    #[error("ZooKeeper server {server} not serving after {waited:?} (see {log})")]
    NotReady { server: usize, waited: Duration, log: String },
    #[error("ZooKeeper: {what}: {err}")]
    Io { what: String, err: std::io::Error },
    #[error("ZooKeeper: a server count of {0} (1 or an odd number up to 7)")]
    BadCount(usize),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServerError {
    let what = what.into();
    move |err| ServerError::Io { what, err }
}

/// One server's ports.
#[derive(Debug, Clone, Copy)]
struct Ports {
    client: u16,
    quorum: u16,
    election: u16,
}

#[derive(Debug)]
struct Proc {
    /// 1-based server id (its `myid`).
    id: usize,
    dir: PathBuf,
    ports: Ports,
    child: Option<Child>,
}

/// Started ZooKeeper servers. Dropping it kills them (kill -9): call
/// [`ZkServer::detach`] to leave them running (`linefs up`).
#[derive(Debug)]
pub struct ZkServer {
    procs: Vec<Proc>,
    detached: bool,
}

/// Ports free on 127.0.0.1 now (all held open together, so distinct).
pub fn free_ports(n: usize) -> Result<Vec<u16>, ServerError> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()
        .map_err(io("binding a free port"))?;
    ls.iter().map(|l| l.local_addr().map(|a| a.port()).map_err(io("reading a bound port"))).collect()
}

/// Sends a four-letter command and returns the answer ("" if the server is not up).
pub fn four_letter(port: u16, cmd: &str) -> String {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(300)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    if s.write_all(cmd.as_bytes()).is_err() {
        return String::new();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn check_installed(java: &str) -> Result<(), ServerError> {
    for jar in [ZOOKEEPER_JAR, SLF4J_JAR] {
        if !Path::new(jar).exists() {
            return Err(ServerError::JarMissing(jar));
        }
    }
    match Command::new(java).arg("-version").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ServerError::JavaMissing),
        Err(e) => Err(io("running java -version")(e)),
    }
}

impl ZkServer {
    /// Starts `servers` servers (1: standalone; 3: an ensemble) under `dir` with client
    /// ports chosen free, and waits until every one serves (at most `ready_within`).
    pub fn start(dir: &Path, servers: usize, ready_within: Duration) -> Result<ZkServer, ServerError> {
        let ports = free_ports(servers * 3)?;
        let clients: Vec<u16> = ports[..servers].to_vec();
        Self::start_on(dir, &clients, &ports[servers..], ready_within)
    }

    /// Starts one server per client port (`peer_ports`: two per server, unused when
    /// standalone).
    pub fn start_on(
        dir: &Path,
        client_ports: &[u16],
        peer_ports: &[u16],
        ready_within: Duration,
    ) -> Result<ZkServer, ServerError> {
        let n = client_ports.len();
        if n == 0 || n.is_multiple_of(2) || n > 7 || (n > 1 && peer_ports.len() < 2 * n) {
            return Err(ServerError::BadCount(n));
        }
        check_installed("java")?;
        fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        // Absolute, so that `stop_recorded` recognises the servers' command lines.
        let dir = &dir.canonicalize().map_err(io(format!("resolving {}", dir.display())))?;
        for &p in client_ports {
            if TcpListener::bind(("127.0.0.1", p)).is_err() {
                return Err(ServerError::PortInUse(p));
            }
        }
        let procs: Vec<Proc> = (0..n)
            .map(|i| Proc {
                id: i + 1,
                dir: dir.join(format!("zk{}", i + 1)),
                ports: Ports {
                    client: client_ports[i],
                    quorum: peer_ports.get(2 * i).copied().unwrap_or(0),
                    election: peer_ports.get(2 * i + 1).copied().unwrap_or(0),
                },
                child: None,
            })
            .collect();
        let mut server = ZkServer { procs, detached: false };
        let all: Vec<Ports> = server.procs.iter().map(|p| p.ports).collect();
        for p in &server.procs {
            write_config(p, &all)?;
        }
        for i in 0..n {
            server.spawn(i)?;
        }
        server.wait_ready(ready_within)?;
        fs::write(dir.join(CONNECT_FILE), format!("{}\n", server.connect_string()))
            .map_err(io(format!("writing {}", dir.join(CONNECT_FILE).display())))?;
        Ok(server)
    }

    /// The connection string recorded by the servers started under `dir` (for the commands
    /// that follow `linefs up`), if any.
    pub fn recorded_connect(dir: &Path) -> Option<String> {
        let s = fs::read_to_string(dir.join(CONNECT_FILE)).ok()?;
        let s = s.trim();
        (!s.is_empty()).then(|| s.to_string())
    }

    fn spawn(&mut self, i: usize) -> Result<(), ServerError> {
        let ensemble = self.procs.len() > 1;
        let p = &mut self.procs[i];
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p.dir.join("zookeeper.log"))
            .map_err(io(format!("opening {}", p.dir.join("zookeeper.log").display())))?;
        let log2 = log.try_clone().map_err(io("duplicating the log descriptor"))?;
        let main = if ensemble {
            "org.apache.zookeeper.server.quorum.QuorumPeerMain"
        } else {
            "org.apache.zookeeper.server.ZooKeeperServerMain"
        };
        let child = Command::new("java")
            .args(["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dzookeeper.admin.enableServer=false"])
            .arg("-cp")
            .arg(format!("{ZOOKEEPER_JAR}:{SLF4J_JAR}"))
            .arg(main)
            .arg(p.dir.join("zoo.cfg"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            // Its own process group: a terminal's ^C to `linefs up` does not reach it.
            .process_group(0)
            .spawn()
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    ServerError::JavaMissing
                } else {
                    io("starting java")(e)
                }
            })?;
        let pid = child.id();
        p.child = Some(child);
        fs::write(p.dir.join("zookeeper.pid"), format!("{pid}\n")).map_err(io("writing zookeeper.pid"))?;
        tracing::info!(server = p.id, pid, port = p.ports.client, "ZooKeeper started");
        Ok(())
    }

    /// Waits until every running server serves.
    pub fn wait_ready(&mut self, within: Duration) -> Result<(), ServerError> {
        let deadline = Instant::now() + within;
        for p in &mut self.procs {
            let Some(child) = p.child.as_mut() else { continue };
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    p.child = None;
                    return Err(ServerError::Exited {
                        server: p.id,
                        status: status.to_string(),
                        reason: last_log_line(&p.dir.join("zookeeper.log")),
                        log: p.dir.join("zookeeper.log").display().to_string(),
                    });
                }
                if four_letter(p.ports.client, "ruok") == "imok"
                    && four_letter(p.ports.client, "srvr").contains("Mode:")
                {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(ServerError::NotReady {
                        server: p.id,
                        waited: within,
                        log: p.dir.join("zookeeper.log").display().to_string(),
                    });
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// The connection string of every server (`127.0.0.1:P1,127.0.0.1:P2,…`).
    pub fn connect_string(&self) -> String {
        self.procs.iter().map(|p| format!("127.0.0.1:{}", p.ports.client)).collect::<Vec<_>>().join(",")
    }

    pub fn client_port(&self, i: usize) -> u16 {
        self.procs[i].ports.client
    }

    pub fn len(&self) -> usize {
        self.procs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    /// The running servers' pids.
    pub fn pids(&self) -> Vec<u32> {
        self.procs.iter().filter_map(|p| p.child.as_ref().map(|c| c.id())).collect()
    }

    /// Kills server `i` (0-based) with SIGKILL, as a crash.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.procs[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
            let _ = fs::remove_file(self.procs[i].dir.join("zookeeper.pid"));
            tracing::info!(server = i + 1, "ZooKeeper killed");
        }
    }

    /// Starts server `i` again on the same directory and ports (no wait).
    pub fn restart(&mut self, i: usize) -> Result<(), ServerError> {
        self.kill(i);
        self.spawn(i)
    }

    /// The index of the ensemble's leader (or of the standalone server) as `srvr` says.
    pub fn leader(&self) -> Option<usize> {
        self.procs.iter().position(|p| {
            let s = four_letter(p.ports.client, "srvr");
            s.contains("Mode: leader") || s.contains("Mode: standalone")
        })
    }

    /// Leaves the servers running past this value (their pids stay recorded).
    pub fn detach(mut self) -> Vec<u32> {
        self.detached = true;
        self.pids()
    }

    /// Stops the servers whose pids are recorded under `dir` (what a `linefs up` with this
    /// directory started): SIGTERM, then SIGKILL after `grace`. A recorded pid that is no
    /// longer a ZooKeeper of this directory is left alone. Returns how many were stopped.
    pub fn stop_recorded(dir: &Path, grace: Duration) -> Result<usize, ServerError> {
        Self::signal_recorded(dir, Signal::SIGTERM, grace)
    }

    /// Kills the servers whose pids are recorded under `dir` with SIGKILL, as a crash, and
    /// waits until they are gone (as [`ZkServer::stop_recorded`] otherwise).
    pub fn kill_recorded(dir: &Path) -> Result<usize, ServerError> {
        Self::signal_recorded(dir, Signal::SIGKILL, Duration::from_secs(5))
    }

    fn signal_recorded(dir: &Path, first: Signal, grace: Duration) -> Result<usize, ServerError> {
        let mut stopped = 0;
        let Ok(dir) = dir.canonicalize() else { return Ok(0) };
        let Ok(entries) = fs::read_dir(&dir) else { return Ok(0) };
        for e in entries.flatten() {
            let pidfile = e.path().join("zookeeper.pid");
            let Ok(text) = fs::read_to_string(&pidfile) else { continue };
            let Ok(pid) = text.trim().parse::<i32>() else { continue };
            let cfg = e.path().join("zoo.cfg");
            if is_our_server(pid, &cfg) {
                let pid = Pid::from_raw(pid);
                let _ = kill(pid, first);
                let deadline = Instant::now() + grace;
                while is_our_server(pid.as_raw(), &cfg) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
                if is_our_server(pid.as_raw(), &cfg) {
                    let _ = kill(pid, Signal::SIGKILL);
                }
                stopped += 1;
                tracing::info!(pid = pid.as_raw(), signal = ?first, "ZooKeeper stopped");
            }
            let _ = fs::remove_file(&pidfile);
        }
        Ok(stopped)
    }
}

/// Whether `pid` runs java with `cfg` on its command line.
fn is_our_server(pid: i32, cfg: &Path) -> bool {
    let Ok(cmd) = fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
    let cfg = cfg.as_os_str().as_encoded_bytes();
    args.iter().any(|a| a.ends_with(b"java")) && args.contains(&cfg)
}

/// The line of a server's log that says why it exited: the last exception message (`java.io.
/// IOException: …`), else the last ERROR line other than the JVM's exit, else the last line.
fn last_log_line(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let exception = |l: &&&str| {
        l.split_once(": ")
            .is_some_and(|(head, _)| !head.contains(' ') && (head.ends_with("Exception") || head.ends_with("Error")))
    };
    let error = |l: &&&str| l.contains(" ERROR ") && !l.contains("Exiting JVM");
    let line = lines.iter().rev().find(exception).or_else(|| lines.iter().rev().find(error)).or(lines.last());
    line.copied().unwrap_or("(empty log)").to_string()
}

fn write_config(p: &Proc, all: &[Ports]) -> Result<(), ServerError> {
    let data = p.dir.join("data");
    fs::create_dir_all(&data).map_err(io(format!("creating {}", data.display())))?;
    let mut cfg = format!(
        "tickTime={TICK_MS}\nminSessionTimeout={MIN_SESSION_MS}\nmaxSessionTimeout={MAX_SESSION_MS}\n\
         initLimit={INIT_LIMIT_TICKS}\nsyncLimit={SYNC_LIMIT_TICKS}\ndataDir={}\nclientPortAddress=127.0.0.1\nclientPort={}\n\
         admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat,mntr\nmaxClientCnxns=0\n",
        data.display(),
        p.ports.client
    );
    if all.len() > 1 {
        for (i, q) in all.iter().enumerate() {
            cfg.push_str(&format!("server.{}=127.0.0.1:{}:{}\n", i + 1, q.quorum, q.election));
        }
        fs::write(data.join("myid"), format!("{}\n", p.id)).map_err(io("writing myid"))?;
    }
    fs::write(p.dir.join("zoo.cfg"), cfg).map_err(io("writing zoo.cfg"))
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        if self.detached {
            return;
        }
        for i in 0..self.procs.len() {
            self.kill(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_java_names_the_packages() {
        let e = check_installed("/nonexistent/java").unwrap_err();
        assert!(matches!(e, ServerError::JavaMissing), "{e}");
        assert_eq!(
            e.to_string(),
            "java not found: install the Debian packages zookeeper and libslf4j-java (scripts/install-deps.sh)"
        );
    }

    #[test]
    fn a_recorded_pid_that_is_not_our_server_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let zk = dir.path().join("zk1");
        fs::create_dir_all(&zk).unwrap();
        // Our own pid: alive, but not a java running this directory's zoo.cfg.
        fs::write(zk.join("zookeeper.pid"), format!("{}\n", std::process::id())).unwrap();
        assert_eq!(ZkServer::stop_recorded(dir.path(), Duration::from_millis(10)).unwrap(), 0);
        assert!(!zk.join("zookeeper.pid").exists(), "the stale pid file is removed");
        assert_eq!(ZkServer::stop_recorded(&dir.path().join("absent"), Duration::ZERO).unwrap(), 0);
    }

    #[test]
    fn the_reason_a_server_exited_is_its_last_exception() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("zookeeper.log");
        let say = |text: &str| {
            fs::write(&log, text).unwrap();
            last_log_line(&log)
        };
        let exited =
            "[main] INFO x - starting\njava.io.IOException: log.1 has invalid magic number\n\tat a.b(C.java:1)\n\
                      [main] ERROR o.a.z.s.ZooKeeperServerMain - Unexpected exception, exiting abnormally\n\
                      java.io.IOException: No snapshot found, but there are log entries. Something is broken!\n\
                      \tat o.a.z.s.FileTxnSnapLog.restore(FileTxnSnapLog.java:290)\n\
                      [main] ERROR o.a.z.util.ServiceUtils - Exiting JVM with code 1\n";
        assert_eq!(
            say(exited),
            "java.io.IOException: No snapshot found, but there are log entries. Something is broken!"
        );
        let error = "[main] INFO x - a\n[main] ERROR x - Invalid config, exiting abnormally\n[main] ERROR o.a.z.util.ServiceUtils - Exiting JVM with code 2\n";
        assert_eq!(say(error), "[main] ERROR x - Invalid config, exiting abnormally");
        assert_eq!(say("Error: Could not find or load main class X\n\n"), "Error: Could not find or load main class X");
        assert_eq!(say("one\ntwo\n"), "two");
        assert_eq!(say(""), "(empty log)");
    }

    #[test]
    fn bad_counts_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for ports in [&[][..], &[1, 2][..]] {
            let e = ZkServer::start_on(dir.path(), ports, &[], Duration::ZERO).unwrap_err();
            assert!(matches!(e, ServerError::BadCount(_)), "{e}");
        }
    }
}
