//! Open MPI 5 under libi-mpiexec: PMIx served by each node's `libi-pmix` companion
//! (`docs/pmix.md`), on one node and on simulated nodes (the fork launcher with host
//! names: one agent and one PMIx server per name, fences over the tree). The ssh and Slurm
//! variants are in `ssh.rs` and `slurm.rs`. Programs: `pmix-server/tests/programs/`,
//! compiled with the Open MPI 5 wheel's `mpicc`.

mod common;

use common::{
    failure_line, hello_lines, ompi_env, ompi_program, openmpi5, prog, run_env, start, Run,
};
use std::time::{Duration, Instant};

fn env() -> Vec<(&'static str, String)> {
    ompi_env("lo")
}

fn run_ompi(args: &[&str]) -> Run {
    let e = env();
    let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
    run_env(args, b"", &e)
}

/// Every rank printed `PREFIX r of n` once (the program checked the size itself).
fn ranks_said(r: &Run, prefix: &str, n: usize) {
    assert_eq!(r.status, 0, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    let mut seen = vec![0; n];
    for l in r.stdout.lines().filter(|l| l.starts_with(prefix)) {
        let mut w = l[prefix.len()..].split_whitespace();
        let rank: usize = w.next().and_then(|x| x.parse().ok()).expect("rank");
        assert_eq!(w.next(), Some("of"), "{l}");
        assert_eq!(w.next().and_then(|x| x.parse().ok()), Some(n), "{l}");
        seen[rank] += 1;
    }
    assert!(seen.iter().all(|&c| c == 1), "each rank once: {seen:?}\n{}", r.stdout);
}

fn hosts(n: usize) -> String {
    (1..=n).map(|i| format!("pmixnode{i}")).collect::<Vec<_>>().join(",")
}

#[test]
fn hello_on_one_node_is_served_pmix_without_being_asked() {
    if openmpi5().is_none() {
        return;
    }
    // `-pmi auto` (the default) sees that the program links Open MPI.
    let r = run_ompi(&["-n", "4", &ompi_program("hello"), "4"]);
    ranks_said(&r, "hello ", 4);
    assert!(!r.stderr.contains("singleton"), "{}", r.stderr);
}

#[test]
fn hello_and_ring_over_four_simulated_nodes() {
    if openmpi5().is_none() {
        return;
    }
    let h = hosts(4);
    for shape in ["greedy", "binomial", "flat"] {
        let base = ["-launcher", "fork", "-hosts", &h, "--tree", shape, "-n", "8"];
        let r = run_ompi(&[&base[..], &[&ompi_program("hello"), "8"]].concat());
        ranks_said(&r, "hello ", 8);
        let r = run_ompi(&[&base[..], &[&ompi_program("ring")]].concat());
        ranks_said(&r, "ring ", 8);
        assert!(r.stdout.contains("ring 0 of 8 token 56 ok"), "{}", r.stdout);
    }
}

/// Open MPI's asynchronous modex: `MPI_Init`'s fence carries no data, and each rank's
/// `PMIx_Get` of a peer on another node goes to that node (a direct modex over the tree).
#[test]
fn ring_with_the_modex_fetched_on_demand() {
    if openmpi5().is_none() {
        return;
    }
    let mut e = env();
    e.push(("OMPI_MCA_pmix_base_async_modex", "1".into()));
    e.push(("OMPI_MCA_pmix_base_collect_data", "0".into()));
    let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let args = ["-launcher", "fork", "-hosts", &hosts(4), "-n", "8", &ompi_program("ring")];
    let r = run_env(&args, b"", &e);
    ranks_said(&r, "ring ", 8);
    assert!(r.stdout.contains("ring 0 of 8 token 56 ok"), "{}", r.stdout);
}

#[test]
fn mpi_abort_ends_the_job_with_its_code_and_one_line() {
    if openmpi5().is_none() {
        return;
    }
    let r =
        run_ompi(&["-launcher", "fork", "-hosts", &hosts(2), "-n", "4", &ompi_program("abort")]);
    assert_eq!(r.status, 7, "stderr: {}", r.stderr);
    let line = failure_line(&r);
    assert!(line.contains("rank 3") && line.contains("MPI_Abort") && line.contains('7'), "{line}");
}

/// A rank that exits 0 after `PMIx_Init` without `PMIx_Finalize` left the job half-way: the
/// job fails naming it (Open MPI's own mpirun fails such a job too).
#[test]
fn a_rank_that_exits_without_finalizing_fails_the_job() {
    if openmpi5().is_none() {
        return;
    }
    let r =
        run_ompi(&["-launcher", "fork", "-hosts", &hosts(2), "-n", "2", &ompi_program("noexit")]);
    assert_ne!(r.status, 0, "{}", r.stderr);
    let line = failure_line(&r);
    assert!(line.contains("rank 1") && line.contains("without calling"), "{line}");
}

/// A rank lost before its finalize is an event for the others (on every node): with Open
/// MPI's fault tolerance on and `-disable-auto-cleanup`, their receive from it fails instead
/// of waiting for ever.
#[test]
fn a_lost_rank_is_an_event_for_the_ranks_on_every_node() {
    if openmpi5().is_none() {
        return;
    }
    let mut e = env();
    e.push(("OMPI_MCA_mpi_ft_enable", "1".into()));
    let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let args = ["-disable-auto-cleanup", "-launcher", "fork", "-hosts", &hosts(2), "-n", "3"];
    let r = run_env(&[&args[..], &[&ompi_program("lost")]].concat(), b"", &e);
    for want in ["lost 0 rc error", "lost 1 rc error"] {
        assert!(r.stdout.contains(want), "{want:?} missing: {}\n{}", r.stdout, r.stderr);
    }
    assert!(r.stderr.contains("rank 2 on pmixnode1 was killed by signal 9"), "{}", r.stderr);
}

#[test]
fn publish_lookup_unpublish_through_the_job_name_service() {
    if openmpi5().is_none() {
        return;
    }
    let r =
        run_ompi(&["-launcher", "fork", "-hosts", &hosts(2), "-n", "2", &ompi_program("names")]);
    assert_eq!(r.status, 0, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    for want in [
        "publish rc=0",
        "lookup rc=0 port=libi-port-42",
        "unpublish rc=0",
        "second lookup not found",
    ] {
        assert!(r.stdout.contains(want), "{want:?} missing: {}", r.stdout);
    }
}

#[test]
fn mpi_comm_spawn_of_two_children_on_one_and_three_nodes() {
    if openmpi5().is_none() {
        return;
    }
    let spawn = ompi_program("spawn");
    for (args, parents) in [
        (vec!["-n", "2", spawn.as_str()], 2),
        (
            vec![
                "-launcher",
                "fork",
                "-hosts",
                "pmixnode1,pmixnode2,pmixnode3",
                "-n",
                "3",
                spawn.as_str(),
            ],
            3,
        ),
    ] {
        let r = run_ompi(&args);
        assert_eq!(r.status, 0, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
        let parent_lines = r.stdout.lines().filter(|l| l.ends_with(": 2 children")).count();
        assert_eq!(parent_lines, parents, "{}", r.stdout);
        for c in 0..2 {
            let want = format!("child {c} of 2 got {c}");
            assert!(r.stdout.lines().any(|l| l == want), "{want:?} missing: {}", r.stdout);
        }
    }
}

#[test]
fn pmi1_only_leaves_open_mpi_ranks_singletons_and_mpich_is_served_beside_pmix() {
    if openmpi5().is_none() {
        return;
    }
    // -pmi pmi1: no PMIx server; Open MPI falls back to singletons (each 0 of 1).
    let r = run_ompi(&["-pmi", "pmi1", "-n", "2", &ompi_program("hello")]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(r.stdout.lines().filter(|l| *l == "hello 0 of 1").count(), 2, "{}", r.stdout);
    // -pmi pmix: PMI-1 is still there for an MPICH program, which ignores the PMIx server.
    let r = run_ompi(&[
        "-pmi",
        "pmix",
        "-launcher",
        "fork",
        "-hosts",
        &hosts(2),
        "-n",
        "4",
        &prog("hello"),
    ]);
    hello_lines(&r, 4);
}

#[test]
fn a_node_without_its_pmix_server_fails_the_job_before_any_rank_starts() {
    if openmpi5().is_none() {
        return;
    }
    let mut e = env();
    e.push(("LIBI_PMIX", "/nonexistent/libi-pmix".into()));
    let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = run_env(&["-n", "2", &ompi_program("hello")], b"", &e);
    assert_ne!(r.status, 0, "{}", r.stdout);
    assert!(r.stdout.is_empty(), "no rank ran: {}", r.stdout);
    let line = failure_line(&r);
    assert!(line.contains("PMIx server") && line.contains("/nonexistent/libi-pmix"), "{line}");
}

#[test]
fn a_pmix_server_that_dies_fails_the_job_with_one_line_and_leaves_nothing() {
    if openmpi5().is_none() {
        return;
    }
    let e = env();
    let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let live = start(
        &["-launcher", "fork", "-hosts", &hosts(2), "-n", "4", &ompi_program("wait"), "60"],
        &e,
    );
    // Every rank is up (past MPI_Init), then one node's server is killed.
    live.wait_for(4, |c| c.contains("/wait 60"));
    let servers = live.wait_for(2, |c| c.contains("libi-pmix"));
    std::thread::sleep(Duration::from_millis(300));
    common::signal(servers[0].0, 9);
    let t = Instant::now();
    let (r, _) = live.finish(t);
    assert_ne!(r.status, 0, "{}", r.stdout);
    assert!(t.elapsed() < Duration::from_secs(30), "the job ended on its own, not at once");
    let line = failure_line(&r);
    assert!(line.contains("PMIx server on pmixnode") && line.contains("ended"), "{line}");
}
