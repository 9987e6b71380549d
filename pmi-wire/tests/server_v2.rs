//! PMI-2 through the connection state machine: every command, both length alignments, `;;`,
//! `thrid`, mixed PMI-1/PMI-2 on one socket, limits.

use pmi_wire::server::{Action, ConnConfig, Connection, Eof, Phase};
use pmi_wire::v1::{ParseError, SpawnCmd};
use pmi_wire::v2::{self, Align, MAX_FRAME_LEN};

fn cfg() -> ConnConfig {
    ConnConfig {
        rank: 1,
        size: 4,
        appnum: 2,
        kvsname: "kvs_7_0".into(),
        universe_size: 9,
        spawner: None,
    }
}

/// Left-aligned frame (Slurm's client).
fn l(body: &str) -> String {
    format!("{:<6}{body}", body.len())
}

/// Right-aligned frame (MPICH ≥ 4.1).
fn r(body: &str) -> String {
    format!("{:>6}{body}", body.len())
}

fn feed(c: &mut Connection, data: &str) -> Vec<Action> {
    let mut out = Vec::new();
    c.receive(data.as_bytes(), &mut out);
    out
}

fn send(s: &str) -> Action {
    Action::Send(s.as_bytes().to_vec())
}

/// A connection after the PMI-1 handshake line of a PMI-2 client.
fn inited() -> Connection {
    let mut c = Connection::new(cfg());
    assert_eq!(
        feed(&mut c, "cmd=init pmi_version=2 pmi_subversion=0\n"),
        vec![send("cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n")]
    );
    assert_eq!(c.phase(), Phase::Initialized);
    c
}

fn s(b: Vec<u8>) -> String {
    String::from_utf8(b).expect("utf8")
}

#[test]
fn slurm_transcript_left_aligned() {
    let mut c = inited();
    assert_eq!(
        feed(&mut c, &l("cmd=fullinit;pmirank=1;threaded=FALSE;")),
        vec![send(&l("cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=1;size=4;\
             appnum=2;debugged=FALSE;pmiverbose=FALSE;"))]
    );
    assert_eq!(
        feed(&mut c, &l("cmd=job-getid;")),
        vec![send(&l("cmd=job-getid-response;rc=0;jobid=kvs_7_0;"))]
    );
    assert_eq!(
        feed(&mut c, &l("cmd=info-getjobattr;key=PMI_process_mapping;")),
        vec![Action::GetJobAttr { key: "PMI_process_mapping".into() }]
    );
    assert_eq!(
        s(c.answer_job_attr("PMI_process_mapping", Some("(vector,(0,1,4))"))),
        l("cmd=info-getjobattr-response;rc=0;found=TRUE;value=(vector,(0,1,4));")
    );
    assert_eq!(
        feed(&mut c, &l("cmd=kvs-put;key=bc-0;value=hello world;;semi=x;")),
        vec![
            send(&l("cmd=kvs-put-response;rc=0;")),
            Action::Put { key: "bc-0".into(), value: "hello world;semi=x".into() }
        ]
    );
    assert_eq!(feed(&mut c, &l("cmd=kvs-fence;")), vec![Action::BarrierIn]);
    assert_eq!(s(c.barrier_out()), l("cmd=kvs-fence-response;rc=0;"));
    assert_eq!(
        feed(&mut c, &l("cmd=kvs-get;jobid=kvs_7_0;srcid=-1;key=bc-1;")),
        vec![Action::Get { key: "bc-1".into() }]
    );
    // A value with `;` is never sent back with a `;` in it.
    assert_eq!(
        s(c.answer_get("bc-1", Some("a;b c".as_bytes()))),
        l("cmd=kvs-get-response;rc=0;found=TRUE;value=a_b c;")
    );
    assert_eq!(
        feed(&mut c, &l("cmd=info-getnodeattr;key=nattr;wait=FALSE;")),
        vec![Action::GetNodeAttr { key: "nattr".into(), wait: false }]
    );
    assert_eq!(
        s(c.answer_node_attr("nattr", None)),
        l("cmd=info-getnodeattr-response;rc=0;found=FALSE;")
    );
    assert_eq!(
        feed(&mut c, &l("cmd=finalize;")),
        vec![send(&l("cmd=finalize-response;rc=0;")), Action::Finalized]
    );
    assert_eq!(c.phase(), Phase::Finalized);
    assert_eq!(c.eof(), Eof::Clean);
}

#[test]
fn right_aligned_gets_right_aligned() {
    let mut c = inited();
    assert_eq!(
        feed(&mut c, &r("cmd=fullinit;pmirank=-1;")),
        vec![send(&r("cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=1;size=4;\
             appnum=2;debugged=FALSE;pmiverbose=FALSE;"))]
    );
    assert_eq!(
        feed(&mut c, &r("cmd=job-getid")),
        vec![send(&r("cmd=job-getid-response;rc=0;jobid=kvs_7_0;"))]
    );
    // Switching alignment mid-connection is followed.
    assert_eq!(
        feed(&mut c, &l("cmd=job-getid;")),
        vec![send(&l("cmd=job-getid-response;rc=0;jobid=kvs_7_0;"))]
    );
}

#[test]
fn fullinit_without_pmi1_init_initializes() {
    let mut c = Connection::new(cfg());
    let out = feed(&mut c, &l("cmd=fullinit;pmirank=1;"));
    assert_eq!(out.len(), 1);
    assert_eq!(c.phase(), Phase::Initialized);
    assert_eq!(c.eof(), Eof::BeforeFinalize);
}

#[test]
fn kvs_put_refusals_and_reserved_keys_allowed() {
    let mut c = inited();
    assert_eq!(
        feed(&mut c, &l("cmd=kvs-put;key=;value=v;")),
        vec![send(&l("cmd=kvs-put-response;rc=-1;errmsg=empty_key;"))]
    );
    let long_key = "k".repeat(65);
    assert_eq!(
        feed(&mut c, &l(&format!("cmd=kvs-put;key={long_key};value=v;"))),
        vec![send(&l("cmd=kvs-put-response;rc=-1;errmsg=key_too_long;"))]
    );
    let long_val = "v".repeat(1025);
    assert_eq!(
        feed(&mut c, &l(&format!("cmd=kvs-put;key=k;value={long_val};"))),
        vec![send(&l("cmd=kvs-put-response;rc=-1;errmsg=value_too_long;"))]
    );
    let max_val = "v".repeat(1024);
    assert_eq!(
        feed(&mut c, &l(&format!("cmd=kvs-put;key=PMI_x;value={max_val};"))),
        vec![
            send(&l("cmd=kvs-put-response;rc=0;")),
            Action::Put { key: "PMI_x".into(), value: max_val.clone().into_bytes() }
        ]
    );
    // Empty values are fine in PMI-2.
    assert_eq!(
        feed(&mut c, &l("cmd=kvs-put;key=e;value=;")),
        vec![
            send(&l("cmd=kvs-put-response;rc=0;")),
            Action::Put { key: "e".into(), value: "".into() }
        ]
    );
}

#[test]
fn kvs_get_found_missing_and_bad_keys() {
    let mut c = inited();
    assert_eq!(feed(&mut c, &l("cmd=kvs-get;key=a;")), vec![Action::Get { key: "a".into() }]);
    assert_eq!(s(c.answer_get("a", None)), l("cmd=kvs-get-response;rc=0;found=FALSE;"));
    assert_eq!(feed(&mut c, &l("cmd=kvs-get;key=a;")), vec![Action::Get { key: "a".into() }]);
    assert_eq!(
        s(c.answer_get("a", Some("".as_bytes()))),
        l("cmd=kvs-get-response;rc=0;found=FALSE;")
    );
    assert_eq!(
        feed(&mut c, &l("cmd=kvs-get;key=;")),
        vec![send(&l("cmd=kvs-get-response;rc=0;found=FALSE;"))]
    );
    assert_eq!(
        feed(&mut c, &l(&format!("cmd=kvs-get;key={};", "x".repeat(65)))),
        vec![send(&l("cmd=kvs-get-response;rc=0;found=FALSE;"))]
    );
    // MPICH's PMI-2 barrier: fence, then get of a key nobody put.
    assert_eq!(feed(&mut c, &l("cmd=kvs-fence;")), vec![Action::BarrierIn]);
    assert_eq!(s(c.barrier_out()), l("cmd=kvs-fence-response;rc=0;"));
    assert_eq!(
        feed(&mut c, &l("cmd=kvs-get;jobid=kvs_7_0;srcid=-1;key=-NONEXIST-KEY;")),
        vec![Action::Get { key: "-NONEXIST-KEY".into() }]
    );
    assert_eq!(s(c.answer_get("-NONEXIST-KEY", None)), l("cmd=kvs-get-response;rc=0;found=FALSE;"));
}

#[test]
fn job_attrs() {
    let mut c = inited();
    assert_eq!(
        feed(&mut c, &l("cmd=info-getjobattr;key=universeSize;")),
        vec![send(&l("cmd=info-getjobattr-response;rc=0;found=TRUE;value=9;"))]
    );
    assert_eq!(
        feed(&mut c, &l("cmd=info-getjobattr;key=PMI_hwloc_xmlfile;")),
        vec![Action::GetJobAttr { key: "PMI_hwloc_xmlfile".into() }]
    );
    assert_eq!(
        s(c.answer_job_attr("PMI_hwloc_xmlfile", None)),
        l("cmd=info-getjobattr-response;rc=0;found=FALSE;")
    );
    assert_eq!(
        feed(&mut c, &l("cmd=info-getjobattr;key=x;")),
        vec![Action::GetJobAttr { key: "x".into() }]
    );
    assert_eq!(
        s(c.answer_job_attr("x", Some(""))),
        l("cmd=info-getjobattr-response;rc=0;found=FALSE;")
    );
}

#[test]
fn node_attrs() {
    let mut c = inited();
    assert_eq!(
        feed(&mut c, &l("cmd=info-putnodeattr;key=na;value=v 1;")),
        vec![
            send(&l("cmd=info-putnodeattr-response;rc=0;")),
            Action::PutNodeAttr { key: "na".into(), value: "v 1".into() }
        ]
    );
    assert_eq!(
        feed(&mut c, &l("cmd=info-putnodeattr;key=;value=v;")),
        vec![send(&l("cmd=info-putnodeattr-response;rc=-1;errmsg=empty_key;"))]
    );
    assert_eq!(
        feed(&mut c, &l("cmd=info-getnodeattr;key=na;wait=TRUE;")),
        vec![Action::GetNodeAttr { key: "na".into(), wait: true }]
    );
    assert_eq!(
        s(c.answer_node_attr("na", Some("v 1"))),
        l("cmd=info-getnodeattr-response;rc=0;found=TRUE;value=v 1;")
    );
    // `wait` missing means no wait.
    assert_eq!(
        feed(&mut c, &l("cmd=info-getnodeattr;key=nb;")),
        vec![Action::GetNodeAttr { key: "nb".into(), wait: false }]
    );
}

#[test]
fn name_service() {
    let mut c = inited();
    assert_eq!(
        feed(&mut c, &l("cmd=name-publish;name=svc;port=tag#0$;")),
        vec![Action::Publish { service: "svc".into(), port: "tag#0$".into() }]
    );
    assert_eq!(s(c.answer_publish(true)), l("cmd=name-publish-response;rc=0;"));
    assert_eq!(
        feed(&mut c, &l("cmd=name-publish;name=svc;port=p;")),
        vec![Action::Publish { service: "svc".into(), port: "p".into() }]
    );
    assert_eq!(
        s(c.answer_publish(false)),
        l("cmd=name-publish-response;rc=1;errmsg=key_already_present;")
    );
    assert_eq!(
        feed(&mut c, &l("cmd=name-lookup;name=svc;")),
        vec![Action::Lookup { service: "svc".into() }]
    );
    assert_eq!(
        s(c.answer_lookup(Some("tag#0$"))),
        l("cmd=name-lookup-response;rc=0;port=tag#0$;value=tag#0$;found=TRUE;")
    );
    assert_eq!(feed(&mut c, &l("cmd=name-lookup;name=no;")).len(), 1);
    assert_eq!(
        s(c.answer_lookup(None)),
        l("cmd=name-lookup-response;rc=1;errmsg=service_not_found;found=FALSE;")
    );
    assert_eq!(
        feed(&mut c, &l("cmd=name-unpublish;name=svc;")),
        vec![Action::Unpublish { service: "svc".into() }]
    );
    assert_eq!(s(c.answer_unpublish(true)), l("cmd=name-unpublish-response;rc=0;"));
    feed(&mut c, &l("cmd=name-unpublish;name=svc;"));
    assert_eq!(
        s(c.answer_unpublish(false)),
        l("cmd=name-unpublish-response;rc=1;errmsg=service_not_found;")
    );
}

#[test]
fn abort_both_dialects() {
    let mut c = inited();
    assert_eq!(
        feed(&mut c, &l("cmd=abort;isworld=TRUE;msg=bad thing;")),
        vec![Action::Abort { exitcode: -1, message: Some("bad thing".into()) }]
    );
    assert_eq!(c.phase(), Phase::Aborted);
    assert_eq!(feed(&mut c, &l("cmd=job-getid;")), vec![]);
    assert_eq!(c.eof(), Eof::Clean);
    let mut c = inited();
    assert_eq!(
        feed(&mut c, &r("cmd=abort;exitcode=7;message=abort;")),
        vec![Action::Abort { exitcode: 7, message: Some("abort".into()) }]
    );
    // Malformed abort still aborts.
    let mut c = inited();
    let out = feed(&mut c, &l("cmd=abort;junk"));
    assert!(matches!(out.first(), Some(Action::ProtocolError { fatal: false, .. })), "{out:?}");
    assert_eq!(out.last(), Some(&Action::Abort { exitcode: -1, message: None }));
}

#[test]
fn spawn() {
    let mut c = inited();
    let body = "cmd=spawn;ncmds=2;preputcount=1;ppkey0=PARENT_ROOT_PORT_NAME;ppval0=tag#1;\
                subcmd=./a;maxprocs=2;argc=2;argv0=x y;argv1=z;infokeycount=1;infokey0=wdir;\
                infoval0=/tmp;subcmd=./b;maxprocs=1;argc=0;infokeycount=0;";
    assert_eq!(
        feed(&mut c, &l(body)),
        vec![Action::Spawn {
            cmds: vec![
                SpawnCmd {
                    nprocs: 2,
                    execname: "./a".into(),
                    args: vec!["x y".into(), "z".into()],
                    preput: vec![("PARENT_ROOT_PORT_NAME".into(), "tag#1".into())],
                    info: vec![("wdir".into(), "/tmp".into())],
                },
                SpawnCmd { nprocs: 1, execname: "./b".into(), ..Default::default() },
            ]
        }]
    );
    assert_eq!(
        s(c.answer_spawn(-1, None, None)),
        l("cmd=spawn-response;rc=-1;errmsg=spawn_failed;")
    );
    feed(&mut c, &l("cmd=spawn;ncmds=1;preputcount=0;subcmd=a;maxprocs=1;argc=0;infokeycount=0;"));
    assert_eq!(s(c.answer_spawn(0, None, None)), l("cmd=spawn-response;rc=0;"));
    feed(&mut c, &l("cmd=spawn;ncmds=1;preputcount=0;subcmd=a;maxprocs=1;argc=0;infokeycount=0;"));
    assert_eq!(
        s(c.answer_spawn(0, None, Some("kvs_7_1"))),
        l("cmd=spawn-response;rc=0;jobid=kvs_7_1;")
    );
    // Out of order is refused (non-fatal).
    let out = feed(&mut c, &l("cmd=spawn;ncmds=1;subcmd=a;"));
    assert_eq!(out[0], send(&l("cmd=spawn-response;rc=-1;errmsg=malformed_request;")));
    assert!(matches!(
        out[1],
        Action::ProtocolError { error: ParseError::Spawn(_), fatal: false, .. }
    ));
}

#[test]
fn job_connect_disconnect_ring_unknown() {
    let mut c = inited();
    assert_eq!(
        feed(&mut c, &l("cmd=job-connect;jobid=other;")),
        vec![send(&l("cmd=job-connect-response;rc=0;kvscopy=0;"))]
    );
    assert_eq!(
        feed(&mut c, &l("cmd=job-disconnect;jobid=other;")),
        vec![send(&l("cmd=job-disconnect-response;rc=0;kvscopy=0;"))]
    );
    assert_eq!(
        feed(&mut c, &l("cmd=ring;ring-count=1;ring-left=a;ring-right=b;")),
        vec![send(&l("cmd=ring-response;rc=-1;errmsg=ring_unsupported;"))]
    );
    let out = feed(&mut c, &l("cmd=frobnicate;x=1;"));
    assert_eq!(out[0], send(&l("cmd=frobnicate-response;rc=-1;errmsg=unknown_command;")));
    assert!(matches!(
        &out[1],
        Action::ProtocolError { error: ParseError::UnknownCommand(n), fatal: false, .. } if n == "frobnicate"
    ));
}

#[test]
fn thrid_is_echoed_now_and_later() {
    let mut c = inited();
    assert_eq!(
        feed(&mut c, &l("cmd=job-getid;thrid=0x7f;")),
        vec![send(&l("cmd=job-getid-response;thrid=0x7f;rc=0;jobid=kvs_7_0;"))]
    );
    assert_eq!(
        feed(&mut c, &l("cmd=kvs-get;thrid=T1;key=a;")),
        vec![Action::Get { key: "a".into() }]
    );
    assert_eq!(feed(&mut c, &l("cmd=kvs-fence;thrid=T2;")), vec![Action::BarrierIn]);
    assert_eq!(s(c.barrier_out()), l("cmd=kvs-fence-response;thrid=T2;rc=0;"));
    assert_eq!(
        s(c.answer_get("a", Some("v".as_bytes()))),
        l("cmd=kvs-get-response;thrid=T1;rc=0;found=TRUE;value=v;")
    );
}

#[test]
fn answers_follow_the_protocol_of_the_request() {
    // One socket, PMI-1 and PMI-2 requests outstanding at once: each answer goes out in the
    // protocol of the request it answers (matched by key, then by age).
    let mut c = inited();
    let mut data = String::from("cmd=get kvsname=kvs_7_0 key=one\n");
    data.push_str(&l("cmd=kvs-get;key=two;"));
    data.push_str("cmd=barrier_in\n");
    assert_eq!(
        feed(&mut c, &data),
        vec![
            Action::Get { key: "one".into() },
            Action::Get { key: "two".into() },
            Action::BarrierIn
        ]
    );
    assert_eq!(
        s(c.answer_get("two", Some("2".as_bytes()))),
        l("cmd=kvs-get-response;rc=0;found=TRUE;value=2;")
    );
    assert_eq!(
        s(c.answer_get("one", Some("1".as_bytes()))),
        "cmd=get_result rc=0 msg=success value=1\n"
    );
    assert_eq!(s(c.barrier_out()), "cmd=barrier_out rc=0\n");
    // Nothing outstanding: the protocol of the last message (PMI-1 here).
    assert_eq!(s(c.barrier_out()), "cmd=barrier_out rc=0\n");
    feed(&mut c, &l("cmd=job-getid;"));
    assert_eq!(s(c.barrier_out()), l("cmd=kvs-fence-response;rc=0;"));
}

#[test]
fn byte_by_byte_and_coalesced() {
    let mut data = String::from("cmd=init pmi_version=2 pmi_subversion=0\n");
    data.push_str(&l("cmd=fullinit;pmirank=1;threaded=FALSE;"));
    data.push_str(&r("cmd=kvs-put;key=k;value=a;;b;"));
    data.push_str("cmd=get_appnum\n");
    data.push_str(&l("cmd=kvs-fence;"));
    let mut whole = Connection::new(cfg());
    let a = feed(&mut whole, &data);
    let mut bytewise = Connection::new(cfg());
    let mut b = Vec::new();
    for byte in data.as_bytes() {
        bytewise.receive(std::slice::from_ref(byte), &mut b);
    }
    assert_eq!(a, b);
    assert_eq!(a.len(), 6, "{a:?}");
    assert_eq!(a[3], Action::Put { key: "k".into(), value: "a;b".into() });
    assert_eq!(a[4], send("cmd=appnum appnum=2 rc=0\n"));
    assert_eq!(a[5], Action::BarrierIn);
    assert_eq!(whole.buffered(), 0);
}

#[test]
fn over_long_frame_is_fatal() {
    for hdr in ["65537 ", " 65537", "999999"] {
        let mut c = inited();
        let out = feed(&mut c, hdr);
        assert_eq!(
            out,
            vec![Action::ProtocolError {
                error: ParseError::TooLong(MAX_FRAME_LEN),
                excerpt: hdr.into(),
                fatal: true
            }]
        );
        assert!(c.failed());
        assert_eq!(feed(&mut c, &l("cmd=job-getid;")), vec![]);
    }
    // Exactly the limit is accepted (and is then just a long unknown body).
    let mut c = inited();
    let body = format!("cmd=x;k={};", "v".repeat(MAX_FRAME_LEN - 9));
    assert_eq!(body.len(), MAX_FRAME_LEN);
    let out = feed(&mut c, &l(&body));
    assert!(!c.failed());
    assert_eq!(out[0], send(&l("cmd=x-response;rc=-1;errmsg=unknown_command;")));
}

#[test]
fn bad_header_is_fatal_bad_body_is_not() {
    let mut c = inited();
    let out = feed(&mut c, " 1x   cmd=");
    assert!(matches!(
        out[..],
        [Action::ProtocolError { error: ParseError::BadToken(_), fatal: true, .. }]
    ));
    assert!(c.failed());
    let mut c = inited();
    let out = feed(&mut c, "      ");
    assert!(matches!(out[..], [Action::ProtocolError { fatal: true, .. }]));
    // A complete frame whose body is malformed: error reply, connection goes on.
    let mut c = inited();
    let out = feed(&mut c, &l("cmd=kvs-put;key=a;"));
    assert_eq!(out[0], send(&l("cmd=kvs-put-response;rc=-1;errmsg=malformed_request;")));
    assert!(matches!(out[1], Action::ProtocolError { fatal: false, .. }));
    let out = feed(&mut c, &l("nonsense"));
    assert_eq!(out[0], send(&l("cmd=error-response;rc=-1;errmsg=malformed_request;")));
    let out = feed(&mut c, "0     ");
    assert_eq!(out[0], send(&l("cmd=error-response;rc=-1;errmsg=malformed_request;")));
    let bad = b"8     cmd=\xff;xx".to_vec();
    let mut out = Vec::new();
    c.receive(&bad, &mut out);
    assert!(matches!(out[1], Action::ProtocolError { error: ParseError::NotUtf8, .. }));
    assert!(!c.failed());
    assert_eq!(feed(&mut c, &l("cmd=job-getid;")).len(), 1);
}

#[test]
fn partial_frame_is_dropped_at_eof() {
    let mut c = inited();
    assert_eq!(feed(&mut c, "38    cmd=fullinit;"), vec![]);
    assert!(c.buffered() > 0);
    assert_eq!(c.eof(), Eof::BeforeFinalize);
    assert_eq!(c.buffered(), 0);
}

#[test]
fn codec_header_parsing() {
    assert_eq!(v2::parse_header(b"38    "), Ok((38, Align::Left)));
    assert_eq!(v2::parse_header(b"    38"), Ok((38, Align::Right)));
    assert_eq!(v2::parse_header(b"  38  ").map(|h| h.0), Ok(38));
    assert_eq!(v2::parse_header(b"000038").map(|h| h.0), Ok(38));
    assert!(v2::parse_header(b"3 8   ").is_err());
    assert!(v2::parse_header(b"      ").is_err());
    assert!(v2::parse_header(b"-1    ").is_err());
    assert!(v2::parse_header(b"38   ").is_err());
    assert_eq!(v2::split_frame(b"5     cmd=x"), Ok(Some((&b"cmd=x"[..], 11))));
    assert_eq!(v2::split_frame(b"5     cmd="), Ok(None));
    assert_eq!(v2::split_frame(b"5  "), Ok(None));
}

#[test]
fn codec_semicolons() {
    let b = v2::parse_body(b"cmd=kvs-put;key=k;value=;;a;;;;b;;;").expect("body");
    assert_eq!(b.pairs, vec![("key".into(), "k".into()), ("value".into(), ";a;;b;".into())]);
    // Missing final `;` is tolerated.
    let b = v2::parse_body(b"cmd=kvs-fence").expect("body");
    assert_eq!((b.cmd.as_str(), b.pairs.len()), ("kvs-fence", 0));
    assert!(v2::parse_body(b"key=v;").is_err());
    assert!(v2::parse_body(b"cmd=;").is_err());
    assert!(v2::parse_body(b"cmd=x;novalue;").is_err());
    assert!(v2::parse_body(b"cmd=x;=v;").is_err());
    // Client-direction encoding doubles `;`, server-direction replaces it.
    let q = v2::Request::KvsPut { key: "k".into(), value: "a;b".into() };
    assert_eq!(q.encode_body(None), b"cmd=kvs-put;key=k;value=a;;b;");
    let rep = v2::Reply::KvsGet { value: Some("a;b".into()) };
    assert_eq!(rep.encode_body(None), b"cmd=kvs-get-response;rc=0;found=TRUE;value=a_b;");
}

#[test]
fn codec_parses_hydra_and_slurm_replies() {
    // Hydra: rc last, pmiverbose as a number, rc=1 miss.
    let (rep, _) = v2::Reply::parse(
        b"cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=3;size=4;appnum=0;\
          debugged=FALSE;pmiverbose=0;rc=0;",
    )
    .expect("fullinit");
    assert_eq!(
        rep,
        v2::Reply::FullInit {
            rank: 3,
            size: 4,
            appnum: 0,
            spawner_jobid: None,
            debugged: false,
            verbose: false
        }
    );
    let (rep, _) = v2::Reply::parse(b"cmd=kvs-get-response;rc=1;").expect("miss");
    assert_eq!(rep, v2::Reply::KvsGet { value: None });
    let (rep, _) =
        v2::Reply::parse(b"cmd=name-lookup-response;rc=0;value=p;found=TRUE;").expect("lookup");
    assert_eq!(rep, v2::Reply::NameLookup { port: Some("p".into()) });
    let (rep, _) = v2::Reply::parse(b"cmd=kvs-put-response;rc=2;errmsg=nope;").expect("err");
    assert_eq!(
        rep,
        v2::Reply::Error { cmd: "kvs-put-response".into(), rc: 2, errmsg: "nope".into() }
    );
}
