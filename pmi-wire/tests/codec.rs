//! Request/reply codec: exact bytes from spec §3/§4 and the lexical quirks of §2/§12.

use pmi_wire::v1::{parse_request, parse_spawn, GetMiss, ParseError, Reply, Request, SpawnCmd};

fn req(line: &str) -> Request {
    parse_request(line.as_bytes()).unwrap()
}

fn enc_req(r: &Request) -> String {
    let mut v = Vec::new();
    r.encode(&mut v);
    String::from_utf8(v).unwrap()
}

fn enc(r: &Reply) -> String {
    String::from_utf8(r.to_bytes()).unwrap()
}

fn s(x: &str) -> String {
    x.to_owned()
}

/// A KVS value's bytes.
fn v(x: &str) -> Vec<u8> {
    x.as_bytes().to_vec()
}

/// Every request variant: parse the spec's line, encode back to the same line.
#[test]
fn every_request_variant() {
    let cases: Vec<(&str, Request)> = vec![
        ("cmd=init pmi_version=1 pmi_subversion=1", Request::Init { version: 1, subversion: 1 }),
        ("cmd=initack pmiid=7", Request::InitAck { pmiid: 7 }),
        ("cmd=get_maxes", Request::GetMaxes),
        ("cmd=get_appnum", Request::GetAppnum),
        ("cmd=get_my_kvsname", Request::GetMyKvsname),
        ("cmd=get_universe_size", Request::GetUniverseSize),
        (
            "cmd=put kvsname=kvs_1 key=-bcast-1-0 value=00AB",
            Request::Put { kvsname: s("kvs_1"), key: s("-bcast-1-0"), value: v("00AB") },
        ),
        (
            "cmd=get kvsname=kvs_1 key=PMI_process_mapping",
            Request::Get { kvsname: s("kvs_1"), key: s("PMI_process_mapping") },
        ),
        ("cmd=barrier_in", Request::BarrierIn { group: None }),
        ("cmd=barrier_in group=WORLD:3", Request::BarrierIn { group: Some(s("WORLD:3")) }),
        ("cmd=finalize", Request::Finalize),
        ("cmd=abort exitcode=3", Request::Abort { exitcode: 3, message: None }),
        (
            "cmd=abort exitcode=-1 message=abort",
            Request::Abort { exitcode: -1, message: Some(s("abort")) },
        ),
        (
            "cmd=publish_name service=svc port=tag#0$",
            Request::PublishName { service: s("svc"), port: s("tag#0$") },
        ),
        ("cmd=unpublish_name service=svc", Request::UnpublishName { service: s("svc") }),
        ("cmd=lookup_name service=svc", Request::LookupName { service: s("svc") }),
        ("cmd=getbyidx kvsname=k idx=4", Request::GetByIdx { kvsname: s("k"), idx: 4 }),
        ("cmd=get_ranks2hosts", Request::GetRanks2Hosts),
        ("cmd=frobnicate", Request::Unknown { cmd: s("frobnicate") }),
    ];
    for (line, want) in cases {
        assert_eq!(req(line), want, "{line}");
        assert_eq!(enc_req(&want), format!("{line}\n"), "{line}");
    }
}

#[test]
fn pmi2_init_line_parses() {
    assert_eq!(
        req("cmd=init pmi_version=2 pmi_subversion=0"),
        Request::Init { version: 2, subversion: 0 }
    );
}

#[test]
fn value_with_equals_sign() {
    assert_eq!(
        req("cmd=get kvsname=a=b key=x=y=z"),
        Request::Get { kvsname: s("a=b"), key: s("x=y=z") }
    );
    assert_eq!(
        req("cmd=put kvsname=k key=a value=x=1=2"),
        Request::Put { kvsname: s("k"), key: s("a"), value: v("x=1=2") }
    );
}

#[test]
fn put_value_runs_to_end_of_line() {
    // Open MPI s1 values end in " -" (spec §12.4); trailing spaces are kept.
    assert_eq!(
        req("cmd=put kvsname=k key=a value=abc def -  "),
        Request::Put { kvsname: s("k"), key: s("a"), value: v("abc def -  ") }
    );
    // key=value tokens after value= are part of the value.
    assert_eq!(
        req("cmd=put kvsname=k key=a value=v key=b"),
        Request::Put { kvsname: s("k"), key: s("a"), value: v("v key=b") }
    );
}

#[test]
fn abort_message_runs_to_end_of_line() {
    assert_eq!(
        req("cmd=abort exitcode=2 error_msg=it went  wrong"),
        Request::Abort { exitcode: 2, message: Some(s("it went  wrong")) }
    );
    assert_eq!(
        req("cmd=abort exitcode=2 message=a b"),
        Request::Abort { exitcode: 2, message: Some(s("a b")) }
    );
    // Lenient exit code: an abort must never be lost.
    assert_eq!(req("cmd=abort"), Request::Abort { exitcode: -1, message: None });
    assert_eq!(req("cmd=abort exitcode=x"), Request::Abort { exitcode: -1, message: None });
}

#[test]
fn repeated_and_trailing_spaces() {
    assert_eq!(
        req("cmd=get   kvsname=k    key=a   "),
        Request::Get { kvsname: s("k"), key: s("a") }
    );
    assert_eq!(
        req("cmd=init  pmi_version=1   pmi_subversion=1 "),
        Request::Init { version: 1, subversion: 1 }
    );
}

#[test]
fn empty_values_and_bare_tokens() {
    assert_eq!(req("cmd=get kvsname= key="), Request::Get { kvsname: s(""), key: s("") });
    assert_eq!(
        req("cmd=put kvsname=k key=a value="),
        Request::Put { kvsname: s("k"), key: s("a"), value: v("") }
    );
    // Bare tokens and unknown keys are ignored; first duplicate wins.
    assert_eq!(
        req("cmd=get junk kvsname=k extra=1 key=a key=b"),
        Request::Get { kvsname: s("k"), key: s("a") }
    );
    assert_eq!(req("cmd=barrier_in group="), Request::BarrierIn { group: Some(s("")) });
}

#[test]
fn trailing_cr_is_part_of_the_value() {
    assert_eq!(req("cmd=get kvsname=k key=a\r"), Request::Get { kvsname: s("k"), key: s("a\r") });
    assert_eq!(req("cmd=get_maxes\r"), Request::Unknown { cmd: s("get_maxes\r") });
}

#[test]
fn request_errors() {
    use ParseError::*;
    let e = |l: &[u8]| parse_request(l).unwrap_err();
    assert_eq!(e(b"get kvsname=k"), NoCommand);
    assert_eq!(e(b""), NoCommand);
    assert_eq!(e(b" cmd=get_maxes"), NoCommand);
    assert_eq!(e(b"cmd="), MissingField { cmd: s(""), field: s("cmd") });
    assert_eq!(e(b"cmd=get kvsname=k"), MissingField { cmd: s("get"), field: s("key") });
    assert_eq!(e(b"cmd=get kvsname key=a"), MissingField { cmd: s("get"), field: s("kvsname") });
    assert_eq!(
        e(b"cmd=init pmi_version=x pmi_subversion=1"),
        BadNumber { cmd: s("init"), field: s("pmi_version") }
    );
    assert_eq!(e(b"cmd=get =x"), BadToken(s("=x")));
    // Control characters come escaped (the token is shown in messages).
    assert_eq!(e(b"cmd=get kvsname=k\nkey=a"), BadToken(s("\\nkey=a")));
    assert_eq!(e(b"cmd=get k\0ey=a"), BadToken(s("\\u{0}ey=a")));
    assert_eq!(e(b"cmd=put kvsname=k key=\xff value=1"), NotUtf8);
    assert!(matches!(e(b"mcmd=spawn"), Spawn(_)));
    let long = vec![b'a'; pmi_wire::v1::MAX_REQUEST_LEN + 1];
    assert!(matches!(e(&long), TooLong(_)));
    // Display never contains the line itself beyond a short token.
    let big = format!("cmd=get ={}", "x".repeat(1000));
    let msg = parse_request(big.as_bytes()).unwrap_err().to_string();
    assert!(msg.len() < 100, "{msg}");
}

// ---------------------------------------------------------------------------------------------
// Spawn (spec §4)

/// What MPICH 4.0.x sends for a 2-command spawn with one preput (each segment repeats
/// `mcmd=spawn` and the preputs, `arg*` before `argcnt`).
const SPAWN_40: &str = "mcmd=spawn\nnprocs=2\nexecname=./child\ntotspawns=2\nspawnssofar=1\n\
arg1=-n\narg2=a b=c\nargcnt=2\npreput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\n\
preput_val_0=tag#0$description#host$port#5$ifname#1.2.3.4$\ninfo_num=1\ninfo_key_0=wdir\n\
info_val_0=/tmp/x y\nendcmd\n\
mcmd=spawn\nnprocs=1\nexecname=./other\ntotspawns=2\nspawnssofar=2\nargcnt=0\npreput_num=1\n\
preput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=tag#0$description#host$port#5$ifname#1.2.3.4$\n\
info_num=0\nendcmd\n";

/// The 4.1+ form: `argcnt` before the args, preputs only in the first segment.
const SPAWN_41: &str = "mcmd=spawn\nnprocs=2\nexecname=./child\ntotspawns=2\nspawnssofar=1\n\
argcnt=2\narg1=-n\narg2=a b=c\npreput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\n\
preput_val_0=tag#0$description#host$port#5$ifname#1.2.3.4$\ninfo_num=1\ninfo_key_0=wdir\n\
info_val_0=/tmp/x y\nendcmd\n\
mcmd=spawn\nnprocs=1\nexecname=./other\ntotspawns=2\nspawnssofar=2\nargcnt=0\ninfo_num=0\n\
endcmd\n";

fn spawn_cmds() -> Vec<SpawnCmd> {
    vec![
        SpawnCmd {
            nprocs: 2,
            execname: s("./child"),
            args: vec![s("-n"), s("a b=c")],
            preput: vec![(
                s("PARENT_ROOT_PORT_NAME"),
                s("tag#0$description#host$port#5$ifname#1.2.3.4$"),
            )],
            info: vec![(s("wdir"), s("/tmp/x y"))],
        },
        SpawnCmd { nprocs: 1, execname: s("./other"), ..Default::default() },
    ]
}

#[test]
fn spawn_40_and_41_forms() {
    let want = Request::Spawn { cmds: spawn_cmds() };
    assert_eq!(parse_spawn(SPAWN_40.as_bytes()).unwrap(), want);
    assert_eq!(parse_spawn(SPAWN_41.as_bytes()).unwrap(), want);
    // Without the final newline too.
    assert_eq!(parse_spawn(SPAWN_41.trim_end().as_bytes()).unwrap(), want);
    // Encoding gives the 4.0 form exactly.
    assert_eq!(enc_req(&want), SPAWN_40);
}

#[test]
fn spawn_single_segment_minimal() {
    let b = "mcmd=spawn\nnprocs=1\nexecname=a\ntotspawns=1\nspawnssofar=1\nendcmd\n";
    assert_eq!(
        parse_spawn(b.as_bytes()).unwrap(),
        Request::Spawn {
            cmds: vec![SpawnCmd { nprocs: 1, execname: s("a"), ..Default::default() }]
        }
    );
}

#[test]
fn spawn_errors() {
    let bad = |b: &str| parse_spawn(b.as_bytes()).unwrap_err();
    let seg = |extra: &str| {
        format!("mcmd=spawn\nnprocs=1\nexecname=a\ntotspawns=1\nspawnssofar=1\n{extra}endcmd\n")
    };
    assert!(matches!(bad(""), ParseError::Spawn(_)));
    assert!(matches!(bad("mcmd=spawn\nnprocs=1\n"), ParseError::Spawn(_)));
    assert_eq!(bad("nprocs=1\nendcmd\n"), ParseError::NoCommand);
    assert!(matches!(bad(&seg("argcnt=5000\n")), ParseError::Spawn(_)));
    assert!(matches!(
        bad(&seg("info_num=99999999999999999999999\n")),
        ParseError::BadNumber { .. }
    ));
    assert_eq!(
        bad(&seg("argcnt=2\narg1=x\n")),
        ParseError::MissingField { cmd: s("spawn"), field: s("arg2") }
    );
    assert!(matches!(bad(&seg("garbage\n")), ParseError::Spawn(_)));
    assert!(matches!(bad(&format!("{}cmd=get_maxes\n", seg(""))), ParseError::Spawn(_)));
    let huge = "mcmd=spawn\nnprocs=16777217\nexecname=a\ntotspawns=1\nspawnssofar=1\nendcmd\n";
    assert!(matches!(bad(huge), ParseError::Spawn(_)));
    // Segment numbering must be 1..=totspawns.
    let skip = "mcmd=spawn\nnprocs=1\nexecname=a\ntotspawns=2\nspawnssofar=2\nendcmd\n";
    assert!(matches!(bad(skip), ParseError::Spawn(_)));
    assert_eq!(parse_spawn(b"mcmd=spawn\n\xff\n"), Err(ParseError::NotUtf8));
}

// ---------------------------------------------------------------------------------------------
// Replies: exact bytes (spec §3, §14) and parse back.

#[test]
fn every_reply_variant() {
    let cases: Vec<(Reply, &str)> = vec![
        (
            Reply::ResponseToInit { version: 1, subversion: 1, rc: 0 },
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
        ),
        (
            Reply::InitAck { rank: 3, size: 8 },
            "cmd=initack rc=0 rank=3 size=8 debug=0\ncmd=set size=8\ncmd=set rank=3\n\
             cmd=set debug=0\n",
        ),
        (
            Reply::Maxes { kvsname_max: 256, keylen_max: 64, vallen_max: 1024 },
            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024 rc=0\n",
        ),
        (Reply::Appnum { appnum: 0 }, "cmd=appnum appnum=0 rc=0\n"),
        (Reply::MyKvsname { kvsname: s("kvs_42_0") }, "cmd=my_kvsname kvsname=kvs_42_0 rc=0\n"),
        (Reply::UniverseSize { size: -1 }, "cmd=universe_size size=-1 rc=0\n"),
        (Reply::PutResult { rc: 0, msg: s("success") }, "cmd=put_result rc=0 msg=success\n"),
        (Reply::PutResult { rc: 1, msg: s("") }, "cmd=put_result rc=1\n"),
        (
            Reply::GetResult { value: Ok(v("(vector,(0,2,2))")) },
            "cmd=get_result rc=0 msg=success value=(vector,(0,2,2))\n",
        ),
        (
            Reply::GetResult { value: Err(GetMiss { key: s("PMI_hwloc_xmlfile") }) },
            "cmd=get_result rc=-1 msg=key_PMI_hwloc_xmlfile_not_found value=unknown\n",
        ),
        (Reply::BarrierOut, "cmd=barrier_out rc=0\n"),
        (Reply::FinalizeAck, "cmd=finalize_ack rc=0\n"),
        (
            Reply::PublishResult { rc: 0, msg: s("success") },
            "cmd=publish_result info=ok rc=0 msg=success\n",
        ),
        (
            Reply::PublishResult { rc: 1, msg: s("key_already_present") },
            "cmd=publish_result info=ok rc=1 msg=key_already_present\n",
        ),
        (
            Reply::UnpublishResult { rc: 0, msg: s("success") },
            "cmd=unpublish_result info=ok rc=0 msg=success\n",
        ),
        (
            Reply::UnpublishResult { rc: 1, msg: s("service_not_found") },
            "cmd=unpublish_result info=ok rc=1 msg=service_not_found\n",
        ),
        (
            Reply::LookupResult { port: Some(s("tag#0$")) },
            "cmd=lookup_result port=tag#0$ info=ok rc=0 msg=success\n",
        ),
        (Reply::LookupResult { port: None }, "cmd=lookup_result rc=1 msg=service_not_found\n"),
        (Reply::SpawnResult { rc: 0, errcodes: None }, "cmd=spawn_result rc=0\n"),
        (
            Reply::SpawnResult { rc: 0, errcodes: Some(vec![0, -1, 0]) },
            "cmd=spawn_result rc=0 errcodes=0,-1,0\n",
        ),
        (
            Reply::GetByIdxResult { entry: Some((5, s("k"), s("v"))) },
            "cmd=getbyidx_results rc=0 nextidx=5 key=k val=v\n",
        ),
        (
            Reply::GetByIdxResult { entry: None },
            "cmd=getbyidx_results rc=1 reason=no_more_keyvals\n",
        ),
        (
            // The Hydra trace example of spec §3.17.
            Reply::Ranks2Hosts {
                hosts: vec![
                    (s("compute-0-3"), vec![0, 1, 2, 3, 4, 5]),
                    (s("compute-0-5"), vec![6, 7, 8, 9, 10, 11]),
                ],
            },
            "put_ranks2hosts 60 2\n11 compute-0-3 0,1,2,3,4,5, 11 compute-0-5 6,7,8,9,10,11, \n",
        ),
        (Reply::Ranks2Hosts { hosts: vec![] }, "cmd=put_ranks2hosts 0 0\n"),
        (
            Reply::Error { cmd: s("foo_result"), rc: -1, msg: s("unknown_command") },
            "cmd=foo_result rc=-1 msg=unknown_command\n",
        ),
    ];
    for (reply, line) in cases {
        assert_eq!(enc(&reply), line, "{reply:?}");
        assert_eq!(Reply::parse(line.as_bytes()).unwrap(), reply, "{line}");
        // The final newline is optional for the parser.
        assert_eq!(Reply::parse(line.trim_end_matches('\n').as_bytes()).unwrap(), reply);
    }
}

#[test]
fn reply_sanitizing() {
    // Spaces in error messages become '_' (spec §12.15).
    assert_eq!(
        enc(&Reply::Error { cmd: s("x_result"), rc: 1, msg: s("no such thing") }),
        "cmd=x_result rc=1 msg=no_such_thing\n"
    );
    // A get_result value keeps its spaces (value last, read to EOL by Flux-style clients)...
    let r = Reply::GetResult { value: Ok(v("a b -")) };
    assert_eq!(enc(&r), "cmd=get_result rc=0 msg=success value=a b -\n");
    assert_eq!(Reply::parse(enc(&r).as_bytes()).unwrap(), r);
    // ...but never a newline.
    assert_eq!(
        enc(&Reply::GetResult { value: Ok(v("a\nb")) }),
        "cmd=get_result rc=0 msg=success value=a_b\n"
    );
    assert_eq!(
        enc(&Reply::GetResult { value: Err(GetMiss { key: s("a b\nc") }) }),
        "cmd=get_result rc=-1 msg=key_a_b_c_not_found value=unknown\n"
    );
    assert_eq!(enc(&Reply::MyKvsname { kvsname: s("a b") }), "cmd=my_kvsname kvsname=a_b rc=0\n");
}

#[test]
fn reply_parse_accepts_other_servers_forms() {
    let p = |l: &str| Reply::parse(l.as_bytes()).unwrap();
    // Slurm/Flux order; H5.x answering subversion 2.
    assert_eq!(
        p("cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=2\n"),
        Reply::ResponseToInit { version: 1, subversion: 2, rc: 0 }
    );
    // Hydra 4.0 without rc.
    assert_eq!(p("cmd=barrier_out\n"), Reply::BarrierOut);
    assert_eq!(p("cmd=finalize_ack\n"), Reply::FinalizeAck);
    assert_eq!(p("cmd=maxes kvsname_max=64 keylen_max=64 vallen_max=1024\n").clone(), {
        Reply::Maxes { kvsname_max: 64, keylen_max: 64, vallen_max: 1024 }
    });
    // Hydra 4.0 initack form.
    assert_eq!(
        p("cmd=initack\ncmd=set size=4\ncmd=set rank=1\ncmd=set debug=0\n"),
        Reply::InitAck { rank: 1, size: 4 }
    );
    // H4.1+/Slurm/Flux misses.
    assert_eq!(p("cmd=get_result rc=1\n"), Reply::GetResult { value: Err(GetMiss { key: s("") }) });
    assert_eq!(p("cmd=get_result rc=4\n"), Reply::GetResult { value: Err(GetMiss { key: s("") }) });
    // H4.1.1 `found=TRUE` after the value: read to EOL (the bug Flux hit).
    assert_eq!(
        p("cmd=get_result rc=0 value=V found=TRUE\n"),
        Reply::GetResult { value: Ok(v("V found=TRUE")) }
    );
    // PSMGMT minimal ranks2hosts with a trailing second line absent.
    assert_eq!(p("put_ranks2hosts 0 0"), Reply::Ranks2Hosts { hosts: vec![] });
}

#[test]
fn reply_parse_errors() {
    let bad = |b: &[u8]| Reply::parse(b).unwrap_err();
    assert_eq!(bad(b"hello"), ParseError::NoCommand);
    assert_eq!(bad(b"\xff"), ParseError::NotUtf8);
    assert!(matches!(bad(b"cmd=barrier_out\ncmd=barrier_out\n"), ParseError::BadToken(_)));
    assert!(matches!(bad(b"cmd=initack\ncmd=set size=1\n"), ParseError::MissingField { .. }));
    assert!(matches!(bad(b"put_ranks2hosts 5 1\n1 a 0, \n"), ParseError::BadNumber { .. }));
    assert!(matches!(bad(b"put_ranks2hosts 9 2\n1 a 0, \n"), ParseError::BadToken(_)));
    assert!(matches!(bad(b"cmd=spawn_result rc=0 errcodes=1,x"), ParseError::BadNumber { .. }));
    assert!(matches!(bad(b"cmd=whatever msg=x"), ParseError::MissingField { .. }));
}
