//! `libi-pmicheck`: a PMI conformance tester. Started by a process manager like any rank
//! (`mpiexec -n 8 libi-pmicheck`, `srun --mpi=pmi2 -n 8 libi-pmicheck --pmi2`), it speaks the
//! wire protocol to the server it finds in its environment (`PMI_FD`, or `PMI_PORT` [+
//! `PMI_ID`]) and runs a fixed suite of checks. Every rank runs every check; the outcomes of
//! all ranks are gathered through the server's own KVS and rank 0 prints one line per check
//! (`PASS|FAIL|SKIP name: detail`) and the summary `N passed, N failed[, N skipped]`. All
//! ranks exit with the same status: 1 if any check failed, else 0.
//!
//! Every collective step (fence) is executed by every rank whatever happened before, so that
//! one failed check does not desynchronise the job; every read has a deadline, so a server
//! that does not answer produces `FAIL … hung`, not a hang.
#![deny(clippy::undocumented_unsafe_blocks)]

/// A line on stdout or stderr (`outln!`, `errln!`) that cannot panic: a closed pipe
/// (`--list | head -1`) or a full disk loses the line, not the run.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}
macro_rules! errln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

mod client;
mod mapping;
mod report;

/// The largest name or value the checks build from a server's advertised maxima (1 MiB): a
/// server that advertises gigabytes is failed for it, not believed with our memory.
const PROBE_MAX: usize = 1 << 20;

use std::time::{Duration, Instant};

use client::{Conn, Endpoint, OpErr};
use report::{Outcome, RankResults, Status};

const USAGE: &str = "\
usage: libi-pmicheck [--pmi2] [--spawn] [--timeout S] [--fence-timeout S] [--keys N] [--list]

Start it as the ranks of a job (mpiexec -n 8 libi-pmicheck, srun --mpi=pmi2 -n 8 libi-pmicheck).
It checks the PMI server found through PMI_FD (or PMI_PORT and PMI_ID); rank 0 prints one line
per check, PASS|FAIL|SKIP name: detail, then `N passed, N failed[, N skipped]`. Exit status 1
on any failure (every rank), else 0.

  --pmi2             speak PMI-2 (default PMI-1)
  --spawn            also spawn 2 copies of this program (PMI spawn)
  --timeout S        seconds to wait for the reply to one request (default 10)
  --fence-timeout S  seconds to wait for a fence / a PMI-2 get that may wait for one (default 60)
  --keys N           keys per rank in the many-keys check (default 100)
  --list             print the names of the checks and exit";

#[derive(Debug, Clone)]
struct Opts {
    v2: bool,
    spawn: bool,
    timeout: Duration,
    fence_timeout: Duration,
    keys: usize,
    list: bool,
    child: bool,
}

fn secs(flag: &str, v: Option<&String>) -> Result<Duration, String> {
    let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
    match v.parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 86400.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("{flag}: {v:?} is not a number of seconds in (0, 86400]")),
    }
}

/// `Ok(None)`: `--help` was asked for.
fn parse_args(args: &[String]) -> Result<Option<Opts>, String> {
    let mut o = Opts {
        v2: false,
        spawn: false,
        timeout: Duration::from_secs(10),
        fence_timeout: Duration::from_secs(60),
        keys: 100,
        list: false,
        child: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--pmi2" => o.v2 = true,
            "--pmi1" => o.v2 = false,
            "--spawn" => o.spawn = true,
            "--list" => o.list = true,
            "--spawned-child" => o.child = true,
            "--timeout" => o.timeout = secs(a, it.next())?,
            "--fence-timeout" => o.fence_timeout = secs(a, it.next())?,
            "--keys" => {
                let v = it.next().ok_or("--keys needs a value")?;
                o.keys = match v.parse::<usize>() {
                    Ok(n) if (1..=10000).contains(&n) => n,
                    _ => return Err(format!("--keys: {v:?} is not a number in 1..=10000")),
                };
            }
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(o))
}

fn check_names(v2: bool) -> Vec<&'static str> {
    let mut v = vec!["init", "env"];
    if !v2 {
        v.push("maxes");
    }
    v.extend([
        "appnum",
        "kvsname",
        "universe-size",
        "consistency",
        "put-fence-get",
        "value-with-equals",
        "value-max-advertised",
    ]);
    if !v2 {
        v.push("value-max-mpich40");
    }
    v.extend([
        "key-max",
        "many-keys",
        "repeated-fences",
        "overwrite",
        "get-missing",
        "process-mapping",
        "publish-lookup",
        "spawn",
    ]);
    if v2 {
        v.extend(["node-attr", "node-attr-wait", "node-attr-missing"]);
    }
    v.push("timing");
    v
}

fn main() {
    let args: Vec<String> = match std::env::args_os().skip(1).map(|a| a.into_string()).collect() {
        Ok(a) => a,
        Err(a) => {
            errln!("libi-pmicheck: argument '{}' is not valid UTF-8", a.to_string_lossy());
            std::process::exit(2);
        }
    };
    let o = match parse_args(&args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            outln!("{USAGE}");
            return;
        }
        Err(e) => {
            errln!("libi-pmicheck: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    if o.list {
        for n in check_names(o.v2) {
            outln!("{n}");
        }
        return;
    }
    let code = if o.child { child(&o) } else { run(o) };
    std::process::exit(code);
}

fn env_num(name: &str) -> Option<Result<i64, String>> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().parse::<i64>().map_err(|_| format!("{name}={v:?} is not a number")))
}

fn hostname() -> String {
    if let Ok(h) = std::env::var("PMI_HOSTNAME") {
        if !h.is_empty() {
            return h;
        }
    }
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// FNV-1a, for short fingerprints of long strings.
fn fnv(s: &str) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")
}

/// A value of exactly `len` bytes that names its owner: `<tag>:` then a letter pattern.
fn long_value(tag: &str, len: usize) -> String {
    let mut v = format!("{tag}:");
    let mut i = 0u8;
    while v.len() < len {
        v.push((b'a' + i % 26) as char);
        i = i.wrapping_add(1);
    }
    v.truncate(len);
    v
}

/// How `got` differs from `want`, for details.
fn diff(want: &str, got: &str) -> String {
    if got.len() != want.len() {
        let same = want.bytes().zip(got.bytes()).take_while(|(a, b)| a == b).count();
        if same == got.len() {
            return format!(
                "silently truncated to {} of {} bytes (the server keeps vallen_max-1: a C buffer \
                 size with the NUL)",
                got.len(),
                want.len()
            );
        }
        return format!(
            "got {} bytes, expected {} (equal for the first {same})",
            got.len(),
            want.len()
        );
    }
    let at = want.bytes().zip(got.bytes()).position(|(a, b)| a != b).unwrap_or(0);
    format!("value differs at byte {at} of {}", want.len())
}

fn fmt_dur(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0}us")
    } else if us < 1e6 {
        format!("{:.2}ms", us / 1000.0)
    } else {
        format!("{:.2}s", us / 1e6)
    }
}

fn median(v: &[Duration]) -> Option<Duration> {
    let mut v = v.to_vec();
    v.sort();
    v.get(v.len() / 2).copied()
}

/// Per-rank info shared through the KVS for the consistency checks.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Info {
    rank: String,
    size: String,
    appnum: String,
    kvs: String,
    usize_: String,
    maxes: String,
    host: String,
    mapping: String,
}

impl Info {
    fn encode(&self) -> String {
        [
            &self.rank,
            &self.size,
            &self.appnum,
            &self.kvs,
            &self.usize_,
            &self.maxes,
            &self.host,
            &self.mapping,
        ]
        .iter()
        .map(|f| report::escape(f))
        .collect::<Vec<_>>()
        .join(",")
    }
    fn decode(s: &str) -> Option<Info> {
        let f: Vec<String> = s.split(',').map(report::unescape).collect();
        let [rank, size, appnum, kvs, usize_, maxes, host, mapping] =
            <[String; 8]>::try_from(f).ok()?;
        Some(Info { rank, size, appnum, kvs, usize_, maxes, host, mapping })
    }
}

struct Suite {
    c: Conn,
    o: Opts,
    names: Vec<&'static str>,
    out: Vec<Outcome>,
    rank: usize,
    size: usize,
    /// Usable limits: advertised (PMI-1) or the PMI-2 ones.
    kvsname_max: usize,
    keylen: usize,
    vallen: usize,
    appnum: Option<i32>,
    kvs: String,
    usize_: Option<i64>,
    mapping_raw: Option<String>,
    mapping: Option<mapping::Mapping>,
    host: String,
    t_put: Vec<Duration>,
    t_get: Vec<Duration>,
    t_fence: Vec<Duration>,
}

impl Suite {
    fn set(&mut self, name: &str, status: Status, detail: impl Into<String>) {
        if let Some(i) = self.names.iter().position(|n| *n == name) {
            self.out[i] = Outcome { status, detail: detail.into() };
        }
    }
    fn pass(&mut self, name: &str, detail: impl Into<String>) {
        self.set(name, Status::Pass, detail);
    }
    fn fail(&mut self, name: &str, detail: impl Into<String>) {
        self.set(name, Status::Fail, detail);
    }
    fn skip(&mut self, name: &str, detail: impl Into<String>) {
        self.set(name, Status::Skip, detail);
    }
    fn na(&mut self, name: &str) {
        self.set(name, Status::NotApplicable, "");
    }
    /// Record `r` as the outcome of `name` unless it is already failed.
    fn outcome(&mut self, name: &str, r: Result<String, String>) {
        if self.status(name) == Some(Status::Fail) {
            return;
        }
        match r {
            Ok(d) => self.pass(name, d),
            Err(d) => self.fail(name, d),
        }
    }
    fn status(&self, name: &str) -> Option<Status> {
        self.names.iter().position(|n| *n == name).map(|i| self.out[i].status)
    }

    fn fence(&mut self) -> Result<(), OpErr> {
        let t = Instant::now();
        self.c.fence()?;
        self.t_fence.push(t.elapsed());
        Ok(())
    }

    fn nb(&self) -> usize {
        (self.rank + 1) % self.size
    }

    /// Get `key` and compare with `want`: `Ok(())` or the reason.
    fn expect(&mut self, key: &str, want: &str) -> Result<(), String> {
        match self.c.get(key) {
            Ok(Some(v)) if v == want => Ok(()),
            Ok(Some(v)) => Err(format!("get {key}: {}", diff(want, &v))),
            Ok(None) => Err(format!("get {key}: not found after the fence")),
            Err(e) => Err(format!("get {key}: {e}")),
        }
    }

    // -----------------------------------------------------------------------------------------

    fn basics(&mut self, info: &client::InitInfo) -> Result<(), ()> {
        let v2 = self.o.v2;
        // env
        let mut notes = Vec::new();
        let (er, es) = (env_num("PMI_RANK"), env_num("PMI_SIZE"));
        let mut problems = Vec::new();
        let env_rank = match er {
            Some(Ok(r)) => Some(r),
            Some(Err(e)) => {
                problems.push(e);
                None
            }
            None => None,
        };
        let env_size = match es {
            Some(Ok(r)) => Some(r),
            Some(Err(e)) => {
                problems.push(e);
                None
            }
            None => None,
        };
        let src = if v2 { "fullinit" } else { "initack" };
        if let (Some(a), Some(b)) = (info.rank, env_rank) {
            if i64::from(a) != b {
                problems.push(format!("{src} rank={a} but PMI_RANK={b}"));
            }
        }
        if let (Some(a), Some(b)) = (info.size, env_size) {
            if i64::from(a) != b {
                problems.push(format!("{src} size={a} but PMI_SIZE={b}"));
            }
        }
        let rank = info.rank.map(i64::from).or(env_rank);
        let size = info.size.map(i64::from).or(env_size);
        match (rank, size) {
            (Some(r), Some(s)) if r >= 0 && s > 0 && r < s => {
                self.rank = r as usize;
                self.size = s as usize;
            }
            (Some(r), Some(s)) => {
                problems.push(format!("rank {r} not in 0..{s}"));
            }
            (None, _) => problems.push("no rank: PMI_RANK unset".into()),
            (_, None) => problems.push("no size: PMI_SIZE unset".into()),
        }
        if info.rank.is_some() {
            notes.push(format!("{src} rank/size"));
        }
        if env_rank.is_some() {
            notes.push("PMI_RANK/PMI_SIZE".into());
        }
        match std::env::var("PMI_SPAWNED") {
            Ok(v) if v != "0" => problems.push(format!("PMI_SPAWNED={v} in a job not spawned")),
            Ok(_) => notes.push("PMI_SPAWNED=0".into()),
            Err(_) => notes.push("PMI_SPAWNED unset".into()),
        }
        if !problems.is_empty() {
            let fatal = self.size == 0;
            self.fail("env", problems.join("; "));
            if fatal {
                return Err(());
            }
        } else {
            self.pass("env", format!("size {} from {}", self.size, notes.join(", ")));
        }

        // maxes
        if v2 {
            self.kvsname_max = 256;
            self.keylen = pmi_wire::v2::KEYLEN_MAX;
            self.vallen = pmi_wire::v2::VALLEN_MAX;
        } else {
            match self.c.maxes() {
                Ok((k, l, v)) => {
                    // The later checks build names and values of these sizes: a server's
                    // absurd maxima are tried up to PROBE_MAX (they fail here anyway).
                    self.kvsname_max = k.min(PROBE_MAX);
                    self.keylen = l.min(PROBE_MAX);
                    self.vallen = v.min(PROBE_MAX);
                    let usable =
                        1024usize.saturating_sub(k.saturating_add(l).saturating_add(30)).min(v);
                    if k == 0 || l == 0 || v == 0 {
                        self.fail(
                            "maxes",
                            format!("kvsname_max={k} keylen_max={l} vallen_max={v}: zero"),
                        );
                    } else if v > 1024 {
                        let tried = if [k, l, v].iter().any(|&m| m > PROBE_MAX) {
                            format!("; sizes above {PROBE_MAX} bytes are tried as {PROBE_MAX}")
                        } else {
                            String::new()
                        };
                        self.fail(
                            "maxes",
                            format!("vallen_max={v} > 1024: MPICH/MVAPICH2 misbehave with larger maxima (docs/spec/pmi-wire.md §12.10){tried}"),
                        );
                    } else {
                        self.pass(
                            "maxes",
                            format!("kvsname_max={k} keylen_max={l} vallen_max={v} (MPICH 4.0 clients can use {usable})"),
                        );
                    }
                }
                Err(e) => {
                    self.kvsname_max = 256;
                    self.keylen = 64;
                    self.vallen = 1024;
                    self.fail("maxes", format!("{e} (assuming 256/64/1024)"));
                }
            }
        }

        // appnum
        let appnum = if v2 { Ok(info.appnum.unwrap_or(-1)) } else { self.c.appnum() };
        match appnum {
            Ok(a) if a >= -1 => {
                self.appnum = Some(a);
                self.pass("appnum", format!("appnum={a}"));
            }
            Ok(a) => self.fail("appnum", format!("appnum={a} < -1")),
            Err(e) => self.fail("appnum", e.to_string()),
        }

        // kvsname (asked twice: must be stable)
        let what = if v2 { "job-getid" } else { "get_my_kvsname" };
        match (self.c.kvsname(), self.c.kvsname()) {
            (Ok(a), Ok(b)) => {
                self.kvs = a.clone();
                self.c.kvsname = a.clone();
                if a != b {
                    self.fail("kvsname", format!("{what} answered {a:?} then {b:?}"));
                } else if a.is_empty() || a.contains(char::is_whitespace) {
                    self.fail("kvsname", format!("{what} answered {a:?} (empty or with spaces)"));
                } else if !v2 && a.len() > self.kvsname_max {
                    self.fail(
                        "kvsname",
                        format!("{a:?} longer than kvsname_max={}", self.kvsname_max),
                    );
                } else {
                    self.pass("kvsname", format!("{}={a}", if v2 { "jobid" } else { "kvsname" }));
                }
            }
            (Err(e), _) | (_, Err(e)) => self.fail("kvsname", e.to_string()),
        }

        // universe size
        match self.c.universe_size() {
            Ok(None) => self.fail("universe-size", "job attribute universeSize not found"),
            Ok(Some(u)) if u == -1 => {
                self.usize_ = Some(u);
                self.pass("universe-size", "-1 (unlimited)");
            }
            Ok(Some(u)) if u <= 0 => self.fail("universe-size", format!("universe size {u}")),
            Ok(Some(u)) => {
                self.usize_ = Some(u);
                let note =
                    if (u as usize) < self.size { " (smaller than the job size)" } else { "" };
                self.pass("universe-size", format!("{u}{note}"));
            }
            Err(e) => self.fail("universe-size", e.to_string()),
        }

        // process mapping: fetched and parsed by every rank; compared with the hostnames by
        // rank 0 once those are gathered.
        match self.c.process_mapping() {
            Ok(Some(m)) => {
                match mapping::parse(&m, self.size) {
                    Ok(p) => self.mapping = Some(p),
                    Err(e) => self.fail(
                        "process-mapping",
                        format!("PMI_process_mapping {:?} does not parse: {e}", report::truncate(&m, 80)),
                    ),
                }
                self.mapping_raw = Some(m);
            }
            Ok(None) => self.fail(
                "process-mapping",
                "PMI_process_mapping not found (MVAPICH2 requires it; MPICH falls back to a hostname exchange)",
            ),
            Err(e) => self.fail("process-mapping", format!("PMI_process_mapping: {e}")),
        }
        Ok(())
    }

    /// Puts of phase 1 (before the first fence): info, basic, `=`, max values, max key, many.
    fn kvs_phase(&mut self) {
        let r = self.rank;
        let info = Info {
            rank: r.to_string(),
            size: self.size.to_string(),
            appnum: self.appnum.map_or("?".into(), |a| a.to_string()),
            kvs: self.kvs.clone(),
            usize_: self.usize_.map_or("?".into(), |u| u.to_string()),
            maxes: format!("{}/{}/{}", self.kvsname_max, self.keylen, self.vallen),
            host: self.host.clone(),
            mapping: self.mapping_raw.as_deref().map_or("-".into(), fnv),
        };
        let info_put = self.c.put(&format!("pmicheck-info-{r}"), &info.encode());
        if let Err(e) = &info_put {
            self.fail("consistency", format!("put of the info key: {e}"));
        }
        let basic = format!("value-of-rank-{r}");
        if let Err(e) = self.c.put(&format!("pmicheck-basic-{r}"), &basic) {
            self.fail("put-fence-get", format!("put: {e}"));
        }
        let eq = format!("a=b==c={r}=");
        if let Err(e) = self.c.put(&format!("pmicheck-eq-{r}"), &eq) {
            self.fail("value-with-equals", format!("put: {e}"));
        }
        // The advertised maximum: exactly vallen bytes.
        let vmax = long_value(&format!("m{r}"), self.vallen);
        if let Err(e) = self.c.put(&format!("pmicheck-max-{r}"), &vmax) {
            let retry = long_value(&format!("m{r}"), self.vallen - 1);
            let alt = match self.c.put(&format!("pmicheck-max1-{r}"), &retry) {
                Ok(()) => format!("; {} bytes (vallen_max-1) accepted", self.vallen - 1),
                Err(e2) => format!("; {} bytes: {e2}", self.vallen - 1),
            };
            self.fail(
                "value-max-advertised",
                format!(
                    "put of a {}-byte value (the advertised vallen_max): {e}{alt}",
                    self.vallen
                ),
            );
        }
        let len40 = 1024usize.saturating_sub(self.kvsname_max + self.keylen + 30).min(self.vallen);
        if !self.o.v2 {
            if len40 < 8 {
                self.skip("value-max-mpich40", format!("MPICH 4.0 usable vallen is {len40}"));
            } else if let Err(e) =
                self.c.put(&format!("pmicheck-max40-{r}"), &long_value(&format!("m{r}"), len40))
            {
                self.fail("value-max-mpich40", format!("put of a {len40}-byte value: {e}"));
            }
        }
        let kprefix = format!("pmicheck-keymax-{r}-");
        let kmax = if self.keylen > kprefix.len() {
            let k = long_value(&kprefix[..kprefix.len() - 1], self.keylen);
            if let Err(e) = self.c.put(&k, "keymax") {
                self.fail(
                    "key-max",
                    format!("put with a {}-byte key (keylen_max): {e}", self.keylen),
                );
            }
            Some(())
        } else {
            self.skip("key-max", format!("keylen_max={} too small for the test key", self.keylen));
            None
        };
        let mut many_err = None;
        for i in 0..self.o.keys {
            let t = Instant::now();
            match self.c.put(&format!("pmicheck-many-{r}-{i}"), &format!("m{r}.{i}")) {
                Ok(()) => self.t_put.push(t.elapsed()),
                Err(e) => {
                    many_err = Some(format!("put {i} of {}: {e}", self.o.keys));
                    break;
                }
            }
        }
        if let Some(e) = many_err {
            self.fail("many-keys", e);
        }

        if let Err(e) = self.fence() {
            for n in [
                "consistency",
                "put-fence-get",
                "value-with-equals",
                "value-max-advertised",
                "value-max-mpich40",
                "key-max",
                "many-keys",
            ] {
                self.fail(n, format!("fence: {e}"));
            }
            return;
        }

        // Reads.
        let nb = self.nb();
        let window = self.size.min(64);
        let mut res = Ok(());
        for i in 0..window {
            let s = (r + 1 + i) % self.size;
            if let Err(e) =
                self.expect(&format!("pmicheck-basic-{s}"), &format!("value-of-rank-{s}"))
            {
                res = Err(format!("rank {s}'s key: {e}"));
                break;
            }
        }
        let res = res.map(|()| format!("read the keys of {window} ranks"));
        self.outcome("put-fence-get", res);
        let res = self
            .expect(&format!("pmicheck-eq-{nb}"), &format!("a=b==c={nb}="))
            .map(|()| "a=b==c=N=".to_string());
        self.outcome("value-with-equals", res);
        let res = self
            .expect(&format!("pmicheck-max-{nb}"), &long_value(&format!("m{nb}"), self.vallen))
            .map(|()| format!("{}-byte value", self.vallen));
        self.outcome("value-max-advertised", res);
        if !self.o.v2 && len40 >= 8 {
            let res = self
                .expect(&format!("pmicheck-max40-{nb}"), &long_value(&format!("m{nb}"), len40))
                .map(|()| format!("{len40}-byte value"));
            self.outcome("value-max-mpich40", res);
        }
        if kmax.is_some() {
            let kp = format!("pmicheck-keymax-{nb}");
            let k = long_value(&kp, self.keylen);
            let mut res = self.expect(&k, "keymax").map(|()| format!("{}-byte key", self.keylen));
            if let Err(e) = &res {
                // Diagnose: was it stored under a truncated key?
                let short = &k[..k.len() - 1];
                if let Ok(Some(_)) = self.c.get_t(short, self.c.op_timeout) {
                    res = Err(format!(
                        "{e}; the put was stored under its first {} bytes (keylen_max counted \
                         with the NUL)",
                        short.len()
                    ));
                }
            }
            self.outcome("key-max", res);
        }
        let mut res = Ok(format!("{} keys per rank", self.o.keys));
        for i in 0..self.o.keys {
            let t = Instant::now();
            let r1 = self.expect(&format!("pmicheck-many-{nb}-{i}"), &format!("m{nb}.{i}"));
            self.t_get.push(t.elapsed());
            if let Err(e) = r1 {
                res = Err(format!("rank {nb}'s key {i}: {e}"));
                break;
            }
        }
        self.outcome("many-keys", res);

        // Rank 0: consistency and the mapping against the hostnames.
        if r == 0 {
            self.consistency(&info);
        } else {
            self.na("consistency");
            if self.status("process-mapping") != Some(Status::Fail) {
                self.pass("process-mapping", "");
            }
        }
    }

    fn consistency(&mut self, mine: &Info) {
        let mut infos = Vec::with_capacity(self.size);
        let mut problems = Vec::new();
        for s in 0..self.size {
            match self.c.get(&format!("pmicheck-info-{s}")) {
                Ok(Some(v)) => match Info::decode(&v) {
                    Some(i) => infos.push(i),
                    None => {
                        problems.push(format!("rank {s}'s info value is mangled"));
                        break;
                    }
                },
                Ok(None) => {
                    problems.push(format!("rank {s}'s info key not found after the fence"));
                    break;
                }
                Err(e) => {
                    problems.push(format!("get rank {s}'s info: {e}"));
                    break;
                }
            }
        }
        if problems.is_empty() {
            for (s, i) in infos.iter().enumerate() {
                let mut d = Vec::new();
                if i.rank != s.to_string() {
                    d.push(format!("rank {s}'s key holds rank {}", i.rank));
                }
                for (what, a, b) in [
                    ("size", &i.size, &mine.size),
                    ("appnum", &i.appnum, &mine.appnum),
                    ("kvsname", &i.kvs, &mine.kvs),
                    ("universe size", &i.usize_, &mine.usize_),
                    ("maxes", &i.maxes, &mine.maxes),
                    ("PMI_process_mapping", &i.mapping, &mine.mapping),
                ] {
                    if a != b {
                        d.push(format!("{what} {a:?} on rank {s} vs {b:?} on rank 0"));
                    }
                }
                if !d.is_empty() {
                    problems.push(d.join(", "));
                    break;
                }
            }
        }
        if problems.is_empty() {
            self.pass(
                "consistency",
                format!(
                    "{} ranks agree on size, appnum, kvsname, universe size, maxes, mapping",
                    self.size
                ),
            );
        } else {
            self.fail("consistency", problems.join("; "));
        }

        // Mapping vs hostnames.
        if self.status("process-mapping") == Some(Status::Fail) {
            return;
        }
        let Some(m) = self.mapping.clone() else { return };
        if infos.len() != self.size {
            self.fail("process-mapping", "hostnames of all ranks not available");
            return;
        }
        let mut bad = None;
        'o: for i in 0..self.size {
            for j in i + 1..self.size {
                let same_host = infos[i].host == infos[j].host;
                let same_node = m.nodes[i] == m.nodes[j];
                if same_host != same_node {
                    bad = Some(format!(
                        "ranks {i} and {j}: hosts {:?}/{:?} but node ids {}/{}",
                        infos[i].host, infos[j].host, m.nodes[i], m.nodes[j]
                    ));
                    break 'o;
                }
            }
        }
        let raw = self.mapping_raw.clone().unwrap_or_default();
        let mut nodes = m.nodes.clone();
        nodes.sort();
        nodes.dedup();
        let form = if m.compressed {
            "compressed form (MPICH 4.0.x cannot parse it)"
        } else {
            "explicit triplets"
        };
        let wrap = if m.wrapped { ", wraps around" } else { "" };
        match bad {
            Some(b) => self.fail(
                "process-mapping",
                format!("{} disagrees with the hostnames: {b}", report::truncate(&raw, 60)),
            ),
            None => self.pass(
                "process-mapping",
                format!(
                    "{} ({form}{wrap}): {} nodes, agrees with the hostnames",
                    report::truncate(&raw, 60),
                    nodes.len()
                ),
            ),
        }
    }

    fn repeated_fences(&mut self) {
        let (r, nb) = (self.rank, self.nb());
        let rounds = 10;
        let mut res: Result<String, String> = Ok(format!("{rounds} fences, a new key each"));
        for i in 0..rounds {
            let p = self.c.put(&format!("pmicheck-rf-{r}-{i}"), &format!("round{i}"));
            if let (Err(e), Ok(_)) = (&p, &res) {
                res = Err(format!("round {i}: put: {e}"));
            }
            if let Err(e) = self.fence() {
                self.fail("repeated-fences", format!("round {i}: fence: {e}"));
                return;
            }
            if res.is_ok() {
                if let Err(e) = self.expect(&format!("pmicheck-rf-{nb}-{i}"), &format!("round{i}"))
                {
                    res = Err(format!("round {i}: {e}"));
                }
            }
        }
        self.outcome("repeated-fences", res);
    }

    fn overwrite(&mut self) {
        let (r, nb) = (self.rank, self.nb());
        let key = |x: usize| format!("pmicheck-ow-{x}");
        let mut res: Result<String, String> =
            Ok("latest value visible after the next fence (own and neighbour's key)".into());
        if let Err(e) = self.c.put(&key(r), "first") {
            res = Err(format!("first put: {e}"));
        }
        if let Err(e) = self.fence() {
            self.fail("overwrite", format!("fence: {e}"));
            return;
        }
        if res.is_ok() {
            // Also fills any cache on the way, which the overwrite must invalidate. The
            // neighbour may already have put "second" (a put may become visible before the
            // next fence), so either value is right here.
            match self.c.get(&key(nb)) {
                Ok(Some(v)) if v == "first" || v == "second" => {}
                Ok(Some(v)) => res = Err(format!("before the overwrite: got {v:?}")),
                Ok(None) => res = Err(format!("{} not found after the fence", key(nb))),
                Err(e) => res = Err(format!("before the overwrite: get {}: {e}", key(nb))),
            }
        }
        if let (Err(e), true) = (self.c.put(&key(r), "second"), res.is_ok()) {
            res = Err(format!("second put of the same key: {e}"));
        }
        if let Err(e) = self.fence() {
            self.fail("overwrite", format!("fence: {e}"));
            return;
        }
        if res.is_ok() {
            for (x, who) in [(r, "own"), (nb, "neighbour's")] {
                match self.c.get(&key(x)) {
                    Ok(Some(v)) if v == "second" => {}
                    Ok(Some(v)) => {
                        res = Err(format!("{who} key {} after overwrite and fence: got {v:?}, expected \"second\"", key(x)));
                        break;
                    }
                    Ok(None) => {
                        res = Err(format!("{who} key {} not found after overwrite", key(x)));
                        break;
                    }
                    Err(e) => {
                        res = Err(format!("get {}: {e}", key(x)));
                        break;
                    }
                }
            }
        }
        self.outcome("overwrite", res);
    }

    fn get_missing(&mut self) {
        let key = format!("pmicheck-missing-{}", self.rank);
        let t = Instant::now();
        let to = self.c.op_timeout;
        match self.c.get_t(&key, to) {
            Ok(None) => {
                self.pass("get-missing", format!("not found, answered in {}", fmt_dur(t.elapsed())))
            }
            Ok(Some(v)) => self.fail("get-missing", format!("a key never put was found: {v:?}")),
            Err(e) => self.fail("get-missing", e.to_string()),
        }
    }

    fn publish(&mut self) {
        let (r, last) = (self.rank, self.size - 1);
        let svc = format!("pmicheck-{}", &fnv(&self.kvs)[..8]);
        let port = "pmicheck-port-0";
        let mut res0: Option<Result<String, (Status, String)>> = None;
        if r == 0 {
            let ok = match self.c.publish(&svc, port) {
                Ok(()) => "1",
                Err(e) if e.is_refusal() => {
                    res0 = Some(Err((Status::Skip, format!("server refused publish_name: {e}"))));
                    "0"
                }
                Err(e) => {
                    res0 = Some(Err((Status::Fail, format!("publish: {e}"))));
                    "0"
                }
            };
            let _ = self.c.put("pmicheck-pub", ok);
        }
        let f1 = self.fence();
        let published = r == last && matches!(self.c.get("pmicheck-pub"), Ok(Some(v)) if v == "1");
        let mut res_last: Option<Result<(), String>> = None;
        if published {
            res_last = Some(match self.c.lookup(&svc) {
                Ok(Some(p)) if p == port => Ok(()),
                Ok(Some(p)) => Err(format!("lookup after publish: port {p:?}, expected {port:?}")),
                Ok(None) => Err("lookup after publish: not found".into()),
                Err(e) => Err(format!("lookup after publish: {e}")),
            });
        }
        // Order the unpublish after the lookup through the KVS, not the fence alone (a PMI-2
        // fence need not be a barrier: Hydra answers it at once).
        if r == last {
            let _ = self.c.put("pmicheck-looked", "1");
        }
        let f2 = self.fence();
        if r == 0 && res0.is_none() {
            let _ = self.c.get("pmicheck-looked");
            let ok = match self.c.unpublish(&svc) {
                Ok(()) => "1",
                Err(e) => {
                    res0 = Some(Err((Status::Fail, format!("unpublish: {e}"))));
                    "0"
                }
            };
            let _ = self.c.put("pmicheck-unpub", ok);
        }
        let f3 = self.fence();
        if published
            && matches!(res_last, Some(Ok(())))
            && matches!(self.c.get("pmicheck-unpub"), Ok(Some(v)) if v == "1")
        {
            match self.c.lookup(&svc) {
                Ok(None) => {}
                Ok(Some(p)) => {
                    res_last = Some(Err(format!("lookup after unpublish still finds {p:?}")))
                }
                Err(e) => res_last = Some(Err(format!("lookup after unpublish: {e}"))),
            }
        }
        if let Some(e) = [f1, f2, f3].into_iter().find_map(Result::err) {
            self.fail("publish-lookup", format!("fence: {e}"));
            return;
        }
        // Merge rank 0's and the last rank's views (they may be the same rank).
        let mut st = Status::NotApplicable;
        let mut detail = String::new();
        if r == 0 {
            match res0 {
                None => {
                    st = Status::Pass;
                    detail =
                        format!("publish {svc}, lookup on rank {last}, unpublish, lookup misses");
                }
                Some(Err((s, d))) => {
                    st = s;
                    detail = d;
                }
                Some(Ok(d)) => {
                    st = Status::Pass;
                    detail = d;
                }
            }
        }
        match res_last {
            Some(Err(d)) => {
                st = Status::Fail;
                detail = d;
            }
            Some(Ok(())) if st == Status::NotApplicable => st = Status::Pass,
            _ => {}
        }
        self.set("publish-lookup", st, detail);
    }

    fn spawn(&mut self) {
        if self.rank != 0 {
            self.na("spawn");
            return;
        }
        if !self.o.spawn {
            self.skip("spawn", "not requested (run with --spawn)");
            return;
        }
        let exe = match std::env::current_exe() {
            Ok(p) => p.to_string_lossy().into_owned(),
            Err(e) => {
                self.fail("spawn", format!("cannot find our own executable: {e}"));
                return;
            }
        };
        let mut args = vec!["--spawned-child".to_string()];
        if self.o.v2 {
            args.push("--pmi2".into());
        }
        let kvs = self.kvs.clone();
        match self.c.spawn(2, &exe, &args, ("pmicheck-parent", &kvs)) {
            Ok(j) => self.pass(
                "spawn",
                format!(
                    "2 copies spawned{} (they check PMI_SPAWNED and the preput key)",
                    j.map_or(String::new(), |j| format!(", jobid {j}"))
                ),
            ),
            Err(e) if e.is_refusal() => self.skip("spawn", format!("server refused spawn: {e}")),
            Err(e) => self.fail("spawn", e.to_string()),
        }
    }

    fn node_attrs(&mut self) {
        // My position among the ranks of my node: from the mapping, else the PM's env.
        let (local, nlocal) = match &self.mapping {
            Some(m) => {
                let me = m.nodes[self.rank];
                let mine: Vec<usize> = (0..self.size).filter(|&i| m.nodes[i] == me).collect();
                (mine.iter().position(|&i| i == self.rank).unwrap_or(0), mine.len())
            }
            None => {
                let id = ["MPI_LOCALRANKID", "SLURM_LOCALID"]
                    .iter()
                    .find_map(|v| std::env::var(v).ok()?.parse::<usize>().ok())
                    .unwrap_or(0);
                (id, 2)
            }
        };
        let key = "pmicheck-nattr";
        let val = "set-by-the-first-rank-of-the-node";
        let f1 = self.fence();
        match local {
            0 => {
                std::thread::sleep(Duration::from_millis(300));
                let r = match self.c.put_node_attr(key, val) {
                    Err(e) => Err(format!("info-putnodeattr: {e}")),
                    Ok(()) => match self.c.get_node_attr(key, false) {
                        Ok(Some(v)) if v == val => Ok("put and read back on the node".to_string()),
                        Ok(Some(v)) => Err(format!("read back {v:?}")),
                        Ok(None) => Err("not found right after info-putnodeattr".into()),
                        Err(e) => Err(format!("info-getnodeattr: {e}")),
                    },
                };
                self.outcome("node-attr", r);
                self.na("node-attr-wait");
            }
            1 => {
                self.na("node-attr");
                let t = Instant::now();
                let r = match self.c.get_node_attr(key, true) {
                    Ok(Some(v)) if v == val => Ok(format!(
                        "wait=TRUE answered when the other rank put it ({})",
                        fmt_dur(t.elapsed())
                    )),
                    Ok(Some(v)) => Err(format!("got {v:?}")),
                    Ok(None) => Err(format!(
                        "wait=TRUE answered found=FALSE after {} instead of waiting for the put",
                        fmt_dur(t.elapsed())
                    )),
                    Err(e) => Err(format!("info-getnodeattr wait=TRUE: {e}")),
                };
                self.outcome("node-attr-wait", r);
            }
            _ => {
                self.na("node-attr");
                self.na("node-attr-wait");
            }
        }
        if nlocal < 2 && local == 0 {
            self.na("node-attr-wait");
        }
        let r = match self.c.get_node_attr("pmicheck-nattr-never-put", false) {
            Ok(None) => Ok("wait=FALSE of a missing key: found=FALSE".to_string()),
            Ok(Some(v)) => Err(format!("a node attribute never put was found: {v:?}")),
            Err(e) => Err(e.to_string()),
        };
        self.outcome("node-attr-missing", r);
        let f2 = self.fence();
        if let Some(e) = [f1, f2].into_iter().find_map(Result::err) {
            self.fail("node-attr-missing", format!("fence: {e}"));
        }
    }

    fn timing(&mut self) {
        if self.rank != 0 {
            self.na("timing");
            return;
        }
        let m = |v: &[Duration]| median(v).map_or("-".to_string(), fmt_dur);
        if self.t_fence.is_empty() {
            self.skip("timing", "no samples");
            return;
        }
        let first = self.t_fence.first().copied().unwrap_or_default();
        let rest: Vec<Duration> = self.t_fence.iter().skip(1).copied().collect();
        self.pass(
            "timing",
            format!(
                "rank 0 medians: put {} (n={}), get {} (n={}), fence {} (n={}); first fence {}",
                m(&self.t_put),
                self.t_put.len(),
                m(&self.t_get),
                self.t_get.len(),
                m(&rest),
                rest.len(),
                fmt_dur(first)
            ),
        );
    }

    /// Gather every rank's outcomes through the KVS; rank 0 prints. The job's exit status.
    fn gather(&mut self) -> i32 {
        let r = self.rank;
        let names = self.names.clone();
        let (codes, idx) =
            report::encode_statuses(&self.out, |i| names.get(i) == Some(&"node-attr-wait"));
        let mut put_err = self.c.put(&format!("pmicheck-res-{r}"), &codes).err();
        for i in idx {
            let d = report::escape(&report::truncate(&self.out[i].detail, report::DETAIL_MAX));
            if let Err(e) = self.c.put(&format!("pmicheck-det-{r}-{i}"), &d) {
                put_err.get_or_insert(e);
            }
        }
        let f = self.fence();
        if r == 0 {
            let mut ranks = vec![RankResults { rank: 0, outcomes: self.out.clone() }];
            let mut missing = Vec::new();
            if let Err(e) = &f {
                missing.push(format!("fence: {e}"));
            } else {
                for s in 1..self.size {
                    match self.fetch(s) {
                        Ok(rr) => ranks.push(rr),
                        Err(e) => missing.push(format!("rank {s}: {e}")),
                    }
                    if self.c.broken().is_some() {
                        break;
                    }
                }
            }
            let mut lines = report::merge(&self.names, &ranks, self.size);
            if let Some(e) = put_err {
                missing.push(format!("rank 0's results: {e}"));
            }
            if !missing.is_empty() {
                let n = missing.len();
                lines.push(report::Line {
                    name: "results".into(),
                    status: Status::Fail,
                    detail: format!(
                        "{}{}",
                        missing[0],
                        if n > 1 { format!(" (and {} more)", n - 1) } else { String::new() }
                    ),
                });
            }
            let failed = report::print(&lines);
            let code = i32::from(failed > 0);
            let _ = self.c.put("pmicheck-exit", &code.to_string());
            let _ = self.fence();
            code
        } else {
            let _ = self.fence();
            match self.c.get("pmicheck-exit") {
                Ok(Some(v)) => v.trim().parse().unwrap_or(1),
                _ => 1,
            }
        }
    }

    fn fetch(&mut self, s: usize) -> Result<RankResults, String> {
        let codes = match self.c.get(&format!("pmicheck-res-{s}")) {
            Ok(Some(v)) => v,
            Ok(None) => return Err("no results (did its PMI connection fail?)".into()),
            Err(e) => return Err(e.to_string()),
        };
        let sts = report::decode_statuses(&codes, self.names.len())?;
        let mut outcomes = Vec::with_capacity(sts.len());
        for (i, st) in sts.into_iter().enumerate() {
            let with_detail = matches!(st, Status::Fail | Status::Skip)
                || (st == Status::Pass && self.names.get(i) == Some(&"node-attr-wait"));
            let detail = if with_detail {
                match self.c.get(&format!("pmicheck-det-{s}-{i}")) {
                    Ok(Some(d)) => report::unescape(&d),
                    Ok(None) => "(detail missing)".into(),
                    Err(e) => format!("(detail: {e})"),
                }
            } else {
                String::new()
            };
            outcomes.push(Outcome { status: st, detail });
        }
        Ok(RankResults { rank: s, outcomes })
    }
}

/// Rank 0's lines when the job cannot be gathered (no server, failed init): its own outcomes.
fn print_local(names: &[&str], out: &[Outcome]) -> i32 {
    let ranks = [RankResults { rank: 0, outcomes: out.to_vec() }];
    let lines = report::merge(names, &ranks, 1);
    i32::from(report::print(&lines) > 0).max(1)
}

fn run(o: Opts) -> i32 {
    let names = check_names(o.v2);
    let mut out: Vec<Outcome> = names
        .iter()
        .map(|_| Outcome { status: Status::Skip, detail: "not run (an earlier failure)".into() })
        .collect();
    // Ranks that cannot even start print only if they may be rank 0.
    let may_print = !matches!(env_num("PMI_RANK"), Some(Ok(r)) if r != 0);
    let early = |out: &mut Vec<Outcome>, d: String| {
        out[0] = Outcome { status: Status::Fail, detail: d.clone() };
        if may_print {
            print_local(&names, out)
        } else {
            errln!("libi-pmicheck: {d}");
            1
        }
    };
    let ep = match Endpoint::from_env() {
        Ok(e) => e,
        Err(e) => return early(&mut out, e),
    };
    let c = match Conn::connect(&ep, o.v2, o.timeout, o.fence_timeout) {
        Ok(c) => c,
        Err(e) => return early(&mut out, e),
    };
    let names2 = names.clone();
    let mut s = Suite {
        c,
        o,
        names: names2,
        out,
        rank: 0,
        size: 0,
        kvsname_max: 256,
        keylen: 64,
        vallen: 1024,
        appnum: None,
        kvs: String::new(),
        usize_: None,
        mapping_raw: None,
        mapping: None,
        host: hostname(),
        t_put: Vec::new(),
        t_get: Vec::new(),
        t_fence: Vec::new(),
    };
    let info = match s.c.init() {
        Ok(i) => {
            let want = if s.o.v2 { 2 } else { 1 };
            if i.version != want {
                s.fail(
                    "init",
                    format!(
                        "asked for PMI-{want}, server answered pmi_version={} pmi_subversion={}",
                        i.version, i.subversion
                    ),
                );
            } else {
                s.pass(
                    "init",
                    format!(
                        "response_to_init pmi_version={} pmi_subversion={} rc=0",
                        i.version, i.subversion
                    ),
                );
            }
            i
        }
        Err(e) => {
            s.fail("init", e.to_string());
            return if may_print { print_local(&s.names, &s.out) } else { 1 };
        }
    };
    if s.basics(&info).is_err() {
        return if may_print { print_local(&s.names, &s.out) } else { 1 };
    }
    s.kvs_phase();
    s.repeated_fences();
    s.overwrite();
    s.get_missing();
    s.publish();
    s.spawn();
    if s.o.v2 {
        s.node_attrs();
    }
    s.timing();
    let code = if let Some(b) = s.c.broken().map(str::to_owned) {
        // Cannot report through the server any more: say so locally.
        errln!("libi-pmicheck: rank {}: PMI connection unusable: {b}", s.rank);
        if s.rank == 0 {
            let mut lines = report::merge(
                &s.names,
                &[RankResults { rank: 0, outcomes: s.out.clone() }],
                s.size,
            );
            lines.push(report::Line {
                name: "results".into(),
                status: Status::Fail,
                detail: format!("could not gather the other ranks' results: {b}"),
            });
            report::print(&lines);
        }
        1
    } else {
        s.gather()
    };
    if s.c.broken().is_none() {
        if let Err(e) = s.c.finalize() {
            errln!("libi-pmicheck: rank {}: finalize: {e}", s.rank);
            return 1;
        }
    }
    code
}

/// A copy started by `--spawn`: init, check PMI_SPAWNED and the parent's preput key, fence,
/// finalize. Silent unless something fails (then one line on stderr and status 1).
fn child(o: &Opts) -> i32 {
    let r = (|| -> Result<(), String> {
        let ep = Endpoint::from_env()?;
        let mut c = Conn::connect(&ep, o.v2, o.timeout, o.fence_timeout)?;
        c.init().map_err(|e| format!("init: {e}"))?;
        let kvs = c.kvsname().map_err(|e| format!("kvsname: {e}"))?;
        c.kvsname = kvs;
        if std::env::var("PMI_SPAWNED").as_deref() != Ok("1") {
            return Err(format!("PMI_SPAWNED={:?}, expected 1", std::env::var("PMI_SPAWNED").ok()));
        }
        match c.get("pmicheck-parent") {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err("preput key pmicheck-parent not in the spawned job's KVS".into())
            }
            Err(e) => return Err(format!("get pmicheck-parent: {e}")),
        }
        c.fence().map_err(|e| format!("fence: {e}"))?;
        c.finalize().map_err(|e| format!("finalize: {e}"))?;
        Ok(())
    })();
    match r {
        Ok(()) => 0,
        Err(e) => {
            errln!("libi-pmicheck (spawned child): {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arg_parsing() {
        let o = parse_args(&args(&["--pmi2", "--timeout", "2.5", "--keys", "7"])).unwrap().unwrap();
        assert!(o.v2 && !o.spawn);
        assert_eq!(o.timeout, Duration::from_millis(2500));
        assert_eq!(o.keys, 7);
        assert!(parse_args(&args(&["--help"])).unwrap().is_none());
        for bad in [&["--bogus"][..], &["--timeout"], &["--timeout", "-1"], &["--keys", "0"]] {
            assert!(parse_args(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn values() {
        let v = long_value("m12", 1024);
        assert_eq!(v.len(), 1024);
        assert!(v.starts_with("m12:abc"));
        assert_eq!(long_value("m1", 2), "m1");
        assert!(diff("abc", "abd").contains("byte 2"));
        assert!(diff("abc", "ab").contains("truncated to 2 of 3"));
        assert!(diff("abc", "abxy").contains("got 4 bytes"));
    }

    #[test]
    fn info_roundtrip() {
        let i = Info {
            rank: "3".into(),
            size: "8".into(),
            appnum: "0".into(),
            kvs: "kvs_1_0".into(),
            usize_: "-1".into(),
            maxes: "256/64/1024".into(),
            host: "a host,with=odd chars".into(),
            mapping: "-".into(),
        };
        assert_eq!(Info::decode(&i.encode()), Some(i));
        assert_eq!(Info::decode("1,2"), None);
    }

    #[test]
    fn names_unique() {
        for v2 in [false, true] {
            let n = check_names(v2);
            let mut m = n.clone();
            m.sort();
            m.dedup();
            assert_eq!(m.len(), n.len());
        }
    }
}
