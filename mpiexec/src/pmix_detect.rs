//! `-pmi auto`: does a program speak PMIx? Answered from its ELF file, before the launch:
//! a program (or a library it needs, a few levels down) that links OpenPMIx's client
//! (`libpmix.so*`) or Open MPI's MPI library (`libmpi.so.40`, Open MPI 3 to 5, which reaches
//! its process manager only through PMIx) gets a PMIx server.
//!
//! Only what the dynamic section says is read (`DT_NEEDED`, `DT_RUNPATH`/`DT_RPATH`), of
//! 64-bit little-endian ELF files; the libraries are looked for where the dynamic loader
//! would: the run path (`$ORIGIN` expanded), `LD_LIBRARY_PATH`, the usual system
//! directories. A script, a program this machine cannot read, or one found nowhere counts
//! as not PMIx (the user says `-pmi pmix` for those: an interpreter such as `python3` that
//! loads Open MPI through `mpi4py` cannot be told from its ELF file).

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Libraries whose presence means the program speaks PMIx.
fn is_pmix_library(name: &str) -> bool {
    name.starts_with("libpmix.so") || name == "libmpi.so.40"
}

/// How many libraries are read at most (the search stops short of a whole dependency graph).
const MAX_FILES: usize = 48;
/// How deep below the program the search goes.
const MAX_DEPTH: usize = 3;
/// Where the dynamic loader looks last (its cache, `/etc/ld.so.cache`, is not read).
const SYSTEM_DIRS: [&str; 6] = [
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// Does program `exe` (a path, or a name looked up in `path`, the `PATH` value) link a PMIx
/// client? `cwd`: where a relative path starts.
pub fn links_pmix(exe: &str, path: Option<&OsStr>, cwd: Option<&Path>) -> bool {
    let Some(file) = resolve(exe, path, cwd) else { return false };
    let ld_path: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let mut seen = HashSet::new();
    let mut level = vec![file];
    for _ in 0..MAX_DEPTH {
        let mut next = Vec::new();
        for f in level {
            if seen.len() >= MAX_FILES || !seen.insert(f.clone()) {
                continue;
            }
            let Some(dynamic) = read_dynamic(&f) else { continue };
            if dynamic.needed.iter().any(|n| is_pmix_library(n)) {
                return true;
            }
            let origin = f.parent().map(Path::to_path_buf).unwrap_or_default();
            let run: Vec<PathBuf> = dynamic
                .runpath
                .iter()
                .flat_map(|r| r.split(':'))
                .filter(|d| !d.is_empty())
                .map(|d| {
                    let o = origin.to_string_lossy();
                    PathBuf::from(d.replace("$ORIGIN", &o).replace("${ORIGIN}", &o))
                })
                .collect();
            for lib in &dynamic.needed {
                let dirs = run.iter().chain(&ld_path).map(PathBuf::as_path);
                let found = dirs
                    .chain(SYSTEM_DIRS.iter().map(Path::new))
                    .map(|d| d.join(lib))
                    .find(|p| p.is_file());
                next.extend(found);
            }
        }
        level = next;
    }
    false
}

/// The program's file: a name with a slash as it is (from `cwd`), else the first match
/// on `path`.
fn resolve(exe: &str, path: Option<&OsStr>, cwd: Option<&Path>) -> Option<PathBuf> {
    if exe.contains('/') {
        let p = Path::new(exe);
        return Some(match cwd {
            Some(c) if p.is_relative() => c.join(p),
            _ => p.to_path_buf(),
        });
    }
    std::env::split_paths(path?).map(|d| d.join(exe)).find(|p| p.is_file())
}

/// What the dynamic section of an ELF file names.
#[derive(Debug, Default, PartialEq)]
struct Dynamic {
    needed: Vec<String>,
    runpath: Vec<String>,
}

fn read_dynamic(file: &Path) -> Option<Dynamic> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(file).ok()?;
    let mut head = [0u8; 64];
    f.read_exact(&mut head).ok()?;
    // 64-bit, little-endian ELF only (the machines libi runs on).
    if &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as u64;
    let u64_at = |b: &[u8], o: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[o..o + 8]);
        u64::from_le_bytes(a)
    };
    let (phoff, phentsize, phnum) = (u64_at(&head, 32), u16_at(&head, 54), u16_at(&head, 56));
    if phentsize < 56 || phnum > 256 {
        return None;
    }
    let mut ph = vec![0u8; (phentsize * phnum) as usize];
    f.seek(SeekFrom::Start(phoff)).ok()?;
    f.read_exact(&mut ph).ok()?;
    let mut loads = Vec::new();
    let mut dyn_seg = None;
    for i in 0..phnum as usize {
        let e = &ph[i * phentsize as usize..];
        let kind = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
        let (offset, vaddr, filesz) = (u64_at(e, 8), u64_at(e, 16), u64_at(e, 32));
        match kind {
            1 => loads.push((vaddr, offset, filesz)),
            2 => dyn_seg = Some((offset, filesz)),
            _ => {}
        }
    }
    let (doff, dsize) = dyn_seg?;
    if dsize > 1 << 20 {
        return None;
    }
    let mut d = vec![0u8; dsize as usize];
    f.seek(SeekFrom::Start(doff)).ok()?;
    f.read_exact(&mut d).ok()?;
    let (mut strtab, mut strsz) = (None, 0u64);
    let mut needed = Vec::new();
    let mut runpath = Vec::new();
    for e in d.chunks_exact(16) {
        let (tag, val) = (u64_at(e, 0), u64_at(e, 8));
        match tag {
            0 => break,
            1 => needed.push(val),
            5 => strtab = Some(val),
            10 => strsz = val,
            15 | 29 => runpath.push(val),
            _ => {}
        }
    }
    // The string table's address, as a file offset (the segment that holds it).
    let strtab = strtab?;
    let (vaddr, offset, _) =
        *loads.iter().find(|(v, _, sz)| strtab >= *v && strtab < v.saturating_add(*sz))?;
    if strsz == 0 || strsz > 16 << 20 {
        return None;
    }
    let mut strs = vec![0u8; strsz as usize];
    f.seek(SeekFrom::Start(strtab - vaddr + offset)).ok()?;
    f.read_exact(&mut strs).ok()?;
    let text = |o: u64| -> Option<String> {
        let rest = strs.get(o as usize..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        Some(String::from_utf8_lossy(&rest[..end]).into_owned())
    };
    Some(Dynamic {
        needed: needed.into_iter().filter_map(text).collect(),
        runpath: runpath.into_iter().filter_map(text).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_c_program_is_not_pmix_and_names_the_c_library() {
        // Any dynamically linked system program: it needs libc and nothing of PMIx.
        let ls = resolve("ls", std::env::var_os("PATH").as_deref(), None).expect("ls");
        let d = read_dynamic(&ls).expect("ls is a dynamic ELF file");
        assert!(d.needed.iter().any(|n| n.starts_with("libc.so")), "{d:?}");
        assert!(!links_pmix("ls", std::env::var_os("PATH").as_deref(), None));
    }

    #[test]
    fn scripts_and_missing_programs_are_not_pmix() {
        let dir = std::env::temp_dir().join(format!("libi-pmix-detect-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let script = dir.join("s.sh");
        std::fs::write(&script, "#!/bin/sh\nexit 0\n").expect("write");
        assert!(!links_pmix(&script.to_string_lossy(), None, None));
        assert!(!links_pmix("no-such-program-libi", Some(dir.as_os_str()), None));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_libraries_that_mean_pmix() {
        assert!(is_pmix_library("libpmix.so.2"));
        assert!(is_pmix_library("libmpi.so.40"));
        assert!(!is_pmix_library("libmpi.so.12"));
    }
}
