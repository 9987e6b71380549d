//! The Python binding of the LIBI session API (`session/python/libi.py`, ctypes over
//! `liblibi.so`, issue 52): a Python front end (`tests/programs/libi_py_fe.py`) launches
//! Python members (`tests/programs/libi_py_member.py`) on one node and on four simulated
//! nodes: an echo through the master, a broadcast, gatherv, allgather, gather, scatter,
//! scatterv, poll and a timed receive, LIBI errors raised as `libi.LibiError` with the code's
//! name and the library's message; and an attach to a running job whose daemons report their
//! host's ranks. Python: `/usr/bin/python3` where it exists (Debian's), else `python3` on
//! `PATH`; no package beyond the standard library.

mod common;

use common::{Background, Run, MPIEXEC};
use std::path::{Path, PathBuf};

fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn script(name: &str) -> String {
    root().join("tests/programs").join(name).to_string_lossy().into_owned()
}

/// The `liblibi.so` built with this `libi-mpiexec`.
fn library() -> String {
    let lib = Path::new(MPIEXEC).parent().expect("target dir").join("liblibi.so");
    assert!(lib.is_file(), "liblibi.so is not built: run cargo build --workspace first");
    lib.to_string_lossy().into_owned()
}

/// Run `python ARGS` with the binding on `PYTHONPATH`, under the watchdog of
/// [`common::run_direct`] (nothing it started may be left running).
fn py(args: &[&str], env: &[(&str, &str)]) -> Run {
    let path = root().join("session/python").to_string_lossy().into_owned();
    let mut all = vec![
        ("PYTHONPATH", path.as_str()),
        ("PYTHONDONTWRITEBYTECODE", "1"),
        ("LIBI_MPIEXEC", MPIEXEC),
    ];
    all.extend_from_slice(env);
    let o = common::run_direct(python(), args, &all);
    assert_ne!(o.status, -2, "python hung:\n{}{}", o.stdout, o.stderr);
    o
}

fn line<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no '{name}' line in:\n{out}"))
}

/// The front end's `colls` run on `hosts` (host names and members per host).
fn colls(hosts: &[(&str, usize)]) {
    let spec: Vec<String> = hosts.iter().map(|(h, n)| format!("{h}:{n}")).collect();
    let lib = library();
    let o = py(
        &[
            &script("libi_py_fe.py"),
            python(),
            &script("libi_py_member.py"),
            "colls",
            &spec.join(","),
        ],
        &[("LIBI_LIBRARY", &lib), ("LIBI_MPIEXEC_ARGS", "-launcher fork")],
    );
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    let out = &o.stdout;
    let size: usize = hosts.iter().map(|(_, n)| n).sum();
    let host_of: Vec<&str> = hosts.iter().flat_map(|(h, n)| std::iter::repeat_n(*h, *n)).collect();
    assert_eq!(line(out, "library"), format!("library {lib}"));
    assert_eq!(line(out, "launch"), format!("launch ok members={size}"));
    assert_eq!(line(out, "status"), "status True");
    assert_eq!(line(out, "nothing-yet"), "nothing-yet None");
    assert_eq!(line(out, "poll-idle"), "poll-idle {}");
    assert_eq!(line(out, "poll"), "poll True");
    assert_eq!(line(out, "echo"), "echo echo:hello");
    assert_eq!(line(out, "size"), format!("size {size}"));
    // gatherv: member r's text, "r:HOST:hello;" r + 1 times (its own length), in rank order,
    // carrying what the broadcast gave it.
    let texts: Vec<String> = (0..size)
        .map(|r| format!("\"{}\"", format!("{r}:{}:hello;", host_of[r]).repeat(r + 1)))
        .collect();
    assert_eq!(line(out, "gatherv"), format!("gatherv [{}]", texts.join(", ")));
    let list = |f: &dyn Fn(usize) -> String| (0..size).map(f).collect::<Vec<_>>().join(", ");
    assert_eq!(line(out, "allgather"), format!("allgather [{}]", list(&|r| (r * 10).to_string())));
    assert_eq!(line(out, "gather"), format!("gather [{}]", list(&|r| (r + 100).to_string())));
    assert_eq!(
        line(out, "scatter"),
        format!("scatter [{}]", list(&|r| format!("\"{r}:{}:{r}\"", 1000 + r)))
    );
    // After the front end ended the session: its calls raise ESESS; the master's waiting
    // receive raised ESESS too and it finalized.
    assert!(line(out, "after-end").starts_with("after-end LIBI_ESESS "), "{out}");
    assert!(o.stderr.contains("master-end LIBI_ESESS"), "{}", o.stderr);
    // Errors as exceptions, with the code's name and LIBI_errorString().
    assert_eq!(
        line(out, "ehostdist"),
        format!(
            "ehostdist LIBI_EHOSTDIST distribution 0 ({}): host 'n1' has 0 processes",
            python()
        )
    );
    assert_eq!(line(out, "esess"), "esess LIBI_ESESS no session 987654");
    assert_eq!(line(out, "str"), "str TypeError LIBI moves bytes: encode the str first");
    assert_eq!(line(out, "finalize"), "finalize ok");
    assert!(line(out, "after-finalize").starts_with("after-finalize LIBI_EINIT "), "{out}");
}

#[test]
fn python_front_end_and_members_on_one_node() {
    colls(&[("n1", 3)]);
}

#[test]
fn python_front_end_and_members_on_four_simulated_nodes() {
    colls(&[("n1", 2), ("n2", 2), ("n3", 2), ("n4", 2)]);
}

/// A Python tool attaches to a running job (one Python daemon per host, the launcher
/// inherited: the tool sets no LIBI_MPIEXEC_ARGS): each daemon's getMyProctab holds its
/// host's ranks, alive; with a subset, one daemon with that rank; a pid that is no job
/// raises ESESS.
#[test]
fn python_attach_gets_each_daemons_proctab() {
    let job = Background::start(
        &["-launcher", "fork", "-hosts", "n1:2,n2:2,n3:1,n4:3", "-n", "8", "sleep", "1000"],
        8,
    );
    let pid = job.pid();
    let o = py(
        &[&script("libi_py_fe.py"), python(), &script("libi_py_member.py"), "attach", &pid],
        &[("LIBI_LIBRARY", &library())],
    );
    assert_eq!(o.status, 0, "{}{}", o.stdout, o.stderr);
    let out = &o.stdout;
    assert_eq!(line(out, "table"), "table 8 n1,n2,n3,n4");
    assert_eq!(line(out, "job-hosts"), "job-hosts [('n1', 1), ('n2', 1), ('n3', 1), ('n4', 1)]");
    assert_eq!(line(out, "daemons"), "daemons 4");
    let daemons: Vec<&str> = out.lines().filter(|l| l.starts_with("daemon ")).collect();
    assert_eq!(
        daemons,
        [
            "daemon n1 ranks=[0, 1] hosts=['n1'] alive=2 exe=['sleep']",
            "daemon n2 ranks=[2, 3] hosts=['n2'] alive=2 exe=['sleep']",
            "daemon n3 ranks=[4] hosts=['n3'] alive=1 exe=['sleep']",
            "daemon n4 ranks=[5, 6, 7] hosts=['n4'] alive=3 exe=['sleep']",
        ]
    );
    assert_eq!(line(out, "subset"), "subset 1 n1 [1]");
    assert_eq!(
        line(out, "empty-subset"),
        "empty-subset ValueError fe_attachAndLaunch: an empty subset of ranks (ranks=None: every \
         rank)"
    );
    assert!(line(out, "not-a-job").starts_with("not-a-job LIBI_ESESS "), "{out}");
    assert_eq!(line(out, "finalize"), "finalize ok");
}

/// Where the binding finds liblibi.so: LIBI_LIBRARY first; else next to libi-mpiexec on PATH;
/// a library that cannot be loaded is one OSError naming LIBI_LIBRARY.
#[test]
fn python_finds_the_library() {
    let dir = Path::new(MPIEXEC).parent().expect("target dir").to_string_lossy().into_owned();
    let path = format!("{dir}:{}", std::env::var("PATH").unwrap_or_default());
    let show = "import libi; print(libi.library_path())";
    let o = py(&["-c", show], &[("PATH", &path), ("LIBI_LIBRARY", "")]);
    assert_eq!(o.stdout.trim(), library(), "{}", o.stderr);
    let o = py(&["-c", show], &[("LIBI_LIBRARY", "/elsewhere/liblibi.so")]);
    assert_eq!(o.stdout.trim(), "/elsewhere/liblibi.so");
    let o = py(
        &["-c", "import libi\ntry:\n    libi.fe_init()\nexcept OSError as e:\n    print(e)"],
        &[("LIBI_LIBRARY", "/elsewhere/liblibi.so")],
    );
    assert!(
        o.stdout.starts_with("libi: cannot load the LIBI library '/elsewhere/liblibi.so'"),
        "{}{}",
        o.stdout,
        o.stderr
    );
}
