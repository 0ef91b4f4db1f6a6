//! The daemon's life: lock and recover the node, bind the socket (and the metrics port,
//! with `--metrics-addr`), serve connections (a thread each), and on SIGTERM/SIGINT stop:
//! publish what every attached client has committed, write the last status, remove the
//! socket, exit 0.

pub mod args;
pub(crate) mod bulk;
pub(crate) mod cluster;
pub(crate) mod conn;
pub(crate) mod control;
pub(crate) mod ctx;
pub(crate) mod metrics;
pub(crate) mod peers;
pub(crate) mod replication;
pub(crate) mod status;
pub(crate) mod trust;

use crate::config::Config;
use crate::daemon::ctx::Ctx;
use crate::host::link::HostLink;
use crate::lease::manager::Leases;
use crate::limits::{Connections, Refusal, Refusals};
use crate::node::Node;
use crate::observe::latency::EndToEnd;
use crate::pipeline::sequencer::Parts;
use crate::pipeline::Pipeline;
use crate::session::Sessions;
use linefs_pm::signals::SignalSet;
use linefs_proto::RemoteError;
use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Runs nicfs; the error is the one-line reason it cannot.
pub fn run(config: Config) -> Result<(), String> {
    let args = &config;
    let signals =
        SignalSet::block(&[libc::SIGTERM, libc::SIGINT]).map_err(|e| format!("cannot block SIGTERM/SIGINT: {e}"))?;
    if let Some(cpus) = &args.cpus {
        cpus.pin().map_err(|e| format!("cannot pin to CPUs {:?}: {e}", cpus.0))?;
        tracing::info!(cpus = ?cpus.0, "pinned");
    }
    crate::daemon::trust::keep_node_private(&args.node);
    let node = Arc::new(Node::open(&args.node).map_err(|e| e.to_string())?);
    node.set_chunk_bytes(args.chunk_bytes);
    let (feed, receivers) = match &args.cluster {
        Some(_) => {
            let (f, r) = crate::daemon::replication::channels();
            (Some(f), Some(r))
        }
        None => (None, None),
    };
    let cluster = match &args.cluster {
        Some(c) => Some(crate::daemon::cluster::start(node.clone(), c, feed.clone())?),
        None => None,
    };
    let metrics = args.metrics_addr.map(crate::daemon::metrics::http::bind).transpose()?;
    let metrics_addr = match &metrics {
        Some(l) => Some(l.local_addr().map_err(|e| format!("cannot read the metrics listener's address: {e}"))?),
        None => None,
    };
    let listener = bind(&args.socket)?;
    tracing::info!(socket = %args.socket.display(), pid = std::process::id(), "serving");
    let sessions = Arc::new(Sessions::default());
    let host = Arc::new(HostLink::with_timeouts(args.node.clone(), args.kworker_heartbeat, args.timeouts.host));
    let leases = Arc::new(Leases::new(&sessions, Some(node.leases.clone()), args.lease_timeout_ms));
    let limits = args.limits.resolve(&node.geometry);
    tracing::info!(?limits, kworker_uid = ?args.kworker_uid, "per-user limits");
    sessions.fenced.set_base(limits.fenced_backoff_ms);
    node.alloc.set_limits(limits.max_inodes_per_uid, limits.max_blocks_per_uid);
    let pipeline = Pipeline::start(node.clone(), host.clone(), Some(leases.clone()), args.coalesce, &args.threads);
    // On a node of a cluster, what the pipeline publishes is chain-replicated.
    let replication = match (&args.cluster, &cluster, feed, receivers) {
        (Some(c), Some(cl), Some(feed), Some(r)) => {
            let repl = crate::daemon::replication::Replication::start(c.node_id, node.clone(), cl.links(), feed, r)?;
            pipeline.set_replication(repl.clone());
            Some(repl)
        }
        _ => None,
    };
    let latency = Arc::new(EndToEnd::default());
    let sequencing = Arc::new(Parts {
        node: node.clone(),
        pipeline: pipeline.clone(),
        sessions: sessions.clone(),
        leases: leases.clone(),
        latency: latency.clone(),
    });
    let ctx = Arc::new(Ctx {
        pipeline,
        node,
        leases,
        sessions,
        host,
        latency,
        sequencing,
        socket: args.socket.clone(),
        metrics_addr,
        limits,
        conns: Arc::new(Connections::default()),
        refusals: Refusals::default(),
        kworker_uid: args.kworker_uid,
        attaching: parking_lot::Mutex::new(()),
        trust: crate::daemon::trust::Trust { group: args.trusted_group },
        timeouts: args.timeouts,
        cluster,
        replication,
        stopping: AtomicBool::new(false),
    });
    if let Some(listener) = metrics {
        let c = ctx.clone();
        let render = move || crate::daemon::metrics::Sample::take(&c).encode().map_err(|e| e.to_string());
        spawn("metrics", move || crate::daemon::metrics::http::serve(listener, render))?;
        tracing::info!(addr = ?metrics_addr, "serving metrics at /metrics");
    }
    if let Some(path) = args.status_file.clone() {
        let (kick, kicked) = crossbeam_channel::bounded(1);
        if let Some(c) = &ctx.cluster {
            c.on_change(kick.clone());
        }
        ctx.host.on_switch(kick);
        let c = ctx.clone();
        spawn("status", move || crate::daemon::status::run(c, path, kicked))?;
    }
    {
        let c = ctx.clone();
        spawn("watchdog", move || c.host.watchdog(|| c.stopping()))?;
    }
    match ctx.leases.tick_interval() {
        Some(every) => {
            let c = ctx.clone();
            spawn("lease-timer", move || loop {
                std::thread::sleep(every);
                c.leases.tick();
            })?;
            tracing::info!(timeout_ms = args.lease_timeout_ms, "lease revokes expire");
        }
        None => tracing::info!("lease revokes never expire (--lease-timeout-ms 0)"),
    }
    {
        let c = ctx.clone();
        spawn("signals", move || {
            match signals.wait() {
                Ok(sig) => tracing::info!(sig, "signal received: stopping"),
                Err(e) => tracing::error!(error = %e, "waiting for a signal failed: stopping"),
            }
            c.stopping.store(true, Ordering::Release);
            // Wake the accept loop.
            let _ = UnixStream::connect(&c.socket);
        })?;
    }
    for conn in listener.incoming() {
        if ctx.stopping() {
            break;
        }
        match conn {
            Ok(stream) => {
                let Some(counted) = admit(&ctx, &stream) else { continue };
                let c = ctx.clone();
                if let Err(e) = spawn("conn", move || {
                    crate::daemon::conn::serve(c, stream);
                    drop(counted);
                }) {
                    tracing::error!("{e}");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                if e.raw_os_error() == Some(libc::EMFILE) || e.raw_os_error() == Some(libc::ENFILE) {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            }
        }
    }
    stop(&ctx, args.status_file.as_deref());
    Ok(())
}

/// Counts a new connection against the limits, or refuses it — one Error frame, then the
/// connection is closed here, without a thread of its own.
fn admit(ctx: &Arc<Ctx>, stream: &UnixStream) -> Option<crate::limits::Counted> {
    let cred = match linefs_proto::peer_credentials(stream) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read a peer's credentials; closing");
            return None;
        }
    };
    match ctx.conns.admit(cred.uid, &ctx.limits) {
        Ok(c) => Some(c),
        Err(why) => {
            ctx.refusals.refused(Refusal::Connection, &crate::peer::describe(&cred), &why);
            // A new socket's buffer takes one small frame; never wait on it.
            let _ = stream.set_nonblocking(true);
            let _ = linefs_proto::write_error(stream, 0, RemoteError::TooManyClients, &why);
            None
        }
    }
}

/// Publishes every attached client's committed log, then holds the public area (no
/// publisher may start a batch the exit would cut), writes the last status and removes
/// the socket.
fn stop(ctx: &Ctx, status_file: Option<&Path>) {
    let _ = std::fs::remove_file(&ctx.socket);
    if let Some(r) = &ctx.replication {
        r.stopping();
    }
    let sessions = ctx.sessions.all();
    for s in &sessions {
        crate::pipeline::sequencer::settle(s, ctx.timeouts.settle);
        tracing::info!(
            session = s.id,
            slot = s.slot,
            published = s.published.load(Ordering::Acquire),
            "published at shutdown"
        );
    }
    if let Some(cluster) = &ctx.cluster {
        cluster.stop();
    }
    if let Some(r) = &ctx.replication {
        r.stop();
    }
    let _frozen = ctx.node.freeze();
    if let Some(path) = status_file {
        if let Err(e) = crate::daemon::status::write(ctx, path) {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the status file");
        }
    }
    for s in &sessions {
        s.hang_up();
    }
    ctx.host.hang_up();
    tracing::info!(sessions = sessions.len(), "stopped");
}

/// Binds the socket at `path`, replacing a stale one (a socket nobody listens on), with mode
/// 0666 so that unprivileged clients can connect.
fn bind(path: &Path) -> Result<UnixListener, String> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(format!("socket {} is in use by a live server", path.display()));
            }
            std::fs::remove_file(path).map_err(|e| format!("cannot remove stale socket {}: {e}", path.display()))?;
            tracing::info!(socket = %path.display(), "removed a stale socket");
        }
        Ok(_) => return Err(format!("{} exists and is not a socket", path.display())),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot stat {}: {e}", path.display())),
    }
    let listener = UnixListener::bind(path).map_err(|e| format!("cannot bind {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| format!("cannot chmod {}: {e}", path.display()))?;
    Ok(listener)
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(|_| ())
        .map_err(|e| format!("cannot start the {name} thread: {e}"))
}
