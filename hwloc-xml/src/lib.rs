//! The node's hardware topology as an hwloc XML file, for the MPI ranks of a node.
//!
//! MPICH asks its process manager for the PMI key [`PMI_KEY`] (`PMI_hwloc_xmlfile`) during
//! `MPI_Init` on every node that runs two ranks or more. Given a path, each rank loads the
//! topology from that file (about 2 ms here) instead of discovering it through `/sys` and
//! `/proc` (about 10 ms here, far more on a large node, and all ranks of a node at once).
//! Hydra's proxy discovers the topology with its own hwloc and writes a fresh file for every
//! job. The NLA instead keeps the file from one job to the next, per user, in a directory
//! only that user can write, and writes it again only when what it depends on changes:
//!
//! * the machine's boot (`/proc/sys/kernel/random/boot_id`),
//! * the cpus and memory nodes online and those this process may use (a batch system's
//!   cgroup or cpuset: `Cpus_allowed_list`, `Mems_allowed_list`),
//! * the hwloc tool that wrote it (its device, inode, modification time and size: an upgrade
//!   writes the file again).
//!
//! These make the file's name ([`Cache::path`]), so a file is never out of date for the
//! state it is named after; devices hot-plugged without a reboot are the exception (a
//! stale PCI device list, never a wrong cpu set). The XML is written by hwloc's own
//! `lstopo` (`--of xml --whole-io`: every I/O device, as MPICH keeps them), found on `PATH`;
//! without it no file is offered and the ranks discover the topology themselves, as they
//! do under a process manager that does not answer the key.
//!
//! Nothing is offered when the ranks' environment steers hwloc itself (`HWLOC_XMLFILE`,
//! `HWLOC_FSROOT`, `HWLOC_SYNTHETIC`: MPICH's explicit file would override it) or turns the
//! file off (`LIBI_HWLOC_XML=0`).
//!
//! Safety: the directory is `$XDG_RUNTIME_DIR/libi` when that is a private directory of this
//! user, else `$TMPDIR/libi-UID` (`/tmp/libi-UID`); it is used only if it is a real
//! directory (not a link) owned by this user with no access for others (when it is not,
//! another user took the name first, say, the caller gives a fresh private directory of its
//! own instead: [`Cache::open_in`]), and a file only if
//! it is a regular file of this user that others cannot write. A new file is written under
//! a temporary name (`O_EXCL`, mode 0600), checked to be hwloc XML, and renamed into place.
//! At most [`KEEP`] files are kept (the oldest go).
//!
//! Pure but for the file system: the NLA's driver runs the tool and tells its node core the
//! path.
#![forbid(unsafe_code)]

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The PMI key MPICH asks for (PMI-1 `get`, PMI-2 `info-getjobattr`).
pub const PMI_KEY: &str = "PMI_hwloc_xmlfile";

/// hwloc's command-line tools that export XML, in order of preference.
pub const TOOLS: [&str; 3] = ["lstopo-no-graphics", "hwloc-ls", "lstopo"];

/// The tool's arguments: XML with every I/O device (MPICH loads with
/// `HWLOC_TYPE_FILTER_KEEP_ALL` for I/O), to standard output.
pub const TOOL_ARGS: [&str; 4] = ["--of", "xml", "--whole-io", "-"];

/// Environment variables that make hwloc read something other than this machine, or
/// change what it reports: the tool runs without them, and a job that sets the first
/// three for its ranks is not offered a file.
pub const STEERING: [&str; 3] = ["HWLOC_XMLFILE", "HWLOC_FSROOT", "HWLOC_SYNTHETIC"];

/// The switch: `LIBI_HWLOC_XML=0` (or `off`, `no`, `false`) in the ranks' environment.
pub const SWITCH: &str = "LIBI_HWLOC_XML";

/// How many topology files a user's directory keeps.
pub const KEEP: usize = 8;

/// How long the tool may take before it is given up (ranks that asked for the file wait
/// for it meanwhile; lstopo takes about 20 ms here).
pub const TOOL_LIMIT: Duration = Duration::from_secs(5);

/// A temporary file older than this is a leftover of a killed writer.
const STALE_TMP: Duration = Duration::from_secs(60);

/// The most of a file read to check it is hwloc XML.
const HEAD: usize = 4096;

/// Why no file is offered.
#[derive(Debug)]
pub enum Skip {
    /// The ranks' environment turns it off or steers hwloc (the variable and its value).
    Disabled(String),
    /// No hwloc tool on `PATH`.
    NoTool,
    /// No directory that is safe to use (why).
    Dir(String),
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::Disabled(why) => write!(f, "the ranks' environment sets {why}"),
            Skip::NoTool => write!(f, "no hwloc tool ({}) on PATH", TOOLS.join(", ")),
            Skip::Dir(why) => write!(f, "{why}"),
        }
    }
}

/// Whether the ranks' environment (`get` looks a variable up in it) rules the file out.
pub fn disabled(get: impl Fn(&str) -> Option<OsString>) -> Option<Skip> {
    if let Some(v) = get(SWITCH) {
        let off = ["0", "off", "no", "false"];
        if off.iter().any(|o| v.to_string_lossy().trim().eq_ignore_ascii_case(o)) {
            return Some(Skip::Disabled(format!("{SWITCH}={}", v.to_string_lossy())));
        }
    }
    STEERING
        .iter()
        .find_map(|k| get(k).map(|v| Skip::Disabled(format!("{k}={}", v.to_string_lossy()))))
}

/// The first of [`TOOLS`] found in the directories of `path` (a `PATH` value).
pub fn find_tool(path: &OsStr) -> Option<PathBuf> {
    TOOLS.iter().find_map(|t| {
        std::env::split_paths(path)
            .filter(|d| d.is_absolute())
            .map(|d| d.join(t))
            .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0))
    })
}

/// Is `m` (from `lstat`) a directory of user `uid` that nobody else may use?
fn private_dir(m: &fs::Metadata, uid: u32) -> bool {
    m.file_type().is_dir() && m.uid() == uid && m.mode() & 0o077 == 0
}

/// Is `m` (from `lstat`) a file this user may hand to its ranks: a non-empty regular file
/// of user `uid` that others cannot write?
fn own_file(m: &fs::Metadata, uid: u32) -> bool {
    m.file_type().is_file() && m.uid() == uid && m.mode() & 0o022 == 0 && m.len() > 0
}

/// The directory for user `uid`: `$XDG_RUNTIME_DIR/libi` when `xdg` is a private directory
/// of `uid`, else `libi-UID` in `tmp` (`$TMPDIR`, else `/tmp`). Created (mode 0700) if
/// missing; refused unless it is then a private directory of `uid`.
pub fn user_dir(xdg: Option<&OsStr>, tmp: Option<&OsStr>, uid: u32) -> Result<PathBuf, Skip> {
    let runtime = xdg
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .filter(|p| fs::symlink_metadata(p).is_ok_and(|m| private_dir(&m, uid)));
    let dir = match runtime {
        Some(r) => r.join("libi"),
        None => {
            let base = tmp.map(PathBuf::from).filter(|p| p.is_absolute());
            base.unwrap_or_else(|| PathBuf::from("/tmp")).join(format!("libi-{uid}"))
        }
    };
    // The path goes into PMI replies: PMI-1 values end at a space, PMI-2's at a `;`.
    let text = dir.to_string_lossy();
    if !text.bytes().all(|b| b.is_ascii_graphic() && !b"\\=;".contains(&b)) {
        return Err(Skip::Dir(format!(
            "{} has characters a PMI value cannot carry (space, `\\`, `=`, `;`, non-ASCII)",
            dir.display()
        )));
    }
    // Usually there already (one lstat); else created, then examined the same way.
    let mut meta = fs::symlink_metadata(&dir);
    if meta.as_ref().is_err_and(|e| e.kind() == io::ErrorKind::NotFound) {
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Skip::Dir(format!("cannot create {}: {e}", dir.display()))),
        }
        meta = fs::symlink_metadata(&dir);
    }
    match meta {
        Ok(m) if private_dir(&m, uid) => Ok(dir),
        Ok(m) => Err(Skip::Dir(format!(
            "{} is not a private directory of user {uid} (owner {}, mode {:o}{}): not used",
            dir.display(),
            m.uid(),
            m.mode() & 0o7777,
            if m.file_type().is_symlink() { ", a symbolic link" } else { "" }
        ))),
        Err(e) => Err(Skip::Dir(format!("cannot examine {}: {e}", dir.display()))),
    }
}

/// FNV-1a, 64 bits: a file name from the machine's state (stable across builds, unlike
/// std's hasher).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in p.iter().chain(&[0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// What the topology file depends on, read from `/proc` and `/sys` (a missing file reads
/// as empty), and the tool's identity.
fn machine_state(tool: &Path) -> Vec<Vec<u8>> {
    let read = |p: &str| fs::read(p).unwrap_or_default();
    let status = String::from_utf8_lossy(&read("/proc/self/status")).into_owned();
    let allowed: String = status
        .lines()
        .filter(|l| l.starts_with("Cpus_allowed_list:") || l.starts_with("Mems_allowed_list:"))
        .collect::<Vec<_>>()
        .join("\n");
    let tool_id = match fs::metadata(tool) {
        Ok(m) => {
            format!("{} {} {}.{} {}", m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.len())
        }
        Err(_) => tool.display().to_string(),
    };
    vec![
        b"libi-hwloc-xml 1".to_vec(),
        TOOL_ARGS.join(" ").into_bytes(),
        read("/proc/sys/kernel/random/boot_id"),
        read("/sys/devices/system/cpu/online"),
        read("/sys/devices/system/node/online"),
        allowed.into_bytes(),
        tool_id.into_bytes(),
    ]
}

/// This user's topology file for this machine's state: where it is, or would be written.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
    tool: PathBuf,
    uid: u32,
    key: u64,
}

impl Cache {
    /// The cache of this process's user, with the tool found on this process's `PATH`.
    pub fn open() -> Result<Cache, Skip> {
        let tool = find_tool(&std::env::var_os("PATH").unwrap_or_default()).ok_or(Skip::NoTool)?;
        let uid = nix::unistd::geteuid().as_raw();
        let xdg = std::env::var_os("XDG_RUNTIME_DIR");
        let tmp = std::env::var_os("TMPDIR");
        let dir = user_dir(xdg.as_deref(), tmp.as_deref(), uid)?;
        Ok(Cache::in_dir(dir, tool, uid))
    }

    /// A cache in a directory of the caller's that no one else can use (a fresh private
    /// one, when the user's own is not usable: [`user_dir`] says why), with the tool found
    /// on this process's `PATH`.
    pub fn open_in(dir: PathBuf) -> Result<Cache, Skip> {
        let tool = find_tool(&std::env::var_os("PATH").unwrap_or_default()).ok_or(Skip::NoTool)?;
        Ok(Cache::in_dir(dir, tool, nix::unistd::geteuid().as_raw()))
    }

    fn in_dir(dir: PathBuf, tool: PathBuf, uid: u32) -> Cache {
        // (The state names the tool by device and inode: two links to one tool name one
        // file.)
        let state = machine_state(&tool);
        Cache::with(dir, tool, uid, &state)
    }

    /// A cache in `dir` (already checked) with `tool`, named after `state`.
    pub fn with(dir: PathBuf, tool: PathBuf, uid: u32, state: &[Vec<u8>]) -> Cache {
        let parts: Vec<&[u8]> = state.iter().map(Vec::as_slice).collect();
        Cache { dir, tool, uid, key: fnv1a(&parts) }
    }

    /// The hwloc tool that writes the file.
    pub fn tool(&self) -> &Path {
        &self.tool
    }

    /// The directory of the cache.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file for this machine's state.
    pub fn path(&self) -> PathBuf {
        self.dir.join(format!("hwloc-{:016x}.xml", self.key))
    }

    /// The file, if it has been written and may be handed to the ranks.
    pub fn lookup(&self) -> Option<PathBuf> {
        let p = self.path();
        fs::symlink_metadata(&p).ok().filter(|m| own_file(m, self.uid)).map(|_| p)
    }

    /// A new temporary file for the tool's output (mode 0600, never an existing name).
    pub fn temp_file(&self) -> io::Result<(File, PathBuf)> {
        let tmp = self.dir.join(format!(".hwloc-{:016x}-{}.tmp", self.key, std::process::id()));
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(&tmp)?;
        Ok((f, tmp))
    }

    /// Put the tool's output `tmp` in place once it is hwloc XML (else remove it and say
    /// why), then drop the oldest files beyond [`KEEP`] and leftover temporary files.
    pub fn install(&self, tmp: &Path) -> io::Result<PathBuf> {
        if let Err(e) = check_xml(tmp) {
            let _ = fs::remove_file(tmp);
            return Err(e);
        }
        let path = self.path();
        fs::rename(tmp, &path)?;
        prune(&self.dir, KEEP);
        Ok(path)
    }

    /// Remove a temporary file whose writer failed.
    pub fn discard(&self, tmp: &Path) {
        let _ = fs::remove_file(tmp);
    }
}

/// Is the file at `p` hwloc's XML: `<?xml` first, a `<topology` element early on?
pub fn check_xml(p: &Path) -> io::Result<()> {
    let mut head = Vec::with_capacity(HEAD);
    File::open(p)?.take(HEAD as u64).read_to_end(&mut head)?;
    let text = String::from_utf8_lossy(&head);
    if !text.trim_start().starts_with("<?xml") || !text.contains("<topology") {
        let what = if head.is_empty() { "nothing" } else { "no hwloc topology XML" };
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("the tool wrote {what}")));
    }
    Ok(())
}

/// Keep the `keep` newest topology files of `dir`; remove temporary files older than a
/// minute (their writer was killed).
pub fn prune(dir: &Path, keep: usize) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    let now = SystemTime::now();
    let mut files: Vec<(SystemTime, PathBuf)> = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let Ok(m) = e.metadata() else { continue };
        let mtime = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        if name.starts_with("hwloc-") && name.ends_with(".xml") {
            files.push((mtime, e.path()));
        } else if name.starts_with(".hwloc-")
            && name.ends_with(".tmp")
            && now.duration_since(mtime).is_ok_and(|age| age > STALE_TMP)
        {
            let _ = fs::remove_file(e.path());
        }
    }
    if files.len() > keep {
        files.sort_by_key(|f| std::cmp::Reverse(f.0));
        for (_, p) in files.drain(keep..) {
            let _ = fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn uid() -> u32 {
        nix::unistd::geteuid().as_raw()
    }

    /// A fresh directory under the target directory's tmp (removed first).
    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("libi-hwloc-xml-test-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn switch_and_steering_variables_rule_the_file_out() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| OsString::from(v))
        };
        assert!(disabled(env(&[])).is_none());
        assert!(disabled(env(&[("LIBI_HWLOC_XML", "1")])).is_none());
        for off in ["0", "off", "No", "false"] {
            let pairs: &'static [(&str, &str)] = Box::leak(Box::new([("LIBI_HWLOC_XML", off)]));
            assert!(matches!(disabled(env(pairs)), Some(Skip::Disabled(_))), "{off}");
        }
        let s = disabled(env(&[("HWLOC_XMLFILE", "/x.xml")])).unwrap();
        assert_eq!(s.to_string(), "the ranks' environment sets HWLOC_XMLFILE=/x.xml");
        assert!(disabled(env(&[("HWLOC_FSROOT", "/r")])).is_some());
        assert!(disabled(env(&[("HWLOC_SYNTHETIC", "pack:2 pu:2")])).is_some());
    }

    #[test]
    fn the_tool_is_found_by_preference_in_absolute_path_entries() {
        let d = scratch("tools");
        let (a, b) = (d.join("a"), d.join("b"));
        fs::create_dir_all(&a).unwrap();
        fs::create_dir_all(&b).unwrap();
        let exe = |p: &Path| {
            fs::write(p, "#!/bin/sh\n").unwrap();
            fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
        };
        exe(&a.join("lstopo"));
        let path = std::env::join_paths([&a, &b]).unwrap();
        assert_eq!(find_tool(&path), Some(a.join("lstopo")));
        exe(&b.join("lstopo-no-graphics"));
        assert_eq!(find_tool(&path), Some(b.join("lstopo-no-graphics")));
        // Not executable, or in a relative entry: not a tool.
        fs::write(a.join("hwloc-ls"), "").unwrap();
        fs::remove_file(b.join("lstopo-no-graphics")).unwrap();
        assert_eq!(find_tool(&path), Some(a.join("lstopo")));
        assert_eq!(find_tool(OsStr::new("relative/dir")), None);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_directory_is_created_private_and_refused_when_it_is_not() {
        let d = scratch("dirs");
        let me = uid();
        // No XDG_RUNTIME_DIR: libi-UID under TMPDIR, created 0700.
        let got = user_dir(None, Some(d.as_os_str()), me).unwrap();
        assert_eq!(got, d.join(format!("libi-{me}")));
        let m = fs::symlink_metadata(&got).unwrap();
        assert_eq!(m.mode() & 0o777, 0o700);
        // Again: the existing directory is used.
        assert_eq!(user_dir(None, Some(d.as_os_str()), me).unwrap(), got);
        // Opened up to others: refused, not repaired.
        fs::set_permissions(&got, fs::Permissions::from_mode(0o755)).unwrap();
        let e = user_dir(None, Some(d.as_os_str()), me).unwrap_err().to_string();
        assert!(e.contains("is not a private directory") && e.contains("mode 755"), "{e}");
        // A symbolic link planted in its place (to a private directory): refused.
        fs::remove_dir(&got).unwrap();
        let target = d.join("elsewhere");
        fs::DirBuilder::new().mode(0o700).create(&target).unwrap();
        std::os::unix::fs::symlink(&target, &got).unwrap();
        let e = user_dir(None, Some(d.as_os_str()), me).unwrap_err().to_string();
        assert!(e.contains("a symbolic link"), "{e}");
        // Somebody else's directory (another uid asks): refused.
        fs::remove_file(&got).unwrap();
        user_dir(None, Some(d.as_os_str()), me).unwrap();
        let other = me.wrapping_add(1);
        let theirs = d.join(format!("libi-{other}"));
        fs::DirBuilder::new().mode(0o700).create(&theirs).unwrap();
        let e = user_dir(None, Some(d.as_os_str()), other).unwrap_err().to_string();
        assert!(
            e.contains(&theirs.display().to_string()) && e.contains(&format!("owner {me}")),
            "{e}"
        );
        // A TMPDIR a PMI value cannot carry: refused.
        let spaced = d.join("a b");
        fs::create_dir(&spaced).unwrap();
        let e = user_dir(None, Some(spaced.as_os_str()), me).unwrap_err().to_string();
        assert!(e.contains("a PMI value cannot carry"), "{e}");
        // A private XDG_RUNTIME_DIR is preferred; a relative TMPDIR means /tmp.
        let xdg = d.join("run");
        fs::DirBuilder::new().mode(0o700).create(&xdg).unwrap();
        assert_eq!(user_dir(Some(xdg.as_os_str()), None, me).unwrap(), xdg.join("libi"));
        fs::set_permissions(&xdg, fs::Permissions::from_mode(0o755)).unwrap();
        let got = user_dir(Some(xdg.as_os_str()), Some(d.as_os_str()), me).unwrap();
        assert_eq!(got, d.join(format!("libi-{me}")));
        fs::remove_dir_all(&d).unwrap();
    }

    fn cache_in(d: &Path, state: &[&str]) -> Cache {
        let state: Vec<Vec<u8>> = state.iter().map(|s| s.as_bytes().to_vec()).collect();
        Cache::with(d.to_path_buf(), PathBuf::from("/usr/bin/lstopo"), uid(), &state)
    }

    #[test]
    fn the_name_follows_the_machine_state() {
        let d = scratch("names");
        let a = cache_in(&d, &["boot 1", "0-1"]);
        assert_eq!(a.path(), cache_in(&d, &["boot 1", "0-1"]).path());
        assert_ne!(a.path(), cache_in(&d, &["boot 2", "0-1"]).path());
        assert_ne!(a.path(), cache_in(&d, &["boot 1", "0"]).path());
        // Parts are delimited: moving a byte across a boundary changes the name.
        assert_ne!(cache_in(&d, &["ab", "c"]).path(), cache_in(&d, &["a", "bc"]).path());
        let name = a.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("hwloc-") && name.ends_with(".xml") && name.len() == 26, "{name}");
        // This machine's real state names a file too, and the same one twice.
        let real = machine_state(Path::new("/usr/bin/lstopo"));
        assert_eq!(real.len(), 7);
        assert!(!real[2].is_empty(), "boot_id is readable on Linux");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn install_checks_renames_and_lookup_trusts_only_own_private_files() {
        let d = scratch("install");
        let c = cache_in(&d, &["x"]);
        assert!(c.lookup().is_none());
        // Not XML: refused and removed.
        let (mut f, tmp) = c.temp_file().unwrap();
        io::Write::write_all(&mut f, b"lstopo: error\n").unwrap();
        let e = c.install(&tmp).unwrap_err();
        assert!(e.to_string().contains("no hwloc topology XML"), "{e}");
        assert!(!tmp.exists());
        // Empty: refused.
        let (_f, tmp) = c.temp_file().unwrap();
        assert!(c.install(&tmp).unwrap_err().to_string().contains("wrote nothing"));
        // hwloc XML: in place, 0600, found.
        let (mut f, tmp) = c.temp_file().unwrap();
        assert_eq!(fs::metadata(&tmp).unwrap().mode() & 0o777, 0o600);
        let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n<topology version=\"2.0\">\n</topology>\n";
        io::Write::write_all(&mut f, xml.as_bytes()).unwrap();
        assert_eq!(c.install(&tmp).unwrap(), c.path());
        assert_eq!(c.lookup(), Some(c.path()));
        assert_eq!(fs::read_to_string(c.path()).unwrap(), xml);
        // A temporary name never reuses an existing file.
        let (_f, tmp) = c.temp_file().unwrap();
        assert_eq!(c.temp_file().unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        c.discard(&tmp);
        // Writable by others: not handed out.
        fs::set_permissions(c.path(), fs::Permissions::from_mode(0o666)).unwrap();
        assert!(c.lookup().is_none());
        // A symbolic link in its place: not handed out.
        fs::remove_file(c.path()).unwrap();
        let real = d.join("real.xml");
        fs::write(&real, xml).unwrap();
        std::os::unix::fs::symlink(&real, c.path()).unwrap();
        assert!(c.lookup().is_none());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn prune_keeps_the_newest_and_drops_stale_temporaries() {
        let d = scratch("prune");
        let t0 = SystemTime::now() - Duration::from_secs(3600);
        for i in 0..5u64 {
            let p = d.join(format!("hwloc-{i:016x}.xml"));
            fs::write(&p, "x").unwrap();
            File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_modified(t0 + Duration::from_secs(i))
                .unwrap();
        }
        let old_tmp = d.join(".hwloc-0-1.tmp");
        fs::write(&old_tmp, "").unwrap();
        File::options().write(true).open(&old_tmp).unwrap().set_modified(t0).unwrap();
        let new_tmp = d.join(".hwloc-0-2.tmp");
        fs::write(&new_tmp, "").unwrap();
        fs::write(d.join("other"), "").unwrap();
        prune(&d, 3);
        let mut left: Vec<String> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let want = [
            ".hwloc-0-2.tmp",
            "hwloc-0000000000000002.xml",
            "hwloc-0000000000000003.xml",
            "hwloc-0000000000000004.xml",
            "other",
        ];
        assert_eq!(left, want);
        fs::remove_dir_all(&d).unwrap();
    }

    /// With hwloc's tool installed (CI installs it with MPICH), its output passes the check.
    #[test]
    fn the_installed_tool_writes_what_install_accepts() {
        let Some(tool) = find_tool(&std::env::var_os("PATH").unwrap_or_default()) else {
            eprintln!("no hwloc tool on PATH: skipped");
            return;
        };
        let d = scratch("tool");
        let c = Cache::with(d.clone(), tool.clone(), uid(), &machine_state(&tool));
        let (f, tmp) = c.temp_file().unwrap();
        let st = std::process::Command::new(&tool).args(TOOL_ARGS).stdout(f).status().unwrap();
        assert!(st.success());
        assert_eq!(c.install(&tmp).unwrap(), c.path());
        assert!(fs::read_to_string(c.path()).unwrap().contains("type=\"PU\""));
        fs::remove_dir_all(&d).unwrap();
    }
}
