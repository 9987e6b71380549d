//! Tools next to a job: the process table of a running `libi-mpiexec` job, asked for with
//! `libi-mpiexec --proctable PID` (the control socket) and read by a real debugger (gdb)
//! through the MPIR process acquisition interface.

mod common;

use common::{leftovers, new_mark, MPIEXEC};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One row of a process table: rank, host, pid, executable.
fn rows(text: &str) -> Vec<(u32, String, i32, String)> {
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 4, "bad row '{l}' in:\n{text}");
            (f[0].parse().expect("rank"), f[1].into(), f[2].parse().expect("pid"), f[3].into())
        })
        .collect()
}

/// The command line of a live process.
fn cmdline(pid: i32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw).replace('\0', " ").trim_end().to_string()
}

/// A job of 5 ranks over 3 simulated nodes: the table names each rank once, in rank order,
/// with its node and the pid of a live process running the rank's command; a pid that is
/// not a job gets a clear error and status 1.
#[test]
fn proctable_of_a_running_job() {
    let mark = new_mark();
    let mut job = Command::new(MPIEXEC)
        .args(["-launcher", "fork", "-hosts", "n1:2,n2:2,n3:1", "-n", "5", "sleep", "1000.5"])
        .env("LIBI_E2E_MARK", &mark)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start libi-mpiexec");
    // The control socket exists once the front end runs; the answer waits for the launch.
    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let out = Command::new(MPIEXEC)
            .args(["--proctable", &job.id().to_string()])
            .output()
            .expect("run --proctable");
        if out.status.success() || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = rows(&text);
    let hosts: Vec<&str> = table.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(hosts, ["n1", "n1", "n2", "n2", "n3"], "{text}");
    for (i, (rank, _, pid, exe)) in table.iter().enumerate() {
        assert_eq!(*rank as usize, i, "{text}");
        assert_eq!(exe, "sleep", "{text}");
        assert!(*pid > 0, "{text}");
        assert_eq!(cmdline(*pid), "sleep 1000.5", "rank {rank}: pid {pid}");
    }
    // Asked again: the same table.
    let again = Command::new(MPIEXEC).args(["--proctable", &job.id().to_string()]).output();
    assert_eq!(String::from_utf8_lossy(&again.expect("again").stdout), text);

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(job.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT the job");
    let status = job.wait().expect("wait for the job");
    assert_eq!(status.code(), Some(130));
    assert!(leftovers(&mark, Duration::from_secs(5)).is_empty());

    // Not a job (our own test process has no control socket).
    let out = Command::new(MPIEXEC)
        .args(["--proctable", &std::process::id().to_string()])
        .output()
        .expect("run --proctable");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "libi-mpiexec: --proctable {}: process {} is not a libi-mpiexec job",
            std::process::id(),
            std::process::id()
        )) && err.lines().count() == 1,
        "{err}"
    );
}

/// A debugger that starts `libi-mpiexec` (gdb here, as TotalView or LaunchMON would) sets
/// `MPIR_being_debugged`, stops at `MPIR_Breakpoint` once the ranks run, and reads
/// `MPIR_proctable` from our memory with only the ELF symbols and the interface's layout.
#[test]
fn gdb_reads_the_mpir_proctable() {
    let script = "\
set pagination off
set language c
break main
run
set var *(int*)&MPIR_being_debugged = 1
break MPIR_Breakpoint
continue
set $n = *(int*)&MPIR_proctable_size
set $t = *(char**)&MPIR_proctable
printf \"STATE %d SIZE %d\\n\", *(int*)&MPIR_debug_state, $n
set $i = 0
while $i < $n
  set $e = $t + 24 * $i
  printf \"ROW %d %s %d %s\\n\", $i, *(char**)$e, *(int*)($e + 16), *(char**)($e + 8)
  eval \"shell cp /proc/%d/cmdline DIR/cmdline-%d\", *(int*)($e + 16), $i
  set $i = $i + 1
end
kill
quit
";
    // While stopped, gdb copies each rank's /proc/PID/cmdline here (it kills the job after).
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("mpir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the gdb dir");
    let file = dir.join("mpir.gdb");
    std::fs::write(&file, script.replace("DIR", &dir.to_string_lossy()))
        .expect("write the gdb script");
    let mark = new_mark();
    let out = Command::new("gdb")
        .args(["-batch", "-nx", "-x"])
        .arg(&file)
        .args(["--args", MPIEXEC, "-launcher", "fork", "-hosts", "n1:2,n2:1"])
        .args(["-n", "3", "sleep", "1000.25"])
        .env("LIBI_E2E_MARK", &mark)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("gdb not found ({e}): install it (ci/install-deps.sh)"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let state = text.lines().find(|l| l.starts_with("STATE ")).unwrap_or_else(|| {
        panic!(
            "gdb never stopped at MPIR_Breakpoint:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(state, "STATE 1 SIZE 3", "{text}");
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter_map(|l| l.strip_prefix("ROW "))
        .map(|l| l.split(' ').collect())
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    for (i, (row, host)) in rows.iter().zip(["n1", "n1", "n2"]).enumerate() {
        assert_eq!(row[0], i.to_string(), "{text}");
        assert_eq!(row[1], host, "{text}");
        assert_eq!(row[3], "sleep", "{text}");
        let raw = std::fs::read(dir.join(format!("cmdline-{i}"))).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
        assert_eq!(cmd.trim_end(), "sleep 1000.25", "rank {i}: pid {}", row[2]);
    }
    // gdb killed the front end: its agents take the ranks down with them.
    let left = leftovers(&mark, Duration::from_secs(10));
    assert!(left.is_empty(), "left running: {left:?}");
}

/// A socket that merely carries a job's name is not believed: a process that binds the
/// names a job with that pid would have had (the old `libi-mpiexec.PID`, and
/// `libi-mpiexec.PID.RANDOM` with any random part) is never asked, because the client takes
/// only a socket the process itself holds.
#[test]
fn proctable_refuses_a_squatted_socket() {
    use std::os::linux::net::SocketAddrExt;
    let mut victim = Command::new("sleep").arg("30").spawn().expect("sleep");
    let mut squatters = Vec::new();
    for name in [format!("libi-mpiexec.{}", victim.id()), format!("libi-mpiexec.{}.0", victim.id())]
    {
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name).expect("name");
        let squatter = std::os::unix::net::UnixListener::bind_addr(&addr).expect("bind");
        squatter.set_nonblocking(true).expect("nonblocking");
        squatters.push(squatter);
    }
    let out = Command::new(MPIEXEC)
        .args(["--proctable", &victim.id().to_string()])
        .output()
        .expect("run --proctable");
    let _ = victim.kill();
    let _ = victim.wait();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err,
        format!(
            "libi-mpiexec: --proctable {0}: process {0} is not a libi-mpiexec job with a control \
             socket\n",
            victim.id(),
        )
    );
    for s in squatters {
        assert!(s.accept().is_err(), "the client connected to a squatter");
    }
}
