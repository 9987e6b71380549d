//! Directories of one agent's own under `$TMPDIR` (default `/tmp`): `libi-KIND-PID-RANDOM`,
//! created fresh with mode 0700 (never a name somebody else prepared), and removed when the
//! agent ends (dropping [`Scratch`]). An agent killed before it could remove its own leaves
//! it behind: the next agent of the same user that makes one of the same kind sweeps it,
//! once no process of that user has the pid in its name.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// A private directory of this agent, removed on drop.
#[derive(Debug)]
pub struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    /// A fresh directory `libi-KIND-PID-RANDOM` under `$TMPDIR`; stale ones of the same
    /// kind are swept first.
    pub fn new(kind: &str) -> io::Result<Scratch> {
        let base = std::env::var_os("TMPDIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| "/tmp".into());
        sweep(&base, kind, nix::unistd::geteuid().as_raw());
        let mut tries = 0;
        loop {
            let d = base.join(format!(
                "libi-{kind}-{}-{:08x}",
                std::process::id(),
                rand::RngCore::next_u32(&mut rand::rngs::OsRng)
            ));
            match std::fs::DirBuilder::new().mode(0o700).create(&d) {
                Ok(()) => return Ok(Scratch { dir: d }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 8 => tries += 1,
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot create {}: {e}", d.display()),
                    ))
                }
            }
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Remove the directories `libi-KIND-PID-*` in `base` that are real directories of user
/// `uid` and whose PID is no process of that user (a live one, even if not an agent, keeps
/// its directory: it is swept later).
fn sweep(base: &Path, kind: &str, uid: u32) {
    let Ok(entries) = std::fs::read_dir(base) else { return };
    let prefix = format!("libi-{kind}-");
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        // lstat: a link is never followed, another user's directory never touched.
        let ours = e.metadata().is_ok_and(|m| m.file_type().is_dir() && m.uid() == uid);
        if ours && !process_of(pid, uid) {
            tracing::debug!(dir = %e.path().display(), "removing a dead agent's directory");
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Whether a process `pid` of user `uid` exists.
fn process_of(pid: u32, uid: u32) -> bool {
    std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dead agent's directory is swept, a live process's is kept, and a link or a file
    /// with the name is left alone; a new directory is private and goes on drop.
    #[test]
    fn stale_directories_of_dead_agents_are_swept() {
        let base = std::env::temp_dir().join(format!("libi-scratch-test-{}", std::process::id()));
        std::fs::create_dir_all(&base).expect("base");
        let uid = nix::unistd::geteuid().as_raw();
        // A pid that is no process: above pid_max.
        let dead = base.join("libi-test-4194305-0000abcd");
        let live = base.join(format!("libi-test-{}-0000abcd", std::process::id()));
        let target = base.join("elsewhere");
        for d in [&dead, &live, &target] {
            std::fs::create_dir_all(d).expect("dir");
        }
        std::fs::write(dead.join("exe"), b"x").expect("file");
        let link = base.join("libi-test-4194306-0000abcd");
        std::os::unix::fs::symlink(&target, &link).expect("link");
        sweep(&base, "test", uid);
        assert!(!dead.exists(), "a dead agent's directory stays");
        assert!(live.exists(), "a live process's directory went");
        assert!(link.symlink_metadata().is_ok() && target.exists(), "a link was followed");
        std::fs::remove_dir_all(&base).expect("clean up");
    }
}
