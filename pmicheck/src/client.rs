//! A lock-step PMI client over the server's socket (`PMI_FD`, or `PMI_PORT` [+ `PMI_ID`]),
//! speaking PMI-1 or PMI-2 with the codecs of `pmi-wire`. Every read has a deadline: a server
//! that does not answer gives [`OpErr::Hung`], never a hang of the tool.
//!
//! After a hang, an EOF or an I/O error the connection is *broken* (a late reply would be
//! taken for the answer to the next request): every later operation fails at once with
//! [`OpErr::Broken`].

use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use pmi_wire::{v1, v2};

/// Longest reply buffered before the reply is declared malformed.
const MAX_REPLY: usize = 1 << 20;

/// Why an operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpErr {
    /// No (complete) reply within the deadline.
    Hung { what: String, after: Duration },
    /// The server closed the connection.
    Closed { what: String },
    /// A read or write failed.
    Io { what: String, err: String },
    /// The reply could not be parsed, or was not the reply to the request.
    Bad { what: String, why: String },
    /// A well-formed refusal (`rc≠0`).
    Refused { what: String, rc: i32, msg: String },
    /// The connection was broken by an earlier failure.
    Broken(String),
}

impl fmt::Display for OpErr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpErr::Hung { what, after } => {
                write!(f, "hung: no reply to {what} within {}s", after.as_secs_f64())
            }
            OpErr::Closed { what } => write!(f, "server closed the connection during {what}"),
            OpErr::Io { what, err } => write!(f, "I/O error during {what}: {err}"),
            OpErr::Bad { what, why } => write!(f, "bad reply to {what}: {why}"),
            OpErr::Refused { what, rc, msg } if msg.is_empty() => {
                write!(f, "{what} refused: rc={rc}")
            }
            OpErr::Refused { what, rc, msg } => write!(f, "{what} refused: rc={rc} msg={msg}"),
            OpErr::Broken(why) => write!(f, "not attempted: connection unusable ({why})"),
        }
    }
}

impl OpErr {
    pub fn is_refusal(&self) -> bool {
        matches!(self, OpErr::Refused { .. })
    }
}

/// The byte stream to the server.
enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn set_read_timeout(&self, d: Duration) -> io::Result<()> {
        let d = Some(d.max(Duration::from_millis(1)));
        match self {
            Stream::Unix(s) => s.set_read_timeout(d),
            Stream::Tcp(s) => s.set_read_timeout(d),
        }
    }
    fn set_write_timeout(&self, d: Duration) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(Some(d)),
            Stream::Tcp(s) => s.set_write_timeout(Some(d)),
        }
    }
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(b),
            Stream::Tcp(s) => s.read(b),
        }
    }
    fn write_all(&mut self, b: &[u8]) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.write_all(b),
            Stream::Tcp(s) => s.write_all(b),
        }
    }
}

/// How the server was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Fd(RawFd),
    /// `PMI_PORT` and, if set, `PMI_ID`.
    Port(String, Option<i64>),
}

impl Endpoint {
    /// From the environment (`PMI_FD` first, as MPICH does).
    pub fn from_env() -> Result<Endpoint, String> {
        if let Ok(fd) = std::env::var("PMI_FD") {
            let fd: RawFd =
                fd.trim().parse().map_err(|_| format!("PMI_FD={fd:?} is not a number"))?;
            return Ok(Endpoint::Fd(fd));
        }
        if let Ok(port) = std::env::var("PMI_PORT") {
            let id = match std::env::var("PMI_ID") {
                Ok(id) => {
                    Some(id.trim().parse().map_err(|_| format!("PMI_ID={id:?} is not a number"))?)
                }
                Err(_) => None,
            };
            return Ok(Endpoint::Port(port, id));
        }
        Err("neither PMI_FD nor PMI_PORT is set (not started by a process manager?)".into())
    }
}

/// What `init` learned.
#[derive(Debug, Clone, Default)]
pub struct InitInfo {
    /// The reply line's version/subversion (PMI-1 `response_to_init`).
    pub version: u32,
    pub subversion: u32,
    /// From `initack` (PMI-1 port mode) or `fullinit` (PMI-2).
    pub rank: Option<i32>,
    pub size: Option<i32>,
    pub appnum: Option<i32>,
}

pub struct Conn {
    s: Stream,
    buf: Vec<u8>,
    pub v2: bool,
    broken: Option<String>,
    /// A request that hung (not a collective one): before the next request, resynchronise.
    desync: Option<String>,
    /// `init` succeeded (before that a hang is fatal).
    ready: bool,
    pub op_timeout: Duration,
    pub fence_timeout: Duration,
    /// PMI-1: the kvsname put into `put`/`get` requests.
    pub kvsname: String,
    endpoint: Endpoint,
}

impl Conn {
    pub fn connect(
        ep: &Endpoint,
        v2: bool,
        op_timeout: Duration,
        fence_timeout: Duration,
    ) -> Result<Conn, String> {
        let s = match ep {
            Endpoint::Fd(fd) => {
                use nix::sys::stat::{fstat, SFlag};
                let st = fstat(*fd).map_err(|e| format!("PMI_FD={fd}: {e}"))?;
                if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFSOCK {
                    return Err(format!("PMI_FD={fd} is not a socket"));
                }
                // SAFETY: the fd is open (fstat succeeded), it is a socket, and nothing else in
                // this process uses it; the process manager handed it to us for this purpose.
                Stream::Unix(unsafe { UnixStream::from_raw_fd(*fd) })
            }
            Endpoint::Port(port, _) => {
                let s = TcpStream::connect(port.as_str())
                    .map_err(|e| format!("PMI_PORT={port}: connect: {e}"))?;
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }
        };
        s.set_write_timeout(op_timeout).map_err(|e| format!("setsockopt: {e}"))?;
        Ok(Conn {
            s,
            buf: Vec::new(),
            v2,
            broken: None,
            desync: None,
            ready: false,
            op_timeout,
            fence_timeout,
            kvsname: String::new(),
            endpoint: ep.clone(),
        })
    }

    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    fn check(&self) -> Result<(), OpErr> {
        match &self.broken {
            Some(b) => Err(OpErr::Broken(b.clone())),
            None => Ok(()),
        }
    }

    /// Record a fatal error (the stream may be out of step from now on).
    fn breaks(&mut self, e: OpErr) -> OpErr {
        if matches!(e, OpErr::Closed { .. } | OpErr::Io { .. }) {
            self.broken = Some(e.to_string());
        }
        e
    }

    /// A request hung. A collective one (fence, spawn) or one before `init` succeeded breaks
    /// the connection; any other is resynchronised before the next request.
    fn hung(&mut self, e: OpErr, collective: bool) -> OpErr {
        if matches!(e, OpErr::Hung { .. }) {
            if collective || !self.ready {
                self.broken = Some(e.to_string());
            } else {
                self.desync = Some(e.to_string());
            }
        }
        e
    }

    /// After a hung request: send a probe whose reply is unmistakable (`get_my_kvsname` /
    /// `job-getid`) and drop every reply before its answer (a lock-step server answers in
    /// order). No answer within the deadline breaks the connection.
    fn resync(&mut self) -> Result<(), OpErr> {
        let Some(why) = self.desync.take() else { return Ok(()) };
        let t = self.op_timeout;
        let what = "resynchronisation probe";
        let fail = |c: &mut Conn, e: &OpErr| {
            let b = format!("{why}; then {e}");
            c.broken = Some(b.clone());
            OpErr::Broken(b)
        };
        if self.v2 {
            let probe = v2::Request::JobGetId.to_frame(None, v2::Align::Left);
            if let Err(e) = self.send(what, &probe) {
                return Err(fail(self, &e));
            }
        } else {
            let mut probe = Vec::new();
            v1::Request::GetMyKvsname.encode(&mut probe);
            if let Err(e) = self.send(what, &probe) {
                return Err(fail(self, &e));
            }
        }
        for _ in 0..64 {
            let found = if self.v2 {
                let body = self.read_until(what, t, |b| match v2::split_frame(b) {
                    Ok(Some((_, used))) => Ok(Some(used)),
                    Ok(None) => Ok(None),
                    Err(e) => Err(e.to_string()),
                });
                match body {
                    Ok(b) => matches!(
                        v2::Reply::parse(b.get(v2::HEADER_LEN..).unwrap_or(&[])),
                        Ok((v2::Reply::JobGetId { .. }, _))
                    ),
                    Err(e) => return Err(fail(self, &e)),
                }
            } else {
                match self.read_lines(what, 1, t) {
                    Ok(b) => matches!(v1::Reply::parse(&b), Ok(v1::Reply::MyKvsname { .. })),
                    Err(e) => return Err(fail(self, &e)),
                }
            };
            if found {
                return Ok(());
            }
        }
        let e = OpErr::Bad { what: what.into(), why: "no answer among 64 replies".into() };
        Err(fail(self, &e))
    }

    fn send(&mut self, what: &str, bytes: &[u8]) -> Result<(), OpErr> {
        self.check()?;
        self.s
            .write_all(bytes)
            .map_err(|e| OpErr::Io { what: what.into(), err: e.to_string() })
            .map_err(|e| self.breaks(e))
    }

    /// Read more bytes until `done(buf)` returns how many to take, or the deadline passes.
    fn read_until(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[u8]) -> Result<Option<usize>, String>,
    ) -> Result<Vec<u8>, OpErr> {
        let deadline = Instant::now() + timeout;
        let mut tmp = [0u8; 16384];
        loop {
            match done(&self.buf) {
                Ok(Some(n)) => return Ok(self.buf.drain(..n).collect()),
                Ok(None) => {}
                Err(why) => {
                    self.buf.clear();
                    let e = OpErr::Bad { what: what.into(), why };
                    self.broken = Some(e.to_string());
                    return Err(e);
                }
            }
            if self.buf.len() > MAX_REPLY {
                let e = OpErr::Bad { what: what.into(), why: "reply longer than 1 MiB".into() };
                self.broken = Some(e.to_string());
                return Err(e);
            }
            let now = Instant::now();
            if now >= deadline {
                if !self.buf.is_empty() {
                    // Something came, but not a whole reply: say what, not "no reply".
                    let why = format!(
                        "incomplete within {}s: got {}",
                        timeout.as_secs_f64(),
                        excerpt(&self.buf)
                    );
                    self.buf.clear();
                    let e = OpErr::Bad { what: what.into(), why };
                    self.broken = Some(e.to_string());
                    return Err(e);
                }
                return Err(OpErr::Hung { what: what.into(), after: timeout });
            }
            if let Err(e) = self.s.set_read_timeout(deadline - now) {
                return Err(self.breaks(OpErr::Io { what: what.into(), err: e.to_string() }));
            }
            match self.s.read(&mut tmp) {
                Ok(0) => return Err(self.breaks(OpErr::Closed { what: what.into() })),
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => {
                    return Err(self.breaks(OpErr::Io { what: what.into(), err: e.to_string() }))
                }
            }
        }
    }

    /// `lines` complete `\n`-terminated lines.
    fn read_lines(
        &mut self,
        what: &str,
        lines: usize,
        timeout: Duration,
    ) -> Result<Vec<u8>, OpErr> {
        self.read_until(what, timeout, |b| {
            let mut seen = 0;
            for (i, &c) in b.iter().enumerate() {
                if c == b'\n' {
                    seen += 1;
                    if seen == lines {
                        return Ok(Some(i + 1));
                    }
                }
            }
            Ok(None)
        })
    }

    /// One PMI-1 request and its reply (`lines` reply lines).
    pub fn call1(
        &mut self,
        req: &v1::Request,
        lines: usize,
        timeout: Duration,
    ) -> Result<v1::Reply, OpErr> {
        let mut out = Vec::new();
        req.encode(&mut out);
        let what =
            String::from_utf8_lossy(out.split(|&b| b == b' ' || b == b'\n').next().unwrap_or(b""))
                .into_owned();
        self.check()?;
        self.resync()?;
        self.send(&what, &out)?;
        let collective = matches!(req, v1::Request::BarrierIn { .. } | v1::Request::Spawn { .. });
        let bytes = self.read_lines(&what, lines, timeout).map_err(|e| self.hung(e, collective))?;
        v1::Reply::parse(&bytes)
            .map_err(|e| OpErr::Bad { what, why: format!("{e}: {}", excerpt(&bytes)) })
    }

    /// One PMI-2 request frame and its reply frame.
    pub fn call2(&mut self, req: &v2::Request, timeout: Duration) -> Result<v2::Reply, OpErr> {
        let what = req.name().to_owned();
        let frame = req.to_frame(None, v2::Align::Left);
        self.check()?;
        self.resync()?;
        self.send(&what, &frame)?;
        let collective = matches!(req, v2::Request::KvsFence | v2::Request::Spawn { .. });
        let body = self
            .read_until(&what, timeout, |b| match v2::split_frame(b) {
                Ok(Some((_, used))) => Ok(Some(used)),
                Ok(None) => Ok(None),
                Err(e) => Err(format!("{e}: {}", excerpt(b))),
            })
            .map_err(|e| self.hung(e, collective))?;
        let body = body.get(v2::HEADER_LEN..).unwrap_or(&[]);
        match v2::Reply::parse(body) {
            Ok((v2::Reply::Error { cmd, rc, errmsg }, _)) => {
                if cmd == v2::reply_name(&what) {
                    Err(OpErr::Refused { what, rc, msg: errmsg })
                } else {
                    Err(OpErr::Bad {
                        what,
                        why: format!("unexpected reply {cmd} (rc={rc} errmsg={errmsg})"),
                    })
                }
            }
            Ok((r, _)) => Ok(r),
            Err(e) => Err(OpErr::Bad { what, why: format!("{e}: {}", excerpt(body)) }),
        }
    }

    fn bad1<T>(what: &str, r: v1::Reply) -> Result<T, OpErr> {
        match r {
            v1::Reply::Error { cmd, rc, msg } => Err(OpErr::Bad {
                what: what.into(),
                why: format!("unexpected reply cmd={cmd} rc={rc} msg={msg}"),
            }),
            other => {
                Err(OpErr::Bad { what: what.into(), why: format!("unexpected reply {other:?}") })
            }
        }
    }

    fn bad2<T>(what: &str, r: v2::Reply) -> Result<T, OpErr> {
        Err(OpErr::Bad { what: what.into(), why: format!("unexpected reply {r:?}") })
    }

    /// PMI-1: `[initack,] init 1.1`. PMI-2: init 2.0 (a PMI-1 line), then `fullinit`.
    pub fn init(&mut self) -> Result<InitInfo, OpErr> {
        let t = self.op_timeout;
        let mut info = InitInfo::default();
        if !self.v2 {
            if let Endpoint::Port(_, Some(id)) = self.endpoint {
                match self.call1(&v1::Request::InitAck { pmiid: id }, 4, t)? {
                    v1::Reply::InitAck { rank, size } => {
                        info.rank = i32::try_from(rank).ok();
                        info.size = i32::try_from(size).ok();
                    }
                    r => return Self::bad1("initack", r),
                }
            }
        }
        let (v, s) = if self.v2 { (2, 0) } else { (1, 1) };
        match self.call1(&v1::Request::Init { version: v, subversion: s }, 1, t)? {
            v1::Reply::ResponseToInit { version, subversion, rc } => {
                info.version = version;
                info.subversion = subversion;
                if rc != 0 {
                    return Err(OpErr::Refused {
                        what: format!("init pmi_version={v}"),
                        rc,
                        msg: format!("server answered version {version}.{subversion}"),
                    });
                }
            }
            r => return Self::bad1("init", r),
        }
        if self.v2 {
            let rank = std::env::var("PMI_RANK")
                .ok()
                .or_else(|| std::env::var("PMI_ID").ok())
                .and_then(|r| r.trim().parse().ok())
                .unwrap_or(-1);
            let jobid = std::env::var("PMI_JOBID").ok();
            match self.call2(&v2::Request::FullInit { rank, jobid, threaded: false }, t)? {
                v2::Reply::FullInit { rank, size, appnum, .. } => {
                    info.rank = Some(rank);
                    info.size = Some(size);
                    info.appnum = Some(appnum);
                }
                r => return Self::bad2("fullinit", r),
            }
        }
        self.ready = true;
        Ok(info)
    }

    /// PMI-1 `get_maxes`.
    pub fn maxes(&mut self) -> Result<(usize, usize, usize), OpErr> {
        match self.call1(&v1::Request::GetMaxes, 1, self.op_timeout)? {
            v1::Reply::Maxes { kvsname_max, keylen_max, vallen_max } => {
                Ok((kvsname_max, keylen_max, vallen_max))
            }
            r => Self::bad1("get_maxes", r),
        }
    }

    /// PMI-1 `get_appnum`.
    pub fn appnum(&mut self) -> Result<i32, OpErr> {
        match self.call1(&v1::Request::GetAppnum, 1, self.op_timeout)? {
            v1::Reply::Appnum { appnum } => Ok(appnum),
            r => Self::bad1("get_appnum", r),
        }
    }

    /// PMI-1 `get_my_kvsname` / PMI-2 `job-getid`.
    pub fn kvsname(&mut self) -> Result<String, OpErr> {
        if self.v2 {
            match self.call2(&v2::Request::JobGetId, self.op_timeout)? {
                v2::Reply::JobGetId { jobid } => Ok(jobid),
                r => Self::bad2("job-getid", r),
            }
        } else {
            match self.call1(&v1::Request::GetMyKvsname, 1, self.op_timeout)? {
                v1::Reply::MyKvsname { kvsname } => Ok(kvsname),
                r => Self::bad1("get_my_kvsname", r),
            }
        }
    }

    /// PMI-2 `info-getjobattr` (`None`: not found).
    pub fn job_attr(&mut self, key: &str) -> Result<Option<String>, OpErr> {
        match self.call2(&v2::Request::GetJobAttr { key: key.into() }, self.op_timeout)? {
            v2::Reply::GetJobAttr { value } => Ok(value),
            r => Self::bad2("info-getjobattr", r),
        }
    }

    /// PMI-1 `get_universe_size` / PMI-2 job attribute `universeSize`.
    pub fn universe_size(&mut self) -> Result<Option<i64>, OpErr> {
        if self.v2 {
            match self.job_attr("universeSize")? {
                None => Ok(None),
                Some(v) => v.trim().parse().map(Some).map_err(|_| OpErr::Bad {
                    what: "info-getjobattr universeSize".into(),
                    why: format!("not a number: {v:?}"),
                }),
            }
        } else {
            match self.call1(&v1::Request::GetUniverseSize, 1, self.op_timeout)? {
                v1::Reply::UniverseSize { size } => Ok(Some(i64::from(size))),
                r => Self::bad1("get_universe_size", r),
            }
        }
    }

    /// The job's `PMI_process_mapping` (PMI-1 KVS get / PMI-2 job attribute).
    pub fn process_mapping(&mut self) -> Result<Option<String>, OpErr> {
        if self.v2 {
            self.job_attr("PMI_process_mapping")
        } else {
            self.get_t("PMI_process_mapping", self.op_timeout)
        }
    }

    pub fn put(&mut self, key: &str, value: &str) -> Result<(), OpErr> {
        if self.v2 {
            let req = v2::Request::KvsPut { key: key.into(), value: value.into() };
            match self.call2(&req, self.op_timeout)? {
                v2::Reply::KvsPut => Ok(()),
                r => Self::bad2("kvs-put", r),
            }
        } else {
            let req = v1::Request::Put {
                kvsname: self.kvsname.clone(),
                key: key.into(),
                value: value.into(),
            };
            match self.call1(&req, 1, self.op_timeout)? {
                v1::Reply::PutResult { rc: 0, .. } => Ok(()),
                v1::Reply::PutResult { rc, msg } => {
                    Err(OpErr::Refused { what: "put".into(), rc, msg })
                }
                r => Self::bad1("put", r),
            }
        }
    }

    /// KVS get (`None`: not found). PMI-2 gets may wait for the other ranks' fence (Hydra),
    /// so they get the fence deadline.
    pub fn get(&mut self, key: &str) -> Result<Option<String>, OpErr> {
        let t = if self.v2 { self.fence_timeout } else { self.op_timeout };
        self.get_t(key, t)
    }

    pub fn get_t(&mut self, key: &str, t: Duration) -> Result<Option<String>, OpErr> {
        if self.v2 {
            let req = v2::Request::KvsGet { jobid: None, srcid: None, key: key.into() };
            match self.call2(&req, t)? {
                v2::Reply::KvsGet { value } => Ok(value),
                r => Self::bad2("kvs-get", r),
            }
        } else {
            let req = v1::Request::Get { kvsname: self.kvsname.clone(), key: key.into() };
            match self.call1(&req, 1, t)? {
                v1::Reply::GetResult { value } => {
                    Ok(value.ok().map(|v| String::from_utf8_lossy(&v).into_owned()))
                }
                r => Self::bad1("get", r),
            }
        }
    }

    /// PMI-1 `barrier_in` / PMI-2 `kvs-fence`.
    pub fn fence(&mut self) -> Result<(), OpErr> {
        let t = self.fence_timeout;
        if self.v2 {
            match self.call2(&v2::Request::KvsFence, t)? {
                v2::Reply::KvsFence => Ok(()),
                r => Self::bad2("kvs-fence", r),
            }
        } else {
            match self.call1(&v1::Request::BarrierIn { group: None }, 1, t)? {
                v1::Reply::BarrierOut => Ok(()),
                r => Self::bad1("barrier_in", r),
            }
        }
    }

    pub fn publish(&mut self, service: &str, port: &str) -> Result<(), OpErr> {
        let t = self.op_timeout;
        if self.v2 {
            let req = v2::Request::NamePublish { name: service.into(), port: port.into() };
            match self.call2(&req, t)? {
                v2::Reply::NamePublish => Ok(()),
                r => Self::bad2("name-publish", r),
            }
        } else {
            let req = v1::Request::PublishName { service: service.into(), port: port.into() };
            match self.call1(&req, 1, t)? {
                v1::Reply::PublishResult { rc: 0, .. } => Ok(()),
                v1::Reply::PublishResult { rc, msg } => {
                    Err(OpErr::Refused { what: "publish_name".into(), rc, msg })
                }
                r => Self::bad1("publish_name", r),
            }
        }
    }

    pub fn unpublish(&mut self, service: &str) -> Result<(), OpErr> {
        let t = self.op_timeout;
        if self.v2 {
            match self.call2(&v2::Request::NameUnpublish { name: service.into() }, t)? {
                v2::Reply::NameUnpublish => Ok(()),
                r => Self::bad2("name-unpublish", r),
            }
        } else {
            match self.call1(&v1::Request::UnpublishName { service: service.into() }, 1, t)? {
                v1::Reply::UnpublishResult { rc: 0, .. } => Ok(()),
                v1::Reply::UnpublishResult { rc, msg } => {
                    Err(OpErr::Refused { what: "unpublish_name".into(), rc, msg })
                }
                r => Self::bad1("unpublish_name", r),
            }
        }
    }

    /// `None`: not found.
    pub fn lookup(&mut self, service: &str) -> Result<Option<String>, OpErr> {
        let t = self.op_timeout;
        if self.v2 {
            match self.call2(&v2::Request::NameLookup { name: service.into() }, t)? {
                v2::Reply::NameLookup { port } => Ok(port),
                r => Self::bad2("name-lookup", r),
            }
        } else {
            match self.call1(&v1::Request::LookupName { service: service.into() }, 1, t)? {
                v1::Reply::LookupResult { port } => Ok(port),
                r => Self::bad1("lookup_name", r),
            }
        }
    }

    /// PMI-2 `info-putnodeattr`.
    pub fn put_node_attr(&mut self, key: &str, value: &str) -> Result<(), OpErr> {
        let req = v2::Request::PutNodeAttr { key: key.into(), value: value.into() };
        match self.call2(&req, self.op_timeout)? {
            v2::Reply::PutNodeAttr => Ok(()),
            r => Self::bad2("info-putnodeattr", r),
        }
    }

    /// PMI-2 `info-getnodeattr` (`None`: not found).
    pub fn get_node_attr(&mut self, key: &str, wait: bool) -> Result<Option<String>, OpErr> {
        let req = v2::Request::GetNodeAttr { key: key.into(), wait };
        match self.call2(&req, self.op_timeout)? {
            v2::Reply::GetNodeAttr { value } => Ok(value),
            r => Self::bad2("info-getnodeattr", r),
        }
    }

    /// Spawn `nprocs` copies of `exe args`, with one preput pair. PMI-2: the new job id.
    pub fn spawn(
        &mut self,
        nprocs: u32,
        exe: &str,
        args: &[String],
        preput: (&str, &str),
    ) -> Result<Option<String>, OpErr> {
        let t = self.fence_timeout;
        if self.v2 {
            let cmd = pmi_wire::SpawnCmd {
                nprocs,
                execname: exe.into(),
                args: args.to_vec(),
                preput: vec![(preput.0.into(), preput.1.into())],
                info: Vec::new(),
            };
            match self.call2(&v2::Request::Spawn { cmds: vec![cmd] }, t)? {
                v2::Reply::Spawn { jobid } => Ok(jobid),
                r => Self::bad2("spawn", r),
            }
        } else {
            let cmd = pmi_wire::SpawnCmd {
                nprocs,
                execname: exe.into(),
                args: args.to_vec(),
                preput: vec![(preput.0.into(), preput.1.into())],
                info: Vec::new(),
            };
            match self.call1(&v1::Request::Spawn { cmds: vec![cmd] }, 1, t)? {
                v1::Reply::SpawnResult { rc: 0, .. } => Ok(None),
                v1::Reply::SpawnResult { rc, .. } => {
                    Err(OpErr::Refused { what: "spawn".into(), rc, msg: String::new() })
                }
                r => Self::bad1("spawn", r),
            }
        }
    }

    pub fn finalize(&mut self) -> Result<(), OpErr> {
        let t = self.fence_timeout;
        if self.v2 {
            match self.call2(&v2::Request::Finalize, t)? {
                v2::Reply::Finalize => Ok(()),
                r => Self::bad2("finalize", r),
            }
        } else {
            match self.call1(&v1::Request::Finalize, 1, t)? {
                v1::Reply::FinalizeAck => Ok(()),
                r => Self::bad1("finalize", r),
            }
        }
    }
}

/// The first 120 bytes of a reply, printable.
pub fn excerpt(b: &[u8]) -> String {
    let s: String = String::from_utf8_lossy(&b[..b.len().min(120)]).into_owned();
    if b.len() > 120 {
        format!("{s:?}...")
    } else {
        format!("{s:?}")
    }
}
