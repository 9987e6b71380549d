//! Command-line tests of `libi-tree`.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_libi-tree")).args(args).output().expect("libi-tree runs")
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
    let mut names: Vec<&str> = shapes.iter().map(|s| s["shape"].as_str().unwrap()).collect();
    for s in shapes {
        assert_eq!(s.as_object().unwrap().len(), 4);
        assert!(s["depth"].is_u64() && s["max_fanout"].is_u64() && s["time"].is_f64());
    }
    let times: Vec<f64> = shapes.iter().map(|s| s["time"].as_f64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "not sorted: {times:?}");
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
    for (n, seq, rem) in
        [(1000, 0.007, 0.172), (1000, 0.007, 10.0), (300, 1.0, 0.5), (2, 0.1, 0.2), (1, 0.1, 0.2)]
    {
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
    let o = run(&["plan", "--nodes", "1000", "--seq", "0.007", "--rem", "0.172"]);
    assert!(o.status.success());
    let out = stdout(&o);
    let rows: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).skip(1).collect();
    assert_eq!(rows.len(), 13);
    assert!(rows[0].split_whitespace().nth(1) == Some("greedy"), "{out}");
}

#[test]
fn show_text() {
    let o = run(&["show", "--nodes", "8", "--tree", "binomial", "--seq", "1", "--rem", "10"]);
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
    let edges: Vec<&str> = out.lines().map(str::trim).filter(|l| l.contains("->")).collect();
    assert_eq!(edges, vec!["0 -> 1;", "0 -> 2;", "1 -> 3;", "1 -> 4;", "2 -> 5;", "2 -> 6;"]);
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
        (&["show", "--nodes", "10", "--tree", "flat", "--seq", "-2"], "--seq"),
        (&["show", "--nodes", "10", "--tree", "flat", "--format", "png"], "--format"),
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

// ---- calibrate and plot ----

use libi::report::{LaunchRecord, NodeReport, Report};
use libi::tree::{LaunchModel, Shape, Tree};
use std::path::PathBuf;

/// A report whose launches follow the model exactly: `shape` over `n` tree nodes (node 0 is
/// the front end), every NLA ready `setup` seconds after it connected.
fn synthetic_report(shape: &Shape, n: usize, seq: f64, rem: f64, setup: f64) -> Report {
    let tree = Tree::build(shape, n, &LaunchModel::new(seq, rem));
    let mut ready = vec![0.0f64; n];
    let mut reports: Vec<NodeReport> = (0..n)
        .map(|v| NodeReport {
            node: v as u32,
            host: if v == 0 { "fe".into() } else { format!("n{v}") },
            ..NodeReport::default()
        })
        .collect();
    let mut stack = vec![0usize];
    while let Some(p) = stack.pop() {
        reports[p].ready = ready[p];
        for (i, &c) in tree.children(p).iter().enumerate() {
            let start = ready[p] + seq * i as f64;
            let connected = start + rem;
            ready[c] = connected + setup;
            reports[p].launches.push(LaunchRecord {
                node: c as u32,
                host: format!("n{c}"),
                parent: p as u32,
                order: i as u32 + 1,
                start,
                connected,
            });
            stack.push(c);
        }
    }
    Report {
        nodes: n as u32 - 1,
        ranks: n as u32 - 1,
        tree: shape.to_string(),
        launcher: "fork".into(),
        seq: 0.007,
        rem: 0.3,
        launch_time: 0.0,
        total_time: 0.0,
        reports,
    }
}

/// Writes `text` to a fresh file in the test scratch directory.
fn scratch(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("libi_tree_cli");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join(format!("{}-{name}", std::process::id()));
    std::fs::write(&path, text).expect("write scratch file");
    path
}

fn report_file(name: &str, r: &Report) -> PathBuf {
    scratch(name, &serde_json::to_string_pretty(r).expect("encode report"))
}

#[test]
fn calibrate_recovers_the_constants() {
    let r = synthetic_report(&Shape::Kary(3), 13, 0.01, 0.2, 0.0);
    let f = report_file("kary3.json", &r);
    let path = f.to_str().expect("utf-8 path");
    let o = run(&["calibrate", path, "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("calibrate prints JSON");
    let keys: Vec<&str> = v.as_object().expect("object").keys().map(String::as_str).collect();
    assert_eq!(keys.len(), 16, "{keys:?}");
    assert!((v["seq"].as_f64().expect("seq") - 0.01).abs() < 1e-9, "{v}");
    assert!((v["rem"].as_f64().expect("rem") - 0.2).abs() < 1e-9, "{v}");
    assert!((v["r2"].as_f64().expect("r2") - 1.0).abs() < 1e-9, "{v}");
    assert!(v["rms"].as_f64().expect("rms") < 1e-9, "{v}");
    assert_eq!(v["samples"].as_u64(), Some(12));
    assert_eq!(v["runs"].as_u64(), Some(1));
    // The data follow the paper's model: no sharing, nothing held.
    assert_eq!(v["cores"].as_f64(), Some(0.0), "{v}");
    assert_eq!(v["hold"].as_bool(), Some(false), "{v}");
    // The per-launch line fit of earlier versions, and every node's pair.
    assert!((v["line"]["seq"].as_f64().expect("line seq") - 0.01).abs() < 1e-9, "{v}");
    assert_eq!(v["per_run"][0]["points"].as_array().map(Vec::len), Some(12), "{v}");
    assert_eq!(v["per_run"][0]["tree"].as_str(), Some("kary:3"), "{v}");

    let o = run(&["calibrate", path]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("SEQ 0.0100 s  REM 0.2000 s  R² 1.0000  RMS "), "{out}");
    assert!(out.contains("(n = 12 launches, 1 run)"), "{out}");
}

#[test]
fn calibrate_fits_several_reports() {
    let a = report_file("multi-flat.json", &synthetic_report(&Shape::Flat, 9, 0.01, 0.2, 0.0));
    let b = report_file("multi-k2.json", &synthetic_report(&Shape::Kary(2), 9, 0.01, 0.2, 0.0));
    let (a, b) = (a.to_str().expect("utf-8"), b.to_str().expect("utf-8"));
    let o = run(&["calibrate", a, b, "--cores", "off", "--hold", "no"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].contains("R² 1.0000") && lines[0].contains("(n = 16 launches, 2 runs)"),
        "{out}"
    );
    assert!(lines[1].starts_with("tree"), "{out}");
    assert!(lines[2].starts_with("flat") && lines[3].starts_with("kary:2"), "{out}");
    for bad in [["--cores", "x"], ["--cores", "-2"], ["--hold", "maybe"]] {
        let o = run(&["calibrate", a, bad[0], bad[1]]);
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
        assert_eq!(stderr(&o).lines().count(), 1, "{bad:?}");
    }
}

#[test]
fn calibrate_without_seq_information() {
    // A chain: every parent launches exactly one child.
    let r = synthetic_report(&Shape::Chain, 5, 0.01, 0.25, 0.0);
    let f = report_file("chain.json", &r);
    let path = f.to_str().expect("utf-8 path");
    let o = run(&["calibrate", path, "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert!(v["line"]["seq"].is_null(), "{v}");
    assert_eq!(v["seq"].as_f64(), Some(0.0), "{v}");
    assert!((v["rem"].as_f64().expect("rem") - 0.25).abs() < 1e-9, "{v}");
    assert_eq!(v["samples"].as_u64(), Some(4));
    let o = run(&["calibrate", path]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with("SEQ 0.0000 s  REM 0.2500 s"), "{out}");
    assert!(lines[1].contains("not identifiable"), "{out}");
}

fn check_svg(svg: &str) {
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
    assert!(svg.trim_end().ends_with("</svg>"));
    for class in ["measured", "modeled"] {
        let at = svg
            .find(&format!("<g class=\"{class}\">"))
            .unwrap_or_else(|| panic!("no {class} series"));
        let group = &svg[at..];
        let end = group.find("</g>").expect("group closed");
        assert!(group[..end].contains("<polyline"), "{class}");
        assert!(group[..end].contains("<circle"), "{class}");
    }
    // Roughly well formed: every element opened is closed (or self-closing).
    let opens = svg.matches('<').count();
    let closes = svg.matches('>').count();
    assert_eq!(opens, closes);
    for tag in ["g", "text", "title", "circle"] {
        let open =
            svg.matches(&format!("<{tag} ")).count() + svg.matches(&format!("<{tag}>")).count();
        let self_closed = if tag == "circle" {
            svg.split("<circle ")
                .skip(1)
                .filter(|rest| rest.split('>').next().is_some_and(|t| t.ends_with('/')))
                .count()
        } else {
            0
        };
        assert_eq!(open, svg.matches(&format!("</{tag}>")).count() + self_closed, "{tag}");
    }
}

#[test]
fn plot_writes_svg() {
    let mut r = synthetic_report(&Shape::Greedy, 20, 0.01, 0.2, 0.0);
    r.tree = "greedy <&>".into(); // must be escaped
    let f = report_file("greedy.json", &r);
    let path = f.to_str().expect("utf-8 path");
    let out_svg = scratch("plot.svg", "");
    let svg_path = out_svg.to_str().expect("utf-8 path");
    let o = run(&["plot", path, "-o", svg_path]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("wrote "), "{}", stdout(&o));
    assert!(stdout(&o).contains("19 NLAs"), "{}", stdout(&o));
    let svg = std::fs::read_to_string(&out_svg).expect("svg written");
    check_svg(&svg);
    assert!(svg.contains("greedy &lt;&amp;&gt; tree, 19 NLAs"));
    assert!(!svg.contains("<&>"));
    assert_eq!(svg.matches("<circle ").count(), 2 * 19 + 2);
    // The fit reproduces the model exactly: both series coincide.
    let series = |class: &str| {
        let at = svg.find(&format!("<g class=\"{class}\">")).expect("series");
        let rest = &svg[at..];
        let p = rest.find("points=\"").expect("points") + 8;
        rest[p..p + rest[p..].find('"').expect("end")].to_string()
    };
    assert_eq!(series("measured"), series("modeled"));

    // To stdout, with given constants, sorted by node id.
    let o = run(&["plot", path, "--seq", "1", "--rem", "2", "--sort", "node"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let svg = stdout(&o);
    check_svg(&svg);
    assert!(svg.contains("SEQ 1.0000 s (given), REM 2.0000 s (given)"));
    assert!(svg.contains("in order of node id"));
}

#[test]
fn plot_chain_uses_report_seq() {
    let r = synthetic_report(&Shape::Chain, 4, 0.01, 0.25, 0.0);
    let f = report_file("chain-plot.json", &r);
    let o = run(&["plot", f.to_str().expect("utf-8 path")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let svg = stdout(&o);
    check_svg(&svg);
    assert!(svg.contains("SEQ 0.0070 s (report), REM 0.2500 s (fit)"), "{svg}");
}

#[test]
fn bad_report_files_exit_2_naming_the_file() {
    let missing = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("no-such-report.json");
    let missing = missing.to_str().expect("utf-8 path").to_string();
    let garbage = scratch("garbage.json", "{ this is not json");
    let garbage = garbage.to_str().expect("utf-8 path").to_string();
    let wrong = scratch("wrong.json", "{\"nodes\": \"three\"}");
    let wrong = wrong.to_str().expect("utf-8 path").to_string();
    let mut r = synthetic_report(&Shape::Flat, 1, 0.01, 0.2, 0.0);
    r.reports[0].ready = 0.0;
    let empty = report_file("empty.json", &r);
    let empty = empty.to_str().expect("utf-8 path").to_string();
    let mut r = synthetic_report(&Shape::Flat, 4, 0.01, 0.2, 0.0);
    r.reports[0].launches[2].connected = -1.7e9;
    let never = report_file("never.json", &r);
    let never = never.to_str().expect("utf-8 path").to_string();
    for file in [&missing, &garbage, &wrong, &empty, &never] {
        for args in [
            vec!["calibrate", file.as_str()],
            vec!["calibrate", file.as_str(), "--format", "json"],
            vec!["plot", file.as_str()],
        ] {
            let o = run(&args);
            assert_eq!(o.status.code(), Some(2), "{args:?}");
            let err = stderr(&o);
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
            assert!(err.contains(file.as_str()), "{args:?}: {err}");
            assert!(!err.contains("panicked"), "{args:?}: {err}");
            assert!(o.stdout.is_empty(), "{args:?}");
        }
    }
    let o = run(&["calibrate", &empty]);
    assert!(stderr(&o).contains("no launch records"), "{}", stderr(&o));
    // Bad flags.
    let good = report_file("good.json", &synthetic_report(&Shape::Flat, 3, 0.01, 0.2, 0.0));
    let good = good.to_str().expect("utf-8 path");
    let cases: &[(&[&str], &str)] = &[
        (&["calibrate", good, "--format", "xml"], "--format"),
        (&["calibrate"], "FILE"),
        (&["plot", good, "--format", "png"], "--format"),
        (&["plot", good, "--seq", "-1"], "--seq"),
        (&["plot", good, "--rem", "x"], "--rem"),
        (&["plot", good, "--sort", "size"], "--sort"),
    ];
    for (args, needle) in cases {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
}
