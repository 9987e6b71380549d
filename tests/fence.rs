//! Big fences and the KVS limit, end to end: a fence bigger than a tree message's chunk
//! crosses simulated nodes in parts and every value checked arrives intact; a repeated put
//! behaves as Hydra's; a job over `--kvs-max` fails with one line naming a rank.

mod common;

use common::{failure_line, prog, run, PMI_SAY};

const HOSTS4: &str = "n1:1,n2:1,n3:1,n4:1";

/// The launch report's counters of every node, as (host, counters).
fn counters(report: &std::path::Path) -> Vec<(String, serde_json::Value)> {
    let text = std::fs::read_to_string(report).expect("report written");
    let v: serde_json::Value = serde_json::from_str(&text).expect("report is JSON");
    v["reports"]
        .as_array()
        .expect("reports")
        .iter()
        .map(|n| (n["host"].as_str().unwrap_or("?").to_string(), n["counters"].clone()))
        .collect()
}

fn report_path(tag: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fence-{tag}-{}.json", std::process::id()))
}

/// 4 simulated nodes put 32 MiB (8 MiB a node: two chunks and more each) in one fence;
/// gets spread over every rank's pairs (and every rank's last pair) return the right values.
/// Lazy (the default: too big to push) and pushed (`--kvs-push-max 1G`: the release goes
/// down in parts and every get is answered locally).
#[test]
fn big_fence_across_4_nodes() {
    for push in [false, true] {
        let report = report_path(if push { "pushed" } else { "lazy" });
        let rp = report.to_string_lossy().into_owned();
        let mut args = vec!["-launcher", "fork", "-hosts", HOSTS4, "--report", &rp];
        if push {
            args.extend(["--kvs-push-max", "1G"]);
        }
        let prog = prog("bigfence");
        args.extend(["-n", "4", &prog, "32M", "1500"]);
        let r = run(&args, b"");
        assert_eq!(r.status, 0, "push {push}: {}", r.stderr);
        let ok = r.stdout.lines().filter(|l| l.ends_with(" of 4 ok 1504")).count();
        assert_eq!(ok, 4, "push {push}: {}", r.stdout);
        eprintln!("{}", r.stdout.lines().find(|l| l.starts_with("bigfence:")).unwrap_or(""));
        let nodes = counters(&report);
        let fe = &nodes[0].1;
        assert!(fe["kvs_bytes"].as_u64().unwrap_or(0) > 31 << 20, "the root holds it all: {fe}");
        for (host, c) in &nodes[1..] {
            let up = c["fence_parts_up"].as_u64().unwrap_or(0);
            assert!(up >= 2, "{host} sent its 8 MiB in parts: {c}");
            let down = c["fence_parts_down"].as_u64().unwrap_or(0);
            if push {
                assert!(down >= 7, "{host} got the 32 MiB release in parts: {c}");
                assert_eq!(c["gets_up"], 0, "{host}: every get answered locally: {c}");
            } else {
                assert_eq!(down, 0, "{c}");
            }
        }
    }
}

/// A rank that puts one key twice: both puts succeed and every rank (on another node too)
/// gets the last value, as under Hydra; a put after the fence replaces it again.
#[test]
fn repeated_put_last_value_wins() {
    let rank = format!(
        "{PMI_SAY}\nsay 'cmd=init pmi_version=1 pmi_subversion=1'\nsay cmd=get_my_kvsname\n\
         k=${{REPLY#*kvsname=}}; k=${{k%% *}}\n\
         if [ $PMI_RANK = 0 ]; then say \"cmd=put kvsname=$k key=a value=1\"; echo \"put1 $REPLY\";\n\
         say \"cmd=put kvsname=$k key=a value=2\"; echo \"put2 $REPLY\"; fi\n\
         say cmd=barrier_in\nsay \"cmd=get kvsname=$k key=a\"; echo \"get1 $REPLY\"\n\
         if [ $PMI_RANK = 0 ]; then say \"cmd=put kvsname=$k key=a value=3\"; fi\n\
         say cmd=barrier_in\nsay \"cmd=get kvsname=$k key=a\"; echo \"get2 $REPLY\"\n\
         say cmd=finalize\n"
    );
    let r = run(
        &["-launcher", "fork", "-hosts", "n1:1,n2:1", "-l", "-n", "2", "bash", "-c", &rank],
        b"",
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    let has = |l: &str| r.stdout.lines().any(|x| x.trim_end() == l);
    assert!(has("[0] put1 cmd=put_result rc=0 msg=success"), "{}", r.stdout);
    assert!(has("[0] put2 cmd=put_result rc=0 msg=success"), "{}", r.stdout);
    for rank in 0..2 {
        let get1 = format!("[{rank}] get1 cmd=get_result rc=0 msg=success value=2");
        let get2 = format!("[{rank}] get2 cmd=get_result rc=0 msg=success value=3");
        assert!(has(&get1) && has(&get2), "{}", r.stdout);
    }
}

/// A rank over `--kvs-max` fails the job at once: status 1, one line naming the rank, what
/// it put and the limit.
#[test]
fn kvs_limit_names_the_rank() {
    let r = run(&["--kvs-max", "100K", "-n", "1", &prog("bigfence"), "2M", "0"], b"");
    assert_eq!(r.status, 1, "{}", r.stderr);
    let line = failure_line(&r);
    assert!(line.starts_with("libi-mpiexec: rank "), "{line}");
    assert!(line.ends_with("KiB of KVS data; the job's limit is 100 KiB (--kvs-max)"), "{line}");
}

/// Every rank under the limit, the job over it: the node that finds the total too big
/// fails the job naming the rank that put the most.
#[test]
fn kvs_limit_total_names_a_rank() {
    let r = run(
        &["-launcher", "fork", "-hosts", HOSTS4, "--kvs-max", "300K", "-n", "4"]
            .into_iter()
            .chain([prog("bigfence").as_str(), "400K", "0"])
            .collect::<Vec<_>>(),
        b"",
    );
    assert_eq!(r.status, 1, "{}", r.stderr);
    let line = failure_line(&r);
    assert!(line.starts_with("libi-mpiexec: the job's KVS data reached "), "{line}");
    assert!(line.contains(" on n"), "names a rank and its node: {line}");
    assert!(line.ends_with("; the job's limit is 300 KiB (--kvs-max)"), "{line}");
}
