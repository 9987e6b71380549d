//! Issue 52: a PMGR job whose agent tree is deeper than one level ends without an agent
//! waiting for its children's launchers.

mod common;

use common::run;

/// Issue 52, item 3: under --pmgr, an agent with children took the exit of a child's
/// launcher for a PMGR event and dropped it, then waited 5 s for it at the end. Seen
/// without timing: the agent says (under -v) when it gives up waiting for its launchers.
#[test]
fn pmgr_agents_do_not_wait_for_their_launchers() {
    let hosts: Vec<String> = (1..=7).map(|i| format!("n{i}")).collect();
    let hosts = hosts.join(",");
    for tree in ["chain", "kary:2"] {
        let args = ["-v", "--tree", tree, "-launcher", "fork", "--pmgr", "-hosts", &hosts];
        let r = run(&[&args[..], &["-n", "7", "/bin/true"]].concat(), b"");
        assert_eq!(r.status, 0, "{}", r.stderr);
        assert!(!r.stderr.contains("gave up waiting for the launchers"), "{tree}: {}", r.stderr);
    }
}
