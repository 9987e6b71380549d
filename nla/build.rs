//! Link `libi-nla` statically (a static PIE), with the functions it runs laid out together
//! (the C library's, `libc-hot.txt`, and its own, `rust-hot.txt`): see the `static-pie` crate
//! for why and how. `LIBI_NLA_DYNAMIC=1` links it dynamically. Both lists are written by
//! `bench/nla-libc-hot/collect.sh`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let dir = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let (libc, own) = (dir.join("libc-hot.txt"), dir.join("rust-hot.txt"));
    static_pie::link_bins("libi-nla", "LIBI_NLA_DYNAMIC", &[&libc, &own]);
}
