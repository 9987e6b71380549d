//! The job's control socket: a tool asks a running `libi-mpiexec` for its job's process
//! table (`libi-mpiexec --proctable PID` is the client). The socket is the abstract Unix
//! socket `libi-mpiexec.PID`; only a process of our own user (or root) gets an answer (its
//! credentials are checked before anything is read), and the client takes an answer only
//! from the process with that pid; a request is one line of at most
//! [`REQUEST_MAX`] bytes, sent within [`REQUEST_WAIT`]; the answer is text, then the
//! connection closes. At most [`PENDING_MAX`] requests wait for the tree at a time.
//!
//! Requests: `proctable` → one line per rank of the job, in rank order:
//! `RANK HOST PID EXECUTABLE` (a pid of 0: the rank is not running), or one line
//! `error: …`.

use libi::msg::ProcNode;
use std::os::linux::net::SocketAddrExt;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;

pub const REQUEST_MAX: usize = 64;
pub const REQUEST_WAIT: Duration = Duration::from_secs(5);
pub const PENDING_MAX: usize = 8;
/// How long the client waits for the answer (the tree answers once every NLA did).
pub const ANSWER_WAIT: Duration = Duration::from_secs(60);

/// The control socket's name for the front end with this pid.
pub fn name(pid: u32) -> String {
    format!("libi-mpiexec.{pid}")
}

/// A request of a connected tool, and where its answer goes.
pub struct Request {
    pub what: String,
    pub answer: oneshot::Sender<String>,
}

/// Listen on our control socket; each valid request is handed to `deliver`. A failure to
/// listen is only logged: the job runs without it.
pub fn listen(deliver: impl Fn(Request) -> bool + Send + Sync + 'static) {
    let bound = std::os::unix::net::SocketAddr::from_abstract_name(name(std::process::id()))
        .and_then(|a| std::os::unix::net::UnixListener::bind_addr(&a))
        .and_then(|l| l.set_nonblocking(true).map(|_| l))
        .and_then(UnixListener::from_std);
    let listener = match bound {
        Ok(l) => l,
        Err(e) => {
            // Somebody else holds the name (it is guessable): the job runs, unreachable.
            tracing::warn!("no control socket @{}: {e}", name(std::process::id()));
            return;
        }
    };
    let deliver = std::sync::Arc::new(deliver);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
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
        text.push_str(&format!("{rank} {host} {pid} {exe}\n"));
    }
    text
}

/// `libi-mpiexec --proctable PID`: print the process table of the job run by the front
/// end with that pid. Returns the exit status. The socket must be held by that very process
/// (its name is guessable: another user may have bound it first), and the answer is copied
/// to stdout as it comes, within [`ANSWER_WAIT`] in all, never gathered in memory.
pub fn query(pid: u32) -> i32 {
    use std::io::{Read, Write};
    let run = || -> Result<(), String> {
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name(pid))
            .map_err(|e| e.to_string())?;
        let mut s = std::os::unix::net::UnixStream::connect_addr(&addr)
            .map_err(|e| format!("no libi-mpiexec job with pid {pid} ({e})"))?;
        let holder = nix::sys::socket::getsockopt(&s, nix::sys::socket::sockopt::PeerCredentials)
            .map_err(|e| format!("cannot tell who holds its control socket: {e}"))?;
        if holder.pid() != pid as i32 {
            return Err(format!(
                "its control socket is held by process {} (uid {}), not by it: refused",
                holder.pid(),
                holder.uid()
            ));
        }
        let deadline = std::time::Instant::now() + ANSWER_WAIT;
        s.write_all(b"proctable\n").map_err(|e| e.to_string())?;
        let no_answer = |e: std::io::Error| format!("no answer from the job with pid {pid}: {e}");
        let mut buf = vec![0u8; 64 * 1024];
        let mut first = true;
        let mut out = std::io::stdout().lock();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(format!("no whole answer from the job with pid {pid} in time"));
            }
            s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
            let n = match s.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(no_answer(e)),
            };
            if n == 0 {
                return if first {
                    Err(format!("the job with pid {pid} gave no answer"))
                } else {
                    Ok(())
                };
            }
            let chunk = &buf[..n];
            if first {
                first = false;
                if let Some(e) = chunk.strip_prefix(b"error: ") {
                    let line = e.split(|&c| c == b'\n').next().unwrap_or(e);
                    return Err(String::from_utf8_lossy(line).into_owned());
                }
            }
            out.write_all(chunk).map_err(|e| format!("cannot write the table: {e}"))?;
        }
    };
    match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("libi-mpiexec: --proctable {pid}: {e}");
            1
        }
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
}
