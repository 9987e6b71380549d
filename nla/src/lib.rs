//! libi-nla, the Node Launch Agent: one per node. It connects back to its parent, receives its
//! part of the job, forks the local ranks (one socketpair each as `PMI_FD`), serves PMI to
//! them and forwards what it cannot answer up the tree.
//!
//! * [`core`]: the pure node state machine (KVS, fences, exit classification);
//! * [`driver`]: the tokio driver (tree connection, rank processes, stdio, signals, timers);
//! * [`spawn`]: how a rank process is started (environment, PMI_FD, process group);
//! * [`stdio`]: rank output up the tree and stdin down to rank 0, bounded end to end;
//! * [`reaper`]: exact cleanup (subreaper, claimed children, orphan reaping and sweep);
//! * [`singleton`]: serving an MPI process that started `mpiexec -pmi_args` itself.

pub mod core;
pub mod driver;
pub mod pmgr_node;
pub mod reaper;
pub mod singleton;
pub mod spawn;
pub mod stdio;
pub mod tree;

/// Tracing on stderr for our binaries: warnings, or everything with `-v`; `LIBI_LOG` takes
/// a tracing filter instead.
pub fn init_tracing(verbose: bool) {
    let filter = if verbose { "debug" } else { "warn" };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        // Colour only on a terminal: a log in a file or a pipe stays plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LIBI_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter)),
        )
        .init();
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
