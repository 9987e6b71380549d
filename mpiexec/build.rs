//! Link `libi-mpiexec` statically (a static PIE), as the agent is: see the `static-pie` crate
//! for why and how. It starts every job: without the dynamic loader `-n 1 true` costs
//! ~0.2 ms less CPU and wall time. The agent's list of hot C library functions serves here
//! too (the front end runs the same event loop and socket calls). `LIBI_MPIEXEC_DYNAMIC=1`
//! links it dynamically.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let dir = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let order = dir.join("../nla/libc-hot.txt");
    static_pie::link_bins("libi-mpiexec", "LIBI_MPIEXEC_DYNAMIC", &[&order]);
}
