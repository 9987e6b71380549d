//! Link `libi-mpiexec` statically (a static PIE), as the agent is: see the `static-pie` crate
//! for why and how. It starts every job: without the dynamic loader `-n 1 true` costs
//! ~0.2 ms less CPU and wall time. The functions it runs are laid out together, as the
//! agent's are: the C library's (`libc-hot.txt`) and its own (`rust-hot.txt`), both written
//! by `bench/nla-libc-hot/collect.sh`; without them its code is spread over 3 MB of pages
//! for a job's few hundred kilobytes. `LIBI_MPIEXEC_DYNAMIC=1` links it dynamically.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let dir = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let (libc, own) = (dir.join("libc-hot.txt"), dir.join("rust-hot.txt"));
    static_pie::link_bins("libi-mpiexec", "LIBI_MPIEXEC_DYNAMIC", &[&libc, &own]);
}
