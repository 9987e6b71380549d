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
use std::time::Instant;

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
    /// An output file (`-outfile-pattern`, `-errfile-pattern`) could not be opened or
    /// written (the message says which and why); what goes to it is dropped from now on.
    FileFailed(String),
}

enum Item {
    /// Rank output (labelled already, if it is to be), to the stream or to `file`.
    Output { data: Bytes, ack: Option<Ack>, file: Option<Arc<OutFile>> },
    /// A line of our own.
    Line(Bytes),
}

impl Item {
    /// The bytes, of an item for our stdout or stderr (not for an output file).
    fn stream_bytes(&mut self) -> Option<&mut Bytes> {
        match self {
            Item::Output { data, file: None, .. } | Item::Line(data) => Some(data),
            Item::Output { file: Some(_), .. } => None,
        }
    }
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
/// support it; regular files and terminals may not, EOPNOTSUPP): several pieces, in order, in
/// one system call.
fn write_nowait_v(fd: i32, bufs: &[std::io::IoSlice<'_>]) -> Result<usize, nix::errno::Errno> {
    let n = bufs.len().min(IOV_MAX) as libc::c_int;
    loop {
        // SAFETY: `IoSlice` is ABI-compatible with `iovec` (std guarantees it on Unix); the
        // `n` slices and what they point to are alive for the call; offset -1 = the current
        // position.
        let r = unsafe { libc::pwritev2(fd, bufs.as_ptr().cast(), n, -1, libc::RWF_NOWAIT) };
        if r >= 0 {
            return Ok(r as usize);
        }
        match nix::errno::Errno::last() {
            nix::errno::Errno::EINTR => continue,
            e => return Err(e),
        }
    }
}

/// Pieces written in one system call at most.
const IOV_MAX: usize = 64;

/// Drop the first `n` bytes of `pieces` (written).
fn advance(pieces: &mut Vec<Bytes>, mut n: usize) {
    let mut done = 0;
    for p in pieces.iter_mut() {
        if n < p.len() {
            p.advance(n);
            break;
        }
        n -= p.len();
        done += 1;
    }
    pieces.drain(..done);
}

/// The pieces, as the slices of one vectored write (at most [`IOV_MAX`]).
fn slices(pieces: &[Bytes]) -> Vec<std::io::IoSlice<'_>> {
    pieces.iter().take(IOV_MAX).map(|p| std::io::IoSlice::new(p)).collect()
}

/// Whether the regular file `fd` is on a local filesystem (ext4, xfs, btrfs, tmpfs, ...).
/// Such a file is written straight from the event loop, as Hydra does: the write goes to the
/// page cache and waits at worst for the kernel's dirty-page throttling, which is bounded,
/// and it spares a thread and a wake-up of it per burst of output. (`RWF_NOWAIT`, which lets
/// pipes be written without waiting, is refused for buffered files: EOPNOTSUPP.) A file on
/// a network or FUSE filesystem, whose server may not answer for minutes, keeps the thread.
fn on_local_fs(fd: &OwnedFd) -> bool {
    use nix::sys::statfs::{self, FsType};
    const LOCAL: [libc::__fsword_t; 7] = [
        0xEF53,      // ext2, ext3, ext4
        0x5846_5342, // xfs
        0x9123_683E, // btrfs
        0x0102_1994, // tmpfs
        0xF2F5_2010, // f2fs
        0x2FC1_2FC1, // zfs
        0x858_458F6, // ramfs
    ];
    statfs::fstatfs(fd).is_ok_and(|f| {
        let t: FsType = f.filesystem_type();
        LOCAL.contains(&t.0)
    })
}

/// Whether the FIFO `fd` is a pipe made by pipe(2) (on the kernel's pipefs), not a named
/// FIFO opened from a filesystem.
fn is_anonymous_pipe(fd: &OwnedFd) -> bool {
    const PIPEFS_MAGIC: libc::__fsword_t = 0x5049_5045;
    nix::sys::statfs::fstatfs(fd).is_ok_and(|f| f.filesystem_type().0 == PIPEFS_MAGIC)
}

/// Write all of `data` to a regular file (see [`on_local_fs`]).
fn write_file(fd: i32, mut data: &[u8]) -> Result<(), nix::errno::Errno> {
    // SAFETY: `fd` is our stdout or stderr, open for the process's life.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    while !data.is_empty() {
        match nix::unistd::write(fd, data) {
            Ok(0) => return Err(nix::errno::Errno::ENOSPC),
            Ok(n) => data = &data[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One of our output streams, written by its own thread.
struct Writer {
    stream: Stream,
    /// Our stdout or stderr (fd 1 or 2), for writes that cannot block.
    fd: i32,
    /// Writes that cannot block are possible on it.
    direct: bool,
    /// It is a regular file on a local filesystem: written straight from the event loop
    /// (see [`on_local_fs`]).
    local_file: bool,
    tx: Option<Tx>,
    state: Arc<WriterState>,
    /// Items not handed to the writer yet (see [`Output::commit`]).
    pending: Vec<Item>,
    /// The queue, for writers elsewhere in the process ([`Output::stderr_sink`]); emptied
    /// when the output closes, so that the thread ends.
    shared: Arc<Mutex<Option<Tx>>>,
}

/// The queue of a stream's writer: a task of the event loop, or a thread (started when
/// the first thing is queued: a job that writes nothing on a stream starts no thread).
#[derive(Clone)]
enum Tx {
    Task(tokio::sync::mpsc::UnboundedSender<Vec<Item>>),
    Thread(mpsc::Sender<Vec<Item>>, Arc<Mutex<LazyThread>>),
}

type Call = Box<dyn FnOnce() + Send>;

/// A writer thread not started yet (see [`Tx::Thread`]). Dropped unstarted (the output
/// closed with nothing written on the stream), it reports the writer finished, as the
/// thread would have.
struct LazyThread {
    start: Option<Call>,
    unstarted: Option<Call>,
}

impl Drop for LazyThread {
    fn drop(&mut self) {
        if self.start.is_some() {
            if let Some(finished) = self.unstarted.take() {
                finished();
            }
        }
    }
}

impl Tx {
    /// False when the writer is gone.
    fn send(&self, items: Vec<Item>) -> bool {
        match self {
            Tx::Task(t) => t.send(items).is_ok(),
            Tx::Thread(t, lazy) => {
                if let Some(start) = lazy.lock().ok().and_then(|mut l| l.start.take()) {
                    start();
                }
                t.send(items).is_ok()
            }
        }
    }
}

/// Pieces of rank output for output files (`-outfile-pattern`), in the queue's order.
type FileWrites = Vec<(Arc<OutFile>, Bytes)>;

/// Write `pieces` to their files. It may block (a FIFO waits for its reader, a network file
/// system for its server): never on the event loop's thread.
fn write_files(pieces: FileWrites) {
    for (f, data) in pieces {
        f.write(&data);
    }
}

/// Take the next batch from `queue`: everything up to [`BATCH_MAX`] bytes or [`IOV_MAX`]
/// pieces, as the pieces to write in order (not copied: one vectored write); what goes to
/// output files into `files`. Returns the acknowledgements and the number of items taken.
fn next_batch(
    queue: &mut std::collections::VecDeque<Item>,
    pieces: &mut Vec<Bytes>,
    files: &mut FileWrites,
) -> (Vec<Ack>, u64) {
    let mut acks = Vec::new();
    let mut items = 0u64;
    let mut bytes = 0;
    while bytes < BATCH_MAX && pieces.len() < IOV_MAX {
        let Some(item) = queue.pop_front() else { break };
        items += 1;
        match item {
            Item::Output { data, ack, file: Some(f) } => {
                // An output file (`-outfile-pattern`): written by the caller, in the
                // queue's order.
                files.push((f, data));
                acks.extend(ack);
            }
            Item::Output { data, ack, file: None } => {
                bytes += data.len();
                pieces.push(data);
                acks.extend(ack);
            }
            Item::Line(l) => {
                bytes += l.len();
                pieces.push(l);
            }
        }
    }
    pieces.retain(|p| !p.is_empty());
    (acks, items)
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
    let mut pieces = Vec::new();
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
        let mut files = Vec::new();
        let (acks, items) = next_batch(&mut queue, &mut pieces, &mut files);
        if !files.is_empty() {
            // Waited for like a write to the stream: the next batch (and its files) after.
            let _ = tokio::task::spawn_blocking(move || write_files(files)).await;
        }
        while !broken && !pieces.is_empty() {
            match write_nowait_v(afd.get_ref().as_raw_fd(), &slices(&pieces)) {
                Ok(n) => advance(&mut pieces, n),
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
        pieces.clear();
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
    let mut pieces = Vec::new();
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
        let mut files = Vec::new();
        let (acks, items) = next_batch(&mut queue, &mut pieces, &mut files);
        write_files(files);
        if let Some(f) = file.as_mut() {
            if let Err(e) = write_all_v(f, &mut pieces) {
                // Nobody reads this stream any more: say so once, then drop the rest.
                st.broken.store(true, Ordering::Relaxed);
                file = None;
                report(WriterEvent::Broken(stream, e));
            }
        }
        pieces.clear();
        st.progress_ms.store(epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        st.queued.fetch_sub(items, Ordering::Relaxed);
        if !acks.is_empty() {
            report(WriterEvent::Written(acks));
        }
    }
    report(WriterEvent::Finished);
}

/// Write all of `pieces`, in order, with vectored writes that may block.
fn write_all_v(f: &mut std::fs::File, pieces: &mut Vec<Bytes>) -> std::io::Result<()> {
    while !pieces.is_empty() {
        match f.write_vectored(&slices(pieces)) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => advance(pieces, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[derive(Default)]
struct WriterState {
    /// Items queued and not written yet.
    queued: AtomicU64,
    broken: AtomicBool,
    /// Milliseconds since `epoch` of the last completed write, or of the moment output
    /// began to wait on a stream that had nothing to write ([`WriterState::enqueue`]).
    progress_ms: AtomicU64,
}

impl WriterState {
    /// `n` items were queued at `now_ms`. A stream that had nothing left to write has been
    /// waiting for its reader only from now: its quiet time before (a job that ran a while
    /// without printing) must not make it look stuck, or the root core would stop waiting
    /// for it and the line just queued (say, why the job failed) would be lost.
    fn enqueue(&self, n: u64, now_ms: u64) {
        if self.queued.fetch_add(n, Ordering::Relaxed) == 0 {
            self.progress_ms.fetch_max(now_ms, Ordering::Relaxed);
        }
    }

    /// What the root core sees of the stream at `now_ms`.
    fn state_at(&self, now_ms: u64) -> libi_node::proto::root::StreamState {
        let idle = now_ms.saturating_sub(self.progress_ms.load(Ordering::Relaxed));
        libi_node::proto::root::StreamState {
            broken: self.broken.load(Ordering::Relaxed),
            queued: self.queued.load(Ordering::Relaxed) > 0,
            idle: idle as f64 / 1e3,
        }
    }
}

/// One piece of an output pattern (`-prepend-pattern`, `-outfile-pattern`,
/// `-errfile-pattern`): Hydra's fields `%r` rank, `%g` process group (0 for the job, N for
/// the Nth spawn), `%h` host, `%p` the node's index among the job's nodes (Hydra's proxy id),
/// `%t` whole seconds since the job started (Hydra's timestamp), `%%` a percent sign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Rank,
    Group,
    Host,
    Node,
    Seconds,
}

/// A parsed output pattern.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pattern(pub Vec<Piece>);

impl std::str::FromStr for Pattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        let mut text = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                text.push(c);
                continue;
            }
            let piece = match chars.next() {
                Some('%') => {
                    text.push('%');
                    continue;
                }
                Some('r') => Piece::Rank,
                Some('g') => Piece::Group,
                Some('h') => Piece::Host,
                Some('p') => Piece::Node,
                Some('t') => Piece::Seconds,
                Some(o) => {
                    return Err(format!(
                        "unknown field '%{o}' in pattern '{s}' (known: %r %g %h %p %t %%)"
                    ))
                }
                None => return Err(format!("pattern '{s}' ends in a lone '%'")),
            };
            if !text.is_empty() {
                out.push(Piece::Text(std::mem::take(&mut text)));
            }
            out.push(piece);
        }
        if !text.is_empty() {
            out.push(Piece::Text(text));
        }
        Ok(Pattern(out))
    }
}

impl Pattern {
    /// The pattern for rank `rank` of group `group` on `host` (node index `node`), `secs`
    /// whole seconds into the job.
    pub fn expand(&self, group: usize, rank: u32, host: &str, node: u32, secs: u64) -> String {
        let mut s = String::new();
        for p in &self.0 {
            match p {
                Piece::Text(t) => s.push_str(t),
                Piece::Rank => s.push_str(&rank.to_string()),
                Piece::Group => s.push_str(&group.to_string()),
                Piece::Host => s.push_str(host),
                Piece::Node => s.push_str(&node.to_string()),
                Piece::Seconds => s.push_str(&secs.to_string()),
            }
        }
        s
    }
}

/// `data` with `prefix` at the start of each line (not of the first one when it `continues`
/// a line begun before), after a newline when it comes `apart` from another's unfinished
/// line. Built in one allocation of the size it takes, the lines found with SIMD
/// (`memchr`); a short prefix and a short line are each copied as one fixed [`COPY_W`]-byte
/// move (the output has that much slack, cut off at the end): rank output is mostly short
/// lines, which per-line copies of their exact length cost several times more.
fn labelled(data: &[u8], prefix: &[u8], continues: bool, apart: bool) -> Vec<u8> {
    const W: usize = COPY_W;
    let starts = memchr::memchr_iter(b'\n', data).count() + 1;
    let mut out = vec![0u8; 1 + data.len() + starts * prefix.len() + 2 * W];
    let mut o = 0;
    if apart {
        out[0] = b'\n';
        o = 1;
    }
    let mut padded = [0u8; W];
    let short = prefix.len() <= W;
    if short {
        padded[..prefix.len()].copy_from_slice(prefix);
    }
    let (n, mut start) = (data.len(), 0);
    for end in memchr::memchr_iter(b'\n', data).map(|i| i + 1).chain([n]) {
        if start == end {
            break;
        }
        if start > 0 || !continues {
            if short {
                out[o..o + W].copy_from_slice(&padded);
            } else {
                out[o..o + prefix.len()].copy_from_slice(prefix);
            }
            o += prefix.len();
        }
        let len = end - start;
        if len <= W && start + W <= n {
            out[o..o + W].copy_from_slice(&data[start..start + W]);
        } else {
            out[o..o + len].copy_from_slice(&data[start..end]);
        }
        o += len;
        start = end;
    }
    out.truncate(o);
    out
}

/// Bytes of the fixed-size moves of [`labelled`].
const COPY_W: usize = 16;

/// How rank output is presented: a prefix on each line (`-l`: `[rank] `, or
/// `-prepend-pattern`), and files instead of our stdout/stderr (`-outfile-pattern`,
/// `-errfile-pattern`).
#[derive(Debug, Clone, Default)]
pub struct RankFormat {
    /// `-l`: `[rank] ` (`[group:rank] ` for spawned ranks).
    pub label: bool,
    pub prepend: Option<Pattern>,
    pub outfile: Option<Pattern>,
    pub errfile: Option<Pattern>,
}

/// A file rank output goes to (shared by the ranks whose pattern names the same path).
/// Its first failure (to open it, or a write) is reported as [`WriterEvent::FileFailed`];
/// what is written to it after that is dropped.
pub struct OutFile {
    path: String,
    /// Opened by the stream's thread at the first write, not by the event loop: opening a
    /// FIFO waits for its reader, as a shell's `>` does, and the event loop (timeouts,
    /// signals, the other ranks' output) must not wait with it.
    file: std::sync::OnceLock<Option<std::fs::File>>,
    failed: AtomicBool,
    report: Arc<dyn Fn(WriterEvent) + Send + Sync>,
}

impl OutFile {
    fn write(&self, data: &[u8]) {
        let Some(mut f) = self.file.get_or_init(|| self.open()).as_ref() else { return };
        if self.failed.load(Ordering::Relaxed) {
            return;
        }
        if let Err(e) = f.write_all(data) {
            self.failed(format!("cannot write output file '{}': {e}", self.path));
        }
    }

    /// Open the file ([`open_output_file`]); failing, it is reported.
    fn open(&self) -> Option<std::fs::File> {
        match open_output_file(std::path::Path::new(&self.path)) {
            Ok(f) => Some(f),
            Err(e) => {
                self.failed(format!("cannot open output file '{}': {e}", self.path));
                None
            }
        }
    }

    fn failed(&self, message: String) {
        if !self.failed.swap(true, Ordering::Relaxed) {
            (self.report)(WriterEvent::FileFailed(message));
        }
    }
}

/// Open an output file safely in a directory other users may write (`/tmp`): a new file
/// is created exclusively, mode 0600; an existing one is looked at without following a
/// symbolic link, and taken (then truncated) only if it is ours (a character device of
/// root's, such as `/dev/null`, too) and, if a regular file, has no other hard link:
/// another user's file or FIFO, or a link planted to one of ours, is refused. A FIFO of
/// ours is opened as a shell's `>` would (waiting for its reader).
pub fn open_output_file(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path);
    match created {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        r => return r,
    }
    // What is there, examined without opening it (a FIFO would wait) or following a link.
    let at = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let m = at.metadata()?;
    let me = nix::unistd::geteuid().as_raw();
    let refuse = |why: String| Err(std::io::Error::other(why));
    if m.file_type().is_symlink() {
        return refuse("it is a symbolic link: not followed".into());
    }
    let root_device = m.uid() == 0 && m.file_type().is_char_device();
    if m.uid() != me && !root_device {
        return refuse(format!("it belongs to uid {}, not to us: not written", m.uid()));
    }
    if m.file_type().is_file() && m.nlink() > 1 {
        return refuse(format!("it has {} hard links: not written", m.nlink()));
    }
    // That very file, opened for writing through the descriptor that examined it.
    let fd = std::os::fd::AsRawFd::as_raw_fd(&at);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{fd}"))?;
    if m.file_type().is_file() {
        f.set_len(0)?;
    }
    Ok(f)
}

/// Our stdout and stderr.
pub struct Output {
    format: RankFormat,
    out: Writer,
    err: Writer,
    epoch: Instant,
    report: Arc<dyn Fn(WriterEvent) + Send + Sync>,
    /// Host and node index of each rank, by group (for the patterns).
    place: std::collections::HashMap<(usize, u32), (Arc<str>, u32)>,
    /// Output files by absolute path, and the file of each (group, rank, is stderr).
    files: std::collections::HashMap<String, Arc<OutFile>>,
    file_of: std::collections::HashMap<(usize, u32, bool), Arc<OutFile>>,
    /// Destinations whose last byte written is not a newline, and whose line that is
    /// (group, rank, stream).
    unfinished: std::collections::HashMap<Dest, (usize, u32, Stream)>,
}

/// Where rank output goes: our stdout or stderr, or an output file (by its address: the
/// files live as long as the [`Output`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Dest {
    Stream(Stream),
    File(usize),
}

/// An output file, opened when first written (see [`OutFile::file`]).
fn out_file(path: &str, report: Arc<dyn Fn(WriterEvent) + Send + Sync>) -> OutFile {
    let file = std::sync::OnceLock::new();
    OutFile { path: path.to_string(), file, failed: AtomicBool::new(false), report }
}

impl Output {
    /// Start the two writer threads; `report` gets their events (it must not block).
    pub fn new(format: RankFormat, report: impl Fn(WriterEvent) + Send + Sync + 'static) -> Self {
        let epoch = Instant::now();
        let report: Arc<dyn Fn(WriterEvent) + Send + Sync> = Arc::new(report);
        let out = Writer::start(Stream::Stdout, epoch, report.clone());
        let err = Writer::start(Stream::Stderr, epoch, report.clone());
        Output {
            format,
            out,
            err,
            epoch,
            report,
            place: Default::default(),
            files: Default::default(),
            file_of: Default::default(),
            unfinished: Default::default(),
        }
    }

    /// Group `group`'s ranks run as `root`'s tree places them (for `%h` and `%p`).
    pub fn place(&mut self, group: usize, root: &libi::job::NodePlan) {
        if self.format.prepend.is_none()
            && self.format.outfile.is_none()
            && self.format.errfile.is_none()
        {
            return;
        }
        for p in root.nodes().into_iter().filter(|p| p.node != 0) {
            let host: Arc<str> = p.host.as_str().into();
            for s in &p.ranks {
                self.place.insert((group, s.rank), (host.clone(), p.node - 1));
            }
        }
    }

    fn expand(&self, pat: &Pattern, group: usize, rank: u32) -> String {
        let (host, node) = match self.place.get(&(group, rank)) {
            Some((h, n)) => (&**h, *n),
            None => ("", 0),
        };
        pat.expand(group, rank, host, node, self.epoch.elapsed().as_secs())
    }

    /// The file `rank`'s `stream` goes to, if a pattern says so.
    fn file_for(&mut self, group: usize, rank: u32, stream: Stream) -> Option<Arc<OutFile>> {
        let pat = match stream {
            Stream::Stdout => self.format.outfile.as_ref()?,
            Stream::Stderr => self.format.errfile.as_ref()?,
        };
        if let Some(f) = self.file_of.get(&(group, rank, stream == Stream::Stderr)) {
            return Some(f.clone());
        }
        let path = self.expand(pat, group, rank);
        let report = &self.report;
        // One file, one handle, however the patterns spell it (`f`, `./f`, `$PWD/f`): two
        // handles would each truncate it and write over each other.
        let key = std::path::absolute(&path)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| path.clone());
        let f = self.files.entry(key).or_insert_with(|| Arc::new(out_file(&path, report.clone())));
        let f = f.clone();
        self.file_of.insert((group, rank, stream == Stream::Stderr), f.clone());
        Some(f)
    }

    /// Output of `rank` of process group `group` (labelled `[rank] `, or `[group:rank] ` for
    /// spawned ranks): whole lines, or the pieces of one (a line over the agent's cap, a
    /// last line without a newline). Passed on byte for byte, except that a line left
    /// unfinished on a destination (our stdout or stderr, or a file) is ended there when
    /// another rank's output (or a line of our own) comes next, so that lines never mix;
    /// a prefix goes on each line a rank starts, not on the rest of one it continues.
    /// A local file is written at once. A pipe or socket is written at the next
    /// [`Output::commit`] (when the event loop has no more events at hand: whatever came
    /// meanwhile, in one vectored write) as far as it takes it without waiting, the rest by
    /// the stream's writer; `ack` is reported once it is written.
    pub fn rank_output(
        &mut self,
        group: usize,
        rank: u32,
        stream: Stream,
        data: Bytes,
        ack: Option<Ack>,
    ) -> Wrote {
        let prefix = if let Some(pat) = &self.format.prepend {
            Some(self.expand(pat, group, rank))
        } else if self.format.label {
            Some(if group == 0 { format!("[{rank}] ") } else { format!("[{group}:{rank}] ") })
        } else {
            None
        };
        let file = self.file_for(group, rank, stream);
        let dest = match &file {
            Some(f) => Dest::File(Arc::as_ptr(f) as usize),
            None => Dest::Stream(stream),
        };
        let writer = (group, rank, stream);
        let last = self.unfinished.get(&dest).copied();
        let (continues, apart) = (last == Some(writer), last.is_some_and(|w| w != writer));
        if data.last().is_some_and(|&c| c != b'\n') {
            self.unfinished.insert(dest, writer);
        } else if !data.is_empty() {
            self.unfinished.remove(&dest);
        }
        let data = if prefix.is_some() || apart {
            let p = prefix.unwrap_or_default();
            Bytes::from(labelled(&data, p.as_bytes(), continues, apart))
        } else {
            data
        };
        let epoch = self.epoch;
        let w = match stream {
            Stream::Stdout => &mut self.out,
            Stream::Stderr => &mut self.err,
        };
        if file.is_some() {
            // Files are written by the stream's thread (bounded like the stream's output:
            // acknowledged once written).
            w.pending.push(Item::Output { data, ack, file });
            return Wrote::Queued;
        }
        if w.state.broken.load(Ordering::Relaxed) {
            return Wrote::Now;
        }
        let idle = w.pending.is_empty() && w.state.queued.load(Ordering::Relaxed) == 0;
        if w.local_file && idle {
            return match write_file(w.fd, &data) {
                Ok(()) => {
                    w.state
                        .progress_ms
                        .store(epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
                    Wrote::Now
                }
                Err(e) => {
                    w.state.broken.store(true, Ordering::Relaxed);
                    Wrote::Broken(e.into())
                }
            };
        }
        w.pending.push(Item::Output { data, ack, file: None });
        if w.pending.len() >= IOV_MAX {
            // Written now, not when the event loop runs out of events.
            w.commit(epoch, &self.report);
        }
        Wrote::Queued
    }

    /// One line of our own on stderr (`libi-mpiexec: ` in front, newline added), after the
    /// rank output queued before it; once the writers are closed, straight to stderr.
    pub fn line(&mut self, text: &str) {
        // A rank's unfinished line on stderr is ended first.
        let apart = self.unfinished.remove(&Dest::Stream(Stream::Stderr)).is_some();
        let line = format!("{}libi-mpiexec: {text}\n", if apart { "\n" } else { "" }).into_bytes();
        if self.err.tx.is_none() {
            // The writers are closed (we are exiting): straight to stderr.
            let _ = std::io::stderr().write_all(&line);
            return;
        }
        self.err.pending.push(Item::Line(line.into()));
        self.commit();
    }

    /// A sink for diagnostics written from anywhere in the process (tracing, launcher
    /// stderr): straight to the stderr thread's queue, never blocking.
    pub fn stderr_sink(&self) -> impl Fn(&[u8]) + Send + Sync + 'static {
        let shared = self.err.shared.clone();
        let state = self.err.state.clone();
        let epoch = self.epoch;
        move |bytes: &[u8]| {
            let Ok(tx) = shared.lock() else { return };
            let Some(tx) = tx.as_ref() else {
                // The writers are closed (we are exiting): straight to stderr.
                let _ = std::io::stderr().write_all(bytes);
                return;
            };
            state.enqueue(1, epoch.elapsed().as_millis() as u64);
            if !tx.send(vec![Item::Line(Bytes::copy_from_slice(bytes))]) {
                state.queued.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Write what was queued, as far as each stream takes it without waiting, and hand the
    /// rest to the writers (the event loop calls this when it has no more events at hand:
    /// one write, one wake-up of each writer per burst, not per message).
    pub fn commit(&mut self) {
        self.out.commit(self.epoch, &self.report);
        self.err.commit(self.epoch, &self.report);
    }

    fn writer(&self, stream: Stream) -> &Writer {
        match stream {
            Stream::Stdout => &self.out,
            Stream::Stderr => &self.err,
        }
    }

    /// What the root core needs to know of a stream to decide whether it is being read
    /// (see [`libi_node::proto::root::StreamState::stuck`]).
    pub fn state(&self, stream: Stream) -> libi_node::proto::root::StreamState {
        self.writer(stream).state.state_at(self.epoch.elapsed().as_millis() as u64)
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
        let name = stream.name();
        let report = report.clone();
        // A pipe or a socket is written by a task of the event loop's own, waiting for room
        // with epoll between writes that cannot block; anything else (a file, a terminal)
        // by a thread of its own that may block.
        let kind = fd
            .as_ref()
            .and_then(|fd| nix::sys::stat::fstat(fd.as_raw_fd()).ok())
            .map(|st| st.st_mode & libc::S_IFMT);
        // A pipe only when it is a pipe(2), not a named FIFO (`> fifo`): the kernel refuses
        // RWF_NOWAIT on an opened FIFO (EOPNOTSUPP), which is then written by the thread.
        let nowait = match kind {
            Some(libc::S_IFSOCK) => true,
            Some(libc::S_IFIFO) => fd.as_ref().is_some_and(is_anonymous_pipe),
            _ => false,
        };
        let in_runtime = tokio::runtime::Handle::try_current().is_ok();
        let local_file =
            in_runtime && kind == Some(libc::S_IFREG) && fd.as_ref().is_some_and(on_local_fs);
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
                let finished = report.clone();
                // A thread that cannot start: the stream is reported broken and its writer
                // finished (every later send fails: `rx` is gone).
                let start: Call = Box::new(move || {
                    let failed = report.clone();
                    if let Err(e) = std::thread::Builder::new()
                        .name(name.into())
                        .spawn(move || write_thread(stream, fd, rx, st, epoch, report))
                    {
                        failed(WriterEvent::Broken(stream, e));
                        failed(WriterEvent::Finished);
                    }
                });
                let unstarted: Call = Box::new(move || finished(WriterEvent::Finished));
                let lazy = LazyThread { start: Some(start), unstarted: Some(unstarted) };
                Some(Tx::Thread(tx, Arc::new(Mutex::new(lazy))))
            }
        };
        let fd = match stream {
            Stream::Stdout => libc::STDOUT_FILENO,
            Stream::Stderr => libc::STDERR_FILENO,
        };
        let shared = Arc::new(Mutex::new(tx.clone()));
        Writer { stream, fd, direct: true, local_file, tx, state, pending: Vec::new(), shared }
    }

    /// Write what the stream takes now of what is pending (nothing queued before it), then
    /// hand the rest to the stream's writer. What is written is reported as written.
    fn commit(&mut self, epoch: Instant, report: &Arc<dyn Fn(WriterEvent) + Send + Sync>) {
        if self.pending.is_empty() {
            return;
        }
        if self.direct && self.state.queued.load(Ordering::Relaxed) == 0 {
            self.write_now(epoch, report);
        }
        if self.pending.is_empty() {
            return;
        }
        let now_ms = epoch.elapsed().as_millis() as u64;
        let items = std::mem::take(&mut self.pending);
        if let Some(tx) = &self.tx {
            let n = items.len() as u64;
            self.state.enqueue(n, now_ms);
            if !tx.send(items) {
                self.state.queued.fetch_sub(n, Ordering::Relaxed);
            }
        }
    }
}

impl Writer {
    /// Write the pending items for the stream, in order, as far as it takes them without
    /// waiting: vectored writes, as many items in each as there are (up to [`IOV_MAX`]),
    /// until one is not taken whole or an item for an output file comes.
    fn write_now(&mut self, epoch: Instant, report: &Arc<dyn Fn(WriterEvent) + Send + Sync>) {
        let mut done = 0;
        let mut error = None;
        loop {
            let iov: Vec<std::io::IoSlice<'_>> = (self.pending[done..].iter_mut())
                .map_while(|i| i.stream_bytes().map(|b| std::io::IoSlice::new(b)))
                .take(IOV_MAX)
                .collect();
            let (len, count) = (iov.iter().map(|s| s.len()).sum::<usize>(), iov.len());
            if count == 0 {
                break;
            }
            let mut n = match write_nowait_v(self.fd, &iov) {
                Ok(n) => n,
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(nix::errno::Errno::EOPNOTSUPP | nix::errno::Errno::EINVAL) => {
                    // A regular file, a terminal …: always through the thread.
                    self.direct = false;
                    break;
                }
                Err(e) => {
                    error = Some(e);
                    break;
                }
            };
            let whole = n == len;
            while let Some(b) = self.pending.get_mut(done).and_then(Item::stream_bytes) {
                if n < b.len() {
                    b.advance(n);
                    break;
                }
                n -= b.len();
                done += 1;
            }
            if !whole || count < IOV_MAX {
                break;
            }
        }
        let mut acks: Vec<Ack> = (self.pending.drain(..done))
            .filter_map(|i| match i {
                Item::Output { ack, .. } => ack,
                Item::Line(_) => None,
            })
            .collect();
        if let Some(e) = error {
            // Nobody reads this stream any more: said once, the rest dropped (acknowledged).
            self.state.broken.store(true, Ordering::Relaxed);
            report(WriterEvent::Broken(self.stream, e.into()));
            acks.extend(self.pending.drain(..).filter_map(|i| match i {
                Item::Output { ack, file: None, .. } => ack,
                _ => None,
            }));
        }
        if done > 0 {
            self.state.progress_ms.store(epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
        if !acks.is_empty() {
            report(WriterEvent::Written(acks));
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
    // `/dev/null` (a job started with `< /dev/null`, as scripts and batch systems do): EOF
    // at once, and no thread to start for it.
    let null = |st: nix::sys::stat::FileStat| {
        st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == libc::makedev(1, 3)
    };
    if nix::sys::stat::fstat(libc::STDIN_FILENO).is_ok_and(null) {
        send(Vec::new());
        return;
    }
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

#[cfg(test)]
mod tests {
    use super::WriterState;

    /// A prefix on every line begun, none on the rest of a line continued, a newline first
    /// when the output comes apart from another's unfinished line; the bytes as they are.
    #[test]
    fn labelled_lines() {
        let l = |d: &[u8], c, a| String::from_utf8(super::labelled(d, b"[3] ", c, a)).unwrap();
        assert_eq!(l(b"a\nb\n", false, false), "[3] a\n[3] b\n");
        assert_eq!(l(b"a\nb", false, false), "[3] a\n[3] b");
        assert_eq!(l(b"rest\nnext\n", true, false), "rest\n[3] next\n");
        assert_eq!(l(b"x\n", false, true), "\n[3] x\n");
        assert_eq!(l(b"\n\n", false, false), "[3] \n[3] \n");
        assert_eq!(l(b"", false, true), "\n");
        assert_eq!(l(b"no newline", true, false), "no newline");
        // Against the plain way, for lines and prefixes short and long.
        let data: Vec<u8> = (0..5000u32)
            .map(|i| if (i * 7919) % 23 < 3 { b'\n' } else { b'a' + (i % 26) as u8 })
            .collect();
        for prefix in [&b""[..], b"[1] ", b"[123:4567] ", b"a prefix longer than sixteen: "] {
            for (c, a) in [(false, false), (true, false), (false, true), (true, true)] {
                for cut in [0, 1, 17, 100, 4999, 5000] {
                    let d = &data[..cut];
                    let mut want = Vec::new();
                    if a {
                        want.push(b'\n');
                    }
                    for (i, line) in d.split_inclusive(|&x| x == b'\n').enumerate() {
                        if i > 0 || !c {
                            want.extend_from_slice(prefix);
                        }
                        want.extend_from_slice(line);
                    }
                    assert_eq!(super::labelled(d, prefix, c, a), want, "{prefix:?} {c} {a} {cut}");
                }
            }
        }
    }

    /// A stream that wrote nothing for a long time and then gets a line is not stuck at once:
    /// its wait for the reader starts when the line is queued (the failure line of a job
    /// that ran a while without printing was lost that way). It is stuck once the line has
    /// waited `STALLED_OUTPUT`; a second line queued meanwhile does not restart the clock.
    #[test]
    fn waiting_starts_when_output_is_queued() {
        let wait_ms = (libi_node::proto::root::STALLED_OUTPUT * 1e3) as u64;
        let st = WriterState::default();
        assert!(!st.state_at(10_000).stuck(), "nothing queued");
        st.enqueue(1, 10_000);
        assert!(!st.state_at(10_000).stuck(), "just queued");
        st.enqueue(1, 10_000 + wait_ms / 2);
        assert!(!st.state_at(10_000 + wait_ms - 1).stuck());
        assert!(st.state_at(10_000 + wait_ms).stuck(), "waited the whole stall limit");
    }

    /// Output files: a new one is 0600 whatever the umask allows; one of ours is truncated;
    /// a symbolic link (even to a file of ours) or a second hard link is refused and the
    /// file it leads to is left as it was.
    #[test]
    fn output_files_are_opened_safely() {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("libi-outfile-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("dir");
        let new = d.join("new");
        crate::stdio::open_output_file(&new).expect("new file");
        let mode = std::fs::metadata(&new).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let mine = d.join("mine");
        std::fs::write(&mine, b"old contents").expect("write");
        std::io::Write::write_all(
            &mut crate::stdio::open_output_file(&mine).expect("own file"),
            b"new",
        )
        .expect("write");
        assert_eq!(std::fs::read(&mine).expect("read"), b"new");
        let link = d.join("link");
        std::os::unix::fs::symlink(&mine, &link).expect("symlink");
        let e = crate::stdio::open_output_file(&link).expect_err("a link is not followed");
        assert_eq!(e.to_string(), "it is a symbolic link: not followed");
        let hard = d.join("hard");
        std::fs::hard_link(&mine, &hard).expect("hard link");
        let e = crate::stdio::open_output_file(&hard).expect_err("a second link is refused");
        assert_eq!(e.to_string(), "it has 2 hard links: not written");
        assert_eq!(std::fs::read(&mine).expect("read"), b"new", "left as it was");
        crate::stdio::open_output_file(std::path::Path::new("/dev/null")).expect("/dev/null");
        std::fs::remove_dir_all(&d).expect("clean up");
    }
}
