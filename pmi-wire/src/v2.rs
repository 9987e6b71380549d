//! PMI-2 codec (spec §10): frames, request parser/encoder and reply encoder/parser.
//!
//! # Framing (spec §10.1)
//!
//! A frame is a 6-byte header holding the decimal length of the body, left-aligned
//! (`38    `, Slurm and MPICH ≤ 4.0) or right-aligned (`    38`, MPICH ≥ 4.1), then the body.
//! [`parse_header`] accepts both (spaces on either side, digits in between). Bodies longer
//! than [`MAX_FRAME_LEN`] are refused.
//!
//! # Body
//!
//! `cmd=NAME;k1=v1;k2=v2;` — every pair ends with `;` (a missing final `;` is tolerated).
//! A key is anything but `=` and `;`. Inside a value, `;;` is a literal `;` (the escaping of
//! Slurm's libpmi2 and MPICH ≤ 4.0); a single `;` ends the value. Values may hold spaces,
//! `=` and newlines. Duplicate keys: the first occurrence wins, except in `spawn`, which is
//! read in order (its per-command keys repeat).
//!
//! # Encoding
//!
//! * Requests (client direction) double every `;` in values, as Slurm's client does, so
//!   `parse(encode(r)) == r` for every request.
//! * Replies (server direction) never contain a `;` inside a value (MPICH ≥ 4.1 clients split
//!   at every `;`): it is replaced by `_`. Success replies always carry `rc=0` right after
//!   `cmd=` (and `thrid=` when the request had one, spec §10.1).
//! * Booleans are `TRUE`/`FALSE`; when parsing, `TRUE` or a non-zero number is true.

use std::fmt::Display;
use std::io::Write as _;
use std::str::FromStr;

use crate::v1::{ParseError, SpawnCmd, MAX_SPAWN_LIST, MAX_SPAWN_NPROCS, MAX_TOTSPAWNS};

/// Length of the frame header.
pub const HEADER_LEN: usize = 6;
/// Longest frame body accepted (Slurm's and MPICH's client buffer, `PMII_MAX_COMMAND_LEN`).
pub const MAX_FRAME_LEN: usize = 64 * 1024;
/// PMI-2 key and value limits (spec §10.2: ≤ 4.0 clients reject longer values).
pub const KEYLEN_MAX: usize = 64;
pub const VALLEN_MAX: usize = 1024;

/// How the length in a frame header is aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Align {
    /// `38    ` (Slurm, MPICH ≤ 4.0).
    #[default]
    Left,
    /// `    38` (MPICH ≥ 4.1).
    Right,
}

/// Parse a frame header (exactly [`HEADER_LEN`] bytes): the body length and the alignment.
/// A length above [`MAX_FRAME_LEN`] is `TooLong`; anything but spaces around digits is
/// `BadToken`.
pub fn parse_header(h: &[u8]) -> Result<(usize, Align), ParseError> {
    let bad = || ParseError::BadToken(crate::server::excerpt(h));
    if h.len() != HEADER_LEN {
        return Err(bad());
    }
    let start = h.iter().position(|&b| b != b' ').ok_or_else(bad)?;
    let end = h.iter().rposition(|&b| b != b' ').map_or(start, |e| e + 1);
    let digits = h.get(start..end).ok_or_else(bad)?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let len: usize =
        std::str::from_utf8(digits).ok().and_then(|d| d.parse().ok()).ok_or_else(bad)?;
    if len > MAX_FRAME_LEN {
        return Err(ParseError::TooLong(MAX_FRAME_LEN));
    }
    let align = if start == 0 && end < HEADER_LEN { Align::Left } else { Align::Right };
    Ok((len, align))
}

/// Append `header + body` to `out`.
pub fn frame(body: &[u8], align: Align, out: &mut Vec<u8>) {
    let n = body.len();
    let _ = match align {
        Align::Left => write!(out, "{n:<6}"),
        Align::Right => write!(out, "{n:>6}"),
    };
    out.extend_from_slice(body);
}

/// If `buf` starts with a complete frame, its body and the total bytes it occupies
/// (header included). `Ok(None)`: more bytes are needed. For client-side readers.
pub fn split_frame(buf: &[u8]) -> Result<Option<(&[u8], usize)>, ParseError> {
    let Some(h) = buf.get(..HEADER_LEN) else { return Ok(None) };
    let (len, _) = parse_header(h)?;
    Ok(buf.get(HEADER_LEN..HEADER_LEN + len).map(|b| (b, HEADER_LEN + len)))
}

// ---------------------------------------------------------------------------------------------
// Body tokenizer

/// A tokenized body: the command name and the other pairs in order (`;;` undone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    pub cmd: String,
    pub pairs: Vec<(String, String)>,
}

fn truncate_chars(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Tokenize a frame body (see the module docs).
pub fn parse_body(body: &[u8]) -> Result<Body, ParseError> {
    if body.len() > MAX_FRAME_LEN {
        return Err(ParseError::TooLong(MAX_FRAME_LEN));
    }
    let s = std::str::from_utf8(body).map_err(|_| ParseError::NotUtf8)?;
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let eq = rest.find(['=', ';']).filter(|&i| rest.as_bytes().get(i) == Some(&b'='));
        let Some(eq) = eq.filter(|&i| i > 0) else {
            let tok = rest.split(';').next().unwrap_or("");
            return Err(ParseError::BadToken(truncate_chars(tok, 32)));
        };
        let key = &rest[..eq];
        let mut value = String::new();
        let v = &rest[eq + 1..];
        let mut i = 0;
        let bytes = v.as_bytes();
        let mut seg = 0;
        let mut end = None;
        while i < bytes.len() {
            if bytes[i] == b';' {
                if bytes.get(i + 1) == Some(&b';') {
                    value.push_str(&v[seg..=i]);
                    i += 2;
                    seg = i;
                    continue;
                }
                end = Some(i);
                break;
            }
            i += 1;
        }
        let stop = end.unwrap_or(bytes.len());
        value.push_str(&v[seg.min(stop)..stop]);
        pairs.push((key.to_owned(), value));
        rest = match end {
            Some(e) => &v[e + 1..],
            None => "",
        };
    }
    let mut it = pairs.into_iter();
    match it.next() {
        Some((k, cmd)) if k == "cmd" && !cmd.is_empty() => Ok(Body { cmd, pairs: it.collect() }),
        Some((k, _)) if k == "cmd" => {
            Err(ParseError::MissingField { cmd: String::new(), field: "cmd".into() })
        }
        _ => Err(ParseError::NoCommand),
    }
}

impl Body {
    fn get(&self, key: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    fn req(&self, key: &str) -> Result<&str, ParseError> {
        self.get(key)
            .ok_or_else(|| ParseError::MissingField { cmd: self.cmd.clone(), field: key.into() })
    }

    fn string(&self, key: &str) -> Result<String, ParseError> {
        self.req(key).map(str::to_owned)
    }

    fn opt(&self, key: &str) -> Option<String> {
        self.get(key).map(str::to_owned)
    }

    fn num<T: FromStr>(&self, key: &str) -> Result<T, ParseError> {
        parse_num(&self.cmd, key, self.req(key)?)
    }

    fn opt_num<T: FromStr>(&self, key: &str) -> Result<Option<T>, ParseError> {
        self.get(key).map(|v| parse_num(&self.cmd, key, v)).transpose()
    }

    fn flag(&self, key: &str) -> Option<bool> {
        self.get(key).map(parse_bool)
    }

    fn rc(&self) -> Result<i32, ParseError> {
        Ok(self.opt_num("rc")?.unwrap_or(0))
    }

    fn thrid(&self) -> Option<String> {
        self.opt("thrid")
    }
}

fn parse_num<T: FromStr>(cmd: &str, key: &str, v: &str) -> Result<T, ParseError> {
    v.trim()
        .parse()
        .map_err(|_| ParseError::BadNumber { cmd: cmd.to_owned(), field: key.to_owned() })
}

/// `TRUE` (any case) or a non-zero number is true.
pub fn parse_bool(v: &str) -> bool {
    v.eq_ignore_ascii_case("true") || v.trim().parse::<i64>().is_ok_and(|n| n != 0)
}

fn tf(b: bool) -> &'static str {
    if b {
        "TRUE"
    } else {
        "FALSE"
    }
}

/// Body builder. `escape`: double `;` in values (client direction); else replace it by `_`.
struct Enc {
    out: Vec<u8>,
    escape: bool,
}

impl Enc {
    fn new(cmd: &str, thrid: Option<&str>, escape: bool) -> Self {
        let mut e = Enc { out: Vec::with_capacity(64), escape };
        e.kv("cmd", cmd);
        if let Some(t) = thrid {
            e.kv("thrid", t);
        }
        e
    }

    fn key(&mut self, k: &str) {
        self.out.extend(k.bytes().map(|b| if b == b'=' || b == b';' { b'_' } else { b }));
        self.out.push(b'=');
    }

    fn kv(&mut self, k: &str, v: &str) {
        self.key(k);
        for b in v.bytes() {
            match b {
                b';' if self.escape => self.out.extend_from_slice(b";;"),
                b';' => self.out.push(b'_'),
                b => self.out.push(b),
            }
        }
        self.out.push(b';');
    }

    fn kn(&mut self, k: &str, n: impl Display) {
        self.key(k);
        let _ = write!(self.out, "{n};");
    }

    fn kb(&mut self, k: &str, b: bool) {
        self.kv(k, tf(b));
    }

    fn rc0(&mut self) {
        self.out.extend_from_slice(b"rc=0;");
    }
}

// ---------------------------------------------------------------------------------------------
// Requests

/// A PMI-2 client request (the body of one frame; `thrid` travels beside it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `fullinit;pmirank=R;[pmijobid=J;]threaded=TRUE|FALSE;` (missing `pmirank` → -1).
    FullInit { rank: i32, jobid: Option<String>, threaded: bool },
    /// `job-getid;`
    JobGetId,
    /// `kvs-put;key=K;value=V;`
    KvsPut { key: String, value: String },
    /// `kvs-fence;`
    KvsFence,
    /// `kvs-get;[jobid=J;][srcid=S;]key=K;`
    KvsGet { jobid: Option<String>, srcid: Option<i32>, key: String },
    /// `info-getjobattr;key=K;`
    GetJobAttr { key: String },
    /// `info-putnodeattr;key=K;value=V;`
    PutNodeAttr { key: String, value: String },
    /// `info-getnodeattr;key=K;wait=TRUE|FALSE;` (missing `wait` → false).
    GetNodeAttr { key: String, wait: bool },
    /// `finalize;`
    Finalize,
    /// `abort;[exitcode=N;][isworld=B;][msg=M;]` — MPICH ≥ 4.1 sends `exitcode` and
    /// `message`, Slurm/≤ 4.0 `isworld` and `msg`; both message keys are read. Lenient: a
    /// non-numeric `exitcode` is `None`, so an abort is never lost.
    Abort { exitcode: Option<i32>, isworld: Option<bool>, message: Option<String> },
    /// `spawn;ncmds=N;preputcount=P;ppkeyI=;ppvalI=;…` then per command
    /// `subcmd=EXE;maxprocs=M;argc=A;argvI=…;infokeycount=I;infokeyJ=;infovalJ=;`. Preputs
    /// belong to the job: they are read into `cmds[0].preput` and encoded from it (as in
    /// [`crate::v1::Request::Spawn`]). `args` are argv from 0.
    Spawn { cmds: Vec<SpawnCmd> },
    /// `name-publish;name=S;port=P;`
    NamePublish { name: String, port: String },
    /// `name-unpublish;name=S;`
    NameUnpublish { name: String },
    /// `name-lookup;name=S;`
    NameLookup { name: String },
    /// `job-connect;jobid=J;`
    JobConnect { jobid: String },
    /// `job-disconnect;jobid=J;`
    JobDisconnect { jobid: String },
    /// Slurm's ring extension `ring;ring-count=C;ring-left=L;ring-right=R;`.
    Ring { count: i32, left: String, right: String },
    /// A well-formed body whose command this module does not know.
    Unknown { cmd: String },
}

/// Request command names [`parse_request`] maps to a specific variant.
pub const KNOWN_REQUESTS: &[&str] = &[
    "fullinit",
    "job-getid",
    "kvs-put",
    "kvs-fence",
    "kvs-get",
    "info-getjobattr",
    "info-putnodeattr",
    "info-getnodeattr",
    "finalize",
    "abort",
    "spawn",
    "name-publish",
    "name-unpublish",
    "name-lookup",
    "job-connect",
    "job-disconnect",
    "ring",
];

/// The reply command a client waits for after request `cmd` (`cmd` cut to 64 bytes).
pub fn reply_name(cmd: &str) -> String {
    let mut end = cmd.len().min(64);
    while !cmd.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}-response", &cmd[..end])
}

fn spawn_err(msg: impl Display) -> ParseError {
    ParseError::Spawn(msg.to_string())
}

/// Sequential reader over the spawn pairs (keys repeat per command, so order matters).
struct Seq<'a> {
    pairs: &'a [(String, String)],
    pos: usize,
}

impl<'a> Seq<'a> {
    fn next(&mut self, key: &str) -> Result<&'a str, ParseError> {
        let (k, v) = self
            .pairs
            .get(self.pos)
            .ok_or_else(|| ParseError::MissingField { cmd: "spawn".into(), field: key.into() })?;
        if k != key {
            return Err(spawn_err(format_args!("expected {key}, found {}", truncate_chars(k, 32))));
        }
        self.pos += 1;
        Ok(v)
    }

    fn num<T: FromStr>(&mut self, key: &str) -> Result<T, ParseError> {
        let v = self.next(key)?;
        parse_num("spawn", key, v)
    }

    fn count(&mut self, key: &str) -> Result<usize, ParseError> {
        let n: usize = self.num(key)?;
        if n > MAX_SPAWN_LIST {
            return Err(spawn_err(format_args!("{key}={n} exceeds {MAX_SPAWN_LIST}")));
        }
        Ok(n)
    }

    fn pairs(&mut self, n: usize, k: &str, v: &str) -> Result<Vec<(String, String)>, ParseError> {
        (0..n)
            .map(|i| {
                let key = self.next(&format!("{k}{i}"))?.to_owned();
                let val = self.next(&format!("{v}{i}"))?.to_owned();
                Ok((key, val))
            })
            .collect()
    }
}

fn parse_spawn(b: &Body) -> Result<Request, ParseError> {
    // `thrid` may sit anywhere; the rest is strictly ordered.
    let pairs: Vec<(String, String)> =
        b.pairs.iter().filter(|(k, _)| k != "thrid").cloned().collect();
    let mut s = Seq { pairs: &pairs, pos: 0 };
    let ncmds: u32 = s.num("ncmds")?;
    if ncmds == 0 || ncmds > MAX_TOTSPAWNS {
        return Err(spawn_err(format_args!("ncmds={ncmds} not in 1..={MAX_TOTSPAWNS}")));
    }
    let npre = s.count("preputcount")?;
    let preput = s.pairs(npre, "ppkey", "ppval")?;
    let mut cmds = Vec::with_capacity(ncmds as usize);
    for i in 0..ncmds {
        let execname = s.next("subcmd")?.to_owned();
        let nprocs: u32 = s.num("maxprocs")?;
        if nprocs > MAX_SPAWN_NPROCS {
            return Err(spawn_err(format_args!(
                "maxprocs={nprocs}: too many processes (at most {MAX_SPAWN_NPROCS} in a spawn)"
            )));
        }
        let argc = s.count("argc")?;
        let args = (0..argc)
            .map(|j| s.next(&format!("argv{j}")).map(str::to_owned))
            .collect::<Result<Vec<_>, _>>()?;
        let ninfo = s.count("infokeycount")?;
        let info = s.pairs(ninfo, "infokey", "infoval")?;
        let preput = if i == 0 { preput.clone() } else { Vec::new() };
        cmds.push(SpawnCmd { nprocs, execname, args, preput, info });
    }
    if let Some((k, _)) = pairs.get(s.pos) {
        return Err(spawn_err(format_args!(
            "unexpected {} after the commands",
            truncate_chars(k, 32)
        )));
    }
    Ok(Request::Spawn { cmds })
}

/// Parse a request body: the request and the `thrid` it carries, if any.
pub fn parse_request(body: &[u8]) -> Result<(Request, Option<String>), ParseError> {
    let b = parse_body(body)?;
    let req = match b.cmd.as_str() {
        "fullinit" => Request::FullInit {
            rank: b.opt_num("pmirank")?.unwrap_or(-1),
            jobid: b.opt("pmijobid"),
            threaded: b.flag("threaded").unwrap_or(false),
        },
        "job-getid" => Request::JobGetId,
        "kvs-put" => Request::KvsPut { key: b.string("key")?, value: b.string("value")? },
        "kvs-fence" => Request::KvsFence,
        "kvs-get" => Request::KvsGet {
            jobid: b.opt("jobid"),
            srcid: b.opt_num("srcid")?,
            key: b.string("key")?,
        },
        "info-getjobattr" => Request::GetJobAttr { key: b.string("key")? },
        "info-putnodeattr" => {
            Request::PutNodeAttr { key: b.string("key")?, value: b.string("value")? }
        }
        "info-getnodeattr" => {
            Request::GetNodeAttr { key: b.string("key")?, wait: b.flag("wait").unwrap_or(false) }
        }
        "finalize" => Request::Finalize,
        "abort" => Request::Abort {
            exitcode: b.get("exitcode").and_then(|v| v.trim().parse().ok()),
            isworld: b.flag("isworld"),
            message: b.opt("msg").or_else(|| b.opt("message")),
        },
        "spawn" => parse_spawn(&b)?,
        "name-publish" => Request::NamePublish { name: b.string("name")?, port: b.string("port")? },
        "name-unpublish" => Request::NameUnpublish { name: b.string("name")? },
        "name-lookup" => Request::NameLookup { name: b.string("name")? },
        "job-connect" => Request::JobConnect { jobid: b.string("jobid")? },
        "job-disconnect" => Request::JobDisconnect { jobid: b.string("jobid")? },
        "ring" => Request::Ring {
            count: b.num("ring-count")?,
            left: b.string("ring-left")?,
            right: b.string("ring-right")?,
        },
        _ => Request::Unknown { cmd: b.cmd.clone() },
    };
    Ok((req, b.thrid()))
}

impl Request {
    /// The command name on the wire.
    pub fn name(&self) -> &str {
        match self {
            Request::FullInit { .. } => "fullinit",
            Request::JobGetId => "job-getid",
            Request::KvsPut { .. } => "kvs-put",
            Request::KvsFence => "kvs-fence",
            Request::KvsGet { .. } => "kvs-get",
            Request::GetJobAttr { .. } => "info-getjobattr",
            Request::PutNodeAttr { .. } => "info-putnodeattr",
            Request::GetNodeAttr { .. } => "info-getnodeattr",
            Request::Finalize => "finalize",
            Request::Abort { .. } => "abort",
            Request::Spawn { .. } => "spawn",
            Request::NamePublish { .. } => "name-publish",
            Request::NameUnpublish { .. } => "name-unpublish",
            Request::NameLookup { .. } => "name-lookup",
            Request::JobConnect { .. } => "job-connect",
            Request::JobDisconnect { .. } => "job-disconnect",
            Request::Ring { .. } => "ring",
            Request::Unknown { cmd } => cmd,
        }
    }

    /// Client-direction body (`;` in values doubled), `thrid=` right after `cmd=` if given.
    pub fn encode_body(&self, thrid: Option<&str>) -> Vec<u8> {
        let mut e = Enc::new(self.name(), thrid, true);
        match self {
            Request::FullInit { rank, jobid, threaded } => {
                e.kn("pmirank", rank);
                if let Some(j) = jobid {
                    e.kv("pmijobid", j);
                }
                e.kb("threaded", *threaded);
            }
            Request::JobGetId | Request::KvsFence | Request::Finalize | Request::Unknown { .. } => {
            }
            Request::KvsPut { key, value } | Request::PutNodeAttr { key, value } => {
                e.kv("key", key);
                e.kv("value", value);
            }
            Request::KvsGet { jobid, srcid, key } => {
                if let Some(j) = jobid {
                    e.kv("jobid", j);
                }
                if let Some(s) = srcid {
                    e.kn("srcid", s);
                }
                e.kv("key", key);
            }
            Request::GetJobAttr { key } => e.kv("key", key),
            Request::GetNodeAttr { key, wait } => {
                e.kv("key", key);
                e.kb("wait", *wait);
            }
            Request::Abort { exitcode, isworld, message } => {
                if let Some(c) = exitcode {
                    e.kn("exitcode", c);
                }
                if let Some(w) = isworld {
                    e.kb("isworld", *w);
                }
                if let Some(m) = message {
                    e.kv("msg", m);
                }
            }
            Request::Spawn { cmds } => {
                let empty = Vec::new();
                let preput = cmds.first().map_or(&empty, |c| &c.preput);
                e.kn("ncmds", cmds.len());
                e.kn("preputcount", preput.len());
                for (i, (k, v)) in preput.iter().enumerate() {
                    e.kv(&format!("ppkey{i}"), k);
                    e.kv(&format!("ppval{i}"), v);
                }
                for c in cmds {
                    e.kv("subcmd", &c.execname);
                    e.kn("maxprocs", c.nprocs);
                    e.kn("argc", c.args.len());
                    for (i, a) in c.args.iter().enumerate() {
                        e.kv(&format!("argv{i}"), a);
                    }
                    e.kn("infokeycount", c.info.len());
                    for (i, (k, v)) in c.info.iter().enumerate() {
                        e.kv(&format!("infokey{i}"), k);
                        e.kv(&format!("infoval{i}"), v);
                    }
                }
            }
            Request::NamePublish { name, port } => {
                e.kv("name", name);
                e.kv("port", port);
            }
            Request::NameUnpublish { name } | Request::NameLookup { name } => e.kv("name", name),
            Request::JobConnect { jobid } | Request::JobDisconnect { jobid } => {
                e.kv("jobid", jobid)
            }
            Request::Ring { count, left, right } => {
                e.kn("ring-count", count);
                e.kv("ring-left", left);
                e.kv("ring-right", right);
            }
        }
        e.out
    }

    /// A complete frame (header + body).
    pub fn to_frame(&self, thrid: Option<&str>, align: Align) -> Vec<u8> {
        let mut out = Vec::new();
        frame(&self.encode_body(thrid), align, &mut out);
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Replies

/// A PMI-2 server reply. Success variants encode `rc=0`; failures are [`Reply::Error`]
/// (except the "not found" answers, which have their own form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=R;size=N;appnum=A;`
    /// `[spawner-jobid=J;]debugged=B;pmiverbose=B;` — the superset Slurm-derived and
    /// MPICH clients need (spec §10.2).
    FullInit {
        rank: i32,
        size: i32,
        appnum: i32,
        spawner_jobid: Option<String>,
        debugged: bool,
        verbose: bool,
    },
    /// `cmd=job-getid-response;rc=0;jobid=J;`
    JobGetId { jobid: String },
    /// `cmd=kvs-put-response;rc=0;`
    KvsPut,
    /// `cmd=kvs-fence-response;rc=0;`
    KvsFence,
    /// found `cmd=kvs-get-response;rc=0;found=TRUE;value=V;`, missing `…;rc=0;found=FALSE;`
    /// (Hydra's `rc=1` miss parses as missing too).
    KvsGet { value: Option<String> },
    /// `cmd=info-getjobattr-response;rc=0;found=TRUE;value=V;` / `found=FALSE`
    GetJobAttr { value: Option<String> },
    /// `cmd=info-putnodeattr-response;rc=0;`
    PutNodeAttr,
    /// `cmd=info-getnodeattr-response;rc=0;found=TRUE;value=V;` / `found=FALSE`
    GetNodeAttr { value: Option<String> },
    /// `cmd=finalize-response;rc=0;`
    Finalize,
    /// `cmd=spawn-response;rc=0;[jobid=J;]`
    Spawn { jobid: Option<String> },
    /// `cmd=name-publish-response;rc=0;`
    NamePublish,
    /// `cmd=name-unpublish-response;rc=0;`
    NameUnpublish,
    /// found `cmd=name-lookup-response;rc=0;port=P;value=P;found=TRUE;` (MPICH reads `port`,
    /// Slurm `value`); missing `…;rc=1;errmsg=service_not_found;found=FALSE;`.
    NameLookup { port: Option<String> },
    /// `cmd=job-connect-response;rc=0;kvscopy=0;`
    JobConnect,
    /// `cmd=job-disconnect-response;rc=0;kvscopy=0;`
    JobDisconnect,
    /// `cmd=CMD;rc=RC;[errmsg=M;]` — a refused request or an unknown command.
    Error { cmd: String, rc: i32, errmsg: String },
}

/// Reply names whose `rc≠0` form parses as "not found" rather than [`Reply::Error`].
pub const MISS_REPLIES: &[&str] = &[
    "kvs-get-response",
    "info-getjobattr-response",
    "info-getnodeattr-response",
    "name-lookup-response",
];

/// Reply names [`Reply::parse`] maps to a specific variant when `rc` is 0.
pub const KNOWN_REPLIES: &[&str] = &[
    "fullinit-response",
    "job-getid-response",
    "kvs-put-response",
    "kvs-fence-response",
    "kvs-get-response",
    "info-getjobattr-response",
    "info-putnodeattr-response",
    "info-getnodeattr-response",
    "finalize-response",
    "spawn-response",
    "name-publish-response",
    "name-unpublish-response",
    "name-lookup-response",
    "job-connect-response",
    "job-disconnect-response",
];

impl Reply {
    fn name(&self) -> &str {
        match self {
            Reply::FullInit { .. } => "fullinit-response",
            Reply::JobGetId { .. } => "job-getid-response",
            Reply::KvsPut => "kvs-put-response",
            Reply::KvsFence => "kvs-fence-response",
            Reply::KvsGet { .. } => "kvs-get-response",
            Reply::GetJobAttr { .. } => "info-getjobattr-response",
            Reply::PutNodeAttr => "info-putnodeattr-response",
            Reply::GetNodeAttr { .. } => "info-getnodeattr-response",
            Reply::Finalize => "finalize-response",
            Reply::Spawn { .. } => "spawn-response",
            Reply::NamePublish => "name-publish-response",
            Reply::NameUnpublish => "name-unpublish-response",
            Reply::NameLookup { .. } => "name-lookup-response",
            Reply::JobConnect => "job-connect-response",
            Reply::JobDisconnect => "job-disconnect-response",
            Reply::Error { cmd, .. } => cmd,
        }
    }

    /// Server-direction body (no `;` inside values), `thrid=` right after `cmd=` if given.
    pub fn encode_body(&self, thrid: Option<&str>) -> Vec<u8> {
        let mut e = Enc::new(self.name(), thrid, false);
        let found = |e: &mut Enc, v: &Option<String>| match v {
            Some(v) => {
                e.rc0();
                e.kb("found", true);
                e.kv("value", v);
            }
            None => {
                e.rc0();
                e.kb("found", false);
            }
        };
        match self {
            Reply::FullInit { rank, size, appnum, spawner_jobid, debugged, verbose } => {
                e.rc0();
                e.kn("pmi-version", 2);
                e.kn("pmi-subversion", 0);
                e.kn("rank", rank);
                e.kn("size", size);
                e.kn("appnum", appnum);
                if let Some(j) = spawner_jobid {
                    e.kv("spawner-jobid", j);
                }
                e.kb("debugged", *debugged);
                e.kb("pmiverbose", *verbose);
            }
            Reply::JobGetId { jobid } => {
                e.rc0();
                e.kv("jobid", jobid);
            }
            Reply::KvsPut
            | Reply::KvsFence
            | Reply::PutNodeAttr
            | Reply::Finalize
            | Reply::NamePublish
            | Reply::NameUnpublish => e.rc0(),
            Reply::KvsGet { value }
            | Reply::GetJobAttr { value }
            | Reply::GetNodeAttr { value } => found(&mut e, value),
            Reply::Spawn { jobid } => {
                e.rc0();
                if let Some(j) = jobid {
                    e.kv("jobid", j);
                }
            }
            Reply::NameLookup { port: Some(p) } => {
                e.rc0();
                e.kv("port", p);
                e.kv("value", p);
                e.kb("found", true);
            }
            Reply::NameLookup { port: None } => {
                e.kn("rc", 1);
                e.kv("errmsg", "service_not_found");
                e.kb("found", false);
            }
            Reply::JobConnect | Reply::JobDisconnect => {
                e.rc0();
                e.kn("kvscopy", 0);
            }
            Reply::Error { rc, errmsg, .. } => {
                e.kn("rc", rc);
                if !errmsg.is_empty() {
                    e.kv("errmsg", errmsg);
                }
            }
        }
        e.out
    }

    /// A complete frame (header + body).
    pub fn to_frame(&self, thrid: Option<&str>, align: Align) -> Vec<u8> {
        let mut out = Vec::new();
        frame(&self.encode_body(thrid), align, &mut out);
        out
    }

    /// Client-side parser for one reply body: the reply and its `thrid`. Keys in any order,
    /// `rc` optional (0), Hydra's and Slurm's variants accepted. A known reply with `rc≠0`
    /// is [`Reply::Error`], except the "not found" replies ([`MISS_REPLIES`]).
    pub fn parse(body: &[u8]) -> Result<(Reply, Option<String>), ParseError> {
        let b = parse_body(body)?;
        let rc = b.rc()?;
        let cmd = b.cmd.as_str();
        let found = |b: &Body| -> Option<String> {
            if rc != 0 {
                return None;
            }
            match (b.flag("found"), b.get("value")) {
                (Some(false), _) | (None, None) => None,
                (_, Some(v)) => Some(v.to_owned()),
                (Some(true), None) => Some(String::new()),
            }
        };
        if rc != 0 && !MISS_REPLIES.contains(&cmd) {
            let errmsg = b.get("errmsg").or_else(|| b.get("msg")).unwrap_or("").to_owned();
            return Ok((Reply::Error { cmd: cmd.to_owned(), rc, errmsg }, b.thrid()));
        }
        let reply = match cmd {
            "fullinit-response" => Reply::FullInit {
                rank: b.num("rank")?,
                size: b.num("size")?,
                appnum: b.num("appnum")?,
                spawner_jobid: b.opt("spawner-jobid"),
                debugged: b.flag("debugged").unwrap_or(false),
                verbose: b.flag("pmiverbose").unwrap_or(false),
            },
            "job-getid-response" => Reply::JobGetId { jobid: b.string("jobid")? },
            "kvs-put-response" => Reply::KvsPut,
            "kvs-fence-response" => Reply::KvsFence,
            "kvs-get-response" => Reply::KvsGet { value: found(&b) },
            "info-getjobattr-response" => Reply::GetJobAttr { value: found(&b) },
            "info-putnodeattr-response" => Reply::PutNodeAttr,
            "info-getnodeattr-response" => Reply::GetNodeAttr { value: found(&b) },
            "finalize-response" => Reply::Finalize,
            "spawn-response" => Reply::Spawn { jobid: b.opt("jobid") },
            "name-publish-response" => Reply::NamePublish,
            "name-unpublish-response" => Reply::NameUnpublish,
            "name-lookup-response" => {
                let port = if rc == 0 && b.flag("found") != Some(false) {
                    b.opt("port").or_else(|| b.opt("value"))
                } else {
                    None
                };
                Reply::NameLookup { port }
            }
            "job-connect-response" => Reply::JobConnect,
            "job-disconnect-response" => Reply::JobDisconnect,
            other => Reply::Error {
                cmd: other.to_owned(),
                rc,
                errmsg: b.get("errmsg").or_else(|| b.get("msg")).unwrap_or("").to_owned(),
            },
        };
        Ok((reply, b.thrid()))
    }
}
