//! Rank output and input on a node, bounded end to end.
//!
//! * A rank's stdout and stderr are each read by the node's rank reactor
//!   ([`crate::io::rankio`]) into a [`LineBuf`]; whole lines go up the tree as `Output`, slices
//!   of the buffer they were read into (never copied on the node). Each stream may hold at
//!   most [`STREAM_BUDGET`] bytes that have been read from its pipe but not yet written to
//!   the parent's socket: past that the reactor stops reading, the pipe fills, and the rank
//!   blocks in `write` — a slow reader slows the writer, memory stays flat.
//! * Everything a node sends up goes through one queue drained by one writer task, so the
//!   node's event loop never waits for its parent. What is written next, in which frame and
//!   when is decided by [`crate::proto::upqueue`]: order, the output window per tree link
//!   (at most [`libi::msg::OUTPUT_WINDOW`] bytes unacknowledged by the parent, given back by
//!   its `OutputAck`s once it has passed them on: the front end once written to its own
//!   stdout/stderr, so a stopped reader at the top stops every rank's output, one window per
//!   link, and nothing grows), the requests that overtake output waiting for the window,
//!   merging and the linger. The writer writes frames with vectored writes, output as a head
//!   and the slices it came in (`Frames`). A parent acknowledges in batches of a quarter
//!   window, so a child always gets its credit back once it has sent three quarters; no
//!   `Output` message is larger than [`OUTPUT_MSG_MAX`] (half a window), so that a child
//!   waiting for credit to send one is always sent it (a larger one, after a little
//!   unacknowledged output, would wait forever).

use crate::proto::upqueue::{Next, UpQueue};
use bytes::{Buf, Bytes, BytesMut};
use libi::msg::{Msg, MsgCodec, Stream};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub use crate::proto::upqueue::OUTPUT_MSG_MAX;
/// Longest line forwarded in one message; a longer one goes up in pieces of this size (the
/// bytes as they are: the front end keeps them together unless another rank's output comes
/// between).
pub const LINE_CAP: usize = OUTPUT_MSG_MAX;
/// Bytes read from a rank's pipe at a time.
pub const READ_CHUNK: usize = 64 << 10;
/// Bytes one rank stream may hold between its pipe and the parent's socket.
pub const STREAM_BUDGET: usize = LINE_CAP + READ_CHUNK;
/// The rank streams' deadlines (their policy: [`crate::proto::streams`]) and the parent
/// link's linger ([`crate::proto::upqueue`]).
pub use crate::proto::node::limits::{
    OUTPUT_DRAIN, OUTPUT_LINGER, PARTIAL_FLUSH, PARTIAL_MAX_WAIT,
};

/// Splits a byte stream into whole lines, and lines longer than `cap` bytes into pieces of
/// `cap` bytes; the bytes themselves are left as they are (nothing added, nothing dropped),
/// so that the pieces put together are the stream.
///
/// The stream is read straight into the buffer ([`LineBuf::read_from`]), and what goes up is
/// a slice of it, not a copy: reads fill an allocation one after the other, the lines taken
/// from it sharing it, and a new one is taken (the line held moved into it) when little room
/// is left. Its size grows with the reads, from [`MIN_ALLOC`] up to [`READ_CHUNK`] beyond the
/// line held: a stream that writes little holds little. What the slices in flight keep
/// allocated stays within a small multiple of their bytes (an allocation is left once reads
/// have filled most of it), which the stream's budget bounds.
pub struct LineBuf {
    buf: BytesMut,
    cap: usize,
    /// Room the next allocation gets beyond the line held.
    chunk: usize,
}

/// The first allocation of a stream's [`LineBuf`].
pub const MIN_ALLOC: usize = 512;

impl Default for LineBuf {
    fn default() -> Self {
        LineBuf::new(LINE_CAP)
    }
}

impl LineBuf {
    pub fn new(cap: usize) -> Self {
        LineBuf { buf: BytesMut::new(), cap: cap.max(1), chunk: MIN_ALLOC }
    }

    /// Bytes held (the start of a line not ended yet).
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// One read(2) of `fd`, of at most `max` bytes, appended to what is held (take the lines
    /// with [`LineBuf::take`]). Returns the bytes read and the bytes asked for (fewer than
    /// asked: the descriptor had no more).
    pub fn read_from(&mut self, fd: BorrowedFd<'_>, max: usize) -> io::Result<(usize, usize)> {
        if self.buf.capacity() - self.buf.len() < self.chunk / 4 {
            self.buf.reserve(self.chunk);
        }
        let spare = self.buf.spare_capacity_mut();
        let ask = spare.len().min(max);
        // SAFETY: read(2) writes at most `ask` bytes into the spare capacity, which stays
        // allocated and unaliased for the call.
        let n = unsafe { libc::read(fd.as_raw_fd(), spare.as_mut_ptr().cast(), ask) };
        let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
        // SAFETY: read(2) initialised the first `n` bytes of the spare capacity.
        unsafe { self.buf.set_len(self.buf.len() + n) };
        if n >= ask / 2 {
            // The stream has more to say: larger allocations, fewer and larger reads.
            self.chunk = (self.chunk * 2).min(READ_CHUNK);
        }
        Ok((n, ask))
    }

    /// Append `data`; return the whole lines it completes (see [`LineBuf::take`]).
    pub fn push(&mut self, data: &[u8]) -> Option<Bytes> {
        self.buf.extend_from_slice(data);
        self.take()
    }

    /// The whole lines held, each ending in a newline, and the pieces of a line that goes on
    /// past the cap, `cap` bytes each: one slice of the buffer. What is left (at most `cap`
    /// bytes) is the start of a line.
    pub fn take(&mut self) -> Option<Bytes> {
        let b = &self.buf[..];
        let last_line = |b: &[u8]| b.iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1);
        let mut end = 0;
        // Past the cap a line may be longer than the cap: line by line while it is (only the
        // line held can be: a read is shorter than the cap).
        while b.len() - end > self.cap {
            match b[end..=end + self.cap].iter().position(|&c| c == b'\n') {
                Some(i) => end += i + 1,
                // The line goes on past the cap: a piece of it goes now.
                None => end += self.cap,
            }
        }
        end += last_line(&b[end..]);
        (end > 0).then(|| self.buf.split_to(end).freeze())
    }

    /// The end of the stream: the last line, as it is (without a newline if it had none).
    pub fn finish(&mut self) -> Option<Bytes> {
        (!self.buf.is_empty()).then(|| self.buf.split().freeze())
    }
}

/// The budgets of a node's rank streams (see the module's documentation), shared with the
/// writer of the parent link: the node's rank reactor ([`crate::io::rankio`]) counts the bytes it
/// reads from a stream's pipe, and each message's [`Release`] gives them back once the
/// message has been written. A stream out of budget is not read; when bytes come back to it,
/// `wake` is called with its key.
pub struct Budgets {
    returned: Vec<AtomicUsize>,
    waiting: Vec<AtomicBool>,
    wake: Box<dyn Fn(usize) + Send + Sync>,
}

impl Budgets {
    /// Budgets for `n` streams (keys `0..n`).
    pub fn new(n: usize, wake: impl Fn(usize) + Send + Sync + 'static) -> Arc<Budgets> {
        Arc::new(Budgets {
            returned: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            waiting: (0..n).map(|_| AtomicBool::new(false)).collect(),
            wake: Box::new(wake),
        })
    }

    /// Bytes given back to stream `key` since the last call.
    pub fn take(&self, key: usize) -> usize {
        self.returned.get(key).map_or(0, |r| r.swap(0, Relaxed))
    }

    /// Stream `key` waits for bytes to come back: the next [`Release`] of its calls `wake`.
    pub fn wait(&self, key: usize) {
        if let Some(w) = self.waiting.get(key) {
            w.store(true, Relaxed);
        }
    }

    /// `n` bytes of stream `key` given back (they were written).
    pub fn release(self: &Arc<Self>, key: usize, n: usize) -> Release {
        Release { budgets: self.clone(), key, n }
    }
}

/// Bytes handed back to a stream's budget when the message carrying them has been written.
pub struct Release {
    budgets: Arc<Budgets>,
    key: usize,
    n: usize,
}

impl Drop for Release {
    fn drop(&mut self) {
        let Some(r) = self.budgets.returned.get(self.key) else { return };
        if self.n > 0 {
            r.fetch_add(self.n, Relaxed);
            if self.budgets.waiting[self.key].swap(false, Relaxed) {
                (self.budgets.wake)(self.key);
            }
        }
    }
}

/// What to do once a queued message has been written to the parent's socket.
pub enum Done {
    Nothing,
    /// Give bytes back to a rank stream's budget.
    Release(Release),
    /// Acknowledge `bytes` of child `idx`'s output (it was forwarded).
    Child(usize, u64),
}

enum UpItem {
    Msg(Msg, Done),
    /// Flush what is queued, then end the writer.
    Close,
}

/// The queue of everything a node sends to its parent (cheap to clone).
#[derive(Clone)]
pub struct UpLink {
    tx: UnboundedSender<UpItem>,
}

impl UpLink {
    pub fn send(&self, msg: Msg) {
        self.send_with(msg, Done::Nothing);
    }

    pub fn send_with(&self, msg: Msg, done: Done) {
        let _ = self.tx.send(UpItem::Msg(msg, done));
    }

    /// No more messages: the writer ends once the queue is written.
    pub fn close(&self) {
        let _ = self.tx.send(UpItem::Close);
    }
}

/// What the writer reports to the node's event loop.
pub enum UpEvent {
    /// Child `idx`'s output was forwarded: acknowledge `bytes`.
    ChildDone(usize, u64),
    /// A message could not be encoded (it was dropped; the job must fail).
    Unsendable(String),
    /// The connection failed.
    Broken(String),
}

/// Start the writer of a node's parent link, on the connection under `sink` (what `sink`
/// holds unwritten goes first). `credit` holds the output window (the parent's `OutputAck`s
/// add to it); the writer stops when `stop` is cancelled, when the queue is closed and
/// drained, or when the connection fails. The task gives back the connection (to be closed
/// once the node is done with it).
///
/// Frames go out with vectored writes: rank output as the slices it was read into, behind a
/// head of its own (see `Frames`), never copied into a frame buffer.
pub fn spawn_up_writer(
    sink: crate::io::tree::Sink,
    credit: Arc<Semaphore>,
    stop: CancellationToken,
    report: impl Fn(UpEvent) + Send + Sync + 'static,
) -> (UpLink, tokio::task::JoinHandle<crate::io::tree::Writer>) {
    let (tx, rx) = unbounded_channel();
    let parts = sink.into_parts();
    let mut frames = Frames::default();
    frames.piece(parts.write_buf.freeze());
    let mut w = UpWriter {
        io: parts.io,
        codec: parts.codec,
        frames,
        credit,
        rx,
        queue: UpQueue::default(),
        written: VecDeque::new(),
    };
    let task = tokio::spawn(async move {
        tokio::select! {
            biased;
            _ = stop.cancelled() => {}
            _ = w.run(&report) => {}
        }
        w.io
    });
    (UpLink { tx }, task)
}

/// Output bytes fewer than this are copied beside their frame's head rather than written as
/// a piece of their own (a line or two: not worth an iovec).
const COPY_MAX: usize = 512;
/// Room a new buffer for heads and small messages gets.
const SMALL_ROOM: usize = 8 << 10;
/// Pieces given to one `writev`.
const IOV_MAX: usize = 64;
/// Bytes queued that are written at once, whatever the linger.
const WRITE_AT: usize = 256 << 10;

/// Frames encoded and not written yet, as the pieces of the next vectored writes, in order:
/// rank output as the slices it came in (shared, not copied), and between them what is
/// small (frame heads, other messages, short output), gathered in one buffer.
#[derive(Default)]
struct Frames {
    pieces: VecDeque<Bytes>,
    /// Small bytes after the last piece.
    small: BytesMut,
    /// Bytes ever queued (the stream offset of the end of what is queued).
    end: u64,
    /// Bytes queued and not written yet.
    queued: usize,
}

impl Frames {
    /// Room in `small` for `n` more bytes.
    fn room(&mut self, n: usize) {
        if self.small.capacity() - self.small.len() < n {
            // A fresh buffer (the one before is shared with its pieces): not one per head.
            self.small.reserve(n.max(SMALL_ROOM));
        }
    }

    fn copy(&mut self, b: &[u8]) {
        self.room(b.len());
        self.small.extend_from_slice(b);
        self.added(b.len());
    }

    fn added(&mut self, n: usize) {
        self.end += n as u64;
        self.queued += n;
    }

    fn piece(&mut self, b: Bytes) {
        if b.len() < COPY_MAX {
            return self.copy(&b);
        }
        self.seal();
        self.added(b.len());
        self.pieces.push_back(b);
    }

    /// `small` becomes a piece.
    fn seal(&mut self) {
        if !self.small.is_empty() {
            self.pieces.push_back(self.small.split().freeze());
        }
    }

    /// `n` bytes were written.
    fn advance(&mut self, mut n: usize) {
        self.queued -= n;
        while n > 0 {
            let Some(front) = self.pieces.front_mut() else { return };
            if n < front.len() {
                front.advance(n);
                return;
            }
            n -= front.len();
            self.pieces.pop_front();
        }
    }
}

/// The writer of a parent link (see [`spawn_up_writer`]): the rules are the queue's
/// ([`UpQueue`]); this does what it says.
struct UpWriter {
    io: crate::io::tree::Writer,
    codec: MsgCodec,
    frames: Frames,
    credit: Arc<Semaphore>,
    rx: UnboundedReceiver<UpItem>,
    queue: UpQueue<Done>,
    /// Encoded messages, to be settled once written: where each ends (see [`Frames::end`]).
    written: VecDeque<(u64, Done)>,
}

impl UpWriter {
    /// Until the queue is closed and written, or the connection fails.
    async fn run(&mut self, report: &impl Fn(UpEvent)) {
        loop {
            // What came, and the credit the parent gave back, without waiting.
            while !self.queue.closed() {
                match self.rx.try_recv() {
                    Ok(item) => self.take(item),
                    Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                    Err(_) => self.queue.close(),
                }
            }
            let n = self.credit.available_permits().min(u32::MAX as usize);
            if n > 0 {
                match self.credit.try_acquire_many(n as u32) {
                    Ok(p) => {
                        p.forget();
                        self.queue.add_credit(n as u64);
                    }
                    // The credit is gone (closed): nothing more can be sent.
                    Err(tokio::sync::TryAcquireError::Closed) => return,
                    Err(tokio::sync::TryAcquireError::NoPermits) => {}
                }
            }
            // The one clock reading of the turn.
            let now = libi::clock::mono();
            let ok = match self.queue.next(now) {
                Next::Message(msg, done) => self.feed(msg, done, report).await,
                Next::Output { rank, stream, len, parts } => {
                    self.feed_output(rank, stream, len, parts, report).await
                }
                Next::Flush => self.write(report).await,
                Next::Done => return,
                Next::Wait => self.wait(now).await,
            };
            if !ok {
                return;
            }
        }
    }

    /// Wait for what the queue waits for: a message, credit, or its deadline. False when the
    /// credit is gone (closed).
    async fn wait(&mut self, now: f64) -> bool {
        let starved = self.queue.starved();
        let closed = self.queue.closed();
        let due = self.queue.poll_timeout();
        let credit = self.credit.clone();
        let deadline = async {
            match due {
                Some(at) => tokio::time::sleep(Duration::from_secs_f64((at - now).max(0.0))).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            item = self.rx.recv(), if !closed => match item {
                Some(item) => self.take(item),
                None => self.queue.close(),
            },
            // Taken at the top of the next turn.
            p = credit.acquire_many(1), if starved => return p.is_ok(),
            () = deadline => {}
        }
        true
    }

    /// Queue an item.
    fn take(&mut self, item: UpItem) {
        match item {
            UpItem::Msg(m, d) => self.queue.push(m, d),
            UpItem::Close => self.queue.close(),
        }
    }

    /// Encode a message other than output. False when the connection failed.
    async fn feed(&mut self, msg: Msg, done: Done, report: &impl Fn(UpEvent)) -> bool {
        self.frames.room(SMALL_ROOM / 4);
        let before = self.frames.small.len();
        match self.codec.encode_ref(&msg, &mut self.frames.small) {
            Ok(()) => {
                self.frames.added(self.frames.small.len() - before);
                self.written.push_back((self.frames.end, done));
            }
            // Dropped (its `done` settled now); the job must fail.
            Err(e) => report(UpEvent::Unsendable(e.to_string())),
        }
        self.write_if_full(report).await
    }

    /// Queue the frame of the output in `parts` (`len` bytes of rank `rank`'s `stream`).
    /// False when the connection failed.
    async fn feed_output(
        &mut self,
        rank: u32,
        stream: Stream,
        len: usize,
        parts: Vec<(Bytes, Done)>,
        report: &impl Fn(UpEvent),
    ) -> bool {
        match self.codec.output_head(rank, stream, len) {
            Ok(head) => {
                self.frames.copy(&head);
                for (data, done) in parts {
                    self.frames.piece(data);
                    self.written.push_back((self.frames.end, done));
                }
            }
            // Dropped (their `done`s settled now); the job must fail.
            Err(e) => report(UpEvent::Unsendable(e.to_string())),
        }
        self.write_if_full(report).await
    }

    /// Write now when much is queued (else at the flush). False when the connection failed.
    async fn write_if_full(&mut self, report: &impl Fn(UpEvent)) -> bool {
        if self.frames.queued < WRITE_AT {
            return true;
        }
        self.write(report).await
    }

    /// Write everything queued, settling each message once it is written. False when the
    /// connection failed.
    async fn write(&mut self, report: &impl Fn(UpEvent)) -> bool {
        use tokio::io::AsyncWriteExt;
        self.frames.seal();
        let mut sent = self.frames.end - self.frames.queued as u64;
        while !self.frames.pieces.is_empty() {
            let mut iov = [io::IoSlice::new(&[]); IOV_MAX];
            let k = self.frames.pieces.len().min(IOV_MAX);
            for (slice, piece) in iov.iter_mut().zip(&self.frames.pieces) {
                *slice = io::IoSlice::new(piece);
            }
            let n = match self.io.write_vectored(&iov[..k]).await {
                Ok(0) => Err(io::Error::from(io::ErrorKind::WriteZero)),
                r => r,
            };
            let n = match n {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    report(UpEvent::Broken(e.to_string()));
                    return false;
                }
            };
            self.frames.advance(n);
            sent += n as u64;
            while self.written.front().is_some_and(|(end, _)| *end <= sent) {
                if let Some((_, Done::Child(idx, n))) = self.written.pop_front() {
                    report(UpEvent::ChildDone(idx, n));
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::LineBuf;
    use bytes::Bytes;
    use libi::msg::Msg;

    /// Bytes given back reach the stream's count; a stream waiting for them is woken once,
    /// one that is not waiting is not.
    #[test]
    fn budgets_give_back_and_wake_a_waiting_stream() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        use std::sync::Arc;
        let woken = Arc::new(AtomicUsize::new(0));
        let w = woken.clone();
        let b = super::Budgets::new(2, move |k| {
            w.fetch_add(k + 1, SeqCst);
        });
        drop(b.release(0, 10));
        assert_eq!(woken.load(SeqCst), 0);
        assert_eq!(b.take(0), 10);
        assert_eq!(b.take(0), 0);
        b.wait(1);
        drop(b.release(1, 0));
        assert_eq!(woken.load(SeqCst), 0, "nothing given back: no wake");
        drop(b.release(1, 5));
        drop(b.release(1, 5));
        assert_eq!(woken.load(SeqCst), 2, "stream 1 woken once");
        assert_eq!(b.take(1), 10);
    }

    #[test]
    fn whole_lines() {
        let mut lb = LineBuf::new(100);
        assert_eq!(lb.push(b"ab"), None);
        assert_eq!(lb.push(b"c\nde"), Some(Bytes::from_static(b"abc\n")));
        assert_eq!(lb.push(b"\n\nf"), Some(Bytes::from_static(b"de\n\n")));
        assert_eq!(lb.finish(), Some(Bytes::from_static(b"f")));
        assert_eq!(lb.finish(), None);
    }

    #[test]
    fn long_lines_go_up_in_pieces_of_the_cap() {
        let mut lb = LineBuf::new(4);
        assert_eq!(lb.push(b"abcdefghij"), Some(Bytes::from_static(b"abcdefgh")));
        assert_eq!(lb.pending(), 2);
        assert_eq!(lb.push(b"\nxy"), Some(Bytes::from_static(b"ij\n")));
        assert_eq!(lb.finish(), Some(Bytes::from_static(b"xy")));
        // A line of exactly the cap stays whole even when its newline comes later.
        let mut lb = LineBuf::new(4);
        assert_eq!(lb.push(b"1234"), None);
        assert_eq!(lb.push(b"\n5"), Some(Bytes::from_static(b"1234\n")));
        assert_eq!(lb.finish(), Some(Bytes::from_static(b"5")));
    }

    /// Whatever the cap and however the stream is read: nothing added or dropped, and never
    /// more than the cap held.
    #[test]
    fn pieces_put_together_are_the_stream() {
        for cap in 1..9 {
            let data: Vec<u8> = (0..200u32)
                .map(|i| if i % 13 == 0 { b'\n' } else { b'a' + (i % 7) as u8 })
                .collect();
            for chunk in 1..20 {
                let mut lb = LineBuf::new(cap);
                let mut out = Vec::new();
                for c in data.chunks(chunk) {
                    out.extend(lb.push(c).unwrap_or_default());
                    assert!(lb.pending() <= cap, "cap {cap} chunk {chunk}");
                }
                out.extend(lb.finish().unwrap_or_default());
                assert_eq!(out, data, "cap {cap} chunk {chunk}");
            }
        }
    }

    /// Read from a pipe in reads of any size: the slices taken put together are the stream,
    /// what is held is the start of a line, never more than the cap, and the allocation of a
    /// stream that writes little stays small.
    #[test]
    fn reads_from_a_pipe_come_out_as_slices_of_the_stream() {
        use std::io::Write;
        use std::os::fd::AsFd;
        let data: Vec<u8> = (0..300_000u32)
            .map(|i| if i % 97 == 0 || i % 1013 == 0 { b'\n' } else { b'a' + (i % 23) as u8 })
            .collect();
        for cap in [50, 4096, super::LINE_CAP] {
            let (rd, mut wr) = std::io::pipe().expect("pipe");
            let mut lb = LineBuf::new(cap);
            let mut out = Vec::new();
            for chunk in data.chunks(7919) {
                wr.write_all(chunk).expect("write");
                let mut left = chunk.len();
                while left > 0 {
                    let (n, asked) = lb.read_from(rd.as_fd(), left.min(3000)).expect("read");
                    assert!(n > 0 && n <= asked && asked <= 3000);
                    left -= n;
                    if let Some(b) = lb.take() {
                        out.extend_from_slice(&b);
                    }
                    assert!(lb.pending() <= cap, "cap {cap}");
                    assert!(!lb.buf.contains(&b'\n'), "a whole line held back (cap {cap})");
                }
            }
            out.extend(lb.finish().unwrap_or_default());
            assert_eq!(out, data, "cap {cap}");
        }
        // A line, and nothing more: the first allocation is all it takes.
        let (rd, mut wr) = std::io::pipe().expect("pipe");
        let mut lb = LineBuf::default();
        wr.write_all(b"hello\n").expect("write");
        assert_eq!(lb.read_from(rd.as_fd(), super::READ_CHUNK).expect("read").0, 6);
        assert_eq!(lb.take(), Some(Bytes::from_static(b"hello\n")));
        assert!(lb.buf.capacity() < super::MIN_ALLOC, "{}", lb.buf.capacity());
    }

    /// The parent link's writer: what the queue holds arrives in order, output of a rank and
    /// stream queued together in one frame, each message settled once written (a stream's
    /// bytes given back, a child's output reported passed on), and the connection given back
    /// once the queue is closed.
    #[test]
    fn the_up_writer_writes_frames_in_order_and_settles_them() {
        use futures::StreamExt;
        use libi::msg::{codec, Stream};
        use std::sync::{Arc, Mutex};
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(async {
            let (a, b) = tokio::net::UnixStream::pair().expect("pair");
            let (_, wr) = a.into_split();
            let sink = tokio_util::codec::FramedWrite::new(
                Box::new(wr) as crate::io::tree::Writer,
                codec(),
            );
            let credit = Arc::new(tokio::sync::Semaphore::new(libi::msg::OUTPUT_WINDOW as usize));
            let stop = tokio_util::sync::CancellationToken::new();
            let passed = Arc::new(Mutex::new(Vec::new()));
            let p = passed.clone();
            let (up, task) = super::spawn_up_writer(sink, credit, stop, move |e| {
                if let super::UpEvent::ChildDone(idx, n) = e {
                    p.lock().expect("lock").push((idx, n));
                }
            });
            let budgets = super::Budgets::new(1, |_| {});
            let out = |rank, data: &[u8]| Msg::Output {
                rank,
                stream: Stream::Stdout,
                data: Bytes::copy_from_slice(data),
            };
            let big = vec![b'x'; 100_000];
            up.send_with(out(1, b"a\n"), super::Done::Release(budgets.release(0, 2)));
            up.send_with(out(1, &big), super::Done::Release(budgets.release(0, big.len())));
            up.send_with(out(2, b"b\n"), super::Done::Child(7, 2));
            up.send(Msg::Kill);
            up.send_with(out(2, b"c"), super::Done::Child(7, 1));
            up.close();
            let mut rd = tokio_util::codec::FramedRead::new(b, codec());
            let mut got = Vec::new();
            while let Some(m) = rd.next().await {
                got.push(m.expect("decode"));
                if got.len() == 4 {
                    break;
                }
            }
            let mut first = b"a\n".to_vec();
            first.extend_from_slice(&big);
            assert_eq!(got[0], out(1, &first), "one rank's output queued together: one frame");
            assert_eq!(got[1], out(2, b"b\n"));
            assert_eq!(got[2], Msg::Kill);
            assert_eq!(got[3], out(2, b"c"));
            let conn = task.await.expect("writer");
            drop(conn);
            assert!(rd.next().await.is_none(), "the connection closes with the writer's end");
            assert_eq!(budgets.take(0), 2 + big.len(), "every byte given back");
            assert_eq!(*passed.lock().expect("lock"), vec![(7, 2), (7, 1)]);
        });
    }
}
