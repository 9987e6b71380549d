//! libi: the job model, hosts, launch trees and the launch model, and the messages that travel
//! over the NLA tree. Pure code shared by `libi-mpiexec`, `libi-nla` and `libi-tree`; the
//! `libi-tree` tool itself and its report fitting (`calibrate`) are the `libi-tree` crate.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod clock;
pub mod hosts;
pub mod job;
pub mod launch;
pub mod msg;
pub mod nameserver;
pub mod preauth;
pub mod report;
pub mod slurm;
pub mod spawn;
pub mod text;
pub mod tree;

/// A hint to the CPU to load the cache line at `p` (nothing where there is no such hint).
/// For code that knows which cold memory it touches next (the simulator's next event).
#[inline(always)]
pub fn prefetch(p: *const u8) {
    // SAFETY: a prefetch reads nothing the program sees and cannot fault, whatever `p` is;
    // SSE (which has it) is part of every x86_64 CPU.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
