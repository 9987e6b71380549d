//! libi-node, the node runtime: what every node of a job's tree runs — each Node Launch
//! Agent (`libi-nla`, one per node: it connects back to its parent, receives its part of the
//! job, forks the local ranks with one socketpair each as `PMI_FD`, serves PMI to them and
//! forwards what it cannot answer up the tree) and the front end, which is the tree's root.
//!
//! The layers, each using only the ones below it:
//!
//! * [`proto`]: the pure state machines, no I/O and no clock (events and the time in,
//!   effects out): the node core, the front end's root core, the child-launch lifecycle,
//!   the KVS, PMGR aggregation, and the effect interpreter that every driver and
//!   `libi-sim` share;
//! * [`proc`]: the processes a node starts and ends (ranks, their binding and GPUs, the
//!   reaper, `--bcast` staging, the hwloc topology file);
//! * [`io`]: the drivers: the agent's event loop, tree connections and listeners, the rank
//!   reactor, the up-link, the PMGR port's peer identification, the singleton;
//! * [`sys`]: small system helpers (limits, errno text, logging, CPU accounting).
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod io;
pub mod proc;
pub mod proto;
pub mod sys;

/// Tracing on stderr for our binaries: warnings, or everything with `-v`; `LIBI_LOG` takes
/// a filter of `level` and `target=level` directives, comma-separated (`debug`,
/// `warn,libi_node::proto::kvs=trace`). A filter that does not parse is reported, and the default
/// used. (`tracing-subscriber`'s `Targets`, not its regex-based `EnvFilter`: no regex engine
/// in every agent.) Lines are written as [`sys::log::prefix`] says: `PROGRAM: LEVEL: message`.
pub fn init_tracing(program: &'static str, verbose: bool) {
    sys::log::set_program(program);
    use tracing::level_filters::LevelFilter;
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let mut bad = None;
    let filter = std::env::var("LIBI_LOG")
        .ok()
        .and_then(|v| {
            v.parse::<Targets>()
                .map_err(|e| bad = Some(format!("LIBI_LOG={v:?} ignored: {e}")))
                .ok()
        })
        .unwrap_or_else(|| {
            let level = if verbose { LevelFilter::DEBUG } else { LevelFilter::WARN };
            Targets::new().with_default(level)
        });
    let fmt = tracing_subscriber::fmt::layer()
        .event_format(sys::log::Prefixed)
        .with_ansi(false)
        .with_writer(|| StderrWriter);
    tracing_subscriber::registry().with(fmt).with(filter).init();
    if let Some(b) = bad {
        tracing::warn!("{b}");
    }
}

/// Keep freed buffers in the heap for reuse: output and tree frames come in pieces of up to
/// a few hundred KiB, and glibc would otherwise map (and the kernel zero) fresh pages for
/// each (what is kept is bounded by the streams' caps).
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called at start, before threads.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
    }
}

/// Where our diagnostics go: stderr, unless the program routes them elsewhere (the front end
/// sends them to its stderr writer, so that a stopped reader of our stderr never blocks its
/// event loop).
static STDERR_SINK: std::sync::OnceLock<StderrSink> = std::sync::OnceLock::new();

type StderrSink = Box<dyn Fn(&[u8]) + Send + Sync>;

/// Route our diagnostics (tracing, launcher stderr) through `sink` from now on.
pub fn set_stderr_sink(sink: impl Fn(&[u8]) + Send + Sync + 'static) {
    let _ = STDERR_SINK.set(Box::new(sink));
}

/// Write diagnostics: through the sink if one is set, else to stderr.
pub fn write_stderr(bytes: &[u8]) {
    match STDERR_SINK.get() {
        Some(sink) => sink(bytes),
        None => {
            let _ = std::io::Write::write_all(&mut std::io::stderr(), bytes);
        }
    }
}

/// `io::Write` for [`write_stderr`] (tracing writes each event with one call).
struct StderrWriter;

impl std::io::Write for StderrWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        write_stderr(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Grow this process's descriptor table to hold `n` descriptors now, while it has a single
/// thread. Growing it later, with other threads sharing it, makes the kernel wait for an RCU
/// grace period (tens of milliseconds) each time it doubles, inside whatever `pipe2`,
/// `socket` or `accept` crossed the size: a node starting 64 ranks crossed it several times
/// (measured: `-n 64 hostname` 54 → 83 ms when no high descriptor happened to be inherited).
pub fn reserve_fd_table(n: usize) {
    use std::os::fd::AsRawFd;
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit on a valid struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return;
    }
    let top = (n as u64).min(lim.rlim_cur.saturating_sub(1)) as i32;
    let Ok(null) = std::fs::File::open("/dev/null") else { return };
    if top <= null.as_raw_fd() {
        return;
    }
    if let Ok(high) =
        nix::fcntl::fcntl(null.as_raw_fd(), nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(top))
    {
        let _ = nix::unistd::close(high);
    }
}

#[cfg(test)]
mod tests {
    /// The unwinder is libgcc_eh, linked statically (build.rs): a panic still unwinds, is
    /// caught, and runs destructors on the way (tokio relies on it for a panicking task).
    #[test]
    fn panics_unwind_with_the_static_unwinder() {
        struct Dropped<'a>(&'a std::cell::Cell<bool>);
        impl Drop for Dropped<'_> {
            fn drop(&mut self) {
                self.0.set(true);
            }
        }
        let dropped = std::cell::Cell::new(false);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _d = Dropped(&dropped);
            std::hint::black_box(None::<u8>).expect("unwind test");
        }));
        assert!(r.is_err());
        assert!(dropped.get());
        let bt = std::backtrace::Backtrace::force_capture();
        assert!(bt.to_string().contains("panics_unwind_with_the_static_unwinder"), "{bt}");
    }
}
