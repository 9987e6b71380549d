//! PMI-2 property tests: codec round trips in both directions, and "arbitrary input never
//! panics" for the parsers and for the connection (PMI-1 and PMI-2 mixed, random splits).

use pmi_wire::server::{Action, ConnConfig, Connection};
use pmi_wire::v1::{SpawnCmd, MAX_REQUEST_LEN};
use pmi_wire::v2::{
    self, parse_request, Align, Reply, Request, KNOWN_REPLIES, KNOWN_REQUESTS, MISS_REPLIES,
};
use proptest::prelude::*;

/// Any value a client may send (`;` included: it is escaped as `;;`).
fn val() -> impl Strategy<Value = String> {
    "[^\0]{0,16}"
}

/// A value a server may send: no `;` (replies never carry one).
fn rval() -> impl Strategy<Value = String> {
    "[^;\0]{0,16}"
}

fn align() -> impl Strategy<Value = Align> {
    prop_oneof![Just(Align::Left), Just(Align::Right)]
}

fn thrid() -> impl Strategy<Value = Option<String>> {
    proptest::option::of("[A-Za-z0-9x]{1,8}")
}

fn spawn_cmd(first: bool) -> impl Strategy<Value = SpawnCmd> {
    let pairs = || proptest::collection::vec((val(), val()), 0..3);
    (
        0u32..=(1 << 20),
        val(),
        proptest::collection::vec(val(), 0..4),
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
        (any::<i32>(), proptest::option::of(val()), any::<bool>())
            .prop_map(|(rank, jobid, threaded)| Request::FullInit { rank, jobid, threaded }),
        Just(Request::JobGetId),
        (val(), val()).prop_map(|(key, value)| Request::KvsPut { key, value }),
        Just(Request::KvsFence),
        (proptest::option::of(val()), proptest::option::of(any::<i32>()), val())
            .prop_map(|(jobid, srcid, key)| Request::KvsGet { jobid, srcid, key }),
        val().prop_map(|key| Request::GetJobAttr { key }),
        (val(), val()).prop_map(|(key, value)| Request::PutNodeAttr { key, value }),
        (val(), any::<bool>()).prop_map(|(key, wait)| Request::GetNodeAttr { key, wait }),
        Just(Request::Finalize),
        (
            proptest::option::of(any::<i32>()),
            proptest::option::of(any::<bool>()),
            proptest::option::of(val())
        )
            .prop_map(|(exitcode, isworld, message)| Request::Abort {
                exitcode,
                isworld,
                message
            }),
        (spawn_cmd(true), proptest::collection::vec(spawn_cmd(false), 0..3)).prop_map(
            |(first, rest)| {
                let mut cmds = vec![first];
                cmds.extend(rest);
                Request::Spawn { cmds }
            }
        ),
        (val(), val()).prop_map(|(name, port)| Request::NamePublish { name, port }),
        val().prop_map(|name| Request::NameUnpublish { name }),
        val().prop_map(|name| Request::NameLookup { name }),
        val().prop_map(|jobid| Request::JobConnect { jobid }),
        val().prop_map(|jobid| Request::JobDisconnect { jobid }),
        (any::<i32>(), val(), val()).prop_map(|(count, left, right)| Request::Ring {
            count,
            left,
            right
        }),
        "[^\0]{1,12}"
            .prop_filter("unknown", |c| !KNOWN_REQUESTS.contains(&c.as_str()))
            .prop_map(|cmd| Request::Unknown { cmd }),
    ]
}

fn reply() -> impl Strategy<Value = Reply> {
    let simple: Vec<&'static str> =
        KNOWN_REPLIES.iter().copied().filter(|c| !MISS_REPLIES.contains(c)).collect();
    prop_oneof![
        (
            any::<i32>(),
            any::<i32>(),
            any::<i32>(),
            proptest::option::of(rval()),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(rank, size, appnum, spawner_jobid, debugged, verbose)| {
                Reply::FullInit { rank, size, appnum, spawner_jobid, debugged, verbose }
            }),
        rval().prop_map(|jobid| Reply::JobGetId { jobid }),
        Just(Reply::KvsPut),
        Just(Reply::KvsFence),
        proptest::option::of(rval()).prop_map(|value| Reply::KvsGet { value }),
        proptest::option::of(rval()).prop_map(|value| Reply::GetJobAttr { value }),
        Just(Reply::PutNodeAttr),
        proptest::option::of(rval()).prop_map(|value| Reply::GetNodeAttr { value }),
        Just(Reply::Finalize),
        proptest::option::of(rval()).prop_map(|jobid| Reply::Spawn { jobid }),
        Just(Reply::NamePublish),
        Just(Reply::NameUnpublish),
        proptest::option::of(rval()).prop_map(|port| Reply::NameLookup { port }),
        Just(Reply::JobConnect),
        Just(Reply::JobDisconnect),
        // Refusals of known commands (rc ≠ 0) …
        (proptest::sample::select(simple), any::<i32>().prop_filter("rc≠0", |rc| *rc != 0), rval())
            .prop_map(|(cmd, rc, errmsg)| Reply::Error { cmd: cmd.to_owned(), rc, errmsg }),
        // … and any answer to an unknown command.
        ("[^;\0]{1,12}", any::<i32>(), rval())
            .prop_filter("unknown reply", |(c, _, _)| !KNOWN_REPLIES.contains(&c.as_str()))
            .prop_map(|(cmd, rc, errmsg)| Reply::Error { cmd, rc, errmsg }),
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

/// Byte soup biased towards PMI-2 (and PMI-1) structure.
fn soup() -> impl Strategy<Value = Vec<u8>> {
    const FRAGS: &[&[u8]] = &[
        b"cmd=init pmi_version=2 pmi_subversion=0\n",
        b"14    cmd=kvs-fence;",
        b"    14cmd=kvs-fence;",
        b"38    cmd=fullinit;pmirank=0;threaded=FALSE;",
        b"26    cmd=kvs-put;key=a;value=",
        b"22    cmd=kvs-get;key=a;",
        b"13    cmd=finalize;",
        b"10    cmd=abort;",
        b"cmd=",
        b";;",
        b";",
        b"=",
        b"thrid=1;",
        b"spawn;ncmds=1;preputcount=0;subcmd=a;maxprocs=1;argc=0;infokeycount=0;",
        b"999999",
        b"0     ",
        b"      ",
        b"\n",
        b"\0",
    ];
    let frag = prop_oneof![
        4 => proptest::sample::select(FRAGS).prop_map(<[u8]>::to_vec),
        1 => proptest::collection::vec(any::<u8>(), 0..8),
        1 => "[ 0-9]{1,6}".prop_map(String::into_bytes),
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
    fn request_round_trip(r in request(), t in thrid(), a in align()) {
        let frame = r.to_frame(t.as_deref(), a);
        let (body, used) = v2::split_frame(&frame).expect("header").expect("complete");
        prop_assert_eq!(used, frame.len());
        let back = parse_request(body);
        prop_assert_eq!(back, Ok((r, t)));
    }

    #[test]
    fn request_round_trip_through_connection(r in request(), t in thrid(), a in align()) {
        // Whatever a client encodes, the connection frames it as exactly one request and
        // never takes it for a fatal error.
        let frame = r.to_frame(t.as_deref(), a);
        let mut c = Connection::new(cfg());
        let mut out = Vec::new();
        c.receive(&frame, &mut out);
        prop_assert_eq!(c.buffered(), 0);
        let fatal = out.iter().any(|a| matches!(a, Action::ProtocolError { fatal: true, .. }));
        prop_assert!(!fatal, "{:?}", out);
        prop_assert!(!out.is_empty());
        match r {
            Request::Spawn { cmds } => prop_assert_eq!(out, vec![Action::Spawn { cmds }]),
            Request::KvsFence => prop_assert_eq!(out, vec![Action::BarrierIn]),
            _ => {}
        }
    }

    #[test]
    fn reply_round_trip(r in reply(), t in thrid(), a in align()) {
        let frame = r.to_frame(t.as_deref(), a);
        let (body, used) = v2::split_frame(&frame).expect("header").expect("complete");
        prop_assert_eq!(used, frame.len());
        prop_assert!(!body.windows(2).any(|w| w == b";;"), "no ;; in replies");
        prop_assert_eq!(Reply::parse(body), Ok((r, t)));
    }

    #[test]
    fn server_replies_parse_as_replies(key in val(), value in val(), t in thrid()) {
        // Every answer the connection produces parses with the client-side parser.
        let mut c = Connection::new(cfg());
        let mut out = Vec::new();
        let get = Request::KvsGet { jobid: None, srcid: None, key: key.clone() };
        c.receive(&get.to_frame(t.as_deref(), Align::Left), &mut out);
        let bytes = match out.as_slice() {
            [Action::Send(b)] => b.clone(),
            _ => c.answer_get(&key, Some(value.as_bytes())),
        };
        let (body, _) = v2::split_frame(&bytes).expect("header").expect("complete");
        let (rep, back_t) = Reply::parse(body).expect("reply");
        prop_assert_eq!(back_t, t);
        let is_get = matches!(rep, Reply::KvsGet { .. });
        prop_assert!(is_get);
    }
}

/// Generated inputs per never-panic property: `LIBI_FUZZ_CASES` (default 25 000 each).
fn fuzz_cases() -> u32 {
    std::env::var("LIBI_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(25_000)
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(fuzz_cases()) })]

    #[test]
    fn parsers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = v2::parse_body(&data);
        let _ = parse_request(&data);
        let _ = Reply::parse(&data);
        let _ = v2::split_frame(&data);
        if let Some(h) = data.get(..6) {
            let _ = v2::parse_header(h);
        }
    }

    #[test]
    fn parsers_never_panic_on_soup(data in soup()) {
        let _ = parse_request(&data);
        let _ = Reply::parse(&data);
        let _ = v2::split_frame(&data);
        let mut s = b"cmd=spawn;".to_vec();
        s.extend_from_slice(&data);
        let _ = parse_request(&s);
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
        data in soup(),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        // Never panics, and how the bytes are split never changes what comes out.
        let (whole, mut c1) = feed_split(&data, &[]);
        let (split, mut c2) = feed_split(&data, &cuts);
        prop_assert_eq!(&whole, &split);
        prop_assert_eq!(c1.phase(), c2.phase());
        prop_assert_eq!(c1.buffered(), c2.buffered());
        // Answers for whatever is outstanding never panic and come out identical.
        prop_assert_eq!(c1.answer_get("a", Some("v".as_bytes())), c2.answer_get("a", Some("v".as_bytes())));
        prop_assert_eq!(c1.barrier_out(), c2.barrier_out());
        prop_assert_eq!(c1.answer_node_attr("a", None), c2.answer_node_attr("a", None));
        prop_assert_eq!(c1.answer_job_attr("a", Some("x")), c2.answer_job_attr("a", Some("x")));
        prop_assert_eq!(c1.answer_lookup(None), c2.answer_lookup(None));
        prop_assert_eq!(c1.answer_spawn(-1, None, None), c2.answer_spawn(-1, None, None));
    }
}
