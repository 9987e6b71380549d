//! Hydra 5's `-gpus-per-proc N|auto` and `-gpu-subdevs-per-proc N|auto`: each NLA splits its
//! node's device list among its local ranks and writes each rank's part into the GPU
//! runtime's visibility variable. The list here is a preset `CUDA_VISIBLE_DEVICES` (as a
//! batch system's allocation sets it), which works on any machine; detection from the
//! machine itself is unit-tested on fabricated trees (`node/src/proc/gpu.rs`).

mod common;

use common::{by_rank, pmi_child, run, run_env, spawn_block, spawner_script, Run};

const SHOW: &str = "echo $PMI_RANK ${CUDA_VISIBLE_DEVICES-unset}";

/// `CUDA_VISIBLE_DEVICES=list`, for libi-mpiexec (and so its NLAs under the fork launcher).
fn preset(list: &str) -> Vec<(&'static str, &str)> {
    vec![("CUDA_VISIBLE_DEVICES", list)]
}

fn job(opts: &[&str], n: &str, list: &str) -> Run {
    let mut args = opts.to_vec();
    args.extend(["-n", n, "sh", "-c", SHOW]);
    run_env(&args, b"", &preset(list))
}

#[test]
fn a_preset_list_is_split_among_the_local_ranks() {
    assert_eq!(by_rank(&job(&["-gpus-per-proc", "2"], "2", "4,5,6,7"), 2), ["4,5", "6,7"]);
    assert_eq!(by_rank(&job(&["-gpus-per-proc", "1"], "2", "4,5,6,7"), 2), ["4", "5"]);
    // Spellings: `=`, two dashes.
    assert_eq!(by_rank(&job(&["--gpus-per-proc=3"], "2", "4,5,6,7"), 2), ["4,5,6", "7"]);
}

#[test]
fn ranks_past_the_list_see_no_device() {
    assert_eq!(by_rank(&job(&["-gpus-per-proc", "1"], "3", "4,5"), 3), ["4", "5", "-1"]);
}

#[test]
fn zero_hides_every_device() {
    assert_eq!(by_rank(&job(&["-gpus-per-proc", "0"], "2", "4,5,6,7"), 2), ["-1", "-1"]);
    assert_eq!(by_rank(&job(&["-gpu-subdevs-per-proc", "0"], "2", "4,5"), 2), ["-1", "-1"]);
    // As Hydra: a 0 in either hides, whatever the other says.
    let r = job(&["-gpus-per-proc", "1", "-gpu-subdevs-per-proc", "0"], "2", "4,5");
    assert_eq!(by_rank(&r, 2), ["-1", "-1"]);
}

/// For CUDA, sub-devices are devices; `-gpu-subdevs-per-proc` wins over `-gpus-per-proc`.
#[test]
fn subdevices_of_cuda_are_devices() {
    assert_eq!(by_rank(&job(&["-gpu-subdevs-per-proc", "2"], "2", "4,5,6,7"), 2), ["4,5", "6,7"]);
    let r = job(&["-gpus-per-proc", "1", "-gpu-subdevs-per-proc", "2"], "2", "4,5,6,7");
    assert_eq!(by_rank(&r, 2), ["4,5", "6,7"]);
}

/// The rank's value replaces the app's (`-env`, `-genv`, the front end's own).
#[test]
fn the_rank_value_replaces_the_apps() {
    let r = job(&["-gpus-per-proc", "1", "-env", "CUDA_VISIBLE_DEVICES", "9"], "2", "4,5");
    assert_eq!(by_rank(&r, 2), ["4", "5"]);
    let r = job(&["-genv", "CUDA_VISIBLE_DEVICES=9", "-gpus-per-proc", "1"], "2", "4,5");
    assert_eq!(by_rank(&r, 2), ["4", "5"]);
    // Without the option the app's value is left alone.
    let r = job(&["-env", "CUDA_VISIBLE_DEVICES", "9"], "2", "4,5");
    assert_eq!(by_rank(&r, 2), ["9", "9"]);
}

/// `auto` (the default) sets nothing: a preset list reaches every rank unchanged, and no
/// variable appears where none was.
#[test]
fn auto_sets_nothing() {
    assert_eq!(by_rank(&job(&[], "2", "4,5,6,7"), 2), ["4,5,6,7", "4,5,6,7"]);
    let r = job(&["-gpus-per-proc", "auto"], "2", "4,5,6,7");
    assert_eq!(by_rank(&r, 2), ["4,5,6,7", "4,5,6,7"]);
    if std::env::var_os("CUDA_VISIBLE_DEVICES").is_none() {
        let r = run(&["-gpu-subdevs-per-proc", "auto", "-n", "2", "sh", "-c", SHOW], b"");
        assert_eq!(by_rank(&r, 2), ["unset", "unset"]);
    }
}

/// With no list and no GPU on the machine, ranks see none (`CUDA_VISIBLE_DEVICES=-1`).
#[test]
fn no_gpu_found_means_none() {
    let vars = ["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"];
    let found = libi_node::proc::gpu::detect(std::path::Path::new("/"), false);
    if found.is_some()
        || vars.iter().chain(["ZE_AFFINITY_MASK"].iter()).any(|v| std::env::var_os(v).is_some())
    {
        eprintln!("skipped: this machine has GPUs ({found:?}) or a visibility variable set");
        return;
    }
    let r = run(&["-gpus-per-proc", "1", "-n", "2", "sh", "-c", SHOW], b"");
    assert_eq!(by_rank(&r, 2), ["-1", "-1"]);
}

/// Each node splits its own list from its local rank 0 on; MPMD apps share a node's list
/// (the local rank counts the group's ranks on the node, whatever their app).
#[test]
fn each_node_splits_its_list_among_its_ranks() {
    let args = ["-launcher", "fork", "-hosts", "n1:2,n2:2", "-gpus-per-proc", "2"];
    let r = job(&args, "4", "4,5,6,7");
    assert_eq!(by_rank(&r, 4), ["4,5", "6,7", "4,5", "6,7"]);
    let mpmd =
        ["-gpus-per-proc", "1", "-n", "1", "sh", "-c", SHOW, ":", "-n", "2", "sh", "-c", SHOW];
    let r = run_env(&mpmd, b"", &preset("4,5,6,7"));
    assert_eq!(by_rank(&r, 3), ["4", "5", "6"]);
}

/// `-v`: one line for the node's list, one per rank.
#[test]
fn verbose_reports_each_ranks_gpus() {
    let r = job(&["-v", "-gpus-per-proc", "2"], "3", "4,5,6,7");
    assert_eq!(r.status, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stderr.lines().filter(|l| l.contains("gpu")).collect();
    let want = [
        "gpu list '4,5,6,7' (preset CUDA_VISIBLE_DEVICES)",
        "rank 0 (local 0) gpus 4,5 (CUDA_VISIBLE_DEVICES)",
        "rank 1 (local 1) gpus 6,7 (CUDA_VISIBLE_DEVICES)",
        "rank 2 (local 2) gpus none (CUDA_VISIBLE_DEVICES=-1)",
    ];
    for w in want {
        assert!(
            lines.iter().any(|l| l.starts_with("[libi-nla@") && l.ends_with(w)),
            "{w}: {lines:?}"
        );
    }
}

/// A group started by `MPI_Comm_spawn` gets the same setting, split from its own local rank
/// 0 on.
#[test]
fn spawned_groups_inherit_the_setting() {
    let child = pmi_child(SHOW);
    let block = spawn_block("2", &child, "port-1", &[]);
    let script = spawner_script(&["B1"], "say cmd=finalize");
    let args = ["-gpus-per-proc", "2", "-genv", "B1", &block, "-n", "1", "bash", "-c", &script];
    let r = run_env(&args, b"", &preset("4,5,6,7"));
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert!(r.stdout.contains("cmd=spawn_result rc=0"), "{}\n{}", r.stdout, r.stderr);
    let mut kids: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with(['0', '1'])).collect();
    kids.sort();
    assert_eq!(kids, ["0 4,5", "1 6,7"], "{}\n{}", r.stdout, r.stderr);
}

#[test]
fn bad_values_are_usage_errors() {
    for (opt, v) in [
        ("-gpus-per-proc", "x"),
        ("-gpus-per-proc", "-1"),
        ("-gpus-per-proc", "1.5"),
        ("-gpu-subdevs-per-proc", "two"),
        ("-gpu-subdevs-per-proc", ""),
    ] {
        let r = run(&[opt, v, "-n", "2", "true"], b"");
        assert_eq!(r.status, 2, "{opt} {v}: {}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{opt} {v}: {}", r.stderr);
        let want = format!("libi-mpiexec: {opt}: expected auto or a number (0 or more), got '{v}'");
        assert_eq!(r.stderr.trim_end(), want);
    }
    let r = run(&["-n", "2", "true", ":", "-gpus-per-proc"], b"");
    assert_eq!(r.status, 2, "{}", r.stderr);
}
