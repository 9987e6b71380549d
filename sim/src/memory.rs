//! How much memory a simulation takes, estimated before it starts, and how much the machine
//! has: `libi-sim` refuses a run that would not fit instead of being killed by the kernel
//! half-way.
//!
//! The model (bytes):
//!
//! * a fixed base, then per agent (its node record, its core, its job setup, its counters)
//!   and per rank (the simulator's rank, the core's PMI connection, its events);
//! * the plans: every core holds the plan of its subtree (one node record per node below
//!   it, and each of those nodes' rank list), so the plans take the sum of the subtree
//!   sizes;
//! * the KVS of every node, per fence epoch of the workload ([`crate::workload::Trace::kvs_use`]): an epoch
//!   of at most `--kvs-push-max` bytes is pushed to every agent with its release (each
//!   agent's map holds every pair: the keys and values themselves are shared); a larger
//!   one is left up the tree, each node holding its subtree's pairs, plus the pairs its
//!   ranks fetch from other nodes (then cached: one entry each, key and value shared).
//!   MPICH 4's `>slice` makes every node fetch every card: nodes × ranks entries;
//! * the maps are hash tables (a slot per pair and spare capacity up to the next power of
//!   two); every pair's key and value exist once, at the front end;
//! * the gets in flight while cards are fetched lazily, the copies of a pushed release in
//!   flight down the tree;
//! * PMIx jobs: the job's node map (every node's host and ranks), which every core's job
//!   holds; and the result of the largest fence with data (every node's blob), of which
//!   every node's copy may be in flight at once (the release down the tree, the answer to
//!   its PMIx server): nodes × the sum of the blobs (1,000 × 16 `ompi5-init`: 0.69 GB of
//!   the 0.87 GB measured).
//!
//! Calibrated against peak RSS at 64–10,000 agents (`bench/results.md`, "Memory estimate");
//! it errs on the high side.

use crate::cluster::Config;
use crate::workload::EpochUse;

/// Fixed cost of the process: code, allocator, the front end's own state.
const BASE: u64 = 20 << 20;
/// Per agent: its node record, core, job setup, launch lifecycle, counters, outcome rows.
const PER_AGENT: u64 = 4 << 10;
/// Per rank: the simulator's rank, the core's PMI connection and per-rank state, its
/// events in the queue.
const PER_RANK: u64 = 800;
/// One node of a plan held by a core above it (and by itself): its record and host name.
const PLAN_NODE: u64 = 160;
/// One rank in a plan (a `RankSlot`).
const PLAN_RANK: u64 = 8;
/// A slot of a node's KVS map: the key and the entry (value, epoch, flags), and the
/// control byte.
const SLOT: u64 = 49;
/// A pair in a pushed release in flight (each child's copy of the message); a quarter of
/// the agents' copies are in flight at once at most (measured: less at 1,000 and 10,000).
const RELEASE_PAIR: u64 = 32;
const RELEASE_COPIES: u64 = 4;
/// Maps grown one cached pair at a time leave freed tables behind in the allocator: 10 %
/// more, in tenths (measured at 256–2,000 agents).
const GROWN: u64 = 11;
/// The margin on the sum, in tenths: the model's parts are each within ±10 % of what was
/// measured; with it, no measured run was above its estimate.
const MARGIN: u64 = 11;
/// A get in flight (its message, the key it carries, its waiter), per rank and tree level.
const GET_IN_FLIGHT: u64 = 160;
/// PMIx jobs: one node of the job's node map (`PmixJob`) besides its host name's and rank
/// list's blocks: the tuple (a `String` and a `Vec`).
const PMIX_MAP_NODE: u64 = 48;

/// A memory estimate of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub bytes: u64,
    /// What it is made of: (what, bytes).
    pub parts: Vec<(&'static str, u64)>,
}

/// Bytes of a hash map holding `n` entries of `slot` bytes (hashbrown: buckets a power of
/// two, at most 7/8 full; its allocation rounded as the allocator does).
fn table(n: u64, slot: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    let buckets = if n < 4 {
        4
    } else if n < 8 {
        8
    } else {
        (n * 8).div_ceil(7).next_power_of_two()
    };
    alloc(buckets * slot + 16)
}

/// Bytes the allocator takes for a block of `n` (mimalloc's size classes: 8-byte steps up
/// to 64, then four classes per power of two).
fn alloc(n: u64) -> u64 {
    if n <= 64 {
        return n.max(8).next_multiple_of(8);
    }
    let step = (n - 1).next_power_of_two() / 8;
    n.next_multiple_of(step.max(8))
}

/// An `Arc`'d key or value of `len` bytes.
fn shared(len: u64) -> u64 {
    alloc(16 + len)
}

/// Per node of the tree (node 0 the front end): the agents of its subtree (itself
/// included), and the tree's depth. The tree is the one the plan launches (its shape,
/// fan-outs above `max_conn` re-parented), without the plan's per-node records.
fn subtrees(cfg: &Config) -> (Vec<u64>, u32) {
    let model = cfg.plan_model.unwrap_or_else(|| cfg.costs.launch_model(cfg.batch));
    let tree = libi::tree::Tree::build(&cfg.shape, cfg.nodes + 1, &model);
    let comm = libi::tree::CommTree::from_launch(&tree, cfg.max_conn);
    let n = cfg.nodes + 1;
    // Parents before children (breadth first from the root), then sizes bottom up.
    let mut order = Vec::with_capacity(n);
    order.push(0usize);
    let mut i = 0;
    while i < order.len() {
        order.extend_from_slice(comm.children(order[i]));
        i += 1;
    }
    let mut size = vec![1u64; n];
    for &v in order.iter().rev() {
        if let Some(p) = comm.parent(v) {
            size[p] += size[v];
        }
    }
    (size, comm.depth() as u32)
}

/// A size the simulator cannot run (no node, or more ranks than a job has): the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{ranks} ranks is not a job the simulator can run")]
pub struct NotAJob {
    pub ranks: u64,
}

/// The estimate for `cfg` (its workload as given: `--skip-slice` already applied).
pub fn estimate(cfg: &Config) -> Result<Estimate, NotAJob> {
    let (nodes, ppn) = (cfg.nodes as u64, u64::from(cfg.ppn));
    let ranks = nodes * ppn;
    if ranks > u64::from(u32::MAX) || cfg.nodes == 0 {
        return Err(NotAJob { ranks });
    }
    let (subtree, depth) = subtrees(cfg);
    let nodes32 = cfg.nodes as u32;
    let epochs = cfg.workload.kvs_use(nodes32, cfg.ppn);
    let pushed = |e: &EpochUse| e.key_bytes + e.value_bytes <= cfg.push_max;
    let avg = |bytes: u64, n: u64| bytes.checked_div(n).unwrap_or(0);

    // Every pair once (at the front end, shared by every map that holds it).
    let mut pairs = 0;
    let mut front = 0;
    for e in &epochs {
        pairs += e.pairs;
        front +=
            e.pairs * (shared(avg(e.key_bytes, e.pairs)) + shared(avg(e.value_bytes, e.pairs)));
    }
    front += table(pairs, SLOT);

    // The agents' maps.
    let mut maps = 0u64;
    let mut fetching = false;
    for &s in subtree.iter().skip(1) {
        let (mut held, mut grown) = (0, false);
        for e in &epochs {
            if pushed(e) {
                held += e.pairs;
                continue;
            }
            let sub = (e.pairs * s).div_ceil(nodes);
            let have = e.pairs.min(sub + e.fetched);
            held += have;
            grown |= have > sub;
            fetching |= e.fetched > 0;
        }
        maps += if grown { table(held, SLOT) * GROWN / 10 } else { table(held, SLOT) };
    }

    // What is in flight: a pushed release's copies down one tree level at a time (at most
    // every agent's), the gets of every rank up to the tree's depth.
    let release = (epochs.iter().filter(|e| pushed(e)).map(|e| e.pairs).max().unwrap_or(0))
        * RELEASE_PAIR
        * nodes.div_ceil(RELEASE_COPIES);
    let gets = if fetching { ranks * u64::from(depth.max(1)) * GET_IN_FLIGHT } else { 0 };

    // PMIx: every core's node map, and the largest fence result in flight to every node.
    let (pmix_maps, pmix_blobs) = if cfg.workload.uses_pmix() {
        let host = alloc(2 + u64::from(nodes.ilog10()));
        let map = nodes * (PMIX_MAP_NODE + host + alloc(4 * ppn));
        let ppn32 = cfg.ppn;
        let largest = (cfg.workload.pmix_blobs().iter())
            .map(|law| (0..nodes32).map(|i| law.size(i * ppn32, ppn32)).sum::<u64>())
            .max()
            .unwrap_or(0);
        ((nodes + 1) * map, nodes * largest)
    } else {
        (0, 0)
    };

    let plan_nodes: u64 = subtree.iter().sum();
    let plans = plan_nodes * (PLAN_NODE + ppn * PLAN_RANK);
    let parts: Vec<(&'static str, u64)> = vec![
        ("base", BASE),
        ("agents", nodes * PER_AGENT),
        ("ranks", ranks * PER_RANK),
        ("plans", plans),
        ("front end KVS", front),
        ("agents' KVS maps", maps),
        ("releases in flight", release),
        ("gets in flight", gets),
        ("PMIx node maps", pmix_maps),
        ("PMIx fence results in flight", pmix_blobs),
    ];
    let sum: u64 = parts.iter().map(|(_, b)| *b).sum();
    let mut parts = parts;
    parts.push(("margin", sum * (MARGIN - 10) / 10));
    let bytes = parts.iter().map(|(_, b)| *b).sum();
    Ok(Estimate { bytes, parts })
}

/// A run's options as the command line gave them (what [`refusal`] may suggest changing).
#[derive(Debug, Clone)]
pub struct Run<'a> {
    pub cfg: &'a Config,
    /// The workload before `--skip-slice`, and whether it was given.
    pub full: &'a crate::workload::Trace,
    pub skip_slice: bool,
    /// The workload's name as given.
    pub workload: &'a str,
}

/// `None` when `run` fits in `limit` bytes (`what`: where the limit comes from, e.g.
/// "available"); else the line refusing it: the estimate, the limit, and what would fit:
/// other options at the same size (`--skip-slice`, `--kvs-push-max`), the most nodes, the
/// most ranks per node.
pub fn refusal(run: &Run, limit: u64, what: &str) -> Result<Option<String>, NotAJob> {
    let need = estimate(run.cfg)?.bytes;
    if need <= limit {
        return Ok(None);
    }
    let cfg = run.cfg;
    let fits = |c: &Config| estimate(c).map(|e| e.bytes).ok().filter(|b| *b <= limit);
    let mut line = format!(
        "--nodes {} --ppn {} --workload {}{} needs about {} ({what} {})",
        cfg.nodes,
        cfg.ppn,
        run.workload,
        if run.skip_slice { " --skip-slice" } else { "" },
        gib(need),
        gib(limit)
    );
    let mut ways = Vec::new();
    // Other options, same size: the cheapest that fits.
    let sliced = run.full.has_slices() && !run.skip_slice;
    let no_slice = sliced.then(|| run.full.clone().without_slices());
    let nodes32 = cfg.nodes as u32;
    let push_all = (cfg.workload.kvs_use(nodes32, cfg.ppn).iter())
        .map(|e| e.key_bytes + e.value_bytes)
        .max()
        .unwrap_or(0)
        .next_multiple_of(1 << 20);
    let mut options: Vec<(String, Config)> = Vec::new();
    for (push, push_arg) in
        [(cfg.push_max, String::new()), (0, " --kvs-push-max 0".into())].into_iter().chain(
            (push_all > cfg.push_max)
                .then(|| (push_all, format!(" --kvs-push-max {}M", push_all >> 20))),
        )
    {
        if let Some(t) = &no_slice {
            let c = Config { workload: t.clone(), push_max: push, ..cfg.clone() };
            options.push((format!("--skip-slice{push_arg}"), c));
        }
        if push != cfg.push_max {
            options.push((push_arg.trim().to_string(), Config { push_max: push, ..cfg.clone() }));
        }
    }
    let best = (options.into_iter())
        .filter_map(|(arg, c)| fits(&c).map(|b| (b, arg)))
        .min_by_key(|(b, _)| *b);
    if let Some((b, arg)) = best {
        ways.push(format!("{arg} (about {})", gib(b)));
    }
    // The largest size that fits with these options.
    let most = |lo: u64, hi: u64, with: &dyn Fn(u64) -> Config| {
        let (mut lo, mut hi) = (lo, hi);
        fits(&with(lo))?;
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fits(&with(mid)).is_some() {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Some(lo)
    };
    let nodes = cfg.nodes as u64;
    if let Some(n) = most(1, nodes, &|n| Config { nodes: n as usize, ..cfg.clone() }) {
        ways.push(format!("at most ~{} nodes", round_down(n)));
    }
    let ppn = u64::from(cfg.ppn);
    if let Some(p) = most(1, ppn, &|p| Config { ppn: p as u32, ..cfg.clone() }) {
        ways.push(format!("--ppn {p}"));
    }
    match ways.len() {
        0 => line.push_str(": even one rank on one node does not fit; raise --max-mem"),
        n => {
            line.push_str(": use ");
            for (i, w) in ways.iter().enumerate() {
                if i > 0 {
                    line.push_str(if i + 1 == n { ", or " } else { ", " });
                }
                line.push_str(w);
            }
        }
    }
    Ok(Some(line))
}

/// `n` to two significant digits, rounded down (70,312 -> 70,000).
fn round_down(n: u64) -> u64 {
    let mut unit = 1;
    while n / unit >= 100 {
        unit *= 10;
    }
    n / unit * unit
}

/// What this process may use, and where that limit comes from: `MemAvailable` of
/// `/proc/meminfo`, or the room left under the memory limit of our cgroup (v2) or one
/// above it, whichever is smaller. `None` when neither can be read.
pub fn available() -> Option<(u64, String)> {
    let mem = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| (kib * 1024, "available".to_string()))
    });
    let cg = cgroup_room();
    match (mem, cg) {
        (Some(m), Some(c)) => Some(if c.0 < m.0 { c } else { m }),
        (m, c) => m.or(c),
    }
}

/// The least room under a `memory.max` of our cgroup and its ancestors (cgroup v2).
fn cgroup_room() -> Option<(u64, String)> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::"))?.trim().to_string();
    let mut dir = std::path::PathBuf::from("/sys/fs/cgroup");
    dir.push(path.trim_start_matches('/'));
    let mut best: Option<(u64, String)> = None;
    loop {
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
        let max = read("memory.max").and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(max) = max {
            let used = read("memory.current").and_then(|v| v.trim().parse::<u64>().ok());
            let room = max.saturating_sub(used.unwrap_or(0));
            if best.as_ref().is_none_or(|b| room < b.0) {
                best = Some((room, format!("left under the cgroup limit {}", gib(max))));
            }
        }
        if dir == std::path::Path::new("/sys/fs/cgroup") || !dir.pop() {
            break;
        }
    }
    best
}

/// `bytes` for a person: "31 GB", "2.1 GB", "540 MB" (powers of 1024).
pub fn gib(bytes: u64) -> String {
    let g = bytes as f64 / (1u64 << 30) as f64;
    if g >= 10_000.0 {
        format!("{:.0} TB", g / 1024.0)
    } else if g >= 10.0 {
        format!("{g:.0} GB")
    } else if g >= 1.0 {
        format!("{g:.1} GB")
    } else if bytes == 0 {
        "0 MB".into()
    } else {
        format!("{:.0} MB", (bytes as f64 / (1u64 << 20) as f64).max(1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Trace;

    fn cfg(nodes: usize, ppn: u32, workload: &str, push: u64) -> Config {
        let mut c = Config::new(nodes, ppn, Trace::load(workload).expect("builtin"));
        c.push_max = push;
        c
    }

    fn est(c: &Config) -> u64 {
        estimate(c).expect("estimate").bytes
    }

    #[test]
    fn hash_tables_and_size_classes() {
        assert_eq!(table(0, 49), 0);
        assert_eq!(table(3, 10), alloc(56));
        // 7 of 8 buckets may be full: 7 fit in 8, 8 need 16.
        assert_eq!(table(7, 10), alloc(96));
        assert_eq!(table(8, 10), alloc(176));
        assert_eq!(table(14, 10), alloc(176));
        assert_eq!(alloc(1), 8);
        assert_eq!(alloc(60), 64);
        assert_eq!(alloc(446), 448);
        assert_eq!(alloc(1000), 1024);
        assert_eq!(gib(31 << 30), "31 GB");
        assert_eq!(gib(2200 << 20), "2.1 GB");
        assert_eq!(gib(540 << 20), "540 MB");
        assert_eq!(gib(17_000 << 30), "17 TB");
        assert_eq!(gib(0), "0 MB");
    }

    /// MPICH 4's sequence: 2 barriers before the cards, the node broadcast's pairs one per
    /// node, the cards one per rank; every node fetches every card of the others.
    #[test]
    fn mpich4_epochs() {
        let t = Trace::load("mpich-init").expect("builtin");
        let e = t.kvs_use(10, 4);
        assert_eq!(e.iter().map(|e| e.pairs).collect::<Vec<_>>(), [0, 10, 40]);
        assert_eq!(e[2].value_bytes, 40 * 430);
        assert_eq!(e[2].fetched, 36, "the 36 cards of the other 9 nodes");
        assert_eq!(e[1].fetched, 0, "the broadcast's key is the node's own");
        let no_slice = t.clone().without_slices().kvs_use(10, 4);
        assert_eq!(no_slice[2].fetched, 0);
        assert_eq!(t.kvs_use(1, 4)[2].fetched, 0, "one node fetches nothing from others");
        // MPICH 5: the leaders' ten pairs, fetched by every other leader.
        let five = Trace::load("mpich5-init").expect("builtin").kvs_use(10, 4);
        assert_eq!(five.iter().map(|e| e.pairs).sum::<u64>(), 100);
        assert_eq!(five.iter().map(|e| e.fetched).sum::<u64>(), 90);
    }

    /// Fetching every card costs nodes × ranks entries; leaving the slice out or pushing
    /// it (shared keys, no copies) costs less; the estimate grows with the job.
    #[test]
    fn the_estimate_follows_what_is_held() {
        let full = est(&cfg(1000, 16, "mpich-init", 0));
        let no_slice = est(&Config {
            workload: Trace::load("mpich-init").expect("builtin").without_slices(),
            ..cfg(1000, 16, "mpich-init", 0)
        });
        let pushed = est(&cfg(1000, 16, "mpich-init", 1 << 30));
        assert!(full > 16_000 * 1000 * SLOT, "{full}");
        assert!(no_slice * 10 < full, "{no_slice} {full}");
        assert!(pushed < full && pushed > no_slice, "{pushed}");
        assert!(est(&cfg(2000, 16, "mpich-init", 0)) > 3 * full);
        assert!(est(&cfg(1000, 32, "fence", 0)) > est(&cfg(1000, 16, "fence", 0)));
        let e = estimate(&cfg(64, 16, "mpich-init", 0)).expect("estimate");
        assert_eq!(e.bytes, e.parts.iter().map(|p| p.1).sum::<u64>());
    }
}
