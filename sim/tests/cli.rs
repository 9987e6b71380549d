//! The `libi-sim` command as a process: a run that would not fit in memory is refused in
//! one line with status 2 before anything runs, a run that fits runs; cost files are read
//! (`--costs FILE`), and a bad one is refused in one line naming the file and the line;
//! `calibrate` fits measured cases and writes a cost file that `--costs` reads.

use std::path::PathBuf;
use std::process::{Command, Output};

fn sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_libi-sim")).args(args).output().expect("libi-sim runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A file of this test's own in the temporary directory.
fn temp(name: &str, contents: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("libi-sim-cli-{}-{name}", std::process::id()));
    std::fs::write(&p, contents).expect("temp file");
    p
}

/// Status 2, nothing on stdout, one line on stderr; the line.
fn refused(o: &Output) -> String {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    assert!(o.stdout.is_empty(), "stdout: {}", text(&o.stdout));
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn too_little_memory_is_refused_in_one_line_and_a_run_that_fits_runs() {
    // MPICH 4's whole sequence, lazily: every node caches every card.
    let o = sim(&["--nodes", "1000", "--ppn", "16", "--kvs-push-max", "0", "--max-mem", "200M"]);
    let line = refused(&o);
    assert!(line.starts_with("libi-sim: --nodes 1000 --ppn 16 --workload mpich-init needs about "));
    assert!(line.contains("(--max-mem 200 MB)"), "{line}");
    assert!(line.contains("use --skip-slice"), "{line}");
    assert!(line.contains("nodes"), "{line}");

    let o = sim(&["--nodes", "4", "--ppn", "2", "--max-mem", "512M"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("greedy"), "{}", text(&o.stdout));
}

/// Every combination is checked before the first runs: the small one does not run.
#[test]
fn every_combination_is_checked_before_any_runs() {
    let o = sim(&["--nodes", "2,5000", "--ppn", "16", "--kvs-push-max", "0", "--max-mem", "1G"]);
    let line = refused(&o);
    assert!(line.contains("--nodes 5000"), "{line}");
    // The estimate alone, without running.
    let o = sim(&["--nodes", "2,5000", "--ppn", "16", "--kvs-push-max", "0", "--estimate"]);
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o.stdout);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains("agents' KVS maps"), "{out}");
}

#[test]
fn bad_sizes_and_cost_files_are_one_line_errors() {
    let line = refused(&sim(&["--nodes", "2", "--max-mem", "lots"]));
    assert!(line.contains("--max-mem"), "{line}");

    let bad = temp("bad.costs", "# fitted\nseq = 0.001\nrem: 0.3\n");
    let line = refused(&sim(&["--nodes", "2", "--costs", bad.to_str().expect("utf-8")]));
    assert!(line.contains(&format!("{}:3:", bad.display())), "{line}");
    let unknown = temp("unknown.costs", "warp = 9\n");
    let line = refused(&sim(&["--nodes", "2", "--costs", unknown.to_str().expect("utf-8")]));
    assert!(line.contains(":1:") && line.contains("warp"), "{line}");
    let line = refused(&sim(&["--nodes", "2", "--costs", "/nonexistent/costs"]));
    assert!(line.contains("expected fork, vm, ssh or a cost file"), "{line}");
    for p in [bad, unknown] {
        let _ = std::fs::remove_file(p);
    }
}

/// `calibrate --measured`: fit to cases measured earlier (here: made up, near the `vm`
/// costs' own figures), write a cost file, and `--costs` reads it; the simulated times
/// follow the file.
#[test]
fn calibrate_writes_a_cost_file_that_costs_reads() {
    let measured = temp(
        "measured.json",
        r#"{"what": "test", "cpus": 2,
            "fit": [{"agents": 2, "ppn": 1, "runs": 1, "launch": 0.004, "fence1": 0.005, "total": 0.008},
                    {"agents": 2, "ppn": 4, "runs": 1, "launch": 0.012, "fence1": 0.014, "total": 0.02}],
            "held_out": [{"agents": 4, "ppn": 4, "runs": 1, "launch": 0.03, "fence1": 0.033, "total": 0.05}]}"#,
    );
    let out = std::env::temp_dir().join(format!("libi-sim-cli-{}-fit.costs", std::process::id()));
    let (m, f) = (measured.to_str().expect("utf-8"), out.to_str().expect("utf-8"));
    let o = sim(&["calibrate", "--measured", m, "--rounds", "3", "--out", f]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let table = text(&o.stdout);
    assert!(table.contains("held out"), "{table}");
    let file = std::fs::read_to_string(&out).expect("cost file written");
    assert!(file.contains("fitted to 2x1 2x4"), "{file}");
    assert!(file.lines().any(|l| l.starts_with("cores = ")), "{file}");

    let run = |costs: &str| {
        let o = sim(&["--nodes", "4", "--ppn", "4", "--costs", costs]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        text(&o.stdout)
    };
    let slow = temp("slow.costs", &file.replace("rem = ", "rem = 1 # was "));
    assert_ne!(run(f), run(slow.to_str().expect("utf-8")), "the file's figures are used");
    for p in [measured, out, slow] {
        let _ = std::fs::remove_file(p);
    }
}
