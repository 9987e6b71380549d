//! The front end's own stdio, kept off its event loop.
//!
//! * Our stdout and stderr are each written by a thread of their own, fed by a queue. The
//!   ranks' output is acknowledged to the NLA that sent it (`OutputAck`) only once written,
//!   so the queue holds at most one output window per tree link: a slow or stopped reader of
//!   our stdout slows the ranks, and the event loop (timeouts, signals, teardown) never waits
//!   for it.
//! * Our stdin is read by a thread that keeps at most `STDIN_WINDOW` bytes in flight towards
//!   rank 0 (the NLA holding it acknowledges what it wrote to the rank's pipe).

use bytes::{Buf, Bytes};
use libi::msg::{Stream, STDIN_WINDOW};
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Bytes written to a stream in one go at most (when that much is queued).
const BATCH_MAX: usize = 1 << 20;

/// Where a written piece of rank output is acknowledged: group `g`'s child `idx`, `bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub g: usize,
    pub idx: usize,
    pub bytes: u64,
}

/// What the writers report to the event loop.
#[derive(Debug)]
pub enum WriterEvent {
    /// Pieces of rank output were written (or dropped, the stream being broken).
    Written(Vec<Ack>),
    /// Writing to the stream failed (EPIPE: nobody reads it any more).
    Broken(Stream, std::io::Error),
    /// The writer wrote everything and ended.
    Finished,
}

enum Item {
    /// Rank output (labelled already, if it is to be).
    Output { data: Bytes, ack: Option<Ack> },
    /// A line of our own.
    Line(Vec<u8>),
}

/// What became of a piece of rank output.
pub enum Wrote {
    /// Written (or dropped: the stream is broken): acknowledge it now.
    Now,
    /// Queued for the stream's thread, which reports it once written.
    Queued,
    /// Writing failed: nobody reads the stream any more.
    Broken(std::io::Error),
}

/// Write what the stream takes without waiting (`RWF_NOWAIT`: pipes and character devices
/// support it; regular files and terminals may not, EOPNOTSUPP).
fn write_nowait(fd: i32, data: &[u8]) -> Result<usize, nix::errno::Errno> {
    let iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    loop {
        // SAFETY: one iovec over `data`, alive for the call; offset -1 = current position.
        let n = unsafe { libc::pwritev2(fd, &iov, 1, -1, libc::RWF_NOWAIT) };
        if n >= 0 {
            return Ok(n as usize);
        }
        match nix::errno::Errno::last() {
            nix::errno::Errno::EINTR => continue,
            e => return Err(e),
        }
    }
}

/// One of our output streams, written by its own thread.
struct Writer {
    /// Our stdout or stderr (fd 1 or 2), for writes that cannot block.
    fd: i32,
    /// Writes that cannot block are possible on it.
    direct: bool,
    tx: Option<Tx>,
    state: Arc<WriterState>,
    /// Items not handed to the writer yet (see [`Output::commit`]).
    pending: Vec<Item>,
    /// The queue, for writers elsewhere in the process ([`Output::stderr_sink`]); emptied
    /// when the output closes, so that the thread ends.
    shared: Arc<Mutex<Option<Tx>>>,
}

/// The queue of a stream's writer: a task of the event loop, or a thread.
#[derive(Clone)]
enum Tx {
    Task(tokio::sync::mpsc::UnboundedSender<Vec<Item>>),
    Thread(mpsc::Sender<Vec<Item>>),
}

impl Tx {
    /// False when the writer is gone.
    fn send(&self, items: Vec<Item>) -> bool {
        match self {
            Tx::Task(t) => t.send(items).is_ok(),
            Tx::Thread(t) => t.send(items).is_ok(),
        }
    }
}

/// Take the next batch from `queue`: everything up to [`BATCH_MAX`] bytes, as one piece of
/// rank output handed on as it is, or copied together into `buf`. Returns the piece (if not
/// in `buf`), the acknowledgements and the number of items taken.
fn next_batch(
    queue: &mut std::collections::VecDeque<Item>,
    buf: &mut Vec<u8>,
) -> (Option<Bytes>, Vec<Ack>, u64) {
    let mut acks = Vec::new();
    let mut items = 0u64;
    let mut single = None;
    buf.clear();
    while let Some(item) = queue.pop_front() {
        items += 1;
        match item {
            Item::Output { data, ack } => {
                if items == 1 {
                    single = Some(data);
                } else {
                    if let Some(d) = single.take() {
                        buf.extend_from_slice(&d);
                    }
                    buf.extend_from_slice(&data);
                }
                acks.extend(ack);
            }
            Item::Line(l) => {
                if let Some(d) = single.take() {
                    buf.extend_from_slice(&d);
                }
                buf.extend_from_slice(&l);
            }
        }
        if buf.len() >= BATCH_MAX {
            break;
        }
    }
    (single, acks, items)
}

/// The writer of a pipe or socket: writes that cannot block, epoll in between.
async fn write_task(
    stream: Stream,
    afd: tokio::io::unix::AsyncFd<OwnedFd>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Vec<Item>>,
    st: Arc<WriterState>,
    epoch: Instant,
    report: Arc<dyn Fn(WriterEvent) + Send + Sync>,
) {
    let mut queue = std::collections::VecDeque::new();
    let mut buf = Vec::new();
    let mut broken = false;
    loop {
        if queue.is_empty() {
            match rx.recv().await {
                Some(first) => queue.extend(first),
                None => break,
            }
        }
        while let Ok(more) = rx.try_recv() {
            queue.extend(more);
        }
        let (single, acks, items) = next_batch(&mut queue, &mut buf);
        let mut bytes: &[u8] = single.as_deref().unwrap_or(&buf);
        while !broken && !bytes.is_empty() {
            match write_nowait(afd.get_ref().as_raw_fd(), bytes) {
                Ok(n) => bytes = &bytes[n..],
                Err(nix::errno::Errno::EAGAIN) => match afd.writable().await {
                    Ok(mut ready) => ready.clear_ready(),
                    Err(e) => {
                        broken = true;
                        st.broken.store(true, Ordering::Relaxed);
                        report(WriterEvent::Broken(stream, e));
                    }
                },
                Err(e) => {
                    // Nobody reads this stream any more: say so once, then drop the rest.
                    broken = true;
                    st.broken.store(true, Ordering::Relaxed);
                    report(WriterEvent::Broken(stream, e.into()));
                }
            }
        }
        st.progress_ms.store(epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        st.queued.fetch_sub(items, Ordering::Relaxed);
        if !acks.is_empty() {
            report(WriterEvent::Written(acks));
        }
    }
    report(WriterEvent::Finished);
}

/// The writer of anything else (a file, a terminal): blocking writes on a thread.
fn write_thread(
    stream: Stream,
    fd: Option<OwnedFd>,
    rx: mpsc::Receiver<Vec<Item>>,
    st: Arc<WriterState>,
    epoch: Instant,
    report: Arc<dyn Fn(WriterEvent) + Send + Sync>,
) {
    let mut file = fd.map(std::fs::File::from);
    let mut buf = Vec::new();
    let mut queue = std::collections::VecDeque::new();
    loop {
        if queue.is_empty() {
            match rx.recv() {
                Ok(first) => queue.extend(first),
                Err(_) => break,
            }
        }
        while let Ok(more) = rx.try_recv() {
            queue.extend(more);
        }
        let (single, acks, items) = next_batch(&mut queue, &mut buf);
        let bytes = single.as_deref().unwrap_or(&buf);
        if let Some(f) = file.as_mut() {
            if let Err(e) = f.write_all(bytes) {
                // Nobody reads this stream any more: say so once, then drop the rest.
                st.broken.store(true, Ordering::Relaxed);
                file = None;
                report(WriterEvent::Broken(stream, e));
            }
        }
        st.progress_ms.store(epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        st.queued.fetch_sub(items, Ordering::Relaxed);
        if !acks.is_empty() {
            report(WriterEvent::Written(acks));
        }
    }
    report(WriterEvent::Finished);
}

#[derive(Default)]
struct WriterState {
    /// Items queued and not written yet.
    queued: AtomicU64,
    broken: AtomicBool,
    /// Milliseconds since `epoch` of the last completed write.
    progress_ms: AtomicU64,
}

/// Our stdout and stderr.
pub struct Output {
    label: bool,
    out: Writer,
    err: Writer,
    epoch: Instant,
}

impl Output {
    /// Start the two writer threads; `report` gets their events (it must not block).
    pub fn new(label: bool, report: impl Fn(WriterEvent) + Send + Sync + 'static) -> Self {
        let epoch = Instant::now();
        let report = Arc::new(report);
        let out = Writer::start(Stream::Stdout, epoch, report.clone());
        let err = Writer::start(Stream::Stderr, epoch, report);
        Output { label, out, err, epoch }
    }

    /// Output of `rank` of process group `group` (labelled `[rank] `, or `[group:rank] ` for
    /// spawned ranks): whole lines. Written at once when that cannot block (nothing queued
    /// before it, and the stream takes it without waiting); otherwise queued for the
    /// stream's thread, which reports `ack` once it is written.
    pub fn rank_output(
        &mut self,
        group: usize,
        rank: u32,
        stream: Stream,
        data: Bytes,
        ack: Option<Ack>,
    ) -> Wrote {
        let data = if self.label {
            let p = if group == 0 { format!("[{rank}] ") } else { format!("[{group}:{rank}] ") };
            let mut b = Vec::with_capacity(data.len() + data.len() / 8 + p.len());
            for line in data.split_inclusive(|&c| c == b'\n') {
                b.extend_from_slice(p.as_bytes());
                b.extend_from_slice(line);
            }
            Bytes::from(b)
        } else {
            data
        };
        let epoch = self.epoch;
        let w = match stream {
            Stream::Stdout => &mut self.out,
            Stream::Stderr => &mut self.err,
        };
        let mut data = data;
        if w.state.broken.load(Ordering::Relaxed) {
            return Wrote::Now;
        }
        if w.direct && w.pending.is_empty() && w.state.queued.load(Ordering::Relaxed) == 0 {
            match write_nowait(w.fd, &data) {
                Ok(n) if n == data.len() => {
                    w.state
                        .progress_ms
                        .store(epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
                    return Wrote::Now;
                }
                Ok(n) => data.advance(n),
                Err(nix::errno::Errno::EAGAIN) => {}
                Err(nix::errno::Errno::EOPNOTSUPP | nix::errno::Errno::EINVAL) => {
                    // A regular file, a terminal …: always through the thread.
                    w.direct = false;
                }
                Err(e) => {
                    w.state.broken.store(true, Ordering::Relaxed);
                    return Wrote::Broken(e.into());
                }
            }
        }
        w.pending.push(Item::Output { data, ack });
        Wrote::Queued
    }

    /// One line of our own on stderr (`libi-mpiexec: ` in front, newline added), after the
    /// rank output queued before it.
    pub fn line(&mut self, text: &str) {
        self.err.pending.push(Item::Line(format!("libi-mpiexec: {text}\n").into_bytes()));
        self.commit();
    }

    /// A sink for diagnostics written from anywhere in the process (tracing, launcher
    /// stderr): straight to the stderr thread's queue, never blocking.
    pub fn stderr_sink(&self) -> impl Fn(&[u8]) + Send + Sync + 'static {
        let shared = self.err.shared.clone();
        let state = self.err.state.clone();
        move |bytes: &[u8]| {
            let Ok(tx) = shared.lock() else { return };
            let Some(tx) = tx.as_ref() else {
                // The writers are closed (we are exiting): straight to stderr.
                let _ = std::io::stderr().write_all(bytes);
                return;
            };
            state.queued.fetch_add(1, Ordering::Relaxed);
            if !tx.send(vec![Item::Line(bytes.to_vec())]) {
                state.queued.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Hand what was queued to the writer threads (the event loop calls this when it has no
    /// more events at hand: one wake-up of each thread per burst, not per message).
    pub fn commit(&mut self) {
        self.out.commit();
        self.err.commit();
    }

    fn writer(&self, stream: Stream) -> &Writer {
        match stream {
            Stream::Stdout => &self.out,
            Stream::Stderr => &self.err,
        }
    }

    /// Writing to the stream failed.
    pub fn broken(&self, stream: Stream) -> bool {
        self.writer(stream).state.broken.load(Ordering::Relaxed)
    }

    /// A stream is broken, or has items waiting and wrote nothing for `stall`.
    pub fn stuck(&self, stream: Stream, stall: Duration) -> bool {
        let w = &self.writer(stream).state;
        if w.broken.load(Ordering::Relaxed) {
            return true;
        }
        let now = self.epoch.elapsed().as_millis() as u64;
        let idle = now.saturating_sub(w.progress_ms.load(Ordering::Relaxed));
        w.queued.load(Ordering::Relaxed) > 0 && idle >= stall.as_millis() as u64
    }

    /// Nothing more will be written: each writer ends once its queue is written.
    pub fn close(&mut self) {
        self.commit();
        for w in [&mut self.out, &mut self.err] {
            w.tx = None;
            if let Ok(mut s) = w.shared.lock() {
                *s = None;
            }
        }
    }
}

impl Writer {
    fn start(
        stream: Stream,
        epoch: Instant,
        report: Arc<dyn Fn(WriterEvent) + Send + Sync>,
    ) -> Writer {
        let state = Arc::new(WriterState::default());
        let st = state.clone();
        let fd: Option<OwnedFd> = match stream {
            Stream::Stdout => std::io::stdout().as_fd().try_clone_to_owned().ok(),
            Stream::Stderr => std::io::stderr().as_fd().try_clone_to_owned().ok(),
        };
        let name = match stream {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        };
        let report = report.clone();
        // A pipe or a socket is written by a task of the event loop's own, waiting for room
        // with epoll between writes that cannot block; anything else (a file, a terminal)
        // by a thread of its own that may block.
        let nowait = fd.as_ref().is_some_and(|fd| {
            nix::sys::stat::fstat(fd.as_raw_fd()).is_ok_and(|st| {
                let t = st.st_mode & libc::S_IFMT;
                t == libc::S_IFIFO || t == libc::S_IFSOCK
            })
        });
        let in_runtime = tokio::runtime::Handle::try_current().is_ok();
        let tx = match (fd, nowait && in_runtime) {
            // SAFETY: `fd` is our own duplicate, moved into the AsyncFd, which closes it.
            (Some(fd), true) => match unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::WRITABLE)
            } {
                Ok(afd) => {
                    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                    tokio::spawn(write_task(stream, afd, rx, st, epoch, report));
                    Some(Tx::Task(tx))
                }
                Err(_) => None,
            },
            (fd, _) => {
                let (tx, rx) = mpsc::channel::<Vec<Item>>();
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn(move || write_thread(stream, fd, rx, st, epoch, report))
                    .ok()
                    .map(|_| Tx::Thread(tx))
            }
        };
        let fd = match stream {
            Stream::Stdout => libc::STDOUT_FILENO,
            Stream::Stderr => libc::STDERR_FILENO,
        };
        let shared = Arc::new(Mutex::new(tx.clone()));
        Writer { fd, direct: true, tx, state, pending: Vec::new(), shared }
    }

    fn commit(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let items = std::mem::take(&mut self.pending);
        if let Some(tx) = &self.tx {
            let n = items.len() as u64;
            self.state.queued.fetch_add(n, Ordering::Relaxed);
            if !tx.send(items) {
                self.state.queued.fetch_sub(n, Ordering::Relaxed);
            }
        }
    }
}

/// How many bytes of stdin may still be sent towards rank 0.
#[derive(Default)]
pub struct StdinCredit {
    avail: Mutex<u64>,
    cv: Condvar,
}

impl StdinCredit {
    pub fn new() -> Arc<Self> {
        Arc::new(StdinCredit { avail: Mutex::new(STDIN_WINDOW), cv: Condvar::new() })
    }

    /// Rank 0's NLA wrote `bytes` to the rank.
    pub fn add(&self, bytes: u64) {
        if let Ok(mut a) = self.avail.lock() {
            *a = (*a + bytes).min(STDIN_WINDOW);
            self.cv.notify_all();
        }
    }

    /// Wait until some credit is there; take up to `max` bytes of it.
    fn take(&self, max: u64) -> u64 {
        let Ok(mut a) = self.avail.lock() else { return 0 };
        while *a == 0 {
            a = match self.cv.wait(a) {
                Ok(a) => a,
                Err(_) => return 0,
            };
        }
        let n = (*a).min(max);
        *a -= n;
        n
    }
}

/// Read our stdin on a plain thread (a blocking read must not hold up the event loop or the
/// runtime's exit), within the credit; `send` gets each piece, then an empty one at EOF.
pub fn spawn_stdin_reader(
    credit: Arc<StdinCredit>,
    send: impl Fn(Vec<u8>) -> bool + Send + 'static,
) {
    let _ = std::thread::Builder::new().name("stdin".into()).spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        let stdin = std::io::stdin();
        loop {
            let want = credit.take(buf.len() as u64) as usize;
            if want == 0 {
                return;
            }
            let n = match std::io::Read::read(&mut stdin.lock(), &mut buf[..want]) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                    credit.add(want as u64);
                    continue;
                }
                Err(_) => 0,
            };
            credit.add((want - n) as u64);
            if !send(buf[..n].to_vec()) || n == 0 {
                return;
            }
        }
    });
}
