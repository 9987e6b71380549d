//! Compiles the variadic `pmgr_abort` (C shim: stable Rust cannot define variadic functions)
//! and exports it from the cdylib: rustc's version script hides symbols of linked C code, so
//! a second version script names it, and `--undefined` pulls the archive member in.

fn main() {
    println!("cargo:rerun-if-changed=src/abort_shim.c");
    println!("cargo:rerun-if-changed=exports.map");
    cc::Build::new().file("src/abort_shim.c").warnings(true).compile("pmgr_abort_shim");
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    println!("cargo:rustc-cdylib-link-arg=-Wl,--undefined=pmgr_abort");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/exports.map");
}
