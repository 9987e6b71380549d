//! The rank reactor: every descriptor an NLA holds for its local ranks — each rank's PMI
//! socket, stdout and stderr pipes, and pidfd — on one epoll set of its own, which the
//! central loop waits on as a single descriptor and serves itself, with no task, waker or
//! channel between a rank and the node core.
//!
//! A PMI request is read and handed to the core in the same turn of the loop that learnt of
//! it; a reply is written straight into the socket (queued, and the socket watched for room,
//! only when it does not fit). Output is read within its stream's budget
//! ([`crate::io::uplink::Budgets`]), cut into lines and queued for the parent link (after a
//! turn that found a little output and nothing else, the set is not looked at again for
//! [`GATHER`], a timer of the set's own, so that ranks writing steadily are read in larger
//! pieces, not a wake-up each; the loop serves everything else meanwhile). A rank's end is
//! reported once its output is all read (or, held open by a child of the rank, has been
//! silent for [`OUTPUT_DRAIN`] since the rank exited), so the end follows the output up the
//! tree. The deadlines (a line without its newline, the drain, a reply the rank does not
//! read for [`STALL_LIMIT`]) and what they mean are the policy's, [`RankStreams`], which the
//! reactor tells what happens to the descriptors; the loop learns the next one from
//! [`RankIo::poll_timeout`] and serves it with [`RankIo::handle_timeout`].
//!
//! Every descriptor is registered edge-triggered: a source is read until it says EAGAIN (or
//! a short read drains it), and a source left readable (a stream out of budget, a PMI socket
//! whose rank is not reading its replies, a socket that had more than one turn's share) is
//! remembered and read again when it may be. None is ever removed from the set by hand:
//! each descriptor is ours alone (close-on-exec; the ranks hold the other ends), so closing
//! it removes it.
//!
//! [`OUTPUT_DRAIN`]: crate::proto::node::limits::OUTPUT_DRAIN
//! [`STALL_LIMIT`]: crate::proto::node::limits::STALL_LIMIT

use crate::io::uplink::{Budgets, Done, LineBuf, UpLink, READ_CHUNK, STREAM_BUDGET};
use crate::proc::reaper::{self, Exit};
use crate::proc::start::RankProcess;
use crate::proto::node::{Effect, NodeCore, ProcEnd};
use crate::proto::streams::{gather, Due, Probe, RankStreams, GATHER};
use bytes::Bytes;
use libi::msg::{Msg, Stream};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use tokio::io::unix::AsyncFd;

/// Reads of a PMI socket per turn of the loop, [`PMI_BUF`] bytes each: a rank with more to
/// say is read again after the other sources that are ready.
const PMI_READS: usize = 4;
const PMI_BUF: usize = 16 * 1024;
/// Events taken from the set at a time.
const EVENTS: usize = 64;

/// What a registered descriptor is, in the low bits of its epoll data (the local rank above).
const K_PMI: u64 = 0;
const K_OUT: u64 = 1;
const K_ERR: u64 = 2;
const K_PID: u64 = 3;

fn key(local: usize, kind: u64) -> u64 {
    ((local as u64) << 2) | kind
}

/// The epoll set, as the descriptor tokio watches for us.
struct Set(Epoll);

impl From<Set> for OwnedFd {
    fn from(s: Set) -> OwnedFd {
        s.0 .0
    }
}

impl AsRawFd for Set {
    fn as_raw_fd(&self) -> RawFd {
        self.0 .0.as_raw_fd()
    }
}

/// A rank's PMI socket.
struct Pmi {
    sock: UnixStream,
    /// May have bytes to read (edge-triggered: until a read says EAGAIN or comes up short).
    readable: bool,
    /// The other end is closed (or failed): read until EOF, however short the reads (the
    /// edge that said so came once).
    hup: bool,
    /// Replies that did not fit, in order, the front one partly written perhaps.
    queue: VecDeque<Vec<u8>>,
    /// Shut the socket for writing once the queue is written.
    close_queued: bool,
    /// Registered for room to write (only while something is queued: registered always,
    /// every reply the rank reads would wake the loop).
    out_armed: bool,
    /// Nothing more is read: EOF, an error, or the rank stalled.
    read_closed: bool,
    /// Nothing more is written: the rank stalled, or its process is gone.
    dead: bool,
}

/// A rank's stdout or stderr pipe.
struct Out {
    fd: std::fs::File,
    readable: bool,
    /// As [`Pmi::hup`].
    hup: bool,
    lines: LineBuf,
    /// Bytes read and not given back by the parent link yet ([`STREAM_BUDGET`] at most).
    outstanding: usize,
    /// Of those, bytes not handed to a message's release yet (the line being held).
    held: usize,
}

struct Slot {
    rank: u32,
    pid: i32,
    pmi: Pmi,
    out: [Option<Out>; 2],
    /// Until the process has ended.
    pidfd: Option<OwnedFd>,
    end: Option<ProcEnd>,
}

/// A one-shot timer (CLOCK_MONOTONIC) of microsecond precision, as a descriptor tokio
/// watches: the end of a [`GATHER`] hold (tokio's own timers count milliseconds).
struct HoldTimer(nix::sys::timerfd::TimerFd);

impl AsRawFd for HoldTimer {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// The local ranks' descriptors on one epoll set (see the module's documentation).
pub struct RankIo {
    set: AsyncFd<Set>,
    /// Armed while the set is not looked at ([`GATHER`]); `holding` says so.
    hold: AsyncFd<HoldTimer>,
    holding: bool,
    slots: Vec<Option<Slot>>,
    /// Sources to read again without an event (see the module's documentation).
    again: Vec<u64>,
    /// The streams' deadlines and what they mean: the policy, told what happens here.
    streams: RankStreams,
    budgets: Arc<Budgets>,
    up: UpLink,
    /// Ranks that ended, with everything of theirs read, for the driver.
    ended: Vec<(usize, ProcEnd)>,
    pmi_buf: Vec<u8>,
    events: Vec<EpollEvent>,
    /// Of the turn being served: rank output read, and whether anything else was served.
    out_read: usize,
    other: bool,
    /// The time now, as the driver tells it once per turn ([`RankIo::set_now`]).
    now: f64,
}

/// What an event says of a source whose other end is closed or failed.
fn hup_flags() -> EpollFlags {
    EpollFlags::EPOLLHUP | EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLERR
}

/// Whether a rank's pipe holds bytes not read yet (the event saying so may be waiting).
fn unread(fd: &std::fs::File) -> bool {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int, into `n`, which outlives the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) };
    r == 0 && n > 0
}

/// Whether rank process `pid`, or a process below it, is running or waiting for a CPU (or
/// in an uninterruptible wait): the rank is not silent then, only not done (or not given a
/// CPU: a loaded machine). A prompt's writer sleeps, waiting for input; so does a writer of
/// progress dots between them. At most [`BUSY_PROCS`] processes are looked at.
fn busy(pid: i32) -> bool {
    let mut todo = vec![pid];
    let mut seen = 0;
    while let Some(p) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else { continue };
        for t in tasks.flatten() {
            seen += 1;
            if seen > BUSY_PROCS {
                return false;
            }
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            let state = stat.rsplit_once(')').and_then(|(_, r)| r.trim_start().chars().next());
            if matches!(state, Some('R' | 'D')) {
                return true;
            }
            if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
                todo.extend(c.split_whitespace().filter_map(|c| c.parse::<i32>().ok()));
            }
        }
    }
    false
}

/// Threads of a rank's processes [`busy`] looks at, at most.
const BUSY_PROCS: usize = 64;

/// One non-blocking send on a rank's PMI socket (no SIGPIPE: a rank that closed its end
/// gives EPIPE).
fn send_now(sock: &UnixStream, b: &[u8]) -> io::Result<usize> {
    use nix::sys::socket::{send, MsgFlags};
    let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
    send(sock.as_raw_fd(), b, flags).map_err(io::Error::from)
}

/// What the streams' policy asks of the descriptors.
struct Facts<'a> {
    slots: &'a [Option<Slot>],
}

impl Probe for Facts<'_> {
    fn unread(&mut self, local: usize, s: usize) -> bool {
        let o =
            self.slots.get(local).and_then(Option::as_ref).and_then(|slot| slot.out[s].as_ref());
        o.is_some_and(|o| o.readable || unread(&o.fd))
    }

    fn busy(&mut self, local: usize) -> bool {
        self.slots.get(local).and_then(Option::as_ref).is_some_and(|slot| busy(slot.pid))
    }
}

impl RankIo {
    /// A reactor for `n` local ranks, whose output goes up `up`; `room` is called (with the
    /// local rank) when a stream out of budget may be read again: the driver then calls
    /// [`RankIo::resume`].
    pub fn new(
        n: usize,
        up: UpLink,
        room: impl Fn(usize) + Send + Sync + 'static,
    ) -> io::Result<RankIo> {
        let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(io::Error::from)?;
        use nix::sys::timerfd::{ClockId, TimerFd, TimerFlags};
        let flags = TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC;
        let timer = TimerFd::new(ClockId::CLOCK_MONOTONIC, flags).map_err(io::Error::from)?;
        Ok(RankIo {
            // SAFETY: `HoldTimer` owns the timer descriptor, which stays open and the same
            // while the AsyncFd owns it; the AsyncFd deregisters it before closing it.
            hold: unsafe {
                AsyncFd::register_with_interest(HoldTimer(timer), tokio::io::Interest::READABLE)
            }?,
            holding: false,
            // SAFETY: `Set` owns the epoll descriptor, which stays open and the same while the
            // AsyncFd owns it; the AsyncFd deregisters it before closing it.
            set: unsafe {
                AsyncFd::register_with_interest(Set(ep), tokio::io::Interest::READABLE)
            }?,
            slots: (0..n).map(|_| None).collect(),
            again: Vec::new(),
            streams: RankStreams::new(n),
            budgets: Budgets::new(2 * n, move |k| room(k / 2)),
            up,
            ended: Vec::new(),
            pmi_buf: Vec::new(),
            events: Vec::new(),
            now: 0.0,
            out_read: 0,
            other: false,
        })
    }

    /// Take on started rank `local` (global rank `rank`): its PMI socket (made non-blocking
    /// here), pipes and pidfd join the set. On an error nothing of it is kept (the caller
    /// reaps the process).
    pub fn add(
        &mut self,
        local: usize,
        rank: u32,
        child: RankProcess,
        pmi: UnixStream,
    ) -> io::Result<()> {
        pmi.set_nonblocking(true)?;
        let et = EpollFlags::EPOLLET;
        let ep = &self.set.get_ref().0;
        let reg = |fd: std::os::fd::BorrowedFd<'_>, flags: EpollFlags, kind| {
            ep.add(fd, EpollEvent::new(flags | et, key(local, kind))).map_err(io::Error::from)
        };
        reg(pmi.as_fd(), EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP, K_PMI)?;
        reg(child.stdout.as_fd(), EpollFlags::EPOLLIN, K_OUT)?;
        reg(child.stderr.as_fd(), EpollFlags::EPOLLIN, K_ERR)?;
        reg(child.pidfd.as_fd(), EpollFlags::EPOLLIN, K_PID)?;
        let out = |fd: OwnedFd| Out {
            fd: fd.into(),
            readable: false,
            hup: false,
            lines: LineBuf::default(),
            outstanding: 0,
            held: 0,
        };
        self.slots[local] = Some(Slot {
            rank,
            pid: child.pid,
            pmi: Pmi {
                sock: pmi,
                readable: false,
                hup: false,
                queue: VecDeque::new(),
                close_queued: false,
                out_armed: false,
                read_closed: false,
                dead: false,
            },
            out: [Some(out(child.stdout)), Some(out(child.stderr))],
            pidfd: Some(child.pidfd),
            end: None,
        });
        self.streams.started(local);
        Ok(())
    }

    /// Wait until there is something to serve ([`RankIo::serve`]): after a [`GATHER`] hold
    /// has ended. Cancel-safe.
    pub async fn ready(&mut self) {
        if self.holding {
            if let Ok(mut g) = self.hold.readable().await {
                // Expired (a read takes the expiry count; nothing else to learn from it).
                let _ = g.get_inner().0.wait();
                g.clear_ready();
            }
            self.holding = false;
        }
        if !self.again.is_empty() {
            return;
        }
        if let Ok(mut g) = self.set.readable().await {
            // What is in the set now is all taken by the next `serve`; anything later turns
            // the set readable again.
            g.clear_ready();
        }
    }

    /// Serve what is ready: requests to the core (effects into `fx`), output up the tree,
    /// ends. Returns the ranks that ended, for the driver (their descriptors are closed).
    pub fn serve(&mut self, core: &mut NodeCore, fx: &mut Vec<Effect>) -> Vec<(usize, ProcEnd)> {
        let again = std::mem::take(&mut self.again);
        (self.out_read, self.other) = (0, false);
        loop {
            self.events.resize(EVENTS, EpollEvent::empty());
            let n = match self.set.get_ref().0.wait(&mut self.events, 0u16) {
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => 0,
            };
            for i in 0..n {
                let (k, flags) = (self.events[i].data(), self.events[i].events());
                self.on_event(k, flags, core, fx);
            }
            if n < EVENTS {
                break;
            }
        }
        // Sources left readable last time, after the fresh ones (one read too many for a
        // source both lists hold finds it drained).
        for k in again {
            self.read(k, core, fx);
        }
        if gather(self.out_read, self.other || !self.again.is_empty()) {
            use nix::sys::time::TimeSpec;
            use nix::sys::timerfd::{Expiration, TimerSetTimeFlags};
            let once = Expiration::OneShot(TimeSpec::from_duration(GATHER));
            // Should it fail, nothing is held.
            self.holding = self.hold.get_ref().0.set(once, TimerSetTimeFlags::empty()).is_ok();
        }
        std::mem::take(&mut self.ended)
    }

    fn on_event(&mut self, k: u64, flags: EpollFlags, core: &mut NodeCore, fx: &mut Vec<Effect>) {
        self.other |= !matches!(k & 3, K_OUT | K_ERR);
        let local = (k >> 2) as usize;
        let Some(Some(slot)) = self.slots.get_mut(local) else { return };
        match k & 3 {
            K_PMI => {
                if flags.contains(EpollFlags::EPOLLOUT) {
                    self.flush(local);
                }
                let Some(Some(slot)) = self.slots.get_mut(local) else { return };
                if flags.intersects(!EpollFlags::EPOLLOUT) {
                    slot.pmi.readable = true;
                    slot.pmi.hup |= flags.intersects(hup_flags());
                    self.read(k, core, fx);
                }
            }
            K_OUT | K_ERR => {
                if let Some(o) = &mut slot.out[(k & 3) as usize - 1] {
                    o.readable = true;
                    o.hup |= flags.intersects(hup_flags());
                }
                self.read(k, core, fx);
            }
            _ => self.exited(local, core, fx),
        }
    }

    /// Read source `k` as far as it may be read now.
    fn read(&mut self, k: u64, core: &mut NodeCore, fx: &mut Vec<Effect>) {
        self.other |= k & 3 == K_PMI;
        match k & 3 {
            K_PMI if self.read_pmi((k >> 2) as usize, core, fx) => self.again.push(k),
            K_PMI => {}
            K_OUT | K_ERR => self.read_out((k >> 2) as usize, (k & 3) as usize - 1),
            _ => {}
        }
    }

    /// Read rank `local`'s PMI socket (at most [`PMI_READS`] buffers) and hand what comes to
    /// the core. Not while replies wait for the rank to read them: a rank that floods
    /// requests without reading is held to what its socket buffers hold. True when it is
    /// still readable after its share.
    fn read_pmi(&mut self, local: usize, core: &mut NodeCore, fx: &mut Vec<Effect>) -> bool {
        let Some(Some(slot)) = self.slots.get_mut(local) else { return false };
        let p = &mut slot.pmi;
        if p.read_closed || !p.readable || !p.queue.is_empty() {
            return false;
        }
        if self.pmi_buf.is_empty() {
            self.pmi_buf = vec![0u8; PMI_BUF];
        }
        for _ in 0..PMI_READS {
            match io::Read::read(&mut &p.sock, &mut self.pmi_buf) {
                Ok(0) => return Self::pmi_closed(p, local, core, fx),
                Ok(n) => {
                    // A short read drained the socket (unless its other end is closed:
                    // then EOF is still to be read, and no edge will say so).
                    if n < self.pmi_buf.len() && !p.hup {
                        p.readable = false;
                    }
                    core.rank_data(local, &self.pmi_buf[..n], fx);
                    if !p.readable {
                        return false;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    p.readable = false;
                    return false;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Self::pmi_closed(p, local, core, fx),
            }
        }
        true
    }

    fn pmi_closed(p: &mut Pmi, local: usize, core: &mut NodeCore, fx: &mut Vec<Effect>) -> bool {
        p.read_closed = true;
        p.readable = false;
        core.rank_eof(local, fx);
        false
    }

    /// A reply for rank `local`: written at once when nothing is queued and it fits, else
    /// queued behind what is, and the socket watched for room.
    pub fn send(&mut self, local: usize, mut bytes: Vec<u8>) {
        let Some(Some(slot)) = self.slots.get_mut(local) else { return };
        let p = &mut slot.pmi;
        if p.dead || p.close_queued {
            return;
        }
        if p.queue.is_empty() {
            match send_now(&p.sock, &bytes) {
                Ok(n) if n == bytes.len() => return,
                Ok(n) => {
                    bytes.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The rank closed its end (or is gone): the reply goes nowhere.
                Err(_) => return,
            }
        }
        p.queue.push_back(bytes);
        self.watch_room(local);
    }

    /// No more replies for rank `local`: it reads EOF once it has read what was written;
    /// nothing more of its is read.
    pub fn close(&mut self, local: usize) {
        let Some(Some(slot)) = self.slots.get_mut(local) else { return };
        let p = &mut slot.pmi;
        if p.dead {
            return;
        }
        if p.queue.is_empty() {
            p.read_closed = true;
            let _ = p.sock.shutdown(std::net::Shutdown::Write);
        } else {
            p.close_queued = true;
        }
    }

    /// Watch rank `local`'s PMI socket for room (something is queued), bounded by
    /// [`STALL_LIMIT`].
    fn watch_room(&mut self, local: usize) {
        let Some(Some(slot)) = self.slots.get_mut(local) else { return };
        let p = &mut slot.pmi;
        if !p.out_armed {
            let flags = EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLOUT;
            let mut ev = EpollEvent::new(flags | EpollFlags::EPOLLET, key(local, K_PMI));
            // Should it fail, the stall limit ends the wait.
            let _ = self.set.get_ref().0.modify(p.sock.as_fd(), &mut ev);
            p.out_armed = true;
        }
        self.streams.reply_queued(local, self.now);
    }

    /// Write what is queued for rank `local` while there is room.
    fn flush(&mut self, local: usize) {
        let Some(Some(slot)) = self.slots.get_mut(local) else { return };
        let p = &mut slot.pmi;
        while let Some(front) = p.queue.front_mut() {
            match send_now(&p.sock, front) {
                Ok(n) => {
                    self.streams.reply_progress(local, self.now);
                    if n < front.len() {
                        front.drain(..n);
                        return;
                    }
                    p.queue.pop_front();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    p.queue.pop_front();
                }
            }
        }
        // All written.
        self.streams.replies_done(local);
        if p.close_queued {
            p.close_queued = false;
            p.read_closed = true;
            let _ = p.sock.shutdown(std::net::Shutdown::Write);
        }
        if p.out_armed {
            let flags = EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLET;
            let mut ev = EpollEvent::new(flags, key(local, K_PMI));
            if self.set.get_ref().0.modify(p.sock.as_fd(), &mut ev).is_ok() {
                p.out_armed = false;
            }
        }
        // Requests held back while replies waited.
        if p.readable && !p.read_closed {
            self.again.push(key(local, K_PMI));
        }
    }

    /// Read rank `local`'s stream `s` (0 stdout, 1 stderr) while it has bytes and budget.
    fn read_out(&mut self, local: usize, s: usize) {
        let Some(Some(slot)) = self.slots.get_mut(local) else { return };
        let (rank, bk) = (slot.rank, 2 * local + s);
        let Some(o) = &mut slot.out[s] else { return };
        if !o.readable {
            return;
        }
        o.outstanding = o.outstanding.saturating_sub(self.budgets.take(bk));
        if o.outstanding + READ_CHUNK > STREAM_BUDGET {
            self.budgets.wait(bk);
            o.outstanding = o.outstanding.saturating_sub(self.budgets.take(bk));
            if o.outstanding + READ_CHUNK > STREAM_BUDGET {
                // Not read until bytes come back (`resume`), and no deadline meanwhile: the
                // rank is not silent, we are not reading it (the line held waits for the
                // rest of it; a drain does not count the wait). The read after sets it.
                self.streams.out_blocked(local, s);
                return;
            }
        }
        // Straight into the stream's line buffer, whose lines go up as slices of it.
        let r = o.lines.read_from(o.fd.as_fd(), READ_CHUNK);
        let now = self.now;
        let (n, asked) = match r {
            Ok((0, _)) => return self.finish_out(local, s),
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                o.readable = false;
                return;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                self.again.push(key(local, 1 + s as u64));
                return;
            }
            Err(_) => return self.finish_out(local, s),
        };
        if n < asked && !o.hup {
            o.readable = false;
        }
        o.outstanding += n;
        o.held += n;
        self.out_read += n;
        let whole = o.lines.take();
        let sent = whole.is_some();
        if let Some(data) = whole {
            Self::emit(&self.up, &self.budgets, bk, o, rank, s, data);
        }
        let k = key(local, 1 + s as u64);
        self.streams.out_read(local, s, now, o.lines.pending(), sent);
        if o.readable {
            self.again.push(k);
        }
    }

    /// `data` (whole lines, or a line's end) of rank `rank`'s stream `s` goes up; the bytes
    /// read and not released before it, less the line still held, are released with it.
    fn emit(
        up: &UpLink,
        budgets: &Arc<Budgets>,
        bk: usize,
        o: &mut Out,
        rank: u32,
        s: usize,
        data: Bytes,
    ) {
        let pending = o.lines.pending();
        let done = Done::Release(budgets.release(bk, o.held - pending));
        o.held = pending;
        let stream = if s == 0 { Stream::Stdout } else { Stream::Stderr };
        up.send_with(Msg::Output { rank, stream, data }, done);
    }

    /// Rank `local`'s stream `s` is done (EOF, an error, or given up after the drain): the
    /// line held goes up as it is, and the pipe is closed.
    fn finish_out(&mut self, local: usize, s: usize) {
        let Some(Some(slot)) = self.slots.get_mut(local) else { return };
        let rank = slot.rank;
        let Some(mut o) = slot.out[s].take() else { return };
        self.streams.out_closed(local, s);
        if let Some(data) = o.lines.finish() {
            Self::emit(&self.up, &self.budgets, 2 * local + s, &mut o, rank, s, data);
        }
        self.maybe_ended(local);
    }

    /// A stream out of budget may be read again (bytes came back to it).
    pub fn resume(&mut self, local: usize) {
        if self.slots.get(local).is_some_and(Option::is_some) {
            for s in self.streams.out_resumed(local, self.now) {
                self.again.push(key(local, 1 + s as u64));
            }
        }
    }

    /// Rank `local`'s pidfd turned readable: the process has ended (it is not reaped: its
    /// pid stays ours until the driver reaps it). What it wrote to its PMI socket before
    /// (an `abort`, say) is read now, before its end; replies to it go nowhere from now on.
    fn exited(&mut self, local: usize, core: &mut NodeCore, fx: &mut Vec<Effect>) {
        let Some(Some(slot)) = self.slots.get_mut(local) else { return };
        if slot.end.is_some() {
            return;
        }
        let end = match reaper::peek(slot.pid) {
            // Not yet (the pidfd turned readable for nothing): its next edge comes.
            Ok(None) => return,
            Ok(Some(Exit::Exited(c))) => ProcEnd::Exited(c),
            Ok(Some(Exit::Signaled(s))) => ProcEnd::Signaled(s),
            Err(e) => ProcEnd::SpawnFailed {
                errno: e.raw_os_error().unwrap_or(0),
                reason: format!("cannot wait for rank: {e}"),
            },
        };
        slot.end = Some(end);
        slot.pidfd = None;
        // Replies to a process that is gone go nowhere (and none held back keeps its last
        // requests unread).
        let p = &mut slot.pmi;
        p.dead = true;
        p.queue.clear();
        if !p.read_closed {
            p.readable = true;
            // Read what there is (bounded: a child of the rank may hold the socket and go on
            // writing; what it writes later is read as it comes).
            let mut more = true;
            for _ in 0..16 {
                more = self.read_pmi(local, core, fx);
                if !more {
                    break;
                }
            }
            if more {
                self.again.push(key(local, K_PMI));
            }
        }
        let Some(Some(slot)) = self.slots.get_mut(local) else { return };
        // Its output may still be in the pipes (or held open by its own children: bounded
        // wait): whatever is left is read now.
        for s in self.streams.exited(local, self.now) {
            if let Some(o) = slot.out[s].as_mut() {
                o.readable = true;
                self.again.push(key(local, 1 + s as u64));
            }
        }
        self.maybe_ended(local);
    }

    /// Rank `local` ended and its output is done: its end goes to the driver, and its
    /// descriptors are closed.
    fn maybe_ended(&mut self, local: usize) {
        let done = self
            .slots
            .get(local)
            .and_then(Option::as_ref)
            .is_some_and(|s| s.end.is_some() && s.out.iter().all(Option::is_none));
        if done {
            if let Some(Some(slot)) = self.slots.get_mut(local).map(Option::take) {
                self.streams.removed(local);
                if let Some(end) = slot.end {
                    self.ended.push((local, end));
                }
            }
        }
    }

    /// The time now, on the driver's monotonic clock ([`libi::clock::mono`]), read once per
    /// turn of its loop: what this turn's deadlines are set from.
    pub fn set_now(&mut self, now: f64) {
        self.now = now;
    }

    /// The earliest deadline of the reactor (seconds of the driver's clock), if any.
    pub fn poll_timeout(&self) -> Option<f64> {
        self.streams.poll_timeout()
    }

    /// Serve the deadlines that have passed by `now`. Returns the ranks that ended.
    pub fn handle_timeout(
        &mut self,
        now: f64,
        core: &mut NodeCore,
        fx: &mut Vec<Effect>,
    ) -> Vec<(usize, ProcEnd)> {
        self.now = now;
        let mut facts = Facts { slots: &self.slots };
        for due in self.streams.handle_timeout(now, &mut facts) {
            match due {
                Due::Stalled(local) => {
                    let Some(Some(slot)) = self.slots.get_mut(local) else { continue };
                    // The rank does not read its replies: nothing more is written to it or
                    // read from it.
                    let p = &mut slot.pmi;
                    p.dead = true;
                    p.read_closed = true;
                    p.queue.clear();
                    core.rank_stalled(local, fx);
                }
                Due::ReadAgain(local, s) => {
                    let Some(Some(slot)) = self.slots.get_mut(local) else { continue };
                    let Some(o) = &mut slot.out[s] else { continue };
                    if !o.readable {
                        o.readable = true;
                        self.again.push(key(local, 1 + s as u64));
                    }
                }
                Due::FlushLine(local, s) => {
                    let Some(Some(slot)) = self.slots.get_mut(local) else { continue };
                    let rank = slot.rank;
                    let Some(o) = &mut slot.out[s] else { continue };
                    if let Some(data) = o.lines.finish() {
                        Self::emit(&self.up, &self.budgets, 2 * local + s, o, rank, s, data);
                    }
                }
                Due::GiveUp(local, s) => self.finish_out(local, s),
            }
        }
        std::mem::take(&mut self.ended)
    }
}

#[cfg(test)]
mod tests {
    /// A rank at work, itself or below it, is busy; one waiting (for input, a timer, its
    /// child) is not.
    #[test]
    fn busy_sees_work_below_the_rank() {
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        // Each in a process group of its own, ended whole (sh and its child).
        let start = |script: &str| {
            let mut c = Command::new("sh");
            c.args(["-c", script]).stdin(Stdio::null()).process_group(0);
            c.spawn().expect("sh")
        };
        // `; :` keeps sh from exec'ing its command: the work is in sh's child.
        let mut spinning = start("yes > /dev/null; :");
        let mut sleeping = start("sleep 30; :");
        std::thread::sleep(std::time::Duration::from_millis(200));
        let busy = super::busy(spinning.id() as i32);
        let idle = super::busy(sleeping.id() as i32);
        for c in [&mut spinning, &mut sleeping] {
            let pg = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::killpg(pg, nix::sys::signal::Signal::SIGKILL);
            let _ = c.wait();
        }
        assert!(busy, "a rank whose child spins is busy");
        assert!(!idle, "a rank whose child sleeps is not");
        assert!(!super::busy(i32::MAX), "no such process");
    }
}
