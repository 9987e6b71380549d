//! The job's control socket: a tool asks a running `libi-mpiexec` for its job's process
//! table (`libi-mpiexec --proctable PID` is the client).
//!
//! The socket is an abstract Unix socket named `libi-mpiexec.PID.RANDOM` (64 random bits):
//! no other user can squat it in advance, whatever pid we get. The client finds it through
//! the front end's own descriptors (`/proc/PID/fd`, which only its user and root can read)
//! and `/proc/net/unix`, so a socket of another process that merely carries a matching
//! name is never taken. After connecting, the client checks the peer's credentials: the
//! uid that owns the process, and its pid. The server answers only a process of its own
//! user (or root), checked before anything is read; a request is one line of at most
//! [`REQUEST_MAX`] bytes, sent within [`REQUEST_WAIT`]; the answer is text, then the
//! connection closes. At most [`PENDING_MAX`] requests wait for the tree at a time.
//!
//! Requests: `proctable` → one line per rank of the job, in rank order:
//! `RANK HOST PID EXECUTABLE` (a pid of 0: the rank is not running; host and executable
//! escaped with `libi::text::escape`), or one line `error: …`. `launcher` → how the job
//! starts its agents, for a tool that starts daemons on the job's hosts the same way (LIBI's
//! attach): `kind fork|ssh|rsh|slurm`, then `exec PROGRAM` (`-launcher-exec`), one `extra
//! WORD` per word of `HYDRA_LAUNCHER_EXTRA_ARGS`, `hybrid-hosts` (`-hybrid-hosts`), each only
//! when set, values escaped. The client reads at most [`LINE_MAX`] bytes a line, one line
//! per rank of the largest job, within [`ANSWER_WAIT`] in all, and prints each line only
//! once it is checked (a malformed one ends the answer with an error and status 1).

use libi::msg::ProcNode;
use std::os::linux::net::SocketAddrExt;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;

pub const REQUEST_MAX: usize = 64;
pub const REQUEST_WAIT: Duration = Duration::from_secs(5);
pub const PENDING_MAX: usize = 8;
/// How long the client waits for the whole answer (the tree answers once every NLA did).
pub const ANSWER_WAIT: Duration = Duration::from_secs(60);
/// The longest line of an answer the client takes: a rank, a host name and a pid, and an
/// executable's path of up to `PATH_MAX` bytes, each byte escaped.
pub const LINE_MAX: usize = 3 * 16 + 4 * 255 + 4 * 4096;

/// What every control socket's name starts with; then `PID.RANDOM`.
const NAME_PREFIX: &str = "libi-mpiexec.";

/// A fresh control socket name for the front end with this pid.
fn new_name(pid: u32) -> String {
    format!("{NAME_PREFIX}{pid}.{:016x}", rand::random::<u64>())
}

/// A request of a connected tool, and where its answer goes.
pub struct Request {
    pub what: String,
    pub answer: oneshot::Sender<String>,
}

/// Bind a control socket under a fresh random name (another, should one be taken).
fn bind() -> std::io::Result<std::os::unix::net::UnixListener> {
    let mut tries = 0;
    loop {
        let addr =
            std::os::unix::net::SocketAddr::from_abstract_name(new_name(std::process::id()))?;
        match std::os::unix::net::UnixListener::bind_addr(&addr) {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 8 => tries += 1,
            r => return r,
        }
    }
}

/// Listen on our control socket; each valid request is handed to `deliver`. The job runs
/// on without one when it cannot listen, and says so in one line.
pub fn listen(deliver: impl Fn(Request) -> bool + Send + Sync + 'static) {
    let bound =
        bind().and_then(|l| l.set_nonblocking(true).map(|_| l)).and_then(UnixListener::from_std);
    let listener = match bound {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(
                "no control socket ({e}): --proctable and LIBI tools cannot reach this job"
            );
            return;
        }
    };
    let deliver = std::sync::Arc::new(deliver);
    tokio::spawn(async move {
        let mut backoff = libi_node::io::guard::AcceptBackoff::default();
        loop {
            let stream = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    backoff.failed("control socket", &e).await;
                    continue;
                }
            };
            backoff.succeeded();
            let deliver = deliver.clone();
            tokio::spawn(async move { serve(stream, &*deliver).await });
        }
    });
}

async fn serve(mut stream: UnixStream, deliver: &(dyn Fn(Request) -> bool + Send + Sync)) {
    // Our own user (or root) only, before reading a byte.
    let ours = nix::unistd::geteuid().as_raw();
    match stream.peer_cred() {
        Ok(c) if c.uid() == ours || c.uid() == 0 => {}
        _ => return,
    }
    let mut line = String::new();
    let read = {
        let mut r = BufReader::new((&mut stream).take(REQUEST_MAX as u64));
        tokio::time::timeout(REQUEST_WAIT, r.read_line(&mut line)).await
    };
    let answer = match read {
        Ok(Ok(_)) if line.ends_with('\n') => {
            let (tx, rx) = oneshot::channel();
            let what = line.trim().to_string();
            if deliver(Request { what, answer: tx }) {
                rx.await.unwrap_or_else(|_| "error: the job ended\n".into())
            } else {
                "error: the job ended\n".into()
            }
        }
        Ok(Ok(_)) => format!("error: a request is one line of at most {REQUEST_MAX} bytes\n"),
        _ => return,
    };
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The job's ranks from the NLAs' answers, in rank order, each once: (rank, host, app,
/// pid).
pub fn rows(nodes: &[ProcNode], size: u32) -> Vec<(u32, &str, u32, i32)> {
    let mut rows: Vec<(u32, &str, u32, i32)> = nodes
        .iter()
        .flat_map(|n| n.ranks.iter().map(move |(r, app, pid)| (*r, n.host.as_str(), *app, *pid)))
        .filter(|(r, ..)| *r < size)
        .collect();
    rows.sort_by_key(|r| r.0);
    rows.dedup_by_key(|r| r.0);
    rows
}

/// The job's launcher as text (the `launcher` request: see the module's documentation).
pub fn launcher_text(l: &libi::job::LauncherSpec) -> String {
    use libi::job::LauncherKind as K;
    let kind = match l.kind {
        K::Fork => "fork",
        K::Ssh => "ssh",
        K::Rsh => "rsh",
        K::Slurm | K::Joined => "slurm",
    };
    let esc = |x: &str| libi::text::escape(x.as_bytes(), LINE_MAX / 2);
    let mut text = format!("kind {kind}\n");
    if let Some(e) = &l.exec {
        text.push_str(&format!("exec {}\n", esc(e)));
    }
    for w in l.extra_args.iter().take(LAUNCHER_LINES_MAX as usize - 3) {
        text.push_str(&format!("extra {}\n", esc(w)));
    }
    if l.nla_by_name {
        text.push_str("hybrid-hosts\n");
    }
    text
}

/// The most lines a `launcher` answer has.
const LAUNCHER_LINES_MAX: u64 = 256;

/// The process table as text (see the module's documentation).
pub fn proc_table_text(nodes: &[ProcNode], size: u32, exes: &[String]) -> String {
    let rows = rows(nodes, size);
    let mut text = String::with_capacity(rows.len() * 32);
    for (rank, host, app, pid) in rows {
        // One line per rank whatever the name holds: control characters and the backslash
        // as \xNN (libi::text::unescape gives the name back).
        let exe = exes
            .get(app as usize)
            .map_or_else(|| "?".into(), |e| libi::text::escape(e.as_bytes(), usize::MAX));
        let host = libi::text::escape(host.as_bytes(), usize::MAX).replace(' ', "\\x20");
        text.push_str(&format!("{rank} {host} {pid} {exe}\n"));
    }
    text
}

/// `libi-mpiexec --proctable PID`: print the process table of the job run by the front
/// end with that pid. Returns the exit status. The socket is found among that process's own
/// descriptors and its peer must be that process of that process's user (see the module's
/// documentation); each line of the answer is checked before it is printed, and the
/// answer's size and time are bounded ([`LINE_MAX`] a line, one line per rank of the
/// largest job, [`ANSWER_WAIT`] in all).
pub fn query(pid: u32) -> i32 {
    match ask(pid, Ask::ProcTable, &mut std::io::stdout().lock()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("libi-mpiexec: --proctable {pid}: {e}");
            1
        }
    }
}

/// `libi-mpiexec --job-launcher PID`: print how the job run by the front end with that pid
/// starts its agents (the `launcher` request), checked as `--proctable` is.
pub fn query_launcher(pid: u32) -> i32 {
    match ask(pid, Ask::Launcher, &mut std::io::stdout().lock()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("libi-mpiexec: --job-launcher {pid}: {e}");
            1
        }
    }
}

/// What the client asks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ask {
    ProcTable,
    Launcher,
}

/// The abstract name of the control socket that process `pid` listens on, and the uid
/// that owns the process. Only its own user (and root) can see its descriptors.
fn find(pid: u32) -> Result<(String, u32), String> {
    use std::os::unix::fs::MetadataExt;
    let proc = format!("/proc/{pid}");
    let owner = std::fs::metadata(&proc)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("no process with pid {pid}"),
            _ => format!("cannot look at process {pid}: {e}"),
        })?
        .uid();
    let me = nix::unistd::geteuid().as_raw();
    if me != 0 && owner != me {
        return Err(format!("process {pid} belongs to uid {owner}, not to you"));
    }
    let fds = std::fs::read_dir(format!("{proc}/fd"))
        .map_err(|e| format!("cannot read the descriptors of process {pid}: {e}"))?;
    let sockets: std::collections::HashSet<u64> = fds
        .flatten()
        .filter_map(|f| std::fs::read_link(f.path()).ok())
        .filter_map(|l| {
            l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse::<u64>().ok()
        })
        .collect();
    let table = std::fs::read_to_string("/proc/self/net/unix")
        .map_err(|e| format!("cannot read /proc/self/net/unix: {e}"))?;
    let prefix = format!("@{NAME_PREFIX}{pid}.");
    let found = listening_names(&table)
        .find(|(inode, name)| sockets.contains(inode) && name.starts_with(&prefix))
        .map(|(_, name)| (name[1..].to_string(), owner));
    found.ok_or_else(|| format!("process {pid} is not a libi-mpiexec job with a control socket"))
}

/// The listening sockets of a `/proc/net/unix` table: (inode, path), abstract names with
/// their leading `@`.
fn listening_names(table: &str) -> impl Iterator<Item = (u64, &str)> {
    // Num RefCount Protocol Flags Type St Inode Path; Flags has __SO_ACCEPTCON (1 << 16).
    table.lines().skip(1).filter_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let flags = u32::from_str_radix(f.get(3)?, 16).ok()?;
        let inode = f.get(6)?.parse().ok()?;
        (flags & (1 << 16) != 0).then_some((inode, *f.get(7)?))
    })
}

/// Ask process `pid` for its table (or its launcher) and write the checked lines to `out`.
fn ask(pid: u32, what: Ask, out: &mut impl std::io::Write) -> Result<(), String> {
    use std::io::{BufRead, Write};
    let (name, owner) = find(pid)?;
    let addr =
        std::os::unix::net::SocketAddr::from_abstract_name(&name).map_err(|e| e.to_string())?;
    let mut s = std::os::unix::net::UnixStream::connect_addr(&addr)
        .map_err(|e| format!("cannot connect to its control socket ({e})"))?;
    let peer = nix::sys::socket::getsockopt(&s, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| format!("cannot tell who holds its control socket: {e}"))?;
    if peer.uid() != owner || peer.pid() != pid as i32 {
        return Err(format!(
            "its control socket is held by process {} of uid {}, not by it: refused",
            peer.pid(),
            peer.uid()
        ));
    }
    let deadline = std::time::Instant::now() + ANSWER_WAIT;
    let request: &[u8] = match what {
        Ask::ProcTable => b"proctable\n",
        Ask::Launcher => b"launcher\n",
    };
    s.write_all(request).map_err(|e| e.to_string())?;
    let mut r = std::io::BufReader::new(&s);
    let mut line = Vec::with_capacity(256);
    let mut last_rank: Option<u32> = None;
    let rows_max = match what {
        Ask::ProcTable => u64::from(libi::job::MAX_JOB_SIZE),
        Ask::Launcher => LAUNCHER_LINES_MAX,
    };
    let mut rows = 0u64;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(format!("no whole answer from the job with pid {pid} in time"));
        }
        s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        line.clear();
        let n = match std::io::Read::take(&mut r, LINE_MAX as u64 + 1).read_until(b'\n', &mut line)
        {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(format!("no answer from the job with pid {pid}: {e}")),
        };
        if n == 0 {
            return match rows {
                0 => Err(format!("the job with pid {pid} gave no answer")),
                _ => Ok(()),
            };
        }
        if rows == 0 {
            if let Some(e) = line.strip_prefix(b"error: ") {
                let e = e.strip_suffix(b"\n").unwrap_or(e);
                return Err(libi::text::escape(e, 200));
            }
        }
        rows += 1;
        let Some(text) = line.strip_suffix(b"\n") else {
            return Err(format!("line {rows} of its answer is cut off or over {LINE_MAX} bytes"));
        };
        let malformed = |why| format!("line {rows} of its answer is malformed ({why})");
        match what {
            Ask::ProcTable => last_rank = Some(check_row(text, last_rank).map_err(malformed)?),
            Ask::Launcher => check_launcher_line(text, rows == 1).map_err(malformed)?,
        }
        if rows > rows_max {
            return Err(format!("its answer has over {rows_max} lines"));
        }
        out.write_all(&line).map_err(|e| format!("cannot write the table: {e}"))?;
    }
}

/// One line of a process table (without its newline), checked: `RANK HOST PID EXE`, ranks
/// increasing, host and executable in [`libi::text::escape`]'s form (nothing a terminal
/// would act on). Returns the rank.
fn check_row(line: &[u8], after: Option<u32>) -> Result<u32, &'static str> {
    let text = std::str::from_utf8(line).map_err(|_| "not UTF-8")?;
    let mut f = text.splitn(4, ' ');
    let mut field = |what| f.next().filter(|x| !x.is_empty()).ok_or(what);
    let rank: u32 = field("no rank")?.parse().map_err(|_| "bad rank")?;
    let host = field("no host")?;
    let _pid: u32 = field("no pid")?.parse().map_err(|_| "bad pid")?;
    let exe = field("no executable")?;
    if after.is_some_and(|a| rank <= a) {
        return Err("ranks out of order");
    }
    let canonical = |x: &str| libi::text::escape(&libi::text::unescape(x), usize::MAX);
    if canonical(host).replace(' ', "\\x20") != host || canonical(exe) != exe {
        return Err("unescaped characters");
    }
    Ok(rank)
}

/// One line of a `launcher` answer (without its newline), checked: `kind K` first (K one
/// of fork, ssh, rsh, slurm), then `exec X`, `extra X` (X in escaped form) or
/// `hybrid-hosts`.
fn check_launcher_line(line: &[u8], first: bool) -> Result<(), &'static str> {
    let text = std::str::from_utf8(line).map_err(|_| "not UTF-8")?;
    let (word, value) = text.split_once(' ').unwrap_or((text, ""));
    let canonical = |x: &str| libi::text::escape(&libi::text::unescape(x), usize::MAX) == x;
    match (first, word) {
        (true, "kind") if matches!(value, "fork" | "ssh" | "rsh" | "slurm") => Ok(()),
        (true, _) => Err("no launcher kind first"),
        (false, "exec" | "extra") if !value.is_empty() && canonical(value) => Ok(()),
        (false, "hybrid-hosts") if value.is_empty() => Ok(()),
        (false, _) => Err("not a launcher line"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One line per rank in rank order, whatever an executable's name holds: a newline or a
    /// backslash in it is written as `\xNN`, and reads back with `libi::text::unescape`.
    #[test]
    fn one_line_per_rank() {
        let nodes = vec![
            ProcNode { host: "n2".into(), ranks: vec![(1, 1, 20)] },
            ProcNode { host: "n1".into(), ranks: vec![(0, 0, 10)] },
        ];
        let exes = vec!["./a b".to_string(), "./nl\nx\\y".to_string()];
        let text = proc_table_text(&nodes, 2, &exes);
        assert_eq!(text, "0 n1 10 ./a b\n1 n2 20 ./nl\\x0ax\\x5cy\n");
        let last = text.lines().nth(1).and_then(|l| l.splitn(4, ' ').nth(3)).unwrap_or("");
        assert_eq!(libi::text::unescape(last), exes[1].as_bytes());
    }

    /// A line is printed only in escaped form and in rank order: a raw escape sequence, a
    /// missing field, a rank out of order or a negative pid refuse the answer.
    #[test]
    fn rows_are_checked() {
        assert_eq!(check_row(b"0 n1 10 ./a b", None), Ok(0));
        assert_eq!(check_row(b"3 n1 0 ./nl\\x0ax", Some(0)), Ok(3));
        assert_eq!(
            check_row(b"0 evil 1 /tmp/x\x1b]0;owned\x07", None),
            Err("unescaped characters")
        );
        assert_eq!(check_row(b"0 ev\x1bil 1 /x", None), Err("unescaped characters"));
        assert_eq!(check_row(b"1 n1 10 ./a", Some(1)), Err("ranks out of order"));
        assert_eq!(check_row(b"1 n1 -4 ./a", None), Err("bad pid"));
        assert_eq!(check_row(b"1 n1 4", None), Err("no executable"));
        assert_eq!(check_row(b"x n1 4 a", None), Err("bad rank"));
        assert_eq!(check_row(b"0 n1 4 \xff", None), Err("not UTF-8"));
    }

    /// The launcher of a job as the `launcher` request gives it, and the client's checks.
    #[test]
    fn launcher_lines() {
        let mut l = libi::job::LauncherSpec::new(libi::job::LauncherKind::Ssh, "/x/libi-nla");
        l.exec = Some("/opt/my ssh".into());
        l.extra_args = vec!["-p".into(), "2222".into(), "-o\x1b".into()];
        l.nla_by_name = true;
        let text = launcher_text(&l);
        assert_eq!(
            text,
            "kind ssh\nexec /opt/my ssh\nextra -p\nextra 2222\nextra -o\\x1b\nhybrid-hosts\n"
        );
        for (i, line) in text.lines().enumerate() {
            assert_eq!(check_launcher_line(line.as_bytes(), i == 0), Ok(()), "{line}");
        }
        assert!(check_launcher_line(b"kind telnet", true).is_err());
        assert!(check_launcher_line(b"exec /x", true).is_err());
        assert!(check_launcher_line(b"kind ssh", false).is_err());
        assert!(check_launcher_line(b"extra \x1b[2J", false).is_err());
        assert!(check_launcher_line(b"extra ", false).is_err());
    }

    /// The listening sockets of a /proc/net/unix table, abstract names with their `@`.
    #[test]
    fn listening_sockets_of_the_table() {
        let t = "Num       RefCount Protocol Flags    Type St Inode Path\n\
                 0000000000000000: 00000002 00000000 00010000 0001 01 5001 @libi-mpiexec.7.ab\n\
                 0000000000000000: 00000002 00000000 00000000 0001 03 5002 @libi-mpiexec.7.cd\n\
                 0000000000000000: 00000002 00000000 00010000 0001 01 5003\n\
                 0000000000000000: 00000002 00000000 00010000 0001 01 5004 /run/x.sock\n";
        let v: Vec<(u64, &str)> = listening_names(t).collect();
        assert_eq!(v, [(5001, "@libi-mpiexec.7.ab"), (5004, "/run/x.sock")]);
    }
}
