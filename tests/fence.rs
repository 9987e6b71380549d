//! Big fences and the KVS limit, end to end: a fence bigger than a tree message's chunk
//! crosses simulated nodes in parts and every value checked arrives intact; a repeated put
//! behaves as Hydra's; a job over `--kvs-max` fails with one line naming a rank.

mod common;

use common::{failure_line, prog, run, run_env, sync_dir, PMI_SAY};

const HOSTS4: &str = "n1:1,n2:1,n3:1,n4:1";

/// The report's per-node entries, front end first.
fn nodes(report: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(report).expect("report written");
    let v: serde_json::Value = serde_json::from_str(&text).expect("report is JSON");
    v["reports"].as_array().expect("reports").clone()
}

/// The launch report's counters of every node, as (host, counters).
fn counters(report: &std::path::Path) -> Vec<(String, serde_json::Value)> {
    nodes(report)
        .iter()
        .map(|n| (n["host"].as_str().unwrap_or("?").to_string(), n["counters"].clone()))
        .collect()
}

/// Each node's own CPU from the report (user + system seconds), front end first.
fn own_cpu(report: &std::path::Path) -> Vec<f64> {
    nodes(report)
        .iter()
        .map(|n| n["cpu_user"].as_f64().unwrap_or(-1.0) + n["cpu_sys"].as_f64().unwrap_or(-1.0))
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
        let wall = || {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            t.map(|d| d.as_secs_f64()).unwrap_or(0.0)
        };
        let before = wall();
        let r = run(&args, b"");
        let after = wall();
        assert_eq!(r.status, 0, "push {push}: {}", r.stderr);
        let ok = r.stdout.lines().filter(|l| l.ends_with(" of 4 ok 1504")).count();
        assert_eq!(ok, 4, "push {push}: {}", r.stdout);
        eprintln!("{}", r.stdout.lines().find(|l| l.starts_with("bigfence:")).unwrap_or(""));
        let nodes = counters(&report);
        // Every process reports the CPU it used (moving 32 MiB is not free).
        let cpu = own_cpu(&report);
        assert_eq!(cpu.len(), 5, "{cpu:?}");
        assert!(cpu.iter().all(|&c| c > 0.0), "push {push}: {cpu:?}");
        // Every rank's fence records are times within the job's, from the front end's start
        // (taken from each host's wall clock: the report compares them across hosts), entered
        // before left.
        let records: Vec<(f64, f64)> = self::nodes(&report)
            .iter()
            .flat_map(|n| n["fences"].as_array().cloned().unwrap_or_default())
            .map(|f| (f["enter"].as_f64().unwrap_or(-1.0), f["leave"].as_f64().unwrap_or(-1.0)))
            .collect();
        assert!(records.len() >= 4, "push {push}: a record per rank and fence: {records:?}");
        for &(enter, leave) in &records {
            let ok = 0.0 <= enter && enter <= leave && leave <= after - before;
            assert!(ok, "push {push}: {} s: {records:?}", after - before);
        }
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

/// A child NLA that stops reading does not stop its parent from serving the parent's own
/// ranks: the release pushed down to it (3 MB, far over the socket's buffers) waits in its
/// link's queue while the parent answers its rank's gets. Chain n1 -> n2: rank 1 (on n2)
/// enters the fence, then its NLA is stopped (SIGSTOP) by rank 0 (on n1), which puts 3 MB,
/// fences, and gets its pairs before it lets n2 go on (SIGCONT). Before per-child writer
/// queues, n1 waited in the write to n2 and rank 0's first get was never answered.
#[test]
fn a_child_that_stops_reading_does_not_stop_its_parent() {
    let sync = sync_dir("stopped-child");
    let body = r#"say 'cmd=init pmi_version=1 pmi_subversion=1'
say cmd=get_my_kvsname
k=${REPLY#*kvsname=}; k=${k%% *}
if [ $PMI_RANK = 1 ]; then
  printf 'cmd=barrier_in\n' >&$PMI_FD; sleep 0.3
  echo $PPID >$SYNC/nla.tmp; mv $SYNC/nla.tmp $SYNC/nla
  read -r REPLY <&$PMI_FD; echo "out $REPLY"
else
  v=$(printf '%01000d' 0)
  for i in $(seq 3000); do say "cmd=put kvsname=$k key=p$i value=$v"; done
  while [ ! -f $SYNC/nla ]; do sleep 0.05; done; nla=$(cat $SYNC/nla)
  kill -STOP $nla; say cmd=barrier_in
  n=0; for i in $(seq 1 150 3000); do say "cmd=get kvsname=$k key=p$i"
    case $REPLY in *rc=0*value=$v*) n=$((n+1));; esac; done
  echo "served $n while n2 was stopped"; kill -CONT $nla
fi
say cmd=finalize
"#;
    let rank = format!("{PMI_SAY}\n{body}");
    let r = run_env(
        &[
            "-launcher",
            "fork",
            "-hosts",
            "n1:1,n2:1",
            "--tree",
            "chain",
            "-l",
            "-n",
            "2",
            "bash",
            "-c",
            &rank,
        ],
        b"",
        &[("SYNC", &sync), ("MPIEXEC_TIMEOUT", "60")],
    );
    assert_eq!(r.status, 0, "{}\n{}", r.stdout, r.stderr);
    let has = |l: &str| r.stdout.lines().any(|x| x.trim_end() == l);
    assert!(has("[0] served 20 while n2 was stopped"), "{}", r.stdout);
    assert!(has("[1] out cmd=barrier_out rc=0"), "{}", r.stdout);
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
