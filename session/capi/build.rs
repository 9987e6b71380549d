//! Write `libi.pc` (pkg-config) next to `liblibi.so` in the target directory, pointing at
//! this checkout's header: `PKG_CONFIG_PATH=target/<profile> pkg-config --cflags --libs libi`.
use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
    // OUT_DIR is target/<profile>/build/<pkg>-<hash>/out.
    let Some(profile_dir) = out.ancestors().nth(3) else { return };
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let include = manifest.join("../include");
    let include = include.canonicalize().unwrap_or(include);
    let pc = format!(
        "libdir={}\nincludedir={}\n\nName: libi\nDescription: The LIBI session API: launch and bootstrap tool daemons over the libi agent tree\nVersion: {}\nLibs: -L${{libdir}} -Wl,-rpath,${{libdir}} -llibi\nCflags: -I${{includedir}}\n",
        profile_dir.display(),
        include.display(),
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default()
    );
    let _ = std::fs::write(profile_dir.join("libi.pc"), pc);
    println!("cargo:rerun-if-changed=build.rs");
}
