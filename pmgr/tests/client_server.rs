//! The Rust client library against the in-process test server (several NLAs, loopback TCP).

use std::time::Duration;

use libi_test_servers::pmgr::{env_for, TestServer};
use pmgr::client::{Config, Pmgr, ReduceOp};
use pmgr::wire::Op;

fn config(srv: &TestServer, rank: u32) -> Config {
    let env = env_for(srv, rank, 4242);
    Config::from_lookup(|k| env.get(k).cloned()).expect("config")
}

/// Every collective, with result checks; returns what rank `me` saw of allgatherstr.
fn workload(p: &mut Pmgr) -> Vec<Vec<u8>> {
    let n = p.nprocs() as usize;
    let me = p.rank() as usize;
    let pat = |src: usize, dst: usize, k: usize| (src * 31 + dst * 7 + k) as u8;
    p.barrier().expect("barrier");
    for root in 0..n as u32 {
        let mut b = if me == root as usize { vec![root as u8 + 1; 5] } else { vec![0; 5] };
        p.bcast(&mut b, root).expect("bcast");
        assert_eq!(b, vec![root as u8 + 1; 5]);
    }
    let root = (n - 1) as u32;
    let send: Vec<u8> = (0..3).map(|k| pat(me, 0, k)).collect();
    let mut all = vec![0u8; if me == root as usize { 3 * n } else { 0 }];
    p.gather(&send, &mut all, root).expect("gather");
    if me == root as usize {
        let want: Vec<u8> = (0..n).flat_map(|s| (0..3).map(move |k| pat(s, 0, k))).collect();
        assert_eq!(all, want);
    }
    let send: Vec<u8> = if me == 0 {
        (0..n).flat_map(|d| (0..2).map(move |k| pat(0, d, k))).collect()
    } else {
        vec![]
    };
    let mut mine = [0u8; 2];
    p.scatter(&send, &mut mine, 0).expect("scatter");
    assert_eq!(mine, [pat(0, me, 0), pat(0, me, 1)]);
    let mut all = vec![0u8; 4 * n];
    p.allgather(&[me as u8; 4], &mut all).expect("allgather");
    assert_eq!(all, (0..n).flat_map(|s| [s as u8; 4]).collect::<Vec<_>>());
    let send: Vec<u8> = (0..n).flat_map(|d| (0..2).map(move |k| pat(me, d, k))).collect();
    let mut recv = vec![0u8; 2 * n];
    p.alltoall(&send, 2, &mut recv).expect("alltoall");
    let want: Vec<u8> = (0..n).flat_map(|s| (0..2).map(move |k| pat(s, me, k))).collect();
    assert_eq!(recv, want);
    // libi's variable-size ops: rank r sends (gets) r + 1 bytes.
    let total: usize = (1..=n).sum();
    let mut all = vec![0u8; if me == 0 { total } else { 0 }];
    p.gatherv(&vec![me as u8; me + 1], &mut all, 0).expect("gatherv");
    if me == 0 {
        assert_eq!(all, (0..n).flat_map(|r| vec![r as u8; r + 1]).collect::<Vec<_>>());
    }
    let counts: Vec<usize> = (0..n).map(|r| r + 1).collect();
    let send: Vec<u8> =
        if me == n - 1 { (0..n).flat_map(|r| vec![r as u8 + 10; r + 1]).collect() } else { vec![] };
    let mut got = vec![0u8; me + 1];
    p.scatterv(&send, &counts, &mut got, (n - 1) as u32).expect("scatterv");
    assert_eq!(got, vec![me as u8 + 10; me + 1]);
    let sum = p.allreduce_int64(me as i64 - 1, ReduceOp::Sum).expect("sum");
    assert_eq!(sum, (0..n as i64).map(|r| r - 1).sum::<i64>());
    let max = p.allreduce_int64(-(me as i64) * 1_000_000_000_000, ReduceOp::Max).expect("max");
    assert_eq!(max, 0);
    let agg = p.aggregate(&vec![me as u8; me]).expect("aggregate");
    assert_eq!(agg, (0..n).flat_map(|r| vec![r as u8; r]).collect::<Vec<_>>());
    let strs = p.allgatherstr(format!("host-{}", "x".repeat(me)).as_bytes()).expect("strs");
    assert_eq!(strs.len(), n);
    for (r, s) in strs.iter().enumerate() {
        assert_eq!(s, format!("host-{}", "x".repeat(r)).as_bytes());
    }
    strs
}

fn run_job(nprocs: u32, layout: Vec<Vec<u32>>) {
    let mut srv = TestServer::start(nprocs, layout);
    let cfgs: Vec<Config> = (0..nprocs).map(|r| config(&srv, r)).collect();
    let hs: Vec<_> = cfgs
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || {
                let mut p = Pmgr::with_config(c);
                p.open().expect("open");
                workload(&mut p);
                p.close().expect("close");
                p.finalize().expect("finalize");
            })
        })
        .collect();
    for h in hs {
        h.join().expect("client thread");
    }
    let rep = srv.join();
    assert_eq!(rep.error, None);
    assert_eq!(rep.ops.last(), Some(&Op::Close));
    // barrier + n bcast + gather + scatter + allgather + alltoall + gatherv + scatterv
    // + 2 x (gather + bcast) + aggregate (2 allgathers) + allgatherstr (gather + bcast +
    // allgather) + close
    assert_eq!(rep.ops.len(), 1 + nprocs as usize + 4 + 2 + 4 + 2 + 3 + 1, "{:?}", rep.ops);
}

#[test]
fn every_collective_two_nlas() {
    run_job(5, vec![vec![1, 4], vec![0, 2, 3]]);
}

#[test]
fn every_collective_three_nlas_one_empty_root() {
    run_job(4, vec![vec![], vec![3, 0], vec![1, 2]]);
}

#[test]
fn every_collective_one_nla() {
    run_job(2, vec![vec![0, 1]]);
}

#[test]
fn singleton_never_connects() {
    let cfg = Config::from_lookup(|k| match k {
        "MPIRUN_RANK" => Some("0".into()),
        "MPIRUN_NPROCS" => Some("1".into()),
        "MPIRUN_ID" => Some("9".into()),
        _ => None,
    })
    .expect("config");
    let mut p = Pmgr::with_config(cfg);
    p.open().expect("open");
    assert_eq!(workload(&mut p), vec![b"host-".to_vec()]);
    p.close().expect("close");
}

#[test]
fn mismatch_fails_the_job_and_the_clients() {
    let mut srv = TestServer::start(3, vec![vec![0], vec![1, 2]]);
    let hs: Vec<_> = (0..3)
        .map(|r| {
            let c = config(&srv, r);
            std::thread::spawn(move || {
                let mut p = Pmgr::with_config(c);
                p.open().expect("open");
                let mut b = [0u8; 4];
                // rank 2 disagrees on the root
                let res = p.bcast(&mut b, if r == 2 { 1 } else { 0 });
                drop(p); // closes the socket like a dying process
                res.is_err()
            })
        })
        .collect();
    let rep = srv.join();
    let err = rep.error.expect("mismatch reported");
    assert!(err.contains("rank 2") && err.contains("root"), "{err}");
    drop(srv);
    for h in hs {
        // The server gave up: every client sees the connection fail (test server drops
        // the sockets when its threads end).
        assert!(h.join().expect("client"));
    }
}

#[test]
fn abort_record_reaches_the_server() {
    let mut srv = TestServer::start(2, vec![vec![0], vec![1]]);
    let mut ps: Vec<Pmgr> = (0..2).map(|r| Pmgr::with_config(config(&srv, r))).collect();
    for p in &mut ps {
        p.open().expect("open");
    }
    // A barrier first: the test server tells its ranks by the order of their hellos (the
    // NLA by the process at the other end), so an abort record that looks like rank 0's
    // hello must not reach it before rank 0's own connection did.
    let mut one = ps.pop().expect("rank 1");
    let h = std::thread::spawn(move || {
        one.barrier().expect("barrier");
        one
    });
    ps[0].barrier().expect("barrier");
    ps.push(h.join().expect("rank 1"));
    ps[1].abort(-3, b"out of cheese").expect("abort");
    let a = srv.wait_aborts(1);
    assert_eq!(a.len(), 1);
    assert_eq!(
        (a[0].code, a[0].rank, a[0].message.as_slice()),
        (Some(-3), Some(1), &b"out of cheese"[..])
    );
    // Abort with code 8 (a peer rank that looks like the protocol version) is recognised too.
    ps[0].abort(8, b"peer").expect("abort");
    let a = srv.wait_aborts(2);
    assert_eq!((a[1].code, a[1].rank), (Some(8), Some(0)));
    for mut p in ps {
        p.close().expect("close");
    }
    let rep = srv.join();
    assert_eq!(rep.error, None);
    assert_eq!(rep.ops, vec![Op::Barrier, Op::Close]);
}

#[test]
fn connect_gives_up_with_backoff() {
    // A port nobody listens on: bounded retries, then an error naming the address.
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    let cfg = Config {
        rank: 0,
        nprocs: 2,
        id: 1,
        server: Some(("127.0.0.1".into(), port)),
        connect_tries: 3,
        connect_timeout: Duration::from_secs(1),
        connect_backoff: Duration::from_millis(50),
        connect_random: true,
    };
    let err = Pmgr::with_config(cfg).open().expect_err("no server");
    let want = format!("cannot connect to 127.0.0.1:{port} after 3 attempts");
    assert!(err.to_string().contains(&want), "{err}");
}
