//! PMGR collectives whose payloads stream over the tree in parts (issue 52): node cores of a
//! three-level tree wired in memory, parts made small, every op against the replies a
//! single v8 server would give; no tree message carries a whole payload, each part at most a
//! chunk; a gather of exactly the connection limit over two levels.

use libi::job::{AppSpec, JobCommon, LauncherKind, LauncherSpec, NodePlan, NodeSetup, RankSlot};
use libi::msg::{wire_size, Msg};
use libi_node::proto::node::{Effect, NodeCore};
use std::collections::{HashMap, VecDeque};

/// Front end (node 0, no ranks) → n1 (ranks 0, 1) → n3 (rank 2); front end → n2 (rank 3).
const TREE: [(u32, Option<u32>, &[u32]); 4] =
    [(0, None, &[]), (1, Some(0), &[0, 1]), (3, Some(1), &[2]), (2, Some(0), &[3])];
const N: u32 = 4;

fn plan(node: u32) -> NodePlan {
    let (_, _, ranks) = TREE.iter().find(|(n, _, _)| *n == node).copied().expect("node");
    NodePlan {
        node,
        host: format!("n{node}"),
        ranks: ranks.iter().map(|&rank| RankSlot { rank, app: 0 }).collect(),
        children: TREE
            .iter()
            .filter(|(_, p, _)| *p == Some(node))
            .map(|(n, _, _)| plan(*n))
            .collect(),
    }
}

fn job() -> JobCommon {
    JobCommon {
        size: N,
        universe_size: N as i32,
        kvsname: "kvs".into(),
        preput: vec![],
        apps: vec![AppSpec {
            exe: "x".into(),
            args: vec![],
            nprocs: N,
            env: vec![],
            wdir: None,
            agent_env: false,
            raw_env: Vec::new(),
        }],
        launcher: LauncherSpec::new(LauncherKind::Fork, "/x"),
        kill_grace_ms: 10,
        launch_timeout_ms: 10,
        launch_batch: None,
        kvs_push_max: 1 << 20,
        kvs_max: 1 << 30,
        report: false,
        pmgr: Some(7),
        verbose: false,
        spawned_by: None,
        binding: Default::default(),
        singleton: None,
        each_end: false,
        staged: Vec::new(),
        gpus: Default::default(),
        pmix: None,
    }
}

/// The tree's cores, by node id, and the bytes written to each rank's PMGR connection.
struct Tree {
    cores: HashMap<u32, NodeCore>,
    replies: HashMap<u32, Vec<u8>>,
    /// Every tree message: (wire size, payload bytes of a part or 0).
    sent: Vec<(usize, usize, &'static str)>,
    failures: Vec<String>,
}

fn parent_of(node: u32) -> Option<u32> {
    TREE.iter().find(|(n, _, _)| *n == node).and_then(|(_, p, _)| *p)
}

fn node_of(rank: u32) -> u32 {
    TREE.iter().find(|(_, _, rs)| rs.contains(&rank)).map(|(n, _, _)| *n).expect("rank")
}

impl Tree {
    fn new(chunk: usize) -> Tree {
        let mut cores = HashMap::new();
        for (node, parent, ranks) in TREE {
            let mut c =
                NodeCore::new(NodeSetup { job: job(), plan: plan(node) }, parent.is_none(), false);
            c.set_pmgr_chunk(chunk);
            for &r in ranks {
                c.pmgr_connected(u64::from(r), r);
            }
            cores.insert(node, c);
        }
        let mut t = Tree { cores, replies: HashMap::new(), sent: Vec::new(), failures: Vec::new() };
        for r in 0..N {
            t.say(r, &ints(&[8, r as i32]));
        }
        t
    }

    /// Rank `r`'s bytes to its node, and everything that follows, to the end.
    fn say(&mut self, r: u32, bytes: &[u8]) {
        let node = node_of(r);
        let mut fx = Vec::new();
        self.cores.get_mut(&node).expect("core").pmgr_data(u64::from(r), bytes, &mut fx);
        let mut queue: VecDeque<(u32, Effect)> = fx.into_iter().map(|e| (node, e)).collect();
        while let Some((node, e)) = queue.pop_front() {
            let mut fx = Vec::new();
            let children: Vec<u32> = plan(node).children.iter().map(|c| c.node).collect();
            let mut note = |m: &Msg| {
                let (part, what) = match m {
                    Msg::PmgrUpPart { data, .. } => (data.len(), "up-part"),
                    Msg::PmgrDownPart { data, .. } => (data.len(), "down-part"),
                    Msg::PmgrUp(_) => (0, "up"),
                    Msg::PmgrDown(_) => (0, "down"),
                    _ => (0, "other"),
                };
                self.sent.push((wire_size(m), part, what));
            };
            match e {
                Effect::ToParent(m) => {
                    note(&m);
                    if let Msg::Fatal { message, .. } = &m {
                        self.failures.push(message.clone());
                    }
                    let Some(p) = parent_of(node) else { continue };
                    let idx = plan(p).children.iter().position(|c| c.node == node).expect("child");
                    self.cores.get_mut(&p).expect("core").child_msg(idx, m, &mut fx);
                    queue.extend(fx.into_iter().map(|e| (p, e)));
                }
                Effect::ToChild(idx, m) => {
                    note(&m);
                    let c = children[idx];
                    self.cores.get_mut(&c).expect("core").parent_msg(m, &mut fx);
                    queue.extend(fx.into_iter().map(|e| (c, e)));
                }
                Effect::ToChildren(m) => {
                    for &c in &children {
                        note(&m);
                        let mut fx = Vec::new();
                        self.cores.get_mut(&c).expect("core").parent_msg(m.clone(), &mut fx);
                        queue.extend(fx.into_iter().map(|e| (c, e)));
                    }
                }
                Effect::ToPmgr(conn, b) => {
                    self.replies.entry(conn as u32).or_default().extend_from_slice(&b)
                }
                _ => {}
            }
        }
        let now = f64::MAX;
        for c in self.cores.values_mut() {
            let mut fx = Vec::new();
            c.handle_timeout(now, &mut fx);
            for e in fx {
                if let Effect::ToParent(Msg::Fatal { message, .. }) = e {
                    self.failures.push(message);
                }
            }
        }
    }

    /// Every rank's packet (in the order given), then the replies by rank.
    fn collective(&mut self, packets: &[(u32, Vec<u8>)]) -> Vec<Vec<u8>> {
        self.replies.clear();
        self.sent.clear();
        for (r, p) in packets {
            self.say(*r, p);
        }
        assert!(self.failures.is_empty(), "{:?}", self.failures);
        (0..N).map(|r| self.replies.remove(&r).unwrap_or_default()).collect()
    }
}

fn ints(xs: &[i32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn pat(who: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (who as usize * 41 + i * 3 + (i >> 8)) as u8).collect()
}

fn packet(head: &[i32], data: &[u8]) -> Vec<u8> {
    let mut v = ints(head);
    v.extend_from_slice(data);
    v
}

/// Arrival orders: rank order and its reverse.
fn orders() -> [Vec<u32>; 2] {
    [(0..N).collect(), (0..N).rev().collect()]
}

#[test]
fn every_op_streams_in_parts() {
    const CHUNK: usize = 5;
    for order in orders() {
        let mut t = Tree::new(CHUNK);
        // BCAST from rank 2 (on the deepest node): 23 bytes to everyone.
        let d = pat(2, 23);
        let pk: Vec<_> = order
            .iter()
            .map(|&r| (r, packet(&[4, 2, 23], if r == 2 { &d } else { &[] })))
            .collect();
        assert_eq!(t.collective(&pk), vec![d.clone(); N as usize]);
        let up_parts = t.sent.iter().filter(|s| s.2 == "up-part").count();
        let down_parts = t.sent.iter().filter(|s| s.2 == "down-part").count();
        assert!(up_parts >= 2 * 5 && down_parts >= 5, "{:?}", t.sent);
        assert!(t.sent.iter().all(|s| s.1 <= CHUNK), "{:?}", t.sent);
        // No message carries the payload inside.
        assert!(t.sent.iter().all(|s| s.2.ends_with("part") || s.0 < 23), "{:?}", t.sent);

        // GATHER to rank 3: 17 bytes each.
        let pk: Vec<_> = order.iter().map(|&r| (r, packet(&[5, 3, 17], &pat(r, 17)))).collect();
        let got = t.collective(&pk);
        assert_eq!(got[3], (0..N).flat_map(|r| pat(r, 17)).collect::<Vec<_>>());
        assert!(got[0].is_empty() && got[1].is_empty() && got[2].is_empty());
        assert!(t.sent.iter().all(|s| s.2.ends_with("part") || s.0 < 17 * 4), "{:?}", t.sent);

        // SCATTER from rank 0: 11 bytes each.
        let all = pat(9, 44);
        let pk: Vec<_> = order
            .iter()
            .map(|&r| (r, packet(&[6, 0, 11], if r == 0 { &all } else { &[] })))
            .collect();
        let got = t.collective(&pk);
        for r in 0..N as usize {
            assert_eq!(got[r], all[r * 11..(r + 1) * 11], "rank {r}");
        }

        // ALLGATHER of 9 bytes, ALLTOALL of 7-byte blocks.
        let pk: Vec<_> = order.iter().map(|&r| (r, packet(&[7, 9], &pat(r, 9)))).collect();
        let want: Vec<u8> = (0..N).flat_map(|r| pat(r, 9)).collect();
        assert_eq!(t.collective(&pk), vec![want; N as usize]);
        let pk: Vec<_> = order.iter().map(|&r| (r, packet(&[8, 7], &pat(r + 20, 28)))).collect();
        let got = t.collective(&pk);
        for (i, row) in got.iter().enumerate() {
            let want: Vec<u8> =
                (0..N).flat_map(|s| pat(s + 20, 28)[i * 7..(i + 1) * 7].to_vec()).collect();
            assert_eq!(row, &want, "rank {i}");
        }

        // libi's GATHERV (rank r sends 6r + 1 bytes) and SCATTERV (rank r gets 4r + 2).
        let pk: Vec<_> = order
            .iter()
            .map(|&r| (r, packet(&[64, 1, 6 * r as i32 + 1], &pat(r, 6 * r as usize + 1))))
            .collect();
        let got = t.collective(&pk);
        assert_eq!(got[1], (0..N).flat_map(|r| pat(r, 6 * r as usize + 1)).collect::<Vec<_>>());
        let counts: Vec<i32> = (0..N as i32).map(|r| 4 * r + 2).collect();
        let src = pat(7, counts.iter().sum::<i32>() as usize);
        let pk: Vec<_> = order
            .iter()
            .map(|&r| {
                let p = if r == 3 {
                    packet(&[[65, 3].as_slice(), &counts].concat(), &src)
                } else {
                    ints(&[65, 3])
                };
                (r, p)
            })
            .collect();
        let got = t.collective(&pk);
        let mut at = 0;
        for r in 0..N as usize {
            assert_eq!(got[r], src[at..at + counts[r] as usize], "rank {r}");
            at += counts[r] as usize;
        }

        // Small payloads still travel inside the messages, no part for them.
        let pk: Vec<_> = order.iter().map(|&r| (r, packet(&[7, 1], &pat(r, 1)))).collect();
        t.collective(&pk);
        assert!(t.sent.iter().all(|s| !s.2.ends_with("part")), "{:?}", t.sent);
        let pk: Vec<_> = order.iter().map(|&r| (r, ints(&[3]))).collect();
        assert_eq!(t.collective(&pk), vec![ints(&[3]); N as usize]);
    }
}

/// A gather of exactly the connection limit (256 MiB in all) over two levels, with the
/// default parts: before, it passed the size check and then overflowed the frame.
#[test]
fn a_gather_of_exactly_the_limit_goes_through() {
    let limit = pmgr::wire::DEFAULT_MAX_BYTES;
    let per = limit / N as usize;
    let mut t = Tree::new(libi::msg::PMGR_CHUNK);
    let pk: Vec<_> =
        (0..N).map(|r| (r, packet(&[5, 0, per as i32], &vec![r as u8 + 1; per]))).collect();
    let got = t.collective(&pk);
    assert_eq!(got[0].len(), limit);
    for r in 0..N as usize {
        assert!(got[0][r * per..(r + 1) * per].iter().all(|&b| b == r as u8 + 1), "block {r}");
    }
    let biggest = t.sent.iter().map(|s| s.0).max().unwrap_or(0);
    assert!(biggest <= libi::msg::PMGR_CHUNK + 64, "a tree message of {biggest} bytes");
}

/// A node whose subtree holds every rank (one node under the front end) resolves the
/// collective itself: nothing goes up to come back down.
#[test]
fn a_node_holding_every_rank_resolves_it() {
    let plan = NodePlan {
        node: 1,
        host: "n1".into(),
        ranks: (0..N).map(|rank| RankSlot { rank, app: 0 }).collect(),
        children: vec![],
    };
    let mut c = NodeCore::new(NodeSetup { job: job(), plan }, false, false);
    let d = pat(1, 300_000);
    let mut fx = Vec::new();
    for r in 0..N {
        c.pmgr_connected(u64::from(r), r);
        let mut bytes = ints(&[8, r as i32]);
        bytes.extend(packet(&[4, 1, d.len() as i32], if r == 1 { &d } else { &[] }));
        c.pmgr_data(u64::from(r), &bytes, &mut fx);
    }
    let mut got: HashMap<u64, Vec<u8>> = HashMap::new();
    for e in &fx {
        match e {
            Effect::ToPmgr(conn, b) => got.entry(*conn).or_default().extend_from_slice(b),
            Effect::ToParent(m) => panic!("sent up: {}", wire_size(m)),
            _ => {}
        }
    }
    for r in 0..N {
        assert_eq!(got.get(&u64::from(r)), Some(&d), "rank {r}");
    }
}
