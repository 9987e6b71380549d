//! Rank output and input on a node, bounded end to end.
//!
//! * A rank's stdout and stderr are each read by the node's rank reactor
//!   ([`crate::rankio`]) into a [`LineBuf`]; whole lines go up the tree as `Output`. Each stream may hold at most [`STREAM_BUDGET`] bytes
//!   that have been read from its pipe but not yet written to the parent's socket: past that
//!   the reactor stops reading, the pipe fills, and the rank blocks in `write` — a slow reader
//!   slows the writer, memory stays flat.
//! * Everything a node sends up goes through one FIFO queue ([`UpLink`]) drained by one
//!   writer task, so the node's event loop never waits for its parent. `Output` is
//!   flow-controlled per tree link: at most [`OUTPUT_WINDOW`] bytes unacknowledged by the
//!   parent (`OutputAck`). A parent acknowledges a child's output once it has passed it on
//!   (the front end: once written to its own stdout/stderr), so a stopped reader at the top
//!   stops every rank's output, one window per link, and nothing grows. A parent
//!   acknowledges in batches of a quarter window, so a child always gets its credit back
//!   once it has sent three quarters; no `Output` message is larger than [`OUTPUT_MSG_MAX`]
//!   (half a window), so that a child waiting for credit to send one is always sent it
//!   (a larger one, after a little unacknowledged output, would wait forever).

use futures::SinkExt;
use libi::msg::{CodecError, Msg, OUTPUT_WINDOW};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Largest `Output` message a node sends up: half the output window (see the module's
/// documentation).
pub const OUTPUT_MSG_MAX: usize = (OUTPUT_WINDOW / 2) as usize;
/// Longest line forwarded in one message; a longer one goes up in pieces of this size (the
/// bytes as they are: the front end keeps them together unless another rank's output comes
/// between).
pub const LINE_CAP: usize = OUTPUT_MSG_MAX;
/// Bytes read from a rank's pipe at a time.
pub const READ_CHUNK: usize = 64 << 10;
/// Bytes one rank stream may hold between its pipe and the parent's socket.
pub const STREAM_BUDGET: usize = LINE_CAP + READ_CHUNK;
/// Output of one rank stream queued together is sent as one message up to this size.
const MERGE_MAX: usize = 256 << 10;
/// Rank output written to the parent link waits at most this long for more to travel with
/// it (in the same socket write): a node whose ranks print a line each sends a few frames,
/// not one per line, and the parent wakes once per batch. Anything else sent (a rank's end,
/// a fence, an abort) goes at once, with the output before it.
pub const OUTPUT_LINGER: Duration = Duration::from_millis(1);
/// A line a rank has begun but not ended (a prompt) is sent up as it is once the rank has
/// written nothing more for this long, and none of its processes is running (a prompt's
/// writer waits for input; one still at work, or waiting for a CPU on a loaded machine, is
/// not silent: its line waits up to [`PARTIAL_MAX_WAIT`]): short enough that nobody waits
/// for a prompt, long enough that a line written in several pieces goes up whole.
pub const PARTIAL_FLUSH: Duration = Duration::from_millis(50);
/// ... or once the line has waited this long for its newline, however steadily the rank
/// goes on writing it (progress dots still show; a long line written piece by piece on a
/// loaded machine still goes up whole).
pub const PARTIAL_MAX_WAIT: Duration = Duration::from_secs(1);
/// After a rank exits, how long its stdout/stderr may stay open and silent (held by its own
/// children) before the node stops waiting for their EOF.
pub const OUTPUT_DRAIN: Duration = Duration::from_millis(500);

/// Splits a byte stream into whole lines, and lines longer than `cap` bytes into pieces of
/// `cap` bytes; the bytes themselves are left as they are (nothing added, nothing dropped),
/// so that the pieces put together are the stream.
pub struct LineBuf {
    buf: Vec<u8>,
    cap: usize,
}

impl Default for LineBuf {
    fn default() -> Self {
        LineBuf::new(LINE_CAP)
    }
}

impl LineBuf {
    pub fn new(cap: usize) -> Self {
        LineBuf { buf: Vec::new(), cap: cap.max(1) }
    }

    /// Bytes held (the start of a line not ended yet).
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Append `data`; return the whole lines it completes, each ending in a newline, and
    /// the pieces of a line that goes on past the cap, `cap` bytes each.
    pub fn push(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        // Fast path: no line can be longer than the cap.
        if self.buf.len() + data.len() <= self.cap {
            let Some(last) = data.iter().rposition(|&b| b == b'\n') else {
                self.buf.extend_from_slice(data);
                return None;
            };
            let mut out = std::mem::take(&mut self.buf);
            out.extend_from_slice(&data[..=last]);
            self.buf.extend_from_slice(&data[last + 1..]);
            return Some(out);
        }
        let mut out = Vec::with_capacity(self.buf.len() + data.len() + 1);
        let mut rest = data;
        while !rest.is_empty() {
            // Up to `room` more bytes fit in this line, then its newline.
            let room = self.cap - self.buf.len();
            match rest.iter().take(room + 1).position(|&b| b == b'\n') {
                Some(i) => {
                    out.append(&mut self.buf);
                    out.extend_from_slice(&rest[..=i]);
                    rest = &rest[i + 1..];
                }
                None if rest.len() > room => {
                    // The line goes on past the cap: a piece of it goes now.
                    out.append(&mut self.buf);
                    out.extend_from_slice(&rest[..room]);
                    rest = &rest[room..];
                }
                None => {
                    self.buf.extend_from_slice(rest);
                    rest = &[];
                }
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// The end of the stream: the last line, as it is (without a newline if it had none).
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        (!self.buf.is_empty()).then(|| std::mem::take(&mut self.buf))
    }
}

/// The budgets of a node's rank streams (see the module's documentation), shared with the
/// writer of the parent link: the node's rank reactor ([`crate::rankio`]) counts the bytes it
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

/// Start the writer of a node's parent link. `credit` holds the output window (the parent's
/// `OutputAck`s add to it); the writer stops when `stop` is cancelled, when the queue is
/// closed and drained, or when the connection fails.
pub fn spawn_up_writer<S>(
    sink: S,
    credit: Arc<Semaphore>,
    stop: CancellationToken,
    report: impl Fn(UpEvent) + Send + Sync + 'static,
) -> (UpLink, tokio::task::JoinHandle<S>)
where
    S: futures::Sink<Msg, Error = CodecError> + Unpin + Send + 'static,
{
    let (tx, rx) = unbounded_channel();
    let mut w = UpWriter {
        sink,
        credit,
        rx,
        queue: VecDeque::new(),
        written: Vec::new(),
        linger: None,
        urgent: false,
    };
    let task = tokio::spawn(async move {
        tokio::select! {
            biased;
            _ = stop.cancelled() => {}
            _ = w.run(&report) => {}
        }
        w.sink
    });
    (UpLink { tx }, task)
}

/// The writer of a parent link (see [`spawn_up_writer`]).
struct UpWriter<S> {
    sink: S,
    credit: Arc<Semaphore>,
    rx: UnboundedReceiver<UpItem>,
    /// Taken from `rx`, not written yet, in order.
    queue: VecDeque<(Msg, Done)>,
    /// Fed to the sink, to be settled once it is flushed.
    written: Vec<Done>,
    /// Only output was fed since the last flush: flush by then ([`OUTPUT_LINGER`]).
    linger: Option<tokio::time::Instant>,
    /// Something else was fed since the last flush: flush as soon as the queue is empty.
    urgent: bool,
}

/// Messages that may overtake output waiting for the window: requests of the PMI and PMGR
/// services, which no rank's output has to precede. Everything else (a rank's end, an
/// abort, a failure) stays behind the output queued before it. A fence's parts overtake
/// with its `FenceIn` (overtaking keeps their order): the parent needs them first.
fn may_overtake(m: &Msg) -> bool {
    matches!(
        m,
        Msg::FenceIn { .. }
            | Msg::FenceInPart { .. }
            | Msg::Get { .. }
            | Msg::PmgrUp(_)
            | Msg::Name { .. }
            | Msg::Spawn { .. }
            | Msg::StdinAck { .. }
    )
}

impl<S> UpWriter<S>
where
    S: futures::Sink<Msg, Error = CodecError> + Unpin,
{
    /// Until the queue is closed and written, or the connection fails.
    async fn run(&mut self, report: &impl Fn(UpEvent)) {
        let mut closing = false;
        loop {
            if self.queue.is_empty() {
                if let (Some(at), false) = (self.linger, self.urgent || closing) {
                    // Only output since the last flush: wait a little for more to go with it.
                    match tokio::time::timeout_at(at, self.rx.recv()).await {
                        Ok(Some(item)) => {
                            closing |= self.take(item);
                            continue;
                        }
                        Ok(None) => closing = true,
                        Err(_) => {}
                    }
                }
                if !self.flush(report).await || closing {
                    return;
                }
                match self.rx.recv().await {
                    Some(item) => closing |= self.take(item),
                    None => return,
                }
            }
            while let Ok(item) = self.rx.try_recv() {
                closing |= self.take(item);
            }
            let Some((mut msg, done)) = self.queue.pop_front() else { continue };
            let mut dones = vec![done];
            if let Msg::Output { rank, stream, data } = &mut msg {
                // Output of the same rank and stream queued right behind travels in the same
                // message (fewer, larger frames when the parent is the bottleneck).
                let mut merged: Option<Vec<u8>> = None;
                loop {
                    let len = merged.as_ref().map_or(data.len(), Vec::len);
                    if len >= MERGE_MAX {
                        break;
                    }
                    match self.queue.front() {
                        Some((Msg::Output { rank: r, stream: s, data: d }, _))
                            if r == rank && s == stream && len + d.len() <= OUTPUT_MSG_MAX => {}
                        _ => break,
                    }
                    if let Some((Msg::Output { data: d, .. }, dn)) = self.queue.pop_front() {
                        merged.get_or_insert_with(|| data.to_vec()).extend_from_slice(&d);
                        dones.push(dn);
                    }
                }
                if let Some(m) = merged {
                    *data = m.into();
                }
                let need = data.len().clamp(1, OUTPUT_WINDOW as usize) as u32;
                if self.credit.available_permits() < need as usize
                    && !self.wait_for_credit(need, &mut closing, report).await
                {
                    return;
                }
                match self.credit.try_acquire_many(need) {
                    Ok(p) => p.forget(),
                    Err(_) => return,
                }
            }
            if !self.feed(msg, dones, report).await {
                return;
            }
        }
    }

    /// Queue an item; true for the end of the queue.
    fn take(&mut self, item: UpItem) -> bool {
        match item {
            UpItem::Msg(m, d) => {
                self.queue.push_back((m, d));
                false
            }
            UpItem::Close => true,
        }
    }

    /// Wait until the window has `need` bytes; meanwhile send what may overtake output.
    /// False when the connection failed (or the credit is gone).
    async fn wait_for_credit(
        &mut self,
        need: u32,
        closing: &mut bool,
        report: &impl Fn(UpEvent),
    ) -> bool {
        loop {
            let mut i = 0;
            while i < self.queue.len() {
                if may_overtake(&self.queue[i].0) {
                    if let Some((m, d)) = self.queue.remove(i) {
                        if !self.feed(m, vec![d], report).await {
                            return false;
                        }
                    }
                } else {
                    i += 1;
                }
            }
            if !self.flush(report).await {
                return false;
            }
            let credit = self.credit.clone();
            tokio::select! {
                p = credit.acquire_many(need) => {
                    return match p {
                        Ok(p) => {
                            // Released again for the caller's try_acquire.
                            drop(p);
                            true
                        }
                        Err(_) => false,
                    };
                }
                item = self.rx.recv(), if !*closing => match item {
                    Some(item) => *closing |= self.take(item),
                    None => *closing = true,
                },
            }
        }
    }

    async fn feed(&mut self, msg: Msg, dones: Vec<Done>, report: &impl Fn(UpEvent)) -> bool {
        if !matches!(msg, Msg::Output { .. }) {
            self.urgent = true;
        } else if self.linger.is_none() {
            self.linger = Some(tokio::time::Instant::now() + OUTPUT_LINGER);
        }
        match self.sink.feed(msg).await {
            Ok(()) => {
                self.written.extend(dones);
                true
            }
            Err(CodecError::Io(e)) if e.kind() != std::io::ErrorKind::InvalidInput => {
                report(UpEvent::Broken(e.to_string()));
                false
            }
            Err(e) => {
                report(UpEvent::Unsendable(e.to_string()));
                true
            }
        }
    }

    /// Flush the sink, then settle what was written. False when the connection failed.
    async fn flush(&mut self, report: &impl Fn(UpEvent)) -> bool {
        (self.linger, self.urgent) = (None, false);
        if let Err(e) = self.sink.flush().await {
            report(UpEvent::Broken(e.to_string()));
            return false;
        }
        for d in self.written.drain(..) {
            if let Done::Child(idx, n) = d {
                report(UpEvent::ChildDone(idx, n));
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::LineBuf;
    use libi::msg::{KvsTop, Msg};

    /// A fence's parts must reach the parent before its FenceIn: they overtake output alike.
    #[test]
    fn fence_parts_overtake_with_the_fence() {
        let top = KvsTop::default();
        let part = Msg::FenceInPart { epoch: 1, pairs: vec![], top };
        let close = Msg::FenceIn { epoch: 1, pairs: vec![], top };
        assert!(super::may_overtake(&close));
        assert!(super::may_overtake(&part));
    }

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
        assert_eq!(lb.push(b"c\nde"), Some(b"abc\n".to_vec()));
        assert_eq!(lb.push(b"\n\nf"), Some(b"de\n\n".to_vec()));
        assert_eq!(lb.finish(), Some(b"f".to_vec()));
        assert_eq!(lb.finish(), None);
    }

    #[test]
    fn long_lines_go_up_in_pieces_of_the_cap() {
        let mut lb = LineBuf::new(4);
        assert_eq!(lb.push(b"abcdefghij"), Some(b"abcdefgh".to_vec()));
        assert_eq!(lb.pending(), 2);
        assert_eq!(lb.push(b"\nxy"), Some(b"ij\n".to_vec()));
        assert_eq!(lb.finish(), Some(b"xy".to_vec()));
        // A line of exactly the cap stays whole even when its newline comes later.
        let mut lb = LineBuf::new(4);
        assert_eq!(lb.push(b"1234"), None);
        assert_eq!(lb.push(b"\n5"), Some(b"1234\n".to_vec()));
        assert_eq!(lb.finish(), Some(b"5".to_vec()));
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
}
