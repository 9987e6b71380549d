//! `--bcast` (executable staging, like Slurm's `sbcast`): the executables travel down the
//! tree in the job's setup; each NLA that runs ranks writes them into a fresh directory of
//! its own under `$TMPDIR` (default `/tmp`), `libi-stage-PID-RANDOM`, mode 0700, and its
//! ranks run them from there. The directory is removed when the NLA ends (dropping
//! [`Stage`]).

use libi::job::JobCommon;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;

/// A node's staging directory and what is in it.
pub struct Stage {
    dir: PathBuf,
    exes: Vec<(usize, String)>,
}

impl Stage {
    /// (app, path of its staged executable).
    pub fn exes(&self) -> impl Iterator<Item = (usize, String)> + '_ {
        self.exes.iter().cloned()
    }

    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Write the job's staged executables (nothing when none are staged or no rank runs here).
pub fn write(job: &JobCommon, local_ranks: usize) -> io::Result<Option<Stage>> {
    if job.staged.is_empty() || local_ranks == 0 {
        return Ok(None);
    }
    let base = std::env::var_os("TMPDIR").map(PathBuf::from).unwrap_or_else(|| "/tmp".into());
    // A fresh directory of our own: never one that someone else prepared.
    let mut tries = 0;
    let dir = loop {
        let d = base.join(format!(
            "libi-stage-{}-{:08x}",
            std::process::id(),
            rand::RngCore::next_u32(&mut rand::rngs::OsRng)
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => break d,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 8 => tries += 1,
            Err(e) => {
                return Err(io::Error::new(e.kind(), format!("cannot create {}: {e}", d.display())))
            }
        }
    };
    let mut stage = Stage { dir, exes: Vec::new() };
    for (i, f) in job.staged.iter().enumerate() {
        // The name is ours to choose: only its last component, never a path.
        let name = std::path::Path::new(&f.name)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| format!("exe{i}"));
        let path = stage.dir.join(format!("{i}-{name}"));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o700 & f.mode | 0o500)
            .open(&path)
            .and_then(|mut file| file.write_all(&f.data));
        if let Err(e) = written {
            return Err(io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())));
        }
        let p = path.to_string_lossy().into_owned();
        stage.exes.extend(f.apps.iter().map(|&a| (a as usize, p.clone())));
    }
    Ok(Some(stage))
}
