//! The tokio driver around [`NodeCore`]: the parent connection, the child NLAs, the rank
//! processes (their PMI sockets, stdio and exits through the rank reactor,
//! [`crate::io::rankio`], which this loop serves itself). No decisions are made here: the core
//! decides, and its timers (`NodeCore::poll_timeout`) wake this loop.

use crate::io::guard::{AcceptBackoff, MAX_PENDING, PMGR_REJECTS};
use crate::io::peer::{tcp_peer, Sessions};
use crate::io::rankio::RankIo;
use crate::io::tree::{accept_loop, listen, Children, EvSink, TreeEv};
use crate::io::uplink::{spawn_up_writer, Done, UpEvent, UpLink};
use crate::proc::reaper;
use crate::proc::start::{start_rank, SpawnBatch, StartFailed, Started};
use crate::proto::effect::NodeIo;
use crate::proto::ending::{FinalSweep, HeldRanks};
use crate::proto::node::{Effect, NodeCore, ProcEnd};
use crate::proto::signals::{AgentSignals, Meaning, AGENT_SIGNALS};
use bytes::Bytes;
use futures::StreamExt;
use libi::job::LauncherKind;
use libi::msg::Msg;
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

// Every timeout's value and what it bounds: `crate::proto::node::limits`.
use crate::proto::node::limits::{
    FINAL_SEND, LAUNCHERS_EXIT, SETUP_WAIT, STALL_LIMIT, START_BATCH,
};

type PmixStart = Result<(crate::io::pmix::Companion, crate::io::pmix::RankEnvs), String>;

/// Events reaching the central loop.
enum Ev {
    /// Bytes from the singleton's PMI connection.
    Pmi(usize, Vec<u8>),
    /// Bytes of a local rank's output came back to its budget (see
    /// [`crate::io::uplink::Budgets`]): the stream may be read again.
    OutputRoom(usize),
    /// The singleton's PMI connection closed.
    PmiEof(usize),
    /// From the writer of the parent link.
    Up(UpEvent),
    /// The singleton ended (the forked ranks' ends come from the rank reactor).
    Ended(usize, ProcEnd),
    Parent(Msg),
    ParentGone(String),
    /// The parent's connection carried something we cannot decode.
    ParentBroken(String),
    Tree(TreeEv),
    /// The singleton stopped reading its PMI replies.
    Stalled(usize),
    /// A PMGR connection was accepted and authenticated: its id, write half, and the local
    /// rank whose process holds it.
    PmgrConn(u64, tokio::net::tcp::OwnedWriteHalf, u32, Arc<PmgrQueue>),
    PmgrData(u64, Vec<u8>),
    PmgrEof(u64),
    /// A PMGR connection's client read nothing of its replies for [`STALL_LIMIT`]: its
    /// owner (global rank).
    PmgrStalled(u64, u32),
    /// A signal we watch ([`AGENT_SIGNALS`]) arrived.
    Signal(i32),
    /// This node's hwloc topology file is written (`None`: it could not be): answer the
    /// ranks that asked for it, and those that will.
    HwlocXml(Option<String>),
    /// The PMIx companion's message, or its end.
    Pmix(crate::io::pmix::PmixEvent),
    /// The PMIx companion started (and gave each local rank its environment), or why not.
    PmixStarted(Box<PmixStart>),
}

/// Command for the singleton's task.
enum ToRank {
    Write(Vec<u8>),
    Close,
}

/// Register `io` with the event loop for `interest` only.
fn register<T>(io: T, interest: tokio::io::Interest) -> io::Result<tokio::io::unix::AsyncFd<T>>
where
    T: std::os::fd::AsRawFd + Into<std::os::fd::OwnedFd>,
{
    // SAFETY: `T` owns its descriptor (it converts into an `OwnedFd`), so it stays open and
    // the same while the AsyncFd owns `io`; the AsyncFd deregisters it before closing it.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(io, interest) }
        .map_err(io::Error::from)
}

/// Where an NLA finds its parent. Either way a failed connection is tried again up to
/// `retries` times ([`crate::io::tree::connect`]).
pub enum Parent {
    /// Started by its parent (ssh, rsh, fork): connect there as node `node`.
    Direct { addr: String, node: u32, retries: u32 },
    /// Started by a resource manager's step (srun): join the front end at `front_end`, which
    /// answers with the setup or redirects to the parent.
    Rendezvous { front_end: String, host: Option<String>, retries: u32 },
}

/// Connect to the parent, authenticate, receive the setup, launch the children, start the
/// local ranks, and serve until the whole subtree has ended. Returns the NLA's exit status.
pub async fn run(parent: Parent, secret: String, keep_stdin: bool) -> io::Result<i32> {
    // What the ranks leave behind becomes ours, to be reaped and, at the end, killed.
    reaper::become_subreaper();
    reaper::spawn_orphan_reaper();
    // A joining NLA announces where its own children will connect: bind that first.
    let mut early_listener = None;
    let (mut down, up, setup) = match parent {
        Parent::Direct { addr, node, retries } => {
            let hello = || Msg::Hello {
                node,
                secret: secret.clone(),
                host: hostname(),
                pid: std::process::id(),
            };
            let connecting = crate::io::tree::connect_for_setup(&addr, hello, retries, SETUP_WAIT);
            unless_launcher_gone(keep_stdin, connecting).await?
        }
        Parent::Rendezvous { front_end, host, retries } => {
            let fe_host = front_end.rsplit_once(':').map(|(h, _)| h).unwrap_or(&front_end);
            let fe_host = fe_host.trim_start_matches('[').trim_end_matches(']').to_string();
            let (listener, addr) = listen(LauncherKind::Ssh, None, &[fe_host.as_str()]).await?;
            early_listener = Some((listener, addr.clone()));
            // The resource manager's name for this node is what the front end planned with.
            let host =
                host.or_else(|| std::env::var("SLURMD_NODENAME").ok()).unwrap_or_else(hostname);
            let joining = crate::io::tree::join(&front_end, &secret, &host, &addr, retries);
            unless_launcher_gone(keep_stdin, joining).await?
        }
    };
    let node = setup.plan.node;
    // From now on this agent's diagnostics say which host they come from.
    crate::sys::log::set_host(&setup.plan.host);
    let ready = libi::report::now();
    debug!(node, ranks = setup.plan.ranks.len(), children = setup.plan.children.len(), "setup");

    let (ev_tx, mut ev_rx) = unbounded_channel::<Ev>();
    // The signals an agent watches: each is passed to the loop as it comes, and its meaning
    // (the loss of the parent, or a signal for the ranks) is `AgentSignals`'s to decide.
    for sig in AGENT_SIGNALS {
        let kind = tokio::signal::unix::SignalKind::from_raw(sig);
        if let Ok(mut watch) = tokio::signal::unix::signal(kind) {
            let tx = ev_tx.clone();
            tokio::spawn(async move {
                while watch.recv().await.is_some() {
                    if tx.send(Ev::Signal(sig)).is_err() {
                        return;
                    }
                }
            });
        }
    }
    let mut signals = AgentSignals::default();
    // Everything for the parent goes through one queue and one writer task; the parent's
    // `OutputAck`s feed the output window.
    let credit = Arc::new(Semaphore::new(libi::msg::OUTPUT_WINDOW as usize));
    let parent_closed = CancellationToken::new();
    let (up, writer) = {
        let ev = ev_tx.clone();
        spawn_up_writer(up, credit.clone(), parent_closed.clone(), move |e| {
            let _ = ev.send(Ev::Up(e));
        })
    };
    // The parent's messages are read unless the core says to wait (a child far behind).
    let (parent_pause, mut parent_paused) = tokio::sync::watch::channel(false);
    {
        let ev = ev_tx.clone();
        let closed = parent_closed.clone();
        tokio::spawn(async move {
            let why = loop {
                while *parent_paused.borrow_and_update() {
                    if parent_paused.changed().await.is_err() {
                        break;
                    }
                }
                match down.next().await {
                    Some(Ok(Msg::OutputAck { bytes })) => {
                        credit.add_permits(bytes.min(libi::msg::OUTPUT_WINDOW) as usize)
                    }
                    Some(Ok(msg)) => {
                        if ev.send(Ev::Parent(msg)).is_err() {
                            break String::new();
                        }
                    }
                    Some(Err(e)) if !matches!(e, libi::msg::CodecError::Io(_)) => {
                        // Undecodable: our link up may still work and carry the reason
                        // (the writer keeps going until the node closes it).
                        let _ = ev.send(Ev::ParentBroken(e.to_string()));
                        return;
                    }
                    Some(Err(e)) => break e.to_string(),
                    None => break "connection closed".into(),
                }
            };
            closed.cancel();
            let _ = ev.send(Ev::ParentGone(why));
        });
    }
    // Descriptors for the ranks (PMI socket, three pipes, a pidfd each), the children and
    // some more, before any other thread exists.
    let fds = 8 * setup.plan.ranks.len() + 4 * setup.plan.children.len() + 64;
    crate::reserve_fd_table(fds);
    if keep_stdin {
        // Our launcher keeps our stdin open for the job: EOF means it (the ssh session, the
        // parent) is gone. Watched by the event loop when stdin can be polled (a pipe or a
        // socket: no thread to start); otherwise by a plain thread, whose blocking read
        // must not hold up the runtime.
        let tx = ev_tx.clone();
        let gone = move || {
            let _ = tx.send(Ev::ParentGone("the launcher connection (stdin) closed".into()));
        };
        match pollable_stdin() {
            Ok(stdin) => {
                tokio::spawn(async move {
                    watch_to_eof(stdin).await;
                    gone();
                });
            }
            Err(_) => stdin_eof_thread("stdin-watch", gone),
        }
    }
    let report = setup.job.report;
    let mut core = NodeCore::new(setup, false, report);
    let mut fx = Vec::new();
    // Until the loop runs: the time the setup came (each turn of the loop reads it again).
    let started = libi::clock::mono();
    core.set_now(started);

    // Children first (the tree's order), then the local ranks.
    let mut children = Children::new(&core);
    children.set_now(started);
    if !children.is_empty() {
        let tree_ev: EvSink = {
            let tx = ev_tx.clone();
            Arc::new(move |e| tx.send(Ev::Tree(e)).is_ok())
        };
        let hosts: Vec<String> = core.plan().children.iter().map(|c| c.host.clone()).collect();
        let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
        let bound = match early_listener.take() {
            Some(l) => Ok(l),
            None => listen(core.job().launcher.kind, None, &hosts).await,
        };
        match bound {
            Ok((listener, addr)) => {
                let ids = core.plan().children.iter().map(|c| c.node).collect();
                accept_loop(listener, secret.clone(), ids, tree_ev.clone());
                children.launch_all(&mut core, &addr, &secret, &tree_ev, &mut fx).await;
            }
            Err(e) => {
                let why = format!("cannot listen for child NLAs: {e}");
                for idx in 0..children.len() {
                    core.child_gone(idx, &why, &mut fx);
                }
            }
        }
    }
    // PMGR: the local ranks connect to a loopback port of this NLA, which lets in only the
    // processes of the ranks it runs (`rank_pids`: global rank and pid, until reaped).
    let rank_pids: RankPids = Arc::new(Mutex::new(Vec::new()));
    let pmgr_port = match (core.job().pmgr, core.local_count()) {
        (Some(_), n) if n > 0 => {
            match crate::io::tree::bind_in_range([127, 0, 0, 1].into()).await {
                Ok(l) => {
                    let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
                    spawn_pmgr_accept(l, ev_tx.clone(), rank_pids.clone());
                    Some(port)
                }
                Err(e) => {
                    return Err(io::Error::new(e.kind(), format!("cannot listen for PMGR: {e}")))
                }
            }
        }
        _ => None,
    };
    let mut pmgr_writers: HashMap<u64, PmgrOut> = HashMap::new();
    let mut sweep = FinalSweep::new(pmgr_port.is_some());
    // `--bcast`: write the staged executables before any rank starts.
    let stage = match crate::proc::stage::write(core.job(), core.local_count()) {
        Ok(s) => s,
        Err(e) => return Err(io::Error::new(e.kind(), format!("--bcast: {e}"))),
    };
    if let Some(st) = &stage {
        for (app, path) in st.exes() {
            core.set_exe(app, path);
        }
    }
    // MPICH's ranks ask for the node's topology file in MPI_Init: cached, or written now
    // (offered before the first rank starts, so that none is told there is none). A
    // directory of this agent's own for the file, when the user's is not usable: kept until
    // the agent ends.
    let mut hwloc_dir = None;
    let mut hwloc_writing = {
        let tx = ev_tx.clone();
        crate::proc::hwloc::offer(&mut core, &mut fx, &mut hwloc_dir, move |path| {
            let _ = tx.send(Ev::HwlocXml(path));
        })
    };
    // The ranks start [`START_BATCH`] at a time from the event loop below, which serves
    // events (the parent's end among them) between batches.
    // PMIx: the companion starts, and hands out the ranks' environments, before any rank.
    // It starts beside the loop: the parent, the children's setups and everything else are
    // served meanwhile (a tree of PMIx agents does not add one server start per level).
    // The ranks' binding, made once: for the ranks' start and for the PMIx server (each
    // rank's CPUs for its locality).
    let binding = crate::proc::bind::node_binding(core.job(), core.plan());
    let mut companion: Option<crate::io::pmix::Companion> = None;
    let mut pmix_pending = false;
    if core.job().pmix.is_some() && core.local_count() > 0 {
        // (A binding that cannot be made fails the ranks below, with its reason.)
        let cpus =
            binding.as_ref().map_or_else(|_| Vec::new(), |b| b.cpu_lists(core.local_count()));
        let topology = core.hwloc_xmlfile().map(str::to_owned);
        let (job, plan, tx) = (core.job().clone(), core.plan().clone(), ev_tx.clone());
        tokio::spawn(async move {
            let started =
                crate::io::pmix::Companion::start(&job, &plan, &cpus, topology.as_deref()).await;
            let _ = tx.send(Ev::PmixStarted(Box::new(started)));
        });
        pmix_pending = true;
    }
    let (mut ranks, starting) = Ranks::new(&core, &ev_tx, &up, pmgr_port, binding)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot watch the ranks: {e}")))?;
    let mut starting = Some(starting);

    // Whether the parent was lost before the event whose effects are being applied: what
    // that event sends up (a parent_unreadable's Fatal: why we stop) still goes; after it
    // nothing does. (The parent may be "lost" through our launcher's connection, stdin,
    // while the tree link still works: the ranks this node kills must not be reported up
    // as the teardown's own kills — the link's close tells the parent the node is lost.)
    let mut parent_lost_before = false;
    let mut zombies = HeldRanks::default();
    loop {
        // The turn's one reading of the clock (monotonic): every deadline set in this turn,
        // the core's, the launches', the rank streams' and the held ranks', is set from it.
        let now = libi::clock::mono();
        core.set_now(now);
        children.set_now(now);
        ranks.io.set_now(now);
        zombies.set_now(now);
        // The next batch of ranks; once every rank started (or will not), the subtree is
        // reported up. (Before the effects: what a batch brings about, a failed start, goes out
        // this turn.)
        let may_start = may_start_ranks(pmix_pending, &core);
        if let Some(st) = starting.as_mut().filter(|_| may_start) {
            if ranks.start_some(st, &mut core, &up, &rank_pids, &mut fx) {
                starting = None;
                if let Some(port) = core.job().singleton {
                    ranks.serve_singleton(port, &core.job().kvsname, &ev_tx).await;
                    for (local, end) in std::mem::take(&mut ranks.failed_starts) {
                        core.rank_ended(local, end, &mut fx);
                    }
                }
                core.ranks_started(&mut fx);
            }
        }
        {
            let mut io = NlaIo {
                ranks: &mut ranks,
                children: &mut children,
                up: &up,
                parent_lost: parent_lost_before,
                pmgr: &mut pmgr_writers,
                parent_pause: &parent_pause,
                secret: &secret,
                verbose: core.job().verbose,
                retries: core.job().launcher.connect_retries,
                pmix: companion.as_ref(),
            };
            crate::proto::effect::apply(&mut io, &mut fx);
        }
        // Children whose queue filled meanwhile: the core decides (it stops reading them,
        // and drops one that does not read within its limit); nothing waits for them.
        children.report(&mut core, &mut fx);
        if !fx.is_empty() {
            continue;
        }
        // The loop ends once the core finished and the last sweep for PMGR input (see
        // `FinalSweep`) is over.
        if core.local_ranks_ended() {
            sweep.local_ranks_ended(now);
        }
        if core.finished() && sweep.may_end(now) {
            break;
        }
        // Deadlines that have passed are served here, whether the wait below timed out or
        // events kept coming (a steady stream of events must not hold a timer back): ranks
        // held long enough are reaped, a PMGR sweep whose time came is over, and the core's
        // and the launch lifecycle's timers fire.
        for pid in zombies.handle_timeout(now) {
            reaper::reap(pid);
        }
        sweep.handle_timeout(now);
        let rank_due = ranks.io.poll_timeout();
        if [core.poll_timeout(), children.poll_timeout(), rank_due]
            .into_iter()
            .flatten()
            .any(|d| d <= now)
        {
            core.handle_timeout(now, &mut fx);
            for (local, end) in ranks.io.handle_timeout(now, &mut core, &mut fx) {
                ranks.ended(local, end, &rank_pids, &mut zombies, &mut core, &mut fx);
            }
            children.handle_timeout(now, &mut core, &mut fx).await;
            continue;
        }
        // The core's, the launch lifecycle's and the rank reactor's timers: wait for the next
        // event, the ranks' descriptors, or the earliest deadline.
        // Ranks still to start: only what is ready now, then the next batch.
        let more = (starting.is_some() && may_start_ranks(pmix_pending, &core)).then_some(now);
        let due = [
            core.poll_timeout(),
            children.poll_timeout(),
            zombies.poll_timeout(),
            rank_due,
            more,
            sweep.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .reduce(f64::min);
        let deadline = async {
            match due {
                Some(at) => tokio::time::sleep(Duration::from_secs_f64((at - now).max(0.0))).await,
                None => std::future::pending().await,
            }
        };
        let ev = tokio::select! {
            ev = ev_rx.recv() => ev,
            () = ranks.io.ready() => {
                parent_lost_before = core.parent_is_lost();
                for (local, end) in ranks.io.serve(&mut core, &mut fx) {
                    ranks.ended(local, end, &rank_pids, &mut zombies, &mut core, &mut fx);
                }
                continue;
            }
            // The deadline came: served at the top of the loop.
            () = deadline => continue,
        };
        let Some(ev) = ev else { break };
        parent_lost_before = core.parent_is_lost();
        match ev {
            Ev::Pmi(local, data) => core.rank_data(local, &data, &mut fx),
            Ev::OutputRoom(local) => ranks.io.resume(local),
            Ev::PmiEof(local) => core.rank_eof(local, &mut fx),
            Ev::Up(UpEvent::ChildDone(idx, bytes)) => core.child_output_passed(idx, bytes, &mut fx),
            Ev::Up(UpEvent::Unsendable(why)) => core.unsendable(&why, &mut fx),
            Ev::Up(UpEvent::Broken(why)) => {
                let _ = ev_tx.send(Ev::ParentGone(format!("cannot write to it: {why}")));
            }
            Ev::Ended(local, end) => {
                ranks.ended(local, end, &rank_pids, &mut zombies, &mut core, &mut fx)
            }
            Ev::Parent(msg) => core.parent_msg(msg, &mut fx),
            Ev::ParentBroken(why) => core.parent_unreadable(&why, &mut fx),
            Ev::ParentGone(why) => core.parent_lost(&why, &mut fx),
            Ev::Signal(sig) => match signals.on_signal(sig) {
                Meaning::ParentLost(why) => core.parent_lost(&why, &mut fx),
                Meaning::Forward(signal) => core.parent_msg(Msg::Signal { signal }, &mut fx),
                Meaning::Ignore => {}
            },
            Ev::Tree(TreeEv::Msg(idx, m @ Msg::Output { .. })) => {
                // Passed on as it came; acknowledged to the child once written upward.
                let n = match &m {
                    Msg::Output { data, .. } => data.len() as u64,
                    _ => 0,
                };
                up.send_with(m, Done::Child(idx, n));
            }
            Ev::Tree(t) => children.on_event(t, &mut core, &mut fx).await,
            Ev::Stalled(local) => core.rank_stalled(local, &mut fx),
            ev @ (Ev::PmgrConn(..) | Ev::PmgrData(..) | Ev::PmgrEof(_) | Ev::PmgrStalled(..)) => {
                pmgr_event(ev, &mut core, &mut pmgr_writers, &ev_tx, &mut fx)
            }
            Ev::HwlocXml(path) => {
                hwloc_writing = None;
                core.set_hwloc_xmlfile(path, &mut fx);
            }
            Ev::Pmix(crate::io::pmix::PmixEvent::Msg(m)) => {
                debug!(msg = %m.brief(), "from the PMIx server");
                core.pmix_msg(m, &mut fx)
            }
            Ev::PmixStarted(started) => {
                pmix_pending = false;
                match *started {
                    Ok((mut c, envs)) => {
                        let tx = ev_tx.clone();
                        c.spawn_reader(move |e| tx.send(Ev::Pmix(e)).is_ok());
                        companion = Some(c);
                        if let Some(st) = starting.as_mut() {
                            st.batch.set_pmix(envs);
                        }
                    }
                    // Without their server, none of the ranks starts.
                    Err(why) => {
                        if let Some(st) = starting.as_mut() {
                            ranks.refuse(st, core.local_count(), &why);
                        }
                    }
                }
            }
            Ev::Pmix(crate::io::pmix::PmixEvent::Gone { why, bye }) => {
                if !bye && !core.tearing_down() {
                    let host = core.plan().host.clone();
                    core.fail_now(format!("the PMIx server on {host} ended: {why}"), &mut fx);
                }
            }
        }
    }
    for pid in zombies.release_all() {
        reaper::reap(pid);
    }
    if report && !core.parent_is_lost() {
        let mut r = core.report(libi::clock::wall);
        r.ready = ready;
        r.peak_rss_kib = libi::report::peak_rss_kib();
        (r.cpu_user, r.cpu_sys) = crate::sys::report_cpu::own_cpu();
        r.launches = children.launches.clone();
        up.send(Msg::Report(Box::new(r)));
    }
    crate::io::guard::flush_rejections();
    up.close();
    // The connection stays open until the sweep below is done: the parent (the front end
    // under the fork launcher) may end as soon as it closes, and take us with it.
    let link = tokio::time::timeout(FINAL_SEND, writer).await;
    children.close_all().await;
    // Our launchers (ssh, rsh; the child NLAs themselves under the fork launcher) exit once
    // their NLAs see the connections close: wait for them (bounded), so that none outlives
    // us, running or unreaped.
    let deadline = tokio::time::Instant::now() + LAUNCHERS_EXIT;
    while children.launchers_running() {
        match tokio::time::timeout_at(deadline, ev_rx.recv()).await {
            Ok(Some(Ev::Tree(TreeEv::LauncherExited { idx, .. }))) => children.launcher_exited(idx),
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(_) => {
                // Not expected of a launcher whose NLA closed its connection (a stuck ssh):
                // said under -v, which is how tests see that no NLA waited here.
                debug!("gave up waiting for the launchers of child NLAs after {LAUNCHERS_EXIT:?}");
                break;
            }
        }
    }
    // A PMIx server still starting (the node was torn down first) is waited for, bounded.
    if pmix_pending {
        let wait = tokio::time::timeout(crate::proto::node::limits::PMIX_START, async {
            while let Some(ev) = ev_rx.recv().await {
                if let Ev::PmixStarted(started) = ev {
                    return (*started).ok().map(|(c, _)| c);
                }
            }
            None
        });
        companion = wait.await.ok().flatten();
    }
    // The PMIx server: finalized (its session directories removed), then reaped.
    if let Some(c) = companion.take() {
        c.finish().await;
    }
    // The topology file, still being written: finished for the next job, or given up.
    if let Some(w) = hwloc_writing.take() {
        w.finish().await;
    }
    // Nothing of the job outlives the NLA: the groups of ranks not reaped yet, then every
    // orphan (a rank's children and daemons, re-parented to us), by pid.
    ranks.kill_all(libc::SIGKILL);
    let swept = reaper::sweep();
    if swept > 0 {
        debug!(swept, "killed processes the ranks left behind");
    }
    drop(link);
    drop(stage);
    drop(hwloc_dir);
    Ok(0)
}

/// Whether ranks may start now: not while the PMIx server starts (they need its variables),
/// unless the node is torn down (then none will, and they are counted as not started).
fn may_start_ranks(pmix_pending: bool, core: &NodeCore) -> bool {
    !pmix_pending || core.tearing_down()
}

/// Our stdin, non-blocking and registered with the event loop; an error when it cannot be
/// polled (a regular file, `/dev/null`). The description is ours alone: the launcher holds
/// only the other end, and no rank inherits our stdin.
fn pollable_stdin() -> io::Result<tokio::io::unix::AsyncFd<std::fs::File>> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use std::os::fd::{AsFd, AsRawFd};
    let fd = std::io::stdin().as_fd().try_clone_to_owned()?;
    let flags = fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(flags)).map_err(io::Error::from)?;
    // Our own duplicate, moved into the AsyncFd, which closes it.
    register(std::fs::File::from(fd), tokio::io::Interest::READABLE)
}

/// On a thread of its own (named `name`): read our stdin, dropping what comes, until its end
/// of file or an error; then call `gone`. For a stdin that cannot be polled, or must not be
/// made non-blocking (a terminal others share).
pub fn stdin_eof_thread(name: &str, gone: impl FnOnce() + Send + 'static) {
    let _ = std::thread::Builder::new().name(name.into()).spawn(move || {
        let mut buf = [0u8; 512];
        loop {
            match std::io::Read::read(&mut std::io::stdin().lock(), &mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        gone();
    });
}

/// `f` (the connection to the parent, tried again and again), unless our stdin reaches its
/// end first when our launcher keeps it open for the job (`keep_stdin`): the launcher, and
/// with it the parent, is gone, and there is nobody left to connect to. Nothing of ours runs
/// yet, so the error ends the agent at once.
async fn unless_launcher_gone<T>(
    keep_stdin: bool,
    f: impl std::future::Future<Output = io::Result<T>>,
) -> io::Result<T> {
    let Some(stdin) = keep_stdin.then(pollable_stdin).and_then(Result::ok) else {
        return f.await;
    };
    tokio::select! {
        r = f => r,
        () = watch_to_eof(stdin) => Err(io::Error::new(
            io::ErrorKind::BrokenPipe,
            "the launcher connection (stdin) closed before the parent answered",
        )),
    }
}

/// Read (and drop) what comes until EOF or an error.
async fn watch_to_eof(stdin: tokio::io::unix::AsyncFd<std::fs::File>) {
    let mut buf = [0u8; 256];
    loop {
        let Ok(mut ready) = stdin.readable().await else { return };
        match ready.try_io(|f| std::io::Read::read(&mut f.get_ref(), &mut buf)) {
            Ok(Ok(n)) if n > 0 => {}
            Ok(_) => return,
            Err(_would_block) => {}
        }
    }
}

/// The NLA's I/O for the node core's effects ([`crate::proto::effect`]).
struct NlaIo<'a> {
    ranks: &'a mut Ranks,
    children: &'a mut Children,
    up: &'a UpLink,
    /// Nothing more goes up once the parent is lost (see `parent_lost_before`).
    parent_lost: bool,
    pmgr: &'a mut HashMap<u64, PmgrOut>,
    parent_pause: &'a tokio::sync::watch::Sender<bool>,
    secret: &'a str,
    verbose: bool,
    /// `--retries` for the NLAs of spawned groups (`HYDRA_PROXY_RETRY_COUNT`).
    retries: Option<u32>,
    pmix: Option<&'a crate::io::pmix::Companion>,
}

impl NodeIo for NlaIo<'_> {
    fn to_rank(&mut self, local: usize, bytes: Vec<u8>) {
        self.ranks.send(local, ToRank::Write(bytes));
    }

    fn close_rank(&mut self, local: usize) {
        self.ranks.send(local, ToRank::Close);
    }

    fn to_parent(&mut self, msg: Msg) {
        if !self.parent_lost {
            self.up.send(msg);
        }
    }

    fn to_child(&mut self, idx: usize, msg: Msg) {
        self.children.send(idx, msg)
    }

    fn to_children(&mut self, msg: Msg) {
        self.children.broadcast(&msg)
    }

    fn pause_child(&mut self, idx: usize, pause: bool) {
        self.children.pause(idx, pause)
    }

    fn drop_child(&mut self, idx: usize, why: &str) {
        self.children.drop_child(idx, why)
    }

    fn pause_parent(&mut self, pause: bool) {
        let _ = self.parent_pause.send(pause);
    }

    fn signal_ranks(&mut self, signal: i32) {
        self.ranks.kill_all(signal)
    }

    fn stdin(&mut self, data: Vec<u8>) {
        if let Some(tx) = &self.ranks.stdin {
            let eof = data.is_empty();
            let _ = tx.send(data);
            if eof {
                self.ranks.stdin = None;
            }
        }
    }

    fn to_pmgr(&mut self, conn: u64, bytes: Bytes) {
        if let Some(out) = self.pmgr.get(&conn) {
            let n = bytes.len();
            // (Counted only while its writer runs: a gone writer's queue is empty.)
            if out.tx.send(Some(bytes)).is_ok() {
                out.queue.bytes.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }

    fn close_pmgr(&mut self, conn: u64) {
        if let Some(out) = self.pmgr.remove(&conn) {
            let _ = out.tx.send(None);
        }
    }

    fn start_nla(&mut self, host: &str, front_end: &str) {
        start_group_nla(host, front_end, self.secret, self.verbose, self.retries)
    }

    fn to_pmix(&mut self, msg: libi_pmix::proto::ToCompanion) {
        match self.pmix {
            Some(c) => {
                if let Err(why) = c.send(&msg) {
                    warn!("cannot tell the PMIx server: {why}");
                }
            }
            None => warn!("no PMIx server on this node for {msg:?}"),
        }
    }

    fn abort_launches(&mut self) {
        self.children.abort_launches()
    }
}

/// Start the NLA of a spawned process group on this host (this binary, `--rendezvous`): it
/// joins the front end as `host`. It lives as long as its group, not as this NLA (its stdin
/// closes after the secret, its process group is its own), and is reaped here while we run.
fn start_group_nla(host: &str, front_end: &str, secret: &str, verbose: bool, retries: Option<u32>) {
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            warn!("cannot start an NLA for a spawned group: {e}");
            return;
        }
    };
    let mut cmd = tokio::process::Command::new(exe);
    // A process group of its own: whoever cleans up after this NLA (our launcher's process
    // group is killed when we are given up) must not take the spawned group with it.
    cmd.args(["--rendezvous", front_end, "--host", host])
        .stdin(std::process::Stdio::piped())
        .process_group(0);
    if verbose {
        cmd.arg("-v");
    }
    if let Some(n) = retries {
        cmd.args(["--retries", &n.to_string()]);
    }
    // Claimed: the final sweep leaves it alone.
    match reaper::spawn_claimed(&mut cmd) {
        Ok(mut child) => {
            let line = format!("{secret}\n");
            let pid = child.id();
            tokio::spawn(async move {
                if let Some(mut stdin) = child.stdin.take() {
                    let _ = tokio::io::AsyncWriteExt::write_all(&mut stdin, line.as_bytes()).await;
                }
                let _ = child.wait().await;
                if let Some(pid) = pid {
                    reaper::release(pid as i32);
                }
            });
        }
        Err(e) => warn!("cannot start an NLA for a spawned group on {host}: {e}"),
    }
}

/// PMGR connection events (and the end of a PMGR failure's grace); others are ignored.
fn pmgr_event(
    ev: Ev,
    core: &mut NodeCore,
    writers: &mut HashMap<u64, PmgrOut>,
    ev_tx: &UnboundedSender<Ev>,
    fx: &mut Vec<Effect>,
) {
    match ev {
        Ev::PmgrConn(id, wr, owner, queue) => {
            let (tx, rx) = unbounded_channel();
            let ev_tx = ev_tx.clone();
            tokio::spawn(pmgr_writer(wr, rx, queue.clone(), move || {
                let _ = ev_tx.send(Ev::PmgrStalled(id, owner));
            }));
            writers.insert(id, PmgrOut { tx, queue });
            core.pmgr_connected(id, owner);
        }
        Ev::PmgrData(id, data) => core.pmgr_data(id, &data, fx),
        Ev::PmgrEof(id) => core.pmgr_eof(id, fx),
        Ev::PmgrStalled(id, owner) => core.pmgr_stalled(id, owner, fx),
        _ => {}
    }
}

/// The local ranks whose processes may use the PMGR port: global rank and pid (a session
/// leader), from start until reaped.
type RankPids = Arc<Mutex<Vec<(u32, i32)>>>;

/// Accept the local ranks' PMGR connections (and abort connections). Each is authenticated
/// (see `peer.rs`) before the node sees a byte of it: the socket's other end must be held by
/// a process of one of `ranks`, owned by our user. A refused connection is closed and
/// counted in [`PMGR_REJECTS`], nothing else: it is not a rank, it reaches no collective and
/// aborts nothing. At most [`MAX_PENDING`] connections are being authenticated at a time.
fn spawn_pmgr_accept(listener: tokio::net::TcpListener, ev: UnboundedSender<Ev>, ranks: RankPids) {
    tokio::spawn(async move {
        let pending = Arc::new(Semaphore::new(MAX_PENDING));
        let sessions = Arc::new(Mutex::new(Sessions::default()));
        let mut backoff = AcceptBackoff::default();
        let mut next = 0u64;
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(x) => x,
                Err(e) => {
                    backoff.failed("PMGR port", &e).await;
                    continue;
                }
            };
            backoff.succeeded();
            let Ok(permit) = pending.clone().try_acquire_owned() else {
                PMGR_REJECTS.note(&peer.to_string(), "too many connections not authenticated yet");
                continue;
            };
            let _ = stream.set_nodelay(true);
            let id = next;
            next += 1;
            let (ev, ranks, sessions) = (ev.clone(), ranks.clone(), sessions.clone());
            tokio::spawn(async move {
                let auth = authenticate(stream, &ranks, &sessions).await;
                drop(permit);
                match auth {
                    Ok(conn) => pmgr_reader(id, conn, ev).await,
                    Err(why) => PMGR_REJECTS.note(&peer.to_string(), &why),
                }
            });
        }
    });
}

/// A PMGR connection that passed [`authenticate`].
struct PmgrConn {
    owner: u32,
    rd: tokio::net::tcp::OwnedReadHalf,
    wr: tokio::net::tcp::OwnedWriteHalf,
    /// What was already there to read when it was accepted, and whether that was all (EOF).
    first: Vec<u8>,
    eof: bool,
}

/// Find which local rank's process holds the other end of `stream`, at once: the client
/// must still hold its socket (a client that connects, writes and exits within a
/// millisecond may be gone, and is refused). The bytes already there are read first (no
/// waiting): a handshake's second int, like an abort record's, is the rank the client says
/// it is, whose processes are looked at first.
async fn authenticate(
    stream: tokio::net::TcpStream,
    ranks: &RankPids,
    sessions: &Arc<Mutex<Sessions>>,
) -> Result<PmgrConn, String> {
    let (ours, peer) = match (stream.local_addr(), stream.peer_addr()) {
        (Ok(std::net::SocketAddr::V4(a)), Ok(std::net::SocketAddr::V4(b))) => (a, b),
        _ => return Err("not an IPv4 connection".into()),
    };
    let mut buf = [0u8; 8];
    let (first, eof) = match stream.try_read(&mut buf) {
        Ok(0) => (Vec::new(), true),
        Ok(n) => (buf[..n].to_vec(), false),
        Err(_) => (Vec::new(), false),
    };
    let claimed = pmgr::wire::get_int(&first, 4).and_then(|r| u32::try_from(r).ok());
    let ranks = ranks.lock().map(|r| r.clone()).unwrap_or_default();
    let sock = tcp_peer(ours, peer)
        .map_err(|e| format!("cannot read /proc/net/tcp ({e})"))?
        .filter(|s| s.inode != 0)
        .ok_or("its client had closed it before it could be identified")?;
    if sock.uid != nix::unistd::geteuid().as_raw() {
        return Err("held by another user".into());
    }
    let cached: Option<u32> =
        sessions.lock().ok().and_then(|s| s.owner_cached(sock.inode, &ranks, claimed));
    let owner = match cached {
        Some(owner) => owner,
        // Not the ranks' processes we know of: look at every process of their sessions (a
        // scan of /proc, away from the runtime).
        _ => {
            let sessions = sessions.clone();
            tokio::task::spawn_blocking(move || {
                let mut s = sessions.lock().unwrap_or_else(|p| p.into_inner());
                s.owner(sock.inode, &ranks, claimed)
            })
            .await
            .map_err(|e| format!("identification failed ({e})"))?
            .ok_or("not held by a process of this node's ranks")?
        }
    };
    let (rd, wr) = stream.into_split();
    Ok(PmgrConn { owner, rd, wr, first, eof })
}

/// Hand an authenticated connection to the node, then pass on what it sends.
/// Replies queued for one PMGR connection and not written yet, in bytes: its reader
/// stops reading the client's requests while more than [`PMGR_QUEUE_MAX`] wait (a client
/// that sends and never reads makes us hold a bounded amount), and its writer gives up
/// when it can write nothing for [`STALL_LIMIT`].
#[derive(Default)]
struct PmgrQueue {
    bytes: std::sync::atomic::AtomicUsize,
    room: tokio::sync::Notify,
    /// The writer gave up on a client that does not read: read nothing more of it.
    stalled: std::sync::atomic::AtomicBool,
}

impl PmgrQueue {
    /// The writer ended: the reader waits for room no more.
    fn writer_ended(&self, stalled: bool) {
        self.stalled.store(stalled, std::sync::atomic::Ordering::SeqCst);
        self.bytes.store(0, std::sync::atomic::Ordering::SeqCst);
        self.room.notify_waiters();
    }
}

/// Most reply bytes waiting for one PMGR client before its requests are no longer read
/// (beyond a reply larger than that, which is written whole).
const PMGR_QUEUE_MAX: usize = 4 << 20;

/// Bytes of one read of a PMGR connection: at first, and most (see `pmgr_reader`).
const PMGR_READ_MIN: usize = 64 << 10;
const PMGR_READ_MAX: usize = 1 << 20;

/// The writer of one PMGR connection and its queue.
struct PmgrOut {
    tx: UnboundedSender<Option<Bytes>>,
    queue: Arc<PmgrQueue>,
}

async fn pmgr_reader(id: u64, conn: PmgrConn, ev: UnboundedSender<Ev>) {
    let PmgrConn { owner, mut rd, wr, first, eof } = conn;
    let queue = Arc::new(PmgrQueue::default());
    if ev.send(Ev::PmgrConn(id, wr, owner, queue.clone())).is_err() {
        return;
    }
    if !first.is_empty() && ev.send(Ev::PmgrData(id, first)).is_err() {
        return;
    }
    if eof {
        let _ = ev.send(Ev::PmgrEof(id));
        return;
    }
    let mut want = PMGR_READ_MIN;
    loop {
        // Not a byte more of its requests while its replies wait unread.
        loop {
            let room = queue.room.notified();
            if queue.bytes.load(std::sync::atomic::Ordering::SeqCst) <= PMGR_QUEUE_MAX {
                break;
            }
            room.await;
        }
        if queue.stalled.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = ev.send(Ev::PmgrEof(id));
            return;
        }
        // Read into a buffer of its own, handed over as it is (no copy on the way); a read
        // that fills it makes the next one twice as big (a big payload in fewer reads and
        // events), up to PMGR_READ_MAX, a short one starts again from 64 KiB.
        let mut buf = Vec::with_capacity(want);
        match rd.read_buf(&mut buf).await {
            Ok(n) if n > 0 => {
                want = if n == want { (2 * want).min(PMGR_READ_MAX) } else { PMGR_READ_MIN };
                if ev.send(Ev::PmgrData(id, buf)).is_err() {
                    return;
                }
            }
            _ => {
                let _ = ev.send(Ev::PmgrEof(id));
                return;
            }
        }
    }
}

/// Write a PMGR connection's replies as they come; `stalled` is called (and the writer
/// ends) when nothing can be written for [`STALL_LIMIT`].
async fn pmgr_writer(
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    mut rx: UnboundedReceiver<Option<Bytes>>,
    queue: Arc<PmgrQueue>,
    stalled: impl FnOnce(),
) {
    while let Some(Some(bytes)) = rx.recv().await {
        let mut at = 0;
        while at < bytes.len() {
            match tokio::time::timeout(STALL_LIMIT, wr.write(&bytes[at..])).await {
                Ok(Ok(n)) if n > 0 => at += n,
                // The client is gone: its reader reads on to the end.
                Ok(_) => return queue.writer_ended(false),
                Err(_) => {
                    queue.writer_ended(true);
                    stalled();
                    return;
                }
            }
        }
        queue.bytes.fetch_sub(bytes.len(), std::sync::atomic::Ordering::SeqCst);
        queue.room.notify_waiters();
    }
    queue.writer_ended(false);
    let _ = wr.shutdown().await;
}

/// The driver's view of the local ranks.
struct Ranks {
    /// The forked ranks' PMI sockets, stdio and exits.
    io: RankIo,
    /// The singleton's connection (see [`Ranks::singleton`]).
    to_singleton: Option<UnboundedSender<ToRank>>,
    /// Pids of the ranks not reaped yet (each leads its own process group).
    pids: Vec<Option<i32>>,
    stdin: Option<UnboundedSender<Vec<u8>>>,
    failed_starts: Vec<(usize, ProcEnd)>,
    /// The local rank that is a singleton MPI process (not ours: connected, never signalled).
    singleton: Option<usize>,
}

/// Local ranks still to start ([`Ranks::start_some`]), and what their starts need.
struct Starting {
    /// The next local rank to start.
    next: usize,
    /// Every rank's affinity mask and memory policy, built before any clone (the child only
    /// applies them).
    bound: Vec<crate::proc::bind::KernelBinding>,
    batch: SpawnBatch,
    pmgr_port: Option<u16>,
    /// None of the ranks will start (the first's failure says why).
    refused: bool,
}

impl Starting {
    /// No rank starts: each has its failure in `failed_starts`, or the first has and the
    /// rest count as not started.
    fn refused(pmgr_port: Option<u16>) -> Starting {
        Starting { next: 0, bound: Vec::new(), batch: SpawnBatch::new(), pmgr_port, refused: true }
    }
}

impl Ranks {
    /// The node's ranks, none started yet, and what starting them takes (when their
    /// binding cannot be made, none will start: each has its failure in `failed_starts`).
    fn new(
        core: &NodeCore,
        ev: &UnboundedSender<Ev>,
        up: &UpLink,
        pmgr_port: Option<u16>,
        binding: Result<crate::proc::bind::NodeBinding, crate::proc::bind::NodeBindError>,
    ) -> io::Result<(Ranks, Starting)> {
        let (job, plan) = (core.job(), core.plan());
        let n = plan.ranks.len();
        let room = {
            let ev = ev.clone();
            move |local| {
                let _ = ev.send(Ev::OutputRoom(local));
            }
        };
        let mut node = Ranks {
            io: RankIo::new(n, up.clone(), room)?,
            to_singleton: None,
            pids: vec![None; n],
            stdin: None,
            failed_starts: Vec::new(),
            singleton: None,
        };
        // More ranks than this machine can run: the first fails the job with why, and none
        // starts (the front end checks this too, for the nodes on its own machine).
        if let Err(why) = crate::sys::rlimit::check_rank_count(n, &plan.host) {
            let rank = plan.ranks.first().map_or(0, |s| s.rank);
            let reason = format!("cannot start rank {rank}: {why}");
            node.failed_starts.push((0, ProcEnd::SpawnFailed { errno: libc::EAGAIN, reason }));
            return Ok((node, Starting { next: 1, ..Starting::refused(pmgr_port) }));
        }
        let bound: Vec<crate::proc::bind::KernelBinding> = match binding {
            Ok(b) => {
                if job.verbose || job.binding.report {
                    crate::proc::bind::report(job, plan, &b);
                }
                b.kernel(n)
            }
            Err(e) => {
                let reason = e.to_string();
                for local in 0..n {
                    let end = ProcEnd::SpawnFailed { errno: libc::EINVAL, reason: reason.clone() };
                    node.failed_starts.push((local, end));
                }
                return Ok((node, Starting { next: n, ..Starting::refused(pmgr_port) }));
            }
        };
        // Each rank's GPUs (`-gpus-per-proc`): one variable, a value per local rank.
        let gpus = crate::proc::gpu::node_gpus(job, plan);
        if let (Some(a), true) = (&gpus, job.verbose) {
            crate::proc::gpu::report(plan, a);
        }
        let batch = SpawnBatch::new().with_gpus(gpus);
        Ok((node, Starting { next: 0, bound, batch, pmgr_port, refused: false }))
    }

    /// Start the next [`START_BATCH`] ranks, and tell the core about them (pids, failed
    /// starts). None start once the node is being torn down, nor after a start failed for
    /// want of processes, memory or descriptors (the next would fail too; that failure
    /// fails the job): the rest count as not started. Returns whether every rank is done
    /// with (started or not).
    fn start_some(
        &mut self,
        st: &mut Starting,
        core: &mut NodeCore,
        up: &UpLink,
        rank_pids: &RankPids,
        fx: &mut Vec<Effect>,
    ) -> bool {
        let n = core.local_count();
        let end = (st.next + START_BATCH).min(n);
        let mut stop = core.tearing_down() || st.refused;
        while st.next < end && !stop {
            let local = st.next;
            st.next += 1;
            let (job, plan) = (core.job(), core.plan());
            let slot = plan.ranks[local];
            if job.singleton.is_some() && slot.rank == 0 {
                self.singleton = Some(local);
                continue;
            }
            let b =
                st.bound.get(local).map(crate::proc::bind::KernelBinding::rank).unwrap_or_default();
            match start_rank(job, plan, local, slot, st.pmgr_port, b, &st.batch) {
                Ok(Started { mut child, pmi }) => {
                    let (pid, stdin) = (child.pid, child.stdin.take());
                    if let Err(e) = self.io.add(local, slot.rank, child, pmi) {
                        reaper::reap(pid);
                        let errno = e.raw_os_error().unwrap_or(0);
                        let reason = format!(
                            "cannot start rank {} on {}: cannot watch its descriptors: {e}",
                            slot.rank, plan.host
                        );
                        stop = crate::sys::errno::out_of_resources(errno);
                        self.failed_starts.push((local, ProcEnd::SpawnFailed { errno, reason }));
                        continue;
                    }
                    self.pids[local] = Some(pid);
                    core.rank_pid(local, pid);
                    if let Ok(mut pids) = rank_pids.lock() {
                        pids.push((slot.rank, pid));
                    }
                    if let Some(stdin) = stdin {
                        let (tx, rx) = unbounded_channel();
                        tokio::spawn(stdin_task(stdin, rx, up.clone()));
                        self.stdin = Some(tx);
                    }
                }
                Err(StartFailed { errno, reason }) => {
                    stop = crate::sys::errno::out_of_resources(errno);
                    self.failed_starts.push((local, ProcEnd::SpawnFailed { errno, reason }));
                }
            }
        }
        for (local, end) in std::mem::take(&mut self.failed_starts) {
            core.rank_ended(local, end, fx);
        }
        if stop {
            core.ranks_not_started(st.next, fx);
            st.next = n;
        }
        st.next >= n
    }

    /// None of the ranks not started yet will start (their PMIx server did not): each fails
    /// with `reason`.
    fn refuse(&mut self, st: &mut Starting, n: usize, reason: &str) {
        for local in st.next..n {
            let end = ProcEnd::SpawnFailed { errno: 0, reason: reason.to_string() };
            self.failed_starts.push((local, end));
        }
        st.next = n;
        st.refused = true;
    }

    /// Connect to the singleton (see [`crate::io::singleton`]) and serve it as its local rank.
    async fn serve_singleton(&mut self, port: u16, kvsname: &str, ev: &UnboundedSender<Ev>) {
        let Some(local) = self.singleton else { return };
        match crate::io::singleton::connect(port, kvsname).await {
            Ok(stream) => {
                let (tx, rx) = unbounded_channel();
                self.to_singleton = Some(tx);
                tokio::spawn(singleton_task(local, stream, rx, ev.clone()));
            }
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(0);
                let reason = format!("cannot serve the singleton on port {port}: {e}");
                self.failed_starts.push((local, ProcEnd::SpawnFailed { errno, reason }));
            }
        }
    }

    /// A reply (or the close) for local rank `local`'s PMI connection.
    fn send(&mut self, local: usize, cmd: ToRank) {
        if self.singleton == Some(local) {
            if let Some(tx) = &self.to_singleton {
                let _ = tx.send(cmd);
            }
        } else {
            match cmd {
                ToRank::Write(b) => self.io.send(local, b),
                ToRank::Close => self.io.close(local),
            }
        }
    }

    /// Local rank `local` ended (its output all read; its descriptors closed): reaped soon
    /// (exact reaping: the pid stayed ours until now, and no signal goes to the rank's group
    /// from here on), and its end goes to the core.
    fn ended(
        &mut self,
        local: usize,
        end: ProcEnd,
        rank_pids: &RankPids,
        zombies: &mut HeldRanks,
        core: &mut NodeCore,
        fx: &mut Vec<Effect>,
    ) {
        if let Some(pid) = self.pids.get_mut(local).and_then(Option::take) {
            if let Ok(mut pids) = rank_pids.lock() {
                pids.retain(|(_, p)| *p != pid);
            }
            // Held unreaped, or reaped now with every one held if it was the last to run.
            let last = self.pids.iter().all(Option::is_none);
            for pid in zombies.hold(pid, last) {
                reaper::reap(pid);
            }
        }
        core.rank_ended(local, end, fx);
    }

    /// Signal the process group of every rank not reaped yet: its leader's pid is still
    /// ours, so the group is the one the rank created (setsid in the child). A singleton is
    /// not signalled: a teardown (SIGTERM, SIGKILL) closes its PMI connection.
    fn kill_all(&self, sig: i32) {
        if sig == libc::SIGTERM || sig == libc::SIGKILL {
            if let Some(tx) = &self.to_singleton {
                let _ = tx.send(ToRank::Close);
            }
        }
        for pid in self.pids.iter().flatten() {
            // SAFETY: plain kill(2) on a process group we created, led by an unreaped child.
            unsafe {
                libc::kill(-pid, sig);
            }
        }
    }
}

/// Rank 0's stdin: write what comes, acknowledge it up the tree (the front end keeps a
/// bounded window in flight). Nothing is acknowledged once the pipe is broken.
async fn stdin_task(
    mut stdin: tokio::net::unix::pipe::Sender,
    mut rx: UnboundedReceiver<Vec<u8>>,
    up: UpLink,
) {
    while let Some(data) = rx.recv().await {
        if data.is_empty() || stdin.write_all(&data).await.is_err() {
            break;
        }
        up.send(Msg::StdinAck { bytes: data.len() as u64 });
    }
    // dropping `stdin` closes the pipe: EOF for rank 0
}

/// The singleton's PMI connection (see [`crate::io::singleton`]). It is the process, as far as we
/// can see: its end is the connection's end (clean after `finalize`). Closed by us for a
/// teardown, it counts as ended by the teardown's SIGTERM.
async fn singleton_task(
    local: usize,
    stream: tokio::net::TcpStream,
    mut rx: UnboundedReceiver<ToRank>,
    ev: UnboundedSender<Ev>,
) {
    let (mut rd, mut wr) = stream.into_split();
    let mut buf = vec![0u8; 16 * 1024];
    let mut closed_by_us = false;
    loop {
        tokio::select! {
            r = rd.read(&mut buf) => match r {
                Ok(n) if n > 0 => { let _ = ev.send(Ev::Pmi(local, buf[..n].to_vec())); }
                _ => break,
            },
            cmd = rx.recv() => match cmd {
                Some(ToRank::Write(b)) => {
                    match tokio::time::timeout(STALL_LIMIT, wr.write_all(&b)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(_)) => break,
                        Err(_) => {
                            let _ = ev.send(Ev::Stalled(local));
                            closed_by_us = true;
                            break;
                        }
                    }
                }
                Some(ToRank::Close) | None => {
                    closed_by_us = true;
                    break;
                }
            },
        }
    }
    let _ = wr.shutdown().await;
    let end = if closed_by_us { ProcEnd::Signaled(libc::SIGTERM) } else { ProcEnd::Exited(0) };
    let _ = ev.send(Ev::PmiEof(local));
    let _ = ev.send(Ev::Ended(local, end));
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}
