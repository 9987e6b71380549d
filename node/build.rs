//! Link the unwinder statically (libgcc_eh) on Linux/glibc: std would otherwise load
//! libgcc_s.so at the start of every process (a library to map and relocate, and its
//! `__cpu_indicator_init` CPUID probing, which traps to the hypervisor in a VM). The
//! archive comes before std's `-lgcc_s` on the link line, so with `--as-needed` libgcc_s
//! is no longer a dependency of libi-nla or libi-mpiexec. Not bundled into the rlib: the
//! C compiler driver finds it at the final link.
fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-lib=static:-bundle=gcc_eh");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
