//! Per-connection PMI server state machine (spec §1, §3, §4, §12, §14).
//!
//! # Decisions (where the spec leaves a choice)
//!
//! * Framing: requests are split on `\n`. Empty lines are ignored. A message starting
//!   `mcmd=` must be exactly the line `mcmd=spawn`; the block is accumulated until the
//!   `endcmd` of the segment whose `spawnssofar == totspawns` and then given to
//!   [`parse_spawn`]. A segment without usable `spawnssofar`/`totspawns`, more than
//!   [`MAX_TOTSPAWNS`] segments or any other `mcmd=` are **fatal** (the framing cannot be
//!   resynchronised). A complete block whose content is invalid (limits, missing fields) gets
//!   `cmd=spawn_result rc=-1 msg=malformed_spawn` plus a non-fatal `ProtocolError`.
//! * A line or spawn block longer than [`MAX_REQUEST_LEN`] (with or without its newline) is a
//!   fatal `TooLong`; everything buffered is dropped and later input ignored. At most
//!   `MAX_REQUEST_LEN` bytes are ever buffered.
//! * Malformed lines (not UTF-8, not starting `cmd=`, bad token, missing field, bad number)
//!   are **non-fatal** and get an error reply, because MPICH clients are lock-step and would
//!   otherwise hang: `cmd=<reply name> rc=-1 msg=malformed_request`, where the reply name is
//!   the one the client waits for when the line starts with a known `cmd=NAME` (e.g.
//!   `put_result` for `put`), `NAME_result` for other names, and `error` when there is no
//!   readable name. A malformed `abort` still aborts (exit code -1).
//! * Unknown command: `cmd=<name>_result rc=-1 msg=unknown_command` (name cut to 64 bytes)
//!   plus a non-fatal `ProtocolError` with [`ParseError::UnknownCommand`].
//! * `init`: any `pmi_version=1` gets `pmi_version=1 pmi_subversion=1 rc=0` (phase
//!   Initialized); `pmi_version=2` (PMI-2 clients, spec §10.1) gets
//!   `cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0` (phase Initialized); any
//!   other version gets `cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1` and the
//!   phase is unchanged.
//! * Requests are accepted in any phase (no "init first" check); `init` after `finalize`
//!   re-initializes. After `abort` all input is ignored, as is input after a fatal error.
//! * `get_ranks2hosts`: PSMGMT's minimal `cmd=put_ranks2hosts 0 0` (no host list in
//!   [`ConnConfig`]). `getbyidx`: always `rc=1 reason=no_more_keyvals`.
//! * `put` checks, in order: kvsname (`rc=-1 msg=kvsname_mismatch`), empty key
//!   (`rc=-1 msg=empty_key`), key length > [`KEYLEN_MAX`] (`rc=-1 msg=key_too_long`), value
//!   length > [`VALLEN_MAX`] (`rc=-1 msg=value_too_long`), `PMI_` prefix
//!   (`rc=1 msg=reserved_key`, spec §3.7).
//! * `get` of another kvsname, an empty key or a key longer than [`KEYLEN_MAX`] is answered
//!   immediately as missing; `answer_get` with an empty value also answers missing
//!   (spec §12.5).
//! * `initack` is answered from the `ConnConfig` (rank/size); its `pmiid` is not checked.
//!
//! # PMI-2 (spec §10)
//!
//! * Framing is decided **per message** (spec §1): at the start of a message, a first byte
//!   that is an ASCII digit or a space starts a PMI-2 frame (6-byte length, left- or
//!   right-aligned, then the body); anything else is a PMI-1 line (so `cmd=`, `mcmd=` and
//!   also garbage, which keeps its PMI-1 error reply). A header that is not a length is a
//!   fatal `BadToken`; a body longer than [`v2::MAX_FRAME_LEN`] a fatal `TooLong`.
//! * Replies use the alignment of the last frame header the client sent, and echo the
//!   request's `thrid=`.
//! * A body that does not parse gets `cmd=<name>-response;rc=-1;errmsg=malformed_request;`
//!   (`error-response` when no name is readable) and a non-fatal `ProtocolError`; a malformed
//!   `abort` still aborts. Unknown command: `cmd=<name>-response;rc=-1;errmsg=unknown_command;`
//!   plus a non-fatal `ProtocolError` with [`ParseError::UnknownCommand`]. `ring` is answered
//!   `rc=-1;errmsg=ring_unsupported` (no action).
//! * `fullinit` → [`v2::Reply::FullInit`] from the `ConnConfig` (the `pmirank` sent is not
//!   checked; `spawner-jobid` in a spawned job). `job-getid` → the kvsname.
//!   `info-getjobattr` of `universeSize` is answered here; other keys become
//!   [`Action::GetJobAttr`]. `job-connect`/`job-disconnect` → `rc=0;kvscopy=0;`.
//! * `kvs-put` and `info-putnodeattr` check: empty key (`rc=-1 errmsg=empty_key`), key longer
//!   than [`v2::KEYLEN_MAX`] (`key_too_long`), value longer than [`v2::VALLEN_MAX`]
//!   (`value_too_long`); `PMI_` keys are allowed (spec §10.2). `kvs-get`'s `jobid`/`srcid`
//!   are ignored (one KVS per job); an empty or over-long key is answered missing at once.
//!   `kvs-fence` is [`Action::BarrierIn`] and is answered only by [`Connection::barrier_out`]
//!   (blocking fence, so a later miss is final: `rc=0;found=FALSE;`).
//! * Answers given later by the driver (`answer_*`, `barrier_out`) are encoded in the
//!   protocol of the request they answer: the connection keeps its outstanding requests
//!   (protocol, `thrid`, key) and matches an answer to the oldest one of its kind (and key).
//!   An answer with no outstanding request uses the protocol of the last message received.

use crate::v1::{
    parse_request, parse_spawn, GetMiss, ParseError, Reply, Request, SpawnCmd, KEYLEN_MAX,
    MAX_REQUEST_LEN, MAX_TOTSPAWNS, VALLEN_MAX,
};
use crate::v2;

/// What a connection knows about its rank without asking the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnConfig {
    pub rank: u32,
    pub size: u32,
    pub appnum: i32,
    pub kvsname: String,
    pub universe_size: i32,
    /// The spawning job's id when this job was spawned (PMI-2 `spawner-jobid`).
    pub spawner: Option<String>,
}

/// Where the connection is in its life (for EOF classification).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No `init` yet (a non-MPI program may exit without ever speaking).
    Fresh,
    /// `init` seen, no `finalize` yet.
    Initialized,
    /// `finalize` answered.
    Finalized,
    /// `abort` received.
    Aborted,
}

/// How the peer's EOF is to be judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eof {
    /// Never initialized, finalized, or aborted: nothing to report.
    Clean,
    /// Closed between `init` and `finalize`: the job must fail (spec §12.2).
    BeforeFinalize,
}

/// Something the driver must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write these bytes to the rank.
    Send(Vec<u8>),
    /// Store the pair (the reply has already been queued as `Send`).
    /// The value's bytes (a PMI-1 value need not be UTF-8).
    Put { key: String, value: Vec<u8> },
    /// Look the key up; answer with [`Connection::answer_get`].
    Get { key: String },
    /// The rank entered a fence; when the fence completes write [`Connection::barrier_out`].
    BarrierIn,
    /// `finalize` answered (reply queued as `Send`).
    Finalized,
    /// Kill the job with this exit code.
    Abort { exitcode: i32, message: Option<String> },
    /// Answer with [`Connection::answer_spawn`].
    Spawn { cmds: Vec<SpawnCmd> },
    /// Answer with [`Connection::answer_publish`].
    Publish { service: String, port: String },
    /// Answer with [`Connection::answer_unpublish`].
    Unpublish { service: String },
    /// Answer with [`Connection::answer_lookup`].
    Lookup { service: String },
    /// PMI-2 `info-putnodeattr`: store the pair in the node-local attribute space (the
    /// reply has been queued as `Send`). Node attributes never leave the node.
    PutNodeAttr { key: String, value: String },
    /// PMI-2 `info-getnodeattr`: answer with [`Connection::answer_node_attr`]; with `wait`
    /// and the key absent, answer once a local rank puts it.
    GetNodeAttr { key: String, wait: bool },
    /// PMI-2 `info-getjobattr` of a key the connection cannot answer itself: answer with
    /// [`Connection::answer_job_attr`] from the server-owned pairs (`PMI_process_mapping`, …).
    GetJobAttr { key: String },
    /// Malformed input. `excerpt` is a printable, escaped prefix of the offending line
    /// (≤ 80 chars). Where the protocol allows, an error reply has been queued as `Send`
    /// before this action. `fatal`: the driver must close the connection (and fail the job
    /// if the rank had initialized).
    ProtocolError { error: ParseError, excerpt: String, fatal: bool },
}

/// Spawn block being accumulated.
#[derive(Debug, Default)]
struct SpawnAcc {
    block: Vec<u8>,
    sofar: Option<u32>,
    tot: Option<u32>,
    segments: u32,
}

/// The protocol an answer must be encoded in.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Proto {
    V1,
    V2 { thrid: Option<String> },
}

/// What an outstanding request waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Get(String),
    Barrier,
    Publish,
    Unpublish,
    Lookup,
    Spawn,
    NodeAttr(String),
    JobAttr(String),
}

impl Kind {
    fn same_kind(&self, other: &Kind) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

/// A request handed to the driver and not answered yet.
#[derive(Debug, Clone)]
struct Pending {
    kind: Kind,
    proto: Proto,
}

/// Requests handed to the driver and not answered yet, oldest first. The first is held in
/// place: a PMI client has one request outstanding (PMI-1 and PMI-2 are lock-step), and a
/// server holds a connection per rank; a separate allocation for it was a cache miss on
/// every answer. `first` is empty only when `more` is.
#[derive(Debug, Default)]
struct Outstanding {
    first: Option<Pending>,
    more: std::collections::VecDeque<Pending>,
}

impl Outstanding {
    fn push(&mut self, p: Pending) {
        if self.first.is_none() {
            self.first = Some(p);
        } else {
            self.more.push_back(p);
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Pending> {
        self.first.iter().chain(self.more.iter())
    }

    fn remove(&mut self, i: usize) -> Option<Pending> {
        if i == 0 {
            let p = self.first.take();
            self.first = self.more.pop_front();
            p
        } else {
            self.more.remove(i - 1)
        }
    }

    fn clear(&mut self) {
        self.first = None;
        self.more.clear();
    }
}

/// One rank's PMI connection (PMI-1 and PMI-2, detected per message), server side. Feed it
/// bytes with [`Connection::receive`].
#[derive(Debug)]
pub struct Connection {
    cfg: ConnConfig,
    phase: Phase,
    /// Partial line (no `\n` yet), or the partial PMI-2 header / body.
    buf: Vec<u8>,
    /// A PMI-1 spawn (`mcmd=`) block being accumulated (boxed: a connection per rank, and
    /// spawns are rare).
    spawn: Option<Box<SpawnAcc>>,
    /// A fatal protocol error happened: input is ignored.
    failed: bool,
    /// A PMI-2 frame is being accumulated in `buf`.
    in_frame: bool,
    /// Body length of that frame, once its header is complete.
    frame_len: Option<usize>,
    /// Alignment of the last PMI-2 header received (replies use it).
    align: v2::Align,
    /// Whether the last complete message was PMI-2.
    last_v2: bool,
    /// Requests handed to the driver, oldest first.
    pending: Outstanding,
}

/// Printable, escaped prefix of `line`, at most 80 chars.
pub fn excerpt(line: &[u8]) -> String {
    let mut s = String::new();
    for &b in line {
        let e = b.escape_ascii().to_string();
        if s.len() + e.len() > 80 {
            break;
        }
        s.push_str(&e);
    }
    s
}

/// The reply command a lock-step client waits for after request `cmd`.
fn reply_name(cmd: &str) -> String {
    match cmd {
        "init" => "response_to_init",
        "initack" => "initack",
        "get_maxes" => "maxes",
        "get_appnum" => "appnum",
        "get_my_kvsname" => "my_kvsname",
        "get_universe_size" => "universe_size",
        "put" => "put_result",
        "get" => "get_result",
        "barrier_in" => "barrier_out",
        "finalize" => "finalize_ack",
        "publish_name" => "publish_result",
        "unpublish_name" => "unpublish_result",
        "lookup_name" => "lookup_result",
        "getbyidx" => "getbyidx_results",
        "get_ranks2hosts" => "put_ranks2hosts",
        other => {
            let mut end = other.len().min(64);
            while !other.is_char_boundary(end) {
                end -= 1;
            }
            return format!("{}_result", &other[..end]);
        }
    }
    .to_owned()
}

/// The `NAME` of a line starting `cmd=NAME`, if readable.
fn cmd_name(line: &[u8]) -> Option<&str> {
    let rest = line.strip_prefix(b"cmd=")?;
    let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
    let name = std::str::from_utf8(rest.get(..end)?).ok()?;
    (!name.is_empty()).then_some(name)
}

fn send(out: &mut Vec<Action>, r: &Reply) {
    out.push(Action::Send(r.to_bytes()));
}

impl Connection {
    pub fn new(cfg: ConnConfig) -> Self {
        Connection {
            cfg,
            phase: Phase::Fresh,
            buf: Vec::new(),
            spawn: None,
            failed: false,
            in_frame: false,
            frame_len: None,
            align: v2::Align::Right,
            last_v2: false,
            pending: Outstanding::default(),
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn config(&self) -> &ConnConfig {
        &self.cfg
    }

    /// Bytes currently buffered (partial line plus incomplete spawn block); never more than
    /// [`MAX_REQUEST_LEN`].
    pub fn buffered(&self) -> usize {
        self.buf.len() + self.spawn.as_ref().map_or(0, |s| s.block.len())
    }

    /// Whether a fatal protocol error has been reported (input is now ignored).
    pub fn failed(&self) -> bool {
        self.failed
    }

    /// Judge the peer's EOF: `BeforeFinalize` iff the rank is between `init` and `finalize`.
    /// Buffered partial input is discarded.
    pub fn eof(&mut self) -> Eof {
        self.buf = Vec::new();
        self.spawn = None;
        self.in_frame = false;
        self.frame_len = None;
        self.pending.clear();
        match self.phase {
            Phase::Initialized => Eof::BeforeFinalize,
            Phase::Fresh | Phase::Finalized | Phase::Aborted => Eof::Clean,
        }
    }

    fn ignoring(&self) -> bool {
        self.failed || self.phase == Phase::Aborted
    }

    /// Feed bytes as read from the socket (any split: partial lines, several lines, a spawn
    /// block in many writes). Appends actions in order.
    pub fn receive(&mut self, data: &[u8], out: &mut Vec<Action>) {
        let mut rest = data;
        while !rest.is_empty() && !self.ignoring() {
            if self.buf.is_empty() && self.spawn.is_none() && !self.in_frame {
                self.in_frame = rest.first().is_some_and(|&b| b.is_ascii_digit() || b == b' ');
            }
            if self.in_frame {
                rest = self.frame_bytes(rest, out);
                continue;
            }
            let pending = self.buffered();
            match rest.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    let (chunk, tail) = rest.split_at(i);
                    rest = tail.get(1..).unwrap_or(&[]);
                    if pending + chunk.len() > MAX_REQUEST_LEN {
                        self.too_long(chunk, out);
                        return;
                    }
                    if self.buf.is_empty() {
                        self.line(chunk, out);
                    } else {
                        let mut line = std::mem::take(&mut self.buf);
                        line.extend_from_slice(chunk);
                        self.line(&line, out);
                        line.clear();
                        if self.buf.capacity() == 0 && line.capacity() <= 64 * 1024 {
                            self.buf = line; // keep a modest allocation for reuse
                        }
                    }
                }
                None => {
                    if pending + rest.len() > MAX_REQUEST_LEN {
                        self.too_long(rest, out);
                        return;
                    }
                    self.buf.extend_from_slice(rest);
                    return;
                }
            }
        }
    }

    /// Consume bytes of the PMI-2 frame being accumulated; returns the unconsumed rest.
    fn frame_bytes<'a>(&mut self, rest: &'a [u8], out: &mut Vec<Action>) -> &'a [u8] {
        let mut rest = rest;
        if self.frame_len.is_none() {
            // Fast path: a whole frame at the start of `rest`.
            if self.buf.is_empty() {
                if let Some(h) = rest.get(..v2::HEADER_LEN) {
                    match v2::parse_header(h) {
                        Ok((len, align)) => {
                            if let Some(body) = rest.get(v2::HEADER_LEN..v2::HEADER_LEN + len) {
                                self.align = align;
                                self.in_frame = false;
                                self.frame(body, out);
                                return rest.get(v2::HEADER_LEN + len..).unwrap_or(&[]);
                            }
                        }
                        Err(e) => {
                            self.fatal(e, h, out);
                            return &[];
                        }
                    }
                }
            }
            let need = v2::HEADER_LEN.saturating_sub(self.buf.len()).min(rest.len());
            let (head, tail) = rest.split_at(need);
            self.buf.extend_from_slice(head);
            rest = tail;
            if self.buf.len() < v2::HEADER_LEN {
                return rest;
            }
            match v2::parse_header(&self.buf) {
                Ok((len, align)) => {
                    self.frame_len = Some(len);
                    self.align = align;
                    self.buf.clear();
                }
                Err(e) => {
                    let hdr = std::mem::take(&mut self.buf);
                    self.fatal(e, &hdr, out);
                    return &[];
                }
            }
        }
        let len = self.frame_len.unwrap_or(0);
        let need = len.saturating_sub(self.buf.len()).min(rest.len());
        let (head, tail) = rest.split_at(need);
        self.buf.extend_from_slice(head);
        if self.buf.len() >= len {
            let body = std::mem::take(&mut self.buf);
            self.frame_len = None;
            self.in_frame = false;
            self.frame(&body, out);
        }
        tail
    }

    fn too_long(&mut self, chunk: &[u8], out: &mut Vec<Action>) {
        let start: &[u8] = match &self.spawn {
            Some(s) if !s.block.is_empty() => &s.block,
            _ if !self.buf.is_empty() => &self.buf,
            _ => chunk,
        };
        let ex = excerpt(start);
        self.buf = Vec::new();
        self.spawn = None;
        self.failed = true;
        out.push(Action::ProtocolError {
            error: ParseError::TooLong(MAX_REQUEST_LEN),
            excerpt: ex,
            fatal: true,
        });
    }

    fn fatal(&mut self, error: ParseError, line: &[u8], out: &mut Vec<Action>) {
        self.buf = Vec::new();
        self.spawn = None;
        self.in_frame = false;
        self.frame_len = None;
        self.failed = true;
        out.push(Action::ProtocolError { error, excerpt: excerpt(line), fatal: true });
    }

    /// One complete line (without `\n`).
    fn line(&mut self, line: &[u8], out: &mut Vec<Action>) {
        self.last_v2 = false;
        if self.spawn.is_some() {
            self.spawn_line(line, out);
            return;
        }
        if line.is_empty() {
            return;
        }
        if line.starts_with(b"mcmd=") {
            if line != b"mcmd=spawn" {
                self.fatal(ParseError::Spawn("unsupported mcmd".into()), line, out);
                return;
            }
            let mut acc = SpawnAcc::default();
            acc.block.extend_from_slice(line);
            acc.block.push(b'\n');
            self.spawn = Some(Box::new(acc));
            return;
        }
        match parse_request(line) {
            Ok(req) => self.request(req, line, out),
            Err(error) => {
                let name = cmd_name(line);
                let reply = match name {
                    Some(n) => reply_name(n),
                    None => "error".to_owned(),
                };
                let is_abort = name == Some("abort");
                if !is_abort {
                    send(
                        out,
                        &Reply::Error { cmd: reply, rc: -1, msg: "malformed_request".into() },
                    );
                }
                out.push(Action::ProtocolError { error, excerpt: excerpt(line), fatal: false });
                if is_abort {
                    self.phase = Phase::Aborted;
                    out.push(Action::Abort { exitcode: -1, message: None });
                }
            }
        }
    }

    fn spawn_line(&mut self, line: &[u8], out: &mut Vec<Action>) {
        let Some(acc) = self.spawn.as_mut() else {
            return;
        };
        acc.block.extend_from_slice(line);
        acc.block.push(b'\n');
        let num = |v: &[u8]| std::str::from_utf8(v).ok().and_then(|s| s.parse::<u32>().ok());
        if let Some(v) = line.strip_prefix(b"spawnssofar=") {
            acc.sofar = num(v);
        } else if let Some(v) = line.strip_prefix(b"totspawns=") {
            acc.tot = num(v);
        } else if line == b"endcmd" {
            acc.segments += 1;
            let (sofar, tot) = match (acc.sofar.take(), acc.tot.take()) {
                (Some(s), Some(t)) if (1..=MAX_TOTSPAWNS).contains(&t) && s <= t => (s, t),
                _ => {
                    let err = ParseError::Spawn(
                        "segment without valid spawnssofar/totspawns (≤ 1024)".into(),
                    );
                    self.fatal(err, line, out);
                    return;
                }
            };
            if acc.segments > MAX_TOTSPAWNS {
                self.fatal(ParseError::Spawn("too many segments".into()), line, out);
                return;
            }
            if sofar == tot {
                let block = std::mem::take(&mut acc.block);
                self.spawn = None;
                match parse_spawn(&block) {
                    Ok(Request::Spawn { cmds }) => {
                        self.pend(Kind::Spawn, Proto::V1);
                        out.push(Action::Spawn { cmds })
                    }
                    Ok(_) => {}
                    Err(error) => {
                        send(
                            out,
                            &Reply::Error {
                                cmd: "spawn_result".into(),
                                rc: -1,
                                msg: "malformed_spawn".into(),
                            },
                        );
                        let error = match error {
                            ParseError::Spawn(_) => error,
                            e => ParseError::Spawn(e.to_string()),
                        };
                        out.push(Action::ProtocolError {
                            error,
                            excerpt: excerpt(&block),
                            fatal: false,
                        });
                    }
                }
            }
        }
    }

    fn request(&mut self, req: Request, line: &[u8], out: &mut Vec<Action>) {
        match req {
            Request::Init { version: 2, .. } => {
                send(out, &Reply::ResponseToInit { version: 2, subversion: 0, rc: 0 });
                self.phase = Phase::Initialized;
            }
            Request::Init { version, .. } => {
                let rc = if version == 1 { 0 } else { -1 };
                send(out, &Reply::ResponseToInit { version: 1, subversion: 1, rc });
                if rc == 0 {
                    self.phase = Phase::Initialized;
                }
            }
            Request::InitAck { .. } => {
                send(out, &Reply::InitAck { rank: self.cfg.rank, size: self.cfg.size })
            }
            Request::GetMaxes => send(
                out,
                &Reply::Maxes {
                    kvsname_max: crate::v1::KVSNAME_MAX,
                    keylen_max: KEYLEN_MAX,
                    vallen_max: VALLEN_MAX,
                },
            ),
            Request::GetAppnum => send(out, &Reply::Appnum { appnum: self.cfg.appnum }),
            Request::GetMyKvsname => {
                send(out, &Reply::MyKvsname { kvsname: self.cfg.kvsname.clone() })
            }
            Request::GetUniverseSize => {
                send(out, &Reply::UniverseSize { size: self.cfg.universe_size })
            }
            Request::Put { kvsname, key, value } => {
                let refuse = if kvsname != self.cfg.kvsname {
                    Some((-1, "kvsname_mismatch"))
                } else if key.is_empty() {
                    Some((-1, "empty_key"))
                } else if key.len() > KEYLEN_MAX {
                    Some((-1, "key_too_long"))
                } else if value.len() > VALLEN_MAX {
                    Some((-1, "value_too_long"))
                } else if key.starts_with("PMI_") {
                    Some((1, "reserved_key"))
                } else {
                    None
                };
                match refuse {
                    Some((rc, msg)) => send(out, &Reply::PutResult { rc, msg: msg.into() }),
                    None => {
                        send(out, &Reply::PutResult { rc: 0, msg: "success".into() });
                        out.push(Action::Put { key, value });
                    }
                }
            }
            Request::Get { kvsname, key } => {
                if kvsname != self.cfg.kvsname || key.is_empty() || key.len() > KEYLEN_MAX {
                    send(out, &Reply::GetResult { value: Err(GetMiss { key }) });
                } else {
                    self.pend(Kind::Get(key.clone()), Proto::V1);
                    out.push(Action::Get { key });
                }
            }
            Request::BarrierIn { .. } => {
                self.pend(Kind::Barrier, Proto::V1);
                out.push(Action::BarrierIn)
            }
            Request::Finalize => {
                send(out, &Reply::FinalizeAck);
                self.phase = Phase::Finalized;
                out.push(Action::Finalized);
            }
            Request::Abort { exitcode, message } => {
                self.phase = Phase::Aborted;
                out.push(Action::Abort { exitcode, message });
            }
            Request::PublishName { service, port } => {
                self.pend(Kind::Publish, Proto::V1);
                out.push(Action::Publish { service, port })
            }
            Request::UnpublishName { service } => {
                self.pend(Kind::Unpublish, Proto::V1);
                out.push(Action::Unpublish { service })
            }
            Request::LookupName { service } => {
                self.pend(Kind::Lookup, Proto::V1);
                out.push(Action::Lookup { service })
            }
            Request::GetByIdx { .. } => send(out, &Reply::GetByIdxResult { entry: None }),
            Request::GetRanks2Hosts => send(out, &Reply::Ranks2Hosts { hosts: Vec::new() }),
            Request::Spawn { cmds } => {
                self.pend(Kind::Spawn, Proto::V1);
                out.push(Action::Spawn { cmds })
            }
            Request::Unknown { cmd } => {
                send(
                    out,
                    &Reply::Error { cmd: reply_name(&cmd), rc: -1, msg: "unknown_command".into() },
                );
                out.push(Action::ProtocolError {
                    error: ParseError::UnknownCommand(cmd.chars().take(64).collect()),
                    excerpt: excerpt(line),
                    fatal: false,
                });
            }
        }
    }

    fn pend(&mut self, kind: Kind, proto: Proto) {
        self.pending.push(Pending { kind, proto });
    }

    /// The protocol of the oldest outstanding request equal to `kind` (else of its kind);
    /// without one, the protocol of the last message.
    fn answered(&mut self, kind: &Kind) -> Proto {
        let pos = self
            .pending
            .iter()
            .position(|p| p.kind == *kind)
            .or_else(|| self.pending.iter().position(|p| p.kind.same_kind(kind)));
        match pos.and_then(|i| self.pending.remove(i)) {
            Some(p) => p.proto,
            None if self.last_v2 => Proto::V2 { thrid: None },
            None => Proto::V1,
        }
    }

    fn v2_bytes(&self, r: &v2::Reply, thrid: Option<&str>) -> Vec<u8> {
        r.to_frame(thrid, self.align)
    }

    fn send_v2(&self, out: &mut Vec<Action>, r: &v2::Reply, thrid: Option<&str>) {
        out.push(Action::Send(self.v2_bytes(r, thrid)));
    }

    /// One complete PMI-2 frame body.
    fn frame(&mut self, body: &[u8], out: &mut Vec<Action>) {
        self.last_v2 = true;
        match v2::parse_request(body) {
            Ok((req, thrid)) => self.request_v2(req, thrid, body, out),
            Err(error) => {
                let name = body
                    .strip_prefix(b"cmd=")
                    .and_then(|r| r.split(|&b| b == b';').next())
                    .and_then(|n| std::str::from_utf8(n).ok())
                    .filter(|n| !n.is_empty());
                if name == Some("abort") {
                    out.push(Action::ProtocolError { error, excerpt: excerpt(body), fatal: false });
                    self.phase = Phase::Aborted;
                    out.push(Action::Abort { exitcode: -1, message: None });
                    return;
                }
                let cmd = name.map_or_else(|| "error-response".to_owned(), v2::reply_name);
                let r = v2::Reply::Error { cmd, rc: -1, errmsg: "malformed_request".into() };
                self.send_v2(out, &r, None);
                let error = match error {
                    ParseError::Spawn(_) => error,
                    e if name == Some("spawn") => ParseError::Spawn(e.to_string()),
                    e => e,
                };
                out.push(Action::ProtocolError { error, excerpt: excerpt(body), fatal: false });
            }
        }
    }

    /// `Some(error reply)` if a PMI-2 key/value pair must be refused.
    fn refuse_pair(cmd: &str, key: &str, value: &str) -> Option<v2::Reply> {
        let msg = if key.is_empty() {
            "empty_key"
        } else if key.len() > v2::KEYLEN_MAX {
            "key_too_long"
        } else if value.len() > v2::VALLEN_MAX {
            "value_too_long"
        } else {
            return None;
        };
        Some(v2::Reply::Error { cmd: v2::reply_name(cmd), rc: -1, errmsg: msg.into() })
    }

    fn request_v2(
        &mut self,
        req: v2::Request,
        thrid: Option<String>,
        body: &[u8],
        out: &mut Vec<Action>,
    ) {
        use v2::{Reply as R, Request as Q};
        let t = thrid.as_deref();
        let v2p = || Proto::V2 { thrid: thrid.clone() };
        let bad_key = |k: &str| k.is_empty() || k.len() > v2::KEYLEN_MAX;
        match req {
            Q::FullInit { .. } => {
                self.phase = Phase::Initialized;
                let r = R::FullInit {
                    rank: i32::try_from(self.cfg.rank).unwrap_or(i32::MAX),
                    size: i32::try_from(self.cfg.size).unwrap_or(i32::MAX),
                    appnum: self.cfg.appnum,
                    spawner_jobid: self.cfg.spawner.clone(),
                    debugged: false,
                    verbose: false,
                };
                self.send_v2(out, &r, t);
            }
            Q::JobGetId => self.send_v2(out, &R::JobGetId { jobid: self.cfg.kvsname.clone() }, t),
            Q::KvsPut { key, value } => match Self::refuse_pair("kvs-put", &key, &value) {
                Some(r) => self.send_v2(out, &r, t),
                None => {
                    self.send_v2(out, &R::KvsPut, t);
                    out.push(Action::Put { key, value: value.into_bytes() });
                }
            },
            Q::KvsFence => {
                self.pend(Kind::Barrier, v2p());
                out.push(Action::BarrierIn);
            }
            Q::KvsGet { key, .. } => {
                if bad_key(&key) {
                    self.send_v2(out, &R::KvsGet { value: None }, t);
                } else {
                    self.pend(Kind::Get(key.clone()), v2p());
                    out.push(Action::Get { key });
                }
            }
            Q::GetJobAttr { key } => {
                if key == "universeSize" {
                    let value = Some(self.cfg.universe_size.to_string());
                    self.send_v2(out, &R::GetJobAttr { value }, t);
                } else if bad_key(&key) {
                    self.send_v2(out, &R::GetJobAttr { value: None }, t);
                } else {
                    self.pend(Kind::JobAttr(key.clone()), v2p());
                    out.push(Action::GetJobAttr { key });
                }
            }
            Q::PutNodeAttr { key, value } => {
                match Self::refuse_pair("info-putnodeattr", &key, &value) {
                    Some(r) => self.send_v2(out, &r, t),
                    None => {
                        self.send_v2(out, &R::PutNodeAttr, t);
                        out.push(Action::PutNodeAttr { key, value });
                    }
                }
            }
            Q::GetNodeAttr { key, wait } => {
                if bad_key(&key) {
                    self.send_v2(out, &R::GetNodeAttr { value: None }, t);
                } else {
                    self.pend(Kind::NodeAttr(key.clone()), v2p());
                    out.push(Action::GetNodeAttr { key, wait });
                }
            }
            Q::Finalize => {
                self.send_v2(out, &R::Finalize, t);
                self.phase = Phase::Finalized;
                out.push(Action::Finalized);
            }
            Q::Abort { exitcode, message, .. } => {
                self.phase = Phase::Aborted;
                out.push(Action::Abort { exitcode: exitcode.unwrap_or(-1), message });
            }
            Q::Spawn { cmds } => {
                self.pend(Kind::Spawn, v2p());
                out.push(Action::Spawn { cmds });
            }
            Q::NamePublish { name, port } => {
                self.pend(Kind::Publish, v2p());
                out.push(Action::Publish { service: name, port });
            }
            Q::NameUnpublish { name } => {
                self.pend(Kind::Unpublish, v2p());
                out.push(Action::Unpublish { service: name });
            }
            Q::NameLookup { name } => {
                self.pend(Kind::Lookup, v2p());
                out.push(Action::Lookup { service: name });
            }
            Q::JobConnect { .. } => self.send_v2(out, &R::JobConnect, t),
            Q::JobDisconnect { .. } => self.send_v2(out, &R::JobDisconnect, t),
            Q::Ring { .. } => {
                let r = R::Error {
                    cmd: "ring-response".into(),
                    rc: -1,
                    errmsg: "ring_unsupported".into(),
                };
                self.send_v2(out, &r, t);
            }
            Q::Unknown { cmd } => {
                let r = R::Error {
                    cmd: v2::reply_name(&cmd),
                    rc: -1,
                    errmsg: "unknown_command".into(),
                };
                self.send_v2(out, &r, t);
                out.push(Action::ProtocolError {
                    error: ParseError::UnknownCommand(cmd.chars().take(64).collect()),
                    excerpt: excerpt(body),
                    fatal: false,
                });
            }
        }
    }

    /// Answer an [`Action::Get`] (PMI-1 `get_result` or PMI-2 `kvs-get-response`, as the
    /// request was). `None` or an empty value (spec §12.5) answers "not found". PMI-1 passes
    /// the value's bytes as they are; PMI-2's text replies get bytes that are not UTF-8 as
    /// U+FFFD.
    pub fn answer_get(&mut self, key: &str, value: Option<&[u8]>) -> Vec<u8> {
        let value = value.filter(|v| !v.is_empty());
        match self.answered(&Kind::Get(key.to_owned())) {
            Proto::V1 => {
                let value = match value {
                    Some(v) => Ok(v.to_vec()),
                    None => Err(GetMiss { key: key.to_owned() }),
                };
                Reply::GetResult { value }.to_bytes()
            }
            Proto::V2 { thrid } => {
                let value = value.map(|v| String::from_utf8_lossy(v).into_owned());
                self.v2_bytes(&v2::Reply::KvsGet { value }, thrid.as_deref())
            }
        }
    }

    /// The fence the rank entered completed: `cmd=barrier_out rc=0` (PMI-1) or
    /// `cmd=kvs-fence-response;rc=0;` (PMI-2).
    pub fn barrier_out(&mut self) -> Vec<u8> {
        match self.answered(&Kind::Barrier) {
            Proto::V1 => Reply::BarrierOut.to_bytes(),
            Proto::V2 { thrid } => self.v2_bytes(&v2::Reply::KvsFence, thrid.as_deref()),
        }
    }

    /// Answer an [`Action::Publish`]: `ok == false` means the service was already published.
    pub fn answer_publish(&mut self, ok: bool) -> Vec<u8> {
        match self.answered(&Kind::Publish) {
            Proto::V1 => {
                let (rc, msg) = if ok { (0, "success") } else { (1, "key_already_present") };
                Reply::PublishResult { rc, msg: msg.into() }.to_bytes()
            }
            Proto::V2 { thrid } => {
                let r = if ok {
                    v2::Reply::NamePublish
                } else {
                    v2::Reply::Error {
                        cmd: "name-publish-response".into(),
                        rc: 1,
                        errmsg: "key_already_present".into(),
                    }
                };
                self.v2_bytes(&r, thrid.as_deref())
            }
        }
    }

    /// Answer an [`Action::Unpublish`]: `ok == false` means the service was not published.
    pub fn answer_unpublish(&mut self, ok: bool) -> Vec<u8> {
        match self.answered(&Kind::Unpublish) {
            Proto::V1 => {
                let (rc, msg) = if ok { (0, "success") } else { (1, "service_not_found") };
                Reply::UnpublishResult { rc, msg: msg.into() }.to_bytes()
            }
            Proto::V2 { thrid } => {
                let r = if ok {
                    v2::Reply::NameUnpublish
                } else {
                    v2::Reply::Error {
                        cmd: "name-unpublish-response".into(),
                        rc: 1,
                        errmsg: "service_not_found".into(),
                    }
                };
                self.v2_bytes(&r, thrid.as_deref())
            }
        }
    }

    /// Answer an [`Action::Lookup`].
    pub fn answer_lookup(&mut self, port: Option<&str>) -> Vec<u8> {
        let port = port.map(str::to_owned);
        match self.answered(&Kind::Lookup) {
            Proto::V1 => Reply::LookupResult { port }.to_bytes(),
            Proto::V2 { thrid } => self.v2_bytes(&v2::Reply::NameLookup { port }, thrid.as_deref()),
        }
    }

    /// Answer an [`Action::Spawn`]. If given, `errcodes` must hold exactly Σ`nprocs` entries
    /// (the client asserts it, spec §3.15). PMI-2: `rc=0` → `spawn-response;rc=0;`, else
    /// `rc=RC;errmsg=spawn_failed;` (`errcodes` is PMI-1 only).
    /// `jobid`: the new job's id (PMI-2 `jobid=`, which Slurm's client requires).
    pub fn answer_spawn(
        &mut self,
        rc: i32,
        errcodes: Option<Vec<i32>>,
        jobid: Option<&str>,
    ) -> Vec<u8> {
        match self.answered(&Kind::Spawn) {
            Proto::V1 => Reply::SpawnResult { rc, errcodes }.to_bytes(),
            Proto::V2 { thrid } => {
                let r = if rc == 0 {
                    v2::Reply::Spawn { jobid: jobid.map(str::to_owned) }
                } else {
                    v2::Reply::Error {
                        cmd: "spawn-response".into(),
                        rc,
                        errmsg: "spawn_failed".into(),
                    }
                };
                self.v2_bytes(&r, thrid.as_deref())
            }
        }
    }

    /// Answer an [`Action::GetNodeAttr`] (PMI-2 only): `found=TRUE;value=V;` or
    /// `found=FALSE;`. An empty value is a found empty value.
    pub fn answer_node_attr(&mut self, key: &str, value: Option<&str>) -> Vec<u8> {
        let thrid = match self.answered(&Kind::NodeAttr(key.to_owned())) {
            Proto::V1 => None,
            Proto::V2 { thrid } => thrid,
        };
        let r = v2::Reply::GetNodeAttr { value: value.map(str::to_owned) };
        self.v2_bytes(&r, thrid.as_deref())
    }

    /// Answer an [`Action::GetJobAttr`] (PMI-2 only): `found=TRUE;value=V;` or
    /// `found=FALSE;`; `None` or an empty value answers not found (spec §8, §12.5).
    pub fn answer_job_attr(&mut self, key: &str, value: Option<&str>) -> Vec<u8> {
        let thrid = match self.answered(&Kind::JobAttr(key.to_owned())) {
            Proto::V1 => None,
            Proto::V2 { thrid } => thrid,
        };
        let value = value.filter(|v| !v.is_empty()).map(str::to_owned);
        self.v2_bytes(&v2::Reply::GetJobAttr { value }, thrid.as_deref())
    }
}
