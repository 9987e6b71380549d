//! The tree-combined collective engine against a straightforward reference implementation:
//! every op for N = 1..5, every split of the ranks over 1–3 subtrees, several merge orders;
//! plus mismatch/duplicate cases and a property test.

use bytes::Bytes;
use pmgr::collective::{resolve, Field, Mismatch, Outcome, Partial};
use pmgr::wire::{reply_barrier, Packet};
use proptest::prelude::*;

/// Every rank's packet for one collective.
fn packets(kind: u8, n: u32, root: u32, sz: u32, seed: u8) -> Vec<Packet> {
    let bytes = |r: u32, len: usize| -> Bytes {
        (0..len)
            .map(|k| (r as usize * 37 + k * 11 + seed as usize) as u8)
            .collect::<Vec<u8>>()
            .into()
    };
    let nsz = (n * sz) as usize;
    (0..n)
        .map(|r| match kind {
            0 => Packet::Barrier,
            1 => Packet::Close,
            2 => Packet::Bcast {
                root,
                sz,
                data: if r == root { bytes(r, sz as usize) } else { Bytes::new() },
            },
            3 => Packet::Gather { root, sz, data: bytes(r, sz as usize) },
            4 => Packet::Scatter {
                root,
                sz,
                data: if r == root { bytes(r, nsz) } else { Bytes::new() },
            },
            5 => Packet::Allgather { sz, data: bytes(r, sz as usize) },
            6 => Packet::Alltoall { sz, data: bytes(r, nsz) },
            // libi's: sizes per rank.
            7 => Packet::Gatherv { root, data: bytes(r, ((r + sz) % 4) as usize) },
            _ => {
                let counts: Vec<u32> = (0..n).map(|i| (i + sz) % 3).collect();
                let total = counts.iter().sum::<u32>() as usize;
                if r == root {
                    Packet::Scatterv { root, counts, data: bytes(r, total) }
                } else {
                    Packet::Scatterv { root, counts: vec![], data: Bytes::new() }
                }
            }
        })
        .collect()
}

/// Reference: the replies a v8 server writes, computed directly.
fn reference(pk: &[Packet]) -> Vec<Option<Vec<u8>>> {
    let n = pk.len();
    let concat = || pk.iter().flat_map(|p| p.data().to_vec()).collect::<Vec<u8>>();
    (0..n)
        .map(|i| match &pk[i] {
            Packet::Barrier => Some(reply_barrier()),
            Packet::Close | Packet::Abort { .. } => None,
            Packet::Bcast { root, .. } => Some(pk[*root as usize].data().to_vec()),
            Packet::Gather { root, .. } => (*root as usize == i).then(concat),
            Packet::Scatter { root, sz, .. } => {
                let sz = *sz as usize;
                Some(pk[*root as usize].data()[i * sz..(i + 1) * sz].to_vec())
            }
            Packet::Allgather { .. } => Some(concat()),
            Packet::Alltoall { sz, .. } => {
                let sz = *sz as usize;
                Some(pk.iter().flat_map(|p| p.data()[i * sz..(i + 1) * sz].to_vec()).collect())
            }
            Packet::Gatherv { root, .. } => (*root as usize == i).then(concat),
            Packet::Scatterv { root, .. } => match &pk[*root as usize] {
                Packet::Scatterv { counts, data, .. } => {
                    let at: usize = counts[..i].iter().map(|&c| c as usize).sum();
                    Some(data[at..at + counts[i] as usize].to_vec())
                }
                _ => None,
            },
        })
        .collect()
}

fn roundtrip<T: serde::Serialize + serde::de::DeserializeOwned>(t: &T) -> T {
    postcard::from_bytes(&postcard::to_stdvec(t).expect("encode")).expect("decode")
}

/// Run through the engine: subtree k holds the ranks r with assign[r] == k; partials are
/// merged in `order` (left fold, or right-nested when `nested`); replies per rank come from
/// the outcome restricted to that rank's subtree (after a serde round trip).
fn engine(
    pk: &[Packet],
    assign: &[usize],
    k: usize,
    order: &[usize],
    nested: bool,
) -> Vec<Option<Vec<u8>>> {
    let n = pk.len() as u32;
    let mut parts: Vec<Partial> = (0..k).map(|_| Partial::new(n)).collect();
    for r in (0..n).rev() {
        parts[assign[r as usize]].add(r, pk[r as usize].clone()).expect("add");
    }
    let mut parts: Vec<Option<Partial>> = parts.into_iter().map(|p| Some(roundtrip(&p))).collect();
    let mut seq: Vec<Partial> = order.iter().map(|&i| parts[i].take().expect("once")).collect();
    let total = if nested {
        let mut acc = seq.pop().expect("nonempty");
        while let Some(mut p) = seq.pop() {
            p.merge(acc).expect("merge");
            acc = p;
        }
        acc
    } else {
        let mut it = seq.into_iter();
        let mut acc = it.next().expect("nonempty");
        for p in it {
            acc.merge(p).expect("merge");
        }
        acc
    };
    assert!(total.is_complete());
    let out = resolve(roundtrip(&total), n).expect("resolve");
    let subs: Vec<Vec<u32>> =
        (0..k).map(|s| (0..n).filter(|&r| assign[r as usize] == s).collect()).collect();
    let mut replies = vec![None; n as usize];
    for ranks in &subs {
        let down: Outcome = roundtrip(&out.restrict(ranks));
        for &r in ranks {
            replies[r as usize] = down.reply_for(r);
            assert_eq!(replies[r as usize], out.reply_for(r));
        }
    }
    replies
}

fn permutations(k: usize) -> Vec<Vec<usize>> {
    match k {
        1 => vec![vec![0]],
        2 => vec![vec![0, 1], vec![1, 0]],
        _ => vec![
            vec![0, 1, 2],
            vec![0, 2, 1],
            vec![1, 0, 2],
            vec![1, 2, 0],
            vec![2, 0, 1],
            vec![2, 1, 0],
        ],
    }
}

#[test]
fn exhaustive_small_jobs() {
    let mut cases = 0u64;
    for n in 1u32..=5 {
        for k in 1usize..=3 {
            // Every assignment of ranks to k subtrees (empty subtrees included).
            for code in 0..k.pow(n) {
                let assign: Vec<usize> = (0..n).map(|r| code / k.pow(r) % k).collect();
                for kind in 0u8..9 {
                    let roots: Vec<u32> =
                        if matches!(kind, 2..=4 | 7 | 8) { (0..n).collect() } else { vec![0] };
                    for &root in &roots {
                        let sz = 1 + (code as u32 + root) % 3;
                        let pk = packets(kind, n, root, sz, code as u8);
                        let want = reference(&pk);
                        for order in permutations(k) {
                            for nested in [false, true] {
                                assert_eq!(
                                    engine(&pk, &assign, k, &order, nested),
                                    want,
                                    "n={n} k={k} assign={assign:?} kind={kind} root={root}"
                                );
                                cases += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(cases > 10_000);
}

#[test]
fn gather_result_only_goes_to_the_roots_subtree() {
    let pk = packets(3, 4, 2, 2, 0);
    let mut p = Partial::new(4);
    for (r, x) in pk.into_iter().enumerate() {
        p.add(r as u32, x).expect("add");
    }
    let out = resolve(p, 4).expect("resolve");
    assert_eq!(out.restrict(&[0, 1]), Outcome::Gather { root: 2, data: None });
    assert!(matches!(out.restrict(&[2, 3]), Outcome::Gather { data: Some(d), .. } if d.len() == 8));
    let pk = packets(6, 4, 0, 3, 0);
    let mut p = Partial::new(4);
    for (r, x) in pk.into_iter().enumerate() {
        p.add(r as u32, x).expect("add");
    }
    match resolve(p, 4).expect("resolve").restrict(&[1, 3]) {
        Outcome::Alltoall { blocks } => {
            assert_eq!(blocks.keys().copied().collect::<Vec<_>>(), vec![1, 3])
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn mismatches_name_rank_and_field() {
    let mut p = Partial::new(3);
    p.add(0, Packet::Barrier).expect("add");
    let e = p.add(2, Packet::Close).expect_err("op");
    assert!(matches!(e, Mismatch::Field { rank: 2, reference: 0, field: Field::Op, .. }), "{e}");
    assert!(e.to_string().contains("rank 2 called CLOSE but rank 0 called BARRIER"), "{e}");

    let mut p = Partial::new(3);
    p.add(1, Packet::Gather { root: 0, sz: 1, data: vec![1].into() }).expect("add");
    let e = p.add(0, Packet::Gather { root: 1, sz: 1, data: vec![1].into() }).expect_err("root");
    assert!(matches!(e, Mismatch::Field { rank: 0, field: Field::Root, .. }));
    let e = p.add(2, Packet::Gather { root: 0, sz: 2, data: vec![1, 2].into() }).expect_err("size");
    assert!(matches!(e, Mismatch::Field { rank: 2, field: Field::Size, .. }));

    // Merge: the higher subtree's lowest rank is named, whatever the merge order.
    let mk = |r: u32, sz: u32| {
        let mut p = Partial::new(4);
        p.add(r, Packet::Allgather { sz, data: vec![0; sz as usize].into() }).expect("add");
        p
    };
    for (a, b) in [(mk(1, 1), mk(3, 2)), (mk(3, 2), mk(1, 1))] {
        let mut a = a;
        let e = a.merge(b).expect_err("size");
        assert!(
            matches!(e, Mismatch::Field { rank: 3, reference: 1, field: Field::Size, .. }),
            "{e}"
        );
    }

    let mut p = Partial::new(2);
    p.add(1, Packet::Barrier).expect("add");
    assert_eq!(p.add(1, Packet::Barrier), Err(Mismatch::Duplicate { rank: 1 }));
    let mut q = Partial::new(2);
    q.add(1, Packet::Barrier).expect("add");
    assert_eq!(p.clone().merge(q), Err(Mismatch::Duplicate { rank: 1 }));
    assert_eq!(p.add(2, Packet::Barrier), Err(Mismatch::RankOutOfRange { rank: 2, nprocs: 2 }));
    assert!(matches!(resolve(p.clone(), 2), Err(Mismatch::Incomplete { first_missing: 0, .. })));
    assert!(matches!(p.merge(Partial::new(3)), Err(Mismatch::Nprocs { .. })));

    let mut p = Partial::new(2);
    let e = p.add(0, Packet::Bcast { root: 0, sz: 3, data: vec![1].into() }).expect_err("len");
    assert!(matches!(e, Mismatch::BadLength { rank: 0, got: 1, expected: 3, .. }));
    let e = p.add(0, Packet::Bcast { root: 5, sz: 1, data: vec![].into() }).expect_err("root");
    assert!(matches!(e, Mismatch::RankOutOfRange { rank: 5, .. }));
    let mut p = Partial::new(u32::MAX);
    let e = p.add(0, Packet::Allgather { sz: u32::MAX, data: vec![].into() }).expect_err("big");
    assert!(matches!(e, Mismatch::TooLarge { .. }));
}

#[test]
fn close_and_abort() {
    let mut p = Partial::new(2);
    p.add(0, Packet::Close).expect("add");
    let mut q = Partial::new(2);
    q.add(1, Packet::Close).expect("add");
    p.merge(q).expect("merge");
    let out = resolve(p, 2).expect("resolve");
    assert_eq!(out, Outcome::Closed);
    assert!(out.is_final() && out.reply_for(0).is_none());

    // An abort wins without waiting for the others.
    let mut p = Partial::new(3);
    p.add(0, Packet::Barrier).expect("add");
    let mut q = Partial::new(3);
    q.add(2, Packet::Abort { code: -4 }).expect("abort");
    p.merge(q).expect("merge");
    assert!(p.ready());
    assert_eq!(resolve(p, 3), Ok(Outcome::Aborted { rank: 2, code: -4 }));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn random_jobs(n in 1u32..9, kind in 0u8..9, root_sel in 0u32..100, sz in 0u32..17,
                   seed in any::<u8>(), k in 1usize..5, assign_seed in proptest::collection::vec(0usize..4, 8),
                   order_rot in 0usize..4, nested in any::<bool>()) {
        let root = root_sel % n;
        let assign: Vec<usize> = (0..n as usize).map(|r| assign_seed[r] % k).collect();
        let order: Vec<usize> = (0..k).map(|i| (i + order_rot) % k).collect();
        let pk = packets(kind, n, root, sz, seed);
        prop_assert_eq!(engine(&pk, &assign, k, &order, nested), reference(&pk));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    /// Arbitrary (also wrongly sized or conflicting) packets: errors, never panics.
    #[test]
    fn garbage_never_panics(n in 0u32..6, items in proptest::collection::vec(
        (0u32..8, 0u8..8, 0u32..8, 0u32..6, 0usize..40, 0usize..3), 0..12)) {
        let mut parts: Vec<Partial> = (0..3).map(|_| Partial::new(n)).collect();
        for (rank, kind, root, sz, len, part) in items {
            let data = Bytes::from(vec![7u8; len]);
            let pk = match kind {
                0 => Packet::Barrier,
                1 => Packet::Close,
                2 => Packet::Bcast { root, sz, data },
                3 => Packet::Gather { root, sz, data },
                4 => Packet::Scatter { root, sz, data },
                5 => Packet::Allgather { sz, data },
                6 => Packet::Alltoall { sz, data },
                _ => Packet::Abort { code: -1 },
            };
            let _ = parts[part].add(rank, pk);
        }
        let mut acc = Partial::new(n);
        for p in parts {
            let _ = acc.merge(p);
        }
        if let Ok(out) = resolve(acc, n) {
            for r in 0..n {
                let _ = out.restrict(&[r]).reply_for(r);
            }
        }
    }
}
