//! Our `libpmi.so` and `libpmi2.so` taken by path, as MPI libraries that `dlopen` their PMI
//! do: every function MPICH's own `pmi.h` / `pmi2.h` declares must resolve (the names are
//! parsed from MPICH's headers, not from ours), and a job runs through the resolved
//! pointers under `libi-mpiexec`, on one node and on 4 simulated nodes: init,
//! put/commit/barrier (fence)/get, the node's ranks (`PMI_Get_clique_ranks`,
//! `PMI2_Info_GetSize`) and a spawn of 2 children (`PMI_Spawn_multiple`, `PMI2_Job_Spawn`)
//! that start, see themselves spawned and read the parent's pre-put pair.
//!
//! MPICH's headers come from Debian's mpich source that `ci/mpich-source.sh` unpacks into
//! `target/mpich-testsuite` (`ci/test.sh` runs it before `cargo test`), or from the MPICH
//! source tree named by `LIBI_MPICH_SRC`. Without them these tests print a line and pass,
//! except under `LIBI_REQUIRE_MPICH_SRC=1` (CI), where they fail. The test program
//! (`tests/programs/pmi_dlopen.c`) is compiled against MPICH's header itself, so each call
//! goes through a pointer of the type MPICH declares.
//!
//! Beyond MPICH's headers, the functions Slurm's libraries export must resolve too: Slurm's
//! `pmi2.h` is parsed when installed (`libpmi2-0-dev`, ci/install-deps.sh), and Slurm's
//! libpmi list (its `pmi.h` is not installed here) is [`SLURM_PMI1`].
//!
//! The libraries are the cdylibs of `libi-pmi1` / `libi-pmi2` next to `libi-mpiexec`
//! (`cargo build --workspace` first when running `cargo test -p libi-mpiexec` alone).

mod common;

use common::{cc_program, run, MPIEXEC};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What Slurm's libpmi.so.0 (Debian's libpmi0, Slurm 22.05) exports, beyond nothing: its
/// `pmi.h` declares exactly these.
const SLURM_PMI1: &[&str] = &[
    "PMI_Abort",
    "PMI_Args_to_keyval",
    "PMI_Barrier",
    "PMI_Finalize",
    "PMI_Free_keyvals",
    "PMI_Get_appnum",
    "PMI_Get_clique_ranks",
    "PMI_Get_clique_size",
    "PMI_Get_id",
    "PMI_Get_id_length_max",
    "PMI_Get_kvs_domain_id",
    "PMI_Get_options",
    "PMI_Get_rank",
    "PMI_Get_size",
    "PMI_Get_universe_size",
    "PMI_Init",
    "PMI_Initialized",
    "PMI_KVS_Commit",
    "PMI_KVS_Create",
    "PMI_KVS_Destroy",
    "PMI_KVS_Get",
    "PMI_KVS_Get_key_length_max",
    "PMI_KVS_Get_my_name",
    "PMI_KVS_Get_name_length_max",
    "PMI_KVS_Get_value_length_max",
    "PMI_KVS_Iter_first",
    "PMI_KVS_Iter_next",
    "PMI_KVS_Put",
    "PMI_Lookup_name",
    "PMI_Parse_option",
    "PMI_Publish_name",
    "PMI_Spawn_multiple",
    "PMI_Unpublish_name",
];

/// The root of MPICH's source (holding `src/pmi`), or `None` (after a printed line) when
/// there is none and `LIBI_REQUIRE_MPICH_SRC` is not set.
fn mpich_src() -> Option<PathBuf> {
    let default = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/mpich-testsuite");
    let dir = std::env::var_os("LIBI_MPICH_SRC").map(PathBuf::from).unwrap_or(default);
    if dir.join("src/pmi/include/pmi.h").exists() {
        return Some(dir);
    }
    assert!(
        std::env::var("LIBI_REQUIRE_MPICH_SRC").is_err(),
        "LIBI_REQUIRE_MPICH_SRC is set but {} has no src/pmi/include/pmi.h: run ci/mpich-source.sh \
         (or point LIBI_MPICH_SRC at an MPICH source tree)",
        dir.display()
    );
    eprintln!(
        "pmi_api tests skipped: no MPICH source at {} (run ci/mpich-source.sh or set LIBI_MPICH_SRC)",
        dir.display()
    );
    None
}

/// The names of the functions a C header declares: comments, preprocessor lines and
/// string literals taken out, the rest cut at `;`, `{` and `}`; a declaration is a statement
/// whose text before its first `(` ends in an identifier that starts with `PMI` (`PMI_`,
/// `PMI2_`, `PMIX_`) and that is not a `typedef`. Sorted, without repeats.
fn declared_functions(header: &str) -> Vec<String> {
    // Comments and string literals out (a `/*` inside a string does not open a comment).
    let mut text = String::with_capacity(header.len());
    let mut chars = header.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut prev = ' ';
                for d in chars.by_ref() {
                    if prev == '*' && d == '/' {
                        break;
                    }
                    prev = d;
                }
                text.push(' ');
            }
            '/' if chars.peek() == Some(&'/') => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        break;
                    }
                }
                text.push('\n');
            }
            '"' => {
                let mut esc = false;
                for d in chars.by_ref() {
                    if !esc && d == '"' {
                        break;
                    }
                    esc = !esc && d == '\\';
                }
                text.push_str("\"\"");
            }
            c => text.push(c),
        }
    }
    // Preprocessor lines out, with their continuations.
    let mut code = String::new();
    let mut continued = false;
    for line in text.lines() {
        let directive = continued || line.trim_start().starts_with('#');
        continued = directive && line.trim_end().ends_with('\\');
        if !directive {
            code.push_str(line);
            code.push('\n');
        }
    }
    let mut names: Vec<String> = code
        .split([';', '{', '}'])
        .filter_map(|stmt| {
            let stmt = stmt.trim();
            if stmt.starts_with("typedef") {
                return None;
            }
            let head = stmt.get(..stmt.find('(')?)?.trim_end();
            let start =
                head.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
            let name = head.get(start..)?;
            // A return type must come before the name.
            (name.starts_with("PMI") && start > 0).then(|| name.to_owned())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The directory holding our libpmi.so / libpmi2.so (the cargo profile dir).
fn lib(name: &str) -> String {
    let dir = Path::new(MPIEXEC).parent().expect("target dir");
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} is missing: build the client libraries first (`cargo build --workspace`, or \
         `cargo build -p libi-pmi1 -p libi-pmi2` with the same profile and target dir)",
        p.display()
    );
    p.to_string_lossy().into_owned()
}

/// One of the two APIs: its library, MPICH's header, the test program built against it.
struct Api {
    lib: String,
    /// Functions MPICH's header declares.
    mpich: Vec<String>,
    prog: String,
}

fn api(v2: bool) -> Option<&'static Api> {
    static APIS: OnceLock<Option<(Api, Api)>> = OnceLock::new();
    let apis = APIS.get_or_init(|| {
        let src = mpich_src()?.join("src/pmi");
        let out =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("pmi-api-{}", std::process::id()));
        let build = |v2: bool| {
            let (inc, header, lib_name, name) = if v2 {
                (src.join("pmi2/include"), "pmi2.h", "libpmi2.so", "pmi2_dlopen")
            } else {
                (src.join("include"), "pmi.h", "libpmi.so", "pmi1_dlopen")
            };
            let mpich = declared_functions(&read(&inc.join(header)));
            let inc = format!("-I{}", inc.display());
            let defs: &[&str] = if v2 { &["-DPMI_V2", "-DUSE_PMI2_API"] } else { &["-DPMI_V1"] };
            let mut args = defs.to_vec();
            args.extend([inc.as_str(), "-ldl"]);
            let prog = cc_program(&out, name, "pmi_dlopen.c", &args);
            Api { lib: lib(lib_name), mpich, prog: prog.to_string_lossy().into_owned() }
        };
        Some((build(false), build(true)))
    });
    apis.as_ref().map(|(a1, a2)| if v2 { a2 } else { a1 })
}

/// Resolve `names` in `lib` with dlsym (the test program's `check` mode): fails listing
/// every missing symbol.
fn resolve_all(a: &Api, names: &[String], what: &str) {
    let mut args: Vec<&str> = vec![&a.lib, "check"];
    args.extend(names.iter().map(String::as_str));
    let out = std::process::Command::new(&a.prog).args(&args).output().expect("run pmi_dlopen");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let missing: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix("missing ")).collect();
    assert!(
        out.status.success() && missing.is_empty(),
        "{} lacks {} of the {} functions {what} declares: {}\n{stdout}{}",
        a.lib,
        missing.len(),
        names.len(),
        missing.join(", "),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&format!("resolved {0} of {0}", names.len())), "{stdout}");
}

/// Every function parsed from MPICH's `header` resolves; the parse found at least `min`
/// functions (4.0.2: 20 in pmi.h, 19 in pmi2.h) and `must` among them, so a parser that
/// finds nothing cannot pass.
fn resolve_mpich(a: &Api, min: usize, must: &str, header: &str) {
    assert!(
        a.mpich.len() >= min && a.mpich.iter().any(|n| n == must),
        "MPICH's {header} parsed to too little: {:?}",
        a.mpich
    );
    resolve_all(a, &a.mpich, &format!("MPICH's {header}"));
}

#[test]
fn header_parser_finds_prototypes_only() {
    let h = "#define PMI_X(a) f(a)\n#ifdef Y\n#error no \\\n  int PMI_Fake(void);\n#endif\n\
             /* int PMI_Commented(void); */ // int PMI_Line(void);\n\
             typedef struct PMI_keyval_t { const char *key; int (*PMI_cb)(void); } PMI_keyval_t;\n\
             typedef int (*PMI_fn_t)(int);\n\
             int PMI_Init(int *spawned);\n    int PMI_Spawn_multiple(int count,\n  \
             const char *cmds[],\n  int errors[]);\nint PMI2_Job_Spawn(const char *s = \"x(\");\n\
             PMI_API_PUBLIC int PMIX_Ring(const char v[]);\nint other(int PMI_arg);\n";
    assert_eq!(
        declared_functions(h),
        ["PMI2_Job_Spawn", "PMIX_Ring", "PMI_Init", "PMI_Spawn_multiple"]
    );
}

/// Every function of MPICH's pmi.h, and of Slurm's libpmi, resolves in our libpmi.so.
#[test]
fn pmi1_exports_every_function_of_mpichs_header() {
    let Some(a) = api(false) else { return };
    resolve_mpich(a, 20, "PMI_Spawn_multiple", "pmi.h");
    let slurm: Vec<String> = SLURM_PMI1.iter().map(|s| s.to_string()).collect();
    resolve_all(a, &slurm, "Slurm's libpmi");
    // A symbol that is not there fails the check, named.
    let names = vec!["PMI_Init".to_owned(), "PMI_Not_there".to_owned()];
    let err = std::panic::catch_unwind(|| resolve_all(a, &names, "a test list"));
    let msg = err.expect_err("a missing symbol must fail");
    let msg = msg.downcast_ref::<String>().map_or("", String::as_str);
    assert!(msg.contains("lacks 1 of the 2") && msg.contains("PMI_Not_there"), "{msg}");
}

/// Every function of MPICH's pmi2.h, and of Slurm's pmi2.h, resolves in our libpmi2.so.
#[test]
fn pmi2_exports_every_function_of_mpichs_header() {
    let Some(a) = api(true) else { return };
    resolve_mpich(a, 19, "PMI2_Job_Spawn", "pmi2.h");
    let slurm = Path::new("/usr/include/slurm/pmi2.h");
    if slurm.exists() {
        resolve_all(a, &declared_functions(&read(slurm)), "Slurm's pmi2.h");
    } else {
        eprintln!("Slurm's pmi2.h not installed (libpmi2-0-dev): its list not checked");
    }
}

/// A job of `cliques.len()` ranks through the resolved pointers; `cliques[r]` is what rank r
/// must see as its node's ranks (PMI-1: the list, PMI-2: the count). Returns nothing: checks every
/// line (each rank's, the spawn's result, both children's).
fn job(v2: bool, hosts: Option<&str>, cliques: &[&str]) {
    let Some(a) = api(v2) else { return };
    let n = cliques.len();
    let ns = n.to_string();
    let mut args: Vec<&str> = Vec::new();
    if let Some(h) = hosts {
        args.extend(["-launcher", "fork", "-hosts", h]);
    }
    args.extend(["-n", &ns, &a.prog, &a.lib, "run"]);
    let r = run(&args, b"");
    let ctx = format!("{hosts:?} -n {n} ({}):\n{}\n{}", a.lib, r.stdout, r.stderr);
    assert_eq!(r.status, 0, "{ctx}");
    assert!(!r.stdout.contains("FAIL"), "{ctx}");
    let mut kvs = None;
    for (rank, clique) in cliques.iter().enumerate() {
        let prefix = format!("rank {rank}/{n} ok ");
        let line = r.stdout.lines().find(|l| l.starts_with(&prefix));
        let line = line.unwrap_or_else(|| panic!("no line of rank {rank}: {ctx}"));
        let want = if v2 { format!("local={clique} ") } else { format!("clique={clique} ") };
        assert!(line.contains(&want), "rank {rank} wants {want}: {ctx}");
        let k = line.rsplit("kvs=").next().map(str::to_owned);
        assert!(kvs.is_none() || kvs == k, "one KVS for the job: {ctx}");
        kvs = k;
    }
    let kvs = kvs.expect("a kvs name");
    let spawn = if v2 { "spawn rc=0 errors=0,0 jobid=new" } else { "spawn rc=0 errors=0,0" };
    assert_eq!(r.stdout.lines().filter(|l| *l == spawn).count(), 1, "{ctx}");
    for c in 0..2 {
        let want = format!("child {c}/2 spawned=1 parent=port-of-{kvs}");
        assert!(r.stdout.lines().any(|l| l == want), "missing '{want}': {ctx}");
    }
    assert_eq!(r.stdout.lines().count(), n + 3, "{ctx}");
}

/// Four simulated nodes of two slots (ranks 0,1 on n1, 2,3 on n2, ...).
const NODES4: &str = "n1:2,n2:2,n3:2,n4:2";

#[test]
fn pmi1_job_through_dlsym_one_node() {
    job(false, None, &["0,1,2"; 3]);
}

#[test]
fn pmi1_job_through_dlsym_four_nodes() {
    job(false, Some(NODES4), &["0,1", "0,1", "2,3", "2,3", "4,5", "4,5", "6,7", "6,7"]);
}

#[test]
fn pmi2_job_through_dlsym_one_node() {
    job(true, None, &["3"; 3]);
}

#[test]
fn pmi2_job_through_dlsym_four_nodes() {
    job(true, Some(NODES4), &["2"; 8]);
}
