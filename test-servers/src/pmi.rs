//! A real PMI server for the library tests: pmi-wire's `Connection` on one end of a
//! socketpair, in a thread, answering like a one-rank node (shared by libpmi and libpmi2).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::IntoRawFd;
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

use pmi_wire::server::{Action, ConnConfig, Connection};

pub const KVSNAME: &str = "kvs_test_0";

/// Start the server; sets `PMI_FD` (and `PMI_RANK`/`PMI_SIZE`) for this process. The thread
/// returns every action it saw once the client closes its end.
pub fn start() -> JoinHandle<Vec<Action>> {
    let (ours, theirs) = UnixStream::pair().expect("socketpair");
    std::env::set_var("PMI_FD", theirs.into_raw_fd().to_string());
    std::env::set_var("PMI_RANK", "0");
    std::env::set_var("PMI_SIZE", "1");
    std::thread::spawn(move || serve(ours))
}

fn serve(mut s: UnixStream) -> Vec<Action> {
    let cfg = ConnConfig {
        rank: 0,
        size: 1,
        appnum: 0,
        kvsname: KVSNAME.into(),
        universe_size: 3,
        spawner: None,
    };
    let mut c = Connection::new(cfg);
    let mut kvs: HashMap<String, Vec<u8>> = HashMap::new();
    let mut node: HashMap<String, String> = HashMap::new();
    let mut names: HashMap<String, String> = HashMap::new();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) | Err(_) => return seen,
            Ok(n) => n,
        };
        let mut out = Vec::new();
        c.receive(&buf[..n], &mut out);
        for a in out {
            let reply = match &a {
                Action::Send(b) => Some(b.clone()),
                Action::Put { key, value } => {
                    kvs.insert(key.clone(), value.clone());
                    None
                }
                Action::Get { key } => Some(c.answer_get(key, kvs.get(key).map(Vec::as_slice))),
                Action::BarrierIn => Some(c.barrier_out()),
                Action::PutNodeAttr { key, value } => {
                    node.insert(key.clone(), value.clone());
                    None
                }
                Action::GetNodeAttr { key, .. } => {
                    Some(c.answer_node_attr(key, node.get(key).map(String::as_str)))
                }
                Action::GetJobAttr { key } => Some(c.answer_job_attr(
                    key,
                    (key == "PMI_process_mapping").then_some("(vector,(0,1,1))"),
                )),
                Action::Publish { service, port } => {
                    let fresh = !names.contains_key(service);
                    names.entry(service.clone()).or_insert_with(|| port.clone());
                    Some(c.answer_publish(fresh))
                }
                Action::Unpublish { service } => {
                    Some(c.answer_unpublish(names.remove(service).is_some()))
                }
                Action::Lookup { service } => {
                    Some(c.answer_lookup(names.get(service).map(String::as_str)))
                }
                Action::Spawn { .. } => Some(c.answer_spawn(-1, None, None)),
                Action::Finalized | Action::Abort { .. } | Action::ProtocolError { .. } => None,
            };
            if let Some(r) = reply {
                if s.write_all(&r).is_err() {
                    return seen;
                }
            }
            seen.push(a);
        }
    }
}
