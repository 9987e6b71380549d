//! Command-line tests of `libi-tree`.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_libi-tree"))
        .args(args)
        .output()
        .expect("libi-tree runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn plan_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["plan", "--format", "json"];
    all.extend_from_slice(args);
    let o = run(&all);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).expect("plan prints JSON")
}

fn check_plan(v: &serde_json::Value, nodes: u64, seq: f64, rem: f64) {
    let obj = v.as_object().expect("an object");
    let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    assert_eq!(keys.len(), 4, "{keys:?}");
    assert_eq!(v["nodes"].as_u64(), Some(nodes));
    assert_eq!(v["seq"].as_f64(), Some(seq));
    assert_eq!(v["rem"].as_f64(), Some(rem));
    let shapes = v["shapes"].as_array().expect("shapes");
    assert_eq!(shapes.len(), 13);
    let mut names: Vec<&str> = shapes
        .iter()
        .map(|s| s["shape"].as_str().unwrap())
        .collect();
    for s in shapes {
        assert_eq!(s.as_object().unwrap().len(), 4);
        assert!(s["depth"].is_u64() && s["max_fanout"].is_u64() && s["time"].is_f64());
    }
    let times: Vec<f64> = shapes.iter().map(|s| s["time"].as_f64().unwrap()).collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "not sorted: {times:?}"
    );
    // Greedy first, or tied with the first.
    let greedy = shapes.iter().find(|s| s["shape"] == "greedy").unwrap();
    assert_eq!(greedy["time"].as_f64(), Some(times[0]));
    assert_eq!(names[0], "greedy");
    names.sort_unstable();
    let mut want = vec!["greedy", "flat", "chain", "binomial"];
    let karys: Vec<String> = (1..=9).map(|e| format!("kary:{}", 1 << e)).collect();
    want.extend(karys.iter().map(String::as_str));
    want.sort_unstable();
    assert_eq!(names, want);
}

#[test]
fn plan_json_is_sorted_with_greedy_first() {
    for (n, seq, rem) in [
        (1000, 0.007, 0.172),
        (1000, 0.007, 10.0),
        (300, 1.0, 0.5),
        (2, 0.1, 0.2),
        (1, 0.1, 0.2),
    ] {
        let (ns, ss, rs) = (n.to_string(), seq.to_string(), rem.to_string());
        let v = plan_json(&["--nodes", &ns, "--seq", &ss, "--rem", &rs]);
        check_plan(&v, n, seq, rem);
    }
    let v = plan_json(&[
        "--nodes", "500", "--seq", "0.01", "--rem", "0.2", "--slots", "4", "--batch", "8",
    ]);
    check_plan(&v, 500, 0.01, 0.2);
}

#[test]
fn plan_json_values() {
    let v = plan_json(&["--nodes", "1000", "--seq", "0.007", "--rem", "0.172"]);
    let shapes = v["shapes"].as_array().unwrap();
    let get = |name: &str| shapes.iter().find(|s| s["shape"] == name).unwrap().clone();
    let flat = get("flat");
    assert!((flat["time"].as_f64().unwrap() - (0.007 * 998.0 + 0.172)).abs() < 1e-9);
    assert_eq!(flat["depth"], 1);
    assert_eq!(flat["max_fanout"], 999);
    let chain = get("chain");
    assert!((chain["time"].as_f64().unwrap() - 999.0 * 0.172).abs() < 1e-9);
    assert_eq!(chain["depth"], 999);
}

#[test]
fn plan_table() {
    let o = run(&[
        "plan", "--nodes", "1000", "--seq", "0.007", "--rem", "0.172",
    ]);
    assert!(o.status.success());
    let out = stdout(&o);
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .skip(1)
        .collect();
    assert_eq!(rows.len(), 13);
    assert!(rows[0].split_whitespace().nth(1) == Some("greedy"), "{out}");
}

#[test]
fn show_text() {
    let o = run(&[
        "show", "--nodes", "8", "--tree", "binomial", "--seq", "1", "--rem", "10",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let body: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        body,
        vec![
            "0  t=0.000000",
            "  1  t=10.000000",
            "    3  t=20.000000",
            "      7  t=30.000000",
            "    5  t=21.000000",
            "  2  t=11.000000",
            "    6  t=21.000000",
            "  4  t=12.000000",
        ]
    );
    assert!(out.lines().next().unwrap().contains("30.000000"));
    // Defaults for the model, lone root.
    let o = run(&["show", "--nodes", "1", "--tree", "greedy"]);
    assert!(o.status.success());
    assert!(stdout(&o).lines().any(|l| l == "0  t=0.000000"));
}

#[test]
fn show_dot() {
    let o = run(&[
        "show", "--nodes", "7", "--tree", "kary:2", "--seq", "1", "--rem", "10", "--format", "dot",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("digraph "));
    assert!(out.trim_end().ends_with('}'));
    let edges: Vec<&str> = out
        .lines()
        .map(str::trim)
        .filter(|l| l.contains("->"))
        .collect();
    assert_eq!(
        edges,
        vec!["0 -> 1;", "0 -> 2;", "1 -> 3;", "1 -> 4;", "2 -> 5;", "2 -> 6;"]
    );
    assert!(out.contains("6 [label=\"6\\n22.000000 s\"];"));
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let cases: &[(&[&str], &str)] = &[
        (&["plan", "--nodes", "0"], "--nodes"),
        (&["plan", "--nodes", "-5"], "--nodes"),
        (&["plan", "--nodes", "ten"], "--nodes"),
        (&["plan", "--nodes", "10", "--seq", "-1"], "--seq"),
        (&["plan", "--nodes", "10", "--rem", "-0.5"], "--rem"),
        (&["plan", "--nodes", "10", "--rem", "abc"], "--rem"),
        (&["plan", "--nodes", "10", "--slots", "0"], "--slots"),
        (&["plan", "--nodes", "10", "--batch", "0"], "--batch"),
        (&["plan", "--nodes", "10", "--format", "xml"], "--format"),
        (&["show", "--nodes", "10", "--tree", "bogus"], "bogus"),
        (&["show", "--nodes", "10", "--tree", "kary:0"], "kary:0"),
        (&["show", "--nodes", "10", "--tree", "kary:x"], "kary:x"),
        (&["show", "--nodes", "0", "--tree", "flat"], "--nodes"),
        (
            &["show", "--nodes", "10", "--tree", "flat", "--seq", "-2"],
            "--seq",
        ),
        (
            &["show", "--nodes", "10", "--tree", "flat", "--format", "png"],
            "--format",
        ),
        (&["show", "--nodes", "10"], "--tree"),
        (&["plan"], "--nodes"),
        (&["plan", "--nodes", "3", "--bogus"], "--bogus"),
        (&["frobnicate"], "frobnicate"),
        (&[], "subcommand"),
    ];
    for (args, needle) in cases {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
}
