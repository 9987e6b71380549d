//! Finds OpenPMIx's server library with `pkg-config pmix` (Debian's `libpmix-dev`), and
//! compiles and runs `probe/layout.c`, which prints the C sizes, offsets, constants and keys
//! that the hand-written binding (`src/ffi.rs`) must match; its unit test compares them.
//!
//! Without OpenPMIx (`pkg-config pmix` finds nothing) the package still builds, with the cfg
//! `no_pmix` and a build warning: the binary then only says, in one line, that it was built
//! without PMIx and exits 1 (the rest of the workspace, and the agent, need no libpmix).
//!
//! Linking is for this package's own executables only: the binary's `ffi` module names the
//! library (`#[link(name = "pmix")]`), and the search path and run path go out as
//! `rustc-link-arg`, which Cargo passes to this package's binaries and tests and to nothing
//! that depends on the library part (the protocol types), so the agent never links libpmix.

use std::path::PathBuf;
use std::process::{exit, Command};

fn fail(msg: &str) -> ! {
    // One line, as the build's whole explanation.
    eprintln!("error: libi-pmix: {msg}");
    exit(1)
}

/// What `pkg-config ARGS pmix` prints, or why it cannot tell.
fn pkg_config(args: &[&str]) -> Result<String, String> {
    let out = Command::new("pkg-config")
        .args(args)
        .arg("pmix")
        .output()
        .map_err(|e| format!("cannot run pkg-config ({e})"))?;
    if !out.status.success() {
        return Err("`pkg-config pmix` found no OpenPMIx".into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=probe/layout.c");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo::rustc-check-cfg=cfg(no_pmix)");
    let (cflags, libdirs) = match (pkg_config(&["--cflags"]), pkg_config(&["--libs-only-L"])) {
        (Ok(c), Ok(l)) => (c, l),
        (Err(e), _) | (_, Err(e)) => {
            println!(
                "cargo:warning=libi-pmix built without PMIx: {e}; install libpmix-dev \
                 (ci/install-deps.sh does) or set PKG_CONFIG_PATH"
            );
            println!("cargo:rustc-cfg=no_pmix");
            return;
        }
    };
    for dir in libdirs.split_whitespace().filter_map(|f| f.strip_prefix("-L")) {
        println!("cargo:rustc-link-arg=-L{dir}");
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_else(|| fail("no OUT_DIR")));
    let probe = out.join("layout");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = Command::new(&cc)
        .args(cflags.split_whitespace())
        .arg("probe/layout.c")
        .arg("-o")
        .arg(&probe)
        .status()
        .unwrap_or_else(|e| fail(&format!("cannot run the C compiler `{cc}` ({e})")));
    if !status.success() {
        fail("probe/layout.c did not compile against the pmix headers");
    }
    let run = Command::new(&probe)
        .output()
        .unwrap_or_else(|e| fail(&format!("cannot run the layout probe ({e})")));
    if !run.status.success() {
        fail("the layout probe failed");
    }
    if let Err(e) = std::fs::write(out.join("c_layout.rs"), run.stdout) {
        fail(&format!("cannot write c_layout.rs ({e})"));
    }
}
