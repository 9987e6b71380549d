//! Property tests: codec round trips and "arbitrary input never panics".

use pmi_wire::server::{Action, ConnConfig, Connection};
use pmi_wire::v1::{
    is_known_reply_cmd, parse_request, parse_spawn, GetMiss, Reply, Request, SpawnCmd,
    MAX_REQUEST_LEN,
};
use proptest::prelude::*;

/// A value that ends at a space: no space, no newline (may be empty).
fn tok() -> impl Strategy<Value = String> {
    "[^ \n]{0,12}"
}

/// A value that runs to end of line: no newline.
fn eol() -> impl Strategy<Value = String> {
    "[^\n]{0,24}"
}

/// A KVS value (`put`, `get_result`): bytes, UTF-8 or not, no newline.
fn eol_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        eol().prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>().prop_filter("newline", |&b| b != b'\n'), 0..24),
    ]
}

const KNOWN_REQUESTS: &[&str] = &[
    "init",
    "initack",
    "get_maxes",
    "get_appnum",
    "get_my_kvsname",
    "get_universe_size",
    "put",
    "get",
    "barrier_in",
    "finalize",
    "abort",
    "publish_name",
    "unpublish_name",
    "lookup_name",
    "getbyidx",
    "get_ranks2hosts",
];

fn spawn_cmd(first: bool) -> impl Strategy<Value = SpawnCmd> {
    let pairs = || proptest::collection::vec((eol(), eol()), 0..3);
    (
        0u32..=(1 << 20),
        eol(),
        proptest::collection::vec(eol(), 0..4),
        if first { pairs().boxed() } else { Just(Vec::new()).boxed() },
        pairs(),
    )
        .prop_map(|(nprocs, execname, args, preput, info)| SpawnCmd {
            nprocs,
            execname,
            args,
            preput,
            info,
        })
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (any::<u32>(), any::<u32>())
            .prop_map(|(version, subversion)| Request::Init { version, subversion }),
        any::<i64>().prop_map(|pmiid| Request::InitAck { pmiid }),
        Just(Request::GetMaxes),
        Just(Request::GetAppnum),
        Just(Request::GetMyKvsname),
        Just(Request::GetUniverseSize),
        (tok(), tok(), eol_bytes()).prop_map(|(kvsname, key, value)| Request::Put {
            kvsname,
            key,
            value
        }),
        (tok(), tok()).prop_map(|(kvsname, key)| Request::Get { kvsname, key }),
        proptest::option::of(tok()).prop_map(|group| Request::BarrierIn { group }),
        Just(Request::Finalize),
        (any::<i32>(), proptest::option::of(eol()))
            .prop_map(|(exitcode, message)| Request::Abort { exitcode, message }),
        (tok(), tok()).prop_map(|(service, port)| Request::PublishName { service, port }),
        tok().prop_map(|service| Request::UnpublishName { service }),
        tok().prop_map(|service| Request::LookupName { service }),
        (tok(), any::<u64>()).prop_map(|(kvsname, idx)| Request::GetByIdx { kvsname, idx }),
        Just(Request::GetRanks2Hosts),
        "[^ \n]{1,12}"
            .prop_filter("unknown", |c| !KNOWN_REQUESTS.contains(&c.as_str()))
            .prop_map(|cmd| Request::Unknown { cmd }),
        (spawn_cmd(true), proptest::collection::vec(spawn_cmd(false), 0..3)).prop_map(
            |(first, rest)| {
                let mut cmds = vec![first];
                cmds.extend(rest);
                Request::Spawn { cmds }
            }
        ),
    ]
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        (any::<u32>(), any::<u32>(), any::<i32>()).prop_map(|(version, subversion, rc)| {
            Reply::ResponseToInit { version, subversion, rc }
        }),
        (any::<u32>(), any::<u32>()).prop_map(|(rank, size)| Reply::InitAck { rank, size }),
        (any::<usize>(), any::<usize>(), any::<usize>()).prop_map(|(a, b, c)| Reply::Maxes {
            kvsname_max: a,
            keylen_max: b,
            vallen_max: c
        }),
        any::<i32>().prop_map(|appnum| Reply::Appnum { appnum }),
        tok().prop_map(|kvsname| Reply::MyKvsname { kvsname }),
        any::<i32>().prop_map(|size| Reply::UniverseSize { size }),
        (any::<i32>(), tok()).prop_map(|(rc, msg)| Reply::PutResult { rc, msg }),
        eol_bytes().prop_map(|v| Reply::GetResult { value: Ok(v) }),
        tok().prop_map(|key| Reply::GetResult { value: Err(GetMiss { key }) }),
        Just(Reply::BarrierOut),
        Just(Reply::FinalizeAck),
        (any::<i32>(), tok()).prop_map(|(rc, msg)| Reply::PublishResult { rc, msg }),
        (any::<i32>(), tok()).prop_map(|(rc, msg)| Reply::UnpublishResult { rc, msg }),
        proptest::option::of(tok()).prop_map(|port| Reply::LookupResult { port }),
        (any::<i32>(), proptest::option::of(proptest::collection::vec(any::<i32>(), 1..5)))
            .prop_map(|(rc, errcodes)| Reply::SpawnResult { rc, errcodes }),
        proptest::option::of((any::<u64>(), tok(), tok()))
            .prop_map(|entry| Reply::GetByIdxResult { entry }),
        proptest::collection::vec(
            ("[^\n]{0,12}", proptest::collection::vec(any::<u32>(), 0..5)),
            0..4
        )
        .prop_map(|hosts| Reply::Ranks2Hosts { hosts }),
        ("[^ \n]{1,12}", any::<i32>(), tok())
            .prop_filter("unknown reply", |(c, _, _)| !is_known_reply_cmd(c))
            .prop_map(|(cmd, rc, msg)| Reply::Error { cmd, rc, msg }),
    ]
}

fn cfg() -> ConnConfig {
    ConnConfig {
        rank: 0,
        size: 2,
        appnum: 0,
        kvsname: "kvs".into(),
        universe_size: 2,
        spawner: None,
    }
}

/// Byte soup biased towards PMI structure, so the state machine's deeper paths get hit.
fn pmi_soup() -> impl Strategy<Value = Vec<u8>> {
    const FRAGS: &[&[u8]] = &[
        b"cmd=",
        b"mcmd=spawn\n",
        b"endcmd\n",
        b"totspawns=1\n",
        b"totspawns=2\n",
        b"spawnssofar=1\n",
        b"spawnssofar=2\n",
        b"nprocs=1\nexecname=a\n",
        b"argcnt=1\narg1=x\n",
        b"init pmi_version=1 pmi_subversion=1\n",
        b"put kvsname=kvs key=k value=",
        b"get kvsname=kvs key=",
        b"abort exitcode=",
        b"barrier_in\n",
        b" ",
        b"=",
        b"\n",
        b"\0",
    ];
    let frag = prop_oneof![
        4 => proptest::sample::select(FRAGS).prop_map(<[u8]>::to_vec),
        1 => proptest::collection::vec(any::<u8>(), 0..8),
    ];
    proptest::collection::vec(frag, 0..32).prop_map(|v| v.concat())
}

fn feed_split(data: &[u8], cuts: &[usize]) -> (Vec<Action>, Connection) {
    let mut c = Connection::new(cfg());
    let mut out = Vec::new();
    let mut points: Vec<usize> = cuts.iter().map(|&p| p % (data.len() + 1)).collect();
    points.sort_unstable();
    let mut prev = 0;
    for p in points.into_iter().chain(std::iter::once(data.len())) {
        c.receive(&data[prev..p], &mut out);
        assert!(c.buffered() <= MAX_REQUEST_LEN);
        prev = p;
    }
    (out, c)
}

proptest! {
    #[test]
    fn request_round_trip(r in request()) {
        let mut bytes = Vec::new();
        r.encode(&mut bytes);
        let back = match &r {
            Request::Spawn { .. } => parse_spawn(&bytes),
            _ => {
                prop_assert_eq!(bytes.last(), Some(&b'\n'));
                prop_assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 1);
                parse_request(&bytes[..bytes.len() - 1])
            }
        };
        prop_assert_eq!(back, Ok(r));
    }

    #[test]
    fn request_round_trip_through_connection(r in request()) {
        // Whatever a client encodes, the connection frames it as exactly one request.
        let mut bytes = Vec::new();
        r.encode(&mut bytes);
        let mut c = Connection::new(cfg());
        let mut out = Vec::new();
        c.receive(&bytes, &mut out);
        prop_assert_eq!(c.buffered(), 0);
        let fatal = out.iter().any(|a| matches!(a, Action::ProtocolError { fatal: true, .. }));
        prop_assert!(!fatal, "{:?}", out);
        if let Request::Spawn { cmds } = r {
            prop_assert_eq!(out, vec![Action::Spawn { cmds }]);
        }
    }

    #[test]
    fn reply_round_trip(r in reply()) {
        let bytes = r.to_bytes();
        prop_assert_eq!(bytes.last(), Some(&b'\n'));
        prop_assert_eq!(Reply::parse(&bytes), Ok(r));
    }
}

/// Generated inputs per never-panic property: `LIBI_FUZZ_CASES` (default 25 000 each, which
/// keeps the suite's total well over 100k; the long run in docs/failures.md sets 1 000 000).
fn fuzz_cases() -> u32 {
    std::env::var("LIBI_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(25_000)
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(fuzz_cases()) })]

    #[test]
    fn parsers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_request(&data);
        let _ = parse_spawn(&data);
        let _ = Reply::parse(&data);
    }

    #[test]
    fn parsers_never_panic_on_soup(data in pmi_soup()) {
        let _ = parse_request(&data);
        let _ = parse_spawn(&data);
        let _ = Reply::parse(&data);
        let mut r = b"put_ranks2hosts ".to_vec();
        r.extend_from_slice(&data);
        let _ = Reply::parse(&r);
    }

    #[test]
    fn connection_never_panics(
        data in proptest::collection::vec(any::<u8>(), 0..400),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let (_, mut c) = feed_split(&data, &cuts);
        let _ = c.eof();
    }

    #[test]
    fn connection_split_invariant(
        data in pmi_soup(),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        // Never panics, and how the bytes are split never changes what comes out.
        let (whole, c1) = feed_split(&data, &[]);
        let (split, c2) = feed_split(&data, &cuts);
        prop_assert_eq!(whole, split);
        prop_assert_eq!(c1.phase(), c2.phase());
        prop_assert_eq!(c1.buffered(), c2.buffered());
    }
}
