//! The segment merge: the `:`-separated segments of the command line (after the defaults
//! file's words, with `-configfile`'s segments in place), each parsed by
//! [`parse_segment`], merged into one [`CommandLine`]: the global options of every segment
//! into [`Global`] (later ones win, checked as they arrive), one [`Exec`] per program, and
//! the checks that span segments (one host list, one `-ppn`, one environment mode).

use super::configfile::configfile_args;
use super::hydra::parse_segment;
use super::schema::Segment;
use super::{usage, CliError, CommandLine, EnvMode, Exec, Global};
use crate::rawargs::RawArgs;

fn pairs(v: &[String]) -> Vec<(String, std::ffi::OsString)> {
    v.chunks(2).filter(|c| c.len() == 2).map(|c| (c[0].clone(), c[1].clone().into())).collect()
}

/// Most entries a `-rankmap` may spell out (one period of its cycle).
const RANKMAP_MAX: usize = 1 << 22;

/// `-rankmap`: the node (index into the host list) of ranks 0, 1, ...: either a comma list
/// (`1,0,1`) or a PMI process mapping (`(vector,(0,2,1),(1,1,2))`: blocks of `nodes`
/// consecutive nodes from `start`, `ranks` ranks each, as MPICH's `PMI_process_mapping`
/// reads). Ranks past its end repeat it (rank r goes where rank r mod len does), as the
/// process mapping's blocks repeat.
fn parse_rankmap(s: &str) -> Result<Vec<u32>, String> {
    let bad = |why: &str| format!("-rankmap: {why} in '{s}'");
    let num = |w: &str| {
        w.trim().parse::<u32>().map_err(|_| bad(&format!("'{}' is not a node index", w.trim())))
    };
    let t = s.trim();
    let mut map = Vec::new();
    if let Some(body) = t.strip_prefix('(') {
        let body = body
            .strip_suffix(')')
            .and_then(|b| b.trim_start().strip_prefix("vector"))
            .ok_or_else(|| bad("expected (vector,(start,nodes,ranks),...)"))?;
        let mut rest = body.trim_start();
        while !rest.is_empty() {
            let after =
                rest.strip_prefix(',').map(str::trim_start).ok_or_else(|| bad("expected ','"))?;
            let inner = after.strip_prefix('(').ok_or_else(|| bad("expected '('"))?;
            let (block, tail) = inner.split_once(')').ok_or_else(|| bad("unclosed block"))?;
            let v: Vec<u32> = block.split(',').map(num).collect::<Result<_, _>>()?;
            let [start, nodes, ranks] = v[..] else {
                return Err(bad(&format!("block ({block}) is not (start,nodes,ranks)")));
            };
            if nodes == 0 || ranks == 0 {
                return Err(bad(&format!("block ({block}) places no rank")));
            }
            for node in start..start.saturating_add(nodes) {
                if map.len() + ranks as usize > RANKMAP_MAX {
                    return Err(bad("too many entries"));
                }
                map.extend(std::iter::repeat_n(node, ranks as usize));
            }
            rest = tail.trim_start();
        }
    } else {
        for w in t.split(',') {
            map.push(num(w)?);
            if map.len() > RANKMAP_MAX {
                return Err(bad("too many entries"));
            }
        }
    }
    if map.is_empty() {
        return Err(bad("no rank is placed"));
    }
    Ok(map)
}

fn list(s: &str) -> Vec<String> {
    s.split(',').filter(|x| !x.is_empty()).map(str::to_string).collect()
}

/// Merge the global options of one segment into `global` (later segments win).
fn merge_global(
    global: &mut Global,
    enable_auto_cleanup: &mut bool,
    s: &Segment,
) -> Result<(), CliError> {
    global.genv.extend(pairs(&s.genv));
    if s.genvnone {
        global.genv_mode = EnvMode::None;
    }
    if s.genvall {
        global.genv_mode = EnvMode::All;
    }
    if let Some(l) = &s.genvlist {
        global.genv_mode = EnvMode::List(list(l));
    }
    global.gwdir = s.gwdir.clone().map(Into::into).or(global.gwdir.take());
    global.label |= s.label;
    global.prepend_pattern = s.prepend_pattern.clone().or(global.prepend_pattern.take());
    global.outfile_pattern = s.outfile_pattern.clone().or(global.outfile_pattern.take());
    global.errfile_pattern = s.errfile_pattern.clone().or(global.errfile_pattern.take());
    global.rmk = s.rmk.or(global.rmk.take());
    global.pmi = s.pmi.or(global.pmi.take());
    global.disable_auto_cleanup |= s.disable_auto_cleanup;
    *enable_auto_cleanup |= s.enable_auto_cleanup;
    global.notes.extend(s.notes.iter().cloned());
    if s.info {
        return Err(CliError::Info(crate::info_text()));
    }
    if s.man {
        return Err(CliError::Info(crate::man::page()));
    }
    if let Some(pid) = s.proctable {
        return Err(CliError::ProcTable(pid));
    }
    if let Some(pid) = s.job_launcher {
        return Err(CliError::JobLauncher(pid));
    }
    global.verbose |= s.verbose;
    global.tree = s.tree.clone().or(global.tree.take());
    global.launch_model = s.launch_model.or(global.launch_model.take());
    global.usize = s.usize.or(global.usize.take());
    global.nla_path = s.nla_path.clone().or(global.nla_path.take());
    global.hostfile = s.hostfile.clone().or(global.hostfile.take());
    global.hosts = s.hosts.clone().or(global.hosts.take());
    global.ppn = s.ppn.or(global.ppn.take());
    global.launcher = s.launcher.or(global.launcher.take());
    global.launcher_exec = s.launcher_exec.clone().or(global.launcher_exec.take());
    global.localhost = s.localhost.clone().or(global.localhost.take());
    global.iface = s.iface.clone().or(global.iface.take());
    global.report = s.report.clone().or(global.report.take());
    global.kvs_push_max = s.kvs_push_max.or(global.kvs_push_max.take());
    global.kvs_max = s.kvs_max.or(global.kvs_max.take());
    global.max_conn = s.max_conn.map(|c| c as usize).or(global.max_conn.take());
    global.launch_timeout = s.launch_timeout.or(global.launch_timeout.take());
    global.pmgr |= s.pmgr;
    global.end_on_stdin_eof |= s.end_on_stdin_eof;
    global.bcast |= s.bcast;
    global.launch_batch = s.launch_batch.or(global.launch_batch.take());
    if let Some(b) = &s.bind_to {
        global.binding.bind = libi_binding::parse_bind(b).map_err(usage)?;
        global.bind_given = true;
    }
    if let Some(m) = &s.map_by {
        global.binding.map = Some(libi_binding::parse_map(m).map_err(usage)?);
        global.map_given = true;
    }
    if let Some(m) = &s.membind {
        global.binding.mem = libi_binding::parse_membind_or_none(m).map_err(usage)?;
        global.membind_given = true;
    }
    if let Some(o) = &s.order_nodes {
        global.order_nodes = Some(o.parse().map_err(usage)?);
    }
    if let Some(v) = &s.gpus_per_proc {
        global.gpus.devices = per_proc("-gpus-per-proc", v)?;
    }
    if let Some(v) = &s.gpu_subdevs_per_proc {
        global.gpus.subdevs = per_proc("-gpu-subdevs-per-proc", v)?;
    }
    global.print_all_exitcodes |= s.print_all_exitcodes;
    global.skip_launch_node |= s.skip_launch_node;
    global.hybrid_hosts |= s.hybrid_hosts;
    if let Some(m) = &s.rankmap {
        global.rankmap = Some(parse_rankmap(m).map_err(usage)?);
    }
    if let Some(k) = &s.memory_alloc_kinds {
        if k.trim().is_empty() || k.contains(char::is_whitespace) {
            return Err(usage(format!(
                "-memory-alloc-kinds: expected a comma-separated list of kinds, got '{k}'"
            )));
        }
        global.memory_alloc_kinds = Some(k.clone());
    }
    if let Some(a) = &s.nameserver {
        global.nameserver = Some(libi::nameserver::parse_address(a).map_err(usage)?);
    }
    if let Some(port) = s.pmi_args.first() {
        match port.parse::<u16>() {
            Ok(p) if p > 0 => global.singleton_port = Some(p),
            _ => return Err(usage(format!("-pmi_args: bad port '{port}'"))),
        }
    }
    if let Some(t) = s.launch_timeout {
        if !(t.is_finite() && t > 0.0) {
            return Err(usage(format!(
                "--launch-timeout must be a positive number of seconds, got {t}"
            )));
        }
    }
    Ok(())
}

/// The value of `-gpus-per-proc` / `-gpu-subdevs-per-proc` (option `name`): `auto` (`None`)
/// or a count, 0 included.
fn per_proc(name: &str, v: &str) -> Result<Option<u32>, CliError> {
    if v == "auto" {
        return Ok(None);
    }
    match v.parse::<u32>() {
        Ok(n) if v.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(n)),
        _ => Err(usage(format!("{name}: expected auto or a number (0 or more), got '{v}'"))),
    }
}

/// Parse `argv` after the global options of a defaults file (see
/// [`defaults_file`](super::defaults_file)): its path and words. The command line wins over
/// the file: its settings come later.
pub fn parse_with_defaults(
    defaults: Option<(&str, &[String])>,
    argv: &[String],
    raw: &mut RawArgs,
) -> Result<CommandLine, CliError> {
    if argv.is_empty() {
        return Err(usage("no program given (try --help)"));
    }
    let mut global = Global::default();
    let mut execs = Vec::new();
    let mut enable_auto_cleanup = false;
    let mut segments: Vec<Vec<String>> = argv.split(|a| a == ":").map(|s| s.to_vec()).collect();
    if let Some((path, words)) = defaults {
        let in_file = |m: String| usage(format!("{path}: {m}"));
        let s = parse_segment(words).map_err(|e| match e {
            CliError::Usage(m) => in_file(m),
            other => other,
        })?;
        if let Some(w) = s.command.first() {
            return Err(in_file(format!(
                "'{w}' is not an option (the file holds global options only)"
            )));
        }
        if s.n.is_some() || !s.env.is_empty() || s.wdir.is_some() || s.configfile.is_some() {
            return Err(in_file(
                "-n, -env, -wdir and -configfile belong on the command line".into(),
            ));
        }
        // The file's settings first: the command line's, merged after them, win.
        segments.insert(0, words.to_vec());
    }
    let first = usize::from(defaults.is_some());
    let mut idx = 0;
    // Hydra takes one host list and one -ppn per command line: a second one (in another
    // segment, or -f with -hosts) is refused rather than silently preferred. The defaults
    // file's are overridden by the command line's, as its other options are.
    let (mut host_list_given, mut ppn_given) = (false, false);
    // The configfile each segment came from, if any: a configfile may not name another (a
    // file naming itself would be read forever); Hydra refuses nesting too.
    let mut from_file: Vec<Option<String>> = vec![None; segments.len()];
    // One environment mode per command line (-genvall/-genvnone/-genvlist) and per program
    // (-envall/-envnone/-envlist): Hydra refuses a second ("duplicate setting") rather than
    // letting one silently win.
    let mut genv_mode: Option<&str> = None;
    while idx < segments.len() {
        let s = parse_segment(&segments[idx])?;
        let modes = |all: bool, none: bool, list: bool, names: [&'static str; 3]| {
            [all, none, list].into_iter().zip(names).filter(|(on, _)| *on).map(|(_, n)| n)
        };
        let mut local =
            modes(s.envall, s.envnone, s.envlist.is_some(), ["-envall", "-envnone", "-envlist"]);
        if let (Some(a), Some(b)) = (local.next(), local.next()) {
            return Err(usage(format!("{a} and {b} contradict: give one")));
        }
        if idx >= first {
            let names = ["-genvall", "-genvnone", "-genvlist"];
            for m in modes(s.genvall, s.genvnone, s.genvlist.is_some(), names) {
                if let Some(before) = genv_mode.replace(m) {
                    return Err(usage(format!(
                        "{before} and {m} contradict: give one (for the whole command line)"
                    )));
                }
            }
        }
        if s.hosts.is_some() && s.hostfile.is_some() {
            return Err(usage("-f and -hosts both give a host list: give one"));
        }
        if idx >= first {
            if s.hosts.is_some() || s.hostfile.is_some() {
                if host_list_given {
                    return Err(usage(
                        "a host list (-f or -hosts) is given twice: one host list serves the \
                         whole command line",
                    ));
                }
                host_list_given = true;
            }
            if s.ppn.is_some() {
                if ppn_given {
                    return Err(usage("-ppn is given twice: it applies to the whole command line"));
                }
                ppn_given = true;
            }
        }
        if let Some(cf) = &s.configfile {
            if let Some(outer) = &from_file[idx] {
                return Err(usage(format!(
                    "configfile '{outer}' names a configfile ('{cf}'): a configfile holds \
                     programs and their options, not another configfile"
                )));
            }
            let words = configfile_args(cf, raw)?;
            let more: Vec<Vec<String>> = words.split(|a| a == ":").map(|s| s.to_vec()).collect();
            from_file.splice(idx + 1..idx + 1, vec![Some(cf.clone()); more.len()]);
            // The configfile's segments stand where the option was; options given next to
            // it stay global.
            segments.splice(idx + 1..idx + 1, more);
            if !s.command.is_empty() {
                return Err(usage("-configfile cannot be combined with a program"));
            }
        }
        let merged = merge_global(&mut global, &mut enable_auto_cleanup, &s);
        match (merged, defaults) {
            (Err(CliError::Usage(m)), Some((path, _))) if idx < first => {
                return Err(usage(format!("{path}: {m}")))
            }
            (r, _) => r?,
        }
        if s.command.is_empty() {
            if s.configfile.is_none() && idx >= first {
                let nth = idx + 1 - first;
                if s.n.is_some() || !s.env.is_empty() || s.wdir.is_some() {
                    return Err(usage(format!("segment {nth} names no program")));
                }
                if segments.len() - first > 1 {
                    return Err(usage(format!("segment {nth} names no program")));
                }
            }
            idx += 1;
            continue;
        }
        let n = match s.n {
            None => None,
            Some(n) if n >= 1 && n <= u32::MAX as i64 => Some(n as u32),
            Some(n) => {
                return Err(usage(format!("-n must be a positive number of processes, got {n}")))
            }
        };
        let env_mode = if s.envnone {
            Some(EnvMode::None)
        } else if let Some(l) = &s.envlist {
            Some(EnvMode::List(list(l)))
        } else if s.envall {
            Some(EnvMode::All)
        } else {
            None
        };
        execs.push(Exec {
            n,
            env: pairs(&s.env),
            env_mode,
            wdir: s.wdir.clone().map(Into::into),
            prog: s.command[0].clone(),
            args: s.command[1..].iter().map(Into::into).collect(),
        });
        idx += 1;
    }
    if enable_auto_cleanup && global.disable_auto_cleanup {
        // Hydra refuses the pair too ("duplicate setting").
        return Err(usage("-enable-auto-cleanup and -disable-auto-cleanup contradict: give one"));
    }
    if global.label && global.prepend_pattern.is_some() {
        return Err(usage("-l and -prepend-pattern both set the output prefix: give one"));
    }
    match (global.singleton_port, execs.is_empty()) {
        (None, true) => return Err(usage("no program given (try --help)")),
        (Some(_), false) => return Err(usage("-pmi_args cannot be combined with a program")),
        _ => {}
    }
    Ok(CommandLine { global, execs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::apply_env;
    use crate::cli::testing::{p, usage_error};
    use libi::job::LauncherKind;

    #[test]
    fn mpmd_segments_and_local_env() {
        let c = p("-n 1 -env X 1 a : -n 2 -envnone b arg").expect("parse");
        assert_eq!(c.execs.len(), 2);
        assert_eq!(c.execs[0].env, vec![("X".into(), "1".into())]);
        assert_eq!(c.execs[1].n, Some(2));
        assert_eq!(c.execs[1].env_mode, Some(EnvMode::None));
        assert_eq!(c.execs[1].args, vec!["arg"]);
    }

    #[test]
    fn global_env_modes() {
        let c = p("-genvlist A,B -n 1 x").expect("parse");
        assert_eq!(c.global.genv_mode, EnvMode::List(vec!["A".into(), "B".into()]));
        let c = p("-genvnone -n 1 x").expect("parse");
        assert_eq!(c.global.genv_mode, EnvMode::None);
    }

    #[test]
    fn host_options() {
        let c = p("-f hf -ppn 2 -launcher ssh -launcher-exec /x/ssh -localhost 10.0.0.1 -n 4 x")
            .expect("parse");
        assert_eq!(c.global.hostfile.as_deref(), Some("hf"));
        assert_eq!(c.global.ppn, Some(2));
        assert_eq!(c.global.launcher, Some(LauncherKind::Ssh));
        assert_eq!(c.global.launcher_exec.as_deref(), Some("/x/ssh"));
        assert_eq!(c.global.localhost.as_deref(), Some("10.0.0.1"));
        let c = p("-machinefile m x").expect("parse");
        assert_eq!(c.global.hostfile.as_deref(), Some("m"));
        let c = p("-hosts a:2,b x").expect("parse");
        assert_eq!(c.global.hosts.as_deref(), Some("a:2,b"));
        // One host list and one -ppn per command line, as Hydra.
        usage_error("-machinefile m -hosts a:2,b x", "-f and -hosts both give a host list");
        usage_error("-n 1 -hosts a x : -n 1 -f b y", "a host list (-f or -hosts) is given twice");
        usage_error("-ppn 1 -n 1 x : -ppn 2 -n 1 y", "-ppn is given twice");
        let c = p("-hosts a -ppn 2 -n 1 x : -n 1 y").expect("parse");
        assert_eq!((c.global.hosts.as_deref(), c.global.ppn), (Some("a"), Some(2)));
        assert!(matches!(p("-launcher telnet x"), Err(CliError::Usage(_))));
        assert!(matches!(p("-ppn 0 x"), Err(CliError::Usage(_))));
        let c = p("--report=r.json x").expect("parse");
        assert_eq!(c.global.report.as_deref(), Some("r.json"));
    }

    #[test]
    fn binding_options() {
        use libi_binding::{BindTo, Object};
        let c = p("-bind-to core:2 -map-by socket -n 2 a : -n 1 b").unwrap();
        assert_eq!(c.global.binding.bind.to_string(), "core:2");
        assert_eq!(c.global.binding.map.map(|m| m.obj), Some(Object::Socket));
        let c = p("-n 2 a : -bind-to user:0+1,1 b").unwrap();
        assert!(matches!(c.global.binding.bind, BindTo::User(ref e) if e.len() == 2));
        assert_eq!(p("a").unwrap().global.binding.bind, BindTo::None);
        match p("-bind-to bogus a") {
            Err(CliError::Usage(m)) => assert!(m.starts_with("-bind-to: unknown object 'bogus'")),
            other => panic!("{other:?}"),
        }
        assert!(matches!(p("-map-by rr a"), Err(CliError::Usage(_))));
    }

    #[test]
    fn membind_and_order_nodes() {
        use libi::hosts::NodeOrder;
        use libi_binding::MemBind;
        let g = |line: &str| p(line).expect(line).global;
        assert_eq!(g("a").binding.mem, None);
        assert_eq!(g("-membind firsttouch a").binding.mem, Some(MemBind::FirstTouch));
        let b = g("-membind=bind:0,2-3 -bind-to core a").binding;
        assert_eq!(b.mem.map(|m| m.to_string()).as_deref(), Some("bind:0,2-3"));
        assert_eq!(b.bind.to_string(), "core");
        assert_eq!(
            g("-n 1 a : -membind interleave b").binding.mem,
            Some(MemBind::Interleave(None))
        );
        assert!(g("-membind bind a").membind_given);
        // `none`, as Hydra scripts say it: nothing set, and HYDRA_MEMBIND not read either.
        let none = g("-membind none a");
        assert_eq!((none.binding.mem, none.membind_given), (None, true));
        assert_eq!(g("a").order_nodes, None);
        assert_eq!(g("-order-nodes descending a").order_nodes, Some(NodeOrder::Descending));
        assert_eq!(g("--order-nodes=ASCENDING a").order_nodes, Some(NodeOrder::Ascending));
        // nexttouch: accepted, a note under -v.
        let mut n = g("-membind nexttouch a");
        apply_env(&mut n, &|_| None).expect("env");
        assert_eq!(n.binding.mem, Some(MemBind::NextTouch));
        assert_eq!(n.notes, ["-membind nexttouch: nothing set (Linux has no next-touch policy)"]);
    }

    #[test]
    fn gpu_options() {
        use libi::job::GpuSplit;
        let g = |line: &str| p(line).expect(line).global.gpus;
        assert_eq!(g("a"), GpuSplit::default());
        assert_eq!(g("-gpus-per-proc 2 a"), GpuSplit { devices: Some(2), subdevs: None });
        assert_eq!(g("-gpus-per-proc=0 a"), GpuSplit { devices: Some(0), subdevs: None });
        assert_eq!(g("-gpus-per-proc 2 -n 1 a : -gpus-per-proc auto b"), GpuSplit::default());
        // Global: given in any segment; the last one wins.
        let both = g("-n 1 a : --gpu-subdevs-per-proc 3 -gpus-per-proc 1 b");
        assert_eq!(both, GpuSplit { devices: Some(1), subdevs: Some(3) });
        for v in ["-1", "x", "2x", "+2", "1.5", "AUTO", "99999999999"] {
            usage_error(
                &format!("-gpus-per-proc {v} a"),
                &format!("-gpus-per-proc: expected auto or a number (0 or more), got '{v}'"),
            );
        }
        usage_error("-gpu-subdevs-per-proc x a", "-gpu-subdevs-per-proc: expected auto");
        usage_error("-gpus-per-proc", "option '-gpus-per-proc' needs 1 value(s)");
    }

    #[test]
    fn singleton_and_exitcodes() {
        let c = p("-pmi_args 4711 default_interface default_key 99").expect("parse");
        assert_eq!(c.global.singleton_port, Some(4711));
        assert!(c.execs.is_empty());
        assert!(matches!(p("-pmi_args 0 a b 1"), Err(CliError::Usage(_))));
        assert!(matches!(p("-pmi_args 12 a b"), Err(CliError::Usage(_))));
        assert!(matches!(p("-pmi_args 12 a b 1 prog"), Err(CliError::Usage(_))));
        let c = p("-print-all-exitcodes -n 2 x").expect("parse");
        assert!(c.global.print_all_exitcodes);
    }

    /// Two environment modes contradict (Hydra: "duplicate setting"): refused, whichever
    /// the order, globally across segments and per program.
    #[test]
    fn environment_modes_contradict() {
        for (line, want) in [
            ("-genvall -genvnone -n 1 x", "-genvall and -genvnone contradict"),
            ("-genvnone -genvlist A -n 1 x", "-genvnone and -genvlist contradict"),
            ("-genvnone -n 1 x : -genvall -n 1 y", "-genvnone and -genvall contradict"),
            ("-n 1 -envall -envnone x", "-envall and -envnone contradict"),
            ("-n 1 -envlist A -envnone x", "-envnone and -envlist contradict"),
        ] {
            match p(line) {
                Err(CliError::Usage(m)) => assert!(m.contains(want), "{line}: {m}"),
                other => panic!("{line}: {:?}", other.map(|c| c.execs.len())),
            }
        }
        // One mode per program is fine, different in each.
        assert!(p("-n 1 -envnone x : -n 1 -envall y").is_ok());
    }

    #[test]
    fn hydra5_placement_options() {
        let c = p("-skip-launch-node -hybrid-hosts -rankmap 1,0,1 -n 2 x").expect("parse");
        assert!(c.global.skip_launch_node && c.global.hybrid_hosts);
        assert_eq!(c.global.rankmap, Some(vec![1, 0, 1]));
        let c = p("-rankmap (vector,(0,2,1),(1,1,2)) -n 4 x").expect("parse");
        assert_eq!(c.global.rankmap, Some(vec![0, 1, 1, 1]));
        assert_eq!(parse_rankmap(" ( vector , (3,1,2) ) "), Ok(vec![3, 3]));
        for (bad, what) in [
            ("-rankmap 1,,2 x", "'' is not a node index"),
            ("-rankmap -1 x", "'-1' is not a node index"),
            ("-rankmap (vector) x", "no rank is placed"),
            ("-rankmap (vector,(0,1,1) x", "unclosed block"),
            ("-rankmap (vector,(0,1,1,1)) x", "is not (start,nodes,ranks)"),
            ("-rankmap (vector,(0,4294967295,4294967295)) x", "too many entries"),
            (
                "-rankmap (vector,(0,4294967295,0),(0,1,1)) x",
                "block (0,4294967295,0) places no rank",
            ),
            ("-rankmap (vector,(0,0,1)) x", "block (0,0,1) places no rank"),
            ("-rankmap (list,(0,1,1)) x", "expected (vector"),
        ] {
            usage_error(bad, what);
        }
        let c = p("-memory-alloc-kinds mpi:alloc_mem,cuda:device -n 1 x").expect("parse");
        assert_eq!(c.global.memory_alloc_kinds.as_deref(), Some("mpi:alloc_mem,cuda:device"));
        usage_error("-memory-alloc-kinds= x", "empty value");
    }
}
