//! PMI-1 codec throughput: a realistic MPICH 4.0 rank conversation through
//! `Connection::receive`, and `parse_request` / `Reply::encode` alone.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pmi_wire::server::{Action, ConnConfig, Connection};
use pmi_wire::v1::{parse_request, Reply};

fn cfg() -> ConnConfig {
    ConnConfig {
        rank: 0,
        size: 2,
        appnum: 0,
        kvsname: "kvs_12345_0_1804289383_node1".into(),
        universe_size: 2,
        spawner: None,
    }
}

/// What one MPICH 4.0 rank sends from MPI_Init to MPI_Finalize (`docs/spec/pmi-wire.md` §9).
fn session() -> Vec<u8> {
    let hex: String = (0..600).map(|i| b"0123456789ABCDEF"[i % 16] as char).collect();
    format!(
        "cmd=init pmi_version=1 pmi_subversion=1\n\
         cmd=get_maxes\n\
         cmd=get_appnum\n\
         cmd=get_my_kvsname\n\
         cmd=get kvsname=kvs_12345_0_1804289383_node1 key=PMI_process_mapping\n\
         cmd=put kvsname=kvs_12345_0_1804289383_node1 key=-allgather-shm-1-0 value={hex}\n\
         cmd=barrier_in\n\
         cmd=get kvsname=kvs_12345_0_1804289383_node1 key=-allgather-shm-1-1\n\
         cmd=finalize\n"
    )
    .into_bytes()
}

fn bench(c: &mut Criterion) {
    let input = session();
    let value: String = (0..600).map(|i| b"0123456789ABCDEF"[i % 16] as char).collect();

    let mut g = c.benchmark_group("connection");
    g.throughput(Throughput::Bytes(input.len() as u64));
    g.bench_function("mpich40_session", |b| {
        let mut out = Vec::with_capacity(16);
        b.iter(|| {
            let mut conn = Connection::new(cfg());
            out.clear();
            conn.receive(black_box(&input), &mut out);
            let mut replies = 0usize;
            for a in out.drain(..) {
                match a {
                    Action::Send(bytes) => replies += bytes.len(),
                    Action::Get { key } => {
                        let v = (key != "PMI_process_mapping").then_some(value.as_bytes());
                        replies += conn.answer_get(&key, v).len();
                    }
                    Action::BarrierIn => replies += conn.barrier_out().len(),
                    _ => {}
                }
            }
            black_box(replies)
        })
    });
    g.finish();

    let lines: Vec<&[u8]> = input.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
    let mut g = c.benchmark_group("parse_request");
    g.throughput(Throughput::Bytes(input.len() as u64));
    g.bench_function("mpich40_session_lines", |b| {
        b.iter(|| {
            for l in &lines {
                black_box(parse_request(black_box(l)).ok());
            }
        })
    });
    g.finish();

    let replies = vec![
        Reply::ResponseToInit { version: 1, subversion: 1, rc: 0 },
        Reply::Maxes { kvsname_max: 256, keylen_max: 64, vallen_max: 1024 },
        Reply::Appnum { appnum: 0 },
        Reply::MyKvsname { kvsname: cfg().kvsname },
        Reply::GetResult { value: Ok("(vector,(0,1,2))".into()) },
        Reply::PutResult { rc: 0, msg: "success".into() },
        Reply::BarrierOut,
        Reply::GetResult { value: Ok(value.clone().into_bytes()) },
        Reply::FinalizeAck,
    ];
    let mut buf = Vec::with_capacity(4096);
    for r in &replies {
        r.encode(&mut buf);
    }
    let mut g = c.benchmark_group("reply_encode");
    g.throughput(Throughput::Bytes(buf.len() as u64));
    g.bench_function("mpich40_session_replies", |b| {
        b.iter(|| {
            buf.clear();
            for r in &replies {
                black_box(r).encode(&mut buf);
            }
            black_box(buf.len())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
