//! In-process PMGR test server built from `pmgr::wire` + `pmgr::collective` (std threads,
//! loopback TCP): several "NLAs", each listening on its own port for its own ranks. Child NLAs
//! send their `Partial` up (postcard bytes over a channel, as the real tree would), the root
//! NLA merges and resolves, and sends each NLA the `Outcome` restricted to its ranks.
//! Connections that do not hand-shake as a new local rank are read as abort records.

use std::collections::BTreeMap;
use std::io::Read;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pmgr::collective::{resolve, Outcome, Partial};
use pmgr::wire::{AbortEvent, AbortRecord, ConnEvent, Op, ServerConn};

/// What the job did, as the server saw it.
#[derive(Debug, Default)]
pub struct Report {
    /// Ops completed, in order (Close last on a clean run).
    pub ops: Vec<Op>,
    /// First error (mismatch, protocol error, EOF) — the job would fail with it.
    pub error: Option<String>,
}

pub struct TestServer {
    /// Port of each NLA.
    pub ports: Vec<u16>,
    /// Ranks of each NLA.
    pub layout: Vec<Vec<u32>>,
    pub nprocs: u32,
    aborts: Arc<Mutex<Vec<AbortRecord>>>,
    root: Option<JoinHandle<Report>>,
    others: Vec<JoinHandle<Report>>,
}

struct Local {
    rank: u32,
    stream: TcpStream,
    conn: ServerConn,
    events: Vec<ConnEvent>,
}

const CHILD_FAILED: &str = "a child NLA failed";
const TIMEOUT: Duration = Duration::from_secs(20);

impl TestServer {
    /// `layout[k]` = ranks served by NLA k (NLA 0 is the tree root).
    pub fn start(nprocs: u32, layout: Vec<Vec<u32>>) -> TestServer {
        let aborts = Arc::new(Mutex::new(Vec::new()));
        let mut ports = Vec::new();
        let mut locals_rx = Vec::new();
        for ranks in &layout {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind");
            ports.push(l.local_addr().expect("addr").port());
            let (tx, rx) = channel();
            locals_rx.push(rx);
            let ranks = ranks.clone();
            let aborts = aborts.clone();
            std::thread::spawn(move || accept_loop(l, nprocs, ranks, tx, aborts));
        }
        // Tree channels: children -> root (partials), root -> child k (outcomes).
        let (up_tx, up_rx) = channel::<Vec<u8>>();
        let mut down_txs = Vec::new();
        let mut others = Vec::new();
        let mut locals_rx = locals_rx.into_iter();
        let root_rx = locals_rx.next().expect("at least one NLA");
        for (k, rx) in locals_rx.enumerate() {
            let (dtx, drx) = channel::<Vec<u8>>();
            down_txs.push(dtx);
            let up = up_tx.clone();
            let ranks = layout[k + 1].clone();
            others.push(std::thread::spawn(move || child_nla(nprocs, ranks, rx, up, drx)));
        }
        drop(up_tx);
        let root_ranks = layout[0].clone();
        let child_ranks: Vec<Vec<u32>> = layout[1..].to_vec();
        let root = std::thread::spawn(move || {
            root_nla(nprocs, root_ranks, root_rx, up_rx, down_txs, child_ranks)
        });
        TestServer { ports, layout, nprocs, aborts, root: Some(root), others }
    }

    /// Port the given rank connects to.
    pub fn port_of(&self, rank: u32) -> u16 {
        let k = self.layout.iter().position(|rs| rs.contains(&rank)).expect("rank in layout");
        self.ports[k]
    }

    /// Wait for the collective loop to end (Closed, Aborted or an error).
    pub fn join(&mut self) -> Report {
        let mut rep = self.root.take().map(|h| h.join().expect("root thread")).unwrap_or_default();
        for h in self.others.drain(..) {
            let r = h.join().expect("nla thread");
            // A child's own error explains the root's "a child NLA failed".
            let generic = matches!(rep.error.as_deref(), None | Some(CHILD_FAILED));
            if r.error.is_some() && generic {
                rep.error = r.error;
            }
        }
        rep
    }

    /// Wait until `n` abort records arrived (or the timeout).
    pub fn wait_aborts(&self, n: usize) -> Vec<AbortRecord> {
        let t0 = Instant::now();
        loop {
            let a = self.aborts.lock().expect("aborts").clone();
            if a.len() >= n || t0.elapsed() > TIMEOUT {
                return a;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Accept forever; hand new local ranks to the NLA, read everything else as abort records.
fn accept_loop(
    l: TcpListener,
    nprocs: u32,
    ranks: Vec<u32>,
    tx: Sender<Local>,
    aborts: Arc<Mutex<Vec<AbortRecord>>>,
) {
    let seen = Arc::new(Mutex::new(Vec::<u32>::new()));
    for s in l.incoming() {
        let Ok(stream) = s else { continue };
        let (tx, aborts, seen, ranks) = (tx.clone(), aborts.clone(), seen.clone(), ranks.clone());
        std::thread::spawn(move || {
            let _ = stream.set_read_timeout(Some(TIMEOUT));
            let mut stream = stream;
            let mut conn = ServerConn::new(nprocs);
            let mut events = Vec::new();
            let mut buf = [0u8; 4096];
            // Read until the handshake is decided.
            while events.is_empty() {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        conn.eof(&mut events);
                        break;
                    }
                    Ok(n) => conn.feed(&buf[..n], &mut events),
                }
            }
            if let Some(ConnEvent::Hello { rank, .. }) = events.first() {
                let rank = *rank;
                let mut seen = seen.lock().expect("seen");
                if ranks.contains(&rank) && !seen.contains(&rank) {
                    seen.push(rank);
                    drop(seen);
                    events.remove(0);
                    let _ = tx.send(Local { rank, stream, conn, events });
                    return;
                }
            }
            if !conn.could_be_abort() {
                return;
            }
            let mut aev = Vec::new();
            let mut a = conn.into_abort(&mut aev);
            while aev.is_empty() {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => a.eof(&mut aev),
                    Ok(n) => a.feed(&buf[..n], &mut aev),
                }
            }
            for AbortEvent::Record(r) in aev {
                aborts.lock().expect("aborts").push(r);
            }
        });
    }
}

/// Wait for all local ranks' connections.
fn collect_locals(ranks: &[u32], rx: &Receiver<Local>) -> Result<Vec<Local>, String> {
    let mut v = Vec::new();
    while v.len() < ranks.len() {
        v.push(rx.recv_timeout(TIMEOUT).map_err(|e| format!("waiting for ranks: {e}"))?);
    }
    v.sort_by_key(|l| l.rank);
    Ok(v)
}

/// Next packet of every local rank, combined into one partial.
fn local_partial(nprocs: u32, locals: &mut [Local]) -> Result<Partial, String> {
    let mut p = Partial::new(nprocs);
    let mut buf = vec![0u8; 64 << 10];
    for l in locals.iter_mut() {
        loop {
            if let Some(ev) = (!l.events.is_empty()).then(|| l.events.remove(0)) {
                if let ConnEvent::Error(m) = &ev {
                    return Err(m.clone());
                }
                if let Some(pk) = ev.to_packet() {
                    p.add(l.rank, pk).map_err(|e| e.to_string())?;
                    break;
                }
                continue;
            }
            if l.conn.is_finished() {
                return Err(format!("rank {} is gone", l.rank));
            }
            match l.stream.read(&mut buf) {
                Ok(0) | Err(_) => l.conn.eof(&mut l.events),
                Ok(n) => l.conn.feed(&buf[..n], &mut l.events),
            }
        }
    }
    Ok(p)
}

/// Write each local rank's reply; true when the job is over.
fn deliver(out: &Outcome, locals: &mut [Local]) -> bool {
    for l in locals.iter_mut() {
        if let Some(bytes) = out.reply_for(l.rank) {
            let _ = l.stream.write_all(&bytes);
        }
        l.conn.op_done(&mut l.events);
    }
    out.is_final()
}

fn child_nla(
    nprocs: u32,
    ranks: Vec<u32>,
    rx: Receiver<Local>,
    up: Sender<Vec<u8>>,
    down: Receiver<Vec<u8>>,
) -> Report {
    let mut rep = Report::default();
    let mut locals = match collect_locals(&ranks, &rx) {
        Ok(l) => l,
        Err(e) => {
            rep.error = Some(e);
            return rep;
        }
    };
    loop {
        let p = match local_partial(nprocs, &mut locals) {
            Ok(p) => p,
            Err(e) => {
                rep.error = Some(e);
                return rep; // dropping `up` tells the root
            }
        };
        if up.send(postcard::to_stdvec(&p).expect("encode partial")).is_err() {
            return rep;
        }
        let Ok(bytes) = down.recv() else { return rep };
        let out: Outcome = postcard::from_bytes(&bytes).expect("decode outcome");
        rep.ops.push(out.op());
        if deliver(&out, &mut locals) {
            return rep;
        }
    }
}

fn root_nla(
    nprocs: u32,
    ranks: Vec<u32>,
    rx: Receiver<Local>,
    up: Receiver<Vec<u8>>,
    downs: Vec<Sender<Vec<u8>>>,
    child_ranks: Vec<Vec<u32>>,
) -> Report {
    let mut rep = Report::default();
    let mut locals = match collect_locals(&ranks, &rx) {
        Ok(l) => l,
        Err(e) => {
            rep.error = Some(e);
            return rep;
        }
    };
    loop {
        let mut p = match local_partial(nprocs, &mut locals) {
            Ok(p) => p,
            Err(e) => {
                rep.error = Some(e);
                return rep;
            }
        };
        for _ in 0..downs.len() {
            let Ok(bytes) = up.recv_timeout(TIMEOUT) else {
                rep.error.get_or_insert_with(|| CHILD_FAILED.into());
                return rep;
            };
            let child: Partial = postcard::from_bytes(&bytes).expect("decode partial");
            if let Err(e) = p.merge(child) {
                rep.error = Some(e.to_string());
                return rep;
            }
        }
        let out = match resolve(p, nprocs) {
            Ok(o) => o,
            Err(e) => {
                rep.error = Some(e.to_string());
                return rep;
            }
        };
        for (d, rs) in downs.iter().zip(&child_ranks) {
            let _ = d.send(postcard::to_stdvec(&out.restrict(rs)).expect("encode outcome"));
        }
        rep.ops.push(out.op());
        let mine = out.restrict(&ranks);
        if deliver(&mine, &mut locals) {
            return rep;
        }
    }
}

/// `MPIRUN_*` environment for one rank (as the NLA would export it).
pub fn env_for(srv: &TestServer, rank: u32, id: i32) -> BTreeMap<String, String> {
    let mut e = BTreeMap::new();
    e.insert("MPIRUN_HOST".into(), "127.0.0.1".into());
    e.insert("MPIRUN_PORT".into(), srv.port_of(rank).to_string());
    e.insert("MPIRUN_RANK".into(), rank.to_string());
    e.insert("MPIRUN_NPROCS".into(), srv.nprocs.to_string());
    e.insert("MPIRUN_ID".into(), id.to_string());
    e.insert("MPIRUN_SHM_ENABLE".into(), "0".into());
    e.insert("MPIRUN_CONNECT_TRIES".into(), "5".into());
    e
}
