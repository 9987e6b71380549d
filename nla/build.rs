//! Link `libi-nla` statically (a static PIE), with the C library functions it runs laid out
//! first: see the `static-pie` crate for why and how. `LIBI_NLA_DYNAMIC=1` links it
//! dynamically. `libc-hot.txt` is written by `bench/nla-libc-hot/collect.sh`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let dir = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    static_pie::link_bins("libi-nla", "LIBI_NLA_DYNAMIC", &dir.join("libc-hot.txt"));
}
