//! PMI-1 codec (spec §2–§5): request parser/encoder and reply encoder/parser.
//!
//! # Lexical rules implemented (spec §2)
//!
//! * A request line is `cmd=<name>` followed by tokens separated by **one or more** spaces;
//!   trailing spaces are ignored. A token is `key=value` or a bare `key` (ignored unless
//!   the command needs it).
//! * Key characters: anything but space, `=`, `\n` and NUL.
//! * A value ends at the first space (or `\n`); `=` inside a value is fine; `key=` gives an
//!   empty value. Exceptions that run to the end of the line, spaces included (Open MPI values
//!   end in ` -`, spec §12.4): `value=` of `put`, `message=`/`error_msg=` of `abort`, and in
//!   replies `value=` of `get_result`. Such a key must therefore be the last one on the line.
//! * Text is UTF-8, but for those values that run to the end of the line in `put` and
//!   `get_result`: they are bytes, kept as they are (Hydra does the same), so a value that is
//!   not UTF-8 (Latin-1 text, say) goes in and comes back out unchanged.
//! * A trailing `\r` is **not** stripped: it is part of the last value (or of the command
//!   name, which then makes the command unknown). No PMI client sends `\r`.
//! * Duplicate keys: the first occurrence wins. Unknown keys are ignored.
//! * `mcmd=spawn` blocks (spec §4): one `key=value` per line, values to end of line, segments
//!   ending with an `endcmd` line; see [`parse_spawn`].
//!
//! # Encoding
//!
//! Values that must not contain a space have spaces and `\n` replaced by `_`; values that run
//! to the end of the line have `\n` replaced by `_`. So `parse(encode(x)) == x` holds for every
//! value that respects the lexical rules; anything else is sanitized rather than allowed to
//! break the line framing. Empty `msg` strings are omitted from replies (spec §12.5: MPICH
//! ≥4.1 cannot parse `key=`), and parse back as empty.

use std::collections::HashMap;
use std::fmt::Display;
use std::io::Write as _;
use std::str::FromStr;

use nom::bytes::complete::{tag, take, take_till, take_till1, take_while, take_while1};
use nom::character::complete::char as nchar;
use nom::combinator::{map_res, rest};
use nom::sequence::{preceded, tuple};
use nom::IResult;

/// Advertised maxima (spec §3.3). Never advertise `vallen_max` > 1024 (spec §12.10).
pub const KVSNAME_MAX: usize = 256;
pub const KEYLEN_MAX: usize = 64;
pub const VALLEN_MAX: usize = 1024;
/// Longest request line (or spawn block) the server buffers before declaring the input
/// malformed.
pub const MAX_REQUEST_LEN: usize = 1 << 20;
/// Most segments (`totspawns`) accepted in one `mcmd=spawn` request.
pub const MAX_TOTSPAWNS: u32 = 1024;
/// Most entries accepted in one spawn segment's `argcnt`, `preput_num` or `info_num`.
pub const MAX_SPAWN_LIST: usize = 4096;
/// Largest `nprocs` accepted in one spawn segment: 16,777,216, the most processes a job or
/// a spawn may have in all (`libi::job::MAX_JOB_SIZE`, which the spawner checks for the
/// whole request).
pub const MAX_SPAWN_NPROCS: u32 = 1 << 24;

/// One command of a `mcmd=spawn` request (spec §4).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpawnCmd {
    pub nprocs: u32,
    pub execname: String,
    /// argv[1..], in order (`arg1`..`argN`).
    pub args: Vec<String>,
    /// `preput_key_i`/`preput_val_i`, in order.
    pub preput: Vec<(String, String)>,
    /// `info_key_i`/`info_val_i`, in order.
    pub info: Vec<(String, String)>,
}

/// A PMI-1 client request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `cmd=init pmi_version=V pmi_subversion=S`
    Init {
        version: u32,
        subversion: u32,
    },
    /// `cmd=initack pmiid=ID` (PMI_PORT mode only)
    InitAck {
        pmiid: i64,
    },
    GetMaxes,
    GetAppnum,
    GetMyKvsname,
    GetUniverseSize,
    Put {
        kvsname: String,
        key: String,
        /// Bytes: need not be UTF-8.
        value: Vec<u8>,
    },
    Get {
        kvsname: String,
        key: String,
    },
    /// `cmd=barrier_in` (`group=` of PMI-1.2 kept verbatim if present)
    BarrierIn {
        group: Option<String>,
    },
    Finalize,
    /// `cmd=abort exitcode=N [message=M | error_msg=M]`. Parsing is lenient so that an abort
    /// is never lost: a missing or non-numeric `exitcode` becomes -1.
    Abort {
        exitcode: i32,
        message: Option<String>,
    },
    PublishName {
        service: String,
        port: String,
    },
    UnpublishName {
        service: String,
    },
    LookupName {
        service: String,
    },
    /// legacy `cmd=getbyidx kvsname=K idx=I`
    GetByIdx {
        kvsname: String,
        idx: u64,
    },
    /// Intel MPI `cmd=get_ranks2hosts`
    GetRanks2Hosts,
    /// `mcmd=spawn … endcmd`, all `totspawns` segments. Preputs are taken from the first
    /// segment (4.0 repeats them in every segment, 4.1+ only in the first): after parsing,
    /// only `cmds[0].preput` is filled, and [`Request::encode`] repeats `cmds[0].preput` in
    /// every segment (the `preput` of later commands is ignored).
    Spawn {
        cmds: Vec<SpawnCmd>,
    },
    /// A well-formed `cmd=NAME k=v …` line with an unknown NAME.
    Unknown {
        cmd: String,
    },
}

/// A PMI-1 server reply. `encode` always produces the most compatible form (spec §14): `rc`
/// present on success, `value=` last, one `\n`-terminated line (`Ranks2Hosts` is two lines,
/// `InitAck` four).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `cmd=response_to_init pmi_version=V pmi_subversion=S rc=RC`
    ResponseToInit { version: u32, subversion: u32, rc: i32 },
    /// The 4-line `initack` answer (spec §3.2), superset of the Hydra 4.0 and 4.1+ forms:
    /// `cmd=initack rc=0 rank=R size=N debug=0` then `cmd=set size=N`, `cmd=set rank=R`,
    /// `cmd=set debug=0`.
    InitAck { rank: u32, size: u32 },
    /// `cmd=maxes kvsname_max=K keylen_max=L vallen_max=V rc=0`
    Maxes { kvsname_max: usize, keylen_max: usize, vallen_max: usize },
    /// `cmd=appnum appnum=A rc=0`
    Appnum { appnum: i32 },
    /// `cmd=my_kvsname kvsname=K rc=0`
    MyKvsname { kvsname: String },
    /// `cmd=universe_size size=U rc=0`
    UniverseSize { size: i32 },
    /// `cmd=put_result rc=RC msg=MSG`
    PutResult { rc: i32, msg: String },
    /// found: `cmd=get_result rc=0 msg=success value=V`; missing:
    /// `cmd=get_result rc=-1 msg=key_<key>_not_found value=unknown` (the key is needed for the
    /// message, so the missing form carries it).
    GetResult { value: Result<Vec<u8>, GetMiss> },
    /// `cmd=barrier_out rc=0`
    BarrierOut,
    /// `cmd=finalize_ack rc=0`
    FinalizeAck,
    /// `cmd=publish_result info=ok rc=RC msg=MSG`
    PublishResult { rc: i32, msg: String },
    /// `cmd=unpublish_result info=ok rc=RC msg=MSG`
    UnpublishResult { rc: i32, msg: String },
    /// found: `cmd=lookup_result port=P info=ok rc=0 msg=success`; else `rc=1 msg=service_not_found`
    LookupResult { port: Option<String> },
    /// `cmd=spawn_result rc=RC [errcodes=…]` (an empty `errcodes` list is omitted).
    SpawnResult { rc: i32, errcodes: Option<Vec<i32>> },
    /// `Some((nextidx, key, val))`: `cmd=getbyidx_results rc=0 nextidx=N key=K val=V`;
    /// `None`: `cmd=getbyidx_results rc=1 reason=no_more_keyvals`.
    GetByIdxResult { entry: Option<(u64, String, String)> },
    /// Intel extension (spec §3.17): per host, its name and its ranks. No `cmd=` prefix, two
    /// lines. An empty host list encodes as PSMGMT's minimal one-line `cmd=put_ranks2hosts 0 0`.
    Ranks2Hosts { hosts: Vec<(String, Vec<u32>)> },
    /// Reply to an unknown or refused command: `cmd=<name> rc=RC msg=MSG` (msg has no spaces).
    Error { cmd: String, rc: i32, msg: String },
}

/// Why a `get` found nothing (kept so the reply can name the key like Hydra does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetMiss {
    pub key: String,
}

/// A malformed request. `Display` gives a one-line description without the line's bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("line does not start with cmd= or mcmd=")]
    NoCommand,
    #[error("missing field {field} in {cmd}")]
    MissingField { cmd: String, field: String },
    #[error("bad value for {field} in {cmd}: not a number")]
    BadNumber { cmd: String, field: String },
    /// The offending token, truncated to 32 characters, control characters escaped (the
    /// line's other bytes were made text already: quoting it again would double them).
    #[error("bad token \"{0}\" (expected key=value)")]
    BadToken(String),
    #[error("line is not valid UTF-8")]
    NotUtf8,
    #[error("request longer than {0} bytes")]
    TooLong(usize),
    #[error("malformed spawn: {0}")]
    Spawn(String),
    /// A well-formed `cmd=NAME` line whose NAME this server does not implement (used by the
    /// server's non-fatal `ProtocolError`; [`parse_request`] returns `Request::Unknown`).
    #[error("unknown command {0:?}")]
    UnknownCommand(String),
}

// ---------------------------------------------------------------------------------------------
// Tokenizer (nom)

type PResult<'a, T> = IResult<&'a str, T>;

fn is_key_char(c: char) -> bool {
    c != ' ' && c != '=' && c != '\n' && c != '\0'
}

fn p_key(i: &str) -> PResult<'_, &str> {
    take_till1(|c| !is_key_char(c))(i)
}

fn p_value(i: &str) -> PResult<'_, &str> {
    take_till(|c| c == ' ' || c == '\n')(i)
}

fn p_spaces(i: &str) -> PResult<'_, &str> {
    take_while(|c| c == ' ')(i)
}

/// `key` or `key=value` (value to EOL when `eol(key)`).
fn p_token<'a>(i: &'a str, eol: &dyn Fn(&str) -> bool) -> PResult<'a, Token<'a>> {
    let (i, k) = p_key(i)?;
    match tag::<_, _, nom::error::Error<&str>>("=")(i) {
        Ok((i, _)) => {
            let (i, v) = if eol(k) { rest(i)? } else { p_value(i)? };
            Ok((i, (k, Some(v))))
        }
        Err(_) => Ok((i, (k, None))),
    }
}

type Token<'a> = (&'a str, Option<&'a str>);

fn bad_token(at: &str) -> ParseError {
    let tok = at.split(' ').next().unwrap_or("");
    let mut shown = String::new();
    for c in tok.chars().take(32) {
        if c.is_control() || c == '"' {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    ParseError::BadToken(shown)
}

/// A tokenized `<prefix><name> k=v …` line.
struct Fields<'a> {
    cmd: &'a str,
    toks: Vec<Token<'a>>,
}

impl<'a> Fields<'a> {
    fn parse(
        line: &'a str,
        prefix: &'static str,
        eol: &dyn Fn(&str, &str) -> bool,
    ) -> Result<Self, ParseError> {
        let (mut i, cmd) = preceded(tag::<_, _, nom::error::Error<&str>>(prefix), p_value)(line)
            .map_err(|_| ParseError::NoCommand)?;
        if cmd.is_empty() {
            return Err(ParseError::MissingField { cmd: String::new(), field: "cmd".into() });
        }
        let eolk = |k: &str| eol(cmd, k);
        let mut toks = Vec::new();
        loop {
            let (j, sp) = p_spaces(i).map_err(|_| bad_token(i))?;
            if j.is_empty() {
                break;
            }
            if sp.is_empty() {
                // A value or key stopped at `\n` or NUL.
                return Err(bad_token(j));
            }
            let (j, tok) = p_token(j, &eolk).map_err(|_| bad_token(j))?;
            toks.push(tok);
            i = j;
        }
        Ok(Fields { cmd, toks })
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.toks.iter().find(|(k, _)| *k == key).and_then(|(_, v)| *v)
    }

    fn req(&self, key: &str) -> Result<&'a str, ParseError> {
        self.get(key)
            .ok_or_else(|| ParseError::MissingField { cmd: self.cmd.into(), field: key.into() })
    }

    fn num<T: FromStr>(&self, key: &str) -> Result<T, ParseError> {
        self.req(key)?
            .parse()
            .map_err(|_| ParseError::BadNumber { cmd: self.cmd.into(), field: key.into() })
    }

    fn string(&self, key: &str) -> Result<String, ParseError> {
        self.req(key).map(str::to_owned)
    }
}

fn to_str(bytes: &[u8]) -> Result<&str, ParseError> {
    std::str::from_utf8(bytes).map_err(|_| ParseError::NotUtf8)
}

/// A line that is not UTF-8 only in the value that runs to its end (`put`'s, `get_result`'s,
/// as `start`, `cmd=put ` say, begins it): the text before ` value=`, and the value's bytes.
fn split_raw_value<'a>(line: &'a [u8], start: &[u8]) -> Result<(&'a str, &'a [u8]), ParseError> {
    const AT: &[u8] = b" value=";
    let at = line
        .starts_with(start)
        .then(|| line.windows(AT.len()).position(|w| w == AT))
        .flatten()
        .ok_or(ParseError::NotUtf8)?;
    Ok((to_str(&line[..at])?, &line[at + AT.len()..]))
}

// ---------------------------------------------------------------------------------------------
// Requests

/// Parse one PMI-1 request line (without its trailing `\n`). `mcmd=spawn` blocks go to
/// [`parse_spawn`] instead (this returns `ParseError::Spawn` for them).
pub fn parse_request(line: &[u8]) -> Result<Request, ParseError> {
    if line.len() > MAX_REQUEST_LEN {
        return Err(ParseError::TooLong(MAX_REQUEST_LEN));
    }
    // A `put` whose value is not UTF-8: the rest of the line must be.
    let (s, raw) = match to_str(line) {
        Ok(s) => (s, None),
        Err(e) => split_raw_value(line, b"cmd=put ").map(|(s, v)| (s, Some(v))).map_err(|_| e)?,
    };
    if s.starts_with("mcmd=") {
        return Err(ParseError::Spawn("mcmd= requests are multi-line; use parse_spawn".into()));
    }
    let eol = |cmd: &str, k: &str| match cmd {
        "put" => k == "value",
        "abort" => k == "message" || k == "error_msg",
        _ => false,
    };
    let f = Fields::parse(s, "cmd=", &eol)?;
    Ok(match f.cmd {
        "init" => {
            Request::Init { version: f.num("pmi_version")?, subversion: f.num("pmi_subversion")? }
        }
        "initack" => Request::InitAck { pmiid: f.num("pmiid")? },
        "get_maxes" => Request::GetMaxes,
        "get_appnum" => Request::GetAppnum,
        "get_my_kvsname" => Request::GetMyKvsname,
        "get_universe_size" => Request::GetUniverseSize,
        "put" => Request::Put {
            kvsname: f.string("kvsname")?,
            key: f.string("key")?,
            value: match raw {
                Some(v) => v.to_vec(),
                None => f.string("value")?.into_bytes(),
            },
        },
        "get" => Request::Get { kvsname: f.string("kvsname")?, key: f.string("key")? },
        "barrier_in" => Request::BarrierIn { group: f.get("group").map(str::to_owned) },
        "finalize" => Request::Finalize,
        "abort" => Request::Abort {
            exitcode: f.get("exitcode").and_then(|v| v.parse().ok()).unwrap_or(-1),
            message: f.get("message").or_else(|| f.get("error_msg")).map(str::to_owned),
        },
        "publish_name" => {
            Request::PublishName { service: f.string("service")?, port: f.string("port")? }
        }
        "unpublish_name" => Request::UnpublishName { service: f.string("service")? },
        "lookup_name" => Request::LookupName { service: f.string("service")? },
        "getbyidx" => Request::GetByIdx { kvsname: f.string("kvsname")?, idx: f.num("idx")? },
        "get_ranks2hosts" => Request::GetRanks2Hosts,
        other => Request::Unknown { cmd: other.to_owned() },
    })
}

fn spawn_err(msg: impl Display) -> ParseError {
    ParseError::Spawn(msg.to_string())
}

struct Segment<'a> {
    fields: HashMap<&'a str, &'a str>,
}

impl<'a> Segment<'a> {
    fn get(&self, k: &str) -> Option<&'a str> {
        self.fields.get(k).copied()
    }
    fn req(&self, k: &str) -> Result<&'a str, ParseError> {
        self.get(k).ok_or_else(|| ParseError::MissingField { cmd: "spawn".into(), field: k.into() })
    }
    fn num<T: FromStr>(&self, k: &str) -> Result<T, ParseError> {
        self.req(k)?
            .parse()
            .map_err(|_| ParseError::BadNumber { cmd: "spawn".into(), field: k.into() })
    }
    fn num_or0(&self, k: &str) -> Result<usize, ParseError> {
        if self.get(k).is_none() {
            return Ok(0);
        }
        let n: usize = self.num(k)?;
        if n > MAX_SPAWN_LIST {
            return Err(spawn_err(format_args!("{k}={n} exceeds {MAX_SPAWN_LIST}")));
        }
        Ok(n)
    }
    fn pairs(&self, num: &str, key: &str, val: &str) -> Result<Vec<(String, String)>, ParseError> {
        let n = self.num_or0(num)?;
        (0..n)
            .map(|i| {
                let k = self.req(&format!("{key}{i}"))?;
                let v = self.req(&format!("{val}{i}"))?;
                Ok((k.to_owned(), v.to_owned()))
            })
            .collect()
    }
}

/// Split `key=value` at the first `=` (nom); the value runs to the end of the line.
fn p_spawn_line(i: &str) -> PResult<'_, (&str, &str)> {
    tuple((take_till1(|c| c == '='), preceded(nchar('='), rest)))(i)
}

/// Parse a complete `mcmd=spawn … endcmd` block (all `totspawns` segments, each line
/// `\n`-terminated; the final `\n` is optional). Accepts the 4.0.x form (every segment starts
/// with `mcmd=spawn` and repeats the preputs; `arg*` before `argcnt`) and the 4.1+ form
/// (preputs only in the first segment; `argcnt` before `arg*`). Later segments may omit the
/// `mcmd=spawn` line. Empty lines are ignored. Limits: [`MAX_TOTSPAWNS`],
/// [`MAX_SPAWN_LIST`], [`MAX_SPAWN_NPROCS`].
pub fn parse_spawn(block: &[u8]) -> Result<Request, ParseError> {
    if block.len() > MAX_REQUEST_LEN {
        return Err(ParseError::TooLong(MAX_REQUEST_LEN));
    }
    let s = to_str(block)?;
    let s = s.strip_suffix('\n').unwrap_or(s);
    let mut segments: Vec<Segment<'_>> = Vec::new();
    let mut cur: Option<Segment<'_>> = None;
    let mut done = false;
    for line in s.split('\n') {
        if line.is_empty() {
            continue;
        }
        if done {
            return Err(spawn_err("data after the final endcmd"));
        }
        if line == "endcmd" {
            let seg = cur.take().ok_or_else(|| spawn_err("endcmd outside a segment"))?;
            let sofar = seg.get("spawnssofar").and_then(|v| v.parse::<u32>().ok());
            let tot = seg.get("totspawns").and_then(|v| v.parse::<u32>().ok());
            done = sofar.is_some() && sofar == tot;
            segments.push(seg);
            if segments.len() > MAX_TOTSPAWNS as usize {
                return Err(spawn_err("too many segments"));
            }
            continue;
        }
        let (_, (k, v)) = p_spawn_line(line).map_err(|_| spawn_err("line is not key=value"))?;
        if k == "mcmd" {
            if v != "spawn" {
                return Err(spawn_err("unsupported mcmd"));
            }
            match &cur {
                Some(seg) if !seg.fields.is_empty() => {
                    return Err(spawn_err("mcmd=spawn inside a segment"))
                }
                _ => cur = Some(Segment { fields: HashMap::new() }),
            }
            continue;
        }
        let seg = match &mut cur {
            Some(seg) => seg,
            None if segments.is_empty() => return Err(ParseError::NoCommand),
            None => cur.insert(Segment { fields: HashMap::new() }),
        };
        seg.fields.entry(k).or_insert(v);
    }
    if !done {
        return Err(spawn_err("incomplete: no endcmd with spawnssofar == totspawns"));
    }
    let total = segments.len();
    let mut cmds = Vec::with_capacity(total);
    for (idx, seg) in segments.iter().enumerate() {
        let tot: u32 = seg.num("totspawns")?;
        let sofar: u32 = seg.num("spawnssofar")?;
        if tot as usize != total || sofar as usize != idx + 1 {
            return Err(spawn_err(format_args!(
                "segment {} has spawnssofar={sofar} totspawns={tot}, expected {}/{total}",
                idx + 1,
                idx + 1
            )));
        }
        let nprocs: u32 = seg.num("nprocs")?;
        if nprocs > MAX_SPAWN_NPROCS {
            return Err(spawn_err(format_args!(
                "nprocs={nprocs}: too many processes (at most {MAX_SPAWN_NPROCS} in a spawn)"
            )));
        }
        let argcnt = seg.num_or0("argcnt")?;
        let args = (1..=argcnt)
            .map(|i| seg.req(&format!("arg{i}")).map(str::to_owned))
            .collect::<Result<Vec<_>, _>>()?;
        // Preputs: first segment only (4.0 repeats them; they are still bounds-checked).
        let preput = seg.pairs("preput_num", "preput_key_", "preput_val_")?;
        let preput = if idx == 0 { preput } else { Vec::new() };
        let info = seg.pairs("info_num", "info_key_", "info_val_")?;
        cmds.push(SpawnCmd {
            nprocs,
            execname: seg.req("execname")?.to_owned(),
            args,
            preput,
            info,
        });
    }
    Ok(Request::Spawn { cmds })
}

// ---------------------------------------------------------------------------------------------
// Encoding helpers

/// A value that ends at a space: spaces and newlines become `_`.
fn push_tok(out: &mut Vec<u8>, s: &str) {
    if s.bytes().any(|b| b == b' ' || b == b'\n') {
        out.extend(s.bytes().map(|b| if b == b' ' || b == b'\n' { b'_' } else { b }));
    } else {
        out.extend_from_slice(s.as_bytes());
    }
}

/// A value that runs to end of line: newlines become `_`.
fn push_eol(out: &mut Vec<u8>, s: impl AsRef<[u8]>) {
    let s = s.as_ref();
    if s.contains(&b'\n') {
        out.extend(s.iter().map(|&b| if b == b'\n' { b'_' } else { b }));
    } else {
        out.extend_from_slice(s);
    }
}

fn push_int(out: &mut Vec<u8>, n: impl Display) {
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{n}");
}

/// ` key=value` (value sanitized as a token).
fn kv(out: &mut Vec<u8>, key: &str, val: &str) {
    out.push(b' ');
    out.extend_from_slice(key.as_bytes());
    out.push(b'=');
    push_tok(out, val);
}

fn kn(out: &mut Vec<u8>, key: &str, n: impl Display) {
    out.push(b' ');
    out.extend_from_slice(key.as_bytes());
    out.push(b'=');
    push_int(out, n);
}

fn head(out: &mut Vec<u8>, prefix: &str, name: &str) {
    out.extend_from_slice(prefix.as_bytes());
    push_tok(out, name);
}

/// ` msg=M`, omitted when empty.
fn msg(out: &mut Vec<u8>, m: &str) {
    if !m.is_empty() {
        kv(out, "msg", m);
    }
}

/// One spawn line `key=value\n` (value to EOL).
fn spawn_line(out: &mut Vec<u8>, key: impl Display, val: impl Display) {
    let _ = write!(out, "{key}=");
    let v = val.to_string();
    push_eol(out, &v);
    out.push(b'\n');
}

impl Request {
    /// Client-direction encoding, in the form MPICH 4.0 sends (multi-segment spawn included),
    /// `\n`-terminated.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let c = |out: &mut Vec<u8>, name: &str| head(out, "cmd=", name);
        match self {
            Request::Init { version, subversion } => {
                c(out, "init");
                kn(out, "pmi_version", version);
                kn(out, "pmi_subversion", subversion);
            }
            Request::InitAck { pmiid } => {
                c(out, "initack");
                kn(out, "pmiid", pmiid);
            }
            Request::GetMaxes => c(out, "get_maxes"),
            Request::GetAppnum => c(out, "get_appnum"),
            Request::GetMyKvsname => c(out, "get_my_kvsname"),
            Request::GetUniverseSize => c(out, "get_universe_size"),
            Request::Put { kvsname, key, value } => {
                c(out, "put");
                kv(out, "kvsname", kvsname);
                kv(out, "key", key);
                out.extend_from_slice(b" value=");
                push_eol(out, value);
            }
            Request::Get { kvsname, key } => {
                c(out, "get");
                kv(out, "kvsname", kvsname);
                kv(out, "key", key);
            }
            Request::BarrierIn { group } => {
                c(out, "barrier_in");
                if let Some(g) = group {
                    kv(out, "group", g);
                }
            }
            Request::Finalize => c(out, "finalize"),
            Request::Abort { exitcode, message } => {
                c(out, "abort");
                kn(out, "exitcode", exitcode);
                if let Some(m) = message {
                    out.extend_from_slice(b" message=");
                    push_eol(out, m);
                }
            }
            Request::PublishName { service, port } => {
                c(out, "publish_name");
                kv(out, "service", service);
                kv(out, "port", port);
            }
            Request::UnpublishName { service } => {
                c(out, "unpublish_name");
                kv(out, "service", service);
            }
            Request::LookupName { service } => {
                c(out, "lookup_name");
                kv(out, "service", service);
            }
            Request::GetByIdx { kvsname, idx } => {
                c(out, "getbyidx");
                kv(out, "kvsname", kvsname);
                kn(out, "idx", idx);
            }
            Request::GetRanks2Hosts => c(out, "get_ranks2hosts"),
            Request::Spawn { cmds } => {
                let empty = Vec::new();
                let preput = cmds.first().map_or(&empty, |c| &c.preput);
                let tot = cmds.len();
                for (i, cmd) in cmds.iter().enumerate() {
                    out.extend_from_slice(b"mcmd=spawn\n");
                    spawn_line(out, "nprocs", cmd.nprocs);
                    spawn_line(out, "execname", &cmd.execname);
                    spawn_line(out, "totspawns", tot);
                    spawn_line(out, "spawnssofar", i + 1);
                    for (j, a) in cmd.args.iter().enumerate() {
                        spawn_line(out, format_args!("arg{}", j + 1), a);
                    }
                    spawn_line(out, "argcnt", cmd.args.len());
                    spawn_line(out, "preput_num", preput.len());
                    for (j, (k, v)) in preput.iter().enumerate() {
                        spawn_line(out, format_args!("preput_key_{j}"), k);
                        spawn_line(out, format_args!("preput_val_{j}"), v);
                    }
                    spawn_line(out, "info_num", cmd.info.len());
                    for (j, (k, v)) in cmd.info.iter().enumerate() {
                        spawn_line(out, format_args!("info_key_{j}"), k);
                        spawn_line(out, format_args!("info_val_{j}"), v);
                    }
                    out.extend_from_slice(b"endcmd\n");
                }
                return;
            }
            Request::Unknown { cmd } => c(out, cmd),
        }
        out.push(b'\n');
    }
}

// ---------------------------------------------------------------------------------------------
// Replies

/// Reply command names [`Reply::parse`] maps to a specific variant (anything else is
/// [`Reply::Error`]).
const KNOWN_REPLIES: &[&str] = &[
    "response_to_init",
    "initack",
    "set",
    "maxes",
    "appnum",
    "my_kvsname",
    "universe_size",
    "put_result",
    "get_result",
    "barrier_out",
    "finalize_ack",
    "publish_result",
    "unpublish_result",
    "lookup_result",
    "spawn_result",
    "getbyidx_results",
    "put_ranks2hosts",
];

/// Whether `name` is a reply command that [`Reply::parse`] turns into a specific variant.
pub fn is_known_reply_cmd(name: &str) -> bool {
    KNOWN_REPLIES.contains(&name)
}

fn ranks2hosts_line(hosts: &[(String, Vec<u32>)]) -> Vec<u8> {
    let mut l = Vec::new();
    for (host, ranks) in hosts {
        let host = host.replace('\n', "_");
        push_int(&mut l, host.len());
        l.push(b' ');
        l.extend_from_slice(host.as_bytes());
        l.push(b' ');
        for r in ranks {
            push_int(&mut l, r);
            l.push(b',');
        }
        l.push(b' ');
    }
    l
}

impl Reply {
    /// Encode, `\n`-terminated (see the type's docs for the exact forms).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let c = |out: &mut Vec<u8>, name: &str| head(out, "cmd=", name);
        let rc0 = |out: &mut Vec<u8>| out.extend_from_slice(b" rc=0");
        match self {
            Reply::ResponseToInit { version, subversion, rc } => {
                c(out, "response_to_init");
                kn(out, "pmi_version", version);
                kn(out, "pmi_subversion", subversion);
                kn(out, "rc", rc);
            }
            Reply::InitAck { rank, size } => {
                let _ = write!(
                    out,
                    "cmd=initack rc=0 rank={rank} size={size} debug=0\n\
                     cmd=set size={size}\ncmd=set rank={rank}\ncmd=set debug=0"
                );
            }
            Reply::Maxes { kvsname_max, keylen_max, vallen_max } => {
                c(out, "maxes");
                kn(out, "kvsname_max", kvsname_max);
                kn(out, "keylen_max", keylen_max);
                kn(out, "vallen_max", vallen_max);
                rc0(out);
            }
            Reply::Appnum { appnum } => {
                c(out, "appnum");
                kn(out, "appnum", appnum);
                rc0(out);
            }
            Reply::MyKvsname { kvsname } => {
                c(out, "my_kvsname");
                kv(out, "kvsname", kvsname);
                rc0(out);
            }
            Reply::UniverseSize { size } => {
                c(out, "universe_size");
                kn(out, "size", size);
                rc0(out);
            }
            Reply::PutResult { rc, msg: m } => {
                c(out, "put_result");
                kn(out, "rc", rc);
                msg(out, m);
            }
            Reply::GetResult { value: Ok(v) } => {
                out.extend_from_slice(b"cmd=get_result rc=0 msg=success value=");
                push_eol(out, v);
            }
            Reply::GetResult { value: Err(GetMiss { key }) } => {
                out.extend_from_slice(b"cmd=get_result rc=-1 msg=key_");
                push_tok(out, key);
                out.extend_from_slice(b"_not_found value=unknown");
            }
            Reply::BarrierOut => out.extend_from_slice(b"cmd=barrier_out rc=0"),
            Reply::FinalizeAck => out.extend_from_slice(b"cmd=finalize_ack rc=0"),
            Reply::PublishResult { rc, msg: m } => {
                c(out, "publish_result");
                out.extend_from_slice(b" info=ok");
                kn(out, "rc", rc);
                msg(out, m);
            }
            Reply::UnpublishResult { rc, msg: m } => {
                c(out, "unpublish_result");
                out.extend_from_slice(b" info=ok");
                kn(out, "rc", rc);
                msg(out, m);
            }
            Reply::LookupResult { port: Some(p) } => {
                c(out, "lookup_result");
                kv(out, "port", p);
                out.extend_from_slice(b" info=ok rc=0 msg=success");
            }
            Reply::LookupResult { port: None } => {
                out.extend_from_slice(b"cmd=lookup_result rc=1 msg=service_not_found");
            }
            Reply::SpawnResult { rc, errcodes } => {
                c(out, "spawn_result");
                kn(out, "rc", rc);
                if let Some(codes) = errcodes.as_ref().filter(|c| !c.is_empty()) {
                    out.extend_from_slice(b" errcodes=");
                    for (i, e) in codes.iter().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        push_int(out, e);
                    }
                }
            }
            Reply::GetByIdxResult { entry: Some((next, k, v)) } => {
                out.extend_from_slice(b"cmd=getbyidx_results rc=0");
                kn(out, "nextidx", next);
                kv(out, "key", k);
                kv(out, "val", v);
            }
            Reply::GetByIdxResult { entry: None } => {
                out.extend_from_slice(b"cmd=getbyidx_results rc=1 reason=no_more_keyvals");
            }
            Reply::Ranks2Hosts { hosts } if hosts.is_empty() => {
                out.extend_from_slice(b"cmd=put_ranks2hosts 0 0");
            }
            Reply::Ranks2Hosts { hosts } => {
                let line = ranks2hosts_line(hosts);
                // L = length of the second line including its `\n`, plus one (spec §3.17).
                let _ = writeln!(out, "put_ranks2hosts {} {}", line.len() + 2, hosts.len());
                out.extend_from_slice(&line);
            }
            Reply::Error { cmd, rc, msg: m } => {
                c(out, cmd);
                kn(out, "rc", rc);
                msg(out, m);
            }
        }
        out.push(b'\n');
    }

    /// Encode into a fresh buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }

    /// Client-side parser for one complete reply (all its lines: 4 for `initack`, 2 for a
    /// non-empty `put_ranks2hosts`, else 1; the final `\n` is optional). Accepts the Hydra 4.0,
    /// 4.1+ and Slurm/Flux variants (keys in any order, `rc` optional on success replies).
    /// Anything after the reply's lines is an error. A `cmd=NAME` this module does not know
    /// parses as [`Reply::Error`].
    pub fn parse(bytes: &[u8]) -> Result<Reply, ParseError> {
        let line = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        if to_str(line).is_err() {
            // A found value that is not UTF-8: the rest of the line must be, and be one.
            let (head, v) = split_raw_value(line, b"cmd=get_result ")?;
            let eol = |_: &str, _: &str| false;
            let f = Fields::parse(head, "cmd=", &eol)?;
            if f.cmd != "get_result" || f.get("rc").is_some_and(|rc| rc != "0") {
                return Err(ParseError::NotUtf8);
            }
            return Ok(Reply::GetResult { value: Ok(v.to_vec()) });
        }
        let s = to_str(bytes)?;
        let body = s.strip_suffix('\n').unwrap_or(s);
        let mut lines = body.split('\n');
        let first = lines.next().unwrap_or("");
        if first.starts_with("put_ranks2hosts") || first.starts_with("cmd=put_ranks2hosts") {
            return parse_ranks2hosts(first, lines);
        }
        let eol = |cmd: &str, k: &str| cmd == "get_result" && k == "value";
        let f = Fields::parse(first, "cmd=", &eol)?;
        let rc = |f: &Fields<'_>| -> Result<i32, ParseError> {
            if f.get("rc").is_some() {
                f.num("rc")
            } else {
                Ok(0)
            }
        };
        let msg_of = |f: &Fields<'_>| f.get("msg").unwrap_or("").to_owned();
        let reply = match f.cmd {
            "response_to_init" => Reply::ResponseToInit {
                version: f.num("pmi_version")?,
                subversion: f.num("pmi_subversion")?,
                rc: rc(&f)?,
            },
            "initack" => {
                let (mut rank, mut size) = (None, None);
                for _ in 0..3 {
                    let l = lines.next().ok_or_else(|| ParseError::MissingField {
                        cmd: "initack".into(),
                        field: "cmd=set".into(),
                    })?;
                    let s = Fields::parse(l, "cmd=", &|_, _| false)?;
                    if s.cmd != "set" {
                        return Err(bad_token(l));
                    }
                    if s.get("rank").is_some() {
                        rank = Some(s.num::<u32>("rank")?);
                    }
                    if s.get("size").is_some() {
                        size = Some(s.num::<u32>("size")?);
                    }
                }
                let missing = |field: &str| ParseError::MissingField {
                    cmd: "initack".into(),
                    field: field.into(),
                };
                Reply::InitAck {
                    rank: rank.ok_or_else(|| missing("rank"))?,
                    size: size.ok_or_else(|| missing("size"))?,
                }
            }
            "maxes" => Reply::Maxes {
                kvsname_max: f.num("kvsname_max")?,
                keylen_max: f.num("keylen_max")?,
                vallen_max: f.num("vallen_max")?,
            },
            "appnum" => Reply::Appnum { appnum: f.num("appnum")? },
            "my_kvsname" => Reply::MyKvsname { kvsname: f.string("kvsname")? },
            "universe_size" => Reply::UniverseSize { size: f.num("size")? },
            "put_result" => Reply::PutResult { rc: rc(&f)?, msg: msg_of(&f) },
            "get_result" => {
                if rc(&f)? == 0 {
                    Reply::GetResult { value: Ok(f.string("value")?.into_bytes()) }
                } else {
                    let m = f.get("msg").unwrap_or("");
                    let key = m
                        .strip_prefix("key_")
                        .and_then(|k| k.strip_suffix("_not_found"))
                        .unwrap_or("");
                    Reply::GetResult { value: Err(GetMiss { key: key.to_owned() }) }
                }
            }
            "barrier_out" => Reply::BarrierOut,
            "finalize_ack" => Reply::FinalizeAck,
            "publish_result" => Reply::PublishResult { rc: rc(&f)?, msg: msg_of(&f) },
            "unpublish_result" => Reply::UnpublishResult { rc: rc(&f)?, msg: msg_of(&f) },
            "lookup_result" => {
                let port = match (rc(&f)?, f.get("port")) {
                    (0, Some(p)) => Some(p.to_owned()),
                    _ => None,
                };
                Reply::LookupResult { port }
            }
            "spawn_result" => {
                let errcodes = match f.get("errcodes") {
                    None | Some("") => None,
                    Some(list) => Some(
                        list.split(',')
                            .map(|e| {
                                e.parse().map_err(|_| ParseError::BadNumber {
                                    cmd: "spawn_result".into(),
                                    field: "errcodes".into(),
                                })
                            })
                            .collect::<Result<Vec<i32>, _>>()?,
                    ),
                };
                Reply::SpawnResult { rc: rc(&f)?, errcodes }
            }
            "getbyidx_results" => {
                let entry = if rc(&f)? == 0 {
                    Some((f.num("nextidx")?, f.string("key")?, f.string("val")?))
                } else {
                    None
                };
                Reply::GetByIdxResult { entry }
            }
            "set" => return Err(bad_token(first)),
            other => Reply::Error { cmd: other.to_owned(), rc: f.num("rc")?, msg: msg_of(&f) },
        };
        match lines.next() {
            None => Ok(reply),
            Some(extra) => Err(bad_token(extra)),
        }
    }
}

fn p_usize(i: &[u8]) -> IResult<&[u8], usize> {
    map_res(take_while1(|c: u8| c.is_ascii_digit()), |d: &[u8]| {
        std::str::from_utf8(d).map_err(|_| ()).and_then(|d| d.parse::<usize>().map_err(|_| ()))
    })(i)
}

/// `<len> <host> <r>,<r>,…, ` (ranks may be empty).
fn p_r2h_entry(i: &[u8]) -> IResult<&[u8], (&[u8], &[u8])> {
    let (i, len) = p_usize(i)?;
    let (i, _) = nom::bytes::complete::tag(" ")(i)?;
    let (i, host) = take(len)(i)?;
    let (i, _) = nom::bytes::complete::tag(" ")(i)?;
    let (i, ranks) = take_till(|c| c == b' ')(i)?;
    let (i, _) = nom::bytes::complete::tag(" ")(i)?;
    Ok((i, (host, ranks)))
}

fn parse_ranks2hosts<'a>(
    first: &str,
    mut lines: impl Iterator<Item = &'a str>,
) -> Result<Reply, ParseError> {
    let num =
        |field: &str| ParseError::BadNumber { cmd: "put_ranks2hosts".into(), field: field.into() };
    let hdr = first.strip_prefix("cmd=").unwrap_or(first);
    let (len, nhosts) = tuple((
        tag::<_, _, nom::error::Error<&str>>("put_ranks2hosts "),
        take_till1(|c| c == ' '),
        nchar(' '),
        rest,
    ))(hdr)
    .map(|(_, (_, l, _, h))| (l, h))
    .map_err(|_| bad_token(first))?;
    let len: usize = len.parse().map_err(|_| num("length"))?;
    let nhosts: usize = nhosts.parse().map_err(|_| num("hosts"))?;
    let line = match lines.next() {
        Some(l) => l,
        None if nhosts == 0 => return Ok(Reply::Ranks2Hosts { hosts: Vec::new() }),
        None => {
            return Err(ParseError::MissingField {
                cmd: "put_ranks2hosts".into(),
                field: "hosts line".into(),
            })
        }
    };
    if let Some(extra) = lines.next() {
        return Err(bad_token(extra));
    }
    if len != line.len() + 2 {
        return Err(num("length"));
    }
    let mut i = line.as_bytes();
    let mut hosts = Vec::with_capacity(nhosts.min(1024));
    for _ in 0..nhosts {
        let (r, (host, ranks)) = p_r2h_entry(i).map_err(|_| bad_token(line))?;
        i = r;
        let host = to_str(host)?.to_owned();
        let ranks = to_str(ranks)?
            .split(',')
            .filter(|r| !r.is_empty())
            .map(|r| r.parse::<u32>().map_err(|_| num("rank")))
            .collect::<Result<Vec<_>, _>>()?;
        hosts.push((host, ranks));
    }
    if !i.is_empty() {
        return Err(bad_token(line));
    }
    Ok(Reply::Ranks2Hosts { hosts })
}

#[cfg(test)]
mod bad_token_tests {
    use super::*;

    /// A bad token is quoted once: text as it is, control characters and quotes escaped.
    #[test]
    fn bad_token_is_quoted_once() {
        assert_eq!(
            bad_token("7\\xd5 x=y").to_string(),
            r#"bad token "7\xd5" (expected key=value)"#
        );
        assert_eq!(
            bad_token("a\u{1b}[2J\"").to_string(),
            r#"bad token "a\u{1b}[2J\"" (expected key=value)"#
        );
    }
}
