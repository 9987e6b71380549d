//! libi-nla, the Node Launch Agent: one per node. It connects back to its parent, receives its
//! part of the job, forks the local ranks (one socketpair each as `PMI_FD`), serves PMI to
//! them and forwards what it cannot answer up the tree.
//!
//! * [`core`]: the pure node state machine (KVS, fences, exit classification);
//! * [`driver`]: the tokio driver (tree connection, rank processes, stdio, signals, timers);
//! * [`spawn`]: how a rank process is started (environment, PMI_FD, process group);
//! * [`reaper`]: exact cleanup (subreaper, claimed children, orphan reaping and sweep).

pub mod core;
pub mod driver;
pub mod pmgr_node;
pub mod reaper;
pub mod spawn;
pub mod tree;

/// Tracing on stderr for our binaries: warnings, or everything with `-v`; `LIBI_LOG` takes
/// a tracing filter instead.
pub fn init_tracing(verbose: bool) {
    let filter = if verbose { "debug" } else { "warn" };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LIBI_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter)),
        )
        .init();
}
