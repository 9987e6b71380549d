//! Dynamic processes: `MPI_Comm_spawn` (PMI-1 `mcmd=spawn`) and the job-wide name service
//! (PMI-1 `publish_name`, `unpublish_name`, `lookup_name`; PMI-2 `name-*`), both served by
//! the front end. Spawn over PMI-2 is in pmi2.rs, over ssh in ssh.rs, under Slurm in slurm.rs.
//!
//! MPI programs here use MPICH 5 from PyPI (`ci/install-deps.sh` installs it into
//! /opt/libi/mpich5, or set `LIBI_MPICH5`): Debian's MPICH 4.0.2 cannot do dynamic processes.
//! MPICH 5's UCX netmod cannot open a port in this sandbox ("no space for port_name tag",
//! under its own Hydra too), so these jobs select its OFI netmod.

mod common;

use common::{
    mpich5_program, pmi_child, run, spawn_block, spawner_script, sync_dir, wait_marks, LAUNCHED_BY,
    MPIEXEC, PMI_SAY,
};
use std::path::Path;

fn nameserv() -> String {
    mpich5_program("nameserv")
}

/// Four simulated nodes of two slots each.
const NODES4: &str = "n1:2,n2:2,n3:2,n4:2";

/// The jobs' arguments: MPICH 5 on its OFI netmod, on this node or on 4 simulated nodes.
fn job_args<'a>(hosts: Option<&'a str>, rest: &[&'a str]) -> Vec<&'a str> {
    let mut args: Vec<&str> = vec!["-genv", "MPIR_CVAR_CH4_NETMOD", "ofi"];
    if let Some(h) = hosts {
        args.extend(["-launcher", "fork", "-hosts", h]);
    }
    args.extend(rest);
    args
}

/// What spawn.c prints, in order (`parent` once: its rank 0).
const SPAWN_LINES: [&str; 7] = [
    "child a 0/3 app 0 ok",
    "child b 1/3 app 1 ok",
    "child b 2/3 app 1 ok",
    "child g 0/1 app 0 ok",
    "child s 0/2 app 0 ok",
    "child s 1/2 app 0 ok",
    "parent ok",
];

/// MPI_Comm_spawn of 2 children with arguments (one with a space and a `=`), then
/// MPI_Comm_spawn_multiple of 1 + 2 while the first 2 spawn a grandchild together (nested
/// spawn): every child checks its own world (size, allreduce, appnum, arguments, universe
/// size), both sides exchange values over the intercommunicator and disconnect. One and two
/// parents, one node and 4 simulated nodes of 2 slots. The nested spawn and the
/// spawn_multiple race, so the group numbers in the labels (`[G:R]`) are not fixed.
#[test]
fn spawn_and_spawn_multiple() {
    let p = mpich5_program("spawn");
    for (hosts, n) in [(None, "1"), (None, "2"), (Some(NODES4), "1"), (Some(NODES4), "2")] {
        let r = run(&job_args(hosts, &["-l", "-n", n, &p]), b"");
        assert_eq!(r.status, 0, "{hosts:?} -n {n}: {}", r.stderr);
        let mut lines: Vec<&str> = r
            .stdout
            .lines()
            .map(|l| match l.split_once("] ") {
                Some((label, rest)) if label.starts_with('[') => rest,
                _ => panic!("unlabelled line {l:?}"),
            })
            .collect();
        lines.sort();
        assert_eq!(lines, SPAWN_LINES, "{hosts:?} -n {n}: {}\n{}", r.stdout, r.stderr);
        assert!(r.stdout.contains("[0] parent ok"), "{}", r.stdout);
    }
}

/// MPI_UNIVERSE_SIZE as a job and the group it spawns see it (Hydra's rules): not set unless
/// `-usize` says; `-usize SYSTEM` is the host list's slots, and a spawned group sees the
/// job's value, never less than its own size; `-usize N` is N everywhere.
#[test]
fn universe_size_seen_by_jobs_and_spawned_groups() {
    let p = mpich5_program("universe");
    let cases: [(&[&str], [&str; 2]); 5] = [
        (&["-n", "1"], ["child world 3 universe unset", "parent world 1 universe unset"]),
        (
            &["-launcher", "fork", "-hosts", NODES4, "-n", "2"],
            ["child world 3 universe unset", "parent world 2 universe unset"],
        ),
        (
            &["-launcher", "fork", "-hosts", NODES4, "-usize", "SYSTEM", "-n", "1"],
            ["child world 3 universe 8", "parent world 1 universe 8"],
        ),
        (
            &["-launcher", "fork", "-hosts", "n1:1", "-usize", "SYSTEM", "-n", "1"],
            ["child world 3 universe 3", "parent world 1 universe 1"],
        ),
        (&["-usize", "7", "-n", "2"], ["child world 3 universe 7", "parent world 2 universe 7"]),
    ];
    for (args, want) in cases {
        let mut a: Vec<&str> = vec!["-genv", "MPIR_CVAR_CH4_NETMOD", "ofi"];
        a.extend(args);
        a.extend([p.as_str(), "3"]);
        let r = run(&a, b"");
        assert_eq!(r.status, 0, "{args:?}: {}", r.stderr);
        let mut lines: Vec<&str> = r.stdout.lines().collect();
        lines.sort();
        assert_eq!(lines, want, "{args:?}: {}", r.stderr);
    }
}

/// A manager that spawns single workers on MPI_COMM_SELF, two at a time, hands each a task
/// and disconnects, for 10 rounds (MPICH's `taskmanager` test in spirit).
#[test]
fn task_manager_rounds() {
    let p = mpich5_program("taskmanager");
    for hosts in [None, Some(NODES4)] {
        let r = run(&job_args(hosts, &["-n", "1", &p, "10", "2"]), b"");
        assert_eq!(r.status, 0, "{hosts:?}: {}", r.stderr);
        assert_eq!(r.stdout, "manager ok 10 x 2\n", "{hosts:?}: {}", r.stderr);
    }
}

/// MPICH's singleton init: spawn.c started directly (no mpiexec) finds `mpiexec` — a link
/// to libi-mpiexec — first on its PATH when it spawns, and MPICH runs
/// `mpiexec -pmi_args PORT ...`, which serves it as rank 0 of a job of one: the spawns, the
/// nested spawn and the exchanges work, the singleton exits 0 and nothing is left behind.
#[test]
fn singleton_spawns_through_pmi_args() {
    let p = mpich5_program("spawn");
    let bin =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("pathbin-{}", std::process::id()));
    std::fs::create_dir_all(&bin).expect("mkdir");
    let link = bin.join("mpiexec");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(common::MPIEXEC, &link).expect("symlink mpiexec");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let r = common::run_direct(&p, &[], &[("PATH", &path), ("MPIR_CVAR_CH4_NETMOD", "ofi")]);
    assert_eq!(r.status, 0, "{}\n{}", r.stdout, r.stderr);
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, SPAWN_LINES, "{}", r.stderr);
}

/// A spawn that cannot start (missing program) or asks for more than `-usize` allows: the
/// parent gets an error code from MPI_Comm_spawn (not a hang, not a dead job), goes on
/// and exits 0; stderr says what failed.
#[test]
fn failed_spawns_return_errors() {
    let p = mpich5_program("spawn_fail");
    for hosts in [None, Some("n1,n2,n3,n4")] {
        let r = run(&job_args(hosts, &["-n", "2", &p, "missing"]), b"");
        assert_eq!(r.status, 0, "{hosts:?}: {}", r.stderr);
        assert_eq!(r.stdout.trim(), "spawn failed as expected", "{hosts:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("spawn by rank 0")
                && r.stderr.contains("/nonexistent/libi-no-such-program"),
            "{hosts:?}: {}",
            r.stderr
        );
        let r = run(&job_args(hosts, &["-usize", "8", "-n", "2", &p, "many"]), b"");
        assert_eq!(r.status, 0, "{hosts:?}: {}", r.stderr);
        assert_eq!(r.stdout.trim(), "spawn failed as expected", "{hosts:?}: {}", r.stderr);
        assert!(r.stderr.contains("universe size 8"), "{hosts:?}: {}", r.stderr);
    }
}

/// `bash -c SCRIPT` as one rank on simulated `hosts`, with `-genv` pairs.
fn shell_job(hosts: &str, genv: &[(&str, &str)], script: &str) -> common::Run {
    let mut args = vec!["-launcher", "fork", "-hosts", hosts];
    for (k, v) in genv {
        args.extend(["-genv", k, v]);
    }
    args.extend(["-n", "1", "bash", "-c", script]);
    run(&args, b"")
}

/// The wire: a spawn from a raw PMI-1 client. The children run on the next hosts of the
/// list (round-robin after the job's ranks) or where `info host=` says (in `info wdir`);
/// the group's NLA on a host that runs an NLA of the job is started by that NLA (`by=nla`),
/// elsewhere by the front end's launcher (`by=fe`). The children see
/// `PMI_SPAWNED=1`, their own kvsname and size, and the parent's pre-put pair. A malformed
/// spawn block gets `rc=-1` and the job goes on.
#[test]
fn spawn_over_raw_pmi1() {
    let child = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spawn-child-{}.sh", std::process::id()));
    std::fs::write(
        &child,
        format!(
            "{PMI_SAY}\nsay 'cmd=init pmi_version=1 pmi_subversion=1'\nsay 'cmd=get_my_kvsname'\n\
             kvs=${{REPLY#*kvsname=}}; kvs=${{kvs%% *}}\n\
             say \"cmd=get kvsname=$kvs key=PARENT_ROOT_PORT_NAME\"\n\
             {LAUNCHED_BY}\n\
             echo \"child $PMI_RANK/$PMI_SIZE on $PMI_HOSTNAME spawned=$PMI_SPAWNED stdin=[$(cat)] by=$by dir=$PWD kvs=$kvs $REPLY\"\n\
             say 'cmd=finalize'\n"
        ),
    )
    .expect("write child script");
    let child = format!("exec bash {}", child.display());
    let blocks = [
        spawn_block("2", &child, "port-1", &[]),
        spawn_block("1", &child, "port-2", &[("host", "n1"), ("wdir", "/tmp")]),
        spawn_block("two", &child, "port-3", &[]),
    ];
    // The parent outlives its children's look at /proc: it waits for their 3 marks.
    let sync = sync_dir("raw");
    let script = spawner_script(
        &["B1", "B2", "B3"],
        &format!(
            "{}\nsay cmd=get_universe_size; echo \"parent $REPLY\"\n\
             say cmd=get_my_kvsname; echo \"parent $REPLY\"; say cmd=finalize",
            wait_marks(3)
        ),
    );
    let genv = [("B1", &*blocks[0]), ("B2", &*blocks[1]), ("B3", &*blocks[2]), ("SYNC", &*sync)];
    let r = shell_job("n1,n2,n3,n4", &genv, &script);
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 8, "{}\n{}", r.stdout, r.stderr);
    let kvs = |l: &str| {
        l.split_whitespace().find_map(|t| t.strip_prefix("kvs=")).unwrap_or("?").to_string()
    };
    // the first spawn continues after the job's rank (n1): n2, n3; the second goes to n1
    let expect = [
        ("child 0/1 on n1 spawned=1 stdin=[] by=nla", "value=port-2"),
        ("child 0/2 on n2 spawned=1 stdin=[] by=fe", "value=port-1"),
        ("child 1/2 on n3 spawned=1 stdin=[] by=fe", "value=port-1"),
    ];
    for (l, (head, tail)) in lines[..3].iter().zip(expect) {
        assert!(l.starts_with(head) && l.ends_with(tail), "{l:?}: want {head:?} … {tail:?}");
    }
    assert_ne!(kvs(lines[0]), kvs(lines[1]), "each spawn has its own kvsname");
    // info wdir; otherwise the spawner's working directory
    assert!(lines[0].contains(" dir=/tmp "), "{}", lines[0]);
    assert!(!lines[1].contains(" dir=/tmp "), "{}", lines[1]);
    assert_eq!(kvs(lines[1]), kvs(lines[2]));
    // kvsnames as Hydra's: kvs_<pid>_<group>_<random>_<host>, the same but for the group
    let parent_kvs = lines[3]
        .split_whitespace()
        .find_map(|t| t.strip_prefix("kvsname="))
        .unwrap_or("?")
        .to_string();
    let host = nix_hostname();
    let parts = |k: &str| -> Vec<String> { k.splitn(5, '_').map(str::to_string).collect() };
    let (p0, p1, p2) = (parts(&parent_kvs), parts(&kvs(lines[1])), parts(&kvs(lines[0])));
    for (p, group) in [(&p0, "0"), (&p1, "1"), (&p2, "2")] {
        assert_eq!(p.len(), 5, "{p:?}");
        assert_eq!(p[0], "kvs");
        assert!(p[1].parse::<u32>().is_ok() && p[3].parse::<u32>().is_ok(), "{p:?}");
        assert_eq!(p[2], group, "{p:?}");
        assert_eq!(p[4], host, "{p:?}");
        assert_eq!((&p[1], &p[3]), (&p0[1], &p0[3]), "one job, one stem: {p:?} {p0:?}");
    }
    // the universe is unknown (as under Hydra without -usize)
    assert!(lines[4].starts_with("parent cmd=universe_size size=-1"), "{lines:?}");
    assert!(lines[5].contains(" cmd=spawn_result rc=-1"), "{lines:?}");
    assert!(lines[6].contains(" cmd=spawn_result rc=0"), "{lines:?}");
    assert!(lines[7].contains(" cmd=spawn_result rc=0"), "{lines:?}");
    assert!(r.stderr.contains("malformed spawn"), "{}", r.stderr);
}

/// This machine's host name, as `hostname` prints it.
fn nix_hostname() -> String {
    let out = std::process::Command::new("hostname").output().expect("hostname");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Two jobs never share a kvsname: its random part differs even where the pid would not.
#[test]
fn kvsnames_differ_between_jobs() {
    let script = format!("{PMI_SAY}; say 'cmd=init pmi_version=1 pmi_subversion=1'; say cmd=get_my_kvsname; echo \"$REPLY\"; say cmd=finalize");
    let name = || {
        let r = run(&["-n", "1", "bash", "-c", &script], b"");
        assert_eq!(r.status, 0, "{}", r.stderr);
        let k = r
            .stdout
            .split_whitespace()
            .find_map(|t| t.strip_prefix("kvsname="))
            .map(str::to_string);
        k.unwrap_or_default()
    };
    let (a, b) = (name(), name());
    let rand = |k: &str| k.split('_').nth(3).map(str::to_string);
    assert!(rand(&a).is_some() && rand(&a) != rand(&b), "{a} {b}");
    assert!(a.len() < 256);
}

/// MPI_Open_port / MPI_Publish_name / MPI_Lookup_name / MPI_Comm_accept / MPI_Comm_connect
/// between two programs of one MPMD job, on one node and across simulated nodes.
#[test]
fn publish_lookup_accept_connect() {
    let p = nameserv();
    for hosts in [None, Some("n1,n2,n3,n4"), Some(NODES4)] {
        let mut args: Vec<&str> = vec!["-genv", "MPIR_CVAR_CH4_NETMOD", "ofi"];
        if let Some(h) = hosts {
            args.extend(["-launcher", "fork", "-hosts", h]);
        }
        args.extend(["-n", "1", &p, "server", ":", "-n", "1", &p, "client"]);
        let r = run(&args, b"");
        assert_eq!(r.status, 0, "{hosts:?}: {}", r.stderr);
        let mut lines: Vec<&str> = r.stdout.lines().collect();
        lines.sort();
        assert_eq!(lines, vec!["client ok 42", "server ok 42"], "{hosts:?}");
    }
}

/// The wire semantics: a name published on one node is found from another, a second publish
/// of the same name and a lookup of an unknown name fail, unpublish removes it.
#[test]
fn name_service_over_pmi1() {
    let script = r#"say() { printf '%s\n' "$1" >&$PMI_FD; read -r REPLY <&$PMI_FD; echo "$PMI_RANK $REPLY"; }
say 'cmd=init pmi_version=1 pmi_subversion=1' >/dev/null
if [ "$PMI_RANK" = 0 ]; then
  say 'cmd=publish_name service=svc port=tcp://a:1'
  say 'cmd=publish_name service=svc port=tcp://b:2'
fi
say 'cmd=barrier_in' >/dev/null
if [ "$PMI_RANK" = 2 ]; then
  say 'cmd=lookup_name service=svc'
  say 'cmd=lookup_name service=nothing'
fi
say 'cmd=barrier_in' >/dev/null
if [ "$PMI_RANK" = 1 ]; then
  say 'cmd=unpublish_name service=svc'
  say 'cmd=unpublish_name service=svc'
  say 'cmd=lookup_name service=svc'
fi
say 'cmd=finalize' >/dev/null"#;
    let r = run(
        &[
            "-launcher",
            "fork",
            "-hosts",
            "n1,n2,n3",
            "--tree",
            "chain",
            "-n",
            "3",
            "bash",
            "-c",
            script,
        ],
        b"",
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    let rc = |l: &str| {
        l.split_whitespace().find_map(|t| t.strip_prefix("rc=")).unwrap_or("?").to_string()
    };
    assert_eq!(lines.len(), 7, "{}", r.stdout);
    // rank 0: first publish ok, second refused
    assert!(lines[0].starts_with("0 cmd=publish_result") && rc(lines[0]) == "0", "{}", lines[0]);
    assert!(lines[1].starts_with("0 cmd=publish_result") && rc(lines[1]) != "0", "{}", lines[1]);
    // rank 1: unpublish ok, then unknown; lookup after unpublish fails
    let r1: Vec<&str> = lines.iter().copied().filter(|l| l.starts_with("1 ")).collect();
    assert!(r1.iter().any(|l| l.contains("unpublish_result") && rc(l) == "0"), "{r1:?}");
    assert!(r1.iter().any(|l| l.contains("unpublish_result") && rc(l) != "0"), "{r1:?}");
    assert!(r1.iter().any(|l| l.contains("lookup_result") && rc(l) != "0"), "{r1:?}");
    // rank 2 (another node): finds it, and not the unknown one
    let r2: Vec<&str> = lines.iter().copied().filter(|l| l.starts_with("2 ")).collect();
    assert!(
        r2.iter()
            .any(|l| l.contains("lookup_result") && l.contains("port=tcp://a:1") && rc(l) == "0"),
        "{r2:?}"
    );
    assert!(r2.iter().any(|l| l.contains("lookup_result") && rc(l) != "0"), "{r2:?}");
}

/// Parent and children are one job: a spawned rank that fails after the spawn succeeded
/// takes the whole job down with its status, and nothing is left running.
#[test]
fn failing_child_fails_the_job() {
    let child = pmi_child("if [ $PMI_RANK = 1 ]; then exit 7; fi; sleep 300");
    let block = spawn_block("2", &child, "p", &[]);
    let script = spawner_script(&["B"], "sleep 300");
    for hosts in ["n1", "n1,n2,n3"] {
        let r = shell_job(hosts, &[("B", &block)], &script);
        assert_eq!(r.status, 7, "{hosts}: {}", r.stderr);
        // (a failed spawn would leave the parent sleeping: status 7 is the job failing)
        assert!(
            r.stderr.contains("rank 1 of spawn 1 on")
                && r.stderr.contains("exited with code 7 without calling PMI finalize"),
            "{hosts}: {}",
            r.stderr
        );
    }
}

/// Python: mpi4py's `MPI.COMM_SELF.Spawn` (with the MPICH 5 wheel), one spawn per parent
/// rank at the same time, on one node and on 4 simulated nodes.
#[test]
fn mpi4py_comm_self_spawn() {
    let python = common::mpich5().join("bin/python").to_string_lossy().into_owned();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/programs/pyspawn.py");
    let script = script.to_string_lossy();
    for hosts in [None, Some("n1,n2,n3,n4")] {
        let r = run(&job_args(hosts, &["-n", "2", &python, &script]), b"");
        assert_eq!(r.status, 0, "{hosts:?}: {}", r.stderr);
        let mut lines: Vec<&str> = r.stdout.lines().collect();
        lines.sort();
        assert_eq!(
            lines,
            vec!["parent 0 got [0, 10, 20]", "parent 1 got [0, 10, 20]"],
            "{hosts:?}: {}",
            r.stderr
        );
    }
}

/// `-memory-alloc-kinds` (Hydra 5): MPICH learns the requested kinds at `MPI_Init` and
/// shows the ones it supports in `MPI_COMM_WORLD`'s info, in the job and in a group it
/// spawns (as under `mpiexec.hydra` 5.0.2, same program); without the option only the
/// defaults.
#[test]
fn memory_alloc_kinds_reach_the_job_and_its_spawns() {
    let p = mpich5_program("alloc_kinds");
    let with = ["-memory-alloc-kinds", "mpi:alloc_mem", "-n", "2", p.as_str(), "spawn"];
    let r = run(&job_args(None, &with), b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "child 0 mpi,system,mpi:alloc_mem",
            "parent 0 mpi,system,mpi:alloc_mem",
            "parent 1 mpi,system,mpi:alloc_mem"
        ]
    );
    let r = run(&job_args(None, &["-n", "1", p.as_str()]), b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "parent 0 mpi,system\n");
}

/// Hydra's outside name server (`hydra_nameserver` of MPICH 5), listening on a port of its
/// own; killed when dropped.
struct NameServer {
    child: std::process::Child,
    addr: String,
}

impl NameServer {
    fn start() -> NameServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = std::process::Command::new(common::mpich5().join("bin/hydra_nameserver"))
            .args(["-port", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start hydra_nameserver");
        let addr = format!("127.0.0.1:{port}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(std::time::Instant::now() < deadline, "hydra_nameserver never listened");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        NameServer { child, addr }
    }
}

impl Drop for NameServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `-nameserver`: two separate jobs find each other through Hydra's own name server — the
/// server job publishes its port, the client job (started first, looking the name up until
/// it appears) connects — with both jobs ours, and with one of them run by MPICH 5's
/// `mpiexec.hydra` (its client of the name server is the reference).
#[test]
fn jobs_meet_through_hydras_name_server() {
    let p = nameserv();
    let hydra = common::mpich5().join("bin/mpiexec.hydra").to_string_lossy().into_owned();
    for (server_pm, client_pm) in
        [(MPIEXEC, MPIEXEC), (hydra.as_str(), MPIEXEC), (MPIEXEC, hydra.as_str())]
    {
        let ns = NameServer::start();
        let args = |role: &'static [&'static str]| -> Vec<String> {
            let mut a: Vec<String> = ["-nameserver", &ns.addr, "-genv", "MPIR_CVAR_CH4_NETMOD"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            a.extend(["ofi", "-n", "1", &p].iter().map(|s| s.to_string()));
            a.extend(role.iter().map(|s| s.to_string()));
            a
        };
        let client_args = args(&["client", "retry"]);
        let client = std::process::Command::new(client_pm)
            .args(&client_args)
            .env("MPIEXEC_TIMEOUT", "120")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start the client job");
        let server_args = args(&["server"]);
        let server_args: Vec<&str> = server_args.iter().map(String::as_str).collect();
        let s = common::run_program(server_pm, &server_args, b"");
        let c = common::Run::from_output(&client.wait_with_output().expect("client job"));
        let which = format!("server by {server_pm}, client by {client_pm}");
        assert_eq!((s.status, s.stdout.as_str()), (0, "server ok 42\n"), "{which}: {}", s.stderr);
        assert_eq!((c.status, c.stdout.as_str()), (0, "client ok 42\n"), "{which}: {}", c.stderr);
    }
}

/// The name server's semantics reach the ranks as they are (raw PMI-1): a name published
/// once, found by a later job, refused a second publish, gone after unpublish; a server that
/// cannot be reached, or one that answers garbage, fails the request with one line and the
/// job goes on.
#[test]
fn name_server_semantics_and_failures() {
    let ns = NameServer::start();
    let job = |addr: &str, script: &str| {
        let body = format!("{PMI_SAY}\nsay 'cmd=init pmi_version=1 pmi_subversion=1'\n{script}\nsay 'cmd=finalize'");
        run(&["-nameserver", addr, "-n", "1", "bash", "-c", &body], b"")
    };
    let rc = |l: &str| l.split_whitespace().find_map(|t| t.strip_prefix("rc=")).map(String::from);
    let show = "echo \"$REPLY\"";
    let r = job(
        &ns.addr,
        &format!(
            "say 'cmd=publish_name service=svc port=tcp://a:1'; {show}\n\
             say 'cmd=publish_name service=svc port=tcp://b:2'; {show}"
        ),
    );
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(lines.len(), 2, "{}", r.stdout);
    assert_eq!(rc(lines[0]).as_deref(), Some("0"), "{}", lines[0]);
    assert_ne!(rc(lines[1]).as_deref(), Some("0"), "a name is published once: {}", lines[1]);
    // A later job finds it (the name outlives the job that published it); unpublish removes
    // a name (another: hydra_nameserver keeps a refused publish of a name, which a lookup
    // finds once the first is unpublished, under its own mpiexec too).
    let r = job(
        &ns.addr,
        &format!(
            "say 'cmd=lookup_name service=svc'; {show}\n\
             say 'cmd=lookup_name service=other'; {show}\n\
             say 'cmd=publish_name service=solo port=tcp://c:3'; {show}\n\
             say 'cmd=unpublish_name service=solo'; {show}\n\
             say 'cmd=lookup_name service=solo'; {show}\n\
             say 'cmd=unpublish_name service=solo'; {show}"
        ),
    );
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(lines.len(), 6, "{}", r.stdout);
    assert!(lines[0].contains("port=tcp://a:1") && rc(lines[0]).as_deref() == Some("0"));
    assert_ne!(rc(lines[1]).as_deref(), Some("0"), "never published: {}", lines[1]);
    assert_eq!(rc(lines[2]).as_deref(), Some("0"), "{}", lines[2]);
    assert_eq!(rc(lines[3]).as_deref(), Some("0"), "{}", lines[3]);
    assert_ne!(rc(lines[4]).as_deref(), Some("0"), "gone after unpublish: {}", lines[4]);
    assert_ne!(rc(lines[5]).as_deref(), Some("0"), "unpublished twice: {}", lines[5]);
    assert!(r.stderr.is_empty(), "{}", r.stderr);

    // Nobody listening; then a server that answers garbage (a length of -1).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let closed_addr = closed.local_addr().expect("addr").to_string();
    drop(closed);
    let liar = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let liar_addr = liar.local_addr().expect("addr").to_string();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut s in liar.incoming().flatten() {
            let mut b = [0u8; 64];
            let _ = s.read(&mut b);
            let _ = s.write_all(&(-1i32).to_ne_bytes());
        }
    });
    for (addr, why) in [
        (closed_addr.as_str(), "cannot connect"),
        (liar_addr.as_str(), "an answer of -1 bytes is not a name server's"),
    ] {
        let r = job(
            addr,
            &format!(
                "say 'cmd=publish_name service=svc port=p'; {show}\n\
                 say 'cmd=lookup_name service=svc'; {show}"
            ),
        );
        assert_eq!(r.status, 0, "{}", r.stderr);
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(lines.len(), 2, "{}", r.stdout);
        assert!(lines.iter().all(|l| rc(l).as_deref() != Some("0")), "{lines:?}");
        // One line, for the first failure only.
        let want = format!("libi-mpiexec: name server {addr}: cannot publish 'svc': {why}");
        assert!(r.stderr.starts_with(&want), "{}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    }
}

/// A job whose launcher is fork only because no host was named (or every host is this
/// machine) spawns onto another host through ssh, as Hydra does, never here under that
/// host's name; an explicit `-launcher fork` keeps its simulated hosts. The "ssh" here is a
/// fake that logs the host and runs the command here.
#[test]
fn spawn_onto_another_host_under_an_implicit_fork() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("far-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let log = dir.join("ssh.log");
    let ssh = common::write_script(
        &dir.join("fake-ssh"),
        &format!(
            "#!/bin/sh\nfor a; do last=$a; case $a in -*) ;; *) [ -z \"$host\" ] && host=$a;; esac; done\n\
             echo \"$host\" >> {}\nexec sh -c \"$last\"\n",
            log.display()
        ),
    );
    let child = common::pmi_child("echo \"child on $PMI_HOSTNAME\"");
    let block = spawn_block("1", &child, "p", &[("host", "far.example")]);
    let script = spawner_script(&["B1"], "say cmd=finalize");
    for explicit in [false, true] {
        let _ = std::fs::remove_file(&log);
        let mut args = vec!["-launcher-exec", ssh.as_str()];
        if explicit {
            args.extend(["-launcher", "fork"]);
        }
        args.extend(["-genv", "B1", &block, "-n", "1", "bash", "-c", &script]);
        let r = run(&args, b"");
        assert_eq!(r.status, 0, "explicit fork {explicit}: {}", r.stderr);
        assert!(r.stdout.contains("child on far.example"), "{}\n{}", r.stdout, r.stderr);
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        let want = if explicit { "" } else { "far.example\n" };
        assert_eq!(logged, want, "explicit fork {explicit}: {}", r.stderr);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The spawn info key `hostfile` (Hydra reads it at its front end): the children go to the
/// file's hosts; `hosts` wins over it; a file that cannot be read fails that spawn, naming
/// the key, and the job goes on.
#[test]
fn spawn_info_hostfile() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("hf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let hf = dir.join("hosts");
    std::fs::write(&hf, "# workers\nhf1:1\nhf2:1\n").expect("write");
    let hf = hf.to_string_lossy().into_owned();
    let child = common::pmi_child("echo \"child $PMI_RANK on $PMI_HOSTNAME\"");
    let b1 = spawn_block("2", &child, "p", &[("hostfile", &hf)]);
    let b2 = spawn_block("1", &child, "p", &[("hostfile", &hf), ("hosts", "hh")]);
    let b3 = spawn_block("1", &child, "p", &[("hostfile", "/nonexistent/hosts")]);
    let script = spawner_script(&["B1", "B2", "B3"], "say cmd=finalize");
    let mut args = vec!["-launcher", "fork"];
    for (k, v) in [("B1", &b1), ("B2", &b2), ("B3", &b3)] {
        args.extend(["-genv", k, v.as_str()]);
    }
    args.extend(["-n", "1", "bash", "-c", &script]);
    let r = run(&args, b"");
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mut children: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("child")).collect();
    children.sort();
    assert_eq!(children, ["child 0 on hf1", "child 0 on hh", "child 1 on hf2"], "{}", r.stdout);
    let results: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("parent")).collect();
    assert_eq!(results.len(), 3, "{}", r.stdout);
    assert!(results[2].contains("rc=-1"), "{}", r.stdout);
    assert!(
        r.stderr.contains("info key hostfile") && r.stderr.contains("/nonexistent/hosts"),
        "{}",
        r.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}
