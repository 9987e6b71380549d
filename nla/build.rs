//! Link `libi-nla` statically (a static PIE) where the C library allows it, with the part of
//! the C library it calls at run time laid out together.
//!
//! Why: one agent runs on every node of a job. Linked against the shared C library it maps
//! `libc.so` and `ld.so` (1.4 MB resident, most of it never called) and pays the dynamic
//! loader at every start. Linked statically it carries only the C library functions it
//! references (~860 kB, most of them behind `getaddrinfo`: name services, the resolver,
//! `dlopen`), starts without a loader, and needs no shared library on the compute nodes.
//! The kernel maps code in aligned 64 kB windows around each page a process touches (fault
//! around), so the ~120 kB of those functions that run (`libc-hot.txt`) are placed first,
//! where they fill two windows instead of touching most of the 860 kB. `bench/results.md`
//! (Targets of issue 20) has the measured sizes.
//!
//! How, on stable Cargo: `-C target-feature=+crt-static` can only be given to every crate of
//! a build (proc-macro and cdylib crates refuse it), so this does at the link step of this
//! one binary what that flag does. rustc links the standard library's C dependencies as
//! `-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc` in dynamic mode; a directory searched before
//! the system's, holding only static archives under those names (links to the system's
//! `libc.a` and friends; `libgcc_s` to `libgcc_eh`, the static unwinder), makes the linker
//! take the archives, and `-static-pie` makes the compiler driver use the static start
//! files. Only the binaries of this package get this (`rustc-link-arg-bins`), not its tests.
//!
//! Name lookups: a static glibc resolves host names with its built-in `files` and `dns`
//! sources; an `nsswitch.conf` that names other modules for `hosts` (sss, ldap) makes it load
//! them, which works only with the same glibc version. The agent resolves names only where
//! it starts child agents by name over ssh; where that matters, link it dynamically.
//!
//! `LIBI_NLA_DYNAMIC=1` links it dynamically. Where an archive or the static start file is
//! missing (no `libc6-dev`, another C library), it links dynamically and says so.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=libc-hot.txt");
    println!("cargo:rerun-if-env-changed=LIBI_NLA_DYNAMIC");
    println!("cargo:rerun-if-env-changed=CC");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if !var("LIBI_NLA_DYNAMIC").is_empty() && var("LIBI_NLA_DYNAMIC") != "0" {
        return;
    }
    if var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ENV") != "gnu"
        || var("CARGO_CFG_TARGET_FEATURE").split(',').any(|f| f == "crt-static")
    {
        return;
    }
    let dir = match archives() {
        Ok(dir) => dir,
        Err(why) => {
            println!("cargo:warning=libi-nla is linked dynamically: {why}");
            return;
        }
    };
    // `-L` as a link argument: after rustc's own search paths, before the system's.
    println!("cargo:rustc-link-arg-bins=-L{}", dir.display());
    println!("cargo:rustc-link-arg-bins=-static-pie");
    if links_with_lld() {
        let order = Path::new(&var("CARGO_MANIFEST_DIR")).join("libc-hot.txt");
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", order.display());
        // The list names functions of one glibc build; others may lack some of them.
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// The directory of static archives named as rustc asks for the shared libraries.
fn archives() -> Result<PathBuf, String> {
    let cc = std::env::var("CC").ok().filter(|c| !c.is_empty()).unwrap_or_else(|| "cc".into());
    let find = |file: &str| -> Result<PathBuf, String> {
        let out = Command::new(&cc)
            .arg(format!("-print-file-name={file}"))
            .output()
            .map_err(|e| format!("cannot run {cc}: {e}"))?;
        let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        // The driver prints the bare name when it does not find the file.
        if p.is_absolute() && p.exists() {
            Ok(p)
        } else {
            Err(format!("{cc} finds no {file}"))
        }
    };
    find("rcrt1.o")?;
    let dir = PathBuf::from(std::env::var("OUT_DIR").map_err(|e| e.to_string())?).join("static");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (name, archive) in [
        ("libc.a", "libc.a"),
        ("libm.a", "libm.a"),
        ("libdl.a", "libdl.a"),
        ("librt.a", "librt.a"),
        ("libpthread.a", "libpthread.a"),
        ("libutil.a", "libutil.a"),
        ("libgcc_s.a", "libgcc_eh.a"),
    ] {
        let at = dir.join(name);
        let _ = std::fs::remove_file(&at);
        std::os::unix::fs::symlink(find(archive)?, &at)
            .map_err(|e| format!("{}: {e}", at.display()))?;
    }
    Ok(dir)
}

/// Whether rustc links with its own lld (the default for x86_64 Linux since Rust 1.90), which
/// takes `--symbol-ordering-file`; the GNU linker does not.
fn links_with_lld() -> bool {
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if flags.contains("linker-features") || flags.contains("link-self-contained") {
        return false;
    }
    if std::env::var("TARGET").as_deref() != Ok("x86_64-unknown-linux-gnu") {
        return false;
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("-vV").output() else { return false };
    let text = String::from_utf8_lossy(&out.stdout);
    let minor = text
        .lines()
        .find_map(|l| l.strip_prefix("release: "))
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse::<u32>().ok());
    minor.is_some_and(|m| m >= 90)
}
