//! The rules of a node's link to its parent: what is written next, in what order, in which
//! frame, and when the bytes go to the socket.
//!
//! Everything a node sends up is queued here, in order, each message with a token the
//! driver settles once the message is written (`D`: give bytes back to a rank stream,
//! acknowledge a child's output). The writer of the link ([`crate::io::uplink`]) asks
//! [`UpQueue::next`] what to do, with the time of its turn, and does it:
//! * **Order**: messages go in the order they were queued, with one exception, below.
//! * **Credit**: rank output is flow-controlled per link: at most [`OUTPUT_WINDOW`] bytes
//!   unacknowledged by the parent, who gives them back ([`UpQueue::add_credit`]) once it has
//!   passed them on.
//! * **Overtaking**: while output at the front waits for credit, the requests of the PMI and
//!   PMGR services queued behind it ([`may_overtake`]) go first: no rank's output has to
//!   precede them. Everything else (a rank's end, an abort, a failure) stays behind the
//!   output queued before it.
//! * **Merging**: output of one rank and stream queued back to back travels in one frame, up
//!   to [`MERGE_MAX`] bytes gathered and [`OUTPUT_MSG_MAX`] per frame.
//! * **Linger**: rank output waits at most [`OUTPUT_LINGER`] for more to travel with it in the
//!   same socket write; anything else sent goes at once, with the output before it.

use super::node::limits::OUTPUT_LINGER;
use bytes::Bytes;
use libi::msg::{Msg, Stream, OUTPUT_WINDOW};
use std::collections::VecDeque;

/// Largest `Output` message a node sends up: half the output window, so that a child waiting
/// for credit to send one is always sent it (the parent acknowledges in batches of a quarter
/// window; a larger message, after a little unacknowledged output, would wait forever).
pub const OUTPUT_MSG_MAX: usize = (OUTPUT_WINDOW / 2) as usize;
/// Output of one rank stream queued together is sent as one message up to this size.
pub const MERGE_MAX: usize = 256 << 10;

/// Messages that may overtake output waiting for the window: requests of the PMI and PMGR
/// services, which no rank's output has to precede. A fence's parts overtake with its
/// `FenceIn` (overtaking keeps their order): the parent needs them first.
pub fn may_overtake(m: &Msg) -> bool {
    matches!(
        m,
        Msg::FenceIn { .. }
            | Msg::FenceInPart { .. }
            | Msg::Get { .. }
            | Msg::PmgrUp(_)
            | Msg::PmgrUpPart { .. }
            | Msg::Name { .. }
            | Msg::Spawn { .. }
            | Msg::StdinAck { .. }
    )
}

/// What the writer does next.
#[derive(Debug)]
pub enum Next<D> {
    /// Encode this message (not output) behind what is encoded.
    Message(Msg, D),
    /// Encode one `Output` frame of `len` bytes of rank `rank`'s `stream`, made of `parts`
    /// in order (each settled once written). Its credit is taken.
    Output { rank: u32, stream: Stream, len: usize, parts: Vec<(Bytes, D)> },
    /// Write everything encoded now.
    Flush,
    /// Nothing to do until a message is queued, credit comes ([`UpQueue::starved`]), or the
    /// time of [`UpQueue::poll_timeout`].
    Wait,
    /// The queue was closed and everything in it is handed out and flushed.
    Done,
}

/// A node's queue to its parent (see the module's documentation).
pub struct UpQueue<D> {
    queue: VecDeque<(Msg, D)>,
    /// Bytes of output the parent may be sent now.
    credit: u64,
    /// Encoded and not flushed: output since (and waiting until) this time, or a message
    /// that goes at once (`urgent`).
    linger: Option<f64>,
    urgent: bool,
    unflushed: bool,
    closing: bool,
    /// The last [`Next::Wait`] was for credit.
    starved: bool,
}

impl<D> Default for UpQueue<D> {
    fn default() -> Self {
        UpQueue::new(OUTPUT_WINDOW)
    }
}

impl<D> UpQueue<D> {
    /// An empty queue with `credit` bytes of output window.
    pub fn new(credit: u64) -> Self {
        UpQueue {
            queue: VecDeque::new(),
            credit,
            linger: None,
            urgent: false,
            unflushed: false,
            closing: false,
            starved: false,
        }
    }

    /// Queue `msg`, to be settled with `done` once written.
    pub fn push(&mut self, msg: Msg, done: D) {
        self.queue.push_back((msg, done));
    }

    /// Nothing more will be queued: [`Next::Done`] once the queue is written.
    pub fn close(&mut self) {
        self.closing = true;
    }

    /// The parent gave `bytes` of output window back.
    pub fn add_credit(&mut self, bytes: u64) {
        self.credit = self.credit.saturating_add(bytes);
    }

    /// Whether the last [`Next::Wait`] waits for credit (output at the front does not fit
    /// the window).
    pub fn starved(&self) -> bool {
        self.starved
    }

    /// Whether the queue is closed (nothing more is taken).
    pub fn closed(&self) -> bool {
        self.closing
    }

    /// When the output encoded stops waiting for more to travel with it, if it does.
    pub fn poll_timeout(&self) -> Option<f64> {
        match (self.linger, self.urgent || self.closing) {
            (Some(at), false) if self.unflushed && self.queue.is_empty() => Some(at),
            _ => None,
        }
    }

    fn flush(&mut self) -> Next<D> {
        (self.linger, self.urgent, self.unflushed) = (None, false, false);
        Next::Flush
    }

    /// What to do next, at `now` (seconds of the driver's clock).
    pub fn next(&mut self, now: f64) -> Next<D> {
        self.starved = false;
        let Some((front, _)) = self.queue.front() else {
            if self.unflushed {
                if let Some(at) = self.linger.filter(|_| !self.urgent && !self.closing) {
                    if now < at {
                        return Next::Wait;
                    }
                }
                return self.flush();
            }
            return if self.closing { Next::Done } else { Next::Wait };
        };
        let Msg::Output { rank, stream, .. } = *front else {
            return self.message_at(0);
        };
        // The run of this rank stream's output at the front that travels in one frame.
        let (mut count, mut len) = (0, 0);
        for (m, _) in &self.queue {
            match m {
                Msg::Output { rank: r, stream: s, data }
                    if *r == rank
                        && *s == stream
                        && (count == 0
                            || (len < MERGE_MAX && len + data.len() <= OUTPUT_MSG_MAX)) =>
                {
                    count += 1;
                    len += data.len();
                }
                _ => break,
            }
        }
        let need = len.clamp(1, OUTPUT_WINDOW as usize) as u64;
        if self.credit < need {
            if let Some(i) = self.queue.iter().position(|(m, _)| may_overtake(m)) {
                return self.message_at(i);
            }
            if self.unflushed {
                return self.flush();
            }
            self.starved = true;
            return Next::Wait;
        }
        self.credit -= need;
        let parts = self
            .queue
            .drain(..count)
            .filter_map(|(m, d)| match m {
                Msg::Output { data, .. } => Some((data, d)),
                _ => None,
            })
            .collect();
        if self.linger.is_none() {
            self.linger = Some(now + OUTPUT_LINGER.as_secs_f64());
        }
        self.unflushed = true;
        Next::Output { rank, stream, len, parts }
    }

    fn message_at(&mut self, i: usize) -> Next<D> {
        match self.queue.remove(i) {
            Some((m, d)) => {
                self.urgent = true;
                self.unflushed = true;
                Next::Message(m, d)
            }
            None => Next::Wait,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libi::msg::KvsTop;

    fn out(rank: u32, n: usize) -> Msg {
        Msg::Output { rank, stream: Stream::Stdout, data: Bytes::from(vec![b'x'; n]) }
    }

    fn get(k: &str) -> Msg {
        Msg::Get { key: k.into() }
    }

    fn fence() -> Msg {
        Msg::FenceIn { epoch: 1, pairs: Vec::new(), top: KvsTop { rank: 0, bytes: 0 } }
    }

    /// What `next` says, in short: M(token) for a message, O(rank, len, tokens), F, W, D.
    fn step(q: &mut UpQueue<u32>, now: f64) -> String {
        match q.next(now) {
            Next::Message(_, d) => format!("M{d}"),
            Next::Output { rank, len, parts, .. } => {
                let ds: Vec<String> = parts.iter().map(|(_, d)| d.to_string()).collect();
                format!("O{rank}:{len}:{}", ds.join(","))
            }
            Next::Flush => "F".into(),
            Next::Wait => "W".into(),
            Next::Done => "D".into(),
        }
    }

    fn steps(q: &mut UpQueue<u32>, now: f64, n: usize) -> Vec<String> {
        (0..n).map(|_| step(q, now)).collect()
    }

    /// A fence's parts must reach the parent before its FenceIn: they overtake output alike.
    #[test]
    fn fence_parts_overtake_with_the_fence() {
        let top = KvsTop::default();
        let part = Msg::FenceInPart { epoch: 1, pairs: vec![], top };
        let close = Msg::FenceIn { epoch: 1, pairs: vec![], top };
        assert!(may_overtake(&close));
        assert!(may_overtake(&part));
    }

    #[test]
    fn output_lingers_for_company_then_is_flushed() {
        let mut q = UpQueue::default();
        q.push(out(3, 10), 1);
        assert_eq!(steps(&mut q, 5.0, 2), ["O3:10:1", "W"]);
        assert_eq!(q.poll_timeout(), Some(5.0 + OUTPUT_LINGER.as_secs_f64()));
        // More output within the linger travels in the same write.
        q.push(out(4, 5), 2);
        assert_eq!(steps(&mut q, 5.0005, 2), ["O4:5:2", "W"]);
        assert_eq!(q.poll_timeout(), Some(5.001));
        assert_eq!(steps(&mut q, 5.001, 2), ["F", "W"]);
        assert_eq!(q.poll_timeout(), None);
    }

    #[test]
    fn anything_but_output_is_flushed_at_once_with_the_output_before_it() {
        let mut q = UpQueue::default();
        q.push(out(0, 10), 1);
        q.push(Msg::Kill, 2);
        assert_eq!(steps(&mut q, 1.0, 4), ["O0:10:1", "M2", "F", "W"]);
    }

    #[test]
    fn a_rank_streams_output_back_to_back_is_merged_up_to_the_cap() {
        let mut q = UpQueue::default();
        for i in 0..3 {
            q.push(out(1, 100), i);
        }
        q.push(out(2, 1), 3);
        q.push(out(1, 1), 4);
        let mut err = out(1, 1);
        if let Msg::Output { stream, .. } = &mut err {
            *stream = Stream::Stderr;
        }
        q.push(err, 5);
        assert_eq!(steps(&mut q, 0.0, 4), ["O1:300:0,1,2", "O2:1:3", "O1:1:4", "O1:1:5"]);
        // A frame holds at most OUTPUT_MSG_MAX bytes; one larger part goes alone.
        let big = OUTPUT_MSG_MAX / 2 + 1;
        let mut q = UpQueue::new(u64::MAX);
        for i in 0..3 {
            q.push(out(1, big), i);
        }
        assert_eq!(
            steps(&mut q, 0.0, 3),
            [format!("O1:{big}:0"), format!("O1:{big}:1"), format!("O1:{big}:2")]
        );
    }

    #[test]
    fn requests_overtake_output_waiting_for_credit_and_the_rest_waits() {
        let mut q = UpQueue::new(50);
        q.push(out(0, 40), 1);
        q.push(out(0, 0), 2);
        q.push(out(1, 40), 3);
        q.push(Msg::Kill, 4);
        q.push(get("k"), 5);
        q.push(fence(), 6);
        // 40 bytes fit; the next 40 do not: the Get and the FenceIn go first (in their
        // order), then what is encoded is flushed and the queue waits for credit; the Kill
        // stays behind the output queued before it.
        assert_eq!(steps(&mut q, 0.0, 5), ["O0:40:1,2", "M5", "M6", "F", "W"]);
        assert!(q.starved());
        assert_eq!(step(&mut q, 0.0), "W");
        q.add_credit(30);
        assert_eq!(steps(&mut q, 0.1, 4), ["O1:40:3", "M4", "F", "W"]);
        assert!(!q.starved());
    }

    #[test]
    fn an_empty_output_takes_one_byte_of_credit() {
        let mut q = UpQueue::new(0);
        q.push(out(0, 0), 1);
        assert_eq!(step(&mut q, 0.0), "W");
        assert!(q.starved());
        q.add_credit(1);
        assert_eq!(step(&mut q, 0.0), "O0:0:1");
    }

    #[test]
    fn closing_flushes_what_lingers_then_is_done() {
        let mut q = UpQueue::default();
        q.push(out(0, 1), 1);
        assert_eq!(step(&mut q, 0.0), "O0:1:1");
        q.close();
        assert_eq!(q.poll_timeout(), None);
        assert_eq!(steps(&mut q, 0.0, 3), ["F", "D", "D"]);
        // Closed while output waits for credit: done only once it is written.
        let mut q = UpQueue::new(0);
        q.push(out(0, 5), 1);
        q.close();
        assert_eq!(step(&mut q, 0.0), "W");
        q.add_credit(5);
        assert_eq!(steps(&mut q, 0.0, 3), ["O0:5:1", "F", "D"]);
    }
}
