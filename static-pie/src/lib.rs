//! Link a package's binaries statically (static PIEs) where the C library allows it, with
//! the functions they run (the C library's, and the program's own) laid out together.
//! Called from the build scripts of `libi-nla` and `libi-mpiexec` ([`link_bins`]).
//!
//! Why: one agent runs on every node of a job, and the front end starts every job. Linked
//! against the shared C library a process maps `libc.so` and `ld.so` (1.4 MB resident, most
//! of it never called) and pays the dynamic loader at every start. Linked statically it
//! carries only the C library functions it references (~860 kB, most of them behind
//! `getaddrinfo`: name services, the resolver, `dlopen`), starts without a loader, and needs
//! no shared library on the compute nodes. The kernel maps code in aligned 64 kB windows
//! around each page a process touches (fault around), so the ~120 kB of those functions that
//! run (`nla/libc-hot.txt`) are placed first, where they fill two windows instead of touching
//! most of the 860 kB. The same holds for the program's own code: of the agent's 1.4 MB of
//! Rust code, ~500 kB runs, spread over nearly every window; the functions that run
//! (`nla/rust-hot.txt`) are gathered before the rest by a linker script. Relative relocations
//! are packed (DT_RELR): the start code reads them once, and unpacked (89 kB of RELA entries)
//! they stayed resident. The front end has its own two lists (`mpiexec/libc-hot.txt`,
//! `mpiexec/rust-hot.txt`): laid out so, it keeps ~2 MB of its code resident instead of 3.
//! `bench/results.md` (Targets of issue 20) has the agent's peak RSS; the sizes measured at
//! each step are in its history (`git log -p -- bench/results.md`).
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
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// From a build script: link the package's binaries as static PIEs, unless the environment
/// variable `dynamic` is set (and not `0`) or the C library lacks what it takes (then a
/// build warning naming `what`). `order`: symbol ordering files (the functions that run:
/// the C library's, the program's own), laid out in that order where rustc links with its
/// own lld. The package's crates see the outcome at compile time as `LIBI_LINKED` (`static`
/// or `dynamic`).
pub fn link_bins(what: &str, dynamic: &str, order: &[&Path]) {
    let linked = if static_pie(what, dynamic, order) { "static" } else { "dynamic" };
    println!("cargo:rustc-env=LIBI_LINKED={linked}");
}

/// [`link_bins`]; true when the binaries are linked statically.
fn static_pie(what: &str, dynamic: &str, order: &[&Path]) -> bool {
    for file in order {
        println!("cargo:rerun-if-changed={}", file.display());
    }
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
        // Relative relocations packed (DT_RELR, which glibc's static-PIE start code applies
        // since 2.36): 1 kB of them instead of 89 kB of RELA entries, which the start code
        // reads once and which would stay resident. An older C library would not apply them.
        if glibc_has_relr() {
            println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
        }
        // The lists: C library functions by name, for lld's ordering file (one file: the
        // lists joined); our own (Rust) functions as section-name patterns, without the hash
        // the compiler puts in every symbol (it changes with the build's features), for a
        // linker script that gathers them in an output section before `.text`, where the hot
        // C functions begin. A list missing costs resident memory, never correctness.
        let texts: Vec<String> = order
            .iter()
            .map(|file| {
                std::fs::read_to_string(file).unwrap_or_else(|e| {
                    println!("cargo:warning={what}: {}: {e}", file.display());
                    String::new()
                })
            })
            .collect();
        let (names, script) = layout(&texts);
        let Ok(out) = std::env::var("OUT_DIR") else { return true };
        let (order, ld) =
            (PathBuf::from(&out).join("symbol-order.txt"), PathBuf::from(&out).join("hot.ld"));
        for (path, text) in [(&order, names), (&ld, script)] {
            if let Err(e) = std::fs::write(path, text) {
                println!("cargo:warning={what}: {}: {e}", path.display());
                return true;
            }
        }
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", order.display());
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", ld.display());
        println!("cargo:rustc-env=LIBI_HOT_SECTION={HOT_SECTION}");
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

/// The output section that gathers the program's own functions that run; the package's
/// crates see its name at compile time as `LIBI_HOT_SECTION` when the layout is applied.
pub const HOT_SECTION: &str = ".text.hot";

/// The ordering lists (`#` comments, one entry per line) as lld takes them: C library
/// functions by name (the ordering file), and the program's own, Rust-mangled, section-name
/// patterns (`_ZN...`, `_R...`) as a linker script that gathers them, in that order, in
/// [`HOT_SECTION`] just before `.text`. A function LLVM finds cold lives in `.text.unlikely.`.
fn layout(texts: &[String]) -> (String, String) {
    let (mut names, mut inputs) = (String::new(), String::new());
    for line in texts.iter().flat_map(|t| t.lines()).map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with("_ZN") || line.starts_with("_R") {
            inputs.push_str(&format!("    *(.text.{line} .text.unlikely.{line})\n"));
        } else {
            names.push_str(line);
            names.push('\n');
        }
    }
    let script =
        format!("SECTIONS {{\n  {HOT_SECTION} : {{\n{inputs}  }}\n}} INSERT BEFORE .text;\n");
    (names, script)
}

/// The size of the section `name` in the 64-bit little-endian ELF image `elf`; None if it
/// has no such section (or is no such image). For the tests of the binaries linked by
/// [`link_bins`].
pub fn section_size(elf: &[u8], name: &str) -> Option<u64> {
    let get = |o: usize, n: usize| elf.get(o..o.checked_add(n)?);
    let u16_at = |o: usize| get(o, 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u32_at = |o: usize| get(o, 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
    let u64_at = |o: usize| get(o, 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    if get(0, 4)? != b"\x7fELF" || *elf.get(4)? != 2 || *elf.get(5)? != 1 {
        return None;
    }
    let shoff = usize::try_from(u64_at(0x28)?).ok()?;
    let (size, count, strndx) = (u16_at(0x3a)?, u16_at(0x3c)?, u16_at(0x3e)?);
    let header = |i: usize| shoff.checked_add(i.checked_mul(size)?);
    let strtab = usize::try_from(u64_at(header(strndx)? + 0x18)?).ok()?;
    (0..count).find_map(|i| {
        let h = header(i)?;
        let at = strtab.checked_add(u32_at(h)? as usize)?;
        let rest = elf.get(at..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        (&rest[..end] == name.as_bytes()).then(|| u64_at(h + 0x20)).flatten()
    })
}

/// An ELF image whose [`HOT_SECTION`] is missing or smaller than a 64 kB fault-around
/// window: its size, if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{HOT_SECTION}: {size:?} bytes")]
pub struct NotHot {
    pub size: Option<u64>,
}

/// The size of [`HOT_SECTION`] in the ELF image `elf`, when the functions a program runs are
/// laid out there: at least one 64 kB fault-around window of them. Otherwise an error saying
/// what is there (a list out of step with the code matches nothing, and the linker leaves the
/// section out). For the tests of the programs linked with the layout.
pub fn hot_section(elf: &[u8]) -> Result<u64, NotHot> {
    match section_size(elf, HOT_SECTION) {
        Some(n) if n >= 64 << 10 => Ok(n),
        size => Err(NotHot { size }),
    }
}

/// Whether the C library linked against applies packed relative relocations (DT_RELR):
/// glibc 2.36 and later, whose `libc.so.6` defines the version `GLIBC_ABI_DT_RELR`.
fn glibc_has_relr() -> bool {
    let cc = std::env::var("CC").ok().filter(|c| !c.is_empty()).unwrap_or_else(|| "cc".into());
    let Ok(out) = Command::new(&cc).arg("-print-file-name=libc.so.6").output() else {
        return false;
    };
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let needle = b"GLIBC_ABI_DT_RELR";
    std::fs::read(path).is_ok_and(|lib| lib.windows(needle.len()).any(|w| w == needle))
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
    /// C names go to the ordering file; Rust patterns become the hot section's inputs, in
    /// their order, cold-marked copies included.
    #[test]
    fn layout_splits_c_names_from_rust_patterns() {
        let c = "# comment\nepoll_wait\n\n__memcpy_avx_unaligned_erms\n".to_string();
        let rust = "_ZN9libi_node6driver3run17h*E\n_RNvCs*_4main\n".to_string();
        let (names, script) = super::layout(&[c, rust]);
        assert_eq!(names, "epoll_wait\n__memcpy_avx_unaligned_erms\n");
        let run = script.find(
            "*(.text._ZN9libi_node6driver3run17h*E .text.unlikely._ZN9libi_node6driver3run17h*E)",
        );
        let main = script.find("*(.text._RNvCs*_4main .text.unlikely._RNvCs*_4main)");
        assert!(run.is_some_and(|r| main.is_some_and(|m| r < m)), "{script}");
        assert!(script.starts_with("SECTIONS {\n  .text.hot : {\n"), "{script}");
        assert!(script.ends_with("}\n} INSERT BEFORE .text;\n"), "{script}");
    }

    /// This test binary's own sections are found by name, and a missing one is not.
    #[test]
    fn section_size_reads_the_section_headers() {
        let me = std::fs::read("/proc/self/exe").expect("read /proc/self/exe");
        assert!(super::section_size(&me, ".text").is_some_and(|n| n > 0));
        assert_eq!(super::section_size(&me, ".no.such.section"), None);
        assert_eq!(super::section_size(b"#!/bin/sh\n", ".text"), None);
    }

    #[test]
    fn hot_section_missing_is_an_error() {
        // This test binary is not linked with the layout.
        let me = std::fs::read("/proc/self/exe").expect("read /proc/self/exe");
        let e = super::hot_section(&me).expect_err("no hot section in a test binary").to_string();
        assert!(e.contains(super::HOT_SECTION) && e.contains("None"), "{e}");
    }

    /// This test binary itself is linked dynamically (tests never get `link_bins`).
    #[test]
    fn a_dynamic_test_binary_is_not_static() {
        let me = std::fs::read("/proc/self/exe").expect("read /proc/self/exe");
        assert_eq!(super::is_static(&me), Some(false));
        assert_eq!(super::is_static(b"#!/bin/sh\n"), None);
    }
}
