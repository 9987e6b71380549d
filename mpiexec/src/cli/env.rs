//! The environment's say: Hydra's `HYDRA_*` equivalents of options, for what the command
//! line left unset ([`apply_env`]), and `MPIEXEC_TIMEOUT` ([`mpiexec_timeout`]).

use super::Global;

/// A variable of the environment that does not say what it must: one line, naming it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvError {
    /// A `HYDRA_*` variable whose value does not parse: its name, and why.
    #[error("{var}: {why}")]
    Value { var: &'static str, why: String },
    /// `HYDRA_LAUNCHER` (`HYDRA_BOOTSTRAP`) names no launcher we know: the variable, and why.
    #[error("{var}: {why}")]
    Launcher { var: &'static str, why: libi::job::UnknownLauncher },
    /// `HYDRA_BINDING`, `HYDRA_MAPPING` or `HYDRA_MEMBIND` does not parse: its name, and why.
    #[error("{var}: {why}")]
    BindingValue { var: &'static str, why: libi_binding::OptionError },
    /// The binding and the mapping (options or variables) do not go together.
    #[error("{0}")]
    Binding(libi_binding::OptionError),
    /// `MPIEXEC_TIMEOUT` is not a number of seconds: its value.
    #[error("MPIEXEC_TIMEOUT must be a number of seconds (0 or -1: none), got '{0}'")]
    Timeout(String),
}

/// The error for variable `var`, given why.
fn bad(var: &'static str) -> impl Fn(String) -> EnvError {
    move |why| EnvError::Value { var, why }
}

/// The error for binding variable `var`, given why.
fn bad_binding(var: &'static str) -> impl Fn(libi_binding::OptionError) -> EnvError {
    move |why| EnvError::BindingValue { var, why }
}

/// The most `HYDRA_PROXY_RETRY_COUNT` asks of an NLA (a bigger count is taken as this).
const MAX_CONNECT_RETRIES: i64 = 100;

/// Hydra's environment equivalents of options, for what the command line left unset
/// (options win): `HYDRA_HOST_FILE`, `HYDRA_LAUNCHER` (or its older name `HYDRA_BOOTSTRAP`),
/// `HYDRA_LAUNCHER_EXEC` (`HYDRA_BOOTSTRAP_EXEC`), `HYDRA_RMK`, `HYDRA_BINDING`,
/// `HYDRA_MAPPING`, `HYDRA_MEMBIND`, `HYDRA_IFACE`, `HYDRA_DEBUG`, `HYDRA_TOPO_DEBUG`,
/// `HYDRA_ENV=all`, `HYDRA_LAUNCHER_EXTRA_ARGS`, `HYDRA_LAUNCHER_SSH_LIMIT`,
/// `HYDRA_PROXY_RETRY_COUNT`. `get` looks a variable
/// up (empty counts as unset).
pub fn apply_env(g: &mut Global, get: &dyn Fn(&str) -> Option<String>) -> Result<(), EnvError> {
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    // The first of `names` that is set: its name and value.
    let first = |names: &[&'static str]| names.iter().find_map(|&n| get(n).map(|v| (n, v)));
    if g.hosts.is_none() && g.hostfile.is_none() {
        g.hostfile = get("HYDRA_HOST_FILE");
        g.hostfile_from_env = g.hostfile.is_some();
    }
    if g.launcher.is_none() {
        if let Some((name, v)) = first(&["HYDRA_LAUNCHER", "HYDRA_BOOTSTRAP"]) {
            let launcher = v.trim().parse().map_err(|why| EnvError::Launcher { var: name, why })?;
            g.launcher = Some(launcher);
        }
    }
    if g.launcher_exec.is_none() {
        g.launcher_exec = first(&["HYDRA_LAUNCHER_EXEC", "HYDRA_BOOTSTRAP_EXEC"]).map(|(_, v)| v);
    }
    // Hydra splits it at whitespace (no quoting) and puts the words before the host.
    if let Some(v) = get("HYDRA_LAUNCHER_EXTRA_ARGS") {
        g.launcher_extra_args = v.split_whitespace().map(str::to_string).collect();
    }
    // Hydra passes it to each proxy (`--retries`), which tries its connection to mpiexec
    // that many more times. A negative count means no retry (Hydra takes -1 too). At most
    // 100 (~20 s of tries): an NLA whose parent is gone for good should not linger longer.
    if let Some(v) = get("HYDRA_PROXY_RETRY_COUNT") {
        match v.trim().parse::<i64>() {
            Ok(n) => g.connect_retries = Some(n.clamp(0, MAX_CONNECT_RETRIES) as u32),
            Err(_) => {
                return Err(bad("HYDRA_PROXY_RETRY_COUNT")(format!("expected a number, got '{v}'")))
            }
        }
    }
    // Hydra's cap on ssh launches in flight: each launching NLA's batch.
    if g.launch_batch.is_none() {
        if let Some(v) = get("HYDRA_LAUNCHER_SSH_LIMIT") {
            match v.trim().parse::<u32>() {
                Ok(n) if n > 0 => g.launch_batch = Some(n),
                _ => {
                    let why = format!("expected a positive number, got '{v}'");
                    return Err(bad("HYDRA_LAUNCHER_SSH_LIMIT")(why));
                }
            }
        }
    }
    if g.rmk.is_none() {
        if let Some(v) = get("HYDRA_RMK") {
            g.rmk = Some(v.trim().parse().map_err(bad("HYDRA_RMK"))?);
        }
    }
    if !g.bind_given {
        if let Some(v) = get("HYDRA_BINDING") {
            g.binding.bind =
                libi_binding::parse_bind(v.trim()).map_err(bad_binding("HYDRA_BINDING"))?;
        }
    }
    if !g.map_given {
        if let Some(v) = get("HYDRA_MAPPING") {
            g.binding.map =
                Some(libi_binding::parse_map(v.trim()).map_err(bad_binding("HYDRA_MAPPING"))?);
        }
    }
    if !g.membind_given {
        if let Some(v) = get("HYDRA_MEMBIND") {
            g.binding.mem = libi_binding::parse_membind_or_none(v.trim())
                .map_err(bad_binding("HYDRA_MEMBIND"))?;
        }
    }
    if g.binding.mem == Some(libi_binding::MemBind::NextTouch) {
        g.notes.push("-membind nexttouch: nothing set (Linux has no next-touch policy)".into());
    }
    if g.iface.is_none() && g.localhost.is_none() {
        g.iface = get("HYDRA_IFACE").map(|v| v.trim().to_string());
    }
    // Booleans as Hydra reads them; -v on the command line wins.
    let boolean = |name: &'static str| -> Result<bool, EnvError> {
        let Some(v) = get(name) else { return Ok(false) };
        match v.trim().to_ascii_lowercase().as_str() {
            "1" | "yes" | "true" | "on" => Ok(true),
            "0" | "no" | "false" | "off" => Ok(false),
            _ => Err(bad(name)(format!("expected a boolean (1/0, yes/no), got '{v}'"))),
        }
    };
    g.verbose |= boolean("HYDRA_DEBUG")?;
    // Each rank's binding, one line each, as -v shows it (Hydra: "process N binding: ...").
    g.binding.report |= boolean("HYDRA_TOPO_DEBUG")?;
    if let Some(v) = get("HYDRA_ENV") {
        // Hydra knows one value; passing everything is our default anyway, and an explicit
        // -genvnone/-genvlist wins.
        if v.trim() != "all" {
            return Err(bad("HYDRA_ENV")(format!("expected 'all', got '{v}'")));
        }
    }
    // -bind-to and -map-by (or their variables) go together.
    g.binding.check().map_err(EnvError::Binding)
}

/// `MPIEXEC_TIMEOUT` (unset or empty: none): seconds, fractions allowed (`1.5`); as Hydra,
/// 0 and negative values (Hydra's `-1`) mean no timeout. Anything else (`abc`, `2x`, `1e3`) is
/// an error, where Hydra warns and runs without a timeout. (Hydra 5 runs `0` to the end and
/// then exits 255.)
pub fn mpiexec_timeout(v: Option<&str>) -> Result<Option<std::time::Duration>, EnvError> {
    let Some(t) = v.map(str::trim).filter(|t| !t.is_empty()) else { return Ok(None) };
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let decimal = !(whole.is_empty() && frac.is_empty())
        && whole.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit());
    let secs: f64 = match t.parse() {
        Ok(s) if decimal => s,
        _ => return Err(EnvError::Timeout(t.to_string())),
    };
    // Beyond what a Duration holds: never.
    Ok((secs > 0.0).then(|| std::time::Duration::try_from_secs_f64(secs).ok()).flatten())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::testing::p;
    use crate::cli::Rmk;
    use libi::job::LauncherKind;

    #[test]
    fn timeout_values() {
        use std::time::Duration;
        for (v, t) in [
            (None, None),
            (Some(""), None),
            (Some(" 0 "), None),
            (Some("-1"), None),
            (Some("-2.5"), None),
            (Some("0.0"), None),
            (Some("30"), Some(Duration::from_secs(30))),
            (Some("+2"), Some(Duration::from_secs(2))),
            (Some("1.5"), Some(Duration::from_millis(1500))),
            (Some(".25"), Some(Duration::from_millis(250))),
        ] {
            assert_eq!(mpiexec_timeout(v), Ok(t), "{v:?}");
        }
        assert_eq!(mpiexec_timeout(Some(&"9".repeat(400))), Ok(None));
        for bad in ["abc", "2x", "1e3", "inf", "NaN", ".", "-", "1.2.3", "1 2"] {
            let e = mpiexec_timeout(Some(bad)).expect_err(bad).to_string();
            assert_eq!(
                e,
                format!("MPIEXEC_TIMEOUT must be a number of seconds (0 or -1: none), got '{bad}'")
            );
        }
    }

    #[test]
    fn hydra_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let vars: &'static [(&str, &str)] = &[
            ("HYDRA_HOST_FILE", "/hf"),
            ("HYDRA_LAUNCHER", "fork"),
            ("HYDRA_LAUNCHER_EXEC", "/x/ssh"),
            ("HYDRA_RMK", "pbs"),
            ("HYDRA_ENV", "all"),
            ("HYDRA_LAUNCHER_EXTRA_ARGS", " -p 2222\t-o  A=b "),
        ];
        let mut g = p("x").expect("parse").global;
        apply_env(&mut g, &env(vars)).expect("env");
        assert_eq!(g.launcher_extra_args, ["-p", "2222", "-o", "A=b"]);
        assert_eq!(g.hostfile.as_deref(), Some("/hf"));
        assert_eq!(g.launcher, Some(LauncherKind::Fork));
        assert_eq!(g.launcher_exec.as_deref(), Some("/x/ssh"));
        assert_eq!(g.rmk, Some(Rmk::Pbs));
        // Options win.
        let mut g =
            p("-hosts a -launcher ssh -launcher-exec /y -rmk user x").expect("parse").global;
        apply_env(&mut g, &env(vars)).expect("env");
        assert_eq!((g.hostfile, g.hosts.as_deref()), (None, Some("a")));
        assert_eq!(g.launcher, Some(LauncherKind::Ssh));
        assert_eq!(g.launcher_exec.as_deref(), Some("/y"));
        assert_eq!(g.rmk, Some(Rmk::User));
        let mut g = p("x").expect("parse").global;
        assert!(apply_env(&mut g, &env(&[("HYDRA_LAUNCHER", "telnet")])).is_err());
        assert!(apply_env(&mut g, &env(&[("HYDRA_ENV", "none")])).is_err());
        // The older names, binding, mapping, interface, debug.
        let older: &'static [(&str, &str)] = &[
            ("HYDRA_BOOTSTRAP", "rsh"),
            ("HYDRA_BOOTSTRAP_EXEC", "/x/rsh"),
            ("HYDRA_BINDING", "core:2"),
            ("HYDRA_MAPPING", "socket"),
            ("HYDRA_IFACE", "eth7"),
            ("HYDRA_DEBUG", "1"),
            ("HYDRA_TOPO_DEBUG", "yes"),
        ];
        let mut g = p("x").expect("parse").global;
        assert!(!g.binding.report);
        apply_env(&mut g, &env(older)).expect("env");
        assert!(g.binding.report);
        assert!(apply_env(&mut g, &env(&[("HYDRA_TOPO_DEBUG", "x")])).is_err());
        assert_eq!(g.launcher, Some(LauncherKind::Rsh));
        assert_eq!(g.launcher_exec.as_deref(), Some("/x/rsh"));
        assert_eq!(g.binding.bind.to_string(), "core:2");
        assert_eq!(g.binding.map.map(|m| m.obj), Some(libi_binding::Object::Socket));
        assert_eq!(g.iface.as_deref(), Some("eth7"));
        assert!(g.verbose);
        // HYDRA_LAUNCHER before HYDRA_BOOTSTRAP; options before both; -bind-to none too.
        let mut g = p("x").expect("parse").global;
        apply_env(&mut g, &env(&[("HYDRA_LAUNCHER", "fork"), ("HYDRA_BOOTSTRAP", "rsh")]))
            .expect("env");
        assert_eq!(g.launcher, Some(LauncherKind::Fork));
        let mut g = p("-bind-to none -map-by core -iface lo x").expect("parse").global;
        apply_env(&mut g, &env(older)).expect("env");
        assert_eq!(g.binding.bind, libi_binding::BindTo::None);
        assert_eq!(g.binding.map.map(|m| m.obj), Some(libi_binding::Object::Core));
        assert_eq!(g.iface.as_deref(), Some("lo"));
        // HYDRA_MEMBIND when -membind is not given.
        let membind: &'static [(&str, &str)] = &[("HYDRA_MEMBIND", " interleave:1 ")];
        let mut g = p("x").expect("parse").global;
        apply_env(&mut g, &env(membind)).expect("env");
        assert_eq!(g.binding.mem.map(|m| m.to_string()).as_deref(), Some("interleave:1"));
        let mut g = p("-membind firsttouch x").expect("parse").global;
        apply_env(&mut g, &env(membind)).expect("env");
        assert_eq!(g.binding.mem, Some(libi_binding::MemBind::FirstTouch));
        for bad in [
            ("HYDRA_BINDING", "bogus"),
            ("HYDRA_MAPPING", "rr"),
            ("HYDRA_DEBUG", "maybe"),
            ("HYDRA_MEMBIND", "bind:x"),
        ] {
            let mut g = p("x").expect("parse").global;
            let e =
                apply_env(&mut g, &env(Box::leak(Box::new([bad])))).expect_err(bad.0).to_string();
            assert!(e.starts_with(bad.0), "{e}");
        }
    }

    #[test]
    fn hydra_launcher_ssh_limit_and_proxy_retry_count() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let mut g = p("x").expect("parse").global;
        apply_env(&mut g, &env(&[("HYDRA_LAUNCHER_SSH_LIMIT", "8")])).expect("env");
        assert_eq!(g.launch_batch, Some(8));
        let mut g = p("--launch-batch 2 x").expect("parse").global;
        apply_env(&mut g, &env(&[("HYDRA_LAUNCHER_SSH_LIMIT", "8")])).expect("env");
        assert_eq!(g.launch_batch, Some(2));
        for (v, want) in [("3", 3), (" 0 ", 0), ("-1", 0), ("5000", 100)] {
            let mut g = p("x").expect("parse").global;
            let vars = Box::leak(Box::new([("HYDRA_PROXY_RETRY_COUNT", v)]));
            apply_env(&mut g, &env(vars)).expect(v);
            assert_eq!(g.connect_retries, Some(want), "{v}");
        }
        let mut g = p("x").expect("parse").global;
        let e = apply_env(&mut g, &env(&[("HYDRA_PROXY_RETRY_COUNT", "ten")]))
            .expect_err("ten")
            .to_string();
        assert_eq!(e, "HYDRA_PROXY_RETRY_COUNT: expected a number, got 'ten'");
        for bad in ["0", "x", "-3"] {
            let mut g = p("x").expect("parse").global;
            let vars = Box::leak(Box::new([("HYDRA_LAUNCHER_SSH_LIMIT", bad)]));
            let e = apply_env(&mut g, &env(vars)).expect_err(bad).to_string();
            assert!(e.starts_with("HYDRA_LAUNCHER_SSH_LIMIT"), "{e}");
        }
    }
}
