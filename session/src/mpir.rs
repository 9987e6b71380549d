//! Reading a running starter's MPIR process table (`MPIR_proctable`) as a debugger does:
//! gdb attaches to the starter (ptrace), reads `MPIR_proctable_size` and the table from its
//! memory through the ELF symbols alone (no debug information needed; the layout is the
//! MPIR interface's: host name, executable name, pid), and detaches, leaving it running.
//!
//! Works with any MPIR starter whose symbols are there: `libi-mpiexec`, Hydra's
//! `mpiexec.hydra` built with its symbols, `srun`. Hydra fills its table once every proxy
//! has sent its ranks' pids, whether or not a debugger set `MPIR_being_debugged` (MPICH's
//! `pmiserv_cb.c`), so nothing has to be set; `libi-mpiexec` fills it at launch for jobs of
//! at most 65,536 ranks. A stripped starter (Debian's and the MPICH wheel's
//! `mpiexec.hydra` are) has no such symbols: the error says so.

use crate::fe::ProcEntry;
use crate::{Code, Error, Result};
use std::process::{Command, Stdio};

/// How many ranks a table may have (larger sizes are taken as garbage).
const TABLE_MAX: i64 = 1 << 24;

/// The gdb script: one `size N` line, then `host`, `exe` and `pid` lines per entry (each
/// entry is 24 bytes on a 64-bit starter: two pointers and an int).
const SCRIPT: &str = "\
set pagination off
set confirm off
set language c
set width 0
set $n = *(int*)&MPIR_proctable_size
printf \"LIBI size %d\\n\", $n
set $t = *(char**)&MPIR_proctable
set $i = 0
while $i < $n && $t != 0
  set $e = $t + 24 * $i
  printf \"LIBI pid %d\\n\", *(int*)($e + 16)
  printf \"LIBI host %s\\n\", *(char**)$e
  printf \"LIBI exe %s\\n\", *(char**)($e + 8)
  set $i = $i + 1
end
detach
quit
";

/// The MPIR process table of the starter with this pid, in rank order (its index is the
/// rank).
pub fn mpir_table(pid: u32) -> Result<Vec<ProcEntry>> {
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_string())
        .map_err(|_| Error::new(Code::ESess, format!("no process with pid {pid}")))?;
    // The script is an anonymous file (memfd) that gdb reads as /proc/self/fd/N: no file
    // another user could swap (gdb cannot read a script from a pipe).
    let run = || -> std::io::Result<std::process::Output> {
        use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
        use std::os::fd::AsRawFd;
        let fd = memfd_create(c"libi-mpir.gdb", MemFdCreateFlag::MFD_CLOEXEC)?;
        let mut f = std::fs::File::from(fd);
        std::io::Write::write_all(&mut f, SCRIPT.as_bytes())?;
        let raw = f.as_raw_fd();
        let mut cmd = Command::new("gdb");
        cmd.args(["-nx", "-batch", "-p", &pid.to_string(), "-x"])
            .arg(format!("/proc/self/fd/{raw}"))
            .stdin(Stdio::null());
        // SAFETY: between fork and exec the child only calls fcntl (async-signal-safe) to
        // keep the script's descriptor open across exec, in gdb only.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                nix::fcntl::fcntl(raw, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))
                    .map(drop)
                    .map_err(Into::into)
            });
        }
        let out = cmd.output();
        drop(f);
        out
    };
    let out = run().map_err(|e| {
        Error::new(Code::EIo, format!("cannot run gdb to read process {pid}'s MPIR table: {e}"))
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    parse(&text, &err, pid, &name)
}

/// The table from gdb's output (`text`, `err` its stderr).
fn parse(text: &str, err: &str, pid: u32, name: &str) -> Result<Vec<ProcEntry>> {
    let all = format!("{text}\n{err}");
    if all.contains("ptrace: Operation not permitted") {
        let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
            .map(|s| format!(" (kernel.yama.ptrace_scope is {}: 0 lets a process of the same user attach, 1 only its parent, 2 only root)", s.trim()))
            .unwrap_or_default();
        return Err(Error::new(
            Code::EIo,
            format!("cannot attach to process {pid} ({name}) to read its MPIR table: ptrace is not permitted{scope}"),
        ));
    }
    let mut lines = text.lines().filter_map(|l| l.strip_prefix("LIBI "));
    let size = lines.next().and_then(|l| l.strip_prefix("size ")?.trim().parse::<i64>().ok());
    let Some(size) = size else {
        if all.contains("No symbol \"MPIR_proctable_size\"") {
            return Err(Error::new(
                Code::ESess,
                format!(
                    "process {pid} ({name}) has no MPIR_proctable symbol: not an MPIR starter, or \
                     a stripped one (install its debug symbols, e.g. Debian's mpich-dbgsym, for \
                     gdb to find the table)"
                ),
            ));
        }
        let why = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no answer");
        return Err(Error::new(
            Code::EIo,
            format!("gdb could not read process {pid}'s MPIR table: {}", why.trim()),
        ));
    };
    if size <= 0 {
        return Err(Error::new(
            Code::ESess,
            format!("process {pid} ({name}) has no MPIR process table (yet): its ranks are not all started"),
        ));
    }
    if size > TABLE_MAX {
        return Err(Error::new(
            Code::EIo,
            format!("process {pid}'s MPIR table size {size} is not believable"),
        ));
    }
    let mut table = Vec::with_capacity(size as usize);
    let mut rank = 0u32;
    let mut pid_of = None;
    let mut host = None;
    for l in lines {
        let (k, v) = l.split_once(' ').unwrap_or((l, ""));
        match k {
            "pid" => pid_of = v.trim().parse::<i32>().ok(),
            "host" => host = Some(v.to_string()),
            "exe" => {
                let (Some(p), Some(h)) = (pid_of.take(), host.take()) else { break };
                table.push(ProcEntry { rank, host: h, pid: p, exe: v.to_string() });
                rank += 1;
            }
            _ => {}
        }
    }
    if table.len() as i64 != size {
        return Err(Error::new(
            Code::EIo,
            format!("read {} of the {size} entries of process {pid}'s MPIR table", table.len()),
        ));
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gdb_output_is_read_or_refused_in_one_line() {
        let out = "LIBI size 2\nLIBI pid 10\nLIBI host n1\nLIBI exe /bin/sleep\n\
                   LIBI pid 11\nLIBI host n2\nLIBI exe /bin/a b\n";
        let t = parse(out, "", 7, "mpiexec.hydra").expect("table");
        assert_eq!(t.len(), 2);
        assert_eq!(
            (t[1].rank, t[1].host.as_str(), t[1].pid, t[1].exe.as_str()),
            (1, "n2", 11, "/bin/a b")
        );
        let e = parse("", "No symbol \"MPIR_proctable_size\" in current context.\n", 7, "x")
            .unwrap_err();
        assert!(e.message.contains("has no MPIR_proctable symbol"), "{e:?}");
        let e = parse("", "ptrace: Operation not permitted.\n", 7, "x").unwrap_err();
        assert!(e.message.contains("ptrace is not permitted"), "{e:?}");
        let e = parse("LIBI size 0\n", "", 7, "x").unwrap_err();
        assert_eq!(e.code, Code::ESess);
        let e =
            parse("LIBI size 3\nLIBI pid 1\nLIBI host a\nLIBI exe b\n", "", 7, "x").unwrap_err();
        assert!(e.message.contains("read 1 of the 3 entries"), "{e:?}");
    }
}
