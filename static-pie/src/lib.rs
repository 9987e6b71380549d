//! Link a package's binaries statically (static PIEs) where the C library allows it, with
//! the part of the C library they call at run time laid out together. Called from the build
//! scripts of `libi-nla` and `libi-mpiexec` ([`link_bins`]).
//!
//! Why: one agent runs on every node of a job, and the front end starts every job. Linked
//! against the shared C library a process maps `libc.so` and `ld.so` (1.4 MB resident, most
//! of it never called) and pays the dynamic loader at every start. Linked statically it
//! carries only the C library functions it references (~860 kB, most of them behind
//! `getaddrinfo`: name services, the resolver, `dlopen`), starts without a loader, and needs
//! no shared library on the compute nodes. The kernel maps code in aligned 64 kB windows
//! around each page a process touches (fault around), so the ~120 kB of those functions that
//! run (`nla/libc-hot.txt`) are placed first, where they fill two windows instead of touching
//! most of the 860 kB. `bench/results.md` (Targets of issue 20) has the measured sizes.
//!
//! How, on stable Cargo: `-C target-feature=+crt-static` can only be given to every crate of
//! a build (proc-macro and cdylib crates refuse it), so this does at the link step of one
//! package's binaries what that flag does. rustc links the standard library's C dependencies
//! as `-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc` in dynamic mode; a directory searched
//! before the system's, holding only static archives under those names (links to the
//! system's `libc.a` and friends; `libgcc_s` to `libgcc_eh`, the static unwinder), makes the
//! linker take the archives, and `-static-pie` makes the compiler driver use the static
//! start files. Only the binaries of the package get this (`rustc-link-arg-bins`), not its
//! tests.
//!
//! Name lookups: a static glibc resolves host names with its built-in `files` and `dns`
//! sources; an `nsswitch.conf` that names other modules for `hosts` (sss, ldap, myhostname)
//! makes it load them, which works only with the same glibc version. Where that matters,
//! link dynamically: `LIBI_NLA_DYNAMIC=1` (the agent), `LIBI_MPIEXEC_DYNAMIC=1` (the front
//! end). Where an archive or the static start file is missing (no `libc6-dev`, another C
//! library), the binary is linked dynamically and the build says so.

use std::path::{Path, PathBuf};
use std::process::Command;

/// From a build script: link the package's binaries as static PIEs, unless the environment
/// variable `dynamic` is set (and not `0`) or the C library lacks what it takes (then a
/// build warning naming `what`). `order`: the symbol ordering file (C library functions
/// that run, hottest first), used where rustc links with its own lld. The package's crates
/// see the outcome at compile time as `LIBI_LINKED` (`static` or `dynamic`).
pub fn link_bins(what: &str, dynamic: &str, order: &Path) {
    let linked = if static_pie(what, dynamic, order) { "static" } else { "dynamic" };
    println!("cargo:rustc-env=LIBI_LINKED={linked}");
}

/// [`link_bins`]; true when the binaries are linked statically.
fn static_pie(what: &str, dynamic: &str, order: &Path) -> bool {
    println!("cargo:rerun-if-changed={}", order.display());
    println!("cargo:rerun-if-env-changed={dynamic}");
    println!("cargo:rerun-if-env-changed=CC");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if !var(dynamic).is_empty() && var(dynamic) != "0" {
        return false;
    }
    if var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ENV") != "gnu" {
        return false;
    }
    if var("CARGO_CFG_TARGET_FEATURE").split(',').any(|f| f == "crt-static") {
        // The whole build is static already.
        return true;
    }
    let dir = match archives() {
        Ok(dir) => dir,
        Err(why) => {
            println!("cargo:warning={what} is linked dynamically: {why}");
            return false;
        }
    };
    // `-L` as a link argument: after rustc's own search paths, before the system's.
    println!("cargo:rustc-link-arg-bins=-L{}", dir.display());
    println!("cargo:rustc-link-arg-bins=-static-pie");
    if links_with_lld() {
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", order.display());
        // The list names functions of one glibc build; others may lack some of them.
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
    true
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

/// Whether the 64-bit ELF image `elf` has no program interpreter (PT_INTERP): a static
/// executable. None when it is not a 64-bit little-endian ELF image. For the tests of the
/// binaries linked by [`link_bins`].
pub fn is_static(elf: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    let get = |o: usize, n: usize| elf.get(o..o + n);
    if get(0, 4)? != b"\x7fELF" || *elf.get(4)? != 2 || *elf.get(5)? != 1 {
        return None;
    }
    let u16_at = |o: usize| get(o, 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let phoff = u64::from_le_bytes(get(0x20, 8)?.try_into().ok()?) as usize;
    let (size, count) = (u16_at(0x36)?, u16_at(0x38)?);
    for i in 0..count {
        let p_type = u32::from_le_bytes(get(phoff + i * size, 4)?.try_into().ok()?);
        if p_type == PT_INTERP {
            return Some(false);
        }
    }
    Some(true)
}

#[cfg(test)]
mod tests {
    /// This test binary itself is linked dynamically (tests never get `link_bins`).
    #[test]
    fn a_dynamic_test_binary_is_not_static() {
        let me = std::fs::read("/proc/self/exe").expect("read /proc/self/exe");
        assert_eq!(super::is_static(&me), Some(false));
        assert_eq!(super::is_static(b"#!/bin/sh\n"), None);
    }
}
