//! `libi-pmix`: the PMIx companion of a libi agent (see the library's documentation for why
//! it is a process of its own, and `docs/spec/pmix-companion.md` for what it speaks).
//!
//! ```text
//! libi-pmix [--fd N] [--tmpdir DIR] [--host NAME]
//! ```
//!
//! * `--fd N`: the agent's end of the socketpair (default: `LIBI_PMIX_FD`, else 0, stdin);
//! * `--tmpdir DIR`: the server's own directory (its rendezvous files); default a fresh
//!   `libi-pmix.PID.RANDOM` (mode 0700) in `$XDG_RUNTIME_DIR` when that is a private
//!   directory of ours, else in `$TMPDIR`, made and removed by the companion;
//! * `--host NAME`: the node's name as the job knows it (default: the kernel's host name).
//!
//! It exits 0 after `Finalize` or when the agent closes the socket, 1 when it cannot serve
//! (the reason on stderr in one line, prefixed `libi-pmix:`), 2 on a bad command line.
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(not(no_pmix))]
mod ffi;
#[cfg(not(no_pmix))]
mod server;

#[cfg(not(no_pmix))]
use std::os::fd::RawFd;
#[cfg(not(no_pmix))]
use std::path::PathBuf;

#[cfg(not(no_pmix))]
fn usage(why: &str) -> ! {
    eprintln!("libi-pmix: {why}; usage: libi-pmix [--fd N] [--tmpdir DIR] [--host NAME]");
    std::process::exit(2)
}

/// Built where `pkg-config pmix` found no OpenPMIx (see `build.rs`).
#[cfg(no_pmix)]
fn main() {
    eprintln!(
        "libi-pmix: built without OpenPMIx (install libpmix-dev and rebuild): cannot serve PMIx"
    );
    std::process::exit(1)
}

#[cfg(not(no_pmix))]
fn main() {
    let mut opts = server::Opts {
        fd: std::env::var("LIBI_PMIX_FD").ok().and_then(|v| v.parse().ok()).unwrap_or(0),
        tmpdir: None,
        host: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage(&format!("{a} needs a value")));
        match a.as_str() {
            "--fd" => {
                opts.fd = value()
                    .parse::<RawFd>()
                    .ok()
                    .filter(|fd| *fd >= 0)
                    .unwrap_or_else(|| usage("--fd takes a descriptor number"))
            }
            "--tmpdir" => opts.tmpdir = Some(PathBuf::from(value())),
            "--host" => opts.host = Some(value()),
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    if let Err(e) = server::run(opts) {
        eprintln!("libi-pmix: {e}");
        std::process::exit(1);
    }
}
