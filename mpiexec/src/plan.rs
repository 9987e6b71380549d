//! From the command line to the job: executables with their final environment, rank
//! placement, the per-node setups.

use crate::cli::{CommandLine, EnvMode};
use libi::job::{process_mapping, AppSpec, NodeSetup, RankSlot};

/// Variables of the front end's environment that never reach ranks (spec §6, §12.12): an
/// outer job's PMI/PMIx settings would confuse MPICH's PMI selection.
pub fn inherited_ok(name: &str) -> bool {
    !(name.starts_with("PMI_")
        || name.starts_with("PMIX_")
        || name.starts_with("PMI2_")
        || name == "PRTE_LAUNCHED"
        || name == "LIBI_JOB")
}

/// The environment of one executable's ranks, Hydra's rules: the executable's own mode
/// (`-envall/-envnone/-envlist`) or else the global one, then `-genv` pairs, then `-env` pairs.
pub fn app_env(
    inherited: &[(String, String)],
    global_mode: &EnvMode,
    local_mode: Option<&EnvMode>,
    genv: &[(String, String)],
    env: &[(String, String)],
) -> Vec<(String, String)> {
    let mode = local_mode.unwrap_or(global_mode);
    let mut out: Vec<(String, String)> = match mode {
        EnvMode::All => inherited.iter().filter(|(k, _)| inherited_ok(k)).cloned().collect(),
        EnvMode::None => Vec::new(),
        EnvMode::List(names) => inherited
            .iter()
            .filter(|(k, _)| names.iter().any(|n| n == k))
            .cloned()
            .collect(),
    };
    for (k, v) in genv.iter().chain(env) {
        out.retain(|(ek, _)| ek != k);
        out.push((k.clone(), v.clone()));
    }
    out
}

/// The whole job as the front end plans it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub size: u32,
    pub apps: Vec<AppSpec>,
    /// Setups of the NLAs, in node order (node ids 1..).
    pub nodes: Vec<NodeSetup>,
}

/// Settings that do not come from the command line.
pub struct Context {
    pub inherited: Vec<(String, String)>,
    pub cwd: Option<String>,
    pub default_n: u32,
    pub kvsname: String,
    pub kill_grace_ms: u64,
}

/// Plan a single-node job: every rank on the local host.
pub fn plan(cl: &CommandLine, ctx: &Context) -> Plan {
    let g = &cl.global;
    let lone = cl.execs.len() == 1;
    let apps: Vec<AppSpec> = cl
        .execs
        .iter()
        .map(|e| AppSpec {
            exe: e.prog.clone(),
            args: e.args.clone(),
            nprocs: e.n.unwrap_or(if lone { ctx.default_n } else { 1 }),
            env: app_env(&ctx.inherited, &g.genv_mode, e.env_mode.as_ref(), &g.genv, &e.env),
            wdir: e.wdir.clone().or_else(|| g.gwdir.clone()).or_else(|| ctx.cwd.clone()),
        })
        .collect();
    let size: u32 = apps.iter().map(|a| a.nprocs).sum();
    let mut ranks = Vec::with_capacity(size as usize);
    let mut r = 0;
    for (i, a) in apps.iter().enumerate() {
        for _ in 0..a.nprocs {
            ranks.push(RankSlot { rank: r, app: i as u32 });
            r += 1;
        }
    }
    let mut preput = Vec::new();
    if let Some(m) = process_mapping(&[size]) {
        preput.push(("PMI_process_mapping".to_string(), m));
    }
    let node = NodeSetup {
        node: 1,
        host: local_host(),
        size,
        universe_size: g.usize.unwrap_or(size as i32),
        kvsname: ctx.kvsname.clone(),
        preput,
        apps: apps.clone(),
        ranks,
        stdin_rank0: true,
        kill_grace_ms: ctx.kill_grace_ms,
        verbose: g.verbose,
    };
    Plan { size, apps, nodes: vec![node] }
}

pub fn local_host() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(a: &[(&str, &str)]) -> Vec<(String, String)> {
        a.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn env_rules() {
        let inh = kv(&[("PATH", "/bin"), ("HOME", "/h"), ("PMI_FD", "9"), ("PMIX_RANK", "1")]);
        let all = app_env(&inh, &EnvMode::All, None, &kv(&[("A", "1")]), &kv(&[("A", "2")]));
        assert_eq!(all, kv(&[("PATH", "/bin"), ("HOME", "/h"), ("A", "2")]));
        let none = app_env(&inh, &EnvMode::None, None, &kv(&[("A", "1")]), &[]);
        assert_eq!(none, kv(&[("A", "1")]));
        let list = app_env(&inh, &EnvMode::All, Some(&EnvMode::List(vec!["HOME".into()])), &[], &[]);
        assert_eq!(list, kv(&[("HOME", "/h")]));
        // an explicit -genv may set a PMI_ variable (PMI_DEBUG, say)
        let dbg = app_env(&inh, &EnvMode::None, None, &kv(&[("PMI_DEBUG", "1")]), &[]);
        assert_eq!(dbg, kv(&[("PMI_DEBUG", "1")]));
    }
}
