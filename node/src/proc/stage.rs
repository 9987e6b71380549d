//! `--bcast` (executable staging, like Slurm's `sbcast`): the executables travel down the
//! tree in the job's setup; each NLA that runs ranks writes them into a fresh directory of
//! its own under `$TMPDIR` (default `/tmp`), `libi-stage-PID-RANDOM`, mode 0700, and its
//! ranks run them from there. The directory is removed when the NLA ends (dropping
//! [`Stage`]); one left by a killed NLA is swept by the next one of the same user
//! ([`crate::proc::scratch`]).

use crate::proc::scratch::Scratch;
use libi::job::JobCommon;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;

/// A node's staging directory and what is in it.
pub struct Stage {
    dir: Scratch,
    exes: Vec<(usize, String)>,
}

impl Stage {
    /// (app, path of its staged executable).
    pub fn exes(&self) -> impl Iterator<Item = (usize, String)> + '_ {
        self.exes.iter().cloned()
    }

    pub fn dir(&self) -> &std::path::Path {
        self.dir.dir()
    }
}

/// Write the job's staged executables (nothing when none are staged or no rank runs here).
pub fn write(job: &JobCommon, local_ranks: usize) -> io::Result<Option<Stage>> {
    if job.staged.is_empty() || local_ranks == 0 {
        return Ok(None);
    }
    let dir = Scratch::new("stage")?;
    let mut stage = Stage { dir, exes: Vec::new() };
    for (i, f) in job.staged.iter().enumerate() {
        // The name is ours to choose: only its last component, never a path.
        let name = std::path::Path::new(&f.name)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| format!("exe{i}"));
        let path = stage.dir().join(format!("{i}-{name}"));
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
