//! `PMI_hwloc_xmlfile`: the node's hwloc topology file that MPICH's ranks ask for in
//! `MPI_Init` (on nodes of two ranks or more) so that they skip topology discovery.
//!
//! Each test gets a cache of its own (`TMPDIR`, no `XDG_RUNTIME_DIR`) and, but for the
//! last, a stand-in for hwloc's `lstopo-no-graphics` first on `PATH` (a script that
//! counts its runs and prints XML, slowly, wrongly or never), so that what the NLA does
//! with the tool shows. The last runs the machine's own tool (CI installs it with MPICH)
//! under Slurm's PMI-2 client library.

mod common;

use common::{cc_program, run_env};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A scratch directory for one test: `TMPDIR` of its jobs, and a `bin` for the tool.
fn scratch(name: &str) -> PathBuf {
    let d =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("hwloc-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(d.join("tmp")).expect("scratch");
    fs::create_dir_all(d.join("bin")).expect("scratch");
    d
}

/// A stand-in `lstopo-no-graphics` in `dir/bin`: appends a line to `dir/runs` and runs `body`.
fn tool(dir: &Path, body: &str) {
    let p = dir.join("bin/lstopo-no-graphics");
    let script = format!("#!/bin/sh\necho \"$*\" >> '{}/runs'\n{body}\n", dir.display());
    fs::write(&p, script).expect("write tool");
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).expect("chmod tool");
}

const XML: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x1"/>
</topology>"#;

/// Prints `XML` after `delay` seconds (so that the ranks ask before it is written).
fn xml_tool(dir: &Path, delay: &str) {
    tool(dir, &format!("sleep {delay}\ncat <<'EOF'\n{XML}\nEOF"));
}

fn runs(dir: &Path) -> Vec<String> {
    fs::read_to_string(dir.join("runs")).unwrap_or_default().lines().map(str::to_owned).collect()
}

/// A PMI-1 client by hand: each rank prints "RANK:REPLY" for its `get` of the key.
const ASK: &str = r#"say() { printf '%s\n' "$1" >&$PMI_FD; read -r REPLY <&$PMI_FD; }
say 'cmd=init pmi_version=1 pmi_subversion=1'
say 'cmd=get_my_kvsname'; kvs=${REPLY##*kvsname=}
say "cmd=get kvsname=$kvs key=PMI_hwloc_xmlfile"; got=$REPLY
say 'cmd=barrier_in'
say 'cmd=finalize'
echo "$PMI_RANK:$got""#;

/// Run `args` (then the PMI-1 client) with the test's cache and tool; status, the value each
/// rank got (`None`: not found), stderr.
fn ask(dir: &Path, args: &[&str]) -> (i32, Vec<Option<String>>, String) {
    let mut a: Vec<&str> = args.to_vec();
    a.extend_from_slice(&["bash", "-c", ASK]);
    let r = job(dir, &a);
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    let values = lines
        .iter()
        .map(|l| {
            let (_, reply) = l.split_once(':').expect("rank:reply");
            if reply.contains("rc=0") {
                Some(reply.rsplit_once("value=").expect("value").1.to_owned())
            } else {
                assert!(reply.contains("not_found"), "{l}");
                None
            }
        })
        .collect();
    (r.status, values, r.stderr)
}

/// A two-rank job (the PMI-1 client) whose ranks are both told there is no file, and whose
/// stderr says `why`.
fn told_none(dir: &Path, why: &str) {
    let (st, got, err) = ask(dir, &["-n", "2"]);
    assert_eq!((st, got), (0, vec![None, None]), "{err}");
    assert!(err.contains(why), "{err}");
}

fn job(dir: &Path, args: &[&str]) -> common::Run {
    let path =
        format!("{}:{}", dir.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let tmp = dir.join("tmp");
    let env = [
        ("PATH", path.as_str()),
        ("TMPDIR", tmp.to_str().expect("utf-8")),
        ("XDG_RUNTIME_DIR", ""),
    ];
    run_env(args, b"", &env)
}

fn uid() -> u32 {
    fs::metadata("/proc/self").expect("/proc/self").uid()
}

/// The files of the cache directory.
fn cache_files(dir: &Path) -> Vec<String> {
    let d = dir.join(format!("tmp/libi-{}", uid()));
    let mut v: Vec<String> = fs::read_dir(d)
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn ranks_wait_for_the_file_which_later_jobs_find_written() {
    let d = scratch("cache");
    // The tool takes 300 ms: the ranks ask long before, and wait for it.
    xml_tool(&d, "0.3");
    let (st, got, err) = ask(&d, &["-n", "3"]);
    assert_eq!(st, 0, "{err}");
    let cache = d.join(format!("tmp/libi-{}", uid()));
    let path = got[0].clone().unwrap_or_else(|| panic!("no file offered: {got:?} {err}"));
    assert!(got.iter().all(|g| g.as_deref() == Some(&path)), "{got:?}");
    assert!(Path::new(&path).starts_with(&cache), "{path}");
    assert_eq!(fs::read_to_string(&path).expect("read it").trim_end(), XML);
    // Private: the directory 0700, the file 0600, both ours.
    let dm = fs::symlink_metadata(&cache).expect("cache dir");
    assert_eq!((dm.mode() & 0o777, dm.uid()), (0o700, uid()));
    let fm = fs::symlink_metadata(&path).expect("file");
    assert_eq!((fm.mode() & 0o777, fm.uid()), (0o600, uid()));
    assert_eq!(runs(&d), ["--of xml --whole-io -"], "the tool's arguments");
    // The next job finds it: the tool does not run again.
    let (st, got, err) = ask(&d, &["-n", "2"]);
    assert_eq!(st, 0, "{err}");
    assert_eq!(got, [Some(path.clone()), Some(path.clone())]);
    assert_eq!(runs(&d).len(), 1);
    // No temporary file is left; one topology file.
    let name = Path::new(&path).file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(cache_files(&d), [name]);
    // One rank on the node: MPICH does not ask, and nothing is offered.
    let (st, got, _) = ask(&d, &["-n", "1"]);
    assert_eq!((st, got), (0, vec![None]));
    // The ranks' environment turns it off, or steers hwloc itself.
    for (k, v) in [("LIBI_HWLOC_XML", "0"), ("HWLOC_XMLFILE", "/x.xml"), ("HWLOC_FSROOT", "/")] {
        let (st, got, err) = ask(&d, &["-genv", k, v, "-n", "2"]);
        assert_eq!((st, got), (0, vec![None, None]), "{k}={v}: {err}");
    }
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn ranks_on_several_nodes_get_their_nodes_file() {
    let d = scratch("nodes");
    xml_tool(&d, "0");
    // Three NLAs on this machine (fork launcher): one rank alone on the last node.
    let (st, got, err) = ask(&d, &["-launcher", "fork", "-hosts", "a:2,b:2,c:1", "-n", "5"]);
    assert_eq!(st, 0, "{err}");
    assert!(got[..4].iter().all(|g| g.is_some() && *g == got[0]), "{got:?}");
    assert_eq!(got[4], None);
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn a_tool_that_fails_means_no_file_and_a_warning() {
    let d = scratch("fail");
    tool(&d, "echo 'lstopo: cannot do it'; exit 0");
    told_none(&d, "wrote no usable hwloc topology file");
    assert!(cache_files(&d).is_empty(), "{:?}", cache_files(&d));
    tool(&d, "exit 3");
    told_none(&d, "lstopo-no-graphics (the ranks' hwloc topology file) failed");
    assert!(cache_files(&d).is_empty(), "{:?}", cache_files(&d));
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn a_hung_tool_is_killed_and_nothing_is_left() {
    let d = scratch("hang");
    tool(&d, "exec sleep 1000");
    // The ranks wait for it, for 5 s at most, then are told there is none.
    told_none(&d, "ran 5 s: killed");
    // A job that asks nothing and ends first: the tool is given up at its end.
    let r = job(&d, &["-n", "2", "true"]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    // (`job` asserted that no process of either job is left, the tool included.)
    assert!(cache_files(&d).is_empty(), "{:?}", cache_files(&d));
    assert_eq!(runs(&d).len(), 2);
    let _ = fs::remove_dir_all(&d);
}

/// A cache directory others may enter, or a symbolic link in its place (to a private
/// directory), is not used: each job's agent writes the file into a fresh private directory
/// of its own (`$TMPDIR/libi-hwloc-PID-RANDOM`, gone with the agent), says nothing about it
/// (there is nothing the user could do), and writes nothing through the link.
#[test]
fn a_cache_directory_others_can_enter_is_not_used() {
    let d = scratch("unsafe");
    xml_tool(&d, "0");
    let cache = d.join(format!("tmp/libi-{}", uid()));
    let own_dir = |got: &[Option<String>], err: &str| {
        let p = got[0].clone().unwrap_or_else(|| panic!("no file: {err}"));
        assert_eq!(got[1].as_deref(), Some(p.as_str()), "one file for the node");
        let dir = Path::new(&p).parent().expect("dir").to_path_buf();
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        assert!(name.starts_with("libi-hwloc-") && dir.starts_with(d.join("tmp")), "{p}");
        assert!(!dir.exists(), "the agent's own directory outlived it: {p}");
        assert!(!err.contains("warning"), "{err}");
    };
    fs::create_dir_all(&cache).expect("mkdir");
    fs::set_permissions(&cache, fs::Permissions::from_mode(0o777)).expect("chmod");
    let (st, got, err) = ask(&d, &["-n", "2"]);
    assert_eq!(st, 0, "{err}");
    own_dir(&got, &err);
    assert!(fs::read_dir(&cache).expect("ls").next().is_none(), "wrote into it");
    // A symbolic link in its place (to a private directory): not used either.
    fs::remove_dir(&cache).expect("rmdir");
    let elsewhere = d.join("elsewhere");
    fs::create_dir(&elsewhere).expect("mkdir");
    fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o700)).expect("chmod");
    std::os::unix::fs::symlink(&elsewhere, &cache).expect("symlink");
    let (st, got, err) = ask(&d, &["-n", "2"]);
    assert_eq!(st, 0, "{err}");
    own_dir(&got, &err);
    assert!(fs::read_dir(&elsewhere).expect("ls").next().is_none());
    let _ = fs::remove_dir_all(&d);
}

/// The machine's own tool, and Slurm's PMI-2 client (`info-getjobattr`): the file it is
/// given is hwloc XML (the program checks), the same for the ranks of a node.
#[test]
fn slurm_pmi2_client_gets_the_machines_topology() {
    let d = scratch("pmi2");
    assert!(
        Path::new("/usr/include/slurm/pmi2.h").exists(),
        "Slurm's PMI-2 client is missing: install libpmi2-0-dev (ci/install-deps.sh)"
    );
    let prog = cc_program(&d, "pmi2_slurm", "pmi2_slurm.c", &["-I/usr/include/slurm", "-lpmi2"]);
    let prog = prog.to_str().expect("utf-8");
    // Not the stand-in: the machine's lstopo (hwloc-nox, which Debian's mpich brings).
    fs::remove_dir_all(d.join("bin")).expect("rm bin");
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|p| p.join("lstopo-no-graphics").exists() || p.join("lstopo").exists());
    assert!(found, "hwloc's lstopo is missing: install hwloc-nox (ci/install-deps.sh: mpich)");
    for _ in 0..2 {
        let r = job(&d, &["-launcher", "fork", "-hosts", "a:2,b:1", "-n", "3", prog]);
        assert_eq!(r.status, 0, "{}\n{}", r.stdout, r.stderr);
        let mut by_rank: Vec<(usize, String)> = r
            .stdout
            .lines()
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                assert_eq!((w[0], w[1], w.get(8)), ("pmi2", "ok", Some(&"hwloc")), "{l}");
                (w[3].parse().expect("rank"), w[9].to_owned())
            })
            .collect();
        by_rank.sort();
        assert_eq!(by_rank.len(), 3, "{}", r.stdout);
        assert!(by_rank[0].1.starts_with('/') && by_rank[1].1 == by_rank[0].1, "{by_rank:?}");
        assert_eq!(by_rank[2].1, "-", "rank 2 is alone on its node");
    }
    let _ = fs::remove_dir_all(&d);
}
