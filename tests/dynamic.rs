//! Dynamic-process support: the job-wide name service (PMI-1 `publish_name`,
//! `unpublish_name`, `lookup_name`; PMI-2 `name-*`), served by the front end.
//!
//! MPI programs here use MPICH 5 from PyPI (`ci/install-deps.sh` installs it into
//! /opt/libi/mpich5, or set `LIBI_MPICH5`): Debian's MPICH 4.0.2 cannot do dynamic processes.
//! MPICH 5's UCX netmod cannot open a port in this sandbox ("no space for port_name tag",
//! under its own Hydra too), so these jobs select its OFI netmod.

mod common;

use common::run;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn mpich5() -> PathBuf {
    let dir =
        PathBuf::from(std::env::var("LIBI_MPICH5").unwrap_or_else(|_| "/opt/libi/mpich5".into()));
    assert!(
        dir.join("bin/mpicc").exists(),
        "MPICH 5 not found in {dir:?}: run ci/install-deps.sh (or set LIBI_MPICH5)"
    );
    dir
}

fn nameserv() -> String {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let out =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nameserv-{}", std::process::id()));
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/programs/nameserv.c");
        let st = Command::new(mpich5().join("bin/mpicc"))
            .arg("-o")
            .arg(&out)
            .arg(src)
            .status()
            .expect("mpicc");
        assert!(st.success(), "MPICH 5 mpicc failed");
        out
    })
    .to_string_lossy()
    .into_owned()
}

/// MPI_Open_port / MPI_Publish_name / MPI_Lookup_name / MPI_Comm_accept / MPI_Comm_connect
/// between two programs of one MPMD job, on one node and across simulated nodes.
#[test]
fn publish_lookup_accept_connect() {
    let p = nameserv();
    for hosts in [None, Some("n1,n2,n3,n4")] {
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
