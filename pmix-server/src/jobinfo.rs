//! What a companion registers for a namespace (`PMIx_server_register_nspace`), built from
//! the agent's [`NspaceInfo`]: a list of keys and typed values, pure, for the binary to turn
//! into `pmix_info_t`s.
//!
//! Which keys, and why (Open MPI 5's `ompi/runtime/ompi_rte.c`, `ompi_rte_init`, reads them
//! one by one after `PMIx_Init`; see `docs/spec/pmix-companion.md` §4):
//!
//! * job level: `PMIX_JOB_SIZE` and `PMIX_LOCAL_PEERS` (or `PMIX_LOCAL_SIZE`) are required
//!   (`MPI_Init` fails without them); `PMIX_UNIV_SIZE`, `PMIX_JOB_NUM_APPS`, the session
//!   directories `PMIX_TMPDIR`/`PMIX_NSDIR` (without them each rank makes its own),
//!   `PMIX_WDIR`, and for MPMD jobs the Open MPI keys `OMPI_APP_SIZES` and
//!   `OMPI_FIRST_RANKS` (comma lists) are read when there; `PMIX_NODE_OVERSUBSCRIBED` is
//!   read by its presence alone, so it is registered only when true;
//! * the maps `PMIX_NODE_MAP` and `PMIX_PROC_MAP` (PMIx regular expressions, made by
//!   libpmix from the host list and the ranks per node): from them libpmix answers which
//!   node any rank runs on, for ranks of other nodes too;
//! * per application (`PMIX_APP_INFO`): number, size, first rank, working directory;
//! * per node (`PMIX_NODE_INFO`): id, host name, local size, local peers, lowest local rank;
//! * per local rank (`PMIX_PROC_DATA`, which must start with `PMIX_RANK`): application,
//!   rank in it, `PMIX_LOCAL_RANK` (required by Open MPI), `PMIX_NODE_RANK`, node id, host
//!   name (Open MPI's own `PMIX_HOSTNAME`), `PMIX_PROCDIR`, and when bound `PMIX_CPUSET` and
//!   `PMIX_LOCALITY_STRING` (Open MPI compares the locality strings of its local peers; a
//!   peer without one counts as merely on the same node).

use crate::proto::{NspaceInfo, Proc, MAX_NSLEN};
use std::collections::HashSet;

/// The PMIx attribute keys registered (strings of OpenPMIx's `pmix_common.h`; the binary's
/// unit test checks each against the header).
pub mod keys {
    pub const UNIV_SIZE: &str = "pmix.univ.size";
    pub const JOB_SIZE: &str = "pmix.job.size";
    pub const MAX_PROCS: &str = "pmix.max.size";
    pub const JOBID: &str = "pmix.jobid";
    pub const SPAWNED: &str = "pmix.spawned";
    pub const PARENT_ID: &str = "pmix.parent";
    pub const JOB_NUM_APPS: &str = "pmix.job.napps";
    pub const NUM_NODES: &str = "pmix.num.nodes";
    pub const NODE_MAP: &str = "pmix.nmap";
    pub const PROC_MAP: &str = "pmix.pmap";
    pub const TMPDIR: &str = "pmix.tmpdir";
    pub const NSDIR: &str = "pmix.nsdir";
    pub const PROCDIR: &str = "pmix.pdir";
    pub const WDIR: &str = "pmix.wdir";
    pub const HOSTNAME: &str = "pmix.hname";
    pub const NODEID: &str = "pmix.nodeid";
    pub const LOCAL_SIZE: &str = "pmix.local.size";
    pub const LOCAL_PEERS: &str = "pmix.lpeers";
    pub const LOCALLDR: &str = "pmix.lldr";
    pub const NODE_OVERSUBSCRIBED: &str = "pmix.ndosub";
    pub const APP_INFO: &str = "pmix.app.info";
    pub const APPNUM: &str = "pmix.appnum";
    pub const APP_SIZE: &str = "pmix.app.size";
    pub const APPLDR: &str = "pmix.aldr";
    pub const NODE_INFO: &str = "pmix.node.info";
    pub const PROC_DATA: &str = "pmix.pdata";
    pub const RANK: &str = "pmix.rank";
    pub const APP_RANK: &str = "pmix.apprank";
    pub const LOCAL_RANK: &str = "pmix.lrank";
    pub const NODE_RANK: &str = "pmix.nrank";
    pub const REINCARNATION: &str = "pmix.reinc";
    pub const CPUSET: &str = "pmix.cpuset";
    pub const LOCALITY_STRING: &str = "pmix.locstr";
    /// Open MPI's own job-level keys for MPMD jobs (PRRTE registers them for it).
    pub const OMPI_APP_SIZES: &str = "OMPI_APP_SIZES";
    pub const OMPI_FIRST_RANKS: &str = "OMPI_FIRST_RANKS";
}

/// A value to register, typed as PMIx expects it for its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Val {
    Str(String),
    U32(u32),
    U16(u16),
    /// A `pmix_rank_t`.
    Rank(u32),
    Bool(bool),
    /// A `pmix_proc_t`.
    Proc(Proc),
    /// A `pmix_data_array_t` of `pmix_info_t`.
    Array(Vec<Info>),
    /// Host names, comma-separated: registered as the regular expression libpmix makes of
    /// them (`PMIx_generate_regex`).
    NodeRegex(String),
    /// Ranks per node (`0,1;2,3`): registered as libpmix's regular expression for them
    /// (`PMIx_generate_ppn`).
    ProcRegex(String),
    /// The CPU list a rank is bound to: registered as libpmix's locality string for it
    /// (`PMIx_server_generate_locality_string`), or left out when libpmix makes none.
    Locality(String),
}

/// One key and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    pub key: String,
    pub val: Val,
}

fn info(key: &str, val: Val) -> Info {
    Info { key: key.to_string(), val }
}

/// A namespace the companion cannot register, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("namespace {nspace:?}: {why}")]
pub struct JobInfoError {
    pub nspace: String,
    pub why: String,
}

/// The namespace's directory (`PMIX_NSDIR`): below the job's `tmpdir`, named after the
/// namespace (a `/` in it becomes `_`).
pub fn nspace_dir(ns: &NspaceInfo) -> String {
    format!("{}/{}", ns.tmpdir.trim_end_matches('/'), ns.nspace.replace('/', "_"))
}

/// A local rank's directory (`PMIX_PROCDIR`), below [`nspace_dir`].
pub fn proc_dir(ns: &NspaceInfo, rank: u32) -> String {
    format!("{}/{rank}", nspace_dir(ns))
}

/// Checks the agent's description of a namespace (it comes from outside the process).
pub fn validate(ns: &NspaceInfo) -> Result<(), JobInfoError> {
    let err = |why: String| Err(JobInfoError { nspace: ns.nspace.clone(), why });
    if ns.nspace.is_empty() || ns.nspace.len() > MAX_NSLEN || ns.nspace.contains('\0') {
        return err(format!("a namespace is 1 to {MAX_NSLEN} bytes without NUL"));
    }
    if ns.size == 0 {
        return err("a job has at least one rank".into());
    }
    let total: u64 = ns.apps.iter().map(|a| u64::from(a.size)).sum();
    if ns.apps.is_empty() || total != u64::from(ns.size) {
        return err(format!("the applications' sizes add up to {total}, not to {}", ns.size));
    }
    let remote = ns.this_node == crate::proto::REMOTE_NODE;
    let me = match ns.nodes.get(ns.this_node as usize) {
        Some(me) => Some(me),
        None if remote && ns.local.is_empty() => None,
        None => return err(format!("this node is {} of {} nodes", ns.this_node, ns.nodes.len())),
    };
    let mut seen = vec![false; ns.size as usize];
    for node in &ns.nodes {
        if node.host.is_empty() || node.host.contains([',', '\0']) {
            return err(format!("host name {:?} (empty, or with a comma or NUL)", node.host));
        }
        for &r in &node.ranks {
            match seen.get_mut(r as usize) {
                Some(s) if !*s => *s = true,
                Some(_) => return err(format!("rank {r} is on two nodes")),
                None => return err(format!("rank {r} is not below the size {}", ns.size)),
            }
        }
    }
    if let Some(r) = seen.iter().position(|s| !s) {
        return err(format!("rank {r} is on no node"));
    }
    let mine: HashSet<u32> = me.iter().flat_map(|m| m.ranks.iter().copied()).collect();
    let local: HashSet<u32> = ns.local.iter().map(|l| l.rank).collect();
    if mine != local || local.len() != ns.local.len() {
        return err("the local ranks are not this node's ranks, each once".into());
    }
    for l in &ns.local {
        if let Some(c) = &l.cpus {
            if c.is_empty() || !c.chars().all(|ch| ch.is_ascii_digit() || ch == ',' || ch == '-') {
                return err(format!("rank {}: CPU list {c:?}", l.rank));
            }
        }
    }
    let texts = std::iter::once(&ns.tmpdir).chain(ns.apps.iter().filter_map(|a| a.wdir.as_ref()));
    for t in texts {
        if t.contains('\0') {
            return err(format!("{t:?} has a NUL"));
        }
    }
    if !remote && !ns.tmpdir.starts_with('/') {
        return err(format!("tmpdir {:?} is not absolute", ns.tmpdir));
    }
    if let Some(p) = &ns.parent {
        if p.nspace.is_empty() || p.nspace.len() > MAX_NSLEN || p.nspace.contains('\0') {
            return err("the parent's namespace is not a namespace".into());
        }
    }
    Ok(())
}

fn join<T: ToString>(items: impl IntoIterator<Item = T>, sep: &str) -> String {
    items.into_iter().map(|i| i.to_string()).collect::<Vec<_>>().join(sep)
}

/// The information to register for a namespace (after [`validate`]).
pub fn registration(ns: &NspaceInfo) -> Result<Vec<Info>, JobInfoError> {
    validate(ns)?;
    // The first rank of each application, and each rank's application.
    let mut first = Vec::with_capacity(ns.apps.len());
    let mut next = 0u32;
    for a in &ns.apps {
        first.push(next);
        next += a.size;
    }
    let app_of = |rank: u32| first.partition_point(|&f| f <= rank).saturating_sub(1);
    let me = ns.nodes.get(ns.this_node as usize);
    let nsdir = nspace_dir(ns);

    let mut out = vec![
        info(keys::JOBID, Val::Str(ns.nspace.clone())),
        info(keys::UNIV_SIZE, Val::U32(ns.universe)),
        info(keys::JOB_SIZE, Val::U32(ns.size)),
        info(keys::MAX_PROCS, Val::U32(ns.universe.max(ns.size))),
        info(keys::SPAWNED, Val::Bool(ns.parent.is_some())),
    ];
    if let Some(p) = &ns.parent {
        out.push(info(keys::PARENT_ID, Val::Proc(p.clone())));
    }
    out.extend([
        info(keys::JOB_NUM_APPS, Val::U32(ns.apps.len() as u32)),
        info(keys::NUM_NODES, Val::U32(ns.nodes.len() as u32)),
        info(keys::NODE_MAP, Val::NodeRegex(join(ns.nodes.iter().map(|n| &n.host), ","))),
        info(
            keys::PROC_MAP,
            Val::ProcRegex(join(ns.nodes.iter().map(|n| join(&n.ranks, ",")), ";")),
        ),
        info(keys::OMPI_APP_SIZES, Val::Str(join(ns.apps.iter().map(|a| a.size), ","))),
        info(keys::OMPI_FIRST_RANKS, Val::Str(join(&first, ","))),
    ]);
    if me.is_some() {
        // Session directories exist where the namespace has ranks.
        out.push(info(keys::TMPDIR, Val::Str(ns.tmpdir.clone())));
        out.push(info(keys::NSDIR, Val::Str(nsdir)));
    }
    if let Some(w) = &ns.apps[0].wdir {
        out.push(info(keys::WDIR, Val::Str(w.clone())));
    }
    // This node's view at job level (libpmix answers the job-level local keys from these).
    if let Some(me) = me {
        out.push(info(keys::LOCAL_SIZE, Val::U32(me.ranks.len() as u32)));
        out.push(info(keys::LOCAL_PEERS, Val::Str(join(&me.ranks, ","))));
        if let Some(&low) = me.ranks.iter().min() {
            out.push(info(keys::LOCALLDR, Val::Rank(low)));
        }
    }
    if ns.oversubscribed {
        out.push(info(keys::NODE_OVERSUBSCRIBED, Val::Bool(true)));
    }
    for (i, a) in ns.apps.iter().enumerate() {
        let mut v = vec![
            info(keys::APPNUM, Val::U32(i as u32)),
            info(keys::APP_SIZE, Val::U32(a.size)),
            info(keys::APPLDR, Val::Rank(first[i])),
        ];
        if let Some(w) = &a.wdir {
            v.push(info(keys::WDIR, Val::Str(w.clone())));
        }
        out.push(info(keys::APP_INFO, Val::Array(v)));
    }
    for (id, n) in ns.nodes.iter().enumerate() {
        let mut v = vec![
            info(keys::NODEID, Val::U32(id as u32)),
            info(keys::HOSTNAME, Val::Str(n.host.clone())),
            info(keys::LOCAL_SIZE, Val::U32(n.ranks.len() as u32)),
            info(keys::LOCAL_PEERS, Val::Str(join(&n.ranks, ","))),
        ];
        if let Some(&low) = n.ranks.iter().min() {
            v.push(info(keys::LOCALLDR, Val::Rank(low)));
        }
        out.push(info(keys::NODE_INFO, Val::Array(v)));
    }
    for l in &ns.local {
        let app = app_of(l.rank);
        let mut v = vec![
            info(keys::RANK, Val::Rank(l.rank)),
            info(keys::APPNUM, Val::U32(app as u32)),
            info(keys::APP_RANK, Val::Rank(l.rank - first[app])),
            info(keys::LOCAL_RANK, Val::U16(l.local_rank)),
            info(keys::NODE_RANK, Val::U16(l.node_rank)),
            info(keys::NODEID, Val::U32(ns.this_node)),
            info(keys::HOSTNAME, Val::Str(me.map(|m| m.host.clone()).unwrap_or_default())),
            info(keys::REINCARNATION, Val::U32(0)),
            info(keys::PROCDIR, Val::Str(proc_dir(ns, l.rank))),
        ];
        if let Some(c) = &l.cpus {
            v.push(info(keys::CPUSET, Val::Str(format!("hwloc:{c}"))));
            v.push(info(keys::LOCALITY_STRING, Val::Locality(c.clone())));
        }
        out.push(info(keys::PROC_DATA, Val::Array(v)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{AppInfo, LocalProc, NodeInfo};

    /// Two nodes, two applications (3 + 1 ranks), ranks 0,2 on a and 1,3 on b; this is b.
    fn job() -> NspaceInfo {
        NspaceInfo {
            nspace: "kvs_42_0".into(),
            size: 4,
            universe: 8,
            apps: vec![
                AppInfo { size: 3, wdir: Some("/home/u".into()) },
                AppInfo { size: 1, wdir: None },
            ],
            nodes: vec![
                NodeInfo { host: "a".into(), ranks: vec![0, 2] },
                NodeInfo { host: "b".into(), ranks: vec![1, 3] },
            ],
            this_node: 1,
            local: vec![
                LocalProc { rank: 1, local_rank: 0, node_rank: 0, cpus: Some("0-1".into()) },
                LocalProc { rank: 3, local_rank: 1, node_rank: 1, cpus: None },
            ],
            tmpdir: "/tmp/libi-pmix.1/".into(),
            parent: None,
            oversubscribed: false,
        }
    }

    fn get<'a>(v: &'a [Info], key: &str) -> Vec<&'a Val> {
        v.iter().filter(|i| i.key == key).map(|i| &i.val).collect()
    }

    #[test]
    fn job_level_maps_and_local_view() {
        let reg = registration(&job()).unwrap();
        assert_eq!(get(&reg, keys::JOB_SIZE), [&Val::U32(4)]);
        assert_eq!(get(&reg, keys::UNIV_SIZE), [&Val::U32(8)]);
        assert_eq!(get(&reg, keys::JOB_NUM_APPS), [&Val::U32(2)]);
        assert_eq!(get(&reg, keys::NODE_MAP), [&Val::NodeRegex("a,b".into())]);
        assert_eq!(get(&reg, keys::PROC_MAP), [&Val::ProcRegex("0,2;1,3".into())]);
        assert_eq!(get(&reg, keys::LOCAL_PEERS), [&Val::Str("1,3".into())]);
        assert_eq!(get(&reg, keys::LOCALLDR), [&Val::Rank(1)]);
        assert_eq!(get(&reg, keys::OMPI_APP_SIZES), [&Val::Str("3,1".into())]);
        assert_eq!(get(&reg, keys::OMPI_FIRST_RANKS), [&Val::Str("0,3".into())]);
        assert_eq!(get(&reg, keys::NSDIR), [&Val::Str("/tmp/libi-pmix.1/kvs_42_0".into())]);
        assert_eq!(get(&reg, keys::WDIR), [&Val::Str("/home/u".into())]);
        assert!(get(&reg, keys::NODE_OVERSUBSCRIBED).is_empty());
        assert_eq!(get(&reg, keys::APP_INFO).len(), 2);
        assert_eq!(get(&reg, keys::NODE_INFO).len(), 2);
    }

    #[test]
    fn proc_data_starts_with_the_rank_and_has_locality_only_when_bound() {
        let reg = registration(&job()).unwrap();
        let procs = get(&reg, keys::PROC_DATA);
        assert_eq!(procs.len(), 2);
        let Val::Array(r1) = procs[0] else { panic!("not an array") };
        assert_eq!(r1[0], info(keys::RANK, Val::Rank(1)));
        assert_eq!(get(r1, keys::APPNUM), [&Val::U32(0)]);
        assert_eq!(get(r1, keys::LOCAL_RANK), [&Val::U16(0)]);
        assert_eq!(get(r1, keys::HOSTNAME), [&Val::Str("b".into())]);
        assert_eq!(get(r1, keys::CPUSET), [&Val::Str("hwloc:0-1".into())]);
        assert_eq!(get(r1, keys::LOCALITY_STRING), [&Val::Locality("0-1".into())]);
        assert_eq!(get(r1, keys::PROCDIR), [&Val::Str("/tmp/libi-pmix.1/kvs_42_0/1".into())]);
        let Val::Array(r3) = procs[1] else { panic!("not an array") };
        assert_eq!(r3[0], info(keys::RANK, Val::Rank(3)));
        assert_eq!(get(r3, keys::APPNUM), [&Val::U32(1)]);
        assert_eq!(get(r3, keys::APP_RANK), [&Val::Rank(0)]);
        assert!(get(r3, keys::LOCALITY_STRING).is_empty());
    }

    #[test]
    fn malformed_descriptions_are_refused() {
        type Spoil = fn(&mut NspaceInfo);
        let cases: Vec<(Spoil, &str)> = vec![
            (|j| j.apps[0].size = 2, "add up"),
            (|j| j.nodes[0].ranks.push(1), "two nodes"),
            (|j| j.nodes[0].ranks = vec![0], "no node"),
            (|j| j.nodes[1].ranks.push(9), "not below"),
            (|j| j.this_node = 2, "this node"),
            (|j| j.local.pop().map(|_| ()).unwrap_or(()), "local ranks"),
            (|j| j.local[0].cpus = Some("0;1".into()), "CPU list"),
            (|j| j.nodes[0].host = "a,c".into(), "host name"),
            (|j| j.tmpdir = "rel".into(), "absolute"),
            (|j| j.nspace = "x".repeat(300), "namespace"),
            (|j| j.size = 0, "at least"),
        ];
        for (spoil, why) in cases {
            let mut j = job();
            spoil(&mut j);
            let e = registration(&j).unwrap_err();
            assert!(e.why.contains(why), "{why}: {e}");
        }
        let mut j = job();
        j.oversubscribed = true;
        j.parent = Some(Proc { nspace: "kvs_1".into(), rank: 0 });
        let reg = registration(&j).unwrap();
        assert_eq!(get(&reg, keys::NODE_OVERSUBSCRIBED), [&Val::Bool(true)]);
        assert_eq!(get(&reg, keys::SPAWNED), [&Val::Bool(true)]);
        assert_eq!(get(&reg, keys::PARENT_ID).len(), 1);
    }
}
