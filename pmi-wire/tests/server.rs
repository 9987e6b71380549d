//! Connection state machine: actions, replies, framing, limits.

use pmi_wire::server::{Action, ConnConfig, Connection, Eof, Phase};
use pmi_wire::v1::{ParseError, SpawnCmd, MAX_REQUEST_LEN};

fn cfg() -> ConnConfig {
    ConnConfig {
        rank: 1,
        size: 4,
        appnum: 0,
        kvsname: "kvs_7_0".into(),
        universe_size: 4,
        spawner: None,
    }
}

fn feed(c: &mut Connection, data: &str) -> Vec<Action> {
    let mut out = Vec::new();
    c.receive(data.as_bytes(), &mut out);
    out
}

fn send(s: &str) -> Action {
    Action::Send(s.as_bytes().to_vec())
}

fn one(data: &str) -> Vec<Action> {
    feed(&mut Connection::new(cfg()), data)
}

#[test]
fn init_sequence_and_phases() {
    let mut c = Connection::new(cfg());
    assert_eq!(c.phase(), Phase::Fresh);
    assert_eq!(c.config(), &cfg());
    assert_eq!(
        feed(&mut c, "cmd=init pmi_version=1 pmi_subversion=1\n"),
        vec![send("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n")]
    );
    assert_eq!(c.phase(), Phase::Initialized);
    assert_eq!(
        feed(&mut c, "cmd=get_maxes\ncmd=get_appnum\ncmd=get_my_kvsname\ncmd=get_universe_size\n"),
        vec![
            send("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024 rc=0\n"),
            send("cmd=appnum appnum=0 rc=0\n"),
            send("cmd=my_kvsname kvsname=kvs_7_0 rc=0\n"),
            send("cmd=universe_size size=4 rc=0\n"),
        ]
    );
    assert_eq!(c.eof(), Eof::BeforeFinalize);
    assert_eq!(feed(&mut c, "cmd=barrier_in\n"), vec![Action::BarrierIn]);
    assert_eq!(c.barrier_out(), b"cmd=barrier_out rc=0\n");
    assert_eq!(
        feed(&mut c, "cmd=finalize\n"),
        vec![send("cmd=finalize_ack rc=0\n"), Action::Finalized]
    );
    assert_eq!(c.phase(), Phase::Finalized);
    assert_eq!(c.eof(), Eof::Clean);
}

#[test]
fn fresh_eof_is_clean() {
    assert_eq!(Connection::new(cfg()).eof(), Eof::Clean);
}

#[test]
fn init_other_versions_refused() {
    let mut c = Connection::new(cfg());
    assert_eq!(
        feed(&mut c, "cmd=init pmi_version=3 pmi_subversion=0\n"),
        vec![send("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1\n")]
    );
    assert_eq!(c.phase(), Phase::Fresh);
    // Any 1.x subversion gets 1.1.
    assert_eq!(
        feed(&mut c, "cmd=init pmi_version=1 pmi_subversion=2\n"),
        vec![send("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n")]
    );
}

#[test]
fn initack() {
    assert_eq!(
        one("cmd=initack pmiid=1\n"),
        vec![send(
            "cmd=initack rc=0 rank=1 size=4 debug=0\ncmd=set size=4\ncmd=set rank=1\n\
             cmd=set debug=0\n"
        )]
    );
}

#[test]
fn put_and_its_refusals() {
    assert_eq!(
        one("cmd=put kvsname=kvs_7_0 key=k value=a b -\n"),
        vec![
            send("cmd=put_result rc=0 msg=success\n"),
            Action::Put { key: "k".into(), value: "a b -".into() }
        ]
    );
    let refused = |line: String, reply: &str| assert_eq!(one(&line), vec![send(reply)], "{line}");
    refused(
        "cmd=put kvsname=other key=k value=v\n".into(),
        "cmd=put_result rc=-1 msg=kvsname_mismatch\n",
    );
    refused(
        "cmd=put kvsname=kvs_7_0 key= value=v\n".into(),
        "cmd=put_result rc=-1 msg=empty_key\n",
    );
    refused(
        format!("cmd=put kvsname=kvs_7_0 key={} value=v\n", "k".repeat(65)),
        "cmd=put_result rc=-1 msg=key_too_long\n",
    );
    refused(
        format!("cmd=put kvsname=kvs_7_0 key=k value={}\n", "v".repeat(1025)),
        "cmd=put_result rc=-1 msg=value_too_long\n",
    );
    refused(
        "cmd=put kvsname=kvs_7_0 key=PMI_process_mapping value=v\n".into(),
        "cmd=put_result rc=1 msg=reserved_key\n",
    );
    // Limits are inclusive.
    let ok = one(&format!(
        "cmd=put kvsname=kvs_7_0 key={} value={}\n",
        "k".repeat(64),
        "v".repeat(1024)
    ));
    assert_eq!(ok.len(), 2);
}

#[test]
fn get_and_answers() {
    let mut c = Connection::new(cfg());
    assert_eq!(
        feed(&mut c, "cmd=get kvsname=kvs_7_0 key=PMI_process_mapping\n"),
        vec![Action::Get { key: "PMI_process_mapping".into() }]
    );
    assert_eq!(
        c.answer_get("PMI_process_mapping", Some("(vector,(0,1,4))".as_bytes())),
        b"cmd=get_result rc=0 msg=success value=(vector,(0,1,4))\n"
    );
    assert_eq!(
        c.answer_get("x", None),
        b"cmd=get_result rc=-1 msg=key_x_not_found value=unknown\n"
    );
    // Empty value = not found (spec §12.5).
    assert_eq!(
        c.answer_get("x", Some("".as_bytes())),
        b"cmd=get_result rc=-1 msg=key_x_not_found value=unknown\n"
    );
    assert_eq!(
        feed(&mut c, "cmd=get kvsname=nope key=a\n"),
        vec![send("cmd=get_result rc=-1 msg=key_a_not_found value=unknown\n")]
    );
}

#[test]
fn publish_unpublish_lookup() {
    let mut c = Connection::new(cfg());
    assert_eq!(
        feed(
            &mut c,
            "cmd=publish_name service=s port=p\ncmd=unpublish_name service=s\n\
             cmd=lookup_name service=s\n"
        ),
        vec![
            Action::Publish { service: "s".into(), port: "p".into() },
            Action::Unpublish { service: "s".into() },
            Action::Lookup { service: "s".into() },
        ]
    );
    assert_eq!(c.answer_publish(true), b"cmd=publish_result info=ok rc=0 msg=success\n");
    assert_eq!(
        c.answer_publish(false),
        b"cmd=publish_result info=ok rc=1 msg=key_already_present\n"
    );
    assert_eq!(c.answer_unpublish(true), b"cmd=unpublish_result info=ok rc=0 msg=success\n");
    assert_eq!(
        c.answer_unpublish(false),
        b"cmd=unpublish_result info=ok rc=1 msg=service_not_found\n"
    );
    assert_eq!(c.answer_lookup(Some("p")), b"cmd=lookup_result port=p info=ok rc=0 msg=success\n");
    assert_eq!(c.answer_lookup(None), b"cmd=lookup_result rc=1 msg=service_not_found\n");
    assert_eq!(c.answer_spawn(0, None, None), b"cmd=spawn_result rc=0\n");
    assert_eq!(c.answer_spawn(0, Some(vec![0, 0]), None), b"cmd=spawn_result rc=0 errcodes=0,0\n");
}

#[test]
fn abort_stops_everything() {
    let mut c = Connection::new(cfg());
    feed(&mut c, "cmd=init pmi_version=1 pmi_subversion=1\n");
    assert_eq!(
        feed(&mut c, "cmd=abort exitcode=7 message=bye now\ncmd=get_maxes\n"),
        vec![Action::Abort { exitcode: 7, message: Some("bye now".into()) }]
    );
    assert_eq!(c.phase(), Phase::Aborted);
    assert_eq!(feed(&mut c, "cmd=get_maxes\n"), vec![]);
    assert_eq!(c.eof(), Eof::Clean);
}

#[test]
fn malformed_abort_still_aborts() {
    let a = one("cmd=abort =x\n");
    assert!(matches!(a[0], Action::ProtocolError { fatal: false, .. }));
    assert_eq!(a[1], Action::Abort { exitcode: -1, message: None });
}

#[test]
fn getbyidx_and_ranks2hosts() {
    assert_eq!(
        one("cmd=getbyidx kvsname=kvs_7_0 idx=0\n"),
        vec![send("cmd=getbyidx_results rc=1 reason=no_more_keyvals\n")]
    );
    assert_eq!(one("cmd=get_ranks2hosts\n"), vec![send("cmd=put_ranks2hosts 0 0\n")]);
}

#[test]
fn unknown_command_keeps_connection() {
    let mut c = Connection::new(cfg());
    let a = feed(&mut c, "cmd=frob x=1\ncmd=get_appnum\n");
    assert_eq!(
        a,
        vec![
            send("cmd=frob_result rc=-1 msg=unknown_command\n"),
            Action::ProtocolError {
                error: ParseError::UnknownCommand("frob".into()),
                excerpt: "cmd=frob x=1".into(),
                fatal: false
            },
            send("cmd=appnum appnum=0 rc=0\n"),
        ]
    );
}

#[test]
fn malformed_lines_get_error_replies() {
    let a = one("hello\n");
    assert_eq!(a[0], send("cmd=error rc=-1 msg=malformed_request\n"));
    assert!(matches!(
        &a[1],
        Action::ProtocolError { error: ParseError::NoCommand, fatal: false, .. }
    ));
    let a = one("cmd=put kvsname=kvs_7_0 key=k\n");
    assert_eq!(a[0], send("cmd=put_result rc=-1 msg=malformed_request\n"));
    let mut c = Connection::new(cfg());
    let mut out = Vec::new();
    // A value is bytes (Hydra keeps them as they are); the rest of the line is text.
    c.receive(b"cmd=put kvsname=kvs_7_0 key=k value=caf\xe9 \xff\n", &mut out);
    assert_eq!(out[0], send("cmd=put_result rc=0 msg=success\n"));
    assert_eq!(out[1], Action::Put { key: "k".into(), value: b"caf\xe9 \xff".to_vec() });
    let mut out = Vec::new();
    c.receive(b"cmd=put kvsname=kvs_7_0 key=\xff value=v\n", &mut out);
    assert_eq!(out[0], send("cmd=put_result rc=-1 msg=malformed_request\n"));
    assert!(
        matches!(&out[1], Action::ProtocolError { error: ParseError::NotUtf8, excerpt, fatal: false } if excerpt.ends_with("key=\\xff value=v"))
    );
    let mut out = Vec::new();
    c.receive(b"cmd=get kvsname=kvs_7_0 key=\xff\n", &mut out);
    assert!(matches!(&out[1], Action::ProtocolError { error: ParseError::NotUtf8, .. }), "{out:?}");
    let mut out = Vec::new();
    c.receive(b"cmd=get kvsname=kvs_7_0 key=k\n", &mut out);
    assert_eq!(out, vec![Action::Get { key: "k".into() }]);
    assert_eq!(
        c.answer_get("k", Some(&b"caf\xe9 \xff"[..])),
        b"cmd=get_result rc=0 msg=success value=caf\xe9 \xff\n"
    );
    // Empty lines are ignored.
    assert_eq!(one("\n\n\ncmd=barrier_in\n"), vec![Action::BarrierIn]);
}

#[test]
fn excerpt_is_escaped_and_short() {
    let mut line = b"\x01\x02".to_vec();
    line.extend(std::iter::repeat_n(b'\xfe', 200));
    line.push(b'\n');
    let mut out = Vec::new();
    Connection::new(cfg()).receive(&line, &mut out);
    match &out[1] {
        Action::ProtocolError { excerpt, .. } => {
            assert!(excerpt.len() <= 80, "{excerpt}");
            assert!(excerpt.starts_with("\\x01\\x02\\xfe"));
            assert!(excerpt.chars().all(|c| c.is_ascii_graphic()));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn partial_lines_and_coalesced_writes() {
    let mut c = Connection::new(cfg());
    let mut out = Vec::new();
    for b in "cmd=get_appnum\ncmd=barr".bytes() {
        c.receive(&[b], &mut out);
    }
    assert_eq!(out, vec![send("cmd=appnum appnum=0 rc=0\n")]);
    assert_eq!(c.buffered(), 8);
    c.receive(b"ier_in\ncmd=barrier_in\n", &mut out);
    assert_eq!(out.len(), 3);
    assert_eq!(c.buffered(), 0);
}

const SPAWN_40: &str = "mcmd=spawn\nnprocs=2\nexecname=./child\ntotspawns=2\nspawnssofar=1\n\
arg1=x y\nargcnt=1\npreput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=p#1$\n\
info_num=0\nendcmd\nmcmd=spawn\nnprocs=1\nexecname=./b\ntotspawns=2\nspawnssofar=2\nargcnt=0\n\
preput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=p#1$\ninfo_num=0\nendcmd\n";

fn spawn_action() -> Action {
    Action::Spawn {
        cmds: vec![
            SpawnCmd {
                nprocs: 2,
                execname: "./child".into(),
                args: vec!["x y".into()],
                preput: vec![("PARENT_ROOT_PORT_NAME".into(), "p#1$".into())],
                info: vec![],
            },
            SpawnCmd { nprocs: 1, execname: "./b".into(), ..Default::default() },
        ],
    }
}

#[test]
fn spawn_block_byte_by_byte() {
    let mut c = Connection::new(cfg());
    let mut out = Vec::new();
    let data = format!("{SPAWN_40}cmd=get_appnum\n");
    for b in data.bytes() {
        c.receive(&[b], &mut out);
    }
    assert_eq!(out, vec![spawn_action(), send("cmd=appnum appnum=0 rc=0\n")]);
    assert_eq!(c.buffered(), 0);
}

#[test]
fn spawn_block_one_write_and_bad_content() {
    assert_eq!(one(SPAWN_40), vec![spawn_action()]);
    // Complete block with bad content: error reply, connection kept.
    let a = one(
        "mcmd=spawn\nnprocs=x\nexecname=a\ntotspawns=1\nspawnssofar=1\nendcmd\ncmd=get_appnum\n",
    );
    assert_eq!(a[0], send("cmd=spawn_result rc=-1 msg=malformed_spawn\n"));
    assert!(matches!(
        &a[1],
        Action::ProtocolError { error: ParseError::Spawn(m), fatal: false, .. }
            if m.contains("bad value for nprocs")
    ));
    assert_eq!(a[2], send("cmd=appnum appnum=0 rc=0\n"));
}

#[test]
fn spawn_framing_errors_are_fatal() {
    let fatal = |data: &str| {
        let mut c = Connection::new(cfg());
        let a = feed(&mut c, data);
        assert!(
            matches!(a.last(), Some(Action::ProtocolError { fatal: true, .. })),
            "{data:?}: {a:?}"
        );
        assert!(c.failed());
        assert_eq!(feed(&mut c, "cmd=get_appnum\n"), vec![]);
    };
    fatal("mcmd=spawn\nnprocs=1\nendcmd\n");
    fatal("mcmd=spawn\ntotspawns=5000\nspawnssofar=1\nendcmd\n");
    fatal("mcmd=spawn\ntotspawns=0\nspawnssofar=0\nendcmd\n");
    fatal("mcmd=spawn\ntotspawns=2\nspawnssofar=3\nendcmd\n");
    fatal("mcmd=bogus\n");
}

#[test]
fn flood_without_newline_is_fatal_and_bounded() {
    let mut c = Connection::new(cfg());
    let mut out = Vec::new();
    c.receive(b"cmd=init pmi_version=1 pmi_subversion=1\n", &mut out);
    let chunk = vec![b'a'; 64 * 1024];
    let mut sent = 0;
    while sent < 2 * 1024 * 1024 {
        c.receive(&chunk, &mut out);
        sent += chunk.len();
        assert!(c.buffered() <= MAX_REQUEST_LEN);
    }
    let errors: Vec<_> = out.iter().filter(|a| matches!(a, Action::ProtocolError { .. })).collect();
    assert_eq!(errors.len(), 1);
    assert!(matches!(
        errors[0],
        Action::ProtocolError { error: ParseError::TooLong(_), fatal: true, excerpt } if excerpt.len() <= 80
    ));
    assert_eq!(c.buffered(), 0);
    assert_eq!(c.eof(), Eof::BeforeFinalize);
}

#[test]
fn flood_in_one_read_and_long_complete_line() {
    let mut c = Connection::new(cfg());
    let mut out = Vec::new();
    c.receive(&vec![b'x'; 2 * 1024 * 1024], &mut out);
    assert!(matches!(
        &out[..],
        [Action::ProtocolError { error: ParseError::TooLong(_), fatal: true, .. }]
    ));
    assert_eq!(c.buffered(), 0);
    // A complete line over the limit is also TooLong.
    let mut line = b"cmd=put kvsname=k key=a value=".to_vec();
    line.extend(vec![b'v'; MAX_REQUEST_LEN]);
    line.push(b'\n');
    let mut out = Vec::new();
    Connection::new(cfg()).receive(&line, &mut out);
    assert!(matches!(
        &out[..],
        [Action::ProtocolError { error: ParseError::TooLong(_), fatal: true, .. }]
    ));
    // A spawn block that grows past the limit.
    let mut c = Connection::new(cfg());
    let mut out = Vec::new();
    c.receive(b"mcmd=spawn\n", &mut out);
    let arg = format!("arg1={}\n", "a".repeat(1000));
    for _ in 0..1100 {
        c.receive(arg.as_bytes(), &mut out);
        assert!(c.buffered() <= MAX_REQUEST_LEN);
    }
    assert!(matches!(
        &out[..],
        [Action::ProtocolError { error: ParseError::TooLong(_), fatal: true, .. }]
    ));
}
